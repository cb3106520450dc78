//! BPF_PROG_TEST_RUN tests of xdp_filter's policer: a policed source under
//! its rate passes, over its rate is dropped with reason `policed`, its
//! counters move; a blacklisted source stays dropped as blacklisted; the
//! lookup is skipped while `n_police` is 0; and the Rust API
//! (`police`, `unpolice`, `policed`).
//!
//! No test depends on time: a fresh bucket holds `burst` packets whatever
//! the clock does, and an empty bucket is pinned empty by a refill time in
//! the far future (the data path refills only for time after `last_ns`).

mod common;

use std::os::fd::{AsRawFd, OwnedFd};

use common::*;
use rampart_bpf::abi::ddos::{PoliceKey, PoliceVal, DDOS_POLICE_BURST_MIN, DDOS_POLICE_MAX_PPS};
use rampart_ddos::filter::{
    police_burst, PolicedEntry, POLICE_ALL, POLICE_FRAG, POLICE_ICMP, POLICE_SYN, POLICE_UDP,
};
use rampart_ddos::{Error, Prefix};
use rampart_testkit::frame::{tcp as flags, Frame};
use rampart_testkit::prog::{ProgCase, Runner, XDP_DROP, XDP_PASS};

fn p(s: &str) -> Prefix {
    Prefix::parse(s).unwrap()
}

fn police_map(f: &Installed) -> OwnedFd {
    rampart_dataplane::pin::open_pinned(&f.filter.dir().join("ddos_police")).unwrap()
}

fn key(prefix: &str) -> PoliceKey {
    let p = p(prefix);
    PoliceKey {
        family: u32::from(p.family()),
        addr: p.addr_words(),
    }
}

/// Write `src`'s bucket as empty and refilled "later than any packet":
/// every packet finds it empty, however long the test takes. Its
/// counters are kept.
fn empty_bucket(f: &Installed, src: &str, rate_pps: u32) {
    let map = police_map(f);
    let k = key(src);
    let mut v = PoliceVal::default();
    rampart_dataplane::maps::lookup_raw(
        map.as_raw_fd(),
        bytemuck::bytes_of(&k),
        bytemuck::bytes_of_mut(&mut v),
    )
    .unwrap();
    let v = PoliceVal {
        rate_pps,
        burst: police_burst(rate_pps),
        tokens: 0,
        last_ns: u64::MAX / 2,
        ..v
    };
    rampart_dataplane::maps::update_raw(
        map.as_raw_fd(),
        bytemuck::bytes_of(&k),
        bytemuck::bytes_of(&v),
        0,
    )
    .unwrap();
}

fn entry(f: &Installed, src: &str) -> Option<PolicedEntry> {
    let want = p(src);
    f.filter
        .policed()
        .unwrap()
        .into_iter()
        .find(|(q, _)| *q == want)
        .map(|(_, e)| e)
}

fn udp4(src: &str) -> Vec<u8> {
    udp(src, "198.51.100.1", 53, 10)
}

#[test]
fn under_its_rate_passes_over_it_drops_as_policed_and_counts() {
    let f = Installed::new("pp", &exact_cfg());
    let prog = f.prog();
    let runner = Runner::new(prog.as_raw_fd(), || f.reasons());
    // A fresh bucket holds max(rate, floor) packets: 1,000 here.
    f.filter.police(p("192.0.2.1"), 1000, POLICE_ALL).unwrap();
    for i in 0..100 {
        runner.run(
            &ProgCase::new(
                format!("under its rate #{i}"),
                udp4("192.0.2.1"),
                XDP_PASS,
                "pass.clean",
            )
            .unchanged(),
        );
    }
    let e = entry(&f, "192.0.2.1").unwrap();
    assert_eq!(
        (e.rate_pps, e.burst, e.passed, e.dropped),
        (1000, 1000, 100, 0)
    );

    // Over its rate (the bucket is empty): dropped, counted as policed.
    // Untagged IPv4 (the fast path), VLAN-tagged IPv4 (the full parse), IPv6.
    f.filter.police(p("2001:db8::1"), 1000, POLICE_ALL).unwrap();
    empty_bucket(&f, "192.0.2.1", 1000);
    empty_bucket(&f, "2001:db8::1", 1000);
    let tagged = Frame::udp("192.0.2.1", "198.51.100.1", 40000, 53)
        .vlan(10)
        .zeros(10)
        .build();
    let v6 = udp("2001:db8::1", "2001:db8::ff", 53, 10);
    for (name, frame) in [
        ("over its rate, ipv4", udp4("192.0.2.1")),
        ("over its rate, ipv4 in a vlan", tagged),
        ("over its rate, ipv6", v6),
    ] {
        runner.run(&ProgCase::new(name, frame, XDP_DROP, "drop.policed"));
    }
    let e = entry(&f, "192.0.2.1").unwrap();
    assert_eq!((e.passed, e.dropped), (100, 2), "counters kept and moved");
    let e6 = entry(&f, "2001:db8::1").unwrap();
    assert_eq!((e6.passed, e6.dropped), (0, 1));
    // Other sources are not affected.
    runner.run(&ProgCase::new(
        "not policed",
        udp4("192.0.2.2"),
        XDP_PASS,
        "pass.clean",
    ));
    let s = f.filter.stats().unwrap();
    assert_eq!((s.dropped("policed"), s.policed), (3, 2));
}

