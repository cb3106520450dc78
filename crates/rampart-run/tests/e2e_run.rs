//! `rampart run` on a lab host's interface: one daemon, the three
//! applications chained on one XDP entry point, one API and one /metrics;
//! stopping it leaves only the ddos stage (still filtering) in the chain.

use std::io::{Read, Write};

use rampart_dataplane::chain::{Chain, CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT};
use rampart_ddos::filter::{Filter, Scope};
use rampart_lab::testing::{unique_prefix, TestLab};
use rampart_lab::topology::HOST_IF;
use rampart_run::{Config, Host};

fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

#[test]
fn one_daemon_chains_the_three_applications_on_one_interface() {
    let lab = TestLab::up("run", 0);
    let ns = lab.host_ns();
    let state = std::env::temp_dir().join(unique_prefix("runstate"));
    let cfg = Config::parse(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [alerts]\nfile = \"\"\n\
         [[interface]]\nname = \"{HOST_IF}\"\nnetns = \"{ns}\"\n\
         [ddos.daemon]\nstate_dir = \"{}\"\nnice = 0\n\
         [stream]\napps = [\"portscan\"]\n\
         [tenant.infra]\nname = \"{}\"\n\
         [[tenant.tenant]]\nname = \"acme\"\nselectors = [\"prefix:10.77.0.0/16\"]\n",
        state.display(),
        unique_prefix("runt")
    ))
    .unwrap();
    let host = Host::start(&cfg).unwrap();
    let chain = Chain::open(Some(&ns), HOST_IF).unwrap();
    let slots: Vec<u32> = chain.stages().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(
        slots,
        [CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT]
    );

    let addr = host.api_addr().expect("the one API");
    let (code, body) = get(addr, "/ddos/v1/status");
    assert_eq!(code, 200, "{body}");
    let (code, body) = get(addr, "/v1/openapi.json");
    assert_eq!(code, 200);
    for p in ["/ddos/v1/blocked", "/tenant/v1/"] {
        assert!(body.contains(p), "{p} in the one OpenAPI document");
    }
    let (code, body) = get(addr, "/metrics");
    assert_eq!(code, 200);
    for m in [
        "rampart_ddos_",
        "rampart_tenant_",
        "rampart_stream_flows_total",
    ] {
        assert!(body.contains(m), "{m} on the one /metrics");
    }

    host.stop();
    let slots: Vec<u32> = chain.stages().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(
        slots,
        [CHAIN_SLOT_DDOS],
        "the ddos stage keeps filtering after a stop"
    );
    let name = Scope::new(Some(&ns), HOST_IF).unwrap().name();
    Filter::detach(&name).unwrap();
    assert!(chain.stages().unwrap().is_empty());
    assert!(Chain::remove(Some(&ns), HOST_IF).unwrap());
    let _ = std::fs::remove_dir_all(state);
}

/// `METHOD path` with a token and a JSON body over a raw connection.
fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: &str,
) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

/// A DNS query for `a.example` (type A), id `id`.
fn dns_query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend_from_slice(b"\x01a\x07example\x00\x00\x01\x00\x01");
    q
}

