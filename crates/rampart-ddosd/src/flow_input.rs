//! Flow input (`[flow_input]`; `[ddos.flow_input]` under `rampart run`):
//! NetFlow v9 / IPFIX and sFlow v5 receivers whose records feed a
//! detection of their own, so rampart watches a network from its routers'
//! exports — victims that are not on this host included — and acts
//! through the upstream tier (and the host tiers, for traffic that does
//! reach the host).
//!
//! One UDP socket per listen address, one thread each: a datagram is
//! decoded there (rampart_ddos_control::flow) and its samples summed into
//! the shared [`FlowAggregator`]; the daemon's loop takes the sums every
//! step ([`FlowInput::take_bucket`]) into the window it judges
//! (`daemon/flow.rs`). A socket that cannot be
//! bound (port in use, bad address) or a datagram that does not decode is
//! one log line — per socket, and per exporter and reason the first time —
//! and a metric; nothing here can stop host filtering.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus::{IntCounterVec, Opts};
use rampart_ddos_control::flow::netflow::NetflowDecoder;
use rampart_ddos_control::flow::{sflow, FlowAggregator, FlowBucket, FlowSample};
use rampart_ddos_control::{FeatureRecord, Prefix, VictimRecord};
use serde::{Deserialize, Serialize};

/// `[flow_input]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowInputConfig {
    /// Receive flow exports. Default false.
    pub enabled: bool,
    /// NetFlow v9 and IPFIX listen addresses (UDP). Default
    /// `["0.0.0.0:2055"]`; `[]`: none.
    pub netflow_listen: Vec<String>,
    /// sFlow v5 listen addresses (UDP). Default `["0.0.0.0:6343"]`; `[]`: none.
    pub sflow_listen: Vec<String>,
    /// Named network namespace the receivers listen in (a management
    /// namespace, the router's side of a lab). Default none: the daemon's own.
    pub netns: Option<String>,
    /// The protected prefixes: the victims detection watches. Traffic to
    /// anything else is ignored. Required when enabled.
    pub protected: Vec<String>,
    /// Sampling rate override: 0 uses what the exporters say (sFlow's
    /// sampling rate, NetFlow/IPFIX options data, else 1); N multiplies
    /// every record by N. Default 0.
    pub sampling_rate: u64,
    /// The export interval detection assumes (seconds): the exporters'
    /// active flow timeout (softflowd `-t maxlife=`, a router's
    /// `cache timeout active`), so a record holds up to this long of a
    /// flow's traffic. Every third of it (at least 0.5 s) detection judges
    /// the records that arrived in the last interval, as rates over it.
    /// Default 10; 1 ≤ x ≤ 300.
    pub export_interval_s: f64,
    /// Seconds a NetFlow/IPFIX template lives after its exporter last sent
    /// it (0: forever). Default 1800.
    pub template_ttl_s: u64,
    /// (source, destination) pairs kept per step and in the window judged
    /// (more are counted per victim only). Default 262144.
    pub max_pairs: usize,
}

impl Default for FlowInputConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            netflow_listen: vec!["0.0.0.0:2055".into()],
            sflow_listen: vec!["0.0.0.0:6343".into()],
            netns: None,
            protected: Vec::new(),
            sampling_rate: 0,
            export_interval_s: 10.0,
            template_ttl_s: 1800,
            max_pairs: 1 << 18,
        }
    }
}

impl FlowInputConfig {
    /// Check the values; the message names the key and what to write.
    pub fn check(&self) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if !(1.0..=300.0).contains(&self.export_interval_s) {
            return Err(format!(
                "flow_input.export_interval_s = {}: must be 1 ≤ x ≤ 300 (the exporters' active flow timeout, seconds)",
                self.export_interval_s
            ));
        }
        if self.protected.is_empty() {
            return Err("flow_input.protected is empty: list the prefixes whose victims flow input watches, e.g. protected = [\"203.0.113.0/24\"]".into());
        }
        self.protected_prefixes()?;
        for (key, list) in [
            ("netflow_listen", &self.netflow_listen),
            ("sflow_listen", &self.sflow_listen),
        ] {
            for a in list {
                a.parse::<SocketAddr>().map_err(|_| {
                    format!(
                        "flow_input.{key}: {a:?} is not an address:port (e.g. \"0.0.0.0:2055\")"
                    )
                })?;
            }
        }
        if self.netflow_listen.is_empty() && self.sflow_listen.is_empty() {
            return Err(
                "flow_input: netflow_listen and sflow_listen are both empty: give at least one address".into(),
            );
        }
        if self.max_pairs == 0 {
            return Err("flow_input.max_pairs = 0: must be at least 1".into());
        }
        Ok(())
    }

    /// The protected prefixes, parsed.
    pub fn protected_prefixes(&self) -> Result<Vec<Prefix>, String> {
        self.protected
            .iter()
            .map(|p| Prefix::parse(p).map_err(|e| format!("flow_input.protected: {p:?}: {e}")))
            .collect()
    }
}

