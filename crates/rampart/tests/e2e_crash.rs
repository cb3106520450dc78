//! Faults under a flood, for `rampart tenant serve` (a tenant's program
//! drops the flood) and `rampart run` (the ddos stage drops blocked
//! sources, the tenant stage the rest): `kill -9` (the data path keeps
//! dropping while the daemon is dead, and a restart adopts it — the same
//! maps and programs, no moment without them), the interface created
//! again, the pins removed behind the daemon's back, the run directory
//! full or read-only. Every frame of the flood that reaches the host's
//! stack is counted by an iptables rule in the host namespace: it must
//! stay 0. A clean stop (SIGTERM) removes what the daemon built.

mod common;

use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};

use common::Daemon;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::{require_kernel, unique_prefix, TestLab};
use rampart_lab::topology::HOST_IF;

const TENANT_TOKEN: &str = "acme-secret-token";
const OPS_TOKEN: &str = "ops-secret-token";
const DROP_ALL: &str =
    "#include \"rampart_tenant.h\"\nint tenant_main(struct xdp_md *ctx) { return XDP_DROP; }\n";

use rampart_testkit::http::free_port;

/// One request to the daemon on `port` with `token`; (status, body).
fn http(port: u16, method: &str, path: &str, token: &str, body: &[u8]) -> (u16, String) {
    rampart_testkit::http::http(("127.0.0.1", port), method, path, Some(token), body)
}

/// Wait until `f` holds; the deadline only guards against a hung test.
fn wait_for(what: &str, f: impl FnMut() -> bool) {
    rampart_testkit::http::wait_for(what, rampart_testkit::http::DEADLINE, f);
}

fn until_up(port: u16) {
    wait_for("API", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
}

/// Frames XDP saw on the host's interface.
fn xdp_seen(ns: &str) -> u64 {
    rampart_dataplane::xdp::veth_xdp_counts(Some(ns), HOST_IF)
        .unwrap()
        .0
}

/// Wait until XDP on the host's interface has seen `n` more frames.
fn xdp_sees_more(ns: &str, what: &str, n: u64) {
    let x0 = xdp_seen(ns);
    wait_for(what, || xdp_seen(ns) >= x0 + n);
}

/// An iptables rule counting the flood's frames that reach the host's stack.
fn count_leaks(ns: &str) {
    rampart_dataplane::cmd::in_ns(
        ns,
        "iptables",
        &["-t", "raw", "-A", "PREROUTING", "-s", "172.16.0.0/12"],
    )
    .unwrap();
}

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

fn flood() -> GenSpec {
    GenSpec {
        sources: 16,
        proto: Proto::Udp,
        pps: Some(20_000.0),
        // A cap: the test stops it once every phase has seen its share.
        limit: Limit::Seconds(300.0),
        ..GenSpec::default()
    }
}

/// A `tenant serve` config (API on `port`, token of tenant `acme`) running
/// instance `name` on the host interface of `ns`, `acme` selecting
/// `selectors` (TOML strings); its path.
fn tenant_config(dir: &Path, port: u16, name: &str, ns: &str, selectors: &str) -> PathBuf {
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, format!("acme {TENANT_TOKEN}\n")).unwrap();
    let cfg = dir.join("tenant.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\ntoken_file = \"{}\"\n\
             [infra]\nname = \"{name}\"\nnetns = \"{ns}\"\ninterfaces = [\"{HOST_IF}\"]\n\
             [[tenant]]\nname = \"acme\"\nselectors = [{selectors}]\n",
            tokens.display()
        ),
    )
    .unwrap();
    cfg
}

