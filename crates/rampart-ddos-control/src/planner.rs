//! Offload planner: the paper's Algorithm 1 (DESIGN §3).
//!
//! Each interval, given the rate of every blocked source (all tiers
//! summed) and what the hardware tier holds:
//!
//! 1. `top` = the K heaviest sources at or above `min_pps`, by rate
//!    descending, ties by prefix ascending (deterministic);
//! 2. hardware entries that are no longer blocked (absent from `rates`)
//!    are removed first;
//! 3. free slots are filled with the heaviest candidates (`top` − in
//!    hardware), no threshold;
//! 4. swaps: candidates by rate descending against victims (in hardware −
//!    `top`) by rate ascending; a pair is swapped while
//!    rate(candidate) / rate(victim) ≥ θ (a victim at 0 pps always
//!    qualifies). Candidates only get lighter and victims heavier along
//!    the lists, so the first pair that fails ends the swaps.
//!
//! θ = threshold_max − (threshold_max − threshold_min) · min(1, R / C),
//! R the total rate of all blocked sources, C = `host_capacity_pps`.
//!
//! Every add and every remove is one update; at most `max_updates` per
//! plan. When one update is left for a swap, the victim is removed alone
//! and its slot is filled by step 3 of the next plan. The caller installs
//! `to_hw` and removes `from_hw`; the XDP tier keeps every blocked source,
//! so no order of these changes lets a packet through.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::config::PlannerConfig;
use crate::Prefix;

/// Rule changes for the hardware tier.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Install in the hardware tier (in this order).
    pub to_hw: Vec<Prefix>,
    /// Remove from the hardware tier.
    pub from_hw: Vec<Prefix>,
}

impl Plan {
    /// Number of rule updates (adds + removes).
    pub fn updates(&self) -> usize {
        self.to_hw.len() + self.from_hw.len()
    }

    /// No change?
    pub fn is_empty(&self) -> bool {
        self.to_hw.is_empty() && self.from_hw.is_empty()
    }
}

/// What the last plan saw (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PlanStats {
    /// Total rate of all blocked sources (pps).
    pub total_pps: f64,
    /// Swap threshold used.
    pub threshold: f64,
    /// Rate of the blocked sources in the hardware tier after the plan
    /// (pps).
    pub hw_pps: f64,
    /// What the oracle top-K would hold (pps).
    pub oracle_pps: f64,
    /// Swaps refused by the threshold (the first failing pair ends the
    /// scan, so 0 or 1).
    pub refused: usize,
    /// Candidates left waiting for lack of update budget.
    pub deferred: usize,
}

/// The offload planner.
#[derive(Debug, Clone)]
pub struct Planner {
    cfg: PlannerConfig,
    threshold: f64,
    last: PlanStats,
}

impl Planner {
    /// A planner. Out-of-range values are clamped into their ranges
    /// ([`PlannerConfig::validate`] reports them; use
    /// [`Planner::try_new`] to refuse them).
    pub fn new(cfg: &PlannerConfig) -> Self {
        let mut c = cfg.clone();
        c.max_updates = c.max_updates.max(1);
        if !(c.host_capacity_pps.is_finite() && c.host_capacity_pps > 0.0) {
            c.host_capacity_pps = 5e6;
        }
        let fix = |x: f64, d: f64| {
            if x.is_finite() {
                x.clamp(1.0, 1000.0)
            } else {
                d
            }
        };
        c.threshold_max = fix(c.threshold_max, 2.0);
        c.threshold_min = fix(c.threshold_min, 1.1).min(c.threshold_max);
        if !(c.min_pps.is_finite() && c.min_pps >= 0.0) {
            c.min_pps = 1.0;
        }
        Self {
            threshold: c.threshold_max,
            cfg: c,
            last: PlanStats::default(),
        }
    }

    /// Like [`Planner::new`], refusing bad values.
    ///
    /// # Errors
    /// The first bad key of `cfg`.
    pub fn try_new(cfg: &PlannerConfig) -> Result<Self, crate::ConfigError> {
        cfg.validate()?;
        Ok(Self::new(cfg))
    }

    /// The configuration in force (after clamping).
    pub fn config(&self) -> &PlannerConfig {
        &self.cfg
    }

    /// θ for a total attack rate `total_pps`.
    pub fn threshold_for(&self, total_pps: f64) -> f64 {
        let load = if total_pps.is_finite() {
            (total_pps.max(0.0) / self.cfg.host_capacity_pps).min(1.0)
        } else {
            1.0
        };
        self.cfg.threshold_max - (self.cfg.threshold_max - self.cfg.threshold_min) * load
    }

