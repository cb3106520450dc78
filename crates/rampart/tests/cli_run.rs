//! `rampart run --check` and `--print-config`: the shipped config is
//! valid on a host that has its interface, and every problem is one line.

mod common;

use common::{one_error_line, rampart};

/// The shipped config with its interface renamed to one this host has.
fn shipped_on(iface: &str, tag: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/rampart.toml"
    ))
    .unwrap()
    .replace("name = \"eth0\"", &format!("name = \"{iface}\""));
    let p = std::env::temp_dir().join(format!("rampart-cli-run-{}-{tag}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_accepts_the_shipped_config_on_an_existing_interface() {
    let p = shipped_on("lo", "ok");
    let o = rampart(&["run", "--check", "--config", p.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("OK: ddos -> stream on lo"), "{out}");
    std::fs::remove_file(p).unwrap();
}

#[test]
fn check_names_a_missing_interface_and_a_bad_key() {
    let p = shipped_on("rp-nosuch9", "missing");
    let o = rampart(&["run", "--check", "--config", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    one_error_line(&o, "rp-nosuch9");
    std::fs::remove_file(&p).unwrap();

    let p = std::env::temp_dir().join(format!("rampart-cli-run-{}-bad.toml", std::process::id()));
    std::fs::write(
        &p,
        "[[interface]]\nname = \"lo\"\n[ddos.daemon]\nintervall_s = 1\n",
    )
    .unwrap();
    let o = rampart(&["run", "--check", "--config", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    one_error_line(&o, "ddos.daemon.intervall_s: unknown field");
    std::fs::remove_file(p).unwrap();

    let o = rampart(&["run", "--check"]);
    assert_eq!(o.status.code(), Some(2), "usage error");
}

#[test]
fn print_config_round_trips() {
    let p = shipped_on("lo", "print");
    let o = rampart(&["run", "--print-config", "--config", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let printed = std::env::temp_dir().join(format!(
        "rampart-cli-run-{}-printed.toml",
        std::process::id()
    ));
    std::fs::write(&printed, &o.stdout).unwrap();
    let o2 = rampart(&["run", "--check", "--config", printed.to_str().unwrap()]);
    assert_eq!(
        o2.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o2.stderr)
    );
    for f in [p, printed] {
        std::fs::remove_file(f).unwrap();
    }
}
