//! Stateless operators (Source, Map, Filter, FlatMap, Sink): builders and
//! replicas.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::emit::Route;
use super::{key_hash, Counters, Error, Out, Rec, Result, TimePolicy};

/// Settings every operator has.
pub(crate) struct Settings<T> {
    pub name: String,
    pub parallelism: usize,
    pub batch: usize,
    pub key: Option<super::emit::KeyFn<T>>,
}

impl<T> Settings<T> {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            parallelism: 1,
            batch: 1,
            key: None,
        }
    }
    pub fn check(&self) -> Result<()> {
        if self.parallelism == 0 || self.parallelism > 1024 {
            return Err(Error::InvalidSetting {
                op: self.name.clone(),
                what: format!(
                    "parallelism {} out of range: use 1..=1024",
                    self.parallelism
                ),
            });
        }
        if self.batch == 0 || self.batch > 65_536 {
            return Err(Error::InvalidSetting {
                op: self.name.clone(),
                what: format!(
                    "output batch {} out of range: use 1 (no batching)..=65536",
                    self.batch
                ),
            });
        }
        Ok(())
    }
    pub fn route(&self) -> Route<T> {
        match &self.key {
            Some(k) => Route::Key(Arc::clone(k)),
            None => Route::Forward,
        }
    }
}

/// What [`super::Pipe::add`] needs from an operator (implemented by the
/// operator builders of this crate; not meant to be implemented outside).
#[doc(hidden)]
pub trait Operator<T>: Send + 'static {
    /// Output tuple type.
    type Out: Clone + Send + 'static;
    #[doc(hidden)]
    fn settings(&self) -> (&str, usize, usize);
    #[doc(hidden)]
    fn route(&self) -> Route<T>;
    #[doc(hidden)]
    fn check(&self) -> Result<()>;
    #[doc(hidden)]
    fn replica(
        &mut self,
        idx: usize,
        next: Box<dyn Out<Self::Out>>,
        c: Arc<Counters>,
    ) -> Box<dyn Out<T>>;
}

macro_rules! common_builders {
    () => {
        /// Number of replicas (threads, unless chained). Default 1.
        #[must_use]
        pub fn with_parallelism(mut self, n: usize) -> Self {
            self.s.parallelism = n;
            self
        }
        /// Publish output records in batches of `n` per queue operation
        /// (1 = no batching, the default). Partial batches are published
        /// when the input idles, with watermarks, and at the end.
        #[must_use]
        pub fn with_output_batch(mut self, n: usize) -> Self {
            self.s.batch = n;
            self
        }
    };
}

macro_rules! key_by_builder {
    () => {
        /// Route input records by key: equal keys reach the same replica.
        #[must_use]
        pub fn with_key_by<K: Hash>(
            mut self,
            kf: impl Fn(&T) -> K + Send + Sync + 'static,
        ) -> Self {
            self.s.key = Some(Arc::new(move |t: &T| key_hash(&kf(t))));
            self
        }
    };
}

// ---------------------------------------------------------------- Source

/// What a source function gets: emit records, publish progress, see
/// cancellation.
pub struct SourceCtx<'a, T> {
    out: &'a mut dyn Out<T>,
    replica: usize,
    parallelism: usize,
    cancel: &'a AtomicBool,
    ingress: bool,
    max_delay: u64,
    max_ts: u64,
    last_ingress: u64,
    emitted: u64,
    since_wm: u32,
    batch: Vec<Rec<T>>,
    batch_size: usize,
}

