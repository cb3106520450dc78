//! Test traffic: frames built with etherparse, written as pcap or pcapng.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use etherparse::PacketBuilder;

pub const T0_NS: u64 = 1_704_067_200_000_000_000; // 2024-01-01T00:00:00Z, a multiple of 10 s
pub const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Tcp(u8),
    Udp,
    Icmp,
}

/// One frame: IP addresses of one family.
pub fn frame(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, l4: L4, payload: usize) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(MAC_A, MAC_B);
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
        _ => panic!("mixed families"),
    };
    let body = vec![0x5au8; payload];
    let mut v = Vec::new();
    match l4 {
        L4::Udp => ip.udp(sport, dport).write(&mut v, &body).unwrap(),
        L4::Icmp => {
            if src.is_ipv6() {
                ip.icmpv6_echo_request(1, 1).write(&mut v, &body).unwrap()
            } else {
                ip.icmpv4_echo_request(1, 1).write(&mut v, &body).unwrap()
            }
        }
        L4::Tcp(flags) => {
            ip.tcp(sport, dport, 1000, 65535)
                .write(&mut v, &body)
                .unwrap();
            let off = 14 + if src.is_ipv6() { 40 } else { 20 } + 13;
            v[off] = flags;
        }
    }
    v
}

/// IP total length of a frame built by [`frame`].
pub fn ip_len(f: &[u8]) -> u64 {
    (f.len() - 14) as u64
}

/// A unique file path under the temp dir.
pub fn tmp(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("rampart-stream-{}-{n}-{name}", std::process::id()))
}

