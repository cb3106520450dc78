//! `rampart stream plan`, `rampart stream run --offload` and `rampart bench
//! stream` from the command line: the plan's output, one clear line for
//! bad input, the benchmark's JSON objects, and its lab removed at the end
//! and on Ctrl-C.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{one_error_line, rampart};

fn netns() -> BTreeSet<String> {
    let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Namespaces of a benchmark lab (`sb…-wan`, ...): what `bench stream` creates.
fn bench_labs() -> BTreeSet<String> {
    netns()
        .into_iter()
        .filter(|n| n.starts_with("sb") && n.ends_with("-host"))
        .collect()
}

#[test]
fn plan_shows_what_runs_in_xdp() {
    let o = rampart(&[
        "stream",
        "plan",
        "portscan",
        "--target",
        "nfp",
        "--via",
        "afxdp",
        "--offload",
        "tuples",
        "--sources",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(p["target"], "nfp");
    assert_eq!(p["offloaded"], serde_json::json!(["source", "handshake"]));
    assert_eq!(p["key_by_free"], false);
    assert_eq!(p["object"]["program"], "xdp_stream_nfp");
    assert!(p["object"]["insns"].as_u64().unwrap() <= 8192);
    assert_eq!(p["config"]["timestamps"], "none");

    // The default: the tap, with the connection parts aggregated in XDP.
    let o = rampart(&["stream", "plan", "flowmeter"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("xdp       part"), "{out}");
    assert!(out.contains("aggregation table"), "{out}");
    assert!(out.contains("userspace flows"), "{out}");
    assert!(out.contains("xdp_stream_tap"), "{out}");
    assert!(out.contains("fits host-xdp: yes"), "{out}");
    // AF_XDP without --offload: tuples (the only offload it has), not the
    // tap's default aggregation.
    let o = rampart(&["stream", "plan", "portscan", "--via", "afxdp"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("the frame becomes the record"), "{out}");
    // The nfp cannot aggregate (nor run the tap at all): refused, with why.
    let e = one_error_line(
        &rampart(&["stream", "plan", "synflood", "--target", "nfp"]),
        "nfp cannot run the offload",
    );
    assert!(
        e.contains("array_of_maps") && e.contains("bpf_ringbuf_reserve"),
        "{e}"
    );
}

#[test]
fn bad_offload_input_gets_one_clear_line() {
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "flowmeter",
            "--source",
            "pcap:/nonexistent.pcap",
            "--offload",
            "on",
        ]),
        "needs a live source",
    );
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "flowmeter",
            "--source",
            "pcap:/nonexistent.pcap",
            "--sources",
            "2",
        ]),
        "--sources and --timestamps are for --source afxdp:",
    );
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "flowmeter",
            "--source",
            "pcap:/nonexistent.pcap",
            "--offload",
            "aggregate",
        ]),
        "use --source xdp:",
    );
    one_error_line(
        &rampart(&[
            "stream",
            "plan",
            "flowmeter",
            "--via",
            "afxdp",
            "--offload",
            "aggregate",
        ]),
        "--offload aggregate needs --via tap",
    );
    one_error_line(
        &rampart(&[
            "stream",
            "plan",
            "synflood",
            "--via",
            "afxdp",
            "--offload",
            "tuples",
            "--sources",
            "0",
        ]),
        "0 source replicas",
    );
    one_error_line(
        &rampart(&["stream", "plan", "synflood", "--target", "smartnic"]),
        "smartnic",
    );
    one_error_line(
        &rampart(&["bench", "stream", "--sources", "9"]),
        "--sources: each must be in 1..=8",
    );
    one_error_line(
        &rampart(&["bench", "stream", "--seconds", "0"]),
        "--seconds 0",
    );
}

/// One test, so the two benchmark runs never see each other's lab.
#[test]
fn bench_stream_output_and_lab_cleanup() {
    bench_stream_prints_runs_and_a_summary_and_removes_its_lab();
    bench_stream_removes_its_lab_on_ctrl_c();
}

