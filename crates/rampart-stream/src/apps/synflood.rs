//! SYN-flood detection: incomplete TCP handshakes per destination per
//! window (default 10 s).
//!
//! Graph: Source → Filter (TCP SYN or ACK) → Map (handshake key: the SYN
//! key ⟨src, dst, dport⟩; a SYN-ACK's ⟨dst, src, sport⟩ — so a SYN, its
//! SYN-ACK and the client's ACKs share a key) → Keyed Window (tumbling, per
//! handshake key: SYNs, SYN-ACKs, client ACKs; incomplete = SYNs not
//! followed by a client ACK) → Filter (incomplete > 0) → Keyed Window
//! (tumbling, same alignment, per destination: sum) → Filter (≥ threshold)
//! → Sink.

use std::time::Duration;

use serde::Serialize;

use super::{Addr, EngineOpts};
use crate::engine::{agg, Filter, KeyedWindow, Map, Pipeline, Sink, WindowInfo, WindowSpec};
use crate::export::json::{epoch_secs, iso8601, Alert, AlertInfo};
use crate::flowid::jhash2;
use crate::flowid::KeyMode;
use crate::offload::planner::{AppGraph, OpDesc, OpKind};
use crate::offload::predicate::{FlagClause, Predicate};
use crate::source::{self, PacketSource};
use crate::tuple::{tcp, StreamTuple, TupleExt, ST_FLOWID_SEED};

/// Settings.
#[derive(Debug, Clone, Serialize)]
pub struct SynfloodConfig {
    /// Window length (default 10 s).
    pub window: Duration,
    /// Incomplete handshakes per destination per window that raise an alert.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct HsKey {
    client: Addr,
    server: Addr,
    port: u16,
}

#[derive(Debug, Clone, Copy)]
struct HsEv {
    key: HsKey,
    syn: u8,
    synack: u8,
    ack: u8,
}

#[derive(Debug, Default, Clone, Copy)]
struct HsAcc {
    syn: u64,
    synack: u64,
    ack: u64,
}

