//! `rampart tenant …` end to end: `serve` from a config file, the tenant
//! client commands against it, one clear error line for every mistake, and
//! a clean teardown on SIGTERM.

mod common;

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rampart_lab::testing::{require_kernel, unique_prefix};
use rampart_testkit::http::free_port;

fn rampart(args: &[&str], token: Option<&str>, server: &str) -> Output {
    let mut c = common::cmd();
    c.args(args)
        .env("RAMPART_TENANT_SERVER", server)
        .env_remove("RAMPART_TENANT_TOKEN");
    if let Some(t) = token {
        c.env("RAMPART_TENANT_TOKEN", t);
    }
    c.output().expect("run rampart")
}

fn assert_one_error_line(o: &Output, needle: &str) {
    common::one_error_line(o, needle);
}

struct Serve {
    child: Child,
    name: String,
    _dir: tempfile::TempDir,
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = Command::new(env!("CARGO_BIN_EXE_rampart"))
            .args(["tenant", "cleanup", "--name", &self.name])
            .output();
    }
}

fn serve(port: u16) -> Serve {
    require_kernel();
    let name = unique_prefix("tcli");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tenant.toml");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "acme acme-secret-token\n").unwrap();
    let mut f = std::fs::File::create(&cfg).unwrap();
    write!(
        f,
        r#"
[server]
listen = "127.0.0.1:{port}"
token_file = "{}"
[infra]
name = "{name}"
interfaces = ["lo"]
attach = false
[[tenant]]
name = "acme"
# What the operator grants: the tenant may select within it (the test
# narrows it to exactly this set through the CLI).
selectors = ["prefix:10.20.1.0/24", "vlan:7"]
"#,
        tokens.display()
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(["tenant", "serve", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "serve did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Serve {
        child,
        name,
        _dir: dir,
    }
}

#[test]
fn a_tenant_drives_its_program_from_the_cli() {
    let port = free_port();
    let s = serve(port);
    let server = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("drop.c");
    std::fs::write(
        &prog,
        "#include \"rampart_tenant.h\"\nint tenant_main(struct xdp_md *ctx) { return XDP_DROP; }\n",
    )
    .unwrap();
    let o = rampart(
        &["tenant", "submit", prog.to_str().unwrap()],
        Some("acme-secret-token"),
        &server,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("program v1 running"),
        "{o:?}"
    );
    let o = rampart(
        &["tenant", "stats", "--json"],
        Some("acme-secret-token"),
        &server,
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["name"], "acme");
    let o = rampart(
        &[
            "tenant",
            "selectors",
            "--set",
            "prefix:10.20.1.0/24",
            "vlan:7",
        ],
        Some("acme-secret-token"),
        &server,
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "prefix:10.20.1.0/24\nvlan:7\n"
    );
    let o = rampart(&["tenant", "remove"], Some("acme-secret-token"), &server);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "program removed\n");
    // The header the programs compile against is printable.
    let o = rampart(&["tenant", "header"], None, &server);
    assert!(String::from_utf8_lossy(&o.stdout).contains("int tenant_main(struct xdp_md *ctx);"));

    // Mistakes: one clear line each.
    assert_one_error_line(&rampart(&["tenant", "stats"], None, &server), "no token");
    assert_one_error_line(
        &rampart(&["tenant", "stats"], Some("nope-nope-nope"), &server),
        "unknown token",
    );
    assert_one_error_line(
        &rampart(
            &["tenant", "selectors", "--set", "vlan:0"],
            Some("acme-secret-token"),
            &server,
        ),
        "vlan",
    );
    let bad = dir.path().join("bad.c");
    std::fs::write(&bad, "#include \"rampart_tenant.h\"\nint tenant_main(struct xdp_md *ctx) { long (*h)(long) = (void *)23; return h(0); }\n").unwrap();
    assert_one_error_line(
        &rampart(
            &["tenant", "submit", bad.to_str().unwrap()],
            Some("acme-secret-token"),
            &server,
        ),
        "bpf_redirect",
    );
    assert_one_error_line(
        &rampart(&["tenant", "stats"], Some("x"), "http://127.0.0.1:1"),
        "cannot reach the tenant API",
    );
    // The verifier log is shown before the error line.
    let unsafe_c = dir.path().join("unsafe.c");
    std::fs::write(&unsafe_c, "#include \"rampart_tenant.h\"\nint tenant_main(struct xdp_md *ctx) { __u8 *p = (void *)(long)ctx->data; return p[9]; }\n").unwrap();
    let o = rampart(
        &["tenant", "submit", unsafe_c.to_str().unwrap()],
        Some("acme-secret-token"),
        &server,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--- verifier log ---") && err.contains("invalid access to packet"),
        "{err}"
    );
    assert!(
        err.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("error: the kernel verifier rejected the program"),
        "{err}"
    );
    drop(s);
}

#[test]
fn a_tenant_configures_its_dns_limiter_by_name() {
    let port = free_port();
    let s = serve(port);
    let server = format!("http://127.0.0.1:{port}");
    let tok = Some("acme-secret-token");
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("dns_ratelimit.c");
    std::fs::write(&prog, rampart_tenant::programs::DNS_RATELIMIT_C).unwrap();
    let o = rampart(&["tenant", "submit", prog.to_str().unwrap()], tok, &server);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let o = rampart(
        &[
            "tenant",
            "config",
            "dns",
            "--per-source-qps",
            "10",
            "--mode",
            "truncate",
            "--exempt",
            "192.0.2.0/24",
        ],
        tok,
        &server,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    for line in ["per_source_qps 10", "mode truncate", "exempt 192.0.2.0/24"] {
        assert!(out.lines().any(|l| l == line), "{line:?} in {out}");
    }
    // No flag: the current values, the ones just set.
    let o = rampart(&["tenant", "config", "dns", "--json"], tok, &server);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["per_source_qps"].as_f64(), v["mode"].as_str()),
        (Some(10.0), Some("truncate")),
        "{v}"
    );
    assert_eq!(v["exempt"], serde_json::json!(["192.0.2.0/24"]), "{v}");

    // A bad flag: one line naming the flag and its range, exit 2, nothing sent.
    for (args, needle) in [
        (
            vec!["--per-source-burst", "0"],
            "--per-source-burst 0: allowed 1..=1000000",
        ),
        (
            vec!["--per-prefix-qps", "-5"],
            "--per-prefix-qps -5: allowed 0 (no limit) or 0.001..=1000000000",
        ),
        (
            vec!["--prefix-len-v4", "33"],
            "--prefix-len-v4 33: allowed 1..=32",
        ),
        (vec!["--mode", "slow"], "--mode \"slow\": allowed truncate"),
        (vec!["--exempt", "10.0.0.0/40"], "--exempt \"10.0.0.0/40\""),
    ] {
        let mut a = vec!["tenant", "config", "dns"];
        a.extend(args);
        let o = rampart(&a, tok, &server);
        assert_one_error_line(&o, needle);
        assert_eq!(o.status.code(), Some(2), "{a:?}");
    }
    let o = rampart(
        &["tenant", "config", "synproxy", "--wscale", "15"],
        tok,
        &server,
    );
    assert_one_error_line(&o, "--wscale 15: allowed 0..=14");
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(
        &rampart(&["tenant", "config", "dns", "--json"], tok, &server).stdout,
    )
    .unwrap();
    assert_eq!(
        v["per_source_burst"], 20,
        "unchanged by the refused flags: {v}"
    );
    // The SYN proxy's settings on a DNS limiter: the server says what is missing.
    assert_one_error_line(
        &rampart(&["tenant", "config", "synproxy"], tok, &server),
        "no syn_cfg map",
    );
    drop(s);
}

