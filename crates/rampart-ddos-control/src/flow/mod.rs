//! Flow input: routers' exports (NetFlow v9, IPFIX, sFlow v5) turned into
//! the records detection reads.
//!
//! The decoders ([`netflow::NetflowDecoder`], [`sflow::decode`]) turn one
//! datagram into [`FlowSample`]s — one per flow record or per sampled
//! packet, its packets and bytes already scaled by the sampling rate — and
//! [`FlowAggregator`] sums the samples of one step into the same
//! [`FeatureRecord`]s (per source, destination pair) and [`VictimRecord`]s
//! (per victim) that the data path gives, for the victims inside the
//! protected prefixes; [`FlowWindow`] keeps the steps of the last export
//! interval and sums them into the window detection judges. Ports become the UDP source-port
//! classes (so a reflection vector is named), TCP flags the SYN/RST/FIN
//! counts.
//!
//! Malformed input is a [`FlowError`] (its [`FlowError::reason`] is the
//! metric label), never a panic, and a record the decoder cannot read
//! completely is dropped rather than counted as something it is not.
//!
//! No I/O here; the one clock read is inside netflow_parser's template
//! cache, which expires templates an exporter stopped refreshing.

pub mod netflow;
pub mod sflow;
mod window;

pub use window::{FlowBucket, FlowWindow, MIN_STEP_S, STEPS_PER_WINDOW};

use std::collections::HashMap;
use std::net::IpAddr;

use crate::features::{
    hll_add, hll_estimate, sketch_bit, FeatureRecord, VictimRecord, HLL_REGISTERS, UDP_AMP_PORTS,
    UDP_OTHER,
};
use crate::Prefix;

/// IP protocol numbers the records distinguish.
const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const ICMPV6: u8 = 58;

/// TCP flag bits (the header's flags byte).
pub const TCP_FIN: u8 = 0x01;
/// SYN.
pub const TCP_SYN: u8 = 0x02;
/// RST.
pub const TCP_RST: u8 = 0x04;
/// ACK.
pub const TCP_ACK: u8 = 0x10;

/// Traffic of one flow record or one sampled packet, scaled by the
/// sampling rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSample {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number.
    pub proto: u8,
    /// Source port (0 when the protocol has none or it was not exported).
    pub src_port: u16,
    /// Destination port (0 likewise).
    pub dst_port: u16,
    /// TCP flags: of the packet (sFlow), or OR-ed over the flow's packets
    /// (NetFlow/IPFIX).
    pub tcp_flags: u8,
    /// Packets, times the sampling rate.
    pub packets: u64,
    /// Bytes (IP lengths for NetFlow/IPFIX, frame lengths for sFlow),
    /// times the sampling rate.
    pub bytes: u64,
    /// The sampling rate the counts were multiplied by (1 = unsampled).
    pub rate: u64,
    /// An IP fragment (sFlow headers show it; NetFlow records do not).
    pub fragment: bool,
}

/// Why a datagram was refused; [`FlowError::reason`] is the metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// Shorter than its header, or a length field points past its end.
    #[error("truncated: {0}")]
    Truncated(&'static str),
    /// A version this receiver does not take (sFlow other than 5 on the
    /// sFlow port, NetFlow other than 9/10 on the NetFlow port).
    #[error("unsupported version {0}")]
    Version(u32),
    /// A field with a value the format does not allow.
    #[error("malformed: {0}")]
    Malformed(String),
}

impl FlowError {
    /// The metric label: `truncated`, `version` or `malformed`.
    pub fn reason(&self) -> &'static str {
        match self {
            FlowError::Truncated(_) => "truncated",
            FlowError::Version(_) => "version",
            FlowError::Malformed(_) => "malformed",
        }
    }
}

/// What one datagram held besides the samples it gave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Flow records or flow samples turned into [`FlowSample`]s.
    pub records: u64,
    /// Records skipped cleanly: templates, options, counter samples,
    /// records without an IP source and destination.
    pub skipped: u64,
    /// Data records whose template this receiver has not seen (yet): the
    /// exporter sends templates periodically, these are lost until then.
    pub no_template: u64,
}

/// Per-victim extras that the records do not carry directly.
#[derive(Clone)]
struct VictimAcc {
    rec: VictimRecord,
    srcs: [u8; HLL_REGISTERS],
    syn_srcs: [u8; HLL_REGISTERS],
}

/// Sums [`FlowSample`]s of one step into pair and victim records for the
/// victims inside the protected prefixes.
pub struct FlowAggregator {
    protected: Vec<Prefix>,
    max_pairs: usize,
    pairs: HashMap<(IpAddr, IpAddr), FeatureRecord>,
    victims: HashMap<Prefix, VictimAcc>,
    outside: u64,
    pairs_full: u64,
}

