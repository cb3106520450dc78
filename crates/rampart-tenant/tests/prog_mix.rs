//! BPF_PROG_TEST_RUN test of the mixed-traffic generator
//! (`xdp_tenant_mix`, used by `rampart bench tenant`'s CPU-share figure):
//! each run writes the next slot's whole frame, round robin, and counts it.

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::xdp_tenant_mix::XdpTenantMixSkelBuilder;
use rampart_testkit::prog::XDP_TX;

const LEN: usize = 88;

#[test]
fn slots_are_written_whole_round_robin_and_counted() {
    assert!(
        rampart_dataplane::features::is_root(),
        "BPF tests need root: run them with ./run test"
    );
    // Three distinct frames (byte patterns stand in for real templates).
    let tpl: Vec<Vec<u8>> = (0..3u8)
        .map(|k| {
            (0..LEN)
                .map(|i| (i as u8).wrapping_mul(7).wrapping_add(k * 50))
                .collect()
        })
        .collect();
    let mut open = XdpTenantMixSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .expect("open");
    let ro = open.maps.rodata_data.as_deref_mut().expect("rodata");
    ro.tmix_cfg.n_slot = 3;
    ro.tmix_cfg.len = LEN as u32;
    for (k, f) in tpl.iter().enumerate() {
        for (w, c) in ro.tmix_cfg.tpl[k].iter_mut().zip(f.chunks_exact(8)) {
            *w = u64::from_ne_bytes(c.try_into().unwrap());
        }
    }
    let skel = open.load().expect("load");
    let fd = skel.progs.xdp_tenant_mix.as_fd().as_raw_fd();
    // BPF_PROG_RUN runs on the calling CPU: keep the per-CPU position on one.
    // SAFETY: a zeroed cpu_set_t is valid; CPU 0 is in range; only this thread changes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
    for i in 0..7 {
        let out = rampart_dataplane::testrun::run_packet(fd, &[0u8; LEN], 1).expect("run");
        assert_eq!(out.retval, XDP_TX);
        assert_eq!(out.data, tpl[i % 3], "run {i} must carry slot {}", i % 3);
    }
    // A frame shorter than the templates is written up to its end only.
    let out = rampart_dataplane::testrun::run_packet(fd, &[0u8; 60], 1).expect("run");
    assert_eq!(out.retval, XDP_TX);
    assert_eq!(out.data.len(), 60);
    assert_eq!(&out.data[..56], &tpl[7 % 3][..56]);
    let vals = skel
        .maps
        .tmix_state
        .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .expect("lookup")
        .expect("state");
    let mut sent = [0u64; 3];
    for v in vals {
        for (k, s) in sent.iter_mut().enumerate() {
            let off = 8 + 8 * k;
            *s += u64::from_ne_bytes(v[off..off + 8].try_into().unwrap());
        }
    }
    assert_eq!(sent, [3, 3, 2]);
}
