//! BPF_PROG_TEST_RUN tests of bpf/common/parse.h through xdp_parse_probe:
//! every parse path and every kind of malformed frame, checked in the
//! kernel's verifier and JIT exactly as the programs use it; and the whole
//! test-kit corpus (valid, malformed, every truncation, seeded mutations)
//! against the kit's expected outcome, field by field.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::abi::common::{
    FRAG_FIRST, FRAG_LATER, FRAG_NONE, PARSE_BAD_HEADER, PARSE_NOT_IP, PARSE_OK, PARSE_TOO_DEEP,
    PARSE_TRUNCATED,
};
use rampart_bpf::xdp_parse_probe::{types::parse_out, XdpParseProbeSkel, XdpParseProbeSkelBuilder};
use rampart_dataplane::testrun;
use rampart_testkit::corpus;
use rampart_testkit::frame::{ethertype, tcp, Ext, Frame};
use rampart_testkit::parse::{Parsed, Status};
use rampart_testkit::prog::XDP_PASS;

fn load() -> XdpParseProbeSkel<'static> {
    assert!(
        rampart_dataplane::features::is_root(),
        "BPF_PROG_RUN tests need root: run them with ./run test"
    );
    XdpParseProbeSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .expect("open")
        .load()
        .expect("load xdp_parse_probe (verifier)")
}

