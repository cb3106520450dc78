//! BPF_PROG_TEST_RUN tests of xdp_filter's evidence sampler: with no
//! victim marked nothing is sampled; a marked attack's packets (its
//! victim, its class, its source port) are copied to the ring — the first
//! N, then 1 in M — blocked sources' included, and nothing else is; a
//! full ring is counted; unmarking stops it; a carpet-bombed prefix is
//! marked as one victim.

mod common;

use std::net::IpAddr;

use common::*;
use rampart_ddos::evidence::{Capture, Ring, Spec, Stats, SNAPLEN};
use rampart_ddos::filter::{POLICE_ALL, POLICE_UDP};
use rampart_testkit::frame::{tcp as flags, Frame};
use rampart_testkit::prog::{XDP_DROP, XDP_PASS};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A DNS reflector's answer: UDP from port 53.
fn amp(src: &str, dst: &str) -> Vec<u8> {
    Frame::udp(src, dst, 53, 40000).zeros(600).build()
}

fn open(f: &Installed) -> (Capture, Ring) {
    let name = f.filter.name().to_string();
    (
        Capture::open(&name)
            .unwrap()
            .expect("a new filter has the evidence maps"),
        Ring::open(&name)
            .unwrap()
            .expect("a new filter has the evidence ring"),
    )
}

#[test]
fn the_first_n_then_one_in_m_of_the_marked_attack_only() {
    let mut f = Installed::new("ev", &exact_cfg());
    let (cap, mut ring) = open(&f);
    let prog = f.prog();
    let victim = "198.51.100.1";
    let frame = amp("192.0.2.1", victim);

    // Nothing marked: nothing sampled.
    assert_eq!(run(&prog, &frame, 10), XDP_PASS);
    assert!(ring.drain().is_empty());

    // The attack: DNS amplification on the victim. Its reflector is blocked.
    let spec = Spec {
        id: 7,
        classes: POLICE_UDP,
        sport: 53,
        first: 5,
        every: 10,
    };
    cap.mark(ip(victim), spec).unwrap();
    f.block(&["192.0.2.1"]);
    assert_eq!(run(&prog, &frame, 35), XDP_DROP);
    // 35 packets: the first 5, then the 6th, 16th, 26th (1 in 10), whole
    // up to the snap length, in order.
    let recs = ring.drain();
    assert_eq!(recs.len(), 8);
    for r in &recs {
        assert_eq!((r.id, r.len as usize), (7, frame.len()));
        assert_eq!(r.data, frame[..SNAPLEN.min(frame.len())]);
        assert!(r.ts_ns > 0);
    }
    assert!(recs.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    // Not the attack: another victim, another source port, TCP.
    let other_port = Frame::udp("192.0.2.9", victim, 123, 40000)
        .zeros(60)
        .build();
    for (what, pkt) in [
        ("another victim", amp("192.0.2.1", "198.51.100.2")),
        ("another source port", other_port),
        ("a SYN", tcp("192.0.2.9", victim, 80, flags::SYN)),
    ] {
        run(&prog, &pkt, 3);
        assert!(ring.drain().is_empty(), "{what} was sampled");
    }
    assert_eq!(
        cap.stats(ip(victim)).unwrap(),
        Some(Stats {
            seen: 35,
            sampled: 8,
            ring_full: 0
        })
    );
    // The sampler changed no verdict: the reflector's packets are dropped as blacklisted.
    assert_eq!(f.filter.stats().unwrap().dropped("blacklist"), 35 + 3);

    // Unmarked: nothing more.
    assert_eq!(cap.unmark(ip(victim)).unwrap().map(|s| s.seen), Some(35));
    run(&prog, &frame, 10);
    assert!(ring.drain().is_empty());
    assert_eq!(cap.unmark(ip(victim)).unwrap(), None);
}

#[test]
fn ipv6_short_frames_and_every_packet_of_a_victim() {
    let f = Installed::new("e6", &exact_cfg());
    let (cap, mut ring) = open(&f);
    let prog = f.prog();
    cap.mark(
        ip("2001:db8::ff"),
        Spec {
            id: 1,
            classes: POLICE_ALL,
            sport: 0,
            first: 3,
            every: 0,
        },
    )
    .unwrap();
    let v6 = udp("2001:db8::1", "2001:db8::ff", 53, 10);
    let syn6 = tcp("2001:db8::2", "2001:db8::ff", 80, flags::SYN);
    run(&prog, &v6, 2);
    run(&prog, &syn6, 5);
    // The first 3 of any kind, then none (every = 0).
    let recs = ring.drain();
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0].data, v6, "a short frame is kept whole");
    assert_eq!(recs[2].data, syn6);
    assert_eq!(cap.stats(ip("2001:db8::ff")).unwrap().unwrap().seen, 7);
    cap.clear().unwrap();
    assert_eq!(cap.stats(ip("2001:db8::ff")).unwrap(), None);
}

