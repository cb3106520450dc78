//! The upstream tier against real BGP speakers: rampart writes ExaBGP's
//! text API, ExaBGP (host side) announces to BIRD 2 (the lab's router),
//! and the test reads BIRD's tables: FlowSpec rules per blocked source
//! prefix (IPv4 and IPv6), an RTBH route with the BLACKHOLE community and
//! the configured one, nothing for a guarded prefix, and every withdrawal.
//! Then the daemon itself: under a flood, with a (test-sized) link
//! capacity, it engages the tier; the lab's EMULATED upstream router (BIRD
//! in a bridge on the wire, what BIRD learned mapped to nftables) drops the
//! flood before the host's link, and after the flood everything is
//! withdrawn. A dry run sends nothing and lists what it would have sent.

use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_ddos::Prefix;
use rampart_ddosd::tier::upstream::{Announcement, FlowMatch, Upstream, UpstreamConfig};
use rampart_ddosd::tier::{CounterKind, Tier};
use rampart_ddosd::{Command, Config, Handle};
use rampart_lab::bgp::{BgpLab, HOST_ADDR};
use rampart_lab::gen::{iface_rx_packets, GenSpec, Generator, Limit};
use rampart_lab::testing::TestLab;
use rampart_lab::topology::{Lab, UpOptions, HOST_IF};

