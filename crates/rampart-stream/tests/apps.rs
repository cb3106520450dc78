//! The three apps against ground truth, on captures these tests write:
//! exact flow records (counts, packets, bytes, times, end reasons);
//! a scanner among benign hosts flagged and the benign hosts not; a SYN
//! flood flagged and a normal handshake mix not — each identical for any
//! number of source replicas and workers, batching and chaining on or off,
//! pcap or pcapng.
#![allow(clippy::type_complexity)]

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rampart_stream::apps::flowmeter::{self, EndReason, FlowKey, FlowRecord, FlowmeterConfig};
use rampart_stream::apps::portscan::{self, FirstContact, PortscanConfig, ScanAlert};
use rampart_stream::apps::synflood::{self, FloodAlert, SynfloodConfig};
use rampart_stream::apps::EngineOpts;
use rampart_stream::source::pcap::PcapSource;
use rampart_stream::source::PacketSource;
use rampart_stream::tuple::{StreamTuple, TupleExt};
use rampart_testkit::frame::Frame;
use rampart_testkit::rng::Rng;

const S: u64 = 1_000_000_000;

/// Engine settings every app is checked under.
fn setups() -> Vec<(usize, EngineOpts)> {
    vec![
        (
            1,
            EngineOpts {
                workers: 1,
                batch: 1,
                chaining: true,
            },
        ),
        (
            1,
            EngineOpts {
                workers: 1,
                batch: 64,
                chaining: false,
            },
        ),
        (
            3,
            EngineOpts {
                workers: 2,
                batch: 64,
                chaining: true,
            },
        ),
        (
            2,
            EngineOpts {
                workers: 3,
                batch: 1,
                chaining: false,
            },
        ),
    ]
}

fn collect<T: Clone + Send + 'static>() -> (
    Arc<Mutex<Vec<T>>>,
    impl FnMut(Option<T>) + Clone + Send + 'static,
) {
    let v: Arc<Mutex<Vec<T>>> = Arc::default();
    let v2 = Arc::clone(&v);
    let mut local = Vec::new();
    (v, move |x: Option<T>| match x {
        Some(x) => local.push(x),
        None => v2.lock().unwrap().append(&mut local),
    })
}

// ------------------------------------------------------------- flowmeter

struct Expected {
    pkts: Vec<(u64, Vec<u8>)>,
    records: Vec<FlowRecord>,
    noise: (u64, u64, u64), // not_ip, truncated, bad_header
}

fn key(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, l4: L4) -> FlowKey {
    let (proto, sp, dp) = match l4 {
        L4::Tcp(_) => (6, sport, dport),
        L4::Udp => (17, sport, dport),
        // ICMP flows are keyed by addresses; type and code are fields.
        L4::Icmp => (if src.is_ipv6() { 58 } else { 1 }, 0, 0),
    };
    let t = StreamTuple::new_l4(0, src, dst, proto, sp, dp, 0, 0);
    FlowKey {
        src: t.saddr,
        dst: t.daddr,
        sport: sp,
        dport: dp,
        proto,
        v6: src.is_ipv6(),
    }
}

/// ICMP type and code of a one-way echo-request flow (the generator's).
fn icmp_of(l4: L4, v6: bool) -> [u8; 4] {
    match l4 {
        L4::Icmp => [if v6 { 128 } else { 8 }, 0, 0, 0],
        _ => [0; 4],
    }
}

