//! Edges of the graph: bounded lock-free SPSC queues (`rtrb`) carrying
//! records, plus a per-edge side channel for progress — the producer's
//! watermark and end of stream — published after the data it covers.
//!
//! Ordering argument: the producer commits data (release store of the
//! ring's tail) *before* it stores the watermark or EOS (release); the
//! consumer loads the watermark/EOS (acquire) *before* it reads the ring,
//! so everything the watermark covers is visible in that read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use super::Rec;

/// Progress of one edge, shared by its producer and consumer.
#[derive(Debug)]
pub(crate) struct EdgeMeta {
    /// All records still to come on this edge have `ts >= wm`.
    pub wm: AtomicU64,
    /// The producer is done; nothing follows what is in the ring.
    pub eos: AtomicBool,
    /// The consuming thread, set when it starts (for wake-ups).
    pub consumer: OnceLock<Thread>,
    /// Set by the consumer while it is parked (shared by all its inputs).
    pub sleeping: Arc<AtomicBool>,
    /// Records in the ring when the consumer last looked (a gauge for metrics).
    pub depth: AtomicU64,
}

impl EdgeMeta {
    #[inline]
    pub fn wake(&self) {
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(t) = self.consumer.get() {
                t.unpark();
            }
        }
    }
}

/// Producer end of an edge.
pub(crate) struct Tx<T> {
    pub ring: rtrb::Producer<Rec<T>>,
    pub meta: Arc<EdgeMeta>,
}

/// Consumer end of an edge.
pub(crate) struct Rx<T> {
    pub ring: rtrb::Consumer<Rec<T>>,
    pub meta: Arc<EdgeMeta>,
}

/// A bounded edge of `capacity` records whose consumer parks on `sleeping`.
pub(crate) fn edge<T>(capacity: usize, sleeping: Arc<AtomicBool>) -> (Tx<T>, Rx<T>) {
    let (p, c) = rtrb::RingBuffer::new(capacity);
    let meta = Arc::new(EdgeMeta {
        wm: AtomicU64::new(0),
        eos: AtomicBool::new(false),
        consumer: OnceLock::new(),
        sleeping,
        depth: AtomicU64::new(0),
    });
    (
        Tx {
            ring: p,
            meta: Arc::clone(&meta),
        },
        Rx { ring: c, meta },
    )
}

/// Spin, then yield, then park briefly: waiting costs little CPU on a
/// machine with fewer cores than threads, and a producer's `wake` (or the
/// timeout, for producers waiting on a full ring) ends the wait.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    n: u32,
}

impl Backoff {
    const SPIN: u32 = 32;
    const YIELD: u32 = 48;

    #[inline]
    pub fn reset(&mut self) {
        self.n = 0;
    }

    /// One step of waiting; `sleeping` is raised around a park so producers wake us.
    #[inline]
    pub fn snooze(&mut self, sleeping: Option<&AtomicBool>) {
        if self.n < Self::SPIN {
            for _ in 0..(1 << (self.n / 8).min(4)) {
                std::hint::spin_loop();
            }
        } else if self.n < Self::YIELD {
            std::thread::yield_now();
        } else {
            let park = if self.n < Self::YIELD + 16 {
                Duration::from_micros(50)
            } else {
                Duration::from_micros(500)
            };
            if let Some(s) = sleeping {
                s.store(true, Ordering::SeqCst);
                std::thread::park_timeout(park);
                s.store(false, Ordering::Relaxed);
            } else {
                std::thread::park_timeout(park);
            }
        }
        self.n = self.n.saturating_add(1);
    }
}
