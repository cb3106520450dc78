//! Rate monitor: when a blocked source is unbanned (see [`MonitorConfig`]).
//!
//! The data plane drops a blocked source before the feature stage, so the
//! detectors no longer see it: its rate is measured from the drop counters
//! of every tier (NIC rule counters + XDP per-entry counters, summed by the
//! caller). Once that rate stays below the highest rate a single source
//! reached under normal activity, the source behaves like a normal one and
//! is unbanned; if it was wrong, the detectors block it again.

use rustc_hash::FxHashMap as HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::MonitorConfig;
use crate::detect::si;
use crate::{BlockDecision, Prefix};

/// A prefix to unban, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unban {
    /// The prefix.
    pub prefix: Prefix,
    /// Why, with the numbers.
    pub reason: String,
}

/// One blocked prefix as the monitor tracks it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tracked {
    /// The prefix.
    pub prefix: Prefix,
    /// Detector that blocked it.
    pub detector: &'static str,
    /// Seconds since it was blocked (at the last observation).
    pub blocked_s: f64,
    /// Last measured rate (pps, all tiers).
    pub last_pps: f64,
    /// Consecutive observations below the level.
    pub quiet: u32,
    /// Rate when it was blocked (pps).
    pub blocked_pps: f64,
    #[serde(skip)]
    since: Instant,
}

/// Tracks blocked prefixes and decides when to unban them.
#[derive(Debug, Clone)]
pub struct RateMonitor {
    cfg: MonitorConfig,
    tracked: HashMap<Prefix, Tracked>,
    level: f64,
}

impl RateMonitor {
    /// A monitor with nothing tracked. Out-of-range values are clamped
    /// into their ranges ([`MonitorConfig::validate`] reports them; use
    /// [`RateMonitor::try_new`] to refuse them).
    pub fn new(cfg: &MonitorConfig) -> Self {
        let mut c = cfg.clone();
        c.hold_s = if c.hold_s.is_finite() {
            c.hold_s.clamp(0.0, 31_536_000.0)
        } else {
            30.0
        };
        c.quiet_intervals = c.quiet_intervals.max(1);
        c.ttl_s = c.ttl_s.filter(|t| t.is_finite() && *t > 0.0);
        c.subside_fraction = c.subside_fraction.filter(|f| f.is_finite() && *f > 0.0);
        if !(c.level_factor.is_finite() && c.level_factor > 0.0) {
            c.level_factor = 1.0;
        }
        if !(c.min_level_pps.is_finite() && c.min_level_pps >= 0.0) {
            c.min_level_pps = 10.0;
        }
        Self {
            cfg: c,
            tracked: HashMap::default(),
            level: 0.0,
        }
    }

    /// Like [`RateMonitor::new`], refusing bad values.
    ///
    /// # Errors
    /// The first bad key of `cfg`.
    pub fn try_new(cfg: &MonitorConfig) -> Result<Self, crate::ConfigError> {
        cfg.validate()?;
        Ok(Self::new(cfg))
    }

    /// A source was blocked at `now`. Blocking a prefix that is tracked
    /// already restarts its clock (a new block).
    pub fn blocked(&mut self, d: &BlockDecision, now: Instant) {
        self.tracked.insert(
            d.prefix,
            Tracked {
                prefix: d.prefix,
                detector: d.detector,
                blocked_s: 0.0,
                last_pps: d.pps,
                quiet: 0,
                blocked_pps: d.pps,
                since: now,
            },
        );
    }

    /// Forget a prefix (unblocked by the operator). True if it was tracked.
    pub fn forget(&mut self, prefix: &Prefix) -> bool {
        self.tracked.remove(prefix).is_some()
    }

    /// Is the prefix tracked?
    pub fn is_tracked(&self, prefix: &Prefix) -> bool {
        self.tracked.contains_key(prefix)
    }

    /// Tracked prefixes, sorted.
    pub fn tracked(&self) -> Vec<&Tracked> {
        let mut v: Vec<&Tracked> = self.tracked.values().collect();
        v.sort_by_key(|t| t.prefix);
        v
    }

    /// Number of tracked prefixes.
    pub fn len(&self) -> usize {
        self.tracked.len()
    }

    /// Nothing tracked?
    pub fn is_empty(&self) -> bool {
        self.tracked.is_empty()
    }

