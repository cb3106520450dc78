//! Helpers shared by the tenant tests.
#![allow(dead_code)]

use std::os::fd::AsRawFd;

use rampart_tenant::compiler::{Built, Compiler, Submission};
use rampart_tenant::config::Config;
use rampart_tenant::confine::Policy;
use rampart_tenant::host::{HostAgent, TenantStats};
use rampart_testkit::frame::Frame;

/// Tenants a, b, c with prefix, VLAN/VNI and IPv6 selectors, on `lo`
/// (ifindex 1), loaded but not attached: driven with BPF_PROG_RUN.
pub fn agent(extra_infra: &str, fairness: bool) -> HostAgent {
    assert!(
        rampart_dataplane::features::is_root(),
        "tenant BPF tests need root: run them with ./run test"
    );
    let name = rampart_lab::testing::unique_prefix("tn");
    let cfg = format!(
        r#"
        [infra]
        name = "{name}"
        interfaces = ["lo"]
        attach = false
        {extra_infra}
        [fairness]
        enabled = {fairness}
        [[tenant]]
        name = "a"
        selectors = ["prefix:10.20.1.0/24", "prefix:fd20:0:0:1::/64", "vlan:101"]
        ports = ["lo"]
        [[tenant]]
        name = "b"
        selectors = ["prefix:10.20.2.0/24", "vni:5002"]
        [[tenant]]
        name = "c"
        selectors = ["prefix:10.20.3.0/24", "iface:lo"]
        "#
    );
    HostAgent::start(Config::parse(&cfg).expect("config")).expect("host agent")
}

/// UDP from 172.16.0.1:40000 with 18 zero bytes.
pub fn udp4(dst: [u8; 4], dport: u16) -> Vec<u8> {
    Frame::udp([172, 16, 0, 1], dst, 40000, dport)
        .zeros(18)
        .build()
}

/// UDP from fd66::1 to port 9 with 18 zero bytes.
pub fn udp6(dst: [u8; 16]) -> Vec<u8> {
    Frame::udp("fd66::1", dst, 40000, 9).zeros(18).build()
}

/// [`udp4`] to port 9 in an 802.1Q tag of `vid`.
pub fn vlan4(vid: u16, dst: [u8; 4]) -> Vec<u8> {
    Frame::udp([172, 16, 0, 1], dst, 40000, 9)
        .zeros(18)
        .vlan(vid)
        .build()
}

/// The 8-byte VXLAN header (RFC 7348) before an inner frame.
pub fn vxlan_header(vni: u32, flags: u8) -> Vec<u8> {
    let mut h = vec![flags, 0, 0, 0];
    h.extend_from_slice(&vni.to_be_bytes()[1..]);
    h.push(0);
    h
}

/// An outer IPv4/UDP VXLAN frame carrying an inner Ethernet/IPv4/UDP frame.
pub fn vxlan4(vni: u32, outer_dst: [u8; 4], flags: u8) -> Vec<u8> {
    let mut payload = vxlan_header(vni, flags);
    payload.extend_from_slice(&udp4([192, 168, 0, 1], 9));
    Frame::udp([172, 16, 0, 1], outer_dst, 40000, 4789)
        .payload(&payload)
        .build()
}

pub fn v6(last: [u16; 8]) -> [u8; 16] {
    std::net::Ipv6Addr::from(last).octets()
}

/// Run the dispatcher on `frame` arriving on lo; returns the XDP action.
pub fn run(a: &HostAgent, frame: &[u8]) -> u32 {
    rampart_dataplane::testrun::run_packet(a.dispatcher_fd(), frame, 1)
        .expect("BPF_PROG_RUN")
        .retval
}

pub fn run_out(a: &HostAgent, frame: &[u8]) -> (u32, Vec<u8>) {
    let o =
        rampart_dataplane::testrun::run_packet(a.dispatcher_fd(), frame, 1).expect("BPF_PROG_RUN");
    (o.retval, o.data)
}

pub fn stats(a: &HostAgent, name: &str) -> TenantStats {
    let id = if name == "(none)" {
        0
    } else {
        a.tenant_id(name).expect("tenant")
    };
    a.stats(id).expect("stats")
}

pub fn build(src: &str) -> Built {
    Compiler::new(Policy::default())
        .expect("clang")
        .build(Submission::C(src))
        .expect("build")
}

pub fn submit(a: &mut HostAgent, tenant: &str, src: &str) {
    let id = a.tenant_id(tenant).unwrap();
    a.install(id, &build(src)).expect("install");
}

/// Read a u64 at `key` (u32) from a tenant map.
pub fn map_u64(a: &HostAgent, tenant: &str, map: &str, key: u32) -> u64 {
    let fd = a
        .tenant_map(a.tenant_id(tenant).unwrap(), map)
        .expect("map");
    fd_u64(&fd, key)
}

/// Read a u64 at `key` (u32) from any map with 4-byte keys and 8-byte values.
pub fn fd_u64(fd: &impl AsRawFd, key: u32) -> u64 {
    rampart_dataplane::maps::lookup_u64(fd.as_raw_fd(), key)
        .unwrap_or_else(|e| panic!("lookup [{key}]: {e}"))
}

/// A program that counts its packets in `counts[0]` (adding `step`) and returns `verdict`.
pub fn counter_prog(step: u32, verdict: &str) -> String {
    format!(
        r#"#include "rampart_tenant.h"
struct {{
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
}} counts SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{{
    __u32 k = 0;
    __u64 *v = bpf_map_lookup_elem(&counts, &k);
    if (v)
        __sync_fetch_and_add(v, {step});
    return {verdict};
}}
"#
    )
}

/// A host agent attached to host0 of `lab`, tenants t1..tn with their
/// prefixes, host-side ports and domains.
pub fn lab_agent(lab: &rampart_lab::Lab, n: u32, extra: &str) -> HostAgent {
    let name = rampart_lab::testing::unique_prefix("ta");
    let mut t = String::new();
    for i in 1..=n {
        t.push_str(&format!(
            "[[tenant]]\nname = \"t{i}\"\nselectors = [\"prefix:10.20.{i}.0/24\"]\n\
             ports = [\"t{i}\"]\ndomain_netns = \"{}\"\n",
            lab.tenant_ns(i)
        ));
    }
    let cfg = format!(
        "[infra]\nname = \"{name}\"\nnetns = \"{}\"\ninterfaces = [\"host0\"]\n{extra}\n[fairness]\nenabled = false\n{t}",
        lab.host_ns()
    );
    HostAgent::start(Config::parse(&cfg).expect("config")).expect("host agent")
}

/// Run a command in a namespace and return stdout (panics with stderr on failure).
pub fn in_ns(ns: &str, prog: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, prog])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{prog} {args:?} in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Frames lost on the lab's wire before host0 (a veth ring that was full
/// because a loaded CPU delayed NAPI), each once: not the infrastructure's
/// doing; tests that count every packet add these back.
pub fn wire_losses(lab: &rampart_lab::Lab) -> u64 {
    rampart_lab::gen::wire_lost_total(lab).expect("the veths' counters")
}
