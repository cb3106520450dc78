//! Frame → [`StreamTuple`] in userspace: the "no offload" path (raw
//! AF_XDP frames, pcap records).
//!
//! [`parse_packet`] is a line-by-line mirror of `bpf/common/parse.h` — same
//! walk (VLAN tags, PPPoE, MPLS, IPv6 extension headers, tunnels reported
//! in `encap`), same limits, same statuses, same treatment of fragments and
//! truncation — filling the same `struct pkt_info`; [`parse_frame`] builds
//! the tuple from it as `stream_tuple_from_frame` in `bpf/stream/tuple.h`
//! does, so a tuple is the same whichever side built it. The parse tests
//! and the differential fuzz target (fuzz/, `frame_xdp`) run both on the
//! same frames. Written by hand rather than with etherparse because the
//! point is to reproduce the BPF parser's exact semantics.

pub use rampart_bpf::abi::common::{
    PktInfo, PARSE_DEF_V6_EXT, PARSE_DEF_VLANS, PARSE_MAX_MPLS, PARSE_MAX_V6_EXT, PARSE_MAX_VLANS,
    PARSE_SHIM_MPLS, PARSE_SHIM_PPPOE, PARSE_VLAN_IDS,
};
use rampart_bpf::abi::common::{
    FRAG_FIRST, FRAG_LATER, PARSE_BAD_HEADER, PARSE_ENCAP_GENEVE, PARSE_ENCAP_GRE,
    PARSE_ENCAP_IPIP, PARSE_ENCAP_MPLS, PARSE_ENCAP_NONE, PARSE_ENCAP_VXLAN, PARSE_NOT_IP,
    PARSE_STATUS_LABELS, PARSE_TOO_DEEP, PARSE_TRUNCATED,
};

use crate::tuple::{StreamTuple, ST_F_FRAG_FIRST, ST_F_FRAG_LATER, ST_F_IPV6};

/// Why a frame gave no tuple (`enum parse_status`, minus `PARSE_OK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u32)]
pub enum ParseStatus {
    /// Not IPv4/IPv6 (ARP, LLDP, PPPoE control, ...).
    NotIp = PARSE_NOT_IP,
    /// The frame ends inside a header it announces, or before the end of
    /// the IP packet its header announces.
    Truncated = PARSE_TRUNCATED,
    /// An impossible header field.
    BadHeader = PARSE_BAD_HEADER,
    /// More VLAN tags, MPLS labels or IPv6 extension headers than the parser walks.
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

/// What `parse_packet_lim` walks (`struct parse_limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// VLAN tags, 0 ..= [`PARSE_MAX_VLANS`].
    pub max_vlans: u32,
    /// IPv6 extension headers, 0 ..= [`PARSE_MAX_V6_EXT`].
    pub max_v6_ext: u32,
    /// Walk PPPoE session and MPLS headers (else their frames are not IP).
    pub shims: bool,
}

impl Default for Limits {
    /// `parse_packet()`'s limits (no PPPoE/MPLS, as in C: see `PARSE_DEF_VLANS`).
    fn default() -> Self {
        Self {
            max_vlans: PARSE_DEF_VLANS,
            max_v6_ext: PARSE_DEF_V6_EXT,
            shims: false,
        }
    }
}

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
const ETH_P_MPLS_UC: u16 = 0x8847;
const ETH_P_MPLS_MC: u16 = 0x8848;
const ETH_P_PPP_SES: u16 = 0x8864;
const PPP_IP: u16 = 0x0021;
const PPP_IPV6: u16 = 0x0057;
const UDP_VXLAN: u16 = 4789;
const UDP_GENEVE: u16 = 6081;

#[inline(always)]
fn be16(d: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([d[off], d[off + 1]])
}

/// Network-order bytes as the `__be16` field of `struct pkt_info` holds them.
#[inline(always)]
fn ne16(d: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes([d[off], d[off + 1]])
}

fn proto_encap(proto: u8) -> u8 {
    match proto {
        47 => PARSE_ENCAP_GRE,
        4 | 41 => PARSE_ENCAP_IPIP,
        _ => PARSE_ENCAP_NONE,
    }
}

