//! The shipped systemd unit: `systemd-analyze verify` accepts it (with the
//! binary under test in ExecStart) and `systemd-analyze security` scores its
//! exposure at most 2.5.

use std::process::Command;

fn unit_text() -> String {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/rampart-ddos.service"
    );
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn the_unit_verifies_and_scores_at_most_2_5() {
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("rampart-ddos.service");
    std::fs::write(
        &unit,
        unit_text().replace("/usr/local/bin/rampart", env!("CARGO_BIN_EXE_rampart")),
    )
    .unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (package systemd)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.trim().is_empty(), "verify: {err}");

    let o = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let score: f64 = out
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for rampart-ddos.service:")
                .nth(1)
        })
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no overall score in: {out}"));
    assert!(score <= 2.5, "exposure {score} > 2.5:\n{out}");
    for want in [
        "ExecReload=",
        "ProtectSystem=strict",
        "CapabilityBoundingSet=",
        "StateDirectory=",
        "RuntimeDirectory=",
    ] {
        assert!(unit_text().contains(want), "the unit lacks {want}");
    }
}

#[test]
fn completions_and_man_pages_come_from_the_cli() {
    let bin = env!("CARGO_BIN_EXE_rampart");
    let o = Command::new(bin)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let bash = String::from_utf8_lossy(&o.stdout);
    assert!(
        bash.contains("complete") && bash.contains("--log-format"),
        "{bash}"
    );
    let o = Command::new(bin)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(bin)
        .args(["man", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let top = std::fs::read_to_string(dir.path().join("rampart.1")).unwrap();
    assert!(
        top.contains(".TH rampart") && top.contains("RUST_LOG"),
        "{top}"
    );
    let run = std::fs::read_to_string(dir.path().join("rampart-ddos-run.1")).unwrap();
    assert!(run.contains("config"), "{run}");
}
