//! BPF_PROG_TEST_RUN tests of the lab's programs: the generator stamps the
//! scheduled source with valid checksums for every protocol and family; the
//! sink counts and drops; the EMULATED NIC redirects.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_dataplane::testrun;
use rampart_lab::dist::Dist;
use rampart_lab::gen::{load_program, GenSpec};
use rampart_lab::packet::{self, Proto};

const XDP_DROP: u32 = 1;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;

#[test]
fn generator_stamps_scheduled_sources_with_valid_checksums() {
    rampart_lab::testing::require_kernel();
    // The schedule position is per CPU: all 40 runs on one.
    rampart_lab::testing::pin_this_thread(0);
    for proto in [Proto::Udp, Proto::Syn, Proto::Ack, Proto::Dns, Proto::Icmp] {
        for ipv6 in [false, true] {
            let spec = GenSpec {
                sources: 300,
                dist: Dist::Zipf { s: 1.0 },
                proto,
                ipv6,
                size: packet::min_size(proto, ipv6).max(64),
                ..GenSpec::default()
            };
            let g = load_program(&spec).expect("load");
            let fd = g.skel.progs.xdp_trafficgen.as_fd().as_raw_fd();
            for k in 0..40 {
                let out = testrun::run_packet(fd, &g.frame, 0).expect("run");
                assert_eq!(out.retval, XDP_TX);
                let c = packet::check(&out.data)
                    .unwrap_or_else(|e| panic!("{proto:?} ipv6={ipv6} packet {k}: {e}"));
                assert_eq!(c.proto, proto);
                assert_eq!(
                    c.src,
                    spec.source_addr(g.schedule[k]),
                    "packet {k} follows the schedule"
                );
                let want_dst: IpAddr = if ipv6 {
                    "fd10::2".parse().unwrap()
                } else {
                    "10.10.0.2".parse().unwrap()
                };
                assert_eq!(c.dst, want_dst);
            }
            // The per-CPU position counts every packet.
            let pos: u64 = g
                .skel
                .maps
                .gen_state
                .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
                .unwrap()
                .unwrap()
                .iter()
                .map(|b| u64::from_ne_bytes(b[..8].try_into().unwrap()))
                .sum();
            assert_eq!(pos, 40);
        }
    }
}

/// A live-frames page can come back rewritten by whoever received the
/// frame (an XDP_TX answer rewrites it in place): the generator writes the
/// template's headers back, so what it sends is the template's packet.
#[test]
fn generator_restores_a_frame_the_receiver_rewrote() {
    rampart_lab::testing::require_kernel();
    rampart_lab::testing::pin_this_thread(0);
    for ipv6 in [false, true] {
        let spec = GenSpec {
            sources: 16,
            proto: Proto::Syn,
            ipv6,
            size: packet::min_size(Proto::Syn, ipv6).max(64),
            ..GenSpec::default()
        };
        let g = load_program(&spec).expect("load");
        let fd = g.skel.progs.xdp_trafficgen.as_fd().as_raw_fd();
        // The template answered as a SYN-ACK: addresses, ports and flags swapped.
        let mut back = g.frame.clone();
        for b in back.iter_mut().skip(14) {
            *b = b.wrapping_mul(7).wrapping_add(1);
        }
        let out = testrun::run_packet(fd, &back, 0).expect("run");
        assert_eq!(out.retval, XDP_TX);
        let c = packet::check(&out.data).unwrap_or_else(|e| panic!("ipv6={ipv6}: {e}"));
        assert_eq!(c.proto, Proto::Syn, "ipv6={ipv6}");
        assert_eq!(c.src, spec.source_addr(g.schedule[0]));
        assert_eq!(out.data.len(), g.frame.len());
    }
}

