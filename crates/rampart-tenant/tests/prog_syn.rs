//! BPF_PROG_TEST_RUN tests of the SYN-cookie proxy tenant service
//! (`bpf/tenant/api/programs/synproxy.c`) through the real infrastructure, as
//! tenant `a`: SYN-ACK bytes, cookie validation by the kernel's own check,
//! sequence wrap-around, timestamp-encoded options, malformed options.

mod common;

use std::os::fd::AsRawFd;

use common::*;
use rampart_tenant::host::HostAgent;
use rampart_tenant::programs::{SynProxyConfig, SynStats, SYNPROXY_C};
use rampart_testkit::frame::{self, tcp, Addr, Frame};
use rampart_testkit::prog::{XDP_DROP as DROP, XDP_PASS as PASS, XDP_TX as TX};

const CLIENT: [u8; 4] = [172, 16, 0, 9];
const SERVER: [u8; 4] = [10, 20, 1, 2];

fn syn_agent() -> HostAgent {
    rampart_lab::testing::require_kernel();
    let mut a = agent("", false);
    submit(&mut a, "a", SYNPROXY_C);
    let tid = a.tenant_id("a").unwrap();
    let (c, p) = (
        a.tenant_map(tid, "syn_cfg").unwrap(),
        a.tenant_map(tid, "syn_ports").unwrap(),
    );
    SynProxyConfig::default()
        .apply(c.as_raw_fd(), p.as_raw_fd())
        .unwrap();
    a
}

fn sstats(a: &HostAgent) -> SynStats {
    let fd = a
        .tenant_map(a.tenant_id("a").unwrap(), "syn_stats")
        .unwrap();
    SynStats::read(fd.as_raw_fd()).unwrap()
}

/// Linux-like SYN options: MSS 1460, SACK-permitted, timestamps, NOP, wscale 9.
fn linux_opts(tsval: u32) -> Vec<u8> {
    let mut o = vec![2, 4, 0x05, 0xb4, 4, 2, 8, 10];
    o.extend_from_slice(&tsval.to_be_bytes());
    o.extend_from_slice(&[0, 0, 0, 0, 1, 3, 3, 9]);
    o
}

