//! What `bpf/common/parse.h` must make of a frame, written from its contract
//! (the comment at its top and `bpf/common/abi.h`) rather than from its
//! code: the oracle the corpus's expected outcomes come from.
//!
//! `tests/prog_parse.rs` of rampart-dataplane runs every corpus frame
//! through `parse_packet_lim` in the kernel — with `parse_packet()`'s
//! limits and with the ddos filter's — and requires this outcome, field by
//! field; the programs' tests turn the status (and the tunnel kind) into
//! their verdicts and reason counters.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

// The values are the header's, so the oracle cannot drift from the ABI.
use rampart_bpf::abi::common as abi;

/// `enum parse_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Parsed; the fields below hold.
    Ok = abi::PARSE_OK as isize,
    /// Not IPv4/IPv6: only the Ethernet/VLAN fields hold.
    NotIp = abi::PARSE_NOT_IP as isize,
    /// The frame ends inside a header it announces, or before the end of
    /// the IP packet its header announces.
    Truncated = abi::PARSE_TRUNCATED as isize,
    /// An impossible header field.
    BadHeader = abi::PARSE_BAD_HEADER as isize,
    /// More VLAN tags, MPLS labels or IPv6 extension headers than the limits walk.
    TooDeep = abi::PARSE_TOO_DEEP as isize,
}

impl Status {
    /// Every status, in `enum parse_status` order.
    pub const ALL: [Status; 5] = [
        Status::Ok,
        Status::NotIp,
        Status::Truncated,
        Status::BadHeader,
        Status::TooDeep,
    ];

    /// Malformed: any status but `Ok` and `NotIp`.
    pub fn malformed(self) -> bool {
        !matches!(self, Status::Ok | Status::NotIp)
    }

    /// The label programs count it under (`not_ip`, `truncated`, ...).
    pub fn label(self) -> &'static str {
        abi::PARSE_STATUS_LABELS[self as usize]
    }
}

/// `enum parse_frag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Frag {
    /// Not a fragment.
    #[default]
    None = abi::FRAG_NONE as isize,
    /// First fragment: carries the L4 header.
    First = abi::FRAG_FIRST as isize,
    /// Later fragment: no L4 header, no ports, no flags.
    Later = abi::FRAG_LATER as isize,
}

/// `enum parse_encap`: the tunnel a packet is (its inner packet is not walked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Encap {
    /// Not a tunnel.
    #[default]
    None = abi::PARSE_ENCAP_NONE as isize,
    /// GRE (IP protocol 47).
    Gre = abi::PARSE_ENCAP_GRE as isize,
    /// IP in IP (protocol 4 or 41).
    Ipip = abi::PARSE_ENCAP_IPIP as isize,
    /// UDP to port 4789.
    Vxlan = abi::PARSE_ENCAP_VXLAN as isize,
    /// UDP to port 6081.
    Geneve = abi::PARSE_ENCAP_GENEVE as isize,
    /// MPLS whose payload is not IP (status `NotIp`).
    Mpls = abi::PARSE_ENCAP_MPLS as isize,
}

impl Encap {
    /// The label of `enum parse_encap` (`gre`, `vxlan`, ...; `none`).
    pub fn label(self) -> &'static str {
        abi::PARSE_ENCAP_LABELS[self as usize]
    }
}

/// `struct parse_limits`: what `parse_packet_lim` walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// VLAN tags walked (capped at `PARSE_MAX_VLANS`).
    pub max_vlans: u8,
    /// IPv6 extension headers walked (capped at `PARSE_MAX_V6_EXT`).
    pub max_v6_ext: u8,
    /// Walk PPPoE session and MPLS headers (else their frames are not IP).
    pub shims: bool,
}

