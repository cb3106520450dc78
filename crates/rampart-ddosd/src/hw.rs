//! The hardware tier on a thread of its own.
//!
//! A real card's rule update costs ~2 ms (the EMULATED NIC sleeps the
//! same), so a batch of 64 is over 100 ms: done on the daemon's loop it
//! would delay the next detection. The worker owns the tier (BPF handles
//! are not `Send`: it opens the tier itself), applies each batch (removals
//! first, then installs, 8 rules at a time), and publishes the installed
//! rules with their counters after every chunk and every 50 ms when idle.
//! The loop reads counters from that snapshot and plans only when the
//! worker is idle. Zero leak is unaffected: the XDP blacklist holds every
//! blocked source whatever the worker is doing (see [`crate::daemon`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart_ddos::Prefix;

use crate::alerts::{self, Alerts};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::tier::{Counts, Tier, TierInfo};

#[derive(Debug, Default)]
struct Shared {
    info: Option<TierInfo>,
    rules: Vec<(Prefix, Counts)>,
    pending: usize,
    error: Option<String>,
}

struct Job {
    remove: Vec<Prefix>,
    add: Vec<Prefix>,
}

/// The hardware tier, run by a worker thread.
pub struct HwWorker {
    shared: Arc<Mutex<Shared>>,
    tx: Option<Sender<Job>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for HwWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HwWorker")
    }
}

fn refresh(t: &dyn Tier, sh: &Mutex<Shared>) {
    match t.rules() {
        Ok(r) => {
            if let Ok(mut s) = sh.lock() {
                s.rules = r;
            }
        }
        Err(e) => {
            if let Ok(mut s) = sh.lock() {
                s.error = Some(e.to_string());
            }
        }
    }
}

fn run(
    mut t: Box<dyn Tier>,
    rx: &Receiver<Job>,
    sh: &Mutex<Shared>,
    stop: &AtomicBool,
    metrics: &Metrics,
    alerts: &Alerts,
) {
    let name = t.info().name;
    while !stop.load(Ordering::Relaxed) {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(job) => {
                for chunk in job.remove.chunks(8) {
                    match t.remove(chunk) {
                        Ok(n) => metrics
                            .rule_updates
                            .with_label_values(&[name, "remove"])
                            .inc_by(n as u64),
                        Err(e) => tracing::warn!("{name}: {e}"),
                    }
                    for p in chunk {
                        alerts.emit(alerts::hw_move(false, p, name));
                    }
                    refresh(t.as_ref(), sh);
                }
                for chunk in job.add.chunks(8) {
                    match t.install(chunk) {
                        Ok(n) => metrics
                            .rule_updates
                            .with_label_values(&[name, "add"])
                            .inc_by(n as u64),
                        Err(e) => tracing::warn!("{name}: {e}"),
                    }
                    refresh(t.as_ref(), sh);
                    for p in chunk {
                        alerts.emit(alerts::hw_move(true, p, name));
                    }
                }
                if let Ok(mut s) = sh.lock() {
                    s.pending = s.pending.saturating_sub(1);
                }
            }
            Err(RecvTimeoutError::Timeout) => refresh(t.as_ref(), sh),
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
}

impl HwWorker {
    /// Open the tier with `open` on a new thread; returns once it is open (or failed).
    ///
    /// # Errors
    /// `open`'s error.
    pub fn spawn(
        open: impl FnOnce() -> Result<Box<dyn Tier>> + Send + 'static,
        metrics: Metrics,
        alerts: Alerts,
    ) -> Result<Self> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (sh, st) = (shared.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("rampart-ddosd-hw".into())
            .spawn(move || {
                let t = match open() {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                if let Ok(mut s) = sh.lock() {
                    s.info = Some(t.info());
                }
                refresh(t.as_ref(), &sh);
                let _ = ready_tx.send(Ok(()));
                run(t, &rx, &sh, &st, &metrics, &alerts);
            })
            .map_err(|e| Error::io("starting the hardware tier thread", e))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                shared,
                tx: Some(tx),
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(Error::Config(
                "the hardware tier thread died while starting".into(),
            )),
        }
    }

    /// What the tier is.
    pub fn info(&self) -> TierInfo {
        self.shared
            .lock()
            .ok()
            .and_then(|s| s.info.clone())
            .expect("set before spawn returns")
    }

    /// Installed rules with counters (refreshed at most 50 ms ago).
    pub fn rules(&self) -> Vec<(Prefix, Counts)> {
        self.shared
            .lock()
            .map(|s| s.rules.clone())
            .unwrap_or_default()
    }

    /// Batches queued or running.
    pub fn busy(&self) -> bool {
        self.shared.lock().map(|s| s.pending > 0).unwrap_or(true)
    }

    /// Queue a batch: removals, then installs.
    pub fn submit(&self, remove: Vec<Prefix>, add: Vec<Prefix>) {
        if remove.is_empty() && add.is_empty() {
            return;
        }
        if let Ok(mut s) = self.shared.lock() {
            s.pending += 1;
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(Job { remove, add });
        }
    }

    /// Wait until every queued batch is applied (for stop and tests).
    pub fn drain(&self) {
        let t0 = std::time::Instant::now();
        while self.busy() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for HwWorker {
    fn drop(&mut self) {
        self.drain();
        self.stop.store(true, Ordering::Relaxed);
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
