//! IPFIX (RFC 7011) export of flow records over UDP.
//!
//! Biflows (RFC 5103): one template per address family (IPv4: 256, IPv6:
//! 257) with the Information Elements of RFC 7012 / IANA — source and
//! destination address (the initiator is the source), ports,
//! protocolIdentifier, tcpControlBits, packetDeltaCount, octetDeltaCount,
//! flowStartMilliseconds, flowEndMilliseconds, flowEndReason,
//! icmpTypeCodeIPv4/IPv6 — and the reverse direction's tcpControlBits,
//! packetDeltaCount, octetDeltaCount and ICMP type/code as the RFC 5103
//! reverse elements (private enterprise 29305). An options template (258,
//! scope observationDomainId) carries the exporter's statistics
//! (exportedMessageTotalCount, exportedFlowRecordTotalCount). Templates
//! and statistics go in the first message and again every
//! [`TEMPLATE_EVERY`] messages or [`TEMPLATE_SECONDS`], whichever comes
//! first (UDP transport, RFC 7011 §8.4); messages stay under
//! [`MAX_MESSAGE`] bytes so they are never fragmented on a 1500 MTU.
//! Written by hand: no maintained Rust crate encodes IPFIX (decoders, such
//! as netflow_parser used by the tests, exist).

use std::net::{SocketAddr, UdpSocket};

use crate::apps::flowmeter::FlowRecord;
use crate::error::{io, Result};

/// Template id of IPv4 flow records.
pub const TEMPLATE_V4: u16 = 256;
/// Template id of IPv6 flow records.
pub const TEMPLATE_V6: u16 = 257;
/// Largest message (bytes).
pub const MAX_MESSAGE: usize = 1400;
/// Messages between template retransmissions.
pub const TEMPLATE_EVERY: u32 = 16;
/// Seconds between template retransmissions (a collector that restarts
/// decodes again within this long, even when few flows end).
pub const TEMPLATE_SECONDS: u32 = 30;
/// Template id of the exporter statistics options record.
pub const TEMPLATE_STATS: u16 = 258;
/// RFC 5103 reverse Information Elements: this enterprise number, the forward IE id.
pub const REVERSE_PEN: u32 = 29305;

/// IANA Information Element ids used.
pub mod ie {
    /// octetDeltaCount.
    pub const OCTET_DELTA_COUNT: u16 = 1;
    /// packetDeltaCount.
    pub const PACKET_DELTA_COUNT: u16 = 2;
    /// protocolIdentifier.
    pub const PROTOCOL_IDENTIFIER: u16 = 4;
    /// tcpControlBits.
    pub const TCP_CONTROL_BITS: u16 = 6;
    /// sourceTransportPort.
    pub const SOURCE_TRANSPORT_PORT: u16 = 7;
    /// sourceIPv4Address.
    pub const SOURCE_IPV4_ADDRESS: u16 = 8;
    /// destinationTransportPort.
    pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
    /// destinationIPv4Address.
    pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
    /// sourceIPv6Address.
    pub const SOURCE_IPV6_ADDRESS: u16 = 27;
    /// destinationIPv6Address.
    pub const DESTINATION_IPV6_ADDRESS: u16 = 28;
    /// flowEndReason.
    pub const FLOW_END_REASON: u16 = 136;
    /// flowStartMilliseconds.
    pub const FLOW_START_MILLISECONDS: u16 = 152;
    /// flowEndMilliseconds.
    pub const FLOW_END_MILLISECONDS: u16 = 153;
    /// icmpTypeCodeIPv4.
    pub const ICMP_TYPE_CODE_IPV4: u16 = 32;
    /// icmpTypeCodeIPv6.
    pub const ICMP_TYPE_CODE_IPV6: u16 = 139;
    /// exportedMessageTotalCount.
    pub const EXPORTED_MESSAGE_TOTAL_COUNT: u16 = 41;
    /// exportedFlowRecordTotalCount.
    pub const EXPORTED_FLOW_RECORD_TOTAL_COUNT: u16 = 42;
    /// observationDomainId.
    pub const OBSERVATION_DOMAIN_ID: u16 = 149;
}

/// One template field: IE id, length, and the enterprise number of a
/// reverse element (RFC 5103), if it is one.
type Field = (u16, u16, Option<u32>);

fn fields(v6: bool) -> [Field; 16] {
    let (s, d, alen, icmp) = if v6 {
        (
            ie::SOURCE_IPV6_ADDRESS,
            ie::DESTINATION_IPV6_ADDRESS,
            16,
            ie::ICMP_TYPE_CODE_IPV6,
        )
    } else {
        (
            ie::SOURCE_IPV4_ADDRESS,
            ie::DESTINATION_IPV4_ADDRESS,
            4,
            ie::ICMP_TYPE_CODE_IPV4,
        )
    };
    let rev = Some(REVERSE_PEN);
    [
        (s, alen, None),
        (d, alen, None),
        (ie::SOURCE_TRANSPORT_PORT, 2, None),
        (ie::DESTINATION_TRANSPORT_PORT, 2, None),
        (ie::PROTOCOL_IDENTIFIER, 1, None),
        (ie::TCP_CONTROL_BITS, 2, None),
        (ie::PACKET_DELTA_COUNT, 8, None),
        (ie::OCTET_DELTA_COUNT, 8, None),
        (ie::FLOW_START_MILLISECONDS, 8, None),
        (ie::FLOW_END_MILLISECONDS, 8, None),
        (ie::FLOW_END_REASON, 1, None),
        (icmp, 2, None),
        (ie::TCP_CONTROL_BITS, 2, rev),
        (ie::PACKET_DELTA_COUNT, 8, rev),
        (ie::OCTET_DELTA_COUNT, 8, rev),
        (icmp, 2, rev),
    ]
}

