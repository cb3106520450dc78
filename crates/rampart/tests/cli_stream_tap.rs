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
            &format!("xdp:{host},seconds=6"),
            "--json",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The tap is on (XDP attached, then its egress half at once) and its
    // /metrics answers: no fixed sleep, a loaded machine starts it slower.
    wait_for_xdp(&lab.host_ns());
    let t0 = Instant::now();
    while !std::process::Command::new("curl")
        .args([
            "-sf",
            "-m",
            "2",
            &format!("http://127.0.0.1:{port}/metrics"),
        ])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "/metrics never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let problems = rampart_service::testing::promtool_check_metrics(&m);
    assert!(problems.is_empty(), "promtool: {problems:#?}\n{m}");
    let missing = rampart_service::testing::dist_queries_missing(&m, &["rampart_stream_"]);
    assert!(
        missing.is_empty(),
        "dist/ (Grafana board, rules) queries metrics the stream app does not serve: {missing:?}"
    );
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
    assert_eq!(echo["flow"]["pkts_toserver"], 3, "{out}");
    // The host's replies, through the tap's egress half.
    assert_eq!(echo["flow"]["pkts_toclient"], 3, "{out}");
    assert!(echo["community_id"].as_str().unwrap().starts_with("1:"));
    let stats = lines.last().unwrap();
    assert_eq!(stats["event_type"], "stats");
}

/// Waits until an XDP program is attached to host0 in `ns` (the tap is on).
fn wait_for_xdp(ns: &str) {
    let t0 = Instant::now();
    loop {
        let o = std::process::Command::new("ip")
            .args(["-n", ns, "link", "show", "dev", "host0"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&o.stdout).contains("xdp") {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the tap never attached"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `rampart stream run APP --source xdp:NS/host0 --json ARGS`, its stdout
/// lines sent to the returned channel as they come.
fn run_tap(
    app: &str,
    host: &str,
    args: &[&str],
) -> (
    std::process::Child,
    std::sync::mpsc::Receiver<serde_json::Value>,
) {
    let mut c = cmd()
        .args([
            "stream",
            "run",
            app,
            "--source",
            &format!("xdp:{host}"),
            "--json",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(c.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines() {
            let l = l.unwrap();
            let v: serde_json::Value = serde_json::from_str(&l).expect("JSON line");
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    (c, rx)
}

/// Ctrl-C, then the lines left and the exit status.
fn interrupt(
    mut c: std::process::Child,
    rx: &std::sync::mpsc::Receiver<serde_json::Value>,
) -> Vec<serde_json::Value> {
    let st = std::process::Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let st = c.wait().unwrap();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(st.success(), "{st:?}: {err}");
    // The reader thread ends with the pipe: every line is in the channel.
    rx.iter().collect()
}

/// nmap from `wan` against the host: greppable output.
fn nmap(lab: &TestLab, scan: &str) -> String {
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.wan_ns(), "nmap", "-n", scan])
        .args(["-p", "1-2000", "-T4", "-oG", "-", "10.10.0.2"])
        .output()
        .expect("nmap (./run test installs it)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A real scanner against a served host with the tap on the host's
/// interface, every app with its default settings: nmap finds the host up
/// (its ARP gets through) and nginx's port open; portscan flags nmap's
/// SYN scan and its connect scan of 2,000 ports of one host; synflood does
/// not call the SYN scan a SYN flood. The alert is counted in /metrics.
#[test]
fn nmap_of_a_served_host_is_a_scan_not_a_syn_flood() {
    let lab = TestLab::up("clinmap", 0);
    let work = std::env::temp_dir().join(format!("rampart-clinmap-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let _nginx =
        rampart_lab::web::Nginx::start(&lab.host_ns(), "10.10.0.2", None, &work, &lab.wan_ns())
            .expect("nginx");
    let host = format!("{}/host0", lab.host_ns());
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for scan in ["-sS", "-sT"] {
        let listen = format!("127.0.0.1:{port}");
        let (c, rx) = run_tap("portscan", &host, &["--listen", &listen]);
        wait_for_xdp(&lab.host_ns());
        let found = nmap(&lab, scan);
        assert!(found.contains("Status: Up"), "{scan}: {found}");
        assert!(found.contains("80/open/tcp"), "{scan}: {found}");
        // The alert comes when the scan's failures decide (the aggregates are
        // harvested each second): wait for it, not for a time.
        let alert = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("portscan flags the scan");
        assert_eq!(alert["event_type"], "alert", "{alert}");
        assert_eq!(alert["src_ip"], "10.10.0.1", "{alert}");
        assert_eq!(alert["note"], "Scan::TRW_Scanner", "{alert}");
        let m = std::process::Command::new("curl")
            .args(["-s", "-m", "2", &format!("http://{listen}/metrics")])
            .output()
            .unwrap();
        let m = String::from_utf8_lossy(&m.stdout);
        assert!(
            m.lines().any(
                |l| l.starts_with("rampart_stream_outputs_total{kind=\"alerts\"}")
                    && !l.ends_with(" 0")
            ),
            "{m}"
        );
        let rest = interrupt(c, &rx);
        let (stats, alerts): (Vec<_>, Vec<_>) =
            rest.iter().partition(|v| v["event_type"] == "stats");
        assert!(
            alerts.iter().all(|a| a["src_ip"] == "10.10.0.1"),
            "{scan}: only the scanner: {alerts:?}"
        );
        assert_eq!(stats.len(), 1, "{rest:?}");
        assert_eq!(
            stats[0]["alerts"].as_u64(),
            Some(1 + alerts.len() as u64),
            "{scan}: {rest:?}"
        );
    }
    let (c, rx) = run_tap("synflood", &host, &[]);
    wait_for_xdp(&lab.host_ns());
    let found = nmap(&lab, "-sS");
    assert!(found.contains("80/open/tcp"), "{found}");
    let rest = interrupt(c, &rx);
    assert_eq!(rest.len(), 1, "no alert, the stats: {rest:?}");
    let stats = &rest[0];
    assert_eq!(stats["event_type"], "stats");
    assert_eq!(stats["alerts"], 0, "{stats}");
    assert!(
        stats["source"]["frames"].as_u64().unwrap() >= 2000,
        "the scan's SYNs reached synflood: {stats}"
    );
    let _ = std::fs::remove_dir_all(&work);
}
