//! `rampart bench ddos`: the evaluation of Miano et al., IEEE Access 2019, as four
//! figures, regenerated in a lab of its own, with the peers an operator
//! would otherwise pick measured in the same run (alternated repetitions,
//! medians; this VM drifts ±15-30%).
//!
//! 1. **Drop rate vs attackers** (`drop_rate.csv`, `drop_rate_<dist>.png`):
//!    the generator (one thread, CPU 0, 64-byte UDP, as fast as it can)
//!    sends from N sources, every one of them blocked; each variant is
//!    enabled in turn and its drops are counted where it drops them.
//!    rampart's modes are placed *as the daemon places rules*: the whole
//!    attacker set goes through the mode's own tiers (the daemon's
//!    [`XdpTier`] on host0 or chained on the lab's nic hop with
//!    [`rampart_ddosd::daemon::chain_nic`], the [`EmulatedNic`] tier), the hardware
//!    tier holding the planner's top-K ([`Planner::top_k`] of the per-source
//!    rates the distribution gives); in `hw+xdp-nic` the nic-hop filter
//!    holds the rest only (exclusive tiers, as the daemon does). Mode drops
//!    are counted at the veth driver of both hooks (`nic-wan` + `host0`).
//!    Peers: nftables set (netdev ingress), iptables (N raw rules), ipset +
//!    one iptables rule (= the daemon's `iptables` mode), xdp-filter
//!    (≤ 10,000 entries); bare XDP_DROP on host0 is the ceiling.
//! 2. **CPU per mode** (`cpu.csv`, `cpu.png`, `cpu_ns.png`): a paced attack
//!    at a fixed rate; pass 1 reads system + softirq CPU from /proc/stat
//!    (all CPUs: the generator's own sending is system time on CPU 0 too,
//!    so compare against the XDP_DROP row), pass 2 (separate: BPF stats
//!    roughly halve rates) enables BPF run-time stats and reads ns per
//!    packet of the program on each hook (`host0`, `nic-wan`).
//! 3. **Legitimate service under attack** (`legit.csv`, `legit.png`): nginx
//!    on host, wrk from wan (fixed connections); nginx and wrk are pinned to
//!    CPU 1, the generator (a stand-in for remote attackers) to CPU 0, in the
//!    baseline and the attack runs alike. The veth NAPI runs on the
//!    sender's CPU, so XDP's drop work for the attack lands on CPU 0, not on
//!    the service's CPU: this figure shows what reaches the service, not
//!    the CPU a real host would spend receiving the attack (figure 2).
//! 4. **Hybrid offload quality** (`offload.csv`, `offload_share.png`,
//!    `offload_updates.png`): the daemon itself (`hw+xdp-host`, detection
//!    on) against a Zipf UDP flood, stable or shifting (the heavy sources
//!    change every quarter of the attack: Zipf ranks ↔ a narrow Gaussian
//!    around the middle of the range); the NIC tier's share of the attack
//!    packets (drops counted at `nic-wan`) against the oracle top-K of each
//!    phase, and the daemon's hardware rule updates per second.
//!
//! `summary.json` holds everything plus the bar.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::peers::{
    BareDrop, IpsetRule, Iptables as IptablesPeer, NftSet, Variant, XdpFilter, XDP_FILTER_MAX,
};
use super::{check, median, veth_xdp_drops, BenchLab};
use crate::report::{self, BarChart, LineChart, Machine, Series};
use rampart_dataplane::xdp::{XdpLink, XdpMode};
use rampart_ddos::filter::{Filter, FilterConfig, Scope};
use rampart_ddos::Prefix;
use rampart_ddos_control::{Planner, PlannerConfig};
use rampart_lab::dist::Dist;
use rampart_lab::gen::{GenSpec, Generator, Limit, SRC_V4_BASE};
use rampart_lab::packet::Proto;
use rampart_lab::topology::{UpOptions, HOST_IF, NIC_WAN_IF};
use rampart_lab::web::{self, Nginx, Wrk};
use rampart_lab::Lab;
use serde::Serialize;

use crate::error::{Error, Result};
use rampart_ddosd::mode::Mode;
use rampart_ddosd::tier::emulated::EmulatedNic;
use rampart_ddosd::tier::xdp::XdpTier;
use rampart_ddosd::tier::Tier;
use rampart_ddosd::{Config, Handle};

const URL: &str = "http://10.10.0.2/";

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct DdosBenchSpec {
    /// `full`, `quick` or `smoke`.
    pub preset: &'static str,
    /// Figure 1: source counts of the uniform series.
    pub sources: Vec<u32>,
    /// Figure 1: source counts of the Gaussian and Zipf series.
    pub dist_sources: Vec<u32>,
    /// Figure 1: Gaussian sigma (fraction of the sources).
    pub gaussian_sigma: f64,
    /// Figures 1 and 4: Zipf exponent.
    pub zipf_s: f64,
    /// Figure 1: seconds per run.
    pub seconds: f64,
    /// Figure 1: repetitions per variant (alternated).
    pub reps: u32,
    /// K of the EMULATED NIC in figures 1-3.
    pub nic_capacity: u32,
    /// Rules the iptables peer walks.
    pub iptables_rules: u32,
    /// Figure 2: attack rate (pps, paced).
    pub cpu_pps: f64,
    /// Figure 2: attack sources (uniform).
    pub cpu_sources: u32,
    /// Figure 2: seconds per run.
    pub cpu_seconds: f64,
    /// Figure 3: attack steps in pps (`None`: as fast as the generator can).
    pub legit_steps: Vec<Option<f64>>,
    /// Figure 3: attack sources (uniform, all blocked).
    pub legit_sources: u32,
    /// Figure 3: seconds of wrk per run (whole seconds).
    pub legit_seconds: f64,
    /// Figure 3: wrk connections.
    pub connections: u32,
    /// Figure 4: K values.
    pub offload_ks: Vec<u32>,
    /// Figure 4: attack sources.
    pub offload_sources: u32,
    /// Figure 4: attack rate (pps, paced, 512-byte UDP).
    pub offload_pps: f64,
    /// Figure 4: attack seconds.
    pub offload_seconds: f64,
    /// Lab prefix (`None`: a unique one).
    pub lab_prefix: Option<String>,
}

impl DdosBenchSpec {
    /// The full set (about an hour on 2 vCPUs).
    pub fn full() -> Self {
        Self {
            preset: "full",
            sources: vec![1, 4, 16, 64, 256, 1024, 4096, 16_384, 65_536, 131_072],
            dist_sources: vec![64, 1024, 16_384, 131_072],
            gaussian_sigma: 0.1,
            zipf_s: 1.0,
            seconds: 3.0,
            reps: 5,
            nic_capacity: 512,
            iptables_rules: 1000,
            cpu_pps: 1_000_000.0,
            cpu_sources: 4096,
            cpu_seconds: 3.0,
            legit_steps: vec![
                Some(0.0),
                Some(250_000.0),
                Some(500_000.0),
                Some(1_000_000.0),
                Some(2_000_000.0),
                None,
            ],
            legit_sources: 4096,
            legit_seconds: 5.0,
            connections: 8,
            offload_ks: vec![64, 512, 2048],
            offload_sources: 8192,
            offload_pps: 300_000.0,
            offload_seconds: 20.0,
            lab_prefix: None,
        }
    }

    /// The reduced set of `--quick` (a few minutes).
    pub fn quick() -> Self {
        Self {
            preset: "quick",
            sources: vec![1, 1024, 131_072],
            dist_sources: vec![131_072],
            seconds: 1.2,
            reps: 3,
            cpu_seconds: 2.0,
            legit_steps: vec![Some(0.0), Some(500_000.0), None],
            legit_seconds: 2.0,
            offload_seconds: 8.0,
            ..Self::full()
        }
    }

