//! Detection: the [`Detector`] trait, the built-in detectors and
//! [`Detection`], which runs the enabled ones, applies the whitelist and
//! merges their decisions.

mod entropy;
mod rate;
mod signature;

use std::net::IpAddr;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use entropy::{EntropyDetector, EntropyStatus};
pub use rate::{RateDetector, RateStatus};
pub use signature::{
    AmplificationDetector, IcmpFloodDetector, ProtocolFloodDetector, SynFloodDetector,
    UdpFloodDetector,
};

#[cfg(test)]
mod tests;

use crate::config::DetectConfig;
use crate::error::ConfigError;
use crate::sources::Sources;
use crate::{BlockDecision, FeatureRecord, Interval, Prefix};

/// A pluggable detector.
pub trait Detector: Send {
    /// Short name, the `detector` of its decisions (e.g. `"rate"`).
    fn name(&self) -> &'static str;

    /// Observe one interval; return the sources to block.
    fn observe(&mut self, iv: &Interval<'_>) -> Vec<BlockDecision>;

    /// True while this detector considers an attack in progress: it
    /// flagged something in the last interval it observed.
    fn under_attack(&self) -> bool;

    /// Observe one interval whose per-source sums are already computed
    /// (what [`Detection`] calls, so that the records are summed once for
    /// all detectors). The default ignores `sources` and calls
    /// [`Detector::observe`]; the built-in detectors implement this and
    /// make `observe` compute the sums.
    fn observe_sources(&mut self, iv: &Interval<'_>, sources: &Sources) -> Vec<BlockDecision> {
        let _ = sources;
        self.observe(iv)
    }

    /// Was the last interval normal for this detector's learning? Only
    /// intervals that every detector calls normal count for
    /// [`Detection::normal_peak_pps`]. Default: `!under_attack()`.
    fn normal(&self) -> bool {
        !self.under_attack()
    }

    /// Told after every interval whether [`Detection`] judged it normal
    /// (no detector flagged anything and no attack in progress). A
    /// detector that learns should learn only from such intervals: one
    /// that learned from every interval *it* did not flag would learn the
    /// rates of an attack another detector is catching. Default: ignored.
    fn interval_verdict(&mut self, normal: bool) {
        let _ = normal;
    }

    /// Named numbers describing what the detector learned (thresholds,
    /// baselines, entropies), for metrics. Default: none.
    fn gauges(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }

    /// Learned per-source baseline (pps, bps), if this detector learns one
    /// and has warmed up (saved across daemon restarts). Default: none.
    fn baseline(&self) -> Option<(f64, f64)> {
        None
    }

    /// Restore a baseline saved by [`Detector::baseline`]. Default: ignored.
    fn restore_baseline(&mut self, pps: f64, bps: f64) {
        let _ = (pps, bps);
    }
}

/// What [`Detection`] has learned, to save across daemon restarts
/// ([`Detection::learned`], [`Detection::restore`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Learned {
    /// [`Detection::normal_peak_pps`].
    pub normal_peak_pps: f64,
    /// The rate detector's per-source pps baseline (none before warm-up).
    pub rate_baseline_pps: Option<f64>,
    /// The rate detector's per-source bps baseline.
    pub rate_baseline_bps: Option<f64>,
}

/// Parse whitelist entries (addresses or CIDR prefixes, host bits zero).
///
/// # Errors
/// [`ConfigError::BadWhitelist`] for the first bad entry.
pub fn parse_whitelist(entries: &[String]) -> Result<Vec<Prefix>, ConfigError> {
    entries
        .iter()
        .enumerate()
        .map(|(index, e)| {
            Prefix::parse(e).map_err(|err| ConfigError::BadWhitelist {
                index,
                value: e.clone(),
                reason: match err {
                    crate::PrefixError::BadPrefix { reason, .. } => reason,
                    other => other.to_string(),
                },
            })
        })
        .collect()
}

/// Do two prefixes share any address?
fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Whitelisted networks indexed by (family, length): an address is looked
/// up once per distinct length, whatever the size of the list.
#[derive(Debug, Clone, Default)]
struct WhiteIndex {
    by_len: Vec<(bool, u8, HashSet<IpNet>)>,
}

