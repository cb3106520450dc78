//! BPF_PROG_TEST_RUN tests of xdp_features (reached through xdp_filter's
//! tail call, as in production): per (src, dst) records with protocol,
//! SYN/SYN-ACK/RST, fragment and destination-port features, IPv4 and
//! IPv6; malformed and non-IP frames skipped and counted; slot swaps put
//! every packet in exactly one interval.

mod common;

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use common::*;
use rampart_ddos::features::{FeatureRecord, Features, VictimRecord};
use rampart_testkit::frame::{tcp, Frame};
use rampart_testkit::prog::{Counter, ProgCase, Runner, XDP_PASS};

fn rec<'a>(recs: &'a [FeatureRecord], src: &str, dst: &str) -> &'a FeatureRecord {
    let (s, d): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
    recs.iter()
        .find(|r| r.src == s && r.dst == d)
        .unwrap_or_else(|| panic!("no record {src} -> {dst}"))
}

#[test]
fn records_per_pair_with_detector_features() {
    let f = Installed::new("pq", &exact_cfg());
    let prog = f.prog();
    let mut feats = Features::open(f.filter.name()).unwrap();
    let (a, h) = ("192.0.2.1", "198.51.100.1");
    let u = udp(a, h, 53, 10);
    assert_eq!(run(&prog, &u, 3), XDP_PASS);
    for port in 1000..1020 {
        assert_eq!(run(&prog, &tcp(a, h, port, tcp::SYN), 1), XDP_PASS);
    }
    run(&prog, &tcp(h, a, 80, tcp::SYN | tcp::ACK), 2);
    run(&prog, &tcp(a, h, 80, tcp::RST), 1);
    run(&prog, &tcp(a, h, 80, tcp::ACK), 1);
    let icmp = Frame::icmp_echo(a, h).zeros(8).build();
    run(&prog, &icmp, 4);
    // A later fragment: protocol counted, no ports or flags.
    let frag = Frame::udp(a, h, 40000, 53)
        .zeros(16)
        .fragment(3, false)
        .build();
    run(&prog, &frag, 1);
    run(&prog, &udp("2001:db8::1", "2001:db8::2", 443, 10), 2);
    // Skipped: not IP passes through untouched; malformed never reaches here (dropped by the filter).
    run(
        &prog,
        &Frame::arp([192, 0, 2, 1], [198, 51, 100, 1]).build(),
        1,
    );

    let snap = feats.snapshot().unwrap();
    let r = rec(&snap.records, a, h);
    assert_eq!(r.packets, 3 + 20 + 1 + 1 + 4 + 1);
    assert_eq!((r.udp, r.tcp, r.icmp, r.other), (4, 22, 4, 0));
    assert_eq!((r.syn, r.synack, r.rst, r.frags), (20, 0, 1, 1));
    assert_eq!(
        r.bytes,
        3 * u.len() as u64
            + 20 * tcp(a, h, 1, tcp::SYN).len() as u64
            + 2 * tcp(a, h, 80, tcp::RST).len() as u64
            + 4 * icmp.len() as u64
            + frag.len() as u64
    );
    // Ports 53, 80 and 1000..1019: 22 distinct.
    assert!((r.dports_est() - 22.0).abs() < 5.0, "{}", r.dports_est());
    let back = rec(&snap.records, h, a);
    assert_eq!((back.packets, back.synack, back.syn), (2, 2, 0));
    let v6 = rec(&snap.records, "2001:db8::1", "2001:db8::2");
    assert_eq!((v6.packets, v6.udp), (2, 2));
    assert_eq!(snap.records.len(), 3);
    let st = feats.stats().unwrap();
    assert_eq!(st.recorded, snap.packets());
    assert_eq!(
        st.skipped_not_ip, 0,
        "ARP is passed by the filter before this stage"
    );
    assert_eq!(f.filter.stats().unwrap().passed("not_ip"), 1);

    // The next interval starts empty and holds only what came after the swap.
    run(&prog, &u, 5);
    let snap2 = feats.snapshot().unwrap();
    assert_eq!(snap2.interval, snap.interval + 1);
    assert_eq!(snap2.records.len(), 1);
    assert_eq!(rec(&snap2.records, a, h).packets, 5);
    let snap3 = feats.snapshot().unwrap();
    assert!(snap3.records.is_empty());
}

