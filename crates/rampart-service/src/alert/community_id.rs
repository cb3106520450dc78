//! Community ID v1 (corelight/community-id-spec): the flow hash Suricata,
//! Zeek and most SIEMs put in `community_id`, so one flow's records from
//! different monitors can be joined.
//!
//! `1:` + base64(SHA-1(seed ‖ lower endpoint address ‖ higher address ‖
//! protocol ‖ 0 ‖ lower port ‖ higher port)), every number big-endian; ICMP
//! and ICMPv6 use type and the counterpart type (or code) as ports, as
//! Zeek does.

use std::net::IpAddr;

use base64::Engine as _;
use sha1::{Digest, Sha1};

const ICMP: u8 = 1;
const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMPV6: u8 = 58;
const SCTP: u8 = 132;

/// The ICMP request/response types that form a two-way "flow": type → counterpart.
fn icmp_counterpart(proto: u8, t: u16) -> Option<u16> {
    let pairs: &[(u16, u16)] = if proto == ICMP {
        // echo, router solicitation/advertisement, timestamp, info, mask
        &[(8, 0), (10, 9), (13, 14), (15, 16), (17, 18)]
    } else {
        // echo, MLD query/report, ND router, ND neighbour, WRU, HAAD
        &[
            (128, 129),
            (130, 131),
            (133, 134),
            (135, 136),
            (139, 140),
            (144, 145),
        ]
    };
    pairs.iter().find_map(|&(a, b)| {
        if a == t {
            Some(b)
        } else if b == t {
            Some(a)
        } else {
            None
        }
    })
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

/// The Community ID (seed 0) of a flow. `sport`/`dport` are ICMP type and
/// code for ICMP and ICMPv6; they are ignored for protocols without ports.
/// `None` when the two addresses are of different families.
pub fn community_id(src: IpAddr, dst: IpAddr, proto: u8, sport: u16, dport: u16) -> Option<String> {
    community_id_seeded(0, src, dst, proto, sport, dport)
}

/// [`community_id`] with a seed (every monitor of a site must use the same one).
pub fn community_id_seeded(
    seed: u16,
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    sport: u16,
    dport: u16,
) -> Option<String> {
    if src.is_ipv4() != dst.is_ipv4() {
        return None;
    }
    let has_ports = matches!(proto, ICMP | TCP | UDP | ICMPV6 | SCTP);
    let (mut sp, mut dp, mut one_way) = (sport, dport, false);
    if proto == ICMP || proto == ICMPV6 {
        match icmp_counterpart(proto, sport) {
            Some(c) => dp = c,
            None => one_way = true,
        }
    }
    let (mut s, mut d) = (octets(src), octets(dst));
    let ordered = one_way || s < d || (s == d && sp < dp);
    if !ordered {
        std::mem::swap(&mut s, &mut d);
        std::mem::swap(&mut sp, &mut dp);
    }
    let mut h = Sha1::new();
    h.update(seed.to_be_bytes());
    h.update(&s);
    h.update(&d);
    h.update([proto, 0]);
    if has_ports {
        h.update(sp.to_be_bytes());
        h.update(dp.to_be_bytes());
    }
    Some(format!(
        "1:{}",
        base64::engine::general_purpose::STANDARD.encode(h.finalize())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Values from the reference implementation (Python `communityid` 1.5.0).
    #[test]
    fn matches_the_reference_implementation() {
        for (src, dst, proto, sp, dp, want) in [
            (
                "1.2.3.4",
                "5.6.7.8",
                6,
                1122,
                3344,
                "1:wCb3OG7yAFWelaUydu0D+125CLM=",
            ),
            (
                "1.2.3.4",
                "5.6.7.8",
                17,
                1122,
                3344,
                "1:0Mu9InQx6z4ZiCZM/7HXi2WMhOg=",
            ),
            (
                "1.2.3.4",
                "5.6.7.8",
                1,
                8,
                0,
                "1:crodRHL2FEsHjbv3UkRrfbs4bZ0=",
            ),
            (
                "5.6.7.8",
                "1.2.3.4",
                1,
                0,
                0,
                "1:crodRHL2FEsHjbv3UkRrfbs4bZ0=",
            ),
            (
                "1.2.3.4",
                "5.6.7.8",
                1,
                3,
                1,
                "1:W4aFotGvd33My5d10oV5afM5O+E=",
            ),
            (
                "fe80::1",
                "fe80::2",
                6,
                1122,
                3344,
                "1:z4Cp91yf8hKQyZMv3qo7NH6sE3k=",
            ),
            (
                "fe80::1",
                "fe80::2",
                58,
                128,
                0,
                "1:3H+V/JVcqh/phPel5utt4dOKqOU=",
            ),
            (
                "10.10.0.101",
                "10.10.0.2",
                6,
                40000,
                80,
                "1:WmiZOXSDa5S70N9Xjjw854jI35U=",
            ),
            (
                "10.10.0.2",
                "10.10.0.101",
                6,
                80,
                40000,
                "1:WmiZOXSDa5S70N9Xjjw854jI35U=",
            ),
            (
                "1.2.3.4",
                "5.6.7.8",
                132,
                1,
                2,
                "1:kqw+60sDaqbvBe0i3UHX16G6LxQ=",
            ),
        ] {
            assert_eq!(
                community_id(ip(src), ip(dst), proto, sp, dp).as_deref(),
                Some(want),
                "{src}:{sp} -> {dst}:{dp} proto {proto}"
            );
        }
        assert_eq!(community_id(ip("1.2.3.4"), ip("::1"), 6, 1, 2), None);
    }

    /// The examples of the specification's own test data (seed 0): TCP,
    /// UDP and ICMP echo, each both ways.
    #[test]
    fn matches_the_specification_examples() {
        for (src, dst, proto, sp, dp, want) in [
            (
                "128.232.110.120",
                "66.35.250.204",
                6,
                34855,
                80,
                "1:LQU9qZlK+B5F3KDmev6m5PMibrg=",
            ),
            (
                "66.35.250.204",
                "128.232.110.120",
                6,
                80,
                34855,
                "1:LQU9qZlK+B5F3KDmev6m5PMibrg=",
            ),
            (
                "192.168.1.52",
                "8.8.8.8",
                17,
                54585,
                53,
                "1:d/FP5EW3wiY1vCndhwleRRKHowQ=",
            ),
            (
                "8.8.8.8",
                "192.168.1.52",
                17,
                53,
                54585,
                "1:d/FP5EW3wiY1vCndhwleRRKHowQ=",
            ),
            (
                "192.168.0.89",
                "192.168.0.1",
                1,
                8,
                0,
                "1:X0snYXpgwiv9TZtqg64sgzUn6Dk=",
            ),
            (
                "192.168.0.1",
                "192.168.0.89",
                1,
                0,
                0,
                "1:X0snYXpgwiv9TZtqg64sgzUn6Dk=",
            ),
        ] {
            assert_eq!(
                community_id(ip(src), ip(dst), proto, sp, dp).as_deref(),
                Some(want),
                "{src}:{sp} -> {dst}:{dp} proto {proto}"
            );
        }
    }
}
