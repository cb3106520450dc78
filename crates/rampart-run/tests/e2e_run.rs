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
         [stream]\napps = [\"flowmeter\", \"portscan\"]\n\
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

    // Stopping ends the tap's input: both apps flush what they hold.
    host.stop();
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

    let name = Scope::new(Some(&ns), HOST_IF).unwrap().name();
    Filter::detach(&name).unwrap();
    assert!(Chain::remove(Some(&ns), HOST_IF).unwrap());
}
