//! The stream offload end to end, one lab per app: the same traffic (the
//! lab generator, or crafted frames injected from `wan` with an AF_PACKET
//! socket) goes through the EMULATED NIC to host0, once into the raw
//! AF_XDP baseline (`xdp_stream_rx`, parsed in userspace) and once into
//! `xdp_stream` (parse, FlowID, filter in XDP; tuple records steered to two
//! source replicas over shared-UMEM sockets), and the app's results are the
//! same — up to timestamps, which are receive times.

mod common;

use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::L4;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_lab::topology;
use rampart_stream::apps::flowmeter::{self, FlowRecord, FlowmeterConfig};
use rampart_stream::apps::portscan::{self, PortscanConfig, ScanAlert};
use rampart_stream::apps::synflood::{self, FloodAlert, SynfloodConfig};
use rampart_stream::apps::EngineOpts;
use rampart_stream::engine::Pipeline;
use rampart_stream::offload::{self, AppGraph, Target, Timestamps};
use rampart_stream::source::afxdp::{AfXdpConfig, AfXdpSource};
use rampart_stream::source::xdp_tuple::{XdpTupleConfig, XdpTupleSource};
use rampart_stream::source::{AnySource, PacketSource};
use rampart_stream::tuple::tcp;

/// Source replicas (and workers) with the offload: two, so steering and
/// the shared UMEM are exercised.
const REPLICAS: u32 = 2;

fn rx(lab: &TestLab) -> AfXdpConfig {
    AfXdpConfig {
        netns: Some(lab.host_ns()),
        iface: topology::HOST_IF.into(),
        // host0 has two RX queues; frames may arrive on either.
        queues: 2,
        seconds: Some(60.0),
        // Room for every frame a test sends (≤ 20,000) on one socket: a
        // replica thread the scheduler keeps off the CPU for a while (other
        // work on this machine) must not cost frames, whatever the timing.
        frames: 32_768,
        ring: 32_768,
        // host0 has addresses; these tests' frames are its only traffic.
        consume: true,
        ..AfXdpConfig::default()
    }
}

fn baseline(lab: &TestLab) -> AnySource {
    AnySource::AfXdp(AfXdpSource::open(rx(lab)).expect("raw AF_XDP source"))
}

fn offloaded(lab: &TestLab, g: &AppGraph) -> (AnySource, XdpTupleSource) {
    let plan = offload::plan(
        g,
        Target::HostXdp,
        REPLICAS,
        std::path::Path::new(rampart_bpf::XDP_STREAM_OBJ),
    )
    .expect("plan");
    let s = XdpTupleSource::open(XdpTupleConfig::from_plan(&plan, &rx(lab)).unwrap())
        .expect("offloaded source");
    (AnySource::XdpTuple(s.clone()), s)
}

