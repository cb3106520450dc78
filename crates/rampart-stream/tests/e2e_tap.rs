//! The stream tap end to end in the lab (`wan` → EMULATED NIC → `host`):
//!
//! - on host0, with nginx serving, the tap (aggregation) runs flowmeter
//!   while ARP, IPv6 neighbour discovery, ping and HTTP keep working — it
//!   takes no frame — and its flows, both directions of each (the host's
//!   sends through the egress half), equal those of a capture (tcpdump) of
//!   the same traffic replayed from the pcap;
//! - per app, the same crafted frames give the same results read from a
//!   pcap (no offload), from the tap's tuples and from its XDP aggregation.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::L4;
use rampart_lab::testing::TestLab;
use rampart_lab::topology;
use rampart_stream::apps::flowmeter::{self, FlowRecord, FlowmeterConfig};
use rampart_stream::apps::portscan::{self, PortscanConfig, ScanAlert};
use rampart_stream::apps::synflood::{self, FloodAlert, SynfloodConfig};
use rampart_stream::engine::Pipeline;
use rampart_stream::offload::{self, AppGraph, Target};
use rampart_stream::source::pcap::PcapSource;
use rampart_stream::source::tap::{TapConfig, TapMode, TapSource};
use rampart_stream::source::{AnySource, Applied, PacketSource};
use rampart_stream::tuple::tcp;
use rampart_testkit::frame::Frame;

