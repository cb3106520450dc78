//! BPF_PROG_TEST_RUN tests of the protection stage (SYN cookies answered
//! from XDP, cookie ACK validation, ACK guard) through the whole pipeline
//! (xdp_filter → xdp_features), run inside the filter's namespace where
//! real sockets listen: the stage looks sockets up there.

mod common;

use std::io::Write;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};

use common::*;
use rampart_dataplane::netns;
use rampart_ddos::features::{Features, VictimRecord};
use rampart_ddos::protect::{Protect, ProtectFlags, ProtectStats};
use rampart_ddos::Scope;
use rampart_testkit::frame::{self, tcp, Addr, Frame};
use rampart_testkit::prog::{run_n, XDP_DROP, XDP_PASS, XDP_TX};

const CLIENT: &str = "192.0.2.9";
const SERVER: &str = "198.51.100.1";
const CLIENT6: &str = "2001:db8:9::9";
const SERVER6: &str = "2001:db8:1::1";
/// A port with a listener in the namespace.
const OPEN: u16 = 8080;
/// A port without.
const CLOSED: u16 = 8081;

/// A filter in a fresh namespace whose `lo` carries SERVER and SERVER6.
fn setup(tag: &str) -> Installed {
    let f = Installed::new(tag, &exact_cfg());
    for a in [
        vec!["link", "set", "lo", "up"],
        vec!["addr", "add", &format!("{SERVER}/32"), "dev", "lo"],
        vec!["addr", "add", &format!("{SERVER6}/128"), "dev", "lo"],
    ] {
        let mut args = vec!["-n", f.ns.as_str()];
        args.extend(a.iter().map(|s| &**s));
        let st = std::process::Command::new("ip")
            .args(&args)
            .status()
            .unwrap();
        assert!(st.success(), "ip {args:?}");
    }
    f
}

fn protect(f: &Installed) -> Protect {
    Protect::open(&Scope::new(Some(&f.ns), "lo").unwrap()).unwrap()
}

/// Run `body` inside the filter's namespace (sockets and BPF_PROG_RUN there).
fn in_ns<T: Send>(f: &Installed, body: impl FnOnce() -> T + Send) -> T {
    netns::run_in(Some(&f.ns), || Ok(body())).unwrap()
}

fn run1(prog: &OwnedFd, frame: &[u8]) -> (u32, Vec<u8>) {
    let out = rampart_dataplane::testrun::run_packet(prog.as_raw_fd(), frame, 0).unwrap();
    (out.retval, out.data)
}

/// Linux-like SYN options: MSS 1460, SACK-permitted, timestamps, NOP, wscale 9.
fn linux_opts(tsval: u32) -> Vec<u8> {
    let mut o = vec![2, 4, 0x05, 0xb4, 4, 2, 8, 10];
    o.extend_from_slice(&tsval.to_be_bytes());
    o.extend_from_slice(&[0, 0, 0, 0, 1, 3, 3, 9]);
    o
}

fn syn(src: impl Addr, dst: impl Addr, sport: u16, dport: u16, seq: u32, opts: &[u8]) -> Vec<u8> {
    Frame::tcp(src, dst, sport, dport)
        .seq(seq)
        .window(64240)
        .flags(tcp::SYN)
        .tcp_options(opts)
        .build()
}

fn ack(src: impl Addr, dst: impl Addr, sport: u16, dport: u16, seq: u32, ack: u32) -> Vec<u8> {
    Frame::tcp(src, dst, sport, dport)
        .seq(seq)
        .ack(ack)
        .window(502)
        .flags(tcp::ACK)
        .build()
}

/// The SYN-ACK answering `syn`: addresses, ports, flags, lengths and
/// checksums checked (with the test kit's independent parser); returns
/// (cookie, TCP flags, window, options).
fn synack(syn: &[u8], out: &[u8]) -> (u32, u8, u16, Vec<u8>) {
    let q = frame::check(syn).expect("the SYN is valid");
    let r = frame::check(out).unwrap_or_else(|e| panic!("SYN-ACK: {e}"));
    assert_eq!(&out[0..6], &syn[6..12], "MACs swapped");
    assert_eq!(&out[6..12], &syn[0..6]);
    assert_eq!((r.src, r.dst), (q.dst, q.src), "addresses swapped");
    assert_eq!((r.sport, r.dport), (q.dport, q.sport), "ports swapped");
    assert_eq!(r.tcp_flags & 0x17, tcp::SYN | tcp::ACK);
    assert!(r.payload.is_empty());
    let l4 = if r.src.is_ipv4() { 14 + 20 } else { 14 + 40 };
    let t = &out[l4..];
    let tcp_len = usize::from(t[12] >> 4) * 4;
    assert_eq!(out.len(), l4 + tcp_len, "frame trimmed to the headers");
    let word = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
    assert_eq!(
        word(t, 8),
        word(&syn[l4..], 4).wrapping_add(1),
        "ack = seq + 1"
    );
    (
        word(t, 4),
        t[13],
        u16::from_be_bytes([t[14], t[15]]),
        t[20..tcp_len].to_vec(),
    )
}

