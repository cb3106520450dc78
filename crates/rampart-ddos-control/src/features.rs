//! Feature records: what the data path counts per (source, destination)
//! pair ([`FeatureRecord`]) and per victim ([`VictimRecord`]) over one
//! interval, as detection reads them; the destination-port sketch the
//! pairs carry and the HyperLogLog estimator of the victims' distinct
//! sources.
//!
//! Both records are serde-serialisable: a recorded interval is one JSON
//! line, and counters added later default to 0 when an older recording is
//! read back.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::Prefix;

/// Bits of the destination-port sketch (the data path's `FEAT_SKETCH_BITS`;
/// rampart-ddos asserts they agree).
pub const SKETCH_BITS: u32 = 128;

/// Aggregated counters of one (source, destination) pair over one
/// interval. Per-protocol and flag counts are sums of per-CPU 32-bit
/// counters (saturating).
///
/// Serialised with the destination-port sketch both as its estimate
/// (`dports_est`, for people) and as its bits (`dport_sketch`, so that a
/// recording reads back exactly); a recording that has only `dports_est`
/// reads back with a sketch of that many bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "PairWire", from = "PairWire")]
pub struct FeatureRecord {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Packets.
    pub packets: u64,
    /// Bytes (frame lengths).
    pub bytes: u64,
    /// TCP packets.
    pub tcp: u32,
    /// UDP packets.
    pub udp: u32,
    /// ICMP/ICMPv6 packets.
    pub icmp: u32,
    /// Other L4 protocols.
    pub other: u32,
    /// TCP SYN without ACK.
    pub syn: u32,
    /// TCP SYN+ACK.
    pub synack: u32,
    /// TCP RST.
    pub rst: u32,
    /// TCP FIN (0 when the data path does not count it).
    pub fin: u32,
    /// IP fragments.
    pub frags: u32,
    /// TCP handshakes this (source, destination) completed in the interval,
    /// as the kernel saw them (SYN_RECV → ESTABLISHED, cookie ACKs
    /// included). A completion whose pair was not in the table gives a
    /// record with only this counter.
    pub completions: u32,
    /// UDP packets (first fragments) from any amplification source port
    /// ([`UDP_CLASSES`] 0..7); the per-vector split is in the victim
    /// record.
    pub udp_amp: u32,
    /// Bytes of those packets.
    pub udp_amp_bytes: u64,
    /// Destination-port sketch (OR over CPUs): [`sketch_bit`] of each
    /// destination port; [`FeatureRecord::dports_est`] estimates the
    /// distinct ports.
    pub dport_sketch: [u64; 2],
}

/// The serialised form of [`FeatureRecord`].
#[derive(Serialize, Deserialize)]
struct PairWire {
    src: IpAddr,
    dst: IpAddr,
    #[serde(default)]
    packets: u64,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    tcp: u32,
    #[serde(default)]
    udp: u32,
    #[serde(default)]
    icmp: u32,
    #[serde(default)]
    other: u32,
    #[serde(default)]
    syn: u32,
    #[serde(default)]
    synack: u32,
    #[serde(default)]
    rst: u32,
    #[serde(default)]
    fin: u32,
    #[serde(default)]
    frags: u32,
    #[serde(default)]
    completions: u32,
    #[serde(default)]
    udp_amp: u32,
    #[serde(default)]
    udp_amp_bytes: u64,
    #[serde(default)]
    dports_est: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dport_sketch: Option<[u64; 2]>,
}

impl From<FeatureRecord> for PairWire {
    fn from(r: FeatureRecord) -> Self {
        PairWire {
            src: r.src,
            dst: r.dst,
            packets: r.packets,
            bytes: r.bytes,
            tcp: r.tcp,
            udp: r.udp,
            icmp: r.icmp,
            other: r.other,
            syn: r.syn,
            synack: r.synack,
            rst: r.rst,
            fin: r.fin,
            frags: r.frags,
            completions: r.completions,
            udp_amp: r.udp_amp,
            udp_amp_bytes: r.udp_amp_bytes,
            dports_est: (linear_count(&r.dport_sketch) * 10.0).round() / 10.0,
            dport_sketch: Some(r.dport_sketch),
        }
    }
}

