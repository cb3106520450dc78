//! `rampart stream run` and `rampart bench stream-engine` end to end: JSON
//! lines with the promised fields, IPFIX to a collector, the benchmark's
//! output objects, and one clear error line for bad input.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::{one_error_line, rampart};

#[test]
fn flowmeter_json_lines_and_ipfix() {
    let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
    collector
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let addr = collector.local_addr().unwrap().to_string();
    let o = rampart(&[
        "stream",
        "run",
        "flowmeter",
        "--source",
        "synthetic:flows=1000,tuples=50000,replicas=2",
        "--workers",
        "2",
        "--json",
        "--ipfix",
        &addr,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let (stats, flows) = lines.split_last().unwrap();
    assert_eq!(flows.len(), 1000);
    for f in flows {
        for k in [
            "timestamp",
            "event_type",
            "flow_id",
            "src_ip",
            "src_port",
            "dest_ip",
            "dest_port",
            "proto",
            "flow",
        ] {
            assert!(f.get(k).is_some(), "flow event lacks {k}: {f}");
        }
        assert_eq!(f["event_type"], "flow");
    }
    let pkts: u64 = flows
        .iter()
        .map(|f| f["flow"]["pkts_toserver"].as_u64().unwrap())
        .sum();
    assert_eq!(pkts, 50_000);
    assert_eq!(stats["event_type"], "stats");
    assert_eq!(stats["flows"]["flows"], 1000);
    assert_eq!(stats["source"]["tuples"], 50_000);
    let mut buf = [0u8; 2048];
    let n = collector.recv(&mut buf).expect("an IPFIX message");
    assert_eq!(&buf[..2], &[0, 10], "IPFIX version 10");
    assert_eq!(
        usize::from(u16::from_be_bytes([buf[2], buf[3]])),
        n,
        "IPFIX length"
    );
}

#[test]
fn bench_prints_one_object_per_configuration() {
    let o = rampart(&[
        "bench",
        "stream-engine",
        "--json",
        "--seconds",
        "0.05",
        "--repeat",
        "1",
        "--flows",
        "4096",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The peer engine on the same pipeline: timely-dataflow, 1 and 2 workers.
    let (peers, rows): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| r["event_type"] == "peer");
    assert_eq!(peers.len(), 2, "{peers:?}");
    for p in &peers {
        assert_eq!(p["engine"], "timely-dataflow");
        assert!(p["tuples_per_s"].as_f64().unwrap() > 0.0);
        assert!(p["windows"].as_u64().unwrap() > 0);
        assert!(p["rampart_best_over_peer"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(rows.len(), 12, "8 full + 4 empty configurations");
    for r in &rows {
        for k in [
            "pipeline",
            "flows",
            "parallelism",
            "batching",
            "chaining",
            "tuples_per_s",
        ] {
            assert!(r.get(k).is_some(), "{k} missing: {r}");
        }
        assert!(r["tuples_per_s"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(rows.iter().filter(|r| r["pipeline"] == "full").count(), 8);
    assert!(rows.iter().any(|r| r["parallelism"] == "1-1-1-2-1"
        && r["batching"] == true
        && r["chaining"] == true));
}

#[test]
fn bad_input_gets_one_clear_line() {
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "flowmeter",
            "--source",
            "pcap:/nonexistent.pcap",
        ]),
        "cannot open",
    );
    one_error_line(
        &rampart(&["stream", "run", "flowmeter", "--source", "tape:x"]),
        "unknown source kind",
    );
    one_error_line(
        &rampart(&["stream", "run", "synflood", "--source", "synthetic:flows=0"]),
        "flows=0 out of range",
    );
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "portscan",
            "--source",
            "synthetic:tuples=10",
            "--theta1",
            "0.9",
        ]),
        "must be below θ0",
    );
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "flowmeter",
            "--source",
            "synthetic:tuples=10",
            "--workers",
            "0",
        ]),
        "parallelism 0",
    );
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "flowmeter",
            "--source",
            "synthetic:tuples=10",
            "--idle-timeout",
            "0",
        ]),
        "idle-timeout",
    );
    one_error_line(
        &rampart(&["bench", "stream-engine", "--seconds", "0"]),
        "--seconds",
    );
    one_error_line(
        &rampart(&[
            "stream",
            "run",
            "nosuchapp",
            "--source",
            "synthetic:tuples=1",
        ]),
        "nosuchapp",
    );
}
