//! `rampart bench stream-host`: flow monitoring on a server, against what a
//! host user would otherwise run. The lab's `host` serves nginx; the lab
//! generator sends the same traffic (64-byte UDP or TCP, `--flows`
//! sources, `--pps`) from `wan` to host0, and each feed runs flowmeter (or,
//! for the peer, its own flow accounting) on host0:
//!
//! - `tap-tuples`: the tap (`xdp_stream_tap`) with a tuple per packet
//!   through a BPF ring buffer per CPU, every frame passed on;
//! - `tap-aggregate`: the tap keeping per-connection counters per second
//!   in its aggregation table, read in place by userspace;
//! - `afxdp-raw`: `xdp_stream_rx` redirecting every frame of both RX queues
//!   to AF_XDP sockets, parsed in userspace — it takes the frames
//!   (`--consume`; without it the source is refused, which is checked);
//! - `peer-softflowd`: softflowd (libpcap, AF_PACKET), the flow exporter a
//!   Debian host user installs.
//!
//! Per repetition, every feed in turn (the baselines first): ingest
//! phases (the generator for `--seconds`; the busy time of every CPU
//! around it — wall time less `/proc/stat` idle, iowait and steal, which
//! the tickless idle code keeps exactly; what the feed analysed) and
//! service phases (wrk against nginx for `--wrk-seconds`, no generator).
//! Two baselines without a monitor open each repetition: `baseline` (the
//! frames go to the stack, as they do with the taps and softflowd) and
//! `baseline-taken` (an XDP program drops every frame: the stack never
//! sees them, as with AF_XDP, which takes them). Each monitor's phases
//! come in pairs, without it just before with it: this VM's busy time and
//! nginx's rate drift by more than a tap costs over the minutes of a
//! repetition.
//!
//! - `host_cpu_s` = busy CPU seconds of the ingest with the feed − those
//!   of the ingest without a monitor just before (`baseline_busy_cpu_s`):
//!   everything the feed changes on the host (XDP, the kernel's AF_XDP
//!   copies, ring buffer and map work, the app's threads, softflowd) — for
//!   `afxdp-raw` less the stack work it takes away from the host (the host
//!   stops receiving: that is not a saving);
//! - `monitor_cpu_s` = what the monitor itself costs: `host_cpu_s`, and
//!   for `afxdp-raw` plus that stack work (`baseline` − `baseline-taken`
//!   of the repetition);
//! - `packets_per_cpu_s` = packets analysed ÷ `monitor_cpu_s`
//!   (`packets_per_host_cpu_s` ÷ `host_cpu_s` is printed beside it);
//! - `service_rps_ratio` = wrk's requests/s with the feed ÷ without
//!   (`service_rps_off`, the run just before).
//!
//! Medians over repetitions; the bar's ratios are medians of the ratios
//! inside each repetition.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::topology::{self, UpOptions};
use rampart_lab::web::{Nginx, Wrk};
use rampart_lab::Lab;
use rampart_stream::apps::flowmeter;
use rampart_stream::engine::{Pipeline, RunStats};
use rampart_stream::offload::{self, Target};
use rampart_stream::source::afxdp::{AfXdpConfig, AfXdpSource};
use rampart_stream::source::tap::{TapConfig, TapMode, TapSource};
use rampart_stream::source::{AnySource, Applied, PacketSource};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::out::{print_json, si};
use crate::report::{self, BarChart, Machine};

/// What `rampart bench stream-host` measures.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// Seconds of generator traffic per ingest phase.
    pub seconds: f64,
    /// Seconds of wrk per service phase.
    pub wrk_seconds: f64,
    /// wrk connections.
    pub wrk_conns: u32,
    /// Repetitions.
    pub repeat: usize,
    /// Distinct flows (generator source addresses).
    pub flows: u32,
    /// Offered packets per second.
    pub pps: f64,
    /// `udp` or `ack` (TCP).
    pub proto: Proto,
    /// One JSON object per run and per feed, then a summary.
    pub json: bool,
    /// Also write runs.csv, feeds.csv, summary.json and PNG plots here.
    pub out: Option<PathBuf>,
}

/// The feeds, in the order each repetition runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    Baseline,
    BaselineTaken,
    TapTuples,
    TapAggregate,
    AfxdpRaw,
    PeerSoftflowd,
}

