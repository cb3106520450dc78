//! The `rampart` binary end to end: lab commands, the demo's JSON, and the
//! promise that every bad input gets exactly one clear error line and a
//! non-zero exit.

mod common;

use std::process::{Command, Output};

use common::rampart;
use rampart_lab::testing::{require_kernel, TestLab};

fn rampart_env(args: &[&str], env: (&str, &str)) -> Output {
    common::cmd()
        .args(args)
        .env(env.0, env.1)
        .output()
        .expect("run rampart")
}

/// Exactly one non-empty stderr line starting with "error:", containing `needle`, and exit `code`.
fn assert_one_error_line(o: &Output, needle: &str, code: i32) {
    let line = common::one_error_line(o, needle);
    assert_eq!(o.status.code(), Some(code), "exit code for {line:?}");
}

#[test]
fn bad_generator_arguments_get_one_clear_line() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["lab", "gen", "--sources", "0"],
            "--sources 0 out of range",
        ),
        (&["lab", "gen", "--sources", "2000000"], "out of range"),
        (
            &["lab", "gen", "--dist", "pareto"],
            "unknown distribution \"pareto\"",
        ),
        (
            &["lab", "gen", "--dist", "zipf", "--dist-param", "-1"],
            "zipf exponent",
        ),
        (&["lab", "gen", "--pps", "-5"], "--pps -5 is not a rate"),
        (&["lab", "gen", "--pps", "0"], "is not a rate"),
        (&["lab", "gen", "--proto", "gre"], "unknown protocol"),
        (
            &["lab", "gen", "--size", "20"],
            "packet size 20 out of range",
        ),
        (
            &["lab", "gen", "--proto", "syn", "--ipv6", "--size", "64"],
            "too small",
        ),
        (
            &["lab", "gen", "--seconds", "-1"],
            "--seconds -1 out of range",
        ),
        (&["lab", "gen", "--count", "0"], "--count 0"),
        (
            &["lab", "gen", "--threads", "0"],
            "--threads 0 out of range",
        ),
        (
            &["lab", "gen", "--seconds", "1", "--count", "3"],
            "cannot be used with",
        ),
        (&["lab", "gen", "--sources", "ten"], "invalid value 'ten'"),
        (&["lab", "up", "--prefix", "bad-prefix"], "bad lab prefix"),
        (&["lab", "frobnicate"], "unrecognized subcommand"),
    ];
    for (args, needle) in cases {
        let o = rampart(args);
        assert_one_error_line(&o, needle, 2);
    }
}

#[test]
fn a_lab_that_is_not_up_is_named() {
    require_kernel();
    let o = rampart(&["lab", "gen", "--prefix", "nosuchlab9"]);
    assert_one_error_line(&o, "lab \"nosuchlab9\" is not up", 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("rampart lab up --prefix nosuchlab9"));
}

#[test]
fn missing_root_is_one_clear_line() {
    for args in [
        &["lab", "up", "--prefix", "nr1"][..],
        &["lab", "down", "--prefix", "nr1"][..],
    ] {
        let o = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                env!("CARGO_BIN_EXE_rampart"),
            ])
            .args(args)
            .output()
            .expect("setpriv (util-linux)");
        assert_one_error_line(&o, "needs root", 1);
    }
}

#[test]
fn a_missing_kernel_feature_is_named() {
    let lab = TestLab::up("feat", 0);
    let o = rampart_env(
        &["lab", "gen", "--prefix", lab.prefix(), "--count", "10"],
        ("RAMPART_TEST_DISABLE_FEATURE", "xdp-live-frames"),
    );
    assert_one_error_line(&o, "kernel feature missing: XDP live frames", 1);
}

#[test]
fn lab_commands_and_gen_json() {
    let lab = TestLab::up("cli", 0);
    let o = rampart(&["lab", "status", "--prefix", lab.prefix(), "--json"]);
    assert!(o.status.success());
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st["state"], "up");
    assert_eq!(st["namespaces"].as_array().unwrap().len(), 3);

    let o = rampart(&[
        "lab",
        "gen",
        "--prefix",
        lab.prefix(),
        "--sources",
        "1024",
        "--count",
        "100000",
        "--pps",
        "500000",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["sent_packets"], 100_000);
    for k in ["seconds", "sent_pps", "received_packets", "received_pps"] {
        assert!(r[k].is_number(), "{k} in {r}");
    }
    assert!(r["received_packets"].as_u64().unwrap() >= 99_000);
}

#[test]
fn the_demo_reports_json_and_cleans_up() {
    require_kernel();
    let prefix = rampart_lab::testing::unique_prefix("demo");
    let o = rampart(&[
        "demo",
        "--prefix",
        &prefix,
        "--baseline-seconds",
        "3",
        "--attack-seconds",
        "2",
        "--udp-pps",
        "50000",
        "--syn-pps",
        "50000",
        "--unban-timeout",
        "20",
        "--dns-seconds",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        all["stages"],
        serde_json::json!(["ddos", "stream", "tenant"])
    );
    assert!(all["duration_s"].as_f64().unwrap() > 0.0);
    // One rampart run: the flowmeter and the port-scan app on the tap, the
    // tenant's limiter in front of its resolver.
    let s = &all["stream"];
    assert!(s["flows"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["scanner_flagged"], true, "{s}");
    let t = &all["tenant"];
    assert!(t["flood_queries"].as_u64().unwrap() > 0, "{t}");
    assert!(
        t["truncated"].as_u64().unwrap() + t["dropped"].as_u64().unwrap() > 0,
        "{t}"
    );
    assert!(t["dig_ok"].as_u64().unwrap() > 0, "{t}");
    let r = &all["ddos"];
    for k in [
        "attack_dropped_pct",
        "legit_ok_pct",
        "nic_share_pct",
        "oracle_nic_share_pct",
        "wrk_rps_baseline",
    ] {
        assert!(r[k].is_number(), "{k} in {r}");
    }
    assert!(r.get("time_to_mitigate_s").is_some() && r["false_bans"].is_u64());
    assert!(r["attack_packets"].as_u64().unwrap() > 0);
    assert!(r["sources_blocked"].as_u64().unwrap() > 0, "{r}");
    // Every attack frame that entered the NIC was dropped by a tier or reached the host.
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
    let entered = n("attack_packets") - n("attack_lost_before_nic");
    assert!(
        n("nic_dropped") + n("xdp_dropped") + n("leaked") <= entered,
        "{r}"
    );
    if std::thread::available_parallelism().map_or(1, |c| c.get()) > 1 {
        assert_eq!(
            r["service_cpu"], 1,
            "nginx and wrk pinned away from the generator"
        );
    }
    assert!(!rampart_lab::Lab::new(&prefix)
        .unwrap()
        .status()
        .unwrap()
        .namespaces
        .iter()
        .any(|n| n.exists));
    let scope = format!("{prefix}-host-host0");
    assert!(
        !rampart_ddos::filter::pin_dir(&scope).exists(),
        "the demo's filter pins are removed"
    );
}
