//! Building a graph (typed, checked before anything runs) and running it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::emit::{Emitter, Route};
use super::ops::{run_source, Nothing, NullOut, Operator, Sink, Source, SourceCtx};
use super::queue::{edge, Tx};
use super::{input, Counters, Error, ExecMode, Out, Result, TimePolicy};

/// Settings of a whole graph.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GraphConfig {
    /// Name (thread names are `<op>#<replica>`).
    pub name: String,
    /// How multi-input replicas read.
    pub mode: ExecMode,
    /// Event or ingress time.
    pub time: TimePolicy,
    /// Fuse consecutive replicas into one thread wherever legal.
    pub chaining: bool,
    /// Records per edge queue (bounded: a full queue blocks its producer).
    pub queue_capacity: usize,
}

impl Default for GraphConfig {
    fn default() -> Self {
        Self {
            name: "graph".into(),
            mode: ExecMode::Default,
            time: TimePolicy::Event,
            chaining: false,
            queue_capacity: 8192,
        }
    }
}

type ThreadBody = Box<dyn FnOnce() -> Result<()> + Send>;

#[derive(Default)]
struct Plan {
    threads: Vec<(String, ThreadBody)>,
    /// Every queue, by the operator it feeds.
    queues: Vec<(String, Arc<super::queue::EdgeMeta>)>,
}

impl Plan {
    fn spawn(&mut self, name: String, body: ThreadBody) {
        self.threads.push((name, body));
    }
}

struct OpInfo {
    name: String,
    parallelism: usize,
    counters: Arc<Counters>,
    source: bool,
}

type BuildFn<T> = Box<dyn FnOnce(Vec<Box<dyn Out<T>>>, &mut Plan) + Send>;

/// Creates sources: the start of every [`Pipe`].
pub struct PipeGraph {
    cfg: Arc<GraphConfig>,
    cancel: Arc<AtomicBool>,
}

impl std::fmt::Debug for PipeGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeGraph").field("cfg", &self.cfg).finish()
    }
}

