//! `rampart bench ddos --quick --smoke` end to end: every series of the
//! four figures has data, the files are written, and nothing is left
//! behind — also when the run is interrupted.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rampart_bench::ddos::experiments::{self as bench, DdosBenchSpec};

// xdp-filter pins globally: one run at a time.
static ONE: Mutex<()> = Mutex::new(());

const MODES: [&str; 4] = ["xdp-host", "hw+xdp-host", "xdp-nic", "hw+xdp-nic"];
const PEERS: [&str; 4] = ["nft_set", "iptables", "ipset", "xdp_filter"];

fn leftovers(prefix: &str) -> Vec<String> {
    let mut v = Vec::new();
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    for l in String::from_utf8_lossy(&ns.stdout).lines() {
        if l.starts_with(prefix) {
            v.push(format!("netns {l}"));
        }
    }
    for dir in ["/sys/fs/bpf/rampart/lab", "/sys/fs/bpf/rampart/ddos"] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with(prefix) {
                    v.push(format!("pin {dir}/{n}"));
                }
            }
        }
    }
    if Path::new("/sys/fs/bpf/xdp-filter").exists() {
        v.push("pin /sys/fs/bpf/xdp-filter".into());
    }
    let scratch = std::env::temp_dir().join(format!("rampart-bench-ddos-{prefix}"));
    if scratch.exists() {
        v.push(format!("dir {}", scratch.display()));
    }
    // Processes (nginx) still holding files of the run's scratch directory.
    let needle = scratch.to_string_lossy().into_owned();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        if fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .map(|l| l.to_string_lossy().contains(&needle))
                .unwrap_or(false)
        }) {
            v.push(format!("process {}", e.file_name().to_string_lossy()));
        }
    }
    v
}

#[test]
fn smoke_run_fills_every_series_and_cleans_up() {
    rampart_lab::testing::require_kernel();
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = rampart_lab::testing::unique_prefix("bds");
    let out = std::env::temp_dir().join(format!("rampart-e2e-bd-{prefix}"));
    let _ = std::fs::remove_dir_all(&out);
    let spec = DdosBenchSpec {
        lab_prefix: Some(prefix.clone()),
        ..DdosBenchSpec::smoke()
    };
    let cancel = AtomicBool::new(false);
    let r = bench::run(&spec, &out, &cancel, &|s| eprintln!("{s}")).expect("smoke run");

    // Figure 1: every (dist, sources) point has the ceiling, every mode and every peer.
    let points: BTreeSet<(String, u32)> = r
        .drop_rate
        .iter()
        .map(|d| (d.dist.clone(), d.sources))
        .collect();
    assert_eq!(
        points.iter().map(|p| p.0.as_str()).collect::<BTreeSet<_>>(),
        ["gaussian", "uniform", "zipf"].into_iter().collect()
    );
    for (dist, n) in &points {
        for v in ["xdp_drop"].iter().chain(&MODES).chain(&PEERS) {
            let p = r
                .drop_rate
                .iter()
                .find(|d| &d.dist == dist && d.sources == *n && d.variant == *v)
                .unwrap_or_else(|| panic!("no drop-rate point for {v} at {dist}/{n}"));
            assert!(p.mpps > 0.0, "{v} at {dist}/{n} dropped nothing: {p:?}");
        }
    }
    // Figure 2: every variant dropped the paced attack; XDP ones have run times.
    for v in ["xdp_drop"].iter().chain(&MODES).chain(&PEERS) {
        let c = r
            .cpu
            .iter()
            .find(|c| c.variant == *v)
            .unwrap_or_else(|| panic!("no CPU row for {v}"));
        assert!(c.dropped_pps > 0.0, "{v}: {c:?}");
        if !matches!(*v, "nft_set" | "iptables" | "ipset") {
            assert!(
                c.host0_ns_per_pkt.is_some() || c.nic_wan_ns_per_pkt.is_some(),
                "{v}: no BPF run time: {c:?}"
            );
        }
    }
    let hw = r.cpu.iter().find(|c| c.variant == "xdp-nic").unwrap();
    assert!(
        hw.nic_wan_runs > 0 && hw.host0_ns_per_pkt.is_none(),
        "{hw:?}"
    );
    // Figure 3: every variant (and no filter) served requests at every step.
    for v in ["none"].iter().chain(&MODES).chain(&PEERS) {
        let pts: Vec<_> = r.legit.iter().filter(|l| l.variant == *v).collect();
        assert_eq!(pts.len(), spec.legit_steps.len(), "{v}: {pts:?}");
        assert!(pts.iter().all(|l| l.rps > 0.0), "{v}: {pts:?}");
        assert!(
            pts.iter().any(|l| l.attack_pps > 0.0),
            "{v}: no attack step"
        );
    }
    // Figure 4: both patterns, every K; the NIC tier dropped something.
    for pat in ["stable", "shifting"] {
        for k in &spec.offload_ks {
            let o = r
                .offload
                .iter()
                .find(|o| o.pattern == pat && o.k == *k)
                .unwrap_or_else(|| panic!("no offload row {pat} K={k}"));
            assert!(o.attack_packets > 0 && o.nic_dropped > 0, "{o:?}");
            assert!(
                o.oracle_share_pct > 0.0 && o.oracle_share_pct <= 100.0,
                "{o:?}"
            );
            assert!(o.rule_updates_per_s > 0.0, "{o:?}");
        }
    }
    for f in [
        "summary.json",
        "drop_rate.csv",
        "drop_rate_uniform.png",
        "drop_rate_gaussian.png",
        "drop_rate_zipf.png",
        "cpu.csv",
        "cpu.png",
        "cpu_ns.png",
        "legit.csv",
        "legit.png",
        "offload.csv",
        "offload_share.png",
        "offload_updates.png",
    ] {
        let m = std::fs::metadata(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(m.len() > 0, "{f} is empty");
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert!(summary["machine"]["cpu"].is_string());
    assert!(summary["bar"]["xdp_host_over_nft"].is_number());
    assert_eq!(leftovers(&prefix), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn interrupted_run_leaves_nothing_behind() {
    rampart_lab::testing::require_kernel();
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = rampart_lab::testing::unique_prefix("bdc");
    let out = std::env::temp_dir().join(format!("rampart-e2e-bdc-{prefix}"));
    let spec = DdosBenchSpec {
        lab_prefix: Some(prefix.clone()),
        ..DdosBenchSpec::smoke()
    };
    let cancel = AtomicBool::new(false);
    let seen_lab = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            // Interrupt once the lab, filters and peers exist (figure 1 is running).
            for _ in 0..300 {
                if !leftovers(&prefix).is_empty() {
                    seen_lab.store(true, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_secs(4));
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            cancel.store(true, Ordering::Relaxed);
        });
        bench::run(&spec, &out, &cancel, &|s| eprintln!("{s}"))
    });
    assert!(
        seen_lab.load(Ordering::Relaxed),
        "the run never built its lab"
    );
    let e = r.expect_err("an interrupted run must fail");
    assert!(e.to_string().contains("interrupted"), "{e}");
    assert_eq!(leftovers(&prefix), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&out);
}
