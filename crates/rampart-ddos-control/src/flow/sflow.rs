//! sFlow version 5 datagrams (sflow.org, "sFlow Version 5", 2004): flow
//! samples and expanded flow samples become [`FlowSample`]s, each worth
//! `sampling_rate` packets; counter samples and other sample types are
//! skipped.
//!
//! Written here rather than taken from a crate: the format is a short XDR
//! walk, the only sFlow crate (flowparser-sflow) was weeks old, and what
//! detection needs from a sample — the sampled packet's addresses, ports,
//! TCP flags and fragment state — comes from the raw packet header record
//! through etherparse, the packet parser the workspace already uses.
//! A sample without a raw header but with a sampled IPv4/IPv6 record
//! (formats 3 and 4) is read from that record.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};

use super::{Decoded, FlowError, FlowSample, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

/// Sample formats (enterprise 0).
const FLOW_SAMPLE: u32 = 1;
const EXPANDED_FLOW_SAMPLE: u32 = 3;
/// Flow record formats (enterprise 0).
const RAW_HEADER: u32 = 1;
const SAMPLED_IPV4: u32 = 3;
const SAMPLED_IPV6: u32 = 4;
/// Raw header protocols.
const HEADER_ETHERNET: u32 = 1;
const HEADER_IPV4: u32 = 11;
const HEADER_IPV6: u32 = 12;

/// An XDR reader over a byte slice: every read checks the length.
struct Xdr<'a> {
    b: &'a [u8],
}

