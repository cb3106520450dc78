//! The engine benchmark (`rampart bench stream-engine`):
//! Source → Map(FlowID) → Filter(TCP or UDP) → Keyed Window (count-based
//! tumbling, 1,000 tuples, packets + bytes per flow) → Sink, on synthetic
//! 32-byte packet tuples (60% TCP, 30% UDP, 10% ICMP) spread uniformly over
//! N flows; and the empty Source → Sink pipeline. The same pipeline as the
//! WindFlow 4.2.2 anchor measured on this machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_stream::engine::{
    agg, Filter, GraphConfig, KeyedWindow, Map, PipeGraph, Result, Sink, Source, WindowSpec,
};
use rampart_stream::flowid::jhash2;

/// The benchmark's 32-byte packet tuple (IPv4, as in the WindFlow anchor).
/// Serializable only because timely's exchange channels require it (the
/// peer's workers share one process: nothing is serialized).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct BenchTuple {
    /// Source address.
    pub saddr: u32,
    /// Destination address.
    pub daddr: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// TCP flags.
    pub tcp_flags: u8,
    /// Length, bytes.
    pub len: u16,
    /// Timestamp, ns.
    pub ts: u64,
    /// FlowID (set by the Map).
    pub flow_id: u32,
    _pad: u32,
}

const _: () = assert!(std::mem::size_of::<BenchTuple>() == 32);

/// A tuple type the benchmark can run on: the 32-byte [`BenchTuple`] (the
/// issue's and the WindFlow anchor's) or the 56-byte shared
/// [`rampart_stream::tuple::StreamTuple`] the apps use.
pub trait BenchItem: Copy + Send + Sync + 'static {
    /// From a flow of the table.
    fn from_flow(b: &BenchTuple) -> Self;
    /// Stamp the timestamp.
    fn set_ts(&mut self, ts: u64);
    /// Map(FlowID): jhash of the 5-tuple.
    fn compute_flow_id(&mut self);
    /// IP protocol.
    fn proto(&self) -> u8;
    /// The FlowID.
    fn flow_id(&self) -> u32;
    /// Bytes.
    fn bytes(&self) -> u64;
}

impl BenchItem for BenchTuple {
    fn from_flow(b: &BenchTuple) -> Self {
        *b
    }
    #[inline]
    fn set_ts(&mut self, ts: u64) {
        self.ts = ts;
    }
    #[inline]
    fn compute_flow_id(&mut self) {
        let k = [
            self.saddr,
            self.daddr,
            (u32::from(self.sport) << 16) | u32::from(self.dport),
            u32::from(self.proto),
        ];
        self.flow_id = jhash2(&k, 0x7261);
    }
    #[inline]
    fn proto(&self) -> u8 {
        self.proto
    }
    #[inline]
    fn flow_id(&self) -> u32 {
        self.flow_id
    }
    #[inline]
    fn bytes(&self) -> u64 {
        u64::from(self.len)
    }
}

impl BenchItem for rampart_stream::tuple::StreamTuple {
    fn from_flow(b: &BenchTuple) -> Self {
        use rampart_stream::tuple::TupleExt;
        let ip = |a: u32| std::net::IpAddr::V4(std::net::Ipv4Addr::from(a));
        Self::new_l4(
            0,
            ip(b.saddr),
            ip(b.daddr),
            b.proto,
            b.sport,
            b.dport,
            b.tcp_flags,
            b.len,
        )
    }
    #[inline]
    fn set_ts(&mut self, ts: u64) {
        self.ts_ns = ts;
    }
    #[inline]
    fn compute_flow_id(&mut self) {
        rampart_stream::flowid::set_flow_id(self, rampart_stream::flowid::KeyMode::FiveTuple);
    }
    #[inline]
    fn proto(&self) -> u8 {
        self.proto
    }
    #[inline]
    fn flow_id(&self) -> u32 {
        self.flow_id
    }
    #[inline]
    fn bytes(&self) -> u64 {
        u64::from(self.ip_len)
    }
}

/// Which pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchPipeline {
    /// Source → Map → Filter → Keyed Window → Sink.
    Full,
    /// Source → Sink.
    Empty,
}

