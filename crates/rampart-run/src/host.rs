//! The running daemon: a chain on every interface, the enabled
//! applications as its stages, one API, one `/metrics`, one alert stream.
//!
//! Each application runs as it does alone — the ddos daemon
//! (`rampart_ddosd::Handle`), the tenant host agent, a stream app on the
//! tap — with the chain in its config instead of an interface of its own.
//! Their routes are mounted under `/ddos`, `/stream` and `/tenant` of the
//! one server, and the dashboard shows a panel for each one running.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use rampart_dataplane::chain::{Chain, Watch};
use rampart_service::alert::{Action, Alert, Alerts, App};
use rampart_service::reload::{to_value, ServerSide};
use rampart_service::{Metrics, RouteSlot, Routes, Service, StateCollector, Tokens};
use rampart_stream::apps::config::{AppName, StreamConfig, TapFeed};
use rampart_stream::apps::{flowmeter, portscan, synflood};
use rampart_stream::engine::Pipeline;
use rampart_stream::offload::{self, AppGraph, OpDesc, OpKind, Target};
use rampart_stream::source::tap::{TapConfig, TapMode, TapSource};
use rampart_stream::source::tee::tee;
use rampart_stream::source::{AnySource, Applied, PacketSource};
use rampart_tenant::agent::AgentHandle;

use crate::board::StreamBoard;
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

/// The running applications: what a reload changes, under one lock.
struct Stages {
    cfg: Config,
    chains: Vec<Chain>,
    ddos: Option<rampart_ddosd::Handle>,
    tenant: Option<rampart_tenant::agent::AgentThread>,
    /// The agent `/metrics` and the `/tenant` routes reach (none: the
    /// tenant stage is off).
    tenant_agent: Arc<Mutex<Option<AgentHandle>>>,
    tenant_routes: RouteSlot,
    stream: Vec<StreamRun>,
    metrics: Metrics,
    alerts: Alerts,
    counts: Arc<StreamCounts>,
    /// What the stream stage shows now (dashboard, `/stream/v1/top`).
    board: StreamBoard,
    /// The configured tenants' names: their tokens may not read the
    /// dashboard, which shows every tenant.
    tenant_names: Arc<RwLock<Vec<String>>>,
    /// The stream and tenant collectors are registered once, when their
    /// stage first starts (a registry refuses a second copy).
    stream_metrics: bool,
    tenant_metrics: bool,
}

/// The chains' watcher: re-attaches a chain whose interface was deleted
/// and created again (one log line per change).
struct ChainWatch {
    cancel: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How often the chains' attachments are checked.
const WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

impl ChainWatch {
    fn start(mut watches: Vec<Watch>) -> Result<Self> {
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = cancel.clone();
        let thread = std::thread::Builder::new()
            .name("rampart-chain-watch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for w in &mut watches {
                        w.check();
                    }
                    std::thread::sleep(WATCH_INTERVAL);
                }
            })
            .map_err(|e| Error::System(format!("starting the chain watcher: {e}")))?;
        Ok(Self {
            cancel,
            thread: Some(thread),
        })
    }

    fn stop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The daemon.
pub struct Host {
    stages: Arc<Mutex<Stages>>,
    watch: Option<ChainWatch>,
    server: Option<rampart_service::Server>,
    /// What the stream apps produced.
    pub stream_counts: Arc<StreamCounts>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("chains", &self.chains())
            .finish()
    }
}

