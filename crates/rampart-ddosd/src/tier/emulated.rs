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

use std::net::IpAddr;

use libbpf_rs::{MapCore, MapFlags, MapHandle};
use rampart_ddos::Prefix;
use rampart_lab::nic::NicTable;
use rampart_lab::Lab;

use super::{require_host, CounterKind, Counts, Tier, TierInfo};
use crate::error::Result;

/// Default per-update delay (what a real card costs).
pub const DEFAULT_UPDATE_DELAY: Duration = Duration::from_millis(2);

/// The EMULATED NIC tier of one lab.
///
/// Reads go through [`NicTable`]; inserts and removals write the same
/// pinned maps directly, one map operation per rule and one rule-count
/// update per batch (the lab handle recounts the table on every insert,
/// which would cost more than the emulated card's own delay).
#[derive(Debug)]
pub struct EmulatedNic {
    table: NicTable,
    rules: MapHandle,
    state: MapHandle,
    lab: String,
    delay: Duration,
    counters: bool,
}

fn key(a: IpAddr) -> [u8; 20] {
    let mut k = [0u8; 20];
    match a {
        IpAddr::V4(v) => {
            k[..4].copy_from_slice(&v.octets());
            k[16..].copy_from_slice(&4u32.to_ne_bytes());
        }
        IpAddr::V6(v) => {
            k[..16].copy_from_slice(&v.octets());
            k[16..].copy_from_slice(&6u32.to_ne_bytes());
        }
    }
    k
}

impl EmulatedNic {
    /// Open the EMULATED NIC of lab `prefix` (the lab must be up).
    ///
    /// # Errors
    /// The lab or its NIC pins are missing.
    pub fn open(lab_prefix: &str, delay: Duration) -> Result<Self> {
        let lab = Lab::new(lab_prefix)?;
        let table = NicTable::open(&lab)?;
        let dir = lab.pin_dir().join("nic");
        let open = |n: &str| {
            MapHandle::from_pinned_path(dir.join(n)).map_err(|e| {
                crate::Error::Dataplane(rampart_dataplane::Error::Bpf {
                    context: format!("opening {}/{n}", dir.display()),
                    err: e,
                })
            })
        };
        Ok(Self {
            rules: open("rules")?,
            state: open("state")?,
            table,
            lab: lab_prefix.to_string(),
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

    fn count(&self) -> usize {
        self.rules.keys().count()
    }

    /// Publish the rule count the program checks before looking anything up.
    fn set_count(&self, n: usize) -> Result<()> {
        let mut v = self
            .state
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .unwrap_or_else(|| vec![0u8; 16]);
        v[..4].copy_from_slice(&(n as u32).to_ne_bytes());
        self.state
            .update(&0u32.to_ne_bytes(), &v, MapFlags::ANY)
            .map_err(|e| {
                crate::Error::io(
                    "writing the EMULATED NIC state",
                    std::io::Error::other(e.to_string()),
                )
            })
    }
}

impl Tier for EmulatedNic {
    fn info(&self) -> TierInfo {
        TierInfo {
            name: "emulated",
            role: "hw",
            location: if self.counters {
                format!("EMULATED NIC of lab {}", self.lab)
            } else {
                format!(
                    "EMULATED NIC of lab {} (per-rule counters hidden, as on an ethtool-ntuple card)",
                    self.lab
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
        for p in add {
            require_host("emulated", p)?;
        }
        let cap = self.table.capacity() as usize;
        let mut have = self.count();
        let mut n = 0;
        // Raise the count first so the program looks rules up as soon as one is live.
        if !add.is_empty() {
            self.set_count(have + add.len())?;
        }
        let mut res = Ok(());
        for p in add {
            let k = key(p.net().addr());
            if matches!(self.rules.lookup(&k, MapFlags::ANY), Ok(Some(_))) {
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
            match self
                .rules
                .update(&key(p.net().addr()), &[0u8; 16], MapFlags::NO_EXIST)
            {
                Ok(()) => {
                    have += 1;
                    n += 1;
                }
                Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    res = Err(crate::Error::io(
                        format!("installing EMULATED NIC rule for {p}"),
                        std::io::Error::other(e.to_string()),
                    ));
                    break;
                }
            }
        }
        self.set_count(self.count())?;
        res.map(|()| n)
    }

    fn remove(&mut self, remove: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in remove {
            self.pause();
            if self.rules.delete(&key(p.net().addr())).is_ok() {
                n += 1;
            }
        }
        if n > 0 {
            self.set_count(self.count())?;
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
                (Prefix::host(a), c)
            })
            .collect())
    }
}