fn stats(p: &Protect, victim: &str) -> ProtectStats {
    p.stats(victim.parse().unwrap())
        .unwrap()
        .expect("protected")
}

#[test]
fn cookie_synack_bytes_and_cookie_acks() {
    let f = setup("pp");
    let mut p = protect(&f);
    p.set(SERVER.parse().unwrap(), ProtectFlags::ALL).unwrap();
    assert!(
        p.tc_attached(),
        "the first victim with cookies attaches the TC stage"
    );
    let prog = f.prog();
    in_ns(&f, || {
        let _l = TcpListener::bind(("0.0.0.0", OPEN)).unwrap();

        // Linux's options: MSS, SACK-permitted + timestamps, wscale.
        let s = syn(CLIENT, SERVER, 40001, OPEN, 1000, &linux_opts(0x1122_3344));
        let (v, out) = run1(&prog, &s);
        assert_eq!(v, XDP_TX);
        let (cookie, flags, win, opts) = synack(&s, &out);
        assert_eq!(
            flags,
            tcp::SYN | tcp::ACK,
            "no ECE: the SYN did not ask for ECN"
        );
        assert_eq!(win, 64240);
        assert_eq!(&opts[0..4], &[2, 4, 0x05, 0xb4], "MSS 1460");
        assert_eq!(&opts[4..8], &[4, 2, 8, 10], "SACK-permitted, timestamps");
        assert_eq!(
            &opts[12..16],
            &0x1122_3344u32.to_be_bytes(),
            "TSecr echoes the client"
        );
        assert_eq!(&opts[16..20], &[1, 3, 3, 7], "our window scale");
        assert_eq!(opts.len(), 20);
        // The client's options in the cookie's low bits: wscale 9, SACK, MSS index 3 (1460).
        assert_eq!(cookie & 0xff, 9 | 0x10 | 3 << 6, "{cookie:#x}");

        // The right ACK passes; a wrong cookie, a wrong ISN, another
        // port, a tampered option bit are dropped.
        let c1 = cookie.wrapping_add(1);
        for (name, a, want) in [
            (
                "cookie + 1",
                ack(CLIENT, SERVER, 40001, OPEN, 1001, c1.wrapping_add(1)),
                XDP_DROP,
            ),
            (
                "other ISN",
                ack(CLIENT, SERVER, 40001, OPEN, 5001, c1),
                XDP_DROP,
            ),
            (
                "other port",
                ack(CLIENT, SERVER, 40002, OPEN, 1001, c1),
                XDP_DROP,
            ),
            (
                "other source",
                ack("192.0.2.10", SERVER, 40001, OPEN, 1001, c1),
                XDP_DROP,
            ),
            (
                "wscale bit flipped",
                ack(CLIENT, SERVER, 40001, OPEN, 1001, c1 ^ 1),
                XDP_DROP,
            ),
            (
                "valid",
                ack(CLIENT, SERVER, 40001, OPEN, 1001, c1),
                XDP_PASS,
            ),
        ] {
            assert_eq!(run1(&prog, &a).0, want, "{name}");
        }
        let st = stats(&p, SERVER);
        assert_eq!(
            (
                st.synack_sent,
                st.cookie_ack_valid,
                st.cookie_ack_invalid,
                st.guard_dropped
            ),
            (1, 1, 5, 0),
            "{st:?}"
        );

        // No timestamps: SACK-permitted and window scale still agreed
        // (the cookie carries them), ECN asked and agreed.
        let opts = [2, 4, 0x02, 0x18, 1, 1, 4, 2, 1, 3, 3, 2]; // MSS 536, SACK, wscale 2
        let s = Frame::tcp(CLIENT, SERVER, 40003, OPEN)
            .seq(7)
            .flags(tcp::SYN | tcp::ECE | tcp::CWR)
            .tcp_options(&opts)
            .build();
        let (v, out) = run1(&prog, &s);
        assert_eq!(v, XDP_TX);
        let (cookie, flags, _, o) = synack(&s, &out);
        assert_eq!(flags & tcp::ECE, tcp::ECE, "ECN agreed");
        assert_eq!(o, [2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7]);
        assert_eq!(
            cookie & 0xff,
            2 | 0x10 | 0x20,
            "wscale 2, SACK, ECN, MSS index 0 (536)"
        );
        assert_eq!(
            run1(
                &prog,
                &ack(CLIENT, SERVER, 40003, OPEN, 8, cookie.wrapping_add(1))
            )
            .0,
            XDP_PASS
        );

        // No options at all: MSS only, the cookie says no wscale (0xf).
        let s = syn(CLIENT, SERVER, 40004, OPEN, 99, &[]);
        let (v, out) = run1(&prog, &s);
        assert_eq!(v, XDP_TX);
        let (cookie, _, _, o) = synack(&s, &out);
        assert_eq!(o, [2, 4, 0x05, 0xb4]);
        assert_eq!(cookie & 0xff, 0x0f);

        // A SYN to a port without a listener is dropped; a malformed SYN too.
        assert_eq!(
            run1(&prog, &syn(CLIENT, SERVER, 40005, CLOSED, 1, &[])).0,
            XDP_DROP
        );
        let mut bad = syn(CLIENT, SERVER, 40006, OPEN, 1, &linux_opts(1));
        let n = bad.len();
        bad[n - 1] ^= 0xff; // TCP checksum no longer matches
        assert_eq!(run1(&prog, &bad).0, XDP_DROP);
        // A SYN with IP options is left to the kernel.
        let opt = Frame::tcp(CLIENT, SERVER, 40007, OPEN)
            .flags(tcp::SYN)
            .ipv4_options(&[1, 1, 1, 0])
            .build();
        assert_eq!(run1(&prog, &opt).0, XDP_PASS);
        let st = stats(&p, SERVER);
        assert_eq!(
            (st.synack_sent, st.no_listener, st.bad_syn, st.syn_passed),
            (3, 1, 1, 1),
            "{st:?}"
        );

        // Another destination is not protected: untouched.
        let other = syn(CLIENT, "198.51.100.2", 40001, OPEN, 1, &linux_opts(1));
        assert_eq!(run1(&prog, &other), (XDP_PASS, other.clone()));
    });
    // The interval's victim record counts the same events.
    let snap = Features::open(f.filter.name()).unwrap().snapshot().unwrap();
    let key = VictimRecord::key_of(SERVER.parse().unwrap());
    let v = snap.victims.iter().find(|v| v.victim == key).unwrap();
    assert_eq!(
        (
            v.synack_sent,
            v.cookie_ack_valid,
            v.cookie_ack_invalid,
            v.no_listener,
            v.guard_dropped
        ),
        (3, 2, 5, 1, 0),
        "{v:?}"
    );
    assert!(p.clear(SERVER.parse().unwrap()).unwrap());
    assert!(
        !p.tc_attached(),
        "the last victim with cookies detaches the TC stage"
    );
    // Nothing protected: the same SYN passes.
    in_ns(&f, || {
        let _l = TcpListener::bind(("0.0.0.0", OPEN)).unwrap();
        let s = syn(CLIENT, SERVER, 40001, OPEN, 1000, &linux_opts(1));
        assert_eq!(run1(&prog, &s), (XDP_PASS, s.clone()));
    });
}

