//! What the stream offload costs the core that runs XDP, per packet
//! (docs/benchmarks.md, "Stream offload"): `xdp_stream` configured as the
//! flowmeter plan configures it (parse, five-tuple FlowID, record in the
//! headroom) against `xdp_stream_rx` (the offload-off and ceiling
//! program: redirect by RX queue), each run 200,000 times on a fresh copy
//! of a 60-byte UDP frame with BPF_PROG_RUN (repeat 1: `xdp_stream`
//! rewrites the frame, and repeats would reuse the rewritten buffer);
//! the figure is the mean of the kernel-reported durations, which include
//! the same timer overhead for both. No socket is attached, so neither
//! redirects: `xdp_stream` does all of its work and then drops (counted as
//! `no_socket`), `xdp_stream_rx` passes.
//!
//! `cargo run --release -p rampart-bench --example offload_xdp_cost` (root)
use std::os::fd::{AsFd, AsRawFd, RawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use rampart_bpf::xdp_stream_rx::XdpStreamRxSkelBuilder;
use rampart_dataplane::testrun;
use rampart_stream::offload::{Entry, OffloadConfig, OffloadProgram};
use rampart_testkit::frame::Frame;

/// A 60-byte Ethernet/IPv4/UDP frame (the lab generator's shape).
fn frame() -> Vec<u8> {
    Frame::udp([172, 16, 1, 2], [10, 10, 0, 2], 1024, 9)
        .zeros(18)
        .build()
}

/// Mean ns per run over `n` runs, and the last verdict.
fn cost(prog: RawFd, n: u32) -> (f64, u32) {
    let mut total = 0u64;
    let mut verdict = 0;
    for _ in 0..n {
        let (d, v) = cost1(prog);
        total += u64::from(d);
        verdict = v;
    }
    (total as f64 / f64::from(n), verdict)
}

fn cost1(prog: RawFd) -> (u32, u32) {
    let out = testrun::run_packet(prog, &frame(), 0).expect("BPF_PROG_RUN");
    (out.duration.as_nanos() as u32, out.retval)
}

fn main() {
    let off = OffloadProgram::load(Entry::Host, None, None).expect("load xdp_stream");
    off.configure(&OffloadConfig::default())
        .expect("configure (five-tuple FlowID, one replica)");
    let mut storage = std::mem::MaybeUninit::uninit();
    let rx = XdpStreamRxSkelBuilder::default()
        .open(&mut storage)
        .expect("open xdp_stream_rx")
        .load()
        .expect("load xdp_stream_rx");
    let rx_fd = rx.progs.xdp_stream_rx.as_fd().as_raw_fd();
    for pass in 0..6 {
        let (a, b) = if pass % 2 == 0 {
            let a = cost(off.prog_fd(), 200_000);
            (a, cost(rx_fd, 200_000))
        } else {
            let b = cost(rx_fd, 200_000);
            (cost(off.prog_fd(), 200_000), b)
        };
        println!(
            "{{\"pass\":{pass},\"xdp_stream_ns\":{:.1},\"xdp_stream_verdict\":{},\"xdp_stream_rx_ns\":{:.1},\"xdp_stream_rx_verdict\":{}}}",
            a.0, a.1, b.0, b.1
        );
    }
    println!("{:?}", off.counters().expect("counters"));
}
