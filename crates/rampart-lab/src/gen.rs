//! The lab's traffic generator.
//!
//! `xdp_trafficgen` runs under `BPF_PROG_RUN` with live frames on `wan0`:
//! the kernel hands the program a fresh copy of a template
//! frame per repetition, the program stamps the next source from the
//! schedule, and `XDP_TX` transmits it. One worker thread per `--threads`,
//! each pinned to its own CPU and living in the `wan` namespace; rates are
//! paced from userspace in batches when `--pps` is given.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::abi::lab::{
    GenCpuState, GEN_FAMILY_V4, GEN_FAMILY_V6, GEN_HDR_MAX, GEN_SLOTS_MAX, GEN_SLOTS_PER_ELEM,
};
use rampart_bpf::xdp_trafficgen::{XdpTrafficgenSkel, XdpTrafficgenSkelBuilder};
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::{netns, testrun};
use serde::Serialize;

use crate::dist::{self, Dist};
use crate::error::{Error, Result};
use crate::packet::{self, FrameSpec, Proto};
use crate::topology::{self, Lab};

/// Most sources one run can use (a /12 of IPv4 space, 2^20).
pub const MAX_SOURCES: u32 = 1 << 20;
/// First IPv4 source: 172.16.0.0/12 holds exactly [`MAX_SOURCES`].
pub const SRC_V4_BASE: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 0);
/// First IPv6 source; the low 32 bits count up.
pub const SRC_V6_BASE: Ipv6Addr = Ipv6Addr::new(0xfd66, 0, 0, 0, 0, 0, 0, 0);

