//! Synthetic feature intervals for the tests: records built the way the
//! data plane's feature stage counts packets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::features::sketch_bit;

use crate::{FeatureRecord, Prefix};

/// Deterministic xorshift64* generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn f(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f()
    }
}

/// Legitimate clients: 10.1.0.0/16.
pub fn client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i))
}
/// Attackers: 172.16.0.0/12 (the lab generator's range).
pub fn attacker(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0xac10_0000 + i))
}
/// IPv6 attackers: fd66::/96.
pub fn attacker6(i: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(0xfd66_u128 << 112 | u128::from(i)))
}
/// IPv6 clients: fd77::/96.
pub fn client6(i: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(0xfd77_u128 << 112 | u128::from(i)))
}
/// The server (victim).
pub fn server() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 20, 0, 2))
}
/// The IPv6 server.
pub fn server6() -> IpAddr {
    IpAddr::V6("fd10::2".parse().unwrap())
}
pub fn host(a: IpAddr) -> Prefix {
    Prefix::host(a)
}

/// What a flow's packets are.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// TCP client doing complete exchanges: 2% SYN, the rest ACK/data.
    Tcp,
    /// UDP.
    Udp,
    /// TCP SYN only (no completion).
    Syn,
    /// ICMP echo.
    Icmp,
}

fn sketch(ports: impl IntoIterator<Item = u16>) -> [u64; 2] {
    let mut s = [0u64; 2];
    for p in ports {
        let b = sketch_bit(p);
        s[(b / 64) as usize] |= 1 << (b % 64);
    }
    s
}

/// One (src, dst) record of an interval of `secs` seconds.
pub fn rec(
    src: IpAddr,
    dst: IpAddr,
    secs: f64,
    pps: f64,
    size: u64,
    kind: Kind,
    ports: impl IntoIterator<Item = u16>,
) -> FeatureRecord {
    let packets = (pps * secs).round() as u64;
    let p32 = packets.min(u64::from(u32::MAX)) as u32;
    let mut r = FeatureRecord {
        src,
        dst,
        packets,
        bytes: packets * size,
        tcp: 0,
        udp: 0,
        icmp: 0,
        other: 0,
        syn: 0,
        synack: 0,
        rst: 0,
        frags: 0,
        dport_sketch: sketch(ports),
        ..FeatureRecord::new(src, dst)
    };
    match kind {
        Kind::Tcp => {
            r.tcp = p32;
            r.syn = (p32 / 50).max(u32::from(p32 > 0));
        }
        Kind::Udp => r.udp = p32,
        Kind::Syn => {
            r.tcp = p32;
            r.syn = p32;
        }
        Kind::Icmp => r.icmp = p32,
    }
    r
}

/// `n` legitimate web clients to the server, 50..150 pps each, TCP to
/// port 443, 600-byte mean frames.
pub fn legit(rng: &mut Rng, n: u32, secs: f64) -> Vec<FeatureRecord> {
    (0..n)
        .map(|i| {
            rec(
                client(i),
                server(),
                secs,
                rng.range(50.0, 150.0),
                600,
                Kind::Tcp,
                [443],
            )
        })
        .collect()
}
