//! The parse corpus shared by every program that parses frames with
//! `bpf/common/parse.h` (the ddos filter and feature stage, the stream tuple
//! and offload programs, the tenant dispatcher, the parse probe).
//!
//! [`base`] holds valid frames of every kind (tunnels, PPPoE and MPLS
//! included) and malformed ones covering every parse status; [`truncations`]
//! cuts each of them at every length a program can receive; [`mutations`]
//! flips header bytes (and sometimes cuts) under a seed. Every [`Case`]
//! carries its expected outcome from [`crate::parse::expect`] (the limits
//! of `parse_packet()`; a program loaded with others, as the ddos stages
//! are, asks [`crate::parse::expect_with`]); the base frames also state the
//! status they were built to have, and the kit's own tests hold the oracle
//! to it.

use crate::frame::{ethertype, tcp, Ext, Frame};
use crate::parse::{self, Parsed, Status};
use crate::rng::Rng;

/// MPLS payload that is not IP: a pseudowire control word (first nibble 0),
/// then the Ethernet frame it carries.
fn pseudowire(inner: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 0, 0];
    v.extend_from_slice(inner);
    v
}

/// A PPPoE session header (session 1) with PPP protocol `ppp`, then `rest`.
fn pppoe_raw(ver_type: u8, ppp: u16, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![ver_type, 0, 0, 1];
    v.extend_from_slice(&((rest.len() + 2) as u16).to_be_bytes());
    v.extend_from_slice(&ppp.to_be_bytes());
    v.extend_from_slice(rest);
    v
}

/// How a case was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A well-formed frame (parses, or is not IP).
    Valid,
    /// Built malformed on purpose.
    Malformed,
    /// A base frame cut short.
    Truncation,
    /// A base frame with random bytes changed.
    Mutation,
}

/// One frame and what the parser must make of it.
#[derive(Debug, Clone)]
pub struct Case {
    /// Names the case in failure messages.
    pub name: String,
    /// How it was made.
    pub kind: Kind,
    /// The frame.
    pub frame: Vec<u8>,
    /// The expected parse outcome.
    pub expect: Parsed,
}

impl Case {
    /// A case whose expected outcome is the oracle's for `frame`.
    pub fn new(name: impl Into<String>, kind: Kind, frame: Vec<u8>) -> Self {
        let expect = parse::expect(&frame);
        Self {
            name: name.into(),
            kind,
            frame,
            expect,
        }
    }
}

/// Smallest frame BPF_PROG_RUN accepts for XDP: an Ethernet header
/// (drivers never deliver less, and the kernel refuses shorter test input).
pub const MIN_XDP_FRAME: usize = 14;

const V4: (&str, &str) = ("192.0.2.1", "198.51.100.7");
const V6: (&str, &str) = ("fd66::1:1", "fd10::2");

/// The base frames with the status each was built to have.
pub fn declared() -> Vec<(Case, Status)> {
    let mut v = valid();
    v.extend(malformed());
    v.into_iter()
        .map(|(name, f, status)| {
            let kind = if status.malformed() {
                Kind::Malformed
            } else {
                Kind::Valid
            };
            (Case::new(name, kind, f.build()), status)
        })
        .collect()
}

/// The frames the base corpus varies.
struct Shapes;

impl Shapes {
    fn udp4() -> Frame {
        Frame::udp(V4.0, V4.1, 1234, 53).ttl(61).payload(&[7; 20])
    }
    fn tcp4() -> Frame {
        Frame::tcp("10.0.0.9", "10.0.0.2", 40000, 80)
            .seq(1)
            .window(100)
    }
    fn tcp6() -> Frame {
        Frame::tcp(V6.0, V6.1, 80, 40000)
            .window(100)
            .payload(&[1, 2, 3])
    }
    fn udp6() -> Frame {
        Frame::udp(V6.0, V6.1, 4000, 53)
    }
}