/// How long a run lasts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// Wall-clock seconds.
    Seconds(f64),
    /// Total packets over all threads.
    Count(u64),
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct GenSpec {
    /// Distinct source addresses (1 … [`MAX_SOURCES`]).
    pub sources: u32,
    /// Share of packets per source.
    pub dist: Dist,
    /// What to send.
    pub proto: Proto,
    /// Frame size (60–1514, no FCS).
    pub size: usize,
    /// IPv6 instead of IPv4.
    pub ipv6: bool,
    /// Total packets per second over all threads; `None` = as fast as possible.
    pub pps: Option<f64>,
    /// Duration or count.
    pub limit: Limit,
    /// Worker threads (each pinned to its own CPU).
    pub threads: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port (`None`: the protocol's default).
    pub dport: Option<u16>,
    /// Destination address (`None`: the lab's host address).
    pub dst: Option<IpAddr>,
    /// Seed of the schedule shuffle.
    pub seed: u64,
    /// Draw this many low bits of the destination at random per packet
    /// (0–32; of the last 32-bit word for IPv6): carpet bombing over the
    /// destination's /(32 − bits) (IPv4) or across its /64 (IPv6).
    pub dst_spread_bits: u8,
    /// Draw the TCP sequence number at random per packet (syn, ack, rst).
    pub random_seq: bool,
}

impl Default for GenSpec {
    fn default() -> Self {
        Self {
            sources: 1,
            dist: Dist::Uniform,
            proto: Proto::Udp,
            size: 64,
            ipv6: false,
            pps: None,
            limit: Limit::Seconds(1.0),
            threads: 1,
            sport: 40000,
            dport: None,
            dst: None,
            seed: 0x7261_6d70,
            dst_spread_bits: 0,
            random_seq: false,
        }
    }
}

impl GenSpec {
    /// Check ranges; the message says what is wrong and what is allowed.
    ///
    /// # Errors
    /// [`Error::InvalidSpec`].
    pub fn validate(&self) -> Result<()> {
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        if self.sources == 0 || self.sources > MAX_SOURCES {
            return Err(Error::InvalidSpec(format!(
                "--sources {} out of range: use 1..={MAX_SOURCES}",
                self.sources
            )));
        }
        if let Some(p) = self.pps {
            if !(p.is_finite() && p > 0.0) {
                return Err(Error::InvalidSpec(format!(
                    "--pps {p} is not a rate: use a number > 0 (packets per second), or omit it for full speed"
                )));
            }
        }
        match self.limit {
            Limit::Seconds(s) if !(s.is_finite() && s > 0.0 && s <= 86_400.0) => {
                return Err(Error::InvalidSpec(format!(
                    "--seconds {s} out of range: use 0 < seconds ≤ 86400"
                )))
            }
            Limit::Count(0) => {
                return Err(Error::InvalidSpec(
                    "--count 0: send at least one packet".into(),
                ))
            }
            _ => {}
        }
        if self.threads == 0 || self.threads > ncpu {
            return Err(Error::InvalidSpec(format!(
                "--threads {} out of range: use 1..={ncpu} (one per CPU)",
                self.threads
            )));
        }
        if let Some(d) = self.dst {
            if d.is_ipv6() != self.ipv6 {
                return Err(Error::InvalidSpec(
                    "--dst must be of the family being sent (add or drop --ipv6)".into(),
                ));
            }
        }
        if self.dst_spread_bits > 32 {
            return Err(Error::InvalidSpec(format!(
                "destination spread of {} bits out of range: use 0..=32",
                self.dst_spread_bits
            )));
        }
        if self.random_seq && !matches!(self.proto, Proto::Syn | Proto::Ack | Proto::Rst) {
            return Err(Error::InvalidSpec(
                "a random sequence number needs a TCP protocol: syn, ack or rst".into(),
            ));
        }
        // Size and header fit, checked here (not only when the generator is
        // built) so a bad size is reported whether or not a lab is up.
        packet::build(&self.frame_spec())?;
        Ok(())
    }

    fn frame_spec(&self) -> FrameSpec {
        let (src, dst) = if self.ipv6 {
            (
                IpAddr::V6(SRC_V6_BASE),
                self.dst.unwrap_or(IpAddr::V6(topology::HOST_V6.into())),
            )
        } else {
            (
                IpAddr::V4(SRC_V4_BASE),
                self.dst.unwrap_or(IpAddr::V4(topology::HOST_V4.into())),
            )
        };
        FrameSpec {
            proto: self.proto,
            size: self.size,
            src,
            dst,
            sport: self.sport,
            dport: self.dport.unwrap_or(self.proto.default_dport()),
            src_mac: topology::WAN_MAC,
            dst_mac: topology::HOST_MAC,
        }
    }

    /// The source address of index `i`.
    pub fn source_addr(&self, i: u32) -> IpAddr {
        if self.ipv6 {
            let mut o = SRC_V6_BASE.octets();
            o[12..].copy_from_slice(&i.to_be_bytes());
            IpAddr::V6(o.into())
        } else {
            IpAddr::V4(Ipv4Addr::from(u32::from(SRC_V4_BASE) + i))
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct GenReport {
    /// Frames transmitted (counted by the program itself, all CPUs).
    pub sent_packets: u64,
    /// Bytes transmitted.
    pub sent_bytes: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// `sent_packets / seconds`.
    pub sent_pps: f64,
    /// Worker threads.
    pub threads: u32,
    /// Distinct sources.
    pub sources: u32,
    /// Distribution.
    #[serde(flatten)]
    pub dist: Dist,
    /// Protocol.
    pub proto: Proto,
    /// Frame size.
    pub size: usize,
    /// `ipv4` or `ipv6`.
    pub family: &'static str,
    /// Requested rate, if paced.
    pub target_pps: Option<f64>,
}

/// A loaded generator, ready to run (possibly several times).
pub struct Generator {
    skel: XdpTrafficgenSkel<'static>,
    frame: Vec<u8>,
    ns: String,
    ifindex: u32,
    spec: GenSpec,
    _anchor: rampart_dataplane::xdp::XdpLink,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("ns", &self.ns)
            .field("spec", &self.spec)
            .finish()
    }
}

impl Generator {
    /// Build the template and schedule and load the program for `lab`'s `wan`.
    ///
    /// # Errors
    /// Invalid spec, lab not up, missing live-frames support, load failure.
    pub fn new(lab: &Lab, spec: &GenSpec) -> Result<Self> {
        Self::with_anchor(lab, spec, topology::GEN_ANCHOR_IF)
    }

    /// As [`Generator::new`], anchoring the program on another idle
    /// interface of `wan` (a second generator running at the same time,
    /// e.g. a mixed attack, uses `gen-anchor-p`: one XDP program per interface).
    ///
    /// # Errors
    /// As [`Generator::new`].
    pub fn with_anchor(lab: &Lab, spec: &GenSpec, anchor_if: &str) -> Result<Self> {
        spec.validate()?;
        lab.require_up()?;
        rampart_dataplane::features::require(
            "rampart lab gen",
            &[
                rampart_dataplane::features::Feature::Root,
                rampart_dataplane::features::Feature::XdpLiveFrames,
            ],
        )?;
        let loaded = load_program(spec)?;
        let ns = lab.wan_ns();
        let ifindex = netns::ifindex(Some(&ns), topology::WAN_IF)?;
        // The previous generator's anchor link goes when its last fd
        // closes, and a process being spawned holds a copy of every fd
        // until its exec: a generator started right after another one can
        // find the anchor still taken for a moment (EBUSY).
        let mut tries = 0;
        let anchor = loop {
            match rampart_dataplane::xdp::XdpLink::attach(
                loaded.skel.progs.xdp_trafficgen.as_fd().as_raw_fd(),
                Some(&ns),
                anchor_if,
                rampart_dataplane::xdp::XdpMode::Native,
            ) {
                Err(rampart_dataplane::Error::Io { err, .. })
                    if err.raw_os_error() == Some(libc::EBUSY) && tries < 50 =>
                {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                r => break r?,
            }
        };
        Ok(Self {
            skel: loaded.skel,
            frame: loaded.frame,
            ns,
            ifindex,
            spec: spec.clone(),
            _anchor: anchor,
        })
    }

    /// The frame template (source index 0).
    pub fn template(&self) -> &[u8] {
        &self.frame
    }

    fn sent_so_far(&self) -> Result<u64> {
        let v = self
            .skel
            .maps
            .gen_state
            .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .bpf_context(|| "reading gen_state".into())?
            .unwrap_or_default();
        Ok(v.iter()
            .map(|b| {
                bytemuck::try_pod_read_unaligned::<GenCpuState>(b)
                    .unwrap_or_default()
                    .pos
            })
            .sum())
    }

    /// Transmit until the limit is reached or `cancel` is set.
    ///
    /// # Errors
    /// A failing `BPF_PROG_RUN` (other than an interrupt, which ends the run).
    pub fn run(&self, cancel: &AtomicBool) -> Result<GenReport> {
        let before = self.sent_so_far()?;
        let spec = &self.spec;
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let fd = self.skel.progs.xdp_trafficgen.as_fd().as_raw_fd();
        let start = Instant::now();
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..spec.threads)
                .map(|t| {
                    let count = match spec.limit {
                        Limit::Count(c) => {
                            let per = c / u64::from(spec.threads);
                            Some(per + u64::from(u64::from(t) < c % u64::from(spec.threads)))
                        }
                        Limit::Seconds(_) => None,
                    };
                    let frame = &self.frame;
                    let ns = &self.ns;
                    let ifindex = self.ifindex;
                    s.spawn(move || -> Result<()> {
                        netns::enter_current_thread(ns)?;
                        let mut set = nix::sched::CpuSet::new();
                        let _ = set.set(t as usize % ncpu);
                        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
                        worker(fd, frame, ifindex, spec, count, start, cancel)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let seconds = start.elapsed().as_secs_f64();
        for r in results {
            r?;
        }
        let sent = self.sent_so_far()? - before;
        Ok(GenReport {
            sent_packets: sent,
            sent_bytes: sent * self.frame.len() as u64,
            seconds,
            sent_pps: sent as f64 / seconds,
            threads: spec.threads,
            sources: spec.sources,
            dist: spec.dist,
            proto: spec.proto,
            size: spec.size,
            family: if spec.ipv6 { "ipv6" } else { "ipv4" },
            target_pps: spec.pps,
        })
    }
}

/// The generator program loaded and configured for a spec, not attached
/// anywhere: what [`Generator`] runs, and what the BPF_PROG_RUN tests check.
pub struct LoadedGen {
    /// The loaded skeleton.
    pub skel: XdpTrafficgenSkel<'static>,
    /// The template frame (source index 0).
    pub frame: Vec<u8>,
    /// The source schedule the program walks.
    pub schedule: Vec<u32>,
}

impl std::fmt::Debug for LoadedGen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedGen")
            .field("frame_len", &self.frame.len())
            .finish()
    }
}

/// Build the template and schedule for `spec` and load `xdp_trafficgen` with them.
///
/// # Errors
/// Invalid spec or load failure.
pub fn load_program(spec: &GenSpec) -> Result<LoadedGen> {
    spec.validate()?;
    let tpl = packet::build(&spec.frame_spec())?;
    let slots = dist::slots_for(spec.sources, GEN_SLOTS_MAX);
    let sched = dist::schedule(&spec.dist, spec.sources, slots, spec.seed)?;

    let mut open = XdpTrafficgenSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .bpf_context(|| "opening xdp_trafficgen".into())?;
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .ok_or_else(|| Error::InvalidSpec("xdp_trafficgen has no rodata".into()))?;
    let c = &mut ro.gen_cfg;
    c.slot_mask = (slots - 1) as u32;
    c.family = if spec.ipv6 {
        GEN_FAMILY_V6
    } else {
        GEN_FAMILY_V4
    };
    c.l4_csum_off = tpl.l4_csum_off;
    c.ip_sum_nosrc = tpl.ip_sum_nosrc;
    c.l4_sum_nosrc = tpl.l4_sum_nosrc;
    c.l4_is_udp = u32::from(tpl.l4_is_udp);
    c.src4_base = u32::from(SRC_V4_BASE);
    let o6 = SRC_V6_BASE.octets();
    for w in 0..3 {
        c.src6_hi[w] = u32::from_ne_bytes(o6[w * 4..w * 4 + 4].try_into().unwrap_or_default());
    }
    c.src6_lo_base = u32::from_be_bytes(o6[12..16].try_into().unwrap_or_default());
    c.dst_mask = match spec.dst_spread_bits {
        0 => 0,
        32.. => u32::MAX,
        b => (1u32 << b) - 1,
    };
    // The TCP sequence number: 4 bytes into the TCP header.
    c.seq_off = if spec.random_seq {
        (14 + if spec.ipv6 { 40 } else { 20 } + 4) as u32
    } else {
        0
    };
    // Written back into every frame (see the program: recycled pages).
    let n = tpl.frame.len().min(GEN_HDR_MAX);
    c.hdr_len = n as u32;
    c.hdr[..n].copy_from_slice(&tpl.frame[..n]);
    let skel = open
        .load()
        .bpf_context(|| "loading xdp_trafficgen".into())?;
    let elems = slots / GEN_SLOTS_PER_ELEM;
    let keys: Vec<u8> = (0..elems as u32).flat_map(u32::to_ne_bytes).collect();
    let vals: Vec<u8> = sched.iter().flat_map(|i| i.to_ne_bytes()).collect();
    skel.maps
        .gen_schedule
        .update_batch(
            &keys,
            &vals,
            elems as u32,
            libbpf_rs::MapFlags::ANY,
            libbpf_rs::MapFlags::ANY,
        )
        .bpf_context(|| "filling the generator schedule".into())?;
    Ok(LoadedGen {
        skel,
        frame: tpl.frame,
        schedule: sched,
    })
}

/// Frames the kernel handles per batch in a live-frames run (its default).
/// 256 (the maximum) measured a few % faster but overflows the 256-frame
/// veth rings when the receiving NAPI falls behind (softirq budget is 300
/// frames across the two hops), losing up to 4% of frames under load.
const KERNEL_BATCH: u32 = 64;

fn worker(
    fd: i32,
    frame: &[u8],
    ifindex: u32,
    spec: &GenSpec,
    count: Option<u64>,
    start: Instant,
    cancel: &AtomicBool,
) -> Result<()> {
    let deadline = match spec.limit {
        Limit::Seconds(s) => Some(start + Duration::from_secs_f64(s)),
        Limit::Count(_) => None,
    };
    let mut left = count.unwrap_or(u64::MAX);
    let rate = spec.pps.map(|p| p / f64::from(spec.threads));
    // Unpaced: runs of ~100 ms at the measured rate (each BPF_PROG_RUN has
    // a fixed setup cost), shortened near the deadline.
    let mut chunk: u32 = 1 << 16;
    let mut rate_est: f64 = 0.0;
    let mut next = Instant::now();
    let (batch, interval) = match rate {
        Some(r) => {
            let b = (r * 0.001).clamp(1.0, 65_536.0);
            (b as u32, Duration::from_secs_f64(b / r))
        }
        None => (0, Duration::ZERO),
    };
    while left > 0 && !cancel.load(Ordering::Relaxed) {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        let n = if rate.is_some() {
            if next > now {
                std::thread::sleep(next - now);
            }
            next += interval;
            batch
        } else {
            chunk
        };
        let n = n.min(u32::try_from(left).unwrap_or(u32::MAX)).max(1);
        let t0 = Instant::now();
        match testrun::run_live(fd, frame, ifindex, n, KERNEL_BATCH) {
            Ok(_) => {}
            Err(rampart_dataplane::Error::Io { err: source, .. })
                if source.raw_os_error() == Some(libc::EINTR) =>
            {
                break
            }
            Err(e) => return Err(e.into()),
        }
        left -= u64::from(n);
        if rate.is_none() {
            let took = t0.elapsed().as_secs_f64();
            if took > 0.0 {
                rate_est = rate_est.max(f64::from(n) / took);
            }
            let mut secs: f64 = 0.1;
            if let Some(d) = deadline {
                secs = secs.min(d.saturating_duration_since(Instant::now()).as_secs_f64());
            }
            chunk = (rate_est * secs).clamp(f64::from(KERNEL_BATCH), 16_777_216.0) as u32;
        }
    }
    Ok(())
}

/// A generator run into the lab's host with the received side counted.
#[derive(Debug, Clone, Serialize)]
pub struct GenWithSink {
    /// The generator's report.
    #[serde(flatten)]
    pub gen: GenReport,
    /// Frames counted on host0 (by the counting sink, or by host0's receive
    /// counters when another XDP program is attached there).
    pub received_packets: u64,
    /// `received_packets / seconds`.
    pub received_pps: f64,
    /// `sink` when rampart's counting sink did the counting, else `host0-rx` .
    pub counted_by: &'static str,
    /// Frames the emulated NIC forwarded from wan to host in that time.
    pub nic_forwarded: u64,
}

/// Receive counters of an interface, from the kernel's link statistics.
///
/// # Errors
/// A failing `ip` call.
pub fn iface_rx_packets(ns: &str, iface: &str) -> Result<u64> {
    let out = rampart_dataplane::cmd::ip(&["-n", ns, "-s", "-j", "link", "show", "dev", iface])?;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    Ok(v[0]["stats64"]["rx"]["packets"].as_u64().unwrap_or(0))
}

/// Frames a veth lost on the lab's wire (queue overflow), all traffic:
/// as sender, the larger of `tx_queue_<n>_xdp_xmit_errors` (ethtool) and the
/// link's TX dropped; as receiver, `rx_queue_<n>_drops` and the link's RX dropped.
///
/// # Errors
/// A failing `ethtool` or `ip` call.
pub fn veth_lost(ns: &str, iface: &str) -> Result<u64> {
    let out = rampart_dataplane::cmd::in_ns(ns, "ethtool", &["-S", iface])?;
    let (mut xmit_err, mut rx_drops) = (0u64, 0u64);
    for (k, v) in out.lines().filter_map(|l| l.trim().split_once(": ")) {
        let Ok(v) = v.trim().parse::<u64>() else {
            continue;
        };
        if k.starts_with("tx_queue_") && k.ends_with("_xdp_xmit_errors") {
            xmit_err += v;
        } else if k.starts_with("rx_queue_") && k.ends_with("_drops") && !k.ends_with("_xdp_drops")
        {
            rx_drops += v;
        }
    }
    let out = rampart_dataplane::cmd::ip(&["-n", ns, "-s", "-j", "link", "show", "dev", iface])?;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let st = &v[0]["stats64"];
    let tx = st["tx"]["dropped"].as_u64().unwrap_or(0);
    let rx = st["rx"]["dropped"].as_u64().unwrap_or(0);
    Ok(xmit_err.max(tx) + rx_drops.max(rx))
}

/// Frames lost at each veth of the `wan → nic → host` wire (see [`veth_lost`]).
///
/// # Errors
/// As [`veth_lost`].
pub fn wire_lost(lab: &Lab) -> Result<[(&'static str, u64); 4]> {
    Ok([
        (
            topology::WAN_IF,
            veth_lost(&lab.wan_ns(), topology::WAN_IF)?,
        ),
        (
            topology::NIC_WAN_IF,
            veth_lost(&lab.nic_ns(), topology::NIC_WAN_IF)?,
        ),
        (
            topology::NIC_HOST_IF,
            veth_lost(&lab.nic_ns(), topology::NIC_HOST_IF)?,
        ),
        (
            topology::HOST_IF,
            veth_lost(&lab.host_ns(), topology::HOST_IF)?,
        ),
    ])
}

/// Frames lost on the `wan → nic → host` wire, each lost frame once.
///
/// The two ends of a veth report the same loss (the sender's xmit error
/// and the receiver's drop both include the peer's count), so each hop is
/// the larger of its two ends, never their sum.
///
/// # Errors
/// As [`veth_lost`].
pub fn wire_lost_total(lab: &Lab) -> Result<u64> {
    let by_if = wire_lost(lab)?;
    Ok(hops_lost(&by_if))
}

/// [`wire_lost_total`] of a per-interface reading, or of the difference of
/// two readings (what a run lost).
#[must_use]
pub fn hops_lost(by_if: &[(&'static str, u64); 4]) -> u64 {
    by_if[0].1.max(by_if[1].1) + by_if[2].1.max(by_if[3].1)
}

fn nic_forwarded(lab: &Lab) -> Result<u64> {
    Ok(rampart_dataplane::xdp::veth_xdp_packets(
        Some(&lab.nic_ns()),
        topology::NIC_WAN_IF,
    )?)
}

/// Run the generator into `host0`, attaching the counting sink for the run
/// when no XDP program is there.
///
/// # Errors
/// As [`Generator::new`] and [`Generator::run`].
pub fn run_into_host(lab: &Lab, spec: &GenSpec, cancel: &AtomicBool) -> Result<GenWithSink> {
    let gen = Generator::new(lab, spec)?;
    let host = lab.host_ns();
    let existing = rampart_dataplane::xdp::attached_prog_id(Some(&host), topology::HOST_IF)?;
    let sink = if existing.is_none() {
        Some(crate::sink::Sink::attach(&host, topology::HOST_IF, false)?)
    } else {
        None
    };
    let rx0 = match &sink {
        Some(s) => s.counts()?.packets,
        None => iface_rx_packets(&host, topology::HOST_IF)?,
    };
    let nic0 = nic_forwarded(lab)?;
    let report = gen.run(cancel)?;
    // Frames still in veth rings are processed within microseconds.
    std::thread::sleep(Duration::from_millis(50));
    let rx1 = match &sink {
        Some(s) => s.counts()?.packets,
        None => iface_rx_packets(&host, topology::HOST_IF)?,
    };
    let nic1 = nic_forwarded(lab)?;
    let received = rx1 - rx0;
    Ok(GenWithSink {
        received_pps: received as f64 / report.seconds,
        received_packets: received,
        counted_by: if sink.is_some() { "sink" } else { "host0-rx" },
        nic_forwarded: nic1 - nic0,
        gen: report,
    })
}