/// A `rampart run` config (API on `port`, tokens of `acme` and `ops`):
/// ddos and tenant instance `tname` (`acme` on 10.10.0.0/24) on the host
/// interface of `ns`; its path.
fn run_config(dir: &Path, port: u16, tname: &str, ns: &str) -> PathBuf {
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, format!("acme {TENANT_TOKEN}\nops {OPS_TOKEN}\n")).unwrap();
    let cfg = dir.join("rampart.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\ntoken_file = \"{}\"\n\
             [alerts]\nfile = \"\"\n\
             [[interface]]\nname = \"{HOST_IF}\"\nnetns = \"{ns}\"\n\
             [ddos.daemon]\nstate_dir = \"{}\"\nnice = 0\n\
             [tenant.infra]\nname = \"{tname}\"\n\
             [[tenant.tenant]]\nname = \"acme\"\nselectors = [\"prefix:10.10.0.0/24\"]\n",
            tokens.display(),
            dir.join("state").display()
        ),
    )
    .unwrap();
    cfg
}

/// SIGKILL, and reap.
fn kill9(d: &mut Daemon) {
    d.child.kill().unwrap();
    let _ = d.child.wait();
}

/// The tenant program of `acme` as the API reports it.
fn program(port: u16, prefix: &str) -> serde_json::Value {
    let (code, body) = http(
        port,
        "GET",
        &format!("{prefix}/v1/program"),
        TENANT_TOKEN,
        b"",
    );
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn tenant_serve_killed_under_a_flood_keeps_dropping_and_is_adopted() {
    require_kernel();
    let lab = TestLab::up("k9t", 0);
    let ns = lab.host_ns();
    count_leaks(&ns);
    let dir = tempfile::tempdir().unwrap();
    let name = unique_prefix("k9t");
    let port = free_port();
    let cfg = tenant_config(dir.path(), port, &name, &ns, r#""prefix:10.10.0.0/24""#);
    let args = ["tenant", "serve", "--config", cfg.to_str().unwrap()];
    let mut d = Daemon::spawn(&args, &[], &dir.path().join("serve1.log"));
    until_up(port);
    let (code, body) = http(
        port,
        "PUT",
        "/v1/program",
        TENANT_TOKEN,
        DROP_ALL.as_bytes(),
    );
    assert_eq!(code, 200, "{body}");
    let before = program(port, "");

    let g = Generator::new(&lab, &flood()).unwrap();
    let stop = AtomicBool::new(false);
    // Frames leaked so far at the end of each phase (for the message).
    let mut phases = vec![("before the flood", leaked(&ns))];
    let report = std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop).unwrap());
        let _stop = StopOnDrop(&stop);
        xdp_sees_more(&ns, "flood at the host", 2_000);
        phases.push(("before kill -9", leaked(&ns)));
        kill9(&mut d);
        // Dead: the pinned link keeps the dispatcher, the pinned program
        // array the tenant's program.
        assert!(
            rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF)
                .unwrap()
                .is_some(),
            "the dispatcher stays attached"
        );
        xdp_sees_more(&ns, "flood while the daemon is dead", 5_000);
        phases.push(("while dead", leaked(&ns)));
        d = Daemon::spawn(&args, &[], &dir.path().join("serve2.log"));
        d.wait_for("adopted its pins (1 tenant program(s) kept running)");
        phases.push(("restart", leaked(&ns)));
        until_up(port);
        xdp_sees_more(&ns, "flood after the restart", 5_000);
        phases.push(("after restart", leaked(&ns)));
        stop.store(true, Ordering::Relaxed);
        run.join().unwrap()
    });
    let after = program(port, "");
    for k in ["sha256", "version", "prog_id", "from"] {
        assert_eq!(after[k], before[k], "{k}: the same program, adopted");
    }
    assert!(report.sent_packets > 10_000, "{report:?}");
    phases.push(("end", leaked(&ns)));
    assert_eq!(
        leaked(&ns),
        0,
        "no frame of the flood reached the host across kill -9 and restart: {phases:?}"
    );

    // A clean stop removes everything it built.
    let log = d.stop();
    assert!(log.contains("stopped"), "{log}");
    assert!(
        !rampart_tenant::host::instance_dir(&name).exists(),
        "pins removed"
    );
    assert_eq!(
        rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF).unwrap(),
        None,
        "detached"
    );
}

