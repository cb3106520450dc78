//! `emulated`: the EMULATED SmartNIC table on a NIC hop.
//!
//! A longest-prefix-match table of K source prefixes (exact sources are
//! /32 and /128) with per-rule packet/byte counters, run by the lab's `xdp_nic_emul` on the NIC hop in front of
//! the host; the config names the hop (`[hw] netns`, `iface`) and the tier
//! finds the table among the maps of the XDP program attached there
//! ([`EmulatedNicTable::open_hop`]). A real card's rule update costs
//! ~2 ms (TC flower on ConnectX / Agilio); this backend sleeps
//! `update_delay` before each insert or removal so the daemon's
//! bounded-update logic sees the same cost. It is an EMULATION: what it
//! cannot show is the host CPU a real NIC saves.

use std::time::Duration;

use rampart_dataplane::emulated_nic::EmulatedNicTable;
use rampart_ddos::Prefix;

use super::{CounterKind, Counts, Tier, TierInfo};
use crate::config::NicHop;
use crate::error::Result;

/// Default per-update delay (what a real card costs).
pub const DEFAULT_UPDATE_DELAY: Duration = Duration::from_millis(2);

/// The EMULATED NIC tier on one NIC hop.
///
/// Inserts and removals write the table one rule at a time and publish
/// the rule count once per batch (raised before a batch of inserts, so the
/// program looks rules up as soon as one is live).
#[derive(Debug)]
pub struct EmulatedNic {
    table: EmulatedNicTable,
    hop: String,
    delay: Duration,
    counters: bool,
}

impl EmulatedNic {
    /// Open the EMULATED NIC whose program runs on the NIC hop `hop`
    /// (attached there, or behind the filter the `xdp-nic` modes chain in
    /// front of it).
    ///
    /// # Errors
    /// No XDP program on the hop, or it is not the EMULATED NIC.
    pub fn open(hop: &NicHop, delay: Duration) -> Result<Self> {
        Ok(Self {
            table: EmulatedNicTable::open_hop(hop.netns.as_deref(), &hop.iface)?,
            hop: hop.to_string(),
            delay,
            counters: true,
        })
    }

    /// Hide the per-rule counters (`hw.counters = false`): the tier then
    /// reports [`CounterKind::None`] and zero counts, as an ethtool-ntuple
    /// card would, so the daemon's rate estimation for counterless tiers
    /// (withdrawal probes) runs against a real data path.
    #[must_use]
    pub fn without_counters(mut self) -> Self {
        self.counters = false;
        self
    }

    fn pause(&self) {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
    }

    fn publish_count(&self, n: usize) -> Result<()> {
        Ok(self.table.set_count(n as u32)?)
    }
}

impl Tier for EmulatedNic {
    fn info(&self) -> TierInfo {
        TierInfo {
            name: "emulated",
            role: "hw",
            location: if self.counters {
                format!("EMULATED NIC on {}", self.hop)
            } else {
                format!(
                    "EMULATED NIC on {} (per-rule counters hidden, as on an ethtool-ntuple card)",
                    self.hop
                )
            },
            capacity: Some(self.table.capacity() as usize),
            update_cost: self.delay,
            counters: if self.counters {
                CounterKind::Exact
            } else {
                CounterKind::None
            },
            emulated: true,
        }
    }

    fn install(&mut self, add: &[Prefix]) -> Result<usize> {
        let cap = self.table.capacity() as usize;
        let present: std::collections::HashSet<_> =
            self.table.rules()?.into_iter().map(|(n, _)| n).collect();
        let mut have = present.len();
        let mut n = 0;
        // Raise the count first so the program looks rules up as soon as one is live.
        if !add.is_empty() {
            self.publish_count(have + add.len())?;
        }
        let mut res = Ok(());
        for p in add {
            let a = p.net();
            if present.contains(&a) {
                continue; // present: counters kept
            }
            if have >= cap {
                res = Err(crate::Error::Full {
                    tier: "emulated",
                    capacity: cap,
                });
                break;
            }
            self.pause();
            match self.table.add_rule(a) {
                Ok(true) => {
                    have += 1;
                    n += 1;
                }
                Ok(false) => {}
                Err(e) => {
                    res = Err(e.into());
                    break;
                }
            }
        }
        self.publish_count(self.table.walk_count())?;
        res.map(|()| n)
    }

    fn remove(&mut self, remove: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in remove {
            self.pause();
            if self.table.delete_rule(p.net()) {
                n += 1;
            }
        }
        if n > 0 {
            self.publish_count(self.table.walk_count())?;
        }
        Ok(n)
    }

    fn rules(&self) -> Result<Vec<(Prefix, Counts)>> {
        Ok(self
            .table
            .rules()?
            .into_iter()
            .map(|(a, s)| {
                let c = if self.counters {
                    Counts {
                        packets: s.packets,
                        bytes: s.bytes,
                    }
                } else {
                    Counts::default()
                };
                (Prefix::truncate(a.addr(), a.prefix_len()), c)
            })
            .collect())
    }
}
