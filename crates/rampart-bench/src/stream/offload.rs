//! `rampart bench stream`: an app on `host`, fed by the lab generator in
//! `wan`, with and without the XDP offload, in a lab the benchmark creates
//! for itself (unique prefix; removed at the end, on error and on Ctrl-C).
//!
//! Per repetition: the raw AF_XDP receive ceiling (`xdp_stream_rx` and a
//! loop that receives and returns frames without reading them), then every
//! configuration (offload × source replicas × batching), alternating. Each
//! run: open the source, start the app, run the generator at full speed
//! for `--seconds` (one thread, pinned to CPU 0, where the veth path and
//! the XDP programs also run), stop. The app's threads (and the ceiling's
//! receive loop) are pinned to the last CPU, so both modes get the same
//! CPUs. `tuples_per_s` = tuples the source handed to the engine ÷
//! generator seconds; `packets_lost` = sent − frames the source (or XDP,
//! for filtered or malformed frames) accounted for.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::topology::{self, UpOptions};
use rampart_lab::Lab;
use rampart_stream::apps::{flowmeter, portscan, synflood, EngineOpts};
use rampart_stream::engine::Pipeline;
use rampart_stream::offload::{self, Target};
use rampart_stream::source::afxdp::{AfXdpConfig, AfXdpSource};
use rampart_stream::source::xdp_tuple::{XdpTupleConfig, XdpTupleSource};
use rampart_stream::source::{AnySource, PacketSource};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::out::{print_json, si};
use crate::report::{self, BarChart, Machine};

/// The app under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum App {
    /// Flow records.
    Flowmeter,
    /// Threshold Random Walk scanner detection.
    Portscan,
    /// Incomplete TCP handshakes per destination per window.
    Synflood,
}

/// What `rampart bench stream` measures.
#[derive(Debug, Clone)]
pub struct OffloadSpec {
    /// The app.
    pub app: App,
    /// Offload modes to measure (true = on; alternated in each repetition).
    pub offload: Vec<bool>,
    /// Source replicas to measure (1..=8 each).
    pub sources: Vec<u32>,
    /// Output batching to measure: true = `batch`, false = 1.
    pub batching: Vec<bool>,
    /// Output batch size when batching is on.
    pub batch: usize,
    /// Seconds of traffic per run.
    pub seconds: f64,
    /// Repetitions.
    pub repeat: usize,
    /// Distinct flows (generator source addresses).
    pub flows: u32,
    /// Generator rate, packets per second (None: as fast as it goes).
    pub pps: Option<f64>,
    /// One JSON object per run, then one per configuration (medians).
    pub json: bool,
    /// Also write runs.csv, summary.csv and PNG plots into this directory.
    pub out: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
struct Run {
    event_type: &'static str,
    app: &'static str,
    offload: &'static str,
    sources: u32,
    workers: usize,
    batching: bool,
    batch: usize,
    rep: usize,
    flows: u32,
    seconds: f64,
    sent_packets: u64,
    sent_pps: f64,
    tuples: u64,
    tuples_per_s: f64,
    packets_lost: u64,
    lost_ratio: f64,
    afxdp_ceiling_per_s: f64,
    ratio_to_ceiling: f64,
    threads: usize,
    /// CPU seconds the app's threads used while the generator ran (user + system).
    app_cpu_s: f64,
    /// ... per tuple ingested, ns.
    app_cpu_ns_per_tuple: f64,
    timestamps: String,
    xdp: Option<offload::Counters>,
    filtered: u64,
    dropped: u64,
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    event_type: &'static str,
    app: &'static str,
    sources: u32,
    batching: bool,
    repeat: usize,
    offload_on_tuples_per_s: Option<f64>,
    offload_off_tuples_per_s: Option<f64>,
    afxdp_ceiling_per_s: f64,
    on_over_off: Option<f64>,
    on_over_ceiling: Option<f64>,
    runs_on: Vec<f64>,
    runs_off: Vec<f64>,
    runs_ceiling: Vec<f64>,
    runs_on_over_off: Vec<f64>,
    lost_ratio_on: Option<f64>,
    lost_ratio_off: Option<f64>,
    /// Median CPU time of the app's threads per tuple ingested, ns.
    app_cpu_ns_per_tuple_on: Option<f64>,
    app_cpu_ns_per_tuple_off: Option<f64>,
    machine: Machine,
}

fn app_name(a: App) -> &'static str {
    match a {
        App::Flowmeter => "flowmeter",
        App::Portscan => "portscan",
        App::Synflood => "synflood",
    }
}

