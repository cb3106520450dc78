//! SYN-flood detection: TCP handshakes that never complete, per
//! destination service (address and port) per window (default 10 s).
//!
//! Graph: Source → Filter (TCP) → Map (tuple → connection part,
//! [`crate::part`]) → Keyed Window (tumbling, per connection: both
//! directions' SYN, SYN-ACK, ACK, RST counts) → Filter (incomplete) →
//! Keyed Window (tumbling, same alignment, per destination: sum) → Filter
//! (≥ threshold) → Sink.
//!
//! A handshake is *incomplete* when the initiator's SYN got neither its
//! ACK nor a RST from either side: the server holds it half-open. A SYN
//! the server refused (RST, a closed port) or the client aborted (RST
//! after the SYN-ACK — what `nmap -sS` does) costs the server no backlog
//! and is not counted, so a port scan is not a SYN flood. With the tap's
//! aggregation the per-connection counts come from XDP.
//!
//! The tap on a server's own interface sees its ingress only: the server's
//! RST to a SYN for a closed port is never seen, so that SYN looks
//! incomplete. The threshold therefore applies per destination *port*: a
//! flood fills one service's backlog with thousands of SYNs, a vertical
//! scan sends one or two per port.

use std::time::Duration;

use serde::Serialize;

use super::{part_stream, Addr, EngineOpts};
use crate::engine::{agg, Filter, KeyedWindow, Map, Pipeline, Sink, WindowInfo, WindowSpec};
use crate::export::json::{epoch_secs, iso8601, Alert, AlertInfo};
use crate::flowid::jhash2;
use crate::flowid::KeyMode;
use crate::offload::planner::{AppGraph, OpDesc, OpKind};
use crate::offload::predicate::Predicate;
use crate::part::{ConnKey, FlowPart};
use crate::source::PacketSource;
use crate::tuple::ST_FLOWID_SEED;

/// Settings.
#[derive(Debug, Clone, Serialize)]
pub struct SynfloodConfig {
    /// Window length (default 10 s).
    pub window: Duration,
    /// Incomplete handshakes per destination port per window that raise an alert.
    pub threshold: u64,
    /// Engine settings.
    pub engine: EngineOpts,
}

impl Default for SynfloodConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(10),
            threshold: 200,
            engine: EngineOpts::default(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct PerKey {
    server: Addr,
    port: u16,
    incomplete: u64,
    syn: u64,
    synack: u64,
    refused: u64,
    aborted: u64,
}

#[derive(Debug, Default, Clone)]
struct DstAcc {
    incomplete: u64,
    syn: u64,
    synack: u64,
    refused: u64,
    aborted: u64,
    sources: u64,
    /// Incomplete handshakes per destination port.
    ports: std::collections::BTreeMap<u16, u64>,
}

/// Details of a SYN-flood alert.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FloodDetails {
    /// Window start.
    pub window_start: String,
    /// Window end.
    pub window_end: String,
    /// Incomplete handshakes to the alert's port in the window (what
    /// crossed the threshold).
    pub incomplete_handshakes: u64,
    /// Incomplete handshakes to the destination's other ports.
    pub incomplete_other_ports: u64,
    /// SYNs seen.
    pub syn: u64,
    /// SYN-ACKs seen.
    pub synack: u64,
    /// Connections with an incomplete handshake.
    pub half_open_keys: u64,
    /// Handshakes the server refused with RST (not counted as incomplete).
    pub refused: u64,
    /// Handshakes the client aborted with RST (not counted as incomplete).
    pub aborted: u64,
    /// Threshold that was crossed.
    pub threshold: u64,
}

/// A destination under SYN flood in one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloodAlert {
    /// Window start, ns.
    pub window_start_ns: u64,
    /// Window end, ns.
    pub window_end_ns: u64,
    /// Victim.
    pub dst: Addr,
    /// The port with most incomplete handshakes (the service flooded).
    pub port: u16,
    /// Details.
    pub details: FloodDetails,
}

