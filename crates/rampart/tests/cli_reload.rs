//! Reload of a running daemon (SIGHUP, `POST /v1/reload`) under a flood:
//! the process stays, the blacklist stays and drops every packet of the
//! flood throughout, a new threshold shows in `/v1/status`, a bad file
//! is refused with one line and the old configuration keeps running,
//! restart-only keys are refused, new tokens replace the old.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

use common::Daemon;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_lab::topology::HOST_IF;
use rampart_testkit::http::http;

fn get(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (code, body) = http(addr, "GET", path, None, "");
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The frames from 172.16.0.0/12 that reached the host's stack.
fn leaked(ns: &str) -> u64 {
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

struct Detach(String);
impl Drop for Detach {
    fn drop(&mut self) {
        let _ = common::rampart(&["ddos", "detach", "--iface", HOST_IF, "--netns", &self.0]);
    }
}

fn config(ns: &str, dir: &std::path::Path, multiplier: f64, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n[daemon]\nmode = \"auto\"\niface = \"{HOST_IF}\"\nnetns = \"{ns}\"\n\
         state_dir = \"{}\"\ninterval_s = 0.1\n[alerts]\nfile = \"{}\"\n[filter]\nsample_shift = 0\n\
         [detect]\nmultiplier = {multiplier:.1}\n{extra}",
        dir.join("tokens").display(),
        dir.join("state").display(),
        dir.join("alerts.jsonl").display()
    )
}

#[test]
fn sighup_under_a_flood_keeps_the_daemon_and_its_blacklist() {
    let lab = TestLab::up("drld", 0);
    let ns = lab.host_ns();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ddos.toml");
    std::fs::write(dir.path().join("tokens"), "ops tok-first-1234\n").unwrap();
    std::fs::write(&cfg, config(&ns, dir.path(), 4.0, "")).unwrap();
    let _detach = Detach(ns.clone());
    let mut d = Daemon::spawn(
        &["ddos", "run", "--config", cfg.to_str().unwrap()],
        &[],
        &dir.path().join("daemon.log"),
    );
    let log = d.wait_for("API on http://");
    let addr: SocketAddr = log
        .split("API on http://")
        .nth(1)
        .and_then(|r| r.split(|c: char| c == ',' || c.is_whitespace()).next())
        .unwrap()
        .parse()
        .unwrap();
    let pid = d.child.id();

    // The flood's sources are on the blacklist (operator blocks).
    let spec = GenSpec {
        sources: 16,
        proto: Proto::Udp,
        pps: Some(50_000.0),
        limit: Limit::Seconds(4.0),
        ..GenSpec::default()
    };
    let tok = Some("tok-first-1234");
    for i in 0..spec.sources {
        let body = format!(
            r#"{{"prefix": "{}", "reason": "test"}}"#,
            spec.source_addr(i)
        );
        let (code, b) = http(addr, "POST", "/v1/blocked", tok, &body);
        assert_eq!(code, 200, "{b}");
    }
    rampart_dataplane::cmd::in_ns(
        &ns,
        "iptables",
        &["-t", "raw", "-A", "PREROUTING", "-s", "172.16.0.0/12"],
    )
    .unwrap();
    assert_eq!(get(addr, "/v1/status")["detect"]["multiplier"], 4.0);

    let g = Generator::new(&lab, &spec).unwrap();
    let report = std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&AtomicBool::new(false)).unwrap());

        // A good file: the new threshold applies, nothing else moves.
        std::fs::write(&cfg, config(&ns, dir.path(), 6.0, "")).unwrap();
        d.signal(libc::SIGHUP);
        d.wait_for("configuration reloaded (SIGHUP)");
        assert!(d.alive());
        assert_eq!(d.child.id(), pid);
        let st = get(addr, "/v1/status");
        assert_eq!(st["detect"]["multiplier"], 6.0, "{st}");
        assert_eq!(st["blocked"], 16, "blacklist intact: {st}");

        // A bad file: refused in one line, the running configuration stays.
        std::fs::write(&cfg, config(&ns, dir.path(), 8.0, "no_such_key = 1\n")).unwrap();
        d.signal(libc::SIGHUP);
        let log = d.wait_for("configuration not reloaded (SIGHUP)");
        let line = log
            .lines()
            .find(|l| l.contains("configuration not reloaded (SIGHUP)"))
            .unwrap();
        assert!(line.contains("no_such_key"), "{line}");
        assert!(d.alive());
        assert_eq!(get(addr, "/v1/status")["detect"]["multiplier"], 6.0);

        // A restart-only key: refused through the API with the key's name.
        let other =
            config(&ns, dir.path(), 6.0, "").replace("mode = \"auto\"", "mode = \"iptables\"");
        std::fs::write(&cfg, other).unwrap();
        let (code, body) = http(addr, "POST", "/v1/reload", tok, "");
        assert_eq!(code, 422, "{body}");
        assert!(
            body.contains("daemon.mode") && body.contains("restart"),
            "{body}"
        );

        // New tokens: the old one stops working at once.
        std::fs::write(&cfg, config(&ns, dir.path(), 6.0, "")).unwrap();
        std::fs::write(dir.path().join("tokens"), "ops tok-second-5678\n").unwrap();
        let (code, body) = http(addr, "POST", "/v1/reload", tok, "");
        assert_eq!(code, 200, "{body}");
        let (code, _) = http(addr, "POST", "/v1/reload", tok, "");
        assert_eq!(code, 401, "the old token is gone");
        let (code, body) = http(addr, "POST", "/v1/reload", Some("tok-second-5678"), "");
        assert_eq!(code, 200, "{body}");

        let r = run.join().unwrap();
        assert!(d.alive());
        r
    });
    let st = get(addr, "/v1/status");
    assert_eq!(st["blocked"], 16, "{st}");
    let log = d.stop();
    assert!(report.sent_packets > 10_000, "{}", report.sent_packets);
    assert_eq!(leaked(&ns), 0, "no flood packet reached the host: {log}");
    // Every reload outcome was said once.
    assert_eq!(
        log.matches("configuration reloaded (SIGHUP)").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("configuration not reloaded (SIGHUP)").count(),
        1,
        "{log}"
    );
}

