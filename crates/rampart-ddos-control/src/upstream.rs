//! The upstream planner: when to ask the router in front of the host
//! (over BGP: FlowSpec, RTBH) to drop what the host tiers already drop,
//! and what to ask for.
//!
//! No host tier helps once an attack fills the host's *link*: the packets
//! the XDP blacklist drops have already crossed it. So the upstream tier
//! engages on the volume the host's tiers drop, measured against the link:
//!
//! - **engage** when the blocked sources' rate reaches `engage_at` × the
//!   link capacity (bits/s or packets/s, whichever is configured; with
//!   both, either one);
//! - while engaged, announce the heaviest blocked sources first — a
//!   blocked prefix (detection's aggregate of a botnet's /24) is one rule,
//!   and an exact source inside a blocked prefix is not announced on its
//!   own — up to `max_rules` announcements (RTBH victims included);
//! - **withdraw** everything once the volume has stayed below
//!   `withdraw_below` × the link for `hold_s` seconds.
//!
//! The router gives no per-rule counters, so the host cannot tell an
//! announced source that stopped from one the router drops: both look idle
//! from here. Hence the planner never swaps an announced rule for a heavier
//! newcomer (the announced one would always look lighter) and never
//! withdraws one rule because it went quiet; it withdraws a rule only when
//! the host no longer blocks its source (an unban: the host's own
//! decision), when the rule became guarded, or when the whole tier
//! disengages. The disengagement is the probe: an attack that persists
//! shows up at the host again (whose tiers keep every rule, so nothing
//! reaches the host's services) and engages the tier again.
//!
//! Pure: no I/O, no clock; time comes in as interval lengths.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::{check_f64, check_u64, ConfigError};
use crate::Prefix;

/// The planner's levels (part of the daemon's `[upstream]` section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamLevels {
    /// Announcements at once, FlowSpec and RTBH together.
    pub max_rules: usize,
    /// The host link's capacity in bits per second (0: not used).
    pub link_capacity_bps: f64,
    /// The host link's capacity in packets per second (0: not used).
    pub link_capacity_pps: f64,
    /// Engage when the blocked volume reaches this share of the link.
    pub engage_at: f64,
    /// Disengage once the blocked volume stays below this share ...
    pub withdraw_below: f64,
    /// ... for this many seconds.
    pub hold_s: f64,
    /// Blackhole (RTBH) the victims under attack while engaged.
    pub rtbh: bool,
}

impl Default for UpstreamLevels {
    fn default() -> Self {
        Self {
            max_rules: 100,
            link_capacity_bps: 0.0,
            link_capacity_pps: 0.0,
            engage_at: 0.8,
            withdraw_below: 0.5,
            hold_s: 300.0,
            rtbh: false,
        }
    }
}

impl UpstreamLevels {
    /// Check ranges (`section` is the key prefix, e.g. `upstream`).
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self, section: &str) -> Result<(), ConfigError> {
        let k = |n: &str| format!("{section}.{n}");
        check_u64(&k("max_rules"), self.max_rules as u64, 1, 1 << 20)?;
        check_f64(&k("link_capacity_bps"), self.link_capacity_bps, 0.0, 1e15)?;
        check_f64(&k("link_capacity_pps"), self.link_capacity_pps, 0.0, 1e12)?;
        if self.link_capacity_bps <= 0.0 && self.link_capacity_pps <= 0.0 {
            return Err(ConfigError::Inconsistent {
                key: k("link_capacity_bps"),
                reason: format!(
                    "the upstream tier engages on the host link's load: set {} (e.g. 10e9 for 10 Gbit/s) or {}",
                    k("link_capacity_bps"),
                    k("link_capacity_pps")
                ),
            });
        }
        check_f64(&k("engage_at"), self.engage_at, 0.01, 10.0)?;
        check_f64(&k("withdraw_below"), self.withdraw_below, 0.0, 10.0)?;
        if self.withdraw_below >= self.engage_at {
            return Err(ConfigError::Inconsistent {
                key: k("withdraw_below"),
                reason: format!(
                    "{} is not below {} = {}: the tier would engage and withdraw at the same load (flapping)",
                    self.withdraw_below,
                    k("engage_at"),
                    self.engage_at
                ),
            });
        }
        check_f64(&k("hold_s"), self.hold_s, 0.0, 86_400.0)?;
        Ok(())
    }
}

/// One blocked source as the host sees it this interval (every tier's
/// counters summed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SourceLoad {
    /// The blocked prefix.
    pub prefix: Prefix,
    /// Packets per second.
    pub pps: f64,
    /// Bits per second.
    pub bps: f64,
}

