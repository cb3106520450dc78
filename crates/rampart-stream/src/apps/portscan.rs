//! Port-scan detection with Threshold Random Walk (Jung, Paxson, Berger,
//! Balakrishnan, "Fast Portscan Detection Using Sequential Hypothesis
//! Testing", IEEE S&P 2004).
//!
//! Graph: Source → Filter (TCP SYN, SYN-ACK, RST-ACK) → Map (tuple →
//! connection part, [`crate::part`]) → Map (attempt key: ⟨initiator,
//! responder, port⟩ — the SYN's sender, its receiver and destination port,
//! or for an answer alone its receiver, sender and source port) → Keyed
//! Window (session per attempt, gap = response timeout: its outcome is
//! *success* if the responder answered SYN-ACK, *failure* on RST-ACK or
//! silence) → FlatMap keyed by initiator (the walk) → Sink. With the tap's
//! aggregation the parts come pre-summed from XDP.
//!
//! The walk, per remote host (initiator): every *first contact* (a
//! responder — or, with [`FirstContact::Service`], a responder:port — the
//! host had not tried before) multiplies the likelihood ratio Λ by
//! θ1/θ0 on success and (1−θ1)/(1−θ0) on failure. Λ ≥ η1 = β/α declares a
//! scanner (one alert); Λ ≤ η0 = (1−β)/(1−α) declares the host benign and
//! the walk restarts (its contacts are remembered). Paper defaults:
//! θ0 = 0.8, θ1 = 0.2, α = 0.01, β = 0.99 — four failed first contacts
//! in a row flag a scanner. The default first contact is a *service*
//! (responder and port): the paper's host-level contacts never flag a
//! vertical scan of one host (nmap's default), and a benign client rarely
//! fails on four new services in a row.

use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::{part_stream, Addr, EngineOpts};
use crate::engine::{
    agg, Filter, FlatMap, KeyedWindow, Map, Pipeline, Shipper, Sink, WindowInfo, WindowSpec,
};
use crate::export::json::{epoch_secs, iso8601, Alert, AlertInfo};
use crate::flowid::jhash2;
use crate::offload::planner::{AppGraph, OpDesc, OpKind};
use crate::offload::predicate::{FlagClause, Predicate};
use crate::part::FlowPart;
use crate::source::PacketSource;
use crate::tuple::{tcp, ST_FLOWID_SEED};

/// What counts as a first contact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstContact {
    /// A responder address not contacted before (the paper; misses
    /// vertical scans of one host).
    Host,
    /// A responder address and port not contacted before (the default:
    /// also catches vertical scans of one host).
    Service,
}

/// Settings (names as in the paper).
#[derive(Debug, Clone, Serialize)]
pub struct PortscanConfig {
    /// Pr[success | benign].
    pub theta0: f64,
    /// Pr[success | scanner].
    pub theta1: f64,
    /// Target false-positive probability.
    pub alpha: f64,
    /// Target detection probability.
    pub beta: f64,
    /// An attempt unanswered for this long failed (default 3 s).
    pub response_timeout: Duration,
    /// First-contact definition.
    pub first_contact: FirstContact,
    /// A remote host's walk (its likelihood ratio and the contacts it
    /// made) is forgotten after this long without a new outcome, in event
    /// time (default 600 s). Bounds the state of a long run to the hosts
    /// active in the last `host_idle`; a scanner idle that long may be
    /// flagged again when it comes back.
    pub host_idle: Duration,
    /// Engine settings.
    pub engine: EngineOpts,
}

impl Default for PortscanConfig {
    fn default() -> Self {
        Self {
            theta0: 0.8,
            theta1: 0.2,
            alpha: 0.01,
            beta: 0.99,
            response_timeout: Duration::from_secs(3),
            first_contact: FirstContact::Service,
            host_idle: Duration::from_secs(600),
            engine: EngineOpts::default(),
        }
    }
}

