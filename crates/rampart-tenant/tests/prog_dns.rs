//! BPF_PROG_TEST_RUN tests of the DNS rate limiter tenant service
//! (`bpf/tenant/api/programs/dns_ratelimit.c`), run through the real
//! infrastructure (dispatcher → wrapper → tenant program) as tenant `a`.
//! Rates are one query per 100 s, so the clock never refills a bucket
//! during a test: budgets are exact counts.

mod common;

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use common::*;
use rampart_tenant::host::HostAgent;
use rampart_tenant::programs::{DnsLimits, DnsStats, DNS_RATELIMIT_C};
use rampart_testkit::frame::{self, Frame};
use rampart_testkit::prog::{XDP_DROP as DROP, XDP_PASS as PASS, XDP_TX as TX};

fn dns_agent(limits: &DnsLimits) -> HostAgent {
    rampart_lab::testing::require_kernel();
    let mut a = agent("", false);
    submit(&mut a, "a", DNS_RATELIMIT_C);
    let tid = a.tenant_id("a").unwrap();
    let cfg = a.tenant_map(tid, "dns_cfg").unwrap();
    let ex = a.tenant_map(tid, "dns_exempt").unwrap();
    limits.apply(cfg.as_raw_fd(), ex.as_raw_fd()).unwrap();
    a
}

fn dstats(a: &HostAgent) -> DnsStats {
    let fd = a
        .tenant_map(a.tenant_id("a").unwrap(), "dns_stats")
        .unwrap();
    DnsStats::read(fd.as_raw_fd()).unwrap()
}

/// Query name in wire format.
fn qname(labels: &[&str]) -> Vec<u8> {
    let mut v = Vec::new();
    for l in labels {
        v.push(l.len() as u8);
        v.extend_from_slice(l.as_bytes());
    }
    v.push(0);
    v
}

/// A DNS query payload: header (id 0xbeef, RD), `qdcount`, then `question`
/// (name + QTYPE A + QCLASS IN), then `extra` (e.g. an OPT record).
fn query(question_name: &[u8], qdcount: u16, extra: &[u8]) -> Vec<u8> {
    let mut q = vec![0xbe, 0xef, 0x01, 0x00];
    q.extend_from_slice(&qdcount.to_be_bytes());
    q.extend_from_slice(&[0, 0, 0, 0, 0, 1]);
    q.extend_from_slice(question_name);
    q.extend_from_slice(&[0, 1, 0, 1]);
    q.extend_from_slice(extra);
    q
}

fn example() -> Vec<u8> {
    query(&qname(&["example", "com"]), 1, &[])
}

fn frame4(src: [u8; 4], dport: u16, payload: &[u8]) -> Vec<u8> {
    Frame::udp(src, [10, 20, 1, 2], 40000, dport)
        .payload(payload)
        .build()
}

fn frame6(src: [u8; 16], payload: &[u8]) -> Vec<u8> {
    Frame::udp(src, v6([0xfd20, 0, 0, 1, 0, 0, 0, 2]), 40000, 53)
        .payload(payload)
        .build()
}

fn limits(src: (f64, u32), pfx: (f64, u32), truncate: bool) -> DnsLimits {
    DnsLimits {
        src_qps: src.0,
        src_burst: src.1,
        pfx_qps: pfx.0,
        pfx_burst: pfx.1,
        truncate,
        ..DnsLimits::default()
    }
}

/// Check a TC answer built from `query_frame` (addresses and ports
/// swapped, lengths that end at the frame's end, checksums by the test
/// kit's independent check): returns its DNS payload.
fn check_answer(query_frame: &[u8], out: &[u8]) -> Vec<u8> {
    let q = frame::check(query_frame).expect("the query is valid");
    let r = frame::check(out).unwrap_or_else(|e| panic!("answer: {e}"));
    assert_eq!(
        &out[0..6],
        &query_frame[6..12],
        "destination MAC = query's source"
    );
    assert_eq!(&out[6..12], &query_frame[0..6]);
    assert_eq!(r.proto, 17, "UDP");
    assert_eq!((r.src, r.dst), (q.dst, q.src), "addresses swapped");
    assert_eq!((r.sport, r.dport), (q.dport, q.sport), "ports swapped");
    let l4 = if r.src.is_ipv4() { 14 + 20 } else { 14 + 40 };
    let udp_len = usize::from(u16::from_be_bytes([out[l4 + 4], out[l4 + 5]]));
    assert_eq!(udp_len, 8 + r.payload.len());
    assert_eq!(udp_len, out.len() - l4, "the datagram ends the frame");
    if r.src.is_ipv4() {
        let total = u16::from_be_bytes([out[16], out[17]]);
        assert_eq!(usize::from(total), 20 + udp_len, "IPv4 total length");
    } else {
        let payload = u16::from_be_bytes([out[18], out[19]]);
        assert_eq!(usize::from(payload), udp_len, "IPv6 payload length");
    }
    // Zero would mean "no checksum" over IPv4; check() computed the real one.
    assert_ne!(&out[l4 + 6..l4 + 8], &[0, 0], "UDP checksum");
    r.payload
}

