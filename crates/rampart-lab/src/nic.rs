//! The EMULATED SmartNIC's hardware table, from userspace.
//!
//! What a real card offers through TC flower `skip_sw` (exact-match rules
//! with hardware counters) is emulated by `xdp_nic_emul` on the lab's `nic`
//! hop: an exact-match table of source addresses with capacity K (the BPF
//! map's max_entries) and per-rule packet/byte counters. This handle is the
//! only way rampart touches it; the control plane's `emulated` tier backend
//! adds the per-update delay a real card has (~2 ms). Everything the
//! hybrid logic does runs for real on this table; what it cannot stand for
//! is the host CPU a real NIC saves.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bytemuck::{bytes_of, bytes_of_mut, pod_read_unaligned};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use rampart_bpf::abi::lab::{NicRuleKey, NicRuleStats, NicState};
use rampart_dataplane::error::BpfContext;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::topology::Lab;

/// Largest table the lab builds (real cards hold ~512–2K exact rules).
pub const MAX_CAPACITY: u32 = 65_536;

/// Counters of one hardware rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RuleStats {
    /// Frames dropped by the rule.
    pub packets: u64,
    /// Bytes dropped by the rule.
    pub bytes: u64,
}

/// The EMULATED NIC table of a lab (opened from its pins).
#[derive(Debug)]
pub struct NicTable {
    rules: MapHandle,
    state: MapHandle,
    capacity: u32,
}

fn key(addr: IpAddr) -> NicRuleKey {
    let mut k = NicRuleKey::default();
    let a = bytes_of_mut(&mut k.addr);
    match addr {
        IpAddr::V4(v4) => {
            a[..4].copy_from_slice(&v4.octets());
            k.family = 4;
        }
        IpAddr::V6(v6) => {
            a.copy_from_slice(&v6.octets());
            k.family = 6;
        }
    }
    k
}

fn addr_of(k: &[u8]) -> Option<IpAddr> {
    if k.len() != std::mem::size_of::<NicRuleKey>() {
        return None;
    }
    let k: NicRuleKey = pod_read_unaligned(k);
    let a: [u8; 16] = bytemuck::cast(k.addr);
    match k.family {
        4 => Some(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(a))),
        _ => None,
    }
}

fn rule_stats(v: &[u8]) -> RuleStats {
    let s: NicRuleStats = bytemuck::try_pod_read_unaligned(v).unwrap_or_default();
    RuleStats {
        packets: s.packets,
        bytes: s.bytes,
    }
}

impl NicTable {
    /// Open the table of `lab`'s EMULATED NIC.
    ///
    /// # Errors
    /// [`Error::NotUp`] when the lab (or its NIC) is not up.
    pub fn open(lab: &Lab) -> Result<Self> {
        lab.require_up()?;
        let dir = lab.pin_dir().join("nic");
        let rules = MapHandle::from_pinned_path(dir.join("rules"))
            .bpf_context(|| format!("opening {}/rules", dir.display()))?;
        let state = MapHandle::from_pinned_path(dir.join("state"))
            .bpf_context(|| format!("opening {}/state", dir.display()))?;
        let capacity = rules.max_entries();
        Ok(Self {
            rules,
            state,
            capacity,
        })
    }

    /// K: how many rules fit.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    fn state(&self) -> Result<NicState> {
        let v = self
            .state
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .bpf_context(|| "reading nic_state".into())?;
        Ok(v.and_then(|v| bytemuck::try_pod_read_unaligned(&v).ok())
            .unwrap_or_default())
    }

    fn set_count(&self, n: u32) -> Result<()> {
        let mut st = self.state()?;
        st.rules = n;
        self.state
            .update(&0u32.to_ne_bytes(), bytes_of(&st), MapFlags::ANY)
            .bpf_context(|| "writing nic_state".into())?;
        Ok(())
    }

    /// Installed rules with their counters.
    ///
    /// # Errors
    /// Map read failure.
    pub fn rules(&self) -> Result<Vec<(IpAddr, RuleStats)>> {
        let mut out = Vec::new();
        // A hash map walked while rules are removed restarts from its first
        // bucket, so a key can come twice: keep each address once.
        let mut seen = std::collections::HashSet::new();
        for k in self.rules.keys() {
            if !seen.insert(k.clone()) {
                continue;
            }
            let Some(v) = self
                .rules
                .lookup(&k, MapFlags::ANY)
                .bpf_context(|| "reading nic_rules".into())?
            else {
                continue;
            };
            if let Some(a) = addr_of(&k) {
                out.push((a, rule_stats(&v)));
            }
        }
        Ok(out)
    }

    /// Number of installed rules (the count the program keeps in `nic_state`,
    /// maintained by [`insert`](Self::insert), [`remove`](Self::remove) and
    /// [`clear`](Self::clear); O(1), unlike a walk of the table).
    ///
    /// # Errors
    /// Map read failure.
    pub fn len(&self) -> Result<usize> {
        Ok(self.state()?.rules as usize)
    }

    /// Is the table empty?
    ///
    /// # Errors
    /// Map read failure.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Install a drop rule for `addr`. A rule that exists keeps its counters.
    ///
    /// # Errors
    /// [`Error::InvalidSpec`] when the table is full (K rules), or the map update's error.
    pub fn insert(&self, addr: IpAddr) -> Result<()> {
        let k = key(addr);
        let k = bytes_of(&k);
        if self
            .rules
            .lookup(k, MapFlags::ANY)
            .bpf_context(|| "reading nic_rules".into())?
            .is_some()
        {
            return Ok(());
        }
        let n = self.len()? as u32;
        if n >= self.capacity {
            return Err(Error::InvalidSpec(format!(
                "EMULATED NIC table is full ({} rules): remove a rule first",
                self.capacity
            )));
        }
        self.rules
            .update(k, bytes_of(&NicRuleStats::default()), MapFlags::NO_EXIST)
            .bpf_context(|| format!("installing NIC rule for {addr}"))?;
        self.set_count(n + 1)
    }

    /// Remove the rule for `addr`; returns its final counters if it existed.
    ///
    /// # Errors
    /// Map failure.
    pub fn remove(&self, addr: IpAddr) -> Result<Option<RuleStats>> {
        let k = key(addr);
        let k = bytes_of(&k);
        let Some(v) = self
            .rules
            .lookup(k, MapFlags::ANY)
            .bpf_context(|| "reading nic_rules".into())?
        else {
            return Ok(None);
        };
        self.rules
            .delete(k)
            .bpf_context(|| format!("removing NIC rule for {addr}"))?;
        let n = self.len()? as u32;
        self.set_count(n.saturating_sub(1))?;
        Ok(Some(rule_stats(&v)))
    }

    /// Remove every rule.
    ///
    /// # Errors
    /// Map failure.
    pub fn clear(&self) -> Result<()> {
        let keys: Vec<Vec<u8>> = self.rules.keys().collect();
        for k in keys {
            let _ = self.rules.delete(&k);
        }
        self.set_count(0)
    }

    /// Frames from wan the NIC could not parse (forwarded unmatched).
    ///
    /// # Errors
    /// Map failure.
    pub fn unparsed(&self) -> Result<u64> {
        Ok(self.state()?.unparsed)
    }
}