#[test]
fn a_fresh_bucket_passes_exactly_its_burst_before_the_clock_refills_it() {
    let f = Installed::new("pb", &exact_cfg());
    let prog = f.prog();
    // At 1 pps the bucket is the floor; it refills one packet per second.
    f.filter.police(p("192.0.2.7"), 1, POLICE_ALL).unwrap();
    let t0 = std::time::Instant::now();
    let mut passed = 0u64;
    while run(&prog, &udp4("192.0.2.7"), 1) == XDP_PASS {
        passed += 1;
        assert!(passed < 10_000, "never dropped");
    }
    // Whatever the time taken: the burst, plus at most one packet per
    // second elapsed (and one for a partly refilled packet).
    let refill = t0.elapsed().as_secs() + 1;
    assert!(
        passed >= u64::from(DDOS_POLICE_BURST_MIN)
            && passed <= u64::from(DDOS_POLICE_BURST_MIN) + refill,
        "passed {passed}"
    );
    let e = entry(&f, "192.0.2.7").unwrap();
    assert_eq!(
        (e.burst, e.passed, e.dropped),
        (DDOS_POLICE_BURST_MIN, passed, 1)
    );
}

#[test]
fn a_blacklisted_source_is_dropped_as_blacklisted_not_policed() {
    let mut f = Installed::new("pl", &exact_cfg());
    f.block(&["192.0.2.3", "2001:db8::/64"]);
    f.filter.police(p("192.0.2.3"), 1000, POLICE_ALL).unwrap();
    f.filter.police(p("2001:db8::3"), 1000, POLICE_ALL).unwrap();
    let prog = f.prog();
    let runner = Runner::new(prog.as_raw_fd(), || f.reasons());
    runner.run(&ProgCase::new(
        "blacklisted",
        udp4("192.0.2.3"),
        XDP_DROP,
        "drop.blacklist",
    ));
    runner.run(&ProgCase::new(
        "blacklisted prefix",
        udp("2001:db8::3", "2001:db8:1::1", 53, 10),
        XDP_DROP,
        "drop.blacklist_prefix",
    ));
    for src in ["192.0.2.3", "2001:db8::3"] {
        let e = entry(&f, src).unwrap();
        assert_eq!(
            (e.passed, e.dropped),
            (0, 0),
            "{src}: the policer never saw it"
        );
    }
}

#[test]
fn no_policed_sources_skips_the_lookup() {
    let f = Installed::new("pz", &exact_cfg());
    let prog = f.prog();
    let runner = Runner::new(prog.as_raw_fd(), || f.reasons());
    // An entry written behind the API's back: n_police stays 0, so the
    // data path does not look it up.
    empty_bucket(&f, "192.0.2.4", 10);
    assert_eq!(f.filter.stats().unwrap().policed, 0);
    runner.run(&ProgCase::new(
        "n_police = 0",
        udp4("192.0.2.4"),
        XDP_PASS,
        "pass.clean",
    ));
    assert_eq!(entry(&f, "192.0.2.4").unwrap().dropped, 0);
    // One source policed through the API: the lookup runs, and finds it.
    f.filter.police(p("192.0.2.5"), 10, POLICE_ALL).unwrap();
    runner.run(&ProgCase::new(
        "n_police = 1",
        udp4("192.0.2.4"),
        XDP_DROP,
        "drop.policed",
    ));
    assert_eq!(entry(&f, "192.0.2.4").unwrap().dropped, 1);
    // The last one unpoliced: skipped again.
    assert!(f.filter.unpolice(p("192.0.2.5")).unwrap());
    assert_eq!(f.filter.stats().unwrap().policed, 0);
    runner.run(&ProgCase::new(
        "n_police = 0 again",
        udp4("192.0.2.4"),
        XDP_PASS,
        "pass.clean",
    ));
}