/// Removes the file on drop.
pub struct TmpFile(pub PathBuf);
impl Drop for TmpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
impl TmpFile {
    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

/// Write (ts_ns, frame) records as classic pcap (µs timestamps).
pub fn write_pcap(name: &str, pkts: &[(u64, Vec<u8>)]) -> TmpFile {
    let p = tmp(name);
    let f = std::fs::File::create(&p).unwrap();
    let mut w = pcap_file::pcap::PcapWriter::new(f).unwrap();
    for (ts, fr) in pkts {
        let pkt = pcap_file::pcap::PcapPacket::new(Duration::from_nanos(*ts), fr.len() as u32, fr);
        w.write_packet(&pkt).unwrap();
    }
    TmpFile(p)
}

/// Write (ts_ns, frame) records as pcapng (ns timestamps, if_tsresol = 9).
pub fn write_pcapng(name: &str, pkts: &[(u64, Vec<u8>)]) -> TmpFile {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::{
        InterfaceDescriptionBlock, InterfaceDescriptionOption,
    };
    let p = tmp(name);
    let f = std::fs::File::create(&p).unwrap();
    let mut w = pcap_file::pcapng::PcapNgWriter::new(f).unwrap();
    let idb = InterfaceDescriptionBlock {
        linktype: pcap_file::DataLink::ETHERNET,
        snaplen: 65535,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    };
    w.write_pcapng_block(idb).unwrap();
    for (ts, fr) in pkts {
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(*ts),
            original_len: fr.len() as u32,
            data: std::borrow::Cow::Borrowed(fr),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
    }
    TmpFile(p)
}

/// xorshift, deterministic.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// Frames that cover every parse status: TCP flag variants (v4/v6), UDP,
/// ICMP, IPv4 options, VLAN stacks, fragments, IPv6 extension chains,
/// malformed headers, non-IP. (name, frame)
pub fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut c = Vec::new();
    let mut add = |n: &str, v: Vec<u8>| c.push((n.to_string(), v));
    let mut v = Vec::new();
    etherparse::PacketBuilder::ethernet2(A, B)
        .ipv4([192, 0, 2, 1], [198, 51, 100, 7], 61)
        .udp(1234, 53)
        .write(&mut v, &[7; 20])
        .unwrap();
    add("udp4", v);
    for (flags, name) in [
        (0x02u8, "syn"),
        (0x12, "synack"),
        (0x10, "ack"),
        (0x14, "rstack"),
        (0x11, "finack"),
    ] {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ethernet2(A, B)
            .ipv4([10, 0, 0, 9], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 1, 100)
            .write(&mut v, &[])
            .unwrap();
        v[14 + 20 + 13] = flags;
        add(name, v);
        let mut v = Vec::new();
        etherparse::PacketBuilder::ethernet2(A, B)
            .ipv6(
                [0xfd, 0x66, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5],
                [0xfd, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                64,
            )
            .tcp(80, 40000, 1, 100)
            .write(&mut v, &[1, 2, 3])
            .unwrap();
        v[14 + 40 + 13] = flags;
        add(&format!("{name}6"), v);
    }
    let mut v = Vec::new();
    etherparse::PacketBuilder::ethernet2(A, B)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .icmpv4_echo_request(1, 2)
        .write(&mut v, &[0; 8])
        .unwrap();
    add("icmp4", v);
    let mut v = Vec::new();
    etherparse::PacketBuilder::ethernet2(A, B)
        .ipv6(
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            64,
        )
        .icmpv6_echo_request(1, 2)
        .write(&mut v, &[0; 8])
        .unwrap();
    add("icmp6", v);
    // IPv4 options.
    let mut ip =
        etherparse::Ipv4Header::new(8, 64, etherparse::IpNumber::UDP, [1, 2, 3, 4], [5, 6, 7, 8])
            .unwrap();
    ip.options = [1u8, 1, 1, 0, 0x94, 4, 0, 0][..].try_into().unwrap();
    let mut v = Vec::new();
    etherparse::PacketBuilder::ethernet2(A, B)
        .ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
        .udp(7, 9)
        .write(&mut v, &[])
        .unwrap();
    add("ipv4-options", v);
    // VLAN stacks.
    let base = c[0].1.clone();
    for tags in 1..=5usize {
        let mut v = base[..12].to_vec();
        for t in 0..tags {
            let tpid: u16 = if t == 0 && tags > 1 { 0x88a8 } else { 0x8100 };
            v.extend_from_slice(&tpid.to_be_bytes());
            v.extend_from_slice(&(100u16 + t as u16).to_be_bytes());
        }
        v.extend_from_slice(&base[12..]);
        c.push((format!("vlan{tags}"), v));
    }
    // Malformed IPv4: bad IHL, cut inside the header, total length below the header.
    let mut v = base.clone();
    v[14] = 0x44;
    c.push(("bad-ihl".into(), v));
    c.push(("cut-ipv4".into(), base[..14 + 10].to_vec()));
    let mut v = base.clone();
    v[16] = 0;
    v[17] = 12;
    c.push(("short-tot-len".into(), v));
    // IPv4 fragments.
    let mut v = base.clone();
    v[14 + 6] = 0x20;
    c.push(("frag4-first".into(), v));
    let mut v = base.clone();
    v[14 + 7] = 0x03;
    c.push(("frag4-later".into(), v));
    // IPv6 extension chains.
    let ext = |len8: u8| {
        let mut b = vec![0u8; 8 * (len8 as usize + 1)];
        b[1] = len8;
        b[2] = 1;
        b[3] = (b.len() - 4) as u8;
        b
    };
    let frag = |units: u16, more: bool| {
        let mut b = vec![0u8; 8];
        b[2..4].copy_from_slice(&((units << 3) | u16::from(more)).to_be_bytes());
        b
    };
    let ah = || {
        let mut b = vec![0u8; 16];
        b[1] = 2; // (2 + 2) * 4 = 16 bytes
        b
    };
    let udp = |s: u16, d: u16| {
        let mut u = s.to_be_bytes().to_vec();
        u.extend_from_slice(&d.to_be_bytes());
        u.extend_from_slice(&[0, 8, 0, 0]);
        u
    };
    let v6 = |exts: Vec<(u8, Vec<u8>)>, l4: u8, l4b: Vec<u8>| {
        let mut payload = Vec::new();
        for (i, (_, body)) in exts.iter().enumerate() {
            let next = exts.get(i + 1).map(|e| e.0).unwrap_or(l4);
            let mut b = body.clone();
            b[0] = next;
            payload.extend_from_slice(&b);
        }
        payload.extend_from_slice(&l4b);
        let ip = etherparse::Ipv6Header {
            payload_length: payload.len() as u16,
            next_header: etherparse::IpNumber(exts.first().map(|e| e.0).unwrap_or(l4)),
            hop_limit: 9,
            source: [0xfd, 0x66, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1],
            destination: [0xfd, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            ..Default::default()
        };
        let mut v = B.to_vec();
        v.extend_from_slice(&A);
        v.extend_from_slice(&[0x86, 0xdd]);
        ip.write(&mut v).unwrap();
        v.extend_from_slice(&payload);
        v
    };
    c.push((
        "v6-hbh-rt-dst".into(),
        v6(
            vec![(0, ext(0)), (43, ext(1)), (60, ext(0))],
            17,
            udp(1, 443),
        ),
    ));
    c.push(("v6-ah".into(), v6(vec![(51, ah())], 6, vec![0; 20])));
    c.push((
        "v6-frag-first".into(),
        v6(vec![(44, frag(0, true))], 17, udp(9, 53)),
    ));
    c.push((
        "v6-frag-later".into(),
        v6(vec![(44, frag(185, false))], 17, udp(9, 53)),
    ));
    c.push((
        "v6-six-ext".into(),
        v6((0..6).map(|_| (60, ext(0))).collect(), 17, udp(1, 2)),
    ));
    c.push((
        "v6-seven-ext".into(),
        v6((0..7).map(|_| (60, ext(0))).collect(), 17, udp(1, 2)),
    ));
    c.push((
        "v6-nine-ext".into(),
        v6((0..9).map(|_| (60, ext(0))).collect(), 17, udp(1, 2)),
    ));
    let v6udp = v6(vec![], 17, udp(7, 53));
    let mut v = v6udp.clone();
    v[18..20].copy_from_slice(&200u16.to_be_bytes());
    c.push(("v6-payload-past-frame".into(), v));
    // IPv4 lengths against the frame: padding after the packet, a packet
    // longer than the frame.
    let mut v = base.clone();
    v.extend_from_slice(&[0; 18]);
    c.push(("ipv4-padded".into(), v));
    let mut v = base.clone();
    let tot = u16::from_be_bytes([v[16], v[17]]) + 1;
    v[16..18].copy_from_slice(&tot.to_be_bytes());
    c.push(("ipv4-past-frame".into(), v));
    // Shims: MPLS and PPPoE session headers before the IP header.
    let shim = |f: &[u8], et: u16, h: &[u8]| {
        let mut v = f[..12].to_vec();
        v.extend_from_slice(&et.to_be_bytes());
        v.extend_from_slice(h);
        v.extend_from_slice(&f[14..]);
        v
    };
    let labels = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                ((16u32 + i as u32) << 12 | u32::from(i + 1 == n) << 8 | 64).to_be_bytes()
            })
            .collect()
    };
    c.push(("mpls-ipv4".into(), shim(&base, 0x8847, &labels(2))));
    c.push(("mpls-ipv6".into(), shim(&v6udp, 0x8848, &labels(1))));
    c.push(("mpls-nine".into(), shim(&base, 0x8847, &labels(9))));
    let mut pw = labels(1);
    pw.extend_from_slice(&[0, 0, 0, 0]);
    pw.extend_from_slice(&base[..14]);
    c.push(("mpls-pseudowire".into(), shim(&base, 0x8847, &pw)));
    let pppoe = |f: &[u8], ppp: u16| {
        let mut h = vec![0x11, 0, 0, 1];
        h.extend_from_slice(&((f.len() - 12) as u16).to_be_bytes());
        h.extend_from_slice(&ppp.to_be_bytes());
        shim(f, 0x8864, &h)
    };
    c.push(("pppoe-ipv4".into(), pppoe(&base, 0x21)));
    c.push(("pppoe-ipv6".into(), pppoe(&v6udp, 0x57)));
    c.push(("pppoe-lcp".into(), pppoe(&base, 0xc021)));
    let mut v = pppoe(&base, 0x21);
    v[14] = 0x22;
    c.push(("pppoe-bad-version".into(), v));
    // Tunnels: GRE, IP in IP, VXLAN, Geneve (reported, not walked).
    for (name, proto) in [("gre", 47u8), ("ipip", 4), ("sit", 41)] {
        let mut v = base[..34].to_vec();
        if proto == 47 {
            v.extend_from_slice(&[0, 0, 8, 0]);
        }
        v.extend_from_slice(&base[14..]);
        let tot = (v.len() - 14) as u16;
        v[16..18].copy_from_slice(&tot.to_be_bytes());
        v[14 + 9] = proto;
        c.push((name.into(), v));
    }
    for (name, port) in [("vxlan", 4789u16), ("geneve", 6081)] {
        let mut v = Vec::new();
        PacketBuilder::ethernet2(A, B)
            .ipv4([203, 0, 113, 9], [198, 51, 100, 7], 64)
            .udp(40000, port)
            .write(&mut v, &[&[8u8, 0, 0, 0, 0, 0, 42, 0][..], &base].concat())
            .unwrap();
        c.push((name.into(), v));
    }
    c.push((
        "v6-esp".into(),
        v6(vec![], 50, vec![0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]),
    ));
    // Non-IP.
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&A);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    c.push(("arp".into(), arp));
    c
}
