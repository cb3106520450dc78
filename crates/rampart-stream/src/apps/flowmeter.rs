//! Flow meter: per-flow packets, bytes, first/last seen and TCP flags;
//! flows end on an idle timeout, an active timeout, or the end of the input
//! (RFC 5102 flowEndReason 1, 2, 4), and are exported as JSON lines (EVE
//! `flow` events) and IPFIX. Flows are unidirectional 5-tuples (IPFIX's
//! default); non-first fragments count under their 3-tuple with ports 0.
//!
//! Graph: Source → Map(FlowID, five-tuple) → Keyed Window (session per
//! 5-tuple: idle gap, active timeout) → Sink. With the offload ([`graph`]
//! is what the planner sees), the Source and the FlowID run in XDP and the
//! records arrive steered by the five-tuple FlowID, so the window's key-by
//! is a one-to-one hand-over when it has as many replicas as the source.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::{flow_id_map, Addr, EngineOpts};
use crate::engine::{agg, KeyedWindow, Pipeline, Sink, WindowInfo, WindowSpec};
use crate::export::json::{epoch_secs, iso8601, proto_name};
use crate::flowid::KeyMode;
use crate::offload::planner::{AppGraph, OpDesc, OpKind};
use crate::source::{self, PacketSource};
use crate::tuple::StreamTuple;

/// Settings.
#[derive(Debug, Clone, Serialize)]
pub struct FlowmeterConfig {
    /// A flow idle this long ends (NetFlow "inactive timeout"; default 15 s).
    pub idle: Duration,
    /// A flow this old ends and a new record starts (default 1800 s).
    pub active: Duration,
    /// Engine settings.
    pub engine: EngineOpts,
}

impl Default for FlowmeterConfig {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(15),
            active: Duration::from_secs(1800),
            engine: EngineOpts::default(),
        }
    }
}

/// Unidirectional flow key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FlowKey {
    /// Source address words.
    pub src: [u32; 4],
    /// Destination address words.
    pub dst: [u32; 4],
    /// Source port (0 for ICMP).
    pub sport: u16,
    /// Destination port (ICMP: type << 8 | code).
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// IPv6?
    pub v6: bool,
}

impl FlowKey {
    /// Key of a tuple.
    pub fn of(t: &StreamTuple) -> Self {
        let a = (Addr::src(t), Addr::dst(t));
        Self {
            src: a.0.w,
            dst: a.1.w,
            sport: t.sport,
            dport: t.dport,
            proto: t.proto,
            v6: a.0.v6,
        }
    }
    /// Source address.
    pub fn src_addr(&self) -> Addr {
        Addr {
            w: self.src,
            v6: self.v6,
        }
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Addr {
        Addr {
            w: self.dst,
            v6: self.v6,
        }
    }
}

/// Why a flow record was exported (IPFIX flowEndReason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Idle timeout (1).
    IdleTimeout = 1,
    /// Active timeout (2).
    ActiveTimeout = 2,
    /// End of the input / shutdown (4, "forced end").
    ForcedEnd = 4,
}

/// One exported flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowRecord {
    /// Key.
    pub key: FlowKey,
    /// First packet, ns.
    pub first_ns: u64,
    /// Last packet, ns.
    pub last_ns: u64,
    /// Packets.
    pub packets: u64,
    /// IP bytes (octetDeltaCount).
    pub bytes: u64,
    /// OR of TCP flags.
    pub tcp_flags: u8,
    /// Why it ended.
    pub end_reason: EndReason,
    /// FlowID (five-tuple jhash).
    pub flow_id: u32,
}

#[derive(Debug, Default, Clone, Copy)]
struct Acc {
    first: u64,
    last: u64,
    packets: u64,
    bytes: u64,
    flags: u8,
    flow_id: u32,
}

/// The operator graph as the offload planner sees it (names as in [`build`]).
pub fn graph(cfg: &FlowmeterConfig) -> AppGraph {
    AppGraph {
        app: "flowmeter".into(),
        ops: vec![
            OpDesc::new("source", OpKind::Source, "frames → tuples"),
            OpDesc::new(
                "flowid",
                OpKind::FlowId {
                    mode: KeyMode::FiveTuple,
                },
                "FlowID: jhash of the 5-tuple",
            ),
            OpDesc::new(
                "flows",
                OpKind::Keyed {
                    key: "the 5-tuple (session window: idle and active timeouts)".into(),
                    partition: Some(KeyMode::FiveTuple),
                    note: None,
                    parallelism: cfg.engine.workers,
                },
                "flow records",
            ),
            OpDesc::new("export", OpKind::Sink, "EVE flow JSON lines / IPFIX"),
        ],
    }
}