#[inline(always)]
fn parse_l4(d: &[u8], off: usize, pi: &mut PktInfo) -> Result<(), ParseStatus> {
    pi.l4_off = off as u16;
    if pi.frag == FRAG_LATER {
        pi.encap = proto_encap(pi.l4_proto);
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
            pi.sport = ne16(d, off);
            pi.dport = ne16(d, off + 2);
            pi.tcp_flags = d[off + 13];
        }
        17 => {
            if off + 8 > d.len() {
                return Err(ParseStatus::Truncated);
            }
            pi.sport = ne16(d, off);
            pi.dport = ne16(d, off + 2);
            match be16(d, off + 2) {
                UDP_VXLAN => pi.encap = PARSE_ENCAP_VXLAN,
                UDP_GENEVE => pi.encap = PARSE_ENCAP_GENEVE,
                _ => {}
            }
        }
        1 | 58 => {
            if off + 4 > d.len() {
                return Err(ParseStatus::Truncated);
            }
            pi.icmp_type = d[off];
            pi.icmp_code = d[off + 1];
        }
        47 | 4 | 41 => pi.encap = proto_encap(pi.l4_proto),
        _ => {}
    }
    Ok(())
}

fn parse_ipv4(d: &[u8], off: usize, pi: &mut PktInfo) -> Result<(), ParseStatus> {
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
    pi.ip_len = be16(d, off + 2);
    if usize::from(pi.ip_len) < hlen {
        return Err(ParseStatus::BadHeader);
    }
    pi.family = 4;
    pi.saddr[0] = u32::from_ne_bytes([d[off + 12], d[off + 13], d[off + 14], d[off + 15]]);
    pi.daddr[0] = u32::from_ne_bytes([d[off + 16], d[off + 17], d[off + 18], d[off + 19]]);
    pi.l4_proto = d[off + 9];
    pi.ttl = d[off + 8];
    // The packet must end inside the frame (what follows it is padding).
    if off + usize::from(pi.ip_len) > d.len() {
        return Err(ParseStatus::Truncated);
    }
    let frag = be16(d, off + 6);
    if frag & 0x1fff != 0 {
        pi.frag = FRAG_LATER;
    } else if frag & 0x2000 != 0 {
        pi.frag = FRAG_FIRST;
    }
    parse_l4(d, off + hlen, pi)
}

fn parse_ipv6(d: &[u8], mut off: usize, pi: &mut PktInfo, max_ext: u32) -> Result<(), ParseStatus> {
    if off + 40 > d.len() {
        return Err(ParseStatus::Truncated);
    }
    if d[off] >> 4 != 6 {
        return Err(ParseStatus::BadHeader);
    }
    pi.family = 6;
    for i in 0..4 {
        let s = off + 8 + i * 4;
        pi.saddr[i] = u32::from_ne_bytes([d[s], d[s + 1], d[s + 2], d[s + 3]]);
        let s = off + 24 + i * 4;
        pi.daddr[i] = u32::from_ne_bytes([d[s], d[s + 1], d[s + 2], d[s + 3]]);
    }
    let payload = be16(d, off + 4);
    // As in C: a __u16 sum, so it wraps for the largest payload lengths.
    pi.ip_len = payload.wrapping_add(40);
    pi.ttl = d[off + 7];
    // Payload length 0 is a jumbogram (RFC 2675).
    if payload != 0 && off + 40 + usize::from(payload) > d.len() {
        return Err(ParseStatus::Truncated);
    }
    let mut nexthdr = d[off + 6];
    off += 40;
    for i in 0..PARSE_MAX_V6_EXT {
        if i >= max_ext {
            break;
        }
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
                    // A later fragment: what follows is fragment payload
                    // (extension headers of the fragmentable part
                    // included); never walk it.
                    pi.frag = FRAG_LATER;
                    pi.l4_proto = nexthdr;
                    return parse_l4(d, off, pi);
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
                return parse_l4(d, off, pi);
            }
        }
        // Bounded as in C (the verifier needs it there).
        if off > 0x3fff {
            return Err(ParseStatus::Truncated);
        }
    }
    if matches!(nexthdr, 0 | 43 | 60 | 51 | 44) {
        return Err(ParseStatus::TooDeep);
    }
    pi.l4_proto = nexthdr;
    parse_l4(d, off, pi)
}

/// `parse_packet_lim`: parse one Ethernet frame (without FCS) into a
/// `struct pkt_info`, walking at most `lim` VLAN tags and IPv6 extension
/// headers (each capped at its ceiling).
///
/// # Errors
/// The [`ParseStatus`] of a frame that is not a well-formed IP packet; the
/// [`PktInfo`] then holds what was read before (as the C side leaves it):
/// partial, not for classification, but with the IP addresses once the IP
/// header itself is whole.
pub fn parse_packet(d: &[u8], lim: Limits) -> (PktInfo, Result<(), ParseStatus>) {
    let mut pi = PktInfo::default();
    let r = parse_into(d, lim, &mut pi);
    (pi, r)
}