impl WhiteIndex {
    fn new(list: &[Prefix]) -> Self {
        let mut by_len: Vec<(bool, u8, HashSet<IpNet>)> = Vec::new();
        for p in list {
            let n = p.net();
            let key = (matches!(n, IpNet::V4(_)), n.prefix_len());
            match by_len.iter_mut().find(|e| (e.0, e.1) == key) {
                Some(e) => {
                    e.2.insert(n);
                }
                None => by_len.push((key.0, key.1, std::iter::once(n).collect())),
            }
        }
        Self { by_len }
    }

    fn contains(&self, a: IpAddr) -> bool {
        self.by_len.iter().any(|(v4, len, set)| {
            a.is_ipv4() == *v4 && IpNet::new(a, *len).is_ok_and(|n| set.contains(&n.trunc()))
        })
    }
}

/// All enabled detectors + the whitelist (never blocked).
pub struct Detection {
    detectors: Vec<Box<dyn Detector>>,
    whitelist: Vec<Prefix>,
    white: WhiteIndex,
    attack_end_intervals: u32,
    max_blocks: usize,
    /// Intervals since some detector last flagged something (None: never).
    since_flag: Option<u32>,
    normal_peak_pps: f64,
    normal_intervals: u64,
    last_sources: usize,
}

impl std::fmt::Debug for Detection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detection")
            .field(
                "detectors",
                &self.detectors.iter().map(|d| d.name()).collect::<Vec<_>>(),
            )
            .field("whitelist", &self.whitelist)
            .field("normal_peak_pps", &self.normal_peak_pps)
            .finish_non_exhaustive()
    }
}

impl Detection {
    /// Build the enabled detectors, in decision-priority order: the
    /// signatures (most specific reason) first — `udp_amplification`,
    /// `syn_flood`, `icmp_flood`, `udp_flood` — then `rate`, then
    /// `entropy`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first bad key.
    pub fn new(cfg: &DetectConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let whitelist = parse_whitelist(&cfg.whitelist)?;
        let s = &cfg.signatures;
        let mut detectors: Vec<Box<dyn Detector>> = Vec::new();
        if s.udp_amplification.enabled {
            detectors.push(Box::new(AmplificationDetector::new(&s.udp_amplification)));
        }
        if s.syn_flood.enabled {
            detectors.push(Box::new(SynFloodDetector::new(&s.syn_flood)));
        }
        if s.icmp_flood.enabled {
            detectors.push(Box::new(IcmpFloodDetector::icmp(&s.icmp_flood)));
        }
        if s.udp_flood.enabled {
            detectors.push(Box::new(UdpFloodDetector::udp(&s.udp_flood)));
        }
        if cfg.rate.enabled {
            detectors.push(Box::new(RateDetector::new(&cfg.rate)));
        }
        if cfg.entropy.enabled {
            detectors.push(Box::new(EntropyDetector::new(&cfg.entropy)));
        }
        Ok(Self {
            detectors,
            white: WhiteIndex::new(&whitelist),
            whitelist,
            attack_end_intervals: cfg.attack_end_intervals,
            max_blocks: cfg.max_blocks_per_interval,
            since_flag: None,
            normal_peak_pps: 0.0,
            normal_intervals: 0,
            last_sources: 0,
        })
    }

    /// Add a detector of your own (runs after the built-in ones).
    pub fn push(&mut self, d: Box<dyn Detector>) {
        self.detectors.push(d);
    }