/// Well-formed frames of every kind: every parse path, and frames that are not IP.
fn valid() -> Vec<(String, Frame, Status)> {
    use Status::*;
    let (s4, d4) = V4;
    let (s6, d6) = V6;
    let (udp4, tcp4, tcp6, udp6) = (Shapes::udp4, Shapes::tcp4, Shapes::tcp6, Shapes::udp6);
    let cases: Vec<(&str, Frame, Status)> = vec![
        ("udp4", udp4(), Ok),
        (
            "icmp4",
            Frame::icmp_echo("10.0.0.1", "10.0.0.2").zeros(8),
            Ok,
        ),
        ("icmp6", Frame::icmp_echo("fd00::1", "fd00::2").zeros(8), Ok),
        ("udp6", udp6().zeros(4), Ok),
        (
            "tcp4-options",
            tcp4()
                .flags(tcp::SYN)
                .tcp_options(&[2, 4, 5, 0xb4, 4, 2, 1, 1]),
            Ok,
        ),
        (
            "ipv4-options",
            Frame::udp("1.2.3.4", "5.6.7.8", 7, 9).ipv4_options(&[1, 1, 1, 0, 0x94, 4, 0, 0]),
            Ok,
        ),
        (
            "ipv4-options-40",
            tcp4().flags(tcp::SYN).ipv4_options(&[1; 40]),
            Ok,
        ),
        ("vlan1", udp4().vlan(100), Ok),
        (
            "vlan2-qinq",
            udp4().vlan_tag(ethertype::QINQ, 100).vlan(101),
            Ok,
        ),
        ("vlan2-tcp6", tcp6().flags(tcp::SYN).vlan(7).vlan(8), Ok),
        ("frag4-first", udp4().fragment(0, true), Ok),
        ("frag4-later", udp4().fragment(3, false), Ok),
        (
            "frag4-later-3-bytes",
            Frame::ip(s4, d4, 6)
                .payload(&[0x9c, 0x40, 0])
                .fragment(2, true),
            Ok,
        ),
        ("gre4", Frame::ip(s4, d4, 47).zeros(8), Ok),
        // Tunnels: reported in encap, their inner packet not walked.
        (
            "ipip4",
            Frame::ip(s4, d4, 4).payload(&udp4().build()[14..]),
            Ok,
        ),
        (
            "sit",
            Frame::ip(s4, d4, 41).payload(&udp6().zeros(4).build()[14..]),
            Ok,
        ),
        (
            "gre6",
            Frame::ip(s6, d6, 47).payload(&[&[0, 0, 8, 0][..], &udp4().build()[14..]].concat()),
            Ok,
        ),
        (
            "gre4-later-fragment",
            Frame::ip(s4, d4, 47).zeros(16).fragment(2, false),
            Ok,
        ),
        (
            "vxlan4",
            Frame::udp("203.0.113.9", d4, 40000, 4789)
                .payload(&[&[8, 0, 0, 0, 0, 0, 42, 0][..], &udp4().build()].concat()),
            Ok,
        ),
        (
            "geneve6",
            Frame::udp(s6, d6, 40000, 6081)
                .payload(&[&[0, 0, 0x65, 0x58, 0, 0, 42, 0][..], &udp4().build()].concat()),
            Ok,
        ),
        (
            "udp4-port-4790",
            Frame::udp(s4, d4, 40000, 4790).zeros(8),
            Ok,
        ),
        // The IP lengths against the frame: Ethernet padding after the packet.
        ("ipv4-padded", udp4().pad_to(90), Ok),
        ("ipv6-padded", udp6().zeros(4).pad_to(90), Ok),
        // Payload length 0: a jumbogram, whose length is in a hop-by-hop option.
        ("ipv6-payload-length-0", udp6().zeros(4).ip_len(0), Ok),
        // PPPoE and MPLS: not IP for parse_packet(), walked with `shims`.
        ("mpls-ipv4", udp4().mpls(16).mpls(17), NotIp),
        (
            "mpls-ipv6-multicast",
            udp6().zeros(4).mpls(16).mpls_multicast(),
            NotIp,
        ),
        (
            "mpls-eight-labels",
            (0..8).fold(udp4(), |f, l| f.mpls(16 + l)),
            NotIp,
        ),
        (
            "mpls-pseudowire",
            Frame::ethertype(ethertype::MPLS)
                .payload(&[&[0, 1, 1, 64][..], &pseudowire(&udp4().build())].concat()),
            NotIp,
        ),
        ("pppoe-ipv4", udp4().pppoe(1), NotIp),
        (
            "pppoe-ipv6-in-vlan",
            tcp6().flags(tcp::SYN).pppoe(7).vlan(3),
            NotIp,
        ),
        (
            "pppoe-lcp",
            Frame::ethertype(ethertype::PPPOE).payload(&pppoe_raw(0x11, 0xc021, &[1, 1, 0, 4])),
            NotIp,
        ),
        (
            "v6-hbh-rt-dst",
            Frame::udp(s6, d6, 1, 443)
                .ext(Ext::HopByHop(0))
                .ext(Ext::Routing(1))
                .ext(Ext::DestOpts(0)),
            Ok,
        ),
        ("v6-ah", Frame::tcp(s6, d6, 1, 2).ext(Ext::Auth(2)), Ok),
        (
            "v6-hbh-rt-dst-ah-frag-udp",
            udp6()
                .ext(Ext::HopByHop(0))
                .ext(Ext::Routing(0))
                .ext(Ext::DestOpts(0))
                .ext(Ext::Auth(1))
                .fragment(0, true),
            Ok,
        ),
        (
            "v6-frag-first",
            Frame::udp(s6, d6, 9, 53).fragment(0, true),
            Ok,
        ),
        (
            "v6-frag-later",
            Frame::udp(s6, d6, 9, 53).fragment(185, false),
            Ok,
        ),
        (
            // What follows a later fragment's header is payload even when it
            // looks like an extension header (here one announcing 2 KB).
            "v6-frag-later-header-lookalike",
            Frame::ip(s6, d6, 60)
                .payload(&[43, 255, 0, 0, 0, 0, 0, 0])
                .fragment(64, false),
            Ok,
        ),
        (
            "v6-six-ext",
            (0..6).fold(udp6(), |f, _| f.ext(Ext::DestOpts(0))),
            Ok,
        ),
        (
            "v6-eight-ext",
            (0..8).fold(udp6(), |f, _| f.ext(Ext::DestOpts(0))),
            Ok,
        ),
        (
            "v6-esp",
            Frame::ip(s6, d6, 50).payload(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]),
            Ok,
        ),
        ("arp", Frame::arp([10, 0, 0, 1], [10, 0, 0, 2]), NotIp),
        ("lldp", Frame::ethertype(ethertype::LLDP).zeros(28), NotIp),
        (
            "arp-in-vlan",
            Frame::arp([10, 0, 0, 1], [10, 0, 0, 2]).vlan(3),
            NotIp,
        ),
    ];
    let mut v: Vec<(String, Frame, Status)> = cases
        .into_iter()
        .map(|(n, f, s)| (n.to_string(), f, s))
        .collect();
    for (name, flags) in [
        ("syn", tcp::SYN),
        ("synack", tcp::SYN | tcp::ACK),
        ("ack", tcp::ACK),
        ("rstack", tcp::RST | tcp::ACK),
        ("finack", tcp::FIN | tcp::ACK),
    ] {
        v.push((name.to_string(), tcp4().flags(flags), Ok));
        v.push((format!("{name}6"), tcp6().flags(flags), Ok));
    }
    v
}

