//! Flow meter: bidirectional flow records (RFC 5103 biflows) — per
//! direction packets, bytes, TCP flags; first/last seen; state; the
//! Community ID — exported as JSON lines (EVE `flow`) and IPFIX. A flow
//! ends on an idle timeout, an active timeout, or the end of the input;
//! its end reason says FIN or RST when the connection was closed (RFC 5102
//! flowEndReason 1, 2, 3, 4). The initiator (the sender of the first SYN,
//! else of the first packet) is the flow's source: "to server" is from it.
//! ICMP flows are keyed by addresses (request and reply are one flow), with
//! the ICMP type and code of each direction in their own fields.
//!
//! Graph: Source → Map (tuple → connection part, [`crate::part`]) → Keyed
//! Window (session per connection: idle gap, active timeout) → Sink. With
//! the tap's aggregation the parts arrive pre-summed per connection and
//! epoch from XDP and the Map is not run; the window merges either alike.

use std::collections::BTreeMap;
use std::time::Duration;

use rampart_service::alert::community_id;
use serde::Serialize;

use super::{part_stream, Addr, EngineOpts};
use crate::engine::{agg, KeyedWindow, Map, Pipeline, Sink, WindowInfo, WindowSpec};
use crate::export::json::{epoch_secs, iso8601, proto_name};
use crate::offload::planner::{AppGraph, OpDesc, OpKind};
use crate::part::{ConnKey, FlowPart};
use crate::source::PacketSource;

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

/// Flow key, source = the initiator. ICMP flows have ports 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FlowKey {
    /// Source address words.
    pub src: [u32; 4],
    /// Destination address words.
    pub dst: [u32; 4],
    /// Source port (0 for ICMP).
    pub sport: u16,
    /// Destination port (0 for ICMP).
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// IPv6?
    pub v6: bool,
}

impl FlowKey {
    /// The key of a tuple, seen from its sender.
    pub fn of(t: &crate::tuple::StreamTuple) -> Self {
        let p = FlowPart::from_tuple(t);
        Self::of_conn(&p.key, usize::from(p.dir[0].packets == 0))
    }
    /// The key of a connection seen from endpoint `client`.
    pub fn of_conn(k: &ConnKey, client: usize) -> Self {
        let s = client & 1;
        Self {
            src: k.addr[s],
            dst: k.addr[1 - s],
            sport: k.port[s],
            dport: k.port[1 - s],
            proto: k.proto,
            v6: k.v6,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Idle timeout (1).
    #[default]
    IdleTimeout,
    /// Active timeout (2).
    ActiveTimeout,
    /// The connection was closed with FIN (3, "end of flow detected").
    Fin,
    /// The connection was reset (3, "end of flow detected").
    Rst,
    /// End of the input / shutdown (4, "forced end").
    ForcedEnd,
}

impl EndReason {
    /// IPFIX flowEndReason.
    pub fn ipfix(self) -> u8 {
        match self {
            Self::IdleTimeout => 1,
            Self::ActiveTimeout => 2,
            Self::Fin | Self::Rst => 3,
            Self::ForcedEnd => 4,
        }
    }
}

/// Connection state at the end of a record (EVE `flow.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FlowState {
    /// One direction only (or a TCP handshake that did not complete).
    #[default]
    New,
    /// Both directions (TCP: SYN-ACK and the client's ACK seen, or data both ways).
    Established,
    /// FIN or RST seen.
    Closed,
}

/// One exported biflow: "forward" is from the initiator (`key.src`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FlowRecord {
    /// Key (source = initiator).
    pub key: FlowKey,
    /// First packet (either direction), ns.
    pub first_ns: u64,
    /// Last packet (either direction), ns.
    pub last_ns: u64,
    /// Packets from the initiator.
    pub packets: u64,
    /// IP bytes from the initiator (octetDeltaCount).
    pub bytes: u64,
    /// OR of the initiator's TCP flags.
    pub tcp_flags: u8,
    /// Why it ended.
    pub end_reason: EndReason,
    /// FlowID (jhash of the connection key).
    pub flow_id: u32,
    /// Packets from the responder (reversePacketDeltaCount).
    pub rev_packets: u64,
    /// IP bytes from the responder.
    pub rev_bytes: u64,
    /// OR of the responder's TCP flags.
    pub rev_tcp_flags: u8,
    /// ICMP type and code of the initiator's first packet, and of the
    /// responder's (0 for other protocols).
    pub icmp: [u8; 4],
    /// State at the end.
    pub state: FlowState,
}