fn parse(skel: &XdpParseProbeSkel<'_>, frame: &[u8]) -> parse_out {
    let out =
        testrun::run_packet(skel.progs.xdp_parse_probe.as_fd().as_raw_fd(), frame, 0).expect("run");
    assert_eq!(out.retval, XDP_PASS, "XDP_PASS");
    let v = skel
        .maps
        .parse_out
        .lookup(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .unwrap()
        .unwrap();
    assert_eq!(v.len(), std::mem::size_of::<parse_out>());
    bytemuck::pod_read_unaligned(&v)
}

fn udp4(payload: usize) -> Vec<u8> {
    Frame::udp([192, 0, 2, 1], [198, 51, 100, 7], 1234, 53)
        .ttl(61)
        .zeros(payload)
        .build()
}

fn v4_words(a: [u8; 4]) -> [u32; 4] {
    [u32::from_ne_bytes(a), 0, 0, 0]
}

/// An address as pkt_info holds it: network-order 32-bit words.
fn words(a: IpAddr) -> [u32; 4] {
    match a {
        IpAddr::V4(a) => v4_words(a.octets()),
        IpAddr::V6(a) => {
            let o = a.octets();
            std::array::from_fn(|i| u32::from_ne_bytes(o[4 * i..4 * i + 4].try_into().unwrap()))
        }
    }
}

/// The probe's pkt_info must be the kit's expectation; with a malformed
/// status only the status is defined.
fn assert_parsed(o: &parse_out, want: &Parsed, name: &str) {
    assert_eq!(o.status, want.status as u32, "{name}: status");
    if want.status.malformed() {
        return;
    }
    let i = &o.info;
    let got = (
        i.vlan_depth,
        i.vlan_id,
        i.l3_proto,
        i.l3_off,
        i.family,
        i.ip_len,
        i.ttl,
        i.frag,
        i.l4_proto,
    );
    let expected = (
        want.vlan_depth,
        want.vlan_id,
        want.l3_proto,
        want.l3_off,
        want.family,
        want.ip_len,
        want.ttl,
        want.frag as u8,
        want.l4_proto,
    );
    assert_eq!(
        got, expected,
        "{name}: (vlans, ids, l3 proto/off, family, ip_len, ttl, frag, l4 proto)"
    );
    let got = (
        u16::from_be(i.sport),
        u16::from_be(i.dport),
        i.tcp_flags,
        i.icmp_type,
        i.icmp_code,
    );
    let expected = (
        want.sport,
        want.dport,
        want.tcp_flags,
        want.icmp_type,
        want.icmp_code,
    );
    assert_eq!(got, expected, "{name}: (ports, TCP flags, ICMP type/code)");
    if want.status == Status::Ok {
        assert_eq!(i.l4_off, want.l4_off, "{name}: l4_off");
        assert_eq!(i.saddr, words(want.saddr), "{name}: saddr");
        assert_eq!(i.daddr, words(want.daddr), "{name}: daddr");
    } else {
        assert_eq!(
            (i.saddr, i.daddr, i.l4_off),
            ([0; 4], [0; 4], 0),
            "{name}: not IP"
        );
    }
}

#[test]
fn every_corpus_frame_parses_as_the_kit_expects() {
    let s = load();
    let cases = corpus::all(0x5eed_0f_9a45e, 3000);
    let mut seen = std::collections::BTreeMap::new();
    for c in &cases {
        assert_parsed(&parse(&s, &c.frame), &c.expect, &c.name);
        *seen.entry(c.expect.status).or_insert(0) += 1;
    }
    assert_eq!(
        seen.len(),
        Status::ALL.len(),
        "every status covered: {seen:?}"
    );
}

#[test]
fn ipv4_udp_tcp_icmp() {
    let s = load();
    let o = parse(&s, &udp4(10));
    assert_eq!(o.status, PARSE_OK);
    let i = o.info;
    assert_eq!(
        (i.family, i.l4_proto, i.frag, i.ttl),
        (4, 17, FRAG_NONE, 61)
    );
    assert_eq!(i.saddr, v4_words([192, 0, 2, 1]));
    assert_eq!(i.daddr, v4_words([198, 51, 100, 7]));
    assert_eq!((u16::from_be(i.sport), u16::from_be(i.dport)), (1234, 53));
    assert_eq!((i.l3_off, i.l4_off, i.ip_len), (14, 34, 20 + 8 + 10));

    let v = Frame::tcp("10.0.0.1", "10.0.0.2", 5555, 80)
        .flags(tcp::SYN)
        .build();
    let o = parse(&s, &v);
    assert_eq!(o.status, PARSE_OK);
    assert_eq!((o.info.l4_proto, o.info.tcp_flags & 0x12), (6, 0x02));
    assert_eq!(u16::from_be(o.info.dport), 80);

    let v = Frame::icmp_echo("10.0.0.1", "10.0.0.2").zeros(8).build();
    let o = parse(&s, &v);
    assert_eq!(
        (o.status, o.info.l4_proto, o.info.icmp_type),
        (PARSE_OK, 1, 8)
    );
}

#[test]
fn ipv4_options_are_skipped_by_ihl() {
    let s = load();
    // NOPs, EOL, router alert.
    let v = Frame::udp("1.2.3.4", "5.6.7.8", 7, 9)
        .ipv4_options(&[1, 1, 1, 0, 0x94, 4, 0, 0])
        .build();
    let o = parse(&s, &v);
    assert_eq!(o.status, PARSE_OK);
    assert_eq!((o.info.l4_off, u16::from_be(o.info.dport)), (14 + 28, 9));
}

#[test]
fn vlan_stacks() {
    let s = load();
    for (tags, want_status, depth) in [
        (1usize, PARSE_OK, 1u8),
        (2, PARSE_OK, 2),
        (3, PARSE_TOO_DEEP, 2),
    ] {
        let mut f = Frame::udp([192, 0, 2, 1], [198, 51, 100, 7], 1234, 53).zeros(4);
        for t in 0..tags {
            let tpid = if t == 0 && tags > 1 {
                ethertype::QINQ
            } else {
                ethertype::VLAN
            };
            f = f.vlan_tag(tpid, 100 + t as u16);
        }
        let o = parse(&s, &f.build());
        assert_eq!(o.status, want_status, "{tags} tags");
        assert_eq!(o.info.vlan_depth, depth);
        assert_eq!(o.info.vlan_id[0], 100);
        if want_status == PARSE_OK {
            assert_eq!(o.info.l3_off as usize, 14 + 4 * tags);
            assert_eq!(u16::from_be(o.info.dport), 53);
        }
    }
}

#[test]
fn ipv4_fragments_never_read_l4_of_later_fragments() {
    let s = load();
    let base = || Frame::udp([192, 0, 2, 1], [198, 51, 100, 7], 1234, 53).zeros(16);
    let o = parse(&s, &base().fragment(0, true).build());
    assert_eq!(
        (o.status, o.info.frag, u16::from_be(o.info.dport)),
        (PARSE_OK, FRAG_FIRST, 53)
    );
    // Offset 3*8: the payload looks like a UDP header but is not one.
    let o = parse(&s, &base().fragment(3, false).build());
    assert_eq!(
        (o.status, o.info.frag, o.info.l4_proto),
        (PARSE_OK, FRAG_LATER, 17)
    );
    assert_eq!(
        (o.info.sport, o.info.dport),
        (0, 0),
        "later fragments have no ports"
    );
}

#[test]
fn malformed_ipv4() {
    let s = load();
    let good = || Frame::udp([192, 0, 2, 1], [198, 51, 100, 7], 1234, 53).zeros(10);
    // Bad IHL.
    assert_eq!(parse(&s, &good().ihl(4).build()).status, PARSE_BAD_HEADER);
    // IHL says options that are not there.
    let v = good().ihl(15).truncate(14 + 20).build();
    assert_eq!(parse(&s, &v).status, PARSE_TRUNCATED);
    // Total length below the header length.
    assert_eq!(
        parse(&s, &good().ip_len(12).build()).status,
        PARSE_BAD_HEADER
    );
    // Wrong version in an IPv4 EtherType.
    assert_eq!(
        parse(&s, &good().version(6).build()).status,
        PARSE_BAD_HEADER
    );
    // Truncated inside IPv4, inside UDP, right after Ethernet. (Frames
    // shorter than an Ethernet header never reach XDP: BPF_PROG_RUN
    // refuses them with EINVAL, as drivers do not deliver them.)
    for cut in [14 + 10, 14 + 20 + 4, 14] {
        let v = good().truncate(cut).build();
        assert_eq!(parse(&s, &v).status, PARSE_TRUNCATED, "cut at {cut}");
    }
    // TCP data offset below 5.
    let v = Frame::tcp("1.1.1.1", "2.2.2.2", 1, 2)
        .ttl(9)
        .tcp_data_offset(4)
        .build();
    assert_eq!(parse(&s, &v).status, PARSE_BAD_HEADER);
}

#[test]
fn not_ip_is_reported_as_such() {
    let s = load();
    let o = parse(&s, &Frame::arp([10, 0, 0, 1], [10, 0, 0, 2]).build());
    assert_eq!(
        (o.status, o.info.l3_proto, o.info.family),
        (PARSE_NOT_IP, 0x0806, 0)
    );
}

const V6_SRC: &str = "fd00::1";
const V6_DST: &str = "fd00::2";

fn v6_udp(sport: u16, dport: u16) -> Frame {
    Frame::udp(V6_SRC, V6_DST, sport, dport).ttl(33)
}

#[test]
fn ipv6_extension_chains() {
    let s = load();
    // Plain UDP.
    let o = parse(&s, &v6_udp(4000, 53).build());
    assert_eq!(
        (
            o.status,
            o.info.family,
            o.info.l4_proto,
            u16::from_be(o.info.dport)
        ),
        (PARSE_OK, 6, 17, 53)
    );
    assert_eq!(o.info.saddr[3], u32::from_ne_bytes([0, 0, 0, 1]));
    assert_eq!(o.info.ttl, 33);
    // Hop-by-hop + routing + destination options, then UDP.
    let v = v6_udp(1, 443)
        .ext(Ext::HopByHop(0))
        .ext(Ext::Routing(1))
        .ext(Ext::DestOpts(0))
        .build();
    let o = parse(&s, &v);
    assert_eq!(
        (o.status, o.info.l4_proto, u16::from_be(o.info.dport)),
        (PARSE_OK, 17, 443)
    );
    assert_eq!(o.info.l4_off as usize, 14 + 40 + 8 + 16 + 8);
    // Six extension headers is the limit; seven is too deep.
    let chain = |n: usize| (0..n).fold(v6_udp(1, 2), |f, _| f.ext(Ext::DestOpts(0)));
    assert_eq!(parse(&s, &chain(6).build()).status, PARSE_OK);
    assert_eq!(parse(&s, &chain(7).build()).status, PARSE_TOO_DEEP);
    // An extension header that runs past the frame.
    let v = v6_udp(1, 2)
        .ext(Ext::HopByHop(4))
        .truncate(14 + 40 + 8)
        .build();
    assert_eq!(parse(&s, &v).status, PARSE_TRUNCATED);
}

#[test]
fn ipv6_fragments() {
    let s = load();
    let first = v6_udp(9, 53).fragment(0, true).build();
    let o = parse(&s, &first);
    assert_eq!(
        (o.status, o.info.frag, u16::from_be(o.info.dport)),
        (PARSE_OK, FRAG_FIRST, 53)
    );
    let later = v6_udp(9, 53).fragment(185, false).build();
    let o = parse(&s, &later);
    assert_eq!(
        (o.status, o.info.frag, o.info.dport, o.info.l4_proto),
        (PARSE_OK, FRAG_LATER, 0, 17)
    );
}

#[test]
fn ipv6_truncated_and_esp() {
    let s = load();
    for cut in [14 + 39, 14 + 40 + 5] {
        let v = v6_udp(1, 2).truncate(cut).build();
        assert_eq!(parse(&s, &v).status, PARSE_TRUNCATED, "cut at {cut}");
    }
    // ESP: the walk stops, no ports are invented.
    let v = Frame::ip(V6_SRC, V6_DST, 50)
        .payload(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1])
        .build();
    let o = parse(&s, &v);
    assert_eq!(
        (o.status, o.info.l4_proto, o.info.sport, o.info.dport),
        (PARSE_OK, 50, 0, 0)
    );
}
