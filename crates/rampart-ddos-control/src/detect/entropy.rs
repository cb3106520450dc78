//! Entropy detector: change of the source, destination and
//! destination-port entropy between consecutive intervals (see
//! [`EntropyConfig`]).

use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;

use crate::features::linear_count;
use serde::Serialize;

use super::{fixed, si, Detector};
use crate::config::EntropyConfig;
use crate::sources::{quantile, Sources};
use crate::{BlockDecision, Interval, Prefix};

/// Entropies of the last interval (bits) and the learned mean changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct EntropyStatus {
    /// Source entropy of the last interval judged.
    pub h_src: f64,
    /// Destination entropy.
    pub h_dst: f64,
    /// Destination-port entropy (estimated, see [`EntropyConfig`]).
    pub h_dport: f64,
    /// Learned mean |change| per interval of the three (src, dst, dport).
    pub mean_delta: [f64; 3],
    /// Normal intervals learned.
    pub learned: u64,
    /// In an anomaly now.
    pub anomaly: bool,
    /// Consecutive anomalous intervals.
    pub anomaly_intervals: u32,
}

/// The last normal interval: what an anomaly is measured against.
#[derive(Debug, Clone, Default)]
struct Reference {
    h: [f64; 3],
    shares: HashMap<IpAddr, f64>,
    packets: u64,
    median_pps: f64,
}

const NAMES: [&str; 3] = ["source", "destination", "destination-port"];

/// Entropy-change anomaly detector.
#[derive(Debug, Clone)]
pub struct EntropyDetector {
    cfg: EntropyConfig,
    prev: Option<[f64; 3]>,
    reference: Option<Reference>,
    mean_delta: [f64; 3],
    deltas_learned: u64,
    learned: u64,
    anomaly: u32,
    status: EntropyStatus,
    flagged: bool,
}

/// Shannon entropy (bits) of counts.
fn entropy(counts: impl Iterator<Item = u64>, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let t = total as f64;
    counts
        .filter(|&c| c > 0)
        .map(|c| {
            let p = c as f64 / t;
            -p * p.log2()
        })
        .sum()
}

/// (H_src, H_dst, H_dport) of an interval.
fn entropies(iv: &Interval<'_>, sources: &Sources) -> [f64; 3] {
    let total = sources.packets;
    let h_src = entropy(sources.list.iter().map(|s| s.packets), total);
    let mut per_dst: HashMap<IpAddr, (u64, [u64; 2])> = HashMap::default();
    for r in iv.records.iter().filter(|r| r.packets > 0) {
        let e = per_dst.entry(r.dst).or_insert((0, [0, 0]));
        e.0 += r.packets;
        e.1[0] |= r.dport_sketch[0];
        e.1[1] |= r.dport_sketch[1];
    }
    let h_dst = entropy(per_dst.values().map(|v| v.0), total);
    // Σ_d p_d · log2(n̂_d): the port entropy at each destination if its
    // packets were spread evenly over its distinct ports.
    let h_dport = if total == 0 {
        0.0
    } else {
        per_dst
            .values()
            .map(|(c, sk)| {
                let n = linear_count(sk).max(1.0);
                *c as f64 / total as f64 * n.log2()
            })
            .sum()
    };
    [h_src, h_dst, h_dport]
}

impl EntropyDetector {
    /// From a validated config.
    pub fn new(cfg: &EntropyConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            prev: None,
            reference: None,
            mean_delta: [0.0; 3],
            deltas_learned: 0,
            learned: 0,
            anomaly: 0,
            status: EntropyStatus::default(),
            flagged: false,
        }
    }

    /// Last entropies and the learned mean changes.
    pub fn status(&self) -> EntropyStatus {
        self.status
    }

    fn limit(&self, i: usize) -> f64 {
        self.cfg
            .min_delta_bits
            .max(self.cfg.sensitivity * self.mean_delta[i])
    }

    fn reference_of(h: [f64; 3], sources: &Sources) -> Reference {
        let total = sources.packets.max(1) as f64;
        let mut pps: Vec<f64> = sources.list.iter().map(|s| s.pps).collect();
        Reference {
            h,
            shares: sources
                .list
                .iter()
                .map(|s| (s.src, s.packets as f64 / total))
                .collect(),
            packets: sources.packets,
            median_pps: quantile(&mut pps, 0.5),
        }
    }

    fn learn(&mut self, h: [f64; 3], sources: &Sources) {
        if let Some(p) = self.prev {
            for (i, m) in self.mean_delta.iter_mut().enumerate() {
                let d = (h[i] - p[i]).abs();
                if self.deltas_learned == 0 {
                    *m = d;
                } else {
                    *m += self.cfg.alpha * (d - *m);
                }
            }
            self.deltas_learned += 1;
        }
        self.learned += 1;
        self.reference = Some(Self::reference_of(h, sources));
    }

    /// The sources driving the change from the reference, eligible ones
    /// only (see [`EntropyConfig`]).
    fn drivers(&self, sources: &Sources, why: &str) -> Vec<BlockDecision> {
        let Some(r) = &self.reference else {
            return Vec::new();
        };
        let total = sources.packets.max(1) as f64;
        // An unseen source had at most half a packet in the reference.
        let eps = 0.5 / r.packets.max(1) as f64;
        let mut contrib: Vec<(f64, usize)> = sources
            .list
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let p = s.packets as f64 / total;
                let q = r.shares.get(&s.src).copied().unwrap_or(0.0).max(eps);
                let c = p * (p / q).log2();
                (c > 0.0).then_some((c, i))
            })
            .collect();
        contrib.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(sources.list[a.1].src.cmp(&sources.list[b.1].src))
        });
        let positive: f64 = contrib.iter().map(|c| c.0).sum();
        let min_pps = self
            .cfg
            .min_pps
            .max(self.cfg.driver_rate_factor * r.median_pps);
        let mut covered = 0.0;
        // Contribution of the source that completed the cover: sources
        // within a factor 2 of it are drivers too (otherwise near-equal
        // attackers would straddle the cut and take many intervals).
        let mut cut: Option<f64> = None;
        let mut out = Vec::new();
        for (c, i) in contrib {
            if matches!(cut, Some(k) if c < k / 2.0) {
                break;
            }
            covered += c;
            if cut.is_none() && covered >= self.cfg.driver_share * positive {
                cut = Some(c);
            }
            let s = &sources.list[i];
            if s.pps < min_pps {
                continue;
            }
            let q = r.shares.get(&s.src).copied().unwrap_or(0.0);
            out.push(BlockDecision {
                prefix: Prefix::host(s.src),
                detector: "entropy",
                reason: format!(
                    "{why}; drives it: share {}% of packets (was {}%), {}% of the divergence from the last normal interval, {} pps >= {} pps (max(min_pps, {} × median {} pps))",
                    fixed(s.packets as f64 / total * 100.0, 3),
                    fixed(q * 100.0, 3),
                    fixed(if positive > 0.0 { c / positive * 100.0 } else { 0.0 }, 1),
                    si(s.pps),
                    si(min_pps),
                    self.cfg.driver_rate_factor,
                    si(r.median_pps)
                ),
                pps: s.pps,
                bps: s.bps,
            });
        }
        out
    }
}

