//! Filter predicates that can run in XDP: the userspace Filter operators of
//! the apps are built from these, and the offload writes the same predicate
//! into `xdp_stream`'s maps — one definition, evaluated by the same rules
//! on both sides (checked by `tests/prog_stream_offload.rs`).
//!
//! A predicate is a conjunction: protocol ∈ set, TCP flags match any
//! clause, source port in any range, destination port in any range, source
//! in any prefix, destination in any prefix. An empty list accepts
//! everything. Non-TCP tuples have TCP flags 0; ICMP tuples carry
//! `type << 8 | code` in `dport` (the tuple's convention), so port ranges
//! apply to it as to the tuple's field.

use std::fmt;

use ipnet::IpNet;
use serde::Serialize;

use crate::tuple::{ip_to_words, StreamTuple, TupleExt};

/// `(tcp_flags & mask) == value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlagClause {
    /// Bits looked at.
    pub mask: u8,
    /// Their required values.
    pub value: u8,
}

impl FlagClause {
    /// All of `flags` set (whatever the others).
    pub const fn all(flags: u8) -> Self {
        Self {
            mask: flags,
            value: flags,
        }
    }
    /// Evaluate on a flags byte.
    #[inline]
    pub fn matches(&self, flags: u8) -> bool {
        flags & self.mask == self.value
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port.
    pub hi: u16,
}

/// The Filter predicates an offload target can evaluate (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Predicate {
    /// Accepted IP protocols (empty: any).
    pub protos: Vec<u8>,
    /// TCP flag clauses, any of which must hold (empty: any flags).
    pub tcp_flags: Vec<FlagClause>,
    /// Source port ranges (empty: any).
    pub sport: Vec<PortRange>,
    /// Destination port ranges (empty: any).
    pub dport: Vec<PortRange>,
    /// Source prefixes (empty: any).
    pub src: Vec<IpNet>,
    /// Destination prefixes (empty: any).
    pub dst: Vec<IpNet>,
}

/// A prefix as the tuple's words: `addr & mask == net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixWords {
    /// Network address words (network byte order in memory).
    pub net: [u32; 4],
    /// Mask words.
    pub mask: [u32; 4],
    /// IPv6 prefix.
    pub v6: bool,
}

impl PrefixWords {
    /// Words of `p` (host bits of the address are masked off).
    pub fn of(p: &IpNet) -> Self {
        let mask = ip_to_words(p.netmask());
        let a = ip_to_words(p.addr());
        Self {
            net: [
                a[0] & mask[0],
                a[1] & mask[1],
                a[2] & mask[2],
                a[3] & mask[3],
            ],
            mask,
            v6: matches!(p, IpNet::V6(_)),
        }
    }
    /// Does an address of the tuple fall inside?
    #[inline]
    pub fn contains(&self, w: &[u32; 4], v6: bool) -> bool {
        self.v6 == v6 && (0..4).all(|i| w[i] & self.mask[i] == self.net[i])
    }
}

impl Predicate {
    /// Accept everything?
    pub fn is_empty(&self) -> bool {
        self.protos.is_empty()
            && self.tcp_flags.is_empty()
            && self.sport.is_empty()
            && self.dport.is_empty()
            && self.src.is_empty()
            && self.dst.is_empty()
    }

    /// A fast evaluator (what the userspace Filter operators call per tuple).
    pub fn compile(&self) -> Compiled {
        let mut protos = [0u64; 4];
        for p in &self.protos {
            protos[usize::from(*p >> 6)] |= 1 << (p & 63);
        }
        Compiled {
            any_proto: self.protos.is_empty(),
            protos,
            clauses: self.tcp_flags.clone(),
            sport: self.sport.clone(),
            dport: self.dport.clone(),
            src: self.src.iter().map(PrefixWords::of).collect(),
            dst: self.dst.iter().map(PrefixWords::of).collect(),
        }
    }

    /// Evaluate (slow path; tests and one-off checks).
    pub fn matches(&self, t: &StreamTuple) -> bool {
        self.compile().matches(t)
    }

