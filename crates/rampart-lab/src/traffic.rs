//! Traffic for the tenant experiments: the lab's live-frames technique
//! (BPF_PROG_RUN on `wan0`, XDP_TX, through the EMULATED NIC to `host0`)
//! with frames (the lab's templates: UDP, SYN, ACK, DNS, ICMP over IPv4)
//! spread round robin over one destination per tenant, so a single
//! generator thread floods every tenant with interleaved packets
//! (`bpf/lab/xdp_tenant_gen.bpf.c`). The lab's own generator sends to
//! one destination; running one per tenant would interleave them only at
//! scheduler time slices.
//!
//! Uses the lab's `gen-anchor` veth like the lab generator (so the two
//! cannot run at the same time in one lab).

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::packet::{self, FrameSpec, Proto};
use crate::{topology, Lab};
use bytemuck::pod_read_unaligned;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::abi::lab::{
    TgenCpuState, TmixCpuState, TGEN_MAX_DST, TMIX_MAX_LEN, TMIX_MAX_SLOT,
};
use rampart_bpf::xdp_tenant_gen::{XdpTenantGenSkel, XdpTenantGenSkelBuilder};
use rampart_bpf::xdp_tenant_mix::{XdpTenantMixSkel, XdpTenantMixSkelBuilder};
use rampart_dataplane::xdp::{XdpLink, XdpMode};
use rampart_dataplane::{netns, testrun};
use serde::Serialize;

use crate::error::{Error, Result};

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

/// Called on the caller's thread while [`TenantTraffic::run_with`] sends;
/// its error type is the caller's.
pub type During<'a, E = Error> = &'a mut dyn FnMut(&AtomicBool) -> std::result::Result<bool, E>;

/// Frame length of a mixed generator (every slot's frame is padded to it).
pub const MIX_LEN: usize = 88;
// The program copies whole 8-byte words of a template of at most TMIX_MAX_LEN bytes.
const _: () = assert!(MIX_LEN.is_multiple_of(8) && MIX_LEN <= TMIX_MAX_LEN);