    /// Names of the detectors that run, in priority order.
    pub fn detector_names(&self) -> Vec<&'static str> {
        self.detectors.iter().map(|d| d.name()).collect()
    }

    /// Runs every enabled detector, drops whitelisted sources, one decision
    /// per prefix (the first detector in priority order keeps it; the
    /// others' reasons are appended after `"; also "`), at most
    /// `max_blocks_per_interval`, highest pps first, ties by prefix.
    ///
    /// Whitelisted sources are taken out of the interval before any
    /// detector sees it: they never trigger, never count as an attack, and
    /// never enter a baseline or the normal peak.
    pub fn observe(&mut self, iv: &Interval<'_>) -> Vec<BlockDecision> {
        let mut sources = Sources::from_interval(iv);
        let kept: Vec<FeatureRecord>;
        let mut iv = *iv;
        if !self.white.by_len.is_empty() {
            let white: HashSet<IpAddr> = sources
                .list
                .iter()
                .map(|s| s.src)
                .filter(|a| self.white.contains(*a))
                .collect();
            if !white.is_empty() {
                kept = iv
                    .records
                    .iter()
                    .filter(|r| !white.contains(&r.src))
                    .copied()
                    .collect();
                iv.records = &kept;
                sources = Sources::from_interval(&iv);
            }
        }
        let iv = &iv;
        self.last_sources = sources.len();
        let mut merged: Vec<BlockDecision> = Vec::new();
        let mut at: HashMap<Prefix, usize> = HashMap::default();
        let mut flagged = false;
        for d in &mut self.detectors {
            let out = d.observe_sources(iv, &sources);
            flagged |= d.under_attack() || !out.is_empty();
            for dec in out {
                if let Some(&i) = at.get(&dec.prefix) {
                    let m = &mut merged[i];
                    m.reason.push_str("; also ");
                    m.reason.push_str(dec.detector);
                    m.reason.push_str(": ");
                    m.reason.push_str(&dec.reason);
                } else {
                    at.insert(dec.prefix, merged.len());
                    merged.push(dec);
                }
            }
        }
        merged.retain(|d| !self.is_whitelisted(&d.prefix));
        merged.sort_by(|a, b| b.pps.total_cmp(&a.pps).then(a.prefix.cmp(&b.prefix)));
        merged.truncate(self.max_blocks);

        if flagged {
            self.since_flag = Some(0);
        } else if let Some(n) = self.since_flag.as_mut() {
            *n = n.saturating_add(1);
        }
        let normal = !flagged && self.detectors.iter().all(|d| d.normal());
        let normal = normal && !self.under_attack();
        for d in &mut self.detectors {
            d.interval_verdict(normal);
        }
        if normal {
            self.normal_intervals += 1;
            self.normal_peak_pps = self.normal_peak_pps.max(sources.max_pps());
        }
        merged
    }

    /// True from the first flagged interval until `attack_end_intervals`
    /// consecutive intervals pass with no detector flagging anything.
    pub fn under_attack(&self) -> bool {
        matches!(self.since_flag, Some(n) if n < self.attack_end_intervals)
    }

    /// Highest single-source pps seen in intervals judged normal (no
    /// detector flagged anything and no attack in progress): the rate
    /// monitor's unban level. 0 until a normal interval is seen.
    pub fn normal_peak_pps(&self) -> f64 {
        self.normal_peak_pps
    }

    /// Intervals judged normal so far.
    pub fn normal_intervals(&self) -> u64 {
        self.normal_intervals
    }

    /// Sources in the last interval observed.
    pub fn last_sources(&self) -> usize {
        self.last_sources
    }

    /// Set the normal peak (e.g. restored after a restart).
    pub fn set_normal_peak_pps(&mut self, pps: f64) {
        if pps.is_finite() && pps >= 0.0 {
            self.normal_peak_pps = pps;
        }
    }

    /// What has been learned (normal peak, rate baseline), to save.
    pub fn learned(&self) -> Learned {
        let rate = self
            .detectors
            .iter()
            .find(|d| d.name() == "rate")
            .and_then(|d| d.baseline());
        Learned {
            normal_peak_pps: self.normal_peak_pps,
            rate_baseline_pps: rate.map(|r| r.0),
            rate_baseline_bps: rate.map(|r| r.1),
        }
    }

    /// Restore what [`Detection::learned`] saved: the rate detector skips
    /// its warm-up. Non-finite or negative values are ignored.
    pub fn restore(&mut self, l: &Learned) {
        self.set_normal_peak_pps(l.normal_peak_pps);
        if let (Some(p), Some(b)) = (l.rate_baseline_pps, l.rate_baseline_bps) {
            for d in self.detectors.iter_mut().filter(|d| d.name() == "rate") {
                d.restore_baseline(p, b);
            }
        }
    }

    /// Every detector's gauges, named `<detector>.<gauge>` (e.g.
    /// `rate.threshold_pps`, `entropy.h_src`), plus
    /// `detection.normal_peak_pps` and `detection.under_attack` (0/1).
    pub fn gauges(&self) -> Vec<(String, f64)> {
        let mut g: Vec<(String, f64)> = self
            .detectors
            .iter()
            .flat_map(|d| {
                let n = d.name();
                d.gauges()
                    .into_iter()
                    .map(move |(k, v)| (format!("{n}.{k}"), v))
            })
            .collect();
        g.push(("detection.normal_peak_pps".into(), self.normal_peak_pps));
        g.push((
            "detection.under_attack".into(),
            f64::from(u8::from(self.under_attack())),
        ));
        g
    }

    /// The whitelist.
    pub fn whitelist(&self) -> &[Prefix] {
        &self.whitelist
    }

    /// Is any address of `p` whitelisted?
    pub fn is_whitelisted(&self, p: &Prefix) -> bool {
        let n = p.net();
        self.whitelist.iter().any(|w| overlaps(&w.net(), &n))
    }

    /// Add a prefix to the whitelist; false if it was there already.
    pub fn add_whitelist(&mut self, p: Prefix) -> bool {
        if self.whitelist.contains(&p) {
            return false;
        }
        self.whitelist.push(p);
        self.white = WhiteIndex::new(&self.whitelist);
        true
    }

    /// Remove a prefix from the whitelist; false if it was not there.
    pub fn remove_whitelist(&mut self, p: &Prefix) -> bool {
        let before = self.whitelist.len();
        self.whitelist.retain(|w| w != p);
        self.white = WhiteIndex::new(&self.whitelist);
        self.whitelist.len() != before
    }
}