#[test]
fn tenant_serve_takes_a_new_tenant_and_refuses_a_removal() {
    rampart_lab::testing::require_kernel();
    let name = rampart_lab::testing::unique_prefix("trld");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tenant.toml");
    let tokens = dir.path().join("tokens");
    let write = |tenants: &[&str]| {
        let mut t = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n[infra]\nname = \"{name}\"\ninterfaces = [\"lo\"]\nattach = false\n",
            tokens.display()
        );
        let mut tok = String::new();
        for (i, n) in tenants.iter().enumerate() {
            t.push_str(&format!(
                "[[tenant]]\nname = \"{n}\"\nid = {}\nselectors = [\"prefix:10.20.{}.0/24\"]\n",
                i + 1,
                i + 1
            ));
            tok.push_str(&format!("{n} tok-{n}-secret\n"));
        }
        std::fs::write(&tokens, tok).unwrap();
        std::fs::write(&cfg, t).unwrap();
    };
    write(&["acme"]);
    let mut d = Daemon::spawn(
        &["tenant", "serve", "--config", cfg.to_str().unwrap()],
        &[],
        &dir.path().join("serve.log"),
    );
    let log = d.wait_for("serving on http://");
    let addr: SocketAddr = log
        .split("serving on http://")
        .nth(1)
        .and_then(|r| r.split(|c: char| c == ',' || c.is_whitespace()).next())
        .unwrap()
        .parse()
        .unwrap();
    let (code, _) = http(addr, "GET", "/v1/tenant", Some("tok-beta-secret"), "");
    assert_eq!(code, 401, "no tenant beta yet");

    // A new tenant: added while running, its token works at once.
    write(&["acme", "beta"]);
    d.signal(libc::SIGHUP);
    d.wait_for("configuration reloaded (SIGHUP)");
    let (code, body) = http(addr, "GET", "/v1/tenant", Some("tok-beta-secret"), "");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("beta"), "{body}");

    // Removing a tenant needs a restart: refused in one line, both stay.
    write(&["beta"]);
    let (code, body) = http(addr, "POST", "/v1/reload", Some("tok-beta-secret"), "");
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("tenant acme"), "{body}");
    let (code, body) = http(addr, "GET", "/v1/tenant", Some("tok-acme-secret"), "");
    assert_eq!(code, 200, "acme keeps its access: {body}");
    assert!(d.alive());
    let log = d.stop();
    assert_eq!(
        log.matches("configuration not reloaded").count(),
        1,
        "{log}"
    );
    let _ = common::rampart(&["tenant", "cleanup", "--name", &name]);
}

