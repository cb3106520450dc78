//! netns end-to-end tests of the runtime: the EMULATED NIC tier, the
//! refusing backends, the daemon detecting / blocking / unbanning a real
//! attack, a restart under attack with zero leaked packets, and the HTTP
//! API's answers to bad requests. Every test uses its own lab (unique
//! prefix) and removes its filter pins, state and alerts files.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rampart_ddos::filter::Filter;
use rampart_ddos::Prefix;
use rampart_ddosd::tier::emulated::EmulatedNic;
use rampart_ddosd::tier::{ethtool, tc_flower, xdp_hw, Tier};
use rampart_ddosd::{Command, Config, Error, Handle};
use rampart_lab::dist::Dist;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_lab::topology::HOST_IF;

mod common;
use common::{alerts, http, nic_hop, sample, wait_for, Cleanup};

fn config(lab: &TestLab, c: &Cleanup, mode: &str, extra: &str) -> Config {
    Config::parse(&format!(
        "[server]\nlisten = \"\"\n[daemon]\nmode = \"{mode}\"\niface = \"{HOST_IF}\"\nnetns = \"{}\"\ninterval_s = 0.1\n\
         state_dir = \"{}\"\n[alerts]\nfile = \"{}\"\n[filter]\nmax_entries = 4096\nmax_prefixes = 256\nfeatures_capacity = 8192\nsample_shift = 0\n\
         [hw]\nbackend = \"emulated\"\nnetns = \"{}\"\niface = \"{}\"\nupdate_delay_ms = 0\n{extra}",
        lab.host_ns(),
        c.dir.display(),
        c.dir.join("alerts.jsonl").display(),
        c.hop.netns.as_deref().unwrap_or_default(),
        c.hop.iface,
    ))
    .unwrap()
}

#[test]
fn emulated_tier_holds_k_rules_with_exact_counters() {
    let lab = TestLab::up("dtnic", 0);
    lab.set_nic_capacity(4).unwrap();
    let mut nic = EmulatedNic::open(&nic_hop(&lab), Duration::from_millis(2)).unwrap();
    let info = nic.info();
    assert_eq!(info.capacity, Some(4));
    assert!(info.emulated && info.location.contains("EMULATED"));
    assert_eq!(info.update_cost, Duration::from_millis(2));
    let spec = GenSpec {
        sources: 8,
        proto: Proto::Udp,
        limit: Limit::Count(8000),
        pps: Some(20_000.0),
        ..GenSpec::default()
    };
    let blocked: Vec<Prefix> = (0..4).map(|i| Prefix::host(spec.source_addr(i))).collect();
    let t = Instant::now();
    assert_eq!(nic.install(&blocked).unwrap(), 4);
    assert!(
        t.elapsed() >= Duration::from_millis(8),
        "4 updates cost 4 × 2 ms"
    );
    assert_eq!(
        nic.install(&blocked[..1]).unwrap(),
        0,
        "present rules are kept"
    );
    let e = nic
        .install(&[Prefix::host(spec.source_addr(5))])
        .unwrap_err();
    assert!(matches!(e, Error::Full { capacity: 4, .. }), "{e}");
    let r = rampart_lab::gen::run_into_host(&lab, &spec, &AtomicBool::new(false)).unwrap();
    let rules = nic.rules().unwrap();
    assert_eq!(rules.len(), 4);
    let dropped: u64 = rules.iter().map(|(_, c)| c.packets).sum();
    assert!(rules
        .iter()
        .all(|(_, c)| c.packets > 0 && c.bytes >= 60 * c.packets));
    // (The host's count is not compared exactly: veth may lose frames when
    // the machine is busy, and a fresh lab's IPv6 ND/MLD frames reach the sink too.)
    assert!(dropped <= r.gen.sent_packets && r.received_packets > 0);
    assert!(
        dropped * 3 > r.gen.sent_packets,
        "the 4 blocked sources of 8 send about half the frames: {dropped} of {}",
        r.gen.sent_packets
    );
    assert_eq!(nic.remove(&blocked[..2]).unwrap(), 2);
    assert_eq!(nic.rules().unwrap().len(), 2);
    assert_eq!(nic.remove(&blocked).unwrap(), 2, "absent rules are ignored");
    assert!(nic.rules().unwrap().is_empty());

    // Prefixes: one rule drops a network (a card's masked TCAM entry); the
    // longest match counts a packet, so an exact source inside it keeps
    // its own counter.
    let net = Prefix::parse("172.16.0.4/30").unwrap(); // sources 4..7
    let inner = Prefix::host(spec.source_addr(4));
    assert!(net.net().contains(&spec.source_addr(7)));
    assert_eq!(nic.install(&[net, inner]).unwrap(), 2);
    rampart_lab::gen::run_into_host(&lab, &spec, &AtomicBool::new(false)).unwrap();
    let rules = nic.rules().unwrap();
    let count = |p: Prefix| rules.iter().find(|(q, _)| *q == p).map(|(_, c)| c.packets);
    let (n, i) = (count(net).unwrap(), count(inner).unwrap());
    assert!(i > 0, "the exact rule counts its source");
    assert!(
        n > i,
        "the /30 counts the other three of its sources: {n} vs {i}"
    );
    assert_eq!(nic.remove(&[net, inner]).unwrap(), 2);
}