/// Flows made of segments: packets within a segment are < 2 s apart,
/// segments of one 5-tuple are 20 s apart (idle timeout 15 s); one long
/// flow sends a packet a second for 100 s (active timeout 30 s).
fn flow_traffic() -> Expected {
    let mut r = Rng::new(42);
    let idle = 15 * S;
    let mut pkts: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut records = Vec::new();
    for f in 0..240u32 {
        let v6 = f % 5 == 4;
        let (src, dst) = if v6 {
            (
                IpAddr::V6(Ipv6Addr::new(0xfd66, 0, 0, 0, 0, 0, 0, f as u16 + 1)),
                IpAddr::V6(Ipv6Addr::new(0xfd10, 0, 0, 0, 0, 0, 0, 2)),
            )
        } else {
            (
                IpAddr::V4(Ipv4Addr::from(0xac10_0000 + f)),
                IpAddr::V4(Ipv4Addr::new(10, 10, 0, 2)),
            )
        };
        let l4 = match f % 3 {
            0 => L4::Tcp(0x18),
            1 => L4::Udp,
            _ => L4::Icmp,
        };
        let (sport, dport) = (1024 + f as u16, 80 + (f % 7) as u16);
        let k = key(src, dst, sport, dport, l4);
        let segments = 1 + r.below(3);
        let mut t = T0_NS + r.below(40 * S) / 1000 * 1000; // µs: classic pcap resolution
        for _ in 0..segments {
            let n = 1 + r.below(12);
            let (mut first, mut last, mut bytes, mut flags) = (0, 0, 0, 0u8);
            for i in 0..n {
                let fr = frame(src, dst, sport, dport, l4, r.below(1200) as usize);
                if i == 0 {
                    first = t;
                }
                last = t;
                bytes += ip_len(&fr);
                if let L4::Tcp(fl) = l4 {
                    flags |= fl;
                }
                pkts.push((t, fr));
                t += 1000 + r.below(2 * S - 1000) / 1000 * 1000;
            }
            records.push(FlowRecord {
                key: k,
                first_ns: first,
                last_ns: last,
                packets: n,
                bytes,
                tcp_flags: flags,
                end_reason: EndReason::IdleTimeout,
                flow_id: 0,
                icmp: icmp_of(l4, v6),
                ..Default::default()
            });
            t = last + 20 * S;
        }
    }
    // The long flow: a packet a second for 100 s, active timeout 30 s.
    let (src, dst) = (
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)),
        IpAddr::V4(Ipv4Addr::new(10, 10, 0, 2)),
    );
    let k = key(src, dst, 5555, 443, L4::Tcp(0x10));
    for chunk in 0..4u64 {
        let (mut bytes, mut n) = (0, 0);
        let first = T0_NS + 5 * S + chunk * 30 * S;
        let mut last = first;
        for i in 0..30u64 {
            let s = chunk * 30 + i;
            if s >= 100 {
                break;
            }
            let fr = frame(src, dst, 5555, 443, L4::Tcp(0x10), 100);
            last = T0_NS + 5 * S + s * S;
            bytes += ip_len(&fr);
            n += 1;
            pkts.push((last, fr));
        }
        let reason = if chunk < 3 {
            EndReason::ActiveTimeout
        } else {
            EndReason::IdleTimeout
        };
        records.push(FlowRecord {
            key: k,
            first_ns: first,
            last_ns: last,
            packets: n,
            bytes,
            tcp_flags: 0x10,
            end_reason: reason,
            flow_id: 0,
            ..Default::default()
        });
    }
    // Noise that must not become tuples: ARP, cut IPv4 headers, bad IHL.
    let base = || Frame::udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2).payload(&[0x5a; 10]);
    let arp = Frame::arp([1, 1, 1, 1], [2, 2, 2, 2]).build();
    let cut = base().truncate(14 + 12).build();
    let bad = base().ihl(3).build();
    for i in 0..10u64 {
        pkts.push((T0_NS + i * 3 * S + 7, arp.clone()));
        pkts.push((T0_NS + i * 3 * S + 8, cut.clone()));
        pkts.push((T0_NS + i * 3 * S + 9, bad.clone()));
    }
    pkts.sort_by_key(|p| p.0);
    // A record ends at min(last + idle, first + active) — the active
    // timeout when it comes first (NetFlow) — unless the capture ends before
    // that: then it ends "forced" (end of input).
    let end = pkts.last().unwrap().0;
    let active = 30 * S;
    for rec in &mut records {
        let (due, reason) = if rec.first_ns + active < rec.last_ns + idle {
            (rec.first_ns + active, EndReason::ActiveTimeout)
        } else {
            (rec.last_ns + idle, EndReason::IdleTimeout)
        };
        rec.end_reason = if due > end {
            EndReason::ForcedEnd
        } else {
            reason
        };
    }
    records.sort();
    Expected {
        pkts,
        records,
        noise: (10, 10, 10),
    }
}

fn run_flowmeter(
    path: &str,
    replicas: usize,
    e: EngineOpts,
) -> (Vec<FlowRecord>, rampart_stream::source::SourceReport) {
    let src = PcapSource::open(path, replicas, None).unwrap();
    let stats = src.stats();
    let (out, sink) = collect();
    let cfg = FlowmeterConfig {
        idle: Duration::from_secs(15),
        active: Duration::from_secs(30),
        engine: e,
    };
    flowmeter::build(src, &cfg, sink).unwrap().run().unwrap();
    let mut v: Vec<FlowRecord> = out
        .lock()
        .unwrap()
        .iter()
        .map(|r| FlowRecord { flow_id: 0, ..*r })
        .collect();
    v.sort();
    (v, stats.snapshot())
}