    /// Unban level of the last observation (pps).
    pub fn level(&self) -> f64 {
        self.level
    }

    /// The unban level for a normal peak:
    /// `max(min_level_pps, level_factor × normal_peak_pps)`.
    pub fn level_for(&self, normal_peak_pps: f64) -> f64 {
        let peak = if normal_peak_pps.is_finite() {
            normal_peak_pps.max(0.0)
        } else {
            0.0
        };
        self.cfg.min_level_pps.max(self.cfg.level_factor * peak)
    }

    /// Measured pps of every blocked prefix this interval, summed over all
    /// tiers (NIC rule counters + XDP per-entry counters). Returns the
    /// prefixes to unban (sorted), and forgets them. Prefixes missing from
    /// `rates` count as 0 pps; rates of untracked prefixes are ignored.
    pub fn observe(
        &mut self,
        rates: &[(Prefix, f64)],
        normal_peak_pps: f64,
        now: Instant,
    ) -> Vec<Unban> {
        let level = self.level_for(normal_peak_pps);
        self.level = level;
        let measured: HashMap<&Prefix, f64> = rates.iter().map(|(p, r)| (p, *r)).collect();
        let hold = Duration::from_secs_f64(self.cfg.hold_s);
        let mut out = Vec::new();
        for t in self.tracked.values_mut() {
            let age = now.saturating_duration_since(t.since);
            let rate = measured
                .get(&t.prefix)
                .copied()
                .filter(|r| r.is_finite())
                .unwrap_or(0.0)
                .max(0.0);
            t.blocked_s = age.as_secs_f64();
            t.last_pps = rate;
            let subsided = match self.cfg.subside_fraction {
                Some(f) => rate <= f * t.blocked_pps,
                None => true,
            };
            if rate < level && subsided {
                t.quiet = t.quiet.saturating_add(1);
            } else {
                t.quiet = 0;
            }
            if let Some(ttl) = self.cfg.ttl_s {
                if age.as_secs_f64() >= ttl {
                    out.push(Unban {
                        prefix: t.prefix,
                        reason: format!(
                            "TTL: blocked {:.1} s >= ttl {} s (rate now {} pps)",
                            age.as_secs_f64(),
                            ttl,
                            si(rate)
                        ),
                    });
                    continue;
                }
            }
            if age >= hold && t.quiet >= self.cfg.quiet_intervals {
                out.push(Unban {
                    prefix: t.prefix,
                    reason: format!(
                        "rate {} pps < unban level {} pps (max({} pps, {} × {} pps, the highest single-source rate under normal activity)){} for {} intervals; blocked {:.1} s >= hold {} s",
                        si(rate),
                        si(level),
                        si(self.cfg.min_level_pps),
                        self.cfg.level_factor,
                        si(normal_peak_pps.max(0.0)),
                        match self.cfg.subside_fraction {
                            Some(f) => format!(
                                " and <= {f} × {} pps, its rate when blocked",
                                si(t.blocked_pps)
                            ),
                            None => String::new(),
                        },
                        t.quiet,
                        age.as_secs_f64(),
                        self.cfg.hold_s
                    ),
                });
            }
        }
        out.sort_by_key(|u| u.prefix);
        for u in &out {
            self.tracked.remove(&u.prefix);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    fn dec(p: Prefix, pps: f64) -> BlockDecision {
        BlockDecision {
            prefix: p,
            detector: "rate",
            reason: "test".into(),
            pps,
            bps: pps * 512.0,
        }
    }

    fn at(t0: Instant, s: f64) -> Instant {
        t0 + Duration::from_secs_f64(s)
    }

    #[test]
    fn unbans_after_hold_and_quiet_intervals_below_the_normal_peak() {
        let cfg = MonitorConfig::default(); // hold 30 s, 5 quiet intervals
        let mut m = RateMonitor::new(&cfg);
        let t0 = Instant::now();
        let a = host(attacker(1));
        m.blocked(&dec(a, 50_000.0), t0);
        // Still attacking for 10 s, then 80 pps (below the 120 pps normal
        // peak): not before 30 s blocked.
        for s in 1..=40 {
            let rate = if s <= 10 { 50_000.0 } else { 80.0 };
            let out = m.observe(&[(a, rate)], 120.0, at(t0, f64::from(s)));
            if s < 30 {
                assert!(out.is_empty(), "unbanned at {s} s");
                assert!(m.is_tracked(&a));
            } else {
                assert_eq!(out.len(), 1, "not unbanned at {s} s");
                assert_eq!(out[0].prefix, a);
                assert!(
                    out[0].reason.contains("< unban level 120 pps"),
                    "{}",
                    out[0].reason
                );
                assert!(!m.is_tracked(&a));
                return;
            }
        }
        unreachable!();
    }

    #[test]
    fn quiet_intervals_must_be_consecutive() {
        let cfg = MonitorConfig {
            hold_s: 0.0,
            quiet_intervals: 3,
            ..MonitorConfig::default()
        };
        let mut m = RateMonitor::new(&cfg);
        let t0 = Instant::now();
        let a = host(attacker(2));
        m.blocked(&dec(a, 10_000.0), t0);
        let rates = [50.0, 50.0, 500.0, 50.0, 50.0, 50.0];
        let mut unbanned_at = None;
        for (i, r) in rates.iter().enumerate() {
            let out = m.observe(&[(a, *r)], 100.0, at(t0, i as f64 + 1.0));
            if !out.is_empty() {
                unbanned_at = Some(i);
                break;
            }
        }
        // The burst at index 2 (above the level) restarts the count.
        assert_eq!(unbanned_at, Some(5));
    }

    #[test]
    fn a_source_still_above_the_level_stays_blocked() {
        let mut m = RateMonitor::new(&MonitorConfig::default());
        let t0 = Instant::now();
        let a = host(attacker(3));
        m.blocked(&dec(a, 10_000.0), t0);
        for s in 1..=600 {
            // Exactly at the level is not below it.
            let out = m.observe(&[(a, 200.0)], 200.0, at(t0, f64::from(s)));
            assert!(out.is_empty());
        }
        assert_eq!(m.tracked()[0].last_pps, 200.0);
        assert_eq!(m.tracked()[0].quiet, 0);
    }

    #[test]
    fn ttl_unbans_whatever_the_rate() {
        let cfg = MonitorConfig {
            ttl_s: Some(60.0),
            ..MonitorConfig::default()
        };
        let mut m = RateMonitor::new(&cfg);
        let t0 = Instant::now();
        let a = host(attacker(4));
        m.blocked(&dec(a, 10_000.0), t0);
        assert!(m.observe(&[(a, 10_000.0)], 100.0, at(t0, 59.9)).is_empty());
        let out = m.observe(&[(a, 10_000.0)], 100.0, at(t0, 60.0));
        assert_eq!(out.len(), 1);
        assert!(out[0].reason.starts_with("TTL"), "{}", out[0].reason);
    }

    #[test]
    fn ipv6_and_cidr_prefixes_alike_and_missing_rates_count_as_zero() {
        let cfg = MonitorConfig {
            hold_s: 5.0,
            quiet_intervals: 2,
            ..MonitorConfig::default()
        };
        let mut m = RateMonitor::new(&cfg);
        let t0 = Instant::now();
        let six = host(attacker6(9));
        let net = Prefix::parse("198.51.100.0/24").unwrap();
        let net6 = Prefix::parse("2001:db8:66::/48").unwrap();
        for p in [six, net, net6] {
            m.blocked(&dec(p, 1e5), t0);
        }
        assert_eq!(m.len(), 3);
        // net6 keeps sending; the others are silent (absent from rates).
        let mut gone = Vec::new();
        for s in 1..=10 {
            gone.extend(m.observe(&[(net6, 5000.0)], 300.0, at(t0, f64::from(s))));
        }
        let p: Vec<Prefix> = gone.iter().map(|u| u.prefix).collect();
        assert_eq!(p.len(), 2);
        assert!(p.contains(&six) && p.contains(&net));
        assert!(m.is_tracked(&net6));
    }

    #[test]
    fn subside_fraction_keeps_a_slow_source_blocked_while_it_still_attacks() {
        let cfg = MonitorConfig {
            hold_s: 0.0,
            quiet_intervals: 2,
            subside_fraction: Some(0.1),
            ..MonitorConfig::default()
        };
        let mut m = RateMonitor::new(&cfg);
        let t0 = Instant::now();
        // Blocked at 100 pps by a victim rule, normal peak 5000 pps.
        let a = host(attacker(8));
        m.blocked(&dec(a, 100.0), t0);
        for s in 1..=20 {
            assert!(m
                .observe(&[(a, 95.0)], 5000.0, at(t0, f64::from(s)))
                .is_empty());
        }
        // Its flood stops: unbanned after 2 intervals at <= 10 pps.
        assert!(m.observe(&[(a, 3.0)], 5000.0, at(t0, 21.0)).is_empty());
        assert_eq!(m.observe(&[(a, 3.0)], 5000.0, at(t0, 22.0)).len(), 1);
        // Without it (the rule of Miano et al., IEEE Access 2019), the same source goes at once.
        let mut m = RateMonitor::new(&MonitorConfig {
            subside_fraction: None,
            ..cfg
        });
        m.blocked(&dec(a, 100.0), t0);
        assert!(m.observe(&[(a, 95.0)], 5000.0, at(t0, 1.0)).is_empty());
        assert_eq!(m.observe(&[(a, 95.0)], 5000.0, at(t0, 2.0)).len(), 1);
    }

    #[test]
    fn level_floor_before_any_normal_interval_and_factor() {
        let cfg = MonitorConfig {
            hold_s: 0.0,
            quiet_intervals: 1,
            level_factor: 2.0,
            min_level_pps: 10.0,
            ..MonitorConfig::default()
        };
        let mut m = RateMonitor::new(&cfg);
        assert_eq!(m.level_for(0.0), 10.0);
        assert_eq!(m.level_for(100.0), 200.0);
        assert_eq!(m.level_for(f64::NAN), 10.0);
        let t0 = Instant::now();
        let a = host(attacker(5));
        m.blocked(&dec(a, 1e4), t0);
        // No normal peak known: 20 pps is above the 10 pps floor.
        assert!(m.observe(&[(a, 20.0)], 0.0, at(t0, 1.0)).is_empty());
        assert_eq!(m.level(), 10.0);
        assert_eq!(m.observe(&[(a, 5.0)], 0.0, at(t0, 2.0)).len(), 1);
    }

    #[test]
    fn forget_and_reblock() {
        let cfg = MonitorConfig {
            hold_s: 10.0,
            quiet_intervals: 1,
            ..MonitorConfig::default()
        };
        let mut m = RateMonitor::new(&cfg);
        let t0 = Instant::now();
        let a = host(attacker(6));
        m.blocked(&dec(a, 1e4), t0);
        assert!(m.forget(&a));
        assert!(!m.forget(&a));
        assert!(m.observe(&[], 100.0, at(t0, 100.0)).is_empty());
        // Blocked again at 100 s: the hold counts from then.
        m.blocked(&dec(a, 1e4), at(t0, 100.0));
        assert!(m.observe(&[(a, 0.0)], 100.0, at(t0, 105.0)).is_empty());
        assert_eq!(m.observe(&[(a, 0.0)], 100.0, at(t0, 110.0)).len(), 1);
    }

    #[test]
    fn bad_values_are_refused_by_try_new_and_clamped_by_new() {
        let bad = MonitorConfig {
            quiet_intervals: 0,
            ..MonitorConfig::default()
        };
        let e = RateMonitor::try_new(&bad).unwrap_err().to_string();
        assert_eq!(
            e,
            "monitor.quiet_intervals = 0: out of range, allowed 1 <= x <= 1000000"
        );
        let bad = MonitorConfig {
            ttl_s: Some(-1.0),
            ..MonitorConfig::default()
        };
        let e = RateMonitor::try_new(&bad).unwrap_err().to_string();
        assert!(e.starts_with("monitor.ttl_s = -1: out of range"), "{e}");
        // new() clamps: quiet_intervals 0 behaves as 1.
        let mut m = RateMonitor::new(&MonitorConfig {
            quiet_intervals: 0,
            hold_s: 0.0,
            ..MonitorConfig::default()
        });
        let t0 = Instant::now();
        let a = host(attacker(7));
        m.blocked(&dec(a, 1e4), t0);
        assert_eq!(m.observe(&[(a, 0.0)], 100.0, at(t0, 1.0)).len(), 1);
    }
}