/// Frames built malformed on purpose, one or more per malformed status.
fn malformed() -> Vec<(String, Frame, Status)> {
    use Status::*;
    let (s6, d6) = V6;
    let (udp4, tcp4, tcp6, udp6) = (Shapes::udp4, Shapes::tcp4, Shapes::tcp6, Shapes::udp6);
    let cases: Vec<(&str, Frame, Status)> = vec![
        (
            "vlan3",
            udp4().vlan_tag(ethertype::QINQ, 100).vlan(101).vlan(102),
            TooDeep,
        ),
        (
            "vlan5",
            (0..5).fold(udp4(), |f, t| f.vlan(200 + t)),
            TooDeep,
        ),
        (
            "v6-nine-ext",
            (0..9).fold(udp6(), |f, _| f.ext(Ext::DestOpts(0))),
            TooDeep,
        ),
        // The IP packet is longer than the frame.
        (
            "ipv4-longer-than-frame",
            udp4().ip_len(20 + 8 + 21),
            Truncated,
        ),
        (
            "ipv6-longer-than-frame",
            udp6().zeros(4).ip_len(13),
            Truncated,
        ),
        // Malformed only where PPPoE and MPLS are walked (not IP for parse_packet()).
        (
            "pppoe-version-2",
            Frame::ethertype(ethertype::PPPOE).payload(&pppoe_raw(
                0x21,
                0x0021,
                &udp4().build()[14..],
            )),
            NotIp,
        ),
        ("pppoe-header-cut", udp4().pppoe(1).truncate(14 + 6), NotIp),
        (
            "mpls-nine-labels",
            (0..9).fold(udp4(), |f, l| f.mpls(16 + l)),
            NotIp,
        ),
        (
            "mpls-label-cut",
            udp4().mpls(16).mpls(17).truncate(14 + 6),
            NotIp,
        ),
        ("ipv4-ihl-4", udp4().ihl(4), BadHeader),
        (
            "ipv4-ihl-15-beyond-frame",
            udp4().ihl(15).truncate(14 + 20 + 8),
            Truncated,
        ),
        (
            "ipv4-total-length-below-header",
            udp4().ip_len(12),
            BadHeader,
        ),
        ("ipv4-version-5", udp4().version(5), BadHeader),
        ("ipv4-version-6", udp4().version(6), BadHeader),
        ("ipv6-version-4", udp6().zeros(4).version(4), BadHeader),
        ("tcp4-data-offset-4", tcp4().tcp_data_offset(4), BadHeader),
        ("tcp6-data-offset-0", tcp6().tcp_data_offset(0), BadHeader),
        ("vlan-tag-cut", udp4().vlan(5).truncate(16), Truncated),
        ("ipv4-header-cut", udp4().truncate(14 + 12), Truncated),
        ("udp4-cut", udp4().truncate(14 + 20 + 6), Truncated),
        (
            "icmp4-cut",
            Frame::icmp_echo("10.0.0.1", "10.0.0.2").truncate(14 + 20 + 2),
            Truncated,
        ),
        (
            "icmp6-cut",
            Frame::ip(s6, d6, 58).payload(&[128, 0, 0]),
            Truncated,
        ),
        (
            "v6-ext-cut",
            udp6().ext(Ext::HopByHop(0)).truncate(14 + 40 + 1),
            Truncated,
        ),
        (
            "v6-frag-header-cut",
            udp6().fragment(0, true).truncate(14 + 40 + 6),
            Truncated,
        ),
        (
            "v6-ext-longer-than-frame",
            udp6().ext(Ext::HopByHop(4)).zeros(4).truncate(14 + 40 + 8),
            Truncated,
        ),
    ];
    cases
        .into_iter()
        .map(|(n, f, s)| (n.to_string(), f, s))
        .collect()
}

