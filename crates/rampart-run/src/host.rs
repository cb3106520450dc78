//! The running daemon: a chain on every interface, the enabled
//! applications as its stages, one API, one `/metrics`, one alert stream.
//!
//! Each application runs as it does alone — the ddos daemon
//! (`rampart_ddosd::Handle`), the tenant host agent, a stream app on the
//! tap — with the chain in its config instead of an interface of its own.
//! Their routes are mounted under `/ddos` and `/tenant` of the one server.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rampart_dataplane::chain::Chain;
use rampart_service::alert::{Action, Alert, Alerts, App};
use rampart_service::{Metrics, Routes, Service, StateCollector, Tokens};
use rampart_stream::apps::config::{AppName, StreamConfig, TapFeed};
use rampart_stream::apps::{flowmeter, portscan, synflood};
use rampart_stream::engine::Pipeline;
use rampart_stream::offload::{self, AppGraph, OpDesc, OpKind, Target};
use rampart_stream::source::tap::{TapConfig, TapMode, TapSource};
use rampart_stream::source::tee::tee;
use rampart_stream::source::{AnySource, Applied, PacketSource};

use crate::config::{Config, InterfaceConfig};
use crate::error::{Error, Result};

/// The stream stage of one interface: the tap's reader and the apps.
struct StreamRun {
    /// Stops the tap (its reader detaches it and ends; the apps then end
    /// with their input, flushing their windows).
    cancel: Arc<AtomicBool>,
    /// The tap's reader first, then the apps (when several share the tap).
    threads: Vec<JoinHandle<()>>,
}

impl StreamRun {
    fn stop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// What the stream apps have produced (the API's and /metrics' view).
#[derive(Debug, Default)]
pub struct StreamCounts {
    /// Flow records the flowmeter emitted.
    pub flows: AtomicU64,
    /// Alerts (scanners, SYN floods).
    pub alerts: AtomicU64,
}

/// The daemon.
pub struct Host {
    chains: Vec<Chain>,
    ddos: Option<rampart_ddosd::Handle>,
    tenant: Option<rampart_tenant::agent::AgentThread>,
    stream: Vec<StreamRun>,
    server: Option<rampart_service::Server>,
    /// What the stream apps produced.
    pub stream_counts: Arc<StreamCounts>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("chains", &self.chains)
            .finish()
    }
}

fn svc_err(e: impl std::fmt::Display) -> Error {
    Error::Config(e.to_string())
}

impl Host {
    /// Attach a chain to every interface and start the enabled
    /// applications as its stages, then the API. On error everything
    /// started is stopped again (a ddos stage stays: it protects the host).
    ///
    /// # Errors
    /// A missing interface, attach or load failures, a busy API address.
    pub fn start(cfg: &Config) -> Result<Self> {
        cfg.check_system()?;
        let mut host = Self {
            chains: Vec::new(),
            ddos: None,
            tenant: None,
            stream: Vec::new(),
            server: None,
            stream_counts: Arc::default(),
        };
        match host.start_inner(cfg) {
            Ok(()) => Ok(host),
            Err(e) => {
                host.stop_inner();
                Err(e)
            }
        }
    }

