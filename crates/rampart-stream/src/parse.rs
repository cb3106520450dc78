//! Frame → [`StreamTuple`] in userspace: the "no offload" path (raw
//! AF_XDP frames, pcap records).
//!
//! A line-by-line mirror of `bpf/common/parse.h` + `stream_tuple_from_frame`
//! in `bpf/stream/tuple.h` — same limits (2 VLAN tags, 6 IPv6 extension
//! headers), same statuses, same treatment of fragments and truncation —
//! so a tuple is the same whichever side built it. `tests/prog_stream_tuple.rs`
//! runs both on the same frames and compares them field by field. Written
//! by hand rather than with etherparse because the point is to reproduce
//! the BPF parser's exact semantics (etherparse rejects or accepts other
//! frames, e.g. it checks IPv4 total length against the slice).

use rampart_bpf::abi::common::{
    FRAG_FIRST, FRAG_LATER, PARSE_BAD_HEADER, PARSE_MAX_V6_EXT, PARSE_MAX_VLANS, PARSE_NOT_IP,
    PARSE_STATUS_LABELS, PARSE_TOO_DEEP, PARSE_TRUNCATED,
};

use crate::tuple::{StreamTuple, ST_F_FRAG_FIRST, ST_F_FRAG_LATER, ST_F_IPV6};

/// Why a frame gave no tuple (`enum parse_status`, minus `PARSE_OK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u32)]
pub enum ParseStatus {
    /// Not IPv4/IPv6 (ARP, LLDP, ...).
    NotIp = PARSE_NOT_IP,
    /// The frame ends inside a header it announces.
    Truncated = PARSE_TRUNCATED,
    /// An impossible header field.
    BadHeader = PARSE_BAD_HEADER,
    /// More VLAN tags or IPv6 extension headers than the parser walks.
    TooDeep = PARSE_TOO_DEEP,
}

impl ParseStatus {
    /// All statuses, in `enum parse_status` order (for counters).
    pub const ALL: [ParseStatus; 4] =
        [Self::NotIp, Self::Truncated, Self::BadHeader, Self::TooDeep];
    /// Metric label.
    pub fn name(self) -> &'static str {
        PARSE_STATUS_LABELS[self as usize]
    }
}

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;

#[derive(Default)]
struct Info {
    frag: u8, // enum parse_frag
    l4_proto: u8,
    sport: u16,
    dport: u16,
    tcp_flags: u8,
    icmp: Option<(u8, u8)>,
}

#[inline(always)]
fn be16(d: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([d[off], d[off + 1]])
}

#[inline(always)]
fn parse_l4(d: &[u8], off: usize, pi: &mut Info) -> Result<(), ParseStatus> {
    if pi.frag == FRAG_LATER {
        return Ok(());
    }
    match pi.l4_proto {
        6 => {
            if off + 20 > d.len() {
                return Err(ParseStatus::Truncated);
            }
            if d[off + 12] >> 4 < 5 {
                return Err(ParseStatus::BadHeader);
            }
            pi.sport = be16(d, off);
            pi.dport = be16(d, off + 2);
            pi.tcp_flags = d[off + 13];
        }
        17 => {
            if off + 8 > d.len() {
                return Err(ParseStatus::Truncated);
            }
            pi.sport = be16(d, off);
            pi.dport = be16(d, off + 2);
        }
        1 | 58 => {
            if off + 4 > d.len() {
                return Err(ParseStatus::Truncated);
            }
            pi.icmp = Some((d[off], d[off + 1]));
        }
        _ => {}
    }
    Ok(())
}