fn record_len(v6: bool) -> usize {
    fields(v6).iter().map(|f| usize::from(f.1)).sum()
}

fn put_field(b: &mut Vec<u8>, (id, len, pen): Field) {
    match pen {
        Some(pen) => {
            b.extend_from_slice(&(id | 0x8000).to_be_bytes());
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&pen.to_be_bytes());
        }
        None => {
            b.extend_from_slice(&id.to_be_bytes());
            b.extend_from_slice(&len.to_be_bytes());
        }
    }
}

/// The options template's fields: scope first.
const STATS_FIELDS: [Field; 3] = [
    (ie::OBSERVATION_DOMAIN_ID, 4, None),
    (ie::EXPORTED_MESSAGE_TOTAL_COUNT, 8, None),
    (ie::EXPORTED_FLOW_RECORD_TOTAL_COUNT, 8, None),
];

/// The template set (256, 257) and the options template set (258).
fn template_set() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&2u16.to_be_bytes()); // Template Set
    b.extend_from_slice(&0u16.to_be_bytes()); // length, patched below
    for (id, v6) in [(TEMPLATE_V4, false), (TEMPLATE_V6, true)] {
        let f = fields(v6);
        b.extend_from_slice(&id.to_be_bytes());
        b.extend_from_slice(&(f.len() as u16).to_be_bytes());
        for x in f {
            put_field(&mut b, x);
        }
    }
    let len = b.len() as u16;
    b[2..4].copy_from_slice(&len.to_be_bytes());
    // Options Template Set: one template, scope = the observation domain.
    let at = b.len();
    b.extend_from_slice(&3u16.to_be_bytes());
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&TEMPLATE_STATS.to_be_bytes());
    b.extend_from_slice(&(STATS_FIELDS.len() as u16).to_be_bytes());
    b.extend_from_slice(&1u16.to_be_bytes()); // scope field count
    for x in STATS_FIELDS {
        put_field(&mut b, x);
    }
    let len = (b.len() - at) as u16;
    b[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
    b
}

/// Bytes of the statistics data set.
const STATS_SET_LEN: usize = 4 + 4 + 8 + 8;