    /// `--quick --smoke`: every series, tiny (CI, < 2 min).
    pub fn smoke() -> Self {
        Self {
            preset: "smoke",
            sources: vec![4, 64],
            dist_sources: vec![64],
            seconds: 0.3,
            reps: 1,
            nic_capacity: 16,
            iptables_rules: 100,
            cpu_pps: 200_000.0,
            cpu_sources: 64,
            cpu_seconds: 0.5,
            legit_steps: vec![Some(0.0), None],
            legit_sources: 64,
            legit_seconds: 1.0,
            connections: 4,
            offload_ks: vec![16],
            offload_sources: 256,
            offload_pps: 100_000.0,
            offload_seconds: 3.0,
            ..Self::quick()
        }
    }

    /// Check ranges.
    ///
    /// # Errors
    /// [`rampart_ddos::Error::Invalid`] naming the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(m));
        if self.sources.is_empty() || self.dist_sources.is_empty() {
            return bad("drop-rate source counts: give at least one".into());
        }
        if let Some(n) = self
            .sources
            .iter()
            .chain(&self.dist_sources)
            .find(|&&n| n == 0 || n > 131_072)
        {
            return bad(format!("{n} sources out of range: use 1..=131072"));
        }
        if !(1..=rampart_lab::nic::MAX_CAPACITY).contains(&self.nic_capacity)
            || self
                .offload_ks
                .iter()
                .any(|k| !(1..=rampart_lab::nic::MAX_CAPACITY).contains(k))
        {
            return bad(format!(
                "--nic-capacity: use 1..={}",
                rampart_lab::nic::MAX_CAPACITY
            ));
        }
        if self.reps == 0 || self.seconds < 0.2 || self.legit_seconds < 1.0 {
            return bad("reps ≥ 1, seconds ≥ 0.2, legit seconds ≥ 1".into());
        }
        Ok(())
    }
}

/// One median of figure 1.
#[derive(Debug, Clone, Serialize)]
pub struct DropPoint {
    /// `uniform`, `gaussian`, `zipf`.
    pub dist: String,
    /// Attacking (and blocked) sources.
    pub sources: u32,
    /// Variant (`xdp_drop`, a mode, a peer).
    pub variant: String,
    /// Median drop rate (Mpps).
    pub mpps: f64,
    /// Median generator rate of its runs (Mpps).
    pub sent_mpps: f64,
    /// `mpps / xdp_drop` of the same point.
    pub ratio_ceiling: f64,
    /// Median over repetitions of this run / the XDP_DROP run of the same
    /// repetition (adjacent in time: robust to the machine's drift).
    pub paired_ratio_ceiling: f64,
    /// Every run (Mpps).
    pub raw_mpps: Vec<f64>,
}

/// One row of figure 2.
#[derive(Debug, Clone, Serialize)]
pub struct CpuPoint {
    /// Variant.
    pub variant: String,
    /// Attack rate sent (pps).
    pub sent_pps: f64,
    /// Dropped (pps) in pass 1.
    pub dropped_pps: f64,
    /// System CPU, all CPUs, % of one CPU.
    pub system_pct: f64,
    /// Softirq CPU, all CPUs, % of one CPU.
    pub softirq_pct: f64,
    /// System + softirq on CPU 0 (the generator's and the veth NAPI's CPU), %.
    pub cpu0_sys_softirq_pct: f64,
    /// Pass 2 (BPF stats on): ns per packet of the program on host0.
    pub host0_ns_per_pkt: Option<f64>,
    /// Pass 2: ns per packet of the program on nic-wan (EMULATED NIC, with the nic-hop filter in xdp-nic modes).
    pub nic_wan_ns_per_pkt: Option<f64>,
    /// Pass 2: packets host0's program ran on.
    pub host0_runs: u64,
    /// Pass 2: packets nic-wan's program ran on.
    pub nic_wan_runs: u64,
}

/// One row of figure 3.
#[derive(Debug, Clone, Serialize)]
pub struct LegitPoint {
    /// Variant (`none`: no filter at all).
    pub variant: String,
    /// Requested attack rate (pps; `None`: generator's maximum).
    pub step_pps: Option<f64>,
    /// Attack rate reached (pps).
    pub attack_pps: f64,
    /// wrk requests/s.
    pub rps: f64,
    /// wrk errors.
    pub errors: u64,
    /// rps / the same variant's rps without attack.
    pub ratio_baseline: f64,
}

/// One row of figure 4.
#[derive(Debug, Clone, Serialize)]
pub struct OffloadPoint {
    /// `stable` or `shifting`.
    pub pattern: String,
    /// K.
    pub k: u32,
    /// Attack packets sent.
    pub attack_packets: u64,
    /// Dropped by the EMULATED NIC table.
    pub nic_dropped: u64,
    /// Dropped by the XDP blacklist on host0.
    pub xdp_dropped: u64,
    /// NIC share of the attack packets (%).
    pub nic_share_pct: f64,
    /// A perfect top-K per phase, from its first packet (%).
    pub oracle_share_pct: f64,
    /// nic_share / oracle (%).
    pub share_of_oracle_pct: f64,
    /// Hardware rule adds + removes per second of attack.
    pub rule_updates_per_s: f64,
    /// Sources the daemon blocked.
    pub blocked: usize,
    /// Attack rate reached (pps).
    pub sent_pps: f64,
}

/// The bar, from this run's data.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    /// Sources of the comparison point (the largest uniform point).
    pub sources: u32,
    /// xdp-host / nftables set at that point (bar ≥ 2.5).
    pub xdp_host_over_nft: Option<f64>,
    /// xdp-host / iptables (with `iptables_rules` rules) at that point (bar ≥ 10).
    pub xdp_host_over_iptables: Option<f64>,
    /// Legitimate requests/s at the highest attack in xdp-host / its no-attack baseline (bar ≥ 0.8).
    pub legit_ratio_xdp_host: Option<f64>,
    /// The same over the no-filter (`none`) run without attack (a second reference).
    pub legit_ratio_xdp_host_vs_none: Option<f64>,
    /// All three met (and the point is 131,072 sources).
    pub met: bool,
}

/// Everything (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct DdosBenchReport {
    /// Where and when.
    pub machine: Machine,
    /// What ran.
    pub spec: DdosBenchSpec,
    /// Figure 1.
    pub drop_rate: Vec<DropPoint>,
    /// Figure 2.
    pub cpu: Vec<CpuPoint>,
    /// Figure 3.
    pub legit: Vec<LegitPoint>,
    /// Figure 4.
    pub offload: Vec<OffloadPoint>,
    /// The bar.
    pub bar: Bar,
    /// CPU nginx and wrk were pinned to.
    pub service_cpu: Option<usize>,
    /// Load average at the start (1, 5, 15 min).
    pub loadavg_start: String,
    /// Wall time (s).
    pub seconds: f64,
    /// What was skipped, and why.
    pub notes: Vec<String>,
}

/// Tools the bench needs: (program, Debian package).
pub const TOOLS: &[(&str, &str)] = &[
    ("nginx", "nginx"),
    ("wrk", "wrk"),
    ("curl", "curl"),
    ("nft", "nftables"),
    ("iptables", "iptables"),
    ("ipset", "ipset"),
    ("xdp-filter", "xdp-tools"),
    ("ethtool", "ethtool"),
];

/// Refuse without root or with a tool missing (one line naming the package).
///
/// # Errors
/// What is missing and how to install it.
pub fn preflight() -> Result<()> {
    rampart_dataplane::features::require(
        "rampart bench ddos",
        &[
            rampart_dataplane::features::Feature::Root,
            rampart_dataplane::features::Feature::Xdp,
            rampart_dataplane::features::Feature::XdpLiveFrames,
            rampart_dataplane::features::Feature::Bpffs,
        ],
    )?;
    match missing_tools(web::have) {
        Some(m) => Err(Error::Failed(m)),
        None => Ok(()),
    }
}

/// The refusal for the tools `have` does not find (`None`: all there).
pub fn missing_tools(have: impl Fn(&str) -> bool) -> Option<String> {
    let missing: Vec<&(&str, &str)> = TOOLS.iter().filter(|(p, _)| !have(p)).collect();
    if missing.is_empty() {
        return None;
    }
    let progs: Vec<&str> = missing.iter().map(|t| t.0).collect();
    let pkgs: Vec<&str> = missing.iter().map(|t| t.1).collect();
    Some(format!(
        "rampart bench ddos needs {}: install with `apt-get install {}` (or `./run deps`)",
        progs.join(", "),
        pkgs.join(" ")
    ))
}

