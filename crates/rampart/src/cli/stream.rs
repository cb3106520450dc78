//! `rampart stream run APP --source ...` and `rampart stream plan`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use rampart_stream::apps::{flowmeter, portscan, synflood, EngineOpts};
use rampart_stream::engine::{Pipeline, RunStats};
use rampart_stream::export::ipfix::Exporter;
use rampart_stream::offload::{self, AppGraph, Target};
use rampart_stream::source::tap;
use rampart_stream::source::xdp_tuple::{XdpTupleConfig, XdpTupleSource};
use rampart_stream::source::{self, AnySource, PacketSource, SourceReport};

use super::util::{out_block, out_line, print_json, si};

#[derive(Debug, Subcommand)]
pub enum StreamCmd {
    /// Run an analytics app on a packet source until the source ends (or Ctrl-C).
    Run(Box<RunArgs>),
    /// Which of an app's operators run in XDP on a target; checks the
    /// target's limits against the built program.
    Plan(PlanArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TsArg {
    /// The driver's RX timestamp when it has one, else bpf_ktime_get_ns.
    RxMeta,
    /// bpf_ktime_get_ns (a program that is not bound to the device).
    Software,
}

impl From<TsArg> for offload::Timestamps {
    fn from(t: TsArg) -> Self {
        match t {
            TsArg::RxMeta => offload::Timestamps::RxMeta,
            TsArg::Software => offload::Timestamps::Software,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TargetArg {
    /// XDP in the host driver.
    HostXdp,
    /// Netronome nfp SmartNIC profile (checked against the object; EMULATED: no nfp here).
    Nfp,
}

impl From<TargetArg> for Target {
    fn from(t: TargetArg) -> Self {
        match t {
            TargetArg::HostXdp => Target::HostXdp,
            TargetArg::Nfp => Target::Nfp,
        }
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The app.
    #[arg(value_enum)]
    pub app: App,
    /// Offload target.
    #[arg(long, value_enum, default_value = "host-xdp")]
    pub target: TargetArg,
    /// How records reach userspace: the tap (ring buffers / a table read in place,
    /// frames passed on) or AF_XDP (the frame becomes the record).
    #[arg(long, value_enum, default_value = "tap")]
    pub via: Via,
    /// tuples, or (the tap) per-connection counters kept in XDP
    /// [default: aggregate with the tap, tuples with AF_XDP].
    #[arg(long, value_enum)]
    pub offload: Option<PlanOffload>,
    /// --via afxdp: source replicas (AF_XDP sockets per RX queue on host-xdp; RX queues on nfp).
    #[arg(long, default_value_t = 1)]
    pub sources: u32,
    /// Replicas of the keyed operators.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// xdp_stream_tap: analyse and pass every frame on.
    Tap,
    /// xdp_stream: the frame becomes the record, sent over AF_XDP.
    Afxdp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanOffload {
    /// Parse and filter in XDP; a tuple per frame.
    Tuples,
    /// The tap also keeps per-connection counters in XDP.
    Aggregate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum App {
    /// Flow records (EVE flow JSON lines, IPFIX).
    Flowmeter,
    /// Threshold Random Walk scanner detection.
    Portscan,
    /// Incomplete TCP handshakes per destination per window.
    Synflood,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Contact {
    /// A new responder address (the paper).
    Host,
    /// A new responder address and port.
    Service,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OffloadArg {
    /// Userspace parses every frame (pcap, synthetic, afxdp).
    Off,
    /// XDP parses and filters; tuples reach userspace (xdp: ring buffer,
    /// summed per connection every 10 ms by the reader; afxdp: the frame
    /// becomes the record).
    Tuples,
    /// `tuples` (kept for scripts).
    On,
    /// XDP also keeps per-connection counts, read in place at the end of each epoch (flowmeter: a fifth of its idle timeout, 1-4 s; portscan, synflood: 1 s; xdp: only).
    Aggregate,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The app.
    #[arg(value_enum)]
    pub app: App,
    /// xdp:[NETNS/]IFACE[,seconds=S][,packets=P][,connections=N][,connections6=N][,table_mib=M]
    /// (the tap: a server's own interface; every frame still reaches the
    /// host; the aggregation tables hold N IPv4 and N IPv6 connections per
    /// CPU, defaults 65536 and 16384, within M MiB, default 64) |
    /// afxdp:[NETNS/]IFACE[,queues=Q][,seconds=S][,packets=P] (TAKES every frame
    /// of the bound queues: for dedicated capture ports; needs --consume on an
    /// interface with addresses) | pcap:FILE[,replicas=N][,pace=SPEED] |
    /// synthetic:flows=N,tuples=M[,replicas=R]
    #[arg(long)]
    pub source: String,
    /// JSON lines on stdout (EVE/Zeek field names), then one stats object.
    #[arg(long)]
    pub json: bool,
    /// What runs in XDP. Default: aggregate on an xdp: source, off otherwise.
    #[arg(long, value_enum)]
    pub offload: Option<OffloadArg>,
    /// afxdp: take the frames of an interface that carries addresses (the
    /// host stops receiving them: ARP, the services' traffic, everything).
    #[arg(long)]
    pub consume: bool,
    /// afxdp with --offload tuples: source replicas, i.e. AF_XDP sockets per
    /// RX queue (default: the number of queues).
    #[arg(long)]
    pub sources: Option<u32>,
    /// afxdp with --offload tuples: record timestamps from the driver's RX
    /// metadata when it has them, or software time only [default: rx-meta].
    #[arg(long, value_enum)]
    pub timestamps: Option<TsArg>,
    /// flowmeter: also export IPFIX over UDP to HOST[:PORT] (port 4739 by default).
    #[arg(long)]
    pub ipfix: Option<String>,
    /// Serve Prometheus metrics on ADDR:PORT (/metrics) while running.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Replicas of the keyed operators.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Output batch size (1 = no batching).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Do not fuse operators into one thread.
    #[arg(long)]
    pub no_chaining: bool,
    /// flowmeter: idle timeout, seconds [default: 15].
    #[arg(long)]
    pub idle_timeout: Option<f64>,
    /// flowmeter: active timeout, seconds [default: 1800].
    #[arg(long)]
    pub active_timeout: Option<f64>,
    /// portscan: θ0 = Pr[success | benign] [default: 0.8].
    #[arg(long)]
    pub theta0: Option<f64>,
    /// portscan: θ1 = Pr[success | scanner] [default: 0.2].
    #[arg(long)]
    pub theta1: Option<f64>,
    /// portscan: α, the false-positive bound [default: 0.01].
    #[arg(long)]
    pub alpha: Option<f64>,
    /// portscan: β, the detection probability [default: 0.99].
    #[arg(long)]
    pub beta: Option<f64>,
    /// portscan: seconds without an answer after which an attempt failed [default: 3].
    #[arg(long)]
    pub response_timeout: Option<f64>,
    /// portscan: seconds (event time) after which an idle host's walk is forgotten [default: 600].
    #[arg(long)]
    pub host_idle: Option<f64>,
    /// portscan: what counts as a first contact [default: service].
    #[arg(long, value_enum)]
    pub first_contact: Option<Contact>,
    /// synflood: window, seconds [default: 10].
    #[arg(long)]
    pub window: Option<f64>,
    /// synflood: incomplete handshakes per destination per window that alert [default: 200].
    #[arg(long)]
    pub threshold: Option<u64>,
}

impl RunArgs {
    /// Every option given that `app` does not take: one error naming them.
    fn check_app_options(&self) -> Result<()> {
        let given = |name: &'static str, on: bool| on.then_some(name);
        let (fm, ps, sf) = match self.app {
            App::Flowmeter => (true, false, false),
            App::Portscan => (false, true, false),
            App::Synflood => (false, false, true),
        };
        let wrong: Vec<&str> = [
            given("--idle-timeout", !fm && self.idle_timeout.is_some()),
            given("--active-timeout", !fm && self.active_timeout.is_some()),
            given("--ipfix", !fm && self.ipfix.is_some()),
            given("--theta0", !ps && self.theta0.is_some()),
            given("--theta1", !ps && self.theta1.is_some()),
            given("--alpha", !ps && self.alpha.is_some()),
            given("--beta", !ps && self.beta.is_some()),
            given("--response-timeout", !ps && self.response_timeout.is_some()),
            given("--host-idle", !ps && self.host_idle.is_some()),
            given("--first-contact", !ps && self.first_contact.is_some()),
            given("--window", !sf && self.window.is_some()),
            given("--threshold", !sf && self.threshold.is_some()),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !wrong.is_empty() {
            super::util::usage_bail!(
                "{} {} not apply to {}: see `rampart stream run --help` for which app takes what",
                wrong.join(", "),
                if wrong.len() == 1 { "does" } else { "do" },
                self.app.name()
            );
        }
        Ok(())
    }
}

impl App {
    fn name(self) -> &'static str {
        match self {
            Self::Flowmeter => "flowmeter",
            Self::Portscan => "portscan",
            Self::Synflood => "synflood",
        }
    }
}

/// `HOST[:PORT]` of an IPFIX collector (4739, the IANA port, by default).
fn ipfix_addr(s: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let with_port = if s.parse::<std::net::IpAddr>().is_ok() {
        // A bare address (an IPv6 one has colons of its own).
        if s.contains(':') {
            format!("[{s}]:4739")
        } else {
            format!("{s}:4739")
        }
    } else if s
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        s.to_string()
    } else {
        format!("{s}:4739")
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("--ipfix {s}: not HOST[:PORT]"))?
        .next()
        .with_context(|| format!("--ipfix {s}: the name has no address"))
}

fn opt_secs(name: &str, v: Option<f64>, default: Duration) -> Result<Duration> {
    v.map_or(Ok(default), |v| secs(name, v))
}

fn secs(name: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0 && v < 1e9) {
        super::util::usage_bail!("--{name} {v}: use a number of seconds > 0");
    }
    Ok(Duration::from_secs_f64(v))
}

/// Everything a run prints at the end.
#[derive(Debug, serde::Serialize)]
struct Stats<S: serde::Serialize> {
    event_type: &'static str,
    app: &'static str,
    source: SourceReport,
    engine: RunStats,
    #[serde(flatten)]
    app_stats: S,
}

fn run_pipeline(p: Pipeline, cancel: &AtomicBool) -> Result<RunStats> {
    let flag = p.cancel_flag();
    let done = Arc::new(AtomicBool::new(false));
    let d2 = Arc::clone(&done);
    // Forward Ctrl-C to the graph's sources.
    std::thread::scope(|s| {
        s.spawn(|| {
            while !d2.load(Ordering::Relaxed) {
                // Nobody reads the output any more (`… | head`): stop as on Ctrl-C.
                if cancel.load(Ordering::Relaxed) || super::util::stdout_closed() {
                    flag.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let r = p.run();
        done.store(true, Ordering::Relaxed);
        r
    })
    .context("stream engine")
}

/// The app settings of a run (built before the source: the offload plan needs the graph).
struct AppCfgs {
    flowmeter: Option<flowmeter::FlowmeterConfig>,
    portscan: Option<portscan::PortscanConfig>,
    synflood: Option<synflood::SynfloodConfig>,
}

fn app_cfgs(a: &RunArgs) -> Result<AppCfgs> {
    let engine = EngineOpts {
        workers: a.workers,
        batch: a.batch,
        chaining: !a.no_chaining,
    };
    let mut c = AppCfgs {
        flowmeter: None,
        portscan: None,
        synflood: None,
    };
    match a.app {
        App::Flowmeter => {
            let d = flowmeter::FlowmeterConfig::default();
            c.flowmeter = Some(flowmeter::FlowmeterConfig {
                idle: opt_secs("idle-timeout", a.idle_timeout, d.idle)?,
                active: opt_secs("active-timeout", a.active_timeout, d.active)?,
                engine,
            });
        }
        App::Portscan => {
            let d = portscan::PortscanConfig::default();
            let p = portscan::PortscanConfig {
                theta0: a.theta0.unwrap_or(d.theta0),
                theta1: a.theta1.unwrap_or(d.theta1),
                alpha: a.alpha.unwrap_or(d.alpha),
                beta: a.beta.unwrap_or(d.beta),
                response_timeout: opt_secs(
                    "response-timeout",
                    a.response_timeout,
                    d.response_timeout,
                )?,
                host_idle: opt_secs("host-idle", a.host_idle, d.host_idle)?,
                first_contact: match a.first_contact {
                    None => d.first_contact,
                    Some(Contact::Host) => portscan::FirstContact::Host,
                    Some(Contact::Service) => portscan::FirstContact::Service,
                },
                engine,
            };
            p.validate()?;
            c.portscan = Some(p);
        }
        App::Synflood => {
            let d = synflood::SynfloodConfig::default();
            c.synflood = Some(synflood::SynfloodConfig {
                window: opt_secs("window", a.window, d.window)?,
                threshold: a.threshold.unwrap_or(d.threshold),
                engine,
            });
        }
    }
    Ok(c)
}

impl AppCfgs {
    fn graph(&self) -> Option<AppGraph> {
        self.flowmeter
            .as_ref()
            .map(flowmeter::graph)
            .or_else(|| self.portscan.as_ref().map(portscan::graph))
            .or_else(|| self.synflood.as_ref().map(synflood::graph))
    }
}

/// The object the planner checks: the one this binary embeds.
fn object() -> &'static std::path::Path {
    std::path::Path::new(rampart_bpf::XDP_STREAM_OBJ)
}

/// `afxdp --offload tuples`: plan for host XDP, open the AF_XDP record source.
fn offload_source(
    spec: &str,
    consume: bool,
    sources: Option<u32>,
    ts: TsArg,
    graph: &AppGraph,
    quiet: bool,
) -> Result<AnySource> {
    let mut rx = source::parse_afxdp(spec)?;
    rx.consume = consume;
    let sources = sources.unwrap_or(rx.queues);
    let plan = offload::plan(graph, Target::HostXdp, sources, object())?;
    if !quiet {
        eprintln!("{plan}");
    }
    let mut cfg = XdpTupleConfig::from_plan(&plan, &rx)?;
    cfg.offload.timestamps = ts.into();
    Ok(AnySource::XdpTuple(XdpTupleSource::open(cfg)?))
}

/// `xdp:`: plan the tap for host XDP and open it.
fn tap_source(spec: &str, aggregate: bool, graph: &AppGraph, quiet: bool) -> Result<AnySource> {
    let mut cfg = tap::parse_spec(spec)?;
    let plan = offload::plan_tap(graph, Target::HostXdp, aggregate, object())?;
    if !quiet {
        eprintln!("{plan}");
    }
    cfg.mode = if aggregate {
        tap::TapMode::Aggregate
    } else {
        tap::TapMode::Tuples
    };
    cfg.offload = plan.config.clone();
    cfg.epoch = plan.tap_epoch();
    cfg.applied = rampart_stream::source::Applied {
        app: Some(plan.app.clone()),
        ops: plan
            .offloaded
            .iter()
            .filter(|o| *o != "source")
            .cloned()
            .collect(),
        partition: None,
    };
    Ok(AnySource::Tap(tap::TapSource::open(cfg)?))
}

fn plan_cmd(a: &PlanArgs) -> Result<()> {
    let engine = EngineOpts {
        workers: a.workers,
        ..EngineOpts::default()
    };
    let g = match a.app {
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
    };
    let p = match a.via {
        Via::Tap => {
            if a.sources != 1 {
                super::util::usage_bail!("--sources is for --via afxdp: the tap has one source replica (one reader of its rings)");
            }
            offload::plan_tap(
                &g,
                a.target.into(),
                a.offload != Some(PlanOffload::Tuples),
                object(),
            )?
        }
        Via::Afxdp => {
            if a.offload == Some(PlanOffload::Aggregate) {
                super::util::usage_bail!(
                    "--offload aggregate needs --via tap: AF_XDP delivers a record per frame"
                );
            }
            offload::plan(&g, a.target.into(), a.sources, object())?
        }
    };
    if a.json {
        print_json(&p)
    } else {
        println!("{p}");
        Ok(())
    }
}

pub fn run(cmd: StreamCmd, cancel: &AtomicBool) -> Result<()> {
    let a = match cmd {
        StreamCmd::Run(a) => *a,
        StreamCmd::Plan(p) => return plan_cmd(&p),
    };
    a.check_app_options()?;
    let cfgs = app_cfgs(&a)?;
    let kind = a.source.split_once(':').map_or(a.source.as_str(), |x| x.0);
    let offload = a.offload.unwrap_or(if kind == "xdp" {
        OffloadArg::Aggregate
    } else {
        OffloadArg::Off
    });
    if kind == "afxdp" {
        let mut rx = source::parse_afxdp(&a.source)?;
        rx.consume = a.consume;
        // Before the app is built: the refusal is the first thing said.
        source::afxdp::check_capture_port(&rx)?;
    } else if a.consume {
        super::util::usage_bail!(
            "--consume is for --source afxdp: (the other sources take no frames)"
        );
    }
    let afxdp_offload = kind == "afxdp" && matches!(offload, OffloadArg::On | OffloadArg::Tuples);
    if !afxdp_offload && (a.sources.is_some() || a.timestamps.is_some()) {
        super::util::usage_bail!("--sources and --timestamps are for --source afxdp: with --offload tuples (otherwise one source replica per AF_XDP queue: queues=Q)");
    }
    let src = match (kind, offload) {
        ("xdp", OffloadArg::Off) => {
            super::util::usage_bail!(
            "--source xdp: always runs the parse in XDP: use --offload tuples or aggregate (the default)"
        )
        }
        ("xdp", o) => {
            let g = cfgs.graph().context("app graph")?;
            tap_source(&a.source, o == OffloadArg::Aggregate, &g, a.json)?
        }
        (_, OffloadArg::Aggregate) => {
            super::util::usage_bail!(
            "--offload aggregate keeps counters in XDP for the tap: use --source xdp:[NETNS/]IFACE"
        )
        }
        ("afxdp", OffloadArg::On | OffloadArg::Tuples) => {
            let g = cfgs.graph().context("app graph")?;
            offload_source(
                &a.source,
                a.consume,
                a.sources,
                a.timestamps.unwrap_or(TsArg::RxMeta),
                &g,
                a.json,
            )?
        }
        (_, OffloadArg::On | OffloadArg::Tuples) => {
            super::util::usage_bail!(
                "--offload {}: needs a live source (--source xdp:IFACE or afxdp:IFACE)",
                if offload == OffloadArg::On {
                    "on"
                } else {
                    "tuples"
                }
            )
        }
        ("afxdp", OffloadArg::Off) => {
            let mut rx = source::parse_afxdp(&a.source)?;
            rx.consume = a.consume;
            AnySource::AfXdp(source::afxdp::AfXdpSource::open(rx)?)
        }
        (_, OffloadArg::Off) => source::parse_spec(&a.source)?,
    };
    let listen = a.listen;
    let src_for_metrics = src.clone();
    let kind = if a.app == App::Flowmeter {
        "records"
    } else {
        "alerts"
    };
    let metrics = move |p: &Pipeline| -> Result<Option<rampart_service::Server>> {
        listen
            .map(|addr| {
                super::stream_metrics::serve(
                    addr,
                    src_for_metrics.clone(),
                    Some(p.queue_gauges()),
                    kind,
                )
            })
            .transpose()
    };
    let stats = src.stats();
    let json = a.json;
    match a.app {
        App::Flowmeter => {
            let cfg = cfgs.flowmeter.context("flowmeter settings")?;
            let ipfix = match &a.ipfix {
                Some(c) => Some(Arc::new(Mutex::new(Exporter::connect(ipfix_addr(c)?, 1)?))),
                None => None,
            };
            let err: Arc<Mutex<Option<String>>> = Arc::default();
            let summary = Arc::new(Mutex::new(flowmeter::Summary::default()));
            let (ip2, e2, s2) = (ipfix.clone(), Arc::clone(&err), Arc::clone(&summary));
            let p = flowmeter::build(src, &cfg, move |r: Option<flowmeter::FlowRecord>| {
                let Some(r) = r else {
                    if let Some(x) = &ip2 {
                        if let Err(e) = x.lock().map(|mut x| x.flush()).unwrap_or(Ok(())) {
                            e2.lock()
                                .map(|mut v| v.get_or_insert(e.to_string()).clone())
                                .ok();
                        }
                    }
                    return;
                };
                super::stream_metrics::OUTPUTS.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut s) = s2.lock() {
                    s.add(&r);
                }
                if json {
                    out_line(&serde_json::to_string(&r.event()).unwrap_or_default());
                } else {
                    let ev = r.event();
                    out_line(&format!(
                        "{:<9} {}:{} -> {}:{}  {}/{} pkts {}/{} B  {} .. {}  {:?} ({})",
                        ev.proto,
                        ev.src_ip,
                        ev.src_port,
                        ev.dest_ip,
                        ev.dest_port,
                        r.packets,
                        r.rev_packets,
                        r.bytes,
                        r.rev_bytes,
                        ev.flow.start,
                        ev.flow.end,
                        ev.flow.state,
                        ev.flow.reason
                    ));
                }
                if let Some(x) = &ip2 {
                    if let Err(e) = x.lock().map(|mut x| x.export(r)).unwrap_or(Ok(())) {
                        e2.lock()
                            .map(|mut v| v.get_or_insert(e.to_string()).clone())
                            .ok();
                    }
                }
            })?;
            let _m = metrics(&p)?;
            let st = run_pipeline(p, cancel)?;
            if let Some(e) = err.lock().ok().and_then(|e| e.clone()) {
                bail!("IPFIX export: {e}");
            }
            let sum = summary.lock().map(|s| s.clone()).unwrap_or_default();
            if json {
                #[derive(serde::Serialize)]
                struct F {
                    flows: flowmeter::Summary,
                    ipfix_messages: Option<u64>,
                }
                let m = ipfix
                    .as_ref()
                    .and_then(|x| x.lock().ok().map(|x| x.messages));
                out_line(&serde_json::to_string(&Stats {
                    event_type: "stats",
                    app: "flowmeter",
                    source: stats.snapshot(),
                    engine: st,
                    app_stats: F {
                        flows: sum,
                        ipfix_messages: m,
                    },
                })?);
            } else {
                let s = stats.snapshot();
                let mut b = format!(
                    "{} flows, {} packets, {} bytes from {} frames ({} without a tuple) in {:.2} s ({}tuples/s)\n",
                    sum.flows,
                    sum.packets,
                    sum.bytes,
                    s.frames,
                    s.frames - s.tuples,
                    st.seconds,
                    // The source's count: with the tap, the engine's
                    // records are connection parts, not packets.
                    si(s.tuples as f64 / st.seconds)
                );
                for (p, c) in &sum.protocols {
                    b.push_str(&format!(
                        "  {p:<9} {} flows, {} packets, {} bytes\n",
                        c.flows, c.packets, c.bytes
                    ));
                }
                out_block(&b);
            }
        }
        App::Portscan => {
            let cfg = cfgs.portscan.context("portscan settings")?;
            let n = Arc::new(Mutex::new(0u64));
            let n2 = Arc::clone(&n);
            let p = portscan::build(src, &cfg, move |x: Option<portscan::ScanAlert>| {
                if let Some(x) = x {
                    super::stream_metrics::OUTPUTS.fetch_add(1, Ordering::Relaxed);
                    *n2.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    let ev = x.event();
                    if json {
                        out_line(&serde_json::to_string(&ev).unwrap_or_default());
                    } else {
                        out_line(&format!("{} {} {}", ev.timestamp, ev.note, ev.msg));
                    }
                }
            })?;
            let _m = metrics(&p)?;
            let st = run_pipeline(p, cancel)?;
            let alerts = *n.lock().unwrap_or_else(|e| e.into_inner());
            report(json, "portscan", &stats.snapshot(), st, alerts)?;
        }
        App::Synflood => {
            let cfg = cfgs.synflood.context("synflood settings")?;
            let n = Arc::new(Mutex::new(0u64));
            let n2 = Arc::clone(&n);
            let p = synflood::build(src, &cfg, move |x: Option<synflood::FloodAlert>| {
                if let Some(x) = x {
                    super::stream_metrics::OUTPUTS.fetch_add(1, Ordering::Relaxed);
                    *n2.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    let ev = x.event();
                    if json {
                        out_line(&serde_json::to_string(&ev).unwrap_or_default());
                    } else {
                        out_line(&format!("{} {} {}", ev.timestamp, ev.note, ev.msg));
                    }
                }
            })?;
            let _m = metrics(&p)?;
            let st = run_pipeline(p, cancel)?;
            let alerts = *n.lock().unwrap_or_else(|e| e.into_inner());
            report(json, "synflood", &stats.snapshot(), st, alerts)?;
        }
    }
    Ok(())
}

fn report(
    json: bool,
    app: &'static str,
    s: &SourceReport,
    st: RunStats,
    alerts: u64,
) -> Result<()> {
    if json {
        #[derive(serde::Serialize)]
        struct A {
            alerts: u64,
        }
        out_line(&serde_json::to_string(&Stats {
            event_type: "stats",
            app,
            source: *s,
            engine: st,
            app_stats: A { alerts },
        })?);
        return Ok(());
    }
    out_block(&format!(
        "{alerts} alert(s); {} frames, {} tuples in {:.2} s ({}tuples/s)\n",
        s.frames,
        s.tuples,
        st.seconds,
        si(s.tuples as f64 / st.seconds)
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ipfix_addr;

    /// `--ipfix HOST[:PORT]`: the IANA port when none is given, for names,
    /// IPv4 and bare IPv6 addresses; a given port kept.
    #[test]
    fn ipfix_collector_port_defaults_to_4739() {
        for (arg, want) in [
            ("127.0.0.1", "127.0.0.1:4739"),
            ("127.0.0.1:9995", "127.0.0.1:9995"),
            ("::1", "[::1]:4739"),
            ("[::1]:9995", "[::1]:9995"),
        ] {
            assert_eq!(ipfix_addr(arg).unwrap().to_string(), want, "{arg}");
        }
        assert_eq!(ipfix_addr("localhost").unwrap().port(), 4739);
        assert!(ipfix_addr("127.0.0.1:99999").is_err());
    }
}
