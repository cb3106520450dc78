//! Feature records: what the data path counts per (source, destination)
//! pair over one interval, as the detectors read it, and the
//! destination-port sketch it carries.

use std::net::IpAddr;

use serde::Serialize;

/// Bits of the destination-port sketch (the data path's `FEAT_SKETCH_BITS`;
/// rampart-ddos asserts they agree).
pub const SKETCH_BITS: u32 = 128;

/// Aggregated counters of one (source, destination) pair over one
/// interval. Per-protocol and flag counts are sums of per-CPU 32-bit
/// counters (saturating).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
    /// IP fragments.
    pub frags: u32,
    /// Destination-port sketch (OR over CPUs); serialised as the estimate
    /// of distinct destination ports, `dports_est` ([`linear_count`]).
    #[serde(rename = "dports_est", serialize_with = "ser_est")]
    pub dport_sketch: [u64; 2],
}

fn ser_est<S: serde::Serializer>(sk: &[u64; 2], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64((linear_count(sk) * 10.0).round() / 10.0)
}

impl FeatureRecord {
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
}