#[test]
fn rampart_run_killed_under_a_flood_keeps_both_stages_and_is_adopted() {
    require_kernel();
    let lab = TestLab::up("k9r", 0);
    let ns = lab.host_ns();
    count_leaks(&ns);
    let _leftovers = RunLeftovers(lab.host_ns());
    let dir = tempfile::tempdir().unwrap();
    let tname = unique_prefix("k9r");
    let port = free_port();
    let cfg = run_config(dir.path(), port, &tname, &ns);
    let args = ["run", "--config", cfg.to_str().unwrap()];
    let mut d = Daemon::spawn(&args, &[], &dir.path().join("run1.log"));
    until_up(port);
    let spec = flood();
    // Half the sources blocked by the ddos stage, the tenant's program
    // drops what passes it.
    for i in 0..spec.sources / 2 {
        let body = format!("{{\"prefix\": \"{}\"}}", spec.source_addr(i));
        let (code, b) = http(port, "POST", "/ddos/v1/blocked", OPS_TOKEN, body.as_bytes());
        assert_eq!(code, 200, "{b}");
    }
    let (code, body) = http(
        port,
        "PUT",
        "/tenant/v1/program",
        TENANT_TOKEN,
        DROP_ALL.as_bytes(),
    );
    assert_eq!(code, 200, "{body}");
    let before = program(port, "/tenant");
    let chain = rampart_dataplane::chain::Chain::open(Some(&ns), HOST_IF).unwrap();
    let stages = chain.stages().unwrap();

    let g = Generator::new(&lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let mut phases = vec![("before the flood", leaked(&ns))];
    let report = std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop).unwrap());
        let _stop = StopOnDrop(&stop);
        xdp_sees_more(&ns, "flood at the host", 2_000);
        phases.push(("before kill -9", leaked(&ns)));
        kill9(&mut d);
        assert_eq!(
            chain.stages().unwrap(),
            stages,
            "every stage stays in its slot"
        );
        xdp_sees_more(&ns, "flood while the daemon is dead", 5_000);
        phases.push(("while dead", leaked(&ns)));
        d = Daemon::spawn(&args, &[], &dir.path().join("run2.log"));
        d.wait_for("adopted its pins (1 tenant program(s) kept running)");
        phases.push(("restart", leaked(&ns)));
        until_up(port);
        xdp_sees_more(&ns, "flood after the restart", 5_000);
        phases.push(("after restart", leaked(&ns)));
        stop.store(true, Ordering::Relaxed);
        run.join().unwrap()
    });
    let after = program(port, "/tenant");
    for k in ["sha256", "version", "prog_id"] {
        assert_eq!(after[k], before[k], "{k}: the same program, adopted");
    }
    let (code, body) = http(port, "GET", "/ddos/v1/blocked", OPS_TOKEN, b"");
    assert_eq!(code, 200, "{body}");
    let blocked: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        blocked.as_array().map_or(0, Vec::len) as u32,
        spec.sources / 2,
        "the blocks carried over: {body}"
    );
    assert!(report.sent_packets > 10_000, "{report:?}");
    phases.push(("end", leaked(&ns)));
    assert_eq!(
        leaked(&ns),
        0,
        "no frame of the flood reached the host across kill -9 and restart: {phases:?}"
    );

    // A clean stop: the tenant's pins and stage go; the ddos stage stays,
    // filtering (as `rampart ddos run` leaves its filter).
    d.stop();
    assert!(!rampart_tenant::host::instance_dir(&tname).exists());
    let slots: Vec<u32> = chain.stages().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(slots, [rampart_dataplane::chain::CHAIN_SLOT_DDOS]);
    let name = rampart_ddos::filter::Scope::new(Some(&ns), HOST_IF)
        .unwrap()
        .name();
    rampart_ddos::filter::Filter::detach(&name).unwrap();
    assert!(rampart_dataplane::chain::Chain::remove(Some(&ns), HOST_IF).unwrap());
}

