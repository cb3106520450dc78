//! Signature detectors: UDP amplification (by size and UDP share), SYN
//! flood (SYNs without completion), ICMP flood.

use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;

use super::{fixed, si, Detector};
use crate::config::{AmplificationConfig, IcmpFloodConfig, SynFloodConfig, UdpFloodConfig};
use crate::sources::{incomplete_syn, SourceStats, Sources};
use crate::{BlockDecision, Interval, Prefix};

/// UDP amplification, by UDP share and mean frame size (see
/// [`AmplificationConfig`]: the data plane records no UDP source port).
#[derive(Debug, Clone)]
pub struct AmplificationDetector {
    cfg: AmplificationConfig,
    min_size: f64,
    flagged: bool,
}

impl AmplificationDetector {
    /// From a validated config.
    pub fn new(cfg: &AmplificationConfig) -> Self {
        let min_size = cfg
            .vectors
            .iter()
            .map(|v| f64::from(v.min_mean_bytes))
            .fold(f64::INFINITY, f64::min);
        Self {
            cfg: cfg.clone(),
            min_size,
            flagged: false,
        }
    }
}

impl Detector for AmplificationDetector {
    fn name(&self) -> &'static str {
        "udp_amplification"
    }

    fn observe(&mut self, iv: &Interval<'_>) -> Vec<BlockDecision> {
        let s = Sources::from_interval(iv);
        self.observe_sources(iv, &s)
    }

    fn observe_sources(&mut self, _iv: &Interval<'_>, sources: &Sources) -> Vec<BlockDecision> {
        let mut out = Vec::new();
        for s in &sources.list {
            let share = s.share(s.udp);
            let mean = s.mean_bytes();
            if s.pps < self.cfg.min_pps || share < self.cfg.min_udp_share || mean < self.min_size {
                continue;
            }
            let fits: Vec<String> = self
                .cfg
                .vectors
                .iter()
                .filter(|v| mean >= f64::from(v.min_mean_bytes))
                .map(|v| format!("{}/{}", v.name, v.port))
                .collect();
            out.push(BlockDecision {
                prefix: Prefix::host(s.src),
                detector: "udp_amplification",
                reason: format!(
                    "UDP {}% (>= {}%) of {} pps (>= {} pps), mean frame {} B, {}% fragments: size profile of {} (by size; UDP source port not recorded)",
                    fixed(share * 100.0, 0),
                    fixed(self.cfg.min_udp_share * 100.0, 0),
                    si(s.pps),
                    si(self.cfg.min_pps),
                    fixed(mean, 0),
                    fixed(s.share(s.frags) * 100.0, 0),
                    fits.join(", ")
                ),
                pps: s.pps,
                bps: s.bps,
            });
        }
        self.flagged = !out.is_empty();
        out
    }

    fn under_attack(&self) -> bool {
        self.flagged
    }
}

/// Victims (destinations) whose per-interval rate of `count(record)` is at
/// least `pps`.
fn victims(
    iv: &Interval<'_>,
    secs: f64,
    pps: f64,
    count: impl Fn(&crate::FeatureRecord) -> u64,
) -> HashMap<IpAddr, f64> {
    let mut per: HashMap<IpAddr, u64> = HashMap::default();
    for r in iv.records {
        let c = count(r);
        if c > 0 {
            *per.entry(r.dst).or_default() += c;
        }
    }
    per.into_iter()
        .map(|(d, c)| (d, c as f64 / secs))
        .filter(|&(_, r)| r >= pps)
        .collect()
}

/// Per source, the rate of `count` toward the given victims.
fn toward(
    iv: &Interval<'_>,
    secs: f64,
    victims: &HashMap<IpAddr, f64>,
    count: impl Fn(&crate::FeatureRecord) -> u64,
) -> HashMap<IpAddr, (f64, IpAddr)> {
    let mut per: HashMap<IpAddr, (u64, IpAddr)> = HashMap::default();
    if victims.is_empty() {
        return HashMap::default();
    }
    for r in iv.records {
        if victims.contains_key(&r.dst) {
            let c = count(r);
            if c > 0 {
                let e = per.entry(r.src).or_insert((0, r.dst));
                e.0 += c;
            }
        }
    }
    per.into_iter()
        .map(|(s, (c, d))| (s, (c as f64 / secs, d)))
        .collect()
}

/// SYN flood: SYNs without completion (see [`SynFloodConfig`]).
#[derive(Debug, Clone)]
pub struct SynFloodDetector {
    cfg: SynFloodConfig,
    flagged: bool,
}

impl SynFloodDetector {
    /// From a validated config.
    pub fn new(cfg: &SynFloodConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            flagged: false,
        }
    }
}