/// Build the graph; `out` gets every record, then `None` at the end.
/// Operators the source already applied (an offload) are left out.
///
/// # Errors
/// Invalid settings, or a source offloaded for another app.
pub fn build<S: PacketSource>(
    src: S,
    cfg: &FlowmeterConfig,
    out: impl FnMut(Option<FlowRecord>) + Clone + Send + 'static,
) -> crate::Result<Pipeline> {
    if cfg.idle.is_zero() || cfg.active.is_zero() {
        return Err(crate::Error::Invalid(
            "flowmeter: --idle-timeout and --active-timeout must be > 0".into(),
        ));
    }
    let e = &cfg.engine;
    let applied = src.applied();
    applied.check_app("flowmeter")?;
    let g = e.graph("flowmeter")?;
    let p = src.parallelism();
    let window = agg(
        Acc::default,
        |a: &mut Acc, t: &StreamTuple| {
            if a.packets == 0 {
                a.first = t.ts_ns;
                a.flow_id = t.flow_id;
            }
            a.last = t.ts_ns;
            a.packets += 1;
            a.bytes += u64::from(t.ip_len);
            a.flags |= t.tcp_flags;
        },
        |k: &FlowKey, a: Acc, w: &WindowInfo| FlowRecord {
            key: *k,
            first_ns: a.first,
            last_ns: a.last,
            packets: a.packets,
            bytes: a.bytes,
            tcp_flags: a.flags,
            end_reason: if w.closed_by_eos {
                EndReason::ForcedEnd
            } else if w.active_timeout {
                EndReason::ActiveTimeout
            } else {
                EndReason::IdleTimeout
            },
            flow_id: a.flow_id,
        },
    );
    let pipe = g.source(source::operator(src, e.batch))?;
    let pipe = if applied.has("flowid") {
        pipe
    } else {
        pipe.add(flow_id_map(KeyMode::FiveTuple, p, e.batch))?
    };
    // Steered by the five-tuple FlowID: every flow on one replica.
    Ok(pipe
        .assume_partitioned(applied.partition == Some(KeyMode::FiveTuple))
        .add(
            KeyedWindow::new(
                "flows",
                FlowKey::of,
                WindowSpec::session(cfg.idle, cfg.active),
                window,
            )
            .with_parallelism(e.workers)
            .with_output_batch(e.batch),
        )?
        .sink(Sink::new("export", out))?)
}

/// EVE `flow` event of a record.
#[derive(Debug, Serialize)]
pub struct FlowEvent {
    /// Flow end time.
    pub timestamp: String,
    /// `flow`.
    pub event_type: &'static str,
    /// FlowID.
    pub flow_id: u64,
    /// Source.
    pub src_ip: String,
    /// Source port.
    pub src_port: u16,
    /// Destination.
    pub dest_ip: String,
    /// Destination port.
    pub dest_port: u16,
    /// Protocol.
    pub proto: String,
    /// Counters.
    pub flow: FlowDetails,
}

/// The `flow` object.
#[derive(Debug, Serialize)]
pub struct FlowDetails {
    /// Packets.
    pub pkts_toserver: u64,
    /// IP bytes.
    pub bytes_toserver: u64,
    /// First packet.
    pub start: String,
    /// Last packet.
    pub end: String,
    /// Seconds between first and last packet.
    pub age: u64,
    /// `timeout`, `active_timeout` or `shutdown`.
    pub reason: &'static str,
    /// OR of TCP flags, hex (as EVE's `tcp.tcp_flags`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_flags: Option<String>,
    /// Zeek-style start, epoch seconds.
    pub ts: f64,
}

impl FlowRecord {
    /// As an EVE flow event.
    pub fn event(&self) -> FlowEvent {
        FlowEvent {
            timestamp: iso8601(self.last_ns),
            event_type: "flow",
            flow_id: u64::from(self.flow_id),
            src_ip: self.key.src_addr().to_string(),
            src_port: self.key.sport,
            dest_ip: self.key.dst_addr().to_string(),
            dest_port: self.key.dport,
            proto: proto_name(self.key.proto),
            flow: FlowDetails {
                pkts_toserver: self.packets,
                bytes_toserver: self.bytes,
                start: iso8601(self.first_ns),
                end: iso8601(self.last_ns),
                age: (self.last_ns - self.first_ns) / 1_000_000_000,
                reason: match self.end_reason {
                    EndReason::IdleTimeout => "timeout",
                    EndReason::ActiveTimeout => "active_timeout",
                    EndReason::ForcedEnd => "shutdown",
                },
                tcp_flags: (self.key.proto == 6).then(|| format!("{:02x}", self.tcp_flags)),
                ts: epoch_secs(self.first_ns),
            },
        }
    }
}

/// Totals over the exported records: flow counts and per-protocol counters.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Summary {
    /// `stats`.
    pub event_type: &'static str,
    /// Flow records.
    pub flows: u64,
    /// Packets.
    pub packets: u64,
    /// IP bytes.
    pub bytes: u64,
    /// Per protocol name: flows, packets, bytes.
    pub protocols: BTreeMap<String, ProtoCounters>,
    /// Records per end reason.
    pub end_reasons: BTreeMap<String, u64>,
}

/// Counters of one protocol.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct ProtoCounters {
    /// Flow records.
    pub flows: u64,
    /// Packets.
    pub packets: u64,
    /// IP bytes.
    pub bytes: u64,
}

impl Summary {
    /// Count one record.
    pub fn add(&mut self, r: &FlowRecord) {
        self.event_type = "stats";
        self.flows += 1;
        self.packets += r.packets;
        self.bytes += r.bytes;
        let p = self.protocols.entry(proto_name(r.key.proto)).or_default();
        p.flows += 1;
        p.packets += r.packets;
        p.bytes += r.bytes;
        *self
            .end_reasons
            .entry(r.event().flow.reason.to_string())
            .or_default() += 1;
    }
}