    /// The oracle: the K heaviest sources at or above `min_pps`, rate
    /// descending, ties by prefix ascending. Duplicate prefixes in `rates`
    /// are summed; non-finite or negative rates count as 0.
    pub fn top_k(&self, rates: &[(Prefix, f64)]) -> Vec<(Prefix, f64)> {
        let mut all: Vec<(Prefix, f64)> = merge(rates).into_iter().collect();
        all.retain(|&(_, r)| r >= self.cfg.min_pps && r > 0.0);
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(self.cfg.capacity);
        all
    }

    /// `rates`: pps of every blocked source over all tiers; `in_hw`: what
    /// the hardware tier holds now.
    ///
    /// Invariants: |in_hw| − |from_hw| + |to_hw| ≤ capacity (when in_hw
    /// itself fits); |to_hw| + |from_hw| ≤ max_updates; `from_hw` ⊆ in_hw,
    /// `to_hw` ∩ in_hw = ∅, no duplicates; an offloaded, still-blocked
    /// source is removed only for a candidate at least θ times heavier.
    pub fn plan(&mut self, rates: &[(Prefix, f64)], in_hw: &HashSet<Prefix>) -> Plan {
        let rate = merge(rates);
        let total: f64 = rate.values().sum();
        let theta = self.threshold_for(total);
        self.threshold = theta;
        let top = self.top_k(rates);
        let top_set: HashSet<Prefix> = top.iter().map(|&(p, _)| p).collect();
        let mut budget = self.cfg.max_updates;
        let mut plan = Plan::default();
        let mut stats = PlanStats {
            total_pps: total,
            threshold: theta,
            oracle_pps: top.iter().map(|&(_, r)| r).sum(),
            ..PlanStats::default()
        };

        // Sorted copy of the hardware set: deterministic whatever the
        // HashSet's order.
        let mut hw: Vec<Prefix> = in_hw.iter().copied().collect();
        hw.sort();

        // 2. Stale entries (no longer blocked) go first.
        let mut occupied = hw.len();
        for p in hw.iter().filter(|p| !rate.contains_key(p)) {
            if budget == 0 {
                break;
            }
            plan.from_hw.push(*p);
            budget -= 1;
            occupied -= 1;
        }

        // Candidates (rate descending) and victims (rate ascending, ties by
        // prefix descending: the mirror of the top-K order).
        let mut cands = top
            .iter()
            .filter(|(p, _)| !in_hw.contains(p))
            .copied()
            .peekable();
        let mut victims: Vec<(Prefix, f64)> = hw
            .iter()
            .filter(|p| rate.contains_key(p) && !top_set.contains(p))
            .map(|p| (*p, rate[p]))
            .collect();
        victims.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));

        // A hardware tier holding more than K (capacity lowered): shed the
        // lightest entries outside the top-K.
        let mut victims = victims.into_iter().peekable();
        while occupied > self.cfg.capacity && budget > 0 {
            let Some((v, _)) = victims.next() else { break };
            plan.from_hw.push(v);
            budget -= 1;
            occupied -= 1;
        }

        // 3. Fill free slots.
        while occupied < self.cfg.capacity && budget > 0 {
            let Some((c, _)) = cands.next() else { break };
            plan.to_hw.push(c);
            budget -= 1;
            occupied += 1;
        }

        // 4. Swaps.
        while budget > 0 {
            let Some(&(c, rc)) = cands.peek() else { break };
            let Some((v, rv)) = victims.next() else { break };
            let ok = rv <= 0.0 || rc / rv >= theta;
            if !ok {
                stats.refused += 1;
                break;
            }
            plan.from_hw.push(v);
            budget -= 1;
            if budget > 0 {
                plan.to_hw.push(c);
                cands.next();
                budget -= 1;
            }
        }
        stats.deferred = cands.count();

        let removed: HashSet<&Prefix> = plan.from_hw.iter().collect();
        stats.hw_pps = hw
            .iter()
            .filter(|p| !removed.contains(p))
            .chain(plan.to_hw.iter())
            .map(|p| rate.get(p).copied().unwrap_or(0.0))
            .sum();
        self.last = stats;
        plan
    }

    /// Current swap threshold (for metrics): θ of the last plan
    /// (`threshold_max` before the first).
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// What the last plan saw.
    pub fn last_stats(&self) -> PlanStats {
        self.last
    }
}

/// Rates by prefix (duplicates summed, bad values as 0).
fn merge(rates: &[(Prefix, f64)]) -> HashMap<Prefix, f64> {
    let mut m: HashMap<Prefix, f64> = HashMap::with_capacity(rates.len());
    for &(p, r) in rates {
        let r = if r.is_finite() && r > 0.0 { r } else { 0.0 };
        *m.entry(p).or_default() += r;
    }
    m
}