#[test]
fn a_carpet_bombed_prefix_is_one_victim() {
    let mut f = Installed::new("ec", &exact_cfg());
    let (cap, mut ring) = open(&f);
    let prog = f.prog();
    let net4: ipnet::IpNet = "198.51.100.0/24".parse().unwrap();
    let net6: ipnet::IpNet = "2001:db8:7::/64".parse().unwrap();
    for (id, net) in [(3, net4), (4, net6)] {
        let spec = Spec {
            id,
            classes: POLICE_ALL,
            sport: 0,
            first: 100,
            every: 0,
        };
        cap.mark(net, spec).unwrap();
    }
    f.block(&["192.0.2.1"]);
    // Every address of the prefixes, blocked sources' packets included.
    for d in ["198.51.100.1", "198.51.100.77", "198.51.100.255"] {
        assert_eq!(run(&prog, &amp("192.0.2.1", d), 1), XDP_DROP);
        run(&prog, &amp("192.0.2.9", d), 1);
    }
    run(&prog, &udp("2001:db8::1", "2001:db8:7::abcd", 53, 10), 2);
    // Not the victims: the neighbouring /24 and /64.
    run(&prog, &amp("192.0.2.1", "198.51.101.1"), 3);
    run(&prog, &udp("2001:db8::1", "2001:db8:8::1", 53, 10), 3);
    let recs = ring.drain();
    assert_eq!(recs.iter().filter(|r| r.id == 3).count(), 6);
    assert_eq!(recs.iter().filter(|r| r.id == 4).count(), 2);
    assert_eq!(recs.len(), 8);
    assert_eq!(cap.stats(net4).unwrap().unwrap().seen, 6);
    // A host inside the prefix is not the prefix.
    assert_eq!(cap.stats(ip("198.51.100.77")).unwrap(), None);
    assert_eq!(cap.unmark(net4).unwrap().map(|s| s.sampled), Some(6));
    run(&prog, &amp("192.0.2.1", "198.51.100.77"), 2);
    assert!(ring.drain().is_empty());
    cap.clear().unwrap();
    assert_eq!(cap.stats(net6).unwrap(), None);
}

#[test]
fn a_full_ring_is_counted_not_blocking() {
    let f = Installed::new("ef", &exact_cfg());
    let (cap, mut ring) = open(&f);
    let prog = f.prog();
    let victim = "198.51.100.7";
    cap.mark(
        ip(victim),
        Spec {
            id: 2,
            classes: POLICE_ALL,
            sport: 0,
            first: u32::MAX,
            every: 0,
        },
    )
    .unwrap();
    // More records than the ring holds, none read meanwhile.
    let frame = amp("192.0.2.1", victim);
    let n = 2 * rampart_bpf::abi::ddos::DDOS_EVIDENCE_RING as u64 / 256;
    assert_eq!(run(&prog, &frame, n as u32), XDP_PASS);
    let st = cap.stats(ip(victim)).unwrap().unwrap();
    assert_eq!(st.seen, n);
    assert!(st.ring_full > 0, "{st:?}");
    assert_eq!(st.sampled + st.ring_full, n, "{st:?}");
    assert_eq!(ring.drain().len() as u64, st.sampled);
}

/// The sampler's cost on the filter's two hot paths (a clean packet that
/// passes, a blocked source's packet that is dropped), BPF_PROG_RUN, in
/// one run: no victim marked (the shipped state between attacks), another
/// victim marked (the lookup misses), and the packet's victim marked past
/// its first packets (1 in 1000 copied). Rounds interleave the settings;
/// medians of the per-run times. A benchmark, not a test: run with
/// `cargo test --profile ci -p rampart-ddos --test prog_evidence -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: run it on a quiet machine"]
fn sampler_cost() {
    let mut f = Installed::new("ec", &exact_cfg());
    let (cap, mut ring) = open(&f);
    f.block(&["192.0.2.66"]);
    let prog = f.prog();
    let victim = "198.51.100.1";
    let clean = amp("192.0.2.1", victim);
    let blocked = amp("192.0.2.66", victim);
    let spec = Spec {
        id: 1,
        classes: POLICE_UDP,
        sport: 53,
        first: 0,
        every: 1000,
    };
    const ROUNDS: usize = 15;
    const RUNS: usize = 2000;
    let settings = ["idle", "other victim marked", "this victim marked"];
    let mut ns: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); settings.len()]; 2];
    for _ in 0..ROUNDS {
        for (s, _) in settings.iter().enumerate() {
            cap.clear().unwrap();
            match s {
                1 => cap.mark(ip("198.51.100.99"), spec).unwrap(),
                2 => cap.mark(ip(victim), spec).unwrap(),
                _ => {}
            }
            for (p, pkt) in [&clean, &blocked].iter().enumerate() {
                for _ in 0..RUNS {
                    let o = rampart_dataplane::testrun::run_packet(
                        std::os::fd::AsRawFd::as_raw_fd(&prog),
                        pkt,
                        0,
                    )
                    .unwrap();
                    ns[p][s].push(o.duration.as_nanos() as f64);
                }
            }
            ring.drain();
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut json = Vec::new();
    for (p, path) in ["clean_pass", "blocked_drop"].iter().enumerate() {
        let m: Vec<f64> = (0..settings.len()).map(|s| median(&mut ns[p][s])).collect();
        for (s, name) in settings.iter().enumerate() {
            println!(
                "{path:>12} {name:<20} {:>6.1} ns  ({:.3}x idle)",
                m[s],
                m[s] / m[0]
            );
        }
        json.push(format!(
            "\"{path}\":{{\"idle_ns\":{},\"other_marked_ns\":{},\"this_marked_ns\":{},\"other_marked_ratio\":{:.4},\"this_marked_ratio\":{:.4}}}",
            m[0], m[1], m[2], m[1] / m[0], m[2] / m[0]
        ));
    }
    println!(
        "{{{},\"method\":\"BPF_PROG_RUN, {ROUNDS} interleaved rounds x {RUNS} runs per setting and packet, median ns per run\"}}",
        json.join(",")
    );
}
