//! One alert schema for every application, and where alerts go.
//!
//! Alerts are EVE JSON (Suricata's eve.json field names): `timestamp`
//! (ISO 8601, µs, UTC offset), `event_type`, `in_iface`, `src_ip`,
//! `src_port`, `dest_ip`, `dest_port`, `proto`, `community_id`, and for
//! `event_type: alert` the `alert` object (`action`, `gid`,
//! `signature_id`, `rev`, `signature`, `category`, `severity`), so
//! Suricata/Zeek tooling and SIEM parsers read them without a new mapping.
//! rampart's own fields are in one object, `rampart` (`app`, `event`,
//! `detector`, `vector`, `tier`, `reason`, `victim`, rates, sources, the
//! evidence `pcap`, …). docs/alerts.md has an example of every event.
//!
//! [`Alerts`] is the one place an application emits through: it writes each
//! alert as one JSON line to every configured sink ([`AlertsConfig`]: a
//! file or stdout, syslog, an HTTP webhook), counts them
//! (`rampart_alerts_total`), keeps the latest for the API and dashboard,
//! and tracks attacks from their `attack_start` / `attack_update` /
//! `attack_end` events ([`Attack`]).

mod community_id;
pub mod signature;
mod sink;

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use community_id::{community_id, community_id_seeded};
pub use signature::{Signature, SIGNATURES};
pub use sink::{AlertsConfig, SinkError};

use crate::metrics::Metrics;

/// The application an alert comes from.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum App {
    /// `rampart ddos`.
    Ddos,
    /// `rampart stream`.
    Stream,
    /// `rampart tenant`.
    Tenant,
}

impl App {
    /// Every application.
    pub const ALL: [App; 3] = [App::Ddos, App::Stream, App::Tenant];

    /// Its name (`ddos`, `stream`, `tenant`).
    pub fn name(self) -> &'static str {
        match self {
            App::Ddos => "ddos",
            App::Stream => "stream",
            App::Tenant => "tenant",
        }
    }
}

/// EVE `event_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventType {
    /// A detection or a mitigation decision (carries the `alert` object).
    Alert,
    /// Something abnormal that no rule acts on (e.g. an entropy shift).
    Anomaly,
    /// Packets dropped (a summary, not one event per packet).
    Drop,
    /// A flow record.
    Flow,
    /// Operational events: the daemon resumed, a source moved between tiers.
    Stats,
}

impl EventType {
    /// Every event type.
    pub const ALL: [EventType; 5] = [
        EventType::Alert,
        EventType::Anomaly,
        EventType::Drop,
        EventType::Flow,
        EventType::Stats,
    ];

    /// Its name in EVE.
    pub fn name(self) -> &'static str {
        match self {
            EventType::Alert => "alert",
            EventType::Anomaly => "anomaly",
            EventType::Drop => "drop",
            EventType::Flow => "flow",
            EventType::Stats => "stats",
        }
    }
}

/// `alert.action`: what rampart did about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Sources dropped (blacklisted).
    Blocked,
    /// Sources rate-limited.
    Policed,
    /// Let through: detection only, or mitigation off.
    Allowed,
    /// SYN cookies answer for the victim.
    Challenged,
    /// A block lifted.
    Unblocked,
}

/// EVE's `alert` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AlertInfo {
    /// What rampart did.
    pub action: Action,
    /// Generator id (1, as Suricata's rules).
    pub gid: u32,
    /// Rule id ([`signature::SIGNATURES`]).
    pub signature_id: u32,
    /// Rule revision.
    pub rev: u32,
    /// Rule text.
    pub signature: String,
    /// Classification.
    pub category: String,
    /// 1 (high) … 3 (low).
    pub severity: u8,
}

impl AlertInfo {
    /// The `alert` object of signature `s` with `action`.
    pub fn of(s: &Signature, action: Action) -> Self {
        Self {
            action,
            gid: 1,
            signature_id: s.id,
            rev: s.rev,
            signature: s.signature.into(),
            category: s.category.into(),
            severity: s.severity,
        }
    }
}

