//! Prometheus' own linter on the daemon's live `/metrics`, and the shipped
//! alerting rules: the daemon runs on the shipped configuration in a lab
//! while a DNS amplification attack is blocked (so every family has
//! samples: drops by reason, blocked sources, detection's per-victim
//! rates), `promtool check metrics` on what the API listener serves must
//! print nothing, the metrics must agree with `GET /v1/status`, and
//! `promtool check rules` must accept `dist/prometheus/rampart-rules.yml`;
//! every DDoS metric the shipped Grafana board and rules query exists.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rampart_ddosd::Handle;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_service::testing::{dist_queries_missing, promtool_check_metrics};

mod common;
use common::{api_get, http, poll, sample, shipped_config, Cleanup};

#[test]
fn live_metrics_pass_promtool_and_agree_with_the_api() {
    let lab = TestLab::up("eprom", 0);
    let c = Cleanup::new(&lab);
    let cfg = shipped_config(&lab, &c);
    let server = cfg.server.clone();
    let h = Handle::spawn(cfg).expect("the daemon starts on the shipped config");
    let api = rampart_ddosd::api::start(&h, &server).expect("the API starts");
    let addr = api.api_addr().expect("the API listens");
    let n0 = h.view().intervals;
    assert!(
        poll(Duration::from_secs(30), || h.view().intervals >= n0 + 4),
        "the daemon runs its intervals"
    );
    // Before any attack: promtool is content, and every label combination
    // the daemon can report is there at 0.
    let (code, quiet) = http(addr, "GET", "/metrics", None, "");
    assert_eq!(code, 200, "{quiet}");
    let problems = promtool_check_metrics(&quiet);
    assert!(problems.is_empty(), "promtool: {problems:#?}\n{quiet}");
    for line in [
        "rampart_ddos_blocks_total{detector=\"udp_amplification\"} 0",
        "rampart_ddos_unblocks_total{reason=\"detection\"} 0",
        "rampart_ddos_rule_updates_total{op=\"add\",tier=\"xdp\"} 0",
        "rampart_ddos_dropped_packets_total{reason=\"blacklist\",tier=\"xdp\"} 0",
        "rampart_ddos_dropped_bytes_total{reason=\"policed\",tier=\"xdp\"} 0",
        "rampart_ddos_passed_packets_total{reason=\"not_ip\",tier=\"xdp\"} 0",
    ] {
        assert!(
            quiet.lines().any(|l| l == line),
            "pre-created: {line}\n{quiet}"
        );
    }
    assert!(
        quiet.lines().any(|l| l.starts_with("rampart_build_info{")
            && l.contains("daemon=\"rampart-ddosd\"")
            && l.ends_with(" 1")),
        "{quiet}"
    );

    // 40 DNS reflectors at 250 packets/s each: far above the shipped floor.
    let spec = GenSpec {
        sources: 40,
        proto: Proto::Udp,
        sport: 53,
        dport: Some(33_333),
        size: 600,
        pps: Some(10_000.0),
        limit: Limit::Seconds(60.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let text = std::thread::scope(|sc| {
        let run = sc.spawn(|| g.run(&stop));
        // One by one or aggregated into their /24.
        let dropped = |t: &str| {
            ["blacklist", "blacklist_prefix"].iter().any(|r| {
                let key =
                    format!("rampart_ddos_dropped_bytes_total{{reason=\"{r}\",tier=\"xdp\"}}");
                sample(t, &key).unwrap_or(0.0) > 0.0
            })
        };
        let mut last = String::new();
        let seen = poll(Duration::from_secs(60), || {
            last = http(addr, "GET", "/metrics", None, "").1;
            dropped(&last) && sample(&last, "rampart_ddos_attacks").unwrap_or(0.0) > 0.0
        });
        stop.store(true, Ordering::Relaxed);
        assert!(run.join().unwrap().unwrap().sent_packets > 0);
        assert!(
            seen,
            "no blocked reflector's bytes dropped while the attack ran:\n{last}"
        );
        last
    });
    let problems = promtool_check_metrics(&text);
    assert!(problems.is_empty(), "promtool: {problems:#?}\n{text}");
    let missing = dist_queries_missing(&text, &["rampart_ddos_", "rampart_alert", "rampart_build"]);
    assert!(
        missing.is_empty(),
        "dist/ (Grafana board, rules) queries metrics the daemon does not serve: {missing:?}"
    );
    for family in [
        "rampart_ddos_top_source_packets_per_second{",
        "rampart_ddos_victim_packets_per_second{",
        "rampart_ddos_victim_source_level_packets_per_second{",
        "rampart_ddos_blocked_sources{tier=\"xdp\"}",
        "rampart_ddos_seen_bytes_total{tier=\"xdp\"}",
    ] {
        assert!(text.contains(family), "{family} during the attack:\n{text}");
    }
    assert!(
        sample(
            &text,
            "rampart_ddos_blocks_total{detector=\"udp_amplification\"}"
        )
        .unwrap_or(0.0)
            > 0.0,
        "{text}"
    );

    // What /metrics says is what the API says (both read one published
    // view; read them until one view is seen by both).
    let mut report = String::new();
    let agree = poll(Duration::from_secs(30), || {
        let before = api_get(addr, "/v1/status");
        let m = http(addr, "GET", "/metrics", None, "").1;
        let after = api_get(addr, "/v1/status");
        if before["intervals"] != after["intervals"] {
            return false;
        }
        let s = after;
        let blocked_xdp = sample(&m, "rampart_ddos_blocked_sources{tier=\"xdp\"}");
        let pairs = [
            (
                "threshold",
                s["threshold"].as_f64(),
                sample(&m, "rampart_ddos_planner_threshold"),
            ),
            (
                "intervals",
                s["intervals"].as_f64(),
                sample(&m, "rampart_ddos_intervals_total"),
            ),
            (
                "under_attack",
                s["under_attack"].as_bool().map(|b| f64::from(u8::from(b))),
                sample(&m, "rampart_ddos_under_attack"),
            ),
            (
                "policed",
                s["policed"].as_f64(),
                sample(&m, "rampart_ddos_policed_sources"),
            ),
            ("blocked", s["blocked"].as_f64(), blocked_xdp),
            (
                "victims_protected",
                s["victims_protected"].as_f64(),
                sample(&m, "rampart_ddos_protected_victims"),
            ),
        ];
        report = format!("{pairs:?}");
        pairs.iter().all(|(_, a, b)| a.is_some() && a == b)
    });
    assert!(
        agree,
        "/v1/status vs /metrics (name, api, metrics): {report}"
    );

    drop(api);
    h.stop().expect("the daemon stops cleanly");
    drop(c);
    drop(lab);
}

/// `promtool check rules` accepts the shipped alerting rules.
#[test]
fn shipped_alerting_rules_pass_promtool() {
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/prometheus/rampart-rules.yml"
    );
    let out = std::process::Command::new("promtool")
        .args(["check", "rules", rules])
        .output()
        .unwrap_or_else(|e| panic!("promtool: {e} (./run test installs the prometheus package)"));
    assert!(
        out.status.success(),
        "promtool check rules {rules}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