impl<'a> Xdr<'a> {
    fn u32(&mut self, what: &'static str) -> Result<u32, FlowError> {
        let (h, t) = self
            .b
            .split_first_chunk::<4>()
            .ok_or(FlowError::Truncated(what))?;
        self.b = t;
        Ok(u32::from_be_bytes(*h))
    }

    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FlowError> {
        if n > self.b.len() {
            return Err(FlowError::Truncated(what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }

    /// An opaque of `n` bytes padded to a multiple of 4.
    fn opaque(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FlowError> {
        let padded = n.checked_add(3).ok_or(FlowError::Truncated(what))? & !3;
        let b = self.bytes(padded, what)?;
        Ok(&b[..n])
    }

    /// A length-prefixed element: (format, body).
    fn element(&mut self, what: &'static str) -> Result<(u32, Xdr<'a>), FlowError> {
        let format = self.u32(what)?;
        let len = self.u32(what)? as usize;
        Ok((
            format,
            Xdr {
                b: self.bytes(len, what)?,
            },
        ))
    }
}

/// Decode one sFlow v5 datagram into `out` (appended only when the whole
/// datagram is well-formed). `rate_override` replaces every sample's
/// sampling rate (for agents that report it wrong).
pub fn decode(
    data: &[u8],
    rate_override: Option<u64>,
    out: &mut Vec<FlowSample>,
) -> Result<Decoded, FlowError> {
    let mut x = Xdr { b: data };
    let version = x.u32("datagram header")?;
    if version != 5 {
        return Err(FlowError::Version(version));
    }
    match x.u32("agent address")? {
        1 => {
            x.bytes(4, "agent address")?;
        }
        2 => {
            x.bytes(16, "agent address")?;
        }
        t => return Err(FlowError::Malformed(format!("agent address type {t}"))),
    }
    let _sub_agent = x.u32("datagram header")?;
    let _seq = x.u32("datagram header")?;
    let _uptime = x.u32("datagram header")?;
    let n = x.u32("datagram header")?;
    let mut got = Vec::new();
    let mut d = Decoded::default();
    for _ in 0..n {
        let (format, mut s) = x.element("sample")?;
        let expanded = match format {
            FLOW_SAMPLE => false,
            EXPANDED_FLOW_SAMPLE => true,
            _ => {
                // Counter samples, discarded-packet samples, enterprise
                // formats: nothing detection reads.
                d.skipped += 1;
                continue;
            }
        };
        let _seq = s.u32("flow sample")?;
        if expanded {
            s.bytes(8, "flow sample")?; // source id type, index
        } else {
            s.u32("flow sample")?; // source id
        }
        let rate = s.u32("flow sample")?;
        let _pool = s.u32("flow sample")?;
        let _drops = s.u32("flow sample")?;
        s.bytes(if expanded { 16 } else { 8 }, "flow sample")?; // input, output
        let records = s.u32("flow sample")?;
        let rate = match rate_override {
            Some(r) => r.max(1),
            None if rate == 0 => {
                return Err(FlowError::Malformed("sampling rate 0".into()));
            }
            None => u64::from(rate),
        };
        let mut from_header = None;
        let mut from_sampled = None;
        for _ in 0..records {
            let (rf, mut r) = s.element("flow record")?;
            match rf {
                RAW_HEADER => {
                    let proto = r.u32("raw packet header")?;
                    let frame_len = r.u32("raw packet header")?;
                    let _stripped = r.u32("raw packet header")?;
                    let hlen = r.u32("raw packet header")? as usize;
                    let hdr = r.opaque(hlen, "raw packet header")?;
                    if from_header.is_none() {
                        from_header = parse_header(proto, hdr)?.map(|p| (p, frame_len));
                    }
                }
                SAMPLED_IPV4 | SAMPLED_IPV6 => {
                    let len = r.u32("sampled ip")?;
                    let proto = r.u32("sampled ip")?;
                    let (src, dst) = if rf == SAMPLED_IPV4 {
                        let s4: [u8; 4] = r.bytes(4, "sampled ipv4")?.try_into().unwrap_or([0; 4]);
                        let d4: [u8; 4] = r.bytes(4, "sampled ipv4")?.try_into().unwrap_or([0; 4]);
                        (
                            IpAddr::from(Ipv4Addr::from(s4)),
                            IpAddr::from(Ipv4Addr::from(d4)),
                        )
                    } else {
                        let s6: [u8; 16] =
                            r.bytes(16, "sampled ipv6")?.try_into().unwrap_or([0; 16]);
                        let d6: [u8; 16] =
                            r.bytes(16, "sampled ipv6")?.try_into().unwrap_or([0; 16]);
                        (
                            IpAddr::from(Ipv6Addr::from(s6)),
                            IpAddr::from(Ipv6Addr::from(d6)),
                        )
                    };
                    let sp = r.u32("sampled ip")?;
                    let dp = r.u32("sampled ip")?;
                    let flags = r.u32("sampled ip")?;
                    if proto > 255 || sp > 65535 || dp > 65535 {
                        return Err(FlowError::Malformed(format!(
                            "sampled ip record: protocol {proto}, ports {sp}/{dp}"
                        )));
                    }
                    from_sampled = Some((
                        Parsed {
                            src,
                            dst,
                            proto: proto as u8,
                            src_port: sp as u16,
                            dst_port: dp as u16,
                            tcp_flags: flags as u8,
                            fragment: false,
                        },
                        len,
                    ));
                }
                _ => {}
            }
        }
        match from_header.or(from_sampled) {
            Some((p, len)) => {
                got.push(FlowSample {
                    src: p.src,
                    dst: p.dst,
                    proto: p.proto,
                    src_port: p.src_port,
                    dst_port: p.dst_port,
                    tcp_flags: p.tcp_flags,
                    packets: rate,
                    bytes: u64::from(len).saturating_mul(rate),
                    rate,
                    fragment: p.fragment,
                });
                d.records += 1;
            }
            // A sampled frame that is not IP (ARP, ...), or no record
            // detection can read.
            None => d.skipped += 1,
        }
    }
    out.extend(got);
    Ok(d)
}

/// What a sampled packet's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    src_port: u16,
    dst_port: u16,
    tcp_flags: u8,
    fragment: bool,
}

/// Read a raw packet header record: `Ok(None)` for a frame that is not IP
/// or a header protocol other than Ethernet/IPv4/IPv6 (skipped), an error
/// for an IP header that does not parse.
fn parse_header(proto: u32, hdr: &[u8]) -> Result<Option<Parsed>, FlowError> {
    let pkt = match proto {
        HEADER_ETHERNET => match LaxSlicedPacket::from_ethernet(hdr) {
            Ok(p) => p,
            Err(_) => return Err(FlowError::Truncated("sampled ethernet header")),
        },
        HEADER_IPV4 | HEADER_IPV6 => match LaxSlicedPacket::from_ip(hdr) {
            Ok(p) => p,
            Err(e) => return Err(FlowError::Malformed(format!("sampled ip header: {e}"))),
        },
        _ => return Ok(None),
    };
    let (src, dst, payload) = match &pkt.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            (
                IpAddr::from(h.source_addr()),
                IpAddr::from(h.destination_addr()),
                v4.payload(),
            )
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            (
                IpAddr::from(h.source_addr()),
                IpAddr::from(h.destination_addr()),
                v6.payload(),
            )
        }
        Some(LaxNetSlice::Arp(_)) | None => {
            // An Ethernet frame whose IP header is cut or broken is an
            // error; a frame of another type is skipped.
            return match pkt.stop_err {
                Some(_) if pkt.link.is_some() && looks_ip(hdr) => Err(FlowError::Malformed(
                    "sampled frame: IP header does not parse".into(),
                )),
                _ => Ok(None),
            };
        }
    };
    let mut p = Parsed {
        src,
        dst,
        proto: payload.ip_number.0,
        src_port: 0,
        dst_port: 0,
        tcp_flags: 0,
        fragment: payload.fragmented,
    };
    match &pkt.transport {
        Some(TransportSlice::Udp(u)) => {
            p.src_port = u.source_port();
            p.dst_port = u.destination_port();
        }
        Some(TransportSlice::Tcp(t)) => {
            p.src_port = t.source_port();
            p.dst_port = t.destination_port();
            for (on, bit) in [
                (t.fin(), TCP_FIN),
                (t.syn(), TCP_SYN),
                (t.rst(), TCP_RST),
                (t.ack(), TCP_ACK),
            ] {
                if on {
                    p.tcp_flags |= bit;
                }
            }
        }
        _ => {}
    }
    Ok(Some(p))
}

/// Whether an Ethernet frame's type (after up to two VLAN tags) is IPv4
/// or IPv6.
fn looks_ip(frame: &[u8]) -> bool {
    let mut off = 12;
    for _ in 0..3 {
        let Some(t) = frame.get(off..off + 2) else {
            return false;
        };
        match u16::from_be_bytes([t[0], t[1]]) {
            0x0800 | 0x86dd => return true,
            0x8100 | 0x88a8 => off += 4,
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rampart_testkit::frame::Frame;

    /// An sFlow v5 datagram builder for tests (and fuzz seeds).
    #[derive(Default)]
    pub(crate) struct Datagram {
        samples: Vec<Vec<u8>>,
    }

    fn pad(v: &mut Vec<u8>) {
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
    }

    impl Datagram {
        pub(crate) fn flow(mut self, expanded: bool, rate: u32, frame: &[u8]) -> Self {
            let mut rec = Vec::new();
            rec.extend(RAW_HEADER.to_be_bytes());
            let mut body = Vec::new();
            body.extend(HEADER_ETHERNET.to_be_bytes());
            body.extend((frame.len() as u32 + 4).to_be_bytes()); // + FCS
            body.extend(4u32.to_be_bytes());
            let h = &frame[..frame.len().min(128)];
            body.extend((h.len() as u32).to_be_bytes());
            body.extend(h);
            pad(&mut body);
            rec.extend((body.len() as u32).to_be_bytes());
            rec.extend(body);
            let mut s = Vec::new();
            s.extend(7u32.to_be_bytes()); // sequence
            if expanded {
                s.extend(0u32.to_be_bytes());
                s.extend(3u32.to_be_bytes());
            } else {
                s.extend(3u32.to_be_bytes());
            }
            s.extend(rate.to_be_bytes());
            s.extend(1000u32.to_be_bytes()); // pool
            s.extend(0u32.to_be_bytes()); // drops
            let io = if expanded { 16 } else { 8 };
            s.extend(vec![0u8; io]);
            s.extend(1u32.to_be_bytes()); // one record
            s.extend(rec);
            let mut out = Vec::new();
            out.extend(
                if expanded {
                    EXPANDED_FLOW_SAMPLE
                } else {
                    FLOW_SAMPLE
                }
                .to_be_bytes(),
            );
            out.extend((s.len() as u32).to_be_bytes());
            out.extend(s);
            self.samples.push(out);
            self
        }

        pub(crate) fn counters(mut self) -> Self {
            let mut out = Vec::new();
            out.extend(2u32.to_be_bytes());
            out.extend(12u32.to_be_bytes());
            out.extend([0u8; 12]);
            self.samples.push(out);
            self
        }

        pub(crate) fn bytes(&self) -> Vec<u8> {
            let mut v = Vec::new();
            v.extend(5u32.to_be_bytes());
            v.extend(1u32.to_be_bytes());
            v.extend([192, 0, 2, 254]);
            v.extend(0u32.to_be_bytes());
            v.extend(42u32.to_be_bytes());
            v.extend(1000u32.to_be_bytes());
            v.extend((self.samples.len() as u32).to_be_bytes());
            for s in &self.samples {
                v.extend(s);
            }
            v
        }
    }

    pub(crate) fn udp_frame(
        src: &str,
        dst: &str,
        sport: u16,
        dport: u16,
        payload: usize,
    ) -> Vec<u8> {
        Frame::udp(src, dst, sport, dport)
            .payload(&vec![0u8; payload])
            .build()
    }

    #[test]
    fn flow_samples_give_packets_scaled_by_the_sampling_rate() {
        let dns = udp_frame("192.0.2.9", "10.20.0.2", 53, 40000, 1200);
        let syn = Frame::tcp("198.51.100.1", "10.20.0.2", 999, 80)
            .flags(0x02)
            .build();
        let dg = Datagram::default()
            .flow(false, 256, &dns)
            .counters()
            .flow(true, 512, &syn)
            .bytes();
        let mut out = Vec::new();
        let d = decode(&dg, None, &mut out).unwrap();
        assert_eq!(
            d,
            Decoded {
                records: 2,
                skipped: 1,
                no_template: 0
            }
        );
        assert_eq!(out.len(), 2);
        let a = &out[0];
        assert_eq!(
            (a.src.to_string().as_str(), a.dst.to_string().as_str()),
            ("192.0.2.9", "10.20.0.2")
        );
        assert_eq!(
            (a.proto, a.src_port, a.dst_port, a.packets, a.rate),
            (17, 53, 40000, 256, 256)
        );
        assert_eq!(a.bytes, (dns.len() as u64 + 4) * 256);
        assert!(!a.fragment);
        let b = &out[1];
        assert_eq!(
            (b.proto, b.dst_port, b.tcp_flags, b.packets),
            (6, 80, TCP_SYN, 512)
        );
        // The override replaces the agent's rate.
        out.clear();
        decode(&dg, Some(10), &mut out).unwrap();
        assert_eq!((out[0].packets, out[1].packets), (10, 10));
    }

    #[test]
    fn a_truncated_header_still_names_what_it_shows() {
        // pmacct and switches cut the header at 128 bytes: the packet's
        // IP total length is larger than what was sampled.
        let big = udp_frame("192.0.2.9", "10.20.0.2", 123, 4444, 1400);
        let dg = Datagram::default().flow(false, 1, &big).bytes();
        let mut out = Vec::new();
        decode(&dg, None, &mut out).unwrap();
        assert_eq!(out[0].src_port, 123);
        assert_eq!(out[0].bytes, big.len() as u64 + 4);
    }

    #[test]
    fn malformed_datagrams_are_errors_and_give_nothing() {
        let f = udp_frame("192.0.2.9", "10.20.0.2", 53, 1, 10);
        let good = Datagram::default()
            .flow(false, 4, &f)
            .flow(false, 4, &f)
            .bytes();
        let mut out = Vec::new();
        // Every truncation of a good datagram: an error, nothing appended.
        for n in 0..good.len() {
            let r = decode(&good[..n], None, &mut out);
            assert!(r.is_err(), "cut at {n}: {r:?}");
            assert_eq!(r.unwrap_err().reason(), "truncated");
            assert!(out.is_empty());
        }
        let mut v4 = good.clone();
        v4[3] = 4;
        assert_eq!(decode(&v4, None, &mut out), Err(FlowError::Version(4)));
        let mut agent = good.clone();
        agent[7] = 9;
        assert_eq!(
            decode(&agent, None, &mut out).unwrap_err().reason(),
            "malformed"
        );
        // A sampling rate of 0 is not a rate.
        let zero = Datagram::default().flow(false, 0, &f).bytes();
        assert_eq!(
            decode(&zero, None, &mut out).unwrap_err().reason(),
            "malformed"
        );
        // A broken IPv4 header inside an Ethernet frame (IHL 3).
        let mut bad = f.clone();
        bad[14] = 0x43;
        let dg = Datagram::default().flow(false, 1, &bad).bytes();
        assert_eq!(
            decode(&dg, None, &mut out).unwrap_err().reason(),
            "malformed"
        );
        assert!(out.is_empty());
        // A frame that is not IP (ARP) is skipped, not an error.
        let mut arp = f.clone();
        arp[12] = 0x08;
        arp[13] = 0x06;
        let dg = Datagram::default().flow(false, 1, &arp).bytes();
        assert_eq!(decode(&dg, None, &mut out).unwrap().skipped, 1);
        assert!(out.is_empty());
    }
}