/// Valid and malformed frames: every parse path and every status.
pub fn base() -> Vec<Case> {
    declared().into_iter().map(|(c, _)| c).collect()
}

/// Every base frame cut at every length from [`MIN_XDP_FRAME`] up to (not
/// including) its own.
pub fn truncations() -> Vec<Case> {
    base()
        .iter()
        .flat_map(|c| {
            (MIN_XDP_FRAME..c.frame.len()).map(|n| {
                Case::new(
                    format!("{} cut at {n}", c.name),
                    Kind::Truncation,
                    c.frame[..n].to_vec(),
                )
            })
        })
        .collect()
}

/// `n` mutations of base frames under `seed`: 1 to 4 bytes among the
/// first 96 (the headers, where parsers look) set at random, and a quarter
/// of them also cut short.
pub fn mutations(seed: u64, n: usize) -> Vec<Case> {
    let base = base();
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let b = &base[rng.index(base.len())];
            let mut f = b.frame.clone();
            for _ in 0..1 + rng.below(4) {
                let pos = rng.index(f.len().min(96));
                f[pos] = rng.next_u64() as u8;
            }
            if f.len() > MIN_XDP_FRAME && rng.below(4) == 0 {
                f.truncate(MIN_XDP_FRAME + rng.index(f.len() - MIN_XDP_FRAME));
            }
            Case::new(format!("mutation {i} of {}", b.name), Kind::Mutation, f)
        })
        .collect()
}