/// Every stage on one interface at once, with traffic: a source blocked
/// through the ddos API is dropped; the flowmeter and the port-scan
/// detector both read the one tap (flow records, and the wan host that
/// swept closed ports flagged); the tenant's program, submitted through
/// the tenant API, handles the tenant's DNS queries.
#[test]
fn the_three_stages_see_traffic_on_one_interface() {
    let lab = TestLab::up("run3", 1);
    let ns = lab.host_ns();
    let wan = lab.wan_ns();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "admin op-token-1234\nacme acme-token-1234\n").unwrap();
    let alerts = dir.path().join("alerts.jsonl");
    let cfg = Config::parse(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\
         [alerts]\nfile = \"{}\"\n\
         [[interface]]\nname = \"{HOST_IF}\"\nnetns = \"{ns}\"\n\
         [ddos.daemon]\nstate_dir = \"{}\"\nnice = 0\n\
         [stream]\napps = [\"flowmeter\", \"portscan\", \"synflood\"]\n\
         [tenant.infra]\nname = \"{}\"\n\
         [[tenant.tenant]]\nname = \"acme\"\nselectors = [\"prefix:10.20.1.0/24\"]\n",
        tokens.display(),
        alerts.display(),
        dir.path().join("state").display(),
        unique_prefix("run3t")
    ))
    .unwrap();
    let host = Host::start(&cfg).unwrap();
    let counts = host.stream_counts.clone();
    let addr = host.api_addr().unwrap();
    let chain = Chain::open(Some(&ns), HOST_IF).unwrap();
    let slots: Vec<u32> = chain.stages().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(
        slots,
        [CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT]
    );

    // The tenant submits its DNS rate limiter; a query to its address runs it.
    let tenant = rampart_tenant::client::Client::new(&format!("http://{addr}"), "acme-token-1234");
    tenant
        .put(
            "/tenant/v1/program",
            rampart_tenant::programs::DNS_RATELIMIT_C.as_bytes(),
        )
        .unwrap()
        .unwrap_or_else(|e| panic!("program refused: {}", e.message()));
    // Its settings by name, on rampart run's API as on tenant serve's.
    let now = tenant
        .put_json(
            "/tenant/v1/config/dns",
            &serde_json::json!({"per_source_qps": 1000, "mode": "truncate"}),
        )
        .unwrap()
        .unwrap_or_else(|e| panic!("settings refused: {}", e.message()));
    assert_eq!(now["per_source_qps"], 1000.0, "{now}");
    let now = tenant.get("/tenant/v1/config/dns").unwrap().unwrap();
    assert_eq!(now["mode"], "truncate", "{now}");
    let tenant_addr = std::net::Ipv4Addr::from(rampart_lab::Lab::tenant_v4(1));
    rampart_dataplane::netns::run_in(Some(&wan), || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        for id in 0..5u16 {
            s.send_to(&dns_query(id), (tenant_addr, 53)).unwrap();
        }
        Ok(())
    })
    .unwrap();
    // The program counts every query it sees in dns_stats; wait for one.
    let mut counted = 0u64;
    for _ in 0..100 {
        let dump = tenant.get("/tenant/v1/maps/dns_stats").unwrap().unwrap();
        counted = dump["entries"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|e| e["value"].as_array().cloned().unwrap_or_default())
            .filter(|v| v.as_str().is_some_and(|h| h.chars().any(|c| c != '0')))
            .count() as u64;
        if counted > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(counted > 0, "the tenant's program counted the DNS queries");

    // wan sweeps closed ports of host0: connection attempts (flows) that
    // fail (a scanner's walk).
    let host_addr = std::net::Ipv4Addr::from(rampart_lab::topology::HOST_V4);
    rampart_dataplane::netns::run_in(Some(&wan), || {
        for port in 2000..2040u16 {
            let _ = std::net::TcpStream::connect_timeout(
                &(host_addr, port).into(),
                std::time::Duration::from_millis(500),
            );
        }
        Ok(())
    })
    .unwrap();

    // The operator blocks wan; its frames are then dropped by the ddos stage.
    let (code, body) = send(
        addr,
        "POST",
        "/ddos/v1/blocked",
        "op-token-1234",
        r#"{"prefix": "10.10.0.1/32", "reason": "test"}"#,
    );
    assert_eq!(code, 200, "{body}");
    let filter = Filter::open(&Scope::new(Some(&ns), HOST_IF).unwrap().name()).unwrap();
    let mut dropped = 0;
    for _ in 0..100 {
        rampart_dataplane::netns::run_in(Some(&wan), || {
            let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            let _ = s.send_to(b"x", (host_addr, 9));
            Ok(())
        })
        .unwrap();
        dropped = filter.stats().unwrap().dropped("blacklist");
        if dropped > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(dropped > 0, "the blocked source's frames are dropped");

    // A SYN flood from spoofed sources to a listening port: handshakes
    // that never complete, for synflood.
    let listener = rampart_dataplane::netns::run_in(Some(&ns), || {
        Ok(std::net::TcpListener::bind((host_addr, 8099)).unwrap())
    })
    .unwrap();
    let flood = rampart_lab::gen::GenSpec {
        proto: rampart_lab::packet::Proto::Syn,
        sources: 1000,
        dport: Some(8099),
        // 400/s: under the shipped syn_flood floor (1000/s), so the ddos
        // stage leaves the SYNs to the host and the tap sees them all.
        pps: Some(400.0),
        limit: rampart_lab::gen::Limit::Count(1000),
        ..rampart_lab::gen::GenSpec::default()
    };
    rampart_lab::gen::Generator::new(&lab, &flood)
        .unwrap()
        .run(&std::sync::atomic::AtomicBool::new(false))
        .unwrap();

    // Stopping ends the tap's input: the apps flush what they hold.
    host.stop();
    drop(listener);
    let flows = counts.flows.load(std::sync::atomic::Ordering::Relaxed);
    assert!(flows > 0, "the flowmeter emitted flow records");
    assert!(
        counts.alerts.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the port-scan detector raised an alert"
    );
    let text = std::fs::read_to_string(&alerts).unwrap_or_default();
    assert!(
        text.lines()
            .any(|l| l.contains("\"port_scan\"") && l.contains("\"10.10.0.1\"")),
        "wan (10.10.0.1) flagged as a scanner in the one alert stream:\n{text}"
    );
    assert!(
        text.lines().any(|l| l.contains("\"syn_flood\"")
            && l.contains("\"10.10.0.2\"")
            && l.contains("\"dest_port\":8099")),
        "the SYN flood on 10.10.0.2:8099 in the one alert stream:\n{text}"
    );

    let name = Scope::new(Some(&ns), HOST_IF).unwrap().name();
    Filter::detach(&name).unwrap();
    assert!(Chain::remove(Some(&ns), HOST_IF).unwrap());
}

fn post(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    send(addr, "POST", path, "tok-ops-12345678", body)
}

/// Packets from `src` that reached the host's stack (an iptables raw rule
/// counts them before anything else does).
fn reached(ns: &str, src: &str) -> u64 {
    let out = rampart_dataplane::cmd::in_ns(
        ns,
        "iptables",
        &["-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n"],
    )
    .unwrap();
    out.lines()
        .find(|l| l.split_whitespace().any(|w| w == src))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no counting rule for {src}: {out}"))
}

#[test]
fn stages_come_and_go_under_a_flood_without_losing_a_packet() {
    use rampart_lab::gen::{GenSpec, Generator, Limit};
    use rampart_lab::packet::Proto;
    use std::sync::atomic::{AtomicBool, Ordering};

    let lab = TestLab::up("runsw", 0);
    let ns = lab.host_ns();
    let state = std::env::temp_dir().join(unique_prefix("runswstate"));
    let path = std::env::temp_dir().join(format!("{}.toml", unique_prefix("runsw")));
    let tname = unique_prefix("runswt");
    let tokens = std::env::temp_dir().join(unique_prefix("runswtok"));
    std::fs::write(&tokens, "ops tok-ops-12345678\n").unwrap();
    // Whatever happens, the pins go: the ddos stage stays in the chain
    // after the host stops, by design.
    struct Cleanup(String, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let name = Scope::new(Some(&self.0), HOST_IF).unwrap().name();
            let _ = Filter::detach(&name);
            let _ = Chain::remove(Some(&self.0), HOST_IF);
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
    let _cleanup = Cleanup(ns.clone(), state.display().to_string());
    // Two sources, paced: the first is legitimate, the second blocked.
    let spec = GenSpec {
        sources: 2,
        proto: Proto::Udp,
        pps: Some(20_000.0),
        limit: Limit::Seconds(120.0),
        threads: 1,
        ..GenSpec::default()
    };
    let (legit, blocked) = (spec.source_addr(0), spec.source_addr(1));
    let write = |stages: bool| {
        let mut t = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n[alerts]\nfile = \"\"\n\
             [[interface]]\nname = \"{HOST_IF}\"\nnetns = \"{ns}\"\n\
             [ddos.daemon]\nstate_dir = \"{}\"\nnice = 0\n\
             [ddos.detect]\nwhitelist = [\"{legit}/32\"]\n",
            tokens.display(),
            state.display()
        );
        if stages {
            t.push_str(&format!(
                "[stream]\napps = [\"flowmeter\"]\n\
                 [tenant.infra]\nname = \"{tname}\"\n\
                 [[tenant.tenant]]\nname = \"acme\"\nselectors = [\"prefix:10.77.0.0/16\"]\n"
            ));
        }
        std::fs::write(&path, t).unwrap();
    };
    write(true);
    let host = Host::start(&Config::load(&path).unwrap()).unwrap();
    host.reload_from(&path);
    let chain = Chain::open(Some(&ns), HOST_IF).unwrap();
    let slots = || -> Vec<u32> { chain.stages().unwrap().iter().map(|s| s.0).collect() };
    let addr = host.api_addr().unwrap();
    let (code, body) = post(
        addr,
        "/ddos/v1/blocked",
        &format!(r#"{{"prefix": "{blocked}", "reason": "test"}}"#),
    );
    assert_eq!(code, 200, "{body}");
    for src in [legit, blocked] {
        rampart_dataplane::cmd::in_ns(
            &ns,
            "iptables",
            &["-t", "raw", "-A", "PREROUTING", "-s", &src.to_string()],
        )
        .unwrap();
    }
    let name = Scope::new(Some(&ns), HOST_IF).unwrap().name();
    let filter = Filter::open(&name).unwrap();
    let dropped0 = filter.stats().unwrap().dropped("blacklist");
    let lost = || -> u64 { rampart_lab::gen::wire_lost_total(&lab).unwrap() };
    let lost0 = lost();

    let g = Generator::new(&lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop).unwrap());
        // Wait for the flood to reach the host before the first switch
        // (the deadline only guards against a hang).
        let t0 = std::time::Instant::now();
        while reached(&ns, &legit.to_string()) == 0 {
            assert!(
                t0.elapsed().as_secs() < 60,
                "the flood never reached the host"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for round in 0..3 {
            write(false);
            let m = host.reload("test").unwrap();
            assert!(
                m.contains("stream stage removed") && m.contains("tenant stage removed"),
                "{m}"
            );
            assert_eq!(slots(), [CHAIN_SLOT_DDOS], "round {round}");
            write(true);
            let m = host.reload("test").unwrap();
            assert!(
                m.contains("stream stage added") && m.contains("tenant stage added"),
                "{m}"
            );
            assert_eq!(
                slots(),
                [CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT],
                "round {round}"
            );
        }
        stop.store(true, Ordering::Relaxed);
        run.join().unwrap()
    });
    // Every packet is accounted for: the legitimate ones reached the stack,
    // the blocked source's were dropped by the ddos stage, and the rest is
    // what the lab's veths lost (ring overflow: counted, not guessed).
    let seen = reached(&ns, &legit.to_string());
    let dropped = filter.stats().unwrap().dropped("blacklist") - dropped0;
    let wire = lost() - lost0;
    assert_eq!(
        reached(&ns, &blocked.to_string()),
        0,
        "the blocked source never passed"
    );
    assert!(
        seen > 1_000 && dropped > 1_000,
        "both sources flowed: {seen} {dropped}"
    );
    assert!(
        seen + dropped <= report.sent_packets,
        "{seen} + {dropped} > {}",
        report.sent_packets
    );
    let missing = report.sent_packets - seen - dropped;
    eprintln!(
        "sent {}, legitimate reached the stack {seen}, blocked dropped {dropped}, missing {missing}, lost on the wire {wire}",
        report.sent_packets
    );
    assert!(
        missing <= wire,
        "{missing} of {} packets missing, {wire} lost on the wire: the switches lost packets",
        report.sent_packets
    );
    host.stop();
    Filter::detach(&name).unwrap();
    assert!(Chain::remove(Some(&ns), HOST_IF).unwrap());
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(tokens);
}