impl FloodAlert {
    /// The alert as a JSON event.
    pub fn event(&self) -> Alert<FloodDetails> {
        let fid = jhash2(
            &[self.dst.w[0], self.dst.w[1], self.dst.w[2], self.dst.w[3]],
            ST_FLOWID_SEED,
        );
        Alert {
            timestamp: iso8601(self.window_end_ns),
            ts: epoch_secs(self.window_end_ns),
            event_type: "alert",
            flow_id: u64::from(fid),
            src_ip: None,
            src_port: None,
            dest_ip: Some(self.dst.to_string()),
            dest_port: Some(self.port),
            proto: "TCP".into(),
            note: "SYN_Flood",
            msg: format!(
                "{} port {} got {} incomplete TCP handshakes in {} s",
                self.dst,
                self.port,
                self.details.incomplete_handshakes,
                (self.window_end_ns - self.window_start_ns) / 1_000_000_000
            ),
            alert: AlertInfo {
                action: "allowed",
                gid: 1,
                signature_id: 9_000_002,
                rev: 1,
                signature: "RAMPART DOS TCP SYN flood (incomplete handshakes over threshold)"
                    .into(),
                category: "Attempted Denial of Service",
                severity: 2,
            },
            app: "synflood",
            details: self.details.clone(),
        }
    }
}

/// The `tcp` Filter: TCP segments (every flag matters to a handshake).
pub fn tcp_filter() -> Predicate {
    Predicate {
        protos: vec![crate::tuple::proto::TCP],
        ..Predicate::default()
    }
}

/// A connection's handshakes in one window; `None` when it saw no SYN.
fn classify(p: &FlowPart) -> Option<PerKey> {
    let c = p.client();
    let (cl, sv) = (&p.dir[c], &p.dir[1 - c]);
    if cl.syn == 0 {
        return None;
    }
    let refused = sv.rst > 0 && sv.synack == 0;
    let aborted = !refused && cl.rst > 0 && cl.ack == 0;
    let incomplete = cl.ack == 0 && cl.rst == 0 && sv.rst == 0;
    Some(PerKey {
        server: p.key.addr(1 - c),
        port: p.key.port[1 - c],
        incomplete: u64::from(incomplete),
        syn: u64::from(cl.syn),
        synack: u64::from(sv.synack),
        refused: u64::from(refused),
        aborted: u64::from(aborted),
    })
}

/// The operator graph as the offload planner sees it (names as in [`build`]).
pub fn graph(cfg: &SynfloodConfig) -> AppGraph {
    let w = cfg.engine.workers;
    AppGraph {
        app: "synflood".into(),
        // Alerts within a second or two of their window.
        epoch: crate::source::tap::DEFAULT_EPOCH,
        ops: vec![
            OpDesc::new("source", OpKind::Source, "frames → tuples"),
            OpDesc::new(
                "tcp",
                OpKind::Filter {
                    predicate: tcp_filter(),
                },
                "TCP segments",
            ),
            OpDesc::new(
                "part",
                OpKind::Part,
                "Map: tuple → connection part (SYN / SYN-ACK / ACK / RST counts per direction)",
            ),
            OpDesc::new(
                "handshakes",
                OpKind::Keyed {
                    key: "the connection (tumbling window)".into(),
                    partition: Some(KeyMode::Bidir),
                    note: None,
                    parallelism: w,
                },
                "handshake outcome per connection",
            ),
            OpDesc::new(
                "initiated",
                OpKind::Stateless,
                "Filter: connections that sent a SYN",
            ),
            OpDesc::new("handshake", OpKind::Stateless, "Map: the outcome"),
            OpDesc::new(
                "per-destination",
                OpKind::Keyed {
                    key: "the server (tumbling window)".into(),
                    partition: None,
                    note: None,
                    parallelism: w,
                },
                "incomplete handshakes per destination (and per port)",
            ),
            OpDesc::new(
                "over-threshold",
                OpKind::Stateless,
                "Filter: a port over the threshold",
            ),
            OpDesc::new("alert", OpKind::Stateless, "Map: the alert"),
            OpDesc::new("alerts", OpKind::Sink, "SYN-flood alerts"),
        ],
    }
}