#[test]
fn sink_counts_drops_and_histograms() {
    rampart_lab::testing::require_kernel();
    let mut open = rampart_bpf::xdp_sink::XdpSinkSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .unwrap();
    open.maps.rodata_data.as_deref_mut().unwrap().sink_histogram = 1;
    let skel = open.load().unwrap();
    let spec = GenSpec {
        sources: 4,
        ..GenSpec::default()
    };
    let g = load_program(&spec).unwrap();
    let fd = skel.progs.xdp_sink.as_fd().as_raw_fd();
    for _ in 0..3 {
        assert_eq!(
            testrun::run_packet(fd, &g.frame, 0).unwrap().retval,
            XDP_DROP
        );
    }
    let c: u64 = skel
        .maps
        .sink_count
        .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .unwrap()
        .unwrap()
        .iter()
        .map(|b| u64::from_ne_bytes(b[..8].try_into().unwrap()))
        .sum();
    assert_eq!(c, 3);
    let keys: Vec<Vec<u8>> = skel.maps.sink_sources.keys().collect();
    assert_eq!(keys.len(), 1, "one source (the template's 172.16.0.0)");
    assert_eq!(&keys[0][..4], &[172, 16, 0, 0]);
}

#[test]
fn nic_emulation_redirects_everything() {
    rampart_lab::testing::require_kernel();
    let skel = rampart_bpf::xdp_nic_emul::XdpNicEmulSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .unwrap()
        .load()
        .unwrap();
    let g = load_program(&GenSpec::default()).unwrap();
    let out =
        testrun::run_packet(skel.progs.xdp_nic_emul.as_fd().as_raw_fd(), &g.frame, 0).unwrap();
    assert_eq!(out.retval, XDP_REDIRECT);
    assert_eq!(out.data, g.frame, "the NIC does not touch the frame");
}

#[test]
fn nic_emulation_drops_by_longest_prefix_match_with_per_rule_counters() {
    rampart_lab::testing::require_kernel();
    const XDP_DROP: u32 = 1;
    let mut open = rampart_bpf::xdp_nic_emul::XdpNicEmulSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .unwrap();
    // Frames "from the wire" arrive on lo here: the only matched side.
    open.maps
        .rodata_data
        .as_deref_mut()
        .unwrap()
        .nic_wan_ifindex = 1;
    let skel = open.load().unwrap();
    let fd = skel.progs.xdp_nic_emul.as_fd().as_raw_fd();
    let table = rampart_dataplane::emulated_nic::EmulatedNicTable::from_maps(
        libbpf_rs::MapHandle::try_from(&skel.maps.nic_rules).unwrap(),
        libbpf_rs::MapHandle::try_from(&skel.maps.nic_state).unwrap(),
        libbpf_rs::MapHandle::try_from(&skel.maps.nic_counters).unwrap(),
    );
    // The template's source is 172.16.0.0.
    let g = load_program(&GenSpec::default()).unwrap();
    let verdict = || testrun::run_packet(fd, &g.frame, 1).unwrap().retval;
    let counts = |net: &str| {
        let net: ipnet::IpNet = net.parse().unwrap();
        table
            .rules()
            .unwrap()
            .into_iter()
            .find(|(n, _)| *n == net)
            .map(|(_, s)| s.packets)
    };
    assert_eq!(verdict(), XDP_REDIRECT, "no rule: forwarded");
    table.insert("172.16.1.0/24".parse().unwrap()).unwrap();
    assert_eq!(verdict(), XDP_REDIRECT, "a prefix that does not hold it");
    table.insert("172.16.0.0/24".parse().unwrap()).unwrap();
    assert_eq!(verdict(), XDP_DROP, "the /24 holding the source drops it");
    assert_eq!(counts("172.16.0.0/24"), Some(1));
    table.insert("172.16.0.0/32".parse().unwrap()).unwrap();
    assert_eq!(verdict(), XDP_DROP);
    assert_eq!(counts("172.16.0.0/32"), Some(1), "the longest match counts");
    assert_eq!(counts("172.16.0.0/24"), Some(1), "the shorter one does not");
    assert!(table.contains("172.16.0.0/24".parse().unwrap()));
    assert_eq!(
        table
            .remove("172.16.0.0/32".parse().unwrap())
            .unwrap()
            .map(|s| s.packets),
        Some(1)
    );
    assert_eq!(verdict(), XDP_DROP, "the /24 still holds it");
    assert_eq!(counts("172.16.0.0/24"), Some(2));
    // A new rule in the freed slot starts from zero.
    table.insert("172.16.0.0/32".parse().unwrap()).unwrap();
    assert_eq!(
        counts("172.16.0.0/32"),
        Some(0),
        "the slot's old counts cleared"
    );
    assert_eq!(verdict(), XDP_DROP);
    assert_eq!(counts("172.16.0.0/32"), Some(1));
    assert_eq!(counts("172.16.0.0/24"), Some(2));
    // The same family's bits only: an IPv6 rule never matches IPv4.
    table.clear().unwrap();
    table.insert("::/1".parse().unwrap()).unwrap();
    assert_eq!(verdict(), XDP_REDIRECT);
    assert_eq!(table.len().unwrap(), 1);
}