#[test]
fn standalone_feature_program_skips_malformed() {
    // Run xdp_features directly (as if attached alone): it never drops and
    // counts what it did not record.
    let f = Installed::new("pq", &exact_cfg());
    let feat_prog =
        rampart_dataplane::pin::open_pinned(&f.filter.dir().join("prog_features")).unwrap();
    let feats = Features::open(f.filter.name()).unwrap();
    let good = || Frame::udp("192.0.2.1", "198.51.100.1", 40000, 53).zeros(10);
    let cut = good().truncate(14 + 20 + 4).build();
    assert_eq!(run(&feat_prog, &cut, 1), XDP_PASS);
    // Five tags: one more than the filter's (and so the stage's) default walks.
    let deep = (0..5).fold(good(), |f, t| f.vlan(10 + t)).build();
    assert_eq!(run(&feat_prog, &deep, 1), XDP_PASS);
    let arp = Frame::arp([192, 0, 2, 1], [198, 51, 100, 1]).build();
    assert_eq!(run(&feat_prog, &arp, 1), XDP_PASS);
    assert_eq!(run(&feat_prog, &good().build(), 1), XDP_PASS);
    let st = feats.stats().unwrap();
    assert_eq!(
        (st.recorded, st.skipped_malformed, st.skipped_not_ip),
        (1, 2, 1)
    );
}

/// The feature program alone over the kit's corpus and every truncation:
/// frames that parse (with the filter's limits) are recorded, the rest
/// counted under their skip reason, and every frame passes untouched.
#[test]
fn standalone_feature_program_counts_every_corpus_frame_once() {
    use rampart_testkit::corpus;
    use rampart_testkit::parse::{self, Status};
    let cfg = exact_cfg();
    let f = Installed::new("pq", &cfg);
    let feat_prog =
        rampart_dataplane::pin::open_pinned(&f.filter.dir().join("prog_features")).unwrap();
    let feats = Features::open(f.filter.name()).unwrap();
    let reasons = || {
        let st = feats.stats().unwrap();
        vec![
            Counter::packets("recorded", st.recorded),
            Counter::packets("skipped_not_ip", st.skipped_not_ip),
            Counter::packets("skipped_malformed", st.skipped_malformed),
            Counter::packets("skipped_table_full", st.skipped_table_full),
        ]
    };
    let runner = Runner::new(feat_prog.as_raw_fd(), reasons);
    let mut cases = corpus::base();
    cases.extend(corpus::truncations());
    for c in cases {
        // The stage walks what the filter does (more tags, PPPoE, MPLS).
        let reason = match parse::expect_with(&c.frame, parse_limits(&cfg)).status {
            Status::Ok => "recorded",
            Status::NotIp => "skipped_not_ip",
            _ => "skipped_malformed",
        };
        runner.run(&ProgCase::new(c.name, c.frame, XDP_PASS, reason).unchanged());
    }
}

#[test]
fn full_interval_table_counts_the_overflow() {
    // Capacity 8 pairs gives the smallest table: 64 IPv4 key slots.
    let cfg = rampart_ddos::FilterConfig {
        features_capacity: 8,
        ..exact_cfg()
    };
    let f = Installed::new("pq", &cfg);
    assert_eq!(cfg.feature_caps().0, 64);
    let prog = f.prog();
    let mut feats = Features::open(f.filter.name()).unwrap();
    for i in 0..100 {
        run(
            &prog,
            &udp(&format!("192.0.2.{i}"), "198.51.100.1", 53, 4),
            1,
        );
    }
    run(&prog, &udp("192.0.2.5", "198.51.100.1", 53, 4), 1);
    let st = feats.stats().unwrap();
    let snap = feats.snapshot().unwrap();
    assert_eq!(snap.records.len(), 64, "every key slot is used");
    assert_eq!(st.skipped_table_full, 36);
    assert_eq!(st.recorded, 65);
    assert_eq!(snap.packets(), 65);
    // The next interval has room again.
    run(&prog, &udp("192.0.2.99", "198.51.100.1", 53, 4), 1);
    assert_eq!(feats.snapshot().unwrap().records.len(), 1);
}

fn victim<'a>(snap: &'a rampart_ddos::Snapshot, dst: &str) -> &'a VictimRecord {
    let key = VictimRecord::key_of(dst.parse().unwrap());
    snap.victims
        .iter()
        .find(|v| v.victim == key)
        .unwrap_or_else(|| panic!("no victim {dst}: {:?}", snap.victims))
}