impl Feed {
    fn name(self) -> &'static str {
        match self {
            Self::Baseline => "baseline",
            Self::BaselineTaken => "baseline-taken",
            Self::TapTuples => "tap-tuples",
            Self::TapAggregate => "tap-aggregate",
            Self::AfxdpRaw => "afxdp-raw",
            Self::PeerSoftflowd => "peer-softflowd",
        }
    }
    const ALL: [Feed; 6] = [
        Feed::Baseline,
        Feed::BaselineTaken,
        Feed::TapTuples,
        Feed::TapAggregate,
        Feed::AfxdpRaw,
        Feed::PeerSoftflowd,
    ];
}

#[derive(Debug, Clone, Serialize)]
struct Run {
    event_type: &'static str,
    feed: &'static str,
    rep: usize,
    seconds: f64,
    packets_offered: u64,
    packets_analyzed: u64,
    lost_pct: f64,
    /// Busy CPU seconds of every CPU during the ingest phase.
    busy_cpu_s: f64,
    /// The same without a monitor, just before (the baselines: their own).
    baseline_busy_cpu_s: f64,
    /// ... minus `baseline_busy_cpu_s`.
    host_cpu_s: f64,
    /// ... plus, for AF_XDP, the stack work it takes from the host.
    monitor_cpu_s: f64,
    /// Packets analysed per `monitor_cpu_s`, the CPU taken as at least one
    /// /proc/stat tick per CPU (null for the baselines).
    packets_per_cpu_s: Option<f64>,
    /// Packets analysed per `host_cpu_s` (the same floor).
    packets_per_host_cpu_s: Option<f64>,
    /// `monitor_cpu_s` was below that floor: `packets_per_cpu_s` is a lower
    /// bound (the feed cost less than the counters can tell).
    cpu_below_resolution: bool,
    service_rps: f64,
    /// wrk's requests/s without a monitor, just before `service_rps`.
    service_rps_off: f64,
    service_rps_ratio: f64,
    flow_records: u64,
}

#[derive(Debug, Clone, Serialize)]
struct FeedSummary {
    event_type: &'static str,
    feed: &'static str,
    repeat: usize,
    packets_offered: f64,
    packets_analyzed: f64,
    lost_pct: f64,
    host_cpu_s: f64,
    monitor_cpu_s: f64,
    packets_per_cpu_s: f64,
    packets_per_host_cpu_s: f64,
    service_rps: f64,
    service_rps_ratio: f64,
    runs_packets_per_cpu_s: Vec<f64>,
    runs_service_rps_ratio: Vec<f64>,
    /// Repetitions whose monitor CPU was below the counters' resolution.
    runs_cpu_below_resolution: usize,
}

#[derive(Debug, Clone, Serialize)]
struct Bar {
    tap_aggregate_over_afxdp_raw: f64,
    tap_aggregate_over_peer: f64,
    tap_tuples_over_afxdp_raw: f64,
    aggregate_at_least_3x_afxdp: bool,
    aggregate_at_least_5x_peer: bool,
    tuples_at_least_1x_afxdp: bool,
    taps_keep_095_of_the_service: bool,
    afxdp_refused_without_consume: bool,
    met: bool,
}

#[derive(Debug, Clone, Serialize)]
struct HostRatios {
    tap_aggregate_over_afxdp_raw: f64,
    tap_tuples_over_afxdp_raw: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    event_type: &'static str,
    flows: u32,
    pps: f64,
    proto: String,
    seconds: f64,
    wrk_seconds: f64,
    repeat: usize,
    /// Medians of the per-repetition ratios (packets per monitor CPU-second).
    bar: Bar,
    /// The same ratios per host CPU-second (AF_XDP credited with the
    /// stack work it takes away from the host).
    per_host_cpu: HostRatios,
    afxdp_refusal: String,
    machine: Machine,
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

/// The CPUs' clock: when it was read, and their idle + iowait + steal
/// ticks (USER_HZ) then.
///
/// Busy time is the wall time of every CPU less that. The user, system and
/// softirq columns of /proc/stat are sampled at each timer tick (this
/// kernel: HZ 250, no IRQ time accounting), and a paced generator that
/// wakes on tick boundaries aliases with them: the same run read 0.7 or
/// 5 busy CPU-seconds. Idle time is kept exactly by the tickless idle
/// code, so wall − idle is what the CPUs really did.
struct CpuClock {
    at: Instant,
    not_busy: u64,
}

fn cpu_clock(ncpu: usize) -> CpuClock {
    let not_busy = (0..ncpu)
        .map(|c| {
            let t = rampart_lab::hostcpu::cpu_ticks(c);
            t.idle + t.steal
        })
        .sum();
    CpuClock {
        at: Instant::now(),
        not_busy,
    }
}

/// Busy CPU-seconds of every CPU between two readings.
fn busy_s(a: &CpuClock, b: &CpuClock, ncpu: usize) -> f64 {
    let wall = b.at.duration_since(a.at).as_secs_f64() * ncpu as f64;
    let idle =
        b.not_busy.saturating_sub(a.not_busy) as f64 / rampart_lab::hostcpu::user_hz() as f64;
    (wall - idle).max(0.0)
}

/// A running feed.
enum Running {
    None,
    /// An XDP program that drops every frame (`baseline-taken`).
    Drop(rampart_dataplane::xdp::XdpLink, std::os::fd::OwnedFd),
    App {
        src: AnySource,
        stop: Arc<AtomicBool>,
        handle:
            std::thread::JoinHandle<std::result::Result<RunStats, rampart_stream::engine::Error>>,
        records: Arc<AtomicU64>,
    },
    Peer {
        child: Child,
        ctl: PathBuf,
        ns: String,
    },
}

struct Ctx<'a> {
    lab: &'a Lab,
    work: &'a Path,
}