/// What the planner is given each interval.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamInput<'a> {
    /// Length of the interval (s).
    pub secs: f64,
    /// Every source the host blocks, with its rate.
    pub sources: &'a [SourceLoad],
    /// Victims under attack now (RTBH candidates).
    pub victims: &'a [Prefix],
    /// Never announced, nor anything overlapping them: the whitelist and
    /// `never` (own networks, the BGP session).
    pub never: &'a [Prefix],
    /// FlowSpec rules announced now (by source).
    pub flows: &'a BTreeSet<Prefix>,
    /// RTBH routes announced now (by victim).
    pub blackholes: &'a BTreeSet<Prefix>,
}

/// Announcements to make and withdraw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UpstreamPlan {
    /// FlowSpec rules to announce (by source), heaviest first.
    pub announce_flows: Vec<Prefix>,
    /// FlowSpec rules to withdraw.
    pub withdraw_flows: Vec<Prefix>,
    /// RTBH routes to announce (by victim).
    pub announce_blackholes: Vec<Prefix>,
    /// RTBH routes to withdraw.
    pub withdraw_blackholes: Vec<Prefix>,
}

impl UpstreamPlan {
    /// No change?
    pub fn is_empty(&self) -> bool {
        self.announce_flows.is_empty()
            && self.withdraw_flows.is_empty()
            && self.announce_blackholes.is_empty()
            && self.withdraw_blackholes.is_empty()
    }
}

/// What the last plan saw (for the API and metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UpstreamStats {
    /// Engaged after the plan.
    pub engaged: bool,
    /// Blocked volume as a share of the link (the larger of bits and
    /// packets when both capacities are set).
    pub load: f64,
    /// Blocked volume (pps).
    pub pps: f64,
    /// Blocked volume (bits/s).
    pub bps: f64,
    /// Seconds the volume has stayed below the withdraw level while engaged.
    pub low_for_s: f64,
    /// Candidates left out for lack of room (`max_rules`).
    pub deferred: usize,
    /// Candidates left out because they overlap a never-announced prefix.
    pub guarded: usize,
}

/// The upstream planner (see the module documentation).
#[derive(Debug, Clone)]
pub struct UpstreamPlanner {
    levels: UpstreamLevels,
    engaged: bool,
    low_for_s: f64,
    last: UpstreamStats,
}

fn overlaps(a: &Prefix, b: &Prefix) -> bool {
    a.net().contains(&b.net()) || b.net().contains(&a.net())
}

impl UpstreamPlanner {
    /// A planner with `levels` (validated by the caller).
    pub fn new(levels: UpstreamLevels) -> Self {
        Self {
            levels,
            engaged: false,
            low_for_s: 0.0,
            last: UpstreamStats::default(),
        }
    }

    /// The levels in force.
    pub fn levels(&self) -> &UpstreamLevels {
        &self.levels
    }

    /// New levels (a reload): engagement and the time spent low carry over.
    pub fn set_levels(&mut self, levels: UpstreamLevels) {
        self.levels = levels;
    }

    /// What the last plan saw.
    pub fn stats(&self) -> UpstreamStats {
        self.last
    }

    /// Load of `pps`/`bps` on the link: the larger share of the
    /// configured capacities.
    pub fn load(&self, pps: f64, bps: f64) -> f64 {
        let l = &self.levels;
        let mut load: f64 = 0.0;
        if l.link_capacity_bps > 0.0 {
            load = load.max(bps / l.link_capacity_bps);
        }
        if l.link_capacity_pps > 0.0 {
            load = load.max(pps / l.link_capacity_pps);
        }
        if load.is_finite() {
            load.max(0.0)
        } else {
            0.0
        }
    }

