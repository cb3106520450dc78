//! The differential target: every frame goes through the XDP parser
//! (bpf/common/parse.h, in the kernel through the `xdp_parse_probe`
//! program and BPF_PROG_RUN) and through the userspace parser
//! (`rampart_stream::parse::parse_frame`); both must reach the same
//! outcome — the same status and, for a parsed frame, the same addresses,
//! ports, protocol, lengths, fragment state and VLAN id. Needs root (BPF).
#![no_main]

use std::os::fd::{AsFd, AsRawFd};
use std::sync::OnceLock;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use libfuzzer_sys::fuzz_target;
use rampart_bpf::xdp_parse_probe::types::parse_out;
use rampart_bpf::xdp_parse_probe::{XdpParseProbeSkel, XdpParseProbeSkelBuilder};
use rampart_stream::parse::parse_frame;

/// The kernel refuses BPF_PROG_RUN frames shorter than an Ethernet header
/// and longer than a page minus the headroom; inside that range every
/// frame is compared.
const MIN: usize = 14;
const MAX: usize = 3000;

struct Probe(XdpParseProbeSkel<'static>);
// SAFETY: the skeleton is only used from the fuzzing thread; libFuzzer runs
// the target on one thread.
unsafe impl Send for Probe {}
// SAFETY: as above.
unsafe impl Sync for Probe {}

fn probe() -> &'static Probe {
    static P: OnceLock<Probe> = OnceLock::new();
    P.get_or_init(|| {
        assert!(
            rampart_dataplane::features::is_root(),
            "the differential target runs BPF programs: run it as root"
        );
        let skel = XdpParseProbeSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .expect("open xdp_parse_probe")
            .load()
            .expect("load xdp_parse_probe");
        Probe(skel)
    })
}

fn kernel_parse(frame: &[u8]) -> parse_out {
    let s = &probe().0;
    let out = rampart_dataplane::testrun::run_packet(
        s.progs.xdp_parse_probe.as_fd().as_raw_fd(),
        frame,
        0,
    )
    .expect("BPF_PROG_RUN");
    assert_eq!(out.retval, 2, "the probe returns XDP_PASS");
    let v = s
        .maps
        .parse_out
        .lookup(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .expect("read parse_out")
        .expect("parse_out[0]");
    assert_eq!(v.len(), std::mem::size_of::<parse_out>());
    // SAFETY: parse_out is plain old data generated from BTF and the length matches.
    unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<parse_out>()) }
}

fuzz_target!(|data: &[u8]| {
    if !(MIN..=MAX).contains(&data.len()) {
        return;
    }
    let k = kernel_parse(data);
    let u = parse_frame(data, 0);
    match u {
        Err(s) => assert_eq!(
            k.status, s as u32,
            "status: kernel {} vs userspace {s:?}",
            k.status
        ),
        Ok(t) => {
            assert_eq!(
                k.status, 0,
                "status: kernel {} vs userspace OK {t:?}",
                k.status
            );
            let i = k.info;
            assert_eq!(i.saddr, t.saddr, "source address");
            assert_eq!(i.daddr, t.daddr, "destination address");
            assert_eq!(i.l4_proto, t.proto, "L4 protocol");
            assert_eq!(i.ip_len, t.ip_len, "IP length");
            assert_eq!(
                u8::from(i.family == 6),
                t.flags & rampart_stream::tuple::ST_F_IPV6,
                "family"
            );
            let frag = match i.frag {
                1 => rampart_stream::tuple::ST_F_FRAG_FIRST,
                2 => rampart_stream::tuple::ST_F_FRAG_LATER,
                _ => 0,
            };
            let mask =
                rampart_stream::tuple::ST_F_FRAG_FIRST | rampart_stream::tuple::ST_F_FRAG_LATER;
            assert_eq!(t.flags & mask, frag, "fragment state");
            let vlan = if i.vlan_depth > 0 { i.vlan_id[0] } else { 0 };
            assert_eq!(t.vlan_id, vlan, "outer VLAN id");
            if i.frag != 2 {
                if i.l4_proto == 1 || i.l4_proto == 58 {
                    let icmp = (u16::from(i.icmp_type) << 8) | u16::from(i.icmp_code);
                    assert_eq!(t.dport, icmp, "ICMP type and code");
                } else {
                    assert_eq!(
                        (t.sport, t.dport, t.tcp_flags),
                        (u16::from_be(i.sport), u16::from_be(i.dport), i.tcp_flags),
                        "ports and TCP flags"
                    );
                }
            }
        }
    }
});