fn tap_source(lab: &Lab, mode: TapMode) -> Result<AnySource> {
    let g = flowmeter::graph(&flowmeter::FlowmeterConfig::default());
    let plan = offload::plan_tap(
        &g,
        Target::HostXdp,
        mode == TapMode::Aggregate,
        Path::new(rampart_bpf::XDP_STREAM_OBJ),
    )?;
    Ok(AnySource::Tap(TapSource::open(TapConfig {
        netns: Some(lab.host_ns()),
        iface: topology::HOST_IF.into(),
        mode,
        epoch: plan.tap_epoch(),
        offload: plan.config.clone(),
        applied: Applied {
            app: Some(plan.app.clone()),
            ops: plan
                .offloaded
                .iter()
                .filter(|o| *o != "source")
                .cloned()
                .collect(),
            partition: None,
        },
        ..TapConfig::default()
    })?))
}

fn afxdp_config(lab: &Lab, consume: bool) -> AfXdpConfig {
    AfXdpConfig {
        netns: Some(lab.host_ns()),
        iface: topology::HOST_IF.into(),
        // Every queue: a monitor of the interface sees all its traffic.
        queues: 2,
        frames: 16_384,
        ring: 8192,
        consume,
        ..AfXdpConfig::default()
    }
}

fn start(c: &Ctx<'_>, feed: Feed) -> Result<Running> {
    let src = match feed {
        Feed::Baseline => return Ok(Running::None),
        Feed::BaselineTaken => {
            use libbpf_rs::skel::{OpenSkel, SkelBuilder};
            use std::os::fd::AsFd;
            let skel = rampart_bpf::xdp_drop::XdpDropSkelBuilder::default()
                .open(rampart_dataplane::skel::object_storage())
                .map_err(|e| Error::Failed(format!("opening xdp_drop: {e}")))?
                .load()
                .map_err(|e| Error::Failed(format!("loading xdp_drop: {e}")))?;
            let fd = skel
                .progs
                .xdp_drop
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| Error::Failed(format!("xdp_drop fd: {e}")))?;
            let link = rampart_dataplane::xdp::XdpLink::attach(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                Some(&c.lab.host_ns()),
                topology::HOST_IF,
                rampart_dataplane::xdp::XdpMode::Native,
            )?;
            return Ok(Running::Drop(link, fd));
        }
        Feed::PeerSoftflowd => return start_softflowd(c),
        Feed::TapTuples => tap_source(c.lab, TapMode::Tuples)?,
        Feed::TapAggregate => tap_source(c.lab, TapMode::Aggregate)?,
        Feed::AfxdpRaw => AnySource::AfXdp(AfXdpSource::open(afxdp_config(c.lab, true))?),
    };
    let records = Arc::new(AtomicU64::new(0));
    let r2 = Arc::clone(&records);
    let p: Pipeline = flowmeter::build(
        src.clone(),
        &flowmeter::FlowmeterConfig::default(),
        move |r: Option<flowmeter::FlowRecord>| {
            if r.is_some() {
                r2.fetch_add(1, Ordering::Relaxed);
            }
        },
    )?;
    let stop = p.cancel_flag();
    let handle = std::thread::spawn(move || p.run());
    Ok(Running::App {
        src,
        stop,
        handle,
        records,
    })
}

