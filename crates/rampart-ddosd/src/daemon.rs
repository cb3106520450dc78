//! The mitigation daemon: one loop per interval.
//!
//! features snapshot → per-source rates from every tier (hardware rule
//! counter deltas + XDP per-entry counter deltas) → [`Detection`] (per
//! victim: blocks, unbans, policing, SYN cookies, attack events) → block
//! in the host tier (the XDP blacklist, which always holds **every**
//! blocked source), unban, protect → [`Planner`] moves the top-K to the
//! hardware tier, make-before-break.
//!
//! **Zero leak.** A source enters the hardware tier only while the XDP
//! blacklist already drops it, and leaves the XDP blacklist only when it is
//! unbanned. A hardware rule added or removed therefore never lets a packet
//! through: a source "moved to the NIC" simply stops reaching XDP once its
//! rule is live. (In `hw+xdp-nic` the NIC hop's table sits *behind* the
//! nic-hop filter, so there the tiers are exclusive and every move is
//! ordered add-then-remove: the new holder drops before the old one lets go.)
//!
//! **Restart.** Everything that filters is pinned (the XDP link and maps,
//! the EMULATED NIC's table), so killing the daemon never stops filtering;
//! a new daemon opens the pins, reads the blocked set back from the tiers,
//! and the reasons, operator whitelist and what detection learned
//! (baselines, blocks, protection; baselines only when the configuration
//! and interface that learned them are the same) from its state file.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rampart_dataplane::xdp::{XdpLink, XdpMode};
use rampart_ddos::filter::{self, Filter, FilterConfig, Scope};
use rampart_ddos::protect::{Protect, ProtectFlags};
use rampart_ddos::{Features, Prefix, Snapshot};
use rampart_ddos_control::detection::{self, Detection, Restore, SourceRate, Verdict};
use rampart_ddos_control::{BlockDecision, Planner};
use rampart_service::{Owned, Owner, OwnerHandle, SpawnError};
use serde::{Deserialize, Serialize};

mod crowdsec;
mod flow;
mod reload;
mod upstream;
pub use crowdsec::CrowdsecView;
pub use reload::{apply as apply_reload, check as check_reload, reload_file};
pub use upstream::UpstreamView;

use crate::alerts::{self, Alerts, App};
use crate::config::{Config, NicHop};
use crate::error::{Error, Result};
use crate::hw::HwWorker;
use crate::metrics::Metrics;
use crate::mode::Mode;
use crate::police::Policing;
use crate::tier::emulated::EmulatedNic;
use crate::tier::iptables::Iptables;
use crate::tier::xdp::XdpTier;
use crate::tier::{CounterKind, Tier, TierInfo};

/// A blocked source as the daemon knows it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Blocked {
    /// The prefix.
    pub prefix: String,
    /// Detector that blocked it (`operator` for the API, `resumed` if unknown).
    pub detector: String,
    /// Why.
    pub reason: String,
    /// Unix time it was blocked.
    pub since: f64,
    /// Rate at the decision (pps).
    pub pps_at_block: f64,
    /// Blocked by the operator (never unbanned by the rate monitor).
    #[serde(default)]
    pub operator: bool,
}

pub use crate::police::Policed;

/// One source's measured rate.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RateView {
    /// The prefix.
    pub prefix: String,
    /// All tiers (pps).
    pub pps: f64,
    /// Dropped in the hardware tier (pps).
    pub hw_pps: f64,
    /// Dropped in the host tier (pps).
    pub host_pps: f64,
    /// Holds a hardware rule now.
    pub in_hw: bool,
}

/// A tier with its occupancy.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TierView {
    /// What it is.
    #[serde(flatten)]
    pub info: TierInfo,
    /// Rules installed.
    pub rules: usize,
    /// Packets dropped in total (counter sum of installed rules).
    pub dropped_packets: u64,
}

/// Interval lengths the view keeps (a reader polling every few seconds sees each one).
pub const RECENT_INTERVALS: usize = 64;

/// What the API and the demo read (replaced every interval and after every command).
#[derive(Debug, Clone, Serialize, Default)]
pub struct View {
    /// Placement mode.
    pub mode: String,
    /// Loop interval (s).
    pub interval_s: f64,
    /// Intervals run.
    pub intervals: u64,
    /// The last intervals' measured lengths (s), oldest first (at most
    /// [`RECENT_INTERVALS`]): how steadily the loop keeps its interval.
    pub recent_intervals_s: Vec<f64>,
    /// Pair records in the last feature interval.
    pub feature_pairs: usize,
    /// Victim records in the last feature interval.
    pub feature_victims: usize,
    /// Attack in progress (on any victim).
    pub under_attack: bool,
    /// Victims detection follows: rates, baselines, thresholds, protection.
    pub victims: Vec<detection::VictimView>,
    /// Detection's gauges (per victim and vector, and totals).
    #[serde(skip)]
    pub gauges: Vec<detection::Gauge>,
    /// Sources policed now (rate-limited in XDP instead of blocked).
    pub policed: Vec<Policed>,
    /// Planner swap threshold.
    pub threshold: f64,
    /// Resumed from pinned state at start.
    pub resumed: bool,
    /// Blocked sources.
    pub blocked: Vec<Blocked>,
    /// Rates of blocked sources, heaviest first.
    pub rates: Vec<RateView>,
    /// Tiers.
    pub tiers: Vec<TierView>,
    /// Operator whitelist (plus the configured one).
    pub whitelist: Vec<String>,
    /// Every source ever unbanned by the rate monitor (since start).
    pub unbanned_total: u64,
    /// Every source ever blocked (since start).
    pub blocked_total: u64,
    /// Packet counters since start (what `/metrics` reports).
    #[serde(skip)]
    pub counters: Counters,
    /// The `[detect]` section in force (a reload may have changed it).
    pub detect: detection::DetectionConfig,
    /// The upstream tier (`[upstream]` enabled).
    pub upstream: Option<UpstreamView>,
    /// CrowdSec (`[crowdsec]` enabled).
    pub crowdsec: Option<CrowdsecView>,
    /// Flow input (`[flow_input]` enabled).
    pub flow_input: Option<crate::flow_input::FlowInputView>,
}

/// Packets and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