#[test]
fn flowmeter_exact_records_pcap_and_pcapng() {
    let ex = flow_traffic();
    let pcap = write_pcap("flows.pcap", &ex.pkts);
    let pcapng = write_pcapng("flows.pcapng", &ex.pkts);
    let total_pkts: u64 = ex.records.iter().map(|r| r.packets).sum();
    let total_bytes: u64 = ex.records.iter().map(|r| r.bytes).sum();
    assert!(ex.records.len() > 400, "{} records", ex.records.len());
    for (file, fmt) in [(&pcap, "pcap"), (&pcapng, "pcapng")] {
        for (replicas, e) in setups() {
            let (got, st) = run_flowmeter(file.path(), replicas, e.clone());
            assert_eq!(
                got.len(),
                ex.records.len(),
                "{fmt} replicas {replicas} {e:?}: flow count"
            );
            let extra: Vec<_> = got
                .iter()
                .filter(|r| !ex.records.contains(r))
                .take(3)
                .collect();
            let missing: Vec<_> = ex
                .records
                .iter()
                .filter(|r| !got.contains(r))
                .take(3)
                .collect();
            assert!(
                extra.is_empty() && missing.is_empty(),
                "{fmt} replicas {replicas} {e:?}:\nextra {extra:?}\nmissing {missing:?}"
            );
            assert_eq!(got.iter().map(|r| r.packets).sum::<u64>(), total_pkts);
            assert_eq!(got.iter().map(|r| r.bytes).sum::<u64>(), total_bytes);
            assert_eq!(
                (st.not_ip, st.truncated, st.bad_header),
                ex.noise,
                "{fmt}: frames without a tuple"
            );
            assert_eq!(st.tuples, total_pkts);
        }
    }
    // Per-protocol counters add up.
    let mut sum = flowmeter::Summary::default();
    for r in &ex.records {
        sum.add(r);
    }
    assert_eq!(sum.flows, ex.records.len() as u64);
    assert_eq!(
        sum.protocols.values().map(|p| p.packets).sum::<u64>(),
        total_pkts
    );
    assert_eq!(
        sum.protocols.len(),
        4,
        "TCP, UDP, ICMP, IPv6-ICMP: {:?}",
        sum.protocols.keys()
    );
}