impl From<PairWire> for FeatureRecord {
    fn from(w: PairWire) -> Self {
        FeatureRecord {
            src: w.src,
            dst: w.dst,
            packets: w.packets,
            bytes: w.bytes,
            tcp: w.tcp,
            udp: w.udp,
            icmp: w.icmp,
            other: w.other,
            syn: w.syn,
            synack: w.synack,
            rst: w.rst,
            fin: w.fin,
            frags: w.frags,
            completions: w.completions,
            udp_amp: w.udp_amp,
            udp_amp_bytes: w.udp_amp_bytes,
            dport_sketch: w
                .dport_sketch
                .unwrap_or_else(|| sketch_with_estimate(w.dports_est)),
        }
    }
}

/// A sketch whose [`linear_count`] is close to `n`: the first
/// m·(1 − e^(−n/m)) bits set (for recordings that kept only the estimate).
fn sketch_with_estimate(n: f64) -> [u64; 2] {
    let m = f64::from(SKETCH_BITS);
    let n = if n.is_finite() { n.max(0.0) } else { 0.0 };
    let ones = (m * (1.0 - (-n / m).exp())).round() as u32;
    let mut s = [0u64; 2];
    for b in 0..ones.min(SKETCH_BITS) {
        s[(b / 64) as usize] |= 1u64 << (b % 64);
    }
    s
}

impl FeatureRecord {
    /// A record of `src` → `dst` with every counter 0 (build the others
    /// with `FeatureRecord { packets: 5, ..FeatureRecord::new(src, dst) }`).
    pub fn new(src: IpAddr, dst: IpAddr) -> Self {
        FeatureRecord {
            src,
            dst,
            packets: 0,
            bytes: 0,
            tcp: 0,
            udp: 0,
            icmp: 0,
            other: 0,
            syn: 0,
            synack: 0,
            rst: 0,
            fin: 0,
            frags: 0,
            completions: 0,
            udp_amp: 0,
            udp_amp_bytes: 0,
            dport_sketch: [0; 2],
        }
    }

    /// Distinct destination ports, estimated ([`linear_count`]).
    pub fn dports_est(&self) -> f64 {
        linear_count(&self.dport_sketch)
    }
}

/// Bit of the destination-port sketch that `port` sets: the data path's
/// `sketch_hash(port) >> 25` (a multiply–xorshift mix, so that the
/// consecutive ports of a scan set bits as independently as random ones).
pub fn sketch_bit(port: u16) -> u32 {
    let mut h = u32::from(port).wrapping_mul(0x9e37_79b1);
    h ^= h >> 15;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h >> 25
}

/// Linear counting on a 128-bit bitmap: with `z` zero bits out of `m`,
/// n̂ = −m·ln(z/m). Standard error ≈ √(m(e^t − t − 1))/n with t = n/m
/// (Whang et al. 1990): about 4% at 20 ports, 6% at 100, 11% at 300. With
/// no zero bit left (≳ 600 ports) it returns the estimate for half a
/// zero bit, a lower bound (≈ 709).
pub fn linear_count(sketch: &[u64; 2]) -> f64 {
    let m = f64::from(SKETCH_BITS);
    let ones: u32 = sketch.iter().map(|w| w.count_ones()).sum();
    let zeros = f64::from(SKETCH_BITS - ones);
    -m * (zeros.max(0.5) / m).ln()
}

