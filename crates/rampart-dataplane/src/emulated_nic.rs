//! The EMULATED SmartNIC's hardware table, from userspace.
//!
//! What a real card offers through TC flower `skip_sw` (source-prefix rules
//! with hardware counters) is emulated by the lab's `xdp_nic_emul` program
//! on a NIC hop: a longest-prefix-match table of source prefixes with
//! capacity K (the map's max_entries, `nic_rules`; an exact source is a
//! /32 or /128) whose value is the rule's slot in `nic_counters` (its
//! packet/byte counters, one copy per CPU), plus `nic_state` (the rule count the program checks before looking
//! anything up, and a count of frames it could not parse). This handle is
//! the only way rampart touches it: the lab opens it from its pins, the
//! ddos daemon's `emulated` tier from the program attached on the NIC hop
//! it is configured with. It is an EMULATION: everything the hybrid logic
//! does runs for real on this table; what it cannot stand for is the host
//! CPU a real NIC saves.

use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::path::Path;

use bytemuck::{bytes_of, bytes_of_mut};

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use rampart_bpf::abi::lab::{NicRuleKey, NicRuleStats, NicRuleVal, NicState, NIC_FAMILY_BITS};
use serde::Serialize;

use crate::error::{BpfContext, Error, Result};

const RULES_MAP: &str = "nic_rules";
const STATE_MAP: &str = "nic_state";
const COUNTERS_MAP: &str = "nic_counters";

/// Counters of one hardware rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RuleStats {
    /// Frames dropped by the rule.
    pub packets: u64,
    /// Bytes dropped by the rule.
    pub bytes: u64,
}

/// The EMULATED NIC's rule table and state.
#[derive(Debug)]
pub struct EmulatedNicTable {
    rules: MapHandle,
    state: MapHandle,
    counters: MapHandle,
    capacity: u32,
}

/// The LPM-trie key of a prefix in the lab's tables keyed like `nic_rules`
/// (the EMULATED NIC's rules, the lab's Internet's own addresses).
pub fn key(net: IpNet) -> [u8; size_of::<NicRuleKey>()] {
    // The trie compares bits up to prefixlen only, but a delete or lookup
    // of a rule must name it exactly: always the truncated network.
    let net = net.trunc();
    let mut k = NicRuleKey {
        prefixlen: NIC_FAMILY_BITS + u32::from(net.prefix_len()),
        ..NicRuleKey::default()
    };
    let a = bytes_of_mut(&mut k.addr);
    match net.addr() {
        IpAddr::V4(v4) => {
            a[..4].copy_from_slice(&v4.octets());
            k.family = 4;
        }
        IpAddr::V6(v6) => {
            a.copy_from_slice(&v6.octets());
            k.family = 6;
        }
    }
    bytemuck::cast(k)
}

fn net_of(k: &[u8]) -> Option<IpNet> {
    let k: NicRuleKey = bytemuck::try_pod_read_unaligned(k).ok()?;
    let a: [u8; 16] = bytemuck::cast(k.addr);
    let len = u8::try_from(k.prefixlen.checked_sub(NIC_FAMILY_BITS)?).ok()?;
    match k.family {
        4 => Ipv4Net::new(Ipv4Addr::new(a[0], a[1], a[2], a[3]), len)
            .ok()
            .map(IpNet::V4),
        6 => Ipv6Net::new(Ipv6Addr::from(a), len).ok().map(IpNet::V6),
        _ => None,
    }
}

/// The sum of a rule's per-CPU counters.
fn stats_of(per_cpu: &[Vec<u8>]) -> RuleStats {
    per_cpu.iter().fold(RuleStats::default(), |acc, v| {
        let s: NicRuleStats = bytemuck::try_pod_read_unaligned(v).unwrap_or_default();
        RuleStats {
            packets: acc.packets + s.packets,
            bytes: acc.bytes + s.bytes,
        }
    })
}

fn slot_of(v: &[u8]) -> Option<u32> {
    bytemuck::try_pod_read_unaligned::<NicRuleVal>(v)
        .ok()
        .map(|v| v.slot)
}

/// The three maps of the table.
type Maps = (MapHandle, MapHandle, MapHandle);

