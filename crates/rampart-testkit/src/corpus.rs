//! The parse corpus shared by every program that parses frames with
//! `bpf/common/parse.h` (the ddos filter and feature stage, the stream tuple
//! and offload programs, the tenant dispatcher, the parse probe).
//!
//! [`base`] holds valid frames of every kind and malformed ones covering
//! every parse status; [`truncations`] cuts each of them at every length a
//! program can receive; [`mutations`] flips header bytes (and sometimes
//! cuts) under a seed. Every [`Case`] carries its expected outcome from
//! [`crate::parse::expect`]; the base frames also state the status they
//! were built to have, and the kit's own tests hold the oracle to it.

use crate::frame::{ethertype, tcp, Ext, Frame};
use crate::parse::{self, Parsed, Status};

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
            "v6-seven-ext",
            (0..7).fold(udp6(), |f, _| f.ext(Ext::DestOpts(0))),
            TooDeep,
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
    let mut rng = Rng(seed | 1);
    (0..n)
        .map(|i| {
            let b = &base[rng.index(base.len())];
            let mut f = b.frame.clone();
            for _ in 0..1 + rng.below(4) {
                let pos = rng.index(f.len().min(96));
                f[pos] = rng.next() as u8;
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

/// xorshift64: deterministic, so a failing mutation is the same one on
/// every run.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index into something `n` long.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Frag;

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
    }

    #[test]
    fn truncations_and_mutations_are_deterministic_and_named() {
        let t = truncations();
        assert!(t.iter().all(|c| c.frame.len() >= MIN_XDP_FRAME));
        // A valid frame cut anywhere before its last parsed header is truncated.
        let cut = t.iter().find(|c| c.name == "udp4 cut at 40").unwrap();
        assert_eq!(cut.expect.status, Status::Truncated);
        let payload_cut = t.iter().find(|c| c.name == "udp4 cut at 42").unwrap();
        assert_eq!(payload_cut.expect.status, Status::Ok);
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
