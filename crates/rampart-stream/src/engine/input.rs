//! The input side of a thread boundary: a replica thread reads its input
//! edges and drives its (possibly fused) chain of operator replicas.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::queue::{Backoff, Rx};
use super::{ExecMode, Out, Rec};

/// Records read from one edge per round (fairness between edges).
const READ_MAX: usize = 4096;
/// Reorder buffer bound of the deterministic merge.
const REORDER_CAP: usize = 1 << 16;

struct Ordered<T>(Rec<T>);

impl<T> PartialEq for Ordered<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.0.ts, self.0.seq) == (o.0.ts, o.0.seq)
    }
}
impl<T> Eq for Ordered<T> {}
impl<T> PartialOrd for Ordered<T> {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Ordered<T> {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        // Reversed: BinaryHeap is a max-heap, we pop the smallest (ts, seq).
        (o.0.ts, o.0.seq).cmp(&(self.0.ts, self.0.seq))
    }
}

/// Run one replica thread until all its inputs have ended.
pub(crate) fn run<T: Send>(
    mut ins: Vec<Rx<T>>,
    mut op: Box<dyn Out<T>>,
    mode: ExecMode,
    sleeping: Arc<AtomicBool>,
) {
    let me = std::thread::current();
    for rx in &ins {
        let _ = rx.meta.consumer.set(me.clone());
    }
    let n = ins.len();
    let ordered = mode == ExecMode::Deterministic && n > 1;
    let mut wms = vec![0u64; n];
    // When every input has ended, event time has reached the largest
    // final watermark among them (nothing at all follows).
    let mut final_wm = 0u64;
    let mut done = vec![false; n];
    let mut left = n;
    let mut cur_wm = 0u64;
    let mut heap: BinaryHeap<Ordered<T>> = BinaryHeap::new();
    let mut backoff = Backoff::default();
    let mut idle_flushed = false;
    let mut buf: Vec<Rec<T>> = Vec::with_capacity(READ_MAX);
    loop {
        let mut got = 0usize;
        let min_wm = if ordered {
            wms.iter()
                .zip(&done)
                .filter(|(_, d)| !**d)
                .map(|(w, _)| *w)
                .min()
                .unwrap_or(u64::MAX)
        } else {
            0
        };
        for j in 0..n {
            if done[j] {
                continue;
            }
            let rx = &mut ins[j];
            // Progress first, then data (see queue.rs for why).
            // A producer that is gone without EOS panicked; run() reports it.
            let eos = rx.meta.eos.load(Ordering::Acquire) || rx.ring.is_abandoned();
            let wm = rx.meta.wm.load(Ordering::Acquire);
            if ordered && heap.len() >= REORDER_CAP && wms[j] > min_wm {
                // This input is ahead and the buffer is full: leave its
                // records in its queue (backpressure) until the others catch up.
                continue;
            }
            let waiting = rx.ring.slots();
            rx.meta.depth.store(waiting as u64, Ordering::Relaxed);
            let k = waiting.min(READ_MAX);
            if k > 0 {
                if let Ok(chunk) = rx.ring.read_chunk(k) {
                    if ordered {
                        heap.extend(chunk.into_iter().map(Ordered));
                    } else {
                        buf.extend(chunk);
                        op.push_batch(&mut buf);
                    }
                }
                got += k;
            }
            if eos && rx.ring.is_empty() {
                final_wm = final_wm.max(wm.max(wms[j]));
                done[j] = true;
                left -= 1;
                wms[j] = u64::MAX;
            } else if k < READ_MAX {
                // Everything published before `wm` has been read.
                wms[j] = wms[j].max(wm);
            }
        }
        let m = wms.iter().copied().min().unwrap_or(u64::MAX);
        if ordered {
            while heap.peek().is_some_and(|r| r.0.ts < m) {
                if let Some(Ordered(r)) = heap.pop() {
                    op.push(r);
                }
            }
        }
        if left == 0 {
            // The final watermark first (windows that are complete fire as
            // such), then whatever is left, then the end.
            {
                while heap.peek().is_some_and(|r| r.0.ts < final_wm) {
                    if let Some(Ordered(r)) = heap.pop() {
                        op.push(r);
                    }
                }
                if final_wm > cur_wm {
                    op.watermark(final_wm);
                }
            }
            while let Some(Ordered(r)) = heap.pop() {
                op.push(r);
            }
            op.eos();
            return;
        }
        if m > cur_wm {
            cur_wm = m;
            op.watermark(m);
        }
        if got == 0 {
            if !idle_flushed {
                op.idle();
                idle_flushed = true;
            }
            backoff.snooze(Some(&sleeping));
        } else {
            idle_flushed = false;
            backoff.reset();
        }
    }
}