enum Skel {
    /// One template, per-destination address and checksums.
    Gen(XdpTenantGenSkel<'static>),
    /// A whole frame per slot.
    Mix(XdpTenantMixSkel<'static>),
}

/// A loaded multi-destination generator.
pub struct TenantTraffic {
    skel: Skel,
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

impl TenantTraffic {
    /// Load for `lab`: UDP frames of `size` bytes to port `dport` of each of `dsts`.
    ///
    /// # Errors
    /// Lab not up, bad sizes, too many destinations, load or anchor failures.
    pub fn new(lab: &Lab, dsts: &[Ipv4Addr], size: usize, dport: u16) -> Result<Self> {
        Self::with_proto(lab, dsts, Proto::Udp, size, dport)
    }

    /// As [`TenantTraffic::new`] for any of the lab's frame templates
    /// (UDP, TCP SYN or ACK, DNS query, ICMP echo), IPv4.
    ///
    /// # Errors
    /// As [`TenantTraffic::new`].
    pub fn with_proto(
        lab: &Lab,
        dsts: &[Ipv4Addr],
        proto: Proto,
        size: usize,
        dport: u16,
    ) -> Result<Self> {
        lab.require_up()?;
        if dsts.is_empty() || dsts.len() > TGEN_MAX_DST {
            return Err(Error::InvalidSpec(format!(
                "1..={TGEN_MAX_DST} destinations, not {}",
                dsts.len()
            )));
        }
        let spec = |dst: Ipv4Addr| FrameSpec {
            proto,
            size,
            src: crate::gen::SRC_V4_BASE.into(),
            dst: dst.into(),
            sport: 40000,
            dport,
            src_mac: topology::WAN_MAC,
            dst_mac: topology::HOST_MAC,
        };
        // One complete template per destination (the frame builder computes the
        // checksums); they differ only in the address and the two checksums.
        let tpls = dsts
            .iter()
            .map(|d| packet::build(&spec(*d)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let frame = tpls[0].frame.clone();
        let l4_off = tpls[0].l4_csum_off as usize;
        let mut open = XdpTenantGenSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .map_err(|e| Error::bpf("opening xdp_tenant_gen", e))?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::InvalidSpec("xdp_tenant_gen has no rodata".into()))?;
        ro.tgen_cfg.n_dst = dsts.len() as u32;
        let n = frame.len().min(rampart_bpf::abi::lab::GEN_HDR_MAX);
        ro.tgen_cfg.hdr_len = n as u32;
        ro.tgen_cfg.hdr[..n].copy_from_slice(&frame[..n]);
        ro.tgen_cfg.l4_csum_off = l4_off as u32;
        for (i, (d, t)) in dsts.iter().zip(&tpls).enumerate() {
            ro.tgen_cfg.daddr[i] = u32::from_ne_bytes(d.octets());
            ro.tgen_cfg.ip_check[i] = u16::from_ne_bytes([t.frame[24], t.frame[25]]);
            if l4_off != 0 {
                ro.tgen_cfg.l4_check[i] =
                    u16::from_ne_bytes([t.frame[l4_off], t.frame[l4_off + 1]]);
            }
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
            skel: Skel::Gen(skel),
            frame,
            ns,
            ifindex,
            n: dsts.len(),
            _anchor: anchor,
        })
    }

    /// Load for `lab` a generator sending `slots` round robin: each a
    /// protocol (the lab's templates), a destination and a destination
    /// port; every frame is [`MIX_LEN`] bytes (Ethernet trailer padding
    /// where the protocol's frame is shorter). Counted per slot.
    ///
    /// # Errors
    /// Lab not up, no or too many slots, load or anchor failures.
    pub fn mixed(lab: &Lab, slots: &[(Proto, Ipv4Addr, u16)]) -> Result<Self> {
        lab.require_up()?;
        if slots.is_empty() || slots.len() > TMIX_MAX_SLOT {
            return Err(Error::InvalidSpec(format!(
                "1..={TMIX_MAX_SLOT} slots, not {}",
                slots.len()
            )));
        }
        let mut open = XdpTenantMixSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .map_err(|e| Error::bpf("opening xdp_tenant_mix", e))?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::InvalidSpec("xdp_tenant_mix has no rodata".into()))?;
        ro.tmix_cfg.n_slot = slots.len() as u32;
        ro.tmix_cfg.len = MIX_LEN as u32;
        let mut first = Vec::new();
        for (i, &(proto, dst, dport)) in slots.iter().enumerate() {
            let t = packet::build(&FrameSpec {
                proto,
                size: MIX_LEN,
                src: crate::gen::SRC_V4_BASE.into(),
                dst: dst.into(),
                sport: 40000 + i as u16,
                dport,
                src_mac: topology::WAN_MAC,
                dst_mac: topology::HOST_MAC,
            })?;
            let mut f = t.frame;
            f.resize(MIX_LEN, 0);
            for (w, c) in ro.tmix_cfg.tpl[i].iter_mut().zip(f.chunks_exact(8)) {
                *w = u64::from_ne_bytes(c.try_into().unwrap_or_default());
            }
            if i == 0 {
                first = f;
            }
        }
        let skel = open
            .load()
            .map_err(|e| Error::bpf("loading xdp_tenant_mix", e))?;
        let ns = lab.wan_ns();
        let ifindex = netns::ifindex(Some(&ns), topology::WAN_IF)?;
        let anchor = XdpLink::attach(
            skel.progs.xdp_tenant_mix.as_fd().as_raw_fd(),
            Some(&ns),
            topology::GEN_ANCHOR_IF,
            XdpMode::Native,
        )?;
        Ok(Self {
            skel: Skel::Mix(skel),
            frame: first,
            ns,
            ifindex,
            n: slots.len(),
            _anchor: anchor,
        })
    }

    /// The frame template (first destination).
    pub fn template(&self) -> &[u8] {
        &self.frame
    }

    fn prog_fd(&self) -> i32 {
        match &self.skel {
            Skel::Gen(s) => s.progs.xdp_tenant_gen.as_fd().as_raw_fd(),
            Skel::Mix(s) => s.progs.xdp_tenant_mix.as_fd().as_raw_fd(),
        }
    }

    fn sent(&self) -> Result<Vec<u64>> {
        let got = match &self.skel {
            Skel::Gen(s) => s
                .maps
                .tgen_state
                .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY),
            Skel::Mix(s) => s
                .maps
                .tmix_state
                .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY),
        };
        let vals = got
            .map_err(|e| Error::bpf("reading the generator's counters", e))?
            .unwrap_or_default();
        let mut out = vec![0u64; self.n];
        for v in vals {
            let sent: &[u64] = match &self.skel {
                Skel::Gen(_) => &pod_read_unaligned::<TgenCpuState>(&v).sent,
                Skel::Mix(_) => &pod_read_unaligned::<TmixCpuState>(&v).sent,
            };
            for (o, s) in out.iter_mut().zip(sent) {
                *o += s;
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
        self.run_with::<Error>(limit, pps, cpu, realtime, cancel, None)
    }

    /// As [`TenantTraffic::run`], calling `during` (which should sleep or
    /// block a little each call) on the calling thread while the generator
    /// thread sends, until it returns `Ok(false)` or the generator stops.
    /// An error from `during` is returned after the generator stopped.
    ///
    /// # Errors
    /// A failing BPF_PROG_RUN, or `during`'s error.
    pub fn run_with<E: From<Error>>(
        &self,
        limit: Limit,
        pps: Option<f64>,
        cpu: usize,
        realtime: bool,
        cancel: &AtomicBool,
        mut during: Option<During<'_, E>>,
    ) -> std::result::Result<TrafficReport, E> {
        let before = self.sent()?;
        let fd = self.prog_fd();
        let start = Instant::now();
        let (frame, ns, ifindex) = (&self.frame, &self.ns, self.ifindex);
        let done = AtomicBool::new(false);
        let mut during_res = Ok(());
        std::thread::scope(|s| {
            let done = &done;
            let h = s.spawn(move || -> Result<()> {
                let r = send_thread(
                    fd, frame, ns, ifindex, cpu, realtime, limit, pps, start, cancel,
                );
                done.store(true, Ordering::Relaxed);
                r
            });
            while let Some(d) = during.as_mut() {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                match d(done) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        during_res = Err(e);
                        break;
                    }
                }
            }
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
        })?;
        during_res?;
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

#[allow(clippy::too_many_arguments)]
fn send_thread(
    fd: i32,
    frame: &[u8],
    ns: &str,
    ifindex: u32,
    cpu: usize,
    realtime: bool,
    limit: Limit,
    pps: Option<f64>,
    start: Instant,
    cancel: &AtomicBool,
) -> Result<()> {
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
}

/// Pacing granularity (longest wait between two batches).
const PACE_SLOT: Duration = Duration::from_millis(1);
/// Largest paced batch: the receiving veth's ring (256 frames), so a batch
/// never overflows it by itself.
const PACE_MAX_BATCH: f64 = 256.0;

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
    // Paced: batches of at most 256 frames (the veth ring), one per
    // PACE_SLOT or more often. Each BPF_PROG_RUN call has a fixed set-up
    // cost (~0.3 ms here), which bounds paced rates to roughly 0.7 Mpps;
    // a generator that falls behind does not make up more than 10 ms.
    let (batch, interval) = match pps {
        Some(r) => {
            let b = (r * PACE_SLOT.as_secs_f64()).clamp(1.0, PACE_MAX_BATCH);
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
            } else if now.duration_since(next) > Duration::from_millis(10) {
                next = now;
            }
            next += interval;
        }
        let n = batch.min(u32::try_from(left).unwrap_or(u32::MAX)).max(1);
        match testrun::run_live(fd, frame, ifindex, n, n.min(256)) {
            Ok(_) => {}
            Err(rampart_dataplane::Error::Io { err: source, .. })
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
