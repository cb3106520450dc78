//! BPF_PROG_TEST_RUN tests of bpf/common/parse.h through xdp_parse_probe:
//! every parse path and every kind of malformed frame, checked in the
//! kernel's verifier and JIT exactly as the programs use it, with
//! `parse_packet()`'s depth limits and with others set in the probe's
//! rodata (as the ddos filter loads them); and the whole test-kit corpus
//! (valid, malformed, every truncation, seeded mutations) against the kit's
//! expected outcome under both, field by field.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::abi::common::{
    FRAG_FIRST, FRAG_LATER, FRAG_NONE, PARSE_BAD_HEADER, PARSE_ENCAP_GENEVE, PARSE_ENCAP_GRE,
    PARSE_ENCAP_IPIP, PARSE_ENCAP_MPLS, PARSE_ENCAP_NONE, PARSE_ENCAP_VXLAN, PARSE_NOT_IP,
    PARSE_OK, PARSE_SHIM_MPLS, PARSE_SHIM_PPPOE, PARSE_TOO_DEEP, PARSE_TRUNCATED,
};
use rampart_bpf::xdp_parse_probe::{types::parse_out, XdpParseProbeSkel, XdpParseProbeSkelBuilder};
use rampart_dataplane::testrun;
use rampart_testkit::corpus;
use rampart_testkit::frame::{ethertype, tcp, Ext, Frame};
use rampart_testkit::parse::{self as oracle, Limits, Parsed, Status};
use rampart_testkit::prog::XDP_PASS;

/// The probe with `parse_packet()`'s limits.
fn load() -> XdpParseProbeSkel<'static> {
    load_with(Limits::DEFAULT)
}

/// The probe with other limits in its rodata (as the ddos filter loads them).
fn load_with(lim: Limits) -> XdpParseProbeSkel<'static> {
    assert!(
        rampart_dataplane::features::is_root(),
        "BPF_PROG_RUN tests need root: run them with ./run test"
    );
    let mut open = XdpParseProbeSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .expect("open");
    let ro = open.maps.rodata_data.as_deref_mut().expect("rodata");
    ro.parse_probe_limits.max_vlans = lim.max_vlans;
    ro.parse_probe_limits.max_v6_ext = lim.max_v6_ext;
    ro.parse_probe_limits.shims = u8::from(lim.shims);
    open.load().expect("load xdp_parse_probe (verifier)")
}

/// The ddos filter's and feature stage's default limits.
const FILTER_LIKE: Limits = Limits {
    max_vlans: 4,
    max_v6_ext: 8,
    shims: true,
};

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

fn udp4_frame(payload: usize) -> Frame {
    Frame::udp([192, 0, 2, 1], [198, 51, 100, 7], 1234, 53)
        .ttl(61)
        .zeros(payload)
}

fn udp4(payload: usize) -> Vec<u8> {
    udp4_frame(payload).build()
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
/// status only the status, the family and the addresses are defined.
fn assert_parsed(o: &parse_out, want: &Parsed, name: &str) {
    assert_eq!(o.status, want.status as u32, "{name}: status");
    let i = &o.info;
    assert_eq!(
        (i.family, i.saddr, i.daddr),
        (want.family, words(want.saddr), words(want.daddr)),
        "{name}: family and addresses"
    );
    if want.status.malformed() {
        return;
    }
    assert_eq!(
        (i.shim, i.encap),
        (want.shim, want.encap as u8),
        "{name}: (shim, encap)"
    );
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
    } else {
        assert_eq!(i.l4_off, 0, "{name}: not IP");
    }
}

