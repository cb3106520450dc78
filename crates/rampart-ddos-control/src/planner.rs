//! Offload planner: Algorithm 1 of Miano et al., IEEE Access 2019.
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

use std::collections::HashSet;

use rustc_hash::FxHashMap as HashMap;

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
    let mut m: HashMap<Prefix, f64> =
        HashMap::with_capacity_and_hasher(rates.len(), Default::default());
    for &(p, r) in rates {
        let r = if r.is_finite() && r > 0.0 { r } else { 0.0 };
        *m.entry(p).or_default() += r;
    }
    m
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use super::*;

    /// Source `i`: IPv4 for even i, IPv6 for odd i (both families mixed).
    fn src(i: u32) -> Prefix {
        if i & 1 == 0 {
            Prefix::host(IpAddr::V4(Ipv4Addr::from(0xac10_0000 + i)))
        } else {
            Prefix::host(IpAddr::V6(Ipv6Addr::from(
                0xfd66_u128 << 112 | u128::from(i),
            )))
        }
    }

    fn cfg(capacity: usize, max_updates: usize, tmin: f64, tmax: f64) -> PlannerConfig {
        PlannerConfig {
            capacity,
            max_updates,
            host_capacity_pps: 1e6,
            threshold_max: tmax,
            threshold_min: tmin,
            min_pps: 1.0,
        }
    }

    /// The oracle, written independently of the planner: sort everything
    /// eligible by (rate desc, prefix asc), take K.
    fn oracle(rates: &[(Prefix, f64)], k: usize, min_pps: f64) -> Vec<Prefix> {
        let mut v: Vec<(Prefix, f64)> = rates
            .iter()
            .copied()
            .filter(|&(_, r)| r >= min_pps && r > 0.0)
            .collect();
        v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
        v.into_iter().take(k).map(|(p, _)| p).collect()
    }

    fn apply(hw: &mut HashSet<Prefix>, plan: &Plan) {
        for p in &plan.from_hw {
            assert!(hw.remove(p));
        }
        for p in &plan.to_hw {
            assert!(hw.insert(*p));
        }
    }

    /// Every invariant of one plan.
    fn check(
        pl: &Planner,
        c: &PlannerConfig,
        rates: &[(Prefix, f64)],
        in_hw: &HashSet<Prefix>,
        plan: &Plan,
    ) -> Result<(), TestCaseError> {
        let rate: HashMap<Prefix, f64> = rates.iter().copied().collect();
        let top = oracle(rates, c.capacity, c.min_pps);
        let top_set: HashSet<Prefix> = top.iter().copied().collect();
        // Update bound.
        prop_assert!(
            plan.updates() <= c.max_updates,
            "{} updates",
            plan.updates()
        );
        // No duplicates; removes only what is in; adds only what is not.
        let adds: HashSet<Prefix> = plan.to_hw.iter().copied().collect();
        let rems: HashSet<Prefix> = plan.from_hw.iter().copied().collect();
        prop_assert_eq!(adds.len(), plan.to_hw.len());
        prop_assert_eq!(rems.len(), plan.from_hw.len());
        prop_assert!(rems.iter().all(|p| in_hw.contains(p)));
        prop_assert!(adds.iter().all(|p| !in_hw.contains(p)));
        // Capacity.
        let after = in_hw.len() - rems.len() + adds.len();
        if in_hw.len() <= c.capacity {
            prop_assert!(after <= c.capacity, "{} > K = {}", after, c.capacity);
        } else {
            prop_assert!(after <= in_hw.len());
        }
        // Adds are oracle top-K members (blocked, eligible).
        prop_assert!(adds.iter().all(|p| top_set.contains(p)));
        // Threshold: θ from the formula, and every removal of a blocked
        // top-K outsider is paid for by a candidate ≥ θ × its rate (unless
        // it sheds an over-full tier); top-K members are never removed.
        let total: f64 = rates.iter().map(|r| r.1).sum();
        let theta = c.threshold_max
            - (c.threshold_max - c.threshold_min) * (total / c.host_capacity_pps).min(1.0);
        prop_assert!((pl.threshold() - theta).abs() < 1e-9);
        prop_assert!(
            pl.threshold() >= c.threshold_min - 1e-12 && pl.threshold() <= c.threshold_max + 1e-12
        );
        let best_cand = top
            .iter()
            .filter(|p| !in_hw.contains(p))
            .map(|p| rate[p])
            .fold(0.0, f64::max);
        let over = in_hw.iter().filter(|p| !rate.contains_key(p)).count();
        let shed_allowed = (in_hw.len() - over.min(in_hw.len())) > c.capacity;
        for p in &rems {
            match rate.get(p) {
                None => {} // stale: no longer blocked
                Some(&r) => {
                    prop_assert!(!top_set.contains(p), "removed top-K member {}", p);
                    if !shed_allowed {
                        prop_assert!(
                            r <= 0.0 || best_cand / r >= pl.threshold() - 1e-12,
                            "removed {} at {} for best candidate {} (θ {})",
                            p,
                            r,
                            best_cand,
                            pl.threshold()
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Rates: `n` sources, values from a small set so ties happen.
    fn rates_strategy(max_n: usize) -> impl Strategy<Value = Vec<(Prefix, f64)>> {
        prop::collection::vec(
            prop_oneof![
                Just(0.0),
                1.0..1e6f64,
                (1u32..20).prop_map(|x| f64::from(x) * 100.0)
            ],
            0..max_n,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, r)| (src(i as u32), r))
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn invariants_hold_for_any_input(
            rates in rates_strategy(120),
            hw_pick in prop::collection::vec(0u32..160, 0..80),
            k in 0usize..40,
            m in 1usize..20,
            tmin in 1.0f64..3.0,
            extra in 0.0f64..3.0,
        ) {
            let c = cfg(k, m, tmin, tmin + extra);
            let mut pl = Planner::new(&c);
            // In hardware: some blocked sources, some stale (i >= rates.len()),
            // possibly more than K (capacity lowered).
            let in_hw: HashSet<Prefix> = hw_pick.into_iter().map(src).collect();
            let plan = pl.plan(&rates, &in_hw);
            check(&pl, &c, &rates, &in_hw, &plan)?;
            // Same input, any HashSet order: same plan.
            let again: HashSet<Prefix> = { let mut v: Vec<_> = in_hw.iter().copied().collect(); v.reverse(); v.into_iter().collect() };
            prop_assert_eq!(Planner::new(&c).plan(&rates, &again), plan);
        }

        #[test]
        fn converges_to_the_oracle_top_k_then_stops(
            rates in rates_strategy(150),
            hw_pick in prop::collection::vec(0u32..200, 0..60),
            k in 1usize..50,
            m in 1usize..16,
        ) {
            // θ = 1 at any load: every swap toward the oracle is allowed.
            let c = cfg(k, m, 1.0, 1.0);
            let mut pl = Planner::new(&c);
            let mut hw: HashSet<Prefix> = hw_pick.into_iter().map(src).take(k).collect();
            let top: HashSet<Prefix> = oracle(&rates, k, c.min_pps).into_iter().collect();
            // Changes needed: adds of missing top-K members, removes of
            // everything else.
            let d = top.difference(&hw).count() + hw.difference(&top).count();
            let bound = d.div_ceil(m) + 1;
            let rate: HashMap<Prefix, f64> = rates.iter().copied().collect();
            // Converged: the oracle top-K is in hardware; anything else left
            // there is a blocked source below min_pps that no candidate
            // needs the slot of (removing it would cost an update for
            // nothing).
            let done = |hw: &HashSet<Prefix>| {
                top.is_subset(hw)
                    && hw.difference(&top).all(|p| rate.get(p).is_some_and(|&r| r < c.min_pps))
            };
            let mut steps = 0;
            while !done(&hw) {
                prop_assert!(steps < bound, "not converged after {} intervals (bound {}, d {}, m {})", steps, bound, d, m);
                let plan = pl.plan(&rates, &hw);
                check(&pl, &c, &rates, &hw, &plan)?;
                prop_assert!(!plan.is_empty(), "stuck at {:?}", hw);
                apply(&mut hw, &plan);
                steps += 1;
            }
            // No churn once there.
            for _ in 0..3 {
                prop_assert!(pl.plan(&rates, &hw).is_empty());
            }
        }

        #[test]
        fn stable_rates_settle_without_churn_at_any_threshold(
            rates in rates_strategy(100),
            hw_pick in prop::collection::vec(0u32..120, 0..40),
            k in 0usize..40,
            m in 1usize..10,
            tmin in 1.0f64..4.0,
            extra in 0.0f64..4.0,
        ) {
            let c = cfg(k, m, tmin, tmin + extra);
            let mut pl = Planner::new(&c);
            let mut hw: HashSet<Prefix> = hw_pick.into_iter().map(src).take(k).collect();
            let mut changes = 0;
            let limit = 2 * (rates.len() + k) + 2;
            let mut settled = false;
            for _ in 0..limit {
                let plan = pl.plan(&rates, &hw);
                check(&pl, &c, &rates, &hw, &plan)?;
                if plan.is_empty() { settled = true; break; }
                changes += plan.updates();
                apply(&mut hw, &plan);
            }
            prop_assert!(settled, "still changing after {} intervals ({} updates)", limit, changes);
            for _ in 0..3 {
                prop_assert!(pl.plan(&rates, &hw).is_empty(), "churn");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The bound: from an empty hardware tier, the oracle top-K
        /// within ⌈K/max_updates⌉ + 1 intervals, at any load (free slots
        /// need no threshold), then no change.
        #[test]
        fn from_empty_the_oracle_within_k_over_m_plus_one(
            rates in rates_strategy(200),
            k in 1usize..64,
            m in 1usize..16,
            tmin in 1.0f64..3.0,
            extra in 0.0f64..3.0,
        ) {
            let c = cfg(k, m, tmin, tmin + extra);
            let mut pl = Planner::new(&c);
            let top: HashSet<Prefix> = oracle(&rates, k, c.min_pps).into_iter().collect();
            let mut hw = HashSet::new();
            for _ in 0..k.div_ceil(m) + 1 {
                let plan = pl.plan(&rates, &hw);
                check(&pl, &c, &rates, &hw, &plan)?;
                apply(&mut hw, &plan);
            }
            prop_assert_eq!(&hw, &top);
            prop_assert!(pl.plan(&rates, &hw).is_empty());
        }
    }

    #[test]
    fn from_empty_converges_within_k_over_m_plus_one() {
        let rates: Vec<(Prefix, f64)> = (0..1000).map(|i| (src(i), f64::from(1000 - i))).collect();
        let (k, m) = (100, 7);
        let mut pl = Planner::new(&cfg(k, m, 1.0, 1.0));
        let mut hw = HashSet::new();
        let mut steps = 0;
        while !pl.plan(&rates, &hw).is_empty() {
            let p = pl.plan(&rates, &hw);
            apply(&mut hw, &p);
            steps += 1;
        }
        assert!(steps <= k.div_ceil(m) + 1, "{steps}");
        let top: HashSet<Prefix> = oracle(&rates, k, 1.0).into_iter().collect();
        assert_eq!(hw, top);
    }

    #[test]
    fn threshold_falls_linearly_with_the_attack_volume() {
        let pl = Planner::new(&PlannerConfig {
            host_capacity_pps: 1e6,
            threshold_max: 3.0,
            threshold_min: 1.2,
            ..PlannerConfig::default()
        });
        assert_eq!(pl.threshold_for(0.0), 3.0);
        assert!((pl.threshold_for(5e5) - 2.1).abs() < 1e-12);
        assert!((pl.threshold_for(1e6) - 1.2).abs() < 1e-12);
        assert!((pl.threshold_for(5e7) - 1.2).abs() < 1e-12);
        assert!((pl.threshold_for(f64::INFINITY) - 1.2).abs() < 1e-12);
    }

    #[test]
    fn fills_free_slots_first_then_swaps_only_past_the_threshold() {
        let c = cfg(2, 8, 1.1, 2.0);
        let (a, b, x) = (src(0), src(2), src(4));
        let mut pl = Planner::new(&c);
        // Free slots: no threshold.
        let plan = pl.plan(&[(a, 100.0), (b, 150.0)], &HashSet::new());
        assert_eq!(plan.to_hw, vec![b, a]);
        let hw: HashSet<Prefix> = [a, b].into();
        // Idle host (total 400 pps ≪ 1 Mpps, θ ≈ 2): x at 1.5 × a waits.
        let plan = pl.plan(&[(a, 100.0), (b, 150.0), (x, 150.0)], &hw);
        assert!(plan.is_empty(), "{plan:?}");
        assert_eq!(pl.last_stats().refused, 1);
        assert!(pl.threshold() > 1.99);
        // Host overloaded (the same ratio, 1 Mpps of attack): θ = 1.1, swap.
        let plan = pl.plan(&[(a, 100.0), (b, 150.0), (x, 150.0), (src(6), 1e6)], &hw);
        assert_eq!(pl.threshold(), 1.1);
        assert_eq!(plan.from_hw, vec![a]);
        assert_eq!(plan.to_hw, vec![src(6)]);
    }

    #[test]
    fn an_odd_budget_removes_the_victim_and_adds_next_interval() {
        let c = cfg(1, 1, 1.0, 1.0);
        let (a, b) = (src(0), src(2));
        let mut pl = Planner::new(&c);
        let mut hw: HashSet<Prefix> = [a].into();
        let rates = [(a, 10.0), (b, 1000.0)];
        let p1 = pl.plan(&rates, &hw);
        assert_eq!((p1.from_hw.clone(), p1.to_hw.clone()), (vec![a], vec![]));
        apply(&mut hw, &p1);
        let p2 = pl.plan(&rates, &hw);
        assert_eq!(p2.to_hw, vec![b]);
        apply(&mut hw, &p2);
        assert!(pl.plan(&rates, &hw).is_empty());
    }

    #[test]
    fn stale_entries_go_first_and_zero_capacity_plans_nothing_new() {
        let (a, b, gone) = (src(0), src(2), src(8));
        let mut pl = Planner::new(&cfg(2, 1, 1.0, 1.0));
        let hw: HashSet<Prefix> = [a, gone].into();
        let plan = pl.plan(&[(a, 5.0), (b, 500.0)], &hw);
        assert_eq!(plan.from_hw, vec![gone]);
        assert!(plan.to_hw.is_empty());
        let mut pl = Planner::new(&cfg(0, 10, 1.0, 1.0));
        let plan = pl.plan(&[(a, 5.0), (b, 500.0)], &[a].into());
        assert_eq!(plan.from_hw, vec![a]);
        assert!(plan.to_hw.is_empty());
        assert!(pl.plan(&[(a, 5.0)], &HashSet::new()).is_empty());
    }

    #[test]
    fn sources_below_min_pps_never_get_a_rule() {
        let mut pl = Planner::new(&PlannerConfig {
            min_pps: 50.0,
            ..cfg(10, 10, 1.0, 1.0)
        });
        let plan = pl.plan(
            &[(src(0), 49.0), (src(2), 50.0), (src(4), 0.0)],
            &HashSet::new(),
        );
        assert_eq!(plan.to_hw, vec![src(2)]);
    }

    #[test]
    fn stats_report_hardware_and_oracle_share() {
        let mut pl = Planner::new(&cfg(2, 10, 1.0, 1.0));
        let rates = [(src(0), 10.0), (src(2), 20.0), (src(4), 30.0)];
        pl.plan(&rates, &HashSet::new());
        let s = pl.last_stats();
        assert_eq!(s.total_pps, 60.0);
        assert_eq!(s.oracle_pps, 50.0);
        assert_eq!(s.hw_pps, 50.0);
    }

    #[test]
    fn bad_config_is_refused_with_the_key() {
        let e = Planner::try_new(&PlannerConfig {
            max_updates: 0,
            ..PlannerConfig::default()
        })
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "offload.max_updates = 0: out of range, allowed 1 <= x <= 16777216"
        );
        let e = Planner::try_new(&PlannerConfig {
            threshold_min: 3.0,
            threshold_max: 2.0,
            ..PlannerConfig::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("offload.threshold_min: 3 is above offload.threshold_max = 2"),
            "{e}"
        );
        let e = Planner::try_new(&PlannerConfig {
            threshold_min: 0.5,
            ..PlannerConfig::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("offload.threshold_min = 0.5: out of range, allowed 1 <= x <= 1000"),
            "{e}"
        );
        // new() clamps instead.
        let pl = Planner::new(&PlannerConfig {
            threshold_min: 0.5,
            ..PlannerConfig::default()
        });
        assert_eq!(pl.config().threshold_min, 1.0);
    }
}
