//! Evidence per attack, end to end: the daemon runs on the shipped
//! configuration, a DNS amplification attack from 40 reflectors is
//! detected and blocked, and its `attack_start` alert names a pcap under
//! the state directory that `tcpdump -r` reads: the reflectors' answers
//! (UDP from port 53) to the victim. The file keeps growing after every
//! reflector is blocked: their packets are sampled before the drop.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rampart_ddosd::Handle;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;

mod common;
use common::{alerts, poll, shipped_config, Cleanup};

/// `tcpdump -nn -r path`: its packet lines ("" when it cannot read it).
fn tcpdump(path: &str) -> Vec<String> {
    let out = Command::new("tcpdump")
        .args(["-nn", "-r", path])
        .output()
        .expect("tcpdump runs (./run test installs it)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn an_attack_start_alert_names_a_pcap_of_the_attack_that_tcpdump_reads() {
    let lab = TestLab::up("eevid", 0);
    let c = Cleanup::new(&lab);
    let cfg = shipped_config(&lab, &c);
    let state = PathBuf::from(&cfg.daemon.state_dir);
    let h = Handle::spawn(cfg).expect("the daemon starts on the shipped config");
    let spec = GenSpec {
        sources: 40,
        proto: Proto::Udp,
        sport: 53,
        dport: Some(33_333),
        size: 600,
        pps: Some(10_000.0),
        limit: Limit::Seconds(120.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let run = sc.spawn(|| g.run(&stop));
        let checks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // The attack's start names its pcap.
            let mut pcap = None;
            assert!(
                poll(Duration::from_secs(90), || {
                    pcap = alerts(&c).iter().find_map(|a| {
                        (a["rampart"]["event"] == "attack_start")
                            .then(|| a["rampart"]["pcap"].as_str().map(str::to_string))?
                    });
                    pcap.is_some()
                }),
                "no attack_start alert with rampart.pcap: {:?}",
                alerts(&c)
            );
            let pcap = pcap.unwrap();
            assert!(
                PathBuf::from(&pcap).starts_with(state.join("evidence")),
                "{pcap} is not under the state directory"
            );
            // tcpdump reads the attack's packets from it.
            let mut lines = Vec::new();
            assert!(
                poll(Duration::from_secs(60), || {
                    lines = tcpdump(&pcap);
                    !lines.is_empty()
                }),
                "tcpdump -r {pcap} reads no packet"
            );
            for l in &lines {
                assert!(
                    l.contains(".53 > 10.10.0.2.33333: ") && l.contains(" 172.16."),
                    "not the attack's packet: {l}"
                );
            }
            // Every reflector blocked: the file still grows (1 in M).
            let n = lines.len();
            assert!(
                poll(Duration::from_secs(90), || tcpdump(&pcap).len() > n),
                "the pcap stayed at {n} packets while the blocked reflectors kept sending"
            );
        }));
        stop.store(true, Ordering::Relaxed);
        assert!(run.join().unwrap().unwrap().sent_packets > 0);
        if let Err(e) = checks {
            std::panic::resume_unwind(e);
        }
    });
    h.stop().expect("the daemon stops cleanly");
}
