//! Traffic for the tenant experiments: the lab's live-frames technique
//! (BPF_PROG_RUN on `wan0`, XDP_TX, through the EMULATED NIC to `host0`)
//! with frames spread round robin over one destination per tenant, so a
//! single generator thread floods every tenant with interleaved packets
//! (`bpf/progs/xdp_tenant_gen.bpf.c`). The lab's own generator sends to
//! one destination; running one per tenant would interleave them only at
//! scheduler time slices.
//!
//! Uses the lab's `gen-anchor` veth like the lab generator (so the two
//! cannot run at the same time in one lab).

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::xdp_tenant_gen::{XdpTenantGenSkel, XdpTenantGenSkelBuilder};
use rampart_dataplane::xdp::{XdpLink, XdpMode};
use rampart_dataplane::{netns, testrun};
use rampart_lab::packet::{self, FrameSpec, Proto};
use rampart_lab::{topology, Lab};
use serde::Serialize;

use crate::error::{Error, Result};

/// Most destinations.
pub const MAX_DST: usize = 8;

/// How long to send.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// Wall-clock time.
    Duration(Duration),
    /// Total frames.
    Count(u64),
}

/// What a run sent.
#[derive(Debug, Clone, Serialize)]
pub struct TrafficReport {
    /// Frames per destination, in the order given.
    pub sent: Vec<u64>,
    /// Wall time, s.
    pub seconds: f64,
    /// Total frames per second.
    pub pps: f64,
}

/// A loaded multi-destination generator.
pub struct TenantTraffic {
    skel: XdpTenantGenSkel<'static>,
    frame: Vec<u8>,
    ns: String,
    ifindex: u32,
    n: usize,
    _anchor: XdpLink,
}

impl std::fmt::Debug for TenantTraffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantTraffic")
            .field("ns", &self.ns)
            .field("destinations", &self.n)
            .finish()
    }
}

fn ip_check(hdr: &[u8]) -> [u8; 2] {
    let s = packet::sum16(hdr);
    let mut s = u64::from(s);
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    // sum16 adds words in host order; the complement is stored in the same order.
    (!(s as u16)).to_ne_bytes()
}

