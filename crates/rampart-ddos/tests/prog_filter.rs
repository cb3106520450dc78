//! BPF_PROG_TEST_RUN tests of xdp_filter: verdicts, drop reasons and
//! per-entry counters for IPv4/IPv6, exact/CIDR, malformed frames, the
//! sampled counter estimate, TTL expiry in the data path, and updates that
//! keep counters.

mod common;

use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;
use rampart_ddos::filter::{FilterConfig, Update};
use rampart_ddos::{BlockEntry, Error, Prefix};
use rampart_testkit::frame::{tcp, Ext, Frame};
use rampart_testkit::prog::{ProgCase, Runner, XDP_DROP, XDP_PASS};

fn entry(f: &Installed, p: &str) -> (u64, u64) {
    let p = Prefix::parse(p).unwrap();
    let e = f.filter.entries().unwrap();
    let e = e
        .iter()
        .find(|e| e.prefix == p)
        .unwrap_or_else(|| panic!("{p} not listed"));
    (e.packets, e.bytes)
}

#[test]
fn exact_ipv4_drops_and_counts() {
    let mut f = Installed::new("pf", &exact_cfg());
    f.block(&["192.0.2.1"]);
    let prog = f.prog();
    let bad = udp("192.0.2.1", "198.51.100.1", 53, 10);
    let good = udp("192.0.2.2", "198.51.100.1", 53, 10);
    assert_eq!(run(&prog, &bad, 3), XDP_DROP);
    assert_eq!(run(&prog, &good, 2), XDP_PASS);
    assert_eq!(entry(&f, "192.0.2.1/32"), (3, 3 * bad.len() as u64));
    let s = f.filter.stats().unwrap();
    assert_eq!(s.dropped("blacklist"), 3);
    assert_eq!(s.passed("clean"), 2);
    assert_eq!(s.no_next_stage, 0, "the feature stage is chained");
    assert_eq!(s.entries.exact4, 1);
}

