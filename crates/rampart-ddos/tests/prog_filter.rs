//! BPF_PROG_TEST_RUN tests of xdp_filter: verdicts, drop reasons and
//! per-entry counters for IPv4/IPv6, exact/CIDR, malformed frames, the
//! sampled counter estimate, TTL expiry in the data path, and updates that
//! keep counters.

mod common;

use std::time::Duration;

use common::*;
use rampart_ddos::filter::{FilterConfig, Update};
use rampart_ddos::{BlockEntry, Error, Prefix};

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
    let good = udp("192.0.2.1", "198.51.100.1", 53, 10);
    // Truncated inside UDP, bad IHL, five VLAN tags, not IP.
    assert_eq!(run(&prog, &good[..14 + 20 + 4], 1), XDP_DROP);
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x44;
    assert_eq!(run(&prog, &bad_ihl, 1), XDP_DROP);
    assert_eq!(run(&prog, &vlan(&good, 5), 1), XDP_DROP);
    assert_eq!(run(&prog, &arp(), 1), XDP_PASS);
    // Up to four VLAN tags are walked: clean passes, blacklisted drops.
    assert_eq!(run(&prog, &vlan(&good, 2), 1), XDP_PASS);
    assert_eq!(
        run(
            &prog,
            &vlan(&udp("192.0.2.66", "198.51.100.1", 53, 10), 2),
            1
        ),
        XDP_DROP
    );
    // A blacklisted source with a truncated L4 header is dropped as blacklisted.
    let b = udp("192.0.2.66", "198.51.100.1", 53, 10);
    assert_eq!(run(&prog, &b[..14 + 20 + 3], 1), XDP_DROP);
    // A later IPv4 fragment from a blacklisted source: no L4 header, still dropped.
    let mut frag = udp("192.0.2.66", "198.51.100.1", 53, 16);
    frag[14 + 7] = 0x03;
    assert_eq!(run(&prog, &frag, 1), XDP_DROP);
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
    let good = udp("192.0.2.1", "198.51.100.1", 53, 10);
    assert_eq!(run(&prog, &good[..14 + 20 + 4], 1), XDP_PASS);
    assert_eq!(run(&prog, &vlan(&good, 5), 1), XDP_PASS);
    let s = f.filter.stats().unwrap();
    assert_eq!(s.passed("malformed"), 2);
    assert_eq!(s.dropped("truncated") + s.dropped("too_deep"), 0);
}

#[test]
fn drop_encap_drops_every_tunnel_and_keeps_the_rest() {
    let cfg = FilterConfig {
        drop_encap: true,
        ..exact_cfg()
    };
    let f = Installed::new("pf", &cfg);
    let prog = f.prog();
    let inner = udp("192.0.2.1", "198.51.100.1", 53, 10);
    let tunnels = [
        ip4_carrying(&inner, 47, &[0, 0, 0x08, 0x00]),
        ip4_carrying(&inner, 4, &[]),
        udp_carrying(&inner, 4789, &[8, 0, 0, 0, 0, 0, 42, 0], true),
        udp_carrying(&inner, 6081, &[0, 0, 0x65, 0x58, 0, 0, 42, 0], true),
    ];
    for t in &tunnels {
        assert_eq!(run(&prog, t, 1), XDP_DROP);
    }
    // Plain traffic, MPLS and PPPoE carrying IP are not tunnels.
    for p in [inner.clone(), mpls(&inner, 2), pppoe(&inner, 0x0021)] {
        assert_eq!(run(&prog, &p, 1), XDP_PASS);
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
    // Stricter than the defaults: two VLAN tags, three IPv6 extension headers.
    let cfg = FilterConfig {
        max_vlans: 2,
        max_v6_ext: 3,
        ..exact_cfg()
    };
    let f = Installed::new("pf", &cfg);
    let prog = f.prog();
    let good = udp("192.0.2.1", "198.51.100.1", 53, 10);
    assert_eq!(run(&prog, &vlan(&good, 2), 1), XDP_PASS);
    assert_eq!(run(&prog, &vlan(&good, 3), 1), XDP_DROP);
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 3, false), 1), XDP_PASS);
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 4, false), 1), XDP_DROP);
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
    assert_eq!(run(&prog, &vlan(&good, 8), 1), XDP_PASS);
    assert_eq!(run(&prog, &vlan(&good, 9), 1), XDP_DROP);
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 16, false), 1), XDP_PASS);
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 17, false), 1), XDP_DROP);
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

