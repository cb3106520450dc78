//! netns end-to-end tests of the tenant services: the DNS rate limiter in
//! front of dnsmasq and the SYN-cookie proxy in front of nginx, submitted
//! as tenant programs into the infrastructure program on host0, driven by
//! real clients (dig, curl) and floods from the lab generator.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;

use common::*;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_lab::Lab;
use rampart_tenant::programs::{
    DnsLimits, DnsStats, SynProxyConfig, SynStats, DNS_RATELIMIT_C, SYNPROXY_C,
};
use rampart_tenant::services;
use rampart_tenant::userspace::{DnsForwarder, TcpProxy};

fn tenant_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(Lab::tenant_v4(i))
}

fn dig(lab: &TestLab, extra: &[&str]) -> String {
    let mut args = vec!["+time=2", "+tries=2", "@10.20.1.2", "example.com", "A"];
    args.extend_from_slice(extra);
    in_ns(&lab.wan_ns(), "dig", &args)
}

#[test]
fn dns_limiter_answers_tc_then_tcp_and_survives_a_flood() {
    let lab = TestLab::up("tdns", 1);
    let mut a = lab_agent(&lab, 1, "");
    let _dns = services::dnsmasq(
        &lab.tenant_ns(1),
        tenant_addr(1),
        Ipv4Addr::new(192, 0, 2, 53),
    )
    .expect("dnsmasq");
    submit(&mut a, "t1", DNS_RATELIMIT_C);
    let tid = a.tenant_id("t1").unwrap();
    let (cfg, ex, st) = (
        a.tenant_map(tid, "dns_cfg").unwrap(),
        a.tenant_map(tid, "dns_exempt").unwrap(),
        a.tenant_map(tid, "dns_stats").unwrap(),
    );
    // One query per 100 s per source after a burst of 3: budgets are counts here.
    let mut limits = DnsLimits {
        src_qps: 0.01,
        src_burst: 3,
        pfx_qps: 0.0,
        pfx_burst: 1,
        truncate: true,
        ..DnsLimits::default()
    };
    limits.apply(cfg.as_raw_fd(), ex.as_raw_fd()).unwrap();

    // The client's first three queries are answered over UDP.
    for _ in 0..3 {
        let out = dig(&lab, &["+short", "+notcp"]);
        assert_eq!(out.trim(), "192.0.2.53");
    }
    // The fourth is answered TC=1 by the limiter…
    let tc = dig(&lab, &["+ignore", "+noedns"]);
    assert!(tc.contains("flags: qr tc rd;"), "{tc}");
    assert!(tc.contains("ANSWER: 0"), "{tc}");
    // …and a real resolver retries over TCP, which reaches dnsmasq.
    let retried = dig(&lab, &[]);
    assert!(retried.contains("192.0.2.53"), "{retried}");
    assert!(
        retried.contains("Truncated, retrying in TCP mode"),
        "{retried}"
    );
    let s = DnsStats::read(st.as_raw_fd()).unwrap();
    assert_eq!((s.passed, s.truncated), (3, 2), "{s:?}");

    // A DNS flood from 64 generator sources (all within one /24).
    let spec = GenSpec {
        sources: 64,
        proto: Proto::Dns,
        size: 82,
        pps: Some(50_000.0),
        limit: Limit::Count(20_000),
        dst: Some(IpAddr::V4(tenant_addr(1))),
        ..GenSpec::default()
    };
    let g = Generator::new(&lab, &spec).unwrap();
    let rep = g.run(&AtomicBool::new(false)).unwrap();
    assert_eq!(rep.sent_packets, 20_000);
    let total = |s: &DnsStats| s.passed + s.truncated + s.dropped;
    rampart_lab::testing::settle(&lab, 0, 20_000, || {
        total(&DnsStats::read(st.as_raw_fd()).unwrap()) - total(&s)
    });
    let s2 = DnsStats::read(st.as_raw_fd()).unwrap();
    let seen = (s2.passed + s2.truncated + s2.dropped) - (s.passed + s.truncated + s.dropped);
    assert_eq!(seen + wire_losses(&lab), 20_000, "{s2:?}");
    // Each flooding source got at most its burst through to the server…
    assert!(s2.passed - s.passed <= 64 * 3, "{s2:?}");
    assert!(s2.passed > s.passed);
    // …and the rest was answered TC=1 (the generator's queries are well formed).
    assert_eq!(s2.dropped, 0, "{s2:?}");

    // Exempting the client's prefix restores plain UDP answers during the limit.
    limits.exempt = vec![("10.10.0.0".parse().unwrap(), 24)];
    limits.apply(cfg.as_raw_fd(), ex.as_raw_fd()).unwrap();
    let out = dig(&lab, &["+short", "+notcp"]);
    assert_eq!(out.trim(), "192.0.2.53");
    assert_eq!(DnsStats::read(st.as_raw_fd()).unwrap().exempt, 1);
}