fn svc_err(e: impl std::fmt::Display) -> Error {
    Error::Config(e.to_string())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The answer of the `/tenant` routes while the tenant stage is off.
const TENANT_OFF: &str =
    "the tenant application is not enabled: add a [tenant] section to the configuration and reload (SIGHUP)";

impl Host {
    /// Attach a chain to every interface and start the enabled
    /// applications as its stages, then the API. On error everything
    /// started is stopped again (a ddos stage stays: it protects the host).
    ///
    /// # Errors
    /// A missing interface, attach or load failures, a busy API address.
    pub fn start(cfg: &Config) -> Result<Self> {
        cfg.check_system()?;
        let mut chains = Vec::new();
        let mut watches = Vec::new();
        for i in &cfg.interfaces {
            let c = Chain::attach(i.netns.as_deref(), &i.name, i.mode())?;
            // A chain opened from its pins may sit on an interface created
            // again while no daemon ran: checked now, then every interval.
            let mut w = Watch::new(c.clone(), i.mode());
            w.check();
            watches.push(w);
            chains.push(c);
        }
        let tokens = Tokens::from_file(cfg.server.token_file.as_deref()).map_err(svc_err)?;
        let mut routes = Routes::new();
        // One registry and one alert stream: the ddos daemon's when it runs.
        let mut ddos = None;
        let (metrics, alerts) = if let Some(i) =
            cfg.interfaces.first().filter(|_| cfg.ddos.is_some())
        {
            let mut d = cfg.ddos_for(i).unwrap_or_default();
            d.chain = Some(chains[0].clone());
            let h = rampart_ddosd::Handle::spawn(d)?;
            routes = routes.nest(
                "/ddos",
                rampart_ddosd::api::routes(rampart_ddosd::api::ApiState::of(&h)),
            );
            let m = (h.metrics.registry.clone(), h.alerts.clone());
            ddos = Some(h);
            m
        } else {
            let m = Metrics::new();
            let a = Alerts::open(&cfg.alerts, &[App::Stream, App::Tenant], &m).map_err(svc_err)?;
            (m, a)
        };
        let tenant_routes = RouteSlot::new(TENANT_OFF);
        routes = routes.nest_slot("/tenant", rampart_tenant::api::unserved(), &tenant_routes);
        let counts = Arc::<StreamCounts>::default();
        let idle = cfg
            .stream
            .as_ref()
            .and_then(|s| s.flowmeter().ok())
            .map_or(std::time::Duration::from_secs(15), |f| f.idle);
        let board = StreamBoard::new(counts.clone(), idle);
        routes = routes.nest("/stream", crate::board::routes(board.clone()));
        let ddos_view = ddos
            .as_ref()
            .map(|h: &rampart_ddosd::Handle| h.view.clone());
        let mut st = Stages {
            cfg: cfg.clone(),
            chains,
            ddos,
            tenant: None,
            tenant_agent: Arc::default(),
            tenant_routes,
            stream: Vec::new(),
            metrics: metrics.clone(),
            alerts,
            counts: counts.clone(),
            board: board.clone(),
            tenant_names: Arc::default(),
            stream_metrics: false,
            tenant_metrics: false,
        };
        st.set_tenant_names(cfg);
        let apps = dashboard(&st, ddos_view);
        let started = (|| {
            if let Some(s) = &cfg.stream {
                st.start_stream(s)?;
            }
            if let Some(t) = st.tenant_config(cfg) {
                st.start_tenant(t)?;
            }
            rampart_service::Server::start(
                &cfg.server,
                Service {
                    name: "rampart",
                    title: "rampart run",
                    version: env!("CARGO_PKG_VERSION"),
                    description: "One daemon for the host: the ddos routes under /ddos, the stream stage under /stream, the tenant routes under /tenant.",
                    routes,
                    metrics,
                    tokens,
                    apps,
                },
            )
            .map_err(svc_err)
        })();
        let started = started.and_then(|server| Ok((server, ChainWatch::start(watches)?)));
        match started {
            Ok((server, watch)) => Ok(Self {
                stages: Arc::new(Mutex::new(st)),
                watch: Some(watch),
                server: Some(server),
                stream_counts: counts,
            }),
            Err(e) => {
                st.stop();
                Err(e)
            }
        }
    }

    /// The API's address, if it serves one.
    pub fn api_addr(&self) -> Option<std::net::SocketAddr> {
        self.server
            .as_ref()
            .and_then(rampart_service::Server::api_addr)
    }

    /// The chains (one per interface).
    pub fn chains(&self) -> Vec<Chain> {
        lock(&self.stages).chains.clone()
    }

    /// What the ddos daemon publishes (blocked, policed, protected), if
    /// `[ddos]` runs.
    pub fn ddos_view(&self) -> Option<Arc<std::sync::RwLock<rampart_ddosd::View>>> {
        lock(&self.stages).ddos.as_ref().map(|d| d.view.clone())
    }

    /// Re-read `path` on SIGHUP (while [`Host::wait`] runs) and on
    /// `POST /v1/reload`, and apply it ([`Host::reload`] says what a reload
    /// changes).
    pub fn reload_from(&self, path: &Path) {
        let Some(server) = &self.server else { return };
        let (stages, path) = (self.stages.clone(), path.to_path_buf());
        server.on_reload(move |side| {
            let new = Config::load(&path).map_err(|e| e.to_string())?;
            lock(&stages).reload(new, side)
        });
    }

    /// Reload now, as SIGHUP does (after [`Host::reload_from`]): the
    /// thresholds, whitelists and tokens, the tenant list, and each of the
    /// stream and tenant stages turned on or off (its program put in or
    /// taken out of the chain: one program-array update; packets flow
    /// throughout). The blacklist, counters and — unless `[ddos.detect]`
    /// changed — the learned baselines stay. The interfaces, `[alerts]`,
    /// adding or removing `[ddos]`, the listeners and each application's
    /// restart-only keys are refused by name, as is a config that does not
    /// load: the running configuration stays in force.
    ///
    /// # Errors
    /// One line: why nothing was applied.
    pub fn reload(&self, trigger: &str) -> Result<String, String> {
        match &self.server {
            Some(s) => s.reloader().reload(trigger),
            None => Err("the daemon has stopped".into()),
        }
    }

    /// Serve until `cancel` is set, reloading on each SIGHUP.
    pub fn wait(&self, cancel: &AtomicBool) {
        match &self.server {
            Some(s) => s.wait(cancel),
            None => rampart_service::server::wait_until(cancel),
        }
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
        if let Some(mut w) = self.watch.take() {
            w.stop();
        }
        lock(&self.stages).stop();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// The dashboard's panels: ddos when it runs, stream and tenant while
/// their stages run (a reload turns them on and off), the one alert
/// stream; tenants' tokens refused (the page shows every tenant).
fn dashboard(
    st: &Stages,
    ddos: Option<Arc<std::sync::RwLock<rampart_ddosd::View>>>,
) -> rampart_service::Apps {
    let mut apps = rampart_service::Apps::none();
    if let Some(view) = ddos {
        apps = apps.with(App::Ddos, move || {
            view.read()
                .map(|v| rampart_ddosd::api::panel(&v))
                .unwrap_or(serde_json::Value::Null)
        });
    }
    let (b, b2) = (st.board.clone(), st.board.clone());
    apps = apps.with_while(App::Stream, move || b.running(), move || b2.panel());
    let (slot, slot2) = (st.tenant_agent.clone(), st.tenant_agent.clone());
    apps = apps.with_while(
        App::Tenant,
        move || lock(&slot).is_some(),
        move || {
            let agent = lock(&slot2).clone();
            agent
                .and_then(|a| a.call(|h| rampart_tenant::dashboard::panel(h)).ok())
                .unwrap_or(serde_json::Value::Null)
        },
    );
    let names = st.tenant_names.clone();
    apps.with_alerts(st.alerts.clone()).refusing(move |n| {
        names
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|t| t == n)
    })
}

impl Stages {
    /// The tenants `cfg` names (whose tokens the dashboard refuses).
    fn set_tenant_names(&self, cfg: &Config) {
        let names = cfg
            .tenant
            .as_ref()
            .map(|t| t.tenants.iter().map(|x| x.name.clone()).collect())
            .unwrap_or_default();
        *self
            .tenant_names
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = names;
    }

    /// `[tenant]` of `cfg` as the tenant host's config, on this host's chains.
    fn tenant_config(&self, cfg: &Config) -> Option<rampart_tenant::config::Config> {
        let mut t = cfg.tenant_config()?;
        t.infra.chains = self.chains.clone();
        Some(t)
    }

    fn start_stream(&mut self, s: &rampart_stream::apps::config::StreamConfig) -> Result<()> {
        let mut taps = Vec::new();
        for (n, i) in self.cfg.interfaces.iter().enumerate() {
            let (run, tap) = start_stream(
                s,
                i,
                &self.chains[n],
                self.alerts.clone(),
                self.counts.clone(),
                &self.board,
            )?;
            self.stream.push(run);
            taps.push((i.name.clone(), tap));
        }
        self.board.started(s, taps);
        if !self.stream_metrics {
            let c = self.counts.clone();
            self.metrics
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
            self.stream_metrics = true;
        }
        Ok(())
    }

    fn stop_stream(&mut self) {
        // The board first: it holds the taps, which detach with their last holder.
        self.board.stopped();
        for s in &mut self.stream {
            s.stop();
        }
        self.stream.clear();
    }

    fn start_tenant(&mut self, t: rampart_tenant::config::Config) -> Result<()> {
        let tenants: HashMap<String, u32> = t
            .tenants
            .iter()
            .filter_map(|x| Some((x.name.clone(), x.id?)))
            .collect();
        let compiler = rampart_tenant::compiler::Compiler::new(t.limits.policy())?;
        let agent = rampart_tenant::agent::start(t)?;
        if !self.tenant_metrics {
            let slot = self.tenant_agent.clone();
            self.metrics
                .register(rampart_tenant::metrics::collector_of(move || {
                    lock(&slot).clone()
                }))
                .map_err(svc_err)?;
            self.tenant_metrics = true;
        }
        *lock(&self.tenant_agent) = Some(agent.handle());
        self.tenant_routes
            .set(Some(rampart_tenant::api::routes(Arc::new(
                rampart_tenant::api::ApiState {
                    agent: agent.handle(),
                    compiler,
                    tenants,
                },
            ))));
        self.tenant = Some(agent);
        Ok(())
    }

    fn stop_tenant(&mut self) {
        self.tenant_routes.set(None);
        *lock(&self.tenant_agent) = None;
        if let Some(t) = self.tenant.take() {
            t.stop();
        }
    }

    fn stop(&mut self) {
        self.stop_stream();
        self.stop_tenant();
        if let Some(d) = self.ddos.take() {
            let _ = d.stop();
        }
    }

    /// Apply `new` (loaded and validated) or refuse it whole: every check
    /// first — the restart-only parts, the tokens and listeners, each
    /// running application's own — then the stage starts (which can
    /// fail), then the applications' reloads.
    fn reload(&mut self, new: Config, side: &ServerSide) -> Result<String, String> {
        let mut fixed = Vec::new();
        if new.interfaces != self.cfg.interfaces {
            fixed.push("the [[interface]] list".to_string());
        }
        if to_value(&new.alerts) != to_value(&self.cfg.alerts) {
            fixed.push("[alerts]".to_string());
        }
        match (&self.cfg.ddos, &new.ddos) {
            (None, Some(_)) => fixed.push("[ddos] added".to_string()),
            (Some(_), None) => fixed.push("[ddos] removed".to_string()),
            _ => {}
        }
        if !fixed.is_empty() {
            return Err(format!(
                "{} changed: {} a restart (systemctl restart rampart), nothing was reloaded",
                fixed.join(", "),
                if fixed.len() == 1 {
                    "that needs"
                } else {
                    "these need"
                }
            ));
        }
        let tokens =
            Tokens::from_file(new.server.token_file.as_deref()).map_err(|e| e.to_string())?;
        side.check(&new.server, &tokens)?;
        let new_ddos = new.interfaces.first().and_then(|i| new.ddos_for(i));
        if let (Some(h), Some(d)) = (&self.ddos, &new_ddos) {
            rampart_ddosd::daemon::check_reload(&h.owner(), d.clone())
                .map_err(|e| format!("[ddos] {e}"))?;
        }
        let new_tenant = self.tenant_config(&new);
        if let (Some(a), Some(t)) = (&self.tenant, &new_tenant) {
            rampart_tenant::host::check_reload(&a.handle(), t.clone())
                .map_err(|e| format!("[tenant] {e}"))?;
        }

        let mut done = Vec::new();
        if to_value(&new.stream) != to_value(&self.cfg.stream) {
            self.stop_stream();
            if let Some(s) = &new.stream {
                if let Err(e) = self.start_stream(s) {
                    self.stop_stream();
                    // Back to what ran: the stream stage as it was.
                    let old = self.cfg.stream.clone();
                    let back = old.as_ref().map(|s| self.start_stream(s));
                    return Err(format!(
                        "starting the new [stream]: {e}; nothing was reloaded{}",
                        match back {
                            Some(Err(e)) => format!(
                                " (and the old stream stage did not restart: {e}; it is off)"
                            ),
                            _ => String::new(),
                        }
                    ));
                }
            }
            done.push(match (&self.cfg.stream, &new.stream) {
                (None, Some(_)) => "stream stage added".to_string(),
                (Some(_), None) => "stream stage removed".to_string(),
                _ => "stream stage restarted with the new [stream] (its windows start afresh)"
                    .to_string(),
            });
        }
        match (self.tenant.is_some(), new_tenant) {
            (false, Some(t)) => {
                self.start_tenant(t)
                    .map_err(|e| format!("starting the tenant stage: {e}{}", applied(&done)))?;
                done.push("tenant stage added".to_string());
            }
            (true, None) => {
                self.stop_tenant();
                done.push(
                    "tenant stage removed (its tenants' programs and pins are gone)".to_string(),
                );
            }
            (true, Some(t)) => {
                let a = self
                    .tenant
                    .as_ref()
                    .map(rampart_tenant::agent::AgentThread::handle);
                if let Some(a) = a {
                    let m = rampart_tenant::host::apply_reload(&a, t)
                        .map_err(|e| format!("[tenant] {e}{}", applied(&done)))?;
                    done.push(format!("tenant: {m}"));
                }
            }
            (false, None) => {}
        }
        if let (Some(h), Some(d)) = (&self.ddos, new_ddos) {
            let m = rampart_ddosd::daemon::apply_reload(&h.owner(), d)
                .map_err(|e| format!("[ddos] {e}{}", applied(&done)))?;
            done.push(format!("ddos: {m}"));
        }
        let n = tokens.names().count();
        side.commit(new.server.clone(), tokens);
        self.set_tenant_names(&new);
        self.cfg = new;
        done.push(format!("{n} API token(s)"));
        Ok(done.join("; "))
    }
}

/// What a reload failing half-way had already applied (said with the error).
fn applied(done: &[String]) -> String {
    if done.is_empty() {
        String::new()
    } else {
        format!(" (already applied: {})", done.join(", "))
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

fn flood_alert(iface: &str, a: &synflood::FloodAlert) -> Alert {
    let d = &a.details;
    let mut x = Alert::rule(App::Stream, "syn_flood", "synflood", Action::Allowed)
        .with_detail("port", a.port)
        .with_detail("incomplete_handshakes", d.incomplete_handshakes)
        .with_detail("incomplete_other_ports", d.incomplete_other_ports)
        .with_detail("syn", d.syn)
        .with_detail("synack", d.synack)
        .with_detail("threshold", d.threshold);
    x.in_iface = Some(iface.to_string());
    if let Ok(ip) = a.dst.to_string().parse::<IpAddr>() {
        x = x.with_dest(ip);
    }
    x.dest_port = Some(a.port);
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
    // The shortest epoch any of the apps tolerates.
    let epoch = s
        .apps
        .iter()
        .map(|app| {
            Ok(match app {
                AppName::Flowmeter => flowmeter::graph(&s.flowmeter()?).epoch,
                AppName::Portscan => portscan::graph(&s.portscan()?).epoch,
                AppName::Synflood => synflood::graph(&s.synflood()?).epoch,
            })
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .min()
        .unwrap_or(rampart_stream::source::tap::DEFAULT_EPOCH);
    Ok(AppGraph {
        app: "shared tap".into(),
        epoch,
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
    board: &StreamBoard,
) -> Result<Pipeline> {
    let c = counts.clone();
    let found = board.findings.clone();
    Ok(match app {
        AppName::Flowmeter => flowmeter::build_live(
            src,
            &s.flowmeter()?,
            Some(board.live.clone()),
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
                        found.scanner(&x);
                        alerts.emit(scan_alert(&iface, &x));
                    }
                },
            )?
        }
        AppName::Synflood => {
            let (alerts, iface) = (alerts.clone(), iface.to_string());
            synflood::build(
                src,
                &s.synflood()?,
                move |x: Option<synflood::FloodAlert>| {
                    if let Some(x) = x {
                        c.alerts.fetch_add(1, Ordering::Relaxed);
                        found.flood(&x);
                        alerts.emit(flood_alert(&iface, &x));
                    }
                },
            )?
        }
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
/// to each app's thread), so one XDP program and its per-CPU rings serve
/// them all. The tap is returned too (its counters for the board).
fn start_stream(
    s: &StreamConfig,
    i: &InterfaceConfig,
    chain: &Chain,
    alerts: Alerts,
    counts: Arc<StreamCounts>,
    board: &StreamBoard,
) -> Result<(StreamRun, TapSource)> {
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
        epoch: plan.tap_epoch(),
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
        sizes: s.tap_sizes(rampart_dataplane::maps::possible_cpus()),
        ..TapConfig::default()
    })?;
    let run = |p: Pipeline| {
        move || {
            if let Err(e) = p.run() {
                tracing::error!("stream app stopped: {e}");
            }
        }
    };
    let keep = tap.clone();
    if let [app] = s.apps[..] {
        let p = build_app(
            app,
            AnySource::Tap(tap),
            s,
            &i.name,
            &alerts,
            &counts,
            board,
        )?;
        return Ok((
            StreamRun {
                cancel: p.cancel_flag(),
                threads: vec![spawn("rampart-stream", run(p))?],
            },
            keep,
        ));
    }
    let (driver, branches) = tee(tap, s.apps.len())?;
    let mut apps = Vec::new();
    for (app, b) in s.apps.iter().zip(branches) {
        apps.push((
            app,
            build_app(*app, b, s, &i.name, &alerts, &counts, board)?,
        ));
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
    Ok((StreamRun { cancel, threads }, keep))
}

fn app_name(a: AppName) -> &'static str {
    match a {
        AppName::Flowmeter => "flowmeter",
        AppName::Portscan => "portscan",
        AppName::Synflood => "synflood",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_shared_tap_aggregates_over_the_shortest_epoch_of_its_apps() {
        let cfg = |apps: Vec<AppName>| StreamConfig {
            apps,
            ..StreamConfig::default()
        };
        let epoch = |apps| tap_graph(&cfg(apps)).unwrap().epoch;
        assert_eq!(epoch(vec![AppName::Flowmeter]), Duration::from_secs(3));
        assert_eq!(epoch(vec![AppName::Portscan]), Duration::from_secs(1));
        assert_eq!(
            epoch(vec![AppName::Flowmeter, AppName::Synflood]),
            Duration::from_secs(1),
            "synflood's alerts set the pace"
        );
    }
}