    fn start_inner(&mut self, cfg: &Config) -> Result<()> {
        for i in &cfg.interfaces {
            self.chains
                .push(Chain::attach(i.netns.as_deref(), &i.name, i.mode())?);
        }
        let tokens = Tokens::from_file(cfg.server.token_file.as_deref()).map_err(svc_err)?;
        let mut routes = Routes::new();
        // One registry and one alert stream: the ddos daemon's when it runs.
        let (metrics, alerts) = if let Some(i) =
            cfg.interfaces.first().filter(|_| cfg.ddos.is_some())
        {
            let mut d = cfg.ddos_for(i).unwrap_or_default();
            d.chain = Some(self.chains[0].clone());
            let h = rampart_ddosd::Handle::spawn(d)?;
            routes = routes.nest(
                "/ddos",
                rampart_ddosd::api::routes(rampart_ddosd::api::ApiState::of(&h)),
            );
            let m = (h.metrics.registry.clone(), h.alerts.clone());
            self.ddos = Some(h);
            m
        } else {
            let m = Metrics::new();
            let a = Alerts::open(&cfg.alerts, &[App::Stream, App::Tenant], &m).map_err(svc_err)?;
            (m, a)
        };
        if let Some(s) = &cfg.stream {
            for (n, i) in cfg.interfaces.iter().enumerate() {
                self.stream.push(start_stream(
                    s,
                    i,
                    &self.chains[n],
                    alerts.clone(),
                    self.stream_counts.clone(),
                )?);
            }
            let c = self.stream_counts.clone();
            metrics
                .register(
                    StateCollector::new(move |out| {
                        let mut s = rampart_service::Samples::default();
                        s.set(
                            "rampart_stream_flows_total",
                            &[],
                            c.flows.load(Ordering::Relaxed) as f64,
                        );
                        s.set(
                            "rampart_stream_alerts_total",
                            &[],
                            c.alerts.load(Ordering::Relaxed) as f64,
                        );
                        out.extend(s);
                        Ok(())
                    })
                    .counter(
                        "rampart_stream_flows_total",
                        "Flow records the flowmeter emitted",
                        &[],
                    )
                    .counter(
                        "rampart_stream_alerts_total",
                        "Alerts of the stream apps",
                        &[],
                    ),
                )
                .map_err(svc_err)?;
        }
        if let Some(mut t) = cfg.tenant_config() {
            t.infra.chains = self.chains.clone();
            let tenants: HashMap<String, u32> = t
                .tenants
                .iter()
                .filter_map(|x| Some((x.name.clone(), x.id?)))
                .collect();
            let compiler = rampart_tenant::compiler::Compiler::new(t.limits.policy())?;
            let agent = rampart_tenant::agent::start(t)?;
            metrics
                .register(rampart_tenant::metrics::collector(agent.handle()))
                .map_err(svc_err)?;
            routes = routes.nest(
                "/tenant",
                rampart_tenant::api::routes(Arc::new(rampart_tenant::api::ApiState {
                    agent: agent.handle(),
                    compiler,
                    tenants,
                })),
            );
            self.tenant = Some(agent);
        }
        if cfg.server.api_addr().map_err(svc_err)?.is_some() {
            self.server = Some(
                rampart_service::Server::start(
                    &cfg.server,
                    Service {
                        name: "rampart",
                        title: "rampart run",
                        version: env!("CARGO_PKG_VERSION"),
                        description: "One daemon for the host: the ddos routes under /ddos, the tenant routes under /tenant.",
                        routes,
                        metrics,
                        tokens,
                        apps: rampart_service::Apps::none(),
                    },
                )
                .map_err(svc_err)?,
            );
        }
        Ok(())
    }

    /// The API's address, if it serves one.
    pub fn api_addr(&self) -> Option<std::net::SocketAddr> {
        self.server
            .as_ref()
            .and_then(rampart_service::Server::api_addr)
    }

    /// The chains (one per interface).
    pub fn chains(&self) -> &[Chain] {
        &self.chains
    }

