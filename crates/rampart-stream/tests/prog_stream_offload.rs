//! `xdp_stream` (the stream offload) under BPF_PROG_RUN: for every frame of
//! the parser corpus, its truncations and random mutations, in every key
//! mode and with each kind of filter, the program's verdict, output frame
//! and counters are what the userspace pipeline (parse → Filter → FlowID)
//! says they must be: a record byte-identical to the userspace tuple (the
//! timestamp aside), malformed frames never turned into records, filtered
//! frames dropped or passed unchanged as configured. The steering test
//! puts a real AF_XDP socket into one XSKMAP slot at a time and checks that
//! only frames whose key that slot's replica owns are redirected.

mod common;

use std::os::fd::RawFd;

use rampart_dataplane::testrun::{self, XdpMd};
use rampart_stream::flowid::{set_flow_id, KeyMode};
use rampart_stream::offload::config::owner;
use rampart_stream::offload::{
    Action, Counters, Entry, FlagClause, OffloadConfig, OffloadProgram, PortRange, Predicate,
    Timestamps,
};
use rampart_stream::parse::{parse_frame, ParseStatus};
use rampart_stream::source::xsk::Xsk;
use rampart_stream::tuple::{proto, tcp, StreamTuple, TupleExt};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;

fn load() -> OffloadProgram {
    rampart_lab::testing::require_kernel();
    OffloadProgram::load(Entry::Host, None, None).expect("load xdp_stream (verifier)")
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn record(data: &[u8]) -> StreamTuple {
    assert_eq!(data.len(), 56, "the frame became the 56-byte record");
    // SAFETY: 56 bytes, plain data.
    unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<StreamTuple>()) }
}

fn sub(a: Counters, b: Counters) -> Counters {
    Counters {
        records: a.records - b.records,
        not_ip: a.not_ip - b.not_ip,
        truncated: a.truncated - b.truncated,
        bad_header: a.bad_header - b.bad_header,
        too_deep: a.too_deep - b.too_deep,
        filtered: a.filtered - b.filtered,
        rewrite_failed: a.rewrite_failed - b.rewrite_failed,
        no_socket: a.no_socket - b.no_socket,
        ts_hw: a.ts_hw - b.ts_hw,
    }
}