fn tap(lab: &TestLab, g: &AppGraph, mode: TapMode) -> AnySource {
    let plan = offload::plan_tap(
        g,
        Target::HostXdp,
        mode == TapMode::Aggregate,
        std::path::Path::new(rampart_bpf::XDP_STREAM_OBJ),
    )
    .expect("plan");
    let cfg = TapConfig {
        netns: Some(lab.host_ns()),
        iface: topology::HOST_IF.into(),
        seconds: Some(60.0),
        mode,
        offload: plan.config.clone(),
        applied: Applied {
            app: Some(plan.app.clone()),
            ops: plan
                .offloaded
                .iter()
                .filter(|o| *o != "source")
                .cloned()
                .collect(),
            partition: None,
        },
        ..TapConfig::default()
    };
    AnySource::Tap(TapSource::open(cfg).expect("tap"))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Send `frames` out of wan0 in order, from one CPU.
fn inject(lab: &TestLab, frames: &[Vec<u8>]) {
    rampart_dataplane::netns::run_in(Some(&lab.wan_ns()), || {
        let c = std::ffi::CString::new(topology::WAN_IF).unwrap();
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) };
        assert_ne!(ifindex, 0);
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

/// Run `p` on a live source while `traffic` runs; stop once the tap saw
/// `frames` frames (at most 30 s), then let it finish.
fn drive(src: &AnySource, p: Pipeline, frames: u64, traffic: impl FnOnce()) {
    let stop = p.cancel_flag();
    let stats = src.stats();
    let h = std::thread::spawn(move || p.run());
    std::thread::sleep(Duration::from_millis(200));
    traffic();
    let t0 = Instant::now();
    let AnySource::Tap(t) = src else {
        panic!("a tap")
    };
    while t.counters().map(|c| c.frames).unwrap_or(0) < frames
        && t0.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap().expect("pipeline");
    let c = t.counters().unwrap();
    assert!(
        c.frames >= frames,
        "the tap saw {c:?} of {frames} frames ({:?})",
        stats.snapshot()
    );
    assert_eq!(c.ring_full, 0, "{c:?}");
    assert_eq!(t.late(), 0, "no part arrived after its epoch was emitted");
}

/// Records collected by a sink (filled at the end of the stream).
type Collected<T> = Arc<Mutex<Vec<T>>>;

fn collect<T: Clone + Send + 'static>(
) -> (Collected<T>, impl FnMut(Option<T>) + Clone + Send + 'static) {
    let v: Arc<Mutex<Vec<T>>> = Arc::default();
    let v2 = Arc::clone(&v);
    let mut local = Vec::new();
    (v, move |x: Option<T>| match x {
        Some(x) => local.push(x),
        None => v2.lock().unwrap().append(&mut local),
    })
}

/// A flow record without its times and FlowID: what must not depend on how
/// the packets reached the app.
fn untimed(r: &FlowRecord) -> String {
    let e = r.event();
    format!(
        "{} {}:{}>{}:{} {}/{} pkts {}/{} B flags {:02x}/{:02x} icmp {:?} {:?} {}",
        e.proto,
        e.src_ip,
        e.src_port,
        e.dest_ip,
        e.dest_port,
        r.packets,
        r.rev_packets,
        r.bytes,
        r.rev_bytes,
        r.tcp_flags,
        r.rev_tcp_flags,
        r.icmp,
        r.state,
        e.flow.reason
    )
}

fn ns_cmd(ns: &str, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn the_host_keeps_every_frame_and_the_flows_match_a_capture() {
    let lab = TestLab::up("tapk", 0);
    let work = common::tmp("tapk");
    std::fs::create_dir_all(&work).unwrap();
    let _nginx =
        rampart_lab::web::Nginx::start(&lab.host_ns(), "10.10.0.2", None, &work, &lab.wan_ns())
            .expect("nginx");
    // A capture of what host0 receives and sends, started before the tap.
    let pcap = work.join("in.pcap");
    let mut dump = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.host_ns(),
            "tcpdump",
            "-n",
            "-U",
            // Every packet to userspace as it comes: a buffered block still
            // in the kernel at SIGINT is lost to the capture.
            "--immediate-mode",
            "-Q",
            "inout",
        ])
        .args(["-i", topology::HOST_IF, "-w"])
        .arg(&pcap)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump (./run test installs it)");
    {
        // tcpdump says "listening on" once it captures.
        use std::io::BufRead;
        let mut err = std::io::BufReader::new(dump.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.contains("listening"), "tcpdump: {line}");
        // Read the rest (tcpdump's summary at exit) so it never blocks on the pipe.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut rest);
            eprintln!("tcpdump: {rest}");
        });
    }
    let cfg = FlowmeterConfig::default();
    let src = tap(&lab, &flowmeter::graph(&cfg), TapMode::Aggregate);
    let (out, sink) = collect::<FlowRecord>();
    let p = flowmeter::build(src.clone(), &cfg, sink).unwrap();
    assert_eq!(p.operators()[0], "xdp-tap");
    assert!(
        !p.operators().contains(&"part".to_string()),
        "the connection parts are built in XDP"
    );
    let (wan, host) = (lab.wan_ns(), lab.host_ns());
    let mut pinged = (false, false);
    let mut served = 0;
    drive(&src, p, 1, || {
        // The lab's static neighbours go: ARP and ND must get through the tap.
        for (ns, addr, dev) in [
            (&wan, "10.10.0.2", topology::WAN_IF),
            (&wan, "fd10::2", topology::WAN_IF),
            (&host, "10.10.0.1", topology::HOST_IF),
            (&host, "fd10::1", topology::HOST_IF),
        ] {
            let o = ns_cmd(ns, &["ip", "neigh", "del", addr, "dev", dev]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        pinged.0 = ns_cmd(
            &wan,
            &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.10.0.2"],
        )
        .status
        .success();
        pinged.1 = ns_cmd(
            &wan,
            &["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "fd10::2"],
        )
        .status
        .success();
        for _ in 0..20 {
            let o = ns_cmd(&wan, &["curl", "-s", "-m", "2", "http://10.10.0.2/"]);
            served += usize::from(o.stdout == b"rampart\n");
        }
        // The last packets (FIN/ACK) reach host0 and the tap.
        std::thread::sleep(Duration::from_millis(300));
    });
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(dump.id() as i32, libc::SIGINT) };
    let _ = dump.wait();
    assert!(pinged.0, "ping over ARP through the tap");
    assert!(pinged.1, "ping6 over neighbour discovery through the tap");
    assert_eq!(served, 20, "nginx answered every request");
    let AnySource::Tap(t) = &src else {
        unreachable!()
    };
    let c = t.counters().unwrap();
    assert!(
        c.not_ip > 0,
        "ARP went by the tap (and on to the stack): {c:?}"
    );
    assert!(
        out.lock()
            .unwrap()
            .iter()
            .any(|r| r.key.proto == 58 && r.icmp[0] == 135),
        "neighbour solicitations went by the tap"
    );

    // The same traffic from the capture, through the userspace parser.
    let from_pcap = PcapSource::open(pcap.to_str().unwrap(), 1, None).unwrap();
    let (cap, sink) = collect::<FlowRecord>();
    flowmeter::build(from_pcap, &cfg, sink)
        .unwrap()
        .run()
        .unwrap();
    // HTTP and echo flows between the lab's two addresses (the kernels'
    // own IPv6 chatter may fall between the capture's start and the tap's).
    // (An ICMP flow is keyed by its addresses: the host's own neighbour
    // advertisements share the IPv6 echo's flow, and may open it.)
    let keep = |r: &&FlowRecord| {
        r.key.proto == 6
            || (matches!(r.key.proto, 1 | 58)
                && (matches!(r.icmp[0], 8 | 128) || matches!(r.icmp[2], 8 | 128)))
    };
    assert!(
        out.lock()
            .unwrap()
            .iter()
            .filter(keep)
            .all(|r| r.packets > 0 && r.rev_packets > 0),
        "every HTTP and echo flow is seen both ways"
    );
    let mut a: Vec<String> = out
        .lock()
        .unwrap()
        .iter()
        .filter(keep)
        .map(untimed)
        .collect();
    let mut b: Vec<String> = cap
        .lock()
        .unwrap()
        .iter()
        .filter(keep)
        .map(untimed)
        .collect();
    a.sort();
    b.sort();
    let _ = std::fs::remove_dir_all(&work);
    assert_eq!(
        a.len(),
        22,
        "20 HTTP connections and two echo flows: {a:#?}"
    );
    assert!(
        a.iter()
            .filter(|x| x.starts_with("TCP"))
            .all(|x| x.ends_with("fin")),
        "HTTP flows end with FIN: {a:#?}"
    );
    assert_eq!(a, b, "the tap's flows are the capture's");
}

/// A TCP segment with `flags` and `payload` bytes.
fn seg(src: &str, dst: &str, sport: u16, dport: u16, flags: u8, payload: usize) -> Vec<u8> {
    common::frame(ip(src), ip(dst), sport, dport, L4::Tcp(flags), payload)
}

fn echo_reply(src: &str, dst: &str) -> Vec<u8> {
    Frame::icmp_echo_reply(ip(src), ip(dst))
        .payload(&[0x5a; 8])
        .build()
}

/// Traffic for all three apps: complete TCP connections both ways,
/// UDP both ways, ICMP echo both ways (v4 and v6), TRW scanners and benign
/// hosts, half-open handshakes to one server, and an nmap-style SYN scan of
/// one host (refused ports, and open ones the scanner resets).
fn traffic() -> Vec<Vec<u8>> {
    let mut f = Vec::new();
    for i in 0..40u16 {
        let c = format!("172.18.0.{}", i + 1);
        let sp = 40000 + i;
        f.push(seg(&c, "10.10.0.2", sp, 80, tcp::SYN, 0));
        f.push(seg("10.10.0.2", &c, 80, sp, tcp::SYN | tcp::ACK, 0));
        f.push(seg(&c, "10.10.0.2", sp, 80, tcp::ACK, 0));
        f.push(seg(
            &c,
            "10.10.0.2",
            sp,
            80,
            tcp::ACK | tcp::PSH,
            100 + usize::from(i),
        ));
        f.push(seg("10.10.0.2", &c, 80, sp, tcp::ACK | tcp::PSH, 900));
        f.push(seg(&c, "10.10.0.2", sp, 80, tcp::FIN | tcp::ACK, 0));
        f.push(seg("10.10.0.2", &c, 80, sp, tcp::FIN | tcp::ACK, 0));
        f.push(seg(&c, "10.10.0.2", sp, 80, tcp::ACK, 0));
        f.push(common::frame(ip(&c), ip("10.10.0.2"), sp, 53, L4::Udp, 30));
        f.push(common::frame(ip("10.10.0.2"), ip(&c), 53, sp, L4::Udp, 90));
        f.push(common::frame(ip(&c), ip("10.10.0.2"), 0, 0, L4::Icmp, 8));
        f.push(echo_reply("10.10.0.2", &c));
        let c6 = format!("fd18::{}", i + 1);
        f.push(common::frame(ip(&c6), ip("fd10::2"), 0, 0, L4::Icmp, 8));
        f.push(echo_reply("fd10::2", &c6));
    }
    // TRW: 8 scanners fail on 6 services each; 8 benign hosts succeed.
    for i in 0..8 {
        for r in 0..6u16 {
            let (s, d) = (format!("172.16.1.{}", i + 1), format!("10.20.0.{}", r + 1));
            f.push(seg(&s, &d, 41000 + r, 80, tcp::SYN, 0));
            if r % 2 == 0 {
                f.push(seg(&d, &s, 80, 41000 + r, tcp::RST | tcp::ACK, 0));
            }
            let (b, e) = (format!("172.16.2.{}", i + 1), format!("10.20.1.{}", r + 1));
            f.push(seg(&b, &e, 41000 + r, 443, tcp::SYN, 0));
            f.push(seg(&e, &b, 443, 41000 + r, tcp::SYN | tcp::ACK, 0));
            f.push(seg(&b, &e, 41000 + r, 443, tcp::ACK, 0));
        }
    }
    // 300 half-open handshakes to 10.10.0.3:80.
    for i in 0..300u32 {
        let s = format!("172.19.{}.{}", i / 250, 1 + i % 250);
        f.push(seg(&s, "10.10.0.3", 30000 + i as u16, 80, tcp::SYN, 0));
    }
    // nmap -sS of 10.10.0.4: 400 ports refused, 2 open and reset by the scanner.
    for p in 1..=402u16 {
        f.push(seg("172.20.0.9", "10.10.0.4", 50000, p, tcp::SYN, 0));
        if p == 22 || p == 80 {
            f.push(seg(
                "10.10.0.4",
                "172.20.0.9",
                p,
                50000,
                tcp::SYN | tcp::ACK,
                0,
            ));
            f.push(seg("172.20.0.9", "10.10.0.4", 50000, p, tcp::RST, 0));
        } else {
            f.push(seg(
                "10.10.0.4",
                "172.20.0.9",
                p,
                50000,
                tcp::RST | tcp::ACK,
                0,
            ));
        }
    }
    f
}

/// What each app found, timestamps aside.
#[derive(Debug, PartialEq, Eq)]
struct Results {
    flows: Vec<String>,
    scanners: Vec<(String, u64, u64)>,
    floods: BTreeMap<String, (u64, u64, u64)>,
}

/// A source for an app's graph, and how to run a pipeline on it when it is live.
type Live<'a> = Option<Box<dyn FnOnce(Pipeline, &AnySource) + 'a>>;

fn run_all<'a>(mut source: impl FnMut(&AppGraph) -> (AnySource, Live<'a>)) -> Results {
    let fc = FlowmeterConfig::default();
    let pc = PortscanConfig::default();
    let sc = SynfloodConfig {
        threshold: 100,
        window: common::LIVE_SYN_WINDOW,
        ..SynfloodConfig::default()
    };
    let go = |src: &AnySource, p: Pipeline, live: Live<'a>| match live {
        Some(f) => f(p, src),
        None => {
            p.run().unwrap();
        }
    };
    let (src, live) = source(&flowmeter::graph(&fc));
    let (out, sink) = collect::<FlowRecord>();
    go(
        &src,
        flowmeter::build(src.clone(), &fc, sink).unwrap(),
        live,
    );
    // The test's traffic (live, the kernels' own IPv6 chatter is there too).
    let mut flows: Vec<String> = out
        .lock()
        .unwrap()
        .iter()
        .filter(|r| {
            let e = r.event();
            [e.src_ip, e.dest_ip]
                .iter()
                .any(|a| a.starts_with("172.") || a.starts_with("fd18:"))
        })
        .map(untimed)
        .collect();
    flows.sort();

    let (src, live) = source(&portscan::graph(&pc));
    let (out, sink) = collect::<ScanAlert>();
    go(&src, portscan::build(src.clone(), &pc, sink).unwrap(), live);
    let mut scanners: Vec<(String, u64, u64)> = out
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
    scanners.sort();

    let (src, live) = source(&synflood::graph(&sc));
    let (out, sink) = collect::<FloodAlert>();
    go(&src, synflood::build(src.clone(), &sc, sink).unwrap(), live);
    let mut floods: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for a in out.lock().unwrap().iter() {
        let e = floods.entry(format!("{}:{}", a.dst, a.port)).or_default();
        e.0 += a.details.incomplete_handshakes;
        e.1 += a.details.refused;
        e.2 += a.details.aborted;
    }
    Results {
        flows,
        scanners,
        floods,
    }
}