#[test]
fn rampart_run_attaches_its_chain_again_to_a_recreated_interface() {
    require_kernel();
    let lab = TestLab::up("rcif", 0);
    let (ns, nic) = (lab.host_ns(), lab.nic_ns());
    let _leftovers = RunLeftovers(lab.host_ns());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let tname = unique_prefix("rcif");
    let cfg = dir.path().join("rampart.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[alerts]\nfile = \"\"\n\
             [[interface]]\nname = \"{HOST_IF}\"\nnetns = \"{ns}\"\n\
             [ddos.daemon]\nstate_dir = \"{}\"\nnice = 0\n\
             [tenant.infra]\nname = \"{tname}\"\n\
             [[tenant.tenant]]\nname = \"acme\"\nselectors = [\"prefix:10.10.0.0/24\"]\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let args = ["run", "--config", cfg.to_str().unwrap()];
    let mut d = Daemon::spawn(&args, &[], &dir.path().join("run.log"));
    until_up(port);
    let entry = rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF)
        .unwrap()
        .expect("the chain is attached");
    let old = rampart_dataplane::netns::ifindex(Some(&ns), HOST_IF).unwrap();
    let keys = selector_ifindexes(&tname);
    assert!(
        !keys.is_empty() && keys.iter().all(|&i| i == old),
        "{keys:?}"
    );
    let ip = |a: &[&str]| rampart_dataplane::cmd::ip(a).unwrap();
    // Down and up keep the link.
    ip(&["-n", &ns, "link", "set", HOST_IF, "down"]);
    ip(&["-n", &ns, "link", "set", HOST_IF, "up"]);
    // Deleted (its veth peer with it) and created again: a new ifindex.
    ip(&["-n", &ns, "link", "del", HOST_IF]);
    d.wait_for("is gone");
    ip(&[
        "-n",
        &ns,
        "link",
        "add",
        HOST_IF,
        "type",
        "veth",
        "peer",
        "name",
        rampart_lab::topology::NIC_HOST_IF,
        "netns",
        &nic,
    ]);
    ip(&["-n", &ns, "link", "set", HOST_IF, "up"]);
    d.wait_for("attached again with its stages");
    // The tenant stage's selectors follow the new index.
    d.wait_for("the tenants' selectors follow its new index");
    let new = rampart_dataplane::netns::ifindex(Some(&ns), HOST_IF).unwrap();
    let now = selector_ifindexes(&tname);
    assert_eq!(now.len(), keys.len(), "{now:?}");
    assert!(now.iter().all(|&i| i == new), "{now:?} (new index {new})");
    assert_eq!(
        rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF).unwrap(),
        Some(entry),
        "the same entry point on the new interface"
    );
    let log = d.stop();
    assert_eq!(
        log.matches("the XDP chain was not attached").count(),
        1,
        "one line: {log}"
    );
    let chain = rampart_dataplane::chain::Chain::open(Some(&ns), HOST_IF).unwrap();
    assert_eq!(
        chain
            .stages()
            .unwrap()
            .iter()
            .map(|s| s.0)
            .collect::<Vec<_>>(),
        [rampart_dataplane::chain::CHAIN_SLOT_DDOS],
        "the ddos stage in its slot"
    );
    let name = rampart_ddos::filter::Scope::new(Some(&ns), HOST_IF)
        .unwrap()
        .name();
    rampart_ddos::filter::Filter::detach(&name).unwrap();
    assert!(rampart_dataplane::chain::Chain::remove(Some(&ns), HOST_IF).unwrap());
}

/// Remove a pin directory the way an operator's `rm -r` would.
fn rm_pins(dir: &std::path::Path) {
    std::fs::remove_dir_all(dir).unwrap_or_else(|e| panic!("removing {}: {e}", dir.display()));
}