#[test]
fn hardware_backends_refuse_clearly_on_veth() {
    let lab = TestLab::up("dtref", 0);
    let ns = lab.host_ns();
    let e = tc_flower::TcFlower::open(Some(&ns), HOST_IF, 512).unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                tier: "tc-flower",
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("cls_flower") || m.contains("hw-tc-offload"),
        "{m}"
    );
    assert!(m.contains("emulated"), "says what to use instead: {m}");
    let e = ethtool::EthtoolNtuple::open(Some(&ns), HOST_IF, 512).unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                tier: "ethtool-ntuple",
                ..
            }
        ),
        "{m}"
    );
    assert!(m.contains("ntuple") && m.contains("host0"), "{m}");
    let m = xdp_hw::check(Some(&ns), HOST_IF).unwrap_err().to_string();
    assert!(
        m.contains("xdp-hw") && m.contains("veth") && m.contains("nfp"),
        "{m}"
    );
    // Through the daemon's config: refused before anything is attached.
    let c = Cleanup::new(&lab);
    let e = Handle::spawn(config(&lab, &c, "hw+xdp-host", "")).map(|_| ());
    assert!(e.is_ok(), "the emulated backend works: {e:?}");
    let _ = Filter::detach(&c.scope);
    let mut cfg = config(&lab, &c, "hw+xdp-host", "");
    cfg.hw.backend = "tc-flower".into();
    // A real NIC's tables are on the host's interface (the NIC hop defaults to it).
    (cfg.hw.netns, cfg.hw.iface) = (None, None);
    let e = Handle::spawn(cfg).unwrap_err().to_string();
    assert!(e.contains("tc-flower"), "{e}");
    assert!(
        !rampart_ddos::filter::pin_dir(&c.scope).exists(),
        "nothing attached on refusal"
    );
}

