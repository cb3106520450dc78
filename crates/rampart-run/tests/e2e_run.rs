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
