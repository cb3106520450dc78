//! The owner thread: one thread owns a daemon's state; everything else
//! sends it work and waits for a typed answer.
//!
//! libbpf objects and skeletons are not meant to be shared between
//! threads, and the HTTP server runs on a tokio runtime. So the state
//! (`S`, which need not be `Send`) is built *on* the owner thread, and a
//! request is a closure `FnOnce(&mut S) -> R` run there between the
//! daemon's periodic steps. A handler calls a domain method through it —
//! `owner.run(move |d| d.command(c)).await` — and gets the domain's own
//! result and error types back: no HTTP in the domain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// State driven by an owner thread.
pub trait Owned: 'static {
    /// How often [`Owned::tick`] runs (`None`: never). Read once, at start.
    fn interval(&self) -> Option<Duration> {
        None
    }
    /// The daemon's periodic step. Requests run between steps.
    fn tick(&mut self) {}
    /// The last call on the owner thread, once it is told to stop.
    fn finish(&mut self) {}
}

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// The owner thread has stopped (or died): nothing can be run on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the daemon's owner thread has stopped")]
pub struct Stopped;

impl crate::ToApiError for Stopped {
    fn to_api_error(&self) -> crate::ApiError {
        crate::ApiError::new(crate::ErrorKind::Unavailable, self.to_string())
    }
}

/// Why an owner thread did not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError<E> {
    /// The state's constructor failed (on the owner thread).
    #[error(transparent)]
    Init(E),
    /// The thread could not be created (the OS error in the message only).
    #[error("starting the owner thread: {0}")]
    Thread(std::io::Error),
    /// The thread died while building the state (a panic).
    #[error("the owner thread died while starting")]
    Died,
}

/// Sends work to an owner thread; cheap to clone, usable from any thread.
pub struct OwnerHandle<S> {
    tx: mpsc::Sender<Job<S>>,
}

impl<S> Clone for OwnerHandle<S> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
        }
    }
}

impl<S> std::fmt::Debug for OwnerHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerHandle")
    }
}

impl<S: 'static> OwnerHandle<S> {
    /// A handle to no thread: every request fails with [`Stopped`] (for
    /// tests of what surrounds a daemon).
    pub fn disconnected() -> Self {
        let (tx, _) = mpsc::channel();
        Self { tx }
    }

    /// Run `f` on the owner thread and wait for its result (blocking; not
    /// from async code, see [`OwnerHandle::run`]).
    ///
    /// # Errors
    /// [`Stopped`].
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, Stopped> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.tx
            .send(Box::new(move |s: &mut S| {
                let _ = tx.send(f(s));
            }))
            .map_err(|_| Stopped)?;
        rx.recv().map_err(|_| Stopped)
    }

    /// As [`OwnerHandle::call`], from async code (the task waits, the
    /// runtime thread does not).
    ///
    /// # Errors
    /// [`Stopped`].
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, Stopped> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Box::new(move |s: &mut S| {
                let _ = tx.send(f(s));
            }))
            .map_err(|_| Stopped)?;
        rx.await.map_err(|_| Stopped)
    }
}

/// A running owner thread. Dropping it stops the thread (after the work
/// already queued) and waits for it.
pub struct Owner<S> {
    handle: OwnerHandle<S>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<S> std::fmt::Debug for Owner<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl<S: Owned> Owner<S> {
    /// Start thread `name`, build the state with `init` on it, and return
    /// once it is built (or failed to be).
    ///
    /// # Errors
    /// [`SpawnError`]: `init`'s error, or the thread could not run.
    pub fn spawn<E: Send + 'static>(
        name: &str,
        init: impl FnOnce() -> Result<S, E> + Send + 'static,
    ) -> Result<Self, SpawnError<E>> {
        let (tx, rx) = mpsc::channel::<Job<S>>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), E>>();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut s = match init() {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                serve(&mut s, &rx, &st);
                s.finish();
            })
            .map_err(SpawnError::Thread)?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                handle: OwnerHandle { tx },
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(SpawnError::Init(e))
            }
            Err(_) => {
                let _ = thread.join();
                Err(SpawnError::Died)
            }
        }
    }
}