impl Limits {
    /// `parse_packet()`'s: what every program but the ddos stages walks.
    pub const DEFAULT: Limits = Limits {
        max_vlans: abi::PARSE_DEF_VLANS as u8,
        max_v6_ext: abi::PARSE_DEF_V6_EXT as u8,
        shims: false,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// VLAN ids `struct pkt_info` keeps.
pub const VLAN_IDS: usize = abi::PARSE_VLAN_IDS;

/// The expected `struct pkt_info` (host byte order throughout) and status.
/// With a malformed status only `status`, and `family` with the addresses
/// (set once the IP header itself is whole, so a filter can judge the
/// source of a frame cut short), are defined: the program must not use the
/// rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Outcome.
    pub status: Status,
    /// VLAN tags walked (all of them).
    pub vlan_depth: u8,
    /// The VLAN ids of the outermost [`VLAN_IDS`] tags, outermost first.
    pub vlan_id: [u16; VLAN_IDS],
    /// The EtherType after the tags and shims (of the shim when the walk
    /// ended in it).
    pub l3_proto: u16,
    /// Offset of the IP header (of the shim when the walk ended in it).
    pub l3_off: u16,
    /// `PARSE_SHIM_*` bits: PPPoE / MPLS headers walked before the IP header.
    pub shim: u8,
    /// The tunnel the packet is.
    pub encap: Encap,
    /// 4 or 6; 0 when not IP.
    pub family: u8,
    /// Source address (unspecified when not IP).
    pub saddr: IpAddr,
    /// Destination address.
    pub daddr: IpAddr,
    /// IPv4 total length, or IPv6 payload length + 40 (16 bits, wrapping).
    pub ip_len: u16,
    /// TTL / hop limit.
    pub ttl: u8,
    /// Fragment state.
    pub frag: Frag,
    /// Protocol after the IP (extension) headers.
    pub l4_proto: u8,
    /// Offset of the L4 header.
    pub l4_off: u16,
    /// Ports (0 when there are none).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// TCP flags byte.
    pub tcp_flags: u8,
    /// ICMP/ICMPv6 type.
    pub icmp_type: u8,
    /// ICMP/ICMPv6 code.
    pub icmp_code: u8,
}

impl Default for Parsed {
    fn default() -> Self {
        Self {
            status: Status::Ok,
            vlan_depth: 0,
            vlan_id: [0; VLAN_IDS],
            l3_proto: 0,
            l3_off: 0,
            shim: 0,
            encap: Encap::None,
            family: 0,
            saddr: Ipv4Addr::UNSPECIFIED.into(),
            daddr: Ipv4Addr::UNSPECIFIED.into(),
            ip_len: 0,
            ttl: 0,
            frag: Frag::None,
            l4_proto: 0,
            l4_off: 0,
            sport: 0,
            dport: 0,
            tcp_flags: 0,
            icmp_type: 0,
            icmp_code: 0,
        }
    }
}

/// A frame seen through bounds checks: reading past the end is the
/// `Truncated` outcome, as it is for the parser.
struct View<'a>(&'a [u8]);

impl View<'_> {
    fn bytes<const N: usize>(&self, off: usize) -> Result<[u8; N], Status> {
        self.0
            .get(off..off + N)
            .map(|b| b.try_into().expect("N bytes"))
            .ok_or(Status::Truncated)
    }
    fn u16(&self, off: usize) -> u16 {
        u16::from_be_bytes([self.0[off], self.0[off + 1]])
    }
}

const IP_PROTO_EXT: [u8; 5] = [0, 43, 44, 51, 60];

/// The outcome `parse_packet` (the default limits) must report for `frame`.
pub fn expect(frame: &[u8]) -> Parsed {
    expect_with(frame, Limits::DEFAULT)
}

/// The outcome `parse_packet_lim` must report for `frame` under `lim`.
pub fn expect_with(frame: &[u8], lim: Limits) -> Parsed {
    let mut p = Parsed::default();
    p.status = match walk(&View(frame), &mut p, lim) {
        Ok(s) => s,
        Err(s) => s,
    };
    p
}