#[test]
fn attack_is_detected_blocked_offloaded_and_unbanned() {
    let lab = TestLab::up("dtatk", 0);
    let c = Cleanup::new(&lab);
    let h = Handle::spawn(config(
        &lab,
        &c,
        "hw+xdp-host",
        // Each attacker on its own (no /24 aggregate), so that the heaviest
        // can go to the NIC table (it holds exact addresses only).
        "[detect]\nhold_s = 0.5\nattack_end_s = 1\naggregate_min_sources = 1000\n\
         [offload]\ncapacity = 8\n",
    ))
    .unwrap();
    // Let it learn a few (idle) normal intervals.
    wait_for("warm-up", Duration::from_secs(20), || {
        h.view().intervals >= 8
    });
    let spec = GenSpec {
        sources: 64,
        dist: Dist::Zipf { s: 1.0 },
        proto: Proto::Syn,
        pps: Some(50_000.0),
        limit: Limit::Seconds(120.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    // The flood lasts until the daemon has detected, blocked, offloaded
    // and counted NIC drops (the metrics are rendered from the view, one
    // publish behind the NIC's counters), however slow the machine.
    let hw_bytes = |m: &str| {
        sample(
            m,
            "rampart_ddos_dropped_bytes_total{reason=\"hw_rule\",tier=\"emulated\"}",
        )
    };
    let r = std::thread::scope(|s| {
        let t = s.spawn(|| g.run(&stop).unwrap());
        wait_for(
            "the flood blocked and offloaded",
            Duration::from_secs(90),
            || {
                let v = h.view();
                let a = alerts(&c);
                v.blocked_total >= 1
                    && a.iter().any(|x| x["rampart"]["event"] == "hw_add")
                    && a.iter().any(|x| x["rampart"]["event"] == "attack_start")
                    && hw_bytes(&h.metrics.render()) > Some(0.0)
            },
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        t.join().unwrap()
    });
    assert!(r.sent_packets > 0);
    let v = h.view();
    assert!(v.blocked_total >= 1, "the SYN flood was detected: {v:?}");
    let hw = v.tiers.iter().find(|t| t.info.name == "emulated").unwrap();
    let xdp = v.tiers.iter().find(|t| t.info.name == "xdp").unwrap();
    assert!(
        hw.dropped_packets + xdp.dropped_packets > 0,
        "blocked sources were dropped"
    );
    let a = alerts(&c);
    let blocks: Vec<_> = a
        .iter()
        .filter(|x| x["rampart"]["event"] == "block")
        .collect();
    assert!(!blocks.is_empty());
    for b in &blocks {
        let p = Prefix::parse(b["rampart"]["prefix"].as_str().unwrap()).unwrap();
        assert!(
            Prefix::parse("172.16.0.0/12")
                .unwrap()
                .contains(&p.net().addr()),
            "only attackers: {b}"
        );
        assert!(
            !b["rampart"]["detector"].as_str().unwrap().is_empty()
                && !b["rampart"]["reason"].as_str().unwrap().is_empty()
        );
        // EVE: the rule of the detector's vector, the source as src_ip.
        assert!(
            b["alert"]["signature_id"].as_u64().unwrap() / 1000 == 9100,
            "{b}"
        );
        assert_eq!(
            b["src_ip"].as_str(),
            Some(&*p.net().addr().to_string()),
            "{b}"
        );
    }
    assert!(
        a.iter().any(|x| x["rampart"]["event"] == "hw_add"),
        "the heaviest went to the EMULATED NIC"
    );
    assert!(a.iter().any(|x| x["rampart"]["event"] == "attack_start"));
    let m = h.metrics.render();
    assert!(
        m.contains("rampart_ddos_dropped_packets_total{reason=\"hw_rule\",tier=\"emulated\"}"),
        "{m}"
    );
    assert!(
        hw_bytes(&m) > Some(0.0),
        "the bytes twin of the NIC's drops:\n{m}"
    );
    assert!(m.contains("rampart_ddos_detection_latency_seconds_count"));
    // The attack is over: every source is unbanned by its measured rate.
    wait_for("unbans", Duration::from_secs(30), || {
        let v = h.view();
        v.blocked.is_empty() && v.unbanned_total >= blocks.len() as u64
    });
    let a = alerts(&c);
    assert!(a
        .iter()
        .any(|x| x["rampart"]["event"] == "unblock" && x["rampart"]["detector"] == "detection"));
    assert!(
        h.view().tiers.iter().all(|t| t.rules == 0),
        "no rule left in any tier"
    );
    h.stop().unwrap();
}

fn ipt_count(ns: &str) -> u64 {
    let out = rampart_dataplane::cmd::in_ns(
        ns,
        "iptables",
        &["-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n"],
    )
    .unwrap();
    out.lines()
        .find(|l| l.contains("172.16.0.0/12"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn restart_under_attack_leaks_no_packet() {
    let lab = TestLab::up("dtrst", 0);
    let c = Cleanup::new(&lab);
    let cfg = config(&lab, &c, "hw+xdp-host", "[offload]\ncapacity = 4\n");
    let h = Handle::spawn(cfg.clone()).unwrap();
    let spec = GenSpec {
        sources: 16,
        proto: Proto::Udp,
        pps: Some(100_000.0),
        // A cap: the attack runs until both tiers have dropped some of it
        // after the restart (however slow the machine), then stops.
        limit: Limit::Seconds(120.0),
        ..GenSpec::default()
    };
    for i in 0..spec.sources {
        h.command(Command::Block {
            prefix: Prefix::host(spec.source_addr(i)),
            reason: "test".into(),
        })
        .unwrap();
    }
    // Counts every attack frame that reaches the host's stack.
    rampart_dataplane::cmd::in_ns(
        &lab.host_ns(),
        "iptables",
        &["-t", "raw", "-A", "PREROUTING", "-s", "172.16.0.0/12"],
    )
    .unwrap();
    let f = Filter::open(&c.scope).unwrap();
    let xdp0 = f.stats().unwrap().dropped("blacklist");
    let g = Generator::new(&lab, &spec).unwrap();
    let mut hw_total = 0u64;
    let stop_attack = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop_attack).unwrap());
        // Under attack: sources move to the NIC, then the daemon dies and a new one resumes.
        wait_for("offload", Duration::from_secs(20), || {
            h.view()
                .tiers
                .iter()
                .any(|t| t.info.name == "emulated" && t.rules == 4)
        });
        let h = h;
        let before = h.view().blocked.len();
        h.stop().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let h2 = Handle::spawn(cfg.clone()).unwrap();
        let v = h2.view();
        assert!(v.resumed, "resumed from the pinned state");
        assert_eq!(v.blocked.len(), before);
        assert!(
            v.blocked
                .iter()
                .all(|b| b.detector == "operator" && b.operator),
            "reasons restored from the state file"
        );
        let nic = EmulatedNic::open(&nic_hop(&lab), Duration::ZERO).unwrap();
        let nic_total = || -> u64 { nic.rules().unwrap().iter().map(|(_, c)| c.packets).sum() };
        let (nic_at_restart, xdp_at_restart) =
            (nic_total(), f.stats().unwrap().dropped("blacklist"));
        wait_for(
            "both tiers dropping after the restart",
            Duration::from_secs(60),
            || {
                nic_total() > nic_at_restart
                    && f.stats().unwrap().dropped("blacklist") > xdp_at_restart
            },
        );
        stop_attack.store(true, std::sync::atomic::Ordering::Relaxed);
        let r = run.join().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        hw_total = nic_total();
        h2.stop().unwrap();
        r
    });
    let leaked = ipt_count(&lab.host_ns());
    let xdp = f.stats().unwrap().dropped("blacklist") - xdp0;
    assert!(report.sent_packets > 10_000);
    assert_eq!(
        leaked, 0,
        "no attack packet reached the host across the restart"
    );
    // Sources moved off the NIC lose their rule counters, so ≤; nothing can exceed what was sent.
    assert!(xdp + hw_total <= report.sent_packets);
    assert!(
        hw_total > 0 && xdp > 0,
        "both tiers dropped: hw {hw_total}, xdp {xdp}"
    );
}

#[test]
fn api_answers_bad_requests_with_4xx_and_a_message() {
    let lab = TestLab::up("dtapi", 0);
    let c = Cleanup::new(&lab);
    let h = Handle::spawn(config(&lab, &c, "xdp-host", "")).unwrap();
    let tokens = c.dir.join("tokens");
    std::fs::write(&tokens, "# operators\nops api-test-token-1\n").unwrap();
    let srv = rampart_ddosd::api::start(
        &h,
        &rampart_service::ServerConfig {
            listen: Some("127.0.0.1:0".into()),
            metrics_listen: None,
            token_file: Some(tokens),
        },
    )
    .unwrap();
    let a = srv.api_addr().unwrap();
    let t = Some("api-test-token-1");
    // Changes need the token; reads on loopback do not.
    let (code, body) = http(a, "POST", "/v1/blocked", None, r#"{"prefix": "192.0.2.7"}"#);
    assert_eq!(code, 401, "{body}");
    assert!(
        body.contains("\"code\":\"unauthorized\"") && body.contains("Bearer"),
        "{body}"
    );
    let (code, body) = http(
        a,
        "POST",
        "/v1/blocked",
        Some("api-test-token-2"),
        r#"{"prefix": "192.0.2.7"}"#,
    );
    assert_eq!(code, 401);
    assert!(body.contains("unknown token"), "{body}");
    let (code, _) = http(a, "DELETE", "/v1/blocked/192.0.2.7", None, "");
    assert_eq!(code, 401);
    assert_eq!(http(a, "GET", "/healthz", None, ""), (200, "ok\n".into()));
    let (code, body) = http(a, "POST", "/v1/blocked", t, "{not json");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("error") && body.contains("prefix"), "{body}");
    let (code, body) = http(a, "POST", "/v1/blocked", t, r#"{"prefix": "300.1.2.3"}"#);
    assert_eq!(code, 400);
    assert!(body.contains("300.1.2.3"), "{body}");
    let (code, body) = http(
        a,
        "POST",
        "/v1/blocked",
        t,
        r#"{"prefix": "192.0.2.0/24", "bogus": 1}"#,
    );
    assert_eq!(code, 400, "unknown fields refused: {body}");
    let (code, body) = http(a, "DELETE", "/v1/blocked/192.0.2.7", t, "");
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("not blocked"));
    assert!(body.contains("\"code\":\"not_found\""), "{body}");
    let (code, body) = http(a, "DELETE", "/v1/blocked/300.1.2.3", t, "");
    assert_eq!(code, 400, "{body}");
    let (code, _) = http(
        a,
        "POST",
        "/v1/blocked",
        t,
        r#"{"prefix": "192.0.2.7", "reason": "manual"}"#,
    );
    assert_eq!(code, 200);
    let (code, body) = http(a, "POST", "/v1/blocked", t, r#"{"prefix": "192.0.2.7"}"#);
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("\"code\":\"conflict\""), "{body}");
    let (code, body) = http(a, "GET", "/v1/blocked", None, "");
    assert_eq!(code, 200);
    assert!(
        body.contains("192.0.2.7/32") && body.contains("manual"),
        "{body}"
    );
    let (code, body) = http(
        a,
        "POST",
        "/v1/whitelist",
        t,
        r#"{"prefix": "192.0.2.0/24"}"#,
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("1 blocked prefixes released"), "{body}");
    let (code, body) = http(a, "POST", "/v1/blocked", t, r#"{"prefix": "192.0.2.9"}"#);
    assert_eq!(code, 409);
    assert!(body.contains("whitelisted"), "{body}");
    let (code, _) = http(a, "DELETE", "/v1/whitelist/198.51.100.0%2F24", t, "");
    assert_eq!(code, 404);
    // A prefix in the path is URL-encoded.
    let (code, body) = http(a, "DELETE", "/v1/whitelist/192.0.2.0%2F24", t, "");
    assert_eq!(code, 200, "{body}");
    let (code, body) = http(a, "GET", "/v1/whitelist", None, "");
    assert_eq!(
        (code, body.contains("192.0.2.0/24")),
        (200, false),
        "{body}"
    );
    let (code, body) = http(a, "GET", "/v1/nope", None, "");
    assert_eq!(code, 404);
    assert!(body.contains("/v1/status"), "{body}");
    let (code, body) = http(a, "POST", "/v1/status", t, "");
    assert_eq!(code, 405, "{body}");
    let (code, body) = http(a, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    assert!(
        body.contains("rampart_ddos_blocks_total{detector=\"operator\"} 1"),
        "{body}"
    );
    let (code, body) = http(a, "GET", "/v1/tiers", None, "");
    assert_eq!(code, 200);
    assert!(body.contains("\"name\":\"xdp\""), "{body}");
    let (code, body) = http(a, "GET", "/v1/openapi.json", None, "");
    assert_eq!(code, 200);
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        doc["paths"]["/v1/blocked/{prefix}"]["delete"].is_object(),
        "{body}"
    );
    drop(srv);
    h.stop().unwrap();
}

/// Packets from `src` counted by a rule appended to the host's raw PREROUTING
/// (after any DROP rule of the iptables mode, so it counts what got through).
fn ipt_count_src(ns: &str, src: std::net::IpAddr) -> u64 {
    let out = rampart_dataplane::cmd::in_ns(
        ns,
        "iptables",
        &["-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n"],
    )
    .unwrap();
    let want = src.to_string();
    out.lines()
        .find(|l| {
            // pkts bytes [target] prot opt in out source destination
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 8 && f[f.len() - 2] == want && f[f.len() - 1] == "0.0.0.0/0"
        })
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no counting rule for {src}: {out}"))
}

/// One placement mode end to end: 8 operator blocks and a UDP flood from 16
/// sources (8 blocked, 8 not); the blocked ones never reach the host's stack,
/// every other packet does, and the drops are counted in the tiers the mode
/// names (exactly, where no rule moved between tiers).
fn mode_drops_blocked_sources_where_it_says(tag: &str, mode: &str) {
    let lab = TestLab::up(tag, 0);
    let c = Cleanup::new(&lab);
    let hw = mode.starts_with("hw+");
    let sent = if hw { 48_000 } else { 16_000 };
    let spec = GenSpec {
        sources: 16,
        dist: Dist::Uniform,
        proto: Proto::Udp,
        pps: Some(20_000.0),
        limit: Limit::Count(sent),
        ..GenSpec::default()
    };
    // The 8 operator blocks are the only rules: the other 8 sources are
    // whitelisted, so that detection cannot add one of them (20 kpps is
    // below the udp_flood floor, but a loaded machine's generator catches
    // up in bursts).
    let free: Vec<String> = (8..16)
        .map(|i| format!("\"{}\"", spec.source_addr(i)))
        .collect();
    let off = format!(
        "[offload]\ncapacity = 4\n[detect]\nwhitelist = [{}]\n",
        free.join(", ")
    );
    let h = Handle::spawn(config(&lab, &c, mode, &off)).unwrap();
    for i in 0..8 {
        h.command(Command::Block {
            prefix: Prefix::host(spec.source_addr(i)),
            reason: "test".into(),
        })
        .unwrap();
    }
    for i in 0..16 {
        rampart_dataplane::cmd::in_ns(
            &lab.host_ns(),
            "iptables",
            &[
                "-t",
                "raw",
                "-A",
                "PREROUTING",
                "-s",
                &spec.source_addr(i).to_string(),
            ],
        )
        .unwrap();
    }
    let lost0 = rampart_lab::gen::wire_lost_total(&lab).unwrap();
    let g = Generator::new(&lab, &spec).unwrap();
    let r = std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&AtomicBool::new(false)).unwrap());
        if hw {
            // The planner offloads by measured rate: the 4 heaviest blocked sources move.
            wait_for("offload", Duration::from_secs(20), || {
                h.view()
                    .tiers
                    .iter()
                    .any(|t| t.info.name == "emulated" && t.rules == 4)
            });
        }
        run.join().unwrap()
    });
    assert_eq!(r.sent_packets, sent);
    std::thread::sleep(Duration::from_millis(300));
    // Let the daemon read the counters after the last packet.
    let n0 = h.view().intervals;
    wait_for("two intervals", Duration::from_secs(10), || {
        h.view().intervals >= n0 + 2
    });
    let mut passed = 0;
    for i in 0..16 {
        let n = ipt_count_src(&lab.host_ns(), spec.source_addr(i));
        if i < 8 {
            assert_eq!(n, 0, "{mode}: blocked source {i} reached the host stack");
        } else {
            assert!(n > 0, "{mode}: unblocked source {i} never arrived");
            passed += n;
        }
    }
    let v = h.view();
    let dropped: u64 = v.tiers.iter().map(|t| t.dropped_packets).sum();
    let tier = |name: &str| v.tiers.iter().find(|t| t.info.name == name);
    match mode {
        "xdp-host" | "xdp-nic" => {
            let x = tier("xdp").expect("xdp tier");
            assert_eq!(x.rules, 8);
            assert_eq!(
                x.info.location.contains("nic-wan"),
                mode == "xdp-nic",
                "{mode}: filter location {}",
                x.info.location
            );
            assert!(tier("emulated").is_none());
        }
        "hw+xdp-nic" => {
            // Exclusive placement: the 4 offloaded sources are not in the XDP filter too.
            let (t_hw, x) = (tier("emulated").unwrap(), tier("xdp").unwrap());
            assert_eq!((t_hw.rules, x.rules), (4, 4));
            assert!(
                t_hw.dropped_packets > 0 && x.dropped_packets > 0,
                "{:?}",
                v.tiers
            );
            assert!(x.info.location.contains("nic-wan"), "{}", x.info.location);
        }
        "iptables" => {
            let t = tier("iptables").expect("iptables tier");
            assert_eq!(t.rules, 8);
        }
        _ => unreachable!(),
    }
    if hw {
        // Counters of a rule that moved tiers start again in the new tier.
        assert!(
            passed + dropped <= sent && dropped > 0,
            "{mode}: {passed} + {dropped} vs {sent}"
        );
    } else {
        // A busy machine's veth rings may overflow: the veths count those.
        let lost = rampart_lab::gen::wire_lost_total(&lab).unwrap() - lost0;
        assert_eq!(
            passed + dropped + lost,
            sent,
            "{mode}: every packet passed, counted as dropped or lost on the wire ({lost}): {:?}",
            v.tiers
        );
    }
    h.stop().unwrap();
    if mode.contains("nic") {
        rampart_ddosd::daemon::unchain_nic(&c.hop).unwrap();
        assert!(!rampart_ddos::filter::pin_dir(&c.nic_scope).exists());
    }
}