/// Victim records: every counter class, UDP by source-port class (the
/// shipped amplification ports, then any other), the pairs' amplification
/// share and FINs; IPv6 destinations of one /64 are one victim.
#[test]
fn victim_records_count_every_class() {
    let f = Installed::new("pv", &exact_cfg());
    let prog = f.prog();
    let mut feats = Features::open(f.filter.name()).unwrap();
    let h = "198.51.100.1";
    // UDP from each amplification port, then from an ordinary port.
    let ports = [53u16, 123, 11211, 1900, 389, 19, 161, 40000];
    for (i, &p) in ports.iter().enumerate() {
        let fr = Frame::udp("192.0.2.1", h, p, 5000).zeros(100 + i).build();
        run(&prog, &fr, (i + 1) as u32);
    }
    run(&prog, &tcp("192.0.2.2", h, 80, tcp::SYN), 3);
    run(&prog, &tcp(h, "192.0.2.2", 80, tcp::SYN | tcp::ACK), 1); // to 192.0.2.2, not h
    run(&prog, &tcp("192.0.2.2", h, 80, tcp::RST), 2);
    run(&prog, &tcp("192.0.2.2", h, 80, tcp::FIN | tcp::ACK), 4);
    run(&prog, &Frame::icmp_echo("192.0.2.3", h).zeros(8).build(), 5);
    run(&prog, &Frame::ip("192.0.2.3", h, 47).zeros(20).build(), 6);
    let later = Frame::udp("192.0.2.4", h, 53, 4000)
        .zeros(16)
        .fragment(3, false)
        .build();
    run(&prog, &later, 7);
    // A /64: two addresses, one victim.
    run(&prog, &udp("2001:db8::1", "2001:db8:5::1", 53, 10), 2);
    run(&prog, &udp("2001:db8::1", "2001:db8:5::2", 53, 10), 3);

    let snap = feats.snapshot().unwrap();
    let v = victim(&snap, h);
    assert_eq!(v.udp, 36 + 7, "36 first packets + 7 later fragments");
    for (i, &p) in ports.iter().enumerate() {
        let len = Frame::udp("192.0.2.1", h, p, 5000)
            .zeros(100 + i)
            .build()
            .len() as u64;
        assert_eq!(v.udp_vec_pkts[i], (i + 1) as u64, "class {i} (port {p})");
        assert_eq!(v.udp_vec_bytes[i], (i + 1) as u64 * len, "class {i} bytes");
    }
    assert_eq!((v.tcp, v.syn, v.synack, v.rst, v.fin), (9, 3, 0, 2, 4));
    assert_eq!((v.icmp, v.other, v.frags), (5, 6, 7));
    assert_eq!(v.packets, 36 + 9 + 5 + 6 + 7);
    assert_eq!(
        v.packets,
        snap.records
            .iter()
            .filter(|r| r.dst.to_string() == h)
            .map(|r| r.packets)
            .sum::<u64>()
    );
    // The pair from the amplification ports: 28 of its 36 UDP packets (later fragments have no port).
    let pair = rec(&snap.records, "192.0.2.1", h);
    assert_eq!(pair.udp_amp, 28);
    assert_eq!(
        pair.udp_amp_bytes,
        (0..7)
            .map(|i| (i as u64 + 1)
                * Frame::udp("192.0.2.1", h, ports[i], 5000)
                    .zeros(100 + i)
                    .build()
                    .len() as u64)
            .sum::<u64>()
    );
    assert_eq!(rec(&snap.records, "192.0.2.2", h).fin, 4);
    let back = victim(&snap, "192.0.2.2");
    assert_eq!((back.synack, back.syn), (1, 0));
    let v6 = victim(&snap, "2001:db8:5::");
    assert_eq!(
        (v6.packets, v6.udp_vec_pkts[7]),
        (5, 5),
        "source port 40000: other"
    );
    assert_eq!(snap.victims.len(), 3);
    assert_eq!((snap.pairs_full, snap.victims_full), (0, 0));
    // The next interval starts empty.
    assert!(feats.snapshot().unwrap().victims.is_empty());
}

