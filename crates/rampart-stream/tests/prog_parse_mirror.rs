//! The userspace parser (`rampart_stream::parse::parse_packet`) against
//! bpf/common/parse.h run in the kernel (`xdp_parse_probe`, BPF_PROG_RUN):
//! the same status and the same `struct pkt_info`, byte for byte — for
//! malformed frames too, where both leave the same partial fields — on the
//! corpus (every parse path: VLAN stacks, MPLS, PPPoE, IPv6 chains,
//! tunnels, lengths against the frame), every truncation of it, random
//! mutations, and with depth limits other than the defaults. The fuzz
//! target `frame_xdp` does the same on coverage-guided frames.

use std::os::fd::{AsFd, AsRawFd};

mod common;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::xdp_parse_probe::{types::parse_out, XdpParseProbeSkel, XdpParseProbeSkelBuilder};
use rampart_dataplane::testrun;
use rampart_stream::parse::{parse_packet, Limits};

use common::corpus;

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
    // SAFETY: plain old data generated from BTF, length checked.
    unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<parse_out>()) }
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
        for (name, f) in corpus() {
            seen[check(&s, lim, &f, &name) as usize] += 1;
            // BPF_PROG_RUN refuses frames shorter than an Ethernet header (drivers never deliver them).
            for n in 14..f.len() {
                check(&s, lim, &f[..n], &format!("{name} cut at {n}"));
            }
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
    let c = corpus();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..3000 {
        let (name, f) = &c[(rnd() % c.len() as u64) as usize];
        let mut f = f.clone();
        for _ in 0..1 + rnd() % 4 {
            let pos = (rnd() % (f.len().min(128) as u64)) as usize;
            f[pos] = rnd() as u8;
        }
        if f.len() > 14 && rnd() % 4 == 0 {
            let n = 14 + (rnd() % (f.len() as u64 - 14)) as usize;
            f.truncate(n);
        }
        check(&s, lim, &f, &format!("mutation {i} of {name}"));
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
        for (name, f) in corpus() {
            check(&s, lim, &f, &format!("{name} with {lim:?}"));
        }
    }
}