/// Build the graph; `out` gets every alert, then `None` at the end.
/// Operators the source already applied (an offload) are left out.
///
/// # Errors
/// Invalid settings, or a source offloaded for another app.
pub fn build<S: PacketSource>(
    src: S,
    cfg: &SynfloodConfig,
    out: impl FnMut(Option<FloodAlert>) + Clone + Send + 'static,
) -> crate::Result<Pipeline> {
    if cfg.window.is_zero() || cfg.threshold == 0 {
        return Err(crate::Error::Invalid(
            "synflood: --window and --threshold must be > 0".into(),
        ));
    }
    let e = &cfg.engine;
    let applied = src.applied();
    applied.check_app("synflood")?;
    super::check_epoch(&src, &[], &[cfg.window])?;
    let g = e.graph("synflood")?;
    let threshold = cfg.threshold;
    let spec = WindowSpec::time_tumbling(cfg.window);
    Ok(part_stream(&g, src, Some(("tcp", tcp_filter())), e.batch)?
        // Steered by the direction-independent FlowID: every connection on one replica.
        .assume_partitioned(applied.partition == Some(KeyMode::Bidir))
        .add(
            KeyedWindow::new(
                "handshakes",
                |p: &FlowPart| p.key,
                spec,
                agg(
                    || None::<FlowPart>,
                    |a: &mut Option<FlowPart>, p: &FlowPart| match a {
                        Some(a) => a.merge(p),
                        None => *a = Some(*p),
                    },
                    |_: &ConnKey, a: Option<FlowPart>, _: &WindowInfo| a.and_then(|p| classify(&p)),
                ),
            )
            .with_parallelism(e.workers)
            .with_output_batch(e.batch),
        )?
        .add(
            Filter::new("initiated", |k: &Option<PerKey>| k.is_some())
                .with_parallelism(e.workers)
                .with_output_batch(e.batch),
        )?
        .add(
            Map::new("handshake", |k: Option<PerKey>| {
                k.unwrap_or(PerKey {
                    server: Addr::default(),
                    port: 0,
                    incomplete: 0,
                    syn: 0,
                    synack: 0,
                    refused: 0,
                    aborted: 0,
                })
            })
            .with_parallelism(e.workers)
            .with_output_batch(e.batch),
        )?
        .add(
            KeyedWindow::new(
                "per-destination",
                |k: &PerKey| k.server,
                spec,
                agg(
                    DstAcc::default,
                    |a: &mut DstAcc, k: &PerKey| {
                        a.incomplete += k.incomplete;
                        a.syn += k.syn;
                        a.synack += k.synack;
                        a.refused += k.refused;
                        a.aborted += k.aborted;
                        a.sources += u64::from(k.incomplete > 0);
                        if k.incomplete > 0 {
                            *a.ports.entry(k.port).or_default() += k.incomplete;
                        }
                    },
                    move |dst: &Addr, a: DstAcc, w: &WindowInfo| {
                        // The port with most incomplete handshakes (the lowest on a tie).
                        let (port, n) = a
                            .ports
                            .iter()
                            .max_by_key(|(p, n)| (**n, std::cmp::Reverse(**p)))
                            .map_or((0, 0), |(p, n)| (*p, *n));
                        (
                            n,
                            FloodAlert {
                                window_start_ns: w.start,
                                window_end_ns: w.end,
                                dst: *dst,
                                port,
                                details: FloodDetails {
                                    window_start: iso8601(w.start),
                                    window_end: iso8601(w.end),
                                    incomplete_handshakes: n,
                                    incomplete_other_ports: a.incomplete - n,
                                    syn: a.syn,
                                    synack: a.synack,
                                    half_open_keys: a.sources,
                                    refused: a.refused,
                                    aborted: a.aborted,
                                    threshold,
                                },
                            },
                        )
                    },
                ),
            )
            .with_parallelism(e.workers)
            .with_output_batch(e.batch),
        )?
        .add(
            Filter::new("over-threshold", move |x: &(u64, FloodAlert)| {
                x.0 >= threshold
            })
            .with_output_batch(e.batch),
        )?
        .add(Map::new("alert", |x: (u64, FloodAlert)| x.1).with_output_batch(e.batch))?
        .sink(Sink::new("alerts", out))?)
}
