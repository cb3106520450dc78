//! What one detection interval costs the daemon's loop: `Detection::observe`
//! (every detector enabled, defaults) over N (source, destination) records.
//!
//! `cargo run --release -p rampart-bench --example detect_cost -- [PAIRS...]`
//! (default 10000 100000 300000). Per size: 10 warm-up intervals of normal
//! traffic (N clients at ordinary rates, so every detector has learned),
//! then 7 measured intervals alternating normal and attack (N/2 clients +
//! N/2 spoofed UDP and SYN flood sources); prints the median and max time
//! per interval of each kind. No BPF: runs anywhere.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use rampart_ddos_control::FeatureRecord;
use rampart_ddos_control::{DetectConfig, Detection, Interval};

fn rec(src: IpAddr, dst: IpAddr, pk: u64, size: u64, kind: u8) -> FeatureRecord {
    let mut r = FeatureRecord {
        src,
        dst,
        packets: pk,
        bytes: pk * size,
        tcp: 0,
        udp: 0,
        icmp: 0,
        other: 0,
        syn: 0,
        synack: 0,
        rst: 0,
        frags: 0,
        dport_sketch: [1, 0],
        ..FeatureRecord::new(src, dst)
    };
    match kind {
        0 => r.tcp = pk as u32, // established TCP
        1 => r.udp = pk as u32,
        _ => {
            r.tcp = pk as u32;
            r.syn = pk as u32;
        }
    }
    r
}

fn v4(base: u32, i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(base.wrapping_add(i)))
}

fn interval(n: u32, attack: bool, seed: u32) -> Vec<FeatureRecord> {
    let server = v4(0x0a0a_0002, 0);
    let clients = if attack { n / 2 } else { n };
    let mut v: Vec<FeatureRecord> = (0..clients)
        .map(|i| {
            let pk = 2 + u64::from((i.wrapping_mul(2_654_435_761).wrapping_add(seed)) % 40);
            rec(v4(0x0a64_0000, i), server, pk, 200, (i % 5 == 0) as u8)
        })
        .collect();
    if attack {
        v.extend((0..n - clients).map(|i| {
            let kind = if i % 3 == 0 { 2 } else { 1 };
            rec(
                v4(0xac10_0000, i),
                server,
                400 + u64::from(i % 97),
                512,
                kind,
            )
        }));
    }
    v
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
        let mut d = Detection::new(&DetectConfig::default()).expect("default config");
        let mut index = 0;
        for w in 0..10 {
            let recs = interval(n, false, w);
            index += 1;
            d.observe(&Interval {
                index,
                secs: 0.5,
                records: &recs,
            });
        }
        let (mut normal, mut attack, mut blocks) = (Vec::new(), Vec::new(), 0);
        for k in 0..7 {
            let is_attack = k % 2 == 1;
            let recs = interval(n, is_attack, 100 + k);
            index += 1;
            let t = Instant::now();
            let out = d.observe(&Interval {
                index,
                secs: 0.5,
                records: &recs,
            });
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if is_attack {
                attack.push(ms);
                blocks = blocks.max(out.len());
            } else {
                normal.push(ms);
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