#[test]
fn bad_captures_are_refused_with_a_clear_error() {
    let e = PcapSource::open("/nonexistent/x.pcap", 1, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot open"), "{e}");
    let junk = TmpFile(tmp("junk"));
    std::fs::write(&junk.0, b"this is not a capture file at all, sorry").unwrap();
    let e = PcapSource::open(junk.path(), 1, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a pcap or pcapng file"), "{e}");
    // A capture cut in the middle of a record.
    let ex = flow_traffic();
    let good = write_pcap("cut.pcap", &ex.pkts[..10]);
    let bytes = std::fs::read(&good.0).unwrap();
    std::fs::write(&good.0, &bytes[..bytes.len() - 7]).unwrap();
    let e = PcapSource::open(good.path(), 1, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 9"), "{e}");
    let e = PcapSource::open(good.path(), 0, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("replicas=0"), "{e}");
}

// -------------------------------------------------------------- portscan

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

/// A full TCP connection: handshake, data, close.
fn connection(p: &mut Vec<(u64, Vec<u8>)>, t: u64, c: IpAddr, s: IpAddr, cport: u16, sport: u16) {
    let ms = 1_000_000;
    p.push((t, frame(c, s, cport, sport, L4::Tcp(0x02), 0)));
    p.push((t + ms, frame(s, c, sport, cport, L4::Tcp(0x12), 0)));
    p.push((t + 2 * ms, frame(c, s, cport, sport, L4::Tcp(0x10), 0)));
    p.push((t + 3 * ms, frame(c, s, cport, sport, L4::Tcp(0x18), 300)));
    p.push((t + 4 * ms, frame(s, c, sport, cport, L4::Tcp(0x18), 1200)));
    p.push((t + 5 * ms, frame(c, s, cport, sport, L4::Tcp(0x11), 0)));
    p.push((t + 6 * ms, frame(s, c, sport, cport, L4::Tcp(0x11), 0)));
    p.push((t + 7 * ms, frame(c, s, cport, sport, L4::Tcp(0x10), 0)));
}

fn scan_traffic() -> Vec<(u64, Vec<u8>)> {
    let mut r = Rng::new(7);
    let mut p = Vec::new();
    let servers: Vec<IpAddr> = (1..=6).map(|i| v4(10, 10, 1, i)).collect();
    // 25 benign clients, 12 connections each to random servers; client 0
    // also hits a closed port once (RST-ACK) and client 1 once gets no answer.
    for c in 0..25u8 {
        let client = v4(172, 16, 0, 10 + c);
        for k in 0..12u16 {
            let t = T0_NS + r.below(60 * S);
            let s = servers[r.below(servers.len() as u64) as usize];
            connection(&mut p, t, client, s, 30000 + k, 80);
        }
        if c == 0 {
            let t = T0_NS + 30 * S;
            p.push((t, frame(client, servers[0], 40000, 23, L4::Tcp(0x02), 0)));
            p.push((
                t + 1_000_000,
                frame(servers[0], client, 23, 40000, L4::Tcp(0x14), 0),
            ));
        }
        if c == 1 {
            p.push((
                T0_NS + 31 * S,
                frame(client, v4(10, 10, 9, 9), 40001, 80, L4::Tcp(0x02), 0),
            ));
        }
    }
    // The scanner: port 22 on 40 addresses of 10.10.2.0/24, 0.5 s apart;
    // most are silent, every 7th answers RST-ACK, one answers SYN-ACK.
    let scanner = v4(203, 0, 113, 66);
    for i in 0..40u8 {
        let t = T0_NS + 5 * S + u64::from(i) * S / 2;
        let target = v4(10, 10, 2, i + 1);
        p.push((t, frame(scanner, target, 50000, 22, L4::Tcp(0x02), 0)));
        if i == 3 {
            p.push((
                t + 1_000_000,
                frame(target, scanner, 22, 50000, L4::Tcp(0x12), 0),
            ));
        } else if i % 7 == 0 {
            p.push((
                t + 1_000_000,
                frame(target, scanner, 22, 50000, L4::Tcp(0x14), 0),
            ));
        }
    }
    p.sort_by_key(|x| x.0);
    p
}

fn run_portscan(path: &str, replicas: usize, e: EngineOpts, fc: FirstContact) -> Vec<ScanAlert> {
    let src = PcapSource::open(path, replicas, None).unwrap();
    let (out, sink) = collect();
    let cfg = PortscanConfig {
        first_contact: fc,
        engine: e,
        ..PortscanConfig::default()
    };
    portscan::build(src, &cfg, sink).unwrap().run().unwrap();
    let mut v = out.lock().unwrap().clone();
    v.sort_by_key(|a| (a.ts_ns, a.src));
    v
}

#[test]
fn portscan_flags_the_scanner_and_only_it() {
    let f = write_pcap("scan.pcap", &scan_traffic());
    let mut first: Option<Vec<ScanAlert>> = None;
    for (replicas, e) in setups() {
        let alerts = run_portscan(f.path(), replicas, e.clone(), FirstContact::Host);
        let flagged: BTreeSet<String> = alerts.iter().map(|a| a.src.to_string()).collect();
        assert_eq!(
            flagged,
            BTreeSet::from(["203.0.113.66".to_string()]),
            "replicas {replicas} {e:?}"
        );
        assert_eq!(alerts.len(), 1);
        let d = &alerts[0].details;
        // θ0 = 0.8, θ1 = 0.2, α = 0.01, β = 0.99: ln Λ ≥ ln 99 needs 4 net failures.
        assert!(
            d.failures >= 4 && d.log_likelihood_ratio >= d.log_eta1,
            "{d:?}"
        );
        let ev = serde_json::to_value(alerts[0].event()).unwrap();
        for f in [
            "timestamp",
            "ts",
            "event_type",
            "src_ip",
            "proto",
            "flow_id",
            "note",
            "msg",
            "alert",
        ] {
            assert!(ev.get(f).is_some(), "alert JSON lacks {f}: {ev}");
        }
        assert_eq!(ev["alert"]["signature_id"], 9_000_001);
        match &first {
            None => first = Some(alerts),
            Some(f) => assert_eq!(
                f, &alerts,
                "replicas {replicas} {e:?}: same alert, same details"
            ),
        }
    }
}

#[test]
fn portscan_flags_a_vertical_scan_by_default() {
    let mut p = Vec::new();
    let (scanner, target) = (v4(198, 51, 100, 9), v4(10, 10, 1, 1));
    for port in 1..=60u16 {
        p.push((
            T0_NS + u64::from(port) * S / 10,
            frame(scanner, target, 41000, port, L4::Tcp(0x02), 0),
        ));
        p.push((
            T0_NS + u64::from(port) * S / 10 + 1000,
            frame(target, scanner, port, 41000, L4::Tcp(0x14), 0),
        ));
    }
    let f = write_pcap("vscan.pcap", &p);
    assert!(
        run_portscan(f.path(), 1, EngineOpts::default(), FirstContact::Host).is_empty(),
        "one host is one first contact"
    );
    let a = run_portscan(
        f.path(),
        2,
        EngineOpts {
            workers: 2,
            ..EngineOpts::default()
        },
        // The default: a responder's service is a first contact.
        PortscanConfig::default().first_contact,
    );
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].src.to_string(), "198.51.100.9");
    assert_eq!(
        a[0].details.first_contacts, 4,
        "four failures in a row decide"
    );
}

#[test]
fn portscan_forgets_idle_hosts() {
    // Six silent first contacts, 20 s apart: four in a row flag a scanner
    // when the walk is kept, never when it is forgotten after 10 s idle.
    let (scanner, mut p) = (v4(198, 51, 100, 77), Vec::new());
    for i in 0..6u8 {
        p.push((
            T0_NS + u64::from(i) * 20 * S,
            frame(scanner, v4(10, 10, 3, i + 1), 42000, 22, L4::Tcp(0x02), 0),
        ));
    }
    let f = write_pcap("slowscan.pcap", &p);
    let run = |idle: u64| {
        let src = PcapSource::open(f.path(), 1, None).unwrap();
        let (out, sink) = collect();
        let cfg = PortscanConfig {
            host_idle: std::time::Duration::from_secs(idle),
            ..PortscanConfig::default()
        };
        portscan::build(src, &cfg, sink).unwrap().run().unwrap();
        let v = out.lock().unwrap().clone();
        v
    };
    let kept = run(600);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].details.first_contacts, 4);
    assert!(
        run(10).is_empty(),
        "a walk idle for 20 s > 10 s must restart"
    );
    let bad = PortscanConfig {
        host_idle: std::time::Duration::ZERO,
        ..PortscanConfig::default()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("host-idle"));
}