/// One configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchConfig {
    /// Pipeline.
    pub pipeline: BenchPipeline,
    /// Distinct flows.
    pub flows: u32,
    /// Replicas per operator, `a-b-c-d-e` (full) or `a-b` (empty).
    pub parallelism: Vec<usize>,
    /// Output batch (1 = batching off).
    pub batch: usize,
    /// Operator chaining.
    pub chaining: bool,
    /// How long the source runs.
    pub seconds: f64,
    /// 32 ([`BenchTuple`]) or 56 ([`rampart_stream::tuple::StreamTuple`]).
    pub tuple_bytes: usize,
}

/// One measurement (`rampart bench stream-engine --json` prints one per line).
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchResult {
    /// `full` or `empty`.
    pub pipeline: BenchPipeline,
    /// Distinct flows.
    pub flows: u32,
    /// `1-1-1-2-1` etc.
    pub parallelism: String,
    /// Batching on?
    pub batching: bool,
    /// Output batch size.
    pub batch: usize,
    /// Chaining on?
    pub chaining: bool,
    /// Input tuples per second (source tuples / wall time of the run).
    pub tuples_per_s: f64,
    /// Source tuples.
    pub tuples: u64,
    /// Wall time, s.
    pub seconds: f64,
    /// Threads the graph ran on.
    pub threads: usize,
    /// Window results (full pipeline).
    pub windows: u64,
    /// Tuple size, bytes.
    pub tuple_bytes: usize,
    /// CPU time (user + system) the process used during the run, s.
    pub cpu_seconds: f64,
    /// Source tuples per CPU second: what the graph costs, independent of
    /// how much CPU other processes left it on a shared machine.
    pub tuples_per_cpu_s: f64,
}

/// User + system CPU time of this process, s.
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Flow `i`: 60% TCP, 30% UDP, 10% ICMP by index, fields derived from a
/// hash of `i` — computed, not looked up, so the source does not add a
/// cache miss of its own per tuple.
#[inline]
pub(crate) fn flow(i: u32) -> BenchTuple {
    let mut x = u64::from(i).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let proto = match i % 10 {
        0..=5 => 6,
        6..=8 => 17,
        _ => 1,
    };
    BenchTuple {
        saddr: 0xac10_0000 | (i & 0xf_ffff),
        daddr: 0x0a0a_0002 + (i >> 20),
        sport: (x >> 16) as u16 | 1024,
        dport: if proto == 1 {
            0x0800
        } else {
            80 + (x >> 40) as u16 % 100
        },
        proto,
        tcp_flags: if proto == 6 { 0x10 } else { 0 },
        len: 64 + (x >> 50) as u16 % 1400,
        ..Default::default()
    }
}