/// The UDP source-port classes of [`VictimRecord::udp_vec_pkts`], by slot:
/// slots 0..7 are the amplification vectors (the reflector's service
/// port, [`UDP_AMP_PORTS`]), slot 7 is every other source port. A UDP
/// amplification attack is named `udp_amplification/<class>`.
pub const UDP_CLASSES: [&str; 8] = [
    "dns",
    "ntp",
    "memcached",
    "ssdp",
    "cldap",
    "chargen",
    "snmp",
    "other",
];

/// The source port of each amplification class (slots 0..7 of
/// [`UDP_CLASSES`]): the data plane's default port table.
pub const UDP_AMP_PORTS: [u16; 7] = [53, 123, 11211, 1900, 389, 19, 161];

/// Slot of the "any other source port" class in [`UDP_CLASSES`].
pub const UDP_OTHER: usize = 7;

/// Registers of the per-victim HyperLogLog sketches
/// ([`hll_estimate`]).
pub const HLL_REGISTERS: usize = 64;

/// Aggregated counters of one victim over one interval: a destination
/// IPv4 address (/32) or an IPv6 destination's /64 (carpet bombing over a
/// /64 stays one victim). Sums over CPUs (the distinct-source estimates
/// come from HyperLogLog registers merged by max, decoded by the data
/// plane crate with [`hll_estimate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VictimRecord {
    /// The victim: an IPv4 /32 or an IPv6 /64.
    pub victim: Prefix,
    /// Packets.
    #[serde(default)]
    pub packets: u64,
    /// Bytes (frame lengths).
    #[serde(default)]
    pub bytes: u64,
    /// TCP packets.
    #[serde(default)]
    pub tcp: u64,
    /// UDP packets.
    #[serde(default)]
    pub udp: u64,
    /// ICMP/ICMPv6 packets.
    #[serde(default)]
    pub icmp: u64,
    /// Other L4 protocols.
    #[serde(default)]
    pub other: u64,
    /// IP fragments (first and later).
    #[serde(default)]
    pub frags: u64,
    /// TCP SYN without ACK.
    #[serde(default)]
    pub syn: u64,
    /// TCP SYN+ACK.
    #[serde(default)]
    pub synack: u64,
    /// TCP RST.
    #[serde(default)]
    pub rst: u64,
    /// TCP FIN.
    #[serde(default)]
    pub fin: u64,
    /// TCP packets without SYN that were looked up (1 in `sock_sample`).
    #[serde(default)]
    pub tcp_sampled: u64,
    /// Of those, the ones that matched no connection (out of state).
    #[serde(default)]
    pub tcp_nosock: u64,
    /// UDP packets (first fragments) by source-port class ([`UDP_CLASSES`]).
    #[serde(default)]
    pub udp_vec_pkts: [u64; 8],
    /// UDP bytes by source-port class.
    #[serde(default)]
    pub udp_vec_bytes: [u64; 8],
    /// Distinct source addresses of all packets (HyperLogLog estimate).
    #[serde(default)]
    pub src_distinct: f64,
    /// Distinct source addresses of the SYNs (HyperLogLog estimate).
    #[serde(default)]
    pub syn_src_distinct: f64,
    /// SYN-ACKs answered by XDP SYN cookies.
    #[serde(default)]
    pub synack_sent: u64,
    /// ACKs that carried a valid cookie.
    #[serde(default)]
    pub cookie_ack_valid: u64,
    /// ACKs that carried an invalid cookie (dropped).
    #[serde(default)]
    pub cookie_ack_invalid: u64,
    /// Out-of-state TCP dropped by the ACK guard.
    #[serde(default)]
    pub guard_dropped: u64,
    /// SYNs to a port with no listener, dropped while cookies are on.
    #[serde(default)]
    pub no_listener: u64,
}