/// Send `frames` out of wan0 in order, from one CPU (so they reach host0
/// on one RX queue, in order).
fn inject(lab: &TestLab, frames: &[Vec<u8>]) {
    rampart_dataplane::netns::run_in(Some(&lab.wan_ns()), || {
        let c = std::ffi::CString::new(topology::WAN_IF).unwrap();
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) };
        assert_ne!(ifindex, 0);
        // SAFETY: a zeroed cpu_set_t with CPU 0 set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
        // SAFETY: plain syscall; the fd is owned below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        assert!(fd >= 0, "AF_PACKET socket");
        // SAFETY: a fresh fd.
        let _own = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: zeroed sockaddr_ll, then filled.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_ifindex = ifindex as i32;
        sa.sll_halen = 6;
        for f in frames {
            // SAFETY: valid buffer and address.
            let n = unsafe {
                libc::sendto(
                    fd,
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    (&raw const sa).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(
                n,
                f.len() as isize,
                "sendto: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    })
    .unwrap();
}

/// Run `p` while `drive` sends traffic; stop once the source accounted
/// for `frames` frames (or 20 s passed).
fn drive(src: &AnySource, p: Pipeline, frames: u64, drive: impl FnOnce()) {
    let stop = p.cancel_flag();
    let stats = src.stats();
    let h = std::thread::spawn(move || p.run());
    std::thread::sleep(Duration::from_millis(100));
    drive();
    let t0 = Instant::now();
    while stats.frames.load(Ordering::Relaxed) < frames && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the last records drain through the rings.
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap().expect("pipeline");
    assert!(
        stats.frames.load(Ordering::Relaxed) >= frames,
        "source saw {} of {frames} frames",
        stats.frames.load(Ordering::Relaxed)
    );
}

fn engine() -> EngineOpts {
    EngineOpts {
        workers: REPLICAS as usize,
        ..EngineOpts::default()
    }
}

/// (key, packets, bytes, flags, flow_id) of the generator's flows.
type FlowSummary = BTreeMap<String, (u64, u64, u8, u32)>;

fn flows(recs: &[FlowRecord]) -> FlowSummary {
    recs.iter()
        .filter(|r| r.key.proto == 17 && r.key.dport == 9)
        .map(|r| {
            (
                format!(
                    "{}:{}>{}:{}",
                    r.key.src_addr(),
                    r.key.sport,
                    r.key.dst_addr(),
                    r.key.dport
                ),
                (r.packets, r.bytes, r.tcp_flags, r.flow_id),
            )
        })
        .collect()
}

#[test]
fn flowmeter_offloaded_gives_the_baselines_flows() {
    let lab = TestLab::up("offm", 0);
    let n = 20_000u64;
    let spec = GenSpec {
        sources: 300,
        proto: Proto::Udp,
        limit: Limit::Count(n),
        pps: Some(100_000.0),
        ..GenSpec::default()
    };
    let cfg = FlowmeterConfig {
        engine: engine(),
        ..FlowmeterConfig::default()
    };
    let mut results = Vec::new();
    for on in [false, true] {
        let (src, tuple) = if on {
            let (a, t) = offloaded(&lab, &flowmeter::graph(&cfg));
            (a, Some(t))
        } else {
            (baseline(&lab), None)
        };
        let out: Arc<Mutex<Vec<FlowRecord>>> = Arc::default();
        let o2 = Arc::clone(&out);
        let mut local = Vec::new();
        let p = flowmeter::build(src.clone(), &cfg, move |r: Option<FlowRecord>| match r {
            Some(r) => local.push(r),
            None => o2.lock().unwrap().append(&mut local),
        })
        .unwrap();
        if on {
            // Parsing runs in XDP; the connection parts and the flow window
            // in userspace (ICMP requests and replies share a flow but no
            // FlowID, so the key-by stays).
            assert_eq!(p.operators(), ["xdp-tuple", "part", "flows", "export"]);
        }
        // A fresh generator per run: the same schedule from its start, so
        // the same frames in the same order.
        let gen = Generator::new(&lab, &spec).expect("generator");
        drive(&src, p, n, || {
            let sent = gen.run(&AtomicBool::new(false)).unwrap();
            assert_eq!(sent.sent_packets, n);
        });
        let f = flows(&out.lock().unwrap());
        assert_eq!(f.len(), 300, "one flow per source ({on})");
        assert_eq!(
            f.values().map(|v| v.0).sum::<u64>(),
            n,
            "every packet once ({on}, {:?})",
            src.stats().snapshot()
        );
        if let Some(t) = tuple {
            let c = t.counters().unwrap();
            assert!(c.records >= n, "{c:?}");
            assert_eq!(c.rewrite_failed, 0, "{c:?}");
            // Every generator frame reached a socket (the flow sums above
            // are exact); the lab's own IPv6 frames (DAD, MLD, ND — sent by
            // the kernel from any CPU) can arrive on an RX queue this test
            // binds no socket to and are counted as no_socket: a handful.
            assert!(c.no_socket <= 16, "{c:?}");
            assert_eq!(t.bad_records(), 0);
            assert_eq!(src.stats().snapshot().dropped, 0);
            // veth has RX metadata callbacks but no timestamps for these frames.
            assert_eq!(
                t.timestamps(),
                Timestamps::RxMeta,
                "device-bound entry loaded"
            );
            assert_eq!(c.ts_hw, 0, "ENODATA on veth: software time");
        }
        results.push(f);
    }
    let diff: Vec<_> = results[0]
        .iter()
        .filter(|(k, v)| results[1].get(*k) != Some(v))
        .take(5)
        .map(|(k, v)| (k, v, results[1].get(k)))
        .collect();
    assert!(
        diff.is_empty() && results[0].len() == results[1].len(),
        "same flows, packets, bytes, flags and FlowIDs with and without the offload; first differences (flow, off, on): {diff:?}"
    );
}

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

/// A TCP segment with `flags`.
fn seg(src: &str, dst: &str, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    common::frame(ip(src), ip(dst), sport, dport, L4::Tcp(flags), 6)
}

#[test]
fn portscan_offloaded_flags_the_same_scanners() {
    let lab = TestLab::up("offp", 0);
    // 8 scanners: SYNs to 6 responders each, answered by RST-ACK or not at
    // all; 8 benign hosts: every SYN answered by SYN-ACK and completed;
    // UDP and ICMP noise, which the offloaded filter drops in XDP.
    let mut frames = Vec::new();
    let mut noise = 0u64;
    for i in 0..8 {
        for r in 0..6 {
            let (s, d) = (format!("172.16.1.{}", i + 1), format!("10.20.0.{}", r + 1));
            let sport = 40000 + r;
            frames.push(seg(&s, &d, sport, 80, tcp::SYN));
            if r % 2 == 0 {
                frames.push(seg(&d, &s, 80, sport, tcp::RST | tcp::ACK));
            }
            let (b, e) = (format!("172.16.2.{}", i + 1), format!("10.20.1.{}", r + 1));
            frames.push(seg(&b, &e, sport, 443, tcp::SYN));
            frames.push(seg(&e, &b, 443, sport, tcp::SYN | tcp::ACK));
            frames.push(seg(&b, &e, sport, 443, tcp::ACK));
            frames.push(common::frame(ip(&b), ip(&e), 5353, 53, L4::Udp, 20));
            frames.push(common::frame(ip(&s), ip(&e), 0, 0, L4::Icmp, 8));
            noise += 2;
        }
    }
    let cfg = PortscanConfig {
        engine: engine(),
        ..PortscanConfig::default()
    };
    let mut results = Vec::new();
    for on in [false, true] {
        let (src, tuple) = if on {
            let (a, t) = offloaded(&lab, &portscan::graph(&cfg));
            (a, Some(t))
        } else {
            (baseline(&lab), None)
        };
        let alerts: Arc<Mutex<Vec<ScanAlert>>> = Arc::default();
        let a2 = Arc::clone(&alerts);
        let p = portscan::build(src.clone(), &cfg, move |a: Option<ScanAlert>| {
            if let Some(a) = a {
                a2.lock().unwrap().push(a);
            }
        })
        .unwrap();
        if on {
            assert!(
                !p.operators().contains(&"handshake".to_string()),
                "the handshake filter runs in XDP"
            );
        }
        drive(&src, p, frames.len() as u64, || inject(&lab, &frames));
        if let Some(t) = tuple {
            // The source's figure is XDP's counter as of its last refresh;
            // the stack's own packets on the link (IPv6 neighbour discovery,
            // MLD) are filtered too and may arrive at any moment, so read
            // the source first and XDP's counter after.
            let reported = src.stats().snapshot().filtered;
            let c = t.counters().unwrap();
            assert!(c.filtered >= noise, "UDP and ICMP dropped in XDP: {c:?}");
            assert!(
                (noise..=c.filtered).contains(&reported),
                "the source reports XDP's filtered frames: {reported} of {c:?}"
            );
        }
        let mut got: Vec<(String, u64, u64)> = alerts
            .lock()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a.src.to_string(),
                    a.details.first_contacts,
                    a.details.failures,
                )
            })
            .collect();
        got.sort();
        let want: Vec<(String, u64, u64)> = (0..8)
            .map(|i| (format!("172.16.1.{}", i + 1), 4, 4))
            .collect();
        assert_eq!(
            got, want,
            "the 8 scanners, each after 4 failed first contacts ({on})"
        );
        results.push(got);
    }
    assert_eq!(results[0], results[1]);
}

#[test]
fn synflood_offloaded_counts_the_same_incomplete_handshakes() {
    let lab = TestLab::up("offs", 0);
    // 600 half-open handshakes to 10.10.0.2:80, 100 complete ones, UDP noise.
    let mut frames = Vec::new();
    for i in 0..600u32 {
        let s = format!("172.16.{}.{}", 10 + i / 250, 1 + i % 250);
        frames.push(seg(
            &s,
            "10.10.0.2",
            30000 + (i % 1000) as u16,
            80,
            tcp::SYN,
        ));
    }
    for i in 0..100u32 {
        let s = format!("172.17.0.{}", 1 + i);
        frames.push(seg(&s, "10.10.0.2", 31000, 80, tcp::SYN));
        frames.push(seg("10.10.0.2", &s, 80, 31000, tcp::SYN | tcp::ACK));
        frames.push(seg(&s, "10.10.0.2", 31000, 80, tcp::ACK));
        frames.push(common::frame(ip(&s), ip("10.10.0.2"), 1, 9, L4::Udp, 0));
    }
    let cfg = SynfloodConfig {
        threshold: 100,
        window: common::LIVE_SYN_WINDOW,
        engine: engine(),
        ..SynfloodConfig::default()
    };
    let mut results = Vec::new();
    for on in [false, true] {
        let (src, tuple) = if on {
            let (a, t) = offloaded(&lab, &synflood::graph(&cfg));
            (a, Some(t))
        } else {
            (baseline(&lab), None)
        };
        let alerts: Arc<Mutex<Vec<FloodAlert>>> = Arc::default();
        let a2 = Arc::clone(&alerts);
        let p = synflood::build(src.clone(), &cfg, move |a: Option<FloodAlert>| {
            if let Some(a) = a {
                a2.lock().unwrap().push(a);
            }
        })
        .unwrap();
        if on {
            // Filter in XDP; the handshake window takes the steered records
            // one-to-one: replica threads + the rest of the graph.
            assert!(!p.operators().contains(&"tcp-handshake".to_string()));
        }
        drive(&src, p, frames.len() as u64, || inject(&lab, &frames));
        if let Some(t) = tuple {
            assert!(t.counters().unwrap().filtered >= 100);
        }
        let a = alerts.lock().unwrap().clone();
        assert!(
            !a.is_empty() && a.len() <= 2,
            "one alert (two if the burst straddles an hour boundary): {a:?}"
        );
        assert!(a
            .iter()
            .all(|x| x.dst.to_string() == "10.10.0.2" && x.port == 80));
        let (inc, syn, synack) = a.iter().fold((0, 0, 0), |s, x| {
            (
                s.0 + x.details.incomplete_handshakes,
                s.1 + x.details.syn,
                s.2 + x.details.synack,
            )
        });
        assert_eq!(
            (inc, syn, synack),
            (600, 700, 100),
            "({on}): incomplete handshakes, SYNs and SYN-ACKs (the 100 complete ones are not incomplete)"
        );
        results.push((inc, syn, synack));
    }
    assert_eq!(results[0], results[1]);
}