/// The tenant API on host0 of `lab` (tenant t1 owning 10.20.1.0/24, token
/// `t1-token`) and its token file.
fn lab_api(lab: &TestLab) -> (rampart_tenant::serve::Server, tempfile::NamedTempFile) {
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), "t1 t1-token\n").unwrap();
    let cfg = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\
         [infra]\nname = \"{}\"\nnetns = \"{}\"\ninterfaces = [\"host0\"]\n\
         [fairness]\nenabled = false\n\
         [[tenant]]\nname = \"t1\"\nselectors = [\"prefix:10.20.1.0/24\"]\n",
        tokens.path().display(),
        rampart_lab::testing::unique_prefix("tcfg"),
        lab.host_ns()
    );
    let s =
        rampart_tenant::serve::Server::start(rampart_tenant::config::Config::parse(&cfg).unwrap())
            .expect("tenant API");
    (s, tokens)
}

/// The one value of a one-entry array map, read through `GET /v1/maps/{map}` (hex).
fn map_hex(c: &rampart_tenant::client::Client, map: &str) -> String {
    let d = c.get(&format!("/v1/maps/{map}")).unwrap().unwrap();
    d["entries"][0]["value"].as_str().unwrap().to_string()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn dns_limits_set_by_name_change_the_map_and_the_limiter() {
    let lab = TestLab::up("tdcf", 1);
    let (api, _tokens) = lab_api(&lab);
    let c = rampart_tenant::client::Client::new(&format!("http://{}", api.addr), "t1-token");
    let _dns = services::dnsmasq(
        &lab.tenant_ns(1),
        tenant_addr(1),
        Ipv4Addr::new(192, 0, 2, 53),
    )
    .expect("dnsmasq");
    // Settings of no DNS limiter: the message says what is missing.
    let e = c.get("/v1/config/dns").unwrap().unwrap_err();
    assert_eq!(e.status, 404);
    assert!(e.message().contains("dns_cfg"), "{}", e.message());
    c.put("/v1/program", DNS_RATELIMIT_C.as_bytes())
        .unwrap()
        .unwrap();
    // As submitted the limiter limits nothing.
    let now = c.get("/v1/config/dns").unwrap().unwrap();
    assert_eq!(now["per_source_qps"], 0.0, "{now}");
    assert_eq!(now["exempt"], serde_json::json!([]), "{now}");
    for _ in 0..5 {
        assert_eq!(dig(&lab, &["+short", "+notcp"]).trim(), "192.0.2.53");
    }

    // By name: one query per 100 s per source after a burst of 3, truncate.
    let now = c
        .put_json(
            "/v1/config/dns",
            &serde_json::json!({"per_source_qps": 0.01, "per_source_burst": 3, "mode": "truncate"}),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            &now["per_source_qps"],
            &now["per_source_burst"],
            &now["mode"]
        ),
        (
            &serde_json::json!(0.01),
            &serde_json::json!(3),
            &serde_json::json!("truncate")
        ),
        "{now}"
    );
    // The map holds struct dns_cfg: interval 1e11 ns, tolerance 2 intervals,
    // no prefix budget, action truncate (1), the program's prefix lengths.
    let mut want = Vec::new();
    for x in [100_000_000_000u64, 200_000_000_000, 0, 0] {
        want.extend_from_slice(&x.to_ne_bytes());
    }
    for x in [1u32, 24, 56, 0] {
        want.extend_from_slice(&x.to_ne_bytes());
    }
    assert_eq!(map_hex(&c, "dns_cfg"), hex(&want));
    // The limiter now answers the fourth query TC=1.
    for _ in 0..3 {
        assert_eq!(dig(&lab, &["+short", "+notcp"]).trim(), "192.0.2.53");
    }
    let tc = dig(&lab, &["+ignore", "+noedns"]);
    assert!(
        tc.contains("flags: qr tc rd;") && tc.contains("ANSWER: 0"),
        "{tc}"
    );

    // A bad field is refused by name and changes nothing.
    let e = c
        .put_json(
            "/v1/config/dns",
            &serde_json::json!({"per_source_burst": 0, "mode": "drop"}),
        )
        .unwrap()
        .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(
        e.message().contains("per_source_burst 0") && e.message().contains("1..=1000000"),
        "{}",
        e.message()
    );
    assert_eq!(map_hex(&c, "dns_cfg"), hex(&want));

    // Exempting the client's prefix (one field) restores UDP answers…
    let now = c
        .put_json(
            "/v1/config/dns",
            &serde_json::json!({"exempt": ["10.10.0.0/24"]}),
        )
        .unwrap()
        .unwrap();
    assert_eq!(now["exempt"], serde_json::json!(["10.10.0.0/24"]), "{now}");
    assert_eq!(now["per_source_burst"], 3, "the other fields kept: {now}");
    assert_eq!(dig(&lab, &["+short", "+notcp"]).trim(), "192.0.2.53");
    // …and an empty list replaces it: the limit is back.
    c.put_json("/v1/config/dns", &serde_json::json!({"exempt": []}))
        .unwrap()
        .unwrap();
    let d = c.get("/v1/maps/dns_exempt").unwrap().unwrap();
    assert_eq!(d["entries"], serde_json::json!([]), "{d}");
    let tc = dig(&lab, &["+ignore", "+noedns"]);
    assert!(tc.contains("flags: qr tc rd;"), "{tc}");

    // The SYN proxy's settings are not this program's.
    let e = c.get("/v1/config/synproxy").unwrap().unwrap_err();
    assert_eq!(e.status, 404);
    assert!(e.message().contains("syn_cfg"), "{}", e.message());
    drop(api);
}