/// The table and state maps among the maps of program `prog_id`, or of a
/// program it tail-calls (a filter chained in front of the EMULATED NIC
/// holds the NIC's program in its program array), `depth` levels down.
fn find_maps(prog_id: u32, depth: u32) -> Result<Option<Maps>> {
    let mut rules = None;
    let mut state = None;
    let mut counters = None;
    let mut next = Vec::new();
    for id in crate::xdp::prog_map_ids(prog_id)? {
        let Ok(m) = MapHandle::from_map_id(id) else {
            continue;
        };
        match m.name().to_str() {
            Some(RULES_MAP) => rules = Some(m),
            Some(STATE_MAP) => state = Some(m),
            Some(COUNTERS_MAP) => counters = Some(m),
            _ if m.map_type() == MapType::ProgArray && depth > 0 => {
                for k in 0..m.max_entries() {
                    // A program array read from userspace gives the program's id.
                    if let Ok(Some(v)) = m.lookup(&k.to_ne_bytes(), MapFlags::ANY) {
                        if let Ok(b) = <[u8; 4]>::try_from(&v[..]) {
                            next.push(u32::from_ne_bytes(b));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if let (Some(r), Some(s), Some(c)) = (rules, state, counters) {
        return Ok(Some((r, s, c)));
    }
    for id in next {
        if let Some(found) = find_maps(id, depth - 1)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

impl EmulatedNicTable {
    /// The table of the EMULATED NIC pinned in `dir` (`rules`, `state`, `counters`).
    ///
    /// # Errors
    /// [`Error::Bpf`] naming the missing pin.
    pub fn open_pinned(dir: &Path) -> Result<Self> {
        let rules = MapHandle::from_pinned_path(dir.join("rules"))
            .bpf_context(|| format!("opening {}/rules", dir.display()))?;
        let state = MapHandle::from_pinned_path(dir.join("state"))
            .bpf_context(|| format!("opening {}/state", dir.display()))?;
        let counters = MapHandle::from_pinned_path(dir.join("counters"))
            .bpf_context(|| format!("opening {}/counters", dir.display()))?;
        Ok(Self::from_maps(rules, state, counters))
    }

    /// The table of the EMULATED NIC whose program runs on the NIC hop
    /// `iface` of `ns` — attached there, or tail-called by the program
    /// attached there (a filter chained in front of it).
    ///
    /// # Errors
    /// No XDP program on the hop, or none of its programs is the EMULATED NIC.
    pub fn open_hop(ns: Option<&str>, iface: &str) -> Result<Self> {
        let where_ = match ns {
            Some(n) => format!("{iface} (netns {n})"),
            None => iface.to_string(),
        };
        let id = crate::xdp::attached_prog_id(ns, iface)?.ok_or_else(|| {
            Error::Invalid(format!(
                "no XDP program on {where_}: the emulated hardware tier needs the EMULATED NIC's \
                 program there (set [hw] iface and netns to the NIC hop)"
            ))
        })?;
        let (rules, state, counters) = find_maps(id, 2)?.ok_or_else(|| {
            Error::Invalid(format!(
                "the XDP program on {where_} is not the EMULATED NIC (no {RULES_MAP} map): set \
                 [hw] iface and netns to the NIC hop, or use a real backend"
            ))
        })?;
        Ok(Self::from_maps(rules, state, counters))
    }

    /// The table from its three maps.
    pub fn from_maps(rules: MapHandle, state: MapHandle, counters: MapHandle) -> Self {
        let capacity = rules.max_entries().min(counters.max_entries());
        Self {
            rules,
            state,
            counters,
            capacity,
        }
    }

    /// The counters of the rule whose value is `v` (zero for a value that
    /// names no slot).
    fn counters_of(&self, v: &[u8]) -> Result<RuleStats> {
        let Some(slot) = slot_of(v) else {
            return Ok(RuleStats::default());
        };
        let per_cpu = self
            .counters
            .lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)
            .bpf_context(|| "reading nic_counters".into())?
            .unwrap_or_default();
        Ok(stats_of(&per_cpu))
    }

    /// The lowest slot no rule holds, its counters zeroed.
    fn free_slot(&self) -> Result<u32> {
        let used: std::collections::HashSet<u32> = self
            .rules
            .keys()
            .filter_map(|k| self.rules.lookup(&k, MapFlags::ANY).ok().flatten())
            .filter_map(|v| slot_of(&v))
            .collect();
        let slot = (0..self.capacity)
            .find(|s| !used.contains(s))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "EMULATED NIC table is full ({} rules): remove a rule first",
                    self.capacity
                ))
            })?;
        let zero = vec![vec![0u8; size_of::<NicRuleStats>()]; crate::maps::possible_cpus()];
        self.counters
            .update_percpu(&slot.to_ne_bytes(), &zero, MapFlags::ANY)
            .bpf_context(|| "clearing nic_counters".into())?;
        Ok(slot)
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

    /// Publish `n` as the rule count the program checks before looking
    /// anything up (0: the lookup is skipped). [`insert`](Self::insert),
    /// [`remove`](Self::remove) and [`clear`](Self::clear) keep it; callers
    /// of [`add_rule`](Self::add_rule) and [`delete_rule`](Self::delete_rule)
    /// set it themselves, once per batch.
    ///
    /// # Errors
    /// Map failure.
    pub fn set_count(&self, n: u32) -> Result<()> {
        let mut st = self.state()?;
        st.rules = n;
        self.state
            .update(&0u32.to_ne_bytes(), bytes_of(&st), MapFlags::ANY)
            .bpf_context(|| "writing nic_state".into())
    }

    /// Rules in the table, counted by walking it (O(K), unlike [`len`](Self::len)).
    pub fn walk_count(&self) -> usize {
        self.rules.keys().count()
    }

    /// Installed rules with their counters.
    ///
    /// # Errors
    /// Map read failure.
    pub fn rules(&self) -> Result<Vec<(IpNet, RuleStats)>> {
        let mut out = Vec::new();
        // A map walked while rules are removed may restart from its first
        // key, so a key can come twice: keep each rule once.
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
            if let Some(n) = net_of(&k) {
                out.push((n, self.counters_of(&v)?));
            }
        }
        Ok(out)
    }

    /// Number of installed rules (the count the program keeps in
    /// `nic_state`; O(1), unlike a walk of the table).
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

    /// Is there a rule for exactly `net` (not only a shorter prefix holding it)?
    /// O(K): an LPM trie's lookup answers with the longest match, so this
    /// walks the keys.
    pub fn contains(&self, net: IpNet) -> bool {
        let k = key(net);
        self.rules.keys().any(|x| x[..] == k[..])
    }

    /// Add a rule for `net` with zero counters, leaving the count alone
    /// ([`set_count`](Self::set_count)). Returns false when it was there.
    ///
    /// # Errors
    /// The map update's error (e.g. the table is full).
    pub fn add_rule(&self, net: IpNet) -> Result<bool> {
        if self.contains(net) {
            return Ok(false);
        }
        let slot = self.free_slot()?;
        match self.rules.update(
            &key(net),
            bytes_of(&NicRuleVal { slot }),
            MapFlags::NO_EXIST,
        ) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Error::Bpf {
                context: format!("installing EMULATED NIC rule for {net}"),
                err: e,
            }),
        }
    }

    /// Delete the rule for exactly `net`, leaving the count alone. Returns
    /// false when there was none.
    pub fn delete_rule(&self, net: IpNet) -> bool {
        self.rules.delete(&key(net)).is_ok()
    }

    /// Install a drop rule for `net` (an exact source: `IpNet::from(addr)`).
    /// A rule that exists keeps its counters.
    ///
    /// # Errors
    /// [`Error::Invalid`] when the table is full (K rules), or the map update's error.
    pub fn insert(&self, net: IpNet) -> Result<()> {
        if self.contains(net) {
            return Ok(());
        }
        let n = self.len()? as u32;
        if n >= self.capacity {
            return Err(Error::Invalid(format!(
                "EMULATED NIC table is full ({} rules): remove a rule first",
                self.capacity
            )));
        }
        self.add_rule(net)?;
        self.set_count(n + 1)
    }

    /// Remove the rule for exactly `net`; returns its final counters if it existed.
    ///
    /// # Errors
    /// Map failure.
    pub fn remove(&self, net: IpNet) -> Result<Option<RuleStats>> {
        if !self.contains(net) {
            return Ok(None);
        }
        let k = key(net);
        let Some(v) = self
            .rules
            .lookup(&k, MapFlags::ANY)
            .bpf_context(|| "reading nic_rules".into())?
        else {
            return Ok(None);
        };
        let last = self.counters_of(&v)?;
        self.rules
            .delete(&k)
            .bpf_context(|| format!("removing EMULATED NIC rule for {net}"))?;
        let n = self.len()? as u32;
        self.set_count(n.saturating_sub(1))?;
        Ok(Some(last))
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

    /// Frames from the wire the NIC could not parse (forwarded unmatched).
    ///
    /// # Errors
    /// Map failure.
    pub fn unparsed(&self) -> Result<u64> {
        Ok(self.state()?.unparsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_both_families_and_lengths() {
        for n in [
            "192.0.2.7/32",
            "198.51.100.0/24",
            "0.0.0.0/0",
            "2001:db8::5/128",
            "2001:db8:1::/48",
        ] {
            let n: IpNet = n.parse().unwrap();
            assert_eq!(net_of(&key(n)), Some(n));
        }
        // Host bits beyond the length are cleared: one rule per network.
        let loose: IpNet = "198.51.100.77/24".parse().unwrap();
        assert_eq!(key(loose), key("198.51.100.0/24".parse().unwrap()));
        let k = key("192.0.2.7/32".parse().unwrap());
        assert_eq!(
            u32::from_ne_bytes(k[..4].try_into().unwrap()),
            NIC_FAMILY_BITS + 32,
            "the family's bits count in prefixlen"
        );
        let mut bad = k;
        bad[4] = 9; // an unknown family
        assert_eq!(net_of(&bad), None);
        assert_eq!(net_of(&k[..10]), None);
        let mut short = k;
        short[..4].copy_from_slice(&3u32.to_ne_bytes()); // shorter than the family
        assert_eq!(net_of(&short), None);
    }

    #[test]
    fn rule_counters_read_from_value_bytes() {
        let cpu = |p: u64, b: u64| {
            let mut v = vec![0u8; 16];
            v[..8].copy_from_slice(&p.to_ne_bytes());
            v[8..].copy_from_slice(&b.to_ne_bytes());
            v
        };
        // Summed over the CPUs.
        assert_eq!(
            stats_of(&[cpu(7, 448), cpu(3, 192)]),
            RuleStats {
                packets: 10,
                bytes: 640
            }
        );
        assert_eq!(stats_of(&[vec![0u8; 4]]), RuleStats::default());
        assert_eq!(slot_of(&5u32.to_ne_bytes()), Some(5));
        assert_eq!(slot_of(&[1, 2]), None);
    }
}
