//! BPF_PROG_TEST_RUN tests of bpf/common/parse.h through xdp_parse_probe:
//! every parse path and every kind of malformed frame, checked in the
//! kernel's verifier and JIT exactly as the programs use it.

use std::os::fd::{AsFd, AsRawFd};

use etherparse::{IpNumber, Ipv4Header, PacketBuilder};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::abi::common::{
    FRAG_FIRST, FRAG_LATER, FRAG_NONE, PARSE_BAD_HEADER, PARSE_NOT_IP, PARSE_OK, PARSE_TOO_DEEP,
    PARSE_TRUNCATED,
};
use rampart_bpf::xdp_parse_probe::{types::parse_out, XdpParseProbeSkel, XdpParseProbeSkelBuilder};
use rampart_dataplane::testrun;

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

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn udp4(payload: usize) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([192, 0, 2, 1], [198, 51, 100, 7], 61)
        .udp(1234, 53)
        .write(&mut v, &vec![0u8; payload])
        .unwrap();
    v
}

fn v4_words(a: [u8; 4]) -> [u32; 4] {
    [u32::from_ne_bytes(a), 0, 0, 0]
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

    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(5555, 80, 1, 100)
        .syn()
        .write(&mut v, &[])
        .unwrap();
    let o = parse(&s, &v);
    assert_eq!(o.status, PARSE_OK);
    assert_eq!((o.info.l4_proto, o.info.tcp_flags & 0x12), (6, 0x02));
    assert_eq!(u16::from_be(o.info.dport), 80);

    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .icmpv4_echo_request(1, 2)
        .write(&mut v, &[0; 8])
        .unwrap();
    let o = parse(&s, &v);
    assert_eq!(
        (o.status, o.info.l4_proto, o.info.icmp_type),
        (PARSE_OK, 1, 8)
    );
}

#[test]
fn ipv4_options_are_skipped_by_ihl() {
    let s = load();
    let mut ip = Ipv4Header::new(8, 64, IpNumber::UDP, [1, 2, 3, 4], [5, 6, 7, 8]).unwrap();
    ip.options = [1u8, 1, 1, 0, 0x94, 4, 0, 0][..].try_into().unwrap(); // NOPs, EOL, router alert
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
        .udp(7, 9)
        .write(&mut v, &[])
        .unwrap();
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
        let base = udp4(4);
        let mut v = base[..12].to_vec();
        for t in 0..tags {
            let tpid: u16 = if t == 0 && tags > 1 { 0x88a8 } else { 0x8100 };
            v.extend_from_slice(&tpid.to_be_bytes());
            v.extend_from_slice(&(100u16 + t as u16).to_be_bytes());
        }
        v.extend_from_slice(&base[12..]);
        let o = parse(&s, &v);
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
    let mut first = udp4(16);
    first[14 + 6] = 0x20; // MF, offset 0
    let o = parse(&s, &first);
    assert_eq!(
        (o.status, o.info.frag, u16::from_be(o.info.dport)),
        (PARSE_OK, FRAG_FIRST, 53)
    );
    let mut later = udp4(16);
    later[14 + 6] = 0x00;
    later[14 + 7] = 0x03; // offset 3*8, payload looks like a UDP header but is not one
    let o = parse(&s, &later);
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
    let good = udp4(10);
    // Bad IHL.
    let mut v = good.clone();
    v[14] = 0x44;
    assert_eq!(parse(&s, &v).status, PARSE_BAD_HEADER);
    // IHL says options that are not there.
    let mut v = good[..14 + 20].to_vec();
    v[14] = 0x4f;
    assert_eq!(parse(&s, &v).status, PARSE_TRUNCATED);
    // Total length below the header length.
    let mut v = good.clone();
    v[16] = 0;
    v[17] = 12;
    assert_eq!(parse(&s, &v).status, PARSE_BAD_HEADER);
    // Wrong version in an IPv4 EtherType.
    let mut v = good.clone();
    v[14] = 0x65;
    assert_eq!(parse(&s, &v).status, PARSE_BAD_HEADER);
    // Truncated inside IPv4, inside UDP, right after Ethernet. (Frames
    // shorter than an Ethernet header never reach XDP: BPF_PROG_RUN
    // refuses them with EINVAL, as drivers do not deliver them.)
    assert_eq!(parse(&s, &good[..14 + 10]).status, PARSE_TRUNCATED);
    assert_eq!(parse(&s, &good[..14 + 20 + 4]).status, PARSE_TRUNCATED);
    assert_eq!(parse(&s, &good[..14]).status, PARSE_TRUNCATED);
    // TCP data offset below 5.
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9)
        .tcp(1, 2, 3, 4)
        .write(&mut v, &[])
        .unwrap();
    v[14 + 20 + 12] = 0x40;
    assert_eq!(parse(&s, &v).status, PARSE_BAD_HEADER);
}

#[test]
fn not_ip_is_reported_as_such() {
    let s = load();
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&MAC_A);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let o = parse(&s, &arp);
    assert_eq!(
        (o.status, o.info.l3_proto, o.info.family),
        (PARSE_NOT_IP, 0x0806, 0)
    );
}