/// rampart's own fields (`rampart` object). Every field but `app` and
/// `event` is optional and left out when unset; `details` holds an
/// application's extra fields, flattened into the object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Rampart {
    /// Application.
    pub app: App,
    /// What happened, in the application's words: `attack_start`,
    /// `attack_update`, `attack_end`, `block`, `unblock`, `police`,
    /// `cookies_on`, `cookies_off`, `resume`, `hw_add`, `hw_remove`,
    /// `portscan`, `synflood`, `program_refused`, …
    pub event: String,
    /// Attack this event belongs to (stable across its start, updates and end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attack_id: Option<String>,
    /// Detector that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detector: Option<String>,
    /// Attack vector (`syn_flood`, `udp_amplification/dns`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<String>,
    /// Tier acting (`xdp`, `emulated`, `tc-flower`, `iptables`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Why, with the numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The victim (address or prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim: Option<String>,
    /// The prefix acted on (a block or unblock of a CIDR prefix; `src_ip`
    /// is set too when it is one address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Packets/s now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pps: Option<f64>,
    /// Bits/s now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bps: Option<f64>,
    /// Highest packets/s of the attack so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_pps: Option<f64>,
    /// Highest bits/s of the attack so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bps: Option<f64>,
    /// Sources involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<u64>,
    /// The heaviest sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_sources: Vec<String>,
    /// Legitimate sources caught by an aggregated prefix block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collateral: Option<u64>,
    /// Evidence: the pcap of the attack's sampled packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcap: Option<String>,
    /// Application-specific fields.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// One alert (EVE JSON). Build it with [`Alert::new`] and the `with_*`
/// methods or by setting fields; emit it with [`Alerts::emit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Alert {
    /// ISO 8601 with µs and UTC offset (`2026-11-24T09:04:13.123456+00:00`).
    pub timestamp: String,
    /// EVE event type.
    pub event_type: EventType,
    /// Interface the traffic arrived on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_iface: Option<String>,
    /// Source (one source or the flow's client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub src_ip: Option<IpAddr>,
    /// Source port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_port: Option<u16>,
    /// Destination (the victim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub dest_ip: Option<IpAddr>,
    /// Destination port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_port: Option<u16>,
    /// `TCP`, `UDP`, `ICMP`, `IPv6-ICMP`, … when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    /// Community ID v1 of the flow, when there is one 5-tuple.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub community_id: Option<String>,
    /// The rule (for `event_type: alert`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<AlertInfo>,
    /// EVE `flow` object (for `event_type: flow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub flow: Option<serde_json::Value>,
    /// rampart's fields.
    pub rampart: Rampart,
}

/// ISO 8601 as EVE writes `timestamp`: µs and a `+00:00` offset.
pub fn timestamp(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%Y-%m-%dT%H:%M:%S%.6f%:z")
        .to_string()
}

/// Unix time now, in seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The Unix time of an EVE timestamp (`None`: not one).
pub fn parse_timestamp(s: &str) -> Option<f64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .or_else(|_| chrono::DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f%z"))
        .ok()
        .map(|t| t.timestamp_micros() as f64 / 1e6)
}

/// EVE's protocol name of IP protocol number `p`.
pub fn proto_name(p: u8) -> String {
    match p {
        1 => "ICMP".into(),
        6 => "TCP".into(),
        17 => "UDP".into(),
        58 => "IPv6-ICMP".into(),
        132 => "SCTP".into(),
        o => o.to_string(),
    }
}

impl Alert {
    /// An event of `app` now, with no fields but its type and name.
    pub fn new(app: App, event_type: EventType, event: impl Into<String>) -> Self {
        Self {
            timestamp: timestamp(std::time::SystemTime::now()),
            event_type,
            in_iface: None,
            src_ip: None,
            src_port: None,
            dest_ip: None,
            dest_port: None,
            proto: None,
            community_id: None,
            alert: None,
            flow: None,
            rampart: Rampart {
                app,
                event: event.into(),
                attack_id: None,
                detector: None,
                vector: None,
                tier: None,
                reason: None,
                victim: None,
                prefix: None,
                pps: None,
                bps: None,
                peak_pps: None,
                peak_bps: None,
                sources: None,
                top_sources: Vec::new(),
                collateral: None,
                pcap: None,
                details: serde_json::Map::new(),
            },
        }
    }