const SOURCE_WM_EVERY: u32 = 256;

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl<T> SourceCtx<'_, T> {
    /// This replica's index.
    pub fn replica(&self) -> usize {
        self.replica
    }
    /// Number of replicas of the source.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }
    /// Stop requested (Ctrl-C, or the graph is being torn down).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
    /// Records emitted so far by this replica.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// Emit `val` with event time `ts` (ns) and a sequence number local to
    /// this replica (reproducible for a given parallelism only; use
    /// [`Self::emit_seq`] with a global index for full determinism).
    #[inline]
    pub fn emit(&mut self, ts: u64, val: T) {
        let seq = self.emitted * self.parallelism as u64 + self.replica as u64;
        self.emit_seq(ts, seq, val);
    }

    /// Emit `val` with event time `ts` and global sequence number `seq`
    /// (unique among all replicas, e.g. the record's index in the input).
    #[inline]
    pub fn emit_seq(&mut self, ts: u64, seq: u64, val: T) {
        let ts = if self.ingress {
            let n = now_ns().max(self.last_ingress);
            self.last_ingress = n;
            n
        } else {
            ts
        };
        self.emitted += 1;
        let r = Rec {
            ts,
            seq: seq << 16,
            val,
        };
        // With output batching, records go down a fused chain (or into the
        // edge) `batch` at a time; without, one by one.
        if self.batch_size <= 1 {
            self.out.push(r);
        } else {
            self.batch.push(r);
            if self.batch.len() >= self.batch_size {
                self.out.push_batch(&mut self.batch);
            }
        }
        if ts > self.max_ts {
            self.max_ts = ts;
        }
        self.since_wm += 1;
        if self.since_wm >= SOURCE_WM_EVERY {
            self.since_wm = 0;
            self.flush();
            self.out
                .watermark(self.max_ts.saturating_sub(self.max_delay));
        }
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() {
            self.out.push_batch(&mut self.batch);
        }
    }

    /// Declare that nothing older than `ts` will follow (an idle live
    /// source calls this with the current time so windows keep firing),
    /// and publish partial batches.
    pub fn progress(&mut self, ts: u64) {
        let ts = if self.ingress {
            now_ns().max(self.last_ingress)
        } else {
            ts
        };
        if ts > self.max_ts {
            self.max_ts = ts;
        }
        self.flush();
        self.out
            .watermark(self.max_ts.saturating_sub(self.max_delay));
        self.out.idle();
    }
}

/// The first operator: a function that emits records until its input ends.
/// Each replica runs its own clone of the function (`ctx.replica()` tells
/// which part of the input is its own).
pub struct Source<T, F> {
    pub(crate) s: Settings<T>,
    pub(crate) f: F,
    pub(crate) max_delay: u64,
    pub(crate) time: Option<TimePolicy>,
}

