//! What the ddos feature stage (`xdp_features`) costs per packet: the
//! program run alone (as pinned by an installed filter, no protection on)
//! with BPF_PROG_RUN, kernel-side repeats of 20,000 per frame kind, the
//! mean of the kernel-reported durations; 11 passes, median reported.
//! Frames: IPv4 UDP from 53 (an amplification source port), IPv4 TCP SYN,
//! IPv4 TCP ACK, IPv6 UDP. Run it before and after a change of the stage
//! on the same machine, alternately, to compare.
//!
//! `cargo run --release -p rampart-bench --example features_cost` (root)
use std::os::fd::AsRawFd;
use std::process::Command;

use rampart_dataplane::testrun;
use rampart_ddos::filter::{Filter, FilterConfig, Scope};
use rampart_testkit::frame::{tcp, Frame};

fn main() {
    let ns = format!("fcost{}", std::process::id());
    assert!(Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .expect("ip")
        .success());
    let scope = Scope::new(Some(&ns), "lo").expect("scope");
    let res = std::panic::catch_unwind(|| measure(&scope));
    let _ = Filter::detach(&scope.name());
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    if let Err(p) = res {
        std::panic::resume_unwind(p);
    }
}

fn measure(scope: &Scope) {
    let f = Filter::create(scope, &FilterConfig::default()).expect("create the filter");
    let prog = rampart_dataplane::pin::open_pinned(&f.dir().join("prog_features")).expect("pin");
    let frames = [
        (
            "udp4_src53",
            Frame::udp("192.0.2.1", "198.51.100.1", 53, 40000)
                .zeros(100)
                .build(),
        ),
        (
            "syn4",
            Frame::tcp("192.0.2.2", "198.51.100.1", 40000, 80)
                .flags(tcp::SYN)
                .build(),
        ),
        (
            "ack4",
            Frame::tcp("192.0.2.3", "198.51.100.1", 40000, 80)
                .flags(tcp::ACK)
                .ack(1)
                .build(),
        ),
        (
            "udp6",
            Frame::udp("2001:db8::1", "2001:db8:1::1", 40000, 443)
                .zeros(100)
                .build(),
        ),
    ];
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); frames.len()];
    for _ in 0..11 {
        for (i, (_, fr)) in frames.iter().enumerate() {
            let d = testrun::mean_duration(prog.as_raw_fd(), fr, 20_000).expect("BPF_PROG_RUN");
            per[i].push(d.as_nanos() as f64);
        }
    }
    for ((name, _), v) in frames.iter().zip(per.iter_mut()) {
        v.sort_by(f64::total_cmp);
        println!(
            "{{\"frame\":\"{name}\",\"median_ns\":{:.1},\"min_ns\":{:.1},\"max_ns\":{:.1}}}",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1]
        );
    }
}
