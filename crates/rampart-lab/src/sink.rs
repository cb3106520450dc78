//! The counting sink: `xdp_sink` attached to `host0`, counting and
//! dropping every frame, so the generator's ceiling into the host is one
//! command. Dropping the [`Sink`] detaches it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::abi::lab::{SinkCounters, SinkSrcKey};
use rampart_bpf::xdp_sink::{XdpSinkSkel, XdpSinkSkelBuilder};
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::xdp::{XdpLink, XdpMode};

use crate::error::Result;

/// An attached counting sink.
pub struct Sink {
    skel: XdpSinkSkel<'static>,
    _link: XdpLink,
    /// Where it is attached (namespace, interface).
    pub at: (String, String),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink").field("at", &self.at).finish()
    }
}

/// Packets and bytes the sink has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Frames.
    pub packets: u64,
    /// Bytes (frame lengths).
    pub bytes: u64,
}

impl Sink {
    /// Load and attach the sink on `iface` in namespace `ns`. With
    /// `histogram`, it also counts frames per source address (slower; for
    /// tests of the generator's distributions).
    ///
    /// # Errors
    /// Load or attach failures (e.g. another XDP program already there).
    pub fn attach(ns: &str, iface: &str, histogram: bool) -> Result<Self> {
        let mut open = XdpSinkSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .bpf_context(|| "opening xdp_sink".into())?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.sink_histogram = u32::from(histogram);
        }
        let skel = open.load().bpf_context(|| "loading xdp_sink".into())?;
        let link = XdpLink::attach(
            skel.progs.xdp_sink.as_fd().as_raw_fd(),
            Some(ns),
            iface,
            XdpMode::Native,
        )?;
        Ok(Self {
            skel,
            _link: link,
            at: (ns.to_string(), iface.to_string()),
        })
    }

    /// Total packets and bytes counted so far (all CPUs).
    ///
    /// # Errors
    /// Map read failure.
    pub fn counts(&self) -> Result<Counts> {
        let vals: Vec<[u64; 2]> = self
            .skel
            .maps
            .sink_count
            .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .bpf_context(|| "reading sink_count".into())?
            .unwrap_or_default()
            .iter()
            .map(|b| {
                let c: SinkCounters = bytemuck::try_pod_read_unaligned(b).unwrap_or_default();
                [c.packets, c.bytes]
            })
            .collect();
        Ok(Counts {
            packets: vals.iter().map(|v| v[0]).sum(),
            bytes: vals.iter().map(|v| v[1]).sum(),
        })
    }

    /// Frames per source address (histogram mode only; empty otherwise).
    ///
    /// # Errors
    /// Map read failure.
    pub fn sources(&self) -> Result<HashMap<IpAddr, u64>> {
        let map = &self.skel.maps.sink_sources;
        let mut out = HashMap::new();
        for k in map.keys() {
            let Some(v) = map
                .lookup(&k, libbpf_rs::MapFlags::ANY)
                .bpf_context(|| "reading sink_sources".into())?
            else {
                continue;
            };
            let Ok(key) = bytemuck::try_pod_read_unaligned::<SinkSrcKey>(&k) else {
                continue;
            };
            let a = key.addr;
            let addr = if key.family == 4 {
                IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
            } else {
                IpAddr::V6(Ipv6Addr::from(a))
            };
            out.insert(
                addr,
                u64::from_ne_bytes(v[..8].try_into().unwrap_or_default()),
            );
        }
        Ok(out)
    }
}