impl<T, F> Source<T, F>
where
    T: Clone + Send + 'static,
    F: FnMut(&mut SourceCtx<'_, T>) -> std::result::Result<(), String> + Clone + Send + 'static,
{
    /// A source named `name` running `f`; `f` returns when its input ends,
    /// or an error message.
    pub fn new(name: &str, f: F) -> Self {
        Self {
            s: Settings::new(name),
            f,
            max_delay: 0,
            time: None,
        }
    }
    common_builders!();
    /// Records may arrive up to `ns` late relative to the newest one seen
    /// (watermark = newest − `ns`). Default 0: the source is ordered.
    #[must_use]
    pub fn with_max_delay(mut self, ns: u64) -> Self {
        self.max_delay = ns;
        self
    }
    /// Override the graph's time policy for this source.
    #[must_use]
    pub fn with_time_policy(mut self, t: TimePolicy) -> Self {
        self.time = Some(t);
        self
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn run_source<T, F>(
    f: &mut F,
    out: &mut dyn Out<T>,
    batch: usize,
    replica: usize,
    parallelism: usize,
    cancel: &AtomicBool,
    ingress: bool,
    max_delay: u64,
) -> (std::result::Result<(), String>, u64)
where
    F: FnMut(&mut SourceCtx<'_, T>) -> std::result::Result<(), String>,
{
    let mut ctx = SourceCtx {
        out,
        replica,
        parallelism,
        cancel,
        ingress,
        max_delay,
        max_ts: 0,
        last_ingress: 0,
        emitted: 0,
        since_wm: 0,
        batch: Vec::with_capacity(if batch > 1 { batch } else { 0 }),
        batch_size: batch,
    };
    let r = f(&mut ctx);
    ctx.flush();
    let n = ctx.emitted;
    let wm = ctx.max_ts.saturating_sub(ctx.max_delay);
    ctx.out.watermark(wm);
    ctx.out.eos();
    (r, n)
}

// ---------------------------------------------------------------- Map

/// One output per input: `f(T) -> U`.
pub struct Map<T, U, F> {
    s: Settings<T>,
    f: F,
    _p: PhantomData<fn(T) -> U>,
}

impl<T, U, F> Map<T, U, F>
where
    T: Clone + Send + 'static,
    U: Clone + Send + 'static,
    F: FnMut(T) -> U + Clone + Send + 'static,
{
    /// A map named `name`.
    pub fn new(name: &str, f: F) -> Self {
        Self {
            s: Settings::new(name),
            f,
            _p: PhantomData,
        }
    }
    common_builders!();
    key_by_builder!();
}

struct MapRep<U, F> {
    f: F,
    next: Box<dyn Out<U>>,
    n: u64,
    c: Arc<Counters>,
    buf: Vec<Rec<U>>,
}

impl<T, U: Send, F: FnMut(T) -> U + Send> Out<T> for MapRep<U, F> {
    #[inline]
    fn push(&mut self, r: Rec<T>) {
        self.n += 1;
        self.next.push(Rec {
            ts: r.ts,
            seq: r.seq,
            val: (self.f)(r.val),
        });
    }
    #[inline]
    fn push_batch(&mut self, b: &mut Vec<Rec<T>>) {
        self.n += b.len() as u64;
        let f = &mut self.f;
        self.buf.extend(b.drain(..).map(|r| Rec {
            ts: r.ts,
            seq: r.seq,
            val: f(r.val),
        }));
        self.next.push_batch(&mut self.buf);
    }
    #[inline]
    fn watermark(&mut self, wm: u64) {
        self.next.watermark(wm);
    }
    fn idle(&mut self) {
        self.next.idle();
    }
    fn eos(&mut self) {
        self.c.add(self.n, self.n, 0, 0);
        self.next.eos();
    }
}

impl<T, U, F> Operator<T> for Map<T, U, F>
where
    T: Clone + Send + 'static,
    U: Clone + Send + 'static,
    F: FnMut(T) -> U + Clone + Send + 'static,
{
    type Out = U;
    fn settings(&self) -> (&str, usize, usize) {
        (&self.s.name, self.s.parallelism, self.s.batch)
    }
    fn route(&self) -> Route<T> {
        self.s.route()
    }
    fn check(&self) -> Result<()> {
        self.s.check()
    }
    fn replica(&mut self, _: usize, next: Box<dyn Out<U>>, c: Arc<Counters>) -> Box<dyn Out<T>> {
        Box::new(MapRep {
            f: self.f.clone(),
            next,
            n: 0,
            c,
            buf: Vec::new(),
        })
    }
}

// ---------------------------------------------------------------- Filter

/// Keeps the records for which `f` is true.
pub struct Filter<T, F> {
    s: Settings<T>,
    f: F,
}

impl<T, F> Filter<T, F>
where
    T: Clone + Send + 'static,
    F: FnMut(&T) -> bool + Clone + Send + 'static,
{
    /// A filter named `name`.
    pub fn new(name: &str, f: F) -> Self {
        Self {
            s: Settings::new(name),
            f,
        }
    }
    common_builders!();
    key_by_builder!();
}

struct FilterRep<T, F> {
    f: F,
    next: Box<dyn Out<T>>,
    n: u64,
    kept: u64,
    c: Arc<Counters>,
}

impl<T: Send, F: FnMut(&T) -> bool + Send> Out<T> for FilterRep<T, F> {
    #[inline]
    fn push(&mut self, r: Rec<T>) {
        self.n += 1;
        if (self.f)(&r.val) {
            self.kept += 1;
            self.next.push(r);
        }
    }
    #[inline]
    fn push_batch(&mut self, b: &mut Vec<Rec<T>>) {
        self.n += b.len() as u64;
        let f = &mut self.f;
        b.retain(|r| f(&r.val));
        self.kept += b.len() as u64;
        self.next.push_batch(b);
    }
    #[inline]
    fn watermark(&mut self, wm: u64) {
        self.next.watermark(wm);
    }
    fn idle(&mut self) {
        self.next.idle();
    }
    fn eos(&mut self) {
        self.c.add(self.n, self.kept, 0, 0);
        self.next.eos();
    }
}

impl<T, F> Operator<T> for Filter<T, F>
where
    T: Clone + Send + 'static,
    F: FnMut(&T) -> bool + Clone + Send + 'static,
{
    type Out = T;
    fn settings(&self) -> (&str, usize, usize) {
        (&self.s.name, self.s.parallelism, self.s.batch)
    }
    fn route(&self) -> Route<T> {
        self.s.route()
    }
    fn check(&self) -> Result<()> {
        self.s.check()
    }
    fn replica(&mut self, _: usize, next: Box<dyn Out<T>>, c: Arc<Counters>) -> Box<dyn Out<T>> {
        Box::new(FilterRep {
            f: self.f.clone(),
            next,
            n: 0,
            kept: 0,
            c,
        })
    }
}

// ---------------------------------------------------------------- FlatMap

/// Where a FlatMap puts its outputs. Outputs inherit the input's timestamp;
/// their sequence numbers follow the input's, in emission order.
pub struct Shipper<'a, U> {
    next: &'a mut dyn Out<U>,
    ts: u64,
    seq: u64,
    k: u64,
}

impl<U> Shipper<'_, U> {
    /// Emit one output.
    #[inline]
    pub fn ship(&mut self, u: U) {
        self.next.push(Rec {
            ts: self.ts,
            seq: self.seq + self.k.min(0xffff),
            val: u,
        });
        self.k += 1;
    }
}

/// Zero or more outputs per input.
pub struct FlatMap<T, U, F> {
    s: Settings<T>,
    f: F,
    _p: PhantomData<fn(T) -> U>,
}

impl<T, U, F> FlatMap<T, U, F>
where
    T: Clone + Send + 'static,
    U: Clone + Send + 'static,
    F: FnMut(T, &mut Shipper<'_, U>) + Clone + Send + 'static,
{
    /// A flat-map named `name`.
    pub fn new(name: &str, f: F) -> Self {
        Self {
            s: Settings::new(name),
            f,
            _p: PhantomData,
        }
    }
    common_builders!();
    key_by_builder!();
}

struct FlatMapRep<U, F> {
    f: F,
    next: Box<dyn Out<U>>,
    n: u64,
    out: u64,
    c: Arc<Counters>,
}

impl<T, U, F: FnMut(T, &mut Shipper<'_, U>) + Send> Out<T> for FlatMapRep<U, F> {
    #[inline]
    fn push(&mut self, r: Rec<T>) {
        self.n += 1;
        let mut s = Shipper {
            next: &mut *self.next,
            ts: r.ts,
            seq: r.seq,
            k: 0,
        };
        (self.f)(r.val, &mut s);
        self.out += s.k;
    }
    fn watermark(&mut self, wm: u64) {
        self.next.watermark(wm);
    }
    fn idle(&mut self) {
        self.next.idle();
    }
    fn eos(&mut self) {
        self.c.add(self.n, self.out, 0, 0);
        self.next.eos();
    }
}

impl<T, U, F> Operator<T> for FlatMap<T, U, F>
where
    T: Clone + Send + 'static,
    U: Clone + Send + 'static,
    F: FnMut(T, &mut Shipper<'_, U>) + Clone + Send + 'static,
{
    type Out = U;
    fn settings(&self) -> (&str, usize, usize) {
        (&self.s.name, self.s.parallelism, self.s.batch)
    }
    fn route(&self) -> Route<T> {
        self.s.route()
    }
    fn check(&self) -> Result<()> {
        self.s.check()
    }
    fn replica(&mut self, _: usize, next: Box<dyn Out<U>>, c: Arc<Counters>) -> Box<dyn Out<T>> {
        Box::new(FlatMapRep {
            f: self.f.clone(),
            next,
            n: 0,
            out: 0,
            c,
        })
    }
}

// ---------------------------------------------------------------- Sink

/// The last operator: `f(Some(t))` per record, `f(None)` once at the end
/// of the stream (per replica).
pub struct Sink<T, F> {
    pub(crate) s: Settings<T>,
    f: F,
}

impl<T, F> Sink<T, F>
where
    T: Clone + Send + 'static,
    F: FnMut(Option<T>) + Clone + Send + 'static,
{
    /// A sink named `name`.
    pub fn new(name: &str, f: F) -> Self {
        Self {
            s: Settings::new(name),
            f,
        }
    }
    /// Number of replicas. Default 1.
    #[must_use]
    pub fn with_parallelism(mut self, n: usize) -> Self {
        self.s.parallelism = n;
        self
    }
    key_by_builder!();
}

struct SinkRep<F> {
    f: F,
    n: u64,
    c: Arc<Counters>,
}

impl<T, F: FnMut(Option<T>) + Send> Out<T> for SinkRep<F> {
    #[inline]
    fn push(&mut self, r: Rec<T>) {
        self.n += 1;
        (self.f)(Some(r.val));
    }
    fn watermark(&mut self, _: u64) {}
    fn idle(&mut self) {}
    fn eos(&mut self) {
        self.c.add(self.n, 0, 0, 0);
        (self.f)(None);
    }
}

/// Output type of a sink (nothing flows out of it).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Nothing {}

impl<T, F> Operator<T> for Sink<T, F>
where
    T: Clone + Send + 'static,
    F: FnMut(Option<T>) + Clone + Send + 'static,
{
    type Out = Nothing;
    fn settings(&self) -> (&str, usize, usize) {
        (&self.s.name, self.s.parallelism, 1)
    }
    fn route(&self) -> Route<T> {
        self.s.route()
    }
    fn check(&self) -> Result<()> {
        self.s.check()
    }
    fn replica(
        &mut self,
        _: usize,
        _next: Box<dyn Out<Nothing>>,
        c: Arc<Counters>,
    ) -> Box<dyn Out<T>> {
        Box::new(SinkRep {
            f: self.f.clone(),
            n: 0,
            c,
        })
    }
}

/// The output of a sink: never receives anything.
pub(crate) struct NullOut;

impl Out<Nothing> for NullOut {
    fn push(&mut self, _: Rec<Nothing>) {}
    fn watermark(&mut self, _: u64) {}
    fn idle(&mut self) {}
    fn eos(&mut self) {}
}
