//! The output side of a thread boundary: routes records to the consumer
//! replicas' queues, batches them, publishes watermarks and end of stream.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::queue::{Backoff, Tx};
use super::{replica_of, Out, Rec};

/// Key hash of a record (key-by routing).
pub type KeyFn<T> = Arc<dyn Fn(&T) -> u64 + Send + Sync>;
/// Destinations of a record among `n` replicas, appended to the vector.
pub type MultiFn<T> = Arc<dyn Fn(&Rec<T>, usize, &mut Vec<usize>) + Send + Sync>;

/// Destinations of a record among `n` consumer replicas.
#[doc(hidden)]
pub enum Route<T> {
    /// One-to-one when parallelisms match, else round-robin by batch.
    Forward,
    /// The replica that owns the key hash.
    Key(KeyFn<T>),
    /// Any set of replicas (Parallel Windows: the owners of the record's windows).
    Multi(MultiFn<T>),
}

impl<T> Clone for Route<T> {
    fn clone(&self) -> Self {
        match self {
            Route::Forward => Route::Forward,
            Route::Key(f) => Route::Key(Arc::clone(f)),
            Route::Multi(f) => Route::Multi(Arc::clone(f)),
        }
    }
}

impl<T> Route<T> {
    pub fn is_forward(&self) -> bool {
        matches!(self, Route::Forward)
    }
}

/// Records between two watermark publications (when the operator before
/// advances its watermark more often). Bounds how stale a watermark is.
const WM_EVERY: usize = 1024;

pub(crate) struct Emitter<T> {
    txs: Vec<Tx<T>>,
    route: Route<T>,
    batch: usize,
    bufs: Vec<Vec<Rec<T>>>,
    rr: usize,
    rr_left: usize,
    wm: u64,
    published_wm: u64,
    since_wm: usize,
    wm_calls: u32,
    dests: Vec<usize>,
}

impl<T: Clone + Send> Emitter<T> {
    pub fn new(txs: Vec<Tx<T>>, route: Route<T>, batch: usize) -> Self {
        let batch = batch.max(1);
        let n = txs.len();
        Self {
            bufs: (0..n)
                .map(|_| Vec::with_capacity(if batch > 1 { batch } else { 0 }))
                .collect(),
            txs,
            route,
            batch,
            rr: 0,
            rr_left: batch,
            wm: 0,
            published_wm: 0,
            since_wm: 0,
            wm_calls: 0,
            dests: Vec::new(),
        }
    }

    #[inline]
    fn send_one(&mut self, d: usize, mut r: Rec<T>) {
        let tx = &mut self.txs[d];
        let mut b = Backoff::default();
        loop {
            match tx.ring.push(r) {
                Ok(()) => break,
                Err(rtrb::PushError::Full(v)) => {
                    if tx.ring.is_abandoned() {
                        // The consumer's thread died (its panic is reported by run()).
                        return;
                    }
                    r = v;
                    tx.meta.wake();
                    b.snooze(None);
                }
            }
        }
        tx.meta.wake();
    }

    fn flush(&mut self, d: usize) {
        let tx = &mut self.txs[d];
        let buf = &mut self.bufs[d];
        let mut b = Backoff::default();
        while !buf.is_empty() {
            let n = tx.ring.slots().min(buf.len());
            if n == 0 {
                if tx.ring.is_abandoned() {
                    buf.clear();
                    return;
                }
                tx.meta.wake();
                b.snooze(None);
                continue;
            }
            if let Ok(chunk) = tx.ring.write_chunk_uninit(n) {
                chunk.fill_from_iter(buf.drain(..n));
            }
            b.reset();
        }
        tx.meta.wake();
    }

    #[inline]
    fn put(&mut self, d: usize, r: Rec<T>) {
        if self.batch == 1 {
            self.send_one(d, r);
        } else {
            self.bufs[d].push(r);
            if self.bufs[d].len() >= self.batch {
                self.flush(d);
            }
        }
    }

    fn publish(&mut self) {
        for d in 0..self.txs.len() {
            if !self.bufs[d].is_empty() {
                self.flush(d);
            }
        }
        if self.wm > self.published_wm {
            for tx in &self.txs {
                tx.meta.wm.store(self.wm, Ordering::Release);
                tx.meta.wake();
            }
            self.published_wm = self.wm;
        }
        self.since_wm = 0;
        self.wm_calls = 0;
    }
}

impl<T: Clone + Send> Out<T> for Emitter<T> {
    #[inline]
    fn push(&mut self, r: Rec<T>) {
        self.since_wm += 1;
        let n = self.txs.len();
        match &self.route {
            Route::Forward => {
                if n == 1 {
                    self.put(0, r);
                } else {
                    let d = self.rr;
                    self.put(d, r);
                    self.rr_left -= 1;
                    if self.rr_left == 0 {
                        self.rr_left = self.batch;
                        self.rr = (self.rr + 1) % n;
                    }
                }
            }
            Route::Key(f) => {
                let d = if n == 1 { 0 } else { replica_of(f(&r.val), n) };
                self.put(d, r);
            }
            Route::Multi(f) => {
                let mut dests = std::mem::take(&mut self.dests);
                dests.clear();
                f(&r, n, &mut dests);
                if let Some((&last, rest)) = dests.split_last() {
                    for &d in rest {
                        self.put(d, r.clone());
                    }
                    self.put(last, r);
                }
                self.dests = dests;
            }
        }
    }

    #[inline]
    fn watermark(&mut self, wm: u64) {
        if wm > self.wm {
            self.wm = wm;
            self.wm_calls += 1;
            // Publish after enough records (amortized), or after a few
            // advances with few records (a selective operator before us must
            // not hold the watermark back).
            if self.since_wm >= WM_EVERY.max(self.batch * self.txs.len()) || self.wm_calls >= 16 {
                self.publish();
            }
        }
    }

    fn idle(&mut self) {
        self.publish();
    }

    fn eos(&mut self) {
        self.publish();
        for tx in &self.txs {
            tx.meta.eos.store(true, Ordering::Release);
            tx.meta.wake();
        }
    }
}