    /// An `alert` event: the signature of `key` (a vector, detector or
    /// finding; [`signature::lookup`]) with `action`.
    pub fn rule(app: App, event: impl Into<String>, key: &str, action: Action) -> Self {
        let mut a = Self::new(app, EventType::Alert, event);
        a.alert = Some(AlertInfo::of(signature::lookup(app, key), action));
        a
    }

    /// Time stamped `t` instead of now (event time of a replayed capture).
    #[must_use]
    pub fn at(mut self, t: std::time::SystemTime) -> Self {
        self.timestamp = timestamp(t);
        self
    }

    /// One flow: addresses, ports, protocol and its Community ID.
    #[must_use]
    pub fn with_flow(
        mut self,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
        proto: u8,
    ) -> Self {
        self.src_ip = Some(src);
        self.src_port = Some(sport);
        self.dest_ip = Some(dst);
        self.dest_port = Some(dport);
        self.proto = Some(proto_name(proto));
        self.community_id = community_id(src, dst, proto, sport, dport);
        self
    }

    /// The source, when the event is about one address.
    #[must_use]
    pub fn with_src(mut self, src: IpAddr) -> Self {
        self.src_ip = Some(src);
        self
    }

    /// The destination (victim) address.
    #[must_use]
    pub fn with_dest(mut self, dst: IpAddr) -> Self {
        self.dest_ip = Some(dst);
        self
    }

    /// An application field under `rampart` (`details`).
    #[must_use]
    pub fn with_detail(mut self, key: &str, v: impl Serialize) -> Self {
        if let Ok(v) = serde_json::to_value(v) {
            self.rampart.details.insert(key.into(), v);
        }
        self
    }

    /// One JSON line (no newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// An attack as its events tell it (for the API, dashboard and status).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attack {
    /// `rampart.attack_id`, or `app/victim/vector` when the events carry none.
    pub id: String,
    /// Application.
    pub app: App,
    /// Victim (address or prefix), when known.
    pub victim: Option<String>,
    /// Vector, when known.
    pub vector: Option<String>,
    /// Signature text of its last event.
    pub signature: Option<String>,
    /// Start (ISO 8601).
    pub start: String,
    /// Start (Unix seconds).
    pub start_unix: f64,
    /// End (ISO 8601), `None` while in progress.
    pub end: Option<String>,
    /// Highest packets/s reported.
    pub peak_pps: f64,
    /// Highest bits/s reported.
    pub peak_bps: f64,
    /// Sources reported last.
    pub sources: u64,
    /// Heaviest sources reported last.
    pub top_sources: Vec<String>,
    /// Tier acting, last reported.
    pub tier: Option<String>,
    /// What was done, last reported.
    pub action: Option<Action>,
    /// Last reason.
    pub reason: Option<String>,
    /// Evidence pcap.
    pub pcap: Option<String>,
    /// Events seen.
    pub events: u64,
}

impl Attack {
    /// In progress (no `attack_end` yet).
    pub fn active(&self) -> bool {
        self.end.is_none()
    }
}

/// Ended attacks kept for the API (the newest).
const ENDED_KEPT: usize = 100;
/// Alerts kept for the API and the dashboard (the newest).
const RECENT_KEPT: usize = 500;

fn attack_key(a: &Alert) -> String {
    a.rampart.attack_id.clone().unwrap_or_else(|| {
        format!(
            "{}/{}/{}",
            a.rampart.app.name(),
            a.rampart.victim.as_deref().unwrap_or("-"),
            a.rampart.vector.as_deref().unwrap_or("-")
        )
    })
}

#[derive(Debug, Default)]
struct Attacks {
    active: Vec<Attack>,
    ended: VecDeque<Attack>,
}