/// Removes what the bench created outside the lab's namespaces (filter
/// pins, the daemon's scratch directory), then the lab; on every exit path.
struct Guard {
    bl: Option<BenchLab>,
    scopes: Vec<String>,
    dir: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(bl) = &self.bl {
            let _ = rampart_ddosd::daemon::unchain_nic(&super::nic_hop(&bl.lab));
        }
        for s in &self.scopes {
            let _ = Filter::detach(s);
        }
        self.bl = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn source_addrs(n: u32) -> Vec<Ipv4Addr> {
    (0..n)
        .map(|i| Ipv4Addr::from(u32::from(SRC_V4_BASE) + i))
        .collect()
}

fn dist_name(d: &Dist) -> &'static str {
    match d {
        Dist::Uniform => "uniform",
        Dist::Gaussian { .. } => "gaussian",
        Dist::Zipf { .. } => "zipf",
    }
}

/// Share of all packets a perfect top-K takes: per phase (distribution over
/// `n` sources, packets sent), the K heaviest sources of that phase.
pub fn oracle_share(phases: &[(Dist, u32, u64)], k: usize) -> f64 {
    let mut top = 0.0;
    let mut total = 0u64;
    for (d, n, sent) in phases {
        let mut s = d.shares(*n);
        s.sort_by(|a, b| b.total_cmp(a));
        top += s.iter().take(k).sum::<f64>() * *sent as f64;
        total += sent;
    }
    if total == 0 {
        0.0
    } else {
        top / total as f64
    }
}

/// CPU time of one /proc/stat line (jiffies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// System.
    pub system: u64,
    /// Hard IRQ.
    pub irq: u64,
    /// Softirq.
    pub softirq: u64,
}

/// Parse /proc/stat: `cpu` (all) and `cpuN` lines → name → times.
pub fn parse_proc_stat(text: &str) -> BTreeMap<String, CpuTimes> {
    text.lines()
        .filter(|l| l.starts_with("cpu"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
            Some((
                f.first()?.to_string(),
                CpuTimes {
                    system: n(3)?,
                    irq: n(6)?,
                    softirq: n(7)?,
                },
            ))
        })
        .collect()
}

fn proc_stat() -> BTreeMap<String, CpuTimes> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").unwrap_or_default())
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// (run_time_ns, run_cnt) of the XDP program attached to `iface` in `ns`.
fn prog_stats(ns: &str, iface: &str) -> Option<(u64, u64)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let id = rampart_dataplane::xdp::attached_prog_id(Some(ns), iface).ok()??;
    // SAFETY: plain bpf(2) wrapper; the fd is owned right away.
    let raw = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if raw < 0 {
        return None;
    }
    // SAFETY: fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: bpf_prog_info is plain old data; all-zero is a valid value.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is valid for writes of `len` bytes for the call.
    let rc = unsafe {
        libbpf_sys::bpf_obj_get_info_by_fd(
            fd.as_raw_fd(),
            (&mut info as *mut libbpf_sys::bpf_prog_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some((info.run_time_ns, info.run_cnt))
}

/// BPF run-time statistics, on while the value lives (the kernel turns
/// them off when the fd closes, also if the process dies).
struct BpfStats {
    _fd: std::os::fd::OwnedFd,
}

impl BpfStats {
    fn enable() -> Result<Self> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain bpf(2) wrapper.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        if fd < 0 {
            return Err(Error::io(
                "enabling BPF run-time stats",
                std::io::Error::from_raw_os_error(-fd),
            ));
        }
        Ok(Self {
            // SAFETY: fresh fd we own.
            _fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
        })
    }
}

/// No filter at all (figure 3's reference for what the attack does unfiltered).
struct NoFilter;

impl Variant for NoFilter {
    fn name(&self) -> &'static str {
        "none"
    }
    fn enable(&mut self) -> Result<()> {
        Ok(())
    }
    fn disable(&mut self) -> Result<()> {
        Ok(())
    }
    fn dropped(&self) -> Result<u64> {
        Ok(0)
    }
}

/// A rampart placement mode, with the whole attacker set placed through
/// the daemon's tiers of that mode. The host and nic-hop filters are
/// created and filled once per point (shared by the modes that use them)
/// and linked per run; the EMULATED NIC gets the top-K per run.
struct ModeVariant {
    mode: Mode,
    lab: Lab,
    host_scope: Scope,
    host_name: String,
    nic_name: String,
    top: Vec<Prefix>,
    nic: Option<EmulatedNic>,
    link: Option<XdpLink>,
    chained: bool,
    moved: bool,
}

impl ModeVariant {
    fn new(mode: Mode, lab: &Lab, host_name: &str, nic_name: &str, top: &[Prefix]) -> Result<Self> {
        Ok(Self {
            mode,
            lab: lab.clone(),
            host_scope: Scope::new(Some(&lab.host_ns()), HOST_IF)?,
            host_name: host_name.to_string(),
            nic_name: nic_name.to_string(),
            top: if mode.has_hw() {
                top.to_vec()
            } else {
                Vec::new()
            },
            nic: if mode.has_hw() {
                Some(EmulatedNic::open(&super::nic_hop(lab), Duration::ZERO)?)
            } else {
                None
            },
            link: None,
            chained: false,
            moved: false,
        })
    }

    fn nic_filter(&self) -> Result<XdpTier> {
        Ok(XdpTier::new(
            Filter::open(&self.nic_name)?,
            "nic-wan".into(),
        ))
    }

    fn enable_inner(&mut self) -> Result<()> {
        if let Some(nic) = &mut self.nic {
            nic.install(&self.top)?;
        }
        if self.mode.on_nic() {
            if self.mode == Mode::HwXdpNic {
                // Exclusive tiers: the NIC's sources leave the nic-hop filter.
                self.nic_filter()?.remove(&self.top)?;
                self.moved = true;
            }
            let f = Filter::open(&self.nic_name)?;
            rampart_ddosd::daemon::chain_nic(&super::nic_hop(&self.lab), &f)?;
            self.chained = true;
        } else {
            let f = Filter::open(&self.host_name)?;
            self.link = Some(f.link(&self.host_scope, XdpMode::Native)?);
        }
        Ok(())
    }

    fn disable_inner(&mut self) -> Result<()> {
        self.link = None;
        if self.chained {
            let f = Filter::open(&self.nic_name)?;
            rampart_ddosd::daemon::unchain_nic_link(&super::nic_hop(&self.lab), &f)?;
            self.chained = false;
        }
        if self.moved {
            self.nic_filter()?.install(&self.top)?;
            self.moved = false;
        }
        if let Some(nic) = &mut self.nic {
            let have: Vec<Prefix> = nic.rules()?.into_iter().map(|(p, _)| p).collect();
            nic.remove(&have)?;
        }
        Ok(())
    }
}

impl Variant for ModeVariant {
    fn name(&self) -> &'static str {
        self.mode.name()
    }
    fn enable(&mut self) -> Result<()> {
        self.enable_inner()
    }
    fn disable(&mut self) -> Result<()> {
        self.disable_inner()
    }
    fn dropped(&self) -> Result<u64> {
        Ok(veth_xdp_drops(&self.lab.nic_ns(), NIC_WAN_IF)?
            + veth_xdp_drops(&self.lab.host_ns(), HOST_IF)?)
    }
}

impl Drop for ModeVariant {
    fn drop(&mut self) {
        let _ = self.disable_inner();
    }
}

const MODES: [Mode; 4] = [Mode::XdpHost, Mode::HwXdpHost, Mode::XdpNic, Mode::HwXdpNic];