#[test]
fn police_unpolice_and_policed() {
    let f = Installed::new("pa", &exact_cfg());
    let prog = f.prog();
    assert!(f.filter.policed().unwrap().is_empty());
    f.filter.police(p("192.0.2.9"), 5000, POLICE_ALL).unwrap();
    f.filter.police(p("2001:db8::9"), 10, POLICE_ALL).unwrap();
    let got: Vec<(Prefix, u32, u32)> = f
        .filter
        .policed()
        .unwrap()
        .into_iter()
        .map(|(q, e)| (q, e.rate_pps, e.burst))
        .collect();
    assert_eq!(
        got,
        [
            (p("192.0.2.9"), 5000, 5000),
            (p("2001:db8::9"), 10, DDOS_POLICE_BURST_MIN)
        ]
    );
    assert_eq!(f.filter.stats().unwrap().policed, 2);
    assert_eq!(run(&prog, &udp4("192.0.2.9"), 7), XDP_PASS);
    // A new rate keeps the counters; the same rate again changes nothing.
    f.filter.police(p("192.0.2.9"), 2000, POLICE_ALL).unwrap();
    f.filter.police(p("192.0.2.9"), 2000, POLICE_ALL).unwrap();
    let e = entry(&f, "192.0.2.9").unwrap();
    assert_eq!(
        (e.rate_pps, e.burst, e.passed, e.dropped),
        (2000, 2000, 7, 0)
    );
    assert_eq!(
        f.filter.stats().unwrap().policed,
        2,
        "an update is not a new entry"
    );
    // Unpolice: true once, then false; its packets are not policed any more.
    assert!(f.filter.unpolice(p("192.0.2.9")).unwrap());
    assert!(!f.filter.unpolice(p("192.0.2.9")).unwrap());
    assert!(entry(&f, "192.0.2.9").is_none());
    assert_eq!(f.filter.stats().unwrap().policed, 1);
    // Policed again: a fresh entry with fresh counters.
    f.filter.police(p("192.0.2.9"), 2000, POLICE_ALL).unwrap();
    assert_eq!(entry(&f, "192.0.2.9").unwrap().passed, 0);

    // Bad requests: one clear line each, nothing changed.
    let before = f.filter.policed().unwrap();
    for (prefix, rate, says) in [
        ("192.0.2.0/24", 100, "single addresses"),
        ("2001:db8::/64", 100, "single addresses"),
        ("192.0.2.10", 0, "out of range"),
        ("192.0.2.10", DDOS_POLICE_MAX_PPS + 1, "out of range"),
    ] {
        let e = f.filter.police(p(prefix), rate, POLICE_ALL).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
    for classes in [16, 0x8000_0000] {
        let e = f.filter.police(p("192.0.2.10"), 100, classes).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert!(e.to_string().contains("only the bits"), "{e}");
    }
    assert!(f.filter.unpolice(p("192.0.2.0/24")).is_err());
    assert_eq!(f.filter.policed().unwrap(), before);
    assert_eq!(f.filter.stats().unwrap().policed, 2);
}

#[test]
fn a_full_policing_table_says_so() {
    use rampart_bpf::abi::ddos::DDOS_POLICE_MAX;
    let f = Installed::new("pf", &exact_cfg());
    for i in 0..DDOS_POLICE_MAX {
        let a = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        f.filter
            .police(Prefix::host(a.into()), 100, POLICE_ALL)
            .unwrap();
    }
    let e = f
        .filter
        .police(p("192.0.2.1"), 100, POLICE_ALL)
        .unwrap_err();
    assert!(matches!(e, Error::PoliceFull { .. }), "{e}");
    assert!(e.to_string().contains("policing table full"), "{e}");
    assert_eq!(f.filter.stats().unwrap().policed, DDOS_POLICE_MAX);
    // A policed source still gets a new rate when the table is full.
    f.filter.police(p("10.0.0.1"), 200, POLICE_ALL).unwrap();
    assert_eq!(entry(&f, "10.0.0.1").unwrap().rate_pps, 200);
}

/// An entry that polices some classes takes tokens only from packets of
/// those classes: with its bucket empty, those are dropped as policed and
/// every other packet of the source passes (a heavy client's established
/// connections under a SYN flood).
#[test]
fn an_entry_polices_only_its_classes() {
    let f = Installed::new("pc", &exact_cfg());
    let prog = f.prog();
    let runner = Runner::new(prog.as_raw_fd(), || f.reasons());
    let syn = |s: &str| tcp(s, "198.51.100.1", 80, flags::SYN);
    let ack = |s: &str| tcp(s, "198.51.100.1", 80, flags::ACK);
    let synack = |s: &str| tcp(s, "198.51.100.1", 80, flags::SYN | flags::ACK);
    let icmp = |s: &str| Frame::icmp_echo(s, "198.51.100.1").build();
    let frag = |s: &str| {
        Frame::udp(s, "198.51.100.1", 40000, 53)
            .zeros(32)
            .fragment(0, true)
            .build()
    };
    let v6syn = tcp("2001:db8::5", "2001:db8::ff", 80, flags::SYN);
    let v6udp = udp("2001:db8::5", "2001:db8::ff", 53, 10);
    for (src, classes) in [
        ("192.0.2.1", POLICE_SYN),
        ("192.0.2.2", POLICE_UDP),
        ("192.0.2.3", POLICE_ICMP),
        ("192.0.2.4", POLICE_FRAG),
        ("192.0.2.5", POLICE_SYN | POLICE_UDP),
        ("2001:db8::5", POLICE_SYN),
    ] {
        f.filter.police(p(src), 1000, classes).unwrap();
        empty_bucket(&f, src, 1000);
        assert_eq!(entry(&f, src).unwrap().classes, classes);
    }
    let drop = |name: &str, frame: Vec<u8>| {
        runner.run(&ProgCase::new(name, frame, XDP_DROP, "drop.policed"));
    };
    let pass = |name: &str, frame: Vec<u8>| {
        runner.run(&ProgCase::new(name, frame, XDP_PASS, "pass.clean").unchanged());
    };
    drop("syn-policed: SYN", syn("192.0.2.1"));
    pass("syn-policed: ACK", ack("192.0.2.1"));
    pass("syn-policed: SYN-ACK", synack("192.0.2.1"));
    pass("syn-policed: UDP", udp4("192.0.2.1"));
    pass("syn-policed: ICMP", icmp("192.0.2.1"));
    drop("udp-policed: UDP", udp4("192.0.2.2"));
    drop("udp-policed: UDP fragment", frag("192.0.2.2"));
    pass("udp-policed: SYN", syn("192.0.2.2"));
    drop("icmp-policed: ICMP", icmp("192.0.2.3"));
    pass("icmp-policed: UDP", udp4("192.0.2.3"));
    drop("frag-policed: fragment", frag("192.0.2.4"));
    pass("frag-policed: UDP", udp4("192.0.2.4"));
    drop("syn|udp-policed: SYN", syn("192.0.2.5"));
    drop("syn|udp-policed: UDP", udp4("192.0.2.5"));
    pass("syn|udp-policed: ACK", ack("192.0.2.5"));
    drop("ipv6 syn-policed: SYN", v6syn);
    pass("ipv6 syn-policed: UDP", v6udp);
    // Only the policed classes took from the buckets.
    assert_eq!(entry(&f, "192.0.2.1").unwrap().passed, 0);
    assert_eq!(entry(&f, "192.0.2.1").unwrap().dropped, 1);
    assert_eq!(entry(&f, "192.0.2.5").unwrap().dropped, 2);
    // Re-policing with other classes keeps the entry and its counters.
    f.filter.police(p("192.0.2.1"), 1000, POLICE_ALL).unwrap();
    let e = entry(&f, "192.0.2.1").unwrap();
    assert_eq!((e.classes, e.dropped), (POLICE_ALL, 1));
    empty_bucket(&f, "192.0.2.1", 1000);
    drop("all-policed now: ACK", ack("192.0.2.1"));
}
