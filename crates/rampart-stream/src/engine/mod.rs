//! A data-stream-processing engine in the style of WindFlow.
//!
//! A [`Pipe`] is a typed chain of operators — [`Source`], [`Map`],
//! [`Filter`], [`FlatMap`], [`KeyedWindow`], [`ParallelWindow`], [`Sink`] —
//! each with its own parallelism (replicas). Adding an operator whose input
//! type is not the pipe's output type does not compile; settings that are
//! wrong only in combination (a count-based Parallel Window, parallelism
//! 0, …) are refused by [`Pipe::add`] / [`Pipe::sink`] with an [`Error`],
//! before any thread starts.
//!
//! Runtime:
//! - every replica runs on its own thread, unless **chaining** fuses it with
//!   the replica before it (same parallelism, forward routing: the tuple is
//!   handed over by a function call instead of a queue);
//! - edges are bounded lock-free SPSC queues (one per producer replica ×
//!   consumer replica); a full queue blocks the producer (backpressure),
//!   memory never grows with the input;
//! - routing is *forward* (one-to-one when parallelisms match, else
//!   round-robin by batch), *key-by* (equal keys → the same replica) or, for
//!   Parallel Windows, by window;
//! - **output batching** (`with_output_batch(n)`) publishes `n` records per
//!   queue operation instead of one; a source with output batch `n` also
//!   hands records down its fused chain `n` at a time, which lets a count
//!   window prefetch the state of the keys it is about to update;
//! - time: every record carries a timestamp `ts` (ns) and a sequence number
//!   `seq`. Event time is the source's timestamp; ingress time is the wall
//!   clock when the source emits ([`TimePolicy`]).
//!
//! **Watermarks.** A watermark `w` on an edge promises that every later
//! record on that edge has `ts >= w`. Sources emit in timestamp order (or
//! declare a bound on disorder with `with_max_delay`) and publish their
//! watermark every few hundred records, when idle, and at the end. An
//! operator's watermark is the minimum over its input edges. A time window
//! `[start, end)` fires when the watermark reaches `end + lateness`; a record
//! that arrives for a window that has already fired is **late**: it is
//! dropped and counted (`late_dropped` in [`RunStats`]). Window operators
//! forward `watermark - lateness`, so their results are never late
//! downstream. At end of stream every open window fires (partial windows
//! are flagged `WindowInfo::closed_by_eos`).
//!
//! **Determinism.** In [`ExecMode::Deterministic`] an operator replica with
//! several input edges merges them in `(ts, seq)` order, releasing a record
//! once the watermarks of all inputs have passed it (a bounded reorder
//! buffer; inputs that are ahead stop being read when it is full, which is
//! backpressure, never unbounded growth). Sources number records with a
//! global `seq` (e.g. the pcap record index), so every keyed operator sees
//! each key's records in the same order whatever the parallelism, batching
//! or chaining — and count windows, TRW and flow timeouts give identical
//! results (property-tested). [`ExecMode::Default`] reads inputs as they
//! come (fastest); time windows with commutative aggregates are still
//! deterministic there, order-sensitive functions are not.
//!
//! ```
//! use rampart_stream::engine::*;
//! let g = PipeGraph::new(GraphConfig { chaining: true, ..GraphConfig::default() })?;
//! let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
//! let o = out.clone();
//! g.source(Source::new("numbers", |ctx: &mut SourceCtx<'_, u64>| {
//!     for i in 0..10 {
//!         ctx.emit(i, i);
//!     }
//!     Ok(())
//! }))?
//! .add(Filter::new("even", |x: &u64| x % 2 == 0))?
//! .add(KeyedWindow::new("sum", |_: &u64| (), WindowSpec::count_tumbling(2),
//!     agg(|| 0u64, |a: &mut u64, x: &u64| *a += x, |_: &(), a: u64, _: &WindowInfo| a)))?
//! .sink(Sink::new("print", move |x: Option<u64>| if let Some(x) = x { o.lock().unwrap().push(x) }))?
//! .run()?;
//! assert_eq!(*out.lock().unwrap(), vec![0 + 2, 4 + 6, 8]);
//! # Ok::<(), Error>(())
//! ```
//!
//! Wrong wiring does not compile — a Map over strings after a source of
//! numbers:
//!
//! ```compile_fail
//! use rampart_stream::engine::*;
//! let g = PipeGraph::new(GraphConfig::default()).unwrap();
//! let p = g.source(Source::new("s", |_: &mut SourceCtx<'_, u32>| Ok(()))).unwrap();
//! let _ = p.add(Map::new("m", |s: String| s.len()));
//! ```

pub(crate) mod emit;
mod graph;
mod input;
mod ops;
pub(crate) mod queue;
mod window;

use std::sync::atomic::{AtomicU64, Ordering};