fn v6_with_ext(exts: &[(IpNumber, Vec<u8>)], l4: IpNumber, l4_bytes: &[u8]) -> Vec<u8> {
    // Build IPv6 header + raw extension chain + L4 by hand.
    let mut payload = Vec::new();
    for (i, (_, body)) in exts.iter().enumerate() {
        let next = exts.get(i + 1).map(|e| e.0).unwrap_or(l4);
        let mut b = body.clone();
        b[0] = next.0;
        payload.extend_from_slice(&b);
    }
    payload.extend_from_slice(l4_bytes);
    let first = exts.first().map(|e| e.0).unwrap_or(l4);
    let ip = etherparse::Ipv6Header {
        payload_length: payload.len() as u16,
        next_header: first,
        hop_limit: 33,
        source: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        destination: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        ..Default::default()
    };
    let mut v = MAC_B.to_vec();
    v.extend_from_slice(&MAC_A);
    v.extend_from_slice(&[0x86, 0xdd]);
    ip.write(&mut v).unwrap();
    v.extend_from_slice(&payload);
    v
}

fn udp_bytes(sport: u16, dport: u16) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&[0, 8, 0, 0]);
    u
}

fn opt_ext(len8: u8) -> Vec<u8> {
    // generic options header: next, hdrlen (in 8-octet units beyond the first 8)
    let mut b = vec![0u8; 8 * (len8 as usize + 1)];
    b[1] = len8;
    b[2] = 1; // PadN
    b[3] = (b.len() - 4) as u8;
    b
}

#[test]
fn ipv6_extension_chains() {
    let s = load();
    // Plain UDP.
    let o = parse(&s, &v6_with_ext(&[], IpNumber::UDP, &udp_bytes(4000, 53)));
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
    // Hop-by-hop + routing + destination options, then TCP-sized UDP.
    let chain = vec![
        (IpNumber::IPV6_HEADER_HOP_BY_HOP, opt_ext(0)),
        (IpNumber::IPV6_ROUTE_HEADER, opt_ext(1)),
        (IpNumber::IPV6_DESTINATION_OPTIONS, opt_ext(0)),
    ];
    let v = v6_with_ext(&chain, IpNumber::UDP, &udp_bytes(1, 443));
    let o = parse(&s, &v);
    assert_eq!(
        (o.status, o.info.l4_proto, u16::from_be(o.info.dport)),
        (PARSE_OK, 17, 443)
    );
    assert_eq!(o.info.l4_off as usize, 14 + 40 + 8 + 16 + 8);
    // Six extension headers is the limit; seven is too deep.
    let six: Vec<_> = (0..6)
        .map(|_| (IpNumber::IPV6_DESTINATION_OPTIONS, opt_ext(0)))
        .collect();
    assert_eq!(
        parse(&s, &v6_with_ext(&six, IpNumber::UDP, &udp_bytes(1, 2))).status,
        PARSE_OK
    );
    let seven: Vec<_> = (0..7)
        .map(|_| (IpNumber::IPV6_DESTINATION_OPTIONS, opt_ext(0)))
        .collect();
    assert_eq!(
        parse(&s, &v6_with_ext(&seven, IpNumber::UDP, &udp_bytes(1, 2))).status,
        PARSE_TOO_DEEP
    );
    // An extension header that runs past the frame.
    let mut v = v6_with_ext(
        &[(IpNumber::IPV6_HEADER_HOP_BY_HOP, opt_ext(4))],
        IpNumber::UDP,
        &udp_bytes(1, 2),
    );
    v.truncate(14 + 40 + 8);
    assert_eq!(parse(&s, &v).status, PARSE_TRUNCATED);
}

#[test]
fn ipv6_fragments() {
    let s = load();
    let frag = |offset_units: u16, more: bool| {
        let fo = (offset_units << 3) | u16::from(more);
        let mut b = vec![0u8; 8];
        b[2..4].copy_from_slice(&fo.to_be_bytes());
        b
    };
    let first = v6_with_ext(
        &[(IpNumber::IPV6_FRAGMENTATION_HEADER, frag(0, true))],
        IpNumber::UDP,
        &udp_bytes(9, 53),
    );
    let o = parse(&s, &first);
    assert_eq!(
        (o.status, o.info.frag, u16::from_be(o.info.dport)),
        (PARSE_OK, FRAG_FIRST, 53)
    );
    let later = v6_with_ext(
        &[(IpNumber::IPV6_FRAGMENTATION_HEADER, frag(185, false))],
        IpNumber::UDP,
        &udp_bytes(9, 53),
    );
    let o = parse(&s, &later);
    assert_eq!(
        (o.status, o.info.frag, o.info.dport, o.info.l4_proto),
        (PARSE_OK, FRAG_LATER, 0, 17)
    );
}

#[test]
fn ipv6_truncated_and_esp() {
    let s = load();
    let v = v6_with_ext(&[], IpNumber::UDP, &udp_bytes(1, 2));
    assert_eq!(parse(&s, &v[..14 + 39]).status, PARSE_TRUNCATED);
    assert_eq!(parse(&s, &v[..14 + 40 + 5]).status, PARSE_TRUNCATED);
    // ESP: the walk stops, no ports are invented.
    let o = parse(
        &s,
        &v6_with_ext(&[], IpNumber(50), &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]),
    );
    assert_eq!(
        (o.status, o.info.l4_proto, o.info.sport, o.info.dport),
        (PARSE_OK, 50, 0, 0)
    );
}