mod common;
use common::{alerts, wait_for, Cleanup};

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

    // Protocol, ports and packet length: the reflected NTP to one victim.
    let ntp = Announcement::Flow {
        source: "198.18.0.0/24".parse().unwrap(),
        dest: Some("198.51.100.9/32".parse().unwrap()),
        matching: FlowMatch {
            protocol: Some(17),
            source_port: Some(123),
            dest_port: Some(33_333),
            packet_length: Some((400, 1500)),
        },
    };
    u.announce(ntp.clone()).unwrap();
    wait_routes(&lab, "the FlowSpec rule with components", |r| {
        r.contains("198.18.0.0/24")
    });
    let (rules, skipped) = rampart_lab::router::parse_routes(&lab.routes().unwrap());
    assert!(skipped.is_empty(), "{skipped:?}");
    assert!(
        rules.iter().any(|r| r.nft()
            == "ip saddr 198.18.0.0/24 ip daddr 198.51.100.9/32 meta l4proto 17 th sport 123 th dport 33333 \
                ip length 400-1500 counter drop comment \"flowspec src 198.18.0.0/24 dst 198.51.100.9/32 proto 17 sport 123 dport 33333 length 400-1500\""),
        "{rules:?}"
    );
    // The kernel takes the EMULATED router's rules as they are (check mode).
    let script = std::env::temp_dir().join(format!("{prefix}-router.nft"));
    std::fs::write(&script, rampart_lab::router::nft_script(&rules)).unwrap();
    let checked = std::process::Command::new("nft")
        .args(["-c", "-f", script.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_file(&script).unwrap();
    assert!(checked.status.success(), "{checked:?}");
    assert!(u.withdraw(&ntp).unwrap());

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

    // The update cost: write → in BIRD's table, polled every 5 ms (each
    // poll is a birdc call, a few ms itself). Printed, not asserted: speed
    // belongs in benchmarks; docs/upstream.md states the median.
    let mut took = Vec::new();
    for i in 0..10u8 {
        let p = Prefix::parse(&format!("203.0.113.{}/32", i + 1)).unwrap();
        let t0 = Instant::now();
        u.install(&[p]).unwrap();
        let needle = format!("src {};", p);
        while !lab
            .birdc(&["show", "route", "table", "flowtab4"])
            .unwrap()
            .contains(&needle)
        {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{p} never reached BIRD"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        took.push(t0.elapsed().as_secs_f64() * 1e3);
        u.remove(&[p]).unwrap();
    }
    took.sort_by(f64::total_cmp);
    eprintln!(
        "announce -> in BIRD's table, 10 runs: median {:.1} ms, min {:.1}, max {:.1}",
        (took[4] + took[5]) / 2.0,
        took[0],
        took[9]
    );
}

/// The daemon's configuration: the shipped file with the upstream tier on,
/// a link of 1000 packets/s (a test-sized link: the flood below fills it)
/// and a 1 s hold. The withdraw level is 0.25: the unannounced source's
/// 1000 packets/s keep the tier engaged while the flood lasts even when a
/// busy machine paces the generator unevenly or the host's sampled
/// counters read low.
fn daemon_config(lab: &TestLab, c: &Cleanup, pipe: &std::path::Path, extra: &str) -> Config {
    let base = common::shipped_config(lab, c);
    let mut t: toml::Table = toml::from_str(&base.render().unwrap()).unwrap();
    let up: toml::Table = toml::from_str(&format!(
        "enabled = true\ncommand_pipe = \"{}\"\nlink_capacity_pps = 1000.0\nhold_s = 1.0\nwithdraw_below = 0.25\n\
         never = [\"10.99.0.0/30\", \"{}/32\"]\n{extra}",
        pipe.display(),
        spec().source_addr(3)
    ))
    .unwrap();
    t.insert("upstream".into(), toml::Value::Table(up));
    t.get_mut("server")
        .and_then(|s| s.as_table_mut())
        .unwrap()
        .insert("listen".into(), "".into());
    Config::parse(&toml::to_string(&t).unwrap()).unwrap()
}

/// The flood: 4 sources, 4000 packets/s in all, until cancelled.
fn spec() -> GenSpec {
    GenSpec {
        sources: 4,
        pps: Some(4000.0),
        limit: Limit::Seconds(300.0),
        ..GenSpec::default()
    }
}

fn flood(lab: &Lab) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let gen = Generator::new(lab, &spec()).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let c = cancel.clone();
    let t = std::thread::spawn(move || {
        gen.run(&c).unwrap();
    });
    (cancel, t)
}

/// Block the flood's 4 sources through the operator API: the tier plans
/// over every blocked source, whoever blocked it.
fn block_sources(h: &Handle) {
    for i in 0..4 {
        h.command(Command::Block {
            prefix: Prefix::host(spec().source_addr(i)),
            reason: "the test's flood".into(),
        })
        .unwrap();
    }
}

fn flow_src(i: u32) -> String {
    format!("src {}/32;", spec().source_addr(i))
}

#[test]
fn the_daemon_engages_the_emulated_router_which_drops_the_flood_before_the_host_link() {
    let lab = lab_with_router("upd");
    let c = Cleanup::new(&lab);
    let bgp = BgpLab::in_path(&lab, &c.dir.join("bgp")).expect("BIRD in the router, peered");
    let fwd = bgp.forwarding().unwrap();
    let h = Handle::spawn(daemon_config(&lab, &c, &bgp.command_pipe(), "")).unwrap();
    let (cancel, gen) = flood(&lab);
    let host_rx = || iface_rx_packets(&lab.host_ns(), HOST_IF).unwrap();

    // Before anything is announced the router forwards the whole flood.
    let (h0, n0) = (host_rx(), fwd.dropped_packets().unwrap());
    wait_for("the flood at the host", Duration::from_secs(60), || {
        host_rx() >= h0 + 2000
    });
    assert_eq!(fwd.dropped_packets().unwrap(), n0, "nothing announced yet");

    // Blocked at the host: 4000 pps on a 1000 pps link engages the tier;
    // sources 0..2 are announced, source 3 is in `never`.
    block_sources(&h);
    wait_for(
        "the router's FlowSpec rules",
        Duration::from_secs(60),
        || {
            let r = bgp.routes().unwrap();
            (0..3).all(|i| r.contains(&flow_src(i)))
                && fwd.rules().len() == 3
                && h.view().upstream.is_some_and(|v| v.announced.len() == 3)
        },
    );
    let routes = bgp.routes().unwrap();
    assert!(
        !routes.contains(&flow_src(3)),
        "a never prefix was announced:\n{routes}"
    );
    let v = h.view().upstream.unwrap();
    assert!(v.engaged && !v.dry_run && v.announced.len() == 3, "{v:?}");
    assert!(v.guarded >= 1 && v.counters == "none", "{v:?}");

    // Now the router drops three of the four sources before the host's
    // link: over the same stretch of flood, the host receives less than
    // the router drops (a quarter against three quarters).
    let (h1, n1) = (host_rx(), fwd.dropped_packets().unwrap());
    wait_for("the router dropping", Duration::from_secs(60), || {
        fwd.dropped_packets().unwrap() >= n1 + 3000
    });
    let (h2, n2) = (host_rx(), fwd.dropped_packets().unwrap());
    eprintln!(
        "engaged: host link received {} packets while the EMULATED router dropped {}",
        h2 - h1,
        n2 - n1
    );
    assert!(
        h2 - h1 < n2 - n1,
        "host link {} packets, router dropped {}",
        h2 - h1,
        n2 - n1
    );
    let per_rule = fwd.counters().unwrap();
    assert!(
        per_rule.len() == 3 && per_rule.iter().all(|(_, n)| *n > 0),
        "{per_rule:?}"
    );
    // The host's tiers keep every rule: the upstream is extra.
    assert_eq!(h.view().blocked.len(), 4);

    // The flood stops: the volume stays low for hold_s and everything is
    // withdrawn; the router's rules go with BIRD's routes.
    cancel.store(true, Ordering::Relaxed);
    gen.join().unwrap();
    wait_for("the withdrawals", Duration::from_secs(60), || {
        let r = bgp.routes().unwrap();
        // The view is published at the end of the interval that wrote the
        // withdrawals, which may be after BIRD has them.
        !(0..4).any(|i| r.contains(&flow_src(i)))
            && fwd.rules().is_empty()
            && h.view().upstream.is_some_and(|v| !v.engaged)
    });
    let v = h.view().upstream.unwrap();
    assert!(
        !v.engaged && v.announced.is_empty() && v.updates >= 6,
        "{v:?}"
    );
    assert_eq!(h.view().blocked.len(), 4, "the host still blocks them");
    // Every announcement was withdrawn (a busy machine may pace the flood
    // unevenly and engage the tier more than once: counted, not fixed).
    let m = h.metrics.render();
    let count = |op: &str| -> f64 {
        let key = format!("rampart_ddos_rule_updates_total{{op=\"{op}\",tier=\"upstream\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(key.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{key} missing: {m}"))
    };
    assert!(
        count("add") >= 3.0 && count("add") == count("remove"),
        "{m}"
    );
    let al = alerts(&c);
    let kind = |name: &str| {
        al.iter()
            .filter(|a| a["rampart"]["tier"] == "upstream" && a["event_type"] == "stats")
            .filter(|a| a.to_string().contains(name))
            .count()
    };
    assert!(
        kind("upstream_announce") >= 3 && kind("upstream_announce") == kind("upstream_withdraw"),
        "{al:?}"
    );
    h.stop().unwrap();
}