impl std::ops::AddAssign for Count {
    fn add_assign(&mut self, o: Self) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

/// What the daemon counted since it started, summed over its intervals
/// from the data path's exact counters (the XDP filter's per-entry
/// counters are sampled and see the same packets as its `blacklist`
/// reasons, so they only give rates). Every reason of a filter is present
/// from the first interval, at 0: the metrics' labels exist from the start.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Dropped, by (tier, reason).
    pub drops: BTreeMap<(&'static str, String), Count>,
    /// Of `drops`, the reasons counted in packets only (protection's
    /// counters have no bytes).
    pub packets_only: std::collections::BTreeSet<(&'static str, String)>,
    /// Passed on by the XDP filters, by (tier, reason).
    pub passes: BTreeMap<(&'static str, String), Count>,
    /// Handled (seen) by each tier.
    pub seen: BTreeMap<&'static str, Count>,
}

impl Counters {
    /// Add `n` packets (no bytes known) dropped by `tier` for `reason`.
    pub(crate) fn add_drops(&mut self, tier: &'static str, reason: &str, n: u64) {
        let k = (tier, reason.to_string());
        self.drops.entry(k.clone()).or_default().packets += n;
        self.packets_only.insert(k);
    }

    /// Add packets and bytes dropped by `tier` for `reason`.
    pub(crate) fn add_dropped(&mut self, tier: &'static str, reason: &str, n: Count) {
        *self.drops.entry((tier, reason.to_string())).or_default() += n;
    }

    fn add_passed(&mut self, tier: &'static str, reason: &str, n: Count) {
        *self.passes.entry((tier, reason.to_string())).or_default() += n;
    }

    fn add_seen(&mut self, tier: &'static str, n: Count) {
        *self.seen.entry(tier).or_default() += n;
    }

    /// Everything dropped, every tier and reason (packets-only reasons
    /// add no bytes).
    pub fn dropped(&self) -> Count {
        let mut c = Count::default();
        for n in self.drops.values() {
            c += *n;
        }
        c
    }
}

/// Operator commands (from the HTTP API), run on the daemon's thread.
#[derive(Debug)]
pub enum Command {
    /// Block a prefix.
    Block {
        /// What.
        prefix: Prefix,
        /// Why (free text).
        reason: String,
    },
    /// Unblock a prefix.
    Unblock(Prefix),
    /// Add to the whitelist (and unblock if blocked).
    Whitelist(Prefix),
    /// Remove from the operator whitelist.
    Unwhitelist(Prefix),
}

/// Answer to a command: what was done, or why not.
pub type Reply = std::result::Result<String, CommandError>;

/// Why an operator command was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Blocking a whitelisted prefix.
    #[error("{0} is whitelisted: remove it from the whitelist first")]
    Whitelisted(Prefix),
    /// Blocking a prefix twice.
    #[error("{0} is already blocked")]
    AlreadyBlocked(Prefix),
    /// Unblocking a prefix that is not blocked.
    #[error("{0} is not blocked (GET /v1/blocked lists what is)")]
    NotBlocked(Prefix),
    /// Unblocking what only a CrowdSec decision blocks.
    #[error("{0} is blocked by a CrowdSec decision, not by this daemon: delete the decision in CrowdSec (cscli decisions delete --ip ADDRESS or --range PREFIX)")]
    CrowdsecDecision(Prefix),
    /// Removing a prefix the operator never whitelisted.
    #[error("{0} is not on the operator whitelist (entries from the config file stay)")]
    NotWhitelisted(Prefix),
    /// The daemon's loop has stopped.
    #[error("the daemon has stopped")]
    Stopped,
    /// A tier failed to apply the change.
    #[error(transparent)]
    Failed(#[from] Error),
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct SavedState {
    blocked: Vec<Blocked>,
    whitelist: Vec<String>,
    /// What detection learned, with the fingerprint of the configuration
    /// and interface that learned it (older state files have none).
    #[serde(default)]
    detection: Option<detection::Learned>,
    /// What the upstream tier announced (ExaBGP keeps it across our restarts).
    #[serde(default)]
    upstream: Vec<crate::tier::upstream::Announcement>,
}

// The iptables variant is small; one HostTier exists per daemon.
#[allow(clippy::large_enum_variant)]
enum HostTier {
    Xdp(XdpTier),
    Ipt(Iptables),
}

impl HostTier {
    fn tier(&mut self) -> &mut dyn Tier {
        match self {
            HostTier::Xdp(t) => t,
            HostTier::Ipt(t) => t,
        }
    }
    fn tier_ref(&self) -> &dyn Tier {
        match self {
            HostTier::Xdp(t) => t,
            HostTier::Ipt(t) => t,
        }
    }
}

/// The filter of the protected interface (in front of the feature stage):
/// the host tier's in the xdp-host modes, the extra one in the others.
fn iface_filter<'a>(host_filter: &'a Option<Filter>, host: &'a HostTier) -> Option<&'a Filter> {
    match (host_filter, host) {
        (Some(f), _) => Some(f),
        (None, HostTier::Xdp(x)) => Some(x.filter()),
        (None, HostTier::Ipt(_)) => None,
    }
}

/// Sources the operator whitelisted or blocked are never policed.
fn never_police(det: &Detection, blocked: &BTreeMap<Prefix, Blocked>, p: &Prefix) -> bool {
    det.is_whitelisted(p)
        || blocked
            .iter()
            .any(|(q, b)| b.operator && q.net().contains(&p.net().addr()))
}

/// Victims whose per-vector gauges `/metrics` shows (the most loaded).
const MAX_VICTIM_GAUGES: usize = 32;

/// The daemon's state (lives on one thread: BPF handles are not Send).
pub struct Daemon {
    cfg: Config,
    features: Features,
    /// The host filter when it is not the host tier (xdp-nic, iptables): for stats.
    host_filter: Option<Filter>,
    host: HostTier,
    hw: Option<HwWorker>,
    moving_to_hw: HashSet<Prefix>,
    exclusive: bool,
    detection: Detection,
    /// Per-victim protection (SYN cookies, ACK guard), opened at the first
    /// protection change or at start when some is pinned.
    protect: Option<Protect>,
    scope: Scope,
    /// Sources rate-limited in XDP instead of blocked.
    policing: Policing,
    planner: Planner,
    blocked: BTreeMap<Prefix, Blocked>,
    operator_whitelist: Vec<Prefix>,
    prev: HashMap<(u8, Prefix), Count>,
    prev_stats: HashMap<(&'static str, String), Count>,
    last_snap: Instant,
    /// When the feature stage last switched slots: an interval's records
    /// hold what arrived between two switches, whatever the reads took.
    last_flip: Instant,
    /// The last feature interval: pair and victim records.
    snap: Snapshot,
    alerts: Alerts,
    metrics: Metrics,
    view: Arc<RwLock<View>>,
    state_path: PathBuf,
    /// Interval of the last state-file write (baselines are saved now and then).
    saved_at: u64,
    intervals: u64,
    recent_intervals: std::collections::VecDeque<f64>,
    /// The host filter's XDP link, held and checked every interval (none
    /// in a chain: the chain holds the link).
    attachment: Option<crate::watch::Attachment>,
    /// The SYN-cookie TC stage's attachment.
    tc_watch: crate::watch::TcWatch,
    /// The last state-file write failed (logged once until one succeeds).
    save_failing: bool,
    /// The last interval's error, logged once until it changes or clears.
    interval_error: Option<String>,
    resumed: bool,
    unbanned_total: u64,
    blocked_total: u64,
    last_rates: Vec<RateView>,
    counters: Counters,
    nic_seen_prev: Option<Count>,
    /// Rates of sources held by a hardware tier without counters.
    estimates: HashMap<Prefix, Estimate>,
    /// A pcap per attack (None: the filter's pins have no evidence ring).
    evidence: Option<crate::evidence::Evidence>,
    /// Withdrawn from such a tier to be measured in XDP (not re-planned until measured).
    probing: HashSet<Prefix>,
    /// The upstream tier (`[upstream]` enabled).
    upstream: Option<upstream::UpstreamSide>,
    /// Flow input (`[flow_input]` enabled).
    flow: Option<flow::FlowSide>,
    /// Per-source bits/s of the last interval (every tier), for the upstream tier.
    last_bps: HashMap<Prefix, f64>,
    /// CrowdSec's decisions and what the blacklist holds for them.
    crowdsec: crowdsec::CrowdsecSide,
}

/// What the daemon knows of a blocked source's rate when a hardware tier
/// without per-rule counters (ethtool-ntuple) may hold it.
#[derive(Debug, Clone, Copy, Default)]
struct Estimate {
    /// Last rate measured over a whole interval outside the hardware tier (pps).
    pps: f64,
    /// Interval of that measurement (0: never).
    at: u64,
    /// First interval the source was seen outside the hardware tier: the
    /// interval it left is only partly measured.
    off_since: Option<u64>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("mode", &self.cfg.daemon.mode)
            .finish()
    }
}

fn xdp_mode(s: &str) -> XdpMode {
    if s == "generic" {
        XdpMode::Generic
    } else {
        XdpMode::Native
    }
}

/// Open the filter pinned at `scope`, or attach a new one. Returns (filter, resumed).
fn open_or_attach(scope: &Scope, cfg: &FilterConfig, mode: XdpMode) -> Result<(Filter, bool)> {
    let name = scope.name();
    if filter::pin_dir(&name).exists() {
        let f = Filter::open(&name)?;
        if f.is_linked() {
            return Ok((f, true));
        }
        drop(f);
        Filter::detach(&name)?;
    }
    Ok((Filter::attach(scope, cfg, mode)?, false))
}

/// Open the filter pinned at `scope` and put it in `chain`'s ddos slot
/// again, or load a new one into it. Returns (filter, resumed).
fn open_or_join(
    scope: &Scope,
    cfg: &FilterConfig,
    chain: &rampart_dataplane::chain::Chain,
) -> Result<(Filter, bool)> {
    let name = scope.name();
    if filter::pin_dir(&name).exists() {
        let f = Filter::open(&name)?;
        if !f.is_linked() {
            f.rejoin(chain)?;
            return Ok((f, true));
        }
        // Attached alone by `rampart ddos run` before: start over in the chain.
        drop(f);
        Filter::detach(&name)?;
    }
    Ok((Filter::join(scope, cfg, chain)?, false))
}

/// The filter on the NIC hop, chained in front of the program the hop runs.
fn open_or_chain_nic(hop: &NicHop, cfg: &FilterConfig) -> Result<(Filter, bool)> {
    let scope = Scope::new(hop.netns.as_deref(), &hop.iface)?;
    let name = scope.name();
    if filter::pin_dir(&name).exists() {
        return Ok((Filter::open(&name)?, true));
    }
    let f = Filter::create(&scope, cfg)?;
    if let Err(e) = chain_nic(hop, &f) {
        let _ = Filter::detach(&name);
        return Err(e);
    }
    Ok((f, false))
}

/// Put `f` (a filter created for the NIC hop) in front of the XDP program
/// the hop runs: the filter's tail call goes to that program, and the
/// hop's `bpf_link` is updated to run the filter (atomically: every frame
/// sees one program or the other). Already chained: nothing to do.
///
/// # Errors
/// No XDP program on the hop, or one attached without a `bpf_link`.
pub fn chain_nic(hop: &NicHop, f: &Filter) -> Result<()> {
    use std::os::fd::AsRawFd;
    let ns = hop.netns.as_deref();
    let attached = rampart_dataplane::xdp::attached_prog_id(ns, &hop.iface)?.ok_or_else(|| {
        Error::Config(format!(
            "no XDP program on the NIC hop {hop}: the xdp-nic modes chain their filter in front of the program it runs"
        ))
    })?;
    let prog = f.prog_fd()?;
    if prog_id_of(prog.as_raw_fd())? == attached {
        return Ok(());
    }
    let link = hop_link(hop, attached)?;
    let next_prog = rampart_dataplane::xdp::prog_fd(attached)?;
    let next = rampart_dataplane::pin::open_pinned(&f.dir().join("ddos_next"))?;
    rampart_dataplane::maps::update_raw(
        next.as_raw_fd(),
        &0u32.to_ne_bytes(),
        &next_prog.as_raw_fd().to_ne_bytes(),
        0,
    )?;
    link.update(prog.as_raw_fd())?;
    Ok(())
}

/// Run the NIC hop's own program on it again (undoes [`chain_nic`]; the
/// filter `f` stays pinned). Nothing to do when the hop does not run `f`.
///
/// # Errors
/// The hop's link or the program behind the filter cannot be opened.
pub fn unchain_nic_link(hop: &NicHop, f: &Filter) -> Result<()> {
    use std::os::fd::AsRawFd;
    let prog = prog_id_of(f.prog_fd()?.as_raw_fd())?;
    if rampart_dataplane::xdp::attached_prog_id(hop.netns.as_deref(), &hop.iface)? != Some(prog) {
        return Ok(());
    }
    let next = rampart_dataplane::pin::open_pinned(&f.dir().join("ddos_next"))?;
    // A program array read from userspace gives the program's id.
    let mut id = [0u8; 4];
    if !rampart_dataplane::maps::lookup_raw(next.as_raw_fd(), &0u32.to_ne_bytes(), &mut id)? {
        return Err(Error::Config(format!(
            "the filter on the NIC hop {hop} has no program behind it to put back"
        )));
    }
    let own = rampart_dataplane::xdp::prog_fd(u32::from_ne_bytes(id))?;
    hop_link(hop, prog)?.update(own.as_raw_fd())?;
    Ok(())
}

/// Put the NIC hop's own program back and remove the nic-hop filter.
///
/// # Errors
/// As [`unchain_nic_link`], or the filter's pins cannot be removed.
pub fn unchain_nic(hop: &NicHop) -> Result<()> {
    let scope = Scope::new(hop.netns.as_deref(), &hop.iface)?;
    let name = scope.name();
    if filter::pin_dir(&name).exists() {
        if let Ok(f) = Filter::open(&name) {
            unchain_nic_link(hop, &f)?;
        }
        Filter::detach(&name)?;
    }
    Ok(())
}

/// The `bpf_link` that runs program `prog_id` on the NIC hop.
fn hop_link(hop: &NicHop, prog_id: u32) -> Result<XdpLink> {
    XdpLink::find(hop.netns.as_deref(), &hop.iface, prog_id)?.ok_or_else(|| {
        Error::Config(format!(
            "the XDP program on the NIC hop {hop} was attached without a bpf_link: \
             attach it with one (ip link cannot) so the filter can be chained atomically"
        ))
    })
}

fn prog_id_of(fd: std::os::fd::RawFd) -> Result<u32> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is valid for `len` bytes of writes.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    if rc < 0 {
        return Err(Error::io(
            "reading the filter program's id",
            std::io::Error::from_raw_os_error(-rc),
        ));
    }
    Ok(info.id)
}

fn open_hw(cfg: &Config) -> Result<Box<dyn Tier>> {
    let h = &cfg.hw;
    let hop = cfg.nic_hop();
    let (netns, iface) = (hop.netns.clone(), hop.iface.clone());
    Ok(match h.backend.as_str() {
        "emulated" => {
            let t = EmulatedNic::open(&hop, Duration::from_secs_f64(h.update_delay_ms / 1000.0))?;
            Box::new(if h.counters { t } else { t.without_counters() })
        }
        "tc-flower" => Box::new(crate::tier::tc_flower::TcFlower::open(
            netns.as_deref(),
            &iface,
            h.capacity,
        )?),
        "ethtool-ntuple" => Box::new(crate::tier::ethtool::EthtoolNtuple::open(
            netns.as_deref(),
            &iface,
            h.capacity,
        )?),
        _ => {
            crate::tier::xdp_hw::check(netns.as_deref(), &iface)?;
            unreachable!("xdp_hw::check always refuses")
        }
    })
}

impl Daemon {
    /// Attach (or resume from the pins) and get ready to run.
    ///
    /// # Errors
    /// Bad config, a tier this host cannot provide, attach failures.
    pub fn start(
        cfg: Config,
        view: Arc<RwLock<View>>,
        metrics: Metrics,
        alerts: Alerts,
    ) -> Result<Self> {
        let mut cfg = cfg;
        if cfg.daemon.mode == Mode::Auto {
            // Probed once: a reload keeps this choice (see reload.rs).
            let p = crate::mode::probe(cfg.daemon.netns.as_deref(), &cfg.daemon.iface)?;
            tracing::info!("mode auto: {}", p.reason);
            cfg.daemon.mode = p.mode;
            if let Some(b) = p.backend {
                cfg.hw.backend = b.into();
            }
        }
        cfg.validate()?;
        cfg.require_runnable()?;
        let d = &cfg.daemon;
        let scope = Scope::new(d.netns.as_deref(), &d.iface)?;
        // CrowdSec's first pull (every active decision: seconds of the
        // LAPI's time for 100,000) runs while the rest of the daemon starts.
        let crowdsec = crowdsec::CrowdsecSide::start(&cfg.crowdsec, &d.state_dir, &scope.name());
        let fcfg = FilterConfig {
            max_entries: cfg.filter.max_entries,
            max_other: cfg.filter.max_prefixes,
            sample_shift: cfg.filter.sample_shift,
            pass_malformed: false,
            features: true,
            features_capacity: cfg.filter.features_capacity,
            drop_encap: cfg.filter.drop_encap,
            max_vlans: cfg.filter.max_vlans,
            max_v6_ext: cfg.filter.max_v6_ext,
            ..FilterConfig::default()
        };
        let mode = d.mode;

        let hw = if mode.has_hw() {
            let c = cfg.clone();
            Some(HwWorker::spawn(
                move || {
                    set_thread_nice(c.daemon.nice);
                    open_hw(&c)
                },
                metrics.clone(),
                alerts.clone(),
            )?)
        } else {
            None
        };
        // In a chain (`rampart run`) the chain holds the interface's link.
        let (host_f, mut resumed, mut attachment) = match &cfg.chain {
            Some(chain) => {
                let (f, r) = open_or_join(&scope, &fcfg, chain)?;
                (f, r, None)
            }
            None => {
                let (f, r) = open_or_attach(&scope, &fcfg, xdp_mode(&cfg.filter.xdp_mode))?;
                let a = crate::watch::Attachment::open(&scope, &f, xdp_mode(&cfg.filter.xdp_mode))?;
                (f, r, Some(a))
            }
        };
        // A pinned link whose interface was deleted and created again while the daemon was down.
        if let Some(a) = &mut attachment {
            a.check();
        }
        let features = Features::open(&scope.name())?;
        let (host, host_filter) = match mode {
            // Auto was resolved above.
            Mode::XdpHost | Mode::HwXdpHost | Mode::Auto => {
                (HostTier::Xdp(XdpTier::new(host_f, scope.describe())), None)
            }
            Mode::XdpNic | Mode::HwXdpNic => {
                let hop = cfg.nic_hop();
                let (nf, r) = open_or_chain_nic(
                    &hop,
                    &FilterConfig {
                        features: false,
                        ..fcfg.clone()
                    },
                )?;
                resumed &= r;
                let loc = format!("{hop}, the NIC hop, in front of the program it runs");
                (HostTier::Xdp(XdpTier::new(nf, loc)), Some(host_f))
            }
            Mode::Iptables => {
                let ipt = Iptables::open(
                    d.netns.as_deref(),
                    &scope.name(),
                    cfg.filter.max_entries as usize,
                )?;
                (HostTier::Ipt(ipt), Some(host_f))
            }
        };
        let mut detection =
            Detection::new(&cfg.detect, &scope.name()).map_err(|e| Error::Config(e.to_string()))?;
        let mut pcfg = cfg.offload.clone();
        if let Some(h) = &hw {
            if let Some(c) = h.info().capacity {
                pcfg.capacity = pcfg.capacity.min(c);
            }
        } else {
            pcfg.capacity = 0;
        }
        let planner = Planner::new(&pcfg);
        let state_path = d.state_dir.join(format!("{}.json", scope.name()));
        let saved: SavedState = match std::fs::read_to_string(&state_path) {
            Ok(t) => serde_json::from_str(&t).map_err(|e| Error::State {
                path: state_path.clone(),
                reason: format!("{e}; remove the file to start without saved reasons"),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => SavedState::default(),
            // Unreadable (not a file, an I/O error): said once, and the
            // daemon starts without what it held rather than not at all.
            Err(e) => {
                tracing::error!(
                    "cannot read the daemon's state {}: {e}; starting without saved reasons, operator blocks and learned baselines",
                    state_path.display()
                );
                SavedState::default()
            }
        };
        let mut operator_whitelist = Vec::new();
        for w in &saved.whitelist {
            if let Ok(p) = Prefix::parse(w) {
                detection.add_whitelist(p);
                operator_whitelist.push(p);
            }
        }
        match &saved.detection {
            Some(l) => match detection.restore(l) {
                Restore::Fresh { reason } => {
                    tracing::info!("detection starts without baselines: {reason}");
                }
                r => tracing::info!("detection resumed from {}: {r:?}", state_path.display()),
            },
            None => tracing::info!(
                "detection starts without baselines (no learned state in {}): only the floors apply until it learns",
                state_path.display()
            ),
        }
        // Protection: reopened (what the data path keeps pinned can be
        // switched off), and the SYN-cookie stage loaded now rather than
        // in the first second of the first SYN flood.
        let protect = match Protect::open(&scope) {
            Ok(mut p) => {
                match p.prepare() {
                    Ok(()) => tracing::info!("SYN cookies ready on {}", scope.describe()),
                    Err(e) => tracing::warn!(
                        "SYN cookies unavailable on {}: {e}; SYN floods get blocks and the ACK guard only",
                        scope.describe()
                    ),
                }
                Some(p)
            }
            Err(e) => {
                tracing::warn!("no protection stage on {}: {e}", scope.describe());
                None
            }
        };
        let evidence =
            match crate::evidence::Evidence::open(&scope.name(), &d.state_dir.join("evidence")) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!("no evidence pcaps: {e}");
                    None
                }
            };
        let mut me = Self {
            evidence,
            exclusive: mode == Mode::HwXdpNic,
            cfg,
            features,
            host_filter,
            host,
            hw,
            moving_to_hw: HashSet::new(),
            detection,
            protect,
            scope: scope.clone(),
            policing: Policing::default(),
            planner,
            blocked: BTreeMap::new(),
            operator_whitelist,
            prev: HashMap::new(),
            prev_stats: HashMap::new(),
            last_snap: Instant::now(),
            last_flip: Instant::now(),
            snap: Snapshot::default(),
            alerts,
            metrics,
            view,
            state_path,
            saved_at: 0,
            intervals: 0,
            recent_intervals: std::collections::VecDeque::with_capacity(RECENT_INTERVALS),
            attachment,
            tc_watch: crate::watch::TcWatch::default(),
            save_failing: false,
            interval_error: None,
            resumed: false,
            unbanned_total: 0,
            blocked_total: 0,
            last_rates: Vec::new(),
            counters: Counters::default(),
            nic_seen_prev: None,
            estimates: HashMap::new(),
            probing: HashSet::new(),
            upstream: None,
            flow: None,
            last_bps: HashMap::new(),
            crowdsec,
        };
        if me.cfg.crowdsec.enabled && !matches!(me.host, HostTier::Xdp(_)) {
            tracing::warn!(
                "CrowdSec decisions need the XDP blacklist as the host tier: mode {} does not enter them",
                me.cfg.daemon.mode.name()
            );
        }
        me.upstream = upstream::UpstreamSide::start(&me.cfg.upstream, saved.upstream.clone());
        me.flow = flow::FlowSide::start(
            &me.cfg.flow_input,
            &me.cfg.detect,
            &me.scope.name(),
            &me.metrics.registry,
        )
        .map_err(Error::Config)?;
        if me.upstream.is_some() {
            for op in ["add", "remove"] {
                me.metrics.rule_updates.with_label_values(&["upstream", op]);
            }
        }
        // Resume: the tiers are the truth; the state file adds the reasons.
        let reasons: HashMap<String, Blocked> = saved
            .blocked
            .into_iter()
            .map(|b| (b.prefix.clone(), b))
            .collect();
        let mut held: HashSet<Prefix> = me
            .host
            .tier_ref()
            .rules()?
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        if me.exclusive {
            if let Some(h) = &me.hw {
                held.extend(h.rules().into_iter().map(|(p, _)| p));
            }
        }
        // CrowdSec's entries are not blocks of the daemon's own.
        held.retain(|p| !me.crowdsec.holds(p));
        resumed |= !held.is_empty();
        // Detection unbans what it blocked (its learned state lists them);
        // a source found in the blacklist that neither it nor the operator
        // is known to have blocked stays until the operator removes it.
        let known: HashSet<Prefix> = me.detection.blocked().into_iter().map(|b| b.0).collect();
        for p in held {
            let b = reasons.get(&p.to_string()).cloned().unwrap_or(Blocked {
                prefix: p.to_string(),
                detector: if known.contains(&p) {
                    "detection"
                } else {
                    "resumed"
                }
                .into(),
                reason: "found in the pinned blacklist at start".into(),
                since: rampart_service::alert::unix_now(),
                pps_at_block: 0.0,
                operator: false,
            });
            me.blocked.insert(p, b);
        }
        // Blocks the operator made that no tier holds any more (the pins
        // were removed behind the daemon's back): the state file has them.
        let lost: Vec<BlockDecision> = reasons
            .values()
            .filter(|b| b.operator)
            .filter_map(|b| {
                let prefix = Prefix::parse(&b.prefix).ok()?;
                (!me.blocked.contains_key(&prefix)).then(|| BlockDecision {
                    prefix,
                    detector: "operator",
                    reason: b.reason.clone(),
                    pps: 0.0,
                    bps: 0.0,
                })
            })
            .collect();
        if !lost.is_empty() {
            me.block_now(&lost, true)?;
            tracing::warn!(
                "{} operator block(s) of {} were in no tier (its pins were removed?): installed again",
                lost.len(),
                me.state_path.display()
            );
        }
        // Blocks detection remembers but the tiers lost (a tier emptied
        // behind the daemon's back) are forgotten, so they are re-detected.
        for p in known {
            if !me.blocked.contains_key(&p) {
                me.detection.forget_block(&p);
            }
        }
        // Policed sources: the pinned policer made what detection restored.
        if let Some(f) = iface_filter(&me.host_filter, &me.host) {
            let (det, blocked) = (&me.detection, &me.blocked);
            me.policing
                .restore(f, &det.learned().policed, |p| never_police(det, blocked, p));
        }
        me.resumed = resumed;
        let hw = me.hw.as_ref().map(HwWorker::info);
        me.metrics.tiers(
            me.host_name(),
            hw.as_ref()
                .map(|i| (i.name, i.counters == CounterKind::None)),
        );
        // Start a fresh interval so the first one has a known length.
        me.last_flip = Instant::now();
        me.features.snapshot_full(&mut me.snap)?;
        me.last_snap = Instant::now();
        // Prime counters so the first rates are deltas, not totals.
        me.measure(1.0)?;
        me.drop_stats();
        if resumed {
            me.alerts.emit(alerts::resume(me.blocked.len()));
        }
        me.publish();
        Ok(me)
    }

    fn host_name(&self) -> &'static str {
        self.host.tier_ref().info().name
    }

    /// Per-source pps over `secs` from every tier: prefix → (host, hw).
    fn measure(&mut self, secs: f64) -> Result<HashMap<Prefix, (f64, f64)>> {
        let mut out: HashMap<Prefix, (f64, f64)> = HashMap::new();
        let mut bps: HashMap<Prefix, f64> = HashMap::new();
        let mut next = HashMap::new();
        let mut dropped = [0u64; 2];
        type TierRules = (u8, Vec<(Prefix, crate::tier::Counts)>, &'static str);
        let mut tiers: Vec<TierRules> = vec![(0, self.host.tier_ref().rules()?, self.host_name())];
        if let Some(h) = &self.hw {
            if h.info().counters != CounterKind::None {
                tiers.push((1, h.rules(), h.info().name));
            }
        }
        for (t, rules, name) in tiers {
            let mut delta_sum = Count::default();
            for (p, c) in rules {
                let c = Count {
                    packets: c.packets,
                    bytes: c.bytes,
                };
                let before = self.prev.get(&(t, p)).copied();
                let dc = match before {
                    Some(b) if c.packets >= b.packets => Count {
                        packets: c.packets - b.packets,
                        bytes: c.bytes.saturating_sub(b.bytes),
                    },
                    _ => c,
                };
                let d = dc.packets;
                next.insert((t, p), c);
                dropped[t as usize] += c.packets;
                delta_sum += dc;
                *bps.entry(p).or_default() += dc.bytes as f64 * 8.0 / secs;
                let e = out.entry(p).or_default();
                if t == 0 {
                    e.0 += d as f64 / secs;
                } else {
                    e.1 += d as f64 / secs;
                }
            }
            // The XDP filter counts its own drops exactly (drop_stats).
            if t == 1 {
                self.counters.add_dropped(name, "hw_rule", delta_sum);
            } else if !matches!(self.host, HostTier::Xdp(_)) {
                self.counters.add_dropped(name, "blacklist", delta_sum);
            }
        }
        self.prev = next;
        self.last_bps = bps;
        Ok(out)
    }

    /// Drop/pass counters of the XDP filters and the NIC hop → metrics.
    fn drop_stats(&mut self) {
        let mut cur: Vec<(&'static str, String, Count, bool)> = Vec::new();
        let filters: Vec<(&'static str, &Filter)> = {
            let mut v = Vec::new();
            if let HostTier::Xdp(x) = &self.host {
                v.push((
                    if self.cfg.daemon.mode.on_nic() {
                        "xdp-nic"
                    } else {
                        "xdp"
                    },
                    x.filter(),
                ));
            }
            if let Some(f) = &self.host_filter {
                v.push(("xdp", f));
            }
            v
        };
        for (tier, f) in filters {
            if let Ok(s) = f.stats() {
                let count = |c: &filter::PktBytes| Count {
                    packets: c.packets,
                    bytes: c.bytes,
                };
                for (r, c) in &s.drops {
                    cur.push((tier, format!("drop:{r}"), count(c), true));
                }
                for (r, c) in &s.passes {
                    cur.push((tier, format!("pass:{r}"), count(c), false));
                }
            }
        }
        // What protection (SYN cookies, ACK guard) consumed in the feature
        // stage: SYNs answered by a cookie and never given to the stack,
        // and the out-of-state TCP it dropped. Summed over the protected
        // victims (a victim's counters restart when it is protected again).
        if let Some(p) = &self.protect {
            if let Ok(list) = p.list() {
                let mut sum = [0u64; 6];
                for e in &list {
                    sum[0] += e.stats.synack_sent;
                    sum[1] += e.stats.guard_dropped;
                    sum[2] += e.stats.cookie_ack_invalid;
                    sum[3] += e.stats.no_listener;
                    sum[4] += e.stats.bad_syn;
                    sum[5] += e.stats.syn_pending;
                }
                for (r, v) in [
                    "syn_cookie",
                    "ack_guard",
                    "cookie_invalid",
                    "no_listener",
                    "bad_syn",
                    "syn_pending",
                ]
                .into_iter()
                .zip(sum)
                {
                    // Not added to the tier's packets: the filter counted
                    // them as passed to this stage already.
                    let v = Count {
                        packets: v,
                        bytes: 0,
                    };
                    let before = self
                        .prev_stats
                        .insert(("xdp", format!("protect:{r}")), v)
                        .unwrap_or(v);
                    // 0 included: the label exists from the start.
                    self.counters
                        .add_drops("xdp", r, v.packets.saturating_sub(before.packets));
                }
            }
        }
        let mut handled: HashMap<&'static str, Count> = HashMap::new();
        for (tier, key, v, is_drop) in cur {
            let before = self.prev_stats.insert((tier, key.clone()), v).unwrap_or(v);
            let d = Count {
                packets: v.packets.saturating_sub(before.packets),
                bytes: v.bytes.saturating_sub(before.bytes),
            };
            *handled.entry(tier).or_default() += d;
            // 0 included: every reason's label exists from the start.
            if is_drop {
                self.counters
                    .add_dropped(tier, key.trim_start_matches("drop:"), d);
            } else {
                self.counters
                    .add_passed(tier, key.trim_start_matches("pass:"), d);
            }
        }
        for (tier, d) in handled {
            self.counters.add_seen(tier, d);
        }
        if self.hw.is_some() && self.cfg.hw.backend == "emulated" {
            // Frames the EMULATED NIC saw: its program's veth counters on the hop.
            let hop = self.cfg.nic_hop();
            if let Ok((packets, bytes)) =
                rampart_dataplane::xdp::veth_xdp_counts(hop.netns.as_deref(), &hop.iface)
            {
                let n = Count { packets, bytes };
                if let Some(p) = self.nic_seen_prev {
                    self.counters.add_seen(
                        "emulated",
                        Count {
                            packets: n.packets.saturating_sub(p.packets),
                            bytes: n.bytes.saturating_sub(p.bytes),
                        },
                    );
                }
                self.nic_seen_prev = Some(n);
            }
        }
    }

    fn block_now(&mut self, decisions: &[BlockDecision], operator: bool) -> Result<()> {
        self.block_for(decisions, &[], operator, None)
    }

    /// Block `decisions` in the host tier; `attacks[i]` is the (victim,
    /// vector) decision `i` answers, for its alert; `source` is `Some("flow")`
    /// for flow input's decisions.
    fn block_for(
        &mut self,
        decisions: &[BlockDecision],
        attacks: &[(Prefix, String)],
        operator: bool,
        source: Option<&str>,
    ) -> Result<()> {
        let ps: Vec<Prefix> = decisions.iter().map(|d| d.prefix).collect();
        // What CrowdSec holds becomes this block's (no expiry).
        if let HostTier::Xdp(x) = &mut self.host {
            self.crowdsec.yield_to(x.filter_mut(), &ps);
        }
        let n = self.host.tier().install(&ps)?;
        let host = self.host_name();
        self.metrics
            .rule_updates
            .with_label_values(&[host, "add"])
            .inc_by(n as u64);
        for (i, d) in decisions.iter().enumerate() {
            self.metrics.blocks.with_label_values(&[d.detector]).inc();
            self.blocked_total += 1;
            self.blocked.insert(
                d.prefix,
                Blocked {
                    prefix: d.prefix.to_string(),
                    detector: d.detector.to_string(),
                    reason: d.reason.clone(),
                    since: rampart_service::alert::unix_now(),
                    pps_at_block: d.pps,
                    operator,
                },
            );
            let mut a = alerts::block(&d.prefix, d.detector, &d.reason, d.pps, d.bps, host);
            if let Some((victim, vector)) = attacks.get(i) {
                a = alerts::with_attack(a, victim, vector);
            }
            if source == Some("flow") {
                a = alerts::from_flow(a);
            }
            self.alerts.emit(a);
        }
        Ok(())
    }

    fn unblock_now(
        &mut self,
        prefixes: &[Prefix],
        detector: &str,
        reasons: &[String],
    ) -> Result<()> {
        // Hardware first, then the blacklist: the source is meant to pass now.
        if let Some(h) = &self.hw {
            h.submit(prefixes.to_vec(), Vec::new());
        }
        for p in prefixes {
            self.moving_to_hw.remove(p);
        }
        // What a CrowdSec decision still wants stays, as CrowdSec's.
        let kept = match &mut self.host {
            HostTier::Xdp(x) => {
                let det = &self.detection;
                self.crowdsec
                    .take_back(x.filter_mut(), prefixes, &|p| det.is_whitelisted(p))
            }
            HostTier::Ipt(_) => HashSet::new(),
        };
        let gone: Vec<Prefix> = prefixes
            .iter()
            .filter(|p| !kept.contains(p))
            .copied()
            .collect();
        let n = self.host.tier().remove(&gone)?;
        let host = self.host_name();
        self.metrics
            .rule_updates
            .with_label_values(&[host, "remove"])
            .inc_by(n as u64);
        for (i, p) in prefixes.iter().enumerate() {
            if detector == "operator" {
                self.detection.forget_block(p);
            }
            let was = self.blocked.remove(p);
            self.metrics.unblocks.with_label_values(&[detector]).inc();
            let blocked_by = was.as_ref().map_or("attack", |b| b.detector.as_str());
            self.alerts.emit(alerts::unblock(
                p,
                blocked_by,
                detector,
                reasons.get(i).cloned(),
            ));
        }
        Ok(())
    }

    /// A hardware tier without per-rule counters (ethtool-ntuple) hides
    /// the sources it drops from every counter. Their rate is then the
    /// last one measured over a whole interval outside it — in XDP, which
    /// holds every blocked source (`hw+xdp-nic`: which takes a source back
    /// before its rule goes) — refreshed by withdrawal probes
    /// ([`Daemon::offload`]). The interval in which a source leaves the
    /// tier is partly measured: it counts as the larger of that and the estimate.
    fn estimate_counterless(&mut self, rates: &mut HashMap<Prefix, (f64, f64)>) {
        let Some(h) = &self.hw else {
            return;
        };
        if h.info().counters != CounterKind::None {
            return;
        }
        let live: HashSet<Prefix> = h.rules().into_iter().map(|(p, _)| p).collect();
        let now = self.intervals;
        let blocked = &self.blocked;
        self.estimates.retain(|p, _| blocked.contains_key(p));
        self.probing.retain(|p| blocked.contains_key(p));
        for p in self.blocked.keys() {
            let e = self.estimates.entry(*p).or_default();
            let r = rates.entry(*p).or_default();
            if live.contains(p) {
                e.off_since = None;
                r.1 = e.pps;
            } else if e.off_since.is_some_and(|s| s < now) {
                e.pps = r.0;
                e.at = now;
                self.probing.remove(p);
            } else {
                e.off_since.get_or_insert(now);
                if e.at == 0 {
                    e.pps = r.0;
                    e.at = now;
                }
                r.1 = (e.pps - r.0).max(0.0);
            }
        }
    }

    /// Apply the planner's moves, make-before-break (the hardware worker
    /// applies them; planning waits while it is busy).
    fn offload(&mut self, rates: &HashMap<Prefix, (f64, f64)>) -> Result<()> {
        let Some(hw) = &self.hw else {
            return Ok(());
        };
        let live: HashSet<Prefix> = hw.rules().into_iter().map(|(p, _)| p).collect();
        let host = self.host_name();
        if self.exclusive {
            // break: a source leaves the nic-hop filter only once its rule is live
            let done: Vec<Prefix> = self
                .moving_to_hw
                .iter()
                .filter(|p| live.contains(p) && self.blocked.contains_key(p))
                .copied()
                .collect();
            if !done.is_empty() {
                let n = self.host.tier().remove(&done)?;
                self.metrics
                    .rule_updates
                    .with_label_values(&[host, "remove"])
                    .inc_by(n as u64);
            }
            for p in &done {
                self.moving_to_hw.remove(p);
            }
        }
        let hw = self.hw.as_ref().expect("checked");
        if hw.busy() {
            return Ok(());
        }
        let hw_info = hw.info();
        // Exact sources and blocked prefixes alike: a botnet's /24 is one
        // rule in hardware, as it is one entry in XDP.
        let list: Vec<(Prefix, f64)> = self
            .blocked
            .keys()
            .filter(|p| !self.probing.contains(p))
            .map(|p| (*p, rates.get(p).map(|r| r.0 + r.1).unwrap_or(0.0)))
            .collect();
        let mut plan = self.planner.plan(&list, &live);
        if hw_info.counters == CounterKind::None {
            // Withdrawal probes: the rules measured longest ago leave the
            // tier for an interval; XDP drops and counts their sources.
            let now = self.intervals;
            let mut stale: Vec<(u64, Prefix)> = live
                .iter()
                .filter(|p| self.blocked.contains_key(p) && !plan.from_hw.contains(p))
                .map(|p| (self.estimates.get(p).map_or(0, |e| e.at), *p))
                .filter(|(at, _)| at + 1 < now)
                .collect();
            stale.sort();
            let probes: Vec<Prefix> = stale
                .into_iter()
                .take(self.cfg.hw.probes_per_interval)
                .map(|(_, p)| p)
                .collect();
            self.metrics
                .rule_updates
                .with_label_values(&[hw_info.name, "probe"])
                .inc_by(probes.len() as u64);
            self.probing.extend(probes.iter().copied());
            plan.from_hw.extend(probes);
        }
        if self.exclusive && !plan.from_hw.is_empty() {
            // make: the nic-hop filter drops them again before their rules go
            let n = self.host.tier().install(&plan.from_hw)?;
            self.metrics
                .rule_updates
                .with_label_values(&[host, "add"])
                .inc_by(n as u64);
        }
        if self.exclusive {
            self.moving_to_hw.extend(plan.to_hw.iter().copied());
        }
        // Inclusive tiers: the XDP blacklist already holds every candidate.
        self.hw
            .as_ref()
            .expect("checked")
            .submit(plan.from_hw, plan.to_hw);
        Ok(())
    }

    /// One interval: snapshot, detect, block, measure, unban, offload.
    ///
    /// # Errors
    /// Tier or map failures (the loop logs them and continues).
    pub fn step(&mut self) -> Result<()> {
        let t0 = Instant::now();
        self.features.snapshot_full(&mut self.snap)?;
        let index = self.snap.interval;
        let t_end = Instant::now();
        // The records span switch to switch (the switch opens the
        // snapshot); the tiers' counters, read after it, span read to read.
        // A long read (a full table) followed by a short one made the next
        // interval's records look up to 3x faster than they came.
        let feat_secs = t0.duration_since(self.last_flip).as_secs_f64().max(1e-3);
        self.last_flip = t0;
        let secs = t_end.duration_since(self.last_snap).as_secs_f64().max(1e-3);
        self.last_snap = t_end;
        self.intervals += 1;
        if self.recent_intervals.len() == RECENT_INTERVALS {
            self.recent_intervals.pop_front();
        }
        self.recent_intervals.push_back(secs);
        let mut rates = self.measure(secs)?;
        self.estimate_counterless(&mut rates);
        let blocked_rates: Vec<SourceRate> = self
            .blocked
            .iter()
            .filter(|(_, b)| !b.operator)
            .map(|(p, _)| SourceRate {
                prefix: *p,
                pps: rates
                    .get(p)
                    .map_or(0.0, |r| r.0 + r.1)
                    .max(self.upstream.as_ref().map_or(0.0, |u| u.held_pps(p))),
            })
            .collect();
        let policed_rates = match iface_filter(&self.host_filter, &self.host) {
            Some(f) => self.policing.measure(f, secs),
            None => Vec::new(),
        };
        let iv = detection::Interval {
            index,
            secs: feat_secs,
            window_s: None,
            pairs: &self.snap.records,
            victims: &self.snap.victims,
            skips: detection::Skips {
                pairs: self.snap.pairs_full,
                victims: self.snap.victims_full,
            },
            blocked: &blocked_rates,
            blocked_in_records: false,
            policed: &policed_rates,
        };
        let verdict = self.detection.observe(&iv);
        if !(verdict.blocks.is_empty()
            && verdict.unblocks.is_empty()
            && verdict.police.is_empty()
            && verdict.unpolice.is_empty()
            && verdict.protect.is_empty())
        {
            tracing::debug!(
                "interval {index}: {} pair records; {} blocks, {} unblocks, {} policed, {} unpoliced, protection {:?}",
                self.snap.records.len(),
                verdict.blocks.len(),
                verdict.unblocks.len(),
                verdict.police.len(),
                verdict.unpolice.len(),
                verdict.protect
            );
        }
        let mut changed = self.apply(&verdict, t_end)?;
        self.offload(&rates)?;
        changed |= self.flow_step()?;
        changed |= self.upstream_step(&rates, secs);
        self.drop_stats();
        let in_hw: HashSet<Prefix> = match &self.hw {
            Some(h) => h.rules().into_iter().map(|(p, _)| p).collect(),
            None => HashSet::new(),
        };
        let mut rv: Vec<RateView> = self
            .blocked
            .keys()
            .map(|p| {
                let r = rates.get(p).copied().unwrap_or_default();
                RateView {
                    prefix: p.to_string(),
                    pps: r.0 + r.1,
                    host_pps: r.0,
                    hw_pps: r.1,
                    in_hw: in_hw.contains(p),
                }
            })
            .collect();
        rv.sort_by(|a, b| b.pps.total_cmp(&a.pps));
        self.last_rates = rv;
        // Blocks and protection are saved when they change; baselines
        // every minute of intervals, so a restart keeps what was learned.
        let minute = (60.0 / self.cfg.daemon.interval_s).ceil() as u64;
        if changed || self.intervals >= self.saved_at + minute {
            self.save();
            self.saved_at = self.intervals;
        }
        self.metrics
            .loop_seconds
            .observe(t0.elapsed().as_secs_f64());
        self.publish();
        Ok(())
    }

    /// Carry out one verdict: blocks, unblocks, policing, protection,
    /// events. Returns whether anything the state file holds changed.
    fn apply(&mut self, v: &Verdict, t_end: Instant) -> Result<bool> {
        // Protection first: SYN cookies answer a whole flood at once, the
        // blocks below take its sources one by one.
        let t = Instant::now();
        for c in &v.protect {
            self.set_protection(c);
        }
        if !v.protect.is_empty() {
            tracing::debug!(
                "protection switched in {:.1} ms",
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        let mut decisions = Vec::new();
        let mut attacks = Vec::new();
        for b in &v.blocks {
            if self.blocked.contains_key(&b.prefix) {
                continue;
            }
            decisions.push(BlockDecision {
                prefix: b.prefix,
                detector: b.detector,
                reason: format!("{}: {}", b.vector, b.reason),
                pps: b.pps,
                bps: b.bps,
            });
            attacks.push((b.victim, b.vector.clone()));
        }
        if !decisions.is_empty() {
            let t = Instant::now();
            self.block_for(&decisions, &attacks, false, None)?;
            for (d, (_, vector)) in decisions.iter().zip(&attacks) {
                self.crowdsec
                    .push(crowdsec::push_of(d.prefix, vector, &d.reason));
            }
            tracing::debug!(
                "{} block(s) installed in {:.1} ms",
                decisions.len(),
                t.elapsed().as_secs_f64() * 1e3
            );
            self.metrics
                .detection_latency
                .observe(t_end.elapsed().as_secs_f64());
        }
        let unbans: Vec<(Prefix, String)> = v
            .unblocks
            .iter()
            .filter(|u| self.blocked.get(&u.prefix).is_some_and(|b| !b.operator))
            .map(|u| (u.prefix, u.reason.clone()))
            .collect();
        if !unbans.is_empty() {
            let ps: Vec<Prefix> = unbans.iter().map(|u| u.0).collect();
            let rs: Vec<String> = unbans.iter().map(|u| u.1.clone()).collect();
            self.unblock_now(&ps, "detection", &rs)?;
            self.unbanned_total += ps.len() as u64;
        }
        let mut policing_changed = false;
        if let Some(f) = iface_filter(&self.host_filter, &self.host) {
            let (det, blocked) = (&self.detection, &self.blocked);
            policing_changed = self
                .policing
                .apply(f, &v.police, &v.unpolice, |p| never_police(det, blocked, p));
        }
        if let Some(ev) = &mut self.evidence {
            ev.drain();
        }
        for e in &v.events {
            let mut a = alerts::attack_event(e, &self.cfg.daemon.iface);
            a.rampart.pcap = self.evidence.as_mut().and_then(|ev| ev.on_event(e));
            self.alerts.emit(a);
        }
        Ok(
            !decisions.is_empty()
                || !unbans.is_empty()
                || policing_changed
                || !v.protect.is_empty(),
        )
    }

    /// Switch a victim's SYN cookies / ACK guard. A failure (e.g. a kernel
    /// that cannot complete cookie connections) is logged with its reason
    /// and the victim stays as it was: blocks still apply.
    fn set_protection(&mut self, c: &detection::ProtectChange) {
        let flags = ProtectFlags {
            syn_cookies: c.flags.syn_cookies,
            ack_guard: c.flags.ack_guard,
        };
        let victim = c.victim.net().addr();
        if self.protect.is_none() {
            match Protect::open(&self.scope) {
                Ok(p) => self.protect = Some(p),
                Err(e) => {
                    tracing::warn!("protection of {} not switched: {e}", c.victim);
                    return;
                }
            }
        }
        let p = self.protect.as_mut().expect("opened above");
        let r = if flags.is_empty() {
            // Loaded again for the next flood once the stage is detached.
            p.clear(victim).and_then(|_| p.prepare())
        } else {
            p.set(victim, flags)
        };
        match r {
            Ok(()) => tracing::info!(
                "protection of {}: syn_cookies {}, ack_guard {}",
                c.victim,
                flags.syn_cookies,
                flags.ack_guard
            ),
            Err(e) => tracing::warn!("protection of {} not switched: {e}", c.victim),
        }
    }

    fn save(&mut self) {
        let s = SavedState {
            blocked: self.blocked.values().cloned().collect(),
            whitelist: self
                .operator_whitelist
                .iter()
                .map(ToString::to_string)
                .collect(),
            detection: Some(self.detection.learned()),
            upstream: self
                .upstream
                .as_ref()
                .map(upstream::UpstreamSide::announced)
                .unwrap_or_default(),
        };
        let tmp = self.state_path.with_extension("json.tmp");
        let r = (|| -> std::io::Result<()> {
            if let Some(d) = self.state_path.parent() {
                std::fs::create_dir_all(d)?;
            }
            let t = serde_json::to_string(&s).map_err(std::io::Error::other)?;
            std::fs::write(&tmp, t)?;
            std::fs::rename(&tmp, &self.state_path)
        })();
        // One line when saving starts failing (a full or read-only state
        // directory) and one when it works again: not one per interval.
        match r {
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                if !self.save_failing {
                    tracing::error!(
                        "cannot save the daemon's state to {}: {e}; blocking goes on, but a restart would lose the reasons and learned baselines since (free space in or make writable {})",
                        self.state_path.display(),
                        self.state_path.parent().unwrap_or(&self.state_path).display()
                    );
                    self.save_failing = true;
                }
            }
            Ok(()) => {
                if self.save_failing {
                    tracing::info!(
                        "the daemon's state is saved to {} again",
                        self.state_path.display()
                    );
                    self.save_failing = false;
                }
            }
        }
    }

    /// Update the shared view.
    fn publish(&mut self) {
        let mut tiers = Vec::new();
        let mut push = |info: TierInfo, rules: Vec<(Prefix, crate::tier::Counts)>| {
            tiers.push(TierView {
                dropped_packets: rules.iter().map(|(_, c)| c.packets).sum(),
                rules: rules.len(),
                info,
            });
        };
        if let Some(h) = &self.hw {
            push(h.info(), h.rules());
        }
        let t = self.host.tier_ref();
        push(t.info(), t.rules().unwrap_or_default());
        if let Some((info, rules)) = self.upstream.as_ref().and_then(|u| u.tier_info()) {
            tiers.push(TierView {
                info,
                rules,
                dropped_packets: 0,
            });
        }
        let mut wl: Vec<String> = self.cfg.detect.whitelist.clone();
        wl.extend(self.operator_whitelist.iter().map(ToString::to_string));
        wl.sort();
        wl.dedup();
        let v = View {
            mode: self.cfg.daemon.mode.name().into(),
            interval_s: self.cfg.daemon.interval_s,
            intervals: self.intervals,
            recent_intervals_s: self.recent_intervals.iter().copied().collect(),
            feature_pairs: self.snap.records.len(),
            feature_victims: self.snap.victims.len(),
            under_attack: self.detection.under_attack(),
            victims: self.detection.victims(),
            gauges: self.detection.gauges(MAX_VICTIM_GAUGES),
            policed: self.policing.view(),
            threshold: self.planner.threshold(),
            resumed: self.resumed,
            blocked: self.blocked.values().cloned().collect(),
            rates: self.last_rates.clone(),
            tiers,
            whitelist: wl,
            unbanned_total: self.unbanned_total,
            blocked_total: self.blocked_total,
            counters: self.counters.clone(),
            detect: self.cfg.detect.clone(),
            upstream: self.upstream.as_ref().map(upstream::UpstreamSide::view),
            crowdsec: self.cfg.crowdsec.enabled.then(|| self.crowdsec.view()),
            flow_input: self.flow.as_ref().map(flow::FlowSide::view),
        };
        if let Ok(mut w) = self.view.write() {
            *w = v;
        }
    }

    /// Stop policing the sources inside `p` (the operator blocked or
    /// whitelisted it: such sources are never policed).
    fn release_policed(&mut self, p: &Prefix) {
        if let Some(f) = iface_filter(&self.host_filter, &self.host) {
            let n = self.policing.release_within(f, p);
            if n > 0 {
                tracing::info!("{n} policed source(s) in {p} released by the operator");
            }
        }
    }

    /// Execute an operator command.
    pub fn command(&mut self, c: Command) -> Reply {
        let r = match c {
            Command::Block { prefix, reason } => {
                if self.detection.is_whitelisted(&prefix) {
                    return Err(CommandError::Whitelisted(prefix));
                }
                if self.blocked.contains_key(&prefix) {
                    return Err(CommandError::AlreadyBlocked(prefix));
                }
                let d = BlockDecision {
                    prefix,
                    detector: "operator",
                    reason: if reason.is_empty() {
                        "blocked through the API".into()
                    } else {
                        reason
                    },
                    pps: 0.0,
                    bps: 0.0,
                };
                let r = self.block_now(&[d], true);
                self.release_policed(&prefix);
                r.map(|()| format!("{prefix} blocked"))
            }
            Command::Unblock(p) => {
                if !self.blocked.contains_key(&p) && self.crowdsec.holds(&p) {
                    return Err(CommandError::CrowdsecDecision(p));
                }
                if !self.blocked.contains_key(&p) {
                    return Err(CommandError::NotBlocked(p));
                }
                self.unblock_now(&[p], "operator", &["unblocked through the API".into()])
                    .map(|()| format!("{p} unblocked"))
            }
            Command::Whitelist(p) => {
                self.detection.add_whitelist(p);
                if !self.operator_whitelist.contains(&p) {
                    self.operator_whitelist.push(p);
                }
                let hit: Vec<Prefix> = self
                    .blocked
                    .keys()
                    .filter(|b| {
                        b.net().contains(&p.net().addr()) || p.net().contains(&b.net().addr())
                    })
                    .copied()
                    .collect();
                self.release_policed(&p);
                // CrowdSec's entries inside it leave at the next update.
                self.crowdsec.mark_dirty();
                let n = hit.len();
                let rs = vec!["whitelisted through the API".to_string(); n];
                self.unblock_now(&hit, "operator", &rs)
                    .map(|()| format!("{p} whitelisted ({n} blocked prefixes released)"))
            }
            Command::Unwhitelist(p) => {
                if !self.operator_whitelist.contains(&p) {
                    return Err(CommandError::NotWhitelisted(p));
                }
                self.operator_whitelist.retain(|w| *w != p);
                self.detection.remove_whitelist(&p);
                Ok(format!("{p} removed from the whitelist"))
            }
        };
        self.save();
        self.publish();
        Ok(r?)
    }
}

/// The daemon on its owner thread: every interval runs [`Daemon::step`],
/// and operator commands run between intervals.
impl Owned for Daemon {
    fn interval(&self) -> Option<Duration> {
        Some(Duration::from_secs_f64(self.cfg.daemon.interval_s))
    }

    fn tick(&mut self) {
        if let Some(a) = &mut self.attachment {
            a.check();
        }
        if let Some(p) = &mut self.protect {
            self.tc_watch.check(p, &self.scope.describe());
        }
        // CrowdSec first, on its own: a failing interval never holds back
        // the LAPI's decisions, nor they an interval.
        if let HostTier::Xdp(x) = &mut self.host {
            let (det, blocked) = (&self.detection, &self.blocked);
            self.crowdsec
                .reconcile(x.filter_mut(), &|p| blocked.contains_key(p), &|p| {
                    det.is_whitelisted(p)
                });
        }
        // A failure that repeats every interval is said once (and once
        // when intervals work again), not twice a second.
        match self.step() {
            Err(e) => {
                let msg = e.to_string();
                if self.interval_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!("interval failed: {msg} (said once until it changes)");
                    self.interval_error = Some(msg);
                }
            }
            Ok(()) => {
                if self.interval_error.take().is_some() {
                    tracing::info!("intervals work again");
                }
            }
        }
    }

    fn finish(&mut self) {
        self.save();
    }
}

/// A daemon running on its own thread.
#[derive(Debug)]
pub struct Handle {
    /// What it publishes.
    pub view: Arc<RwLock<View>>,
    /// Its metrics.
    pub metrics: Metrics,
    /// Its alerts (the API and dashboard read the latest and the attacks).
    pub alerts: Alerts,
    owner: Owner<Daemon>,
}

/// Give the calling thread nice value `n` (`daemon.nice`); a failure is
/// logged, not fatal (the loop still runs, only without priority).
fn set_thread_nice(n: i32) {
    if n == 0 {
        return;
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    // SAFETY: plain setpriority(2) on this thread's id.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, n) };
    if rc != 0 {
        tracing::warn!(
            nice = n,
            error = %std::io::Error::last_os_error(),
            "could not raise the daemon thread's priority (needs CAP_SYS_NICE); running at nice 0"
        );
    }
}

impl Handle {
    /// Start the daemon on a new thread; returns once it is attached (or failed to).
    ///
    /// # Errors
    /// As [`Daemon::start`].
    pub fn spawn(cfg: Config) -> Result<Self> {
        let view = Arc::new(RwLock::new(View::default()));
        let metrics = Metrics::new(view.clone());
        let alerts = Alerts::open(&cfg.alerts, &[App::Ddos], &metrics.registry)
            .map_err(|e| Error::Config(e.to_string()))?;
        let (v, m, a) = (view.clone(), metrics.clone(), alerts.clone());
        let owner = Owner::spawn("rampart-ddosd", move || {
            set_thread_nice(cfg.daemon.nice);
            Daemon::start(cfg, v, m, a)
        })
        .map_err(|e| match e {
            SpawnError::Init(e) => e,
            SpawnError::Thread(e) => Error::io("starting the daemon thread", e),
            SpawnError::Died => Error::Config("the daemon thread died while starting".into()),
        })?;
        Ok(Self {
            view,
            metrics,
            alerts,
            owner,
        })
    }

    /// Send a command and wait for the answer (blocking).
    pub fn command(&self, c: Command) -> Reply {
        self.owner
            .handle()
            .call(move |d| d.command(c))
            .map_err(|_| CommandError::Stopped)?
    }

    /// Where the API sends its commands.
    pub fn owner(&self) -> OwnerHandle<Daemon> {
        self.owner.handle()
    }

    /// A copy of the current view.
    pub fn view(&self) -> View {
        self.view.read().map(|v| v.clone()).unwrap_or_default()
    }

    /// Stop the loop (filtering stays: everything is pinned) and wait for
    /// it; the state file is saved on the way out.
    ///
    /// # Errors
    /// None today (kept for callers that handle a failing stop).
    pub fn stop(self) -> Result<()> {
        self.owner.stop();
        Ok(())
    }

    /// Stop flag (for signal handlers).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.owner.stop_flag()
    }
}