#[test]
fn tenant_serve_pins_removed_under_a_flood_are_pinned_again_and_a_crash_still_adopts() {
    require_kernel();
    let lab = TestLab::up("pnt", 0);
    let ns = lab.host_ns();
    count_leaks(&ns);
    let dir = tempfile::tempdir().unwrap();
    let name = unique_prefix("pnt");
    let port = free_port();
    let cfg = tenant_config(dir.path(), port, &name, &ns, r#""prefix:10.10.0.0/24""#);
    let args = ["tenant", "serve", "--config", cfg.to_str().unwrap()];
    let log1 = dir.path().join("serve1.log");
    let mut d = Daemon::spawn(&args, &[], &log1);
    until_up(port);
    let (code, body) = http(
        port,
        "PUT",
        "/v1/program",
        TENANT_TOKEN,
        DROP_ALL.as_bytes(),
    );
    assert_eq!(code, 200, "{body}");
    let before = program(port, "");
    let pins = rampart_tenant::host::instance_dir(&name);
    let entry = rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF).unwrap();

    let g = Generator::new(&lab, &flood()).unwrap();
    let stop = AtomicBool::new(false);
    let mut phases = vec![("before the flood", leaked(&ns))];
    std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop).unwrap());
        let _stop = StopOnDrop(&stop);
        xdp_sees_more(&ns, "flood at the host", 2_000);
        rm_pins(&pins);
        // The agent holds the link: nothing was detached.
        assert_eq!(
            rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF).unwrap(),
            entry,
            "the dispatcher stays attached without its pins"
        );
        d.wait_for("were removed; everything kept running and is pinned again");
        xdp_sees_more(&ns, "flood after the pins came back", 2_000);
        phases.push(("pins removed and made again", leaked(&ns)));
        // The pins made again are enough for a crash: the next agent adopts.
        kill9(&mut d);
        xdp_sees_more(&ns, "flood while the daemon is dead", 2_000);
        phases.push(("while dead", leaked(&ns)));
        d = Daemon::spawn(&args, &[], &dir.path().join("serve2.log"));
        d.wait_for("adopted its pins (1 tenant program(s) kept running)");
        until_up(port);
        xdp_sees_more(&ns, "flood after the restart", 2_000);
        stop.store(true, Ordering::Relaxed);
        run.join().unwrap()
    });
    let after = program(port, "");
    for k in ["sha256", "version", "prog_id", "from"] {
        assert_eq!(after[k], before[k], "{k}: the same program, adopted");
    }
    phases.push(("end", leaked(&ns)));
    assert_eq!(
        leaked(&ns),
        0,
        "no frame of the flood reached the host: {phases:?}"
    );
    let first = std::fs::read_to_string(&log1).unwrap();
    assert_eq!(
        first.matches("were removed").count(),
        1,
        "one line for the removal: {first}"
    );
    d.stop();
    assert!(!pins.exists(), "a clean stop removes the pins");
}

