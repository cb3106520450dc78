//! `xdp`: rampart's XDP source blacklist ([`rampart_ddos::Filter`]) as a tier.
//!
//! Exact and CIDR, IPv4 and IPv6, up to the capacities given at attach;
//! per-entry counters sampled 1 in 2^k (unbiased); an update of any size is
//! one atomic table publish (~ms for thousands of entries), so its cost is
//! per batch, not per rule.

use std::collections::HashSet;
use std::time::Duration;

use rampart_ddos::filter::{BlockEntry, Filter, Update};
use rampart_ddos::Prefix;

use super::{CounterKind, Counts, Tier, TierInfo};
use crate::error::Result;

/// The XDP blacklist of one installed filter.
#[derive(Debug)]
pub struct XdpTier {
    filter: Filter,
    location: String,
}

impl XdpTier {
    /// Wrap an opened filter; `location` names where it runs (`host0 (netns demo-host)`).
    pub fn new(filter: Filter, location: String) -> Self {
        Self { filter, location }
    }

    /// The filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// The filter, mutably.
    pub fn filter_mut(&mut self) -> &mut Filter {
        &mut self.filter
    }
}

impl Tier for XdpTier {
    fn info(&self) -> TierInfo {
        let cap = self.filter.stats().map(|s| s.capacity_exact4 as usize).ok();
        TierInfo {
            name: "xdp",
            role: "host",
            location: self.location.clone(),
            capacity: cap,
            update_cost: Duration::from_micros(200),
            counters: if self.filter.sample_shift() == 0 {
                CounterKind::Exact
            } else {
                CounterKind::Sampled
            },
            emulated: false,
        }
    }

    fn install(&mut self, add: &[Prefix]) -> Result<usize> {
        let have: HashSet<Prefix> = self
            .filter
            .entries()?
            .into_iter()
            .map(|e| e.prefix)
            .collect();
        let mut seen = HashSet::new();
        let new: Vec<BlockEntry> = add
            .iter()
            .filter(|p| !have.contains(p) && seen.insert(**p))
            .map(|p| BlockEntry {
                prefix: *p,
                ttl: None,
            })
            .collect();
        if new.is_empty() {
            return Ok(0);
        }
        let n = new.len();
        self.filter.apply(&Update {
            add: new,
            ..Default::default()
        })?;
        Ok(n)
    }

    fn remove(&mut self, remove: &[Prefix]) -> Result<usize> {
        let have: HashSet<Prefix> = self
            .filter
            .entries()?
            .into_iter()
            .map(|e| e.prefix)
            .collect();
        let mut seen = HashSet::new();
        let gone: Vec<Prefix> = remove
            .iter()
            .filter(|p| have.contains(p) && seen.insert(**p))
            .copied()
            .collect();
        if gone.is_empty() {
            return Ok(0);
        }
        let n = gone.len();
        self.filter.apply(&Update {
            remove: gone,
            ..Default::default()
        })?;
        Ok(n)
    }

    fn rules(&self) -> Result<Vec<(Prefix, Counts)>> {
        Ok(self
            .filter
            .entries()?
            .into_iter()
            .map(|e| {
                (
                    e.prefix,
                    Counts {
                        packets: e.packets,
                        bytes: e.bytes,
                    },
                )
            })
            .collect())
    }
}