/// The two receivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// NetFlow v9 and IPFIX.
    Netflow,
    /// sFlow v5.
    Sflow,
}

impl Protocol {
    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Netflow => "netflow",
            Protocol::Sflow => "sflow",
        }
    }
}

/// Exporters named in metric labels; later ones are counted as `other`.
const MAX_EXPORTERS: usize = 64;

/// `rampart_ddos_flow_*` counters.
#[derive(Debug, Clone)]
pub struct FlowMetrics {
    /// `rampart_ddos_flow_datagrams_total{protocol,exporter}`.
    pub datagrams: IntCounterVec,
    /// `rampart_ddos_flow_records_total{protocol,exporter}`.
    pub records: IntCounterVec,
    /// `rampart_ddos_flow_decode_errors_total{protocol,exporter,reason}`.
    pub decode_errors: IntCounterVec,
    /// `rampart_ddos_flow_receiver_errors_total{protocol,reason}`.
    pub receiver_errors: IntCounterVec,
}

impl FlowMetrics {
    /// The counters, registered.
    pub fn new(registry: &rampart_service::Metrics) -> Self {
        let v = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("metric");
            registry.register(c.clone()).expect("unique metric");
            c
        };
        let m = FlowMetrics {
            datagrams: v(
                "rampart_ddos_flow_datagrams_total",
                "Flow export datagrams received, per protocol and exporter",
                &["protocol", "exporter"],
            ),
            records: v(
                "rampart_ddos_flow_records_total",
                "Flow records and sFlow flow samples decoded, per protocol and exporter",
                &["protocol", "exporter"],
            ),
            decode_errors: v(
                "rampart_ddos_flow_decode_errors_total",
                "Flow export datagrams refused, per protocol, exporter and reason (truncated, version, malformed, no_template)",
                &["protocol", "exporter", "reason"],
            ),
            receiver_errors: v(
                "rampart_ddos_flow_receiver_errors_total",
                "Flow receiver failures (bind: the listen address could not be bound; recv: a receive failed)",
                &["protocol", "reason"],
            ),
        };
        for p in [Protocol::Netflow, Protocol::Sflow] {
            for r in ["bind", "recv"] {
                m.receiver_errors.with_label_values(&[p.name(), r]);
            }
        }
        m
    }
}

/// One exporter as `/v1/status` shows it.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct ExporterView {
    /// The exporter's address.
    pub exporter: String,
    /// `netflow` or `sflow`.
    pub protocol: String,
    /// Datagrams received.
    pub datagrams: u64,
    /// Records (flow records, flow samples) decoded.
    pub records: u64,
    /// Datagrams refused.
    pub errors: u64,
    /// The last refusal.
    pub last_error: Option<String>,
    /// The sampling rate of its last record (1: unsampled).
    pub sampling_rate: u64,
}

/// Flow input as `/v1/status` shows it.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct FlowInputView {
    /// Listening sockets (`protocol address`).
    pub listening: Vec<String>,
    /// Sockets that could not be bound, with the OS error.
    pub errors: Vec<String>,
    /// The export interval detection assumes (seconds).
    pub export_interval_s: f64,
    /// The protected prefixes.
    pub protected: Vec<String>,
    /// Windows judged since start (one per step: a third of the export
    /// interval, at least 0.5 s).
    pub intervals: u64,
    /// Victims flow detection watches (seen in the last export interval).
    pub victims: usize,
    /// Sources flow detection has decided to block (installed by it, or
    /// blocked already) and not unblocked.
    pub blocked: usize,
    /// Attack events flow detection has raised since start.
    pub events: u64,
    /// Samples ignored in the last export interval: destination outside
    /// the protected prefixes.
    pub outside: u64,
    /// Per exporter.
    pub exporters: Vec<ExporterView>,
}

#[derive(Debug, Default)]
struct Shared {
    agg: Option<FlowAggregator>,
    exporters: HashMap<(Protocol, IpAddr), ExporterView>,
}

/// The receivers and what they have summed since the last
/// [`FlowInput::take_bucket`].
#[derive(Debug)]
pub struct FlowInput {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    listening: Vec<String>,
    errors: Vec<String>,
}