    /// One interval's plan. Invariants: nothing announced overlaps
    /// `never` or is a default route; announced rules after the plan ≤
    /// `max_rules` (when what is announced fits); `announce_*` ∩ announced
    /// = ∅ and `withdraw_*` ⊆ announced.
    pub fn plan(&mut self, inp: &UpstreamInput<'_>) -> UpstreamPlan {
        let fin = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
        let (pps, bps) = inp
            .sources
            .iter()
            .fold((0.0, 0.0), |(p, b), s| (p + fin(s.pps), b + fin(s.bps)));
        let load = self.load(pps, bps);
        let guarded = |p: &Prefix| p.is_empty() || inp.never.iter().any(|n| overlaps(n, p));
        let mut plan = UpstreamPlan::default();
        let mut stats = UpstreamStats {
            load,
            pps,
            bps,
            ..UpstreamStats::default()
        };

        // What a restarted daemon still has announced keeps the tier
        // engaged, so it is withdrawn by the same rule as ever.
        let held = !inp.flows.is_empty() || !inp.blackholes.is_empty();
        if !self.engaged && (held || load >= self.levels.engage_at) {
            self.engaged = true;
            self.low_for_s = 0.0;
        }
        if self.engaged {
            if load < self.levels.withdraw_below {
                self.low_for_s += fin(inp.secs);
            } else {
                self.low_for_s = 0.0;
            }
            if self.low_for_s >= self.levels.hold_s && load < self.levels.engage_at {
                self.engaged = false;
                self.low_for_s = 0.0;
            }
        }

        if !self.engaged {
            plan.withdraw_flows = inp.flows.iter().copied().collect();
            plan.withdraw_blackholes = inp.blackholes.iter().copied().collect();
            stats.engaged = false;
            self.last = stats;
            return plan;
        }

        // Rules whose source the host no longer blocks (unbanned), or that
        // a reload guarded, go whatever the load.
        let blocked: BTreeSet<Prefix> = inp.sources.iter().map(|s| s.prefix).collect();
        plan.withdraw_flows = inp
            .flows
            .iter()
            .filter(|p| !blocked.contains(p) || guarded(p))
            .copied()
            .collect();
        plan.withdraw_blackholes = inp
            .blackholes
            .iter()
            .filter(|p| guarded(p))
            .copied()
            .collect();
        let mut held_n = inp.flows.len() + inp.blackholes.len()
            - plan.withdraw_flows.len()
            - plan.withdraw_blackholes.len();

        // RTBH first: it is asked for because the link is full, and one
        // route stops a whole victim's traffic.
        if self.levels.rtbh {
            let mut vs: Vec<Prefix> = inp.victims.to_vec();
            vs.sort();
            vs.dedup();
            for v in vs {
                if inp.blackholes.contains(&v) {
                    continue;
                }
                if guarded(&v) {
                    stats.guarded += 1;
                } else if held_n < self.levels.max_rules {
                    plan.announce_blackholes.push(v);
                    held_n += 1;
                } else {
                    stats.deferred += 1;
                }
            }
        }

        // FlowSpec candidates: blocked sources seen this interval, not
        // inside another blocked prefix (that prefix is the rule), heaviest
        // first by their share of the link, ties by prefix.
        let mut cands: Vec<(Prefix, f64)> = inp
            .sources
            .iter()
            .filter(|s| !inp.flows.contains(&s.prefix))
            .filter(|s| {
                !blocked
                    .iter()
                    .any(|b| b.len() < s.prefix.len() && b.net().contains(&s.prefix.net()))
            })
            .map(|s| (s.prefix, self.load(fin(s.pps), fin(s.bps))))
            .filter(|&(_, w)| w > 0.0)
            .collect();
        cands.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        cands.dedup_by_key(|c| c.0);
        for (p, _) in cands {
            if guarded(&p) {
                stats.guarded += 1;
            } else if held_n < self.levels.max_rules {
                plan.announce_flows.push(p);
                held_n += 1;
            } else {
                stats.deferred += 1;
            }
        }
        stats.engaged = true;
        stats.low_for_s = self.low_for_s;
        self.last = stats;
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    fn src(s: &str, pps: f64) -> SourceLoad {
        SourceLoad {
            prefix: p(s),
            pps,
            bps: pps * 8.0 * 100.0,
        }
    }

    fn levels() -> UpstreamLevels {
        UpstreamLevels {
            max_rules: 3,
            link_capacity_pps: 1000.0,
            hold_s: 2.0,
            ..UpstreamLevels::default()
        }
    }

    /// The planner and what the upstream holds, applying every plan.
    struct Sim {
        pl: UpstreamPlanner,
        flows: BTreeSet<Prefix>,
        bh: BTreeSet<Prefix>,
        never: Vec<Prefix>,
        victims: Vec<Prefix>,
    }

    impl Sim {
        fn new(l: UpstreamLevels) -> Self {
            Self {
                pl: UpstreamPlanner::new(l),
                flows: BTreeSet::new(),
                bh: BTreeSet::new(),
                never: Vec::new(),
                victims: Vec::new(),
            }
        }
        fn step(&mut self, secs: f64, sources: &[SourceLoad]) -> UpstreamPlan {
            let plan = self.pl.plan(&UpstreamInput {
                secs,
                sources,
                victims: &self.victims,
                never: &self.never,
                flows: &self.flows,
                blackholes: &self.bh,
            });
            for x in &plan.withdraw_flows {
                assert!(self.flows.remove(x), "withdrew {x}, not announced");
            }
            for x in &plan.withdraw_blackholes {
                assert!(self.bh.remove(x), "withdrew {x}, not announced");
            }
            for x in &plan.announce_flows {
                assert!(self.flows.insert(*x), "announced {x} twice");
            }
            for x in &plan.announce_blackholes {
                assert!(self.bh.insert(*x), "announced {x} twice");
            }
            assert!(self.flows.len() + self.bh.len() <= self.pl.levels().max_rules);
            for a in self.flows.iter().chain(&self.bh) {
                assert!(!self.never.iter().any(|n| overlaps(n, a)), "{a} is guarded");
            }
            plan
        }
    }

    #[test]
    fn below_the_engage_level_nothing_is_announced() {
        let mut s = Sim::new(levels());
        // 790 pps on a 1000 pps link: 0.79 < 0.8.
        let plan = s.step(
            0.5,
            &[src("203.0.113.1/32", 500.0), src("203.0.113.2/32", 290.0)],
        );
        assert!(plan.is_empty(), "{plan:?}");
        assert!(!s.pl.stats().engaged);
        assert!((s.pl.stats().load - 0.79).abs() < 1e-9);
    }

    #[test]
    fn engages_heaviest_first_capped_and_aggregated_to_blocked_prefixes() {
        let mut s = Sim::new(levels());
        let plan = s.step(
            0.5,
            &[
                src("203.0.113.1/32", 100.0),
                src("198.18.0.0/24", 300.0),
                // Inside the blocked /24: the /24 is the rule.
                src("198.18.0.9/32", 400.0),
                src("203.0.113.2/32", 200.0),
                src("203.0.113.3/32", 50.0),
                // Blocked, but idle this interval: no rule.
                src("203.0.113.4/32", 0.0),
            ],
        );
        assert_eq!(
            plan.announce_flows,
            vec![p("198.18.0.0/24"), p("203.0.113.2/32"), p("203.0.113.1/32")]
        );
        let st = s.pl.stats();
        assert!(st.engaged && st.deferred == 1, "{st:?}");
    }

    #[test]
    fn bits_per_second_capacity_engages_too() {
        let mut s = Sim::new(UpstreamLevels {
            link_capacity_pps: 0.0,
            link_capacity_bps: 1e6,
            ..levels()
        });
        // 100 pps × 800 bits = 80 kbit/s: idle.
        assert!(s.step(0.5, &[src("203.0.113.1/32", 100.0)]).is_empty());
        // 1250 pps × 800 bits = 1 Mbit/s: full.
        let plan = s.step(0.5, &[src("203.0.113.1/32", 1250.0)]);
        assert_eq!(plan.announce_flows, vec![p("203.0.113.1/32")]);
    }

    #[test]
    fn hysteresis_withdraws_only_after_hold_s_below_the_withdraw_level() {
        let mut s = Sim::new(levels());
        let heavy = [src("203.0.113.1/32", 900.0)];
        s.step(0.5, &heavy);
        assert_eq!(s.flows.len(), 1);
        // The router drops it: the host sees 600 pps (between the levels),
        // then less; nothing changes until 2 s below 0.5.
        for _ in 0..10 {
            assert!(s.step(0.5, &[src("203.0.113.1/32", 600.0)]).is_empty());
        }
        for _ in 0..3 {
            assert!(s.step(0.5, &[src("203.0.113.1/32", 0.0)]).is_empty());
        }
        // A burst back above 0.5 restarts the hold.
        assert!(s.step(0.5, &[src("203.0.113.1/32", 700.0)]).is_empty());
        for _ in 0..3 {
            assert!(s.step(0.5, &[src("203.0.113.1/32", 0.0)]).is_empty());
        }
        let plan = s.step(0.5, &[src("203.0.113.1/32", 0.0)]);
        assert_eq!(plan.withdraw_flows, vec![p("203.0.113.1/32")]);
        assert!(!s.pl.stats().engaged);
        // The attack persists: it shows at the host again and re-engages.
        let plan = s.step(0.5, &heavy);
        assert_eq!(plan.announce_flows, vec![p("203.0.113.1/32")]);
    }

    #[test]
    fn announced_rules_are_never_swapped_for_heavier_newcomers() {
        let mut s = Sim::new(UpstreamLevels {
            max_rules: 1,
            ..levels()
        });
        s.step(0.5, &[src("203.0.113.1/32", 900.0)]);
        // The announced source looks idle (the router drops it); a heavier
        // one arrives: it waits, the rule stays.
        let plan = s.step(
            0.5,
            &[src("203.0.113.1/32", 0.0), src("203.0.113.9/32", 950.0)],
        );
        assert!(plan.is_empty(), "{plan:?}");
        assert_eq!(s.pl.stats().deferred, 1);
    }

    #[test]
    fn an_unbanned_source_is_withdrawn_while_engaged() {
        let mut s = Sim::new(levels());
        s.step(
            0.5,
            &[src("203.0.113.1/32", 500.0), src("203.0.113.2/32", 400.0)],
        );
        assert_eq!(s.flows.len(), 2);
        let plan = s.step(0.5, &[src("203.0.113.2/32", 900.0)]);
        assert_eq!(plan.withdraw_flows, vec![p("203.0.113.1/32")]);
        assert!(plan.announce_flows.is_empty());
    }

    #[test]
    fn whitelisted_and_own_prefixes_are_never_announced() {
        let mut s = Sim::new(UpstreamLevels {
            rtbh: true,
            max_rules: 10,
            ..levels()
        });
        s.never = vec![p("203.0.113.0/28"), p("192.0.2.0/24")];
        s.victims = vec![p("192.0.2.7/32"), p("198.51.100.7/32")];
        let plan = s.step(
            0.5,
            &[
                // Inside a never prefix.
                src("203.0.113.1/32", 500.0),
                // Around one: also refused.
                src("192.0.0.0/16", 300.0),
                src("198.18.0.1/32", 100.0),
            ],
        );
        assert_eq!(plan.announce_flows, vec![p("198.18.0.1/32")]);
        assert_eq!(plan.announce_blackholes, vec![p("198.51.100.7/32")]);
        assert_eq!(s.pl.stats().guarded, 3);
        // A reload that guards an announced rule withdraws it.
        s.never.push(p("198.18.0.0/16"));
        let plan = s.step(0.5, &[src("198.18.0.1/32", 900.0)]);
        assert_eq!(plan.withdraw_flows, vec![p("198.18.0.1/32")]);
    }

    #[test]
    fn rtbh_counts_against_the_cap_and_goes_on_disengage() {
        let mut s = Sim::new(UpstreamLevels {
            rtbh: true,
            max_rules: 2,
            ..levels()
        });
        s.victims = vec![p("198.51.100.7/32")];
        let plan = s.step(
            0.5,
            &[src("203.0.113.1/32", 500.0), src("203.0.113.2/32", 400.0)],
        );
        assert_eq!(plan.announce_blackholes, vec![p("198.51.100.7/32")]);
        assert_eq!(plan.announce_flows, vec![p("203.0.113.1/32")]);
        // The victim's attack is over from the host's view; its sources
        // stay blocked but idle.
        s.victims.clear();
        let idle = [src("203.0.113.1/32", 0.0), src("203.0.113.2/32", 0.0)];
        assert!(s.step(1.0, &idle).is_empty());
        let plan = s.step(1.0, &idle);
        assert_eq!(plan.withdraw_blackholes, vec![p("198.51.100.7/32")]);
        assert_eq!(plan.withdraw_flows, vec![p("203.0.113.1/32")]);
    }

    #[test]
    fn what_a_restarted_daemon_announced_is_withdrawn_after_hold_s() {
        let mut s = Sim::new(levels());
        s.flows.insert(p("203.0.113.1/32"));
        // Restored: not announced twice, and withdrawn by the same rule.
        let plan = s.step(1.0, &[src("203.0.113.1/32", 0.0)]);
        assert!(plan.is_empty() && s.pl.stats().engaged, "{plan:?}");
        let plan = s.step(1.0, &[src("203.0.113.1/32", 0.0)]);
        assert_eq!(plan.withdraw_flows, vec![p("203.0.113.1/32")]);
    }

    #[test]
    fn levels_are_checked() {
        levels().validate("upstream").unwrap();
        let e = UpstreamLevels::default()
            .validate("upstream")
            .unwrap_err()
            .to_string();
        assert!(e.contains("link_capacity_bps") && e.contains("10e9"), "{e}");
        let e = UpstreamLevels {
            withdraw_below: 0.9,
            ..levels()
        }
        .validate("ddos.upstream")
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("ddos.upstream.withdraw_below") && e.contains("flapping"),
            "{e}"
        );
        let e = UpstreamLevels {
            max_rules: 0,
            ..levels()
        }
        .validate("upstream")
        .unwrap_err()
        .to_string();
        assert!(e.contains("upstream.max_rules"), "{e}");
    }
}