#[test]
fn every_corpus_frame_parses_as_the_kit_expects() {
    let cases = corpus::all(0x05ee_d0f9_a45e, 3000);
    for lim in [Limits::DEFAULT, FILTER_LIKE] {
        let s = load_with(lim);
        let mut seen = std::collections::BTreeMap::new();
        let mut encaps = std::collections::BTreeSet::new();
        for c in &cases {
            let want = oracle::expect_with(&c.frame, lim);
            assert_parsed(
                &parse(&s, &c.frame),
                &want,
                &format!("{} ({lim:?})", c.name),
            );
            *seen.entry(want.status).or_insert(0) += 1;
            encaps.insert(want.encap);
        }
        assert_eq!(
            seen.len(),
            Status::ALL.len(),
            "every status covered: {seen:?}"
        );
        assert!(encaps.len() >= 5, "tunnels covered: {encaps:?}");
    }
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
    // parse_packet() walks two tags (QinQ), the ddos filter four (the
    // probe loaded with its limit); one more is too deep.
    let filter_like = load_with(FILTER_LIKE);
    for (s, tags, want_status, depth) in [
        (&s, 1usize, PARSE_OK, 1u8),
        (&s, 2, PARSE_OK, 2),
        (&s, 3, PARSE_TOO_DEEP, 2),
        (&filter_like, 3, PARSE_OK, 3),
        (&filter_like, 4, PARSE_OK, 4),
        (&filter_like, 5, PARSE_TOO_DEEP, 4),
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
        let o = parse(s, &f.build());
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
    // Eight extension headers are walked by default (RFC 8200's order has
    // at most six: HBH, DST, RH, FRAG, AH, DST); nine are too deep.
    let chain = |n: usize| (0..n).fold(v6_udp(1, 2), |f, _| f.ext(Ext::DestOpts(0)));
    for k in [6, 7, 8] {
        assert_eq!(
            parse(&s, &chain(k).build()).status,
            PARSE_OK,
            "{k} extension headers"
        );
    }
    assert_eq!(parse(&s, &chain(9).build()).status, PARSE_TOO_DEEP);
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

#[test]
fn depth_limits_come_from_the_loader() {
    let vlans = |tags: u8| (0..tags).fold(udp4_frame(4), |f, t| f.vlan(10 + u16::from(t)));
    let ext = |k: u8| (0..k).fold(v6_udp(1, 2), |f, _| f.ext(Ext::DestOpts(0)));
    for (lv, le) in [(0u8, 0u8), (1, 2), (8, 16)] {
        let s = load_with(Limits {
            max_vlans: lv,
            max_v6_ext: le,
            shims: false,
        });
        assert_eq!(
            parse(&s, &vlans(lv).build()).status,
            PARSE_OK,
            "{lv} tags, limit {lv}"
        );
        assert_eq!(
            parse(&s, &vlans(lv + 1).build()).status,
            PARSE_TOO_DEEP,
            "limit {lv}"
        );
        assert_eq!(
            parse(&s, &ext(le).build()).status,
            PARSE_OK,
            "{le} headers, limit {le}"
        );
        assert_eq!(
            parse(&s, &ext(le + 1).build()).status,
            PARSE_TOO_DEEP,
            "limit {le}"
        );
    }
}

#[test]
fn ip_lengths_are_checked_against_the_frame() {
    let s = load();
    // Ethernet padding after the packet is fine: ip_len stays the packet's.
    let padded = Frame::udp([192, 0, 2, 1], [198, 51, 100, 7], 1234, 53).pad_to(60);
    let o = parse(&s, &padded.build());
    assert_eq!((o.status, o.info.ip_len), (PARSE_OK, 28));
    // An IPv4 packet longer than the frame is truncated, however whole its
    // headers are; its addresses are known (the header itself is whole).
    let o = parse(&s, &udp4_frame(10).ip_len(20 + 8 + 11).build());
    assert_eq!((o.status, o.info.family), (PARSE_TRUNCATED, 4));
    assert_eq!(o.info.saddr, v4_words([192, 0, 2, 1]));
    // Exactly the frame: fine.
    assert_eq!(
        parse(&s, &udp4_frame(10).ip_len(20 + 8 + 10).build()).status,
        PARSE_OK
    );
    // IPv6: the payload length likewise; 0 (a jumbogram) is not checked.
    assert_eq!(
        parse(&s, &v6_udp(1, 2).ip_len(9).build()).status,
        PARSE_TRUNCATED
    );
    assert_eq!(parse(&s, &v6_udp(1, 2).ip_len(0).build()).status, PARSE_OK);
}

#[test]
fn mpls_and_pppoe_are_not_ip_unless_asked() {
    // parse_packet() (tenant programs, the stream tap) does not walk them.
    let s = load();
    for (et, f) in [
        (0x8847u16, udp4_frame(4).mpls(16)),
        (0x8864, udp4_frame(4).pppoe(1)),
    ] {
        let o = parse(&s, &f.build());
        assert_eq!(
            (o.status, o.info.l3_proto, o.info.shim),
            (PARSE_NOT_IP, et, 0)
        );
    }
}

#[test]
fn mpls_label_stacks() {
    let s = load_with(FILTER_LIKE);
    let labels = |f: Frame, n: u32| (0..n).fold(f, |f, l| f.mpls(16 + l));
    let o = parse(&s, &labels(udp4_frame(4), 1).build());
    assert_eq!(
        (
            o.status,
            o.info.shim,
            o.info.l3_proto,
            o.info.l3_off,
            o.info.l4_off
        ),
        (PARSE_OK, PARSE_SHIM_MPLS, 0x0800, 18, 38)
    );
    assert_eq!(u16::from_be(o.info.dport), 53);
    let o = parse(&s, &labels(v6_udp(1, 443), 3).mpls_multicast().build());
    assert_eq!(
        (
            o.status,
            o.info.family,
            o.info.l3_off,
            u16::from_be(o.info.dport)
        ),
        (PARSE_OK, 6, 14 + 12, 443)
    );
    assert_eq!(
        parse(&s, &labels(udp4_frame(4), 8).build()).status,
        PARSE_OK
    );
    assert_eq!(
        parse(&s, &labels(udp4_frame(4), 9).build()).status,
        PARSE_TOO_DEEP
    );
    // No bottom of stack before the frame ends.
    let no_bos = Frame::ethertype(0x8847).payload(&[0, 1, 0, 64, 0, 1, 0, 64]);
    assert_eq!(parse(&s, &no_bos.build()).status, PARSE_TRUNCATED);
    // An Ethernet pseudowire (control word, first nibble 0): not IP, a tunnel.
    let mut pw = vec![0, 1, 1, 64, 0, 0, 0, 0];
    pw.extend_from_slice(&udp4_frame(4).build());
    let o = parse(&s, &Frame::ethertype(0x8847).payload(&pw).build());
    assert_eq!(
        (o.status, o.info.encap, o.info.shim),
        (PARSE_NOT_IP, PARSE_ENCAP_MPLS, PARSE_SHIM_MPLS)
    );
    assert_eq!(o.info.l3_proto, 0x8847);
}

#[test]
fn pppoe_sessions() {
    let s = load_with(FILTER_LIKE);
    let o = parse(&s, &udp4_frame(4).pppoe(0x1234).build());
    assert_eq!(
        (o.status, o.info.shim, o.info.l3_proto, o.info.l3_off),
        (PARSE_OK, PARSE_SHIM_PPPOE, 0x0800, 22)
    );
    assert_eq!(o.info.saddr, v4_words([192, 0, 2, 1]));
    let o = parse(&s, &v6_udp(1, 443).pppoe(1).build());
    assert_eq!((o.status, o.info.family, o.info.l3_off), (PARSE_OK, 6, 22));
    // Behind a VLAN tag.
    let o = parse(&s, &udp4_frame(4).pppoe(1).vlan(7).build());
    assert_eq!(
        (o.status, o.info.vlan_depth, o.info.l3_off),
        (PARSE_OK, 1, 26)
    );
    // The session's own control traffic (LCP) is not IP.
    let mut v = udp4_frame(4).pppoe(1).build();
    v[20..22].copy_from_slice(&0xc021u16.to_be_bytes());
    let o = parse(&s, &v);
    assert_eq!((o.status, o.info.l3_proto), (PARSE_NOT_IP, 0x8864));
    // Another version/type or a code: impossible in a session frame.
    for (at, byte) in [(14, 0x12), (15, 0x09)] {
        let mut v = udp4_frame(4).pppoe(1).build();
        v[at] = byte;
        assert_eq!(parse(&s, &v).status, PARSE_BAD_HEADER, "byte {at}");
    }
    assert_eq!(
        parse(&s, &udp4_frame(4).pppoe(1).truncate(20).build()).status,
        PARSE_TRUNCATED
    );
}

#[test]
fn tunnels_are_reported() {
    let s = load();
    let inner = udp4_frame(4).build();
    let carrying = |proto: u8, header: &[u8]| {
        Frame::ip([192, 0, 2, 1], [198, 51, 100, 7], proto)
            .payload(&[header, &inner[14..]].concat())
    };
    for (proto, header, want) in [
        (47u8, &[0u8, 0, 8, 0][..], PARSE_ENCAP_GRE),
        (4, &[], PARSE_ENCAP_IPIP),
        (41, &[], PARSE_ENCAP_IPIP),
        (17, &[0x9c, 0x40, 0, 53, 0, 8, 0, 0], PARSE_ENCAP_NONE),
    ] {
        let o = parse(&s, &carrying(proto, header).build());
        assert_eq!(
            (o.status, o.info.encap, o.info.l4_proto),
            (PARSE_OK, want, proto)
        );
    }
    // A later fragment of a GRE packet is a GRE packet too.
    let o = parse(&s, &carrying(47, &[0, 0, 8, 0]).fragment(2, false).build());
    assert_eq!((o.info.frag, o.info.encap), (FRAG_LATER, PARSE_ENCAP_GRE));
    for (port, want) in [
        (4789u16, PARSE_ENCAP_VXLAN),
        (6081, PARSE_ENCAP_GENEVE),
        (4790, PARSE_ENCAP_NONE),
    ] {
        let v = Frame::udp([203, 0, 113, 9], [198, 51, 100, 7], 40000, port)
            .payload(&[8, 0, 0, 0, 0, 0, 42, 0])
            .build();
        let o = parse(&s, &v);
        assert_eq!((o.status, o.info.encap), (PARSE_OK, want), "port {port}");
    }
}