/// IPv6 header + a chain of `n` destination-options headers + UDP.
fn v6_ext(src: &str, n: usize, frag_later: bool) -> Vec<u8> {
    let s: std::net::Ipv6Addr = src.parse().unwrap();
    let d: std::net::Ipv6Addr = "2001:db8::ff".parse().unwrap();
    let first = if frag_later { 44u8 } else { 17 };
    let mut payload = Vec::new();
    for i in 0..n {
        // Destination options: next header, length 0 (8 bytes), one PadN option.
        let next = if i + 1 < n { 60 } else { first };
        payload.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
    }
    if frag_later {
        // Fragment header, offset 64 bytes: what follows is not a UDP header.
        payload.extend_from_slice(&[17, 0, 0x02, 0x00, 0, 0, 0, 1]);
    }
    payload.extend_from_slice(&[0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
    let next0 = if n > 0 { 60 } else { first };
    let mut v = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    v.extend_from_slice(&[0x60, 0, 0, 0]);
    v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    v.extend_from_slice(&[next0, 64]);
    v.extend_from_slice(&s.octets());
    v.extend_from_slice(&d.octets());
    v.extend_from_slice(&payload);
    v
}

#[test]
fn ipv6_malformed_and_fragments() {
    let mut f = Installed::new("pf", &exact_cfg());
    f.block(&["2001:db8::66"]);
    let prog = f.prog();
    // Eight extension headers are walked (RFC 8200's order has six); nine are too deep.
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 8, false), 1), XDP_PASS);
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 9, false), 1), XDP_DROP);
    // A blacklisted source is dropped as blacklisted even behind too many headers.
    assert_eq!(run(&prog, &v6_ext("2001:db8::66", 9, false), 1), XDP_DROP);
    // A chain cut short: truncated.
    let cut = v6_ext("2001:db8::1", 3, false);
    assert_eq!(run(&prog, &cut[..14 + 40 + 12], 1), XDP_DROP);
    // Later fragments: no L4 read; blacklisted dropped, clean passed.
    assert_eq!(run(&prog, &v6_ext("2001:db8::66", 1, true), 1), XDP_DROP);
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 1, true), 1), XDP_PASS);
    let s = f.filter.stats().unwrap();
    assert_eq!(s.dropped("too_deep"), 1);
    assert_eq!(s.dropped("truncated"), 1);
    assert_eq!(s.dropped("blacklist"), 2);
    assert_eq!(s.passed("clean"), 2);
    assert_eq!(entry(&f, "2001:db8::66/128").0, 2);
}

/// IPv6 frame from `src`: extension headers `exts` (type, body without its
/// next-header byte, which is filled in) then `l4` (protocol, bytes).
fn v6_chain(src: &str, exts: &[(u8, Vec<u8>)], l4: (u8, &[u8])) -> Vec<u8> {
    let s: std::net::Ipv6Addr = src.parse().unwrap();
    let d: std::net::Ipv6Addr = "2001:db8::ff".parse().unwrap();
    let mut payload = Vec::new();
    for (i, (_, body)) in exts.iter().enumerate() {
        let next = exts.get(i + 1).map(|e| e.0).unwrap_or(l4.0);
        payload.push(next);
        payload.extend_from_slice(body);
    }
    payload.extend_from_slice(l4.1);
    let first = exts.first().map(|e| e.0).unwrap_or(l4.0);
    let mut v = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    v.extend_from_slice(&[0x60, 0, 0, 0]);
    v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    v.extend_from_slice(&[first, 64]);
    v.extend_from_slice(&s.octets());
    v.extend_from_slice(&d.octets());
    v.extend_from_slice(&payload);
    v
}

/// IPv4 frame with `opt` bytes of options (a multiple of 4) inserted.
fn v4_options(frame: &[u8], opt: usize) -> Vec<u8> {
    let mut v = frame[..34].to_vec();
    v.extend(std::iter::repeat_n(1u8, opt)); // NOPs
    v.extend_from_slice(&frame[34..]);
    v[14] = 0x45 + (opt / 4) as u8;
    let tot = u16::from_be_bytes([v[16], v[17]]) + opt as u16;
    v[16..18].copy_from_slice(&tot.to_be_bytes());
    v
}