    /// Stop: the API, the stream apps (their stage leaves the chain), the
    /// tenant agent (its stage too), the ddos loop — whose stage stays in
    /// the chain, filtering, as `rampart ddos run` leaves its filter.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
        for s in &mut self.stream {
            s.stop();
        }
        self.stream.clear();
        if let Some(t) = self.tenant.take() {
            t.stop();
        }
        if let Some(d) = self.ddos.take() {
            let _ = d.stop();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

fn scan_alert(iface: &str, a: &portscan::ScanAlert) -> Alert {
    let mut x = Alert::rule(App::Stream, "port_scan", "portscan", Action::Allowed)
        .with_detail("first_contacts", a.details.first_contacts)
        .with_detail("failures", a.details.failures);
    x.in_iface = Some(iface.to_string());
    if let Ok(ip) = a.src.to_string().parse::<IpAddr>() {
        x = x.with_src(ip);
    }
    x
}

/// The graph the tap is planned for: the app's own, or with several
/// apps on one tap what every app can take — the parsed frames, summed
/// into connection parts with the aggregate feed, no app's Filter (each
/// app filters its own records).
fn tap_graph(s: &StreamConfig) -> Result<AppGraph> {
    if let [app] = s.apps[..] {
        return Ok(match app {
            AppName::Flowmeter => flowmeter::graph(&s.flowmeter()?),
            AppName::Portscan => portscan::graph(&s.portscan()?),
            AppName::Synflood => synflood::graph(&s.synflood()?),
        });
    }
    Ok(AppGraph {
        app: "shared tap".into(),
        ops: vec![
            OpDesc::new("source", OpKind::Source, "frames → tuples"),
            OpDesc::new("part", OpKind::Part, "Map: tuple → connection part"),
        ],
    })
}

/// App `app` on `src`, counting what it produces and sending its alerts.
fn build_app<S: PacketSource>(
    app: AppName,
    src: S,
    s: &StreamConfig,
    iface: &str,
    alerts: &Alerts,
    counts: &Arc<StreamCounts>,
) -> Result<Pipeline> {
    let c = counts.clone();
    Ok(match app {
        AppName::Flowmeter => flowmeter::build(
            src,
            &s.flowmeter()?,
            move |r: Option<flowmeter::FlowRecord>| {
                if r.is_some() {
                    c.flows.fetch_add(1, Ordering::Relaxed);
                }
            },
        )?,
        AppName::Portscan => {
            let (alerts, iface) = (alerts.clone(), iface.to_string());
            portscan::build(
                src,
                &s.portscan()?,
                move |x: Option<portscan::ScanAlert>| {
                    if let Some(x) = x {
                        c.alerts.fetch_add(1, Ordering::Relaxed);
                        alerts.emit(scan_alert(&iface, &x));
                    }
                },
            )?
        }
        AppName::Synflood => synflood::build(
            src,
            &s.synflood()?,
            move |x: Option<synflood::FloodAlert>| {
                if x.is_some() {
                    c.alerts.fetch_add(1, Ordering::Relaxed);
                }
            },
        )?,
    })
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| Error::System(format!("starting thread {name}: {e}")))
}

/// The stream stage on interface `i`: the tap in the chain's stream slot
/// and the apps reading it. One app reads the tap on its own thread;
/// several share it through a tee (one reader thread copies every record
/// to each app's thread), so one XDP program and one ring buffer serve
/// them all.
fn start_stream(
    s: &StreamConfig,
    i: &InterfaceConfig,
    chain: &Chain,
    alerts: Alerts,
    counts: Arc<StreamCounts>,
) -> Result<StreamRun> {
    let graph = tap_graph(s)?;
    let aggregate = s.feed == TapFeed::Aggregate;
    let plan = offload::plan_tap(
        &graph,
        Target::HostXdp,
        aggregate,
        std::path::Path::new(rampart_bpf::XDP_STREAM_OBJ),
    )
    .map_err(|e| Error::Config(format!("stream: {e}")))?;
    let tap = TapSource::open(TapConfig {
        netns: i.netns.clone(),
        iface: i.name.clone(),
        mode: if aggregate {
            TapMode::Aggregate
        } else {
            TapMode::Tuples
        },
        offload: plan.config.clone(),
        applied: Applied {
            app: (s.apps.len() == 1).then(|| plan.app.clone()),
            ops: plan
                .offloaded
                .iter()
                .filter(|o| *o != "source")
                .cloned()
                .collect(),
            partition: None,
        },
        chain: Some(chain.clone()),
        ..TapConfig::default()
    })?;
    let run = |p: Pipeline| {
        move || {
            if let Err(e) = p.run() {
                tracing::error!("stream app stopped: {e}");
            }
        }
    };
    if let [app] = s.apps[..] {
        let p = build_app(app, AnySource::Tap(tap), s, &i.name, &alerts, &counts)?;
        return Ok(StreamRun {
            cancel: p.cancel_flag(),
            threads: vec![spawn("rampart-stream", run(p))?],
        });
    }
    let (driver, branches) = tee(tap, s.apps.len())?;
    let mut apps = Vec::new();
    for (app, b) in s.apps.iter().zip(branches) {
        apps.push((app, build_app(*app, b, s, &i.name, &alerts, &counts)?));
    }
    // The apps first: if one cannot start, dropping the driver (never
    // started) ends the others' input.
    let mut threads = Vec::new();
    for (app, p) in apps {
        threads.push(spawn(&format!("rampart-{}", app_name(*app)), run(p))?);
    }
    let cancel = driver.cancel_flag();
    threads.insert(
        0,
        spawn("rampart-stream", move || {
            if let Err(e) = driver.run() {
                tracing::error!("stream tap stopped: {e}");
            }
        })?,
    );
    Ok(StreamRun { cancel, threads })
}

fn app_name(a: AppName) -> &'static str {
    match a {
        AppName::Flowmeter => "flowmeter",
        AppName::Portscan => "portscan",
        AppName::Synflood => "synflood",
    }
}