impl Attacks {
    fn observe(&mut self, a: &Alert) {
        let ev = a.rampart.event.as_str();
        if !matches!(ev, "attack_start" | "attack_update" | "attack_end") {
            return;
        }
        let key = attack_key(a);
        let i = match self.active.iter().position(|x| x.id == key) {
            Some(i) => i,
            None => {
                let start_unix = parse_timestamp(&a.timestamp).unwrap_or(0.0);
                self.active.push(Attack {
                    id: key,
                    app: a.rampart.app,
                    victim: None,
                    vector: None,
                    signature: None,
                    start: a.timestamp.clone(),
                    start_unix,
                    end: None,
                    peak_pps: 0.0,
                    peak_bps: 0.0,
                    sources: 0,
                    top_sources: Vec::new(),
                    tier: None,
                    action: None,
                    reason: None,
                    pcap: None,
                    events: 0,
                });
                self.active.len() - 1
            }
        };
        let x = &mut self.active[i];
        let r = &a.rampart;
        x.events += 1;
        if r.victim.is_some() {
            x.victim.clone_from(&r.victim);
        }
        if r.vector.is_some() {
            x.vector.clone_from(&r.vector);
        }
        if let Some(s) = &a.alert {
            x.signature = Some(s.signature.clone());
            x.action = Some(s.action);
        }
        for v in [r.pps, r.peak_pps].into_iter().flatten() {
            x.peak_pps = x.peak_pps.max(v);
        }
        for v in [r.bps, r.peak_bps].into_iter().flatten() {
            x.peak_bps = x.peak_bps.max(v);
        }
        if let Some(n) = r.sources {
            x.sources = n;
        }
        if !r.top_sources.is_empty() {
            x.top_sources.clone_from(&r.top_sources);
        }
        if r.tier.is_some() {
            x.tier.clone_from(&r.tier);
        }
        if r.reason.is_some() {
            x.reason.clone_from(&r.reason);
        }
        if r.pcap.is_some() {
            x.pcap.clone_from(&r.pcap);
        }
        if ev == "attack_end" {
            let mut done = self.active.remove(i);
            done.end = Some(a.timestamp.clone());
            self.ended.push_front(done);
            self.ended.truncate(ENDED_KEPT);
        }
    }

    fn list(&self) -> Vec<Attack> {
        let mut v: Vec<Attack> = self.active.iter().rev().cloned().collect();
        v.extend(self.ended.iter().cloned());
        v
    }
}

struct Inner {
    sinks: sink::Sinks,
    recent: Mutex<VecDeque<Arc<Alert>>>,
    attacks: Mutex<Attacks>,
    live: tokio::sync::broadcast::Sender<Arc<Alert>>,
    emitted: prometheus::IntCounterVec,
}

/// Where an application's alerts go (cheap to clone: clones share sinks,
/// history and counters).
#[derive(Clone)]
pub struct Alerts {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts")
            .field("sinks", &self.inner.sinks.names())
            .finish()
    }
}

