//! Rate detector: per-source pps/bps above a baseline learned from normal
//! intervals (see [`RateConfig`]).

use serde::Serialize;

use super::{si, Detector};
use crate::config::RateConfig;
use crate::sources::{quantile, Sources};
use crate::{BlockDecision, Interval, Prefix};

/// What the rate detector has learned (for metrics and the API).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateStatus {
    /// Learned per-source pps baseline (EWMA of the quantile); 0 before
    /// the first normal interval.
    pub baseline_pps: f64,
    /// Learned per-source bps baseline.
    pub baseline_bps: f64,
    /// Packet-rate threshold in force.
    pub threshold_pps: f64,
    /// Bit-rate threshold in force.
    pub threshold_bps: f64,
    /// Normal intervals learned.
    pub learned: u64,
}

/// Per-source rate above `max(floor, multiplier × learned baseline)`.
#[derive(Debug, Clone)]
pub struct RateDetector {
    cfg: RateConfig,
    baseline_pps: f64,
    baseline_bps: f64,
    learned: u64,
    flagged: bool,
    /// Driven by [`crate::Detection`]: learn only once it has judged the
    /// interval normal ([`Detector::interval_verdict`]); standalone, the
    /// detector learns from every interval it does not flag.
    driven: bool,
    /// The last interval's sample, waiting for the verdict.
    pending: Option<(f64, f64)>,
}

impl RateDetector {
    /// A detector with nothing learned (call [`RateConfig::validate`]
    /// first; [`crate::Detection::new`] does).
    pub fn new(cfg: &RateConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            baseline_pps: 0.0,
            baseline_bps: 0.0,
            learned: 0,
            flagged: false,
            driven: false,
            pending: None,
        }
    }

    fn warm(&self) -> bool {
        self.learned >= u64::from(self.cfg.warmup_intervals)
    }

    /// Thresholds in force (pps, bps).
    pub fn thresholds(&self) -> (f64, f64) {
        if self.warm() {
            (
                self.cfg
                    .min_pps
                    .max(self.cfg.multiplier * self.baseline_pps),
                self.cfg
                    .min_bps
                    .max(self.cfg.multiplier * self.baseline_bps),
            )
        } else {
            (
                self.cfg.min_pps.max(self.cfg.warmup_pps),
                self.cfg.min_bps.max(self.cfg.warmup_bps),
            )
        }
    }

    /// What it has learned.
    pub fn status(&self) -> RateStatus {
        let (tp, tb) = self.thresholds();
        RateStatus {
            baseline_pps: self.baseline_pps,
            baseline_bps: self.baseline_bps,
            threshold_pps: tp,
            threshold_bps: tb,
            learned: self.learned,
        }
    }

    /// Start from a known baseline (e.g. restored after a restart); counts
    /// as warmed up.
    pub fn set_baseline(&mut self, pps: f64, bps: f64) {
        if pps.is_finite() && pps >= 0.0 && bps.is_finite() && bps >= 0.0 {
            self.baseline_pps = pps;
            self.baseline_bps = bps;
            self.learned = self.learned.max(u64::from(self.cfg.warmup_intervals));
        }
    }

    /// The interval's learning sample: the per-source rate quantiles,
    /// capped at the current thresholds.
    fn sample(&self, sources: &Sources, tp: f64, tb: f64) -> Option<(f64, f64)> {
        if sources.is_empty() {
            return None;
        }
        let mut pps: Vec<f64> = sources.list.iter().map(|s| s.pps).collect();
        let mut bps: Vec<f64> = sources.list.iter().map(|s| s.bps).collect();
        let qp = quantile(&mut pps, self.cfg.quantile).min(tp);
        let qb = quantile(&mut bps, self.cfg.quantile).min(tb);
        Some((qp, qb))
    }

    fn learn(&mut self, (qp, qb): (f64, f64)) {
        if self.learned == 0 {
            self.baseline_pps = qp;
            self.baseline_bps = qb;
        } else {
            // EWMA, rising by at most max_growth per interval: sources that
            // ramp faster than that cannot drag the threshold along.
            let (a, g) = (self.cfg.alpha, 1.0 + self.cfg.max_growth);
            let step = |b: f64, q: f64| {
                let n = b + a * (q - b);
                if b > 0.0 {
                    n.min(b * g)
                } else {
                    n
                }
            };
            self.baseline_pps = step(self.baseline_pps, qp);
            self.baseline_bps = step(self.baseline_bps, qb);
        }
        self.learned += 1;
    }
}

impl Detector for RateDetector {
    fn name(&self) -> &'static str {
        "rate"
    }

    fn observe(&mut self, iv: &Interval<'_>) -> Vec<BlockDecision> {
        let s = Sources::from_interval(iv);
        self.observe_sources(iv, &s)
    }

    fn observe_sources(&mut self, _iv: &Interval<'_>, sources: &Sources) -> Vec<BlockDecision> {
        let (tp, tb) = self.thresholds();
        let basis = if self.warm() {
            format!(
                "max(floor, {} × baseline {} pps / {} bps, p{} of per-source rates over {} normal intervals)",
                self.cfg.multiplier,
                si(self.baseline_pps),
                si(self.baseline_bps),
                self.cfg.quantile * 100.0,
                self.learned
            )
        } else {
            format!(
                "warm-up threshold ({} of {} normal intervals learned)",
                self.learned, self.cfg.warmup_intervals
            )
        };
        let mut out = Vec::new();
        for s in &sources.list {
            let over_p = s.pps > tp;
            let over_b = s.bps > tb;
            if !(over_p || over_b) {
                continue;
            }
            let what = match (over_p, over_b) {
                (true, true) => format!(
                    "{} pps > {} pps and {} bps > {} bps",
                    si(s.pps),
                    si(tp),
                    si(s.bps),
                    si(tb)
                ),
                (true, false) => format!("{} pps > threshold {} pps", si(s.pps), si(tp)),
                _ => format!("{} bps > threshold {} bps", si(s.bps), si(tb)),
            };
            out.push(BlockDecision {
                prefix: Prefix::host(s.src),
                detector: "rate",
                reason: format!("{what}; threshold = {basis}"),
                pps: s.pps,
                bps: s.bps,
            });
        }
        self.flagged = !out.is_empty();
        self.pending = None;
        if !self.flagged {
            if let Some(q) = self.sample(sources, tp, tb) {
                if self.driven {
                    self.pending = Some(q);
                } else {
                    self.learn(q);
                }
            }
        }
        out
    }

    fn under_attack(&self) -> bool {
        self.flagged
    }

    fn interval_verdict(&mut self, normal: bool) {
        self.driven = true;
        if let Some(q) = self.pending.take() {
            if normal {
                self.learn(q);
            }
        }
    }

    fn baseline(&self) -> Option<(f64, f64)> {
        self.warm()
            .then_some((self.baseline_pps, self.baseline_bps))
    }

    fn restore_baseline(&mut self, pps: f64, bps: f64) {
        self.set_baseline(pps, bps);
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let st = self.status();
        vec![
            ("baseline_pps", st.baseline_pps),
            ("baseline_bps", st.baseline_bps),
            ("threshold_pps", st.threshold_pps),
            ("threshold_bps", st.threshold_bps),
            ("learned_intervals", st.learned as f64),
        ]
    }
}