/// IPv4 frame cut to `l4` bytes after the IP header, fragment field `frag`.
fn v4_frag(frame: &[u8], l4: usize, frag: u16) -> Vec<u8> {
    let mut v = frame[..34 + l4].to_vec();
    v[16..18].copy_from_slice(&((20 + l4) as u16).to_be_bytes());
    v[20..22].copy_from_slice(&frag.to_be_bytes());
    v
}

/// An IPv4 frame from 203.0.113.9 to 198.51.100.1 whose payload is
/// `header` then the IP packet inside `inner` (GRE, IP in IP).
fn ip4_carrying(inner: &[u8], proto: u8, header: &[u8]) -> Vec<u8> {
    let mut payload = header.to_vec();
    payload.extend_from_slice(&inner[14..]);
    let mut v = udp("203.0.113.9", "198.51.100.1", 53, 0)[..34].to_vec();
    v.extend_from_slice(&payload);
    v[16..18].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    v[14 + 9] = proto;
    v
}

/// A UDP packet to `dport` whose payload is `header` then `inner` (with its
/// Ethernet header when `ethernet`): VXLAN, Geneve.
fn udp_carrying(inner: &[u8], dport: u16, header: &[u8], ethernet: bool) -> Vec<u8> {
    let mut payload = header.to_vec();
    payload.extend_from_slice(if ethernet { inner } else { &inner[14..] });
    let mut v = udp("203.0.113.9", "198.51.100.1", dport, payload.len());
    let n = v.len();
    v[n - payload.len()..].copy_from_slice(&payload);
    v
}