    /// Does it fit in `xdp_stream`'s maps (at most `clauses` flag clauses
    /// and `ranges` port ranges / prefixes per direction)? The error says
    /// what is over.
    ///
    /// # Errors
    /// The first list that is too long.
    pub fn fits(&self, clauses: usize, ranges: usize) -> Result<(), String> {
        let over = |what: &str, n: usize, max: usize| {
            Err(format!("{n} {what}, the offload program holds {max}"))
        };
        if self.tcp_flags.len() > clauses {
            return over("TCP flag clauses", self.tcp_flags.len(), clauses);
        }
        for (what, n) in [
            ("source port ranges", self.sport.len()),
            ("destination port ranges", self.dport.len()),
            ("source prefixes", self.src.len()),
            ("destination prefixes", self.dst.len()),
        ] {
            if n > ranges {
                return over(what, n, ranges);
            }
        }
        Ok(())
    }
}

fn flags_name(f: u8) -> String {
    const N: [(u8, &str); 8] = [
        (0x01, "FIN"),
        (0x02, "SYN"),
        (0x04, "RST"),
        (0x08, "PSH"),
        (0x10, "ACK"),
        (0x20, "URG"),
        (0x40, "ECE"),
        (0x80, "CWR"),
    ];
    let v: Vec<&str> = N
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "0".into()
    } else {
        v.join("|")
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.protos.is_empty() {
            let p: Vec<String> = self
                .protos
                .iter()
                .map(|p| crate::export::json::proto_name(*p).to_lowercase())
                .collect();
            parts.push(format!("proto in {{{}}}", p.join(",")));
        }
        if !self.tcp_flags.is_empty() {
            let c: Vec<String> = self
                .tcp_flags
                .iter()
                .map(|c| {
                    if c.mask == c.value {
                        format!("{} set", flags_name(c.mask))
                    } else {
                        format!(
                            "{} set and {} clear",
                            flags_name(c.value),
                            flags_name(c.mask & !c.value)
                        )
                    }
                })
                .collect();
            parts.push(format!("tcp flags ({})", c.join(" or ")));
        }
        for (name, r) in [("sport", &self.sport), ("dport", &self.dport)] {
            if !r.is_empty() {
                let v: Vec<String> = r.iter().map(|r| format!("{}-{}", r.lo, r.hi)).collect();
                parts.push(format!("{name} in {{{}}}", v.join(",")));
            }
        }
        for (name, r) in [("src", &self.src), ("dst", &self.dst)] {
            if !r.is_empty() {
                let v: Vec<String> = r.iter().map(ToString::to_string).collect();
                parts.push(format!("{name} in {{{}}}", v.join(",")));
            }
        }
        if parts.is_empty() {
            f.write_str("true")
        } else {
            f.write_str(&parts.join(" and "))
        }
    }
}

/// A [`Predicate`] ready for per-tuple evaluation.
#[derive(Debug, Clone)]
pub struct Compiled {
    any_proto: bool,
    protos: [u64; 4],
    clauses: Vec<FlagClause>,
    sport: Vec<PortRange>,
    dport: Vec<PortRange>,
    src: Vec<PrefixWords>,
    dst: Vec<PrefixWords>,
}

