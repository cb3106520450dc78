//! End-to-end test of the protection stage in a lab: the filter on host0,
//! nginx on host, real clients in wan. With SYN cookies on for the host,
//! curl's connections complete although the host's kernel never sees a
//! SYN (XDP answers it; the TC stage hands the kernel a request socket for
//! the client's ACK); a keep-alive connection opened before keeps working;
//! an ACK flood from hping3 is dropped by the guard before the kernel
//! could answer it with RSTs.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use rampart_dataplane::netns;
use rampart_dataplane::xdp::XdpMode;
use rampart_ddos::filter::{Filter, FilterConfig, Scope};
use rampart_ddos::protect::{Protect, ProtectFlags};
use rampart_lab::testing::TestLab;
use rampart_lab::topology::HOST_IF;
use rampart_lab::web::Nginx;

const HOST: &str = "10.10.0.2";

struct Attached {
    filter: Filter,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = Filter::detach(self.filter.name());
    }
}

/// A lab of its own with the filter on host0 and nginx on host; dropped in
/// field order: the filter, nginx, its files, then the lab.
struct Env {
    att: Attached,
    _nginx: Nginx,
    work: std::path::PathBuf,
    host: String,
    wan: String,
    scope: Scope,
    _lab: TestLab,
}

impl Env {
    fn up(prefix: &str) -> Self {
        let lab = TestLab::up(prefix, 0);
        let (host, wan) = (lab.host_ns(), lab.wan_ns());
        let scope = Scope::new(Some(&host), HOST_IF).unwrap();
        let cfg = FilterConfig {
            sample_shift: 0,
            features_capacity: 1 << 12,
            ..Default::default()
        };
        let att = Attached {
            filter: Filter::attach(&scope, &cfg, XdpMode::Native).expect("attach"),
        };
        let work = std::env::temp_dir().join(format!("rampart-e2e-protect-{}", lab.prefix()));
        let nginx = Nginx::start(&host, HOST, None, &work, &wan).expect("nginx");
        Env {
            att,
            _nginx: nginx,
            work,
            host,
            wan,
            scope,
            _lab: lab,
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// Counters of `/proc/net/netstat` and `/proc/net/snmp` of namespace `ns`,
/// as `TcpExt<Name>` / `Tcp<Name>`.
fn netstat(ns: &str, name: &str) -> u64 {
    let text = netns::run_in(Some(ns), || {
        let mut s = std::fs::read_to_string("/proc/thread-self/net/netstat").unwrap();
        s.push_str(&std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap());
        Ok(s)
    })
    .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [head, vals] = pair else { continue };
        let (Some((p, names)), Some((_, nums))) = (head.split_once(':'), vals.split_once(':'))
        else {
            continue;
        };
        for (n, v) in names.split_whitespace().zip(nums.split_whitespace()) {
            if format!("{p}{n}") == name {
                return v.parse().unwrap();
            }
        }
    }
    panic!("no counter {name} in namespace {ns}");
}

fn curl(ns: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "curl",
            "-s",
            "-m",
            "10",
            "--no-keepalive",
        ])
        .arg(format!("http://{HOST}/"))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One HTTP/1.1 request on a kept-alive connection; the status line.
fn request(c: &mut TcpStream) -> String {
    c.write_all(b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n").unwrap();
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    while !got.ends_with(b"rampart\n") {
        let n = c.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "connection closed: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[test]
fn syn_cookies_from_xdp_complete_real_connections_and_the_guard_drops_an_ack_flood() {
    let env = Env::up("dpp");
    let (host, wan, scope) = (env.host.clone(), env.wan.clone(), env.scope.clone());

    // A keep-alive connection from before protection.
    let mut kept = netns::run_in(Some(&wan), || {
        Ok(TcpStream::connect((HOST, 80)).expect("connect"))
    })
    .unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(request(&mut kept), "HTTP/1.1 200 OK");

    let cookies_sent = netstat(&host, "TcpExtSyncookiesSent");
    let mut p = Protect::open(&scope).unwrap();
    p.set(HOST.parse().unwrap(), ProtectFlags::ALL).unwrap();
    assert!(p.tc_attached());

    for _ in 0..3 {
        assert_eq!(curl(&wan), "rampart\n");
    }
    let st = p.stats(HOST.parse().unwrap()).unwrap().unwrap();
    assert!(st.synack_sent >= 3, "XDP answered curl's SYNs: {st:?}");
    assert!(st.cookie_ack_valid >= 3, "{st:?}");
    assert!(
        st.reqsk_assigned >= 3,
        "the TC stage handed the kernel the ACKs: {st:?}"
    );
    assert_eq!(st.cookie_ack_invalid, 0, "{st:?}");
    let tc = p.tc_stats().unwrap().unwrap();
    assert!(tc.assigned >= 3 && tc.refused == 0, "{tc:?}");
    assert_eq!(
        netstat(&host, "TcpExtSyncookiesSent"),
        cookies_sent,
        "the kernel never answered a SYN with its own cookie"
    );

    // The connection from before still works (it finds its socket).
    assert_eq!(request(&mut kept), "HTTP/1.1 200 OK");

    // ACK floods to the host: to the service port (only a listener there:
    // no valid cookie) and to a closed port (no socket: the guard). Every
    // segment is dropped; none reaches the kernel, which would answer
    // each with a RST.
    let rsts = netstat(&host, "TcpOutRsts");
    for port in ["80", "81"] {
        let out = Command::new("ip")
            .args([
                "netns", "exec", &wan, "hping3", "-q", "-A", "-p", port, "-c", "300",
            ])
            .args(["-i", "u1000", HOST])
            .output()
            .expect("hping3 (apt-get install hping3)");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("300 packets transmitted"), "hping3: {text}");
    }
    let after = p.stats(HOST.parse().unwrap()).unwrap().unwrap();
    assert_eq!(
        after.cookie_ack_invalid - st.cookie_ack_invalid,
        300,
        "{after:?}"
    );
    assert_eq!(after.guard_dropped - st.guard_dropped, 300, "{after:?}");
    assert_eq!(
        netstat(&host, "TcpOutRsts"),
        rsts,
        "no ACK of the floods reached the kernel"
    );
    // And service goes on.
    assert_eq!(curl(&wan), "rampart\n");
    assert_eq!(request(&mut kept), "HTTP/1.1 200 OK");

    // Off again: the TC stage goes, connections still complete (the kernel's way).
    assert!(p.clear(HOST.parse().unwrap()).unwrap());
    assert!(!p.tc_attached());
    assert_eq!(curl(&wan), "rampart\n");
    drop(kept);
    drop(env);
}

/// Handshake completions from the kernel, merged into the pair records:
/// curl's connections count, hping3's SYNs (the attacker's kernel answers
/// each SYN-ACK with a RST) do not, and handshakes in another namespace
/// are not this interface's.
#[test]
fn completions_count_real_handshakes_only() {
    use rampart_ddos::features::Features;
    let env = Env::up("dpc");
    let wan = env.wan.clone();
    let mut feats = Features::open(env.att.filter.name()).unwrap();
    feats.snapshot().unwrap();
    let pair = |s: &rampart_ddos::Snapshot| {
        s.records
            .iter()
            .find(|r| r.src.to_string() == "10.10.0.1" && r.dst.to_string() == HOST)
            .copied()
    };

    for _ in 0..3 {
        assert_eq!(curl(&wan), "rampart\n");
    }
    let s = feats.snapshot().unwrap();
    let p = pair(&s).expect("the client's pair");
    assert_eq!(p.completions, 3, "{p:?}");
    assert!(p.syn >= 3);

    let out = Command::new("ip")
        .args([
            "netns", "exec", &wan, "hping3", "-q", "-S", "-p", "80", "-c", "50",
        ])
        .args(["-i", "u1000", HOST])
        .output()
        .expect("hping3");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("50 packets transmitted"), "hping3: {text}");
    // A handshake inside wan (on its lo) is another namespace's.
    netns::run_in(Some(&wan), || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _s = l.accept().unwrap();
        Ok(())
    })
    .unwrap();
    let s = feats.snapshot().unwrap();
    let p = pair(&s).expect("the attacker's pair");
    assert!(p.syn >= 50, "{p:?}");
    assert_eq!(p.completions, 0, "hping3's SYNs complete nothing: {p:?}");
    assert!(
        !s.records.iter().any(|r| r.src.is_loopback()),
        "a handshake of another namespace was counted"
    );
    drop(env);
}

/// A spoofed SYN that reached the kernel before cookies were on left a
/// request socket (the spoofed address never answers the SYN-ACK). With
/// cookies on, the same SYN again is dropped in XDP (`syn_pending`): the
/// kernel's SYN-ACK timer answers a real client, and a flood that repeats
/// its tuples does not reach the stack through the request socket.
#[test]
fn syns_of_a_handshake_the_kernel_holds_are_dropped_under_cookies() {
    let env = Env::up("dps");
    let (host, wan, scope) = (env.host.clone(), env.wan.clone(), env.scope.clone());
    // From an address nobody owns (its SYN-ACK is never answered), one
    // fixed source port so that every SYN is the same handshake.
    let syn = |count: &str| {
        let out = Command::new("ip")
            .args(["netns", "exec", &wan, "hping3", "-q", "-S", "-p", "80"])
            .args([
                "-a",
                "172.16.9.9",
                "-s",
                "40000",
                "-k",
                "-c",
                count,
                "-i",
                "u20000",
                HOST,
            ])
            .output()
            .expect("hping3 (apt-get install hping3)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains(&format!("{count} packets transmitted")),
            "hping3: {text}"
        );
    };
    syn("1");
    let ss = Command::new("ip")
        .args(["netns", "exec", &host, "ss", "-Htn", "state", "syn-recv"])
        .output()
        .expect("ss");
    let ss = String::from_utf8_lossy(&ss.stdout).into_owned();
    assert!(ss.contains("172.16.9.9:40000"), "no request socket: {ss:?}");

    let mut p = Protect::open(&scope).unwrap();
    p.set(HOST.parse().unwrap(), ProtectFlags::ALL).unwrap();
    syn("5");
    let st = p.stats(HOST.parse().unwrap()).unwrap().unwrap();
    assert_eq!(st.syn_pending, 5, "{st:?}");
    assert_eq!(st.syn_passed, 0, "{st:?}");
    assert_eq!(st.synack_sent, 0, "{st:?}");
    p.clear(HOST.parse().unwrap()).unwrap();
    drop(env);
}
