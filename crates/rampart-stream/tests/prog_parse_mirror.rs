//! The userspace parser (`rampart_stream::parse::parse_packet`) against
//! bpf/common/parse.h run in the kernel (`xdp_parse_probe`, BPF_PROG_RUN):
//! the same status and the same `struct pkt_info`, byte for byte — for
//! malformed frames too, where both leave the same partial fields — on the
//! test kit's corpus (every parse path: VLAN stacks, MPLS, PPPoE, IPv6
//! chains, tunnels, lengths against the frame), every truncation of it,
//! seeded mutations, and with depth limits other than the defaults. The
//! fuzz target `frame_xdp` does the same on coverage-guided frames.

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::xdp_parse_probe::{types::parse_out, XdpParseProbeSkel, XdpParseProbeSkelBuilder};
use rampart_dataplane::testrun;
use rampart_stream::parse::{parse_packet, Limits};
use rampart_testkit::corpus;

fn load(lim: Limits) -> XdpParseProbeSkel<'static> {
    rampart_lab::testing::require_kernel();
    let mut open = XdpParseProbeSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .expect("open");
    let ro = open.maps.rodata_data.as_deref_mut().expect("rodata");
    ro.parse_probe_limits.max_vlans = lim.max_vlans as u8;
    ro.parse_probe_limits.max_v6_ext = lim.max_v6_ext as u8;
    ro.parse_probe_limits.shims = u8::from(lim.shims);
    open.load().expect("load xdp_parse_probe (verifier)")
}

fn kernel(skel: &XdpParseProbeSkel<'_>, frame: &[u8]) -> parse_out {
    let out =
        testrun::run_packet(skel.progs.xdp_parse_probe.as_fd().as_raw_fd(), frame, 0).expect("run");
    assert_eq!(out.retval, 2, "XDP_PASS");
    let v = skel
        .maps
        .parse_out
        .lookup(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .unwrap()
        .unwrap();
    assert_eq!(v.len(), std::mem::size_of::<parse_out>());
    bytemuck::pod_read_unaligned(&v)
}

/// Compare one frame; returns the status.
fn check(skel: &XdpParseProbeSkel<'_>, lim: Limits, frame: &[u8], what: &str) -> u32 {
    let k = kernel(skel, frame);
    let (info, r) = parse_packet(frame, lim);
    let status = r.err().map_or(0, |s| s as u32);
    assert_eq!(k.status, status, "{what}: status (frame {frame:02x?})");
    // The generated struct has no PartialEq: its Debug form lists every field.
    assert_eq!(
        format!("{:?}", k.info),
        format!("{info:?}"),
        "{what}: pkt_info (frame {frame:02x?})"
    );
    status
}

#[test]
fn corpus_and_every_truncation_match_the_kernel() {
    // parse_packet()'s defaults, and the ddos filter's (PPPoE and MPLS walked).
    for shims in [false, true] {
        let lim = Limits {
            shims,
            ..Limits::default()
        };
        let s = load(lim);
        let mut seen = [0usize; 5];
        // The truncations start at an Ethernet header: BPF_PROG_RUN refuses
        // shorter frames (drivers never deliver them).
        for c in corpus::base().into_iter().chain(corpus::truncations()) {
            seen[check(&s, lim, &c.frame, &c.name) as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 0), "statuses covered: {seen:?}");
    }
}

#[test]
fn random_mutations_match_the_kernel() {
    let lim = Limits {
        shims: true,
        ..Limits::default()
    };
    let s = load(lim);
    for c in corpus::mutations(0x2545_f491_4f6c_dd1d, 3000) {
        check(&s, lim, &c.frame, &c.name);
    }
}

#[test]
fn other_depth_limits_match_the_kernel() {
    for (max_vlans, max_v6_ext, shims) in [(0, 0, true), (1, 3, false), (2, 6, true), (8, 16, true)]
    {
        let lim = Limits {
            max_vlans,
            max_v6_ext,
            shims,
        };
        let s = load(lim);
        for c in corpus::base() {
            check(&s, lim, &c.frame, &format!("{} with {lim:?}", c.name));
        }
    }
}