/// The source's random state for replica (or peer worker) `w`.
pub(crate) fn seed(w: usize) -> u64 {
    0x2545_f491_4f6c_dd1du64 ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The next flow index in `0..n` (xorshift*: cheap, so the source costs
/// little next to the pipeline).
#[inline]
pub(crate) fn draw(x: &mut u64, n: u64) -> u32 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
    (((r >> 32) * n) >> 32) as u32
}

fn source<T: BenchItem>(
    flows: u32,
    seconds: f64,
) -> impl FnMut(&mut rampart_stream::engine::SourceCtx<'_, T>) -> std::result::Result<(), String>
       + Clone
       + Send
       + 'static {
    move |ctx| {
        let n = u64::from(flows);
        let mut x = seed(ctx.replica());
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let mut ts = 0u64;
        loop {
            for _ in 0..65_536 {
                let mut t = T::from_flow(&flow(draw(&mut x, n)));
                ts += 1;
                t.set_ts(ts);
                ctx.emit(ts, t);
            }
            if Instant::now() >= deadline || ctx.is_cancelled() {
                return Ok(());
            }
        }
    }
}

/// Run one configuration.
///
/// # Errors
/// Invalid settings (parallelism, batch) or a failing run.
pub fn run(cfg: &BenchConfig) -> Result<BenchResult> {
    match cfg.tuple_bytes {
        56 => run_t::<rampart_stream::tuple::StreamTuple>(cfg),
        _ => run_t::<BenchTuple>(cfg),
    }
}

fn run_t<T: BenchItem + Clone>(cfg: &BenchConfig) -> Result<BenchResult> {
    let flows = cfg.flows.max(1);
    let g = PipeGraph::new(GraphConfig {
        name: "bench".into(),
        chaining: cfg.chaining,
        ..GraphConfig::default()
    })?;
    let par = |i: usize| cfg.parallelism.get(i).copied().unwrap_or(1);
    let results = Arc::new(AtomicU64::new(0));
    let r2 = Arc::clone(&results);
    let count_sink = move |name: &str| {
        let r = Arc::clone(&r2);
        let mut n = 0u64;
        Sink::new(name, move |x: Option<(u32, u64, u64)>| match x {
            Some(_) => n += 1,
            None => {
                r.fetch_add(n, Ordering::Relaxed);
            }
        })
    };
    let src = Source::new("source", source(flows, cfg.seconds))
        .with_parallelism(par(0))
        .with_output_batch(cfg.batch);
    let pipeline = match cfg.pipeline {
        BenchPipeline::Full => g
            .source(src)?
            .add(
                Map::new("flowid", |mut t: T| {
                    t.compute_flow_id();
                    t
                })
                .with_parallelism(par(1))
                .with_output_batch(cfg.batch),
            )?
            .add(
                Filter::new("filter", |t: &T| t.proto() == 6 || t.proto() == 17)
                    .with_parallelism(par(2))
                    .with_output_batch(cfg.batch),
            )?
            .add(
                KeyedWindow::new(
                    "window",
                    |t: &T| t.flow_id(),
                    WindowSpec::count_tumbling(1000),
                    // Packets and bytes of at most 1,000 tuples fit 32 bits:
                    // a small accumulator keeps 65,536 keys' state in cache.
                    agg(
                        || (0u32, 0u32),
                        |a: &mut (u32, u32), t: &T| {
                            a.0 += 1;
                            a.1 += t.bytes() as u32;
                        },
                        |k: &u32, a: (u32, u32), _: &rampart_stream::engine::WindowInfo| {
                            (*k, u64::from(a.0), u64::from(a.1))
                        },
                    ),
                )
                .with_parallelism(par(3))
                .with_output_batch(cfg.batch),
            )?
            .sink(count_sink("sink").with_parallelism(par(4)))?,
        BenchPipeline::Empty => {
            let r = Arc::clone(&results);
            let mut n = 0u64;
            g.source(src)?.sink(
                Sink::new("sink", move |x: Option<T>| match x {
                    Some(_) => n += 1,
                    None => {
                        r.fetch_add(n, Ordering::Relaxed);
                    }
                })
                .with_parallelism(par(1)),
            )?
        }
    };
    let threads = pipeline.threads();
    let cpu0 = process_cpu_seconds();
    let st = pipeline.run()?;
    let cpu = process_cpu_seconds() - cpu0;
    Ok(BenchResult {
        pipeline: cfg.pipeline,
        flows: cfg.flows,
        parallelism: cfg
            .parallelism
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("-"),
        batching: cfg.batch > 1,
        batch: cfg.batch,
        chaining: cfg.chaining,
        tuples_per_s: st.source_tuples as f64 / st.seconds,
        tuples: st.source_tuples,
        seconds: st.seconds,
        threads,
        windows: if cfg.pipeline == BenchPipeline::Full {
            results.load(Ordering::Relaxed)
        } else {
            0
        },
        tuple_bytes: std::mem::size_of::<T>(),
        cpu_seconds: cpu,
        tuples_per_cpu_s: if cpu > 0.0 {
            st.source_tuples as f64 / cpu
        } else {
            0.0
        },
    })
}

/// The configurations of the issue: full 1-1-1-1-1 and 1-1-1-2-1 and
/// empty 1-1, each with batching off/on and chaining off/on.
pub fn standard_configs(
    flows: u32,
    batch: usize,
    seconds: f64,
    tuple_bytes: usize,
) -> Vec<BenchConfig> {
    let mut v = Vec::new();
    for par in [vec![1, 1, 1, 1, 1], vec![1, 1, 1, 2, 1]] {
        for b in [1, batch] {
            for chaining in [false, true] {
                v.push(BenchConfig {
                    pipeline: BenchPipeline::Full,
                    flows,
                    parallelism: par.clone(),
                    batch: b,
                    chaining,
                    seconds,
                    tuple_bytes,
                });
            }
        }
    }
    for b in [1, batch] {
        for chaining in [false, true] {
            v.push(BenchConfig {
                pipeline: BenchPipeline::Empty,
                flows,
                parallelism: vec![1, 1],
                batch: b,
                chaining,
                seconds,
                tuple_bytes,
            });
        }
    }
    v
}

/// What `rampart bench stream-engine` measures: [`standard_configs`] for
/// every flow count, each repeated, configurations alternating.
#[derive(Debug, Clone)]
pub struct EngineSpec {
    /// Flow counts to measure (1..=2^24 each).
    pub flows: Vec<u32>,
    /// Seconds each run's source generates.
    pub seconds: f64,
    /// Repetitions.
    pub repeat: usize,
    /// Output batch size when batching is on.
    pub batch: usize,
    /// Tuple size: 32 ([`BenchTuple`]) or 56 (the apps' `StreamTuple`).
    pub tuple_bytes: usize,
    /// One JSON object per configuration (medians, raw runs included).
    pub json: bool,
}

/// Run `rampart bench stream-engine` and print one line (or JSON object)
/// per configuration: the median run, with every run's rate.
///
/// # Errors
/// Settings out of range ([`crate::Error::Invalid`]) or an engine failure.
pub fn run_and_print(a: &EngineSpec) -> crate::Result<()> {
    use crate::out::{print_json, si};
    use crate::Error;
    if !(a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 600.0) {
        return Err(Error::Invalid(format!(
            "--seconds {}: use 0 < seconds <= 600",
            a.seconds
        )));
    }
    if a.repeat == 0 || a.repeat > 100 {
        return Err(Error::Invalid(format!(
            "--repeat {}: use 1..=100",
            a.repeat
        )));
    }
    if a.flows.iter().any(|f| *f == 0 || *f > 1 << 24) {
        return Err(Error::Invalid(
            "--flows: each flow count must be in 1..=16777216".into(),
        ));
    }
    let mut configs = Vec::new();
    for &f in &a.flows {
        configs.extend(standard_configs(f, a.batch, a.seconds, a.tuple_bytes));
    }
    let mut runs: Vec<Vec<BenchResult>> = vec![Vec::new(); configs.len()];
    // The peer engine, same pipeline and tuples, 1 and 2 workers, per flow
    // count; on the 32-byte tuple only (the anchor's: its tuple is not the
    // apps' 56-byte one, whose C layout timely's channels cannot carry).
    let peers: Vec<(u32, usize)> = if a.tuple_bytes == 32 {
        a.flows
            .iter()
            .flat_map(|&f| [(f, 1usize), (f, 2)])
            .collect()
    } else {
        eprintln!("the peer engine runs on the 32-byte tuple only: --tuple-bytes 32 to compare");
        Vec::new()
    };
    let mut peer_runs: Vec<Vec<super::timely_peer::TimelyResult>> = vec![Vec::new(); peers.len()];
    for rep in 0..a.repeat {
        for (i, &(f, w)) in peers.iter().enumerate() {
            let r = super::timely_peer::run(f, a.seconds, w)?;
            if !a.json {
                eprintln!(
                    "rep {rep} timely flows {:>7} workers {w} {:>10}tuples/s",
                    f,
                    si(r.tuples_per_s)
                );
            }
            peer_runs[i].push(r);
        }
        for (i, c) in configs.iter().enumerate() {
            let r = run(c).map_err(rampart_stream::Error::from)?;
            if !a.json {
                eprintln!(
                    "rep {rep} {:<5} flows {:>7} par {:<9} batching {:<5} chaining {:<5} {:>10}tuples/s",
                    format!("{:?}", r.pipeline).to_lowercase(),
                    r.flows,
                    r.parallelism,
                    r.batching,
                    r.chaining,
                    si(r.tuples_per_s)
                );
            }
            runs[i].push(r);
        }
    }
    #[derive(serde::Serialize)]
    struct Row {
        #[serde(flatten)]
        median: BenchResult,
        repeat: usize,
        runs_tuples_per_s: Vec<f64>,
        runs_tuples_per_cpu_s: Vec<f64>,
        median_tuples_per_cpu_s: f64,
        cpus: usize,
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    // rampart's best full-pipeline medians per flow count (tuples/s and
    // tuples per CPU-s, each the best over the configurations), for the ratios.
    let best = |f: u32, per: fn(&BenchResult) -> f64| {
        configs
            .iter()
            .zip(&runs)
            .filter(|(c, _)| c.flows == f && c.pipeline == BenchPipeline::Full)
            .map(|(_, rs)| med(rs.iter().map(per).collect()))
            .fold(0.0, f64::max)
    };
    #[derive(serde::Serialize)]
    struct PeerRow {
        event_type: &'static str,
        #[serde(flatten)]
        median: super::timely_peer::TimelyResult,
        repeat: usize,
        runs_tuples_per_s: Vec<f64>,
        runs_tuples_per_cpu_s: Vec<f64>,
        median_tuples_per_cpu_s: f64,
        /// rampart's best full-pipeline configuration (median tuples/s) ÷ this.
        rampart_best_over_peer: f64,
        /// The same per CPU-second (what each costs, not how much CPU it got).
        rampart_best_over_peer_per_cpu_s: f64,
        cpus: usize,
    }
    for (i, rs) in peer_runs.into_iter().enumerate() {
        let raw: Vec<f64> = rs.iter().map(|r| r.tuples_per_s).collect();
        let raw_cpu: Vec<f64> = rs.iter().map(|r| r.tuples_per_cpu_s).collect();
        let m = med(raw.clone());
        let m_cpu = med(raw_cpu.clone());
        let mut row = rs
            .iter()
            .find(|r| r.tuples_per_s == m)
            .cloned()
            .unwrap_or_else(|| rs[0].clone());
        row.tuples_per_s = m;
        let f = peers[i].0;
        let ratio = best(f, |r| r.tuples_per_s) / m.max(f64::EPSILON);
        let ratio_cpu = best(f, |r| r.tuples_per_cpu_s) / m_cpu.max(f64::EPSILON);
        if a.json {
            print_json(&PeerRow {
                event_type: "peer",
                median: row,
                repeat: rs.len(),
                runs_tuples_per_s: raw,
                runs_tuples_per_cpu_s: raw_cpu,
                median_tuples_per_cpu_s: m_cpu,
                rampart_best_over_peer: ratio,
                rampart_best_over_peer_per_cpu_s: ratio_cpu,
                cpus,
            })?;
        } else {
            println!(
                "peer  timely-dataflow {} flows {:>7} workers {} median {:>10}tuples/s, {:>10}tuples per CPU-s; rampart's best full pipeline {:.2}x ({:.2}x per CPU-s)",
                row.version,
                row.flows,
                row.workers,
                si(m),
                si(m_cpu),
                ratio,
                ratio_cpu
            );
        }
    }
    for rs in runs {
        let mut v: Vec<f64> = rs.iter().map(|r| r.tuples_per_s).collect();
        let raw = v.clone();
        let mut c: Vec<f64> = rs.iter().map(|r| r.tuples_per_cpu_s).collect();
        let raw_cpu = c.clone();
        c.sort_by(f64::total_cmp);
        let med_cpu = c[c.len() / 2];
        v.sort_by(f64::total_cmp);
        let med = v[v.len() / 2];
        let mut m = rs
            .iter()
            .find(|r| r.tuples_per_s == med)
            .cloned()
            .unwrap_or_else(|| rs[0].clone());
        m.tuples_per_s = med;
        if a.json {
            print_json(&Row {
                median: m,
                repeat: rs.len(),
                runs_tuples_per_s: raw,
                runs_tuples_per_cpu_s: raw_cpu,
                median_tuples_per_cpu_s: med_cpu,
                cpus,
            })?;
        } else {
            println!(
                "{:<5} flows {:>7} parallelism {:<9} batching {:<5} chaining {:<5} median {:>10}tuples/s, {:>10}tuples per CPU-s ({} threads)",
                format!("{:?}", m.pipeline).to_lowercase(),
                m.flows,
                m.parallelism,
                m.batching,
                m.chaining,
                si(m.tuples_per_s),
                si(med_cpu),
                m.threads
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every configuration runs; every flow that passed the filter ends in
    /// one partial window at the end, plus one result per 1,000 of its tuples.
    #[test]
    fn configurations_run_and_count_every_flow() {
        for bytes in [32, 56] {
            for c in standard_configs(1024, 64, 0.05, bytes) {
                let r = run(&c).unwrap();
                assert!(r.tuples > 0 && r.tuples_per_s > 0.0, "{c:?}");
                assert_eq!(r.tuple_bytes, bytes);
                if c.pipeline == BenchPipeline::Full {
                    // 922 of the 1,024 flows are TCP or UDP.
                    assert!(
                        r.windows >= 922 && r.windows <= 922 + r.tuples / 1000,
                        "{c:?}: {} windows",
                        r.windows
                    );
                }
            }
        }
    }
}