fn parse_into(d: &[u8], lim: Limits, pi: &mut PktInfo) -> Result<(), ParseStatus> {
    if d.len() < 14 {
        return Err(ParseStatus::Truncated);
    }
    let mut proto = be16(d, 12);
    let mut off = 14usize;
    for i in 0..PARSE_MAX_VLANS {
        if i >= lim.max_vlans || (proto != ETH_P_8021Q && proto != ETH_P_8021AD) {
            break;
        }
        if off + 4 > d.len() {
            return Err(ParseStatus::Truncated);
        }
        if (i as usize) < PARSE_VLAN_IDS {
            pi.vlan_id[i as usize] = be16(d, off) & 0x0fff;
        }
        pi.vlan_depth += 1;
        proto = be16(d, off + 2);
        off += 4;
    }
    pi.l3_proto = proto;
    pi.l3_off = off as u16;
    if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
        return Err(ParseStatus::TooDeep);
    }
    if proto == ETH_P_PPP_SES && lim.shims {
        if off + 8 > d.len() {
            return Err(ParseStatus::Truncated);
        }
        // RFC 2516: version 1, type 1, code 0 in session frames.
        if d[off] != 0x11 || d[off + 1] != 0 {
            return Err(ParseStatus::BadHeader);
        }
        pi.shim |= PARSE_SHIM_PPPOE;
        let ppp = be16(d, off + 6);
        off += 8;
        proto = match ppp {
            PPP_IP => ETH_P_IP,
            PPP_IPV6 => ETH_P_IPV6,
            // LCP, IPCP, ...: the session's control traffic.
            _ => return Err(ParseStatus::NotIp),
        };
        pi.l3_proto = proto;
        pi.l3_off = off as u16;
    } else if (proto == ETH_P_MPLS_UC || proto == ETH_P_MPLS_MC) && lim.shims {
        let mut bottom = false;
        for _ in 0..PARSE_MAX_MPLS {
            if off + 4 > d.len() {
                return Err(ParseStatus::Truncated);
            }
            let s = d[off + 2] & 1;
            off += 4;
            if s != 0 {
                bottom = true;
                break;
            }
        }
        if !bottom {
            return Err(ParseStatus::TooDeep);
        }
        pi.shim |= PARSE_SHIM_MPLS;
        if off + 1 > d.len() {
            return Err(ParseStatus::Truncated);
        }
        // MPLS does not say what it carries: IP is known by its version.
        proto = match d[off] >> 4 {
            4 => ETH_P_IP,
            6 => ETH_P_IPV6,
            _ => {
                pi.encap = PARSE_ENCAP_MPLS;
                return Err(ParseStatus::NotIp);
            }
        };
        pi.l3_proto = proto;
        pi.l3_off = off as u16;
    }
    match proto {
        ETH_P_IP => parse_ipv4(d, off, pi),
        ETH_P_IPV6 => parse_ipv6(d, off, pi, lim.max_v6_ext),
        _ => Err(ParseStatus::NotIp),
    }
}

/// Parse one Ethernet frame (without FCS) captured at `ts_ns` into a tuple
/// (`parse_packet` with the default limits, then `stream_tuple_from_frame`).
///
/// # Errors
/// The [`ParseStatus`] that says why there is no tuple; malformed frames
/// never yield one.
#[inline]
pub fn parse_frame(d: &[u8], ts_ns: u64) -> Result<StreamTuple, ParseStatus> {
    let (pi, r) = parse_packet(d, Limits::default());
    r?;
    let mut t = StreamTuple {
        ts_ns,
        saddr: pi.saddr,
        daddr: pi.daddr,
        proto: pi.l4_proto,
        ip_len: pi.ip_len,
        ..Default::default()
    };
    if pi.family == 6 {
        t.flags |= ST_F_IPV6;
    }
    match pi.frag {
        FRAG_FIRST => t.flags |= ST_F_FRAG_FIRST,
        FRAG_LATER => t.flags |= ST_F_FRAG_LATER,
        _ => {}
    }
    if pi.vlan_depth > 0 {
        t.vlan_id = pi.vlan_id[0];
    }
    if pi.frag != FRAG_LATER {
        if pi.l4_proto == 1 || pi.l4_proto == 58 {
            t.dport = (u16::from(pi.icmp_type) << 8) | u16::from(pi.icmp_code);
        } else {
            t.sport = u16::from_be(pi.sport);
            t.dport = u16::from_be(pi.dport);
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