#[test]
fn syn_proxy_settings_by_name() {
    let lab = TestLab::up("tscf", 1);
    let (api, _tokens) = lab_api(&lab);
    let c = rampart_tenant::client::Client::new(&format!("http://{}", api.addr), "t1-token");
    c.put("/v1/program", SYNPROXY_C.as_bytes())
        .unwrap()
        .unwrap();
    let now = c.get("/v1/config/synproxy").unwrap().unwrap();
    assert_eq!(
        now,
        serde_json::json!({"mss_v4": 1460, "mss_v6": 1440, "wscale": 7, "ttl": 64, "ports": []})
    );
    let now = c
        .put_json(
            "/v1/config/synproxy",
            &serde_json::json!({"ports": [443, 80], "ttl": 32}),
        )
        .unwrap()
        .unwrap();
    assert_eq!(now["ports"], serde_json::json!([80, 443]), "{now}");
    // struct syn_cfg: mss4, mss6, wscale, ttl, pad.
    let mut want = Vec::new();
    want.extend_from_slice(&1460u16.to_ne_bytes());
    want.extend_from_slice(&1440u16.to_ne_bytes());
    want.extend_from_slice(&[7, 32, 0, 0]);
    assert_eq!(map_hex(&c, "syn_cfg"), hex(&want));
    // The port list is replaced, not added to.
    c.put_json("/v1/config/synproxy", &serde_json::json!({"ports": [8080]}))
        .unwrap()
        .unwrap();
    let d = c.get("/v1/maps/syn_ports").unwrap().unwrap();
    let keys: Vec<&str> = d["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, vec![hex(&8080u16.to_ne_bytes())]);
    let e = c
        .put_json("/v1/config/synproxy", &serde_json::json!({"wscale": 15}))
        .unwrap()
        .unwrap_err();
    assert!(
        e.message().contains("wscale 15") && e.message().contains("0..=14"),
        "{}",
        e.message()
    );
    drop(api);
}

/// TcpExt counter `name` of a namespace.
fn tcpext(ns: &str, name: &str) -> u64 {
    let t = in_ns(ns, "cat", &["/proc/net/netstat"]);
    let mut lines = t.lines().filter(|l| l.starts_with("TcpExt:"));
    let (h, v) = (lines.next().unwrap(), lines.next().unwrap());
    h.split_whitespace()
        .zip(v.split_whitespace())
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or_else(|| panic!("no TcpExt {name}"))
}

/// Sockets in SYN-RECV (request sockets of the listener) in a namespace.
/// Half-open server sockets whose peer is one of the generator's flood
/// sources (172.16.0.0/12): a real client's handshake (wrk, curl) that is
/// still completing through SYNPROXY at that instant is not the flood's.
fn syn_recv(ns: &str) -> usize {
    in_ns(
        ns,
        "ss",
        &["-Htn", "state", "syn-recv", "dst", "172.16.0.0/12"],
    )
    .lines()
    .filter(|l| !l.trim().is_empty())
    .count()
}

fn syn_flood(lab: &TestLab, n: u64) {
    let spec = GenSpec {
        sources: 4096,
        proto: Proto::Syn,
        size: 64,
        pps: Some(50_000.0),
        limit: Limit::Count(n),
        dst: Some(IpAddr::V4(tenant_addr(1))),
        ..GenSpec::default()
    };
    let rep = Generator::new(lab, &spec)
        .unwrap()
        .run(&AtomicBool::new(false))
        .unwrap();
    assert_eq!(rep.sent_packets, n);
}

#[test]
fn syn_proxy_serves_curl_and_wrk_and_keeps_a_flood_off_the_backlog() {
    let lab = TestLab::up("tsyn", 1);
    let mut a = lab_agent(&lab, 1, "");
    let ns = lab.tenant_ns(1);
    let _web = services::nginx(&ns, tenant_addr(1)).expect("nginx");
    let cfg = SynProxyConfig::default();
    services::synproxy_netfilter(&ns, 80, cfg.mss4, cfg.wscale).unwrap();
    submit(&mut a, "t1", SYNPROXY_C);
    let tid = a.tenant_id("t1").unwrap();
    let (c, p, st) = (
        a.tenant_map(tid, "syn_cfg").unwrap(),
        a.tenant_map(tid, "syn_ports").unwrap(),
        a.tenant_map(tid, "syn_stats").unwrap(),
    );
    cfg.apply(c.as_raw_fd(), p.as_raw_fd()).unwrap();
    let cookies0 = tcpext(&ns, "SyncookiesSent");

    // Real clients complete connections through the proxy.
    for _ in 0..5 {
        let page = in_ns(
            &lab.wan_ns(),
            "curl",
            &["-s", "--max-time", "5", "http://10.20.1.2/"],
        );
        assert_eq!(page, format!("hello from {ns}\n"));
    }
    let s = SynStats::read(st.as_raw_fd()).unwrap();
    assert_eq!((s.synacks, s.ack_valid), (5, 5), "{s:?}");
    assert!(s.flow > 0, "{s:?}");
    let w = in_ns(
        &lab.wan_ns(),
        "wrk",
        &["-t1", "-c4", "-d1s", "http://10.20.1.2/"],
    );
    assert!(!w.contains("Socket errors"), "{w}");
    assert!(!w.contains("Non-2xx"), "{w}");
    let s1 = SynStats::read(st.as_raw_fd()).unwrap();
    assert!(s1.ack_valid >= 9, "wrk opened its 4 connections: {s1:?}");

    // A SYN flood from 4096 sources is answered in XDP: no request socket,
    // no cookie from the server, no listen-queue overflow in the tenant.
    let overflows0 = tcpext(&ns, "ListenOverflows");
    syn_flood(&lab, 20_000);
    rampart_lab::testing::settle(&lab, 0, 20_000, || {
        SynStats::read(st.as_raw_fd()).unwrap().synacks - s1.synacks
    });
    let s2 = SynStats::read(st.as_raw_fd()).unwrap();
    assert_eq!(
        s2.synacks - s1.synacks + wire_losses(&lab),
        20_000,
        "every SYN answered: {s2:?}"
    );
    assert_eq!(
        syn_recv(&ns),
        0,
        "no half-open connection reached the server"
    );
    assert_eq!(tcpext(&ns, "SyncookiesSent"), cookies0);
    assert_eq!(tcpext(&ns, "ListenOverflows"), overflows0);
    let page = in_ns(
        &lab.wan_ns(),
        "curl",
        &["-s", "--max-time", "5", "http://10.20.1.2/"],
    );
    assert_eq!(page, format!("hello from {ns}\n"), "served after the flood");

    // Control: without the proxy (and without the namespace's SYNPROXY
    // rules, which would answer SYNs themselves), the same flood does
    // reach the server's backlog.
    assert!(a.remove_program(tid).unwrap());
    in_ns(&ns, "iptables", &["-t", "raw", "-F"]);
    in_ns(&ns, "iptables", &["-F"]);
    syn_flood(&lab, 20_000);
    assert!(
        syn_recv(&ns) > 0 || tcpext(&ns, "SyncookiesSent") > cookies0,
        "the flood reaches the server when nothing answers it in XDP"
    );
}

#[test]
fn userspace_forwarder_and_tcp_proxy_serve_real_clients() {
    let lab = TestLab::up("tusr", 1);
    let _a = lab_agent(&lab, 1, "");
    let ns = lab.tenant_ns(1);
    let _dns = services::dnsmasq_at(
        &ns,
        std::net::SocketAddrV4::new(tenant_addr(1), 5353),
        Ipv4Addr::new(192, 0, 2, 53),
    )
    .expect("dnsmasq");
    let limits = DnsLimits {
        src_qps: 0.01,
        src_burst: 2,
        pfx_qps: 0.0,
        pfx_burst: 1,
        truncate: true,
        ..DnsLimits::default()
    };
    let fwd = DnsForwarder::start(
        &ns,
        "10.20.1.2:53".parse().unwrap(),
        "10.20.1.2:5353".parse().unwrap(),
        &limits,
        None,
    )
    .unwrap();
    for _ in 0..2 {
        let out = dig(&lab, &["+short", "+notcp"]);
        assert_eq!(out.trim(), "192.0.2.53", "relayed from dnsmasq");
    }
    let tc = dig(&lab, &["+ignore", "+noedns"]);
    assert!(tc.contains("flags: qr tc rd;"), "{tc}");
    // The forwarder counts a reply after sending it: dig may have it first.
    let counts = || {
        let s = fwd.stats();
        (s.forwarded, s.relayed, s.truncated)
    };
    rampart_testkit::browser::poll(std::time::Duration::from_secs(10), || counts() == (2, 2, 1));
    let s = fwd.stats();
    assert_eq!((s.forwarded, s.relayed, s.truncated), (2, 2, 1), "{s:?}");

    let _web = services::nginx(&ns, tenant_addr(1)).expect("nginx");
    let proxy = TcpProxy::start(
        &ns,
        "10.20.1.2:8080".parse().unwrap(),
        "10.20.1.2:80".parse().unwrap(),
    )
    .unwrap();
    for _ in 0..3 {
        let page = in_ns(
            &lab.wan_ns(),
            "curl",
            &["-s", "--max-time", "5", "http://10.20.1.2:8080/"],
        );
        assert_eq!(page, format!("hello from {ns}\n"));
    }
    assert_eq!(proxy.accepted(), 3);
}