#[test]
fn per_source_budget_then_truncated_answers() {
    let a = dns_agent(&limits((0.01, 3), (0.0, 1), true));
    let f = frame4([172, 16, 0, 1], 53, &example());
    for i in 0..3 {
        assert_eq!(run(&a, &f), PASS, "query {i} within the burst of 3");
    }
    for _ in 0..2 {
        let (rc, out) = run_out(&a, &f);
        assert_eq!(rc, TX, "over budget: answered");
        let p = check_answer(&f, &out);
        let q = example();
        // id kept; QR=1, opcode 0, AA=0, TC=1, RD kept; RA=0, RCODE=0.
        assert_eq!(&p[0..4], &[0xbe, 0xef, 0x83, 0x00]);
        assert_eq!(&p[4..12], &[0, 1, 0, 0, 0, 0, 0, 0], "QD=1 AN=NS=AR=0");
        assert_eq!(&p[12..], &q[12..], "the question, unchanged");
    }
    // Another source of the same /24 has its own budget (no prefix limit).
    assert_eq!(run(&a, &frame4([172, 16, 0, 2], 53, &example())), PASS);
    let s = dstats(&a);
    assert_eq!((s.passed, s.truncated, s.dropped), (4, 2, 0));
    assert_eq!(stats(&a, "a").verdicts["tx"], 2);
}

#[test]
fn per_prefix_budget_v4_and_v6() {
    let a = dns_agent(&limits((0.0, 1), (0.01, 2), false));
    assert_eq!(run(&a, &frame4([172, 16, 0, 1], 53, &example())), PASS);
    assert_eq!(run(&a, &frame4([172, 16, 0, 2], 53, &example())), PASS);
    assert_eq!(
        run(&a, &frame4([172, 16, 0, 3], 53, &example())),
        DROP,
        "third source of 172.16.0.0/24: the prefix's burst of 2 is spent"
    );
    assert_eq!(
        run(&a, &frame4([172, 16, 1, 3], 53, &example())),
        PASS,
        "another /24"
    );
    // IPv6: /56 prefixes.
    let s1 = v6([0xfd66, 0, 0, 0x0011, 0, 0, 0, 1]);
    let s2 = v6([0xfd66, 0, 0, 0x00ff, 0xffff, 0, 0, 2]); // same /56 (fd66:0:0::/56)
    let s3 = v6([0xfd66, 0, 0, 0x0042, 0, 0, 0, 3]); // same /56
    let s4 = v6([0xfd66, 0, 0, 0x0100, 0, 0, 0, 4]); // next /56
    assert_eq!(run(&a, &frame6(s1, &example())), PASS);
    assert_eq!(run(&a, &frame6(s2, &example())), PASS);
    assert_eq!(run(&a, &frame6(s3, &example())), DROP);
    assert_eq!(run(&a, &frame6(s4, &example())), PASS);
    let s = dstats(&a);
    assert_eq!((s.passed, s.truncated, s.dropped), (6, 0, 2));
}