#[test]
fn the_apps_give_the_same_results_from_a_pcap_the_taps_tuples_and_its_aggregates() {
    let frames = traffic();
    // No offload: the frames from a capture file, a millisecond apart from a
    // 10 s boundary (so the synflood window holds them all).
    let pkts: Vec<(u64, Vec<u8>)> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (common::T0_NS + i as u64 * 100_000, f.clone()))
        .collect();
    let file = common::write_pcap("tap-same.pcap", &pkts);
    let want = run_all(|_| {
        (
            AnySource::Pcap(PcapSource::open(file.path(), 1, None).unwrap()),
            None,
        )
    });
    // What the traffic must give, whatever the path.
    assert_eq!(
        want.flows.len(),
        40 * 4 + 8 * 6 * 2 + 300 + 402,
        "{:#?}",
        &want.flows[..5]
    );
    assert_eq!(
        want.flows
            .iter()
            .filter(|f| f.ends_with("Closed fin"))
            .count(),
        40,
        "the 40 connections closed by FIN"
    );
    assert!(
        want.flows
            .iter()
            .any(|f| f.contains("1/1 pkts") && f.contains("icmp [8, 0, 0, 0]")),
        "echo request and reply in one flow"
    );
    let scanners: Vec<String> = want.scanners.iter().map(|s| s.0.clone()).collect();
    assert!(
        scanners.contains(&"172.20.0.9".to_string()),
        "the SYN scan of one host: {scanners:?}"
    );
    for i in 0..8 {
        assert!(
            scanners.contains(&format!("172.16.1.{}", i + 1)),
            "{scanners:?}"
        );
        assert!(
            !scanners.contains(&format!("172.16.2.{}", i + 1)),
            "benign: {scanners:?}"
        );
    }
    assert!(
        !scanners.iter().any(|s| s.starts_with("172.18.")),
        "clients: {scanners:?}"
    );
    assert_eq!(
        want.floods.keys().collect::<Vec<_>>(),
        ["10.10.0.3:80"],
        "the half-open handshakes, not the port scan: {:?}",
        want.floods
    );
    assert_eq!(want.floods["10.10.0.3:80"].0, 300);

    let lab = TestLab::up("tapm", 0);
    for mode in [TapMode::Tuples, TapMode::Aggregate] {
        let got = run_all(|g| {
            let src = tap(&lab, g, mode);
            let frames = frames.clone();
            let lab2: &TestLab = &lab;
            // The synflood window must hold the burst: start just after a 10 s boundary.
            let n = frames.len() as u64;
            let live: Live<'_> = Some(Box::new(move |p: Pipeline, src: &AnySource| {
                drive(src, p, n, || {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap();
                    let into = now.as_millis() % 10_000;
                    if into > 5_000 {
                        std::thread::sleep(Duration::from_millis((10_100 - into) as u64));
                    }
                    inject(lab2, &frames);
                });
            }));
            (src, live)
        });
        assert_eq!(got.scanners, want.scanners, "{mode:?}: scanners");
        assert_eq!(got.floods, want.floods, "{mode:?}: SYN floods");
        let extra: Vec<_> = got
            .flows
            .iter()
            .filter(|f| !want.flows.contains(f))
            .take(5)
            .collect();
        let missing: Vec<_> = want
            .flows
            .iter()
            .filter(|f| !got.flows.contains(f))
            .take(5)
            .collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "{mode:?}: flows differ\nextra {extra:#?}\nmissing {missing:#?}"
        );
    }
}

