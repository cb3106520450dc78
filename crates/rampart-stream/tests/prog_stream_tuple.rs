//! The userspace parser (`parse_frame`) and FlowID (`set_flow_id`) against
//! their XDP counterparts (`bpf/stream/tuple.h`, run through
//! `xdp_stream_probe` with BPF_PROG_RUN): same status, same tuple, same
//! FlowID in every key mode, on well-formed frames, every truncation of
//! them, and thousands of random mutations (the test kit's corpus), and the
//! status the kit expects of `bpf/common/parse.h`. This is what "one
//! definition of the tuple" means in practice.

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::xdp_stream_probe::{
    types::stream_probe_out, XdpStreamProbeSkel, XdpStreamProbeSkelBuilder,
};
use rampart_dataplane::testrun;
use rampart_stream::flowid::{set_flow_id, KeyMode};
use rampart_stream::parse::parse_frame;
use rampart_stream::tuple::{same, StreamTuple};
use rampart_testkit::corpus::{self, Case};
use rampart_testkit::prog::XDP_PASS;

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
    assert_eq!(out.retval, XDP_PASS, "XDP_PASS");
    let v = skel
        .maps
        .stream_probe_out
        .lookup(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .unwrap()
        .unwrap();
    assert_eq!(v.len(), std::mem::size_of::<stream_probe_out>());
    bytemuck::pod_read_unaligned(&v)
}

/// Compare one corpus frame; returns the status for statistics.
fn check(skel: &XdpStreamProbeSkel<'_>, case: &Case) -> u32 {
    let (frame, what) = (&case.frame[..], &case.name);
    let b = bpf(skel, frame);
    let r = parse_frame(frame, 0);
    let status = match &r {
        Ok(_) => 0,
        Err(s) => *s as u32,
    };
    assert_eq!(b.status, status, "{what}: status (frame {frame:02x?})");
    assert_eq!(
        status, case.expect.status as u32,
        "{what}: the status parse.h must give"
    );
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

#[test]
fn corpus_matches_xdp() {
    let s = load();
    let mut seen = [0usize; 5];
    for c in corpus::base() {
        seen[check(&s, &c) as usize] += 1;
    }
    // The corpus covers every status.
    assert!(seen.iter().all(|n| *n > 0), "statuses covered: {seen:?}");
}

#[test]
fn every_truncation_matches_xdp() {
    let s = load();
    // BPF_PROG_RUN refuses frames shorter than an Ethernet header (as drivers never deliver them).
    for c in corpus::truncations() {
        check(&s, &c);
    }
}

#[test]
fn random_mutations_match_xdp() {
    let s = load();
    // 1-4 header bytes changed, a quarter of them also cut.
    for c in corpus::mutations(0x1234_5678_9abc_def1, 3000) {
        check(&s, &c);
    }
}