/// Format a rate with a unit prefix, for reasons: `12.3k`, `4.56M`.
/// `x` with `decimals` decimals (`format!("{x:.N}")` for finite x), by
/// integer rounding: the float formatter's exact path (bignum) was ~20% of
/// an interval that blocks 150,000 sources, each with a reason.
pub(crate) fn fixed(x: f64, decimals: u32) -> String {
    if x.is_finite() {
        fixed_scaled(x, 1.0, decimals, "")
    } else {
        format!("{x}")
    }
}

fn fixed_scaled(x: f64, scale: f64, decimals: u32, suffix: &str) -> String {
    let m = 10i64.pow(decimals);
    let v = (x.abs() / scale * m as f64).round() as i64;
    let sign = if x < 0.0 && v != 0 { "-" } else { "" };
    if decimals == 0 {
        format!("{sign}{v}{suffix}")
    } else {
        format!(
            "{sign}{}.{:0w$}{suffix}",
            v / m,
            v % m,
            w = decimals as usize
        )
    }
}

pub(crate) fn si(x: f64) -> String {
    let fixed = fixed_scaled;
    let a = x.abs();
    if !x.is_finite() {
        format!("{x}")
    } else if a >= 1e9 {
        fixed(x, 1e9, 3, "G")
    } else if a >= 1e6 {
        fixed(x, 1e6, 3, "M")
    } else if a >= 1e4 {
        fixed(x, 1e3, 1, "k")
    } else if a >= 100.0 {
        fixed(x, 1.0, 0, "")
    } else {
        fixed(x, 1.0, 2, "")
    }
}

#[cfg(test)]
mod si_tests {
    use super::si;

    #[test]
    fn si_matches_fixed_point_formatting() {
        for (x, want) in [
            (0.0, "0.00"),
            (1.006, "1.01"),
            (99.994, "99.99"),
            (100.4, "100"),
            (9999.5, "10000"),
            (12_345.0, "12.3k"),
            (999_949.0, "999.9k"),
            (1_234_567.0, "1.235M"),
            (2.5e9, "2.500G"),
            (-1500.0, "-1500"),
            (-0.001, "0.00"),
        ] {
            assert_eq!(si(x), want, "{x}");
        }
        assert_eq!(si(f64::NAN), "NaN");
        assert_eq!(super::fixed(12.345, 1), "12.3");
        assert_eq!(super::fixed(0.0004, 3), "0.000");
        assert_eq!(super::fixed(99.96, 0), "100");
    }
}