/// Parse one Ethernet frame (without FCS) captured at `ts_ns`.
///
/// # Errors
/// The [`ParseStatus`] that says why there is no tuple; malformed frames
/// never yield one.
#[inline]
pub fn parse_frame(d: &[u8], ts_ns: u64) -> Result<StreamTuple, ParseStatus> {
    let mut t = StreamTuple {
        ts_ns,
        ..Default::default()
    };
    if d.len() < 14 {
        return Err(ParseStatus::Truncated);
    }
    let mut proto = be16(d, 12);
    let mut off = 14usize;
    let mut depth = 0;
    while depth < PARSE_MAX_VLANS {
        if proto != ETH_P_8021Q && proto != ETH_P_8021AD {
            break;
        }
        if off + 4 > d.len() {
            return Err(ParseStatus::Truncated);
        }
        if depth == 0 {
            t.vlan_id = be16(d, off) & 0x0fff;
        }
        proto = be16(d, off + 2);
        off += 4;
        depth += 1;
    }
    if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
        return Err(ParseStatus::TooDeep);
    }
    let mut pi = Info::default();
    match proto {
        ETH_P_IP => {
            if off + 20 > d.len() {
                return Err(ParseStatus::Truncated);
            }
            let (ver, ihl) = (d[off] >> 4, d[off] & 0x0f);
            if ver != 4 || ihl < 5 {
                return Err(ParseStatus::BadHeader);
            }
            let hlen = usize::from(ihl) * 4;
            if off + hlen > d.len() {
                return Err(ParseStatus::Truncated);
            }
            t.ip_len = be16(d, off + 2);
            if usize::from(t.ip_len) < hlen {
                return Err(ParseStatus::BadHeader);
            }
            t.saddr[0] = u32::from_ne_bytes([d[off + 12], d[off + 13], d[off + 14], d[off + 15]]);
            t.daddr[0] = u32::from_ne_bytes([d[off + 16], d[off + 17], d[off + 18], d[off + 19]]);
            pi.l4_proto = d[off + 9];
            let frag = be16(d, off + 6);
            if frag & 0x1fff != 0 {
                pi.frag = FRAG_LATER;
            } else if frag & 0x2000 != 0 {
                pi.frag = FRAG_FIRST;
            }
            parse_l4(d, off + hlen, &mut pi)?;
        }
        ETH_P_IPV6 => {
            if off + 40 > d.len() {
                return Err(ParseStatus::Truncated);
            }
            if d[off] >> 4 != 6 {
                return Err(ParseStatus::BadHeader);
            }
            t.flags |= ST_F_IPV6;
            for i in 0..4 {
                let s = off + 8 + i * 4;
                t.saddr[i] = u32::from_ne_bytes([d[s], d[s + 1], d[s + 2], d[s + 3]]);
                let s = off + 24 + i * 4;
                t.daddr[i] = u32::from_ne_bytes([d[s], d[s + 1], d[s + 2], d[s + 3]]);
            }
            // As in C: a __u16 sum, so it wraps for jumbo payload lengths.
            t.ip_len = be16(d, off + 4).wrapping_add(40);
            let mut nexthdr = d[off + 6];
            off += 40;
            let mut done = false;
            for _ in 0..PARSE_MAX_V6_EXT {
                match nexthdr {
                    0 | 43 | 60 => {
                        if off + 2 > d.len() {
                            return Err(ParseStatus::Truncated);
                        }
                        nexthdr = d[off];
                        off += (usize::from(d[off + 1]) + 1) * 8;
                    }
                    51 => {
                        if off + 2 > d.len() {
                            return Err(ParseStatus::Truncated);
                        }
                        nexthdr = d[off];
                        off += (usize::from(d[off + 1]) + 2) * 4;
                    }
                    44 => {
                        if off + 8 > d.len() {
                            return Err(ParseStatus::Truncated);
                        }
                        let fo = be16(d, off + 2);
                        nexthdr = d[off];
                        off += 8;
                        if fo & 0xfff8 != 0 {
                            // A later fragment: what follows is fragment
                            // payload (extension headers of the
                            // fragmentable part included); never walk it
                            // (as bpf/common/parse.h).
                            pi.frag = FRAG_LATER;
                            pi.l4_proto = nexthdr;
                            done = true;
                            break;
                        }
                        if fo & 1 != 0 {
                            pi.frag = FRAG_FIRST;
                        }
                    }
                    _ => {
                        pi.l4_proto = nexthdr;
                        if off > 0xffff {
                            return Err(ParseStatus::BadHeader);
                        }
                        parse_l4(d, off, &mut pi)?;
                        done = true;
                        break;
                    }
                }
                if off > 0x3fff {
                    return Err(ParseStatus::Truncated);
                }
            }
            if !done {
                if matches!(nexthdr, 0 | 43 | 60 | 51 | 44) {
                    return Err(ParseStatus::TooDeep);
                }
                pi.l4_proto = nexthdr;
                parse_l4(d, off, &mut pi)?;
            }
        }
        _ => return Err(ParseStatus::NotIp),
    }
    t.proto = pi.l4_proto;
    match pi.frag {
        1 => t.flags |= ST_F_FRAG_FIRST,
        2 => t.flags |= ST_F_FRAG_LATER,
        _ => {}
    }
    if pi.frag != 2 {
        if let Some((ty, code)) = pi.icmp {
            t.dport = (u16::from(ty) << 8) | u16::from(code);
        } else {
            t.sport = pi.sport;
            t.dport = pi.dport;
            t.tcp_flags = pi.tcp_flags;
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuple::TupleExt;

    fn udp4() -> Vec<u8> {
        rampart_testkit::frame::Frame::udp([192, 0, 2, 1], [198, 51, 100, 7], 1234, 53)
            .ttl(61)
            .zeros(10)
            .build()
    }

    #[test]
    fn udp_fields() {
        let t = parse_frame(&udp4(), 7).unwrap();
        assert_eq!(t.src_ip().to_string(), "192.0.2.1");
        assert_eq!(t.dst_ip().to_string(), "198.51.100.7");
        assert_eq!(
            (t.sport, t.dport, t.proto, t.ip_len, t.ts_ns),
            (1234, 53, 17, 38, 7)
        );
    }

    #[test]
    fn truncation_at_every_length_never_yields_a_wrong_tuple() {
        let f = udp4();
        for n in 0..f.len() {
            let r = parse_frame(&f[..n], 0);
            if n < 14 + 20 + 8 {
                assert_eq!(r.unwrap_err(), ParseStatus::Truncated, "len {n}");
            }
        }
    }
}