impl PipeGraph {
    /// A graph with these settings.
    ///
    /// # Errors
    /// A queue capacity below 2 or above 2^24.
    pub fn new(cfg: GraphConfig) -> Result<Self> {
        if !(2..=1 << 24).contains(&cfg.queue_capacity) {
            return Err(Error::InvalidSetting {
                op: cfg.name.clone(),
                what: format!(
                    "queue capacity {} out of range: use 2..=16777216",
                    cfg.queue_capacity
                ),
            });
        }
        Ok(Self {
            cfg: Arc::new(cfg),
            cancel: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Share a stop flag (e.g. set by Ctrl-C): sources see it through
    /// [`SourceCtx::is_cancelled`].
    #[must_use]
    pub fn with_cancel(mut self, c: Arc<AtomicBool>) -> Self {
        self.cancel = c;
        self
    }

    /// Start a pipe with a source.
    ///
    /// # Errors
    /// Invalid settings of the source.
    pub fn source<T, F>(&self, src: Source<T, F>) -> Result<Pipe<T>>
    where
        T: Clone + Send + 'static,
        F: FnMut(&mut SourceCtx<'_, T>) -> std::result::Result<(), String> + Clone + Send + 'static,
    {
        src.s.check()?;
        let counters = Arc::new(Counters::default());
        let name = src.s.name.clone();
        let p = src.s.parallelism;
        let ingress = src.time.unwrap_or(self.cfg.time) == TimePolicy::Ingress;
        let max_delay = src.max_delay;
        let batch = src.s.batch;
        let cancel = Arc::clone(&self.cancel);
        let c2 = Arc::clone(&counters);
        let f = src.f;
        let build: BuildFn<T> = Box::new(move |outs, plan| {
            for (i, mut out) in outs.into_iter().enumerate() {
                let mut f = f.clone();
                let cancel = Arc::clone(&cancel);
                let c = Arc::clone(&c2);
                let op = name.clone();
                plan.spawn(
                    format!("{name}#{i}"),
                    Box::new(move || {
                        let (r, n) =
                            run_source(&mut f, &mut *out, batch, i, p, &cancel, ingress, max_delay);
                        c.add(0, n, 0, 0);
                        r.map_err(|msg| Error::Source {
                            op,
                            replica: i,
                            msg,
                        })
                    }),
                );
            }
        });
        Ok(Pipe {
            cfg: Arc::clone(&self.cfg),
            cancel: Arc::clone(&self.cancel),
            parallelism: p,
            batch: src.s.batch,
            last: src.s.name.clone(),
            ops: vec![OpInfo {
                name: src.s.name,
                parallelism: p,
                counters,
                source: true,
            }],
            build,
            partitioned: false,
        })
    }
}

/// A graph under construction whose last operator outputs `T`.
#[must_use = "a pipe does nothing until it ends in a sink and runs"]
pub struct Pipe<T> {
    cfg: Arc<GraphConfig>,
    cancel: Arc<AtomicBool>,
    parallelism: usize,
    batch: usize,
    last: String,
    ops: Vec<OpInfo>,
    build: BuildFn<T>,
    partitioned: bool,
}

impl<T> std::fmt::Debug for Pipe<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipe")
            .field("last", &self.last)
            .field("parallelism", &self.parallelism)
            .finish()
    }
}

impl<T: Clone + Send + 'static> Pipe<T> {
    /// Append an operator whose input is `T` (anything else does not compile).
    /// (Named as in WindFlow's `MultiPipe::add`.)
    ///
    /// # Errors
    /// Invalid settings of `op` (parallelism, batch, window shape).
    #[allow(clippy::should_implement_trait)]
    pub fn add<O: Operator<T>>(self, mut op: O) -> Result<Pipe<O::Out>> {
        op.check()?;
        let (name, p, batch) = op.settings();
        let (name, p, batch) = (name.to_string(), p, batch);
        if self.ops.iter().any(|o| o.name == name) {
            return Err(Error::IllegalWiring {
                op: name,
                prev: self.last,
                why: "two operators have this name: give each its own (it names threads and statistics)".into(),
            });
        }
        let p_up = self.parallelism;
        // Keys already partitioned across the upstream replicas (declared by
        // the app, see `assume_partitioned`): key-by becomes one-to-one.
        let route = match op.route() {
            Route::Key(_) if self.partitioned && p == p_up => Route::Forward,
            r => r,
        };
        let chain = self.cfg.chaining && p == p_up && (route.is_forward() || p == 1);
        let one_to_one = route.is_forward() && p == p_up;
        let counters = Arc::new(Counters::default());
        let c2 = Arc::clone(&counters);
        let up_batch = self.batch;
        let cap = self.cfg.queue_capacity;
        let mode = self.cfg.mode;
        let up_build = self.build;
        let tname = name.clone();
        let build: BuildFn<O::Out> = Box::new(move |outs, plan| {
            let reps: Vec<Box<dyn Out<T>>> = outs
                .into_iter()
                .enumerate()
                .map(|(i, nx)| op.replica(i, nx, Arc::clone(&c2)))
                .collect();
            if chain {
                up_build(reps, plan);
                return;
            }
            let mut txs: Vec<Vec<Tx<T>>> = (0..p_up).map(|_| Vec::new()).collect();
            for (d, rep) in reps.into_iter().enumerate() {
                let sleeping = Arc::new(AtomicBool::new(false));
                let mut rxs = Vec::new();
                for (u, tx_u) in txs.iter_mut().enumerate() {
                    if one_to_one && u != d {
                        continue;
                    }
                    let (tx, rx) = edge(cap, Arc::clone(&sleeping));
                    plan.queues.push((tname.clone(), Arc::clone(&rx.meta)));
                    tx_u.push(tx);
                    rxs.push(rx);
                }
                plan.spawn(
                    format!("{tname}#{d}"),
                    Box::new(move || {
                        input::run(rxs, rep, mode, sleeping);
                        Ok(())
                    }),
                );
            }
            let ems: Vec<Box<dyn Out<T>>> = txs
                .into_iter()
                .map(|t| Box::new(Emitter::new(t, route.clone(), up_batch)) as Box<dyn Out<T>>)
                .collect();
            up_build(ems, plan);
        });
        let mut ops = self.ops;
        ops.push(OpInfo {
            name: name.clone(),
            parallelism: p,
            counters,
            source: false,
        });
        Ok(Pipe {
            cfg: self.cfg,
            cancel: self.cancel,
            parallelism: p,
            batch,
            last: name,
            ops,
            build,
            partitioned: false,
        })
    }

    /// Declare that the records on this pipe are already partitioned for
    /// the next keyed operator: every record of one key is on the same
    /// replica of the last operator (e.g. the NIC steered them by a FlowID
    /// that refines the key). If that operator has the same
    /// parallelism, its key-by becomes a one-to-one hand-over (and can be
    /// chained); otherwise it keys by as usual. Applies to the next
    /// operator only; `false` declares nothing. Like Flink's
    /// `reinterpretAsKeyedStream`: a wrong declaration sends one key to
    /// several replicas.
    pub fn assume_partitioned(mut self, yes: bool) -> Self {
        self.partitioned = yes;
        self
    }

    /// Parallelism of the last operator.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// End the pipe in a sink: the result can run.
    ///
    /// # Errors
    /// As [`Self::add`].
    pub fn sink<F>(self, sink: Sink<T, F>) -> Result<Pipeline>
    where
        F: FnMut(Option<T>) + Clone + Send + 'static,
    {
        let p = sink.s.parallelism;
        let done: Pipe<Nothing> = self.add(sink)?;
        let mut plan = Plan::default();
        let outs: Vec<Box<dyn Out<Nothing>>> = (0..p)
            .map(|_| Box::new(NullOut) as Box<dyn Out<Nothing>>)
            .collect();
        (done.build)(outs, &mut plan);
        Ok(Pipeline {
            cfg: done.cfg,
            cancel: done.cancel,
            plan,
            ops: done.ops,
        })
    }
}

/// Statistics of one operator after a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpStat {
    /// Operator name.
    pub name: String,
    /// Replicas.
    pub parallelism: usize,
    /// Records received (0 for sources).
    pub tuples_in: u64,
    /// Records emitted (window results for windows).
    pub tuples_out: u64,
    /// Records that arrived after their window fired.
    pub late_dropped: u64,
    /// Windows fired.
    pub windows_fired: u64,
}