#[test]
fn a_dry_run_sends_nothing_and_lists_what_it_would_announce() {
    let lab = TestLab::up("updry", 0);
    let c = Cleanup::new(&lab);
    let bgp = BgpLab::up(
        &rampart_lab::testing::unique_prefix("upr"),
        None,
        &c.dir.join("bgp"),
    )
    .expect("BIRD and ExaBGP peered");
    let h = Handle::spawn(daemon_config(
        &lab,
        &c,
        &bgp.command_pipe(),
        "dry_run = true\n",
    ))
    .unwrap();
    let (cancel, gen) = flood(&lab);
    block_sources(&h);
    wait_for(
        "the would-be announcements",
        Duration::from_secs(60),
        || {
            h.view()
                .upstream
                .is_some_and(|v| v.engaged && v.announced.len() == 3)
        },
    );
    let v = h.view().upstream.unwrap();
    assert!(v.dry_run, "{v:?}");
    for i in 0..3 {
        assert!(
            v.announced
                .iter()
                .any(|l| l.contains(&format!("source {}/32;", spec().source_addr(i)))),
            "{v:?}"
        );
    }
    assert!(!v
        .announced
        .iter()
        .any(|l| l.contains(&spec().source_addr(3).to_string())));
    let al = alerts(&c);
    assert!(
        al.iter()
            .filter(|a| a["rampart"]["tier"] == "upstream")
            .count()
            >= 3
            && al.iter().any(|a| a["rampart"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("dry run"))),
        "{al:?}"
    );
    cancel.store(true, Ordering::Relaxed);
    gen.join().unwrap();
    // Nothing reached the router (the session is up: a write would have).
    assert!(bgp
        .birdc(&["show", "protocols", "host"])
        .unwrap()
        .contains("Established"));
    let r = bgp.routes().unwrap();
    assert!(!r.contains("flow4 {"), "{r}");
    h.stop().unwrap();
}