fn encode_record(r: &FlowRecord, out: &mut Vec<u8>) {
    let v6 = r.key.v6;
    let n = if v6 { 4 } else { 1 };
    for w in &r.key.src[..n] {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    for w in &r.key.dst[..n] {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out.extend_from_slice(&r.key.sport.to_be_bytes());
    out.extend_from_slice(&r.key.dport.to_be_bytes());
    out.push(r.key.proto);
    out.extend_from_slice(&u16::from(r.tcp_flags).to_be_bytes());
    out.extend_from_slice(&r.packets.to_be_bytes());
    out.extend_from_slice(&r.bytes.to_be_bytes());
    out.extend_from_slice(&(r.first_ns / 1_000_000).to_be_bytes());
    out.extend_from_slice(&(r.last_ns / 1_000_000).to_be_bytes());
    out.push(r.end_reason.ipfix());
    out.extend_from_slice(&[r.icmp[0], r.icmp[1]]);
    out.extend_from_slice(&u16::from(r.rev_tcp_flags).to_be_bytes());
    out.extend_from_slice(&r.rev_packets.to_be_bytes());
    out.extend_from_slice(&r.rev_bytes.to_be_bytes());
    out.extend_from_slice(&[r.icmp[2], r.icmp[3]]);
}

/// Builds IPFIX messages from flow records (no I/O: see [`Exporter`]).
#[derive(Debug)]
pub struct Encoder {
    domain: u32,
    sequence: u32,
    messages: u32,
    pending: Vec<FlowRecord>,
    /// Export time of the last message with templates.
    templates_at: Option<u32>,
}

impl Encoder {
    /// An encoder for observation domain `domain`.
    pub fn new(domain: u32) -> Self {
        Self {
            domain,
            sequence: 0,
            messages: 0,
            pending: Vec::new(),
            templates_at: None,
        }
    }

    /// Does the next message carry the templates (every
    /// [`TEMPLATE_EVERY`] messages or [`TEMPLATE_SECONDS`])?
    fn templates_due(&self, now_s: u32) -> bool {
        self.messages.is_multiple_of(TEMPLATE_EVERY)
            || self
                .templates_at
                .is_none_or(|t| now_s.saturating_sub(t) >= TEMPLATE_SECONDS)
    }

    /// Queue a record; returns a finished message when one is full.
    pub fn push(&mut self, r: FlowRecord, export_time_s: u32) -> Option<Vec<u8>> {
        self.pending.push(r);
        let size = self.size_of_pending(self.templates_due(export_time_s));
        if size > MAX_MESSAGE {
            let last = self.pending.pop()?;
            let m = self.flush(export_time_s);
            self.pending.push(last);
            return m;
        }
        None
    }

    fn size_of_pending(&self, templates: bool) -> usize {
        let mut n = 16
            + if templates {
                template_set().len() + STATS_SET_LEN
            } else {
                0
            };
        for v6 in [false, true] {
            let k = self.pending.iter().filter(|r| r.key.v6 == v6).count();
            if k > 0 {
                n += 4 + k * record_len(v6);
            }
        }
        n
    }

    /// The message with every queued record (None if nothing is queued).
    pub fn flush(&mut self, export_time_s: u32) -> Option<Vec<u8>> {
        if self.pending.is_empty() {
            return None;
        }
        let mut m = Vec::with_capacity(MAX_MESSAGE);
        m.extend_from_slice(&10u16.to_be_bytes());
        m.extend_from_slice(&0u16.to_be_bytes()); // length, patched below
        m.extend_from_slice(&export_time_s.to_be_bytes());
        m.extend_from_slice(&self.sequence.to_be_bytes());
        m.extend_from_slice(&self.domain.to_be_bytes());
        let with_stats = self.templates_due(export_time_s);
        if with_stats {
            m.extend_from_slice(&template_set());
            // The exporter's statistics up to this message.
            m.extend_from_slice(&TEMPLATE_STATS.to_be_bytes());
            m.extend_from_slice(&(STATS_SET_LEN as u16).to_be_bytes());
            m.extend_from_slice(&self.domain.to_be_bytes());
            m.extend_from_slice(&u64::from(self.messages).to_be_bytes());
            m.extend_from_slice(&u64::from(self.sequence).to_be_bytes());
            self.templates_at = Some(export_time_s);
        }
        for (tid, v6) in [(TEMPLATE_V4, false), (TEMPLATE_V6, true)] {
            let recs: Vec<&FlowRecord> = self.pending.iter().filter(|r| r.key.v6 == v6).collect();
            if recs.is_empty() {
                continue;
            }
            let at = m.len();
            m.extend_from_slice(&tid.to_be_bytes());
            m.extend_from_slice(&0u16.to_be_bytes());
            for r in &recs {
                encode_record(r, &mut m);
            }
            let len = (m.len() - at) as u16;
            m[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        let len = m.len() as u16;
        m[2..4].copy_from_slice(&len.to_be_bytes());
        // RFC 7011 §3.1: the sequence number counts data records sent
        // before this message (the statistics record is one).
        self.sequence = self
            .sequence
            .wrapping_add(self.pending.len() as u32 + u32::from(with_stats));
        self.messages = self.messages.wrapping_add(1);
        self.pending.clear();
        Some(m)
    }
}

/// Sends IPFIX messages to a UDP collector.
#[derive(Debug)]
pub struct Exporter {
    sock: UdpSocket,
    enc: Encoder,
    /// Messages sent.
    pub messages: u64,
    /// Records sent.
    pub records: u64,
}

fn now_s() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

impl Exporter {
    /// Export to `collector` (UDP).
    ///
    /// # Errors
    /// The socket cannot be opened or connected.
    pub fn connect(collector: SocketAddr, domain: u32) -> Result<Self> {
        let bind: SocketAddr = if collector.is_ipv6() {
            "[::]:0"
                .parse()
                .map_err(|_| crate::Error::Invalid("bind".into()))?
        } else {
            "0.0.0.0:0"
                .parse()
                .map_err(|_| crate::Error::Invalid("bind".into()))?
        };
        let sock = UdpSocket::bind(bind).map_err(io("binding the IPFIX exporter socket"))?;
        sock.connect(collector)
            .map_err(io(format!("connecting to the IPFIX collector {collector}")))?;
        Ok(Self {
            sock,
            enc: Encoder::new(domain),
            messages: 0,
            records: 0,
        })
    }

    fn send(&mut self, m: &[u8]) -> Result<()> {
        // A collector that is not listening yet gets ECONNREFUSED on the
        // next send: IPFIX over UDP is fire-and-forget, so that is not fatal.
        match self.sock.send(m) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(io("sending IPFIX")(e)),
        }
        self.messages += 1;
        Ok(())
    }

    /// Queue one record (sent when a message is full).
    ///
    /// # Errors
    /// Sending failed.
    pub fn export(&mut self, r: FlowRecord) -> Result<()> {
        self.records += 1;
        if let Some(m) = self.enc.push(r, now_s()) {
            self.send(&m)?;
        }
        Ok(())
    }

    /// Send what is queued.
    ///
    /// # Errors
    /// Sending failed.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(m) = self.enc.flush(now_s()) {
            self.send(&m)?;
        }
        Ok(())
    }
}