/// What a run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunStats {
    /// Wall time from the first thread start to the last thread end.
    pub seconds: f64,
    /// Threads the graph ran on.
    pub threads: usize,
    /// Records emitted by all sources.
    pub source_tuples: u64,
    /// Per operator, in pipe order.
    pub operators: Vec<OpStat>,
}

/// A complete graph, ready to run.
#[must_use = "call run()"]
pub struct Pipeline {
    cfg: Arc<GraphConfig>,
    cancel: Arc<AtomicBool>,
    plan: Plan,
    ops: Vec<OpInfo>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("cfg", &self.cfg)
            .field("threads", &self.plan.threads.len())
            .finish()
    }
}

/// Live depth of every operator's input queues (readable while the
/// pipeline runs, e.g. by a metrics endpoint).
#[derive(Clone, Debug)]
pub struct QueueGauges {
    ops: Vec<String>,
    queues: Vec<(String, Arc<super::queue::EdgeMeta>)>,
}

impl QueueGauges {
    /// Per operator (sources and chained operators have no input queue:
    /// 0): records waiting, as its replicas last saw them.
    pub fn depths(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self.ops.iter().map(|o| (o.clone(), 0)).collect();
        for (op, m) in &self.queues {
            let d = m.depth.load(Ordering::Relaxed);
            match out.iter_mut().find(|(o, _)| o == op) {
                Some((_, v)) => *v += d,
                None => out.push((op.clone(), d)),
            }
        }
        out
    }
}

impl Pipeline {
    /// The queues' live depths.
    pub fn queue_gauges(&self) -> QueueGauges {
        QueueGauges {
            ops: self.operators(),
            queues: self.plan.queues.clone(),
        }
    }

    /// Operator names, in pipe order.
    pub fn operators(&self) -> Vec<String> {
        self.ops.iter().map(|o| o.name.clone()).collect()
    }

    /// Threads this graph runs on (after chaining).
    pub fn threads(&self) -> usize {
        self.plan.threads.len()
    }

    /// The stop flag shared with the sources.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// Run every replica thread to the end of the stream.
    ///
    /// # Errors
    /// The first source error or operator panic (the other threads are
    /// stopped: sources see the cancel flag, the rest drain and end).
    pub fn run(self) -> Result<RunStats> {
        let start = Instant::now();
        let nthreads = self.plan.threads.len();
        let mut handles = Vec::with_capacity(nthreads);
        let mut first_err: Option<Error> = None;
        for (name, body) in self.plan.threads {
            let cancel = Arc::clone(&self.cancel);
            let n2 = name.clone();
            let h = std::thread::Builder::new()
                .name(truncate(&name))
                .spawn(move || {
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                        Ok(r) => {
                            if r.is_err() {
                                cancel.store(true, Ordering::Relaxed);
                            }
                            r
                        }
                        Err(p) => {
                            cancel.store(true, Ordering::Relaxed);
                            let msg = p
                                .downcast_ref::<&str>()
                                .map(|s| (*s).to_string())
                                .or_else(|| p.downcast_ref::<String>().cloned())
                                .unwrap_or_default();
                            Err(Error::Panic(n2, msg))
                        }
                    }
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    self.cancel.store(true, Ordering::Relaxed);
                    first_err.get_or_insert(Error::Spawn(name, e));
                    break;
                }
            }
        }
        for h in handles {
            if let Ok(Err(e)) = h.join() {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let operators: Vec<OpStat> = self
            .ops
            .iter()
            .map(|o| OpStat {
                name: o.name.clone(),
                parallelism: o.parallelism,
                tuples_in: o.counters.tuples_in.load(Ordering::Relaxed),
                tuples_out: o.counters.tuples_out.load(Ordering::Relaxed),
                late_dropped: o.counters.late_dropped.load(Ordering::Relaxed),
                windows_fired: o.counters.windows_fired.load(Ordering::Relaxed),
            })
            .collect();
        let source_tuples = self
            .ops
            .iter()
            .zip(&operators)
            .filter(|(o, _)| o.source)
            .map(|(_, s)| s.tuples_out)
            .sum();
        Ok(RunStats {
            seconds: start.elapsed().as_secs_f64(),
            threads: nthreads,
            source_tuples,
            operators,
        })
    }
}

fn truncate(s: &str) -> String {
    // Linux thread names are at most 15 bytes.
    s.chars().take(15).collect()
}