/// Under cookies, a spoofed flood's sources (one SYN each, never anything
/// that passes) stay out of the interval's pair table but for about one in
/// DDOS_FEAT_PROTECTED_ADMIT; a heavy real source still gets in, and a
/// source whose cookie ACK passes is recorded at once. The victim record
/// counts every SYN.
#[test]
fn a_spoofed_flood_under_cookies_stays_out_of_the_pair_table() {
    use rampart_bpf::abi::ddos::DDOS_FEAT_PROTECTED_ADMIT;
    const SPOOFED: u32 = 4096;
    const HEAVY: u32 = 2000;
    const HEAVY_SRC: &str = "203.0.113.7";
    let f = setup("pq");
    let mut p = protect(&f);
    p.set(SERVER.parse().unwrap(), ProtectFlags::ALL).unwrap();
    let prog = f.prog();
    let mut features = Features::open(f.filter.name()).unwrap();
    features.snapshot().unwrap(); // start from an empty interval
    in_ns(&f, || {
        let _l = TcpListener::bind(("0.0.0.0", OPEN)).unwrap();
        for i in 0..SPOOFED {
            let src = std::net::Ipv4Addr::from(0x0a40_0000 + i);
            let (v, _) = run1(&prog, &syn(src, SERVER, 1024, OPEN, i, &[]));
            assert_eq!(v, XDP_TX);
        }
        for i in 0..HEAVY {
            let (v, _) = run1(
                &prog,
                &syn(HEAVY_SRC, SERVER, 2000 + (i % 60000) as u16, OPEN, i, &[]),
            );
            assert_eq!(v, XDP_TX);
        }
        // A client: its SYN is answered, its cookie ACK passes.
        let s = syn(CLIENT, SERVER, 40001, OPEN, 1000, &linux_opts(7));
        let (v, out) = run1(&prog, &s);
        assert_eq!(v, XDP_TX);
        let (cookie, ..) = synack(&s, &out);
        let a = ack(CLIENT, SERVER, 40001, OPEN, 1001, cookie.wrapping_add(1));
        assert_eq!(run1(&prog, &a).0, XDP_PASS);
    });
    let stats = features.stats().unwrap();
    let snap = features.snapshot().unwrap();
    let spoofed = snap
        .records
        .iter()
        .filter(|r| matches!(r.src, IpAddr::V4(a) if a.octets()[..2] == [10, 64]))
        .count() as u32;
    // Expected SPOOFED / ADMIT = 64 (σ ≈ 8); admitted all, it is 4096.
    assert!(
        spoofed <= 4 * SPOOFED / DDOS_FEAT_PROTECTED_ADMIT,
        "{spoofed} spoofed sources took pair slots"
    );
    let heavy = snap
        .records
        .iter()
        .find(|r| r.src == HEAVY_SRC.parse::<IpAddr>().unwrap())
        .expect("the heavy source is admitted");
    assert!(heavy.syn > 0, "{heavy:?}");
    let client = snap
        .records
        .iter()
        .find(|r| r.src == CLIENT.parse::<IpAddr>().unwrap())
        .expect("the client's passing ACK records it");
    assert!(client.tcp >= 1, "{client:?}");
    let key = VictimRecord::key_of(SERVER.parse().unwrap());
    let v = snap.victims.iter().find(|v| v.victim == key).unwrap();
    assert_eq!(v.syn, u64::from(SPOOFED + HEAVY + 1), "{v:?}");
    assert_eq!(v.synack_sent, u64::from(SPOOFED + HEAVY + 1), "{v:?}");
    // Every SYN is either in a pair or counted as skipped for protection.
    let in_pairs: u64 = snap.records.iter().map(|r| u64::from(r.syn)).sum();
    assert_eq!(
        in_pairs + stats.skipped_protected,
        u64::from(SPOOFED + HEAVY + 1),
        "{stats:?}"
    );
}

