//! Helpers shared by the ddos tests: a throwaway network namespace to
//! install a filter in, packet builders, BPF_PROG_RUN with repeats.
#![allow(dead_code)]

use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use etherparse::PacketBuilder;
use rampart_ddos::filter::{Filter, FilterConfig, Scope};
use rampart_ddos::{BlockEntry, Prefix};

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// A named netns holding a filter on its `lo`; both removed on drop.
pub struct Installed {
    pub ns: String,
    pub filter: Filter,
}

impl Installed {
    pub fn new(tag: &str, cfg: &FilterConfig) -> Self {
        rampart_lab::testing::require_kernel();
        static N: AtomicU32 = AtomicU32::new(0);
        let ns = format!(
            "{tag}{:x}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let st = std::process::Command::new("ip")
            .args(["netns", "add", &ns])
            .status()
            .expect("ip");
        assert!(st.success(), "ip netns add {ns}");
        let scope = Scope::new(Some(&ns), "lo").unwrap();
        let filter = match Filter::create(&scope, cfg) {
            Ok(f) => f,
            Err(e) => {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", &ns])
                    .status();
                panic!("creating the filter: {e}");
            }
        };
        Self { ns, filter }
    }

    pub fn prog(&self) -> OwnedFd {
        self.filter.prog_fd().unwrap()
    }

    pub fn block(&mut self, list: &[&str]) {
        let e: Vec<BlockEntry> = list
            .iter()
            .map(|s| BlockEntry {
                prefix: Prefix::parse(s).unwrap(),
                ttl: None,
            })
            .collect();
        self.filter.block(&e).unwrap();
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let name = self.filter.name().to_string();
        let _ = Filter::detach(&name);
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
    }
}

/// Exact-count configuration for tests (every match counted).
pub fn exact_cfg() -> FilterConfig {
    FilterConfig {
        max_entries: 1 << 14,
        max_other: 1024,
        sample_shift: 0,
        features_capacity: 4096,
        ..Default::default()
    }
}

/// Run the program `repeat` times on `pkt`; return the verdict.
///
/// One BPF_PROG_RUN call per run: with a kernel-side repeat > 1 a pending
/// signal aborts the loop part-way with EINTR after some runs already
/// changed the maps (a retry would count them twice); a single run always
/// completes.
pub fn run(prog: &OwnedFd, pkt: &[u8], repeat: u32) -> u32 {
    let mut out = vec![0u8; pkt.len() + 256];
    let mut verdict = None;
    for _ in 0..repeat {
        let mut opts = libbpf_sys::bpf_test_run_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
            data_in: pkt.as_ptr().cast(),
            data_size_in: pkt.len() as u32,
            data_out: out.as_mut_ptr().cast(),
            data_size_out: out.len() as u32,
            repeat: 1,
            ..Default::default()
        };
        // SAFETY: buffers outlive the call and are sized as stated.
        let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
        assert_eq!(
            rc,
            0,
            "BPF_PROG_RUN: {}",
            std::io::Error::from_raw_os_error(-rc)
        );
        assert!(
            verdict.is_none_or(|v| v == opts.retval),
            "the verdict changed between runs"
        );
        verdict = Some(opts.retval);
    }
    verdict.expect("repeat >= 1")
}

pub fn udp(src: &str, dst: &str, dport: u16, payload: usize) -> Vec<u8> {
    let (s, d): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
    let mut v = Vec::new();
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B);
    match (s, d) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b
            .ipv4(s.octets(), d.octets(), 64)
            .udp(40000, dport)
            .write(&mut v, &vec![0; payload]),
        (IpAddr::V6(s), IpAddr::V6(d)) => b
            .ipv6(s.octets(), d.octets(), 64)
            .udp(40000, dport)
            .write(&mut v, &vec![0; payload]),
        _ => panic!("mixed families"),
    }
    .unwrap();
    v
}

/// TCP with the given flags: "S", "SA", "R", "A".
pub fn tcp(src: &str, dst: &str, dport: u16, flags: &str) -> Vec<u8> {
    let (s, d): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
    let mut v = Vec::new();
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B);
    let mut t = match (s, d) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b
            .ipv4(s.octets(), d.octets(), 64)
            .tcp(40000, dport, 1, 1000),
        (IpAddr::V6(s), IpAddr::V6(d)) => b
            .ipv6(s.octets(), d.octets(), 64)
            .tcp(40000, dport, 1, 1000),
        _ => panic!("mixed families"),
    };
    if flags.contains('S') {
        t = t.syn();
    }
    if flags.contains('A') {
        t = t.ack(5);
    }
    if flags.contains('R') {
        t = t.rst();
    }
    t.write(&mut v, &[]).unwrap();
    v
}

pub fn icmp4(src: &str, dst: &str) -> Vec<u8> {
    let (s, d): (std::net::Ipv4Addr, std::net::Ipv4Addr) =
        (src.parse().unwrap(), dst.parse().unwrap());
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(s.octets(), d.octets(), 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut v, &[0; 8])
        .unwrap();
    v
}

/// Insert `tags` 802.1Q tags after the MACs.
pub fn vlan(frame: &[u8], tags: usize) -> Vec<u8> {
    let mut v = frame[..12].to_vec();
    for t in 0..tags {
        v.extend_from_slice(&0x8100u16.to_be_bytes());
        v.extend_from_slice(&(10u16 + t as u16).to_be_bytes());
    }
    v.extend_from_slice(&frame[12..]);
    v
}

/// A shim between Ethernet and IP: the frame's EtherType becomes `ethertype`,
/// `header` goes before the IP header.
pub fn shim(frame: &[u8], ethertype: u16, header: &[u8]) -> Vec<u8> {
    let mut v = frame[..12].to_vec();
    v.extend_from_slice(&ethertype.to_be_bytes());
    v.extend_from_slice(header);
    v.extend_from_slice(&frame[14..]);
    v
}

/// MPLS (0x8847) with `labels` label stack entries before the IP header.
pub fn mpls(frame: &[u8], labels: usize) -> Vec<u8> {
    let mut h = Vec::new();
    for i in 0..labels {
        let bos = u32::from(i + 1 == labels);
        h.extend_from_slice(&((((16 + i as u32) << 12) | (bos << 8) | 64).to_be_bytes()));
    }
    shim(frame, 0x8847, &h)
}

/// A PPPoE session frame (0x8864) carrying the IP packet of `frame` as PPP
/// protocol `ppp` (0x0021 IPv4, 0x0057 IPv6).
pub fn pppoe(frame: &[u8], ppp: u16) -> Vec<u8> {
    let len = (frame.len() - 14 + 2) as u16;
    let mut h = vec![0x11, 0, 0, 7];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&ppp.to_be_bytes());
    shim(frame, 0x8864, &h)
}

pub fn arp() -> Vec<u8> {
    let mut v = vec![0xffu8; 6];
    v.extend_from_slice(&MAC_A);
    v.extend_from_slice(&[0x08, 0x06]);
    v.extend_from_slice(&[0u8; 28]);
    v
}