impl Compiled {
    /// Does `t` pass?
    #[inline]
    pub fn matches(&self, t: &StreamTuple) -> bool {
        let v6 = t.is_ipv6();
        (self.any_proto || self.protos[usize::from(t.proto >> 6)] & (1 << (t.proto & 63)) != 0)
            && (self.clauses.is_empty() || self.clauses.iter().any(|c| c.matches(t.tcp_flags)))
            && (self.sport.is_empty()
                || self.sport.iter().any(|r| (r.lo..=r.hi).contains(&t.sport)))
            && (self.dport.is_empty()
                || self.dport.iter().any(|r| (r.lo..=r.hi).contains(&t.dport)))
            && (self.src.is_empty() || self.src.iter().any(|p| p.contains(&t.saddr, v6)))
            && (self.dst.is_empty() || self.dst.iter().any(|p| p.contains(&t.daddr, v6)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuple::{proto, tcp};

    fn t(src: &str, dst: &str, p: u8, sport: u16, dport: u16, flags: u8) -> StreamTuple {
        StreamTuple::new_l4(
            0,
            src.parse().unwrap(),
            dst.parse().unwrap(),
            p,
            sport,
            dport,
            flags,
            60,
        )
    }

    #[test]
    fn empty_accepts_all() {
        let p = Predicate::default();
        assert!(p.is_empty());
        assert!(p.matches(&t("10.0.0.1", "10.0.0.2", proto::UDP, 1, 2, 0)));
        assert_eq!(p.to_string(), "true");
    }

    #[test]
    fn conjunction_of_disjunctions() {
        let p = Predicate {
            protos: vec![proto::TCP],
            tcp_flags: vec![
                FlagClause::all(tcp::SYN),
                FlagClause {
                    mask: tcp::ACK | tcp::RST | tcp::SYN,
                    value: tcp::ACK,
                },
            ],
            dport: vec![PortRange { lo: 80, hi: 90 }],
            src: vec!["10.0.0.0/8".parse().unwrap(), "fd66::/16".parse().unwrap()],
            ..Predicate::default()
        };
        let ok = |x: &StreamTuple| p.matches(x);
        assert!(ok(&t("10.1.2.3", "1.1.1.1", proto::TCP, 5, 80, tcp::SYN)));
        assert!(ok(&t(
            "10.1.2.3",
            "1.1.1.1",
            proto::TCP,
            5,
            90,
            tcp::ACK | tcp::PSH
        )));
        assert!(
            !ok(&t("10.1.2.3", "1.1.1.1", proto::TCP, 5, 91, tcp::SYN)),
            "port"
        );
        assert!(
            !ok(&t(
                "10.1.2.3",
                "1.1.1.1",
                proto::TCP,
                5,
                80,
                tcp::ACK | tcp::RST
            )),
            "flags"
        );
        assert!(
            !ok(&t("11.1.2.3", "1.1.1.1", proto::TCP, 5, 80, tcp::SYN)),
            "prefix"
        );
        assert!(
            !ok(&t("10.1.2.3", "1.1.1.1", proto::UDP, 5, 80, 0)),
            "proto"
        );
        assert!(
            ok(&t("fd66::1", "fd10::2", proto::TCP, 5, 85, tcp::SYN)),
            "v6 prefix"
        );
        assert!(
            !ok(&t("fd67::1", "fd10::2", proto::TCP, 5, 85, tcp::SYN)),
            "outside the v6 prefix"
        );
        // An IPv4 prefix never matches an IPv6 address with the same first word.
        let v4 = Predicate {
            src: vec!["0.0.0.0/0".parse().unwrap()],
            ..Predicate::default()
        };
        assert!(!v4.matches(&t("fd66::1", "fd10::2", proto::UDP, 1, 2, 0)));
        assert!(v4.matches(&t("1.2.3.4", "5.6.7.8", proto::UDP, 1, 2, 0)));
        assert_eq!(
            p.to_string(),
            "proto in {tcp} and tcp flags (SYN set or ACK set and SYN|RST clear) and dport in {80-90} and src in {10.0.0.0/8,fd66::/16}"
        );
    }

    #[test]
    fn fits_reports_what_is_over() {
        let mut p = Predicate::default();
        assert!(p.fits(4, 4).is_ok());
        p.dst = (0..5)
            .map(|i| format!("10.{i}.0.0/16").parse().unwrap())
            .collect();
        assert_eq!(
            p.fits(4, 4).unwrap_err(),
            "5 destination prefixes, the offload program holds 4"
        );
    }

    #[test]
    fn prefix_host_bits_are_masked() {
        let w = PrefixWords::of(&"10.1.2.3/8".parse().unwrap());
        assert_eq!(w.net, PrefixWords::of(&"10.0.0.0/8".parse().unwrap()).net);
    }
}
