//! `emulated`: the lab's EMULATED SmartNIC table (DESIGN §6).
//!
//! An exact-match table of K source addresses with per-rule packet/byte
//! counters, run by `xdp_nic_emul` on the lab's `nic` hop in front of the
//! host ([`rampart_lab::nic::NicTable`]). A real card's rule update costs
//! ~2 ms (TC flower on ConnectX / Agilio); this backend sleeps
//! `update_delay` before each insert or removal so the daemon's
//! bounded-update logic sees the same cost. It is an EMULATION: what it
//! cannot show is the host CPU a real NIC saves.

use std::time::Duration;

use rampart_ddos::Prefix;
use rampart_lab::nic::NicTable;
use rampart_lab::Lab;

use super::{require_host, CounterKind, Counts, Tier, TierInfo};
use crate::error::Result;

/// Default per-update delay (what a real card costs).
pub const DEFAULT_UPDATE_DELAY: Duration = Duration::from_millis(2);

/// The EMULATED NIC tier of one lab.
#[derive(Debug)]
pub struct EmulatedNic {
    table: NicTable,
    lab: String,
    delay: Duration,
}

impl EmulatedNic {
    /// Open the EMULATED NIC of lab `prefix` (the lab must be up).
    ///
    /// # Errors
    /// The lab or its NIC pins are missing.
    pub fn open(lab_prefix: &str, delay: Duration) -> Result<Self> {
        let lab = Lab::new(lab_prefix)?;
        Ok(Self {
            table: NicTable::open(&lab)?,
            lab: lab_prefix.to_string(),
            delay,
        })
    }

    fn pause(&self) {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
    }
}

impl Tier for EmulatedNic {
    fn info(&self) -> TierInfo {
        TierInfo {
            name: "emulated",
            role: "hw",
            location: format!("EMULATED NIC of lab {}", self.lab),
            capacity: Some(self.table.capacity() as usize),
            update_cost: self.delay,
            counters: CounterKind::Exact,
            emulated: true,
        }
    }

    fn install(&mut self, add: &[Prefix]) -> Result<usize> {
        for p in add {
            require_host("emulated", p)?;
        }
        let have: std::collections::HashSet<std::net::IpAddr> =
            self.table.rules()?.into_iter().map(|(a, _)| a).collect();
        let mut n = 0;
        for p in add {
            let a = p.net().addr();
            if have.contains(&a) {
                continue;
            }
            if have.len() + n >= self.table.capacity() as usize {
                return Err(crate::Error::Full {
                    tier: "emulated",
                    capacity: self.table.capacity() as usize,
                });
            }
            self.pause();
            self.table.insert(a)?;
            n += 1;
        }
        Ok(n)
    }

    fn remove(&mut self, remove: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in remove {
            self.pause();
            if self.table.remove(p.net().addr())?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    fn rules(&self) -> Result<Vec<(Prefix, Counts)>> {
        Ok(self
            .table
            .rules()?
            .into_iter()
            .map(|(a, s)| {
                (
                    Prefix::host(a),
                    Counts {
                        packets: s.packets,
                        bytes: s.bytes,
                    },
                )
            })
            .collect())
    }
}