/// The distinct-source estimates: one source is one, 10,000 are about
/// 10,000 — and the registers are exactly what the Rust hash fills (the C
/// and Rust hashes agree).
#[test]
fn victim_distinct_sources_from_hyperloglog() {
    use rampart_ddos::features::hll_hash;
    use rampart_ddos_control::features::{hll_add, hll_estimate};
    let f = Installed::new("pv", &exact_cfg());
    let prog = f.prog();
    let mut feats = Features::open(f.filter.name()).unwrap();
    let (one, many) = ("198.51.100.1", "198.51.100.2");
    run(&prog, &tcp("192.0.2.1", one, 80, tcp::SYN), 50);
    let mut regs = [0u8; 64];
    let mut syn_regs = [0u8; 64];
    for i in 0..10_000u32 {
        let src = std::net::Ipv4Addr::from(0xac10_0000 + i * 7);
        let flags = if i % 2 == 0 { tcp::SYN } else { tcp::ACK };
        run(&prog, &tcp(&src.to_string(), many, 80, flags), 1);
        hll_add(&mut regs, hll_hash(src.into()));
        if i % 2 == 0 {
            hll_add(&mut syn_regs, hll_hash(src.into()));
        }
    }
    let snap = feats.snapshot().unwrap();
    let v1 = victim(&snap, one);
    assert!((v1.src_distinct - 1.0).abs() < 0.05, "{}", v1.src_distinct);
    assert!(
        (v1.syn_src_distinct - 1.0).abs() < 0.05,
        "{}",
        v1.syn_src_distinct
    );
    let v = victim(&snap, many);
    assert_eq!(
        v.src_distinct,
        hll_estimate(&regs),
        "C and Rust hashes agree"
    );
    assert_eq!(v.syn_src_distinct, hll_estimate(&syn_regs));
    // 64 registers: standard error 13%; 3 of them.
    assert!(
        (v.src_distinct / 10_000.0 - 1.0).abs() < 0.4,
        "{}",
        v.src_distinct
    );
    assert!(
        (v.syn_src_distinct / 5_000.0 - 1.0).abs() < 0.4,
        "{}",
        v.syn_src_distinct
    );
}

/// Out-of-state TCP, sampled: 1 in 16 TCP packets without SYN is looked
/// up; in this namespace no socket exists, so every sampled one is out of
/// state; a listener makes a sampled ACK to it out of state too (no valid
/// cookie), a connection's ACK is in state.
#[test]
fn victim_out_of_state_tcp_is_sampled() {
    rampart_lab::testing::pin_this_thread(0);
    let f = Installed::new("pv", &exact_cfg());
    let prog = f.prog();
    let mut feats = Features::open(f.filter.name()).unwrap();
    let h = "198.51.100.1";
    run(&prog, &tcp("192.0.2.1", h, 80, tcp::ACK), 64);
    let snap = feats.snapshot().unwrap();
    let v = victim(&snap, h);
    assert_eq!((v.tcp, v.tcp_sampled, v.tcp_nosock), (64, 4, 4));

    // A real connection on lo: its ACKs are in state.
    let st = std::process::Command::new("ip")
        .args(["-n", &f.ns, "link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(st.success());
    let prog_raw = prog.as_raw_fd();
    let (tcp_n, sampled, nosock) = rampart_dataplane::netns::run_in(Some(&f.ns), move || {
        rampart_lab::testing::pin_this_thread(0);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let cport = c.local_addr().unwrap().port();
        let est = Frame::tcp("127.0.0.1", "127.0.0.1", cport, port)
            .flags(tcp::ACK)
            .ack(1)
            .build();
        rampart_testkit::prog::run_n(prog_raw, &est, 32);
        Ok((32u64, 2u64, 0u64))
    })
    .unwrap();
    let snap = feats.snapshot().unwrap();
    let v = victim(&snap, "127.0.0.1");
    assert_eq!(
        (v.tcp, v.tcp_sampled, v.tcp_nosock),
        (tcp_n, sampled, nosock)
    );
}

#[test]
fn full_victim_table_counts_the_overflow() {
    let cfg = rampart_ddos::FilterConfig {
        victims_capacity: 8,
        ..exact_cfg()
    };
    assert_eq!(cfg.victim_cap(), 64);
    let f = Installed::new("pv", &cfg);
    let prog = f.prog();
    let mut feats = Features::open(f.filter.name()).unwrap();
    for i in 0..100 {
        run(
            &prog,
            &udp("192.0.2.1", &format!("198.51.100.{i}"), 53, 4),
            1,
        );
    }
    let snap = feats.snapshot().unwrap();
    assert_eq!(snap.victims.len(), 64, "every victim slot is used");
    assert_eq!(snap.victims_full, 36);
    assert_eq!(snap.records.len(), 100, "the pairs are all recorded");
    assert_eq!(snap.pairs_full, 0);
    // The next interval has room again, and its own (zero) overflow.
    run(&prog, &udp("192.0.2.1", "198.51.100.200", 53, 4), 1);
    let snap = feats.snapshot().unwrap();
    assert_eq!((snap.victims.len(), snap.victims_full), (1, 0));
}
