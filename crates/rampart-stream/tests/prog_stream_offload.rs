//! `xdp_stream` (the stream offload) under BPF_PROG_RUN: for every frame of
//! the parser corpus, its truncations and random mutations, in every key
//! mode and with each kind of filter, the program's verdict, output frame
//! and counters are what the userspace pipeline (parse → Filter → FlowID)
//! says they must be: a record byte-identical to the userspace tuple (the
//! timestamp aside), malformed frames never turned into records, filtered
//! frames dropped or passed unchanged as configured. The steering test
//! puts a real AF_XDP socket into one XSKMAP slot at a time and checks that
//! only frames whose key that slot's replica owns are redirected.

use rampart_stream::flowid::{set_flow_id, KeyMode};
use rampart_stream::offload::config::owner;
use rampart_stream::offload::{
    Action, Entry, FlagClause, OffloadConfig, OffloadProgram, PortRange, Predicate, Timestamps,
};
use rampart_stream::parse::{parse_frame, ParseStatus};
use rampart_stream::source::xsk::Xsk;
use rampart_stream::tuple::{proto, tcp, StreamTuple, TupleExt};
use rampart_testkit::corpus::{self, Case};
use rampart_testkit::frame::Frame;
use rampart_testkit::prog::{Counter, ProgCase, Runner, XDP_DROP, XDP_PASS, XDP_REDIRECT};

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
    bytemuck::pod_read_unaligned(data)
}

/// The program's counters, each a reason a frame is counted under.
fn reasons(p: &OffloadProgram) -> Vec<Counter> {
    let c = p.counters().unwrap();
    [
        ("records", c.records),
        ("not_ip", c.not_ip),
        ("truncated", c.truncated),
        ("bad_header", c.bad_header),
        ("too_deep", c.too_deep),
        ("filtered", c.filtered),
        ("rewrite_failed", c.rewrite_failed),
        ("no_socket", c.no_socket),
        ("ts_hw", c.ts_hw),
    ]
    .into_iter()
    .map(|(n, v)| Counter::packets(n, v))
    .collect()
}

fn action(a: Action) -> u32 {
    match a {
        Action::Drop => XDP_DROP,
        Action::Pass => XDP_PASS,
    }
}

/// What the userspace pipeline (parse → Filter → FlowID) says the program
/// must do with `frame` under `cfg`, and the record it must build (no
/// socket is in the XSKMAP here: the record is built, then dropped).
fn expected(
    cfg: &OffloadConfig,
    what: &str,
    frame: &[u8],
) -> (ProgCase, Expect, Option<StreamTuple>) {
    let case = |verdict, reason: &str| ProgCase::new(what, frame.to_vec(), verdict, reason);
    match parse_frame(frame, 0) {
        // Non-IP goes to the stack untouched.
        Err(ParseStatus::NotIp) => (case(XDP_PASS, "not_ip").unchanged(), Expect::NotIp, None),
        // A malformed frame is never rewritten.
        Err(s) => (
            case(action(cfg.on_malformed), s.name()).unchanged(),
            Expect::Malformed(s),
            None,
        ),
        Ok(mut t) => {
            if let Some(f) = &cfg.filter {
                if !f.matches(&t) {
                    let c = case(action(cfg.on_filtered), "filtered").unchanged();
                    return (c, Expect::Filtered, None);
                }
            }
            if let Some(m) = cfg.key_mode {
                set_flow_id(&mut t, m);
            }
            (case(XDP_DROP, "no_socket"), Expect::Record, Some(t))
        }
    }
}

/// Run one frame and check it against the userspace pipeline under `cfg`:
/// verdict, the counter that moved, the frame or the record. Returns what
/// was expected, for coverage checks.
fn check(p: &OffloadProgram, cfg: &OffloadConfig, what: &str, frame: &[u8]) -> Expect {
    let (case, expect, record_of) = expected(cfg, what, frame);
    let before = now_ns();
    let out = Runner::new(p.prog_fd(), || reasons(p)).run(&case);
    let after = now_ns();
    if let Some(mut t) = record_of {
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
    }
    expect
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    NotIp,
    Malformed(ParseStatus),
    Filtered,
    Record,
}

/// Every truncation of the corpus and 1,500 seeded mutations.
fn mutations() -> Vec<Case> {
    let mut v = corpus::truncations();
    v.extend(corpus::mutations(0x0bad_cafe_1234_5678, 1500));
    v
}

#[test]
fn every_key_mode_gives_the_userspace_record() {
    let p = load();
    let corpus = corpus::base();
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
        let seen: Vec<Expect> = corpus
            .iter()
            .map(|c| check(&p, &cfg, &format!("{} ({mode:?})", c.name), &c.frame))
            .collect();
        assert!(seen.contains(&Expect::Record) && seen.contains(&Expect::NotIp));
        for s in [
            ParseStatus::Truncated,
            ParseStatus::BadHeader,
            ParseStatus::TooDeep,
        ] {
            assert!(seen.contains(&Expect::Malformed(s)), "corpus covers {s:?}");
        }
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
        for c in mutations() {
            check(&p, &cfg, &c.name, &c.frame);
        }
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
    let mut frames = corpus::base();
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
            let seen: Vec<Expect> = frames
                .iter()
                .map(|c| check(&p, &cfg, &format!("{}, filter {i} ({f})", c.name), &c.frame))
                .collect();
            assert!(
                seen.contains(&Expect::Filtered) && seen.contains(&Expect::Record),
                "filter {i} ({f}) both passes and rejects frames of the corpus"
            );
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
    let udp = || Frame::udp("192.0.2.1", "198.51.100.2", 5, 6);
    let f = udp().build();
    assert_eq!(f.len(), 42);
    check(&p, &cfg, "42-byte UDP", &f);
    // And a 1514-byte one shrinks.
    check(&p, &cfg, "1514-byte UDP", &udp().zeros(1514 - 42).build());
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
            let f = Frame::udp(&format!("172.16.0.{}", i + 1), "10.10.0.2", 40000 + i, 9)
                .zeros(18)
                .build();
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
                let here = Runner::new(prog, || reasons(&p)).ingress(ifindex, queue);
                let there = Runner::new(prog, || reasons(&p)).ingress(ifindex, 1 - queue);
                for (f, own) in &frames {
                    let case = if *own == k {
                        ProgCase::new(format!("owner {own}"), f.clone(), XDP_REDIRECT, "records")
                    } else {
                        ProgCase::new(format!("owner {own}"), f.clone(), XDP_DROP, "no_socket")
                    };
                    let at = format!("queue {queue}, socket in slot {slot}, {}", case.name);
                    here.run(&ProgCase {
                        name: at,
                        ..case.clone()
                    });
                    // The other queue's slots are empty for this frame.
                    let at = format!("queue {} has no socket, {}", 1 - queue, case.name);
                    there.run(&ProgCase::new(at, f.clone(), XDP_DROP, "no_socket"));
                }
                let removed = rampart_dataplane::maps::delete_raw(map, &slot.to_ne_bytes());
                assert!(removed.unwrap(), "slot {slot} held the socket");
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
    let kinds: std::collections::BTreeSet<(u8, bool)> = corpus::base()
        .iter()
        .filter_map(|c| parse_frame(&c.frame, 0).ok())
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