impl VictimRecord {
    /// A record of `victim` with every counter 0.
    pub fn new(victim: Prefix) -> Self {
        VictimRecord {
            victim,
            packets: 0,
            bytes: 0,
            tcp: 0,
            udp: 0,
            icmp: 0,
            other: 0,
            frags: 0,
            syn: 0,
            synack: 0,
            rst: 0,
            fin: 0,
            tcp_sampled: 0,
            tcp_nosock: 0,
            udp_vec_pkts: [0; 8],
            udp_vec_bytes: [0; 8],
            src_distinct: 0.0,
            syn_src_distinct: 0.0,
            synack_sent: 0,
            cookie_ack_valid: 0,
            cookie_ack_invalid: 0,
            guard_dropped: 0,
            no_listener: 0,
        }
    }

    /// The victim key of a destination address: the address itself for
    /// IPv4, its /64 for IPv6.
    pub fn key_of(dst: IpAddr) -> Prefix {
        match dst {
            IpAddr::V4(_) => Prefix::host(dst),
            IpAddr::V6(_) => Prefix::truncate(dst, 64),
        }
    }
}

/// Record one hashed item in HyperLogLog registers, the layout the data
/// plane uses: with `hash` a 32-bit hash of the item, the register is the
/// top 6 bits and its value the rank of the first set bit of the 26 others
/// (1 + their leading zeros; 27 when they are all zero), kept by max.
pub fn hll_add(regs: &mut [u8; HLL_REGISTERS], hash: u32) {
    let idx = (hash >> 26) as usize;
    let rest = hash << 6;
    let rank = if rest == 0 {
        27
    } else {
        (rest.leading_zeros() + 1).min(27) as u8
    };
    if regs[idx] < rank {
        regs[idx] = rank;
    }
}

