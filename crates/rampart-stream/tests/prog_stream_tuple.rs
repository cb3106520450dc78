//! The userspace parser (`parse_frame`) and FlowID (`set_flow_id`) against
//! their XDP counterparts (`bpf/stream/tuple.h`, run through
//! `xdp_stream_probe` with BPF_PROG_RUN): same status, same tuple, same
//! FlowID in every key mode, on well-formed frames, every truncation of
//! them, and thousands of random mutations. This is what "one definition of
//! the tuple" means in practice.

use std::os::fd::{AsFd, AsRawFd};

mod common;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::xdp_stream_probe::{
    types::stream_probe_out, XdpStreamProbeSkel, XdpStreamProbeSkelBuilder,
};
use rampart_dataplane::testrun;
use rampart_stream::flowid::{set_flow_id, KeyMode};
use rampart_stream::parse::parse_frame;
use rampart_stream::tuple::{same, StreamTuple};

fn load() -> XdpStreamProbeSkel<'static> {
    rampart_lab::testing::require_kernel();
    XdpStreamProbeSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .expect("open")
        .load()
        .expect("load xdp_stream_probe (verifier)")
}

fn bpf(skel: &XdpStreamProbeSkel<'_>, frame: &[u8]) -> stream_probe_out {
    let out = testrun::run_packet(skel.progs.xdp_stream_probe.as_fd().as_raw_fd(), frame, 0)
        .expect("run");
    assert_eq!(out.retval, 2, "XDP_PASS");
    let v = skel
        .maps
        .stream_probe_out
        .lookup(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .unwrap()
        .unwrap();
    assert_eq!(v.len(), std::mem::size_of::<stream_probe_out>());
    bytemuck::pod_read_unaligned(&v)
}

/// Compare one frame; returns the status for statistics.
fn check(skel: &XdpStreamProbeSkel<'_>, frame: &[u8], what: &str) -> u32 {
    let b = bpf(skel, frame);
    let r = parse_frame(frame, 0);
    let status = match &r {
        Ok(_) => 0,
        Err(s) => *s as u32,
    };
    assert_eq!(b.status, status, "{what}: status (frame {frame:02x?})");
    if let Ok(t) = r {
        assert!(
            same(&b.t[0], &t),
            "{what}: tuple\n bpf {:?}\nrust {:?}",
            b.t[0],
            t
        );
        for (i, mode) in [
            (1, KeyMode::FiveTuple),
            (2, KeyMode::SynPair),
            (3, KeyMode::Bidir),
        ] {
            let mut u = t;
            set_flow_id(&mut u, mode);
            assert!(
                same(&b.t[i], &u),
                "{what}: {mode:?}\n bpf {:?}\nrust {:?}",
                b.t[i],
                u
            );
        }
    } else {
        assert!(
            same(&b.t[0], &StreamTuple::default()),
            "{what}: no tuple means a zero tuple"
        );
    }
    status
}

use common::corpus;

#[test]
fn corpus_matches_xdp() {
    let s = load();
    let mut seen = [0usize; 5];
    for (name, f) in corpus() {
        seen[check(&s, &f, &name) as usize] += 1;
    }
    // The corpus covers every status.
    assert!(seen.iter().all(|n| *n > 0), "statuses covered: {seen:?}");
}

#[test]
fn every_truncation_matches_xdp() {
    let s = load();
    for (name, f) in corpus() {
        // BPF_PROG_RUN refuses frames shorter than an Ethernet header (as drivers never deliver them).
        for n in 14..f.len() {
            check(&s, &f[..n], &format!("{name} cut at {n}"));
        }
    }
}

#[test]
fn random_mutations_match_xdp() {
    let s = load();
    let c = corpus();
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..3000 {
        let (name, f) = &c[(rnd() % c.len() as u64) as usize];
        let mut f = f.clone();
        // Flip 1-4 bytes among the headers (where the parser looks).
        for _ in 0..1 + rnd() % 4 {
            let pos = (rnd() % (f.len().min(96) as u64)) as usize;
            f[pos] = rnd() as u8;
        }
        if f.len() > 14 && rnd() % 4 == 0 {
            let n = 14 + (rnd() % (f.len() as u64 - 14)) as usize;
            f.truncate(n);
        }
        check(&s, &f, &format!("mutation {i} of {name}"));
    }
}