fn start_softflowd(c: &Ctx<'_>) -> Result<Running> {
    let ns = c.lab.host_ns();
    let ctl = c.work.join("softflowd.ctl");
    let pid = c.work.join("softflowd.pid");
    let _ = std::fs::remove_file(&ctl);
    // -d: stay in the foreground; -m: room for every flow (the default 8192
    // would expire flows all the time, as a user sizing it would avoid);
    // exports go to a port nobody listens on (the export is not measured).
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            "softflowd",
            "-d",
            "-i",
            topology::HOST_IF,
        ])
        .args(["-n", "127.0.0.1:9996", "-v", "10", "-m", "262144", "-c"])
        .arg(&ctl)
        .arg("-p")
        .arg(&pid)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::Failed(format!("starting softflowd (./run installs it): {e}")))?;
    let t0 = Instant::now();
    while !ctl.exists() {
        if t0.elapsed() > Duration::from_secs(5) {
            return Err(Error::Failed(
                "softflowd did not open its control socket within 5 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Running::Peer { child, ctl, ns })
}

/// softflowd's own count of what it analysed: "Packets processed", or the
/// packets libpcap delivered (received − dropped) when it does not say.
fn softflowd_packets(ns: &str, ctl: &Path) -> Result<(u64, u64)> {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "softflowctl", "-c"])
        .arg(ctl)
        .arg("statistics")
        .output()
        .map_err(|e| Error::Failed(format!("softflowctl: {e}")))?;
    let text = String::from_utf8_lossy(&o.stdout);
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let processed = field("Packets processed:");
    let recv = field("Packets received by libpcap:");
    let drop = field("Packets dropped by libpcap:") + field("Packets dropped by interface:");
    let flows = field("Flows exported:") + field("Number of active flows:");
    Ok((
        if processed > 0 {
            processed
        } else {
            recv.saturating_sub(drop)
        },
        flows,
    ))
}

/// Stop a feed; returns (packets analysed, flow records).
fn stop(r: Running) -> Result<(u64, u64)> {
    match r {
        Running::None => Ok((0, 0)),
        Running::Drop(link, _fd) => {
            link.detach()?;
            Ok((0, 0))
        }
        Running::App {
            src,
            stop,
            handle,
            records,
        } => {
            stop.store(true, Ordering::Relaxed);
            handle
                .join()
                .map_err(|_| Error::Failed("pipeline thread panicked".into()))?
                .map_err(|e| Error::Failed(format!("stream engine: {e}")))?;
            let analysed = match &src {
                AnySource::Tap(t) => t.analysed(),
                s => s.stats().snapshot().tuples,
            };
            Ok((analysed, records.load(Ordering::Relaxed)))
        }
        Running::Peer { mut child, ctl, ns } => {
            let r = softflowd_packets(&ns, &ctl);
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns, "softflowctl", "-c"])
                .arg(&ctl)
                .arg("shutdown")
                .output();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(3) {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            r
        }
    }
}

/// What one feed measured in one repetition.
struct One {
    offered: u64,
    analysed: u64,
    busy_s: f64,
    /// Busy CPU-seconds of the same traffic without a monitor just before
    /// (None for the baselines themselves).
    base_busy_s: Option<f64>,
    rps: f64,
    rps_off: f64,
    records: u64,
    seconds: f64,
}

/// One feed, one repetition: for a monitor, an ingest phase without it
/// first (its own baseline: the host's busy time drifts by more than a tap
/// costs over the minutes of a repetition), then the ingest phase with
/// it, then the service phase without and with it.
fn one(
    c: &Ctx<'_>,
    a: &HostSpec,
    gen: &Generator,
    feed: Feed,
    cancel: &AtomicBool,
    ncpu: usize,
) -> Result<One> {
    let base_busy_s = match feed {
        Feed::Baseline | Feed::BaselineTaken => None,
        _ => Some(ingest(c, gen, Feed::Baseline, cancel, ncpu)?.2),
    };
    let (g, (analysed, records), busy_s) = ingest(c, gen, feed, cancel, ncpu)?;
    let mut o = One {
        offered: g.sent_packets,
        analysed,
        busy_s,
        base_busy_s,
        rps: 0.0,
        rps_off: 0.0,
        records,
        seconds: g.seconds,
    };
    // Service (nothing to serve while every frame is dropped).
    if feed == Feed::BaselineTaken {
        return Ok(o);
    }
    o.rps_off = service_rps(c, a)?;
    o.rps = o.rps_off;
    if feed == Feed::Baseline {
        return Ok(o);
    }
    let running = start(c, feed)?;
    std::thread::sleep(Duration::from_millis(300));
    o.rps = service_rps(c, a)?;
    stop(running)?;
    Ok(o)
}