/// The lab, removed when dropped (end, error, Ctrl-C).
struct LabGuard(Lab);
impl Drop for LabGuard {
    fn drop(&mut self) {
        if let Err(e) = self.0.down() {
            eprintln!("warning: removing lab {}: {e}", self.0.prefix());
        }
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t, then CPU_SET on a valid index.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn unpin(ncpu: usize) {
    // SAFETY: as above.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..ncpu {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// CPU time, ns, of every thread of this process but the calling one:
/// the app's threads while it runs. `/proc/self/task/*/schedstat` (first
/// field: time on CPU, ns) rather than `stat`'s 10 ms ticks: a run's app
/// CPU is a fraction of a second.
fn other_threads_cpu_ns() -> u64 {
    // SAFETY: plain syscall.
    let me = unsafe { libc::gettid() };
    let Ok(rd) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    rd.flatten()
        .filter(|e| e.file_name().to_str() != Some(&me.to_string()))
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|st| st.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn median(v: &[f64]) -> Option<f64> {
    report::median(v)
}

struct Ctx<'a> {
    a: &'a OffloadSpec,
    lab: &'a Lab,
    gen: &'a Generator,
    cancel: &'a AtomicBool,
    app_cpu: usize,
}

fn host_rx(lab: &Lab, queues: u32) -> AfXdpConfig {
    AfXdpConfig {
        netns: Some(lab.host_ns()),
        iface: topology::HOST_IF.into(),
        queues,
        // The lab's host0 has addresses; the benchmark's traffic is its only user.
        consume: true,
        ..AfXdpConfig::default()
    }
}

/// The raw AF_XDP receive ceiling: frames/s a receive-only loop gets.
fn ceiling(c: &Ctx<'_>) -> Result<f64> {
    let src = AfXdpSource::open(host_rx(c.lab, 1))?;
    let stop = AtomicBool::new(false);
    pin_to(c.app_cpu);
    let (n, r) = std::thread::scope(|s| {
        let h = s.spawn(|| src.receive_only(&stop));
        std::thread::sleep(Duration::from_millis(100));
        let r = c.gen.run(c.cancel);
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        (h.join(), r)
    });
    let n = n.map_err(|_| Error::Failed("receive thread panicked".into()))??;
    let r = r?;
    Ok(n as f64 / r.seconds)
}

/// Counting sink of any app's output.
fn counter<T>(n: &Arc<AtomicU64>) -> impl FnMut(Option<T>) + Clone + Send + 'static {
    let n = Arc::clone(n);
    move |x: Option<T>| {
        if x.is_some() {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn build(app: App, src: AnySource, engine: EngineOpts, out: &Arc<AtomicU64>) -> Result<Pipeline> {
    Ok(match app {
        App::Flowmeter => flowmeter::build(
            src,
            &flowmeter::FlowmeterConfig {
                engine,
                ..Default::default()
            },
            counter(out),
        )?,
        App::Portscan => portscan::build(
            src,
            &portscan::PortscanConfig {
                engine,
                ..Default::default()
            },
            counter(out),
        )?,
        App::Synflood => synflood::build(
            src,
            &synflood::SynfloodConfig {
                engine,
                ..Default::default()
            },
            counter(out),
        )?,
    })
}

fn graph(app: App, engine: EngineOpts) -> offload::AppGraph {
    match app {
        App::Flowmeter => flowmeter::graph(&flowmeter::FlowmeterConfig {
            engine,
            ..Default::default()
        }),
        App::Portscan => portscan::graph(&portscan::PortscanConfig {
            engine,
            ..Default::default()
        }),
        App::Synflood => synflood::graph(&synflood::SynfloodConfig {
            engine,
            ..Default::default()
        }),
    }
}

fn one(
    c: &Ctx<'_>,
    offload_on: bool,
    sources: u32,
    batching: bool,
    rep: usize,
    ceil: f64,
) -> Result<Run> {
    let a = c.a;
    // As many workers as source replicas in both modes (the same CPUs' worth of replicas).
    let engine = EngineOpts {
        workers: sources as usize,
        batch: if batching { a.batch } else { 1 },
        chaining: true,
    };
    let (src, tuple_src) = if offload_on {
        let plan = offload::plan(
            &graph(a.app, engine.clone()),
            Target::HostXdp,
            sources,
            std::path::Path::new(rampart_bpf::XDP_STREAM_OBJ),
        )?;
        let t = XdpTupleSource::open(XdpTupleConfig::from_plan(&plan, &host_rx(c.lab, 1))?)?;
        (AnySource::XdpTuple(t.clone()), Some(t))
    } else {
        // One socket (and replica) per RX queue: the baseline cannot steer.
        (
            AnySource::AfXdp(AfXdpSource::open(host_rx(c.lab, sources))?),
            None,
        )
    };
    let stats = src.stats();
    let out = Arc::new(AtomicU64::new(0));
    pin_to(c.app_cpu);
    let p = build(a.app, src, engine, &out)?;
    let threads = p.threads();
    let stop = p.cancel_flag();
    let h = std::thread::spawn(move || p.run());
    std::thread::sleep(Duration::from_millis(150));
    let cpu0 = other_threads_cpu_ns();
    let g = c.gen.run(c.cancel);
    // The generator's threads have ended: what is left are the app's.
    let app_cpu_s = other_threads_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, Ordering::Relaxed);
    let st = h
        .join()
        .map_err(|_| Error::Failed("pipeline thread panicked".into()))?
        .map_err(|e| Error::Failed(format!("stream engine: {e}")))?;
    let g = g?;
    let s = stats.snapshot();
    let xdp = match &tuple_src {
        Some(t) => Some(t.counters()?),
        None => None,
    };
    let timestamps = match &tuple_src {
        Some(t) => format!("{:?}", t.timestamps()).to_lowercase(),
        None => "software (userspace)".into(),
    };
    drop(tuple_src);
    let tuples = st.source_tuples;
    let accounted = s.tuples + s.filtered + s.not_ip + s.truncated + s.bad_header + s.too_deep;
    let lost = g.sent_packets.saturating_sub(accounted);
    let tps = tuples as f64 / g.seconds;
    Ok(Run {
        event_type: "run",
        app: app_name(a.app),
        offload: if offload_on { "on" } else { "off" },
        sources,
        workers: sources as usize,
        batching,
        batch: if batching { a.batch } else { 1 },
        rep,
        flows: a.flows,
        seconds: g.seconds,
        sent_packets: g.sent_packets,
        sent_pps: g.sent_pps,
        tuples,
        tuples_per_s: tps,
        packets_lost: lost,
        lost_ratio: lost as f64 / g.sent_packets.max(1) as f64,
        afxdp_ceiling_per_s: ceil,
        ratio_to_ceiling: tps / ceil.max(1.0),
        threads,
        app_cpu_s,
        app_cpu_ns_per_tuple: app_cpu_s * 1e9 / tuples.max(1) as f64,
        timestamps,
        xdp,
        filtered: s.filtered,
        dropped: s.dropped,
    })
}

/// Run `rampart bench stream` and print its runs and summaries.
///
/// # Errors
/// Settings out of range ([`Error::Invalid`]), lab, source or engine failures.
pub fn run(a: &OffloadSpec, cancel: &AtomicBool) -> Result<()> {
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
    if a.sources.is_empty() || a.sources.iter().any(|s| !(1..=8).contains(s)) {
        return Err(Error::Invalid("--sources: each must be in 1..=8".into()));
    }
    if a.flows == 0 || a.flows > rampart_lab::gen::MAX_SOURCES {
        return Err(Error::Invalid(format!(
            "--flows {}: use 1..={}",
            a.flows,
            rampart_lab::gen::MAX_SOURCES
        )));
    }
    if a.batch == 0 || a.batch > 4096 {
        return Err(Error::Invalid(format!("--batch {}: use 1..=4096", a.batch)));
    }
    if a.offload.is_empty() || a.batching.is_empty() {
        return Err(Error::Invalid(
            "--offload and --batching need at least one value each (on, off)".into(),
        ));
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let machine = Machine::collect();
    let prefix = rampart_lab::testing::unique_prefix("sb");
    let lab = LabGuard(Lab::new(&prefix)?);
    if !a.json {
        eprintln!("lab {prefix}: bringing it up (removed at the end)");
    }
    lab.0.up(&UpOptions::default())?;
    let spec = GenSpec {
        sources: a.flows,
        proto: match a.app {
            App::Flowmeter => Proto::Udp,
            App::Portscan | App::Synflood => Proto::Syn,
        },
        pps: a.pps,
        limit: Limit::Seconds(a.seconds),
        threads: 1,
        ..GenSpec::default()
    };
    let gen = Generator::new(&lab.0, &spec)?;
    let c = Ctx {
        a,
        lab: &lab.0,
        gen: &gen,
        cancel,
        app_cpu: ncpu - 1,
    };
    let mut configs = Vec::new();
    for &s in &a.sources {
        for &b in &a.batching {
            for &o in &a.offload {
                configs.push((o, s, b));
            }
        }
    }
    let mut runs: Vec<Run> = Vec::new();
    let mut ceilings = Vec::new();
    let result = (|| -> Result<()> {
        for rep in 0..a.repeat {
            let ceil = ceiling(&c)?;
            unpin(ncpu);
            ceilings.push(ceil);
            if !a.json {
                eprintln!("rep {rep}: AF_XDP receive ceiling {}frames/s", si(ceil));
            }
            for &(o, s, b) in &configs {
                if cancel.load(Ordering::Relaxed) {
                    return Err(Error::Interrupted);
                }
                let r = one(&c, o, s, b, rep, ceil);
                unpin(ncpu);
                let r = r?;
                if a.json {
                    print_json(&r)?;
                } else {
                    eprintln!(
                        "rep {rep} offload {:<3} sources {s} batching {:<5} {:>10}tuples/s ({:.0}% of the ceiling), lost {:.2}%",
                        r.offload,
                        b,
                        si(r.tuples_per_s),
                        100.0 * r.ratio_to_ceiling,
                        100.0 * r.lost_ratio
                    );
                }
                runs.push(r);
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
        }
        Ok(())
    })();
    drop(gen);
    drop(lab);
    result?;

    // Medians per (sources, batching), ratios inside each repetition.
    let mut summaries = Vec::new();
    for &s in &a.sources {
        for &b in &a.batching {
            let pick = |on: bool| -> Vec<&Run> {
                runs.iter()
                    .filter(|r| r.sources == s && r.batching == b && (r.offload == "on") == on)
                    .collect()
            };
            let (on, off) = (pick(true), pick(false));
            let v = |x: &[&Run]| x.iter().map(|r| r.tuples_per_s).collect::<Vec<_>>();
            let l = |x: &[&Run]| median(&x.iter().map(|r| r.lost_ratio).collect::<Vec<_>>());
            let cpu =
                |x: &[&Run]| median(&x.iter().map(|r| r.app_cpu_ns_per_tuple).collect::<Vec<_>>());
            let per_rep: Vec<f64> = on
                .iter()
                .filter_map(|r| {
                    off.iter()
                        .find(|o| o.rep == r.rep)
                        .map(|o| r.tuples_per_s / o.tuples_per_s.max(1.0))
                })
                .collect();
            let m_on = median(&v(&on));
            let m_off = median(&v(&off));
            let m_ceil = median(&ceilings).unwrap_or(0.0);
            let on_ceiling: Vec<f64> = on.iter().map(|r| r.ratio_to_ceiling).collect();
            summaries.push(Summary {
                event_type: "summary",
                app: app_name(a.app),
                sources: s,
                batching: b,
                repeat: a.repeat,
                offload_on_tuples_per_s: m_on,
                offload_off_tuples_per_s: m_off,
                afxdp_ceiling_per_s: m_ceil,
                on_over_off: median(&per_rep),
                on_over_ceiling: median(&on_ceiling),
                runs_on: v(&on),
                runs_off: v(&off),
                runs_ceiling: ceilings.clone(),
                runs_on_over_off: per_rep,
                lost_ratio_on: l(&on),
                lost_ratio_off: l(&off),
                app_cpu_ns_per_tuple_on: cpu(&on),
                app_cpu_ns_per_tuple_off: cpu(&off),
                machine: machine.clone(),
            });
        }
    }
    for s in &summaries {
        if a.json {
            print_json(s)?;
        } else {
            let f = |x: Option<f64>| x.map(si).unwrap_or_else(|| "-".into());
            println!(
                "{} sources {} batching {:<5} offload on {:>9}tuples/s  off {:>9}tuples/s  on/off {}  on/ceiling {}  (ceiling {}frames/s, median of {})",
                s.app,
                s.sources,
                s.batching,
                f(s.offload_on_tuples_per_s),
                f(s.offload_off_tuples_per_s),
                s.on_over_off.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into()),
                s.on_over_ceiling.map(|x| format!("{:.0}%", 100.0 * x)).unwrap_or_else(|| "-".into()),
                si(s.afxdp_ceiling_per_s),
                s.repeat
            );
        }
    }
    if let Some(dir) = &a.out {
        write_out(dir, a, &runs, &summaries, &machine)?;
    }
    Ok(())
}

fn write_out(
    dir: &std::path::Path,
    a: &OffloadSpec,
    runs: &[Run],
    sums: &[Summary],
    machine: &Machine,
) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let app = app_name(a.app);
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.app.to_string(),
                r.offload.to_string(),
                r.sources.to_string(),
                r.batching.to_string(),
                r.rep.to_string(),
                format!("{:.0}", r.sent_pps),
                format!("{:.0}", r.tuples_per_s),
                format!("{:.0}", r.afxdp_ceiling_per_s),
                format!("{:.5}", r.lost_ratio),
            ]
        })
        .collect();
    report::write_csv(
        &dir.join(format!("{app}-runs.csv")),
        &[
            "app",
            "offload",
            "sources",
            "batching",
            "rep",
            "sent_pps",
            "tuples_per_s",
            "afxdp_ceiling_per_s",
            "lost_ratio",
        ],
        &rows,
    )?;
    let cats: Vec<String> = sums
        .iter()
        .map(|s| {
            format!(
                "{} source{}, batching {}",
                s.sources,
                if s.sources == 1 { "" } else { "s" },
                if s.batching { "on" } else { "off" }
            )
        })
        .collect();
    let m = |x: Option<f64>| x.unwrap_or(0.0) / 1e6;
    let series = vec![
        (
            "offload off (raw frames, parsed in userspace)".to_string(),
            sums.iter().map(|s| m(s.offload_off_tuples_per_s)).collect(),
        ),
        (
            "offload on (tuples from XDP)".to_string(),
            sums.iter().map(|s| m(s.offload_on_tuples_per_s)).collect(),
        ),
        (
            "raw AF_XDP receive ceiling".to_string(),
            sums.iter().map(|s| s.afxdp_ceiling_per_s / 1e6).collect(),
        ),
    ];
    let title = format!(
        "stream {app}: tuples/s ingested, offload on vs off ({} flows, medians of {})",
        a.flows, a.repeat
    );
    report::bar_chart(
        &dir.join(format!("stream-offload-{app}.png")),
        &BarChart {
            title: &title,
            y_label: "M tuples/s ingested",
            categories: &cats,
            series: &series,
        },
        machine,
    )?;
    let cpu_series = vec![
        (
            "offload off (raw frames, parsed in userspace)".to_string(),
            sums.iter()
                .map(|s| s.app_cpu_ns_per_tuple_off.unwrap_or(0.0))
                .collect(),
        ),
        (
            "offload on (tuples from XDP)".to_string(),
            sums.iter()
                .map(|s| s.app_cpu_ns_per_tuple_on.unwrap_or(0.0))
                .collect(),
        ),
    ];
    let title = format!(
        "stream {app}: app CPU per tuple, offload on vs off (medians of {})",
        a.repeat
    );
    report::bar_chart(
        &dir.join(format!("stream-offload-{app}-cpu.png")),
        &BarChart {
            title: &title,
            y_label: "ns of app CPU per tuple",
            categories: &cats,
            series: &cpu_series,
        },
        machine,
    )?;
    let rows: Vec<Vec<String>> = sums
        .iter()
        .map(|s| {
            vec![
                s.app.to_string(),
                s.sources.to_string(),
                s.batching.to_string(),
                format!("{:.0}", s.offload_on_tuples_per_s.unwrap_or(0.0)),
                format!("{:.0}", s.offload_off_tuples_per_s.unwrap_or(0.0)),
                format!("{:.0}", s.afxdp_ceiling_per_s),
                format!("{:.3}", s.on_over_off.unwrap_or(0.0)),
                format!("{:.3}", s.on_over_ceiling.unwrap_or(0.0)),
                format!("{:.0}", s.app_cpu_ns_per_tuple_on.unwrap_or(0.0)),
                format!("{:.0}", s.app_cpu_ns_per_tuple_off.unwrap_or(0.0)),
            ]
        })
        .collect();
    report::write_csv(
        &dir.join(format!("{app}-summary.csv")),
        &[
            "app",
            "sources",
            "batching",
            "on_tuples_per_s",
            "off_tuples_per_s",
            "afxdp_ceiling_per_s",
            "on_over_off",
            "on_over_ceiling",
            "app_cpu_ns_per_tuple_on",
            "app_cpu_ns_per_tuple_off",
        ],
        &rows,
    )?;
    Ok(())
}
