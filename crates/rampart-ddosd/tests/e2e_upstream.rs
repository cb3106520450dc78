//! The upstream tier against real BGP speakers: rampart writes ExaBGP's
//! text API, ExaBGP (host side) announces to BIRD 2 (the lab's router),
//! and the test reads BIRD's tables: FlowSpec rules per blocked source
//! prefix (IPv4 and IPv6), an RTBH route with the BLACKHOLE community and
//! the configured one, nothing for a guarded prefix, and every withdrawal.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use rampart_ddos::Prefix;
use rampart_ddosd::tier::upstream::{Announcement, Upstream, UpstreamConfig};
use rampart_ddosd::tier::{CounterKind, Tier};
use rampart_lab::bgp::{BgpLab, HOST_ADDR};

/// Wait (at most 30 s) until the router's tables satisfy `ok`.
fn wait_routes(lab: &BgpLab, what: &str, ok: impl Fn(&str) -> bool) -> Duration {
    let t0 = Instant::now();
    loop {
        let r = lab.routes().unwrap();
        if ok(&r) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what}: the router's tables:\n{r}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn flowspec_and_rtbh_reach_the_router_and_are_withdrawn() {
    let prefix = rampart_lab::testing::unique_prefix("ups");
    let dir = std::env::temp_dir().join(format!("rampart-{prefix}"));
    let lab = BgpLab::up(&prefix, None, &dir).expect("BIRD and ExaBGP peered");
    let mut u = Upstream::open(UpstreamConfig {
        command_pipe: lab.command_pipe(),
        next_hop: Some(HOST_ADDR.parse().unwrap()),
        communities: vec!["65001:42".into()],
        max_rules: 10,
        never: vec![
            "10.99.0.0/30".parse().unwrap(),
            "192.0.2.0/24".parse().unwrap(),
        ],
        ..UpstreamConfig::default()
    })
    .unwrap();
    assert_eq!(u.info().counters, CounterKind::None);

    // The planner's prefixes as FlowSpec discard rules, both families.
    let p4 = Prefix::parse("203.0.113.0/24").unwrap();
    let p6 = Prefix::parse("2001:db8:bad::/48").unwrap();
    assert_eq!(u.install(&[p4, p6]).unwrap(), 2);
    let took = wait_routes(&lab, "FlowSpec rules", |r| {
        r.contains("flow4 { src 203.0.113.0/24; }")
            && r.contains("flow6 { src 2001:db8:bad::/48; }")
    });
    eprintln!("announce to router: {took:?}");
    // traffic-rate 0: discard (RFC 8955 7.3).
    assert!(lab
        .birdc(&["show", "route", "table", "flowtab4", "all"])
        .unwrap()
        .contains("(generic, 0x80060000, 0x0)"));

    // A guarded source is refused here and never announced.
    let guarded = Prefix::parse("192.0.2.128/25").unwrap();
    assert!(u.install(&[guarded]).is_err());

    // RTBH of a victim, with the BLACKHOLE community and the configured one.
    let victim: IpAddr = "198.51.100.7".parse().unwrap();
    u.blackhole(victim).unwrap();
    wait_routes(&lab, "RTBH route", |r| {
        r.contains("198.51.100.7/32") && r.contains("(65535,666)") && r.contains("(65001,42)")
    });
    let routes = lab.routes().unwrap();
    assert!(
        !routes.contains("192.0.2."),
        "a guarded prefix reached the router:\n{routes}"
    );
    assert_eq!(
        u.rules().unwrap().len(),
        2,
        "the tier's rules are the FlowSpec ones"
    );

    // Withdrawals.
    assert_eq!(u.remove(&[p4]).unwrap(), 1);
    assert!(u.withdraw(&Announcement::Blackhole { victim }).unwrap());
    wait_routes(&lab, "withdrawals", |r| {
        !r.contains("203.0.113.0/24")
            && !r.contains("198.51.100.7/32")
            && r.contains("2001:db8:bad::/48")
    });
    assert_eq!(u.remove(&[p6]).unwrap(), 1);
    wait_routes(&lab, "the last withdrawal", |r| {
        !r.contains("2001:db8:bad::/48")
    });
    assert!(u.announced().is_empty());
}