/// Filters of one point: host0's (features on, as the daemon's) and the
/// nic hop's (features off), both holding every attacker; plus the top-K.
fn prepare_filters(
    lab: &Lab,
    guard: &mut Guard,
    addrs: &[Ipv4Addr],
    shares: &[f64],
    k: u32,
) -> Result<(String, String, Vec<Prefix>)> {
    let n = addrs.len() as u32;
    let fcfg = FilterConfig {
        max_entries: n.max(1024),
        max_other: 1024,
        features_capacity: 1 << 16,
        ..FilterConfig::default()
    };
    let prefixes: Vec<Prefix> = addrs.iter().map(|a| Prefix::host(IpAddr::V4(*a))).collect();
    let mut names = Vec::new();
    for (scope, features) in [
        (Scope::new(Some(&lab.host_ns()), HOST_IF)?, true),
        (Scope::new(Some(&lab.nic_ns()), NIC_WAN_IF)?, false),
    ] {
        let name = scope.name();
        let _ = Filter::detach(&name);
        if !guard.scopes.contains(&name) {
            guard.scopes.push(name.clone());
        }
        let f = Filter::create(
            &scope,
            &FilterConfig {
                features,
                ..fcfg.clone()
            },
        )?;
        XdpTier::new(f, name.clone()).install(&prefixes)?;
        names.push(name);
    }
    let planner = Planner::new(&PlannerConfig {
        capacity: k as usize,
        min_pps: 0.0,
        ..PlannerConfig::default()
    });
    // Rates as the daemon would measure them (pps per source at 1 Mpps total).
    let rates: Vec<(Prefix, f64)> = prefixes
        .iter()
        .zip(shares)
        .map(|(p, s)| (*p, s * 1e6))
        .collect();
    let top = planner.top_k(&rates).into_iter().map(|(p, _)| p).collect();
    Ok((names[0].clone(), names[1].clone(), top))
}

fn drop_filters(host: &str, nic: &str) {
    let _ = Filter::detach(host);
    let _ = Filter::detach(nic);
}

type Runs = BTreeMap<&'static str, Vec<(f64, f64)>>;

/// Alternate the variants `reps` times (order rotating), each for one
/// generator run; per variant the (dropped Mpps, sent Mpps) of every run.
fn alternate(
    variants: &mut [Box<dyn Variant>],
    gen: &Generator,
    reps: u32,
    cancel: &AtomicBool,
) -> Result<Runs> {
    let mut out: Runs = BTreeMap::new();
    let total = variants.len();
    for r in 0..reps as usize {
        for k in 0..total {
            check(cancel)?;
            let v = variants[(k + r) % total].as_mut();
            v.enable()?;
            let res = (|| -> Result<(f64, f64)> {
                let before = v.dropped()?;
                let g = gen.run(cancel)?;
                check(cancel)?;
                std::thread::sleep(Duration::from_millis(50));
                let d = v.dropped()?.saturating_sub(before);
                Ok((d as f64 / g.seconds / 1e6, g.sent_pps / 1e6))
            })();
            let dis = v.disable();
            let x = res?;
            dis?;
            out.entry(v.name()).or_default().push(x);
        }
    }
    Ok(out)
}

