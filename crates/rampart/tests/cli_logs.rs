//! The daemons' logs: plain text without terminal colour codes when stderr
//! is a file, every line once, `--log-format json` one object a line.

mod common;

use common::{Daemon, Netns};

/// A ddos daemon on a veth of its own (netns), API on a free port.
fn ddos_config(dir: &std::path::Path, ns: &Netns) -> std::path::PathBuf {
    let p = dir.join("ddos.toml");
    std::fs::write(
        &p,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[daemon]\nmode = \"auto\"\niface = \"{}\"\nnetns = \"{}\"\n\
             state_dir = \"{}\"\ninterval_s = 0.1\n[alerts]\nfile = \"{}\"\n",
            ns.iface(),
            ns.name,
            dir.join("state").display(),
            dir.join("alerts.jsonl").display()
        ),
    )
    .unwrap();
    p
}

fn detach(ns: &Netns) {
    let _ = common::rampart(&[
        "ddos",
        "detach",
        "--iface",
        &ns.iface(),
        "--netns",
        &ns.name,
    ]);
}

fn tenant_config(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let p = dir.join("tenant.toml");
    std::fs::write(
        &p,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[infra]\nname = \"{name}\"\ninterfaces = [\"lo\"]\nattach = false\n"
        ),
    )
    .unwrap();
    p
}

fn assert_plain_and_once(log: &str) {
    assert!(!log.is_empty());
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log written to a file: {log:?}"
    );
    let mut seen = std::collections::HashSet::new();
    for l in log.lines() {
        // The timestamp makes every line unique: compare what follows it.
        let body = l.split_once(' ').map_or(l, |(_, b)| b);
        assert!(
            seen.insert(body.to_string()),
            "said twice: {body:?} in {log}"
        );
    }
}

#[test]
fn ddos_daemon_logs_plain_text_once_and_json() {
    rampart_lab::testing::require_kernel();
    let ns = Netns::new("dlog");
    let dir = tempfile::tempdir().unwrap();
    let cfg = ddos_config(dir.path(), &ns);
    let cfg = cfg.to_str().unwrap();

    // Text, the daemon's default level (info).
    let mut d = Daemon::spawn(
        &["ddos", "run", "--config", cfg],
        &[],
        &dir.path().join("text.log"),
    );
    d.wait_for("rampart ddos daemon: mode xdp-host");
    let log = d.stop();
    assert!(log.contains(" INFO "), "{log}");
    // `mode = "auto"` probed the veth, which offloads nothing, and said so.
    assert!(
        log.contains("mode auto: ") && log.contains("offloads neither TC flower"),
        "{log}"
    );
    assert!(log.contains("rampart ddos daemon stopped"), "{log}");
    assert_plain_and_once(&log);

    // JSON: every line an object with a level and a message.
    let mut d = Daemon::spawn(
        &["--log-format", "json", "ddos", "run", "--config", cfg],
        &[],
        &dir.path().join("json.log"),
    );
    d.wait_for("rampart ddos daemon: mode xdp-host");
    let log = d.stop();
    detach(&ns);
    assert!(!log.contains('\u{1b}'), "{log:?}");
    let mut messages = Vec::new();
    for l in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{l}");
        let m = v["message"].as_str().expect("a message").to_string();
        assert!(!messages.contains(&m), "said twice: {m:?} in {log}");
        messages.push(m);
    }
    assert!(
        messages
            .iter()
            .any(|m| m.contains("resumed from pinned state")),
        "the second start resumes: {messages:?}"
    );

    // A failure in JSON mode is a JSON line too.
    let o = common::rampart(&[
        "--log-format",
        "json",
        "ddos",
        "run",
        "--config",
        "/nonexistent/ddos.toml",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["level"], "ERROR");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/ddos.toml"),
        "{v}"
    );
}

#[test]
fn tenant_daemon_says_each_line_once_and_rust_log_filters() {
    rampart_lab::testing::require_kernel();
    let name = rampart_lab::testing::unique_prefix("tlog");
    let dir = tempfile::tempdir().unwrap();
    let cfg = tenant_config(dir.path(), &name);
    let cfg = cfg.to_str().unwrap();
    let mut d = Daemon::spawn(
        &["tenant", "serve", "--config", cfg],
        &[],
        &dir.path().join("text.log"),
    );
    d.wait_for("serving on http://127.0.0.1:");
    let log = d.stop();
    assert_eq!(
        log.matches("serving on").count(),
        1,
        "the start is said once: {log}"
    );
    assert_plain_and_once(&log);

    // RUST_LOG=warn hides the daemon's info lines.
    let mut d = Daemon::spawn(
        &["tenant", "serve", "--config", cfg],
        &[("RUST_LOG", "warn")],
        &dir.path().join("warn.log"),
    );
    // Serving is the API answering: wait on /healthz through the port in no log.
    let t0 = std::time::Instant::now();
    while !std::path::Path::new(&format!("/sys/fs/bpf/rampart/tenant/{name}")).exists() {
        assert!(d.alive(), "serve exited: {}", d.log());
        assert!(t0.elapsed().as_secs() < 120, "no pins: {}", d.log());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = d.stop();
    assert!(!log.contains("serving on"), "RUST_LOG=warn: {log}");
    let _ = common::rampart(&["tenant", "cleanup", "--name", &name]);
}

#[test]
fn ddos_daemon_without_root_or_interface_says_so_in_one_line() {
    rampart_lab::testing::require_kernel();
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = dir.path().join("ddos.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"\"\n[daemon]\niface = \"rpnosuch0\"\nstate_dir = \"{}\"\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = cfg.to_str().unwrap();
    // A missing interface.
    let o = common::rampart(&["ddos", "run", "--config", cfg]);
    let line = common::one_error_line(&o, "rpnosuch0");
    assert!(line.contains("not found"), "{line}");
    // Every capability dropped, as user nobody.
    let o = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            env!("CARGO_BIN_EXE_rampart"),
            "ddos",
            "run",
            "--config",
            cfg,
        ])
        .output()
        .expect("setpriv (util-linux)");
    common::one_error_line(&o, "root");
}
