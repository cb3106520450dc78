//! The .deb (dist/package.sh): built from the binary under test (the `ci`
//! profile, stripped by the script; `./run package` builds the `dist`
//! profile), unpacked into a scratch root with `dpkg -x`; its unit passes
//! `systemd-analyze verify`, its config passes `rampart run --check` on an
//! interface of the test's own (a veth in a netns), its binary is stripped,
//! its configs are conffiles, its man pages and completions are there.

mod common;

use std::process::Command;

#[test]
fn the_package_installs_into_a_scratch_root_and_checks() {
    rampart_lab::testing::require_kernel();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/package.sh"
    ))
    .args(["--binary", env!("CARGO_BIN_EXE_rampart"), "--out"])
    .arg(&out)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let deb = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let root = dir.path().join("root");
    let o = Command::new("dpkg")
        .args(["-x", &deb])
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ctl = Command::new("dpkg-deb")
        .args(["-I", &deb, "conffiles"])
        .output()
        .unwrap();
    let conffiles = String::from_utf8_lossy(&ctl.stdout);
    assert!(
        conffiles.contains("/etc/rampart/rampart.toml"),
        "{conffiles}"
    );

    let bin = root.join("usr/bin/rampart");
    let file = Command::new("file").arg(&bin).output().unwrap();
    let file = String::from_utf8_lossy(&file.stdout);
    assert!(
        file.contains("stripped") && !file.contains("not stripped"),
        "{file}"
    );
    for f in [
        "usr/share/man/man1/rampart.1.gz",
        "usr/share/man/man1/rampart-ddos-run.1.gz",
        "usr/share/bash-completion/completions/rampart",
        "usr/share/zsh/vendor-completions/_rampart",
        "lib/systemd/system/rampart.service",
    ] {
        assert!(root.join(f).exists(), "{f} missing");
    }

    // The unit, pointed at the unpacked binary.
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/rampart.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/rampart run --config /etc/rampart/rampart.toml"),
        "{unit}"
    );
    // One unit: no per-application unit to fight `rampart run` for the interface.
    assert!(!root
        .join("lib/systemd/system/rampart-ddos.service")
        .exists());
    let scratch_unit = dir.path().join("rampart.service");
    std::fs::write(
        &scratch_unit,
        unit.replace("/usr/bin/rampart", bin.to_str().unwrap()),
    )
    .unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&scratch_unit)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.trim().is_empty(), "verify: {err}");

    // The shipped config, on an interface of the test's own.
    let ns = common::Netns::new("pkg");
    let cfg = std::fs::read_to_string(root.join("etc/rampart/rampart.toml")).unwrap();
    assert!(cfg.contains("name = \"eth0\""), "{cfg}");
    let mine = dir.path().join("rampart.toml");
    std::fs::write(
        &mine,
        cfg.replace(
            "name = \"eth0\"",
            &format!("name = \"{}\"\nnetns = \"{}\"", ns.iface(), ns.name),
        ),
    )
    .unwrap();
    let o = Command::new(&bin)
        .args(["run", "--check", "--config"])
        .arg(&mine)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success() && text.contains("OK"), "{text}");
    // The same file as shipped names an interface this namespace lacks: one line.
    let o = Command::new(&bin)
        .args(["run", "--check", "--config"])
        .arg(root.join("etc/rampart/rampart.toml"))
        .output()
        .unwrap();
    if !o.status.success() {
        common::one_error_line(&o, "eth0");
    }
}