#[test]
fn rampart_run_pins_removed_under_a_flood_are_pinned_again_and_a_crash_still_adopts() {
    require_kernel();
    let lab = TestLab::up("pnr", 0);
    let ns = lab.host_ns();
    count_leaks(&ns);
    let _leftovers = RunLeftovers(lab.host_ns());
    let dir = tempfile::tempdir().unwrap();
    let tname = unique_prefix("pnr");
    let port = free_port();
    let cfg = run_config(dir.path(), port, &tname, &ns);
    let args = ["run", "--config", cfg.to_str().unwrap()];
    let log1 = dir.path().join("run1.log");
    let mut d = Daemon::spawn(&args, &[], &log1);
    until_up(port);
    let spec = flood();
    for i in 0..spec.sources / 2 {
        let body = format!("{{\"prefix\": \"{}\"}}", spec.source_addr(i));
        let (code, b) = http(port, "POST", "/ddos/v1/blocked", OPS_TOKEN, body.as_bytes());
        assert_eq!(code, 200, "{b}");
    }
    let (code, body) = http(
        port,
        "PUT",
        "/tenant/v1/program",
        TENANT_TOKEN,
        DROP_ALL.as_bytes(),
    );
    assert_eq!(code, 200, "{body}");
    let before = program(port, "/tenant");
    // One daemon, several applications: a tenant's token reaches the
    // tenant routes only.
    for (method, path, body) in [
        ("POST", "/ddos/v1/blocked", "{\"prefix\": \"192.0.2.1\"}"),
        ("GET", "/ddos/v1/blocked", ""),
        ("GET", "/stream/v1/top", ""),
        ("POST", "/v1/reload", ""),
        ("GET", "/metrics", ""),
    ] {
        let (code, b) = http(port, method, path, TENANT_TOKEN, body.as_bytes());
        assert_eq!(code, 401, "{method} {path} with a tenant's token: {b}");
        assert!(b.contains("operator's token"), "{b}");
    }
    let (code, b) = http(port, "GET", "/ddos/v1/blocked", OPS_TOKEN, b"");
    assert_eq!(code, 200, "{b}");
    let chain_pins = rampart_dataplane::chain::pin_dir(Some(&ns), HOST_IF);
    let tenant_pins = rampart_tenant::host::instance_dir(&tname);
    let entry = rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF).unwrap();
    let stages = rampart_dataplane::chain::Chain::open(Some(&ns), HOST_IF)
        .unwrap()
        .stages()
        .unwrap();

    let g = Generator::new(&lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let mut phases = vec![("before the flood", leaked(&ns))];
    std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop).unwrap());
        let _stop = StopOnDrop(&stop);
        xdp_sees_more(&ns, "flood at the host", 2_000);
        rm_pins(&chain_pins);
        rm_pins(&tenant_pins);
        // The daemon holds the chain's link: nothing was detached.
        assert_eq!(
            rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF).unwrap(),
            entry,
            "the chain stays attached without its pins"
        );
        d.wait_for("the chain kept running and is pinned again");
        d.wait_for("were removed; everything kept running and is pinned again");
        xdp_sees_more(&ns, "flood after the pins came back", 2_000);
        phases.push(("pins removed and made again", leaked(&ns)));
        kill9(&mut d);
        let chain = rampart_dataplane::chain::Chain::open(Some(&ns), HOST_IF).unwrap();
        assert_eq!(chain.stages().unwrap(), stages, "every stage in its slot");
        xdp_sees_more(&ns, "flood while the daemon is dead", 2_000);
        phases.push(("while dead", leaked(&ns)));
        d = Daemon::spawn(&args, &[], &dir.path().join("run2.log"));
        d.wait_for("adopted its pins (1 tenant program(s) kept running)");
        until_up(port);
        xdp_sees_more(&ns, "flood after the restart", 2_000);
        stop.store(true, Ordering::Relaxed);
        run.join().unwrap()
    });
    let after = program(port, "/tenant");
    for k in ["sha256", "version", "prog_id"] {
        assert_eq!(after[k], before[k], "{k}: the same program, adopted");
    }
    phases.push(("end", leaked(&ns)));
    assert_eq!(
        leaked(&ns),
        0,
        "no frame of the flood reached the host: {phases:?}"
    );
    let first = std::fs::read_to_string(&log1).unwrap();
    assert_eq!(
        first.matches("were removed").count(),
        2,
        "one line for the chain, one for the tenant stage: {first}"
    );

    d.stop();
    let chain = rampart_dataplane::chain::Chain::open(Some(&ns), HOST_IF).unwrap();
    let slots: Vec<u32> = chain.stages().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(slots, [rampart_dataplane::chain::CHAIN_SLOT_DDOS]);
    drop(chain);
    let name = rampart_ddos::filter::Scope::new(Some(&ns), HOST_IF)
        .unwrap()
        .name();
    rampart_ddos::filter::Filter::detach(&name).unwrap();
    assert!(rampart_dataplane::chain::Chain::remove(Some(&ns), HOST_IF).unwrap());
}

