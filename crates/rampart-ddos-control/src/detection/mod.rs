//! Detection: per-victim detection against learned per-victim
//! baselines, then attribution of sources; SYN cookies and the ACK guard
//! for spoofed and out-of-state floods; policing before banning; prefix
//! aggregation with bounded collateral; unban on the source's own rate;
//! attack events per victim.
//!
//! # How the daemon uses it
//!
//! ```text
//! let mut det = Detection::new(&cfg, iface)?;        // cfg: DetectionConfig ([detect])
//! match det.restore(&saved_learned) { Restore::Fresh { reason } => log(reason), _ => {} }
//! every interval (0.5 s):
//!     let v = det.observe(&Interval { index, secs, window_s: None, pairs, victims, skips,
//!                                     blocked: &rates_of_blocked, blocked_in_records: false,
//!                                     policed: &dropped_of_policed });
//!     v.blocks    → blacklist (tiers), v.unblocks → remove
//!     v.police    → Filter::police(prefix, rate_pps), v.unpolice → Filter::unpolice
//!     v.protect   → Protect::set(victim, flags) (all off: clear)
//!     v.events    → alerts
//!     save det.learned() with the state file; det.gauges() / det.victims() for metrics and the API
//! ```
//!
//! Pure logic: time is the sum of the intervals' lengths, so every rule is
//! testable with synthetic or recorded intervals.
//!
//! An interval may also be a sliding window judged every `secs`
//! ([`Interval::window_s`]; flow input judges a third of an export
//! interval at a time over the records of the last export interval):
//! rates divide by the window, the clock advances by `secs`, so hold and
//! quiet times, baseline growth per minute and warm-up stay in seconds.
//!
//! # The rules
//!
//! Per victim (an IPv4 address, an IPv6 /64, and an IPv4 /24 judged as a
//! whole for carpet bombing) and per vector ([`Vector`]) the rate of the
//! interval (passed traffic plus what is dropped from the sources blocked
//! or policed for that victim) is compared with `max(floor, multiplier ×
//! baseline)`:
//! - `syn_flood`: SYNs minus completed handshakes, over the last two
//!   intervals (a handshake may straddle their boundary), or over the
//!   window alone when windows overlap;
//! - `ack_flood`: out-of-state TCP (the sampled no-socket share of the
//!   non-SYN TCP), minus the RSTs that answer the victim's SYN-ACKs of
//!   incomplete handshakes;
//! - `udp_amplification/<class>`: UDP from that amplification source port;
//! - `udp_flood`, `icmp_flood`, `fragment_flood`.
//!
//! Baselines learn only in intervals normal for the victim (no anomaly, no
//! attack, no blocked/policed/protected traffic), as an asymmetric EWMA (a
//! high level of the vector's rate) whose rise is bounded per minute
//! (overlapping windows weigh each sample so that a window's worth of
//! them moves a baseline as one sample would).
//!
//! Attribution, per anomalous vector, among the sources of the victim
//! sending at least `source_min_pps` of that vector: `syn_flood` blocks
//! sources with incomplete handshakes concentrated on few ports (many
//! ports: `port_scan`) and polices those that also complete handshakes or
//! are known to; a spoofed SYN flood (distinct sources ≈ SYNs), or one
//! spread over sources each too slow to attribute (what the blocks leave
//! is still over the threshold), switches on SYN cookies and the ACK guard
//! for the victim instead; `ack_flood` switches on the ACK
//! guard; amplification, ICMP and fragment floods block their sources; a
//! UDP flood blocks unknown sources and polices known ones. A source is
//! never blocked for volume alone toward a healthy victim.

mod config;
#[cfg(test)]
mod scenario;
#[cfg(test)]
mod tests;
mod types;

use std::collections::BTreeMap;
use std::net::IpAddr;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::{Deserialize, Serialize};

pub use config::{DetectionConfig, Floors};
pub use types::{
    Action, Aggregated, AttackEvent, Block, EventKind, Gauge, Interval, Police, PoliceScope,
    ProtectChange, Protection, Recorded, Skips, SourceRate, Unblock, Vector, VectorView, Verdict,
    VictimView, NV, VECTOR_NAMES,
};

use crate::error::ConfigError;
use crate::features::{linear_count, UDP_OTHER};
use crate::numbers::{fixed, quantile, si};
use crate::prefix::parse_whitelist;
use crate::{FeatureRecord, Prefix, VictimRecord};

const SYN: usize = 0;
const ACK: usize = 1;
const UDP: usize = 9;
const ICMP: usize = 10;
const FRAG: usize = 11;
const SCAN: usize = 12;

/// Sources listed in an event.
const TOP_SOURCES: usize = 10;
/// Sources remembered per attack (for the count and the top list).
const ATTACK_SOURCES_MAX: usize = 65536;
/// Port-scan candidates remembered.
const SCAN_MAX: usize = 65536;
/// Sources needed in an interval for a per-source level sample.
const LEVEL_MIN_SOURCES: usize = 10;
/// Packets of the attack's vector a source too slow to attribute alone
/// must send in one interval to count towards blocking its /24: a spoofed
/// flood's addresses send about one each.
const TAIL_MIN_PACKETS: u64 = 2;

/// What detection learned, saved across daemon restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Learned {
    /// [`DetectionConfig::fingerprint`] of the configuration and interface
    /// that learned it.
    pub fingerprint: String,
    /// Per-victim baselines and levels.
    pub victims: Vec<LearnedVictim>,
    /// Prefixes blocked by detection, with their victim.
    pub blocked: Vec<LearnedBlock>,
    /// Sources policed by detection.
    pub policed: Vec<LearnedPolice>,
    /// Victims with protection on.
    pub protected: Vec<ProtectChange>,
}

/// One victim's baselines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnedVictim {
    /// The victim.
    pub victim: Prefix,
    /// Baseline per vector name (pps), only the learned ones.
    pub baselines: BTreeMap<String, f64>,
    /// Per-source level (pps).
    pub source_level_pps: f64,
}

/// One blocked prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnedBlock {
    /// The prefix.
    pub prefix: Prefix,
    /// Its victim.
    pub victim: Prefix,
    /// Its vector.
    pub vector: Vector,
    /// Seconds its rate has been below the level.
    pub quiet_s: f64,
}

/// One policed source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnedPolice {
    /// The source.
    pub prefix: Prefix,
    /// Its victim.
    pub victim: Prefix,
    /// Its rate (pps).
    pub rate_pps: f64,
    /// Which of its packets the rate applies to (every packet in a state
    /// file written before scopes).
    #[serde(default)]
    pub scope: PoliceScope,
}

/// What [`Detection::restore`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Restore {
    /// Baselines, blocks, policed sources and protection restored.
    Restored {
        /// Victims with baselines.
        victims: usize,
        /// Blocked prefixes.
        blocked: usize,
    },
    /// Baselines discarded (learned under another configuration or
    /// interface); blocks, policed sources and protection (which the data
    /// path keeps) restored.
    Fresh {
        /// One line for the log.
        reason: String,
    },
}

#[derive(Debug, Clone)]
struct Attack {
    start_index: u64,
    start_s: f64,
    carpet: bool,
    ever: [bool; NV],
    peak_v: [f64; NV],
    blocks_v: [u64; NV],
    quiet_s: f64,
    pps: f64,
    bps: f64,
    peak_pps: f64,
    peak_bps: f64,
    sources: HashMap<IpAddr, f64>,
    sources_total: u64,
    distinct_peak: f64,
    policed: u64,
    aggregated: Vec<Aggregated>,
    dirty: bool,
}

impl Attack {
    fn main_vector(&self) -> usize {
        let by_blocks = (0..NV).max_by_key(|&v| self.blocks_v[v]).unwrap_or(0);
        if self.blocks_v[by_blocks] > 0 {
            return by_blocks;
        }
        (0..NV)
            .filter(|&v| self.ever[v])
            .max_by(|&a, &b| self.peak_v[a].total_cmp(&self.peak_v[b]))
            .unwrap_or(0)
    }

    fn blocked(&self) -> u64 {
        self.blocks_v.iter().sum()
    }
}

#[derive(Debug, Clone, Default)]
struct VictimState {
    baseline: [f64; NV],
    level: f64,
    prev_syn: f64,
    prev_comp: f64,
    prev_secs: f64,
    prev_seen: f64,
    last_seen: f64,
    attack: Option<Attack>,
    protection: Protection,
    protect_quiet_s: f64,
    /// An IPv6 /64 whose traffic is spread over many addresses (carpet).
    spread: bool,
    /// Its protection is its /24's (a carpet), not its own.
    inherited: bool,
    /// Last interval's rates, thresholds and anomalies (for the views).
    current: [f64; NV],
    threshold: [f64; NV],
    anomalous: [bool; NV],
}

#[cfg(test)]
mod memory_tests {
    use super::Memory;
    use std::net::IpAddr;

    #[test]
    fn an_address_seen_in_every_generation_is_never_forgotten() {
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let mut m = Memory::default();
        m.insert(a, 10);
        m.insert(b, 10);
        for _ in 0..5 {
            m.rotate();
            m.insert(a, 10);
        }
        assert!(m.contains(&a));
        assert!(!m.contains(&b));
        // The bound: no new address beyond it.
        let mut m = Memory::default();
        m.insert(a, 1);
        m.insert(b, 1);
        assert!(m.contains(&a) && !m.contains(&b));
    }
}