impl Detector for EntropyDetector {
    fn name(&self) -> &'static str {
        "entropy"
    }

    fn observe(&mut self, iv: &Interval<'_>) -> Vec<BlockDecision> {
        let s = Sources::from_interval(iv);
        self.observe_sources(iv, &s)
    }

    fn observe_sources(&mut self, iv: &Interval<'_>, sources: &Sources) -> Vec<BlockDecision> {
        self.flagged = false;
        if sources.packets < self.cfg.min_packets || sources.is_empty() {
            // Too small to judge: nothing learned, nothing flagged.
            return Vec::new();
        }
        let h = entropies(iv, sources);
        let mut out = Vec::new();
        let warm = self.learned >= u64::from(self.cfg.warmup_intervals);
        match (
            warm,
            self.anomaly,
            self.prev,
            self.reference.as_ref().map(|r| r.h),
        ) {
            (true, 0, Some(prev), Some(_)) => {
                // Onset: a change between consecutive intervals.
                let jumps: Vec<String> = (0..3)
                    .filter(|&i| (h[i] - prev[i]).abs() > self.limit(i))
                    .map(|i| {
                        format!(
                            "{} entropy {:.2} -> {:.2} bits (|change| {:.2} > {:.2} = max({}, {} × mean change {:.3}))",
                            NAMES[i],
                            prev[i],
                            h[i],
                            (h[i] - prev[i]).abs(),
                            self.limit(i),
                            self.cfg.min_delta_bits,
                            self.cfg.sensitivity,
                            self.mean_delta[i]
                        )
                    })
                    .collect();
                if jumps.is_empty() {
                    self.learn(h, sources);
                } else {
                    self.anomaly = 1;
                    let why = format!("anomaly, interval {}: {}", iv.index, jumps.join(", "));
                    out = self.drivers(sources, &why);
                }
            }
            (true, n, _, Some(rh)) if n > 0 => {
                // In an anomaly: measured against the last normal interval.
                let devs: Vec<String> = (0..3)
                    .filter(|&i| (h[i] - rh[i]).abs() > self.limit(i))
                    .map(|i| {
                        format!(
                            "{} entropy {:.2} bits vs {:.2} before the anomaly (|change| {:.2} > {:.2})",
                            NAMES[i],
                            h[i],
                            rh[i],
                            (h[i] - rh[i]).abs(),
                            self.limit(i)
                        )
                    })
                    .collect();
                if devs.is_empty() {
                    // Back to normal: a new reference, but the return jump
                    // is not learned as an ordinary change.
                    self.anomaly = 0;
                    self.learned += 1;
                    self.reference = Some(Self::reference_of(h, sources));
                } else if n >= self.cfg.max_anomaly_intervals {
                    // A lasting shift: the new normal.
                    self.anomaly = 0;
                    self.learned += 1;
                    self.reference = Some(Self::reference_of(h, sources));
                } else {
                    self.anomaly = n + 1;
                    let why = format!("anomaly (interval {} of it): {}", n + 1, devs.join(", "));
                    out = self.drivers(sources, &why);
                }
            }
            _ => self.learn(h, sources),
        }
        self.prev = Some(h);
        self.flagged = !out.is_empty();
        self.status = EntropyStatus {
            h_src: h[0],
            h_dst: h[1],
            h_dport: h[2],
            mean_delta: self.mean_delta,
            learned: self.learned,
            anomaly: self.anomaly > 0,
            anomaly_intervals: self.anomaly,
        };
        out
    }

    fn under_attack(&self) -> bool {
        self.flagged
    }

    fn normal(&self) -> bool {
        self.anomaly == 0
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let st = self.status;
        vec![
            ("h_src", st.h_src),
            ("h_dst", st.h_dst),
            ("h_dport", st.h_dport),
            ("mean_delta_src", st.mean_delta[0]),
            ("mean_delta_dst", st.mean_delta[1]),
            ("mean_delta_dport", st.mean_delta[2]),
            ("anomaly", f64::from(u8::from(st.anomaly))),
        ]
    }
}
