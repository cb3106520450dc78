//! The shipped systemd unit (`rampart run`): `systemd-analyze verify`
//! accepts it (with the binary under test in ExecStart), `systemd-analyze
//! security` scores its exposure at most 2.5, and `rampart run` with the
//! unit's privileges — its capability set, `SecureBits=noroot`, its umask,
//! applied with setpriv since no systemd runs the tests — serves all three
//! applications and compiles a tenant's C source.

mod common;

use std::process::Command;

fn unit_text() -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dist/rampart.service");
    std::fs::read_to_string(p).unwrap()
}

/// The value of the unit's `KEY=` line.
fn unit_value(key: &str) -> String {
    unit_text()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the unit has no {key}="))
        .trim()
        .to_string()
}

#[test]
fn the_unit_verifies_and_scores_at_most_2_5() {
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("rampart.service");
    assert!(
        unit_text().contains("ExecStart=/usr/bin/rampart run --config /etc/rampart/rampart.toml"),
        "{}",
        unit_text()
    );
    std::fs::write(
        &unit,
        unit_text().replace("/usr/bin/rampart", env!("CARGO_BIN_EXE_rampart")),
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
            l.split("Overall exposure level for rampart.service:")
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

/// A stopped `rampart run` leaves the interface protected (its chain and
/// ddos filter pinned, by design); the test takes them away.
struct Detach(String, String);

impl Drop for Detach {
    fn drop(&mut self) {
        let _ = common::rampart(&["ddos", "detach", "--iface", &self.1, "--netns", &self.0]);
        let _ = rampart_dataplane::chain::Chain::remove(Some(&self.0), &self.1);
    }
}

#[test]
fn rampart_run_with_the_units_privileges_serves_and_compiles_a_tenant_program() {
    rampart_lab::testing::require_kernel();
    let caps = unit_value("CapabilityBoundingSet");
    assert_eq!(unit_value("AmbientCapabilities"), caps);
    assert!(unit_value("SecureBits").contains("noroot"));
    let setpriv_caps = format!(
        "-all,{}",
        caps.split_whitespace()
            .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let ns = common::Netns::new("unit");
    let _detach = Detach(ns.name.clone(), ns.iface());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokens"), "acme acme-token-12345678\n").unwrap();
    // The shipped config on an interface of the test's own, the API on a free
    // port, state in the test's directory, and the commented [tenant] turned on.
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/rampart.toml"
    ))
    .unwrap();
    let tname = rampart_lab::testing::unique_prefix("unitt");
    let cfg = shipped
        .replace(
            "name = \"eth0\"",
            &format!("name = \"{}\"\nnetns = \"{}\"", ns.iface(), ns.name),
        )
        .replace(
            "listen = \"127.0.0.1:9470\"",
            &format!(
                "listen = \"127.0.0.1:0\"\ntoken_file = \"{}\"",
                dir.path().join("tokens").display()
            ),
        )
        .replace(
            "state_dir = \"/run/rampart/ddosd\"",
            &format!("state_dir = \"{}\"", dir.path().join("state").display()),
        )
        .replace(
            "file = \"-\"",
            &format!("file = \"{}\"", dir.path().join("alerts.jsonl").display()),
        )
        + &format!(
            "[tenant.infra]\nname = \"{tname}\"\n[[tenant.tenant]]\nname = \"acme\"\nselectors = [\"prefix:10.77.0.0/24\"]\n"
        );
    let path = dir.path().join("rampart.toml");
    std::fs::write(&path, cfg).unwrap();
    let umask = unit_value("UMask");
    let log = dir.path().join("run.log");
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask {umask}; exec setpriv --securebits +noroot,+noroot_locked \
             --bounding-set {setpriv_caps} --inh-caps {setpriv_caps} --ambient-caps {setpriv_caps} \
             -- {} run --config {}",
            env!("CARGO_BIN_EXE_rampart"),
            path.display()
        ))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut d = common::Daemon { child, stderr: log };
    let text = d.wait_for("API on http://");
    let addr = text
        .split("API on http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .trim_end_matches(',')
        .to_string();
    // It holds the unit's capabilities and no other.
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    const CAP_CHOWN: u64 = 1 << 0;
    const CAP_DAC_OVERRIDE: u64 = 1 << 1;
    const CAP_SETUID: u64 = 1 << 7;
    const CAP_BPF: u64 = 1 << 39;
    assert_eq!(
        eff & (CAP_CHOWN | CAP_DAC_OVERRIDE | CAP_SETUID | CAP_BPF),
        CAP_BPF,
        "{status}"
    );
    // A tenant's C source compiles (clang in its sandbox) and runs.
    let c = rampart_tenant::client::Client::new(&format!("http://{addr}"), "acme-token-12345678");
    let info = c
        .put(
            "/tenant/v1/program",
            b"#include \"rampart_tenant.h\"\nint tenant_main(struct xdp_md *ctx) { return XDP_PASS; }\n",
        )
        .unwrap()
        .unwrap_or_else(|e| panic!("refused: {} {}", e.message(), d.log()));
    assert_eq!(info["version"], 1, "{info}");
    // The compiler's sandbox still keeps host files away under these privileges.
    let secret = dir.path().join("secret.h");
    std::fs::write(&secret, "unit_secret_xyzzy = 1;\n").unwrap();
    let e = c
        .put(
            "/tenant/v1/program",
            format!(
                "#include \"rampart_tenant.h\"\n#define S(x) #x\n#define X(x) S(x)\n#define C(a, b) a##b\n\
                 asm(X(C(.inc, lude)) \" \\\"{}\\\"\");\nint tenant_main(struct xdp_md *ctx) {{ return XDP_PASS; }}\n",
                secret.display()
            )
            .as_bytes(),
        )
        .unwrap()
        .unwrap_err();
    let out = e.detail("compiler").unwrap_or_default().to_string();
    assert!(
        out.contains("secret.h") && !out.contains("unit_secret_xyzzy"),
        "{out}"
    );
    let log = d.stop();
    assert!(!log.contains("ERROR"), "{log}");
}