/// Wait until `d`'s log says `needle` the `n`th time.
fn wait_nth(d: &mut Daemon, needle: &str, n: usize) -> String {
    let t0 = std::time::Instant::now();
    loop {
        let log = d.log();
        if log.matches(needle).count() >= n {
            return log;
        }
        assert!(
            d.alive(),
            "rampart exited before saying {needle:?} ×{n}: {log}"
        );
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(120),
            "no {needle:?} ×{n} after 120 s (a hang guard, not a timing check): {log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn run_reloads_on_sighup_keeping_its_blacklist_and_switching_stages() {
    use rampart_dataplane::chain::{Chain, CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT};
    let lab = TestLab::up("rrld", 0);
    let ns = lab.host_ns();
    let tname = rampart_lab::testing::unique_prefix("rrlt");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rampart.toml");
    std::fs::write(
        dir.path().join("tokens"),
        "ops tok-ops-12345678\nacme tok-acme-12345678\n",
    )
    .unwrap();
    let write = |multiplier: f64, stream: bool, tenant: bool, extra: &str| {
        let mut t = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n[alerts]\nfile = \"{}\"\n\
             [[interface]]\nname = \"{HOST_IF}\"\nnetns = \"{ns}\"\n{extra}\
             [ddos.daemon]\nstate_dir = \"{}\"\ninterval_s = 0.1\nnice = 0\n\
             [ddos.detect]\nmultiplier = {multiplier:.1}\n",
            dir.path().join("tokens").display(),
            dir.path().join("alerts.jsonl").display(),
            dir.path().join("state").display(),
        );
        if stream {
            t.push_str("[stream]\napps = [\"flowmeter\"]\n");
        }
        if tenant {
            t.push_str(&format!(
                "[tenant.infra]\nname = \"{tname}\"\n[[tenant.tenant]]\nname = \"acme\"\nselectors = [\"prefix:10.77.0.0/16\"]\n"
            ));
        }
        std::fs::write(&cfg, t).unwrap();
    };
    write(4.0, true, false, "");
    let _detach = Detach(ns.clone());
    let mut d = Daemon::spawn(
        &["run", "--config", cfg.to_str().unwrap()],
        &[],
        &dir.path().join("run.log"),
    );
    let log = d.wait_for("API on http://");
    let addr: SocketAddr = log
        .split("API on http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let pid = d.child.id();
    let chain = Chain::open(Some(&ns), HOST_IF).unwrap();
    let slots = || -> Vec<u32> { chain.stages().unwrap().iter().map(|s| s.0).collect() };
    assert_eq!(slots(), [CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM]);
    let tok = Some("tok-ops-12345678");
    for i in 0..16 {
        let body = format!(r#"{{"prefix": "172.16.9.{i}", "reason": "test"}}"#);
        let (code, b) = http(addr, "POST", "/ddos/v1/blocked", tok, &body);
        assert_eq!(code, 200, "{b}");
    }
    let (code, body) = http(
        addr,
        "GET",
        "/tenant/v1/tenant",
        Some("tok-acme-12345678"),
        "",
    );
    assert_eq!(code, 503, "no tenant stage yet: {body}");
    assert!(body.contains("[tenant]"), "{body}");

    // A new threshold and the stream stage removed: the process, the
    // blacklist and the ddos stage stay.
    write(6.0, false, false, "");
    d.signal(libc::SIGHUP);
    let log = wait_nth(&mut d, "configuration reloaded (SIGHUP)", 1);
    assert!(log.contains("stream stage removed"), "{log}");
    assert!(d.alive());
    assert_eq!(d.child.id(), pid);
    let st = get(addr, "/ddos/v1/status");
    assert_eq!(st["detect"]["multiplier"], 6.0, "{st}");
    assert_eq!(st["blocked"], 16, "blacklist intact: {st}");
    assert_eq!(slots(), [CHAIN_SLOT_DDOS]);

    // The stream stage back, the tenant stage added: its routes answer.
    write(6.0, true, true, "");
    d.signal(libc::SIGHUP);
    let log = wait_nth(&mut d, "configuration reloaded (SIGHUP)", 2);
    assert!(
        log.contains("stream stage added") && log.contains("tenant stage added"),
        "{log}"
    );
    assert_eq!(
        slots(),
        [CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT]
    );
    let (code, body) = http(
        addr,
        "GET",
        "/tenant/v1/tenant",
        Some("tok-acme-12345678"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("acme"), "{body}");

    // A bad file: one line naming the key; everything stays.
    write(8.0, true, true, "no_such_key = 1\n");
    d.signal(libc::SIGHUP);
    let log = wait_nth(&mut d, "configuration not reloaded (SIGHUP)", 1);
    let line = log
        .lines()
        .find(|l| l.contains("configuration not reloaded (SIGHUP)"))
        .unwrap();
    assert!(line.contains("no_such_key"), "{line}");
    assert!(d.alive());
    assert_eq!(get(addr, "/ddos/v1/status")["detect"]["multiplier"], 6.0);
    assert_eq!(
        slots(),
        [CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT]
    );

    // What needs a restart is refused by name, nothing applied.
    std::fs::write(
        &cfg,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("no_such_key = 1\n", "xdp_mode = \"generic\"\n"),
    )
    .unwrap();
    let (code, body) = http(addr, "POST", "/v1/reload", tok, "");
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains("[[interface]]") && body.contains("restart"),
        "{body}"
    );
    write(6.0, false, true, "[ddos.filter]\nsample_shift = 3\n");
    let (code, body) = http(addr, "POST", "/v1/reload", tok, "");
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("filter.sample_shift"), "{body}");
    assert_eq!(
        slots(),
        [CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT],
        "the stream stage stays: nothing applied"
    );

    // The tenant stage removed through the API: its routes say how to get it back.
    write(6.0, true, false, "");
    let (code, body) = http(addr, "POST", "/v1/reload", tok, "");
    assert_eq!(code, 200, "{body}");
    assert_eq!(slots(), [CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM]);
    let (code, _) = http(
        addr,
        "GET",
        "/tenant/v1/tenant",
        Some("tok-acme-12345678"),
        "",
    );
    assert_eq!(code, 503);
    assert_eq!(get(addr, "/ddos/v1/status")["blocked"], 16);
    assert!(d.alive());
    assert_eq!(d.child.id(), pid);
    let log = d.stop();
    assert_eq!(
        slots(),
        [CHAIN_SLOT_DDOS],
        "the ddos stage stays after a stop: {log}"
    );
    drop(_detach);
    let _ = Chain::remove(Some(&ns), HOST_IF);
    let _ = common::rampart(&["tenant", "cleanup", "--name", &tname]);
}
