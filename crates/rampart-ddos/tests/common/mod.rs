//! Helpers shared by the ddos tests: a throwaway network namespace to
//! install a filter in, the frames most tests send (built with the test
//! kit), BPF_PROG_RUN with repeats, the filter's reason counters.
#![allow(dead_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use rampart_ddos::filter::{Filter, FilterConfig, Scope};
use rampart_ddos::{BlockEntry, Prefix};
use rampart_testkit::frame::{tcp, Frame};
use rampart_testkit::parse::Limits;
use rampart_testkit::prog::{run_n, Counter};

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

/// What the filter and feature stage loaded with `cfg` walk (PPPoE and
/// MPLS always), for the test kit's parse oracle.
pub fn parse_limits(cfg: &FilterConfig) -> Limits {
    Limits {
        max_vlans: u8::try_from(cfg.max_vlans).unwrap(),
        max_v6_ext: u8::try_from(cfg.max_v6_ext).unwrap(),
        shims: true,
    }
}

/// Run the program `repeat` times on `pkt` (one BPF_PROG_RUN each, see
/// [`rampart_testkit::prog::run_n`]); return the verdict.
pub fn run(prog: &OwnedFd, pkt: &[u8], repeat: u32) -> u32 {
    run_n(prog.as_raw_fd(), pkt, repeat)
}

/// UDP from port 40000 with `payload` zero bytes: what most ddos tests send.
pub fn udp(src: &str, dst: &str, dport: u16, payload: usize) -> Vec<u8> {
    Frame::udp(src, dst, 40000, dport).zeros(payload).build()
}

/// TCP from port 40000 with `flags` ([`tcp`] bits).
pub fn tcp(src: &str, dst: &str, dport: u16, flags: u8) -> Vec<u8> {
    let ack = if flags & tcp::ACK != 0 { 5 } else { 0 };
    Frame::tcp(src, dst, 40000, dport)
        .flags(flags)
        .ack(ack)
        .build()
}

impl Installed {
    /// The filter's reason counters (`drop.<reason>`, `pass.<reason>`,
    /// packets and bytes) for [`rampart_testkit::prog::Runner`].
    pub fn reasons(&self) -> Vec<Counter> {
        let s = self.filter.stats().unwrap();
        let drops = s.drops.iter().map(|(n, c)| ("drop", n, c));
        let passes = s.passes.iter().map(|(n, c)| ("pass", n, c));
        drops
            .chain(passes)
            .map(|(kind, n, c)| Counter::with_bytes(format!("{kind}.{n}"), c.packets, c.bytes))
            .collect()
    }
}