#[test]
fn tenant_serve_with_a_full_or_read_only_run_directory_says_so_once_and_keeps_dropping() {
    require_kernel();
    let lab = TestLab::up("rot", 0);
    let ns = lab.host_ns();
    count_leaks(&ns);
    let dir = tempfile::tempdir().unwrap();
    let name = unique_prefix("rot");
    let port = free_port();
    let cfg = tenant_config(dir.path(), port, &name, &ns, r#""prefix:10.10.0.0/24""#);
    // The daemon's own mount namespace gets a small tmpfs as its run
    // directory: filling it or making it read-only touches nothing else.
    let run_dir = "/run/rampart/tenant";
    std::fs::create_dir_all(run_dir).unwrap();
    let log = dir.path().join("serve.log");
    let script = format!(
        "mount -t tmpfs -o size=64k tmpfs {run_dir} && exec \"$0\" tenant serve --config {}",
        cfg.display()
    );
    let mut c = std::process::Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", &script])
        .arg(env!("CARGO_BIN_EXE_rampart"))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut d = Daemon {
        child: c.spawn().expect("unshare"),
        stderr: log.clone(),
    };
    let pid = d.child.id().to_string();
    let in_its_mounts = |cmd: &str| {
        std::process::Command::new("nsenter")
            .args(["-t", &pid, "-m", "sh", "-c", cmd])
            .status()
            .unwrap()
            .success()
    };
    until_up(port);
    let submit = |n: u32| {
        // A different source each time: a new version, so records change.
        let src = format!("{DROP_ALL}// v{n}\n");
        let (code, body) = http(port, "PUT", "/v1/program", TENANT_TOKEN, src.as_bytes());
        assert_eq!(code, 200, "{body}");
    };
    submit(1);
    let problems = |d: &Daemon| -> Vec<String> {
        d.log()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .map(str::to_string)
            .collect()
    };
    assert!(problems(&d).is_empty(), "{:?}", problems(&d));

    let g = Generator::new(&lab, &flood()).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop).unwrap());
        // A failed assertion below stops the flood too.
        let _stop = StopOnDrop(&stop);
        xdp_sees_more(&ns, "flood at the host", 2_000);
        // Full: one file takes every byte left.
        assert!(!in_its_mounts(&format!(
            "cat /dev/zero > {run_dir}/filler 2>/dev/null"
        )));
        submit(2);
        submit(3);
        xdp_sees_more(&ns, "flood with the directory full", 2_000);
        let p = problems(&d);
        assert_eq!(p.len(), 1, "one line while saving fails: {p:?}");
        assert!(p[0].contains("cannot save the program records"), "{}", p[0]);
        // Space again: the agent writes the records on its next check.
        assert!(in_its_mounts(&format!("rm {run_dir}/filler")));
        d.wait_for("again");
        // Read-only: one more line, naming the OS error. (A read-only
        // file system mounted over it: the lock file, open for writing,
        // keeps the first one from being remounted read-only.)
        assert!(in_its_mounts(&format!(
            "mount -t tmpfs -o ro,size=64k tmpfs {run_dir}"
        )));
        submit(4);
        submit(5);
        xdp_sees_more(&ns, "flood with the directory read-only", 2_000);
        stop.store(true, Ordering::Relaxed);
        run.join().unwrap()
    });
    let p = problems(&d);
    assert_eq!(p.len(), 2, "one more line when read-only: {p:?}");
    assert!(
        p[1].contains("Read-only"),
        "the OS error says why: {}",
        p[1]
    );
    assert_eq!(leaked(&ns), 0, "the tenant's program dropped every frame");
    assert_eq!(program(port, "")["version"], 5, "every submission applied");
    d.stop();
    assert!(!rampart_tenant::host::instance_dir(&name).exists());
}