/// Which counter one run of `pkt` advanced: ("drop"|"pass", reason).
fn verdict_reason(f: &Installed, prog: &std::os::fd::OwnedFd, pkt: &[u8]) -> (u32, String) {
    let before = f.filter.stats().unwrap();
    let v = run(prog, pkt, 1);
    let after = f.filter.stats().unwrap();
    let mut moved = Vec::new();
    for (kind, b, a) in [
        ("drop", &before.drops, &after.drops),
        ("pass", &before.passes, &after.passes),
    ] {
        for ((n, x), (_, y)) in b.iter().zip(a.iter()) {
            if y.packets != x.packets {
                assert_eq!(y.packets - x.packets, 1, "{kind}.{n}");
                assert_eq!(y.bytes - x.bytes, pkt.len() as u64, "{kind}.{n} bytes");
                moved.push(format!("{kind}.{n}"));
            }
        }
    }
    assert_eq!(moved.len(), 1, "exactly one reason counted, got {moved:?}");
    (v, moved.pop().unwrap())
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
    let udp4 = udp(c4, d4, 53, 10);
    let tcp4 = tcp(c4, d4, 80, "S");
    let icmp = icmp4(c4, d4);
    let udp_l4: &[u8] = &[0x9c, 0x40, 0, 53, 0, 8, 0, 0];
    let mut tcp_l4 = vec![
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff,
    ];
    tcp_l4.extend_from_slice(&[0, 0, 0, 0]);
    let icmp6_l4: &[u8] = &[128, 0, 0, 0, 0, 1, 0, 1];
    let hop = (0u8, vec![0, 1, 4, 0, 0, 0, 0]);
    let routing = (43u8, vec![0, 0, 0, 0, 0, 0, 0]);
    let dst = (60u8, vec![0, 1, 4, 0, 0, 0, 0]);
    let ah = (51u8, vec![1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
    let frag_first = (44u8, vec![0, 0x00, 0x01, 0, 0, 0, 7]);
    let frag_later = (44u8, vec![0, 0x02, 0x00, 0, 0, 0, 7]);
    let mut qinq = vlan(&udp4, 2);
    qinq[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
    let mut lldp = arp();
    lldp[12..14].copy_from_slice(&0x88ccu16.to_be_bytes());
    let mut bad_ver4 = udp4.clone();
    bad_ver4[14] = 0x55;
    let mut short_tot = udp4.clone();
    short_tot[16..18].copy_from_slice(&19u16.to_be_bytes());
    let mut tcp_doff = tcp4.clone();
    tcp_doff[14 + 20 + 12] = 0x40;
    let mut bad_ver6 = udp(c6, d6, 53, 4);
    bad_ver6[14] = 0x40;
    let mut ihl15 = udp4.clone();
    ihl15[14] = 0x4f; // 60-byte header announced, frame holds 28 + 10 after it
    let mut tcp6_doff = v6_chain(c6, &[], (6, &tcp_l4));
    tcp6_doff[14 + 40 + 12] = 0x40;
    // A later IPv6 fragment whose fragmentable part starts with what its
    // fragment header calls a destination-options header: those bytes are
    // fragment payload, never walked (here they would announce 2 KB).
    let frag_later_dst = (44u8, vec![0, 0x02, 0x00, 0, 0, 0, 7]);
    let later6_payload: &[u8] = &[43, 255, 0, 0, 0, 0, 0, 0];

    let cases: Vec<(&str, Vec<u8>, u32, &str)> = vec![
        // Parse paths, clean source: the feature stage gets them.
        ("ipv4 udp", udp4.clone(), XDP_PASS, "pass.clean"),
        ("ipv4 tcp", tcp4.clone(), XDP_PASS, "pass.clean"),
        ("ipv4 icmp", icmp.clone(), XDP_PASS, "pass.clean"),
        ("ipv4 options", v4_options(&udp4, 8), XDP_PASS, "pass.clean"),
        (
            "ipv4 options max (40 B)",
            v4_options(&tcp4, 40),
            XDP_PASS,
            "pass.clean",
        ),
        ("802.1Q", vlan(&udp4, 1), XDP_PASS, "pass.clean"),
        ("802.1ad + 802.1Q", qinq.clone(), XDP_PASS, "pass.clean"),
        ("three vlan tags", vlan(&udp4, 3), XDP_PASS, "pass.clean"),
        ("four vlan tags", vlan(&udp4, 4), XDP_PASS, "pass.clean"),
        (
            "ipv4 with Ethernet padding after it",
            {
                let mut v = udp(c4, d4, 53, 0);
                v.extend_from_slice(&[0; 18]);
                v
            },
            XDP_PASS,
            "pass.clean",
        ),
        ("mpls ipv4", mpls(&udp4, 1), XDP_PASS, "pass.clean"),
        (
            "mpls two labels ipv6",
            mpls(&v6_chain(c6, &[], (17, udp_l4)), 2),
            XDP_PASS,
            "pass.clean",
        ),
        ("mpls eight labels", mpls(&udp4, 8), XDP_PASS, "pass.clean"),
        ("pppoe ipv4", pppoe(&udp4, 0x0021), XDP_PASS, "pass.clean"),
        (
            "pppoe ipv6",
            pppoe(&v6_chain(c6, &[], (6, &tcp_l4)), 0x0057),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "802.1Q + pppoe ipv4",
            vlan(&pppoe(&udp4, 0x0021), 1),
            XDP_PASS,
            "pass.clean",
        ),
        ("pppoe lcp", pppoe(&udp4, 0xc021), XDP_PASS, "pass.not_ip"),
        (
            "ipv6 seven extension headers",
            v6_chain(
                c6,
                &[
                    hop.clone(),
                    dst.clone(),
                    routing.clone(),
                    ah.clone(),
                    frag_first.clone(),
                    dst.clone(),
                    dst.clone(),
                ],
                (17, udp_l4),
            ),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "ipv6 eight extension headers",
            v6_ext(c6, 8, false),
            XDP_PASS,
            "pass.clean",
        ),
        // Tunnels: passed and counted by kind (the inner source is not checked).
        (
            "gre",
            ip4_carrying(&udp4, 47, &[0, 0, 0x08, 0x00]),
            XDP_PASS,
            "pass.encap_gre",
        ),
        (
            "ipip",
            ip4_carrying(&udp4, 4, &[]),
            XDP_PASS,
            "pass.encap_ipip",
        ),
        (
            "6in4",
            ip4_carrying(&v6_chain(c6, &[], (17, udp_l4)), 41, &[]),
            XDP_PASS,
            "pass.encap_ipip",
        ),
        (
            "vxlan",
            udp_carrying(&udp4, 4789, &[8, 0, 0, 0, 0, 0, 42, 0], true),
            XDP_PASS,
            "pass.encap_vxlan",
        ),
        (
            "geneve",
            udp_carrying(&udp4, 6081, &[0, 0, 0x65, 0x58, 0, 0, 42, 0], true),
            XDP_PASS,
            "pass.encap_geneve",
        ),
        (
            "gre later fragment",
            v4_frag(&ip4_carrying(&udp4, 47, &[0, 0, 0x08, 0x00]), 8, 0x0004),
            XDP_PASS,
            "pass.encap_gre",
        ),
        (
            "mpls ethernet pseudowire",
            {
                // Control word (first nibble 0), then an Ethernet frame.
                let mut pw = vec![0u8; 4];
                pw.extend_from_slice(&udp4);
                let mut v = udp4[..12].to_vec();
                v.extend_from_slice(&0x8847u16.to_be_bytes());
                v.extend_from_slice(&((16u32 << 12) | (1 << 8) | 64).to_be_bytes());
                v.extend_from_slice(&pw);
                v
            },
            XDP_PASS,
            "pass.encap_mpls",
        ),
        (
            "ipv4 first fragment",
            v4_frag(&udp4, 18, 0x2000),
            XDP_PASS,
            "pass.clean",
        ),
        // 3 bytes after the header: as TCP it would be truncated; as a later fragment it has no L4 header.
        (
            "ipv4 later fragment",
            v4_frag(&tcp4, 3, 0x0010),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "ipv4 not-a-fragment, same bytes",
            v4_frag(&tcp4, 3, 0),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "ipv6 udp",
            v6_chain(c6, &[], (17, udp_l4)),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "ipv6 tcp",
            v6_chain(c6, &[], (6, &tcp_l4)),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "ipv6 icmpv6",
            v6_chain(c6, &[], (58, icmp6_l4)),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "ipv6 hop+routing+dst+ah+frag(first) udp",
            v6_chain(
                c6,
                &[
                    hop.clone(),
                    routing.clone(),
                    dst.clone(),
                    ah.clone(),
                    frag_first.clone(),
                ],
                (17, udp_l4),
            ),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "ipv6 later fragment",
            v6_chain(c6, std::slice::from_ref(&frag_later), (6, &[1, 2, 3])),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "ipv6 later fragment, payload looks like a header",
            v6_chain(
                c6,
                std::slice::from_ref(&frag_later_dst),
                (60, later6_payload),
            ),
            XDP_PASS,
            "pass.clean",
        ),
        (
            "ipv6 esp (no L4 read)",
            v6_chain(c6, &[], (50, &[0, 0, 0, 1])),
            XDP_PASS,
            "pass.clean",
        ),
        ("arp", arp(), XDP_PASS, "pass.not_ip"),
        ("lldp", lldp, XDP_PASS, "pass.not_ip"),
        // Malformed, clean source.
        // (A frame shorter than its Ethernet header never reaches XDP: BPF_PROG_RUN refuses it too.)
        (
            "vlan tag cut",
            vlan(&udp4, 1)[..16].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "ipv4 header cut",
            udp4[..14 + 12].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "ipv4 options beyond the frame",
            ihl15,
            XDP_DROP,
            "drop.truncated",
        ),
        ("ipv4 version 5", bad_ver4, XDP_DROP, "drop.bad_header"),
        (
            "ipv4 total length < header",
            short_tot,
            XDP_DROP,
            "drop.bad_header",
        ),
        (
            "tcp cut",
            tcp4[..14 + 20 + 10].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        ("tcp data offset 4", tcp_doff, XDP_DROP, "drop.bad_header"),
        (
            "udp cut",
            udp4[..14 + 20 + 6].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "icmp cut",
            icmp[..14 + 20 + 2].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        ("five vlan tags", vlan(&udp4, 5), XDP_DROP, "drop.too_deep"),
        // The IP packet is longer than the frame: cut short on the way.
        (
            "ipv4 shorter than its total length",
            {
                let mut v = udp4.clone();
                v[16..18].copy_from_slice(&(20 + 8 + 11u16).to_be_bytes());
                v
            },
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "ipv6 shorter than its payload length",
            {
                let mut v = v6_chain(c6, &[], (17, udp_l4));
                v[18..20].copy_from_slice(&9u16.to_be_bytes());
                v
            },
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "mpls nine labels",
            mpls(&udp4, 9),
            XDP_DROP,
            "drop.too_deep",
        ),
        (
            "mpls label cut",
            mpls(&udp4, 2)[..16].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "pppoe version 2",
            {
                let mut v = pppoe(&udp4, 0x0021);
                v[14] = 0x21;
                v
            },
            XDP_DROP,
            "drop.bad_header",
        ),
        (
            "pppoe header cut",
            pppoe(&udp4, 0x0021)[..20].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "ipv6 nine extension headers",
            v6_ext(c6, 9, false),
            XDP_DROP,
            "drop.too_deep",
        ),
        (
            "ipv6 header cut",
            bad_ver6[..14 + 30].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        ("ipv6 version 4", bad_ver6, XDP_DROP, "drop.bad_header"),
        (
            "ipv6 tcp data offset 4",
            tcp6_doff,
            XDP_DROP,
            "drop.bad_header",
        ),
        (
            "ipv6 icmpv6 cut",
            v6_chain(c6, &[], (58, &icmp6_l4[..3])),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "ipv6 ext header cut",
            v6_chain(c6, std::slice::from_ref(&hop), (17, udp_l4))[..14 + 40 + 1].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "ipv6 ah cut",
            v6_chain(c6, std::slice::from_ref(&ah), (17, &[]))[..14 + 40 + 8].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "ipv6 fragment header cut",
            v6_chain(c6, std::slice::from_ref(&frag_first), (17, &[]))[..14 + 40 + 6].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        // Blacklisted sources: dropped as blacklisted whatever the path or the rest of the frame.
        (
            "bl ipv4 udp",
            udp(b4, d4, 53, 10),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl ipv4 options",
            v4_options(&udp(b4, d4, 53, 10), 12),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl 802.1ad + 802.1Q",
            {
                let mut q = vlan(&udp(b4, d4, 53, 10), 2);
                q[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
                q
            },
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl ipv4 later fragment",
            v4_frag(&tcp(b4, d4, 80, "S"), 3, 0x0010),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl tcp cut",
            tcp(b4, d4, 80, "S")[..14 + 20 + 10].to_vec(),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl ipv6 tcp",
            v6_chain(b6, &[], (6, &tcp_l4)),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl ipv6 behind ext headers",
            v6_chain(
                b6,
                &[hop.clone(), routing.clone(), ah.clone()],
                (17, udp_l4),
            ),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl ipv6 later fragment",
            v6_chain(b6, std::slice::from_ref(&frag_later), (6, &[1, 2, 3])),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl three vlan tags",
            vlan(&udp(b4, d4, 53, 10), 3),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl mpls ipv4",
            mpls(&udp(b4, d4, 53, 10), 3),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl pppoe ipv4",
            pppoe(&udp(b4, d4, 53, 10), 0x0021),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl pppoe ipv6",
            pppoe(&v6_chain(b6, &[], (17, udp_l4)), 0x0057),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl ipv6 behind eight headers",
            v6_ext(b6, 8, false),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl gre (outer source)",
            ip4_carrying(&udp(c4, d4, 53, 10), 47, &[0, 0, 0x08, 0x00])
                .iter()
                .copied()
                .enumerate()
                .map(|(i, b)| {
                    if (26..30).contains(&i) {
                        [192, 0, 2, 66][i - 26]
                    } else {
                        b
                    }
                })
                .collect(),
            XDP_DROP,
            "drop.blacklist",
        ),
        (
            "bl ipv4 shorter than its total length",
            {
                let mut v = udp(b4, d4, 53, 10);
                v[16..18].copy_from_slice(&200u16.to_be_bytes());
                v
            },
            XDP_DROP,
            "drop.blacklist",
        ),
        // The source of a header that is itself cut is not trusted: a malformed frame, not a match.
        (
            "bl ipv4 header cut after saddr",
            udp(b4, d4, 53, 10)[..14 + 16].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
        (
            "bl ipv6 header cut after saddr",
            v6_chain(b6, &[], (17, udp_l4))[..14 + 38].to_vec(),
            XDP_DROP,
            "drop.truncated",
        ),
    ];
    for (name, pkt, verdict, reason) in &cases {
        let (v, r) = verdict_reason(&f, &prog, pkt);
        assert_eq!((v, r.as_str()), (*verdict, *reason), "{name}");
    }
    let bl = cases.iter().filter(|c| c.3 == "drop.blacklist").count() as u64;
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
    let t0 = std::time::Instant::now();
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
    let counts: std::collections::HashMap<Prefix, u64> = f
        .filter
        .entries()
        .unwrap()
        .into_iter()
        .map(|e| (e.prefix, e.packets))
        .collect();
    for &i in &probe {
        assert_eq!(counts[&Prefix::parse(&addr(i)).unwrap()], 2, "{}", addr(i));
    }
    assert_eq!(counts.values().sum::<u64>(), 2 * probe.len() as u64);

    // The TTL entry expires: its narrow slot is retired by the data path.
    std::thread::sleep(
        (t0 + ttl + Duration::from_millis(100))
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