#[test]
fn generator_spreads_destinations_and_draws_sequence_numbers() {
    rampart_lab::testing::require_kernel();
    rampart_lab::testing::pin_this_thread(0);
    for (proto, ipv6) in [
        (Proto::Syn, false),
        (Proto::Syn, true),
        (Proto::Rst, false),
        (Proto::Ack, true),
        (Proto::Udp, false),
        (Proto::Udp, true),
        (Proto::Icmp, false),
    ] {
        let tcp = matches!(proto, Proto::Syn | Proto::Ack | Proto::Rst);
        let spec = GenSpec {
            sources: 16,
            proto,
            ipv6,
            size: packet::min_size(proto, ipv6).max(64),
            dst_spread_bits: 8,
            random_seq: tcp,
            ..GenSpec::default()
        };
        let g = load_program(&spec).expect("load");
        let fd = g.skel.progs.xdp_trafficgen.as_fd().as_raw_fd();
        let mut dsts = std::collections::HashSet::new();
        let mut seqs = std::collections::HashSet::new();
        let seq_at = 14 + if ipv6 { 40 } else { 20 } + 4;
        for k in 0..200 {
            let out = testrun::run_packet(fd, &g.frame, 0).expect("run");
            assert_eq!(out.retval, XDP_TX);
            // Checksums are verified independently of the generator's patching.
            let c = packet::check(&out.data)
                .unwrap_or_else(|e| panic!("{proto:?} ipv6={ipv6} packet {k}: {e}"));
            assert_eq!(c.proto, proto, "packet {k}");
            assert_eq!(c.src, spec.source_addr(g.schedule[k]), "packet {k}");
            // Only the low 8 bits of the destination move: it stays in the
            // victim's /24 (IPv4) or /64, with the upper words untouched (IPv6).
            match c.dst {
                IpAddr::V4(a) => assert_eq!(a.octets()[..3], [10, 10, 0], "{a}"),
                IpAddr::V6(a) => {
                    let s = a.segments();
                    assert_eq!(s[..7], [0xfd10, 0, 0, 0, 0, 0, 0], "{a}");
                    assert!(s[7] <= 0xff, "{a}");
                }
            }
            dsts.insert(c.dst);
            if tcp {
                seqs.insert(u32::from_be_bytes(
                    out.data[seq_at..seq_at + 4].try_into().unwrap(),
                ));
            }
        }
        // 200 draws from 256 destinations: ~140 distinct expected; a stuck
        // generator gives 1.
        assert!(
            dsts.len() > 64,
            "{proto:?} ipv6={ipv6}: {} destinations",
            dsts.len()
        );
        if tcp {
            assert!(
                seqs.len() > 190,
                "{proto:?}: {} sequence numbers",
                seqs.len()
            );
        }
    }
}

#[test]
fn generator_refuses_spreads_and_sequences_it_cannot_send() {
    let bad = GenSpec {
        dst_spread_bits: 33,
        ..GenSpec::default()
    };
    assert!(bad.validate().unwrap_err().to_string().contains("0..=32"));
    let bad = GenSpec {
        proto: Proto::Udp,
        random_seq: true,
        ..GenSpec::default()
    };
    assert!(bad.validate().unwrap_err().to_string().contains("TCP"));
}