/// Sets the flag when dropped: a panicking test stops its flood at once
/// instead of waiting for the generator's cap.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The interface index in each key of a tenant instance's selector trie.
fn selector_ifindexes(instance: &str) -> Vec<u32> {
    let p = rampart_tenant::host::instance_dir(instance)
        .join("maps")
        .join("rampart_t_sel");
    let fd = rampart_dataplane::pin::open_pinned(&p).unwrap();
    let size = std::mem::size_of::<rampart_bpf::abi::tenant::SelKey>();
    rampart_dataplane::maps::keys_raw(std::os::fd::AsRawFd::as_raw_fd(&fd), size)
        .unwrap()
        .iter()
        .map(|k| u32::from_ne_bytes(k[4..8].try_into().unwrap()))
        .collect()
}

#[test]
fn tenant_serve_follows_a_recreated_interface() {
    require_kernel();
    let lab = TestLab::up("rcit", 0);
    let (ns, nic) = (lab.host_ns(), lab.nic_ns());
    let dir = tempfile::tempdir().unwrap();
    let name = unique_prefix("rcit");
    let port = free_port();
    let cfg = tenant_config(
        dir.path(),
        port,
        &name,
        &ns,
        r#""prefix:10.10.0.0/24", "prefix:fd10::/64""#,
    );
    let args = ["tenant", "serve", "--config", cfg.to_str().unwrap()];
    let mut d = Daemon::spawn(&args, &[], &dir.path().join("serve.log"));
    until_up(port);
    let entry = rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF)
        .unwrap()
        .expect("the dispatcher is attached");
    let old = rampart_dataplane::netns::ifindex(Some(&ns), HOST_IF).unwrap();
    let keys = selector_ifindexes(&name);
    assert!(
        !keys.is_empty() && keys.iter().all(|&i| i == old),
        "{keys:?}"
    );
    let ip = |a: &[&str]| rampart_dataplane::cmd::ip(a).unwrap();
    ip(&["-n", &ns, "link", "del", HOST_IF]);
    d.wait_for("is gone");
    ip(&[
        "-n",
        &ns,
        "link",
        "add",
        HOST_IF,
        "type",
        "veth",
        "peer",
        "name",
        rampart_lab::topology::NIC_HOST_IF,
        "netns",
        &nic,
    ]);
    ip(&["-n", &ns, "link", "set", HOST_IF, "up"]);
    d.wait_for("was deleted and created again");
    let new = rampart_dataplane::netns::ifindex(Some(&ns), HOST_IF).unwrap();
    assert_ne!(new, old);
    assert_eq!(
        rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF).unwrap(),
        Some(entry),
        "the same dispatcher on the new interface"
    );
    let now = selector_ifindexes(&name);
    assert_eq!(now.len(), keys.len(), "every selector keyed again: {now:?}");
    assert!(now.iter().all(|&i| i == new), "{now:?} (new index {new})");
    let log = d.stop();
    assert_eq!(log.matches("created again").count(), 1, "one line: {log}");
    assert!(!rampart_tenant::host::instance_dir(&name).exists());
    assert_eq!(
        rampart_dataplane::xdp::attached_prog_id(Some(&ns), HOST_IF).unwrap(),
        None,
        "a clean stop detaches from the new interface too"
    );
}

/// What `rampart run` leaves on the host's interface by design (the ddos
/// stage and the chain stay after a stop), removed when a test ends —
/// also when it fails half-way.
struct RunLeftovers(String);

impl Drop for RunLeftovers {
    fn drop(&mut self) {
        if let Ok(scope) = rampart_ddos::filter::Scope::new(Some(&self.0), HOST_IF) {
            let _ = rampart_ddos::filter::Filter::detach(&scope.name());
        }
        let _ = rampart_dataplane::chain::Chain::remove(Some(&self.0), HOST_IF);
    }
}