#[derive(Debug, Clone)]
struct Blocked {
    victim: Prefix,
    vector: Vector,
    quiet_s: f64,
    /// Share of its traffic per vector when it was blocked: what it sends
    /// once dropped is counted to its victim's vectors in these shares (a
    /// source blocked for its SYNs that also floods UDP still counts as a
    /// UDP flood on its victim).
    mix: [f32; NV],
}

/// All of a source's traffic to one vector (a block restored from a state file).
fn one_hot(v: Vector) -> [f32; NV] {
    let mut m = [0.0; NV];
    m[v.index()] = 1.0;
    m
}

/// Shares of `s`'s packets per vector, for a source blocked for `v`.
/// Fragments are judged as `fragment_flood` only when that is the vector
/// (they are also UDP or TCP); what is none of SYN, UDP, ICMP goes to `v`.
fn mix_of(s: &Src, v: Vector) -> [f32; NV] {
    if v == Vector::FragmentFlood || s.packets == 0 {
        return one_hot(v);
    }
    let total = s.packets as f32;
    let mut m = [0.0f32; NV];
    let amp = s.udp_amp.min(s.udp);
    m[SYN] += s.syn.min(s.packets) as f32;
    if matches!(v, Vector::UdpAmplification(_)) {
        m[v.index()] += amp as f32;
    } else {
        m[UDP] += amp as f32;
    }
    m[UDP] += (s.udp - amp) as f32;
    m[ICMP] += s.icmp as f32;
    let known: f32 = m.iter().sum();
    m[v.index()] += (total - known).max(0.0);
    let sum: f32 = m.iter().sum();
    m.iter_mut().for_each(|x| *x /= sum.max(1.0));
    m
}

#[derive(Debug, Clone)]
struct Policed {
    victim: Prefix,
    rate_pps: f64,
    scope: PoliceScope,
    /// Kept at least until this clock (s) even with no attack on its
    /// victim: a restored source keeps its limit until detection has had
    /// `attack_end_s` to see whether the attack goes on.
    keep_until_s: f64,
}

#[derive(Debug, Clone, Copy)]
struct ScanAcc {
    sketch: [u64; 2],
    /// SYNs and completions summed over the intervals (fractions when
    /// intervals are windows that overlap: see `scans_observe`).
    syn: f64,
    comp: f64,
    first_s: f64,
}

/// Sources remembered for a while, in two generations.
#[derive(Debug, Clone, Default)]
struct Memory {
    cur: HashSet<IpAddr>,
    old: HashSet<IpAddr>,
}

impl Memory {
    fn contains(&self, a: &IpAddr) -> bool {
        self.cur.contains(a) || self.old.contains(a)
    }
    /// Remember `a` for this generation and the next (an address seen
    /// again moves to the current generation).
    fn insert(&mut self, a: IpAddr, max: usize) {
        if self.cur.len() < max {
            self.cur.insert(a);
        }
    }
    fn rotate(&mut self) {
        self.old = std::mem::take(&mut self.cur);
    }
    fn iter(&self) -> impl Iterator<Item = &IpAddr> {
        self.cur.iter().chain(self.old.iter())
    }
}

/// One source's traffic to one victim in the interval.
#[derive(Debug, Clone, Copy)]
struct Src {
    src: IpAddr,
    packets: u64,
    bytes: u64,
    syn: u64,
    comp: u64,
    udp: u64,
    udp_amp: u64,
    icmp: u64,
    frags: u64,
    sketch: [u64; 2],
}

impl Src {
    fn new(src: IpAddr) -> Self {
        Src {
            src,
            packets: 0,
            bytes: 0,
            syn: 0,
            comp: 0,
            udp: 0,
            udp_amp: 0,
            icmp: 0,
            frags: 0,
            sketch: [0; 2],
        }
    }
    fn add(&mut self, r: &FeatureRecord, comp: u64) {
        self.packets += r.packets;
        self.bytes += r.bytes;
        self.syn += u64::from(r.syn);
        self.comp += comp;
        self.udp += u64::from(r.udp);
        self.udp_amp += u64::from(r.udp_amp);
        self.icmp += u64::from(r.icmp);
        self.frags += u64::from(r.frags);
        self.sketch[0] |= r.dport_sketch[0];
        self.sketch[1] |= r.dport_sketch[1];
    }
    fn merge(&mut self, o: &Src) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.syn += o.syn;
        self.comp += o.comp;
        self.udp += o.udp;
        self.udp_amp += o.udp_amp;
        self.icmp += o.icmp;
        self.frags += o.frags;
        self.sketch[0] |= o.sketch[0];
        self.sketch[1] |= o.sketch[1];
    }
    fn incomplete(&self) -> u64 {
        self.syn.saturating_sub(self.comp)
    }
}

/// One victim's measures in the interval.
#[derive(Debug, Clone, Default)]
struct Meas {
    /// Passed traffic per vector (pps).
    passed: [f64; NV],
    /// Dropped traffic of its blocked/policed sources per vector (pps).
    dropped: [f64; NV],
    pps: f64,
    bps: f64,
    syn: f64,
    comp: f64,
    syn_distinct: f64,
    src_distinct: f64,
    /// Members with traffic per vector and the largest member's passed
    /// rate (for a /24 aggregate).
    members_v: [u32; NV],
    max_member_v: [f64; NV],
    members: u32,
}

/// A candidate decision for one source.
#[derive(Debug, Clone)]
struct Cand {
    src: IpAddr,
    vector: Vector,
    pps: f64,
    bps: f64,
    /// Its packets/s of what policing would limit ([`PoliceScope::of`] its vector).
    scope_pps: f64,
    police: bool,
    /// Too slow to block alone: blocked only with its /24 (/64).
    tail: bool,
    /// Its traffic's shares per vector.
    mix: [f32; NV],
    reason: String,
}

/// Detection. See the module documentation.
#[derive(Debug)]
pub struct Detection {
    cfg: DetectionConfig,
    fingerprint: String,
    whitelist: Vec<Prefix>,
    clock: f64,
    victims: HashMap<Prefix, VictimState>,
    blocked: HashMap<Prefix, Blocked>,
    policed: HashMap<Prefix, Policed>,
    good: Memory,
    seen: Memory,
    gen_start: f64,
    /// The data path counts completed handshakes (some record had one).
    kernel_completions: bool,
    scans: HashMap<(IpAddr, Prefix), ScanAcc>,
}