/// The generator's traffic with `feed` running: what was sent, (packets
/// analysed, flow records), busy CPU-seconds.
fn ingest(
    c: &Ctx<'_>,
    gen: &Generator,
    feed: Feed,
    cancel: &AtomicBool,
    ncpu: usize,
) -> Result<(rampart_lab::gen::GenReport, (u64, u64), f64)> {
    let running = start(c, feed)?;
    std::thread::sleep(Duration::from_millis(300));
    let b0 = cpu_clock(ncpu);
    let g = gen.run(cancel);
    let b1 = cpu_clock(ncpu);
    // What is in flight reaches the feed (its CPU after this is not counted).
    std::thread::sleep(Duration::from_millis(1500));
    let counts = stop(running)?;
    Ok((g?, counts, busy_s(&b0, &b1, ncpu)))
}

/// wrk's requests/s against nginx on `host` for `--wrk-seconds`.
fn service_rps(c: &Ctx<'_>, a: &HostSpec) -> Result<f64> {
    let url = "http://10.10.0.2/";
    // wrk first checks the address with a blocking connect: when the feed
    // takes every frame (AF_XDP) it would wait out the kernel's SYN retries
    // (minutes). So one request first; none answered is 0 requests/s.
    if !answers(&c.lab.wan_ns(), url) {
        return Ok(0.0);
    }
    let wrk = Wrk::spawn(&c.lab.wan_ns(), url, a.wrk_seconds, a.wrk_conns, None)?;
    Ok(wrk.finish().map(|w| w.rps()).unwrap_or(0.0))
}

/// Does `url` answer 200 from `ns` (two tries of 2 s)?
fn answers(ns: &str, url: &str) -> bool {
    (0..2).any(|_| {
        Command::new("ip")
            .args(["netns", "exec", ns, "curl", "-s", "-o", "/dev/null"])
            .args(["-m", "2", "-w", "%{http_code}", url])
            .output()
            .is_ok_and(|o| o.stdout == b"200")
    })
}

fn median(v: &[f64]) -> f64 {
    report::median(v).unwrap_or(0.0)
}