impl<S: 'static> Owner<S> {
    /// A handle for callers.
    pub fn handle(&self) -> OwnerHandle<S> {
        self.handle.clone()
    }

    /// Stop the thread: queued work runs, then [`Owned::finish`]; waits for it.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    /// The stop flag (a signal handler may set it; the thread then finishes).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    fn stop_inner(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake a thread blocked waiting for work.
        let _ = self.handle.tx.send(Box::new(|_: &mut S| {}));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<S> Drop for Owner<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.tx.send(Box::new(|_: &mut S| {}));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The loop: run requests as they come, and `tick` on a fixed schedule
/// (a late step does not shift the ones after it).
fn serve<S: Owned>(s: &mut S, rx: &mpsc::Receiver<Job<S>>, stop: &AtomicBool) {
    let interval = s.interval();
    let mut next = interval.map(|i| Instant::now() + i);
    loop {
        // Work already queued runs before the loop ends.
        let stopping = stop.load(Ordering::Relaxed);
        if let (Some(i), Some(t)) = (interval, next) {
            let now = Instant::now();
            if now >= t && !stopping {
                s.tick();
                let mut n = t + i;
                if n < Instant::now() {
                    n = Instant::now() + i;
                }
                next = Some(n);
                continue;
            }
        }
        let job = if stopping {
            match rx.try_recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        } else {
            match next {
                Some(t) => match rx.recv_timeout(t.saturating_duration_since(Instant::now())) {
                    Ok(j) => j,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                },
                None => match rx.recv() {
                    Ok(j) => j,
                    Err(_) => return,
                },
            }
        };
        job(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// Not `Send` (like a libbpf skeleton): lives on the owner thread only.
    struct Counter {
        n: Rc<std::cell::Cell<u64>>,
        ticks: u64,
        finished: Arc<AtomicBool>,
        every: Option<Duration>,
    }

    impl Owned for Counter {
        fn interval(&self) -> Option<Duration> {
            self.every
        }
        fn tick(&mut self) {
            self.ticks += 1;
        }
        fn finish(&mut self) {
            self.finished.store(true, Ordering::Relaxed);
        }
    }

    #[derive(Debug, PartialEq, Eq, thiserror::Error)]
    #[error("too big: {0}")]
    struct TooBig(u64);

    impl Counter {
        fn add(&mut self, k: u64) -> Result<u64, TooBig> {
            if k > 10 {
                return Err(TooBig(k));
            }
            self.n.set(self.n.get() + k);
            Ok(self.n.get())
        }
    }

    fn spawn(every: Option<Duration>) -> (Owner<Counter>, Arc<AtomicBool>) {
        let finished = Arc::new(AtomicBool::new(false));
        let f = finished.clone();
        let o = Owner::spawn("test-owner", move || {
            Ok::<_, String>(Counter {
                n: Rc::default(),
                ticks: 0,
                finished: f,
                every,
            })
        })
        .unwrap();
        (o, finished)
    }

    #[test]
    fn requests_get_typed_domain_answers() {
        let (o, finished) = spawn(None);
        let h = o.handle();
        assert_eq!(h.call(|c| c.add(2)).unwrap(), Ok(2));
        assert_eq!(h.call(|c| c.add(3)).unwrap(), Ok(5));
        assert_eq!(h.call(|c| c.add(11)).unwrap(), Err(TooBig(11)));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(h.run(|c| c.add(1))).unwrap(), Ok(6));
        o.stop();
        assert!(finished.load(Ordering::Relaxed), "finish ran");
        assert_eq!(h.call(|c| c.add(1)), Err(Stopped));
        assert_eq!(
            OwnerHandle::<Counter>::disconnected().call(|c| c.ticks),
            Err(Stopped)
        );
        assert_eq!(rt.block_on(h.run(|c| c.add(1))), Err(Stopped));
    }

    #[test]
    fn ticks_run_between_requests() {
        let (o, _) = spawn(Some(Duration::from_millis(5)));
        let h = o.handle();
        let t0 = Instant::now();
        while h.call(|c| c.ticks).unwrap() < 3 {
            assert!(t0.elapsed() < Duration::from_secs(20), "no ticks");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(o);
        assert_eq!(h.call(|c| c.ticks), Err(Stopped));
    }

    #[test]
    fn a_failing_init_is_the_callers_error() {
        let e = Owner::<Counter>::spawn("test-owner", || Err("no interface")).unwrap_err();
        assert!(matches!(e, SpawnError::Init("no interface")));
    }
}
