//! IPFIX (RFC 7011) export of flow records over UDP.
//!
//! One template per address family (IPv4: 256, IPv6: 257) with the
//! Information Elements of RFC 7012 / IANA: source/destination address,
//! ports, protocolIdentifier, tcpControlBits, packetDeltaCount,
//! octetDeltaCount, flowStartMilliseconds, flowEndMilliseconds,
//! flowEndReason. Templates go in the first message and again every
//! [`TEMPLATE_EVERY`] messages (UDP transport, RFC 7011 §8.4); messages stay
//! under [`MAX_MESSAGE`] bytes so they are never fragmented on a 1500 MTU.
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
}

fn fields(v6: bool) -> [(u16, u16); 11] {
    let (s, d, alen) = if v6 {
        (ie::SOURCE_IPV6_ADDRESS, ie::DESTINATION_IPV6_ADDRESS, 16)
    } else {
        (ie::SOURCE_IPV4_ADDRESS, ie::DESTINATION_IPV4_ADDRESS, 4)
    };
    [
        (s, alen),
        (d, alen),
        (ie::SOURCE_TRANSPORT_PORT, 2),
        (ie::DESTINATION_TRANSPORT_PORT, 2),
        (ie::PROTOCOL_IDENTIFIER, 1),
        (ie::TCP_CONTROL_BITS, 2),
        (ie::PACKET_DELTA_COUNT, 8),
        (ie::OCTET_DELTA_COUNT, 8),
        (ie::FLOW_START_MILLISECONDS, 8),
        (ie::FLOW_END_MILLISECONDS, 8),
        (ie::FLOW_END_REASON, 1),
    ]
}

fn record_len(v6: bool) -> usize {
    fields(v6).iter().map(|f| usize::from(f.1)).sum()
}

fn template_set() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&2u16.to_be_bytes()); // Template Set
    b.extend_from_slice(&0u16.to_be_bytes()); // length, patched below
    for (id, v6) in [(TEMPLATE_V4, false), (TEMPLATE_V6, true)] {
        let f = fields(v6);
        b.extend_from_slice(&id.to_be_bytes());
        b.extend_from_slice(&(f.len() as u16).to_be_bytes());
        for (ie, len) in f {
            b.extend_from_slice(&ie.to_be_bytes());
            b.extend_from_slice(&len.to_be_bytes());
        }
    }
    let len = b.len() as u16;
    b[2..4].copy_from_slice(&len.to_be_bytes());
    b
}

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
}

/// Builds IPFIX messages from flow records (no I/O: see [`Exporter`]).
#[derive(Debug)]
pub struct Encoder {
    domain: u32,
    sequence: u32,
    messages: u32,
    pending: Vec<FlowRecord>,
}

impl Encoder {
    /// An encoder for observation domain `domain`.
    pub fn new(domain: u32) -> Self {
        Self {
            domain,
            sequence: 0,
            messages: 0,
            pending: Vec::new(),
        }
    }

    /// Queue a record; returns a finished message when one is full.
    pub fn push(&mut self, r: FlowRecord, export_time_s: u32) -> Option<Vec<u8>> {
        self.pending.push(r);
        let size = self.size_of_pending(self.messages.is_multiple_of(TEMPLATE_EVERY));
        if size > MAX_MESSAGE {
            let last = self.pending.pop()?;
            let m = self.flush(export_time_s);
            self.pending.push(last);
            return m;
        }
        None
    }

    fn size_of_pending(&self, templates: bool) -> usize {
        let mut n = 16 + if templates { template_set().len() } else { 0 };
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
        if self.messages.is_multiple_of(TEMPLATE_EVERY) {
            m.extend_from_slice(&template_set());
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
        // RFC 7011 §3.1: the sequence number counts data records sent before this message.
        self.sequence = self.sequence.wrapping_add(self.pending.len() as u32);
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