enum Seg<'a> {
    Syn(&'a [u8]),
    Ack(u32),
    Data(u32, &'a [u8]),
    Rst,
}

/// A segment of `seg`'s kind from `src`:`sport` to port 80 of tenant a.
fn segment(src: impl Addr, dst: impl Addr, sport: u16, seq: u32, seg: Seg<'_>) -> Vec<u8> {
    let f = Frame::tcp(src, dst, sport, 80).seq(seq).window(64240);
    match seg {
        Seg::Syn(o) => f.flags(tcp::SYN).tcp_options(o),
        Seg::Ack(ack) => f.flags(tcp::ACK).ack(ack),
        Seg::Data(ack, d) => f.flags(tcp::ACK | tcp::PSH).ack(ack).payload(d),
        Seg::Rst => f.flags(tcp::RST),
    }
    .build()
}

fn tcp4(src: [u8; 4], sport: u16, seq: u32, seg: Seg<'_>) -> Vec<u8> {
    segment(src, SERVER, sport, seq, seg)
}

fn tcp6(src: [u8; 16], sport: u16, seq: u32, seg: Seg<'_>) -> Vec<u8> {
    segment(src, v6([0xfd20, 0, 0, 1, 0, 0, 0, 2]), sport, seq, seg)
}

/// The SYN-ACK answering `syn`: checks addresses, lengths, checksums (with
/// the test kit's independent check) and flags; returns (cookie, ack_seq,
/// options bytes).
fn synack(syn: &[u8], out: &[u8]) -> (u32, u32, Vec<u8>) {
    let q = frame::check(syn).expect("the SYN is valid");
    let r = frame::check(out).unwrap_or_else(|e| panic!("SYN-ACK: {e}"));
    assert_eq!(&out[0..6], &syn[6..12]);
    assert_eq!(&out[6..12], &syn[0..6]);
    assert_eq!((r.src, r.dst), (q.dst, q.src), "addresses swapped");
    assert_eq!(r.proto, 6, "TCP");
    let flags = r.tcp_flags & (tcp::SYN | tcp::ACK | tcp::RST | tcp::FIN);
    assert_eq!(flags, tcp::SYN | tcp::ACK);
    assert_eq!((r.sport, r.dport), (q.dport, q.sport));
    assert!(r.payload.is_empty());
    let l4 = if r.src.is_ipv4() { 14 + 20 } else { 14 + 40 };
    let t = &out[l4..];
    let tcp_len = usize::from(t[12] >> 4) * 4;
    assert_eq!(out.len(), l4 + tcp_len, "frame trimmed");
    let ip_len = if r.src.is_ipv4() {
        u16::from_be_bytes([out[16], out[17]]) - 20
    } else {
        u16::from_be_bytes([out[18], out[19]])
    };
    assert_eq!(
        usize::from(ip_len),
        tcp_len,
        "IP length covers the TCP header"
    );
    assert_eq!(u16::from_be_bytes([t[14], t[15]]), 0, "window 0");
    let word = |o: usize| u32::from_be_bytes(t[o..o + 4].try_into().unwrap());
    let q_seq = u32::from_be_bytes(syn[l4 + 4..l4 + 8].try_into().unwrap());
    assert_eq!(word(8), q_seq.wrapping_add(1));
    (word(4), word(8), t[20..tcp_len].to_vec())
}

#[test]
fn syn_gets_a_cookie_synack_and_only_the_right_ack_passes() {
    let a = syn_agent();
    let syn = tcp4(CLIENT, 40001, 1000, Seg::Syn(&linux_opts(0x1122_3344)));
    let (rc, out) = run_out(&a, &syn);
    assert_eq!(rc, TX);
    let (cookie, _, opts) = synack(&syn, &out);
    // MSS 1460; SACK-permitted + timestamps (TSecr echoes the client); wscale 7.
    assert_eq!(&opts[0..4], &[2, 4, 0x05, 0xb4]);
    assert_eq!(&opts[4..8], &[4, 2, 8, 10]);
    let tsval = u32::from_be_bytes(opts[8..12].try_into().unwrap());
    assert_eq!(&opts[12..16], &0x1122_3344u32.to_be_bytes());
    assert_eq!(&opts[16..20], &[1, 3, 3, 7]);
    assert_eq!(opts.len(), 20);
    // The client's options, encoded in the low 6 bits of TSval as the
    // kernel's cookie_init_timestamp() does: wscale 9, SACK.
    assert_eq!(tsval & 0xf, 9);
    assert_eq!(tsval & 0x10, 0x10);
    assert_eq!(tsval & 0x20, 0, "no ECN requested");

    // Wrong cookie, wrong port, wrong source: dropped.
    assert_eq!(
        run(
            &a,
            &tcp4(CLIENT, 40001, 1001, Seg::Ack(cookie.wrapping_add(2)))
        ),
        DROP
    );
    assert_eq!(
        run(
            &a,
            &tcp4(CLIENT, 40002, 1001, Seg::Ack(cookie.wrapping_add(1)))
        ),
        DROP
    );
    assert_eq!(
        run(
            &a,
            &tcp4(
                [172, 16, 0, 10],
                40001,
                1001,
                Seg::Ack(cookie.wrapping_add(1))
            )
        ),
        DROP
    );
    // Right cookie but a sequence number that is not the SYN's + 1: the
    // cookie binds the client's ISN.
    assert_eq!(
        run(
            &a,
            &tcp4(CLIENT, 40001, 5000, Seg::Ack(cookie.wrapping_add(1)))
        ),
        DROP
    );
    // The real ACK passes; the flow's later segments too.
    assert_eq!(
        run(
            &a,
            &tcp4(CLIENT, 40001, 1001, Seg::Ack(cookie.wrapping_add(1)))
        ),
        PASS
    );
    assert_eq!(
        run(
            &a,
            &tcp4(
                CLIENT,
                40001,
                1001,
                Seg::Data(cookie.wrapping_add(1), b"GET / HTTP/1.0\r\n\r\n")
            )
        ),
        PASS
    );
    assert_eq!(run(&a, &tcp4(CLIENT, 40001, 1019, Seg::Rst)), PASS);
    // A RST or data of no flow: dropped.
    assert_eq!(run(&a, &tcp4(CLIENT, 40009, 1, Seg::Rst)), DROP);
    assert_eq!(run(&a, &tcp4(CLIENT, 40009, 1, Seg::Data(77, b"x"))), DROP);
    let s = sstats(&a);
    assert_eq!(
        (s.synacks, s.ack_valid, s.ack_invalid, s.flow, s.other_drop),
        (1, 1, 5, 2, 1),
        "{s:?}"
    );
    // Unprotected port: untouched.
    let v = Frame::tcp(CLIENT, SERVER, 40001, 22)
        .flags(tcp::SYN)
        .build();
    assert_eq!(run(&a, &v), PASS);
}

#[test]
fn sequence_numbers_wrap_around() {
    let a = syn_agent();
    // ISN 0xffffffff: the SYN-ACK acknowledges 0, the ACK carries seq 0.
    let syn = tcp4(CLIENT, 40100, u32::MAX, Seg::Syn(&[2, 4, 0x05, 0xb4]));
    let (rc, out) = run_out(&a, &syn);
    assert_eq!(rc, TX);
    let (cookie, ack, opts) = synack(&syn, &out);
    assert_eq!(ack, 0);
    assert_eq!(opts, vec![2, 4, 0x05, 0xb4], "no timestamps: MSS only");
    assert_eq!(
        run(
            &a,
            &tcp4(CLIENT, 40100, 0, Seg::Ack(cookie.wrapping_add(1)))
        ),
        PASS
    );
    // Many ISNs near the wrap, each validated by the kernel's check.
    for (i, isn) in [u32::MAX - 1, u32::MAX, 0, 1, 0x7fff_ffff, 0x8000_0000]
        .into_iter()
        .enumerate()
    {
        let sport = 41000 + i as u16;
        let syn = tcp4(CLIENT, sport, isn, Seg::Syn(&linux_opts(5)));
        let (rc, out) = run_out(&a, &syn);
        assert_eq!(rc, TX);
        let (cookie, _, _) = synack(&syn, &out);
        assert_eq!(
            run(
                &a,
                &tcp4(
                    CLIENT,
                    sport,
                    isn.wrapping_add(1),
                    Seg::Ack(cookie.wrapping_add(1))
                )
            ),
            PASS,
            "ISN {isn:#x}"
        );
    }
}

#[test]
fn ipv6_cookies() {
    let a = syn_agent();
    let src = v6([0xfd66, 0, 0, 0, 0, 0, 0, 0x99]);
    let syn = tcp6(src, 40200, 7, Seg::Syn(&linux_opts(42)));
    let (rc, out) = run_out(&a, &syn);
    assert_eq!(rc, TX);
    let (cookie, _, opts) = synack(&syn, &out);
    assert_eq!(&opts[0..4], &[2, 4, 0x05, 0xa0], "IPv6 MSS 1440");
    assert_eq!(
        run(&a, &tcp6(src, 40200, 8, Seg::Ack(cookie.wrapping_add(3)))),
        DROP
    );
    assert_eq!(
        run(&a, &tcp6(src, 40200, 8, Seg::Ack(cookie.wrapping_add(1)))),
        PASS
    );
}

#[test]
fn malformed_syns_are_dropped_not_answered() {
    let a = syn_agent();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("option length 0", vec![2, 4, 0x05, 0xb4, 3, 0, 0, 0]),
        ("option length 1", vec![8, 1, 0, 0]),
        ("option past the header", vec![1, 1, 8, 10, 0, 0, 0, 0]),
        ("MSS of length 3", vec![2, 3, 5, 1]),
        ("window scale of length 4", vec![3, 4, 7, 0]),
        ("timestamps of length 8", vec![8, 8, 0, 0, 0, 0, 0, 0]),
        ("SACK-permitted of length 3", vec![4, 3, 0, 0]),
        ("kind without length", vec![1, 1, 1, 3]),
    ];
    for (i, (what, o)) in cases.iter().enumerate() {
        assert_eq!(o.len() % 4, 0, "{what}");
        let f = tcp4(CLIENT, 42000 + i as u16, 9, Seg::Syn(o));
        assert_eq!(run(&a, &f), DROP, "{what}");
    }
    // Bad TCP checksum; SYN carrying data; SYN+FIN; SYN-ACK.
    let mut bad = tcp4(CLIENT, 42100, 9, Seg::Syn(&[2, 4, 0x05, 0xb4]));
    let n = bad.len();
    bad[n - 5] ^= 0xff;
    assert_eq!(run(&a, &bad), DROP, "bad checksum");
    let syn = |sport| Frame::tcp(CLIENT, SERVER, sport, 80).seq(9).window(100);
    let data = syn(42101).flags(tcp::SYN).payload(b"fast open").build();
    assert_eq!(run(&a, &data), DROP, "data on a SYN");
    let synfin = syn(42102).flags(tcp::SYN | tcp::FIN).build();
    assert_eq!(run(&a, &synfin), DROP, "SYN+FIN");
    let s = sstats(&a);
    assert_eq!((s.synacks, s.bad_syn), (0, cases.len() as u64 + 2), "{s:?}");
    // Well-formed unusual options still get an answer: EOL padding, unknown kinds.
    let f = tcp4(
        CLIENT,
        42200,
        9,
        Seg::Syn(&[2, 4, 0x05, 0xb4, 30, 4, 1, 2, 1, 0, 0, 0]),
    );
    assert_eq!(run(&a, &f), TX);
}
