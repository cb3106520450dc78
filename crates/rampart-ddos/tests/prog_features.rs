//! BPF_PROG_TEST_RUN tests of xdp_features (reached through xdp_filter's
//! tail call, as in production): per (src, dst) records with protocol,
//! SYN/SYN-ACK/RST, fragment and destination-port features, IPv4 and
//! IPv6; malformed and non-IP frames skipped and counted; slot swaps put
//! every packet in exactly one interval.

mod common;

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use common::*;
use rampart_ddos::features::{FeatureRecord, Features};
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