impl Alerts {
    /// Open the sinks of `cfg` and register the alert metrics in `metrics`
    /// (`rampart_alerts_total{app,event_type}`, pre-created for `apps`, and
    /// the sinks' error and drop counters).
    ///
    /// # Errors
    /// A sink that cannot be opened (the file's directory, a bad webhook
    /// URL): one line naming the `[alerts]` key.
    pub fn open(cfg: &AlertsConfig, apps: &[App], metrics: &Metrics) -> Result<Self, SinkError> {
        let sinks = sink::Sinks::open(cfg, metrics)?;
        let emitted = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "rampart_alerts_total",
                "Alerts emitted, by application and EVE event type",
            ),
            &["app", "event_type"],
        )
        .map_err(|e| SinkError::Metrics(e.to_string()))?;
        for app in apps {
            for t in EventType::ALL {
                emitted.with_label_values(&[app.name(), t.name()]);
            }
        }
        metrics
            .register(emitted.clone())
            .map_err(|e| SinkError::Metrics(e.to_string()))?;
        Ok(Self::with(sinks, emitted))
    }

    /// No sinks and no metrics: alerts are only kept in memory (tests,
    /// tools that read [`Alerts::recent`]).
    pub fn memory() -> Self {
        let emitted = prometheus::IntCounterVec::new(
            prometheus::Opts::new("rampart_alerts_total", "Alerts emitted"),
            &["app", "event_type"],
        )
        .expect("static metric");
        Self::with(sink::Sinks::none(), emitted)
    }

    fn with(sinks: sink::Sinks, emitted: prometheus::IntCounterVec) -> Self {
        let (live, _) = tokio::sync::broadcast::channel(256);
        Self {
            inner: Arc::new(Inner {
                sinks,
                recent: Mutex::new(VecDeque::new()),
                attacks: Mutex::new(Attacks::default()),
                live,
                emitted,
            }),
        }
    }

    /// Emit one alert to every sink. Never blocks on a slow sink: the
    /// webhook has a bounded queue of its own (a full queue drops and counts).
    pub fn emit(&self, a: Alert) {
        let line = a.to_json();
        self.inner
            .emitted
            .with_label_values(&[a.rampart.app.name(), a.event_type.name()])
            .inc();
        self.inner.sinks.write(&line, &a);
        if let Ok(mut at) = self.inner.attacks.lock() {
            at.observe(&a);
        }
        let a = Arc::new(a);
        if let Ok(mut r) = self.inner.recent.lock() {
            r.push_back(a.clone());
            while r.len() > RECENT_KEPT {
                r.pop_front();
            }
        }
        // No subscriber is not an error.
        let _ = self.inner.live.send(a);
    }

    /// The newest `n` alerts, oldest first.
    pub fn recent(&self, n: usize) -> Vec<Alert> {
        self.inner
            .recent
            .lock()
            .map(|r| {
                r.iter()
                    .skip(r.len().saturating_sub(n))
                    .map(|a| (**a).clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Attacks in progress (newest first), then ended ones (newest first).
    pub fn attacks(&self) -> Vec<Attack> {
        self.inner
            .attacks
            .lock()
            .map(|a| a.list())
            .unwrap_or_default()
    }

    /// Every alert from now on (the dashboard's live feed). A receiver that
    /// falls behind by more than 256 alerts loses the oldest ones.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<Alert>> {
        self.inner.live.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alert_is_eve_json_with_rampart_fields() {
        let mut a = Alert::rule(App::Ddos, "block", "syn_flood", Action::Blocked).with_flow(
            "10.10.0.101".parse().unwrap(),
            1234,
            "10.10.0.2".parse().unwrap(),
            80,
            6,
        );
        a.in_iface = Some("host0".into());
        a.rampart.tier = Some("xdp".into());
        a.rampart.pps = Some(1.5e6);
        a.rampart.top_sources = vec!["10.10.0.101".into()];
        let a = a.with_detail("syn_pps", 1e6);
        let v: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
        assert_eq!(v["event_type"], "alert");
        assert_eq!(v["src_ip"], "10.10.0.101");
        assert_eq!(v["dest_port"], 80);
        assert_eq!(v["proto"], "TCP");
        assert!(v["community_id"].as_str().unwrap().starts_with("1:"));
        assert_eq!(v["alert"]["signature_id"], 9_100_001);
        assert_eq!(v["alert"]["action"], "blocked");
        assert_eq!(v["alert"]["gid"], 1);
        assert_eq!(v["alert"]["category"], "Attempted Denial of Service");
        assert_eq!(v["rampart"]["app"], "ddos");
        assert_eq!(v["rampart"]["event"], "block");
        assert_eq!(v["rampart"]["tier"], "xdp");
        assert_eq!(v["rampart"]["syn_pps"], 1e6, "details are flattened");
        assert!(
            v["rampart"].get("victim").is_none(),
            "unset fields are left out"
        );
        assert!(v.get("flow").is_none());
        // What is written reads back as the same alert.
        let back: Alert = serde_json::from_value(v).unwrap();
        assert_eq!(back, a);
    }

    /// Every example in docs/alerts.md is an alert of this schema, written
    /// as this module writes it, with the rule the table gives its id.
    #[test]
    fn the_documented_examples_are_alerts() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/alerts.md"))
                .expect("docs/alerts.md");
        let mut n = 0;
        for block in doc.split("```json\n").skip(1) {
            let line = block.split("\n```").next().unwrap().trim();
            let a: Alert = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(a.to_json(), line, "written differently by the module");
            assert!(parse_timestamp(&a.timestamp).is_some(), "{line}");
            if let Some(r) = &a.alert {
                let s = SIGNATURES
                    .iter()
                    .find(|s| s.id == r.signature_id)
                    .expect("a known id");
                assert_eq!(
                    (s.signature, s.category, s.severity, s.app),
                    (&*r.signature, &*r.category, r.severity, a.rampart.app),
                    "{line}"
                );
            }
            assert_eq!(
                a.alert.is_some(),
                a.event_type == EventType::Alert,
                "{line}"
            );
            n += 1;
        }
        assert!(n >= 6, "{n} examples");
    }

    #[test]
    fn timestamps_are_iso8601_with_microseconds_and_offset() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_795_503_515_640_123);
        let s = timestamp(t);
        assert_eq!(s, "2026-11-24T06:58:35.640123+00:00");
        assert_eq!(parse_timestamp(&s), Some(1_795_503_515.640_123));
        // Suricata's own form (+0000) reads too.
        assert_eq!(
            parse_timestamp("2026-11-24T06:58:35.640123+0000"),
            Some(1_795_503_515.640_123)
        );
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn attacks_follow_their_events() {
        let al = Alerts::memory();
        let ev = |event: &str, pps: f64| {
            let mut a = Alert::rule(App::Ddos, event, "udp_amplification/dns", Action::Blocked)
                .with_dest("10.10.0.2".parse().unwrap());
            a.rampart.victim = Some("10.10.0.2".into());
            a.rampart.vector = Some("udp_amplification/dns".into());
            a.rampart.pps = Some(pps);
            a.rampart.sources = Some(300);
            a
        };
        let mut live = al.subscribe();
        al.emit(ev("attack_start", 1000.0));
        al.emit(ev("attack_update", 5000.0));
        al.emit(Alert::rule(
            App::Ddos,
            "block",
            "udp_amplification/dns",
            Action::Blocked,
        ));
        let at = al.attacks();
        assert_eq!(at.len(), 1);
        assert!(at[0].active());
        assert_eq!(at[0].peak_pps, 5000.0);
        assert_eq!(at[0].sources, 300);
        assert_eq!(at[0].victim.as_deref(), Some("10.10.0.2"));
        assert_eq!(at[0].events, 2, "the block is not an attack event");
        al.emit(ev("attack_end", 10.0));
        let at = al.attacks();
        assert_eq!(at.len(), 1);
        assert!(!at[0].active());
        assert_eq!(at[0].peak_pps, 5000.0, "the peak stays");
        // A new attack on the same victim and vector is a new attack.
        al.emit(ev("attack_start", 7.0));
        let at = al.attacks();
        assert_eq!(at.len(), 2);
        assert!(at[0].active() && !at[1].active());
        assert_eq!(al.recent(2).len(), 2);
        assert_eq!(al.recent(100).len(), 5);
        assert_eq!(live.try_recv().unwrap().rampart.event, "attack_start");
    }

    #[test]
    fn emitted_alerts_are_counted_with_every_label_pre_created() {
        let m = Metrics::new();
        let al = Alerts::open(&AlertsConfig::none(), &[App::Ddos], &m).unwrap();
        let text = m.render();
        assert!(
            text.contains("rampart_alerts_total{app=\"ddos\",event_type=\"alert\"} 0"),
            "{text}"
        );
        assert!(text.contains("rampart_alerts_total{app=\"ddos\",event_type=\"stats\"} 0"));
        al.emit(Alert::new(App::Ddos, EventType::Stats, "resume"));
        assert!(m
            .render()
            .contains("rampart_alerts_total{app=\"ddos\",event_type=\"stats\"} 1"));
    }
}