impl PortscanConfig {
    /// Check the parameters as the paper requires (θ1 < θ0, α < β).
    ///
    /// # Errors
    /// Which parameter is wrong.
    pub fn validate(&self) -> crate::Result<()> {
        let p = |x: f64| x > 0.0 && x < 1.0;
        if !(p(self.theta0) && p(self.theta1) && p(self.alpha) && p(self.beta)) {
            return Err(crate::Error::Invalid(
                "portscan: θ0, θ1, α, β must each be in (0, 1)".into(),
            ));
        }
        if self.theta1 >= self.theta0 {
            return Err(crate::Error::Invalid(format!(
                "portscan: θ1 ({}) must be below θ0 ({}): scanners succeed less often than benign hosts",
                self.theta1, self.theta0
            )));
        }
        if self.alpha >= self.beta {
            return Err(crate::Error::Invalid(format!(
                "portscan: α ({}) must be below β ({})",
                self.alpha, self.beta
            )));
        }
        if self.host_idle.is_zero() {
            return Err(crate::Error::Invalid(
                "portscan: --host-idle must be > 0".into(),
            ));
        }
        if self.response_timeout.is_zero() {
            return Err(crate::Error::Invalid(
                "portscan: --response-timeout must be > 0".into(),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct AttemptKey {
    initiator: Addr,
    responder: Addr,
    port: u16,
}

/// What a connection part says about one attempt.
#[derive(Debug, Clone, Copy)]
struct Ev {
    key: AttemptKey,
    /// Time of the initiator's first SYN in the part, if it sent one.
    syn: Option<u64>,
    /// The responder answered SYN-ACK.
    synack: bool,
    /// Last packet of the part.
    last: u64,
}

/// The attempt a part belongs to: the endpoint that sent a SYN initiated
/// it; without a SYN, the receiver of the SYN-ACK or RST-ACK did.
fn attempt(p: &FlowPart) -> Ev {
    let d = &p.dir;
    let init = if d[0].syn > 0 || d[1].syn > 0 {
        p.client()
    } else if d[0].synack > 0 || d[0].rst > 0 {
        1
    } else {
        0
    };
    let resp = 1 - init;
    Ev {
        key: AttemptKey {
            initiator: p.key.addr(init),
            responder: p.key.addr(resp),
            port: p.key.port[resp],
        },
        syn: (d[init].syn > 0).then_some(d[init].first_ns),
        synack: d[resp].synack > 0,
        last: p.last_ns(),
    }
}

/// Outcome of one connection attempt.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    key: AttemptKey,
    first_syn: u64,
    success: bool,
    valid: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct AttemptAcc {
    syn: Option<u64>,
    synack: bool,
}

/// A scanner alert's details.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ScanDetails {
    /// First contacts evaluated before the decision.
    pub first_contacts: u64,
    /// Of which failed.
    pub failures: u64,
    /// Of which succeeded.
    pub successes: u64,
    /// ln Λ at the decision.
    pub log_likelihood_ratio: f64,
    /// ln η1.
    pub log_eta1: f64,
    /// Some of the responders contacted (up to 16), `addr:port`.
    pub contacted: Vec<String>,
    /// Time of the first SYN of the deciding attempt.
    pub attempt_ts: String,
}

/// A host declared a scanner.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanAlert {
    /// Decision time (event time of the deciding outcome), ns.
    pub ts_ns: u64,
    /// The scanner.
    pub src: Addr,
    /// Details.
    pub details: ScanDetails,
}

impl ScanAlert {
    /// The alert as a JSON event.
    pub fn event(&self) -> Alert<ScanDetails> {
        let fid = jhash2(
            &[self.src.w[0], self.src.w[1], self.src.w[2], self.src.w[3]],
            ST_FLOWID_SEED,
        );
        Alert {
            timestamp: iso8601(self.ts_ns),
            ts: epoch_secs(self.ts_ns),
            event_type: "alert",
            flow_id: u64::from(fid),
            src_ip: Some(self.src.to_string()),
            src_port: None,
            dest_ip: None,
            dest_port: None,
            proto: "TCP".into(),
            note: "Scan::TRW_Scanner",
            msg: format!(
                "{} is a scanner: {} of {} first contacts failed (TRW)",
                self.src, self.details.failures, self.details.first_contacts
            ),
            alert: AlertInfo {
                action: "allowed",
                gid: 1,
                signature_id: 9_000_001,
                rev: 1,
                signature: "RAMPART SCAN Threshold Random Walk scanner".into(),
                category: "Attempted Information Leak",
                severity: 2,
            },
            app: "portscan",
            details: self.details.clone(),
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Walk {
    llr: f64,
    contacted: FxHashSet<(Addr, u16)>,
    order: Vec<String>,
    n: u64,
    fail: u64,
    ok: u64,
    scanner: bool,
    /// Event time of the host's latest outcome, ns.
    last_ns: u64,
}

/// The `handshake` Filter: TCP SYN (a SYN or SYN-ACK) or RST+ACK.
pub fn handshake_filter() -> Predicate {
    Predicate {
        protos: vec![crate::tuple::proto::TCP],
        tcp_flags: vec![
            FlagClause::all(tcp::SYN),
            FlagClause::all(tcp::RST | tcp::ACK),
        ],
        ..Predicate::default()
    }
}

/// The operator graph as the offload planner sees it (names as in [`build`]).
pub fn graph(cfg: &PortscanConfig) -> AppGraph {
    let w = cfg.engine.workers;
    AppGraph {
        app: "portscan".into(),
        // Alerts within a second or two of their window.
        epoch: crate::source::tap::DEFAULT_EPOCH,
        ops: vec![
            OpDesc::new("source", OpKind::Source, "frames → tuples"),
            OpDesc::new(
                "handshake",
                OpKind::Filter {
                    predicate: handshake_filter(),
                },
                "SYN, SYN-ACK, RST-ACK",
            ),
            OpDesc::new(
                "part",
                OpKind::Part,
                "Map: tuple → connection part (SYN / SYN-ACK / RST counts per direction)",
            ),
            OpDesc::new(
                "attempt",
                OpKind::Stateless,
                "Map: part → connection attempt event",
            ),
            OpDesc::new(
                "attempts",
                OpKind::Keyed {
                    key: "⟨initiator, responder, port⟩ (session window = response timeout)".into(),
                    partition: None,
                    note: Some(
                        "a RST-ACK's attempt key is ⟨dst, src, sport⟩, which the SYN-pair FlowID does not pair with its SYN (it pairs SYN-ACKs only), and the direction-independent one also splits by the initiator's source port".into(),
                    ),
                    parallelism: w,
                },
                "attempt outcomes",
            ),
            OpDesc::new("initiated", OpKind::Stateless, "Filter: attempts that began with a SYN"),
            OpDesc::new(
                "trw",
                OpKind::Keyed {
                    key: "the initiator (Threshold Random Walk)".into(),
                    partition: None,
                    note: None,
                    parallelism: w,
                },
                "TRW walk per remote host",
            ),
            OpDesc::new("alerts", OpKind::Sink, "scanner alerts"),
        ],
    }
}

/// Threshold random walk (Jung et al.) over each remote host's first
/// contacts: the log-likelihood ratio of "scanner" against "benign".
#[derive(Debug, Clone)]
struct Trw {
    hosts: FxHashMap<Addr, Walk>,
    /// A host idle this long starts over.
    idle_ns: u64,
    /// Event time of the next sweep of idle hosts.
    next_sweep: u64,
    /// Steps of the walk on a success and on a failure.
    up: f64,
    down: f64,
    /// Thresholds: scanner at or above `eta1`, benign at or below `eta0`.
    eta1: f64,
    eta0: f64,
    /// A first contact is (host, port) rather than host.
    service: bool,
}

impl Trw {
    fn new(cfg: &PortscanConfig) -> Self {
        Self {
            hosts: FxHashMap::default(),
            idle_ns: u64::try_from(cfg.host_idle.as_nanos()).unwrap_or(u64::MAX),
            next_sweep: 0,
            up: (cfg.theta1 / cfg.theta0).ln(),
            down: ((1.0 - cfg.theta1) / (1.0 - cfg.theta0)).ln(),
            eta1: (cfg.beta / cfg.alpha).ln(),
            eta0: ((1.0 - cfg.beta) / (1.0 - cfg.alpha)).ln(),
            service: cfg.first_contact == FirstContact::Service,
        }
    }

    /// Walk one attempt's outcome; the alert when its initiator just became
    /// a scanner.
    fn step(&mut self, o: Outcome) -> Option<ScanAlert> {
        let now = o.first_syn;
        // Forget hosts idle for `host_idle`, a quarter of it at a time
        // (amortised: one pass over the table per quarter of event time).
        if now >= self.next_sweep {
            let idle_ns = self.idle_ns;
            self.hosts
                .retain(|_, h| now.saturating_sub(h.last_ns) < idle_ns);
            self.next_sweep = now.saturating_add((idle_ns / 4).max(1));
        }
        let h = self.hosts.entry(o.key.initiator).or_default();
        if h.n > 0 && now.saturating_sub(h.last_ns) >= self.idle_ns {
            *h = Walk::default();
        }
        h.last_ns = h.last_ns.max(now);
        if h.scanner {
            return None;
        }
        let contact = (o.key.responder, if self.service { o.key.port } else { 0 });
        if !h.contacted.insert(contact) {
            return None;
        }
        if h.order.len() < 16 {
            h.order.push(format!("{}:{}", o.key.responder, o.key.port));
        }
        h.n += 1;
        if o.success {
            h.ok += 1;
            h.llr += self.up;
        } else {
            h.fail += 1;
            h.llr += self.down;
        }
        if h.llr >= self.eta1 {
            h.scanner = true;
            let contacted = std::mem::take(&mut h.order);
            // Decided: only the flag is needed until the host goes idle.
            h.contacted = FxHashSet::default();
            return Some(ScanAlert {
                ts_ns: o.first_syn,
                src: o.key.initiator,
                details: ScanDetails {
                    first_contacts: h.n,
                    failures: h.fail,
                    successes: h.ok,
                    log_likelihood_ratio: h.llr,
                    log_eta1: self.eta1,
                    contacted,
                    attempt_ts: iso8601(o.first_syn),
                },
            });
        }
        if h.llr <= self.eta0 {
            // Benign: the walk restarts (contacts stay remembered).
            h.llr = 0.0;
        }
        None
    }
}

/// Build the graph; `out` gets every alert, then `None` at the end.
/// Operators the source already applied (an offload) are left out.
///
/// # Errors
/// Invalid parameters, or a source offloaded for another app.
pub fn build<S: PacketSource>(
    src: S,
    cfg: &PortscanConfig,
    out: impl FnMut(Option<ScanAlert>) + Clone + Send + 'static,
) -> crate::Result<Pipeline> {
    cfg.validate()?;
    let e = &cfg.engine;
    let applied = src.applied();
    applied.check_app("portscan")?;
    super::check_epoch(&src, &[cfg.response_timeout], &[])?;
    let g = e.graph("portscan")?;
    let p = src.parallelism();
    // Parts summed without the handshake Filter (a tap shared with apps
    // that need every packet): keep the parts with a handshake packet.
    let unfiltered_parts = src.delivers_parts() && !applied.has("handshake");
    let gap = cfg.response_timeout;
    let mut trw = Trw::new(cfg);
    let walk = move |o: Outcome, sh: &mut Shipper<'_, ScanAlert>| {
        if let Some(alert) = trw.step(o) {
            sh.ship(alert);
        }
    };
    let parts = part_stream(&g, src, Some(("handshake", handshake_filter())), e.batch)?;
    let parts = if unfiltered_parts {
        parts.add(
            Filter::new("handshake", |x: &FlowPart| {
                x.key.proto == crate::tuple::proto::TCP
                    && x.dir.iter().any(|d| d.syn + d.synack + d.rst > 0)
            })
            .with_parallelism(p)
            .with_output_batch(e.batch),
        )?
    } else {
        parts
    };
    Ok(parts
        .add(
            Map::new("attempt", |p: FlowPart| attempt(&p))
                .with_parallelism(p)
                .with_output_batch(e.batch),
        )?
        .add(
            KeyedWindow::new(
                "attempts",
                |e: &Ev| e.key,
                WindowSpec::session(gap, gap * 20),
                agg(
                    AttemptAcc::default,
                    |a: &mut AttemptAcc, e: &Ev| {
                        if let Some(t) = e.syn {
                            a.syn = Some(a.syn.map_or(t, |s| s.min(t)));
                        }
                        a.synack |= e.synack;
                    },
                    |k: &AttemptKey, a: AttemptAcc, _: &WindowInfo| Outcome {
                        key: *k,
                        first_syn: a.syn.unwrap_or(0),
                        success: a.synack,
                        valid: a.syn.is_some(),
                    },
                ),
            )
            .with_span(|e: &Ev| e.last)
            .with_parallelism(e.workers)
            .with_output_batch(e.batch),
        )?
        .add(
            Filter::new("initiated", |o: &Outcome| o.valid)
                .with_parallelism(e.workers)
                .with_output_batch(e.batch),
        )?
        .add(
            FlatMap::new("trw", walk)
                .with_key_by(|o: &Outcome| o.key.initiator)
                .with_parallelism(e.workers)
                .with_output_batch(e.batch),
        )?
        .sink(Sink::new("alerts", out))?)
}
