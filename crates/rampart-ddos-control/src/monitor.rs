//! Rate monitor: when a blocked source is unbanned (see [`MonitorConfig`]).
//!
//! The data plane drops a blocked source before the feature stage, so the
//! detectors no longer see it: its rate is measured from the drop counters
//! of every tier (NIC rule counters + XDP per-entry counters, summed by the
//! caller). Once that rate stays below the highest rate a single source
//! reached under normal activity, the source behaves like a normal one and
//! is unbanned; if it was wrong, the detectors block it again.

use std::collections::HashMap;
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
        if !(c.level_factor.is_finite() && c.level_factor > 0.0) {
            c.level_factor = 1.0;
        }
        if !(c.min_level_pps.is_finite() && c.min_level_pps >= 0.0) {
            c.min_level_pps = 10.0;
        }
        Self {
            cfg: c,
            tracked: HashMap::new(),
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
            if rate < level {
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
                        "rate {} pps < unban level {} pps (max({} pps, {} × {} pps, the highest single-source rate under normal activity)) for {} intervals; blocked {:.1} s >= hold {} s",
                        si(rate),
                        si(level),
                        si(self.cfg.min_level_pps),
                        self.cfg.level_factor,
                        si(normal_peak_pps.max(0.0)),
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