/// Run one frame and check it against the userspace pipeline under `cfg`.
/// Returns what was expected, for the counter totals.
fn check(p: &OffloadProgram, cfg: &OffloadConfig, frame: &[u8], what: &str) -> Expect {
    let before = now_ns();
    let out = testrun::run_packet(p.prog_fd(), frame, 0).expect("BPF_PROG_RUN");
    let after = now_ns();
    match parse_frame(frame, 0) {
        Err(ParseStatus::NotIp) => {
            assert_eq!(out.retval, XDP_PASS, "{what}: non-IP goes to the stack");
            assert_eq!(out.data, frame, "{what}: untouched");
            Expect::NotIp
        }
        Err(s) => {
            let want = match cfg.on_malformed {
                Action::Drop => XDP_DROP,
                Action::Pass => XDP_PASS,
            };
            assert_eq!(out.retval, want, "{what}: malformed ({s:?})");
            assert_eq!(
                out.data, frame,
                "{what}: a malformed frame is never rewritten"
            );
            Expect::Malformed(s)
        }
        Ok(mut t) => {
            if let Some(f) = &cfg.filter {
                if !f.matches(&t) {
                    let want = match cfg.on_filtered {
                        Action::Drop => XDP_DROP,
                        Action::Pass => XDP_PASS,
                    };
                    assert_eq!(out.retval, want, "{what}: filtered by {f}");
                    assert_eq!(out.data, frame, "{what}: a filtered frame is not rewritten");
                    return Expect::Filtered;
                }
            }
            if let Some(m) = cfg.key_mode {
                set_flow_id(&mut t, m);
            }
            // No socket in the XSKMAP here: the record is built, then dropped.
            assert_eq!(out.retval, XDP_DROP, "{what}: no socket");
            let r = record(&out.data);
            assert!(
                r.ts_ns >= before - 1_000_000_000 && r.ts_ns <= after + 1_000_000_000,
                "{what}: software time since the epoch ({} not within [{before}, {after}])",
                r.ts_ns
            );
            t.ts_ns = r.ts_ns;
            assert!(
                rampart_stream::tuple::same(&r, &t),
                "{what}: record\n bpf  {r:?}\n rust {t:?}"
            );
            Expect::Record
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    NotIp,
    Malformed(ParseStatus),
    Filtered,
    Record,
}

fn tally(v: &[Expect]) -> Counters {
    let n = |e: Expect| v.iter().filter(|x| **x == e).count() as u64;
    Counters {
        records: 0,
        not_ip: n(Expect::NotIp),
        truncated: n(Expect::Malformed(ParseStatus::Truncated)),
        bad_header: n(Expect::Malformed(ParseStatus::BadHeader)),
        too_deep: n(Expect::Malformed(ParseStatus::TooDeep)),
        filtered: n(Expect::Filtered),
        rewrite_failed: 0,
        no_socket: n(Expect::Record),
        ts_hw: 0,
    }
}

fn mutations() -> Vec<(String, Vec<u8>)> {
    let c = common::corpus();
    let mut out = Vec::new();
    for (name, f) in &c {
        for n in 14..f.len() {
            out.push((format!("{name} cut at {n}"), f[..n].to_vec()));
        }
    }
    let mut x = 0x0bad_cafe_1234_5678u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..1500 {
        let (name, f) = &c[(rnd() % c.len() as u64) as usize];
        let mut f = f.clone();
        for _ in 0..1 + rnd() % 4 {
            let pos = (rnd() % (f.len().min(96) as u64)) as usize;
            f[pos] = rnd() as u8;
        }
        out.push((format!("mutation {i} of {name}"), f));
    }
    out
}

#[test]
fn every_key_mode_gives_the_userspace_record() {
    let p = load();
    let corpus = common::corpus();
    for mode in [
        None,
        Some(KeyMode::FiveTuple),
        Some(KeyMode::SynPair),
        Some(KeyMode::Bidir),
    ] {
        let cfg = OffloadConfig {
            key_mode: mode,
            timestamps: Timestamps::Software,
            ..OffloadConfig::default()
        };
        p.configure(&cfg).unwrap();
        let c0 = p.counters().unwrap();
        let seen: Vec<Expect> = corpus
            .iter()
            .map(|(n, f)| check(&p, &cfg, f, &format!("{n} ({mode:?})")))
            .collect();
        assert!(seen.contains(&Expect::Record) && seen.contains(&Expect::NotIp));
        for s in [
            ParseStatus::Truncated,
            ParseStatus::BadHeader,
            ParseStatus::TooDeep,
        ] {
            assert!(seen.contains(&Expect::Malformed(s)), "corpus covers {s:?}");
        }
        assert_eq!(sub(p.counters().unwrap(), c0), tally(&seen), "{mode:?}");
    }
}

#[test]
fn malformed_and_mutated_frames_never_become_records() {
    let p = load();
    for on_malformed in [Action::Drop, Action::Pass] {
        let cfg = OffloadConfig {
            key_mode: Some(KeyMode::Bidir),
            on_malformed,
            timestamps: Timestamps::Software,
            ..OffloadConfig::default()
        };
        p.configure(&cfg).unwrap();
        let c0 = p.counters().unwrap();
        let seen: Vec<Expect> = mutations()
            .iter()
            .map(|(n, f)| check(&p, &cfg, f, n))
            .collect();
        assert_eq!(sub(p.counters().unwrap(), c0), tally(&seen));
    }
}

fn filters() -> Vec<Predicate> {
    vec![
        rampart_stream::apps::portscan::handshake_filter(),
        rampart_stream::apps::synflood::tcp_filter(),
        Predicate {
            protos: vec![proto::UDP, proto::ICMP],
            ..Predicate::default()
        },
        Predicate {
            tcp_flags: vec![FlagClause {
                mask: tcp::ACK | tcp::RST,
                value: tcp::ACK,
            }],
            ..Predicate::default()
        },
        Predicate {
            sport: vec![
                PortRange { lo: 1, hi: 9 },
                PortRange {
                    lo: 40000,
                    hi: 40000,
                },
            ],
            dport: vec![
                PortRange { lo: 53, hi: 53 },
                PortRange { lo: 80, hi: 443 },
                PortRange {
                    lo: 0x0800,
                    hi: 0x0800,
                },
            ],
            ..Predicate::default()
        },
        Predicate {
            src: vec![
                "10.0.0.0/24".parse().unwrap(),
                "fd66::/16".parse().unwrap(),
                "192.0.2.1/32".parse().unwrap(),
            ],
            dst: vec!["fd10::2/128".parse().unwrap(), "0.0.0.0/1".parse().unwrap()],
            ..Predicate::default()
        },
    ]
}

#[test]
fn offloaded_filters_decide_as_the_userspace_filter() {
    let p = load();
    let mut frames = common::corpus();
    frames.extend(mutations().into_iter().step_by(7));
    for (i, f) in filters().into_iter().enumerate() {
        for on_filtered in [Action::Drop, Action::Pass] {
            let cfg = OffloadConfig {
                key_mode: Some(KeyMode::SynPair),
                filter: Some(f.clone()),
                on_filtered,
                timestamps: Timestamps::Software,
                ..OffloadConfig::default()
            };
            p.configure(&cfg).unwrap();
            let c0 = p.counters().unwrap();
            let seen: Vec<Expect> = frames
                .iter()
                .map(|(n, fr)| check(&p, &cfg, fr, &format!("{n}, filter {i} ({f})")))
                .collect();
            assert!(
                seen.contains(&Expect::Filtered) && seen.contains(&Expect::Record),
                "filter {i} ({f}) both passes and rejects frames of the corpus"
            );
            assert_eq!(sub(p.counters().unwrap(), c0), tally(&seen), "filter {i}");
        }
    }
}

#[test]
fn a_minimum_size_frame_grows_into_the_record() {
    let p = load();
    let cfg = OffloadConfig {
        timestamps: Timestamps::Software,
        ..OffloadConfig::default()
    };
    p.configure(&cfg).unwrap();
    // 14 + 20 + 8 = 42 bytes: shorter than the 56-byte record.
    let f = common::frame(
        "192.0.2.1".parse().unwrap(),
        "198.51.100.2".parse().unwrap(),
        5,
        6,
        common::L4::Udp,
        0,
    );
    assert_eq!(f.len(), 42);
    check(&p, &cfg, &f, "42-byte UDP");
    // And a 1514-byte one shrinks.
    let f = common::frame(
        "192.0.2.1".parse().unwrap(),
        "198.51.100.2".parse().unwrap(),
        5,
        6,
        common::L4::Udp,
        1514 - 42,
    );
    check(&p, &cfg, &f, "1514-byte UDP");
}

/// BPF_PROG_RUN with a given RX queue of `ifindex` (run in its namespace).
fn run_on_queue(prog: RawFd, frame: &[u8], ifindex: u32, queue: u32) -> u32 {
    let mut out = vec![0u8; frame.len() + 512];
    let mut ctx = XdpMd {
        data_end: frame.len() as u32,
        ingress_ifindex: ifindex,
        rx_queue_index: queue,
        ..Default::default()
    };
    let mut opts = libbpf_rs::libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: frame.len() as u32,
        data_out: out.as_mut_ptr().cast(),
        data_size_out: out.len() as u32,
        ctx_in: (&raw mut ctx).cast_const().cast(),
        ctx_size_in: std::mem::size_of::<XdpMd>() as u32,
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: every buffer outlives the call and has the size stated.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(prog, &mut opts) };
    assert_eq!(rc, 0, "BPF_PROG_RUN on queue {queue}");
    opts.retval
}

#[test]
fn records_are_steered_to_the_socket_of_the_key_owner() {
    let lab = rampart_lab::testing::TestLab::up("stsr", 0);
    let p = load();
    const R: u32 = 4;
    let cfg = OffloadConfig {
        key_mode: Some(KeyMode::FiveTuple),
        replicas: R,
        timestamps: Timestamps::Software,
        ..OffloadConfig::default()
    };
    p.configure(&cfg).unwrap();
    // 64 flows: their owners among 4 replicas, from the userspace FlowID.
    let frames: Vec<(Vec<u8>, u32)> = (0..64u16)
        .map(|i| {
            let f = common::frame(
                format!("172.16.0.{}", i + 1).parse().unwrap(),
                "10.10.0.2".parse().unwrap(),
                40000 + i,
                9,
                common::L4::Udp,
                18,
            );
            let mut t = parse_frame(&f, 0).unwrap();
            set_flow_id(&mut t, KeyMode::FiveTuple);
            (f, owner(t.flow_id, R))
        })
        .collect();
    let owners: std::collections::BTreeSet<u32> = frames.iter().map(|x| x.1).collect();
    assert_eq!(owners.len(), R as usize, "64 flows reach every replica");
    let host = lab.host_ns();
    let (prog, map) = (p.prog_fd(), p.xsks_fd());
    rampart_dataplane::netns::run_in(Some(&host), || {
        let ifindex = nix_ifindex(rampart_lab::topology::HOST_IF);
        // host0 has two RX queues: the slot is queue * R + owner.
        for queue in 0..2u32 {
            let xsk = Xsk::new(ifindex, queue, 64, 64).expect("AF_XDP socket on host0");
            for k in 0..R {
                let slot = queue * R + k;
                rampart_dataplane::maps::update_raw(
                    map,
                    &slot.to_ne_bytes(),
                    &(xsk.raw_fd() as u32).to_ne_bytes(),
                    0,
                )
                .unwrap();
                for (f, own) in &frames {
                    let v = run_on_queue(prog, f, ifindex, queue);
                    let want = if *own == k { XDP_REDIRECT } else { XDP_DROP };
                    assert_eq!(v, want, "queue {queue}, socket in slot {slot}, owner {own}");
                    // The other queue's slots are empty for this frame.
                    let other = run_on_queue(prog, f, ifindex, 1 - queue);
                    assert_eq!(other, XDP_DROP, "queue {} has no socket", 1 - queue);
                }
                // SAFETY: deleting a u32 key of the XSKMAP.
                let rc = unsafe {
                    libbpf_rs::libbpf_sys::bpf_map_delete_elem(map, (&raw const slot).cast())
                };
                assert_eq!(rc, 0);
            }
        }
        Ok(())
    })
    .unwrap();
    let c = p.counters().unwrap();
    assert_eq!(c.records, 2 * 64, "each frame redirected once per queue");
    drop(lab);
}

fn nix_ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(i, 0, "{name} exists");
    i
}

#[test]
fn tuples_of_the_corpus_have_the_expected_shape() {
    // Guard for the corpus the tests above rely on: it has TCP, UDP, ICMP,
    // IPv4 and IPv6 tuples.
    let kinds: std::collections::BTreeSet<(u8, bool)> = common::corpus()
        .iter()
        .filter_map(|(_, f)| parse_frame(f, 0).ok())
        .map(|t| (t.proto, t.is_ipv6()))
        .collect();
    for k in [
        (6, false),
        (6, true),
        (17, false),
        (17, true),
        (1, false),
        (58, true),
    ] {
        assert!(kinds.contains(&k), "corpus has {k:?}");
    }
}