// -------------------------------------------------------------- synflood

fn flood_traffic() -> Vec<(u64, Vec<u8>)> {
    let mut r = Rng::new(99);
    let mut p = Vec::new();
    let (server, victim) = (v4(10, 10, 0, 2), v4(10, 10, 0, 3));
    // Normal mix over 40 s: 400 complete connections to each server
    // (~100 per 10 s window), plus 20 refused ones (RST-ACK).
    for i in 0..400u64 {
        let c = v4(172, 16, (i / 200) as u8, (i % 200) as u8 + 1);
        for s in [server, victim] {
            connection(&mut p, T0_NS + r.below(40 * S), c, s, 20000 + i as u16, 443);
        }
    }
    for i in 0..20u64 {
        let c = v4(172, 17, 0, i as u8 + 1);
        let t = T0_NS + r.below(40 * S);
        p.push((t, frame(c, server, 33000, 8080, L4::Tcp(0x02), 0)));
        p.push((t + 1000, frame(server, c, 8080, 33000, L4::Tcp(0x14), 0)));
    }
    // The flood: 3000 SYNs from spoofed sources to the victim in [20 s, 30 s);
    // the victim answers each with a SYN-ACK that nobody acknowledges.
    for _i in 0..3000u64 {
        let spoof = IpAddr::V4(Ipv4Addr::from(0x6440_0000u32 + r.below(1 << 20) as u32));
        let sp = 1024 + r.below(60000) as u16;
        let t = T0_NS + 20 * S + r.below(10 * S - 2_000_000);
        p.push((t, frame(spoof, victim, sp, 443, L4::Tcp(0x02), 0)));
        p.push((
            t + 1_000_000,
            frame(victim, spoof, 443, sp, L4::Tcp(0x12), 0),
        ));
    }
    p.sort_by_key(|x| x.0);
    p
}

