//! `rampart stream run` as a user runs it: the tap on a lab host's
//! interface (JSON flows, /metrics while running), AF_XDP refused on an
//! interface with addresses unless `--consume`, options of another app
//! refused, and `| head` ending the run quietly.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{cmd, one_error_line, rampart};
use rampart_lab::testing::TestLab;

#[test]
fn options_of_another_app_are_refused() {
    let e = one_error_line(
        &rampart(&[
            "stream",
            "run",
            "portscan",
            "--source",
            "synthetic:flows=10,tuples=100",
            "--window",
            "5",
            "--idle-timeout",
            "3",
        ]),
        "do not apply to portscan",
    );
    assert!(
        e.contains("--idle-timeout") && e.contains("--window"),
        "{e}"
    );
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "synflood",
            "--source",
            "synthetic:flows=10,tuples=100",
            "--ipfix",
            "127.0.0.1",
        ]),
        "--ipfix does not apply to synflood",
    );
}

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let mut c = cmd()
        .args([
            "stream",
            "run",
            "flowmeter",
            "--source",
            "synthetic:flows=200000,tuples=2000000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -3`: read three lines, close the pipe.
    let mut out = BufReader::new(c.stdout.take().unwrap());
    for _ in 0..3 {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        assert!(!l.is_empty());
    }
    drop(out);
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "still running after its reader left"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.is_empty(), "quiet: {err}");
    assert!(st.success(), "{st:?}");
}

#[test]
fn the_tap_runs_on_a_servers_interface_and_afxdp_needs_consume() {
    let lab = TestLab::up("clitap", 0);
    let host = format!("{}/host0", lab.host_ns());
    // AF_XDP would take host0's frames: refused, with the way out.
    let e = one_error_line(
        &rampart(&[
            "stream",
            "run",
            "flowmeter",
            "--source",
            &format!("afxdp:{host},seconds=1"),
        ]),
        "--consume",
    );
    assert!(
        e.contains("10.10.0.2") && e.contains("--source xdp:"),
        "{e}"
    );
    let o = rampart(&[
        "stream",
        "run",
        "flowmeter",
        "--source",
        &format!("afxdp:{host},seconds=1"),
        "--consume",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // The tap, aggregating, with metrics; pings from wan meanwhile.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let run = cmd()
        .args([
            "stream",
            "run",
            "flowmeter",
            "--source",
            &format!("xdp:{host},seconds=4"),
            "--json",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let ping = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.wan_ns(),
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            "10.10.0.2",
        ])
        .output()
        .unwrap();
    assert!(ping.status.success(), "the host answers while the tap runs");
    let metrics = std::process::Command::new("curl")
        .args(["-s", "-m", "2", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .unwrap();
    let m = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        m.contains("rampart_stream_packets_total{outcome=\"aggregated\"}"),
        "{m}"
    );
    assert!(m.contains("rampart_stream_queue_depth"), "{m}");
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let echo = lines
        .iter()
        .find(|f| f["proto"] == "ICMP" && f["icmp_type"] == 8)
        .unwrap_or_else(|| panic!("the pings' flow: {out}"));
    assert_eq!(echo["flow"]["pkts_toserver"], 3);
    assert!(echo["community_id"].as_str().unwrap().starts_with("1:"));
    let stats = lines.last().unwrap();
    assert_eq!(stats["event_type"], "stats");
}