fn walk(v: &View<'_>, p: &mut Parsed, lim: Limits) -> Result<Status, Status> {
    let eth: [u8; 14] = v.bytes(0)?;
    let mut ethertype = u16::from_be_bytes([eth[12], eth[13]]);
    let mut off = 14;
    let tagged = |t: u16| t == 0x8100 || t == 0x88a8;
    let max_vlans = lim.max_vlans.min(abi::PARSE_MAX_VLANS as u8);
    while tagged(ethertype) && p.vlan_depth < max_vlans {
        let tag: [u8; 4] = v.bytes(off)?;
        if let Some(id) = p.vlan_id.get_mut(usize::from(p.vlan_depth)) {
            *id = u16::from_be_bytes([tag[0], tag[1]]) & 0x0fff;
        }
        p.vlan_depth += 1;
        ethertype = u16::from_be_bytes([tag[2], tag[3]]);
        off += 4;
    }
    // Where the walk ends, short of IP, is what l3_proto/l3_off name.
    p.l3_proto = ethertype;
    p.l3_off = off as u16;
    if tagged(ethertype) {
        return Err(Status::TooDeep);
    }
    match ethertype {
        // PPPoE session (RFC 2516): version 1, type 1, code 0; PPP protocol.
        0x8864 if lim.shims => {
            let h: [u8; 8] = v.bytes(off)?;
            if h[0] != 0x11 || h[1] != 0 {
                return Err(Status::BadHeader);
            }
            p.shim |= abi::PARSE_SHIM_PPPOE;
            off += 8;
            ethertype = match u16::from_be_bytes([h[6], h[7]]) {
                0x0021 => 0x0800,
                0x0057 => 0x86dd,
                // The session's control traffic (LCP, IPCP, ...).
                _ => return Ok(Status::NotIp),
            };
        }
        // MPLS: labels down to the bottom of stack, then IP by its version nibble.
        0x8847 | 0x8848 if lim.shims => {
            let mut bottom = false;
            for _ in 0..abi::PARSE_MAX_MPLS {
                let lse: [u8; 4] = v.bytes(off)?;
                off += 4;
                if lse[2] & 1 != 0 {
                    bottom = true;
                    break;
                }
            }
            if !bottom {
                return Err(Status::TooDeep);
            }
            p.shim |= abi::PARSE_SHIM_MPLS;
            let [first]: [u8; 1] = v.bytes(off)?;
            ethertype = match first >> 4 {
                4 => 0x0800,
                6 => 0x86dd,
                // An Ethernet pseudowire, a control word: a tunnel, not IP.
                _ => {
                    p.encap = Encap::Mpls;
                    return Ok(Status::NotIp);
                }
            };
        }
        _ => {}
    }
    p.l3_proto = ethertype;
    p.l3_off = off as u16;
    match ethertype {
        0x0800 => ipv4(v, off, p),
        0x86dd => ipv6(v, off, p, lim),
        _ => Ok(Status::NotIp),
    }
}

fn ipv4(v: &View<'_>, off: usize, p: &mut Parsed) -> Result<Status, Status> {
    let h: [u8; 20] = v.bytes(off)?;
    let (version, words) = (h[0] >> 4, h[0] & 0x0f);
    if version != 4 || words < 5 {
        return Err(Status::BadHeader);
    }
    let hlen = usize::from(words) * 4;
    v.bytes::<0>(off + hlen)?; // the options are there
    p.ip_len = u16::from_be_bytes([h[2], h[3]]);
    if usize::from(p.ip_len) < hlen {
        return Err(Status::BadHeader);
    }
    p.family = 4;
    p.saddr = Ipv4Addr::new(h[12], h[13], h[14], h[15]).into();
    p.daddr = Ipv4Addr::new(h[16], h[17], h[18], h[19]).into();
    p.l4_proto = h[9];
    p.ttl = h[8];
    // The packet ends inside the frame; what follows it is Ethernet padding.
    v.bytes::<0>(off + usize::from(p.ip_len))?;
    let frag = u16::from_be_bytes([h[6], h[7]]);
    p.frag = if frag & 0x1fff != 0 {
        Frag::Later
    } else if frag & 0x2000 != 0 {
        Frag::First
    } else {
        Frag::None
    };
    l4(v, off + hlen, p)
}