/// The operator graph as the offload planner sees it (names as in [`build`]).
pub fn graph(cfg: &FlowmeterConfig) -> AppGraph {
    AppGraph {
        app: "flowmeter".into(),
        epoch: tap_epoch(cfg),
        ops: vec![
            OpDesc::new("source", OpKind::Source, "frames → tuples"),
            OpDesc::new(
                "part",
                OpKind::Part,
                "Map: tuple → connection part (both directions' counters)",
            ),
            OpDesc::new(
                "flows",
                OpKind::Keyed {
                    key: "the connection (session window: idle and active timeouts)".into(),
                    partition: None,
                    note: Some(
                        "ICMP requests and replies are one connection but no FlowID mode pairs them".into(),
                    ),
                    parallelism: cfg.engine.workers,
                },
                "biflow records",
            ),
            OpDesc::new("export", OpKind::Sink, "EVE flow JSON lines / IPFIX"),
        ],
    }
}

/// The XDP aggregation epoch for flowmeter: a fifth of the idle timeout
/// in whole seconds, 1 to 4 s (3 s for the default 15 s).
///
/// A flow record leaves after its idle timeout anyway, so parts an epoch
/// late delay it by at most a fifth of that timeout; in exchange userspace
/// merges one part per connection per epoch, which at tens of thousands of
/// live connections is most of the monitor's CPU (a third of it at 3 s
/// against 1 s). The 32-bit offsets of a slot cap an epoch at 4 s; a
/// timeout under 1 s keeps the 1 s epoch and is refused with it (use
/// --offload tuples).
pub fn tap_epoch(cfg: &FlowmeterConfig) -> Duration {
    Duration::from_secs((cfg.idle.as_secs() / 5).clamp(1, 4))
}

/// The record of a connection's parts merged in one session.
pub(crate) fn record(p: &FlowPart, w: &WindowInfo) -> FlowRecord {
    let c = p.client();
    let (f, r) = (&p.dir[c], &p.dir[1 - c]);
    let k = FlowKey::of_conn(&p.key, c);
    let (rst, fin) = (f.rst + r.rst, f.fin + r.fin);
    let end_reason = if rst > 0 {
        EndReason::Rst
    } else if fin > 0 {
        EndReason::Fin
    } else if w.closed_by_eos {
        EndReason::ForcedEnd
    } else if w.active_timeout {
        EndReason::ActiveTimeout
    } else {
        EndReason::IdleTimeout
    };
    let tcp = k.proto == crate::tuple::proto::TCP;
    let state = if rst + fin > 0 {
        FlowState::Closed
    } else if (tcp && r.synack > 0 && f.ack > 0)
        || (tcp && r.synack == 0 && f.syn == 0 && r.packets > 0 && f.packets > 0)
        || (!tcp && r.packets > 0 && f.packets > 0)
    {
        FlowState::Established
    } else {
        FlowState::New
    };
    FlowRecord {
        key: k,
        first_ns: p.first_ns(),
        last_ns: p.last_ns(),
        packets: f.packets,
        bytes: f.bytes,
        tcp_flags: f.tcp_flags,
        end_reason,
        flow_id: conn_flow_id(&p.key),
        rev_packets: r.packets,
        rev_bytes: r.bytes,
        rev_tcp_flags: r.tcp_flags,
        icmp: [f.icmp_type, f.icmp_code, r.icmp_type, r.icmp_code],
        state,
    }
}