#[test]
fn xdp_host_mode_drops_blocked_sources_on_the_host() {
    mode_drops_blocked_sources_where_it_says("dmxh", "xdp-host");
}

#[test]
fn xdp_nic_mode_drops_blocked_sources_on_the_nic_hop() {
    mode_drops_blocked_sources_where_it_says("dmxn", "xdp-nic");
}

#[test]
fn hw_xdp_nic_mode_splits_blocked_sources_between_nic_table_and_nic_xdp() {
    mode_drops_blocked_sources_where_it_says("dmhn", "hw+xdp-nic");
}

#[test]
fn iptables_mode_drops_blocked_sources_with_ipset() {
    mode_drops_blocked_sources_where_it_says("dmip", "iptables");
}

/// A hardware tier without per-rule counters (the EMULATED NIC with its
/// counters hidden, as an ethtool-ntuple card): the sources it drops vanish
/// from every counter, so without an estimate the rate monitor would read 0
/// and unban them mid-attack. Their rates come from withdrawal probes: no
/// source is unbanned while the flood runs, probes happen, and once the
/// flood stops every source is unbanned.
#[test]
fn counterless_hw_tier_keeps_attackers_blocked_via_probes() {
    let lab = TestLab::up("dtprb", 0);
    let c = Cleanup::new(&lab);
    let h = Handle::spawn(config(
        &lab,
        &c,
        "hw+xdp-host",
        // `config` ends inside its [hw] section: the first two keys land there.
        "counters = false\nprobes_per_interval = 2\n[detect]\nhold_s = 0.3\nattack_end_s = 1\n\
         aggregate_min_sources = 1000\n\
         [offload]\ncapacity = 4\n",
    ))
    .unwrap();
    let v = h.view();
    let hw = v.tiers.iter().find(|t| t.info.name == "emulated").unwrap();
    assert!(
        hw.info.location.contains("counters hidden"),
        "{}",
        hw.info.location
    );
    wait_for("warm-up", Duration::from_secs(20), || {
        h.view().intervals >= 8
    });
    let spec = GenSpec {
        sources: 16,
        dist: Dist::Uniform,
        proto: Proto::Syn,
        pps: Some(20_000.0),
        limit: Limit::Seconds(120.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&lab, &spec).unwrap();
    let probes = || {
        sample(
            &h.metrics.render(),
            "rampart_ddos_rule_updates_total{op=\"probe\",tier=\"emulated\"}",
        )
        .unwrap_or(0.0)
    };
    let mut unbanned_during = 0;
    let i0 = h.view().intervals;
    // The flood goes on until the NIC has held sources for 20 intervals
    // (2 s) with probes running, however long detection and the offload
    // took on this machine; `late` is the view at that point.
    let stop = AtomicBool::new(false);
    let late = std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop).unwrap());
        let t0 = Instant::now();
        let mut offloaded_at = None;
        let late = loop {
            let v = h.view();
            unbanned_during = v.unbanned_total;
            if offloaded_at.is_none()
                && v.tiers
                    .iter()
                    .any(|t| t.info.name == "emulated" && t.rules > 0)
            {
                offloaded_at = Some(v.intervals);
            }
            if offloaded_at.is_some_and(|i| v.intervals >= i + 20) && probes() > 0.0 {
                break v;
            }
            assert!(
                !run.is_finished() && t0.elapsed() < Duration::from_secs(90),
                "the heaviest sources went to the NIC table (at interval {offloaded_at:?}) and were probed ({}): {v:?}",
                probes()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(run.join().unwrap().sent_packets > 0);
        late
    });
    let flood_intervals = h.view().intervals - i0;
    // Without an estimate the NIC's sources read 0 pps and the planner swaps
    // all K of them out every interval (2K updates); with it, only the
    // probed ones leave and come back.
    let hw_adds = alerts(&c)
        .iter()
        .filter(|a| a["rampart"]["event"] == "hw_add")
        .count() as u64;
    assert!(
        hw_adds <= 4 + 3 * flood_intervals,
        "{hw_adds} NIC rule adds in {flood_intervals} intervals: the NIC table churns"
    );
    // 2 s after the offload every source the NIC holds has been measured
    // over a whole interval in XDP (probes): its rate is its real ~1250 pps,
    // not the 0 its hidden counter would give.
    let in_hw: Vec<_> = late.rates.iter().filter(|r| r.in_hw).collect();
    assert!(!in_hw.is_empty(), "{:?}", late.rates);
    for r in &in_hw {
        assert!(
            r.pps > 600.0,
            "{} held by the counterless NIC has an estimated rate: {r:?}",
            r.prefix
        );
    }
    assert!(h.view().blocked_total >= 8, "the SYN flood was detected");
    assert_eq!(
        unbanned_during, 0,
        "no attacker unbanned while the flood ran (hidden NIC counters read as 0 otherwise)"
    );
    wait_for("unbans", Duration::from_secs(30), || {
        let v = h.view();
        v.blocked.is_empty() && v.unbanned_total > 0
    });
    assert!(
        h.view().tiers.iter().all(|t| t.rules == 0),
        "no rule left in any tier"
    );
    h.stop().unwrap();
}