/// Distinct items estimated from 64 HyperLogLog registers (Flajolet et
/// al. 2007): E = α·m²/Σ2^(−M_j) with α₆₄ = 0.709; at E ≤ 2.5·m with empty
/// registers, linear counting m·ln(m/V) instead (exact for small sets);
/// above 2³²/30 the 32-bit hash collision correction. Standard error
/// ≈ 1.04/√64 = 13%.
pub fn hll_estimate(regs: &[u8; HLL_REGISTERS]) -> f64 {
    let m = HLL_REGISTERS as f64;
    let mut sum = 0.0;
    let mut zeros = 0u32;
    for &r in regs {
        sum += (-f64::from(r)).exp2();
        zeros += u32::from(r == 0);
    }
    let raw = 0.709 * m * m / sum;
    let two32 = 4_294_967_296.0_f64;
    if raw <= 2.5 * m && zeros > 0 {
        m * (m / f64::from(zeros)).ln()
    } else if raw > two32 / 30.0 {
        -two32 * (1.0 - raw / two32).max(f64::MIN_POSITIVE).ln()
    } else {
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_counting_is_close() {
        // The bits the data path sets for n distinct ports: consecutive
        // (a scan) and scattered, within about 3 standard errors.
        for step in [1u32, 7919] {
            for (n, tol) in [(1u32, 0.01), (20, 0.15), (100, 0.2), (300, 0.35)] {
                let mut s = [0u64; 2];
                for i in 0..n {
                    let bit = sketch_bit((1000 + i * step) as u16);
                    s[(bit >> 6) as usize] |= 1u64 << (bit & 63);
                }
                let est = linear_count(&s);
                assert!(
                    (est - f64::from(n)).abs() <= tol * f64::from(n) + 1.0,
                    "step {step} n={n} est={est}"
                );
            }
        }
        assert_eq!(linear_count(&[0, 0]), 0.0);
        assert!(linear_count(&[u64::MAX, u64::MAX]) > 700.0);
    }

    /// A 32-bit mix of `i` (splitmix64's finaliser), standing in for the
    /// data plane's address hash.
    fn mix(i: u64) -> u32 {
        let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u32
    }

    #[test]
    fn hll_estimates_distinct_items_within_its_error() {
        assert_eq!(hll_estimate(&[0; HLL_REGISTERS]), 0.0);
        // Small sets: linear counting, nearly exact.
        for (n, tol) in [(1u64, 0.05), (10, 0.2), (50, 0.2)] {
            let mut r = [0u8; HLL_REGISTERS];
            for i in 0..n {
                hll_add(&mut r, mix(i));
            }
            let e = hll_estimate(&r);
            assert!((e - n as f64).abs() <= tol * n as f64 + 0.5, "n={n} e={e}");
        }
        // Large sets: within 3 standard errors (39%), for several seeds;
        // repeats of an item change nothing.
        for seed in 0..4u64 {
            for n in [1_000u64, 30_000, 1_000_000] {
                let mut r = [0u8; HLL_REGISTERS];
                for i in 0..n {
                    hll_add(&mut r, mix(seed << 40 | i));
                    if i % 3 == 0 {
                        hll_add(&mut r, mix(seed << 40 | i));
                    }
                }
                let e = hll_estimate(&r);
                assert!(
                    (e - n as f64).abs() <= 0.39 * n as f64,
                    "seed {seed} n={n} e={e}"
                );
            }
        }
        // Saturated registers stay finite.
        assert!(hll_estimate(&[27; HLL_REGISTERS]).is_finite());
    }

    #[test]
    fn hll_register_layout() {
        let mut r = [0u8; HLL_REGISTERS];
        hll_add(&mut r, 0xfc00_0000); // register 63, rest all zero
        assert_eq!(r[63], 27);
        hll_add(&mut r, 0x0200_0000); // register 0, first bit of the rest set
        assert_eq!(r[0], 1);
        hll_add(&mut r, 0x0000_0001); // register 0, rank 26
        assert_eq!(r[0], 26);
        hll_add(&mut r, 0x0200_0000); // lower rank: kept by max
        assert_eq!(r[0], 26);
    }

    #[test]
    fn records_round_trip_and_old_recordings_read_with_zero_defaults() {
        let a: IpAddr = "192.0.2.7".parse().unwrap();
        let b: IpAddr = "10.20.0.2".parse().unwrap();
        let mut r = FeatureRecord {
            packets: 10,
            bytes: 6000,
            tcp: 10,
            syn: 2,
            completions: 1,
            udp_amp: 0,
            fin: 1,
            ..FeatureRecord::new(a, b)
        };
        for p in [80u16, 443, 8080] {
            let bit = sketch_bit(p);
            r.dport_sketch[(bit >> 6) as usize] |= 1u64 << (bit & 63);
        }
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"dports_est\":3.0"), "{text}");
        let back: FeatureRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        // A recording from before completions/udp_amp/fin, with only the
        // port estimate.
        let old = r#"{"src":"192.0.2.7","dst":"10.20.0.2","packets":4,"bytes":240,
            "tcp":4,"udp":0,"icmp":0,"other":0,"syn":4,"synack":0,"rst":0,"frags":0,
            "dports_est":20.0}"#;
        let o: FeatureRecord = serde_json::from_str(old).unwrap();
        assert_eq!(
            (o.completions, o.udp_amp, o.udp_amp_bytes, o.fin),
            (0, 0, 0, 0)
        );
        assert_eq!(o.syn, 4);
        assert!((o.dports_est() - 20.0).abs() < 1.5, "{}", o.dports_est());

        let mut v = VictimRecord::new(VictimRecord::key_of("fd10::2".parse().unwrap()));
        assert_eq!(v.victim.to_string(), "fd10::/64");
        v.udp_vec_pkts[1] = 300;
        v.syn_src_distinct = 1234.5;
        let text = serde_json::to_string(&v).unwrap();
        let back: VictimRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
        let old: VictimRecord =
            serde_json::from_str(r#"{"victim":"10.20.0.2","packets":7}"#).unwrap();
        assert_eq!(old.packets, 7);
        assert_eq!(old.udp_vec_pkts, [0; 8]);
        assert_eq!(UDP_CLASSES[UDP_OTHER], "other");
    }
}