fn ipv6(v: &View<'_>, off: usize, p: &mut Parsed, lim: Limits) -> Result<Status, Status> {
    let h: [u8; 40] = v.bytes(off)?;
    if h[0] >> 4 != 6 {
        return Err(Status::BadHeader);
    }
    p.family = 6;
    p.saddr = Ipv6Addr::from(<[u8; 16]>::try_from(&h[8..24]).expect("16")).into();
    p.daddr = Ipv6Addr::from(<[u8; 16]>::try_from(&h[24..40]).expect("16")).into();
    let payload = u16::from_be_bytes([h[4], h[5]]);
    p.ip_len = payload.wrapping_add(40);
    p.ttl = h[7];
    // Payload length 0 is a jumbogram (RFC 2675), whose length is elsewhere.
    if payload != 0 {
        v.bytes::<0>(off + 40 + usize::from(payload))?;
    }
    let mut next = h[6];
    let mut off = off + 40;
    let max_ext = usize::from(lim.max_v6_ext).min(abi::PARSE_MAX_V6_EXT as usize);
    let mut walked = 0;
    while IP_PROTO_EXT.contains(&next) {
        if walked == max_ext {
            return Err(Status::TooDeep);
        }
        walked += 1;
        if next == 44 {
            let fh: [u8; 8] = v.bytes(off)?;
            let field = u16::from_be_bytes([fh[2], fh[3]]);
            next = fh[0];
            off += 8;
            if field & 0xfff8 != 0 {
                // A later fragment: what follows is fragment payload,
                // extension headers of the fragmentable part included.
                p.frag = Frag::Later;
                p.l4_proto = next;
                return l4(v, off, p);
            }
            if field & 1 != 0 {
                p.frag = Frag::First;
            }
        } else {
            let [nh, len]: [u8; 2] = v.bytes(off)?;
            off += if next == 51 {
                (usize::from(len) + 2) * 4 // AH counts 32-bit words
            } else {
                (usize::from(len) + 1) * 8
            };
            next = nh;
        }
        // The parser bounds its offset for the verifier; no frame gets here.
        if off > 0x3fff {
            return Err(Status::Truncated);
        }
    }
    p.l4_proto = next;
    l4(v, off, p)
}

/// The tunnel an IP protocol number stands for.
fn proto_encap(proto: u8) -> Encap {
    match proto {
        47 => Encap::Gre,
        4 | 41 => Encap::Ipip,
        _ => Encap::None,
    }
}

fn l4(v: &View<'_>, off: usize, p: &mut Parsed) -> Result<Status, Status> {
    p.l4_off = off as u16;
    p.encap = proto_encap(p.l4_proto);
    if p.frag == Frag::Later {
        // A fragment of a tunnel packet is one too (no UDP port to look at).
        return Ok(Status::Ok);
    }
    match p.l4_proto {
        6 => {
            let t: [u8; 20] = v.bytes(off)?;
            if t[12] >> 4 < 5 {
                return Err(Status::BadHeader);
            }
            (p.sport, p.dport) = (v.u16(off), v.u16(off + 2));
            p.tcp_flags = t[13];
        }
        17 => {
            v.bytes::<8>(off)?;
            (p.sport, p.dport) = (v.u16(off), v.u16(off + 2));
            p.encap = match p.dport {
                4789 => Encap::Vxlan,
                6081 => Encap::Geneve,
                _ => Encap::None,
            };
        }
        1 | 58 => {
            let i: [u8; 4] = v.bytes(off)?;
            (p.icmp_type, p.icmp_code) = (i[0], i[1]);
        }
        _ => {}
    }
    Ok(Status::Ok)
}