fn run_synflood(path: &str, replicas: usize, e: EngineOpts) -> Vec<FloodAlert> {
    let src = PcapSource::open(path, replicas, None).unwrap();
    let (out, sink) = collect();
    let cfg = SynfloodConfig {
        engine: e,
        ..SynfloodConfig::default()
    };
    synflood::build(src, &cfg, sink).unwrap().run().unwrap();
    let mut v = out.lock().unwrap().clone();
    v.sort_by_key(|a| (a.window_start_ns, a.dst));
    v
}

#[test]
fn synflood_flags_the_flood_and_not_the_normal_mix() {
    let f = write_pcap("flood.pcap", &flood_traffic());
    for (replicas, e) in setups() {
        let a = run_synflood(f.path(), replicas, e.clone());
        assert_eq!(a.len(), 1, "replicas {replicas} {e:?}: {a:?}");
        let x = &a[0];
        assert_eq!(x.dst.to_string(), "10.10.0.3");
        assert_eq!(x.port, 443);
        assert_eq!(
            (x.window_start_ns, x.window_end_ns),
            (T0_NS + 20 * S, T0_NS + 30 * S)
        );
        // Every flood SYN is incomplete; the normal connections of that window complete
        // (up to the few whose ACK falls into the next window).
        assert!(
            (3000..3010).contains(&x.details.incomplete_handshakes),
            "{:?}",
            x.details
        );
        assert!(x.details.synack >= 3000);
        let ev = serde_json::to_value(x.event()).unwrap();
        for f in [
            "timestamp",
            "ts",
            "event_type",
            "dest_ip",
            "dest_port",
            "proto",
            "flow_id",
            "note",
            "msg",
            "alert",
        ] {
            assert!(ev.get(f).is_some(), "alert JSON lacks {f}: {ev}");
        }
    }
    // Without the flood: no alert at all.
    let normal: Vec<_> = flood_traffic()
        .into_iter()
        .filter(|(_, fr)| {
            let t = rampart_stream::parse::parse_frame(fr, 0).unwrap();
            !(t.src_ip().to_string().starts_with("100.")
                || t.dst_ip().to_string().starts_with("100."))
        })
        .collect();
    let f = write_pcap("normal.pcap", &normal);
    assert!(run_synflood(f.path(), 2, EngineOpts::default()).is_empty());
}

/// What the tap on the server's own interface sees: its ingress only, no
/// SYN-ACK and no RST of the server. A flood's SYNs to one port still
/// alert; a SYN scan of 2,000 ports of one host (nmap -sS: the closed
/// ports' refusals unseen, so every SYN looks incomplete) does not.
#[test]
fn synflood_from_the_servers_ingress_alone_flags_the_flood_not_a_scan() {
    let victim = v4(10, 10, 0, 3);
    let ingress: Vec<_> = flood_traffic()
        .into_iter()
        .filter(|(_, fr)| {
            let t = rampart_stream::parse::parse_frame(fr, 0).unwrap();
            t.src_ip() != victim && t.src_ip() != v4(10, 10, 0, 2)
        })
        .collect();
    let f = write_pcap("flood-ingress.pcap", &ingress);
    let a = run_synflood(f.path(), 2, EngineOpts::default());
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(
        (a[0].dst.to_string(), a[0].port),
        ("10.10.0.3".to_string(), 443)
    );
    assert_eq!(a[0].details.synack, 0, "no answer seen");
    assert!(
        a[0].details.incomplete_handshakes >= 3000,
        "{:?}",
        a[0].details
    );

    // nmap -sS of ports 1-2000: a SYN each (two for the open ones, whose
    // SYN-ACK the scanner resets), in 2 s; also the client's RSTs.
    let (scanner, target) = (v4(198, 51, 100, 7), v4(10, 10, 0, 2));
    let mut p = Vec::new();
    for port in 1..=2000u16 {
        let t = T0_NS + u64::from(port) * 1_000_000;
        p.push((t, frame(scanner, target, 45000, port, L4::Tcp(0x02), 0)));
        if port == 22 || port == 80 {
            p.push((
                t + 500,
                frame(scanner, target, 45000, port, L4::Tcp(0x04), 0),
            ));
        }
    }
    let f = write_pcap("scan-ingress.pcap", &p);
    assert!(
        run_synflood(f.path(), 2, EngineOpts::default()).is_empty(),
        "a port scan is not a SYN flood"
    );
}