/// Run `rampart bench stream-host` and print its runs, feeds and summary.
///
/// # Errors
/// Settings out of range ([`Error::Invalid`]), a missing peer or client,
/// lab, source or engine failures.
pub fn run(a: &HostSpec, cancel: &AtomicBool) -> Result<()> {
    if !(a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 600.0) {
        return Err(Error::Invalid(format!(
            "--seconds {}: use 0 < seconds <= 600",
            a.seconds
        )));
    }
    if !(a.wrk_seconds.is_finite() && a.wrk_seconds >= 1.0 && a.wrk_seconds <= 600.0) {
        return Err(Error::Invalid(format!(
            "--wrk-seconds {}: use 1 <= seconds <= 600",
            a.wrk_seconds
        )));
    }
    if a.repeat == 0 || a.repeat > 100 {
        return Err(Error::Invalid(format!(
            "--repeat {}: use 1..=100",
            a.repeat
        )));
    }
    if a.flows == 0 || a.flows > rampart_lab::gen::MAX_SOURCES {
        return Err(Error::Invalid(format!(
            "--flows {}: use 1..={}",
            a.flows,
            rampart_lab::gen::MAX_SOURCES
        )));
    }
    if !(a.pps.is_finite() && a.pps >= 1000.0) {
        return Err(Error::Invalid(format!(
            "--pps {}: use at least 1000 (a fixed offered load: every feed gets the same packets)",
            a.pps
        )));
    }
    for tool in ["softflowd", "wrk", "nginx", "curl"] {
        if !rampart_lab::web::have(tool) {
            return Err(Error::Invalid(format!(
                "{tool} is not installed: ./run deps installs it (apt-get install {})",
                if tool == "softflowd" {
                    "softflowd"
                } else {
                    tool
                }
            )));
        }
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let machine = Machine::collect();
    let prefix = rampart_lab::testing::unique_prefix("sh");
    let lab = LabGuard(Lab::new(&prefix)?);
    if !a.json {
        eprintln!("lab {prefix}: bringing it up (removed at the end)");
    }
    lab.0.up(&UpOptions::default())?;
    let work = std::env::temp_dir().join(format!("rampart-stream-host-{prefix}"));
    std::fs::create_dir_all(&work)
        .map_err(|e| Error::Failed(format!("creating {}: {e}", work.display())))?;
    let result = (|| -> Result<()> {
        let _nginx = Nginx::start(&lab.0.host_ns(), "10.10.0.2", None, &work, &lab.0.wan_ns())?;
        let c = Ctx {
            lab: &lab.0,
            work: &work,
        };
        // AF_XDP on the service interface is refused without --consume.
        let refusal = match AfXdpSource::open(afxdp_config(&lab.0, false)) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        };
        let spec = GenSpec {
            sources: a.flows,
            proto: a.proto,
            pps: Some(a.pps),
            limit: Limit::Seconds(a.seconds),
            threads: 1,
            ..GenSpec::default()
        };
        let gen = Generator::new(&lab.0, &spec)?;
        let mut runs: Vec<Run> = Vec::new();
        for rep in 0..a.repeat {
            let mut base: Option<f64> = None;
            let mut taken: Option<f64> = None;
            for feed in Feed::ALL {
                if cancel.load(Ordering::Relaxed) {
                    return Err(Error::Interrupted);
                }
                let One {
                    offered,
                    analysed,
                    busy_s,
                    base_busy_s,
                    rps,
                    rps_off,
                    records,
                    seconds: secs,
                } = one(&c, a, &gen, feed, cancel, ncpu)?;
                let rep_base = *base.get_or_insert(busy_s);
                if feed == Feed::BaselineTaken {
                    taken = Some(busy_s);
                }
                // Against the feed's own baseline, run just before it.
                let base_busy = base_busy_s.unwrap_or(rep_base);
                let host_cpu_s = busy_s - base_busy;
                let monitor_cpu_s = match feed {
                    // Less the stack work AF_XDP takes away from the host
                    // (baseline − baseline-taken of this repetition).
                    Feed::AfxdpRaw => host_cpu_s + (rep_base - taken.unwrap_or(rep_base)),
                    _ => host_cpu_s,
                };
                // One /proc/stat tick per CPU is the resolution: a feed that
                // cost less is counted as costing that much (a lower bound
                // on its rate, flagged), never as free or negative.
                let floor = ncpu as f64 / rampart_lab::hostcpu::user_hz() as f64;
                let baseline = matches!(feed, Feed::Baseline | Feed::BaselineTaken);
                let per = |cpu: f64| (!baseline).then(|| analysed as f64 / cpu.max(floor));
                let (analysed, lost) = if baseline {
                    (0, 0.0)
                } else {
                    (
                        analysed,
                        100.0 * offered.saturating_sub(analysed) as f64 / offered.max(1) as f64,
                    )
                };
                let r = Run {
                    event_type: "run",
                    feed: feed.name(),
                    rep,
                    seconds: secs,
                    packets_offered: offered,
                    packets_analyzed: analysed,
                    lost_pct: lost,
                    busy_cpu_s: busy_s,
                    baseline_busy_cpu_s: base_busy,
                    host_cpu_s,
                    monitor_cpu_s,
                    packets_per_cpu_s: per(monitor_cpu_s),
                    packets_per_host_cpu_s: per(host_cpu_s),
                    cpu_below_resolution: !baseline && monitor_cpu_s < floor,
                    service_rps: rps,
                    service_rps_off: rps_off,
                    service_rps_ratio: if feed == Feed::BaselineTaken {
                        0.0
                    } else {
                        rps / rps_off.max(f64::EPSILON)
                    },
                    flow_records: records,
                };
                if a.json {
                    print_json(&r)?;
                } else {
                    eprintln!(
                        "rep {rep} {:<15} analysed {:>9} of {:>9} ({:>5.1}% lost), busy {:>5.2} s, host CPU {:>6.2} s, monitor CPU {:>6.2} s, {:>9}packets/CPU-s, service {:>8.0} req/s ({:.2} of {:.0} without)",
                        r.feed,
                        r.packets_analyzed,
                        r.packets_offered,
                        r.lost_pct,
                        r.busy_cpu_s,
                        r.host_cpu_s,
                        r.monitor_cpu_s,
                        r.packets_per_cpu_s.map_or("-".into(), si),
                        r.service_rps,
                        r.service_rps_ratio,
                        r.service_rps_off
                    );
                }
                runs.push(r);
            }
        }
        report_all(a, &runs, &refusal, &machine)
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn report_all(a: &HostSpec, runs: &[Run], refusal: &str, machine: &Machine) -> Result<()> {
    let feeds: Vec<FeedSummary> = Feed::ALL[2..]
        .iter()
        .map(|f| {
            let rs: Vec<&Run> = runs.iter().filter(|r| r.feed == f.name()).collect();
            let m = |g: fn(&Run) -> f64| median(&rs.iter().map(|r| g(r)).collect::<Vec<_>>());
            FeedSummary {
                event_type: "feed",
                feed: f.name(),
                repeat: rs.len(),
                packets_offered: m(|r| r.packets_offered as f64),
                packets_analyzed: m(|r| r.packets_analyzed as f64),
                lost_pct: m(|r| r.lost_pct),
                host_cpu_s: m(|r| r.host_cpu_s),
                monitor_cpu_s: m(|r| r.monitor_cpu_s),
                packets_per_cpu_s: m(|r| r.packets_per_cpu_s.unwrap_or(0.0)),
                packets_per_host_cpu_s: m(|r| r.packets_per_host_cpu_s.unwrap_or(0.0)),
                service_rps: m(|r| r.service_rps),
                service_rps_ratio: m(|r| r.service_rps_ratio),
                runs_packets_per_cpu_s: rs
                    .iter()
                    .map(|r| r.packets_per_cpu_s.unwrap_or(0.0))
                    .collect(),
                runs_service_rps_ratio: rs.iter().map(|r| r.service_rps_ratio).collect(),
                runs_cpu_below_resolution: rs.iter().filter(|r| r.cpu_below_resolution).count(),
            }
        })
        .collect();
    // Ratios inside each repetition (where both are measurable), then their median.
    let ratio_by = |num: Feed, den: Feed, host: bool| -> f64 {
        let v: Vec<f64> = (0..a.repeat)
            .filter_map(|rep| {
                let get = |f: Feed| {
                    runs.iter()
                        .find(|r| r.rep == rep && r.feed == f.name())
                        .and_then(|r| {
                            if host {
                                r.packets_per_host_cpu_s
                            } else {
                                r.packets_per_cpu_s
                            }
                        })
                };
                Some(get(num)? / get(den)?)
            })
            .collect();
        median(&v)
    };
    let ratio = |num: Feed, den: Feed| ratio_by(num, den, false);
    let feed = |f: Feed| feeds.iter().find(|x| x.feed == f.name());
    let rps = |f: Feed| feed(f).map_or(0.0, |x| x.service_rps_ratio);
    let agg_afxdp = ratio(Feed::TapAggregate, Feed::AfxdpRaw);
    let agg_peer = ratio(Feed::TapAggregate, Feed::PeerSoftflowd);
    let tup_afxdp = ratio(Feed::TapTuples, Feed::AfxdpRaw);
    let refused = refusal.contains("--consume");
    let host_ratios = HostRatios {
        tap_aggregate_over_afxdp_raw: ratio_by(Feed::TapAggregate, Feed::AfxdpRaw, true),
        tap_tuples_over_afxdp_raw: ratio_by(Feed::TapTuples, Feed::AfxdpRaw, true),
    };
    let bar = Bar {
        tap_aggregate_over_afxdp_raw: agg_afxdp,
        tap_aggregate_over_peer: agg_peer,
        tap_tuples_over_afxdp_raw: tup_afxdp,
        aggregate_at_least_3x_afxdp: agg_afxdp >= 3.0,
        aggregate_at_least_5x_peer: agg_peer >= 5.0,
        tuples_at_least_1x_afxdp: tup_afxdp >= 1.0,
        taps_keep_095_of_the_service: rps(Feed::TapTuples) >= 0.95
            && rps(Feed::TapAggregate) >= 0.95,
        afxdp_refused_without_consume: refused,
        met: false,
    };
    let bar = Bar {
        met: bar.aggregate_at_least_3x_afxdp
            && bar.aggregate_at_least_5x_peer
            && bar.tuples_at_least_1x_afxdp
            && bar.taps_keep_095_of_the_service
            && bar.afxdp_refused_without_consume,
        ..bar
    };
    let summary = Summary {
        event_type: "summary",
        flows: a.flows,
        pps: a.pps,
        proto: format!("{:?}", a.proto).to_lowercase(),
        seconds: a.seconds,
        wrk_seconds: a.wrk_seconds,
        repeat: a.repeat,
        bar,
        per_host_cpu: host_ratios,
        afxdp_refusal: refusal.to_string(),
        machine: machine.clone(),
    };
    if a.json {
        for f in &feeds {
            print_json(f)?;
        }
        print_json(&summary)?;
    } else {
        for f in &feeds {
            eprintln!(
                "{:<15} {:>9}packets/CPU-s ({:>9} per host CPU-s)  lost {:>5.1}%  monitor CPU {:>6.2} s  service {:.2}{}",
                f.feed,
                si(f.packets_per_cpu_s),
                si(f.packets_per_host_cpu_s),
                f.lost_pct,
                f.monitor_cpu_s,
                f.service_rps_ratio,
                if f.runs_cpu_below_resolution > 0 {
                    format!(
                        "  ({} of {} runs below the CPU counters' resolution: a lower bound)",
                        f.runs_cpu_below_resolution, f.repeat
                    )
                } else {
                    String::new()
                }
            );
        }
        let b = &summary.bar;
        eprintln!(
            "tap-aggregate / afxdp-raw {:.2}x (bar 3), / peer {:.2}x (bar 5); tap-tuples / afxdp-raw {:.2}x (bar 1); service kept by the taps: {}; afxdp refused without --consume: {} — bar {}",
            b.tap_aggregate_over_afxdp_raw,
            b.tap_aggregate_over_peer,
            b.tap_tuples_over_afxdp_raw,
            b.taps_keep_095_of_the_service,
            b.afxdp_refused_without_consume,
            if b.met { "met" } else { "NOT met" }
        );
    }
    if let Some(dir) = &a.out {
        write_out(dir, runs, &feeds, &summary, machine)?;
    }
    Ok(())
}

fn write_out(
    dir: &Path,
    runs: &[Run],
    feeds: &[FeedSummary],
    summary: &Summary,
    machine: &Machine,
) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Failed(format!("creating {}: {e}", dir.display())))?;
    report::write_csv(
        &dir.join("runs.csv"),
        &[
            "feed",
            "rep",
            "packets_offered",
            "packets_analyzed",
            "lost_pct",
            "busy_cpu_s",
            "baseline_busy_cpu_s",
            "host_cpu_s",
            "monitor_cpu_s",
            "packets_per_cpu_s",
            "packets_per_host_cpu_s",
            "service_rps",
            "service_rps_off",
            "service_rps_ratio",
        ],
        &runs
            .iter()
            .map(|r| {
                vec![
                    r.feed.to_string(),
                    r.rep.to_string(),
                    r.packets_offered.to_string(),
                    r.packets_analyzed.to_string(),
                    format!("{:.3}", r.lost_pct),
                    format!("{:.3}", r.busy_cpu_s),
                    format!("{:.3}", r.baseline_busy_cpu_s),
                    format!("{:.3}", r.host_cpu_s),
                    format!("{:.3}", r.monitor_cpu_s),
                    r.packets_per_cpu_s
                        .map_or(String::new(), |x| format!("{x:.0}")),
                    r.packets_per_host_cpu_s
                        .map_or(String::new(), |x| format!("{x:.0}")),
                    format!("{:.1}", r.service_rps),
                    format!("{:.1}", r.service_rps_off),
                    format!("{:.4}", r.service_rps_ratio),
                ]
            })
            .collect::<Vec<_>>(),
    )?;
    report::write_csv(
        &dir.join("feeds.csv"),
        &[
            "feed",
            "packets_per_cpu_s",
            "packets_per_host_cpu_s",
            "lost_pct",
            "host_cpu_s",
            "monitor_cpu_s",
            "service_rps_ratio",
        ],
        &feeds
            .iter()
            .map(|f| {
                vec![
                    f.feed.to_string(),
                    format!("{:.0}", f.packets_per_cpu_s),
                    format!("{:.0}", f.packets_per_host_cpu_s),
                    format!("{:.3}", f.lost_pct),
                    format!("{:.3}", f.host_cpu_s),
                    format!("{:.3}", f.monitor_cpu_s),
                    format!("{:.4}", f.service_rps_ratio),
                ]
            })
            .collect::<Vec<_>>(),
    )?;
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| Error::Failed(format!("summary JSON: {e}")))?;
    std::fs::write(dir.join("summary.json"), json)
        .map_err(|e| Error::Failed(format!("writing summary.json: {e}")))?;
    let cats: Vec<String> = feeds.iter().map(|f| f.feed.to_string()).collect();
    report::bar_chart(
        &dir.join("stream-host-packets-per-cpu.png"),
        &BarChart {
            title: "Flow monitoring on a server: packets analysed per host CPU-second",
            y_label: "packets / CPU-s (median)",
            categories: &cats,
            series: &[
                (
                    "per monitor CPU-s".to_string(),
                    feeds.iter().map(|f| f.packets_per_cpu_s).collect(),
                ),
                (
                    "per host CPU-s".to_string(),
                    feeds.iter().map(|f| f.packets_per_host_cpu_s).collect(),
                ),
            ],
        },
        machine,
    )?;
    report::bar_chart(
        &dir.join("stream-host-service.png"),
        &BarChart {
            title: "nginx requests/s with the monitor on, over off",
            y_label: "service_rps_ratio (median)",
            categories: &cats,
            series: &[(
                "requests/s ratio".to_string(),
                feeds.iter().map(|f| f.service_rps_ratio).collect(),
            )],
        },
        machine,
    )?;
    Ok(())
}
