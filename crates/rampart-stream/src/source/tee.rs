//! One source feeding several apps: [`tee`] splits a [`PacketSource`]
//! into `n` [`TeeSource`]s, each of which gets every record and every
//! watermark the source emits, in the same order. The source runs on the
//! thread that calls [`TeeDriver::run`]; each app's graph reads its
//! branch from a bounded channel, so the slowest app paces the source
//! (as a single app would: the tap's ring buffer absorbs the difference).
//!
//! `rampart run` uses it to run several apps (flowmeter and portscan) on
//! one interface's tap: one XDP program, a ring buffer per CPU, one reader.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Applied, PacketSource, SourceStats};
use crate::engine::{run_source, Out, Rec, SourceCtx};
use crate::part::FlowPart;
use crate::tuple::StreamTuple;

/// Batches in flight per branch before the source waits for that app.
const DEPTH: usize = 64;

/// What the source emitted, in order.
enum Msg<T> {
    /// Records (event time, value).
    Recs(Vec<(u64, T)>),
    /// Nothing older than this will follow.
    Watermark(u64),
}

/// One branch's receiving end, tuples or parts (as the source delivers).
#[derive(Clone)]
enum Rx {
    Tuples(Arc<Mutex<Receiver<Msg<StreamTuple>>>>),
    Parts(Arc<Mutex<Receiver<Msg<FlowPart>>>>),
}

/// The sending ends, one per branch still reading.
enum Tx {
    Tuples(Vec<SyncSender<Msg<StreamTuple>>>),
    Parts(Vec<SyncSender<Msg<FlowPart>>>),
}

/// Split `src` into `n` branches; run the returned driver on a thread of
/// its own, and each branch under an app. `src` must have one replica
/// (the tap, a file replayed by one replica).
///
/// # Errors
/// [`crate::Error::Invalid`]: `n` is 0 or `src` has several replicas.
pub fn tee<S: PacketSource>(src: S, n: usize) -> crate::Result<(TeeDriver<S>, Vec<TeeSource>)> {
    if n == 0 || src.parallelism() != 1 {
        return Err(crate::Error::Invalid(format!(
            "tee: {} branches of a source with {} replicas: need ≥ 1 branch and 1 replica",
            n,
            src.parallelism()
        )));
    }
    let parts = src.delivers_parts();
    let (tx, rxs): (Tx, Vec<Rx>) = if parts {
        let (t, r): (Vec<_>, Vec<_>) = (0..n).map(|_| sync_channel(DEPTH)).unzip();
        (
            Tx::Parts(t),
            r.into_iter()
                .map(|r| Rx::Parts(Arc::new(Mutex::new(r))))
                .collect(),
        )
    } else {
        let (t, r): (Vec<_>, Vec<_>) = (0..n).map(|_| sync_channel(DEPTH)).unzip();
        (
            Tx::Tuples(t),
            r.into_iter()
                .map(|r| Rx::Tuples(Arc::new(Mutex::new(r))))
                .collect(),
        )
    };
    let branches = rxs
        .into_iter()
        .map(|rx| TeeSource {
            name: format!("{}-tee", src.name()),
            stats: src.stats(),
            applied: src.applied(),
            parts,
            epoch: src.part_epoch(),
            rx,
        })
        .collect();
    Ok((
        TeeDriver {
            src,
            tx,
            cancel: Arc::default(),
        },
        branches,
    ))
}

/// Runs the source and copies what it emits to every branch.
pub struct TeeDriver<S> {
    src: S,
    tx: Tx,
    cancel: Arc<AtomicBool>,
}

impl<S: PacketSource> TeeDriver<S> {
    /// Set to stop the source; the branches then end too (their apps
    /// flush their windows as at the end of any input).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// Run the source until its input ends or it is cancelled, then end
    /// every branch.
    ///
    /// # Errors
    /// The source's error.
    pub fn run(self) -> crate::Result<()> {
        let Self {
            mut src,
            tx,
            cancel,
        } = self;
        let (r, _) = match tx {
            Tx::Tuples(senders) => {
                let mut out = Fan::new(senders);
                let mut f = |ctx: &mut SourceCtx<'_, StreamTuple>| src.run(ctx);
                run_source(&mut f, &mut out, 1, 0, 1, &cancel, false, 0)
            }
            Tx::Parts(senders) => {
                let mut out = Fan::new(senders);
                let mut f = |ctx: &mut SourceCtx<'_, FlowPart>| src.run_parts(ctx);
                run_source(&mut f, &mut out, 1, 0, 1, &cancel, false, 0)
            }
        };
        r.map_err(crate::Error::Invalid)
    }
}

/// The driver's output: records gathered into batches, each batch and
/// watermark sent to every branch. A branch whose app has gone (its
/// receiver dropped) is left out from then on.
struct Fan<T> {
    senders: Vec<SyncSender<Msg<T>>>,
    batch: Vec<(u64, T)>,
}

/// Records per message.
const BATCH: usize = 256;

impl<T: Clone + Send> Fan<T> {
    fn new(senders: Vec<SyncSender<Msg<T>>>) -> Self {
        Self {
            senders,
            batch: Vec::with_capacity(BATCH),
        }
    }

