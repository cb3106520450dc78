//! What one detection interval costs the daemon's loop:
//! `detection::Detection::observe` (defaults) over N (source, destination) pair
//! records plus the victim's record.
//!
//! `cargo run --release -p rampart-bench --example detect_cost -- [PAIRS...]`
//! (default 10000 100000 300000). Per size: 10 warm-up intervals of normal
//! traffic (N web clients at ordinary rates, so the victim's baselines are
//! learned), then 7 measured intervals alternating normal and attack (N/2
//! clients + N/2 UDP and SYN flood sources, new addresses in every attack
//! interval, so each one attributes and blocks N/2 sources); prints the
//! median and max time per interval of each kind and the most blocks one
//! attack interval decided. No BPF: runs anywhere.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use rampart_ddos_control::detection::{Detection, DetectionConfig, Interval, Skips, SourceRate};
use rampart_ddos_control::features::{sketch_bit, UDP_OTHER};
use rampart_ddos_control::{FeatureRecord, Prefix, VictimRecord};

/// The daemon's interval (s).
const SECS: f64 = 0.5;

#[derive(Clone, Copy)]
enum Kind {
    /// A web client: every connection completed.
    Web,
    /// UDP from a non-amplification source port.
    Udp,
    /// SYNs that never complete.
    Syn,
}

/// One pair record, and its counts added to the victim's record.
fn rec(
    v: &mut VictimRecord,
    src: IpAddr,
    dst: IpAddr,
    pk: u32,
    size: u64,
    kind: Kind,
) -> FeatureRecord {
    let n = u64::from(pk);
    let mut r = FeatureRecord::new(src, dst);
    r.packets = n;
    r.bytes = n * size;
    v.packets += n;
    v.bytes += n * size;
    let port = match kind {
        Kind::Web => {
            let conns = pk.div_ceil(10);
            r.tcp = pk;
            r.syn = conns;
            r.completions = conns;
            r.fin = conns;
            v.tcp += n;
            v.syn += u64::from(conns);
            v.fin += u64::from(conns);
            v.tcp_sampled += n - u64::from(conns);
            443
        }
        Kind::Udp => {
            r.udp = pk;
            v.udp += n;
            v.udp_vec_pkts[UDP_OTHER] += n;
            v.udp_vec_bytes[UDP_OTHER] += n * size;
            9999
        }
        Kind::Syn => {
            r.tcp = pk;
            r.syn = pk;
            v.tcp += n;
            v.syn += n;
            80
        }
    };
    let b = sketch_bit(port);
    r.dport_sketch[(b / 64) as usize] |= 1 << (b % 64);
    r
}

fn v4(base: u32, i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(base.wrapping_add(i)))
}

/// Attacker `i`: spread over the address space (outside the clients'
/// 10.0.0.0/8), so that attackers seldom share a /24 and are blocked one
/// by one, as the flood sources of a botnet.
fn attacker(i: u32) -> IpAddr {
    let a = i.wrapping_mul(0x9E37_79B1);
    v4(if a >> 24 == 10 { a ^ 0x8000_0000 } else { a }, 0)
}

/// One interval's pairs and the victim's record; `attack`: the number of
/// the attack (its sources are new addresses).
fn interval(n: u32, attack: Option<u32>, seed: u32) -> (Vec<FeatureRecord>, VictimRecord) {
    let server = v4(0x0a0a_0002, 0);
    let mut v = VictimRecord::new(VictimRecord::key_of(server));
    let clients = if attack.is_some() { n / 2 } else { n };
    let mut pairs: Vec<FeatureRecord> = (0..clients)
        .map(|i| {
            let pk = 2 + (i.wrapping_mul(2_654_435_761).wrapping_add(seed)) % 40;
            rec(&mut v, v4(0x0a64_0000, i), server, pk, 200, Kind::Web)
        })
        .collect();
    let (mut syn_srcs, mut srcs) = (u64::from(clients), u64::from(clients));
    if let Some(a) = attack {
        pairs.extend((0..n - clients).map(|i| {
            let kind = if i % 3 == 0 { Kind::Syn } else { Kind::Udp };
            let size = if i % 3 == 0 { 60 } else { 512 };
            rec(
                &mut v,
                attacker(a * n + i),
                server,
                200 + i % 97,
                size,
                kind,
            )
        }));
        srcs += u64::from(n - clients);
        syn_srcs += u64::from(n - clients).div_ceil(3);
    }
    v.src_distinct = srcs as f64;
    v.syn_src_distinct = syn_srcs as f64;
    (pairs, v)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let sizes: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("{a:?} is not a number of pairs"))
        })
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10_000, 100_000, 300_000]
    } else {
        sizes
    };
    println!("pairs,kind,median_ms,max_ms,blocks");
    for n in sizes {
        let mut d = Detection::new(&DetectionConfig::default(), "bench").expect("default config");
        // What the daemon would report of the sources blocked so far: their
        // attack has moved on to new addresses, nothing is dropped of them.
        let mut blocked: HashSet<Prefix> = HashSet::new();
        let mut index = 0;
        let mut observe = |d: &mut Detection, attack: Option<u32>, seed: u32| {
            let (pairs, victim) = interval(n, attack, seed);
            let rates: Vec<SourceRate> = blocked
                .iter()
                .map(|&prefix| SourceRate { prefix, pps: 0.0 })
                .collect();
            index += 1;
            let t = Instant::now();
            let v = d.observe(&Interval {
                index,
                secs: SECS,
                window_s: None,
                pairs: &pairs,
                victims: std::slice::from_ref(&victim),
                skips: Skips::default(),
                blocked: &rates,
                blocked_in_records: false,
                policed: &[],
            });
            let ms = t.elapsed().as_secs_f64() * 1e3;
            blocked.extend(v.blocks.iter().map(|b| b.prefix));
            for u in &v.unblocks {
                blocked.remove(&u.prefix);
            }
            (ms, v.blocks.len())
        };
        for w in 0..10 {
            observe(&mut d, None, w);
        }
        let (mut normal, mut attack, mut blocks) = (Vec::new(), Vec::new(), 0);
        for k in 0..7 {
            if k % 2 == 1 {
                let (ms, b) = observe(&mut d, Some(k), 100 + k);
                attack.push(ms);
                blocks = blocks.max(b);
            } else {
                normal.push(observe(&mut d, None, 100 + k).0);
            }
        }
        let mx = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        println!(
            "{n},normal,{:.1},{:.1},0",
            median(&mut normal.clone()),
            mx(&normal)
        );
        println!(
            "{n},attack,{:.1},{:.1},{blocks}",
            median(&mut attack.clone()),
            mx(&attack)
        );
    }
}