#[test]
fn a_restarted_daemon_takes_over_what_was_announced_and_withdraws_it() {
    let lab = TestLab::up("uprst", 0);
    let c = Cleanup::new(&lab);
    let bgp = BgpLab::up(
        &rampart_lab::testing::unique_prefix("ups"),
        None,
        &c.dir.join("bgp"),
    )
    .expect("BIRD and ExaBGP peered");
    let cfg = daemon_config(&lab, &c, &bgp.command_pipe(), "");
    let h = Handle::spawn(cfg.clone()).unwrap();
    let (cancel, gen) = flood(&lab);
    block_sources(&h);
    wait_for("the announcements", Duration::from_secs(60), || {
        let r = bgp.routes().unwrap();
        (0..3).all(|i| r.contains(&flow_src(i)))
    });

    // A reload may change the levels, not what or where the tier announces.
    let mut levels = cfg.clone();
    levels.upstream.hold_s = 1.5;
    let msg = rampart_ddosd::daemon::apply_reload(&h.owner(), levels).unwrap();
    assert!(msg.contains("upstream.hold_s"), "{msg}");
    assert_eq!(h.view().upstream.unwrap().hold_s, 1.5);
    let mut cap = cfg.clone();
    cap.upstream.max_rules = 7;
    let e = rampart_ddosd::daemon::apply_reload(&h.owner(), cap).unwrap_err();
    assert!(
        e.contains("upstream.max_rules") && e.contains("restart"),
        "{e}"
    );
    h.stop().unwrap();

    // The new daemon adopts the three announcements from the state file:
    // nothing is sent again while the flood goes on ...
    let h = Handle::spawn(cfg).unwrap();
    wait_for("a few intervals", Duration::from_secs(60), || {
        h.view().intervals >= 6
    });
    let v = h.view().upstream.unwrap();
    assert!(
        v.engaged && v.announced.len() == 3 && v.updates == 0,
        "{v:?}"
    );
    let r = bgp.routes().unwrap();
    assert!((0..3).all(|i| r.contains(&flow_src(i))), "{r}");

    // ... and it withdraws them once the flood is over.
    cancel.store(true, Ordering::Relaxed);
    gen.join().unwrap();
    wait_for("the withdrawals", Duration::from_secs(60), || {
        let r = bgp.routes().unwrap();
        // As above: the view may lag BIRD by the end of an interval.
        !(0..4).any(|i| r.contains(&flow_src(i))) && h.view().upstream.is_some_and(|v| !v.engaged)
    });
    let v = h.view().upstream.unwrap();
    assert!(
        !v.engaged && v.announced.is_empty() && v.updates == 3,
        "{v:?}"
    );
    h.stop().unwrap();
}

/// A lab with the EMULATED upstream router on its wire.
fn lab_with_router(tag: &str) -> TestLab {
    rampart_lab::testing::require_kernel();
    let lab = Lab::new(&rampart_lab::testing::unique_prefix(tag)).unwrap();
    if let Err(e) = lab.up(&UpOptions {
        upstream_router: true,
        ..UpOptions::default()
    }) {
        let _ = lab.down();
        panic!("lab up: {e}");
    }
    TestLab { lab }
}