fn bench_stream_prints_runs_and_a_summary_and_removes_its_lab() {
    let before = bench_labs();
    let out = std::env::temp_dir().join(format!("rampart-sb-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = rampart(&[
        "bench",
        "stream",
        "--out",
        out.to_str().unwrap(),
        "--app",
        "synflood",
        "--offload",
        "on,off",
        "--seconds",
        "0.3",
        "--pps",
        "100000",
        "--flows",
        "256",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let objs: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(objs.len(), 3, "two runs and a summary");
    for r in &objs[..2] {
        assert_eq!(r["event_type"], "run");
        for k in [
            "tuples_per_s",
            "afxdp_ceiling_per_s",
            "packets_lost",
            "sent_packets",
        ] {
            assert!(r[k].is_number(), "{k} in {r}");
        }
        // SYNs all pass the handshake filter and become tuples.
        assert!(r["tuples"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(objs[0]["offload"], "on");
    // The lab's own IPv6 neighbour/MLD frames, dropped by the offloaded filter.
    assert!(objs[0]["xdp"]["filtered"].is_number());
    assert_eq!(objs[1]["offload"], "off");
    let s = &objs[2];
    assert_eq!(s["event_type"], "summary");
    assert!(s["on_over_off"].is_number() && s["on_over_ceiling"].is_number());
    assert!(s["app_cpu_ns_per_tuple_on"].is_number() && s["app_cpu_ns_per_tuple_off"].is_number());
    // --out: the CSVs and the two figures (PNG signature).
    for f in [
        "synflood-runs.csv",
        "synflood-summary.csv",
        "stream-offload-synflood.png",
        "stream-offload-synflood-cpu.png",
    ] {
        let b = std::fs::read(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        if f.ends_with(".png") {
            assert!(b.starts_with(b"\x89PNG\r\n\x1a\n"), "{f} is a PNG");
        } else {
            assert!(String::from_utf8_lossy(&b).lines().count() >= 2, "{f}");
        }
    }
    std::fs::remove_dir_all(&out).unwrap();
    assert_eq!(bench_labs(), before, "the benchmark's lab is gone");
}

fn bench_stream_removes_its_lab_on_ctrl_c() {
    let before = bench_labs();
    let child = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args([
            "bench",
            "stream",
            "--seconds",
            "60",
            "--pps",
            "10000",
            "--json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for its lab to exist.
    let t0 = Instant::now();
    while bench_labs() == before && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_ne!(bench_labs(), before, "the benchmark brought a lab up");
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(bench_labs(), before, "the lab is removed on Ctrl-C");
}

/// `rampart bench stream-host`, a smoke run (its numbers mean nothing):
/// one object per run, one per feed with the fields — every feed
/// analysed packets —, a summary stating each condition of the bar, the
/// CSVs and plots with `--out`, and its lab removed.
#[test]
fn bench_stream_host_runs_every_feed_and_states_the_bar() {
    let labs = || -> BTreeSet<String> {
        netns()
            .into_iter()
            .filter(|n| n.starts_with("sh") && n.ends_with("-host"))
            .collect()
    };
    let before = labs();
    let out = std::env::temp_dir().join(format!("rampart-sh-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = rampart(&[
        "bench",
        "stream-host",
        "--json",
        "--out",
        out.to_str().unwrap(),
        "--seconds",
        "0.5",
        "--wrk-seconds",
        "1",
        "--repeat",
        "1",
        "--pps",
        "50000",
        "--flows",
        "4096",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let objs: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let of = |t: &str| -> Vec<&serde_json::Value> {
        objs.iter().filter(|o| o["event_type"] == t).collect()
    };
    assert_eq!(of("run").len(), 6, "two baselines and four feeds");
    // Each monitor is measured against the same phases without it, just
    // before: its own baseline's busy time and wrk's rate without it.
    for r in of("run").iter().skip(2) {
        assert!(r["baseline_busy_cpu_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["service_rps_off"].as_f64().unwrap() > 0.0, "{r}");
        let ratio = r["service_rps"].as_f64().unwrap() / r["service_rps_off"].as_f64().unwrap();
        assert!(
            (ratio - r["service_rps_ratio"].as_f64().unwrap()).abs() < 1e-9,
            "{r}"
        );
    }
    let feeds = of("feed");
    let names: Vec<&str> = feeds.iter().map(|f| f["feed"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["tap-tuples", "tap-aggregate", "afxdp-raw", "peer-softflowd"]
    );
    for f in &feeds {
        for k in [
            "packets_offered",
            "packets_analyzed",
            "lost_pct",
            "host_cpu_s",
            "packets_per_cpu_s",
            "service_rps_ratio",
        ] {
            assert!(f[k].is_number(), "{k} in {f}");
        }
        assert!(f["packets_analyzed"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["packets_per_cpu_s"].as_f64().unwrap() > 0.0, "{f}");
    }
    // AF_XDP holds every frame: nginx cannot answer.
    assert_eq!(feeds[2]["service_rps_ratio"], 0.0, "{}", feeds[2]);
    let s = of("summary");
    assert_eq!(s.len(), 1);
    let bar = &s[0]["bar"];
    for k in [
        "tap_aggregate_over_afxdp_raw",
        "tap_aggregate_over_peer",
        "tap_tuples_over_afxdp_raw",
    ] {
        assert!(bar[k].as_f64().unwrap() > 0.0, "{k} in {bar}");
    }
    for k in [
        "aggregate_at_least_3x_afxdp",
        "aggregate_at_least_5x_peer",
        "tuples_at_least_1x_afxdp",
        "taps_keep_095_of_the_service",
        "met",
    ] {
        assert!(bar[k].is_boolean(), "{k} in {bar}");
    }
    assert_eq!(bar["afxdp_refused_without_consume"], true, "{bar}");
    for f in [
        "runs.csv",
        "feeds.csv",
        "summary.json",
        "stream-host-packets-per-cpu.png",
        "stream-host-service.png",
    ] {
        let b = std::fs::read(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(!b.is_empty(), "{f}");
    }
    std::fs::remove_dir_all(&out).unwrap();
    assert_eq!(labs(), before, "the benchmark's lab is gone");
}
