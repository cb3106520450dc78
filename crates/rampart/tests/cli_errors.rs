//! Error hygiene of the binary: every error is one line, an OS error is
//! said once, usage errors exit 2, a permission problem is named as one,
//! and a closed output pipe ends a command quietly.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{cmd, one_error_line, rampart};

fn missing_path(tag: &str) -> String {
    format!("/nonexistent-rampart-{}-{tag}", std::process::id())
}

/// The OS error appears exactly once in the line.
fn os_error_once(line: &str) {
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "the OS error once: {line:?}"
    );
    assert_eq!(line.matches("os error 2").count(), 1, "{line:?}");
}

#[test]
fn a_missing_file_names_the_os_error_once() {
    let p = missing_path("cfg");
    let o = rampart(&["tenant", "serve", "--config", &p]);
    assert_eq!(o.status.code(), Some(1));
    os_error_once(&one_error_line(&o, &p));

    let o = rampart(&["ddos", "block", "--file", &p]);
    assert_eq!(o.status.code(), Some(1));
    os_error_once(&one_error_line(&o, &p));

    let o = rampart(&[
        "stream",
        "run",
        "flowmeter",
        "--source",
        &format!("pcap:{p}"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    os_error_once(&one_error_line(&o, &p));
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    for (args, needle) in [
        (&["ddos", "block", "192.0.2.1", "--ttl", "0"][..], "--ttl"),
        (&["ddos", "block", "192.0.2.300"][..], "192.0.2.300"),
        (&["ddos", "block"][..], "no prefixes given"),
        (&["ddos", "list", "--window", "99"][..], "--window"),
        (
            &["ddos", "attach", "--iface", "lo", "--mode", "hw"][..],
            "--mode hw",
        ),
        (
            &[
                "stream",
                "run",
                "flowmeter",
                "--source",
                "synthetic:flows=1,tuples=1",
                "--idle-timeout",
                "0",
            ][..],
            "--idle-timeout",
        ),
        (
            &["stream", "run", "flowmeter", "--source", "nosuch:x"][..],
            "nosuch",
        ),
        (&["tenant", "stats"][..], "no token"),
        (&["ddos", "nosuchcommand"][..], "nosuchcommand"),
    ] {
        let mut c = cmd();
        c.args(args).env_remove("RAMPART_TENANT_TOKEN");
        let o = c.output().unwrap();
        one_error_line(&o, needle);
        assert_eq!(o.status.code(), Some(2), "{args:?}: usage errors exit 2");
    }
}

/// `setpriv` as the unprivileged user `nobody`.
fn as_nobody(args: &[&str]) -> std::process::Output {
    assert!(
        rampart_dataplane::features::is_root(),
        "this test drops to the user nobody and needs root to do so: run it with ./run test"
    );
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_rampart"),
        ])
        .args(args)
        .output()
        .expect("run setpriv (util-linux)")
}

#[test]
fn without_root_the_error_says_so() {
    for args in [
        &["ddos", "stats"][..],
        &["ddos", "list", "--window", "0"][..],
        &["ddos", "stats", "--iface", "lo"][..],
    ] {
        let o = as_nobody(args);
        let line = one_error_line(&o, "root");
        assert_eq!(o.status.code(), Some(1), "{line}");
        assert!(
            !line.contains("no rampart ddos filter"),
            "{args:?}: a permission problem blamed on a missing filter: {line}"
        );
    }
}

#[test]
fn a_closed_output_pipe_ends_quietly() {
    // Far more output than one line: the reader goes away after the first.
    let mut child = cmd()
        .args([
            "stream",
            "run",
            "flowmeter",
            "--source",
            "synthetic:flows=50000,tuples=200000",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with('{'), "a JSON line first: {first:?}");
    drop(out);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.trim().is_empty(), "nothing on stderr, got {err:?}");
    assert_eq!(o.status.code(), Some(0), "quiet success");
}

#[test]
fn status_with_no_daemon_running_says_so_in_one_line() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!("127.0.0.1:{port}");
    for json in [false, true] {
        let mut args = vec!["status", "--server", &server];
        if json {
            args.push("--json");
        }
        let o = rampart(&args);
        assert_eq!(o.status.code(), Some(1));
        let line = one_error_line(&o, "no rampart daemon is running");
        assert!(line.contains(&format!("http://{server}")), "{line}");
        assert!(o.stdout.is_empty(), "nothing on stdout: {:?}", o.stdout);
    }
}