#[derive(Debug, Clone, Copy)]
struct PerKey {
    server: Addr,
    port: u16,
    incomplete: u64,
    syn: u64,
    synack: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct DstAcc {
    incomplete: u64,
    syn: u64,
    synack: u64,
    sources: u64,
    port: u16,
    port_max: u64,
}

/// Details of a SYN-flood alert.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FloodDetails {
    /// Window start.
    pub window_start: String,
    /// Window end.
    pub window_end: String,
    /// Incomplete handshakes in the window.
    pub incomplete_handshakes: u64,
    /// SYNs seen.
    pub syn: u64,
    /// SYN-ACKs seen.
    pub synack: u64,
    /// Distinct ⟨client, port⟩ keys with an incomplete handshake.
    pub half_open_keys: u64,
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
    /// Port with most incomplete handshakes.
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
                "{} got {} incomplete TCP handshakes in {} s",
                self.dst,
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

/// The `tcp-handshake` Filter: TCP with SYN, or ACK without RST and SYN.
pub fn handshake_filter() -> Predicate {
    Predicate {
        protos: vec![crate::tuple::proto::TCP],
        tcp_flags: vec![
            FlagClause::all(tcp::SYN),
            FlagClause {
                mask: tcp::ACK | tcp::RST | tcp::SYN,
                value: tcp::ACK,
            },
        ],
        ..Predicate::default()
    }
}

/// The operator graph as the offload planner sees it (names as in [`build`]).
pub fn graph(cfg: &SynfloodConfig) -> AppGraph {
    let w = cfg.engine.workers;
    AppGraph {
        app: "synflood".into(),
        ops: vec![
            OpDesc::new("source", OpKind::Source, "frames → tuples"),
            OpDesc::new(
                "tcp-handshake",
                OpKind::Filter {
                    predicate: handshake_filter(),
                },
                "SYN, SYN-ACK, client ACK",
            ),
            OpDesc::new(
                "hs-key",
                OpKind::Stateless,
                "Map: tuple → handshake event (not a tuple: XDP emits tuples only)",
            ),
            OpDesc::new(
                "handshakes",
                OpKind::Keyed {
                    key: "⟨client, server, port⟩ (tumbling window)".into(),
                    partition: Some(KeyMode::SynPair),
                    note: None,
                    parallelism: w,
                },
                "SYN / SYN-ACK / ACK counts per handshake",
            ),
            OpDesc::new(
                "incomplete",
                OpKind::Stateless,
                "Filter: incomplete handshakes",
            ),
            OpDesc::new(
                "per-destination",
                OpKind::Keyed {
                    key: "the server (tumbling window)".into(),
                    partition: None,
                    note: None,
                    parallelism: w,
                },
                "incomplete handshakes per destination",
            ),
            OpDesc::new(
                "over-threshold",
                OpKind::Stateless,
                "Filter: over the threshold",
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
    let g = e.graph("synflood")?;
    let p = src.parallelism();
    let threshold = cfg.threshold;
    let spec = WindowSpec::time_tumbling(cfg.window);
    let pipe = g.source(source::operator(src, e.batch))?;
    let pipe = if applied.has("tcp-handshake") {
        pipe
    } else {
        let f = handshake_filter().compile();
        pipe.add(
            Filter::new("tcp-handshake", move |t: &StreamTuple| f.matches(t))
                .with_parallelism(p)
                .with_output_batch(e.batch),
        )?
    };
    Ok(pipe
        .add(
            Map::new("hs-key", |t: StreamTuple| {
                let (s, d) = (Addr::src(&t), Addr::dst(&t));
                let synack = t.tcp_has(tcp::SYN | tcp::ACK);
                let key = if synack {
                    HsKey {
                        client: d,
                        server: s,
                        port: t.sport,
                    }
                } else {
                    HsKey {
                        client: s,
                        server: d,
                        port: t.dport,
                    }
                };
                let syn = t.tcp_flags & tcp::SYN != 0 && !synack;
                HsEv {
                    key,
                    syn: u8::from(syn),
                    synack: u8::from(synack),
                    ack: u8::from(!syn && !synack),
                }
            })
            .with_parallelism(p)
            .with_output_batch(e.batch),
        )?
        // Steered by the SYN-pair FlowID: every handshake key on one replica.
        .assume_partitioned(applied.partition == Some(KeyMode::SynPair))
        .add(
            KeyedWindow::new(
                "handshakes",
                |e: &HsEv| e.key,
                spec,
                agg(
                    HsAcc::default,
                    |a: &mut HsAcc, e: &HsEv| {
                        a.syn += u64::from(e.syn);
                        a.synack += u64::from(e.synack);
                        a.ack += u64::from(e.ack);
                    },
                    |k: &HsKey, a: HsAcc, _: &WindowInfo| PerKey {
                        server: k.server,
                        port: k.port,
                        incomplete: a.syn - a.syn.min(a.ack),
                        syn: a.syn,
                        synack: a.synack,
                    },
                ),
            )
            .with_parallelism(e.workers)
            .with_output_batch(e.batch),
        )?
        .add(
            Filter::new("incomplete", |k: &PerKey| k.incomplete > 0)
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
                        a.sources += 1;
                        if k.incomplete > a.port_max
                            || (k.incomplete == a.port_max && k.port < a.port)
                        {
                            a.port_max = k.incomplete;
                            a.port = k.port;
                        }
                    },
                    move |dst: &Addr, a: DstAcc, w: &WindowInfo| {
                        (
                            a.incomplete,
                            FloodAlert {
                                window_start_ns: w.start,
                                window_end_ns: w.end,
                                dst: *dst,
                                port: a.port,
                                details: FloodDetails {
                                    window_start: iso8601(w.start),
                                    window_end: iso8601(w.end),
                                    incomplete_handshakes: a.incomplete,
                                    syn: a.syn,
                                    synack: a.synack,
                                    half_open_keys: a.sources,
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