impl std::fmt::Debug for FlowAggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowAggregator")
            .field("protected", &self.protected)
            .field("pairs", &self.pairs.len())
            .field("victims", &self.victims.len())
            .finish()
    }
}

/// A 32-bit mix of an address for the distinct-source sketches.
fn addr_hash(a: IpAddr) -> u32 {
    let x: u128 = match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v) ^ (1 << 127),
    };
    let mut z = (x as u64) ^ ((x >> 64) as u64).rotate_left(29);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

fn sat32(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

impl FlowAggregator {
    /// An aggregator for the victims inside `protected`, keeping at most
    /// `max_pairs` (source, destination) pairs per interval (the victim
    /// records still count the rest).
    pub fn new(protected: Vec<Prefix>, max_pairs: usize) -> Self {
        FlowAggregator {
            protected,
            max_pairs,
            pairs: HashMap::new(),
            victims: HashMap::new(),
            outside: 0,
            pairs_full: 0,
        }
    }

    /// Whether `dst` is inside the protected prefixes.
    pub fn protects(&self, dst: &IpAddr) -> bool {
        self.protected.iter().any(|p| p.contains(dst))
    }

    /// Count one sample; false when its destination is outside the
    /// protected prefixes (ignored).
    pub fn add(&mut self, s: &FlowSample) -> bool {
        if !self.protects(&s.dst) {
            self.outside += 1;
            return false;
        }
        let rate = s.rate.max(1);
        let flags = s.tcp_flags;
        let (mut syn, mut synack, mut rst, mut fin) = (0u64, 0u64, 0u64, 0u64);
        if s.proto == TCP {
            // A flow record ORs the flags of its packets: SYN without ACK
            // is a flow of bare SYNs (a flood's, or unanswered attempts),
            // so every packet counts; otherwise a connection's one SYN (or
            // SYN-ACK), RST and FIN, each one sampled packet.
            if flags & TCP_SYN != 0 {
                if flags & TCP_ACK == 0 {
                    syn = s.packets;
                } else if s.packets <= rate {
                    // One sampled packet carrying SYN and ACK (sFlow).
                    synack = s.packets;
                } else {
                    syn = rate.min(s.packets);
                }
            }
            if flags & TCP_RST != 0 {
                rst = rate.min(s.packets);
            }
            if flags & TCP_FIN != 0 {
                fin = rate.min(s.packets);
            }
        }
        let first_udp = s.proto == UDP && !(s.fragment && s.src_port == 0);
        let class = if first_udp {
            UDP_AMP_PORTS
                .iter()
                .position(|&p| p == s.src_port && p != 0)
                .unwrap_or(UDP_OTHER)
        } else {
            UDP_OTHER
        };
        let amp = first_udp && class != UDP_OTHER;

        let key = (s.src, s.dst);
        let have = self.pairs.contains_key(&key);
        if have || self.pairs.len() < self.max_pairs {
            let r = self
                .pairs
                .entry(key)
                .or_insert_with(|| FeatureRecord::new(s.src, s.dst));
            r.packets = r.packets.saturating_add(s.packets);
            r.bytes = r.bytes.saturating_add(s.bytes);
            let p = sat32(s.packets);
            match s.proto {
                TCP => r.tcp = r.tcp.saturating_add(p),
                UDP => r.udp = r.udp.saturating_add(p),
                ICMP | ICMPV6 => r.icmp = r.icmp.saturating_add(p),
                _ => r.other = r.other.saturating_add(p),
            }
            r.syn = r.syn.saturating_add(sat32(syn));
            r.synack = r.synack.saturating_add(sat32(synack));
            r.rst = r.rst.saturating_add(sat32(rst));
            r.fin = r.fin.saturating_add(sat32(fin));
            if s.fragment {
                r.frags = r.frags.saturating_add(p);
            }
            if amp {
                r.udp_amp = r.udp_amp.saturating_add(p);
                r.udp_amp_bytes = r.udp_amp_bytes.saturating_add(s.bytes);
            }
            if matches!(s.proto, TCP | UDP) && !(s.fragment && s.dst_port == 0) {
                let bit = sketch_bit(s.dst_port);
                r.dport_sketch[(bit >> 6) as usize] |= 1u64 << (bit & 63);
            }
        } else {
            self.pairs_full += 1;
        }

        let vkey = VictimRecord::key_of(s.dst);
        let v = self.victims.entry(vkey).or_insert_with(|| VictimAcc {
            rec: VictimRecord::new(vkey),
            srcs: [0; HLL_REGISTERS],
            syn_srcs: [0; HLL_REGISTERS],
        });
        let r = &mut v.rec;
        r.packets = r.packets.saturating_add(s.packets);
        r.bytes = r.bytes.saturating_add(s.bytes);
        match s.proto {
            TCP => r.tcp = r.tcp.saturating_add(s.packets),
            UDP => r.udp = r.udp.saturating_add(s.packets),
            ICMP | ICMPV6 => r.icmp = r.icmp.saturating_add(s.packets),
            _ => r.other = r.other.saturating_add(s.packets),
        }
        if s.fragment {
            r.frags = r.frags.saturating_add(s.packets);
        }
        r.syn = r.syn.saturating_add(syn);
        r.synack = r.synack.saturating_add(synack);
        r.rst = r.rst.saturating_add(rst);
        r.fin = r.fin.saturating_add(fin);
        if first_udp {
            r.udp_vec_pkts[class] = r.udp_vec_pkts[class].saturating_add(s.packets);
            r.udp_vec_bytes[class] = r.udp_vec_bytes[class].saturating_add(s.bytes);
        }
        let h = addr_hash(s.src);
        hll_add(&mut v.srcs, h);
        if syn > 0 {
            hll_add(&mut v.syn_srcs, h);
        }
        true
    }

    /// Samples ignored since the last [`FlowAggregator::take`] because
    /// their destination was outside the protected prefixes, and samples
    /// whose pair did not fit (counted in the victim record only).
    pub fn dropped(&self) -> (u64, u64) {
        (self.outside, self.pairs_full)
    }

    /// The records so far (pairs sorted by destination then source,
    /// victims by prefix), and a fresh start.
    pub fn take(&mut self) -> (Vec<FeatureRecord>, Vec<VictimRecord>) {
        self.take_bucket().into_records()
    }

    /// What was summed so far, with the victims' distinct-source
    /// registers (for a [`FlowWindow`] to merge), and a fresh start.
    pub fn take_bucket(&mut self) -> FlowBucket {
        let b = FlowBucket {
            pairs: self.pairs.drain().map(|(_, r)| r).collect(),
            victims: self.victims.drain().map(|(_, v)| v).collect(),
            outside: self.outside,
        };
        self.outside = 0;
        self.pairs_full = 0;
        b
    }
}

/// A victim's record with its distinct-source estimates filled in.
fn estimated(v: &VictimAcc) -> VictimRecord {
    let mut r = v.rec;
    r.src_distinct = hll_estimate(&v.srcs);
    r.syn_src_distinct = hll_estimate(&v.syn_srcs);
    r
}

/// Pairs by destination then source, victims by prefix.
fn sorted(
    mut pairs: Vec<FeatureRecord>,
    mut victims: Vec<VictimRecord>,
) -> (Vec<FeatureRecord>, Vec<VictimRecord>) {
    pairs.sort_by_key(|a| (a.dst, a.src));
    victims.sort_by_key(|v| v.victim.to_string());
    (pairs, victims)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::features::UDP_CLASSES;

    fn sample(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> FlowSample {
        sample_from(src.parse().unwrap(), dst, proto, sport, dport)
    }

    /// One packet of 100 bytes, unsampled (the window's tests use it too).
    pub(crate) fn sample_from(
        src: IpAddr,
        dst: &str,
        proto: u8,
        sport: u16,
        dport: u16,
    ) -> FlowSample {
        FlowSample {
            src,
            dst: dst.parse().unwrap(),
            proto,
            src_port: sport,
            dst_port: dport,
            tcp_flags: 0,
            packets: 1,
            bytes: 100,
            rate: 1,
            fragment: false,
        }
    }

    #[test]
    fn samples_become_pair_and_victim_records_inside_the_protected_prefixes() {
        let mut a = FlowAggregator::new(vec![Prefix::parse("10.20.0.0/16").unwrap()], 1000);
        // A DNS reflection: UDP from source port 53, 1-in-100 sampled.
        for i in 0..10u8 {
            let mut s = sample(&format!("192.0.2.{i}"), "10.20.0.2", UDP, 53, 40000);
            s.packets = 100;
            s.bytes = 140_000;
            s.rate = 100;
            assert!(a.add(&s));
        }
        // A SYN flood flow record (flags OR-ed: SYN only) of 50 packets.
        let mut s = sample("198.51.100.7", "10.20.0.3", TCP, 1234, 80);
        s.tcp_flags = TCP_SYN;
        s.packets = 50;
        assert!(a.add(&s));
        // A normal connection: SYN, ACK, FIN in one record of 12 packets.
        let mut s = sample("198.51.100.8", "10.20.0.3", TCP, 5555, 443);
        s.tcp_flags = TCP_SYN | TCP_ACK | TCP_FIN;
        s.packets = 12;
        assert!(a.add(&s));
        // Outside the protected prefixes: ignored.
        assert!(!a.add(&sample("10.20.0.2", "203.0.113.9", UDP, 4000, 53)));
        assert_eq!(a.dropped(), (1, 0));

        let (pairs, victims) = a.take();
        assert_eq!(pairs.len(), 12);
        assert_eq!(victims.len(), 2);
        let v2 = victims
            .iter()
            .find(|v| v.victim == Prefix::parse("10.20.0.2/32").unwrap())
            .unwrap();
        assert_eq!(v2.packets, 1000);
        assert_eq!(v2.udp, 1000);
        assert_eq!(v2.udp_vec_pkts[0], 1000, "{:?}", v2.udp_vec_pkts);
        assert_eq!(UDP_CLASSES[0], "dns");
        assert!((v2.src_distinct - 10.0).abs() < 1.5, "{}", v2.src_distinct);
        let p = pairs
            .iter()
            .find(|p| p.dst.to_string() == "10.20.0.2")
            .unwrap();
        assert_eq!((p.udp, p.udp_amp, p.packets), (100, 100, 100));
        let v3 = victims
            .iter()
            .find(|v| v.victim == Prefix::parse("10.20.0.3/32").unwrap())
            .unwrap();
        assert_eq!((v3.tcp, v3.syn, v3.fin), (62, 51, 1));
        assert!((v3.syn_src_distinct - 2.0).abs() < 0.5);
        let flood = pairs
            .iter()
            .find(|p| p.src.to_string() == "198.51.100.7")
            .unwrap();
        assert_eq!((flood.tcp, flood.syn), (50, 50));
        let conn = pairs
            .iter()
            .find(|p| p.src.to_string() == "198.51.100.8")
            .unwrap();
        assert_eq!((conn.tcp, conn.syn, conn.fin), (12, 1, 1));
        assert!((conn.dports_est() - 1.0).abs() < 0.1);
        // Taken: the next interval starts empty.
        assert_eq!(a.take(), (vec![], vec![]));
        assert_eq!(a.dropped(), (0, 0));
    }

    #[test]
    fn other_source_ports_and_fragments_are_not_named_as_a_reflection() {
        let mut a = FlowAggregator::new(vec![Prefix::parse("10.20.0.2/32").unwrap()], 1);
        assert!(a.add(&sample("192.0.2.1", "10.20.0.2", UDP, 5353, 53)));
        let mut frag = sample("192.0.2.2", "10.20.0.2", UDP, 0, 0);
        frag.fragment = true;
        assert!(a.add(&frag));
        let icmp = sample("192.0.2.3", "10.20.0.2", ICMP, 0, 0);
        assert!(a.add(&icmp));
        // One pair kept (max_pairs 1), the others counted in the victim.
        assert_eq!(a.dropped(), (0, 2));
        let (pairs, victims) = a.take();
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].udp_amp, 0);
        let v = &victims[0];
        assert_eq!(v.udp_vec_pkts[UDP_OTHER], 1);
        assert_eq!(v.udp_vec_pkts[..7].iter().sum::<u64>(), 0);
        assert_eq!((v.udp, v.frags, v.icmp, v.packets), (2, 1, 1, 3));
    }

    #[test]
    fn ipv6_victims_are_their_64() {
        let mut a = FlowAggregator::new(vec![Prefix::parse("fd10::/48").unwrap()], 10);
        assert!(a.add(&sample("2001:db8::1", "fd10::2", UDP, 123, 9)));
        assert!(a.add(&sample("2001:db8::1", "fd10::3", UDP, 123, 9)));
        let (pairs, victims) = a.take();
        assert_eq!(pairs.len(), 2);
        assert_eq!(victims.len(), 1);
        assert_eq!(victims[0].victim.to_string(), "fd10::/64");
        assert_eq!(victims[0].udp_vec_pkts[1], 2);
    }

    /// Flow input feeds the detection unchanged: intervals of flow
    /// records (the export interval long) with a web background, then a
    /// DNS reflection and a SYN flood from routers' exports, are detected
    /// with the shipped defaults and named.
    #[test]
    fn flow_records_drive_detection_with_its_defaults() {
        use crate::detection::{Detection, DetectionConfig, Interval};
        let protected = vec![Prefix::parse("10.20.0.0/24").unwrap()];
        let mut det = Detection::new(&DetectionConfig::default(), "flow").unwrap();
        let mut agg = FlowAggregator::new(protected, 100_000);
        let secs = 5.0;
        let web = |agg: &mut FlowAggregator, i: u64| {
            for c in 0..40u32 {
                let mut s = sample(
                    &format!("198.18.{}.{}", c / 200, c % 200 + 1),
                    "10.20.0.2",
                    TCP,
                    30000 + (i % 1000) as u16,
                    443,
                );
                s.tcp_flags = TCP_SYN | TCP_ACK | TCP_FIN;
                s.packets = 20;
                s.bytes = 12_000;
                agg.add(&s);
            }
        };
        let mut named = Vec::new();
        let mut blocked_legit = false;
        for i in 0..40u64 {
            web(&mut agg, i);
            if i >= 30 {
                for r in 0..50u32 {
                    let mut s =
                        sample(&format!("203.0.113.{}", r + 1), "10.20.0.2", UDP, 53, 40000);
                    s.packets = 2000;
                    s.bytes = 2000 * 1400;
                    agg.add(&s);
                }
                for k in 0..2000u32 {
                    let mut s = sample(
                        &format!("100.{}.{}.{}", 64 + k / 65536, (k / 256) % 256, k % 256),
                        "10.20.0.3",
                        TCP,
                        1024 + k as u16,
                        80,
                    );
                    s.tcp_flags = TCP_SYN;
                    s.packets = 5;
                    s.bytes = 300;
                    agg.add(&s);
                }
            }
            let (pairs, victims) = agg.take();
            let v = det.observe(&Interval {
                index: i,
                secs,
                window_s: None,
                pairs: &pairs,
                victims: &victims,
                skips: Default::default(),
                blocked: &[],
                blocked_in_records: true,
                policed: &[],
            });
            for e in &v.events {
                named.push((e.victim.to_string(), e.vector.clone()));
            }
            for b in &v.blocks {
                if b.prefix.to_string().starts_with("198.18.") {
                    blocked_legit = true;
                }
            }
        }
        assert!(!blocked_legit);
        assert!(
            named
                .iter()
                .any(|(v, n)| v.starts_with("10.20.0.2") && n == "udp_amplification/dns"),
            "{named:?}"
        );
        assert!(
            named
                .iter()
                .any(|(v, n)| v.starts_with("10.20.0.3") && n.starts_with("syn_flood")),
            "{named:?}"
        );
    }

    /// Datagrams captured from the real exporters the lab runs (kept as
    /// fuzz seeds): pmacctd's sFlow probe sampling 1 in 4, softflowd's
    /// NetFlow v9 and IPFIX, all of 10.77.0.1 → 10.77.0.2 traffic (ICMP
    /// echo for pmacct, UDP to ports 4000..4099 for softflowd).
    #[test]
    fn real_exporters_datagrams_decode() {
        let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds");
        let read = |p: &str| std::fs::read(format!("{seeds}/{p}")).unwrap();
        let dst: IpAddr = "10.77.0.2".parse().unwrap();

        let mut out = Vec::new();
        let d = sflow::decode(&read("flow_sflow/pmacctd_sfprobe"), None, &mut out).unwrap();
        assert!(d.records > 0 && out.len() as u64 == d.records, "{d:?}");
        assert!(out.iter().all(|s| s.rate == 4 && s.packets == 4), "{out:?}");
        assert!(
            out.iter().any(|s| s.dst == dst && s.proto == ICMP),
            "{out:?}"
        );

        for (file, v) in [("softflowd_v9", 9), ("softflowd_ipfix", 10)] {
            let mut dec = netflow::NetflowDecoder::new(std::time::Duration::from_secs(60), None);
            let mut out = Vec::new();
            let from = "127.0.0.1:5000".parse().unwrap();
            let d = dec
                .decode(from, &read(&format!("flow_netflow/{file}")), &mut out)
                .unwrap();
            assert!(d.records > 10 && d.no_template == 0, "v{v}: {d:?}");
            let to_dst: Vec<_> = out.iter().filter(|s| s.dst == dst).collect();
            assert!(!to_dst.is_empty(), "v{v}: {out:?}");
            for s in to_dst {
                assert_eq!(s.proto, UDP, "v{v}: {s:?}");
                assert!((4000..4100).contains(&s.dst_port), "v{v}: {s:?}");
                assert!(s.packets > 0 && s.bytes >= s.packets * 128, "v{v}: {s:?}");
                assert_eq!(s.rate, 1);
            }
        }
    }
}