/// TCP segments the namespace's stack sent, retransmissions included
/// (`OutSegs` + `RetransSegs` of /proc/net/snmp).
fn tcp_segments_sent(ns: &str) -> u64 {
    let o = ns_cmd(ns, &["cat", "/proc/net/snmp"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    let field = |n: &str| -> u64 {
        let i = names.split_whitespace().position(|x| x == n).unwrap();
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    };
    field("OutSegs") + field("RetransSegs")
}

#[test]
fn the_hosts_large_sends_count_as_the_segments_that_leave() {
    let lab = TestLab::up("tapg", 0);
    let work = common::tmp("tapg");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("big"), vec![0x5au8; 4 << 20]).unwrap();
    let (wan, host) = (lab.wan_ns(), lab.host_ns());
    // A plain HTTP file server: its sends are TSO/GSO frames on host0.
    let mut server = Command::new("ip")
        .args(["netns", "exec", &host, "python3", "-m", "http.server"])
        .args(["--bind", "10.10.0.2", "8080", "--directory"])
        .arg(&work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let url = "http://10.10.0.2:8080/big";
    let fetch = || {
        ns_cmd(&wan, &["curl", "-s", "-m", "10", "-o", "/dev/null", url])
            .status
            .success()
    };
    let ready = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        fetch()
    });
    assert!(ready, "the file server answers");
    let cfg = FlowmeterConfig::default();
    let src = tap(&lab, &flowmeter::graph(&cfg), TapMode::Aggregate);
    let (out, sink) = collect::<FlowRecord>();
    let p = flowmeter::build(src.clone(), &cfg, sink).unwrap();
    let before = tcp_segments_sent(&host);
    let mut fetched = 0;
    drive(&src, p, 1, || {
        fetched = (0..3).filter(|_| fetch()).count();
        std::thread::sleep(Duration::from_millis(300));
    });
    let sent = tcp_segments_sent(&host) - before;
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&work);
    assert_eq!(fetched, 3, "three downloads");
    let AnySource::Tap(t) = &src else {
        unreachable!()
    };
    let c = t.counters().unwrap();
    assert!(c.gso_extra > 0, "the server's sends were GSO frames: {c:?}");
    assert_eq!(c.gso_whole, 0, "{c:?}");
    // What the server sent, as the tap counted it, against its stack's count.
    let flows: Vec<FlowRecord> = out
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.key.proto == 6)
        .cloned()
        .collect();
    let from_server: u64 = flows
        .iter()
        .map(|r| {
            if r.event().src_ip == "10.10.0.2" {
                r.packets
            } else {
                r.rev_packets
            }
        })
        .sum();
    assert_eq!(flows.len(), 3, "{flows:#?}");
    assert_eq!(
        from_server, sent,
        "the tap counts each segment the host sent ({c:?})"
    );
    assert!(
        flows.iter().all(|r| r.bytes + r.rev_bytes > 4 << 20),
        "each flow carries the file"
    );
}