#[test]
fn ipv6_and_prefixes_most_specific_entry_counts() {
    let mut f = Installed::new("pf", &exact_cfg());
    f.block(&[
        "2001:db8::1",
        "198.51.100.0/24",
        "198.51.100.7",
        "2001:db8:1::/48",
        "0.0.0.0",
        "10.0.0.0/8",
    ]);
    let prog = f.prog();
    let cases = [
        ("2001:db8::1", "2001:db8::ff", XDP_DROP),
        ("2001:db8::2", "2001:db8::ff", XDP_PASS),
        ("2001:db8:1:2::9", "2001:db8::ff", XDP_DROP),
        ("2001:db8:2::9", "2001:db8::ff", XDP_PASS),
        ("198.51.100.7", "192.0.2.9", XDP_DROP),
        ("198.51.100.8", "192.0.2.9", XDP_DROP),
        ("198.51.101.8", "192.0.2.9", XDP_PASS),
        ("0.0.0.0", "192.0.2.9", XDP_DROP),
        ("10.200.3.4", "192.0.2.9", XDP_DROP),
        ("11.0.0.1", "192.0.2.9", XDP_PASS),
    ];
    for (src, dst, want) in cases {
        assert_eq!(run(&prog, &udp(src, dst, 53, 4), 1), want, "{src}");
    }
    assert_eq!(entry(&f, "2001:db8::1/128").0, 1);
    assert_eq!(entry(&f, "2001:db8:1::/48").0, 1);
    assert_eq!(
        entry(&f, "198.51.100.7/32").0,
        1,
        "the exact entry, not the /24"
    );
    assert_eq!(entry(&f, "198.51.100.0/24").0, 1);
    assert_eq!(entry(&f, "0.0.0.0/32").0, 1, "0.0.0.0 lives in the trie");
    assert_eq!(entry(&f, "10.0.0.0/8").0, 1);
    let s = f.filter.stats().unwrap();
    assert_eq!(s.dropped("blacklist"), 2);
    assert_eq!(s.dropped("blacklist_prefix"), 4);
    assert_eq!(s.passed("clean"), 4);
    assert_eq!(
        (
            s.entries.exact4,
            s.entries.exact6,
            s.entries.prefix4,
            s.entries.prefix6
        ),
        (1, 1, 3, 1)
    );

    // Unblocking the last prefix of a family switches its lookup off again.
    f.filter
        .unblock(&[Prefix::parse("2001:db8:1::/48").unwrap()])
        .unwrap();
    assert_eq!(
        run(&prog, &udp("2001:db8:1:2::9", "2001:db8::ff", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(f.filter.stats().unwrap().entries.prefix6, 0);
}

#[test]
fn malformed_frames_have_a_reason() {
    let mut f = Installed::new("pf", &exact_cfg());
    f.block(&["192.0.2.66"]);
    let prog = f.prog();
    let good = || Frame::udp("192.0.2.1", "198.51.100.1", 40000, 53).zeros(10);
    let tags = |f: Frame, n: u16| (0..n).fold(f, |f, t| f.vlan(10 + t));
    // Truncated inside UDP, bad IHL, five VLAN tags, not IP.
    assert_eq!(
        run(&prog, &good().truncate(14 + 20 + 4).build(), 1),
        XDP_DROP
    );
    assert_eq!(run(&prog, &good().ihl(4).build(), 1), XDP_DROP);
    assert_eq!(run(&prog, &tags(good(), 5).build(), 1), XDP_DROP);
    let arp = Frame::arp([192, 0, 2, 1], [192, 0, 2, 2]).build();
    assert_eq!(run(&prog, &arp, 1), XDP_PASS);
    // Up to four VLAN tags are walked: clean passes, blacklisted drops.
    assert_eq!(run(&prog, &tags(good(), 2).build(), 1), XDP_PASS);
    let bl = || Frame::udp("192.0.2.66", "198.51.100.1", 40000, 53).zeros(10);
    assert_eq!(run(&prog, &tags(bl(), 2).build(), 1), XDP_DROP);
    // A blacklisted source with a truncated L4 header is dropped as blacklisted.
    assert_eq!(run(&prog, &bl().truncate(14 + 20 + 3).build(), 1), XDP_DROP);
    // A later IPv4 fragment from a blacklisted source: no L4 header, still dropped.
    let frag = Frame::udp("192.0.2.66", "198.51.100.1", 40000, 53)
        .zeros(16)
        .fragment(3, false);
    assert_eq!(run(&prog, &frag.build(), 1), XDP_DROP);
    let s = f.filter.stats().unwrap();
    assert_eq!(s.dropped("truncated"), 1);
    assert_eq!(s.dropped("bad_header"), 1);
    assert_eq!(s.dropped("too_deep"), 1);
    assert_eq!(s.dropped("blacklist"), 3);
    assert_eq!(s.passed("not_ip"), 1);
    assert_eq!(s.passed("clean"), 1);
    assert_eq!(entry(&f, "192.0.2.66/32").0, 3);
}

#[test]
fn pass_malformed_mode_passes_them_counted() {
    let cfg = FilterConfig {
        pass_malformed: true,
        ..exact_cfg()
    };
    let f = Installed::new("pf", &cfg);
    let prog = f.prog();
    let good = || Frame::udp("192.0.2.1", "198.51.100.1", 40000, 53).zeros(10);
    let cut = good().truncate(14 + 20 + 4).build();
    assert_eq!(run(&prog, &cut, 1), XDP_PASS);
    let deep = (0..5).fold(good(), |f, t| f.vlan(10 + t)).build();
    assert_eq!(run(&prog, &deep, 1), XDP_PASS);
    let s = f.filter.stats().unwrap();
    assert_eq!(s.passed("malformed"), 2);
    assert_eq!(s.dropped("truncated") + s.dropped("too_deep"), 0);
}

/// Every frame of the test kit's corpus (valid, malformed, every
/// truncation, seeded mutations) from sources not on the (empty)
/// blacklist: the verdict and the one reason its parse status (with the
/// filter's limits) and tunnel kind call for — dropped, or passed as
/// `malformed` when the filter is loaded to pass malformed frames; tunnels
/// passed under their kind, or dropped as `encap` when loaded to drop them.
#[test]
fn every_corpus_frame_has_the_verdict_and_reason_of_its_parse_status() {
    use rampart_testkit::parse::{self, Encap, Status};
    for (pass_malformed, drop_encap) in [(false, false), (true, true)] {
        let cfg = FilterConfig {
            pass_malformed,
            drop_encap,
            ..exact_cfg()
        };
        let f = Installed::new("pc", &cfg);
        let prog = f.prog();
        let runner = Runner::new(prog.as_raw_fd(), || f.reasons());
        for c in rampart_testkit::corpus::all(0xdd05_f11e, 1500) {
            let p = parse::expect_with(&c.frame, parse_limits(&cfg));
            let tunnel = p.encap != Encap::None && !p.status.malformed();
            let (verdict, reason) = match p.status {
                _ if tunnel && drop_encap => (XDP_DROP, "drop.encap".to_string()),
                _ if tunnel => (XDP_PASS, format!("pass.encap_{}", p.encap.label())),
                Status::Ok => (XDP_PASS, "pass.clean".to_string()),
                Status::NotIp => (XDP_PASS, "pass.not_ip".to_string()),
                _ if pass_malformed => (XDP_PASS, "pass.malformed".to_string()),
                s => (XDP_DROP, format!("drop.{}", s.label())),
            };
            runner.run(&ProgCase::new(c.name, c.frame, verdict, reason).unchanged());
        }
    }
}

/// An IPv4 packet from `src` carrying protocol `proto`: `header`, then the
/// IP packet of `inner` (GRE, IP in IP).
fn ip4_carrying(src: &str, proto: u8, header: &[u8], inner: &Frame) -> Frame {
    Frame::ip(src, "198.51.100.1", proto).payload(&[header, &inner.build()[14..]].concat())
}

/// A UDP datagram from 203.0.113.9 to `dport` carrying `header` then the
/// whole frame `inner` (VXLAN, Geneve).
fn udp_carrying(dport: u16, header: &[u8], inner: &Frame) -> Frame {
    Frame::udp("203.0.113.9", "198.51.100.1", 40000, dport)
        .payload(&[header, &inner.build()].concat())
}

const VXLAN_HDR: [u8; 8] = [8, 0, 0, 0, 0, 0, 42, 0];
const GENEVE_HDR: [u8; 8] = [0, 0, 0x65, 0x58, 0, 0, 42, 0];
const GRE_HDR: [u8; 4] = [0, 0, 0x08, 0x00];

#[test]
fn drop_encap_drops_every_tunnel_and_keeps_the_rest() {
    let cfg = FilterConfig {
        drop_encap: true,
        ..exact_cfg()
    };
    let f = Installed::new("pf", &cfg);
    let prog = f.prog();
    let inner = Frame::udp("192.0.2.1", "198.51.100.1", 40000, 53).zeros(10);
    let tunnels = [
        ip4_carrying("203.0.113.9", 47, &GRE_HDR, &inner),
        ip4_carrying("203.0.113.9", 4, &[], &inner),
        udp_carrying(4789, &VXLAN_HDR, &inner),
        udp_carrying(6081, &GENEVE_HDR, &inner),
    ];
    for t in &tunnels {
        assert_eq!(run(&prog, &t.build(), 1), XDP_DROP);
    }
    // Plain traffic, MPLS and PPPoE carrying IP are not tunnels.
    for p in [
        inner.clone(),
        inner.clone().mpls(16).mpls(17),
        inner.pppoe(7),
    ] {
        assert_eq!(run(&prog, &p.build(), 1), XDP_PASS);
    }
    let s = f.filter.stats().unwrap();
    assert_eq!(s.dropped("encap"), tunnels.len() as u64);
    assert_eq!(s.passed("clean"), 3);
    for k in ["encap_gre", "encap_ipip", "encap_vxlan", "encap_geneve"] {
        assert_eq!(s.passed(k), 0, "{k}");
    }
}

#[test]
fn parse_depth_limits_are_set_at_load() {
    let tags = |n: u16| {
        (0..n)
            .fold(
                Frame::udp("192.0.2.1", "198.51.100.1", 40000, 53),
                |f, t| f.vlan(10 + t),
            )
            .zeros(10)
            .build()
    };
    let ext = |n: usize| v6_ext("2001:db8::1", n, false).build();
    // Stricter than the defaults: two VLAN tags, three IPv6 extension headers.
    let cfg = FilterConfig {
        max_vlans: 2,
        max_v6_ext: 3,
        ..exact_cfg()
    };
    let f = Installed::new("pf", &cfg);
    let prog = f.prog();
    assert_eq!(run(&prog, &tags(2), 1), XDP_PASS);
    assert_eq!(run(&prog, &tags(3), 1), XDP_DROP);
    assert_eq!(run(&prog, &ext(3), 1), XDP_PASS);
    assert_eq!(run(&prog, &ext(4), 1), XDP_DROP);
    assert_eq!(f.filter.stats().unwrap().dropped("too_deep"), 2);
    drop(f);
    // The ceilings: eight tags, sixteen extension headers.
    let cfg = FilterConfig {
        max_vlans: 8,
        max_v6_ext: 16,
        ..exact_cfg()
    };
    let f = Installed::new("pf", &cfg);
    let prog = f.prog();
    assert_eq!(run(&prog, &tags(8), 1), XDP_PASS);
    assert_eq!(run(&prog, &tags(9), 1), XDP_DROP);
    assert_eq!(run(&prog, &ext(16), 1), XDP_PASS);
    assert_eq!(run(&prog, &ext(17), 1), XDP_DROP);
    let s = f.filter.stats().unwrap();
    assert_eq!((s.passed("clean"), s.dropped("too_deep")), (2, 2));
    drop(f);
    // Beyond the ceilings: refused before anything is loaded.
    for (v, e) in [(9, 8), (4, 17)] {
        let cfg = FilterConfig {
            max_vlans: v,
            max_v6_ext: e,
            ..exact_cfg()
        };
        let msg = cfg.validate().unwrap_err().to_string();
        assert!(msg.contains("out of range"), "{msg}");
    }
}

#[test]
fn sampled_counters_estimate_without_bias() {
    // 1 in 16 matches update the counter by 16 packets and 16 × length bytes.
    let cfg = FilterConfig {
        sample_shift: 4,
        ..exact_cfg()
    };
    let mut f = Installed::new("pf", &cfg);
    f.block(&["192.0.2.1"]);
    let prog = f.prog();
    let pkt = udp("192.0.2.1", "198.51.100.1", 53, 10);
    let n: u64 = 160_000;
    assert_eq!(run(&prog, &pkt, n as u32), XDP_DROP);
    let (p, b) = entry(&f, "192.0.2.1/32");
    assert_eq!(p % 16, 0);
    assert_eq!(b, p * pkt.len() as u64);
    // Standard deviation sqrt(n (2^k - 1)) ≈ 1549: allow 6 sigma.
    let sd = ((n * 15) as f64).sqrt();
    assert!(
        (p as f64 - n as f64).abs() < 6.0 * sd,
        "estimate {p} for {n}"
    );
    let s = f.filter.stats().unwrap();
    assert_eq!(s.dropped("blacklist"), n, "drop counters are exact");
    assert_eq!(s.sampled * 16, p);
}

#[test]
fn ttl_expires_in_the_data_path_and_is_purged() {
    let mut f = Installed::new("pf", &exact_cfg());
    let ttl = |p: &str, s: u64| BlockEntry {
        prefix: Prefix::parse(p).unwrap(),
        ttl: Some(Duration::from_secs(s)),
    };
    f.filter
        .block(&[
            ttl("192.0.2.1", 1),
            ttl("198.51.100.0/24", 1),
            ttl("192.0.2.2", 3600),
        ])
        .unwrap();
    let prog = f.prog();
    assert_eq!(
        run(&prog, &udp("192.0.2.1", "203.0.113.1", 53, 4), 1),
        XDP_DROP
    );
    assert_eq!(
        run(&prog, &udp("198.51.100.3", "203.0.113.1", 53, 4), 1),
        XDP_DROP
    );
    assert_eq!(f.filter.entries().unwrap().len(), 3);
    std::thread::sleep(Duration::from_millis(1100));
    // Past the TTL nothing matches any more, with no process involved.
    assert_eq!(
        run(&prog, &udp("192.0.2.1", "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(
        run(&prog, &udp("198.51.100.3", "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(
        run(&prog, &udp("192.0.2.2", "203.0.113.1", 53, 4), 1),
        XDP_DROP
    );
    let s = f.filter.stats().unwrap();
    assert_eq!(s.expired, 1, "the exact slot was retired in place");
    assert_eq!(
        f.filter.entries().unwrap().len(),
        1,
        "expired entries are not listed"
    );
    let r = f.filter.expire().unwrap();
    assert_eq!((r.expired, r.counts.exact4, r.counts.prefix4), (2, 1, 0));
    // Blocking it again works and counts from zero.
    f.block(&["192.0.2.1"]);
    assert_eq!(
        run(&prog, &udp("192.0.2.1", "203.0.113.1", 53, 4), 2),
        XDP_DROP
    );
    assert_eq!(entry(&f, "192.0.2.1/32").0, 2);
}

#[test]
fn refresh_sets_a_new_expiry_and_keeps_the_counters() {
    let mut f = Installed::new("pf", &exact_cfg());
    let e = |p: &str, ttl: Option<u64>| BlockEntry {
        prefix: Prefix::parse(p).unwrap(),
        ttl: ttl.map(Duration::from_secs),
    };
    f.filter
        .block(&[e("192.0.2.1", Some(60)), e("198.51.100.0/24", Some(3600))])
        .unwrap();
    let prog = f.prog();
    assert_eq!(
        run(&prog, &udp("192.0.2.1", "203.0.113.1", 53, 4), 3),
        XDP_DROP
    );
    // Adds and refreshes in one update: .1 lives on with no expiry, the
    // /24 gets one second, .2 is new. (An entry within a second of its
    // end would be re-added with a fresh id instead: see `replace`.)
    let r = f
        .filter
        .apply(&Update {
            add: vec![e("192.0.2.2", None)],
            refresh: vec![e("192.0.2.1", None), e("198.51.100.0/24", Some(1))],
            ..Default::default()
        })
        .unwrap();
    assert_eq!((r.added, r.removed), (1, 0));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        run(&prog, &udp("192.0.2.1", "203.0.113.1", 53, 4), 2),
        XDP_DROP
    );
    assert_eq!(
        entry(&f, "192.0.2.1/32").0,
        5,
        "a refreshed entry keeps its counter"
    );
    assert_eq!(
        run(&prog, &udp("198.51.100.7", "203.0.113.1", 53, 4), 1),
        XDP_PASS,
        "the refreshed expiry holds in the data path"
    );
    // Refreshing what is not blocked, or twice, changes nothing.
    for bad in [
        vec![e("203.0.113.9", None)],
        vec![e("192.0.2.2", None), e("192.0.2.2", Some(5))],
    ] {
        assert!(f
            .filter
            .apply(&Update {
                refresh: bad,
                ..Default::default()
            })
            .is_err());
    }
    assert_eq!(f.filter.entries().unwrap().len(), 2);
}

#[test]
fn updates_keep_counters_of_entries_that_stay() {
    let mut f = Installed::new("pf", &exact_cfg());
    f.block(&["192.0.2.1", "192.0.2.2", "2001:db8::1", "198.51.100.0/24"]);
    let prog = f.prog();
    for s in ["192.0.2.1", "192.0.2.2"] {
        assert_eq!(run(&prog, &udp(s, "203.0.113.1", 53, 4), 5), XDP_DROP);
    }
    assert_eq!(
        run(&prog, &udp("2001:db8::1", "2001:db8::2", 53, 4), 7),
        XDP_DROP
    );
    // Replace with a list that keeps .1 and the IPv6 address, drops .2 and the /24, adds 1,000 more.
    let mut list = vec!["192.0.2.1".to_string(), "2001:db8::1".to_string()];
    list.extend((0..1000).map(|i| format!("10.{}.{}.1", i / 256, i % 256)));
    let entries: Vec<BlockEntry> = list
        .iter()
        .map(|s| BlockEntry {
            prefix: Prefix::parse(s).unwrap(),
            ttl: None,
        })
        .collect();
    let r = f.filter.replace(&entries).unwrap();
    assert_eq!((r.added, r.removed, r.kept), (1000, 2, 2));
    assert_eq!(
        entry(&f, "192.0.2.1/32").0,
        5,
        "kept entry keeps its counter"
    );
    assert_eq!(entry(&f, "2001:db8::1/128").0, 7);
    assert_eq!(
        run(&prog, &udp("192.0.2.2", "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(
        run(&prog, &udp("198.51.100.9", "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(
        run(&prog, &udp("10.3.231.1", "203.0.113.1", 53, 4), 1),
        XDP_DROP
    );
    assert_eq!(
        run(&prog, &udp("10.3.232.1", "203.0.113.1", 53, 4), 1),
        XDP_PASS,
        "entry 1000 does not exist"
    );
    assert_eq!(
        run(&prog, &udp("192.0.2.1", "203.0.113.1", 53, 4), 1),
        XDP_DROP
    );
    assert_eq!(entry(&f, "192.0.2.1/32").0, 6);
    // A re-added entry starts from zero (its old id was cleared).
    f.block(&["192.0.2.2"]);
    assert_eq!(entry(&f, "192.0.2.2/32").0, 0);
}

#[test]
fn bad_requests_change_nothing() {
    let cfg = FilterConfig {
        max_entries: 4,
        max_other: 2,
        ..exact_cfg()
    };
    let mut f = Installed::new("pf", &cfg);
    f.block(&["192.0.2.1", "192.0.2.2"]);
    let before = f.filter.entries().unwrap().len();
    let e = |s: &str| BlockEntry {
        prefix: Prefix::parse(s).unwrap(),
        ttl: None,
    };
    // Already blocked (with a new one in the same request).
    let err = f
        .filter
        .block(&[e("192.0.2.3"), e("192.0.2.1")])
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyBlocked { .. }), "{err}");
    // Duplicate in the request.
    let err = f
        .filter
        .block(&[e("192.0.2.3"), e("192.0.2.3")])
        .unwrap_err();
    assert!(matches!(err, Error::Duplicate { .. }), "{err}");
    // Full table: 2 + 3 > 4.
    let err = f
        .filter
        .block(&[e("192.0.2.3"), e("192.0.2.4"), e("192.0.2.5")])
        .unwrap_err();
    assert!(matches!(err, Error::TableFull { cap: 4, .. }), "{err}");
    assert!(err.to_string().contains("--max-entries"), "{err}");
    let err = f
        .filter
        .block(&[e("10.0.0.0/8"), e("11.0.0.0/8"), e("12.0.0.0/8")])
        .unwrap_err();
    assert!(matches!(err, Error::TableFull { cap: 2, .. }), "{err}");
    // Unblocking something that is not there (with something that is).
    let err = f
        .filter
        .apply(&Update {
            remove: vec![
                Prefix::parse("192.0.2.1").unwrap(),
                Prefix::parse("192.0.2.9").unwrap(),
            ],
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(err, Error::NotBlocked { .. }), "{err}");
    let after = f.filter.entries().unwrap();
    assert_eq!(after.len(), before);
    let prog = f.prog();
    assert_eq!(
        run(&prog, &udp("192.0.2.1", "203.0.113.1", 53, 4), 1),
        XDP_DROP
    );
    assert_eq!(
        run(&prog, &udp("192.0.2.3", "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    // Exactly at capacity is fine.
    f.block(&["192.0.2.3", "192.0.2.4"]);
    assert_eq!(f.filter.stats().unwrap().entries.exact4, 4);
}

#[test]
fn large_table_finds_members_and_only_members() {
    let mut f = Installed::new("pf", &exact_cfg());
    let list: Vec<String> = (0..10_000u32)
        .map(|i| std::net::Ipv4Addr::from(0xac10_0000 + i * 7).to_string())
        .collect();
    let entries: Vec<BlockEntry> = list
        .iter()
        .map(|s| BlockEntry {
            prefix: Prefix::parse(s).unwrap(),
            ttl: None,
        })
        .collect();
    let r = f.filter.block(&entries).unwrap();
    let t = r.table.unwrap();
    assert_eq!((t.entries, t.slots), (10_000, 32_768));
    let prog = f.prog();
    for i in (0..10_000u32).step_by(97) {
        let member = std::net::Ipv4Addr::from(0xac10_0000 + i * 7).to_string();
        let other = std::net::Ipv4Addr::from(0xac10_0000 + i * 7 + 3).to_string();
        assert_eq!(
            run(&prog, &udp(&member, "203.0.113.1", 53, 4), 1),
            XDP_DROP,
            "{member}"
        );
        assert_eq!(
            run(&prog, &udp(&other, "203.0.113.1", 53, 4), 1),
            XDP_PASS,
            "{other}"
        );
    }
}

#[test]
fn replacing_a_full_table_reuses_the_removed_ids() {
    // 4 exact + 3 × 1 other = 7 entry ids: replacing 3 of 4 full-table
    // entries needs the ids of the removed ones (a two-phase update).
    let cfg = FilterConfig {
        max_entries: 4,
        max_other: 1,
        ..exact_cfg()
    };
    let mut f = Installed::new("pf", &cfg);
    f.block(&[
        "192.0.2.1",
        "192.0.2.2",
        "192.0.2.3",
        "192.0.2.4",
        "10.0.0.0/8",
        "2001:db8::1",
        "2001:db8::/32",
    ]);
    let prog = f.prog();
    assert_eq!(
        run(&prog, &udp("192.0.2.1", "203.0.113.1", 53, 4), 3),
        XDP_DROP
    );
    let list: Vec<BlockEntry> = [
        "192.0.2.1",
        "198.51.100.1",
        "198.51.100.2",
        "198.51.100.3",
        "11.0.0.0/8",
    ]
    .iter()
    .map(|s| BlockEntry {
        prefix: Prefix::parse(s).unwrap(),
        ttl: None,
    })
    .collect();
    let r = f.filter.replace(&list).unwrap();
    assert_eq!((r.added, r.removed, r.kept), (4, 6, 1));
    assert_eq!(
        entry(&f, "192.0.2.1/32").0,
        3,
        "kept entry keeps its counter"
    );
    for (src, want) in [
        ("192.0.2.1", XDP_DROP),
        ("192.0.2.2", XDP_PASS),
        ("198.51.100.3", XDP_DROP),
        ("10.1.1.1", XDP_PASS),
        ("11.1.1.1", XDP_DROP),
    ] {
        assert_eq!(
            run(&prog, &udp(src, "203.0.113.1", 53, 4), 1),
            want,
            "{src}"
        );
    }
    assert_eq!(
        run(&prog, &udp("2001:db8::1", "2001:db8::2", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(f.filter.entries().unwrap().len(), 5);
}

/// IPv6 UDP from `src` behind `n` destination-options headers; with
/// `frag_later`, a later fragment whose bytes after the fragment header
/// are not a UDP header.
fn v6_ext(src: &str, n: usize, frag_later: bool) -> Frame {
    let f = (0..n).fold(Frame::udp(src, "2001:db8::ff", 40000, 53), |f, _| {
        f.ext(Ext::DestOpts(0))
    });
    if frag_later {
        f.fragment(64, false)
    } else {
        f
    }
}

#[test]
fn ipv6_malformed_and_fragments() {
    let mut f = Installed::new("pf", &exact_cfg());
    f.block(&["2001:db8::66"]);
    let prog = f.prog();
    // Eight extension headers are walked (RFC 8200's order has six); nine are too deep.
    let clean = "2001:db8::1";
    assert_eq!(run(&prog, &v6_ext(clean, 8, false).build(), 1), XDP_PASS);
    assert_eq!(run(&prog, &v6_ext(clean, 9, false).build(), 1), XDP_DROP);
    // A blacklisted source is dropped as blacklisted even behind too many headers.
    let bl = "2001:db8::66";
    assert_eq!(run(&prog, &v6_ext(bl, 9, false).build(), 1), XDP_DROP);
    // A chain cut short: truncated.
    let cut = v6_ext(clean, 3, false).truncate(14 + 40 + 12).build();
    assert_eq!(run(&prog, &cut, 1), XDP_DROP);
    // Later fragments: no L4 read; blacklisted dropped, clean passed.
    assert_eq!(run(&prog, &v6_ext(bl, 1, true).build(), 1), XDP_DROP);
    assert_eq!(run(&prog, &v6_ext(clean, 1, true).build(), 1), XDP_PASS);
    let s = f.filter.stats().unwrap();
    assert_eq!(s.dropped("too_deep"), 1);
    assert_eq!(s.dropped("truncated"), 1);
    assert_eq!(s.dropped("blacklist"), 2);
    assert_eq!(s.passed("clean"), 2);
    assert_eq!(entry(&f, "2001:db8::66/128").0, 2);
}

/// Every parse path of bpf/common/parse.h and every malformed frame, through
/// the filter: the verdict and the one reason counted. Clean source
/// 192.0.2.1 / 2001:db8::1, blacklisted 192.0.2.66 / 2001:db8::66.
#[test]
fn every_parse_path_and_malformed_frame_has_its_verdict_and_reason() {
    let mut f = Installed::new("pf", &exact_cfg());
    f.block(&["192.0.2.66", "2001:db8::66"]);
    let prog = f.prog();
    let (c4, b4, d4) = ("192.0.2.1", "192.0.2.66", "198.51.100.1");
    let (c6, b6, d6) = ("2001:db8::1", "2001:db8::66", "2001:db8::ff");
    let udp4 = |src: &str| Frame::udp(src, d4, 40000, 53).zeros(10);
    let tcp4 = |src: &str| Frame::tcp(src, d4, 40000, 80).flags(tcp::SYN);
    let udp6 = |src: &str| Frame::udp(src, d6, 40000, 53);
    let tcp6 = |src: &str| Frame::tcp(src, d6, 40000, 80).flags(tcp::SYN);
    let icmp4 = Frame::icmp_echo(c4, d4).zeros(8);
    let qinq = |f: Frame| f.vlan_tag(0x88a8, 10).vlan(11);
    // 3 bytes of a TCP header after the IPv4 header.
    let tcp_start = |src: &str| Frame::ip(src, d4, 6).payload(&[0x9c, 0x40, 0]);
    // A later IPv6 fragment (offset 512 bytes) carrying 3 bytes.
    let later6 = |src: &str| {
        Frame::ip(src, d6, 6)
            .payload(&[1, 2, 3])
            .fragment(64, false)
    };
    let full_chain = |f: Frame| {
        f.ext(Ext::HopByHop(0))
            .ext(Ext::Routing(0))
            .ext(Ext::DestOpts(0))
            .ext(Ext::Auth(0))
            .fragment(0, true)
    };
    let tags = |f: Frame, n: u16| (0..n).fold(f, |f, t| f.vlan(10 + t));
    let labels = |f: Frame, n: u32| (0..n).fold(f, |f, l| f.mpls(16 + l));
    // RFC 8200's order with every header, and Destination Options twice more.
    let seven = full_chain(udp6(c6))
        .ext(Ext::DestOpts(0))
        .ext(Ext::DestOpts(0));
    let nine = (0..8).fold(udp6(c6).ext(Ext::HopByHop(0)), |f, _| {
        f.ext(Ext::DestOpts(0))
    });
    let pass = |name: &str, f: Frame| ProgCase::new(name, f.build(), XDP_PASS, "pass.clean");
    let tunnel = |name: &str, f: Frame, kind: &str| {
        ProgCase::new(name, f.build(), XDP_PASS, format!("pass.encap_{kind}"))
    };
    let drop = |name: &str, f: Frame, reason: &str| {
        ProgCase::new(name, f.build(), XDP_DROP, format!("drop.{reason}"))
    };
    let cases = vec![
        // Parse paths, clean source: the feature stage gets them.
        pass("ipv4 udp", udp4(c4)),
        pass("ipv4 tcp", tcp4(c4)),
        pass("ipv4 icmp", icmp4.clone()),
        pass("ipv4 options", udp4(c4).ipv4_options(&[1; 8])),
        pass("ipv4 options max (40 B)", tcp4(c4).ipv4_options(&[1; 40])),
        pass("802.1Q", udp4(c4).vlan(10)),
        pass("802.1ad + 802.1Q", qinq(udp4(c4))),
        pass("three vlan tags", tags(udp4(c4), 3)),
        pass("four vlan tags", tags(udp4(c4), 4)),
        pass("ipv4 with Ethernet padding after it", udp4(c4).pad_to(80)),
        pass("mpls ipv4", udp4(c4).mpls(16)),
        pass("mpls two labels ipv6", labels(udp6(c6), 2)),
        pass("mpls eight labels", labels(udp4(c4), 8)),
        pass("pppoe ipv4", udp4(c4).pppoe(7)),
        pass("pppoe ipv6", tcp6(c6).pppoe(7)),
        pass("802.1Q + pppoe ipv4", udp4(c4).pppoe(7).vlan(10)),
        ProgCase::new(
            "pppoe lcp",
            Frame::ethertype(0x8864)
                .payload(&[0x11, 0, 0, 7, 0, 6, 0xc0, 0x21, 1, 1, 0, 4])
                .build(),
            XDP_PASS,
            "pass.not_ip",
        ),
        pass("ipv6 seven extension headers", seven),
        pass("ipv6 eight extension headers", v6_ext(c6, 8, false)),
        // Tunnels: passed and counted by kind (the inner source is not checked).
        tunnel("gre", ip4_carrying(c4, 47, &GRE_HDR, &udp4(c4)), "gre"),
        tunnel("ipip", ip4_carrying(c4, 4, &[], &udp4(c4)), "ipip"),
        tunnel("6in4", ip4_carrying(c4, 41, &[], &udp6(c6)), "ipip"),
        tunnel("vxlan", udp_carrying(4789, &VXLAN_HDR, &udp4(c4)), "vxlan"),
        tunnel(
            "geneve",
            udp_carrying(6081, &GENEVE_HDR, &udp4(c4)),
            "geneve",
        ),
        tunnel(
            "gre later fragment",
            Frame::ip(c4, d4, 47)
                .payload(&[0, 0, 0x08, 0x00, 0x45, 0, 0, 28])
                .fragment(4, false),
            "gre",
        ),
        // Control word (first nibble 0), then an Ethernet frame.
        tunnel(
            "mpls ethernet pseudowire",
            Frame::ethertype(0x8847)
                .payload(&[&[0, 1, 1, 64, 0, 0, 0, 0][..], &udp4(c4).build()].concat()),
            "mpls",
        ),
        pass("ipv4 first fragment", udp4(c4).fragment(0, true)),
        // 3 bytes after the header: as TCP it would be truncated; as a later fragment it has no L4 header.
        pass("ipv4 later fragment", tcp_start(c4).fragment(16, false)),
        drop(
            "ipv4 not-a-fragment, same bytes",
            tcp_start(c4),
            "truncated",
        ),
        pass("ipv6 udp", udp6(c6)),
        pass("ipv6 tcp", tcp6(c6)),
        pass("ipv6 icmpv6", Frame::icmp_echo(c6, d6)),
        pass(
            "ipv6 hop+routing+dst+ah+frag(first) udp",
            full_chain(udp6(c6)),
        ),
        pass("ipv6 later fragment", later6(c6)),
        // Its fragmentable part starts with what its fragment header calls a
        // destination-options header: those bytes are fragment payload,
        // never walked (here they would announce 2 KB).
        pass(
            "ipv6 later fragment, payload looks like a header",
            Frame::ip(c6, d6, 60)
                .payload(&[43, 255, 0, 0, 0, 0, 0, 0])
                .fragment(64, false),
        ),
        pass(
            "ipv6 esp (no L4 read)",
            Frame::ip(c6, d6, 50).payload(&[0, 0, 0, 1]),
        ),
        ProgCase::new(
            "arp",
            Frame::arp([192, 0, 2, 1], [192, 0, 2, 2]).build(),
            XDP_PASS,
            "pass.not_ip",
        ),
        ProgCase::new(
            "lldp",
            Frame::ethertype(0x88cc).zeros(28).build(),
            XDP_PASS,
            "pass.not_ip",
        ),
        // Malformed, clean source.
        // (A frame shorter than its Ethernet header never reaches XDP: BPF_PROG_RUN refuses it too.)
        drop("vlan tag cut", udp4(c4).vlan(10).truncate(16), "truncated"),
        drop("ipv4 header cut", udp4(c4).truncate(14 + 12), "truncated"),
        // A 60-byte header announced; the frame holds 28 + 10 after it.
        drop(
            "ipv4 options beyond the frame",
            udp4(c4).ihl(15),
            "truncated",
        ),
        drop("ipv4 version 5", udp4(c4).version(5), "bad_header"),
        drop(
            "ipv4 total length < header",
            udp4(c4).ip_len(19),
            "bad_header",
        ),
        drop("tcp cut", tcp4(c4).truncate(14 + 20 + 10), "truncated"),
        drop(
            "tcp data offset 4",
            tcp4(c4).tcp_data_offset(4),
            "bad_header",
        ),
        drop("udp cut", udp4(c4).truncate(14 + 20 + 6), "truncated"),
        drop("icmp cut", icmp4.truncate(14 + 20 + 2), "truncated"),
        drop("five vlan tags", tags(udp4(c4), 5), "too_deep"),
        // The IP packet is longer than the frame: cut short on the way.
        drop(
            "ipv4 shorter than its total length",
            udp4(c4).ip_len(20 + 8 + 11),
            "truncated",
        ),
        drop(
            "ipv6 shorter than its payload length",
            udp6(c6).ip_len(9),
            "truncated",
        ),
        drop("mpls nine labels", labels(udp4(c4), 9), "too_deep"),
        drop(
            "mpls label cut",
            labels(udp4(c4), 2).truncate(16),
            "truncated",
        ),
        drop(
            "pppoe version 2",
            Frame::ethertype(0x8864).payload(&[0x21, 0, 0, 7, 0, 2, 0, 0x21]),
            "bad_header",
        ),
        drop(
            "pppoe header cut",
            udp4(c4).pppoe(7).truncate(20),
            "truncated",
        ),
        drop(
            "ipv6 header cut",
            udp6(c6).zeros(4).version(4).truncate(14 + 30),
            "truncated",
        ),
        drop("ipv6 version 4", udp6(c6).zeros(4).version(4), "bad_header"),
        drop(
            "ipv6 tcp data offset 4",
            tcp6(c6).tcp_data_offset(4),
            "bad_header",
        ),
        drop(
            "ipv6 icmpv6 cut",
            Frame::icmp_echo(c6, d6).truncate(14 + 40 + 3),
            "truncated",
        ),
        drop(
            "ipv6 ext header cut",
            udp6(c6).ext(Ext::HopByHop(0)).truncate(14 + 40 + 1),
            "truncated",
        ),
        drop(
            "ipv6 ah cut",
            Frame::ip(c6, d6, 17)
                .ext(Ext::Auth(0))
                .truncate(14 + 40 + 8),
            "truncated",
        ),
        drop(
            "ipv6 fragment header cut",
            Frame::ip(c6, d6, 17)
                .fragment(0, true)
                .truncate(14 + 40 + 6),
            "truncated",
        ),
        drop("ipv6 nine extension headers", nine, "too_deep"),
        // Blacklisted sources: dropped as blacklisted whatever the path or the rest of the frame.
        drop("bl ipv4 udp", udp4(b4), "blacklist"),
        drop(
            "bl ipv4 options",
            udp4(b4).ipv4_options(&[1; 12]),
            "blacklist",
        ),
        drop("bl 802.1ad + 802.1Q", qinq(udp4(b4)), "blacklist"),
        drop(
            "bl ipv4 later fragment",
            tcp_start(b4).fragment(16, false),
            "blacklist",
        ),
        drop("bl tcp cut", tcp4(b4).truncate(14 + 20 + 10), "blacklist"),
        drop("bl ipv6 tcp", tcp6(b6), "blacklist"),
        drop(
            "bl ipv6 behind ext headers",
            udp6(b6)
                .ext(Ext::HopByHop(0))
                .ext(Ext::Routing(0))
                .ext(Ext::Auth(0)),
            "blacklist",
        ),
        drop("bl ipv6 later fragment", later6(b6), "blacklist"),
        drop("bl three vlan tags", tags(udp4(b4), 3), "blacklist"),
        drop("bl mpls ipv4", labels(udp4(b4), 3), "blacklist"),
        drop("bl pppoe ipv4", udp4(b4).pppoe(7), "blacklist"),
        drop("bl pppoe ipv6", udp6(b6).pppoe(7), "blacklist"),
        drop(
            "bl ipv6 behind eight headers",
            v6_ext(b6, 8, false),
            "blacklist",
        ),
        drop(
            "bl gre (outer source)",
            ip4_carrying(b4, 47, &GRE_HDR, &udp4(c4)),
            "blacklist",
        ),
        drop(
            "bl ipv4 shorter than its total length",
            udp4(b4).ip_len(200),
            "blacklist",
        ),
        // The source of a header that is itself cut is not trusted: a malformed frame, not a match.
        drop(
            "bl ipv4 header cut after saddr",
            udp4(b4).truncate(14 + 16),
            "truncated",
        ),
        drop(
            "bl ipv6 header cut after saddr",
            udp6(b6).truncate(14 + 38),
            "truncated",
        ),
    ];
    let runner = Runner::new(prog.as_raw_fd(), || f.reasons());
    for c in &cases {
        runner.run(&c.clone().unchanged());
    }
    let bl = cases
        .iter()
        .filter(|c| c.reason.as_deref() == Some("drop.blacklist"))
        .count() as u64;
    assert_eq!(
        entry(&f, "192.0.2.66/32").0 + entry(&f, "2001:db8::66/128").0,
        bl
    );
}

/// 600,000 exact entries: 2^21 slots, the size from which the data path
/// stores the table narrow (16-bit slots, see bpf/ddos/abi.h). Members
/// drop and count, their neighbours pass, a TTL retires a narrow slot in
/// place, an update republishes it.
#[test]
fn narrow_table_finds_members_counts_and_retires() {
    use std::net::{IpAddr, Ipv4Addr};
    let n = 600_000u32;
    let cfg = FilterConfig {
        max_entries: n,
        ..exact_cfg()
    };
    let mut f = Installed::new("pf", &cfg);
    let addr = |i: u32| Ipv4Addr::from(0x0a00_0000 + i * 5).to_string();
    let mut entries: Vec<BlockEntry> = (0..n)
        .map(|i| BlockEntry {
            prefix: Prefix::host(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i * 5))),
            ttl: None,
        })
        .collect();
    // Long enough for the load and the probes below on a busy machine.
    let ttl = Duration::from_secs(6);
    entries[7].ttl = Some(ttl);
    let t = f.filter.block(&entries).unwrap().table.unwrap();
    assert_eq!((t.entries, t.slots), (n, 1 << 21));
    let prog = f.prog();
    let probe: Vec<u32> = (0..n).step_by(4999).chain([7, n - 1]).collect();
    for &i in &probe {
        let m = addr(i);
        assert_eq!(
            run(&prog, &udp(&m, "203.0.113.1", 53, 4), 2),
            XDP_DROP,
            "{m}"
        );
        for d in 1..5 {
            let o = Ipv4Addr::from(0x0a00_0000 + i * 5 + d).to_string();
            assert_eq!(
                run(&prog, &udp(&o, "203.0.113.1", 53, 4), 1),
                XDP_PASS,
                "{o}"
            );
        }
    }
    let listed = f.filter.entries().unwrap();
    let counts: std::collections::HashMap<Prefix, u64> =
        listed.iter().map(|e| (e.prefix, e.packets)).collect();
    // The TTL runs from when the filter took the update, which may be
    // well after the call began on a busy machine: its own expiry.
    let expires_in = listed
        .iter()
        .find(|e| e.prefix == Prefix::parse(&addr(7)).unwrap())
        .and_then(|e| e.expires_in_s)
        .expect("the TTL entry has an expiry");
    let listed_at = std::time::Instant::now();
    for &i in &probe {
        assert_eq!(counts[&Prefix::parse(&addr(i)).unwrap()], 2, "{}", addr(i));
    }
    assert_eq!(counts.values().sum::<u64>(), 2 * probe.len() as u64);

    // The TTL entry expires: its narrow slot is retired by the data path.
    assert!(expires_in <= ttl.as_secs_f64(), "{expires_in}");
    std::thread::sleep(
        (listed_at + Duration::from_secs_f64(expires_in) + Duration::from_millis(100))
            .saturating_duration_since(std::time::Instant::now()),
    );
    assert_eq!(
        run(&prog, &udp(&addr(7), "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(
        run(&prog, &udp(&addr(7), "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(f.filter.stats().unwrap().expired, 1);
    assert_eq!(
        run(&prog, &udp(&addr(8), "203.0.113.1", 53, 4), 1),
        XDP_DROP
    );

    // An update republishes the narrow table without the removed entries.
    f.filter
        .unblock(&[
            Prefix::parse(&addr(0)).unwrap(),
            Prefix::parse(&addr(n - 1)).unwrap(),
        ])
        .unwrap();
    assert_eq!(
        run(&prog, &udp(&addr(0), "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(
        run(&prog, &udp(&addr(n - 1), "203.0.113.1", 53, 4), 1),
        XDP_PASS
    );
    assert_eq!(
        run(&prog, &udp(&addr(4999), "203.0.113.1", 53, 4), 1),
        XDP_DROP
    );
    let s = f.filter.stats().unwrap();
    assert_eq!(
        (s.entries.exact4, s.table.slots),
        ((n - 3) as usize, 1 << 21)
    );
}
