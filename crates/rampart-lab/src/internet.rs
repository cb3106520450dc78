//! The Internet beyond the lab's wan: `xdp_internet` on wan0 lets frames to
//! wan's own addresses reach wan's stack and drops (counts as departed) the
//! rest — the host's replies to spoofed sources, which on a real link leave
//! through the uplink and cost the host nothing more. Without it, a spoofed
//! flood's replies climb wan's kernel stack on the generator's CPU, and the
//! lab, not the host under test, caps the rate the host is offered.
//!
//! Opt-in: a benchmark attaches it after it gave wan0 its aliases
//! ([`Internet::attach`] reads every address wan0 has then; add later ones
//! with [`Internet::own`]). Dropping the [`Internet`] detaches it.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

use ipnet::IpNet;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::abi::lab::InternetCounters;
use rampart_bpf::xdp_internet::{XdpInternetSkel, XdpInternetSkelBuilder};
use rampart_dataplane::cmd::ip;
use rampart_dataplane::emulated_nic::key;
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::xdp::{XdpLink, XdpMode};

use crate::error::Result;

/// `xdp_internet`, attached.
pub struct Internet {
    skel: XdpInternetSkel<'static>,
    _link: XdpLink,
    own: Vec<IpNet>,
}

impl std::fmt::Debug for Internet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Internet").field("own", &self.own).finish()
    }
}

/// Frames `xdp_internet` let through and frames it sent off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct InternetCounts {
    /// To wan's own addresses, or not unicast IP.
    pub delivered: u64,
    /// To addresses no host in wan has: gone into the Internet.
    pub departed: u64,
}

/// The global-scope addresses of `iface` in namespace `ns`, as host prefixes.
fn addresses(ns: &str, iface: &str) -> Result<Vec<IpNet>> {
    let out = ip(&[
        "-n", ns, "-o", "addr", "show", "dev", iface, "scope", "global",
    ])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|t| *t == "inet" || *t == "inet6")?;
            let a: IpAddr = w.next()?.split('/').next()?.parse().ok()?;
            Some(IpNet::from(a))
        })
        .collect())
}

impl Internet {
    /// Attach `xdp_internet` on `iface` of namespace `ns`, owning every
    /// global address the interface has now.
    ///
    /// # Errors
    /// Load or attach failures (another XDP program there), a failing `ip`.
    pub fn attach(ns: &str, iface: &str) -> Result<Self> {
        let open = XdpInternetSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .bpf_context(|| "opening xdp_internet".into())?;
        let skel = open.load().bpf_context(|| "loading xdp_internet".into())?;
        let mut me = Self {
            _link: XdpLink::attach(
                skel.progs.xdp_internet.as_fd().as_raw_fd(),
                Some(ns),
                iface,
                XdpMode::Native,
            )?,
            skel,
            own: Vec::new(),
        };
        for p in addresses(ns, iface)? {
            me.own(p)?;
        }
        Ok(me)
    }

    /// Frames to `prefix` stay in wan from now on.
    ///
    /// # Errors
    /// A full table ([`rampart_bpf::abi::lab::INTERNET_OWN_MAX`] prefixes).
    pub fn own(&mut self, prefix: IpNet) -> Result<()> {
        self.skel
            .maps
            .internet_own
            .update(&key(prefix), &1u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .bpf_context(|| format!("adding {prefix} to internet_own"))?;
        self.own.push(prefix);
        Ok(())
    }

    /// The prefixes wan owns.
    pub fn owned(&self) -> &[IpNet] {
        &self.own
    }

    /// Frames delivered and departed so far (all CPUs).
    ///
    /// # Errors
    /// Map read failure.
    pub fn counts(&self) -> Result<InternetCounts> {
        let per_cpu = self
            .skel
            .maps
            .internet_count
            .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .bpf_context(|| "reading internet_count".into())?
            .unwrap_or_default();
        let mut c = InternetCounts::default();
        for b in per_cpu {
            let v: InternetCounters = bytemuck::try_pod_read_unaligned(&b).unwrap_or_default();
            c.delivered += v.delivered;
            c.departed += v.departed;
        }
        Ok(c)
    }
}