impl TenantTraffic {
    /// Load for `lab`, UDP frames of `size` bytes to port `dport` of each of `dsts`.
    ///
    /// # Errors
    /// Lab not up, bad sizes, too many destinations, load or anchor failures.
    pub fn new(lab: &Lab, dsts: &[Ipv4Addr], size: usize, dport: u16) -> Result<Self> {
        lab.require_up()?;
        if dsts.is_empty() || dsts.len() > MAX_DST {
            return Err(Error::Invalid(format!(
                "1..={MAX_DST} destinations, not {}",
                dsts.len()
            )));
        }
        let tpl = packet::build(&FrameSpec {
            proto: Proto::Udp,
            size,
            src: rampart_lab::gen::SRC_V4_BASE.into(),
            dst: dsts[0].into(),
            sport: 40000,
            dport,
            src_mac: topology::WAN_MAC,
            dst_mac: topology::HOST_MAC,
        })?;
        let mut frame = tpl.frame;
        // A zero UDP checksum means "none" over IPv4; the frame stays valid for every destination.
        frame[14 + 20 + 6..14 + 20 + 8].fill(0);
        let mut open = XdpTenantGenSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .map_err(|e| Error::bpf("opening xdp_tenant_gen", e))?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::Invalid("xdp_tenant_gen has no rodata".into()))?;
        ro.tgen_cfg.n_dst = dsts.len() as u32;
        for (i, d) in dsts.iter().enumerate() {
            let mut hdr = frame[14..34].to_vec();
            hdr[16..20].copy_from_slice(&d.octets());
            hdr[10..12].fill(0);
            ro.tgen_cfg.daddr[i] = u32::from_ne_bytes(d.octets());
            ro.tgen_cfg.ip_check[i] = u16::from_ne_bytes(ip_check(&hdr));
        }
        let skel = open
            .load()
            .map_err(|e| Error::bpf("loading xdp_tenant_gen", e))?;
        let ns = lab.wan_ns();
        let ifindex = netns::ifindex(Some(&ns), topology::WAN_IF)?;
        let anchor = XdpLink::attach(
            skel.progs.xdp_tenant_gen.as_fd().as_raw_fd(),
            Some(&ns),
            topology::GEN_ANCHOR_IF,
            XdpMode::Native,
        )?;
        Ok(Self {
            skel,
            frame,
            ns,
            ifindex,
            n: dsts.len(),
            _anchor: anchor,
        })
    }

    /// The frame template (first destination).
    pub fn template(&self) -> &[u8] {
        &self.frame
    }

    fn sent(&self) -> Result<Vec<u64>> {
        let vals = self
            .skel
            .maps
            .tgen_state
            .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .map_err(|e| Error::bpf("reading tgen_state", e))?
            .unwrap_or_default();
        let mut out = vec![0u64; self.n];
        for v in vals {
            for (i, o) in out.iter_mut().enumerate() {
                let off = 8 + 8 * i;
                *o += u64::from_ne_bytes(v[off..off + 8].try_into().unwrap_or_default());
            }
        }
        Ok(out)
    }

    /// Send from one thread pinned to `cpu`, as fast as possible or at
    /// `pps` (paced in 1 ms batches), until `limit` or `cancel`. With
    /// `realtime`, the thread runs SCHED_FIFO (priority 40) so that other
    /// processes on this shared machine do not open gaps in the flood (a
    /// wire does not pause when the scheduler runs someone else).
    ///
    /// # Errors
    /// A failing BPF_PROG_RUN (an interrupt ends the run early instead).
    pub fn run(
        &self,
        limit: Limit,
        pps: Option<f64>,
        cpu: usize,
        realtime: bool,
        cancel: &AtomicBool,
    ) -> Result<TrafficReport> {
        let before = self.sent()?;
        let fd = self.skel.progs.xdp_tenant_gen.as_fd().as_raw_fd();
        let start = Instant::now();
        let (frame, ns, ifindex) = (&self.frame, &self.ns, self.ifindex);
        std::thread::scope(|s| {
            s.spawn(move || -> Result<()> {
                netns::enter_current_thread(ns)?;
                let mut set = nix::sched::CpuSet::new();
                let _ = set.set(cpu);
                let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
                if realtime {
                    let param = libc::sched_param { sched_priority: 40 };
                    // SAFETY: plain syscall on the calling thread with a valid sched_param.
                    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
                        return Err(Error::io(
                            "making the generator thread SCHED_FIFO",
                            std::io::Error::last_os_error(),
                        ));
                    }
                }
                worker(fd, frame, ifindex, limit, pps, start, cancel)
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })?;
        let seconds = start.elapsed().as_secs_f64();
        let after = self.sent()?;
        let sent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let total: u64 = sent.iter().sum();
        Ok(TrafficReport {
            sent,
            seconds,
            pps: total as f64 / seconds,
        })
    }
}

/// Pacing granularity.
const PACE_SLOT: Duration = Duration::from_millis(1);

fn worker(
    fd: i32,
    frame: &[u8],
    ifindex: u32,
    limit: Limit,
    pps: Option<f64>,
    start: Instant,
    cancel: &AtomicBool,
) -> Result<()> {
    let deadline = match limit {
        Limit::Duration(d) => Some(start + d),
        Limit::Count(_) => None,
    };
    let mut left = match limit {
        Limit::Count(c) => c,
        Limit::Duration(_) => u64::MAX,
    };
    // Paced: one batch per PACE_SLOT. Each BPF_PROG_RUN call has a fixed
    // set-up cost (~0.3 ms here), so finer pacing is not possible; keep
    // paced rates low enough that a batch fits the receiving veth ring
    // (256 frames), i.e. ≤ ~250 kpps, or frames are dropped at the NIC hop.
    let (batch, interval) = match pps {
        Some(r) => {
            let b = (r * PACE_SLOT.as_secs_f64()).clamp(1.0, 65_536.0);
            (b as u32, Duration::from_secs_f64(b / r))
        }
        None => (1 << 14, Duration::ZERO),
    };
    let mut next = Instant::now();
    while left > 0 && !cancel.load(Ordering::Relaxed) {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if pps.is_some() {
            if next > now {
                std::thread::sleep(next - now);
            }
            next += interval;
        }
        let n = batch.min(u32::try_from(left).unwrap_or(u32::MAX)).max(1);
        match testrun::run_live(fd, frame, ifindex, n, n.min(256)) {
            Ok(_) => {}
            Err(rampart_dataplane::Error::Io { source, .. })
                if source.raw_os_error() == Some(libc::EINTR) =>
            {
                break
            }
            Err(e) => return Err(e.into()),
        }
        left -= u64::from(n);
    }
    Ok(())
}
