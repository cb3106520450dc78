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
use rampart_stream::source::xdp_tuple::{XdpTupleConfig, XdpTupleSource};
use rampart_stream::source::{self, AnySource, PacketSource, SourceReport};

use super::util::{print_json, si};

#[derive(Debug, Subcommand)]
pub enum StreamCmd {
    /// Run an analytics app on a packet source until the source ends (or Ctrl-C).
    Run(RunArgs),
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
    /// Source replicas (AF_XDP sockets per RX queue on host-xdp; RX queues on nfp).
    #[arg(long, default_value_t = 1)]
    pub sources: u32,
    /// Replicas of the keyed operators.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
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

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The app.
    #[arg(value_enum)]
    pub app: App,
    /// pcap:FILE[,replicas=N][,pace=SPEED] | synthetic:flows=N,tuples=M[,replicas=R] |
    /// afxdp:[NETNS/]IFACE[,queues=Q][,seconds=S][,packets=P]
    #[arg(long)]
    pub source: String,
    /// JSON lines on stdout (EVE/Zeek field names), then one stats object.
    #[arg(long)]
    pub json: bool,
    /// Run the app's leading operators (source, FlowID, filter) in XDP and
    /// receive finished tuples (needs --source afxdp:...).
    #[arg(long, value_enum, default_value = "off")]
    pub offload: OnOff,
    /// With --offload on: source replicas, i.e. AF_XDP sockets per RX queue
    /// (default: the number of queues).
    #[arg(long)]
    pub sources: Option<u32>,
    /// With --offload on: record timestamps from the driver's RX metadata
    /// when it has them (a device-bound program), or software time only.
    #[arg(long, value_enum, default_value = "rx-meta")]
    pub timestamps: TsArg,
    /// flowmeter: also export IPFIX to this UDP collector (HOST:PORT).
    #[arg(long)]
    pub ipfix: Option<SocketAddr>,
    /// Replicas of the keyed operators.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Output batch size (1 = no batching).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Do not fuse operators into one thread.
    #[arg(long)]
    pub no_chaining: bool,
    /// flowmeter: idle timeout, seconds.
    #[arg(long, default_value_t = 15.0)]
    pub idle_timeout: f64,
    /// flowmeter: active timeout, seconds.
    #[arg(long, default_value_t = 1800.0)]
    pub active_timeout: f64,
    /// portscan: θ0 = Pr[success | benign].
    #[arg(long, default_value_t = 0.8)]
    pub theta0: f64,
    /// portscan: θ1 = Pr[success | scanner].
    #[arg(long, default_value_t = 0.2)]
    pub theta1: f64,
    /// portscan: α, the false-positive bound.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// portscan: β, the detection probability.
    #[arg(long, default_value_t = 0.99)]
    pub beta: f64,
    /// portscan: seconds without an answer after which an attempt failed.
    #[arg(long, default_value_t = 3.0)]
    pub response_timeout: f64,
    /// portscan: seconds (event time) after which an idle host's walk is forgotten.
    #[arg(long, default_value_t = 600.0)]
    pub host_idle: f64,
    /// portscan: what counts as a first contact.
    #[arg(long, value_enum, default_value = "host")]
    pub first_contact: Contact,
    /// synflood: window, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub window: f64,
    /// synflood: incomplete handshakes per destination per window that alert.
    #[arg(long, default_value_t = 200)]
    pub threshold: u64,
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

use super::util::out_line;

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
            c.flowmeter = Some(flowmeter::FlowmeterConfig {
                idle: secs("idle-timeout", a.idle_timeout)?,
                active: secs("active-timeout", a.active_timeout)?,
                engine,
            });
        }
        App::Portscan => {
            let p = portscan::PortscanConfig {
                theta0: a.theta0,
                theta1: a.theta1,
                alpha: a.alpha,
                beta: a.beta,
                response_timeout: secs("response-timeout", a.response_timeout)?,
                host_idle: secs("host-idle", a.host_idle)?,
                first_contact: match a.first_contact {
                    Contact::Host => portscan::FirstContact::Host,
                    Contact::Service => portscan::FirstContact::Service,
                },
                engine,
            };
            p.validate()?;
            c.portscan = Some(p);
        }
        App::Synflood => {
            c.synflood = Some(synflood::SynfloodConfig {
                window: secs("window", a.window)?,
                threshold: a.threshold,
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

/// `--offload on`: plan for host XDP, open the tuple source.
fn offload_source(
    spec: &str,
    sources: Option<u32>,
    ts: TsArg,
    graph: &AppGraph,
    quiet: bool,
) -> Result<AnySource> {
    let rx = source::parse_afxdp(spec)?;
    let sources = sources.unwrap_or(rx.queues);
    let plan = offload::plan(graph, Target::HostXdp, sources, object())?;
    if !quiet {
        eprintln!("{plan}");
    }
    let mut cfg = XdpTupleConfig::from_plan(&plan, &rx)?;
    cfg.offload.timestamps = ts.into();
    Ok(AnySource::XdpTuple(XdpTupleSource::open(cfg)?))
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
    let p = offload::plan(&g, a.target.into(), a.sources, object())?;
    if a.json {
        print_json(&p)
    } else {
        println!("{p}");
        Ok(())
    }
}

pub fn run(cmd: StreamCmd, cancel: &AtomicBool) -> Result<()> {
    let a = match cmd {
        StreamCmd::Run(a) => a,
        StreamCmd::Plan(p) => return plan_cmd(&p),
    };
    let cfgs = app_cfgs(&a)?;
    let src = match a.offload {
        OnOff::Off => {
            if a.sources.is_some() {
                super::util::usage_bail!("--sources is for --offload on (without it, one source replica per AF_XDP queue: queues=Q)");
            }
            source::parse_spec(&a.source)?
        }
        OnOff::On => {
            let g = cfgs.graph().context("app graph")?;
            offload_source(&a.source, a.sources, a.timestamps, &g, a.json)?
        }
    };
    let stats = src.stats();
    let json = a.json;
    match a.app {
        App::Flowmeter => {
            let cfg = cfgs.flowmeter.context("flowmeter settings")?;
            let ipfix = match a.ipfix {
                Some(c) => Some(Arc::new(Mutex::new(Exporter::connect(c, 1)?))),
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
                if let Ok(mut s) = s2.lock() {
                    s.add(&r);
                }
                if json {
                    out_line(&serde_json::to_string(&r.event()).unwrap_or_default());
                } else {
                    let ev = r.event();
                    out_line(&format!(
                        "{:<9} {}:{} -> {}:{}  {} pkts {} B  {} .. {}  ({})",
                        ev.proto,
                        ev.src_ip,
                        ev.src_port,
                        ev.dest_ip,
                        ev.dest_port,
                        r.packets,
                        r.bytes,
                        ev.flow.start,
                        ev.flow.end,
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
                print_json(&Stats {
                    event_type: "stats",
                    app: "flowmeter",
                    source: stats.snapshot(),
                    engine: st,
                    app_stats: F {
                        flows: sum,
                        ipfix_messages: m,
                    },
                })?;
            } else {
                let s = stats.snapshot();
                println!(
                    "{} flows, {} packets, {} bytes from {} frames ({} without a tuple) in {:.2} s ({}tuples/s)",
                    sum.flows,
                    sum.packets,
                    sum.bytes,
                    s.frames,
                    s.frames - s.tuples,
                    st.seconds,
                    si(st.source_tuples as f64 / st.seconds)
                );
                for (p, c) in &sum.protocols {
                    println!(
                        "  {p:<9} {} flows, {} packets, {} bytes",
                        c.flows, c.packets, c.bytes
                    );
                }
            }
        }
        App::Portscan => {
            let cfg = cfgs.portscan.context("portscan settings")?;
            let n = Arc::new(Mutex::new(0u64));
            let n2 = Arc::clone(&n);
            let p = portscan::build(src, &cfg, move |x: Option<portscan::ScanAlert>| {
                if let Some(x) = x {
                    *n2.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    let ev = x.event();
                    if json {
                        out_line(&serde_json::to_string(&ev).unwrap_or_default());
                    } else {
                        out_line(&format!("{} {} {}", ev.timestamp, ev.note, ev.msg));
                    }
                }
            })?;
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
                    *n2.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    let ev = x.event();
                    if json {
                        out_line(&serde_json::to_string(&ev).unwrap_or_default());
                    } else {
                        out_line(&format!("{} {} {}", ev.timestamp, ev.note, ev.msg));
                    }
                }
            })?;
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
        return print_json(&Stats {
            event_type: "stats",
            app,
            source: *s,
            engine: st,
            app_stats: A { alerts },
        });
    }
    println!(
        "{alerts} alert(s); {} frames, {} tuples in {:.2} s ({}tuples/s)",
        s.frames,
        s.tuples,
        st.seconds,
        si(st.source_tuples as f64 / st.seconds)
    );
    Ok(())
}