fn host_len(a: &IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

fn agg_of(a: IpAddr) -> Prefix {
    Prefix::truncate(a, if a.is_ipv4() { 24 } else { 64 })
}

fn carpet_key(victim: &Prefix) -> Option<Prefix> {
    (victim.family() == 4 && victim.len() == 32).then(|| Prefix::truncate(victim.net().addr(), 24))
}

impl Detection {
    /// Detection with configuration `cfg` on interface `iface` (part of
    /// the fingerprint of what it learns).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first bad key.
    pub fn new(cfg: &DetectionConfig, iface: &str) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            whitelist: parse_whitelist(&cfg.whitelist)?,
            fingerprint: cfg.fingerprint(iface),
            cfg: cfg.clone(),
            clock: 0.0,
            victims: HashMap::default(),
            blocked: HashMap::default(),
            policed: HashMap::default(),
            good: Memory::default(),
            seen: Memory::default(),
            gen_start: 0.0,
            kernel_completions: false,
            scans: HashMap::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DetectionConfig {
        &self.cfg
    }

    /// The fingerprint [`Learned`] carries.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Is any address of `p` whitelisted?
    pub fn is_whitelisted(&self, p: &Prefix) -> bool {
        let n = p.net();
        self.whitelist
            .iter()
            .any(|w| w.net().contains(&n.network()) || n.contains(&w.net().network()))
    }

    /// Add a prefix to the whitelist; false if it was there.
    pub fn add_whitelist(&mut self, p: Prefix) -> bool {
        if self.whitelist.contains(&p) {
            return false;
        }
        self.whitelist.push(p);
        true
    }

    /// Remove a prefix from the whitelist; false if it was not there.
    pub fn remove_whitelist(&mut self, p: &Prefix) -> bool {
        let n = self.whitelist.len();
        self.whitelist.retain(|w| w != p);
        n != self.whitelist.len()
    }

    /// Forget a prefix the operator unblocked (no unban decision for it
    /// will follow).
    pub fn forget_block(&mut self, p: &Prefix) -> bool {
        self.blocked.remove(p).is_some()
    }

    /// Prefixes blocked by detection, with their victim and vector.
    pub fn blocked(&self) -> Vec<(Prefix, Prefix, Vector)> {
        let mut v: Vec<_> = self
            .blocked
            .iter()
            .map(|(p, b)| (*p, b.victim, b.vector))
            .collect();
        v.sort();
        v
    }

    /// Is an attack in progress on any victim?
    pub fn under_attack(&self) -> bool {
        self.victims.values().any(|s| s.attack.is_some())
    }

    fn threshold(&self, st: &VictimState, v: usize) -> f64 {
        let f = &self.cfg.floors;
        let floor = match v {
            SYN => f.syn_flood,
            ACK => f.ack_flood,
            2..=8 => f.udp_amplification,
            UDP => f.udp_flood,
            ICMP => f.icmp_flood,
            FRAG => f.fragment_flood,
            _ => self.cfg.source_min_pps,
        };
        floor.max(self.cfg.multiplier * st.baseline[v])
    }

    fn floor(&self, v: usize) -> f64 {
        self.threshold(&VictimState::default(), v)
    }

    /// Judge one interval. See the module documentation for the rules.
    pub fn observe(&mut self, iv: &Interval<'_>) -> Verdict {
        // The clock advances by the interval; rates divide by the span its
        // records cover (longer for a sliding window: flow input's).
        let secs = iv.secs_or_one();
        let span = iv.span_s();
        self.clock += secs;
        let now = self.clock;
        if now - self.gen_start >= self.cfg.known_good_s / 2.0 {
            self.good.rotate();
            self.seen.rotate();
            self.gen_start = now;
        }
        let mut out = Verdict::default();

        // Pairs summed per (victim, source); whitelisted sources out.
        let mut srcs: Vec<(Prefix, Src)> = Vec::new();
        let mut at: HashMap<(Prefix, IpAddr), usize> = HashMap::default();
        let mut from_pairs: HashMap<Prefix, VictimRecord> = HashMap::default();
        let mut comp: HashMap<Prefix, u64> = HashMap::default();
        let white = !self.whitelist.is_empty();
        // Completed handshakes: the kernel's count once the data path is
        // seen to provide it; before that (a data path without it), the
        // SYNs matched by the pair's other non-RST segments, an estimate
        // that a flood mixing SYNs and ACKs from one source can fool.
        if !self.kernel_completions && iv.pairs.iter().any(|r| r.completions > 0) {
            self.kernel_completions = true;
        }
        let kernel = self.kernel_completions;
        let mut dsts6: HashMap<Prefix, HashMap<IpAddr, u64>> = HashMap::default();
        for r in iv.pairs {
            let key = VictimRecord::key_of(r.dst);
            if r.dst.is_ipv6() {
                *dsts6.entry(key).or_default().entry(r.dst).or_default() += r.packets;
            }
            let rc = if kernel {
                u64::from(r.completions)
            } else {
                let rest = r.tcp.saturating_sub(r.syn.saturating_add(r.rst));
                u64::from(r.syn.min(rest))
            };
            *comp.entry(key).or_default() += rc;
            let vr = from_pairs
                .entry(key)
                .or_insert_with(|| VictimRecord::new(key));
            vr.packets += r.packets;
            vr.bytes += r.bytes;
            vr.tcp += u64::from(r.tcp);
            vr.udp += u64::from(r.udp);
            vr.icmp += u64::from(r.icmp);
            vr.frags += u64::from(r.frags);
            vr.syn += u64::from(r.syn);
            vr.rst += u64::from(r.rst);
            vr.udp_vec_pkts[UDP_OTHER] += u64::from(r.udp.saturating_sub(r.udp_amp));
            vr.src_distinct += 1.0;
            vr.syn_src_distinct += f64::from(u8::from(r.syn > 0));
            if rc > 0 {
                self.good.insert(r.src, self.cfg.known_good_max);
            }
            if white && self.whitelist.iter().any(|w| w.contains(&r.src)) {
                continue;
            }
            let i = *at.entry((key, r.src)).or_insert_with(|| {
                srcs.push((key, Src::new(r.src)));
                srcs.len() - 1
            });
            srcs[i].1.add(r, rc);
        }
        let mut by_victim: HashMap<Prefix, Vec<usize>> = HashMap::default();
        for (i, (k, _)) in srcs.iter().enumerate() {
            by_victim.entry(*k).or_default().push(i);
        }

        // Victim measures.
        let mut meas: HashMap<Prefix, Meas> = HashMap::default();
        let mut recs: HashMap<Prefix, VictimRecord> = HashMap::default();
        for r in iv.victims {
            let e = recs
                .entry(r.victim)
                .or_insert_with(|| VictimRecord::new(r.victim));
            add_victim(e, r);
        }
        let pair_only: Vec<VictimRecord> = from_pairs
            .into_iter()
            .filter(|(k, _)| !recs.contains_key(k))
            .map(|(_, v)| v)
            .collect();
        for r in recs.into_values().chain(pair_only) {
            let key = r.victim;
            let c = comp.get(&key).copied().unwrap_or(0) as f64;
            let st = self.victims.entry(key).or_default();
            let m = victim_meas(&r, c, span, st, now - span);
            st.last_seen = now;
            meas.insert(key, m);
        }
        // An IPv6 /64 is one victim; its traffic spread over many of its
        // addresses is a carpet (for the name).
        for (k, d) in dsts6 {
            let total: u64 = d.values().sum();
            let max = d.values().copied().max().unwrap_or(0);
            if let Some(st) = self.victims.get_mut(&k) {
                st.spread = d.len() >= self.cfg.carpet_min_victims as usize && max * 2 < total;
            }
        }
        // Dropped traffic of blocked and policed sources, to their victim
        // (unless the records hold it already).
        for r in iv.blocked.iter().filter(|_| !iv.blocked_in_records) {
            if let Some(b) = self.blocked.get(&r.prefix) {
                if r.pps.is_finite() && r.pps > 0.0 {
                    let d = &mut meas.entry(b.victim).or_default().dropped;
                    for (x, m) in d.iter_mut().zip(b.mix) {
                        *x += r.pps * f64::from(m);
                    }
                }
            }
        }
        for r in iv.policed {
            if let Some(p) = self.policed.get(&r.prefix) {
                if r.pps.is_finite() && r.pps > 0.0 {
                    meas.entry(p.victim).or_default().pps += r.pps;
                }
            }
        }

        // Carpet: IPv4 victims of one /24 summed.
        let mut aggs: HashMap<Prefix, Meas> = HashMap::default();
        for (k, m) in &meas {
            let Some(a) = carpet_key(k) else { continue };
            let e = aggs.entry(a).or_default();
            e.members += 1;
            for v in 0..NV {
                e.passed[v] += m.passed[v];
                if m.passed[v] > 0.0 {
                    e.members_v[v] += 1;
                }
                e.max_member_v[v] = e.max_member_v[v].max(m.passed[v]);
            }
            e.pps += m.pps;
            e.bps += m.bps;
            e.syn += m.syn;
            e.comp += m.comp;
            e.syn_distinct += m.syn_distinct;
            e.src_distinct += m.src_distinct;
        }
        aggs.retain(|a, e| {
            e.members >= self.cfg.carpet_min_victims
                || self.victims.get(a).is_some_and(|s| s.attack.is_some())
        });
        for (a, e) in &mut aggs {
            if let Some(m) = meas.get(a) {
                // Dropped traffic of sources blocked for the /24.
                e.dropped = m.dropped;
                e.pps += m.pps;
            }
        }
        for (a, e) in aggs {
            self.victims.entry(a).or_default().last_seen = now;
            meas.insert(a, e);
        }
        // Victims under attack or protected are judged even without
        // traffic (so that their attack can end and protection go off).
        for (k, s) in &self.victims {
            if s.attack.is_some() || !s.protection.is_off() {
                meas.entry(*k).or_default();
            }
        }

        // Judge.
        let mut anomalies: Vec<(Prefix, [bool; NV])> = Vec::new();
        let mut carpet_v: HashMap<Prefix, [bool; NV]> = HashMap::default();
        let mut keys: Vec<Prefix> = meas.keys().copied().collect();
        // Aggregates (shorter) first, so that their members know.
        keys.sort_by_key(|k| (k.len(), *k));
        for key in &keys {
            let m = &meas[key];
            self.victims.entry(*key).or_default();
            let st = &self.victims[key];
            let thr: [f64; NV] = std::array::from_fn(|v| self.threshold(st, v));
            let ever: [bool; NV] =
                std::array::from_fn(|v| st.attack.as_ref().is_some_and(|at| at.ever[v]));
            let is_agg = key.family() == 4 && key.len() == 24;
            let mut an = [false; NV];
            for v in 0..SCAN {
                let x = m.passed[v] + m.dropped[v];
                let mut a = x > thr[v];
                if a && is_agg {
                    let ongoing = ever[v];
                    a = ongoing
                        || (m.members_v[v] >= self.cfg.carpet_min_victims
                            && m.max_member_v[v] < 0.5 * m.passed[v]);
                }
                if a && !is_agg {
                    if let Some(c) = carpet_key(key).and_then(|a| carpet_v.get(&a)) {
                        a = !c[v];
                    }
                }
                an[v] = a;
            }
            an[SCAN] = m.dropped[SCAN] >= self.cfg.source_min_pps;
            if is_agg {
                carpet_v.insert(*key, an);
            }
            let s = self.victims.get_mut(key).expect("inserted above");
            for v in 0..NV {
                s.current[v] = m.passed[v] + m.dropped[v];
                s.threshold[v] = thr[v];
                s.anomalous[v] = an[v];
            }
            anomalies.push((*key, an));
        }

        // Attribution.
        let mut cands: HashMap<Prefix, Vec<Cand>> = HashMap::default();
        let mut want: HashMap<Prefix, Protection> = HashMap::default();
        for (key, an) in &anomalies {
            if !an[..SCAN].iter().any(|&a| a) {
                continue;
            }
            let m = &meas[key];
            let is_agg = key.len() == 24 && key.family() == 4;
            let list: Vec<Src> = if is_agg {
                let mut merged: HashMap<IpAddr, Src> = HashMap::default();
                for (vk, idx) in &by_victim {
                    if carpet_key(vk) == Some(*key) {
                        for &i in idx {
                            let s = &srcs[i].1;
                            merged
                                .entry(s.src)
                                .or_insert_with(|| Src::new(s.src))
                                .merge(s);
                        }
                    }
                }
                merged.into_values().collect()
            } else {
                by_victim
                    .get(key)
                    .map(|idx| idx.iter().map(|&i| srcs[i].1).collect())
                    .unwrap_or_default()
            };
            let level = self.level(key);
            let c = self.attribute(key, an, m, &list, span, level);
            if an[SYN] {
                // Spoofed (one SYN per source), or spread over sources too
                // slow to attribute: what the blocks leave is still a
                // flood. Either way SYN cookies answer it without state.
                let spoofed = m.syn_distinct >= self.cfg.spoof_min_distinct
                    && m.syn_distinct >= self.cfg.spoof_min_ratio * m.syn;
                // Attributed: the new candidates, and the sources already
                // blocked whose SYNs of this interval passed before their
                // block took effect (not a flood the blocks leave).
                let already: f64 = list
                    .iter()
                    .filter(|s| {
                        self.blocked.contains_key(&Prefix::host(s.src))
                            || self.blocked.contains_key(&agg_of(s.src))
                    })
                    .map(|s| s.incomplete() as f64 / span)
                    .sum();
                let attributed: f64 = already
                    + c.iter()
                        .filter(|x| {
                            !x.police && matches!(x.vector, Vector::SynFlood | Vector::PortScan)
                        })
                        .map(|x| x.pps)
                        .sum::<f64>();
                let thr = self.threshold(&self.victims[key], SYN);
                let now_rate = (m.syn - m.comp).max(0.0) / span;
                if spoofed || now_rate - attributed > thr {
                    let w = want.entry(*key).or_default();
                    w.syn_cookies = true;
                    w.ack_guard = true;
                }
            }
            if an[ACK] {
                want.entry(*key).or_default().ack_guard = true;
            }
            cands.insert(*key, c);
        }

        // Port scans (whatever the victim's state).
        self.scans_observe(&srcs, now, secs, span, &mut cands);

        // Decide: blocks (with prefix aggregation) and police.
        let mut blocks: Vec<Block> = Vec::new();
        let mut police: Vec<Police> = Vec::new();
        let mut new_aggs: Vec<(Prefix, Aggregated)> = Vec::new();
        let mut mixes: HashMap<Prefix, [f32; NV]> = HashMap::default();
        let mut ckeys: Vec<Prefix> = cands.keys().copied().collect();
        ckeys.sort();
        for key in ckeys {
            let list = cands.remove(&key).unwrap_or_default();
            self.decide(
                key,
                list,
                &mut blocks,
                &mut police,
                &mut new_aggs,
                &mut mixes,
            );
        }
        blocks.sort_by(|a, b| b.pps.total_cmp(&a.pps).then(a.prefix.cmp(&b.prefix)));
        blocks.truncate(self.cfg.max_blocks_per_interval);
        for b in &blocks {
            let vector = Vector::from_name(b.vector.trim_start_matches("carpet/"))
                .unwrap_or(Vector::SynFlood);
            self.blocked.insert(
                b.prefix,
                Blocked {
                    victim: b.victim,
                    vector,
                    quiet_s: 0.0,
                    mix: mixes
                        .get(&b.prefix)
                        .copied()
                        .unwrap_or_else(|| one_hot(vector)),
                },
            );
            if let Some(at) = self
                .victims
                .get_mut(&b.victim)
                .and_then(|s| s.attack.as_mut())
            {
                at.blocks_v[vector.index()] += 1;
                at.dirty = true;
            }
        }
        for p in &police {
            self.policed.insert(
                p.prefix,
                Policed {
                    victim: p.victim,
                    rate_pps: p.rate_pps,
                    scope: p.scope,
                    keep_until_s: 0.0,
                },
            );
        }

        // Attack lifecycle and protection.
        self.lifecycle(
            iv, &anomalies, &meas, &blocks, &police, &new_aggs, &want, &mut out,
        );

        // Learning, for victims normal in this interval. Windows judged
        // every `secs` overlap: each sample gets the weight that keeps a
        // baseline's pace per second that of one sample per window.
        let alpha = if span > secs {
            1.0 - (1.0 - self.cfg.baseline_alpha).powf(secs / span)
        } else {
            self.cfg.baseline_alpha
        };
        for (key, an) in &anomalies {
            let Some(m) = meas.get(key) else { continue };
            let agg_attack = carpet_key(key)
                .and_then(|a| self.victims.get(&a))
                .is_some_and(|s| s.attack.is_some());
            let st = self.victims.get_mut(key).expect("judged");
            let normal = !an.iter().any(|&a| a)
                && st.attack.is_none()
                && !agg_attack
                && st.protection.is_off()
                && m.dropped.iter().all(|&d| d == 0.0);
            if !normal {
                continue;
            }
            let cfg = &self.cfg;
            let grow = cfg.baseline_growth_per_min * secs / 60.0;
            for v in 0..SCAN {
                let floor = {
                    let f = &cfg.floors;
                    match v {
                        SYN => f.syn_flood,
                        ACK => f.ack_flood,
                        2..=8 => f.udp_amplification,
                        UDP => f.udp_flood,
                        ICMP => f.icmp_flood,
                        _ => f.fragment_flood,
                    }
                };
                st.baseline[v] = bounded_ewma(
                    st.baseline[v],
                    m.passed[v],
                    alpha,
                    grow * st.baseline[v].max(floor / cfg.multiplier),
                );
            }
            if let Some(idx) = by_victim.get(key) {
                for &i in idx {
                    self.seen.insert(srcs[i].1.src, cfg.known_good_max);
                }
                if idx.len() >= LEVEL_MIN_SOURCES {
                    let mut rates: Vec<f64> = idx
                        .iter()
                        .map(|&i| srcs[i].1.packets as f64 / span)
                        .collect();
                    let q = quantile(&mut rates, cfg.source_level_quantile);
                    st.level = if st.level == 0.0 {
                        q
                    } else {
                        bounded_ewma(
                            st.level,
                            q,
                            alpha,
                            grow * st.level.max(cfg.source_level_min_pps),
                        )
                    };
                }
            }
        }

        // Unban: own rate below the victim's level for hold_s, attack over.
        let rates: HashMap<Prefix, f64> = iv.blocked.iter().map(|r| (r.prefix, r.pps)).collect();
        let mut unblocks: Vec<Unblock> = Vec::new();
        let fresh: HashSet<Prefix> = blocks.iter().map(|b| b.prefix).collect();
        let victims_of_blocks: HashSet<Prefix> = self.blocked.values().map(|b| b.victim).collect();
        let levels: HashMap<Prefix, f64> = victims_of_blocks
            .into_iter()
            .map(|v| (v, self.level(&v)))
            .collect();
        let attacked: HashSet<Prefix> = self
            .victims
            .iter()
            .filter(|(_, s)| s.attack.is_some())
            .map(|(k, _)| *k)
            .collect();
        for (p, b) in &mut self.blocked {
            if fresh.contains(p) {
                continue;
            }
            let r = rates.get(p).copied().unwrap_or(0.0);
            let level = levels.get(&b.victim).copied().unwrap_or(0.0);
            if r < level {
                b.quiet_s += secs;
            } else {
                b.quiet_s = 0.0;
            }
            let in_attack = attacked.contains(&b.victim)
                || carpet_key(&b.victim).is_some_and(|a| attacked.contains(&a));
            if b.quiet_s >= self.cfg.hold_s && !in_attack {
                unblocks.push(Unblock {
                    prefix: *p,
                    reason: format!(
                        "{} below {} pps (the per-source level of {}) for {} s, its {} attack over",
                        si(r),
                        si(level),
                        b.victim,
                        fixed(b.quiet_s, 1),
                        b.vector.name()
                    ),
                });
            }
        }
        unblocks.sort_by_key(|u| u.prefix);
        for u in &unblocks {
            self.blocked.remove(&u.prefix);
        }

        // Forget idle victims and old scan candidates.
        let forget = self.cfg.victim_forget_s;
        self.victims.retain(|_, s| {
            s.attack.is_some() || !s.protection.is_off() || now - s.last_seen < forget
        });

        out.blocks = blocks;
        out.police = police;
        out.unblocks = unblocks;
        out
    }

    /// The per-source level of a victim (pps): its learned level, at least
    /// `source_level_min_pps`; for a /24 aggregate, the highest of its
    /// members'.
    fn level(&self, key: &Prefix) -> f64 {
        let own = self.victims.get(key).map_or(0.0, |s| s.level);
        let members = if key.family() == 4 && key.len() == 24 {
            self.victims
                .iter()
                .filter(|(k, _)| k.len() == 32 && key.contains(&k.net().addr()))
                .map(|(_, s)| s.level)
                .fold(0.0, f64::max)
        } else {
            0.0
        };
        own.max(members).max(self.cfg.source_level_min_pps)
    }

    /// [`Detection::level`] of every victim at once: one pass over the
    /// victims for the /24 aggregates' members (per victim it would cost
    /// victims², and an attack spread over many destinations makes many).
    fn levels(&self) -> HashMap<Prefix, f64> {
        let mut members: HashMap<Prefix, f64> = HashMap::default();
        for (k, s) in &self.victims {
            if k.len() == 32 && k.family() == 4 {
                let e = members.entry(agg_of(k.net().addr())).or_insert(0.0);
                *e = e.max(s.level);
            }
        }
        self.victims
            .iter()
            .map(|(k, s)| {
                let m = members.get(k).copied().unwrap_or(0.0);
                (*k, s.level.max(m).max(self.cfg.source_level_min_pps))
            })
            .collect()
    }

    fn attribute(
        &self,
        key: &Prefix,
        an: &[bool; NV],
        m: &Meas,
        list: &[Src],
        span: f64,
        level: f64,
    ) -> Vec<Cand> {
        let cfg = &self.cfg;
        let min = cfg.source_min_pps;
        // The amplification class named for this victim: its heaviest
        // anomalous one.
        let amp = (2..=8)
            .filter(|&v| an[v])
            .max_by(|&a, &b| (m.passed[a] + m.dropped[a]).total_cmp(&(m.passed[b] + m.dropped[b])));
        let mut out = Vec::new();
        for s in list {
            if self.blocked.contains_key(&Prefix::host(s.src))
                || self.blocked.contains_key(&agg_of(s.src))
            {
                continue;
            }
            let total = s.packets as f64 / span;
            let bps = s.bytes as f64 * 8.0 / span;
            let good = self.good.contains(&s.src);
            let cand = |vector: Vector, pps: f64, police: bool, reason: String| Cand {
                src: s.src,
                vector,
                pps,
                bps,
                tail: false,
                mix: mix_of(s, vector),
                scope_pps: match PoliceScope::of(vector) {
                    PoliceScope::Syn => s.syn as f64 / span,
                    PoliceScope::Udp => s.udp as f64 / span,
                    PoliceScope::All => total,
                },
                police,
                reason,
            };
            let vname = |v: usize| VECTOR_NAMES[v];
            let thr = |v: usize| si(self.threshold(&self.victims[key], v));
            let vic = |v: usize| si(m.passed[v] + m.dropped[v]);
            let inc = s.incomplete() as f64 / span;
            if an[SYN] && inc >= min {
                let ports = linear_count(&s.sketch);
                let completes = s.comp * 5 >= s.syn;
                if ports >= cfg.scan_min_ports {
                    out.push(cand(
                        Vector::PortScan,
                        inc,
                        false,
                        format!(
                            "port_scan of {key}: {} incomplete handshakes/s over ~{} ports (>= {}), victim at {} incomplete/s (threshold {})",
                            si(inc), fixed(ports, 0), fixed(cfg.scan_min_ports, 0), vic(SYN), thr(SYN)
                        ),
                    ));
                } else if completes || good {
                    out.push(cand(
                        Vector::SynFlood,
                        inc,
                        true,
                        format!(
                            "{} incomplete handshakes/s to {key} under a SYN flood ({} incomplete/s, threshold {}), but it {} handshakes: policed, not blocked",
                            si(inc), vic(SYN), thr(SYN),
                            if completes { "also completes" } else { "is known to complete" }
                        ),
                    ));
                } else {
                    out.push(cand(
                        Vector::SynFlood,
                        inc,
                        false,
                        format!(
                            "syn_flood to {key}: {} incomplete handshakes/s ({} SYN, {} completed) on ~{} port(s); victim at {} incomplete/s (threshold {})",
                            si(inc), s.syn, s.comp, fixed(ports.max(1.0), 0), vic(SYN), thr(SYN)
                        ),
                    ));
                }
                continue;
            }
            let amp_rate = s.udp_amp as f64 / span;
            if let Some(v) = amp.filter(|_| amp_rate >= min) {
                out.push(cand(
                    Vector::ALL[v],
                    amp_rate,
                    false,
                    format!(
                        "{}: {} pps from amplification source ports to {key}; victim at {} pps of it (threshold {})",
                        vname(v), si(amp_rate), vic(v), thr(v)
                    ),
                ));
                continue;
            }
            let udp = s.udp.saturating_sub(s.udp_amp) as f64 / span;
            if an[UDP] && udp >= min {
                out.push(cand(
                    Vector::UdpFlood,
                    udp,
                    good,
                    if good {
                        format!(
                            "{} UDP pps to {key} under a UDP flood ({} pps, threshold {}), but known to complete handshakes: policed, not blocked",
                            si(udp), vic(UDP), thr(UDP)
                        )
                    } else {
                        format!(
                            "udp_flood to {key}: {} UDP pps; victim at {} pps (threshold {})",
                            si(udp), vic(UDP), thr(UDP)
                        )
                    },
                ));
                continue;
            }
            let icmp = s.icmp as f64 / span;
            if an[ICMP] && icmp >= min {
                out.push(cand(
                    Vector::IcmpFlood,
                    icmp,
                    false,
                    format!(
                        "icmp_flood to {key}: {} ICMP pps; victim at {} pps (threshold {})",
                        si(icmp),
                        vic(ICMP),
                        thr(ICMP)
                    ),
                ));
                continue;
            }
            let frags = s.frags as f64 / span;
            if an[FRAG] && frags >= min {
                out.push(cand(
                    Vector::FragmentFlood,
                    frags,
                    false,
                    format!(
                        "fragment_flood to {key}: {} fragments/s; victim at {} /s (threshold {})",
                        si(frags),
                        vic(FRAG),
                        thr(FRAG)
                    ),
                ));
                continue;
            }
            // Too slow to attribute alone: counted towards blocking its /24
            // when many addresses of it take part (a botnet's long tail).
            // Not for SYN floods (cookies answer what blocks leave) nor
            // for sources known to be legitimate.
            if good {
                continue;
            }
            let tail = [
                (amp.map(|v| Vector::ALL[v]), s.udp_amp),
                (
                    an[UDP].then_some(Vector::UdpFlood),
                    s.udp.saturating_sub(s.udp_amp),
                ),
                (an[ICMP].then_some(Vector::IcmpFlood), s.icmp),
                (an[FRAG].then_some(Vector::FragmentFlood), s.frags),
            ]
            .into_iter()
            .find_map(|(v, n)| v.filter(|_| n >= TAIL_MIN_PACKETS).map(|v| (v, n)));
            if let Some((vector, n)) = tail {
                let mut c = cand(vector, n as f64 / span, false, String::new());
                c.tail = true;
                out.push(c);
            }
        }
        // Police only sources whose policed kind of traffic is above the
        // rate it would be limited to (a heavy client's few new
        // connections under a SYN flood are not worth a policer).
        out.retain(|c| !c.police || c.scope_pps > level.max(cfg.police_min_pps));
        out
    }

    fn scans_observe(
        &mut self,
        srcs: &[(Prefix, Src)],
        now: f64,
        secs: f64,
        span: f64,
        cands: &mut HashMap<Prefix, Vec<Cand>>,
    ) {
        let cfg = &self.cfg;
        let window = cfg.scan_window_s;
        // Records of a window judged every `secs` are seen span / secs
        // times: each time counts for its share, so a source's sums over
        // the scan window are its packets, once.
        let w = if span > secs { secs / span } else { 1.0 };
        self.scans.retain(|_, a| now - a.first_s < window);
        for (key, s) in srcs {
            if s.syn == 0 {
                continue;
            }
            let k = (s.src, *key);
            let tracked = self.scans.contains_key(&k);
            if !tracked && (linear_count(&s.sketch) < 4.0 || self.scans.len() >= SCAN_MAX) {
                continue;
            }
            let a = self.scans.entry(k).or_insert(ScanAcc {
                sketch: [0; 2],
                syn: 0.0,
                comp: 0.0,
                first_s: now,
            });
            a.sketch[0] |= s.sketch[0];
            a.sketch[1] |= s.sketch[1];
            a.syn += s.syn as f64 * w;
            a.comp += s.comp as f64 * w;
            let ports = linear_count(&a.sketch);
            let inc = (a.syn - a.comp).max(0.0);
            if ports >= cfg.scan_min_ports && inc * 2.0 >= a.syn && inc >= cfg.scan_min_ports / 2.0
            {
                let list = cands.entry(*key).or_default();
                if list.iter().any(|c| c.src == s.src) {
                    continue;
                }
                // From the start of the records it was first seen in.
                let seen_s = now - a.first_s + span;
                list.push(Cand {
                    src: s.src,
                    vector: Vector::PortScan,
                    pps: s.syn as f64 / seen_s.max(1.0),
                    bps: 0.0,
                    scope_pps: 0.0,
                    tail: false,
                    mix: mix_of(s, Vector::PortScan),
                    police: false,
                    reason: format!(
                        "port_scan of {key}: ~{} ports in {} s, {inc:.0} of {:.0} handshakes incomplete (>= {} ports)",
                        fixed(ports, 0),
                        fixed(seen_s, 1),
                        a.syn,
                        fixed(cfg.scan_min_ports, 0)
                    ),
                });
            }
        }
    }

    fn decide(
        &mut self,
        key: Prefix,
        list: Vec<Cand>,
        blocks: &mut Vec<Block>,
        police: &mut Vec<Police>,
        new_aggs: &mut Vec<(Prefix, Aggregated)>,
        mixes: &mut HashMap<Prefix, [f32; NV]>,
    ) {
        let is_agg = key.family() == 4 && key.len() == 24;
        let spread = self
            .victims
            .get(&key)
            .is_some_and(|s| s.spread || s.attack.as_ref().is_some_and(|a| a.carpet));
        let carpet = |v: Vector| {
            if is_agg || spread {
                format!("carpet/{}", v.name())
            } else {
                v.name().to_string()
            }
        };
        let mut to_block: Vec<Cand> = Vec::new();
        for c in list {
            if c.police {
                let p = Prefix::host(c.src);
                if self.policed.contains_key(&p) || self.is_whitelisted(&p) {
                    continue;
                }
                let rate = self.level(&key).max(self.cfg.police_min_pps);
                let scope = PoliceScope::of(c.vector);
                police.push(Police {
                    prefix: p,
                    victim: key,
                    vector: carpet(c.vector),
                    scope,
                    rate_pps: rate,
                    reason: format!(
                        "{}; at {} pps{}",
                        c.reason,
                        si(rate),
                        match scope {
                            PoliceScope::Syn => " of its SYNs",
                            PoliceScope::Udp => " of its UDP",
                            PoliceScope::All => "",
                        }
                    ),
                });
            } else {
                to_block.push(c);
            }
        }
        // Prefix aggregation: many attackers of one /24 (/64).
        let mut by_prefix: BTreeMap<Prefix, Vec<usize>> = BTreeMap::new();
        for (i, c) in to_block.iter().enumerate() {
            by_prefix.entry(agg_of(c.src)).or_default().push(i);
        }
        let mut skip: HashSet<usize> = HashSet::default();
        let min_n = self.cfg.aggregate_min_sources as usize;
        let mut already_by: HashMap<Prefix, Vec<IpAddr>> = HashMap::default();
        if by_prefix.values().any(|v| v.len() * 2 >= min_n) || !self.blocked.is_empty() {
            for (p, b) in &self.blocked {
                let a = p.net().addr();
                if b.victim == key && p.len() == host_len(&a) {
                    already_by.entry(agg_of(a)).or_default().push(a);
                }
            }
        }
        let mut known_by: Option<HashMap<Prefix, HashSet<IpAddr>>> = None;
        for (pfx, idx) in &by_prefix {
            if self.blocked.contains_key(pfx) || self.is_whitelisted(pfx) {
                continue;
            }
            let already = already_by.get(pfx).map(Vec::as_slice).unwrap_or_default();
            let n = idx.len() + already.len();
            if n < min_n {
                continue;
            }
            let attackers: HashSet<IpAddr> = idx
                .iter()
                .map(|&i| to_block[i].src)
                .chain(already.iter().copied())
                .collect();
            let known = known_by.get_or_insert_with(|| {
                let mut m: HashMap<Prefix, HashSet<IpAddr>> = HashMap::default();
                for a in self.good.iter().chain(self.seen.iter()) {
                    m.entry(agg_of(*a)).or_default().insert(*a);
                }
                m
            });
            let collateral = known
                .get(pfx)
                .map_or(0, |k| k.iter().filter(|a| !attackers.contains(a)).count())
                as u32;
            if collateral > self.cfg.max_collateral {
                continue;
            }
            let (pps, bps) = idx.iter().fold((0.0, 0.0), |(p, b), &i| {
                (p + to_block[i].pps, b + to_block[i].bps)
            });
            // The members' mixes, weighted by their attack rates.
            let mut mix = [0.0f32; NV];
            for &i in idx {
                let w = (to_block[i].pps / pps.max(f64::MIN_POSITIVE)) as f32;
                for (m, x) in mix.iter_mut().zip(to_block[i].mix) {
                    *m += w * x;
                }
            }
            mixes.insert(*pfx, mix);
            // The vector of its heaviest members that are not the tail.
            let v = idx
                .iter()
                .map(|&i| &to_block[i])
                .max_by(|a, b| {
                    (!a.tail, a.pps)
                        .partial_cmp(&(!b.tail, b.pps))
                        .unwrap_or(std::cmp::Ordering::Equal)
                })
                .map_or(to_block[idx[0]].vector, |c| c.vector);
            let agg = Aggregated {
                prefix: *pfx,
                sources: n as u32,
                collateral,
            };
            blocks.push(Block {
                prefix: *pfx,
                victim: key,
                vector: carpet(v),
                detector: v.family(),
                reason: format!(
                    "{} of {pfx} blocked as one prefix: {n} of its addresses attack {key} ({} >= {}), collateral {collateral} known legitimate address(es) (<= {})",
                    carpet(v),
                    n,
                    self.cfg.aggregate_min_sources,
                    self.cfg.max_collateral
                ),
                pps,
                bps,
            });
            new_aggs.push((key, agg));
            skip.extend(idx.iter().copied());
        }
        for (i, c) in to_block.into_iter().enumerate() {
            let p = Prefix::host(c.src);
            if c.tail
                || skip.contains(&i)
                || self.is_whitelisted(&p)
                || self.blocked.contains_key(&p)
            {
                continue;
            }
            mixes.insert(p, c.mix);
            blocks.push(Block {
                prefix: p,
                victim: key,
                vector: carpet(c.vector),
                detector: c.vector.family(),
                reason: c.reason,
                pps: c.pps,
                bps: c.bps,
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn lifecycle(
        &mut self,
        iv: &Interval<'_>,
        anomalies: &[(Prefix, [bool; NV])],
        meas: &HashMap<Prefix, Meas>,
        blocks: &[Block],
        police: &[Police],
        new_aggs: &[(Prefix, Aggregated)],
        want: &HashMap<Prefix, Protection>,
        out: &mut Verdict,
    ) {
        let secs = iv.secs_or_one();
        let now = self.clock;
        let mut involved: HashMap<Prefix, Vec<(IpAddr, f64)>> = HashMap::default();
        for b in blocks {
            involved
                .entry(b.victim)
                .or_default()
                .push((b.prefix.net().addr(), b.pps));
        }
        for p in police {
            involved
                .entry(p.victim)
                .or_default()
                .push((p.prefix.net().addr(), 0.0));
        }
        let mut scan_keys: HashSet<Prefix> = HashSet::default();
        for b in blocks {
            if b.detector == "port_scan" {
                scan_keys.insert(b.victim);
            }
        }
        let mut ended: Vec<Prefix> = Vec::new();
        let mut prot_changes: Vec<(Prefix, Protection)> = Vec::new();
        for (key, an) in anomalies {
            let mut an = *an;
            if scan_keys.contains(key) {
                an[SCAN] = true;
            }
            let m = &meas[key];
            let st = self.victims.get_mut(key).expect("judged");
            let active = an.iter().any(|&a| a);
            let is_agg = key.family() == 4 && key.len() == 24;
            let vec_pps: f64 = (0..NV)
                .filter(|&v| an[v])
                .map(|v| m.passed[v] + m.dropped[v])
                .sum();
            let mut events: Vec<EventKind> = Vec::new();
            if active {
                let at = st.attack.get_or_insert_with(|| {
                    events.push(EventKind::AttackStart);
                    Attack {
                        start_index: iv.index,
                        start_s: now - secs,
                        carpet: is_agg || st.spread,
                        ever: [false; NV],
                        peak_v: [0.0; NV],
                        blocks_v: [0; NV],
                        quiet_s: 0.0,
                        pps: 0.0,
                        bps: 0.0,
                        peak_pps: 0.0,
                        peak_bps: 0.0,
                        sources: HashMap::default(),
                        sources_total: 0,
                        distinct_peak: 0.0,
                        policed: 0,
                        aggregated: Vec::new(),
                        dirty: false,
                    }
                });
                at.quiet_s = 0.0;
                at.carpet |= st.spread;
                for v in (0..NV).filter(|&v| an[v]) {
                    if !at.ever[v] && !events.contains(&EventKind::AttackStart) {
                        at.dirty = true;
                    }
                    at.ever[v] = true;
                    at.peak_v[v] = at.peak_v[v].max(m.passed[v] + m.dropped[v]);
                }
                at.pps = vec_pps;
                at.bps = m.bps;
                at.peak_pps = at.peak_pps.max(vec_pps);
                at.distinct_peak = at.distinct_peak.max(m.src_distinct);
                at.peak_bps = at.peak_bps.max(m.bps);
            } else if let Some(at) = st.attack.as_mut() {
                at.quiet_s += secs;
                at.pps = vec_pps;
                at.bps = m.bps;
                if at.quiet_s >= self.cfg.attack_end_s {
                    events.push(EventKind::AttackEnd);
                }
            }
            if let Some(at) = st.attack.as_mut() {
                // Blocks were counted when decided (the attack may have
                // started in this very interval: count them now).
                if events.contains(&EventKind::AttackStart) {
                    for b in blocks.iter().filter(|b| b.victim == *key) {
                        let v = Vector::from_name(b.vector.trim_start_matches("carpet/"))
                            .unwrap_or(Vector::SynFlood);
                        at.blocks_v[v.index()] += 1;
                    }
                }
                for (a, pps) in involved.get(key).into_iter().flatten() {
                    if let Some(e) = at.sources.get_mut(a) {
                        *e = e.max(*pps);
                        continue;
                    }
                    at.sources_total += 1;
                    if at.sources.len() < ATTACK_SOURCES_MAX {
                        at.sources.insert(*a, *pps);
                    }
                }
                let np = police.iter().filter(|p| p.victim == *key).count() as u64;
                if np > 0 {
                    at.policed += np;
                    at.dirty = true;
                }
                for (k, a) in new_aggs {
                    if k == key {
                        at.aggregated.push(a.clone());
                        at.dirty = true;
                    }
                }
            }
            // Protection.
            let w = want.get(key).copied().unwrap_or_default();
            let flood = an[SYN] || an[ACK];
            let mut next = st.protection;
            if w.syn_cookies || w.ack_guard {
                if st.inherited {
                    next = Protection::default();
                    st.inherited = false;
                }
                next.syn_cookies |= w.syn_cookies;
                next.ack_guard |= w.ack_guard;
                st.protect_quiet_s = 0.0;
            } else if st.inherited {
                // Managed by its /24 (below).
            } else if !st.protection.is_off() {
                if flood {
                    st.protect_quiet_s = 0.0;
                } else {
                    st.protect_quiet_s += secs;
                    if st.protect_quiet_s >= self.cfg.protect_hold_s {
                        next = Protection::default();
                    }
                }
            }
            if next != st.protection {
                st.protection = next;
                if !is_agg {
                    prot_changes.push((*key, next));
                }
                if let Some(at) = st.attack.as_mut() {
                    at.dirty = true;
                }
            }
            if st.attack.as_ref().is_some_and(|a| a.dirty) && events.is_empty() {
                events.push(EventKind::AttackUpdate);
            }
            let blocked_n = if events.is_empty() {
                0
            } else {
                self.blocked.values().filter(|b| b.victim == *key).count()
            };
            for e in events {
                let at = st.attack.as_mut().expect("attack for its event");
                at.dirty = false;
                out.events
                    .push(event(e, *key, at, st.protection, now, blocked_n));
                if e == EventKind::AttackEnd {
                    ended.push(*key);
                }
            }
        }
        for key in ended {
            if let Some(st) = self.victims.get_mut(&key) {
                st.attack = None;
            }
        }
        // A /24 carpet protects each of its addresses that has traffic (or
        // was protected by it), as long as the /24 is protected; an address
        // with protection of its own keeps it.
        let agg_prot: HashMap<Prefix, Protection> = self
            .victims
            .iter()
            .filter(|(k, s)| k.family() == 4 && k.len() == 24 && !s.protection.is_off())
            .map(|(k, s)| (*k, s.protection))
            .collect();
        let mut members: Vec<Prefix> = self
            .victims
            .iter()
            .filter(|(k, s)| {
                s.inherited
                    || (meas.contains_key(k)
                        && carpet_key(k).is_some_and(|a| agg_prot.contains_key(&a)))
            })
            .map(|(k, _)| *k)
            .collect();
        members.sort();
        for m in members {
            let ap = carpet_key(&m)
                .and_then(|a| agg_prot.get(&a).copied())
                .unwrap_or_default();
            let st = self.victims.get_mut(&m).expect("listed");
            if !ap.is_off() && st.protection != ap && (st.inherited || st.protection.is_off()) {
                st.protection = ap;
                st.inherited = true;
                prot_changes.push((m, ap));
            } else if ap.is_off() && st.inherited {
                st.protection = Protection::default();
                st.inherited = false;
                prot_changes.push((m, st.protection));
            }
        }
        for (victim, flags) in prot_changes {
            out.protect.push(ProtectChange { victim, flags });
        }
        // Unpolice: the victim's attack is over (a restored source: and
        // `attack_end_s` passed without the attack coming back).
        let attacked: HashSet<Prefix> = self
            .victims
            .iter()
            .filter(|(_, s)| s.attack.is_some())
            .map(|(k, _)| *k)
            .collect();
        let mut unpolice: Vec<Prefix> = self
            .policed
            .iter()
            .filter(|(_, p)| !attacked.contains(&p.victim) && self.clock >= p.keep_until_s)
            .map(|(k, _)| *k)
            .collect();
        unpolice.sort();
        for p in &unpolice {
            self.policed.remove(p);
        }
        out.unpolice = unpolice;
    }

    /// What detection learned (baselines, levels, blocks, policed sources,
    /// protection), with the configuration's fingerprint, to save.
    pub fn learned(&self) -> Learned {
        let mut victims: Vec<LearnedVictim> = self
            .victims
            .iter()
            .filter(|(_, s)| s.level > 0.0 || s.baseline.iter().any(|&b| b > 0.0))
            .map(|(k, s)| LearnedVictim {
                victim: *k,
                baselines: (0..SCAN)
                    .filter(|&v| s.baseline[v] > 0.0)
                    .map(|v| (VECTOR_NAMES[v].to_string(), s.baseline[v]))
                    .collect(),
                source_level_pps: s.level,
            })
            .collect();
        victims.sort_by_key(|v| v.victim);
        let mut blocked: Vec<LearnedBlock> = self
            .blocked
            .iter()
            .map(|(p, b)| LearnedBlock {
                prefix: *p,
                victim: b.victim,
                vector: b.vector,
                quiet_s: b.quiet_s,
            })
            .collect();
        blocked.sort_by_key(|b| b.prefix);
        let mut policed: Vec<LearnedPolice> = self
            .policed
            .iter()
            .map(|(p, x)| LearnedPolice {
                prefix: *p,
                victim: x.victim,
                rate_pps: x.rate_pps,
                scope: x.scope,
            })
            .collect();
        policed.sort_by_key(|p| p.prefix);
        let mut protected: Vec<ProtectChange> = self
            .victims
            .iter()
            .filter(|(_, s)| !s.protection.is_off())
            .map(|(k, s)| ProtectChange {
                victim: *k,
                flags: s.protection,
            })
            .collect();
        protected.sort_by_key(|p| p.victim);
        Learned {
            fingerprint: self.fingerprint.clone(),
            victims,
            blocked,
            policed,
            protected,
        }
    }

    /// Restore what [`Detection::learned`] saved. Baselines and levels
    /// only when the fingerprint matches (else [`Restore::Fresh`] with the
    /// reason, for the log); blocks, policed sources and protection always
    /// (the data path keeps them, and their unban and switch-off rules
    /// need them). Non-finite or negative numbers are ignored.
    pub fn restore(&mut self, l: &Learned) -> Restore {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        for b in &l.blocked {
            self.blocked.insert(
                b.prefix,
                Blocked {
                    victim: b.victim,
                    vector: b.vector,
                    quiet_s: if ok(b.quiet_s) { b.quiet_s } else { 0.0 },
                    mix: one_hot(b.vector),
                },
            );
        }
        for p in &l.policed {
            if ok(p.rate_pps) {
                self.policed.insert(
                    p.prefix,
                    Policed {
                        victim: p.victim,
                        rate_pps: p.rate_pps,
                        scope: p.scope,
                        keep_until_s: self.clock + self.cfg.attack_end_s,
                    },
                );
            }
        }
        for p in &l.protected {
            self.victims.entry(p.victim).or_default().protection = p.flags;
        }
        if l.fingerprint != self.fingerprint {
            return Restore::Fresh {
                reason: format!(
                    "learned state from another configuration or interface (fingerprint {} , now {}): baselines discarded, learning afresh; {} block(s) and {} policed source(s) kept",
                    if l.fingerprint.is_empty() { "none" } else { &l.fingerprint },
                    self.fingerprint,
                    l.blocked.len(),
                    l.policed.len()
                ),
            };
        }
        let mut n = 0;
        for v in &l.victims {
            let st = self.victims.entry(v.victim).or_default();
            for (name, &b) in &v.baselines {
                if let Some(vec) = Vector::from_name(name) {
                    if ok(b) && vec.index() < SCAN {
                        st.baseline[vec.index()] = b;
                    }
                }
            }
            if ok(v.source_level_pps) {
                st.level = v.source_level_pps;
            }
            n += 1;
        }
        Restore::Restored {
            victims: n,
            blocked: l.blocked.len(),
        }
    }

    /// The victims, for the API: those under attack or protected first,
    /// then by current traffic; each with its vectors that have traffic, a
    /// baseline or an anomaly.
    pub fn victims(&self) -> Vec<VictimView> {
        let mut nb: HashMap<Prefix, u64> = HashMap::default();
        for b in self.blocked.values() {
            *nb.entry(b.victim).or_default() += 1;
        }
        let mut np: HashMap<Prefix, u64> = HashMap::default();
        for p in self.policed.values() {
            *np.entry(p.victim).or_default() += 1;
        }
        let levels = self.levels();
        let mut v: Vec<VictimView> = self
            .victims
            .iter()
            .map(|(k, s)| VictimView {
                victim: *k,
                under_attack: s.attack.is_some(),
                vectors: (0..NV)
                    .filter(|&i| s.current[i] > 0.0 || s.baseline[i] > 0.0 || s.anomalous[i])
                    .map(|i| VectorView {
                        vector: VECTOR_NAMES[i],
                        current_pps: s.current[i],
                        baseline_pps: s.baseline[i],
                        threshold_pps: s.threshold[i],
                        anomalous: s.anomalous[i],
                    })
                    .collect(),
                source_level_pps: levels.get(k).copied().unwrap_or(0.0),
                protection: s.protection,
                blocked: nb.get(k).copied().unwrap_or(0),
                policed: np.get(k).copied().unwrap_or(0),
            })
            .collect();
        let load = |x: &VictimView| x.vectors.iter().map(|v| v.current_pps).sum::<f64>();
        v.sort_by(|a, b| {
            (b.under_attack || !b.protection.is_off())
                .cmp(&(a.under_attack || !a.protection.is_off()))
                .then(load(b).total_cmp(&load(a)))
                .then(a.victim.cmp(&b.victim))
        });
        v
    }

    /// Gauges for metrics: totals, and per victim and vector the current
    /// rate, baseline and threshold, for at most `max_victims` victims
    /// (those under attack first, as [`Detection::victims`] orders them),
    /// so that the label set stays bounded.
    pub fn gauges(&self, max_victims: usize) -> Vec<Gauge> {
        let total = |name, value| Gauge {
            name,
            victim: String::new(),
            vector: "",
            value,
        };
        let mut g = vec![
            total("victims", self.victims.len() as f64),
            total(
                "attacks",
                self.victims.values().filter(|s| s.attack.is_some()).count() as f64,
            ),
            total("blocked", self.blocked.len() as f64),
            total("policed", self.policed.len() as f64),
            total(
                "protected",
                self.victims
                    .values()
                    .filter(|s| !s.protection.is_off())
                    .count() as f64,
            ),
        ];
        for v in self.victims().into_iter().take(max_victims) {
            let victim = v.victim.to_string();
            g.push(Gauge {
                name: "source_level_pps",
                victim: victim.clone(),
                vector: "",
                value: v.source_level_pps,
            });
            for x in v.vectors {
                for (name, value) in [
                    ("current_pps", x.current_pps),
                    ("baseline_pps", x.baseline_pps),
                    ("threshold_pps", x.threshold_pps),
                ] {
                    g.push(Gauge {
                        name,
                        victim: victim.clone(),
                        vector: x.vector,
                        value,
                    });
                }
            }
        }
        g
    }

    /// Seconds of interval time observed so far.
    pub fn clock_s(&self) -> f64 {
        self.clock
    }

    /// A victim's learned baseline of a vector (0: none).
    pub fn baseline(&self, victim: &Prefix, v: Vector) -> f64 {
        self.victims
            .get(victim)
            .map_or(0.0, |s| s.baseline[v.index()])
    }

    /// A victim's per-source level (see [`DetectionConfig::source_level_quantile`]).
    pub fn source_level(&self, victim: &Prefix) -> f64 {
        self.level(victim)
    }

    /// The floor of a vector.
    pub fn floor_of(&self, v: Vector) -> f64 {
        self.floor(v.index())
    }
}

fn add_victim(a: &mut VictimRecord, r: &VictimRecord) {
    a.packets += r.packets;
    a.bytes += r.bytes;
    a.tcp += r.tcp;
    a.udp += r.udp;
    a.icmp += r.icmp;
    a.other += r.other;
    a.frags += r.frags;
    a.syn += r.syn;
    a.synack += r.synack;
    a.rst += r.rst;
    a.fin += r.fin;
    a.tcp_sampled += r.tcp_sampled;
    a.tcp_nosock += r.tcp_nosock;
    for i in 0..8 {
        a.udp_vec_pkts[i] += r.udp_vec_pkts[i];
        a.udp_vec_bytes[i] += r.udp_vec_bytes[i];
    }
    a.src_distinct += r.src_distinct;
    a.syn_src_distinct += r.syn_src_distinct;
    a.synack_sent += r.synack_sent;
    a.cookie_ack_valid += r.cookie_ack_valid;
    a.cookie_ack_invalid += r.cookie_ack_invalid;
    a.guard_dropped += r.guard_dropped;
    a.no_listener += r.no_listener;
}

/// A victim's per-vector rates in the interval: its records' counts over
/// `span`, the seconds they cover, which start at `start` on the clock.
/// `st` keeps the previous interval's SYN and completion counts (the
/// two-interval window).
fn victim_meas(r: &VictimRecord, comp: f64, span: f64, st: &mut VictimState, start: f64) -> Meas {
    let mut m = Meas::default();
    let syn = r.syn as f64;
    // The previous interval counts only if its records end where these
    // begin: consecutive intervals. Overlapping windows (flow input's)
    // already hold what a handshake straddling a step needs, and adding
    // the previous one would count its SYNs twice.
    let (ps, pc, psecs) = if (st.prev_seen - start).abs() < 1e-6 {
        (st.prev_syn, st.prev_comp, st.prev_secs)
    } else {
        (0.0, 0.0, 0.0)
    };
    let incomplete_now = (syn - comp).max(0.0);
    m.passed[SYN] = ((syn + ps) - (comp + pc)).max(0.0) / (span + psecs);
    st.prev_syn = syn;
    st.prev_comp = comp;
    st.prev_secs = span;
    st.prev_seen = start + span;
    let non_syn = r.tcp.saturating_sub(r.syn) as f64;
    if r.tcp_sampled > 0 {
        let share = (r.tcp_nosock as f64 / r.tcp_sampled as f64).min(1.0);
        let answered_rst = (r.rst as f64).min(incomplete_now);
        m.passed[ACK] = (share * non_syn - answered_rst).max(0.0) / span;
    }
    for c in 0..7 {
        m.passed[2 + c] = r.udp_vec_pkts[c] as f64 / span;
    }
    m.passed[UDP] = r.udp_vec_pkts[UDP_OTHER] as f64 / span;
    m.passed[ICMP] = r.icmp as f64 / span;
    m.passed[FRAG] = r.frags as f64 / span;
    m.pps = r.packets as f64 / span;
    m.bps = r.bytes as f64 * 8.0 / span;
    m.syn = syn;
    m.comp = comp;
    m.syn_distinct = r.syn_src_distinct;
    m.src_distinct = r.src_distinct;
    m
}

/// EWMA toward `x` that rises by at most `max_rise` and falls at a quarter
/// of the weight (so that it tracks a high level of the samples).
fn bounded_ewma(b: f64, x: f64, alpha: f64, max_rise: f64) -> f64 {
    if !x.is_finite() {
        return b;
    }
    if x > b {
        b + (alpha * (x - b)).min(max_rise.max(0.0))
    } else {
        b + alpha / 4.0 * (x - b)
    }
}

fn event(
    kind: EventKind,
    key: Prefix,
    at: &Attack,
    prot: Protection,
    now: f64,
    blocked_now: usize,
) -> AttackEvent {
    let main = at.main_vector();
    let name = |v: usize| {
        if at.carpet {
            format!("carpet/{}", VECTOR_NAMES[v])
        } else {
            VECTOR_NAMES[v].to_string()
        }
    };
    let mut vectors = vec![name(main)];
    vectors.extend((0..NV).filter(|&v| v != main && at.ever[v]).map(name));
    let mut top: Vec<(IpAddr, f64)> = at.sources.iter().map(|(a, p)| (*a, *p)).collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(TOP_SOURCES);
    let blocked = at.blocked().max(blocked_now as u64);
    let reason =
        format!(
        "{} on {key}: {} pps now, peak {} pps / {}bit/s; {} source(s) attributed of ~{} distinct; blocked {}, policed {}{}{}",
        name(main),
        si(at.pps),
        si(at.peak_pps),
        si(at.peak_bps),
        at.sources_total,
        fixed(at.distinct_peak, 0),
        blocked,
        at.policed,
        if prot.syn_cookies { ", SYN cookies on" } else { "" },
        if prot.ack_guard { ", ACK guard on" } else { "" },
    );
    AttackEvent {
        event: kind,
        victim: key,
        vector: name(main),
        vectors,
        start_index: at.start_index,
        duration_s: now - at.start_s,
        pps: at.pps,
        bps: at.bps,
        peak_pps: at.peak_pps,
        peak_bps: at.peak_bps,
        sources: at.sources_total,
        distinct_sources: at.distinct_peak.round(),
        top_sources: top,
        action: Action {
            blocked,
            policed: at.policed,
            syn_cookies: prot.syn_cookies,
            ack_guard: prot.ack_guard,
            aggregated: at.aggregated.clone(),
        },
        reason,
    }
}
