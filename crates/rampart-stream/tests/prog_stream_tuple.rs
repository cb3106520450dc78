//! The userspace parser (`parse_frame`) and FlowID (`set_flow_id`) against
//! their XDP counterparts (`bpf/lib/stream.h`, run through
//! `xdp_stream_probe` with BPF_PROG_RUN): same status, same tuple, same
//! FlowID in every key mode, on well-formed frames, every truncation of
//! them, and thousands of random mutations. This is what "one definition of
//! the tuple" means in practice.

use std::os::fd::{AsFd, AsRawFd};

use etherparse::{IpNumber, PacketBuilder};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::xdp_stream_probe::{
    types::stream_probe_out, XdpStreamProbeSkel, XdpStreamProbeSkelBuilder,
};
use rampart_dataplane::testrun;
use rampart_stream::flowid::{set_flow_id, KeyMode};
use rampart_stream::parse::parse_frame;
use rampart_stream::tuple::{same, StreamTuple};

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
    assert_eq!(out.retval, 2, "XDP_PASS");
    let v = skel
        .maps
        .stream_probe_out
        .lookup(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .unwrap()
        .unwrap();
    assert_eq!(v.len(), std::mem::size_of::<stream_probe_out>());
    // SAFETY: plain old data generated from BTF, length checked.
    unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<stream_probe_out>()) }
}

/// Compare one frame; returns the status for statistics.
fn check(skel: &XdpStreamProbeSkel<'_>, frame: &[u8], what: &str) -> u32 {
    let b = bpf(skel, frame);
    let r = parse_frame(frame, 0);
    let status = match &r {
        Ok(_) => 0,
        Err(s) => *s as u32,
    };
    assert_eq!(b.status, status, "{what}: status (frame {frame:02x?})");
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

const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut c = Vec::new();
    let mut add = |n: &str, v: Vec<u8>| c.push((n.to_string(), v));
    let mut v = Vec::new();
    PacketBuilder::ethernet2(A, B)
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
        PacketBuilder::ethernet2(A, B)
            .ipv4([10, 0, 0, 9], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 1, 100)
            .write(&mut v, &[])
            .unwrap();
        v[14 + 20 + 13] = flags;
        add(name, v);
        let mut v = Vec::new();
        PacketBuilder::ethernet2(A, B)
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
    PacketBuilder::ethernet2(A, B)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .icmpv4_echo_request(1, 2)
        .write(&mut v, &[0; 8])
        .unwrap();
    add("icmp4", v);
    let mut v = Vec::new();
    PacketBuilder::ethernet2(A, B)
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
        etherparse::Ipv4Header::new(8, 64, IpNumber::UDP, [1, 2, 3, 4], [5, 6, 7, 8]).unwrap();
    ip.options = [1u8, 1, 1, 0, 0x94, 4, 0, 0][..].try_into().unwrap();
    let mut v = Vec::new();
    PacketBuilder::ethernet2(A, B)
        .ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
        .udp(7, 9)
        .write(&mut v, &[])
        .unwrap();
    add("ipv4-options", v);
    // VLAN stacks.
    let base = c[0].1.clone();
    for tags in 1..=3usize {
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
            next_header: IpNumber(exts.first().map(|e| e.0).unwrap_or(l4)),
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

#[test]
fn corpus_matches_xdp() {
    let s = load();
    let mut seen = [0usize; 5];
    for (name, f) in corpus() {
        seen[check(&s, &f, &name) as usize] += 1;
    }
    // The corpus covers every status.
    assert!(seen.iter().all(|n| *n > 0), "statuses covered: {seen:?}");
}

#[test]
fn every_truncation_matches_xdp() {
    let s = load();
    for (name, f) in corpus() {
        // BPF_PROG_RUN refuses frames shorter than an Ethernet header (as drivers never deliver them).
        for n in 14..f.len() {
            check(&s, &f[..n], &format!("{name} cut at {n}"));
        }
    }
}

#[test]
fn random_mutations_match_xdp() {
    let s = load();
    let c = corpus();
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..3000 {
        let (name, f) = &c[(rnd() % c.len() as u64) as usize];
        let mut f = f.clone();
        // Flip 1-4 bytes among the headers (where the parser looks).
        for _ in 0..1 + rnd() % 4 {
            let pos = (rnd() % (f.len().min(96) as u64)) as usize;
            f[pos] = rnd() as u8;
        }
        if f.len() > 14 && rnd() % 4 == 0 {
            let n = 14 + (rnd() % (f.len() as u64 - 14)) as usize;
            f.truncate(n);
        }
        check(&s, &f, &format!("mutation {i} of {name}"));
    }
}