impl Detector for SynFloodDetector {
    fn name(&self) -> &'static str {
        "syn_flood"
    }

    fn observe(&mut self, iv: &Interval<'_>) -> Vec<BlockDecision> {
        let s = Sources::from_interval(iv);
        self.observe_sources(iv, &s)
    }

    fn observe_sources(&mut self, iv: &Interval<'_>, sources: &Sources) -> Vec<BlockDecision> {
        let secs = sources.secs;
        let vic = victims(iv, secs, self.cfg.victim_syn_pps, incomplete_syn);
        let tow = toward(iv, secs, &vic, incomplete_syn);
        let mut out = Vec::new();
        for s in &sources.list {
            if s.tcp == 0 {
                continue;
            }
            let share = s.syn as f64 / s.tcp as f64;
            if share < self.cfg.min_syn_share {
                continue;
            }
            let inc = s.incomplete_syn as f64 / secs;
            let reason = if inc >= self.cfg.min_syn_pps && inc > 0.0 {
                format!(
                    "{} incomplete SYN/s (>= {}), SYN {}% of {} TCP packets (>= {}%)",
                    si(inc),
                    si(self.cfg.min_syn_pps),
                    fixed(share * 100.0, 0),
                    s.tcp,
                    fixed(self.cfg.min_syn_share * 100.0, 0)
                )
            } else if let Some(&(r, dst)) = tow.get(&s.src) {
                if r < self.cfg.flood_min_syn_pps || r <= 0.0 {
                    continue;
                }
                format!(
                    "{} incomplete SYN/s (>= {}) to {dst}, a SYN-flood victim receiving {} incomplete SYN/s (>= {}); SYN {}% of {} TCP packets",
                    si(r),
                    si(self.cfg.flood_min_syn_pps),
                    si(vic.get(&dst).copied().unwrap_or(0.0)),
                    si(self.cfg.victim_syn_pps),
                    fixed(share * 100.0, 0),
                    s.tcp
                )
            } else {
                continue;
            };
            out.push(BlockDecision {
                prefix: Prefix::host(s.src),
                detector: "syn_flood",
                reason,
                pps: s.pps,
                bps: s.bps,
            });
        }
        self.flagged = !out.is_empty();
        out
    }

    fn under_attack(&self) -> bool {
        self.flagged
    }
}

/// A per-protocol flood over many sources — ICMP ([`IcmpFloodConfig`]) or
/// UDP ([`UdpFloodConfig`]); the rule is [`protocol_flood`]'s.
#[derive(Debug, Clone)]
pub struct ProtocolFloodDetector {
    flood: Flood,
    flagged: bool,
}

/// The ICMP-flood detector ([`ProtocolFloodDetector::icmp`]).
pub type IcmpFloodDetector = ProtocolFloodDetector;
/// The UDP-flood detector ([`ProtocolFloodDetector::udp`]).
pub type UdpFloodDetector = ProtocolFloodDetector;

impl ProtocolFloodDetector {
    /// ICMP flood, from a validated config.
    pub fn icmp(c: &IcmpFloodConfig) -> Self {
        Self::with(Flood {
            detector: "icmp_flood",
            proto: "ICMP",
            of_record: |r| u64::from(r.icmp),
            of_source: |s| s.icmp,
            min_pps: c.min_icmp_pps,
            min_share: c.min_icmp_share,
            victim_pps: c.victim_icmp_pps,
            flood_min_pps: c.flood_min_icmp_pps,
        })
    }

    /// Volumetric UDP flood, from a validated config.
    pub fn udp(c: &UdpFloodConfig) -> Self {
        Self::with(Flood {
            detector: "udp_flood",
            proto: "UDP",
            of_record: |r| u64::from(r.udp),
            of_source: |s| s.udp,
            min_pps: c.min_udp_pps,
            min_share: c.min_udp_share,
            victim_pps: c.victim_udp_pps,
            flood_min_pps: c.flood_min_udp_pps,
        })
    }

    fn with(flood: Flood) -> Self {
        Self {
            flood,
            flagged: false,
        }
    }
}

impl Detector for ProtocolFloodDetector {
    fn name(&self) -> &'static str {
        self.flood.detector
    }

    fn observe(&mut self, iv: &Interval<'_>) -> Vec<BlockDecision> {
        let s = Sources::from_interval(iv);
        self.observe_sources(iv, &s)
    }

    fn observe_sources(&mut self, iv: &Interval<'_>, sources: &Sources) -> Vec<BlockDecision> {
        let out = protocol_flood(iv, sources, &self.flood);
        self.flagged = !out.is_empty();
        out
    }

    fn under_attack(&self) -> bool {
        self.flagged
    }
}

/// A per-protocol flood: what [`protocol_flood`] counts and its thresholds.
#[derive(Debug, Clone)]
struct Flood {
    detector: &'static str,
    proto: &'static str,
    of_record: fn(&crate::FeatureRecord) -> u64,
    of_source: fn(&SourceStats) -> u64,
    min_pps: f64,
    min_share: f64,
    victim_pps: f64,
    flood_min_pps: f64,
}

/// The ICMP- and UDP-flood rule: a source sending at least `min_pps` of
/// the protocol, `min_share` of its packets; or, toward a destination
/// receiving at least `victim_pps` of it, at least `flood_min_pps`.
fn protocol_flood(iv: &Interval<'_>, sources: &Sources, f: &Flood) -> Vec<BlockDecision> {
    let secs = sources.secs;
    let vic = victims(iv, secs, f.victim_pps, f.of_record);
    let tow = toward(iv, secs, &vic, f.of_record);
    let mut out = Vec::new();
    for s in &sources.list {
        let n = (f.of_source)(s);
        let share = s.share(n);
        if n == 0 || share < f.min_share {
            continue;
        }
        let rate = n as f64 / secs;
        let reason = if rate >= f.min_pps {
            format!(
                "{} {} pps (>= {}), {}% of its packets (>= {}%)",
                si(rate),
                f.proto,
                si(f.min_pps),
                fixed(share * 100.0, 0),
                fixed(f.min_share * 100.0, 0)
            )
        } else if let Some(&(r, dst)) = tow.get(&s.src) {
            if r < f.flood_min_pps || r <= 0.0 {
                continue;
            }
            format!(
                "{} {p} pps (>= {}) to {dst}, a {p}-flood victim receiving {} {p} pps (>= {}); {}% of its packets",
                si(r),
                si(f.flood_min_pps),
                si(vic.get(&dst).copied().unwrap_or(0.0)),
                si(f.victim_pps),
                fixed(share * 100.0, 0),
                p = f.proto,
            )
        } else {
            continue;
        };
        out.push(BlockDecision {
            prefix: Prefix::host(s.src),
            detector: f.detector,
            reason,
            pps: s.pps,
            bps: s.bps,
        });
    }
    out
}
