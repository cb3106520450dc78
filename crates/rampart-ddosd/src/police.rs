//! Policing in the daemon: detection's `police` / `unpolice` decisions
//! carried out by the interface filter's XDP policer
//! ([`Filter::police`]), the policer's counters turned into the dropped
//! rates detection reads back (`Interval.policed`), and the policed set
//! reconciled with the pinned map at start.
//!
//! The policer lives in the filter of the protected interface (the one in
//! front of the feature stage, in every placement mode), so what it lets
//! through is what the feature stage records. Sources the operator blocked
//! or whitelisted are never policed.

use std::collections::{BTreeMap, HashMap};

use rampart_ddos::filter::{
    Filter, PolicedEntry, POLICE_ALL, POLICE_MAX_PPS as DDOS_POLICE_MAX_PPS, POLICE_SYN, POLICE_UDP,
};
use rampart_ddos::Prefix;
use rampart_ddos_control::detection::{self, LearnedPolice, PoliceScope, SourceRate};
use serde::Serialize;

/// A source detection polices, with its policer's counters.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Policed {
    /// The source.
    pub prefix: String,
    /// The victim it sent to.
    pub victim: String,
    /// The victim's anomalous vector.
    pub vector: String,
    /// Which of its packets the rate applies to: `all`, `syn` or `udp`.
    pub scope: String,
    /// Rate it may send (packets/s of its `scope`).
    pub rate_pps: f64,
    /// Packets it may send at once (the bucket's size).
    pub burst: u32,
    /// Packets the policer let through since the source was policed.
    pub passed: u64,
    /// Packets the policer dropped since the source was policed.
    pub dropped: u64,
    /// Packets/s the policer dropped in the last interval.
    pub dropped_pps: f64,
    /// Why policed rather than blocked.
    pub reason: String,
}

/// The policer's rate for a decided rate: whole packets/s, rounded up,
/// within what the data path takes.
pub fn rate_of(pps: f64) -> u32 {
    // (A NaN stays NaN through clamp and becomes 0: refused by the filter.)
    pps.ceil().clamp(1.0, f64::from(DDOS_POLICE_MAX_PPS)) as u32
}

/// The filter's policing classes of a detection scope.
pub fn classes_of(scope: PoliceScope) -> u32 {
    match scope {
        PoliceScope::All => POLICE_ALL,
        PoliceScope::Syn => POLICE_SYN,
        PoliceScope::Udp => POLICE_UDP,
    }
}

/// A policer setting: (packets/s, classes).
pub type Setting = (u32, u32);

/// What to change so the pinned policer holds exactly `wanted`: (sources
/// to police or re-rate, sources to unpolice).
pub fn plan(
    wanted: &BTreeMap<Prefix, Setting>,
    pinned: &[(Prefix, PolicedEntry)],
) -> (Vec<(Prefix, Setting)>, Vec<Prefix>) {
    let have: HashMap<Prefix, Setting> = pinned
        .iter()
        .map(|(p, e)| (*p, (e.rate_pps, e.classes)))
        .collect();
    let police = wanted
        .iter()
        .filter(|(p, r)| have.get(p) != Some(r))
        .map(|(p, r)| (*p, *r))
        .collect();
    let mut unpolice: Vec<Prefix> = have
        .keys()
        .filter(|p| !wanted.contains_key(p))
        .copied()
        .collect();
    unpolice.sort();
    (police, unpolice)
}

/// The daemon's policing state.
#[derive(Debug, Default)]
pub struct Policing {
    /// Sources policed now, with the decision that policed them.
    policed: BTreeMap<Prefix, detection::Police>,
    /// The policer's counters at the last interval.
    last: HashMap<Prefix, PolicedEntry>,
    /// Dropped packets/s over the last interval.
    dropped_pps: HashMap<Prefix, f64>,
}