fn peers(
    host: &str,
    addrs: &[Ipv4Addr],
    iptables_rules: u32,
    with_ceiling: bool,
    notes: &mut Vec<String>,
) -> Result<Vec<Box<dyn Variant>>> {
    let mut v: Vec<Box<dyn Variant>> = Vec::new();
    if with_ceiling {
        v.push(Box::new(BareDrop::new(host)?));
    }
    v.push(Box::new(NftSet::new(host, addrs)?));
    v.push(Box::new(IptablesPeer::new(
        host,
        iptables_rules,
        &format!("{SRC_V4_BASE}/12"),
    )?));
    v.push(Box::new(IpsetRule::new(host, addrs)?));
    if addrs.len() <= XDP_FILTER_MAX {
        v.push(Box::new(XdpFilter::new(host, addrs)?));
    } else {
        let note = format!(
            "xdp_filter not run at {} sources: it holds at most {XDP_FILTER_MAX} IPv4 entries",
            addrs.len()
        );
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    Ok(v)
}

fn mode_variants(
    lab: &Lab,
    host_name: &str,
    nic_name: &str,
    top: &[Prefix],
) -> Result<Vec<Box<dyn Variant>>> {
    let mut v: Vec<Box<dyn Variant>> = Vec::new();
    for m in MODES {
        v.push(Box::new(ModeVariant::new(
            m, lab, host_name, nic_name, top,
        )?));
    }
    Ok(v)
}

fn fig_drop_rate(
    lab: &Lab,
    guard: &mut Guard,
    spec: &DdosBenchSpec,
    notes: &mut Vec<String>,
    cancel: &AtomicBool,
    log: &dyn Fn(String),
) -> Result<Vec<DropPoint>> {
    let host = lab.host_ns();
    let mut out = Vec::new();
    let mut plan: Vec<(Dist, u32)> = spec.sources.iter().map(|&n| (Dist::Uniform, n)).collect();
    for &n in &spec.dist_sources {
        plan.push((
            Dist::Gaussian {
                sigma: spec.gaussian_sigma,
            },
            n,
        ));
        plan.push((Dist::Zipf { s: spec.zipf_s }, n));
    }
    for (dist, n) in plan {
        check(cancel)?;
        let gen = Generator::new(
            lab,
            &GenSpec {
                sources: n,
                dist,
                size: 64,
                limit: Limit::Seconds(spec.seconds),
                threads: 1,
                ..GenSpec::default()
            },
        )?;
        let addrs = source_addrs(n);
        let (hname, nname, top) =
            prepare_filters(lab, guard, &addrs, &dist.shares(n), spec.nic_capacity)?;
        let runs = {
            let mut vs = peers(&host, &addrs, spec.iptables_rules, true, notes)?;
            vs.extend(mode_variants(lab, &hname, &nname, &top)?);
            alternate(&mut vs, &gen, spec.reps, cancel)?
        };
        drop_filters(&hname, &nname);
        let ceiling = runs
            .get("xdp_drop")
            .map(|r| median(&r.iter().map(|x| x.0).collect::<Vec<_>>()))
            .unwrap_or(f64::NAN);
        let mut line = format!("  {:<8} {n:>6} sources:", dist_name(&dist));
        let ceil_runs: Vec<f64> = runs
            .get("xdp_drop")
            .map(|r| r.iter().map(|x| x.0).collect())
            .unwrap_or_default();
        for (name, r) in &runs {
            let m = median(&r.iter().map(|x| x.0).collect::<Vec<_>>());
            let paired: Vec<f64> = r.iter().zip(&ceil_runs).map(|(a, c)| a.0 / c).collect();
            line.push_str(&format!(" {name} {m:.3}"));
            out.push(DropPoint {
                dist: dist_name(&dist).into(),
                sources: n,
                variant: (*name).into(),
                mpps: m,
                sent_mpps: median(&r.iter().map(|x| x.1).collect::<Vec<_>>()),
                ratio_ceiling: m / ceiling,
                paired_ratio_ceiling: median(&paired),
                raw_mpps: r.iter().map(|x| x.0).collect(),
            });
        }
        log(format!("{line} (Mpps, medians of {})", spec.reps));
    }
    Ok(out)
}

fn fig_cpu(
    lab: &Lab,
    guard: &mut Guard,
    spec: &DdosBenchSpec,
    notes: &mut Vec<String>,
    cancel: &AtomicBool,
    log: &dyn Fn(String),
) -> Result<Vec<CpuPoint>> {
    let (host, nicns) = (lab.host_ns(), lab.nic_ns());
    let n = spec.cpu_sources;
    let addrs = source_addrs(n);
    let (hname, nname, top) = prepare_filters(
        lab,
        guard,
        &addrs,
        &Dist::Uniform.shares(n),
        spec.nic_capacity,
    )?;
    let gen = Generator::new(
        lab,
        &GenSpec {
            sources: n,
            pps: Some(spec.cpu_pps),
            limit: Limit::Seconds(spec.cpu_seconds),
            threads: 1,
            ..GenSpec::default()
        },
    )?;
    let tck = clk_tck();
    let mut rows: BTreeMap<&'static str, CpuPoint> = BTreeMap::new();
    {
        let mut vs = peers(&host, &addrs, spec.iptables_rules, true, notes)?;
        vs.extend(mode_variants(lab, &hname, &nname, &top)?);
        // Pass 1: /proc/stat, alternated repetitions, medians.
        let mut samples: BTreeMap<&'static str, Vec<CpuPoint>> = BTreeMap::new();
        let total = vs.len();
        for r in 0..spec.reps as usize {
            for k in 0..total {
                check(cancel)?;
                let v = vs[(k + r) % total].as_mut();
                v.enable()?;
                let res = (|| -> Result<CpuPoint> {
                    let d0 = v.dropped()?;
                    let s0 = proc_stat();
                    let g = gen.run(cancel)?;
                    let s1 = proc_stat();
                    std::thread::sleep(Duration::from_millis(50));
                    let d = v.dropped()?.saturating_sub(d0);
                    let pct = |k: &str, f: fn(&CpuTimes) -> u64| {
                        let a = s0.get(k).copied().unwrap_or_default();
                        let b = s1.get(k).copied().unwrap_or_default();
                        100.0 * f(&b).saturating_sub(f(&a)) as f64 / tck / g.seconds
                    };
                    Ok(CpuPoint {
                        variant: v.name().into(),
                        sent_pps: g.sent_pps,
                        dropped_pps: d as f64 / g.seconds,
                        system_pct: pct("cpu", |c| c.system),
                        softirq_pct: pct("cpu", |c| c.softirq + c.irq),
                        cpu0_sys_softirq_pct: pct("cpu0", |c| c.system + c.softirq + c.irq),
                        host0_ns_per_pkt: None,
                        nic_wan_ns_per_pkt: None,
                        host0_runs: 0,
                        nic_wan_runs: 0,
                    })
                })();
                let dis = v.disable();
                let row = res?;
                dis?;
                samples.entry(v.name()).or_default().push(row);
            }
        }
        for (name, v) in samples {
            let m = |f: fn(&CpuPoint) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
            rows.insert(
                name,
                CpuPoint {
                    variant: name.into(),
                    sent_pps: m(|c| c.sent_pps),
                    dropped_pps: m(|c| c.dropped_pps),
                    system_pct: m(|c| c.system_pct),
                    softirq_pct: m(|c| c.softirq_pct),
                    cpu0_sys_softirq_pct: m(|c| c.cpu0_sys_softirq_pct),
                    host0_ns_per_pkt: None,
                    nic_wan_ns_per_pkt: None,
                    host0_runs: 0,
                    nic_wan_runs: 0,
                },
            );
        }
        // Pass 2: BPF run time per hook (XDP variants only).
        let stats = BpfStats::enable()?;
        for v in vs.iter_mut() {
            let name = v.name();
            if matches!(name, "nft_set" | "iptables" | "ipset") {
                continue;
            }
            check(cancel)?;
            v.enable()?;
            let res = (|| -> Result<()> {
                let h0 = prog_stats(&host, HOST_IF);
                let n0 = prog_stats(&nicns, NIC_WAN_IF);
                gen.run(cancel)?;
                let h1 = prog_stats(&host, HOST_IF);
                let n1 = prog_stats(&nicns, NIC_WAN_IF);
                let per = |a: Option<(u64, u64)>, b: Option<(u64, u64)>| match (a, b) {
                    (Some(a), Some(b)) if b.1 > a.1 => {
                        (Some((b.0 - a.0) as f64 / (b.1 - a.1) as f64), b.1 - a.1)
                    }
                    (None, Some(b)) if b.1 > 0 => (Some(b.0 as f64 / b.1 as f64), b.1),
                    _ => (None, 0),
                };
                let r = rows.get_mut(name).expect("pass 1 row");
                (r.host0_ns_per_pkt, r.host0_runs) = per(h0, h1);
                (r.nic_wan_ns_per_pkt, r.nic_wan_runs) = per(n0, n1);
                Ok(())
            })();
            let dis = v.disable();
            res?;
            dis?;
        }
        drop(stats);
    }
    drop_filters(&hname, &nname);
    let out: Vec<CpuPoint> = rows.into_values().collect();
    for r in &out {
        log(format!(
            "  {:<12} sent {:>6.0} kpps dropped {:>6.0} kpps: system {:>5.1}% softirq {:>5.1}% (CPU0 {:>5.1}%); ns/pkt host0 {} nic-wan {}",
            r.variant,
            r.sent_pps / 1e3,
            r.dropped_pps / 1e3,
            r.system_pct,
            r.softirq_pct,
            r.cpu0_sys_softirq_pct,
            r.host0_ns_per_pkt.map_or("-".into(), |x| format!("{x:.0}")),
            r.nic_wan_ns_per_pkt.map_or("-".into(), |x| format!("{x:.0}")),
        ));
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn fig_legit(
    lab: &Lab,
    guard: &mut Guard,
    spec: &DdosBenchSpec,
    service_cpu: Option<usize>,
    notes: &mut Vec<String>,
    cancel: &AtomicBool,
    log: &dyn Fn(String),
) -> Result<Vec<LegitPoint>> {
    let host = lab.host_ns();
    let n = spec.legit_sources;
    let addrs = source_addrs(n);
    let (hname, nname, top) = prepare_filters(
        lab,
        guard,
        &addrs,
        &Dist::Uniform.shares(n),
        spec.nic_capacity,
    )?;
    let workdir = guard.dir.join("nginx");
    std::fs::create_dir_all(&workdir).map_err(|e| Error::io("creating the nginx directory", e))?;
    if service_cpu.is_some() {
        rampart_lab::web::steer_queues_by_cpu(lab)?;
    }
    let _nginx = Nginx::start(&host, "10.10.0.2", service_cpu, &workdir, &lab.wan_ns())?;
    let mut out: Vec<LegitPoint> = Vec::new();
    {
        let mut vs: Vec<Box<dyn Variant>> = vec![Box::new(NoFilter)];
        vs.extend(mode_variants(lab, &hname, &nname, &top)?);
        vs.extend(peers(&host, &addrs, spec.iptables_rules, false, notes)?);
        let total = vs.len();
        for (si, step) in spec.legit_steps.iter().enumerate() {
            check(cancel)?;
            let gen = match step {
                Some(p) if *p <= 0.0 => None,
                _ => Some(Generator::new(
                    lab,
                    &GenSpec {
                        sources: n,
                        pps: *step,
                        limit: Limit::Seconds(spec.legit_seconds + 1.0),
                        threads: 1,
                        ..GenSpec::default()
                    },
                )?),
            };
            for k in 0..total {
                check(cancel)?;
                let v = vs[(k + si) % total].as_mut();
                v.enable()?;
                let res = std::thread::scope(|s| -> Result<(f64, f64, u64)> {
                    let h = gen.as_ref().map(|g| s.spawn(|| g.run(cancel)));
                    if h.is_some() {
                        std::thread::sleep(Duration::from_millis(400));
                    }
                    let w = Wrk::spawn(
                        &lab.wan_ns(),
                        URL,
                        spec.legit_seconds,
                        spec.connections,
                        service_cpu,
                    )
                    .map_err(Error::Lab)
                    .and_then(|w| w.finish().map_err(Error::Lab));
                    let g = match h {
                        Some(h) => Some(
                            h.join()
                                .map_err(|_| Error::Failed("generator panicked".into()))??,
                        ),
                        None => None,
                    };
                    let w = w?;
                    Ok((w.rps(), g.map_or(0.0, |g| g.sent_pps), w.errors))
                });
                let dis = v.disable();
                let (rps, pps, errors) = res?;
                dis?;
                out.push(LegitPoint {
                    variant: v.name().into(),
                    step_pps: *step,
                    attack_pps: pps,
                    rps,
                    errors,
                    ratio_baseline: f64::NAN,
                });
            }
            let mut line = format!(
                "  attack {:>9}:",
                step.map_or("max".into(), |p| format!("{:.0}k", p / 1e3))
            );
            for p in out.iter().filter(|p| p.step_pps == *step) {
                line.push_str(&format!(
                    " {} {:.0}/s@{:.0}k",
                    p.variant,
                    p.rps,
                    p.attack_pps / 1e3
                ));
            }
            log(line);
        }
    }
    drop_filters(&hname, &nname);
    let base: BTreeMap<String, f64> = out
        .iter()
        .filter(|p| p.attack_pps == 0.0)
        .map(|p| (p.variant.clone(), p.rps))
        .collect();
    for p in &mut out {
        p.ratio_baseline = p.rps / base.get(&p.variant).copied().unwrap_or(f64::NAN);
    }
    Ok(out)
}

fn offload_config(lab: &Lab, dir: &Path, k: u32, hold: f64) -> Result<Config> {
    // The demo's daemon, with one change the figure needs: it measures how
    // well per-source hardware rules cover the attack, so the attackers
    // (all in the generator's /24s) are blocked one by one, never as one
    // aggregated prefix (which the exact-match NIC table cannot hold).
    let mut c = super::lab_config(lab, 0.2, hold, k, dir)?;
    c.detect.aggregate_min_sources = 1_000_000;
    Ok(c)
}

fn fig_offload(
    lab: &Lab,
    guard: &mut Guard,
    spec: &DdosBenchSpec,
    cancel: &AtomicBool,
    log: &dyn Fn(String),
) -> Result<Vec<OffloadPoint>> {
    let n = spec.offload_sources;
    let zipf = Dist::Zipf { s: spec.zipf_s };
    let narrow = Dist::Gaussian { sigma: 0.05 };
    let mut out = Vec::new();
    let host_scope = Scope::new(Some(&lab.host_ns()), HOST_IF)?.name();
    if !guard.scopes.contains(&host_scope) {
        guard.scopes.push(host_scope.clone());
    }
    for pattern in ["stable", "shifting"] {
        let phases: Vec<Dist> = if pattern == "stable" {
            vec![zipf]
        } else {
            vec![zipf, narrow, zipf, narrow]
        };
        let secs = spec.offload_seconds / phases.len() as f64;
        for &k in &spec.offload_ks {
            check(cancel)?;
            lab.set_nic_capacity(k)?;
            let _ = Filter::detach(&host_scope);
            let dir = guard.dir.join(format!("daemon-{pattern}-{k}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::io("creating the daemon directory", e))?;
            let daemon = Handle::spawn(offload_config(lab, &dir, k, spec.offload_seconds + 5.0)?)?;
            std::thread::sleep(Duration::from_millis(600));
            let upd = |h: &Handle| -> u64 {
                ["add", "remove"]
                    .iter()
                    .map(|op| {
                        h.metrics
                            .rule_updates
                            .with_label_values(&["emulated", op])
                            .get()
                    })
                    .sum()
            };
            let nic0 = veth_xdp_drops(&lab.nic_ns(), NIC_WAN_IF)?;
            let xdp0 = veth_xdp_drops(&lab.host_ns(), HOST_IF)?;
            let u0 = upd(&daemon);
            let t0 = Instant::now();
            let mut sent = Vec::new();
            for (i, d) in phases.iter().enumerate() {
                check(cancel)?;
                // One generator at a time: each anchors on the same idle interface.
                let g = Generator::new(
                    lab,
                    &GenSpec {
                        sources: n,
                        dist: *d,
                        proto: Proto::Udp,
                        size: 512,
                        pps: Some(spec.offload_pps),
                        limit: Limit::Seconds(secs),
                        threads: 1,
                        seed: 21 + i as u64,
                        ..GenSpec::default()
                    },
                )?;
                let r = g.run(cancel)?;
                sent.push((*d, n, r.sent_packets));
            }
            let attack_s = t0.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_millis(300));
            let nic = veth_xdp_drops(&lab.nic_ns(), NIC_WAN_IF)?.saturating_sub(nic0);
            let xdp = veth_xdp_drops(&lab.host_ns(), HOST_IF)?.saturating_sub(xdp0);
            let updates = upd(&daemon).saturating_sub(u0);
            let blocked = daemon.view().blocked_total as usize;
            daemon.stop()?;
            let _ = Filter::detach(&host_scope);
            let _ = std::fs::remove_dir_all(&dir);
            let attack: u64 = sent.iter().map(|s| s.2).sum();
            let pct = |a: u64| 100.0 * a as f64 / attack.max(1) as f64;
            let oracle = 100.0 * oracle_share(&sent, k as usize);
            let p = OffloadPoint {
                pattern: pattern.into(),
                k,
                attack_packets: attack,
                nic_dropped: nic,
                xdp_dropped: xdp,
                nic_share_pct: pct(nic),
                oracle_share_pct: oracle,
                share_of_oracle_pct: 100.0 * pct(nic) / oracle.max(1e-9),
                rule_updates_per_s: updates as f64 / attack_s,
                blocked,
                sent_pps: attack as f64 / attack_s,
            };
            log(format!(
                "  {pattern:<8} K={k:<5} NIC share {:>5.1}% (oracle {:>5.1}%, {:>5.1}% of it), XDP {:>5.1}%, {:.0} rule updates/s, {} sources blocked",
                p.nic_share_pct, p.oracle_share_pct, p.share_of_oracle_pct, pct(xdp), p.rule_updates_per_s, p.blocked
            ));
            out.push(p);
        }
    }
    lab.set_nic_capacity(spec.nic_capacity)?;
    Ok(out)
}

fn bar(spec: &DdosBenchSpec, drops: &[DropPoint], legit: &[LegitPoint]) -> Bar {
    let n = spec.sources.iter().copied().max().unwrap_or(0);
    let at = |v: &str| {
        drops
            .iter()
            .find(|p| p.dist == "uniform" && p.sources == n && p.variant == v)
            .map(|p| p.mpps)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let xh = at("xdp-host");
    let top_step = legit
        .iter()
        .filter(|p| p.variant == "xdp-host")
        .max_by(|a, b| a.attack_pps.total_cmp(&b.attack_pps));
    let legit_ratio = top_step.map(|p| p.ratio_baseline);
    let none0 = legit
        .iter()
        .find(|p| p.variant == "none" && p.attack_pps == 0.0)
        .map(|p| p.rps);
    let vs_none = ratio(top_step.map(|p| p.rps), none0);
    let (r_nft, r_ipt) = (ratio(xh, at("nft_set")), ratio(xh, at("iptables")));
    Bar {
        sources: n,
        xdp_host_over_nft: r_nft,
        xdp_host_over_iptables: r_ipt,
        legit_ratio_xdp_host: legit_ratio,
        legit_ratio_xdp_host_vs_none: vs_none,
        met: n == 131_072
            && spec.iptables_rules == 1000
            && r_nft.is_some_and(|r| r >= 2.5)
            && r_ipt.is_some_and(|r| r >= 10.0)
            && legit_ratio.is_some_and(|r| r >= 0.8),
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run the four figures and write DIR; `log` gets progress lines.
///
/// # Errors
/// Preflight (root, tools), lab, load or peer failures;
/// [`rampart_ddos::Error::Interrupted`] on Ctrl-C. The lab, every pin and
/// rule is removed in every case.
pub fn run(
    spec: &DdosBenchSpec,
    out: &Path,
    cancel: &AtomicBool,
    log: &dyn Fn(String),
) -> Result<DdosBenchReport> {
    spec.validate()?;
    preflight()?;
    std::fs::create_dir_all(out)
        .map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
    let t0 = Instant::now();
    let machine = Machine::collect();
    let loadavg_start = loadavg();
    log(format!(
        "machine: {} (load {loadavg_start})",
        machine.caption()
    ));
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let service_cpu = (ncpu >= 2).then_some(1);
    let prefix = spec
        .lab_prefix
        .clone()
        .unwrap_or_else(|| rampart_lab::testing::unique_prefix("bd"));
    let dir = std::env::temp_dir().join(format!("rampart-bench-ddos-{prefix}"));
    let mut guard = Guard {
        bl: None,
        scopes: Vec::new(),
        dir: dir.clone(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating the scratch directory", e))?;
    guard.bl = Some(BenchLab::up_with(
        &prefix,
        &UpOptions {
            nic_capacity: Some(spec.nic_capacity),
            ..Default::default()
        },
    )?);
    let lab = Lab::new(&prefix)?;
    let mut notes = Vec::new();
    if service_cpu.is_none() {
        notes.push("one CPU only: nginx, wrk and the generator share it".into());
    }
    log(format!(
        "lab {prefix}: wan (generator on CPU 0, wrk) → EMULATED NIC (K = {}) → host (nginx{}, filters)",
        spec.nic_capacity,
        service_cpu.map_or(String::new(), |c| format!(" and wrk on CPU {c}"))
    ));
    log("1/4 drop rate vs attackers".into());
    let drops = fig_drop_rate(&lab, &mut guard, spec, &mut notes, cancel, log)?;
    log(format!(
        "2/4 CPU per mode at {:.0} kpps from {} sources",
        spec.cpu_pps / 1e3,
        spec.cpu_sources
    ));
    let cpu = fig_cpu(&lab, &mut guard, spec, &mut notes, cancel, log)?;
    log(format!(
        "3/4 legitimate requests/s under attack ({} sources, wrk -c{})",
        spec.legit_sources, spec.connections
    ));
    let legit = fig_legit(&lab, &mut guard, spec, service_cpu, &mut notes, cancel, log)?;
    log("4/4 hybrid offload quality (the daemon in hw+xdp-host)".into());
    let offload = fig_offload(&lab, &mut guard, spec, cancel, log)?;
    drop(guard);
    let report = DdosBenchReport {
        machine,
        spec: spec.clone(),
        bar: bar(spec, &drops, &legit),
        drop_rate: drops,
        cpu,
        legit,
        offload,
        service_cpu,
        loadavg_start,
        seconds: t0.elapsed().as_secs_f64(),
        notes,
    };
    write_outputs(&report, out)?;
    Ok(report)
}

fn f(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        String::new()
    }
}

fn opt(x: Option<f64>) -> String {
    x.map(f).unwrap_or_default()
}

fn out_err(what: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| Error::Failed(format!("{what}: {e}"))
}

/// Write CSV, JSON and PNGs of `r` into `out`.
///
/// # Errors
/// File or drawing failures.
pub fn write_outputs(r: &DdosBenchReport, out: &Path) -> Result<()> {
    let p = |f: &str| -> PathBuf { out.join(f) };
    let json = serde_json::to_string_pretty(r)
        .map_err(|e| Error::Failed(format!("serializing the report: {e}")))?;
    std::fs::write(p("summary.json"), json + "\n")
        .map_err(|e| Error::io("writing summary.json", e))?;
    let m = &r.machine;

    // Figure 1.
    let rows: Vec<Vec<String>> = r
        .drop_rate
        .iter()
        .map(|d| {
            vec![
                d.dist.clone(),
                d.sources.to_string(),
                d.variant.clone(),
                f(d.mpps),
                f(d.sent_mpps),
                f(d.ratio_ceiling),
                f(d.paired_ratio_ceiling),
                d.raw_mpps
                    .iter()
                    .map(|x| format!("{x:.4}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            ]
        })
        .collect();
    report::write_csv(
        &p("drop_rate.csv"),
        &[
            "dist",
            "sources",
            "variant",
            "drop_mpps",
            "sent_mpps",
            "ratio_ceiling",
            "paired_ratio_ceiling",
            "raw_mpps",
        ],
        &rows,
    )
    .map_err(out_err("drop_rate.csv"))?;
    let dists: Vec<String> = {
        let mut v: Vec<String> = r.drop_rate.iter().map(|d| d.dist.clone()).collect();
        v.dedup();
        v.sort();
        v.dedup();
        v
    };
    for dist in &dists {
        let mut names: Vec<String> = r
            .drop_rate
            .iter()
            .filter(|d| &d.dist == dist)
            .map(|d| d.variant.clone())
            .collect();
        names.sort();
        names.dedup();
        let series: Vec<Series> = names
            .iter()
            .map(|n| Series {
                name: if n == "xdp_drop" {
                    "XDP_DROP (ceiling)".into()
                } else {
                    n.clone()
                },
                points: r
                    .drop_rate
                    .iter()
                    .filter(|d| &d.dist == dist && &d.variant == n && d.mpps.is_finite())
                    .map(|d| (f64::from(d.sources), d.mpps))
                    .collect(),
            })
            .collect();
        let title = format!("Drop rate vs attacking sources, {dist} per-source rates (median)");
        report::line_chart(
            &p(&format!("drop_rate_{dist}.png")),
            &LineChart {
                title: &title,
                x_label: "attacking sources (all blocked, log scale)",
                y_label: "dropped (Mpps)",
                log_x: true,
                series: &series,
            },
            m,
        )
        .map_err(out_err("drop_rate png"))?;
    }

    // Figure 2.
    let rows: Vec<Vec<String>> = r
        .cpu
        .iter()
        .map(|c| {
            vec![
                c.variant.clone(),
                f(c.sent_pps),
                f(c.dropped_pps),
                f(c.system_pct),
                f(c.softirq_pct),
                f(c.cpu0_sys_softirq_pct),
                opt(c.host0_ns_per_pkt),
                opt(c.nic_wan_ns_per_pkt),
                c.host0_runs.to_string(),
                c.nic_wan_runs.to_string(),
            ]
        })
        .collect();
    report::write_csv(
        &p("cpu.csv"),
        &[
            "variant",
            "sent_pps",
            "dropped_pps",
            "system_pct",
            "softirq_pct",
            "cpu0_sys_softirq_pct",
            "host0_ns_per_pkt",
            "nic_wan_ns_per_pkt",
            "host0_runs",
            "nic_wan_runs",
        ],
        &rows,
    )
    .map_err(out_err("cpu.csv"))?;
    let cats: Vec<String> = r.cpu.iter().map(|c| c.variant.clone()).collect();
    let title = format!(
        "CPU (system + softirq, all CPUs) at a {:.0} kpps attack, generator included",
        r.spec.cpu_pps / 1e3
    );
    report::bar_chart(
        &p("cpu.png"),
        &BarChart {
            title: &title,
            y_label: "CPU (% of one CPU)",
            categories: &cats,
            series: &[
                (
                    "system".into(),
                    r.cpu.iter().map(|c| c.system_pct).collect(),
                ),
                (
                    "softirq + irq".into(),
                    r.cpu.iter().map(|c| c.softirq_pct).collect(),
                ),
            ],
        },
        m,
    )
    .map_err(out_err("cpu.png"))?;
    let xdp_rows: Vec<&CpuPoint> = r
        .cpu
        .iter()
        .filter(|c| c.host0_ns_per_pkt.is_some() || c.nic_wan_ns_per_pkt.is_some())
        .collect();
    let cats: Vec<String> = xdp_rows.iter().map(|c| c.variant.clone()).collect();
    report::bar_chart(
        &p("cpu_ns.png"),
        &BarChart {
            title: "XDP program run time per packet by hook (BPF stats, separate pass)",
            y_label: "ns per packet",
            categories: &cats,
            series: &[
                (
                    "host0".into(),
                    xdp_rows
                        .iter()
                        .map(|c| c.host0_ns_per_pkt.unwrap_or(0.0))
                        .collect(),
                ),
                (
                    "nic-wan (EMULATED NIC hop)".into(),
                    xdp_rows
                        .iter()
                        .map(|c| c.nic_wan_ns_per_pkt.unwrap_or(0.0))
                        .collect(),
                ),
            ],
        },
        m,
    )
    .map_err(out_err("cpu_ns.png"))?;

    // Figure 3.
    let rows: Vec<Vec<String>> = r
        .legit
        .iter()
        .map(|l| {
            vec![
                l.variant.clone(),
                l.step_pps.map_or("max".into(), |x| format!("{x:.0}")),
                f(l.attack_pps),
                f(l.rps),
                l.errors.to_string(),
                f(l.ratio_baseline),
            ]
        })
        .collect();
    report::write_csv(
        &p("legit.csv"),
        &[
            "variant",
            "step_pps",
            "attack_pps",
            "requests_per_s",
            "errors",
            "ratio_baseline",
        ],
        &rows,
    )
    .map_err(out_err("legit.csv"))?;
    let mut names: Vec<String> = r.legit.iter().map(|l| l.variant.clone()).collect();
    names.sort();
    names.dedup();
    let series: Vec<Series> = names
        .iter()
        .map(|n| {
            let mut pts: Vec<(f64, f64)> = r
                .legit
                .iter()
                .filter(|l| &l.variant == n)
                .map(|l| (l.attack_pps / 1e6, l.rps))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                name: n.clone(),
                points: pts,
            }
        })
        .collect();
    let title = format!(
        "nginx requests/s under attack (wrk -c{}, {} attacking sources)",
        r.spec.connections, r.spec.legit_sources
    );
    report::line_chart(
        &p("legit.png"),
        &LineChart {
            title: &title,
            x_label: "attack rate reached (Mpps, 64-byte UDP)",
            y_label: "requests/s",
            log_x: false,
            series: &series,
        },
        m,
    )
    .map_err(out_err("legit.png"))?;

    // Figure 4.
    let rows: Vec<Vec<String>> = r
        .offload
        .iter()
        .map(|o| {
            vec![
                o.pattern.clone(),
                o.k.to_string(),
                o.attack_packets.to_string(),
                o.nic_dropped.to_string(),
                o.xdp_dropped.to_string(),
                f(o.nic_share_pct),
                f(o.oracle_share_pct),
                f(o.share_of_oracle_pct),
                f(o.rule_updates_per_s),
                o.blocked.to_string(),
                f(o.sent_pps),
            ]
        })
        .collect();
    report::write_csv(
        &p("offload.csv"),
        &[
            "pattern",
            "k",
            "attack_packets",
            "nic_dropped",
            "xdp_dropped",
            "nic_share_pct",
            "oracle_share_pct",
            "share_of_oracle_pct",
            "rule_updates_per_s",
            "blocked",
            "sent_pps",
        ],
        &rows,
    )
    .map_err(out_err("offload.csv"))?;
    let cats: Vec<String> = r
        .offload
        .iter()
        .map(|o| format!("{} K={}", o.pattern, o.k))
        .collect();
    report::bar_chart(
        &p("offload_share.png"),
        &BarChart {
            title: "Share of attack packets dropped by the EMULATED NIC tier vs the oracle top-K",
            y_label: "share of attack packets (%)",
            categories: &cats,
            series: &[
                (
                    "rampart (daemon)".into(),
                    r.offload.iter().map(|o| o.nic_share_pct).collect(),
                ),
                (
                    "oracle top-K".into(),
                    r.offload.iter().map(|o| o.oracle_share_pct).collect(),
                ),
            ],
        },
        m,
    )
    .map_err(out_err("offload_share.png"))?;
    report::bar_chart(
        &p("offload_updates.png"),
        &BarChart {
            title: "Hardware rule updates per second (adds + removes)",
            y_label: "rule updates per second",
            categories: &cats,
            series: &[(
                "EMULATED NIC".into(),
                r.offload.iter().map(|o| o.rule_updates_per_s).collect(),
            )],
        },
        m,
    )
    .map_err(out_err("offload_updates.png"))?;
    Ok(())
}

/// Run `rampart bench ddos` into `out` and print the bar, the notes and
/// where the files are (or summary.json with `json`, progress then on stderr).
///
/// # Errors
/// As [`run`].
pub fn run_and_print(
    spec: &DdosBenchSpec,
    out: &Path,
    json: bool,
    cancel: &AtomicBool,
) -> Result<()> {
    let log = move |s: String| {
        if json {
            eprintln!("{s}");
        } else {
            println!("{s}");
        }
    };
    let r = run(spec, out, cancel, &log)?;
    if json {
        return crate::out::print_json(&r);
    }
    let b = &r.bar;
    let o = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    println!(
        "bar at {} sources: xdp-host/nft {} (≥ 2.5), xdp-host/iptables-{} {} (≥ 10); legit at the highest attack in xdp-host {} of baseline (≥ 0.80): {}",
        b.sources,
        o(b.xdp_host_over_nft),
        r.spec.iptables_rules,
        o(b.xdp_host_over_iptables),
        o(b.legit_ratio_xdp_host),
        if b.met { "met" } else { "NOT met" }
    );
    for n in &r.notes {
        println!("note: {n}");
    }
    println!(
        "{:.0} s; data and plots in {} (summary.json, *.csv, *.png)",
        r.seconds,
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_are_named_with_their_packages() {
        assert_eq!(missing_tools(|_| true), None);
        let m = missing_tools(|p| !matches!(p, "xdp-filter" | "nft")).unwrap();
        assert_eq!(
            m,
            "rampart bench ddos needs nft, xdp-filter: install with `apt-get install nftables xdp-tools` (or `./run deps`)"
        );
    }

    #[test]
    fn proc_stat_lines() {
        // Captured from /proc/stat (kernel 6.18, 2 vCPUs), trimmed.
        let t = "cpu  1134 12 2345 99000 30 7 891 0 0 0
cpu0 600 6 1500 49000 15 4 800 0 0 0
cpu1 534 6 845 50000 15 3 91 0 0 0
intr 123456 0 0
ctxt 999
";
        let m = parse_proc_stat(t);
        assert_eq!(m.len(), 3);
        assert_eq!(
            m["cpu"],
            CpuTimes {
                system: 2345,
                irq: 7,
                softirq: 891
            }
        );
        assert_eq!(m["cpu0"].softirq, 800);
        assert_eq!(m["cpu1"].system, 845);
    }

    #[test]
    fn oracle_takes_the_k_heaviest_of_each_phase() {
        // Uniform over 100 sources: any 10 take 10%.
        assert!((oracle_share(&[(Dist::Uniform, 100, 1000)], 10) - 0.1).abs() < 1e-9);
        // Zipf(1) over 4: shares 12/25, 6/25, 4/25, 3/25; top-1 = 48%.
        let z = Dist::Zipf { s: 1.0 };
        assert!((oracle_share(&[(z, 4, 100)], 1) - 0.48).abs() < 1e-9);
        // Phases weigh by their packets.
        let v = oracle_share(&[(z, 4, 100), (Dist::Uniform, 4, 300)], 1);
        assert!((v - (48.0 + 75.0) / 400.0).abs() < 1e-9);
        assert_eq!(oracle_share(&[], 5), 0.0);
        // K beyond the sources: everything.
        assert!((oracle_share(&[(z, 4, 10)], 100) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn presets_are_valid_and_smoke_is_smallest() {
        for s in [
            DdosBenchSpec::full(),
            DdosBenchSpec::quick(),
            DdosBenchSpec::smoke(),
        ] {
            s.validate().unwrap();
        }
        assert_eq!(DdosBenchSpec::quick().sources.iter().max(), Some(&131_072));
        let mut s = DdosBenchSpec::smoke();
        s.sources = vec![0];
        assert!(s.validate().is_err());
    }

    #[test]
    fn bar_reads_the_largest_uniform_point() {
        let spec = DdosBenchSpec::quick();
        let d = |v: &str, m: f64| DropPoint {
            dist: "uniform".into(),
            sources: 131_072,
            variant: v.into(),
            mpps: m,
            sent_mpps: 4.0,
            ratio_ceiling: 1.0,
            paired_ratio_ceiling: 1.0,
            raw_mpps: vec![m],
        };
        let l = |pps: f64, r: f64| LegitPoint {
            variant: "xdp-host".into(),
            step_pps: Some(pps),
            attack_pps: pps,
            rps: r,
            errors: 0,
            ratio_baseline: r / 100.0,
        };
        let b = bar(
            &spec,
            &[d("xdp-host", 3.0), d("nft_set", 1.0), d("iptables", 0.2)],
            &[l(0.0, 100.0), l(4e6, 90.0)],
        );
        assert_eq!(b.xdp_host_over_nft, Some(3.0));
        assert!((b.xdp_host_over_iptables.unwrap() - 15.0).abs() < 1e-9);
        assert_eq!(b.legit_ratio_xdp_host, Some(0.9));
        assert!(b.met);
        let b = bar(&spec, &[d("xdp-host", 2.0), d("nft_set", 1.0)], &[]);
        assert!(!b.met);
        assert_eq!(b.xdp_host_over_iptables, None);
    }
}