pub use emit::Route;
pub use graph::{GraphConfig, OpStat, Pipe, PipeGraph, Pipeline, QueueGauges, RunStats};
/// Runs a source function into any output (the tee drives a source with it).
pub(crate) use ops::run_source;
pub use ops::{Filter, FlatMap, Map, Nothing, Operator, Shipper, Sink, Source, SourceCtx};
pub use window::{agg, FnAgg, KeyedWindow, ParallelWindow, WindowAgg, WindowInfo, WindowSpec};

/// A record on an edge: the value, its timestamp and its sequence number.
#[derive(Debug, Clone, Copy)]
pub struct Rec<T> {
    /// Event or ingress time, ns.
    pub ts: u64,
    /// Order among records of equal `ts` (global per source, see the module docs).
    pub seq: u64,
    /// The tuple.
    pub val: T,
}

/// How replicas with several inputs read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    /// As records come (fastest; order across inputs is arbitrary).
    #[default]
    Default,
    /// Merged in `(ts, seq)` order behind the watermark (reproducible).
    Deterministic,
}

/// Where record timestamps come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimePolicy {
    /// The source's timestamps (capture or receive time).
    #[default]
    Event,
    /// The wall clock when the source emits the record.
    Ingress,
}

/// Errors of building or running a graph.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting of one operator is out of range.
    #[error("operator {op:?}: {what}")]
    InvalidSetting {
        /// Operator name.
        op: String,
        /// What is wrong and what is allowed.
        what: String,
    },
    /// The operator cannot be wired this way.
    #[error("operator {op:?} cannot follow {prev:?}: {why}")]
    IllegalWiring {
        /// Operator name.
        op: String,
        /// Previous operator.
        prev: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// A source failed.
    #[error("source {op:?} replica {replica}: {msg}")]
    Source {
        /// Operator name.
        op: String,
        /// Replica index.
        replica: usize,
        /// The source's error.
        msg: String,
    },
    /// A replica thread panicked (a bug in an operator function).
    #[error("operator thread {0:?} panicked: {1}")]
    Panic(String, String),
    /// Could not start a thread.
    #[error("starting thread {0:?}: {1}")]
    Spawn(String, std::io::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The inside of a replica chain: what an operator replica pushes into.
#[doc(hidden)]
pub trait Out<T>: Send {
    fn push(&mut self, r: Rec<T>);
    /// Several records in order; leaves `b` empty. Operators that gain from
    /// seeing records together (prefetching window state) override it.
    #[inline]
    fn push_batch(&mut self, b: &mut Vec<Rec<T>>) {
        for r in b.drain(..) {
            self.push(r);
        }
    }
    /// All later records have `ts >= wm`.
    fn watermark(&mut self, wm: u64);
    /// The input is idle: publish partial batches and progress.
    fn idle(&mut self);
    /// End of stream: flush state, then propagate.
    fn eos(&mut self);
}

impl<T> Out<T> for Box<dyn Out<T>> {
    #[inline]
    fn push(&mut self, r: Rec<T>) {
        (**self).push(r);
    }
    #[inline]
    fn push_batch(&mut self, b: &mut Vec<Rec<T>>) {
        (**self).push_batch(b);
    }
    #[inline]
    fn watermark(&mut self, wm: u64) {
        (**self).watermark(wm);
    }
    fn idle(&mut self) {
        (**self).idle();
    }
    fn eos(&mut self) {
        (**self).eos();
    }
}

/// Per-operator counters, summed over replicas when they finish.
#[derive(Debug, Default)]
#[doc(hidden)]
pub struct Counters {
    pub(crate) tuples_in: AtomicU64,
    pub(crate) tuples_out: AtomicU64,
    pub(crate) late_dropped: AtomicU64,
    pub(crate) windows_fired: AtomicU64,
}

impl Counters {
    pub(crate) fn add(&self, i: u64, o: u64, late: u64, fired: u64) {
        self.tuples_in.fetch_add(i, Ordering::Relaxed);
        self.tuples_out.fetch_add(o, Ordering::Relaxed);
        self.late_dropped.fetch_add(late, Ordering::Relaxed);
        self.windows_fired.fetch_add(fired, Ordering::Relaxed);
    }
}

/// Mix of a 64-bit hash (murmur3 finalizer) — routing must not reuse the
/// bits the replicas' hash tables index with.
#[inline(always)]
pub(crate) fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Hash of a key (Fx), used for routing and as the `seq` of window results.
#[inline(always)]
pub(crate) fn key_hash<K: std::hash::Hash>(k: &K) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(k)
}

/// Replica of `n` that owns hash `h`.
#[inline(always)]
pub(crate) fn replica_of(h: u64, n: usize) -> usize {
    ((u128::from(mix64(h)) * n as u128) >> 64) as usize
}