impl Policing {
    /// Make the pinned policer hold what detection restored (`wanted`,
    /// less the sources `never` refuses): a source the pins lack is
    /// policed, one at another rate re-rated, one detection does not know
    /// any more unpoliced. Failures are logged; the source is then not
    /// policed.
    pub fn restore(
        &mut self,
        f: &Filter,
        wanted: &[LearnedPolice],
        never: impl Fn(&Prefix) -> bool,
    ) {
        let mut want: BTreeMap<Prefix, Setting> = BTreeMap::new();
        let mut victims: HashMap<Prefix, (Prefix, PoliceScope)> = HashMap::new();
        for w in wanted {
            if never(&w.prefix) {
                tracing::info!(
                    "{} not policed again: the operator blocked or whitelisted it",
                    w.prefix
                );
                continue;
            }
            want.insert(w.prefix, (rate_of(w.rate_pps), classes_of(w.scope)));
            victims.insert(w.prefix, (w.victim, w.scope));
        }
        let pinned = match f.policed() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("reading the pinned policer: {e}");
                Vec::new()
            }
        };
        let (police, unpolice) = plan(&want, &pinned);
        for p in &unpolice {
            match f.unpolice(*p) {
                Ok(_) => tracing::info!("{p} unpoliced: no longer policed by detection"),
                Err(e) => tracing::warn!("{p} not unpoliced: {e}"),
            }
        }
        let mut failed = Vec::new();
        for (p, (rate, classes)) in &police {
            if let Err(e) = f.police(*p, *rate, *classes) {
                tracing::warn!("{p} not policed again: {e}");
                failed.push(*p);
            }
        }
        for (p, (rate, _)) in want {
            if failed.contains(&p) {
                continue;
            }
            let (victim, scope) = victims[&p];
            self.policed.insert(
                p,
                detection::Police {
                    prefix: p,
                    victim,
                    vector: String::new(),
                    scope,
                    rate_pps: f64::from(rate),
                    reason: "policed before the daemon restarted".into(),
                },
            );
        }
        // The first interval's rates are deltas from the pinned counters.
        self.last = pinned.into_iter().collect();
        if !self.policed.is_empty() {
            tracing::info!("{} source(s) policed after the restart", self.policed.len());
        }
    }

    /// The policer's counters now → dropped packets/s per policed source
    /// over the `secs` since the last call (what detection reads as
    /// `Interval.policed`).
    pub fn measure(&mut self, f: &Filter, secs: f64) -> Vec<SourceRate> {
        let now: HashMap<Prefix, PolicedEntry> = match f.policed() {
            Ok(v) => v.into_iter().collect(),
            Err(e) => {
                tracing::warn!("reading the policer's counters: {e}");
                return Vec::new();
            }
        };
        self.dropped_pps.clear();
        let mut out = Vec::new();
        for p in self.policed.keys() {
            let Some(e) = now.get(p) else { continue };
            // A source policed anew counts from 0: its whole count is new.
            let before = self.last.get(p).map_or(0, |l| l.dropped);
            let d = if e.dropped >= before {
                e.dropped - before
            } else {
                e.dropped
            };
            let pps = d as f64 / secs;
            self.dropped_pps.insert(*p, pps);
            out.push(SourceRate { prefix: *p, pps });
        }
        self.last = now;
        out
    }

    /// Carry out detection's decisions. Returns whether the policed set changed.
    pub fn apply(
        &mut self,
        f: &Filter,
        police: &[detection::Police],
        unpolice: &[Prefix],
        never: impl Fn(&Prefix) -> bool,
    ) -> bool {
        let mut changed = false;
        for p in police {
            if never(&p.prefix) {
                tracing::info!(
                    "{} not policed: the operator blocked or whitelisted it",
                    p.prefix
                );
                continue;
            }
            match f.police(p.prefix, rate_of(p.rate_pps), classes_of(p.scope)) {
                Ok(()) => {
                    tracing::info!(
                        "{} policed at {:.0} pps of {} packets ({}): {}",
                        p.prefix,
                        p.rate_pps,
                        p.scope.name(),
                        p.vector,
                        p.reason
                    );
                    self.policed.insert(p.prefix, p.clone());
                    changed = true;
                }
                Err(e) => tracing::warn!("{} not policed: {e}", p.prefix),
            }
        }
        for p in unpolice {
            if self.unpolice(f, p) {
                tracing::info!("{p} unpoliced: its victim's attack is over");
                changed = true;
            }
        }
        changed
    }

    fn unpolice(&mut self, f: &Filter, p: &Prefix) -> bool {
        if let Err(e) = f.unpolice(*p) {
            tracing::warn!("{p} not unpoliced: {e}");
            return false;
        }
        self.dropped_pps.remove(p);
        self.policed.remove(p).is_some()
    }

    /// Stop policing every source inside `within` (the operator blocked or
    /// whitelisted it); returns how many.
    pub fn release_within(&mut self, f: &Filter, within: &Prefix) -> usize {
        let hit: Vec<Prefix> = self
            .policed
            .keys()
            .filter(|p| within.net().contains(&p.net().addr()))
            .copied()
            .collect();
        hit.iter().filter(|p| self.unpolice(f, p)).count()
    }

    /// Is `p` policed now?
    pub fn contains(&self, p: &Prefix) -> bool {
        self.policed.contains_key(p)
    }

    /// What the API shows.
    pub fn view(&self) -> Vec<Policed> {
        self.policed
            .values()
            .map(|p| {
                let c = self.last.get(&p.prefix);
                Policed {
                    prefix: p.prefix.to_string(),
                    victim: p.victim.to_string(),
                    vector: p.vector.clone(),
                    scope: p.scope.name().to_string(),
                    rate_pps: p.rate_pps,
                    burst: c.map_or(0, |c| c.burst),
                    passed: c.map_or(0, |c| c.passed),
                    dropped: c.map_or(0, |c| c.dropped),
                    dropped_pps: self.dropped_pps.get(&p.prefix).copied().unwrap_or(0.0),
                    reason: p.reason.clone(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    fn pinned(list: &[(&str, u32, u32)]) -> Vec<(Prefix, PolicedEntry)> {
        list.iter()
            .map(|(s, r, c)| {
                (
                    p(s),
                    PolicedEntry {
                        rate_pps: *r,
                        classes: *c,
                        burst: *r,
                        passed: 0,
                        dropped: 0,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_plan_makes_the_pins_exactly_what_is_wanted() {
        let want: BTreeMap<Prefix, Setting> = [
            (p("192.0.2.1"), (1000, POLICE_SYN)),
            (p("192.0.2.2"), (2000, POLICE_ALL)),
            (p("192.0.2.3"), (1000, POLICE_UDP)),
            (p("2001:db8::1"), (500, POLICE_ALL)),
        ]
        .into_iter()
        .collect();
        let (police, unpolice) = plan(
            &want,
            &pinned(&[
                ("192.0.2.1", 1000, POLICE_SYN),
                ("192.0.2.2", 1500, POLICE_ALL),
                ("192.0.2.3", 1000, POLICE_ALL),
                ("192.0.2.9", 1000, POLICE_ALL),
            ]),
        );
        // .1 is right already; .2 gets its rate, .3 its classes; the IPv6 source is added.
        assert_eq!(
            police,
            [
                (p("192.0.2.2"), (2000, POLICE_ALL)),
                (p("192.0.2.3"), (1000, POLICE_UDP)),
                (p("2001:db8::1"), (500, POLICE_ALL))
            ]
        );
        // .9 is not wanted any more.
        assert_eq!(unpolice, [p("192.0.2.9")]);
        // Nothing wanted: everything pinned goes.
        let (police, unpolice) = plan(&BTreeMap::new(), &pinned(&[("192.0.2.1", 1, POLICE_ALL)]));
        assert!(police.is_empty());
        assert_eq!(unpolice, [p("192.0.2.1")]);
    }

    #[test]
    fn scopes_map_to_the_filters_classes() {
        assert_eq!(classes_of(PoliceScope::All), POLICE_ALL);
        assert_eq!(classes_of(PoliceScope::Syn), POLICE_SYN);
        assert_eq!(classes_of(PoliceScope::Udp), POLICE_UDP);
    }

    #[test]
    fn rates_round_up_into_the_policer_range() {
        assert_eq!(rate_of(999.2), 1000);
        assert_eq!(rate_of(0.0), 1);
        assert_eq!(rate_of(1e12), DDOS_POLICE_MAX_PPS);
        assert_eq!(rate_of(f64::INFINITY), DDOS_POLICE_MAX_PPS);
        assert_eq!(rate_of(f64::NAN), 0, "refused by the filter");
    }
}