#[test]
fn rtbh_of_a_detected_victim_reaches_the_router_and_drops_its_traffic() {
    let lab = lab_with_router("uprt");
    let c = Cleanup::new(&lab);
    let bgp = BgpLab::in_path(&lab, &c.dir.join("bgp")).expect("BIRD in the router, peered");
    let fwd = bgp.forwarding().unwrap();
    let h = Handle::spawn(daemon_config(
        &lab,
        &c,
        &bgp.command_pipe(),
        &format!("rtbh = true\nnext_hop = \"{HOST_ADDR}\"\ncommunities = [\"65001:42\"]\n"),
    ))
    .unwrap();
    // NTP reflection (source port 123) from 30 reflectors, 6000 packets/s
    // of 1200 B: above the shipped floor, so detection (not the operator)
    // finds the victim under attack and blocks the reflectors.
    let spec = GenSpec {
        sources: 30,
        sport: 123,
        dport: Some(33_333),
        size: 1200,
        pps: Some(6000.0),
        limit: Limit::Seconds(300.0),
        ..GenSpec::default()
    };
    let gen = Generator::new(&lab, &spec).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let cg = cancel.clone();
    let t = std::thread::spawn(move || {
        gen.run(&cg).unwrap();
    });
    let victim = "10.10.0.2/32";
    let hole = rampart_lab::router::RouterRule::Blackhole { dst: victim.into() };
    let named = format!("rtbh {victim}");
    wait_for(
        "the victim's RTBH route at the router, dropping",
        Duration::from_secs(90),
        || {
            let r = bgp.routes().unwrap();
            r.contains(victim)
                && r.contains("(65535,666)")
                && r.contains("(65001,42)")
                && fwd.rules().contains(&hole)
                && fwd
                    .counters()
                    .unwrap()
                    .iter()
                    .any(|(n, p)| *n == named && *p > 0)
        },
    );
    cancel.store(true, Ordering::Relaxed);
    t.join().unwrap();
    wait_for("the withdrawals", Duration::from_secs(90), || {
        !bgp.routes().unwrap().contains(victim) && fwd.rules().is_empty()
    });
    let al = alerts(&c);
    assert!(
        al.iter()
            .any(|a| a["rampart"]["tier"] == "upstream" && a.to_string().contains("rtbh")),
        "{al:?}"
    );
    h.stop().unwrap();
}

#[test]
fn a_speaker_that_reads_nothing_is_one_error_and_host_filtering_goes_on() {
    let lab = TestLab::up("upstall", 0);
    let c = Cleanup::new(&lab);
    // ExaBGP's pipe with no ExaBGP behind it (a speaker that died).
    let fifo = c.dir.join("exabgp.cmd");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let h = Handle::spawn(daemon_config(&lab, &c, &fifo, "")).unwrap();
    let (cancel, gen) = flood(&lab);
    block_sources(&h);
    wait_for("the stalled-speaker error", Duration::from_secs(60), || {
        h.view()
            .upstream
            .and_then(|v| v.error)
            .is_some_and(|e| e.contains("has not read its command pipe"))
    });
    let v = h.view().upstream.unwrap();
    assert!(v.errors >= 1 && v.announced.len() == 3, "{v:?}");
    assert!(h
        .metrics
        .render()
        .lines()
        .any(|l| l.starts_with("rampart_ddos_upstream_errors_total ") && !l.ends_with(" 0")));
    // The host's tiers drop the flood all along.
    let name = rampart_ddos::filter::Scope::new(Some(&lab.host_ns()), HOST_IF)
        .unwrap()
        .name();
    let filter = rampart_ddos::filter::Filter::open(&name).unwrap();
    let d0 = filter.stats().unwrap().dropped("blacklist");
    wait_for(
        "the host dropping the flood",
        Duration::from_secs(60),
        || filter.stats().unwrap().dropped("blacklist") > d0 + 1000,
    );
    // The speaker comes back and reads what waited: the error clears.
    let mut r = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut got = String::new();
    wait_for("the error cleared", Duration::from_secs(60), || {
        let mut buf = [0u8; 65536];
        if let Ok(n) = std::io::Read::read(&mut r, &mut buf) {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        h.view().upstream.is_some_and(|v| v.error.is_none())
    });
    assert!(got.matches("announce flow route").count() >= 3, "{got}");
    cancel.store(true, Ordering::Relaxed);
    gen.join().unwrap();
    h.stop().unwrap();
}
