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

/// Run `rampart run --check` on the shipped config (on `lo`) with `pre` in
/// front (a capability-dropping wrapper) and `env` set.
fn check_with(pre: &[&str], env: &[(&str, &str)], tag: &str) -> std::process::Output {
    let p = shipped_on("lo", tag);
    let bin = env!("CARGO_BIN_EXE_rampart");
    let (prog, args) = match pre.split_first() {
        Some((p0, rest)) => (p0.to_string(), [rest, &[bin]].concat()),
        None => (bin.to_string(), Vec::new()),
    };
    let o = std::process::Command::new(prog)
        .args(args)
        .args(["run", "--check", "--config", p.to_str().unwrap()])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    std::fs::remove_file(p).unwrap();
    o
}

#[test]
fn a_host_without_what_xdp_needs_gets_one_line_naming_it() {
    // Root by user id but without CAP_BPF (nor CAP_SYS_ADMIN) in its
    // effective set: the capabilities are checked, not the user id.
    let o = check_with(
        &["setpriv", "--bounding-set=-bpf,-sys_admin", "--"],
        &[],
        "caps",
    );
    let line = one_error_line(&o, "CAP_BPF");
    assert!(line.contains("effective"), "{line}");
    let o = check_with(
        &["setpriv", "--bounding-set=-net_admin", "--"],
        &[],
        "netadm",
    );
    one_error_line(&o, "lacks CAP_NET_ADMIN");
    // No bpf() system call, no bpffs (simulated: this kernel has both).
    let o = check_with(&[], &[("RAMPART_TEST_DISABLE_FEATURE", "xdp")], "nobpf");
    one_error_line(&o, "no bpf() system call");
    let o = check_with(&[], &[("RAMPART_TEST_DISABLE_FEATURE", "bpffs")], "nofs");
    one_error_line(&o, "BPF filesystem");
    // And with everything there, the same file is fine.
    let o = check_with(&[], &[], "all");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn no_interface_means_the_default_routes_said_at_start() {
    let p = std::env::temp_dir().join(format!("rampart-cli-run-{}-route.toml", std::process::id()));
    std::fs::write(&p, "[stream]\napps = [\"flowmeter\"]\n").unwrap();
    let o = rampart(&["run", "--check", "--config", p.to_str().unwrap()]);
    std::fs::remove_file(p).unwrap();
    match rampart_run::config::default_route_interface() {
        Some(i) => {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains(&format!(
                    "running on {i}, the interface of the default route"
                )),
                "{err}"
            );
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains(&format!("OK: stream on {i}")), "{out}");
        }
        None => {
            one_error_line(&o, "no default route");
        }
    }
}

/// A kernel without Landlock, as the process sees it: a seccomp filter
/// makes `landlock_create_ruleset` fail with ENOSYS (what a kernel without
/// it answers), everything else allowed.
fn without_landlock(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls (prctl).
    unsafe {
        cmd.pre_exec(|| {
            let nr = libc::SYS_landlock_create_ruleset as u32;
            let mut f = [
                // A = syscall number (seccomp_data.nr, offset 0).
                libc::sock_filter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 0,
                },
                // if A == nr: the next instruction, else skip it.
                libc::sock_filter {
                    code: 0x15,
                    jt: 0,
                    jf: 1,
                    k: nr,
                },
                libc::sock_filter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: 0x0005_0000 | libc::ENOSYS as u32,
                },
                libc::sock_filter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: 0x7fff_0000,
                },
            ];
            let prog = libc::sock_fprog {
                len: f.len() as u16,
                filter: f.as_mut_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, 2, &prog as *const libc::sock_fprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn check_warns_when_tenants_cannot_compile_c_here() {
    let text = "[[interface]]\nname = \"lo\"\n[tenant]\n";
    let p = std::env::temp_dir().join(format!("rampart-cli-run-{}-ll.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    let run = |no_landlock: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rampart"));
        c.args(["run", "--check", "--config", p.to_str().unwrap()]);
        if no_landlock {
            without_landlock(&mut c);
        }
        c.output().unwrap()
    };
    let with = run(false);
    let without = run(true);
    std::fs::remove_file(&p).unwrap();
    // This kernel has Landlock: no warning.
    let err = String::from_utf8_lossy(&with.stderr);
    assert_eq!(with.status.code(), Some(0), "{with:?}");
    assert!(!err.contains("Landlock"), "{err}");
    // Without it the check still passes (BPF objects work) and says, in one
    // line, what tenants cannot do and what to do instead.
    assert_eq!(without.status.code(), Some(0), "{without:?}");
    let err = String::from_utf8_lossy(&without.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("Landlock")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("rampart run: warning: [tenant]:")
            && lines[0].contains("submit a BPF object")
            && lines[0].contains("not implemented"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&without.stdout).contains(": OK: tenant on lo"));
}