#[test]
fn ipv6_truncated_answer_bytes() {
    let a = dns_agent(&limits((0.01, 1), (0.0, 1), true));
    let src = v6([0xfd66, 0, 0, 0, 0, 0, 0, 7]);
    // A query with an EDNS OPT record and 900 bytes of padding: the answer
    // keeps only header and question (never larger than the query).
    let mut opt = vec![0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0];
    opt.extend_from_slice(&904u16.to_be_bytes());
    opt.extend_from_slice(&12u16.to_be_bytes());
    opt.extend_from_slice(&900u16.to_be_bytes());
    opt.extend(std::iter::repeat_n(0u8, 900));
    let mut q = query(&qname(&["www", "example", "org"]), 1, &opt);
    q[10..12].copy_from_slice(&[0, 1]); // ARCOUNT 1
    let f = frame6(src, &q);
    assert_eq!(run(&a, &f), PASS);
    let (rc, out) = run_out(&a, &f);
    assert_eq!(rc, TX);
    let p = check_answer(&f, &out);
    let qlen = 12 + qname(&["www", "example", "org"]).len() + 4;
    assert_eq!(p.len(), qlen, "cut after the question");
    assert_eq!(&p[2..12], &[0x83, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&p[12..], &q[12..qlen]);
    assert!(out.len() < f.len());
}

#[test]
fn malformed_queries_are_never_answered() {
    let a = dns_agent(&limits((0.01, 1), (0.0, 1), true));
    let src = [172, 16, 9, 9];
    // Spend the source's budget.
    assert_eq!(run(&a, &frame4(src, 53, &example())), PASS);

    // Truncated header (8 bytes of DNS): dropped as malformed, whatever the budget.
    assert_eq!(run(&a, &frame4([172, 16, 8, 1], 53, &example()[..8])), DROP);
    // A response sent to port 53 (QR=1): dropped.
    let mut resp = example();
    resp[2] |= 0x80;
    assert_eq!(run(&a, &frame4([172, 16, 8, 2], 53, &resp)), DROP);
    // UDP length larger than the frame: dropped.
    let long = Frame::udp([172, 16, 8, 3], [10, 20, 1, 2], 40000, 53)
        .payload(&example())
        .udp_len(500)
        .build();
    assert_eq!(run(&a, &long), DROP);
    assert_eq!(dstats(&a).malformed, 3);

    // Over budget, the question must parse for a TC answer; otherwise drop.
    let compressed = query(&[0xc0, 0x0c], 1, &[]);
    let truncated_name = {
        let mut q = example();
        q.truncate(12 + 5); // "\x07examp"
        q
    };
    let label64 = query(&qname(&[&"a".repeat(64)]), 1, &[]);
    let long_name = query(
        &qname(&[
            &"b".repeat(63),
            &"c".repeat(63),
            &"d".repeat(63),
            &"e".repeat(63),
        ]),
        1,
        &[],
    ); // 257 bytes
    let two_questions = query(&qname(&["example", "com"]), 2, &[]);
    let mut notify = example();
    notify[2] = 0x20; // opcode 4 (NOTIFY)
    let no_qtype = {
        let mut q = example();
        q.truncate(q.len() - 3);
        q
    };
    for (what, p) in [
        ("compressed name", &compressed),
        ("name cut by the frame", &truncated_name),
        ("label of 64", &label64),
        ("name of 257 bytes", &long_name),
        ("two questions", &two_questions),
        ("opcode NOTIFY", &notify),
        ("no QTYPE/QCLASS", &no_qtype),
    ] {
        assert_eq!(run(&a, &frame4(src, 53, p)), DROP, "{what} over budget");
    }
    // Within budget, the same queries reach the server (which answers FORMERR).
    for (i, p) in [&compressed, &label64, &long_name, &two_questions]
        .into_iter()
        .enumerate()
    {
        assert_eq!(
            run(&a, &frame4([172, 16, 7, i as u8], 53, p)),
            PASS,
            "within budget"
        );
    }
    // A name of exactly 255 bytes is valid: answered.
    let n255 = query(
        &qname(&[
            &"b".repeat(63),
            &"c".repeat(63),
            &"d".repeat(63),
            &"e".repeat(61),
        ]),
        1,
        &[],
    );
    assert_eq!(12 + 255 + 4, n255.len());
    let f = frame4(src, 53, &n255);
    let (rc, out) = run_out(&a, &f);
    assert_eq!(rc, TX, "255-byte name");
    assert_eq!(check_answer(&f, &out).len(), n255.len());
    let s = dstats(&a);
    assert_eq!((s.dropped, s.truncated, s.malformed), (7, 1, 3));
}

#[test]
fn exempt_prefixes_and_other_traffic_pass() {
    let mut l = limits((0.01, 1), (0.01, 1), false);
    l.exempt = vec![("172.16.5.0".parse::<IpAddr>().unwrap(), 24)];
    let a = dns_agent(&l);
    for _ in 0..5 {
        assert_eq!(run(&a, &frame4([172, 16, 5, 1], 53, &example())), PASS);
    }
    assert_eq!(run(&a, &frame4([172, 16, 6, 1], 53, &example())), PASS);
    assert_eq!(run(&a, &frame4([172, 16, 6, 1], 53, &example())), DROP);
    // Not UDP/53: untouched.
    assert_eq!(run(&a, &frame4([172, 16, 6, 1], 9, &example())), PASS);
    let s = dstats(&a);
    assert_eq!(
        (s.exempt, s.passed, s.dropped, s.other),
        (5, 1, 1, 1),
        "{s:?}"
    );
}

#[test]
fn unconfigured_limiter_passes_everything() {
    rampart_lab::testing::require_kernel();
    let mut a = agent("", false);
    submit(&mut a, "a", DNS_RATELIMIT_C);
    for _ in 0..10 {
        assert_eq!(run(&a, &frame4([172, 16, 0, 1], 53, &example())), PASS);
    }
    assert_eq!(dstats(&a).passed, 10);
}