#[test]
fn ipv6_cookies_cover_the_victims_slash_64() {
    let f = setup("pp");
    let mut p = protect(&f);
    // Any address of the /64 names the victim.
    p.set("2001:db8:1::77".parse().unwrap(), ProtectFlags::ALL)
        .unwrap();
    assert_eq!(
        p.list().unwrap()[0].victim,
        "2001:db8:1::".parse::<IpAddr>().unwrap()
    );
    let prog = f.prog();
    in_ns(&f, || {
        let _l = TcpListener::bind(("::", OPEN)).unwrap();
        let opts = [
            2, 4, 0x05, 0xa0, 4, 2, 8, 10, 0, 0, 0, 5, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        let s = syn(CLIENT6, SERVER6, 40001, OPEN, 0xffff_fff0, &opts);
        let (v, out) = run1(&prog, &s);
        assert_eq!(v, XDP_TX);
        let (cookie, _, _, o) = synack(&s, &out);
        assert_eq!(
            &o[0..4],
            &[2, 4, 0x05, 0xa0],
            "MSS 1440 announced over IPv6"
        );
        assert_eq!(cookie >> 6 & 3, 2, "MSS index 2 (1440)");
        // The ISN wraps: the ACK's sequence number is 0xffff_fff1.
        let a = ack(
            CLIENT6,
            SERVER6,
            40001,
            OPEN,
            0xffff_fff1,
            cookie.wrapping_add(1),
        );
        assert_eq!(run1(&prog, &a).0, XDP_PASS);
        let bad = ack(
            CLIENT6,
            SERVER6,
            40001,
            OPEN,
            0xffff_fff1,
            cookie.wrapping_add(9),
        );
        assert_eq!(run1(&prog, &bad).0, XDP_DROP);
        // Another /64 is not protected.
        let other = syn(CLIENT6, "2001:db8:2::1", 40001, OPEN, 1, &opts);
        assert_eq!(run1(&prog, &other).0, XDP_PASS);
    });
    let st = stats(&p, SERVER6);
    assert_eq!(
        (st.synack_sent, st.cookie_ack_valid, st.cookie_ack_invalid),
        (1, 1, 1)
    );
}

#[test]
fn ack_guard_drops_out_of_state_tcp_and_keeps_connections() {
    let f = setup("pg");
    let mut p = protect(&f);
    let guard = ProtectFlags {
        syn_cookies: false,
        ack_guard: true,
    };
    p.set(SERVER.parse().unwrap(), guard).unwrap();
    assert!(!p.tc_attached(), "the guard alone needs no TC stage");
    let prog = f.prog();
    in_ns(&f, || {
        let l = TcpListener::bind((SERVER, OPEN)).unwrap();
        // A real connection SERVER:port → SERVER:OPEN over lo.
        let mut c = TcpStream::connect((SERVER, OPEN)).unwrap();
        let (_s, peer) = l.accept().unwrap();
        c.write_all(b"x").unwrap();
        let est = ack(SERVER, SERVER, peer.port(), OPEN, 1, 1);
        assert_eq!(
            run1(&prog, &est).0,
            XDP_PASS,
            "an established connection's ACK"
        );

        let flood = [
            ("ACK, no socket", ack(CLIENT, SERVER, 40001, CLOSED, 1, 1)),
            ("ACK to a listener", ack(CLIENT, SERVER, 40001, OPEN, 1, 1)),
            (
                "RST",
                Frame::tcp(CLIENT, SERVER, 40001, OPEN)
                    .flags(tcp::RST)
                    .build(),
            ),
            (
                "FIN",
                Frame::tcp(CLIENT, SERVER, 40001, CLOSED)
                    .flags(tcp::FIN | tcp::ACK)
                    .ack(1)
                    .build(),
            ),
            (
                "SYN-ACK",
                Frame::tcp(CLIENT, SERVER, 40001, CLOSED)
                    .flags(tcp::SYN | tcp::ACK)
                    .ack(1)
                    .build(),
            ),
        ];
        for (name, fr) in &flood {
            assert_eq!(run1(&prog, fr).0, XDP_DROP, "{name}");
        }
        // SYNs are not the guard's: without cookies they pass.
        let s = syn(CLIENT, SERVER, 40001, OPEN, 1, &[]);
        assert_eq!(run1(&prog, &s).0, XDP_PASS);
        // Many of them: every one dropped and counted (BPF_PROG_RUN repeats).
        assert_eq!(run_n(prog.as_raw_fd(), &flood[0].1, 200), XDP_DROP);
    });
    let st = stats(&p, SERVER);
    assert_eq!((st.guard_dropped, st.synack_sent), (5 + 200, 0), "{st:?}");
    // Cleared: the flood passes again.
    p.clear(SERVER.parse().unwrap()).unwrap();
    assert!(p.list().unwrap().is_empty());
    in_ns(&f, || {
        assert_eq!(
            run1(&prog, &ack(CLIENT, SERVER, 40001, CLOSED, 1, 1)).0,
            XDP_PASS
        );
    });
}

#[test]
fn protection_state_survives_reopening_and_counters_survive_flag_changes() {
    let f = setup("pr");
    let v: IpAddr = SERVER.parse().unwrap();
    {
        let mut p = protect(&f);
        p.set(
            v,
            ProtectFlags {
                syn_cookies: false,
                ack_guard: true,
            },
        )
        .unwrap();
    }
    let prog = f.prog();
    in_ns(&f, || {
        assert_eq!(
            run1(&prog, &ack(CLIENT, SERVER, 1, CLOSED, 1, 1)).0,
            XDP_DROP
        )
    });
    // A new handle (a restarted daemon) sees the entry and its counters.
    let mut p = protect(&f);
    let e = p.list().unwrap();
    assert_eq!(e.len(), 1);
    assert_eq!(
        e[0].flags,
        ProtectFlags {
            syn_cookies: false,
            ack_guard: true
        }
    );
    assert_eq!(e[0].stats.guard_dropped, 1);
    p.set(v, ProtectFlags::ALL).unwrap();
    assert_eq!(
        stats(&p, SERVER).guard_dropped,
        1,
        "changing flags keeps the counters"
    );
    assert!(p.tc_attached());
    // Detaching the filter removes the TC stage with everything else.
    let dir = f.filter.dir().to_path_buf();
    drop(p);
    drop(f);
    assert!(!dir.exists());
}