    fn send(&mut self, m: impl Fn() -> Msg<T>) {
        self.senders.retain(|s| s.send(m()).is_ok());
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let b = std::mem::take(&mut self.batch);
        // The last branch takes the batch itself, the others a copy.
        if let Some((last, rest)) = self.senders.split_last() {
            let mut gone = vec![false; self.senders.len()];
            for (i, s) in rest.iter().enumerate() {
                gone[i] = s.send(Msg::Recs(b.clone())).is_err();
            }
            gone[rest.len()] = last.send(Msg::Recs(b)).is_err();
            let mut i = 0;
            self.senders.retain(|_| {
                i += 1;
                !gone[i - 1]
            });
        }
        self.batch = Vec::with_capacity(BATCH);
    }
}

impl<T: Clone + Send> Out<T> for Fan<T> {
    fn push(&mut self, r: Rec<T>) {
        self.batch.push((r.ts, r.val));
        if self.batch.len() >= BATCH {
            self.flush();
        }
    }
    fn watermark(&mut self, wm: u64) {
        self.flush();
        self.send(|| Msg::Watermark(wm));
    }
    fn idle(&mut self) {
        self.flush();
    }
    fn eos(&mut self) {
        self.flush();
        // Dropping the senders ends the branches.
        self.senders.clear();
    }
}

/// One branch of a [`tee`]: what the source emitted, as a source of its
/// own (same name with `-tee`, same counters, same offload).
#[derive(Clone)]
pub struct TeeSource {
    name: String,
    stats: Arc<SourceStats>,
    applied: Applied,
    parts: bool,
    epoch: Option<Duration>,
    rx: Rx,
}

/// How long a branch waits for the driver before checking for a cancel.
const POLL: Duration = Duration::from_millis(50);

fn relay<T>(
    rx: &Mutex<Receiver<Msg<T>>>,
    ctx: &mut SourceCtx<'_, T>,
) -> std::result::Result<(), String> {
    let rx = rx.lock().map_err(|_| "tee branch lock poisoned")?;
    while !ctx.is_cancelled() {
        match rx.recv_timeout(POLL) {
            Ok(Msg::Recs(b)) => {
                for (ts, v) in b {
                    ctx.emit(ts, v);
                }
            }
            Ok(Msg::Watermark(wm)) => ctx.progress(wm),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    Ok(())
}

impl PacketSource for TeeSource {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn parallelism(&self) -> usize {
        1
    }
    fn stats(&self) -> Arc<SourceStats> {
        Arc::clone(&self.stats)
    }
    fn applied(&self) -> Applied {
        self.applied.clone()
    }
    fn delivers_parts(&self) -> bool {
        self.parts
    }
    fn part_epoch(&self) -> Option<Duration> {
        self.epoch
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String> {
        match &self.rx {
            Rx::Tuples(rx) => relay(rx, ctx),
            Rx::Parts(_) => Err(format!(
                "{} delivers parts: read them with run_parts",
                self.name
            )),
        }
    }
    fn run_parts(&mut self, ctx: &mut SourceCtx<'_, FlowPart>) -> std::result::Result<(), String> {
        match &self.rx {
            Rx::Parts(rx) => relay(rx, ctx),
            Rx::Tuples(_) => Err(format!("{} delivers tuples: read them with run", self.name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::flowmeter::{self, FlowmeterConfig};
    use crate::source::synthetic::{SyntheticConfig, SyntheticSource};
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;

    fn flows_of<S: PacketSource>(src: S) -> u64 {
        let n = Arc::new(AtomicU64::new(0));
        let c = Arc::clone(&n);
        flowmeter::build(src, &FlowmeterConfig::default(), move |r| {
            if r.is_some() {
                c.fetch_add(1, Ordering::Relaxed);
            }
        })
        .unwrap()
        .run()
        .unwrap();
        n.load(Ordering::Relaxed)
    }

    fn synthetic() -> SyntheticSource {
        SyntheticSource::new(SyntheticConfig {
            flows: 300,
            tuples: 20_000,
            replicas: 1,
            seed: 7,
        })
        .unwrap()
    }

    #[test]
    fn every_branch_sees_what_the_source_alone_gives_one_app() {
        let alone = flows_of(synthetic());
        assert!(alone > 0);
        let (driver, branches) = tee(synthetic(), 3).unwrap();
        let d = std::thread::spawn(move || driver.run());
        let got: Vec<u64> = branches
            .into_iter()
            .map(|b| std::thread::spawn(move || flows_of(b)))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        d.join().unwrap().unwrap();
        assert_eq!(got, vec![alone; 3]);
    }

    #[test]
    fn a_branch_that_is_gone_does_not_stop_the_others() {
        let alone = flows_of(synthetic());
        let (driver, mut branches) = tee(synthetic(), 2).unwrap();
        drop(branches.pop());
        let d = std::thread::spawn(move || driver.run());
        let b = branches.pop().unwrap();
        assert_eq!(flows_of(b), alone);
        d.join().unwrap().unwrap();
    }

    #[test]
    fn no_branch_or_several_replicas_is_refused() {
        assert!(tee(synthetic(), 0).is_err());
        let two = SyntheticSource::new(SyntheticConfig {
            flows: 10,
            tuples: 100,
            replicas: 2,
            seed: 1,
        })
        .unwrap();
        let e = tee(two, 2).err().unwrap().to_string();
        assert!(e.contains("replica"), "{e}");
    }
}