/// The exporter's label: its address, or `other` past [`MAX_EXPORTERS`].
fn label(seen: &mut HashMap<IpAddr, String>, a: IpAddr) -> String {
    if let Some(l) = seen.get(&a) {
        return l.clone();
    }
    let l = if seen.len() < MAX_EXPORTERS {
        a.to_string()
    } else {
        "other".to_string()
    };
    seen.insert(a, l.clone());
    l
}

fn receive(
    proto: Protocol,
    sock: UdpSocket,
    cfg: FlowInputConfig,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    metrics: FlowMetrics,
) {
    let rate = (cfg.sampling_rate > 0).then_some(cfg.sampling_rate);
    let mut netflow = NetflowDecoder::new(Duration::from_secs(cfg.template_ttl_s), rate);
    let mut buf = vec![0u8; 65536];
    let mut out: Vec<FlowSample> = Vec::new();
    let mut labels: HashMap<IpAddr, String> = HashMap::new();
    let mut logged: HashMap<(IpAddr, &'static str), ()> = HashMap::new();
    let mut recv_logged = false;
    let local = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    while !stop.load(Ordering::Relaxed) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                metrics
                    .receiver_errors
                    .with_label_values(&[proto.name(), "recv"])
                    .inc();
                if !recv_logged {
                    tracing::error!("flow input: {} receive on {local}: {e}", proto.name());
                    recv_logged = true;
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let data = &buf[..n];
        let exporter = label(&mut labels, from.ip());
        metrics
            .datagrams
            .with_label_values(&[proto.name(), &exporter])
            .inc();
        out.clear();
        let r = match proto {
            Protocol::Sflow => sflow::decode(data, rate, &mut out),
            Protocol::Netflow => netflow.decode(from, data, &mut out),
        };
        let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
        let sh = &mut *sh;
        let ev = sh
            .exporters
            .entry((proto, from.ip()))
            .or_insert_with(|| ExporterView {
                exporter: from.ip().to_string(),
                protocol: proto.name().into(),
                ..Default::default()
            });
        ev.datagrams += 1;
        match r {
            Ok(d) => {
                metrics
                    .records
                    .with_label_values(&[proto.name(), &exporter])
                    .inc_by(d.records);
                ev.records += d.records;
                if d.no_template > 0 {
                    metrics
                        .decode_errors
                        .with_label_values(&[proto.name(), &exporter, "no_template"])
                        .inc_by(d.no_template);
                }
                if let Some(s) = out.last() {
                    ev.sampling_rate = s.rate;
                }
                if let Some(agg) = sh.agg.as_mut() {
                    for s in &out {
                        agg.add(s);
                    }
                }
            }
            Err(e) => {
                let reason = e.reason();
                metrics
                    .decode_errors
                    .with_label_values(&[proto.name(), &exporter, reason])
                    .inc();
                ev.errors += 1;
                ev.last_error = Some(e.to_string());
                if logged.insert((from.ip(), reason), ()).is_none() {
                    tracing::warn!(
                        "flow input: {} datagram from {from} refused ({reason}): {e}; further ones from it counted in rampart_ddos_flow_decode_errors_total",
                        proto.name()
                    );
                }
            }
        }
    }
}

impl FlowInput {
    /// Bind every listen address and start its receiver. A socket that
    /// cannot be bound is logged, counted and listed in the view; the
    /// others run.
    pub fn start(cfg: &FlowInputConfig, metrics: FlowMetrics) -> Result<Self, String> {
        cfg.check()?;
        let protected = cfg.protected_prefixes()?;
        let shared = Arc::new(Mutex::new(Shared {
            agg: Some(FlowAggregator::new(protected, cfg.max_pairs)),
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let mut me = FlowInput {
            shared,
            stop,
            threads: Vec::new(),
            listening: Vec::new(),
            errors: Vec::new(),
        };
        let socks = cfg
            .netflow_listen
            .iter()
            .map(|a| (Protocol::Netflow, a))
            .chain(cfg.sflow_listen.iter().map(|a| (Protocol::Sflow, a)));
        for (proto, addr) in socks {
            // A socket stays in the namespace it was created in: only the
            // bind runs there.
            let bound = rampart_dataplane::netns::run_in(cfg.netns.as_deref(), || {
                Ok(UdpSocket::bind(addr.as_str()).and_then(|s| {
                    s.set_read_timeout(Some(Duration::from_millis(200)))?;
                    Ok(s)
                }))
            })
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
            match bound {
                Ok(sock) => {
                    let local = sock.local_addr().map_or(addr.clone(), |a| a.to_string());
                    tracing::info!("flow input: {} receiver on udp {local}", proto.name());
                    me.listening.push(format!("{} {local}", proto.name()));
                    let (c, sh, st, m) = (
                        cfg.clone(),
                        me.shared.clone(),
                        me.stop.clone(),
                        metrics.clone(),
                    );
                    let t = std::thread::Builder::new()
                        .name(format!("flow-{}", proto.name()))
                        .spawn(move || receive(proto, sock, c, sh, st, m))
                        .map_err(|e| format!("flow input: cannot start a receiver thread: {e}"))?;
                    me.threads.push(t);
                }
                Err(e) => {
                    let msg = format!(
                        "flow input: cannot listen for {} on udp {addr}{}: {e}; change flow_input.{}_listen (host filtering goes on)",
                        proto.name(),
                        cfg.netns.as_ref().map(|n| format!(" in netns {n}")).unwrap_or_default(),
                        proto.name()
                    );
                    tracing::error!("{msg}");
                    metrics
                        .receiver_errors
                        .with_label_values(&[proto.name(), "bind"])
                        .inc();
                    me.errors.push(msg);
                }
            }
        }
        Ok(me)
    }

    /// The records summed since the last call, and the samples ignored
    /// (outside the protected prefixes).
    pub fn take(&self) -> (Vec<FeatureRecord>, Vec<VictimRecord>, u64) {
        let b = self.take_bucket();
        let outside = b.outside();
        let (p, v) = b.into_records();
        (p, v, outside)
    }

    /// What was summed since the last call, for a
    /// [`rampart_ddos_control::flow::FlowWindow`].
    pub fn take_bucket(&self) -> FlowBucket {
        let mut sh = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        sh.agg
            .as_mut()
            .map(FlowAggregator::take_bucket)
            .unwrap_or_default()
    }

    /// Listening sockets, bind failures and per-exporter counts.
    pub fn sockets(&self) -> (Vec<String>, Vec<String>, Vec<ExporterView>) {
        let sh = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let mut ex: Vec<ExporterView> = sh.exporters.values().cloned().collect();
        ex.sort_by(|a, b| (&a.protocol, &a.exporter).cmp(&(&b.protocol, &b.exporter)));
        (self.listening.clone(), self.errors.clone(), ex)
    }
}

impl Drop for FlowInput {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_checks_name_the_key() {
        let mut c = FlowInputConfig {
            enabled: true,
            ..Default::default()
        };
        assert!(c.check().unwrap_err().contains("flow_input.protected"));
        c.protected = vec!["10.0.0.0/8".into()];
        assert_eq!(c.check(), Ok(()));
        c.export_interval_s = 0.5;
        assert!(c.check().unwrap_err().contains("export_interval_s"));
        c.export_interval_s = 10.0;
        c.sflow_listen = vec!["6343".into()];
        assert!(c.check().unwrap_err().contains("flow_input.sflow_listen"));
        c.sflow_listen = vec![];
        c.protected = vec!["10.0.0.0/33".into()];
        assert!(c.check().unwrap_err().contains("flow_input.protected"));
        // Off: nothing checked.
        assert_eq!(FlowInputConfig::default().check(), Ok(()));
    }

    #[test]
    fn a_port_in_use_is_one_error_and_the_other_receivers_run() {
        let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
        let reg = rampart_service::Metrics::new();
        let m = FlowMetrics::new(&reg);
        let cfg = FlowInputConfig {
            enabled: true,
            protected: vec!["10.20.0.0/16".into()],
            netflow_listen: vec![busy.local_addr().unwrap().to_string()],
            sflow_listen: vec!["127.0.0.1:0".into()],
            ..Default::default()
        };
        let fi = FlowInput::start(&cfg, m.clone()).unwrap();
        let (listening, errors, _) = fi.sockets();
        assert_eq!(listening.len(), 1, "{listening:?}");
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].contains("netflow") && !errors[0].contains('\n'),
            "{errors:?}"
        );
        assert_eq!(
            m.receiver_errors
                .with_label_values(&["netflow", "bind"])
                .get(),
            1
        );
        // Garbage to the running receiver: counted per reason, nothing summed.
        let port = listening[0].rsplit(':').next().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"\0\0\0\x05\0\0\0\x01\xc0", format!("127.0.0.1:{port}"))
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while m
            .decode_errors
            .with_label_values(&["sflow", "127.0.0.1", "truncated"])
            .get()
            == 0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no decode error counted"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let (p, v, _) = fi.take();
        assert!(p.is_empty() && v.is_empty());
        let (_, _, ex) = fi.sockets();
        assert_eq!(ex.len(), 1);
        assert_eq!((ex[0].datagrams, ex[0].errors), (1, 1));
        drop(fi);
    }
}