#[test]
fn serve_refuses_bad_configs_with_one_line() {
    require_kernel();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("t.toml");
    std::fs::write(&cfg, "[infra]\ninterfaces = []\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(["tenant", "serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_one_error_line(&o, "interfaces is empty");
    let o = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(["tenant", "serve", "--config", "/nonexistent/t.toml"])
        .output()
        .unwrap();
    assert_one_error_line(&o, "/nonexistent/t.toml");
    // Tokens live in server.token_file, not in the tenant's section.
    std::fs::write(
        &cfg,
        "[infra]\ninterfaces = [\"lo\"]\n[[tenant]]\nname = \"acme\"\ntoken = \"acme-secret-token\"\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(["tenant", "serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_one_error_line(&o, "server.token_file");
    // A token file line naming no tenant.
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "nobody some-secret-token\n").unwrap();
    std::fs::write(
        &cfg,
        format!(
            "[server]\ntoken_file = \"{}\"\n[infra]\ninterfaces = [\"lo\"]\nattach = false\n",
            tokens.display()
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(["tenant", "serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_one_error_line(&o, "no tenant named \"nobody\"");
}

#[test]
fn both_daemons_print_their_effective_config() {
    for (args, want) in [
        (
            &["ddos", "run", "--print-config"][..],
            "listen = \"127.0.0.1:9477\"",
        ),
        (
            &["tenant", "serve", "--print-config"][..],
            "listen = \"127.0.0.1:9610\"",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_rampart"))
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("[server]") && text.contains(want),
            "{args:?}: {text}"
        );
        assert!(
            text.parse::<toml::Table>().is_ok(),
            "{args:?} prints TOML: {text}"
        );
    }
    // The shipped tenant config prints as what it says.
    let dist = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/rampart-tenant.toml"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(["tenant", "serve", "--print-config", "--config", dist])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    // Without --config, serve says what is missing.
    let o = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(["tenant", "serve"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "a usage error: {o:?}");
    assert_one_error_line(&o, "--config");
}

#[test]
fn serve_stops_cleanly_and_removes_its_pins() {
    let port = free_port();
    let s = serve(port);
    let dir = rampart_tenant::host::instance_dir(&s.name);
    assert!(dir.join("maps/rampart_t_sel").exists());
    let mut s = s;
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    let st = s.child.wait().unwrap();
    assert!(st.success(), "{st}");
    assert!(!dir.exists(), "pins left behind at {}", dir.display());
}