/// Base frames, every truncation and `n` mutations under `seed`.
pub fn all(seed: u64, n: usize) -> Vec<Case> {
    let mut v = base();
    v.extend(truncations());
    v.extend(mutations(seed, n));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Encap, Frag, Limits};
    use rampart_bpf::abi::common::{PARSE_SHIM_MPLS, PARSE_SHIM_PPPOE};

    #[test]
    fn the_oracle_agrees_with_what_each_frame_was_built_to_be() {
        for (c, status) in declared() {
            assert_eq!(c.expect.status, status, "{}", c.name);
        }
    }

    #[test]
    fn the_corpus_covers_every_status_family_and_protocol() {
        let b = base();
        for s in Status::ALL {
            assert!(b.iter().any(|c| c.expect.status == s), "{s:?}");
        }
        let ok: Vec<&Parsed> = b
            .iter()
            .map(|c| &c.expect)
            .filter(|p| p.status == Status::Ok)
            .collect();
        for (family, proto) in [(4, 6), (4, 17), (4, 1), (6, 6), (6, 17), (6, 58), (6, 50)] {
            assert!(
                ok.iter().any(|p| p.family == family && p.l4_proto == proto),
                "IPv{family} protocol {proto}"
            );
        }
        for frag in [Frag::First, Frag::Later] {
            for family in [4, 6] {
                assert!(ok.iter().any(|p| p.frag == frag && p.family == family));
            }
        }
        let names: std::collections::BTreeSet<&str> = b.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), b.len(), "names are unique");
        // Every tunnel kind, MPLS where the shims are walked.
        let encaps: std::collections::BTreeSet<Encap> = b
            .iter()
            .map(|c| parse::expect_with(&c.frame, DDOS).encap)
            .collect();
        assert_eq!(encaps.len(), 6, "{encaps:?}");
    }

    /// The limits the ddos filter and feature stage load by default.
    const DDOS: Limits = Limits {
        max_vlans: 4,
        max_v6_ext: 8,
        shims: true,
    };

    #[test]
    fn walking_the_shims_and_more_tags_changes_only_those_frames() {
        let want = [
            ("vlan3", Status::Ok),
            ("vlan5", Status::TooDeep),
            ("mpls-ipv4", Status::Ok),
            ("mpls-ipv6-multicast", Status::Ok),
            ("mpls-eight-labels", Status::Ok),
            ("mpls-pseudowire", Status::NotIp),
            ("pppoe-ipv4", Status::Ok),
            ("pppoe-ipv6-in-vlan", Status::Ok),
            ("pppoe-lcp", Status::NotIp),
            ("pppoe-version-2", Status::BadHeader),
            ("pppoe-header-cut", Status::Truncated),
            ("mpls-nine-labels", Status::TooDeep),
            ("mpls-label-cut", Status::Truncated),
        ];
        for c in base() {
            let got = parse::expect_with(&c.frame, DDOS);
            let status = want
                .iter()
                .find(|w| w.0 == c.name)
                .map_or(c.expect.status, |w| w.1);
            assert_eq!(got.status, status, "{}", c.name);
        }
        let get = |n: &str| {
            let c = base().into_iter().find(|c| c.name == n).unwrap();
            parse::expect_with(&c.frame, DDOS)
        };
        let m = get("mpls-ipv4");
        assert_eq!(
            (m.shim, m.l3_proto, m.l3_off, m.l4_off, m.dport),
            (PARSE_SHIM_MPLS, 0x0800, 22, 42, 53)
        );
        let p = get("pppoe-ipv6-in-vlan");
        assert_eq!(
            (
                p.shim,
                p.vlan_depth,
                p.vlan_id[0],
                p.l3_proto,
                p.l3_off,
                p.family
            ),
            (PARSE_SHIM_PPPOE, 1, 3, 0x86dd, 26, 6)
        );
        let w = get("mpls-pseudowire");
        assert_eq!(
            (w.shim, w.encap, w.l3_proto, w.l3_off),
            (PARSE_SHIM_MPLS, Encap::Mpls, 0x8847, 14)
        );
        let l = get("pppoe-lcp");
        assert_eq!(
            (l.shim, l.l3_proto, l.l3_off),
            (PARSE_SHIM_PPPOE, 0x8864, 14)
        );
        let v = get("vlan5");
        assert_eq!((v.vlan_depth, v.vlan_id), (4, [200, 201]));
        // parse_packet() names the shim's EtherType and walks no further.
        let d = base()
            .into_iter()
            .find(|c| c.name == "mpls-ipv4")
            .unwrap()
            .expect;
        assert_eq!((d.shim, d.l3_proto, d.l3_off, d.family), (0, 0x8847, 14, 0));
    }

    #[test]
    fn fields_of_parsed_frames() {
        let b = base();
        let get = |n: &str| b.iter().find(|c| c.name == n).unwrap().expect.clone();
        let u = get("udp4");
        assert_eq!(
            (u.family, u.l4_proto, u.ttl, u.sport, u.dport),
            (4, 17, 61, 1234, 53)
        );
        assert_eq!((u.l3_off, u.l4_off, u.ip_len), (14, 34, 20 + 8 + 20));
        assert_eq!(u.saddr, "192.0.2.1".parse::<std::net::IpAddr>().unwrap());
        let q = get("vlan2-qinq");
        assert_eq!((q.vlan_depth, q.vlan_id, q.l3_off), (2, [100, 101], 22));
        let e = get("v6-hbh-rt-dst");
        assert_eq!((e.l4_off, e.dport), (14 + 40 + 8 + 16 + 8, 443));
        let l = get("frag4-later-3-bytes");
        assert_eq!(
            (l.frag, l.sport, l.dport, l.l4_proto),
            (Frag::Later, 0, 0, 6)
        );
        let s = get("synack6");
        assert_eq!((s.tcp_flags, s.family), (0x12, 6));
        let a = get("arp-in-vlan");
        assert_eq!((a.l3_proto, a.vlan_depth, a.family), (0x0806, 1, 0));
        let i = get("icmp6");
        assert_eq!((i.icmp_type, i.icmp_code), (128, 0));
        for (n, encap) in [
            ("gre4", Encap::Gre),
            ("gre6", Encap::Gre),
            ("ipip4", Encap::Ipip),
            ("sit", Encap::Ipip),
            ("gre4-later-fragment", Encap::Gre),
            ("vxlan4", Encap::Vxlan),
            ("geneve6", Encap::Geneve),
            ("udp4-port-4790", Encap::None),
            ("udp4", Encap::None),
        ] {
            assert_eq!(get(n).encap, encap, "{n}");
        }
        let v = get("vxlan4");
        assert_eq!((v.saddr, v.dport), ("203.0.113.9".parse().unwrap(), 4789));
        let p = get("ipv4-padded");
        assert_eq!(
            p.ip_len,
            20 + 8 + 20,
            "the packet's length, not the frame's"
        );
        assert_eq!(get("ipv6-payload-length-0").ip_len, 40);
    }

    #[test]
    fn truncations_and_mutations_are_deterministic_and_named() {
        let t = truncations();
        assert!(t.iter().all(|c| c.frame.len() >= MIN_XDP_FRAME));
        // A valid frame cut anywhere before the end of its IP packet is
        // truncated, inside a header or past the last one; a cut in the
        // Ethernet padding after it is not.
        let cut = |n: &str| t.iter().find(|c| c.name == n).unwrap().expect.status;
        assert_eq!(cut("udp4 cut at 40"), Status::Truncated);
        assert_eq!(cut("udp4 cut at 42"), Status::Truncated);
        assert_eq!(cut("ipv4-padded cut at 61"), Status::Truncated);
        assert_eq!(cut("ipv4-padded cut at 62"), Status::Ok);
        let (a, b) = (mutations(7, 200), mutations(7, 200));
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| x.frame == y.frame && x.name == y.name));
        let c = mutations(8, 200);
        assert!(
            a.iter().zip(&c).any(|(x, y)| x.frame != y.frame),
            "the seed matters"
        );
        let statuses: std::collections::BTreeSet<Status> =
            mutations(1, 3000).iter().map(|c| c.expect.status).collect();
        assert_eq!(
            statuses.len(),
            5,
            "mutations reach every status: {statuses:?}"
        );
    }
}
