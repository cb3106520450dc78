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
    // Truncated inside UDP, bad IHL, three VLAN tags, not IP.
    assert_eq!(run(&prog, &good[..14 + 20 + 4], 1), XDP_DROP);
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x44;
    assert_eq!(run(&prog, &bad_ihl, 1), XDP_DROP);
    assert_eq!(run(&prog, &vlan(&good, 3), 1), XDP_DROP);
    assert_eq!(run(&prog, &arp(), 1), XDP_PASS);
    // Two VLAN tags are walked: clean passes, blacklisted drops.
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
    assert_eq!(run(&prog, &vlan(&good, 3), 1), XDP_PASS);
    let s = f.filter.stats().unwrap();
    assert_eq!(s.passed("malformed"), 2);
    assert_eq!(s.dropped("truncated") + s.dropped("too_deep"), 0);
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
    // Six extension headers are walked; seven are too deep.
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 6, false), 1), XDP_PASS);
    assert_eq!(run(&prog, &v6_ext("2001:db8::1", 7, false), 1), XDP_DROP);
    // A blacklisted source is dropped as blacklisted even behind too many headers.
    assert_eq!(run(&prog, &v6_ext("2001:db8::66", 7, false), 1), XDP_DROP);
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