/// FlowID of a connection: jhash of its key (both directions alike).
pub fn conn_flow_id(k: &ConnKey) -> u32 {
    let mut w = [0u32; 10];
    w[..4].copy_from_slice(&k.addr[0]);
    w[4..8].copy_from_slice(&k.addr[1]);
    w[8] = (u32::from(k.port[0]) << 16) | u32::from(k.port[1]);
    w[9] = u32::from(k.proto);
    crate::flowid::jhash2(&w, crate::tuple::ST_FLOWID_SEED)
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
    build_live(src, cfg, None, out)
}

/// [`build`], and every connection part the window merges also counted in
/// `live` (the connections open now, for a dashboard: a record is
/// exported only when its flow ends).
///
/// # Errors
/// As [`build`].
pub fn build_live<S: PacketSource>(
    src: S,
    cfg: &FlowmeterConfig,
    live: Option<super::live::LiveFlows>,
    out: impl FnMut(Option<FlowRecord>) + Clone + Send + 'static,
) -> crate::Result<Pipeline> {
    if cfg.idle.is_zero() || cfg.active.is_zero() {
        return Err(crate::Error::Invalid(
            "flowmeter: --idle-timeout and --active-timeout must be > 0".into(),
        ));
    }
    let e = &cfg.engine;
    src.applied().check_app("flowmeter")?;
    super::check_epoch(&src, &[cfg.idle], &[])?;
    let g = e.graph("flowmeter")?;
    let window = agg(
        || None::<FlowPart>,
        |a: &mut Option<FlowPart>, p: &FlowPart| match a {
            Some(a) => a.merge(p),
            None => *a = Some(*p),
        },
        |_: &ConnKey, a: Option<FlowPart>, w: &WindowInfo| record(&a.unwrap_or_default(), w),
    );
    let mut parts = part_stream(&g, src, None, e.batch)?;
    if let Some(live) = live {
        let p = parts.parallelism();
        parts = parts.add(
            Map::new("live", move |x: FlowPart| {
                live.add(&x);
                x
            })
            .with_parallelism(p)
            .with_output_batch(e.batch),
        )?;
    }
    Ok(parts
        .add(
            KeyedWindow::new(
                "flows",
                |p: &FlowPart| p.key,
                WindowSpec::session(cfg.idle, cfg.active),
                window,
            )
            .with_span(FlowPart::last_ns)
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
    /// Community ID (v1, seed 0) of the connection (none when its two
    /// addresses are of different families, which a parsed flow never has).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub community_id: Option<String>,
    /// Source (the initiator).
    pub src_ip: String,
    /// Source port.
    pub src_port: u16,
    /// Destination.
    pub dest_ip: String,
    /// Destination port.
    pub dest_port: u16,
    /// Protocol.
    pub proto: String,
    /// ICMP type of the initiator's first packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP code of the initiator's first packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<u8>,
    /// ICMP type of the responder's first packet (if it sent any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_icmp_type: Option<u8>,
    /// ICMP code of the responder's first packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_icmp_code: Option<u8>,
    /// Counters.
    pub flow: FlowDetails,
    /// TCP flags per direction (TCP only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpDetails>,
}

/// The `flow` object.
#[derive(Debug, Serialize)]
pub struct FlowDetails {
    /// Packets from the initiator.
    pub pkts_toserver: u64,
    /// Packets from the responder.
    pub pkts_toclient: u64,
    /// IP bytes from the initiator.
    pub bytes_toserver: u64,
    /// IP bytes from the responder.
    pub bytes_toclient: u64,
    /// First packet.
    pub start: String,
    /// Last packet.
    pub end: String,
    /// Seconds between first and last packet.
    pub age: u64,
    /// `new`, `established` or `closed`.
    pub state: FlowState,
    /// `timeout`, `active_timeout`, `fin`, `rst` or `shutdown`.
    pub reason: &'static str,
    /// Zeek-style start, epoch seconds.
    pub ts: f64,
}

/// The `tcp` object (hex flag bytes, as EVE).
#[derive(Debug, Serialize)]
pub struct TcpDetails {
    /// OR of both directions.
    pub tcp_flags: String,
    /// Initiator's.
    pub tcp_flags_ts: String,
    /// Responder's.
    pub tcp_flags_tc: String,
}

impl FlowRecord {
    /// As an EVE flow event.
    pub fn event(&self) -> FlowEvent {
        let k = &self.key;
        let icmp = k.proto == 1 || k.proto == 58;
        FlowEvent {
            timestamp: iso8601(self.last_ns),
            event_type: "flow",
            flow_id: u64::from(self.flow_id),
            community_id: community_id(
                k.src_addr().ip(),
                k.dst_addr().ip(),
                k.proto,
                if icmp {
                    u16::from(self.icmp[0])
                } else {
                    k.sport
                },
                if icmp {
                    u16::from(self.icmp[1])
                } else {
                    k.dport
                },
            ),
            src_ip: k.src_addr().to_string(),
            src_port: k.sport,
            dest_ip: k.dst_addr().to_string(),
            dest_port: k.dport,
            proto: proto_name(k.proto),
            icmp_type: (icmp && self.packets > 0).then_some(self.icmp[0]),
            icmp_code: (icmp && self.packets > 0).then_some(self.icmp[1]),
            response_icmp_type: (icmp && self.rev_packets > 0).then_some(self.icmp[2]),
            response_icmp_code: (icmp && self.rev_packets > 0).then_some(self.icmp[3]),
            flow: FlowDetails {
                pkts_toserver: self.packets,
                pkts_toclient: self.rev_packets,
                bytes_toserver: self.bytes,
                bytes_toclient: self.rev_bytes,
                start: iso8601(self.first_ns),
                end: iso8601(self.last_ns),
                age: (self.last_ns - self.first_ns) / 1_000_000_000,
                state: self.state,
                reason: match self.end_reason {
                    EndReason::IdleTimeout => "timeout",
                    EndReason::ActiveTimeout => "active_timeout",
                    EndReason::Fin => "fin",
                    EndReason::Rst => "rst",
                    EndReason::ForcedEnd => "shutdown",
                },
                ts: epoch_secs(self.first_ns),
            },
            tcp: (k.proto == 6).then(|| TcpDetails {
                tcp_flags: format!("{:02x}", self.tcp_flags | self.rev_tcp_flags),
                tcp_flags_ts: format!("{:02x}", self.tcp_flags),
                tcp_flags_tc: format!("{:02x}", self.rev_tcp_flags),
            }),
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
    /// Packets (both directions).
    pub packets: u64,
    /// IP bytes (both directions).
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
        self.packets += r.packets + r.rev_packets;
        self.bytes += r.bytes + r.rev_bytes;
        let p = self.protocols.entry(proto_name(r.key.proto)).or_default();
        p.flows += 1;
        p.packets += r.packets + r.rev_packets;
        p.bytes += r.bytes + r.rev_bytes;
        *self
            .end_reasons
            .entry(r.event().flow.reason.to_string())
            .or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tap_epoch_is_a_fifth_of_the_idle_timeout_within_1_to_4_s() {
        let e = |idle: u64| {
            tap_epoch(&FlowmeterConfig {
                idle: Duration::from_secs(idle),
                ..FlowmeterConfig::default()
            })
            .as_secs()
        };
        assert_eq!(e(15), 3, "the default");
        assert_eq!((e(1), e(5), e(10), e(20), e(3600)), (1, 1, 2, 4, 4));
        // Never above what the slots' 32-bit offsets hold.
        assert!(e(3600) * 1_000_000_000 <= rampart_bpf::abi::stream::ST_AGG_EPOCH_MAX_NS);
    }
}
