//! The filter handle: install the ddos pipeline (`xdp_filter` → tail call →
//! `xdp_features`) on an interface with all its state pinned, and manage
//! the blacklist from any later process.
//!
//! Layout under `/sys/fs/bpf/rampart/ddos/<scope>/` (scope = `IFACE`, or
//! `NETNS-IFACE` for an interface inside a named network namespace):
//!
//! ```text
//! link            the XDP bpf_link (absent for a filter created but not linked)
//! prog_filter     xdp_filter        prog_features   xdp_features (unless --no-features)
//! ddos_ctl        control block     ddos_bl4_keys / ddos_bl4_ids   the two exact IPv4 tables
//! ddos_counters   per-entry counters + expiry       ddos_meta      what each entry id is
//! ddos_bl6 ddos_lpm4 ddos_lpm6      IPv6 exact, IPv4/IPv6 prefixes
//! ddos_fstats     per-CPU drop/pass counters        ddos_next      the program array
//! ddos_police     policed sources: token buckets and their counters
//! ddos_capture ddos_capctl ddos_evidence            evidence sampling (crate::evidence)
//! ddos_fctl ddos_fkeys4/6 ddos_fvals4/6 ddos_faddr6 ddos_featst   feature extraction (pairs)
//! ddos_vkeys4/6 ddos_vvals4/6 ddos_vhll4/6          feature extraction (victims)
//! ddos_compl compl_link                             handshake completions (tp_btf)
//! ddos_protect ddos_ckey [prog_tc_cookie tc_link ddos_tcst]   protection (crate::protect)
//! ```
//!
//! Updates ([`Filter::apply`]) are all-or-nothing from the user's point of
//! view: everything is validated (syntax, duplicates, presence, capacity)
//! before anything changes. The exact IPv4 table is rebuilt off to the side
//! and published with one atomic store, so traffic never sees a partial
//! table and entries that stay keep their id and therefore their counters.
//! Concurrent `rampart ddos` processes serialise on a lock file in
//! `/run/rampart/ddos/`.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use rampart_bpf::abi::ddos::{
    Bl4Bucket, Bl4Table, Counter, EntryMeta, FilterCtl, FilterStats as RawStats, DDOS_BL4_NARROW,
    DDOS_BL4_N_EMPTY, DDOS_BL4_N_SLOTS_PER_BUCKET, DDOS_BL4_SLOTS_PER_BUCKET,
    DDOS_DROP_REASON_LABELS, DDOS_DROP_REASON_MAX, DDOS_META_USED, DDOS_PASS_REASON_LABELS,
    DDOS_PASS_REASON_MAX, DDOS_POLICE_BURST_MIN, DDOS_POLICE_MAX, DDOS_POLICE_MAX_PPS,
    DDOS_POLICE_NS,
};
use rampart_bpf::abi::ddos::{PoliceKey, PoliceVal};
use rampart_bpf::tp_completions::TpCompletionsSkelBuilder;
use rampart_bpf::xdp_features::XdpFeaturesSkelBuilder;
use rampart_bpf::xdp_filter::XdpFilterSkelBuilder;
use rampart_dataplane::chain::{Chain, CHAIN_SLOT_DDOS};
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::maps as dmaps;
use rampart_dataplane::xdp::{XdpLink, XdpMode};
use rampart_dataplane::{netns, pin};
use rand::SeedableRng;
use serde::Serialize;

use crate::clock;
use crate::error::{Error, Result};
use crate::maps::{self, ArrayMmap, PinnedMap};
use crate::prefix::{Kind, Prefix};
use crate::table;

/// The parse depth limits: defaults and ceilings of `max_vlans` / `max_v6_ext`.
pub use rampart_bpf::abi::common::{PARSE_DEF_V6_EXT, PARSE_MAX_V6_EXT, PARSE_MAX_VLANS};

/// VLAN tags the filter walks by default: QinQ and beyond (the generic
/// `parse_packet()` walks 2; the filter has the verifier budget for more).
pub const FILTER_DEF_VLANS: u32 = 4;

/// Pin names (see the module documentation).
pub mod pins {
    /// The XDP link.
    pub const LINK: &str = "link";
    /// The filter program.
    pub const PROG_FILTER: &str = "prog_filter";
    /// The feature program.
    pub const PROG_FEATURES: &str = "prog_features";
    /// Handshake completions per pair (drained each interval).
    pub const COMPLETIONS: &str = "ddos_compl";
    /// The completions program's tp_btf link.
    pub const COMPLETIONS_LINK: &str = "compl_link";
    /// Policed sources (token buckets).
    pub const POLICE: &str = "ddos_police";
}

/// Highest rate (packets/s) a source may be policed at.
pub const POLICE_MAX_PPS: u32 = DDOS_POLICE_MAX_PPS;

/// Which packets of a policed source its rate applies to: a mask of the
/// `POLICE_*` classes, or [`POLICE_ALL`].
pub const POLICE_ALL: u32 = 0;
/// TCP SYNs without ACK (new connections).
pub const POLICE_SYN: u32 = rampart_bpf::abi::ddos::DDOS_POLICE_SYN;
/// UDP.
pub const POLICE_UDP: u32 = rampart_bpf::abi::ddos::DDOS_POLICE_UDP;
/// ICMP and ICMPv6.
pub const POLICE_ICMP: u32 = rampart_bpf::abi::ddos::DDOS_POLICE_ICMP;
/// IP fragments.
pub const POLICE_FRAG: u32 = rampart_bpf::abi::ddos::DDOS_POLICE_FRAG;

/// Most entries of the exact IPv4 table rampart accepts at attach (2^24).
pub const MAX_EXACT4_CAP: u32 = 1 << 24;

/// Where a filter lives: an interface, possibly inside a named netns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Named network namespace (`ip netns` name), `None` for the caller's.
    pub netns: Option<String>,
    /// Interface name.
    pub iface: String,
}

impl Scope {
    /// A scope, with names checked.
    ///
    /// # Errors
    /// [`Error::Invalid`] for names that cannot be interfaces or namespaces.
    pub fn new(netns: Option<&str>, iface: &str) -> Result<Self> {
        if iface.is_empty()
            || iface.len() > 15
            || iface.contains(['/', ' ', '\0'])
            || iface == "."
            || iface == ".."
        {
            return Err(Error::Invalid(format!(
                "bad interface name {iface:?}: 1-15 characters, no '/' or spaces"
            )));
        }
        if let Some(ns) = netns {
            if ns.is_empty() || ns.contains(['/', '\0']) || ns.starts_with('.') {
                return Err(Error::Invalid(format!("bad network namespace name {ns:?}")));
            }
        }
        Ok(Self {
            netns: netns.map(str::to_string),
            iface: iface.to_string(),
        })
    }

    /// Directory name under `/sys/fs/bpf/rampart/ddos/` (bpffs refuses
    /// names with a dot, so a `.` — as in `eth0.100` — is written `%2e`).
    pub fn name(&self) -> String {
        let n = match &self.netns {
            Some(ns) => format!("{ns}-{}", self.iface),
            None => self.iface.clone(),
        };
        n.replace('.', "%2e")
    }

    /// For messages: `host0 (netns rp-host)`.
    pub fn describe(&self) -> String {
        match &self.netns {
            Some(ns) => format!("{} (netns {ns})", self.iface),
            None => self.iface.clone(),
        }
    }
}

/// The pin directory of a scope name.
pub fn pin_dir(name: &str) -> PathBuf {
    pin::path(&["ddos", name])
}

/// Names of every installed filter (directories under `/sys/fs/bpf/rampart/ddos`).
pub fn installed() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(pin::path(&["ddos"]))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}

/// The filter a command means: the given scope, or the only one installed.
///
/// # Errors
/// [`Error::NotAttached`] when there is none, [`Error::Ambiguous`] when
/// several are installed and no scope was given.
pub fn resolve(scope: Option<&Scope>) -> Result<String> {
    if let Some(s) = scope {
        let name = s.name();
        if !pin::exists(&pin_dir(&name))? {
            return Err(Error::NotAttached {
                where_: s.describe(),
                path: pin_dir(&name),
            });
        }
        return Ok(name);
    }
    // Not readable (no root) is said as such, not as "nothing attached".
    pin::exists(&pin::path(&["ddos"]))?;
    let all = installed();
    match all.len() {
        0 => Err(Error::NotAttached {
            where_: "any interface".into(),
            path: pin::path(&["ddos"]),
        }),
        1 => Ok(all[0].clone()),
        _ => Err(Error::Ambiguous(all.join(", "))),
    }
}

/// Settings fixed when the filter is installed.
#[derive(Debug, Clone, Serialize)]
pub struct FilterConfig {
    /// Capacity of the exact IPv4 table (entries).
    pub max_entries: u32,
    /// Capacity of each of: exact IPv6, IPv4 prefixes, IPv6 prefixes.
    pub max_other: u32,
    /// Per-entry counters count 1 in 2^shift matches (0: every packet).
    pub sample_shift: u32,
    /// Pass malformed frames instead of dropping them.
    pub pass_malformed: bool,
    /// Chain the feature extraction stage.
    pub features: bool,
    /// (src, dst) pairs one feature interval holds.
    pub features_capacity: u32,
    /// Drop tunnel packets (GRE, IP in IP, VXLAN, Geneve, MPLS without IP),
    /// whose inner source the filter does not check, instead of passing
    /// them (counted as `encap_<kind>` either way).
    pub drop_encap: bool,
    /// VLAN tags the parser walks (more: `too_deep`).
    pub max_vlans: u32,
    /// IPv6 extension headers the parser walks (more: `too_deep`).
    pub max_v6_ext: u32,
    /// Victims (IPv4 addresses, IPv6 /64s) one feature interval holds, per family.
    pub victims_capacity: u32,
    /// 1 in this many TCP packets to a victim is looked up in the socket
    /// table for the out-of-state estimate (a power of two).
    pub sock_sample: u32,
    /// UDP source ports of the amplification classes, in the order of
    /// `rampart_ddos_control::features::UDP_CLASSES`.
    pub amp_ports: [u16; 7],
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self {
            max_entries: 1 << 20,
            max_other: 1 << 16,
            sample_shift: 4,
            pass_malformed: false,
            features: true,
            features_capacity: 1 << 18,
            drop_encap: false,
            max_vlans: FILTER_DEF_VLANS,
            max_v6_ext: PARSE_DEF_V6_EXT,
            victims_capacity: 4096,
            sock_sample: 16,
            amp_ports: rampart_ddos_control::features::UDP_AMP_PORTS,
        }
    }
}

impl FilterConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the option.
    pub fn validate(&self) -> Result<()> {
        if self.max_entries == 0 || self.max_entries > MAX_EXACT4_CAP {
            return Err(Error::Invalid(format!(
                "--max-entries {} out of range: use 1..={MAX_EXACT4_CAP}",
                self.max_entries
            )));
        }
        if self.max_other == 0 || self.max_other > 1 << 22 {
            return Err(Error::Invalid(format!(
                "--max-prefixes {} out of range: use 1..=4194304",
                self.max_other
            )));
        }
        if self.sample_shift > 15 {
            return Err(Error::Invalid(format!(
                "--sample-shift {} out of range: use 0 (count every packet) ..= 15",
                self.sample_shift
            )));
        }
        if self.max_vlans > PARSE_MAX_VLANS {
            return Err(Error::Invalid(format!(
                "--max-vlans {} out of range: use 0..={PARSE_MAX_VLANS} (VLAN tags walked)",
                self.max_vlans
            )));
        }
        if self.max_v6_ext > PARSE_MAX_V6_EXT {
            return Err(Error::Invalid(format!(
                "--max-v6-ext {} out of range: use 0..={PARSE_MAX_V6_EXT} (IPv6 extension headers walked)",
                self.max_v6_ext
            )));
        }
        if self.features && (self.features_capacity == 0 || self.features_capacity > 1 << 24) {
            return Err(Error::Invalid(format!(
                "--features-capacity {} out of range: use 1..=16777216",
                self.features_capacity
            )));
        }
        if self.features && (self.victims_capacity == 0 || self.victims_capacity > 1 << 20) {
            return Err(Error::Invalid(format!(
                "victims capacity {} out of range: use 1..=1048576",
                self.victims_capacity
            )));
        }
        if !self.sock_sample.is_power_of_two() || self.sock_sample > 1 << 16 {
            return Err(Error::Invalid(format!(
                "socket sample 1 in {} is not a power of two in 1..=65536",
                self.sock_sample
            )));
        }
        Ok(())
    }

    /// Victim key slots per interval slot (the same for IPv4 and IPv6):
    /// `victims_capacity` victims fill at most 5/8 of a table.
    pub fn victim_cap(&self) -> u32 {
        (u64::from(self.victims_capacity) * 8 / 5)
            .next_power_of_two()
            .max(64) as u32
    }

    fn cap_buckets(&self) -> u32 {
        (table::slots_for(self.max_entries as usize) / DDOS_BL4_SLOTS_PER_BUCKET) as u32
    }

    /// Key slots per interval slot: IPv4 and IPv6, powers of two, so that
    /// `features_capacity` pairs fill at most 5/8 of the IPv4 table (short
    /// probe sequences); IPv6 gets a quarter of that.
    pub fn feature_caps(&self) -> (u32, u32) {
        let cap4 = (u64::from(self.features_capacity) * 8 / 5)
            .next_power_of_two()
            .max(64) as u32;
        (cap4, (cap4 / 4).max(64))
    }

    fn cap_ids(&self) -> u32 {
        self.max_entries + 3 * self.max_other
    }
}

/// One entry to block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEntry {
    /// The prefix.
    pub prefix: Prefix,
    /// Remove it automatically after this long.
    pub ttl: Option<Duration>,
}

/// A batch of changes, applied all or nothing.
#[derive(Debug, Clone, Default)]
pub struct Update {
    /// Prefixes to block (an error if already blocked, unless `replace`).
    pub add: Vec<BlockEntry>,
    /// Prefixes to unblock (an error if not blocked).
    pub remove: Vec<Prefix>,
    /// Blocked prefixes whose expiry is set anew (`ttl`, `None`: never),
    /// keeping their id and counters (an error if not blocked).
    pub refresh: Vec<BlockEntry>,
    /// Make the blacklist exactly `add`: entries not in it are removed,
    /// entries in it that exist stay (keeping their counters; their TTL is
    /// set anew), the rest are added. `remove` must be empty.
    pub replace: bool,
}

/// The exact IPv4 table after an update.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TableInfo {
    /// Keys stored.
    pub entries: u32,
    /// Slots in use (a power of two, ≥ 2 × entries).
    pub slots: u32,
    /// Largest distance of a key from its home slot.
    pub max_dist: u32,
    /// Mean distance (known right after a build; `None` when read back from the pins).
    pub mean_dist: Option<f64>,
}

/// What an update did.
#[derive(Debug, Clone, Serialize)]
pub struct UpdateReport {
    /// Entries added.
    pub added: usize,
    /// Entries removed (asked for, or not in a `replace` list).
    pub removed: usize,
    /// Expired entries purged on the way.
    pub expired: usize,
    /// Entries that stayed (their counters untouched).
    pub kept: usize,
    /// Entries per table afterwards.
    pub counts: KindCounts,
    /// The exact IPv4 table, when it was rebuilt.
    pub table: Option<TableInfo>,
    /// Wall time of the whole update.
    pub seconds: f64,
}

/// An update decided against the entries in use, before anything is
/// written ([`Filter::apply`]'s validate step).
struct Plan {
    /// Entries in use and not expired, by prefix.
    live: HashMap<Prefix, u32>,
    /// Entries the data path let expire.
    expired: Vec<(Prefix, u32)>,
    /// Entries to add, each with a fresh id.
    adds: Vec<BlockEntry>,
    /// Live entries to remove.
    removes: Vec<(Prefix, u32)>,
    /// Kept entries whose expiry changes: (id, expiry on the boot clock).
    refresh: Vec<(u32, u64)>,
    /// Entries per table now, and after the update.
    before: KindCounts,
    after: KindCounts,
    /// The boot clock when the update was decided.
    now_boot: u64,
}

/// What publishing changed.
struct Published {
    /// The exact IPv4 table was rebuilt and flipped.
    exact4_changed: bool,
    /// That table, when it was.
    table: Option<TableInfo>,
}

impl Plan {
    /// Expiry on the boot clock of an entry with `ttl` (0: never).
    fn expires_of(&self, ttl: Option<Duration>) -> u64 {
        ttl.map_or(0, |t| {
            self.now_boot.saturating_add(t.as_nanos() as u64).max(1)
        })
    }

    /// The ids that leave: removed and expired entries.
    fn gone_ids(&self) -> HashSet<u32> {
        self.removes
            .iter()
            .chain(self.expired.iter())
            .map(|(_, id)| *id)
            .collect()
    }

    /// Adds, removes and refreshes for `up`: a `replace` list is diffed
    /// against the live entries (kept ones keep their counters; one about
    /// to expire is re-added with a fresh id); otherwise adds must be new
    /// and removes present. Duplicates are refused either way.
    fn diff(&mut self, up: &Update, near: &HashSet<Prefix>) -> Result<()> {
        let mut seen: HashSet<Prefix> =
            HashSet::with_capacity_and_hasher(up.add.len(), Default::default());
        let duplicate = |p: &Prefix| Error::Duplicate {
            prefix: p.to_string(),
            where_: None,
        };
        for e in &up.add {
            if !seen.insert(e.prefix) {
                return Err(duplicate(&e.prefix));
            }
        }
        if up.replace {
            if !up.remove.is_empty() || !up.refresh.is_empty() {
                return Err(Error::Invalid(
                    "internal: replace with a remove or refresh list".into(),
                ));
            }
            let wanted: HashMap<Prefix, Option<Duration>> =
                up.add.iter().map(|e| (e.prefix, e.ttl)).collect();
            for (p, &id) in &self.live {
                match wanted.get(p) {
                    None => self.removes.push((*p, id)),
                    Some(ttl) if near.contains(p) => {
                        self.removes.push((*p, id));
                        self.adds.push(BlockEntry {
                            prefix: *p,
                            ttl: *ttl,
                        });
                    }
                    Some(ttl) => self.refresh.push((id, self.expires_of(*ttl))),
                }
            }
            let new = up.add.iter().filter(|e| !self.live.contains_key(&e.prefix));
            self.adds.extend(new);
            return Ok(());
        }
        for p in &up.remove {
            if !seen.insert(*p) {
                return Err(duplicate(p));
            }
        }
        for e in &up.add {
            if self.live.contains_key(&e.prefix) {
                return Err(Error::AlreadyBlocked {
                    prefix: e.prefix.to_string(),
                });
            }
            self.adds.push(*e);
        }
        for p in &up.remove {
            let Some(&id) = self.live.get(p) else {
                return Err(Error::NotBlocked {
                    prefix: p.to_string(),
                });
            };
            self.removes.push((*p, id));
        }
        for e in &up.refresh {
            if !seen.insert(e.prefix) {
                return Err(duplicate(&e.prefix));
            }
            let Some(&id) = self.live.get(&e.prefix) else {
                return Err(Error::NotBlocked {
                    prefix: e.prefix.to_string(),
                });
            };
            // One the data path may be retiring now gets a fresh id (as
            // in a replace).
            if near.contains(&e.prefix) {
                self.removes.push((e.prefix, id));
                self.adds.push(*e);
            } else {
                self.refresh.push((id, self.expires_of(e.ttl)));
            }
        }
        Ok(())
    }

    /// Entries per table before and after; every table must have room.
    fn count(&mut self, ctl: &FilterCtl) -> Result<()> {
        for p in self.live.keys() {
            self.before.bump(p.kind(), 1);
        }
        let mut after = self.before;
        for (p, _) in &self.removes {
            after.bump(p.kind(), -1);
        }
        let mut adding = KindCounts::default();
        for e in &self.adds {
            adding.bump(e.prefix.kind(), 1);
        }
        for (k, cap, flag) in [
            (Kind::Exact4, ctl.cap_exact4, "--max-entries"),
            (Kind::Exact6, ctl.cap_other, "--max-prefixes"),
            (Kind::Prefix4, ctl.cap_other, "--max-prefixes"),
            (Kind::Prefix6, ctl.cap_other, "--max-prefixes"),
        ] {
            if after.get(k) + adding.get(k) > cap as usize {
                return Err(Error::TableFull {
                    kind: k.name(),
                    have: after.get(k),
                    adding: adding.get(k),
                    cap: cap as usize,
                    flag,
                });
            }
            after.bump(k, adding.get(k) as isize);
        }
        self.after = after;
        Ok(())
    }
}

/// Entries per table.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct KindCounts {
    /// Exact IPv4.
    pub exact4: usize,
    /// Exact IPv6.
    pub exact6: usize,
    /// IPv4 prefixes.
    pub prefix4: usize,
    /// IPv6 prefixes.
    pub prefix6: usize,
}

impl KindCounts {
    fn bump(&mut self, k: Kind, by: isize) {
        let f = match k {
            Kind::Exact4 => &mut self.exact4,
            Kind::Exact6 => &mut self.exact6,
            Kind::Prefix4 => &mut self.prefix4,
            Kind::Prefix6 => &mut self.prefix6,
        };
        *f = f.saturating_add_signed(by);
    }

    fn get(&self, k: Kind) -> usize {
        match k {
            Kind::Exact4 => self.exact4,
            Kind::Exact6 => self.exact6,
            Kind::Prefix4 => self.prefix4,
            Kind::Prefix6 => self.prefix6,
        }
    }

    /// All entries.
    pub fn total(&self) -> usize {
        self.exact4 + self.exact6 + self.prefix4 + self.prefix6
    }
}

/// One blacklist entry as `list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EntryInfo {
    /// The prefix (exact addresses as /32 or /128).
    pub prefix: Prefix,
    /// Table.
    pub kind: Kind,
    /// Where it is enforced: `xdp` (the host's XDP filter) for now; the
    /// control plane adds NIC tiers.
    pub tier: &'static str,
    /// Estimated packets dropped (exact with sample shift 0).
    pub packets: u64,
    /// Estimated bytes dropped.
    pub bytes: u64,
    /// Seconds since it was added.
    pub age_s: f64,
    /// Seconds until it expires, if it has a TTL.
    pub expires_in_s: Option<f64>,
    /// Entry id (index of its counters).
    pub id: u32,
}

/// Packets and bytes.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct PktBytes {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The filter's counters, summed over CPUs.
#[derive(Debug, Clone, Serialize)]
pub struct FilterStats {
    /// Drops by reason (label → counts), every reason present.
    pub drops: Vec<(&'static str, PktBytes)>,
    /// Passes by reason.
    pub passes: Vec<(&'static str, PktBytes)>,
    /// Clean packets with no next stage installed.
    pub no_next_stage: u64,
    /// Matches that updated an entry counter.
    pub sampled: u64,
    /// Exact IPv4 entries the data path retired after they expired.
    pub expired: u64,
    /// Entries per table.
    pub entries: KindCounts,
    /// Capacities: exact IPv4, and each other table.
    pub capacity_exact4: u32,
    /// Capacity of each other table.
    pub capacity_other: u32,
    /// Per-entry counters count 1 in 2^sample_shift matches.
    pub sample_shift: u32,
    /// The active exact IPv4 table.
    pub table: TableInfo,
    /// Publishes so far.
    pub generation: u64,
    /// Sources policed (rate-limited, see [`Filter::police`]).
    pub policed: u32,
}

impl FilterStats {
    /// Total packets dropped for `reason`.
    pub fn dropped(&self, reason: &str) -> u64 {
        self.drops
            .iter()
            .find(|(n, _)| *n == reason)
            .map(|(_, c)| c.packets)
            .unwrap_or(0)
    }

    /// Total packets passed for `reason`.
    pub fn passed(&self, reason: &str) -> u64 {
        self.passes
            .iter()
            .find(|(n, _)| *n == reason)
            .map(|(_, c)| c.packets)
            .unwrap_or(0)
    }
}

/// A policed source's bucket and counters ([`Filter::policed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PolicedEntry {
    /// Rate it may send (packets/s of its `classes`).
    pub rate_pps: u32,
    /// The `POLICE_*` classes the rate applies to ([`POLICE_ALL`]: every packet).
    pub classes: u32,
    /// Packets it may send at once (the bucket's size).
    pub burst: u32,
    /// Packets let through since it was policed.
    pub passed: u64,
    /// Packets dropped over its rate since it was policed.
    pub dropped: u64,
}

/// The bucket size of a source policed at `rate_pps`: one second of its
/// rate, at least `DDOS_POLICE_BURST_MIN` packets (see `bpf/ddos/abi.h`).
pub fn police_burst(rate_pps: u32) -> u32 {
    rate_pps.max(DDOS_POLICE_BURST_MIN)
}

/// The policing key of a single address; a wider prefix is refused.
fn police_key(prefix: &Prefix) -> Result<PoliceKey> {
    match prefix.kind() {
        Kind::Exact4 | Kind::Exact6 => Ok(PoliceKey {
            family: u32::from(prefix.family()),
            addr: prefix.addr_words(),
        }),
        _ => Err(Error::Invalid(format!(
            "{prefix} is a prefix: policing applies to single addresses (IPv4 /32, IPv6 /128); \
             police its addresses one by one, or block the prefix"
        ))),
    }
}

/// `BPF_F_LOCK`: a policing value is read and written under its spin lock.
const F_LOCK: u64 = libbpf_sys::BPF_F_LOCK as u64;

/// An installed filter, opened from its pins.
pub struct Filter {
    name: String,
    dir: PathBuf,
    ctl_map: PinnedMap,
    keys_map: PinnedMap,
    ids_map: PinnedMap,
    counters_map: PinnedMap,
    meta_map: PinnedMap,
    bl6: PinnedMap,
    lpm4: PinnedMap,
    lpm6: PinnedMap,
    fstats: PinnedMap,
    /// `None` for pins of a rampart from before policing.
    police: Option<PinnedMap>,
    ctl: ArrayMmap<FilterCtl>,
    keys: ArrayMmap<Bl4Bucket>,
    ids: ArrayMmap<Bl4Bucket>,
    counters: ArrayMmap<Counter>,
    meta: ArrayMmap<EntryMeta>,
    rng: rand::rngs::StdRng,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .finish()
    }
}

fn bpf_err(what: &str) -> impl FnOnce(libbpf_rs::Error) -> Error + '_ {
    move |e| {
        Error::Dataplane(rampart_dataplane::Error::Bpf {
            context: what.to_string(),
            err: e,
        })
    }
}

pub(crate) struct Lock {
    _f: nix::fcntl::Flock<File>,
}

pub(crate) fn lock_file(name: &str, what: &str) -> Result<Lock> {
    let dir = Path::new("/run/rampart/ddos");
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join(format!("{name}.{what}.lock"));
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let f = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| Error::io(format!("locking {}", path.display()), e.into()))?;
    Ok(Lock { _f: f })
}

/// Inode number of a network namespace (`None`: this process's), as the
/// kernel's `net->ns.inum`.
fn netns_ino(ns: Option<&str>) -> Result<u32> {
    use std::os::unix::fs::MetadataExt;
    let path = match ns {
        Some(n) => netns::path(n),
        None => PathBuf::from("/proc/self/ns/net"),
    };
    let m = std::fs::metadata(&path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    Ok(m.ino() as u32)
}

/// Fill `buf` from the kernel's random source (getrandom(2)).
fn getrandom_fill(buf: &mut [u8]) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the pointer and length describe the unfilled rest of `buf`.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::io("reading random bytes (getrandom)", e));
        }
        done += n as usize;
    }
    Ok(())
}

/// How [`Filter::install`] makes the filter run.
#[derive(Clone, Copy)]
enum Hook<'a> {
    /// Loaded and pinned only.
    None,
    /// Alone on the interface, through a pinned link.
    Link(XdpMode),
    /// As the ddos stage of the interface's chain.
    Chain(&'a Chain),
}

/// Empty the ddos slot of the chain of scope `name` if it holds the
/// filter pinned in `dir` (the chain's pins use the scope's name).
fn leave_chain(name: &str, dir: &Path) -> Result<()> {
    let slots = rampart_dataplane::pin::path(&["chain", name]).join("slots");
    let Ok(slots) = pin::open_pinned(&slots) else {
        return Ok(());
    };
    let Ok(prog) = pin::open_pinned(&dir.join(pins::PROG_FILTER)) else {
        return Ok(());
    };
    let ours = rampart_dataplane::xdp::prog_id_of(prog.as_raw_fd())?;
    let key = CHAIN_SLOT_DDOS.to_ne_bytes();
    let mut id = [0u8; 4];
    if dmaps::lookup_raw(slots.as_raw_fd(), &key, &mut id)? && u32::from_ne_bytes(id) == ours {
        dmaps::delete_raw(slots.as_raw_fd(), &key)?;
    }
    Ok(())
}

pub(crate) fn lock_features(name: &str) -> Result<impl Sized> {
    lock_file(name, "features")
}

impl Filter {
    /// Load the pipeline and pin it under the scope's directory, without
    /// attaching it anywhere (benchmarks link it themselves; see
    /// [`Filter::link`]). The interface must exist.
    ///
    /// # Errors
    /// Invalid config, an existing installation, a missing interface or
    /// namespace, load failures. Nothing is left behind on error.
    pub fn create(scope: &Scope, cfg: &FilterConfig) -> Result<Self> {
        Self::install(scope, cfg, Hook::None)
    }

    /// Load, pin and attach the pipeline to the scope's interface; the
    /// attachment is a pinned bpf_link, so filtering stays in force after
    /// this process exits, until [`Filter::detach`].
    ///
    /// # Errors
    /// As [`Filter::create`], plus attach failures (another XDP program on
    /// the interface, a mode the driver lacks). Nothing is left behind on error.
    pub fn attach(scope: &Scope, cfg: &FilterConfig, mode: XdpMode) -> Result<Self> {
        Self::install(scope, cfg, Hook::Link(mode))
    }

    /// Load and pin the pipeline as the ddos stage of `chain` (the scope's
    /// interface's chain, `rampart run`): its programs go on to the
    /// chain's later stages, and the filter is put in the ddos slot. Like
    /// a pinned link, the slot keeps filtering after this process exits,
    /// until [`Filter::detach`].
    ///
    /// # Errors
    /// As [`Filter::create`], plus the slot's update.
    pub fn join(scope: &Scope, cfg: &FilterConfig, chain: &Chain) -> Result<Self> {
        Self::install(scope, cfg, Hook::Chain(chain))
    }

    /// Put this (pinned) filter in the ddos slot of `chain` again (a
    /// resumed daemon: the slot may have been emptied meanwhile).
    ///
    /// # Errors
    /// The slot's update.
    pub fn rejoin(&self, chain: &Chain) -> Result<()> {
        let prog = pin::open_pinned(&self.dir.join(pins::PROG_FILTER))?;
        Ok(chain.set(CHAIN_SLOT_DDOS, prog.as_raw_fd())?)
    }

    fn install(scope: &Scope, cfg: &FilterConfig, hook: Hook<'_>) -> Result<Self> {
        use rampart_dataplane::features::{require, Feature};
        cfg.validate()?;
        require(
            "rampart ddos attach",
            &[Feature::Root, Feature::Bpffs, Feature::Xdp],
        )?;
        let name = scope.name();
        let dir = pin_dir(&name);
        if dir.exists() {
            return Err(Error::AlreadyAttached {
                where_: scope.describe(),
                path: dir,
            });
        }
        netns::ifindex(scope.netns.as_deref(), &scope.iface)?;
        // Staged in a directory of its own, then renamed into place.
        let tmp_name = format!("{}-{}", std::process::id(), name);
        let tmp = pin::dir(&["ddos-staging", &tmp_name])?;
        let res = (|| -> Result<()> {
            let chain = match hook {
                Hook::Chain(c) => Some(c),
                _ => None,
            };
            Self::load_into(&tmp, cfg, netns_ino(scope.netns.as_deref())?, chain)?;
            let f = Self::open_at(&tmp_name, &tmp)?;
            f.init_ctl(cfg);
            match hook {
                Hook::None => {}
                Hook::Link(mode) => {
                    let link = f.link_prog(scope, mode)?;
                    link.pin(&tmp.join(pins::LINK))?;
                }
                Hook::Chain(c) => f.rejoin(c)?,
            }
            pin::dir(&["ddos"])?;
            std::fs::rename(&tmp, &dir)
                .map_err(|e| Error::io(format!("renaming pins to {}", dir.display()), e))
        })();
        if let Err(e) = res {
            // Removing the pins drops the link (detaching) and every map.
            let _ = pin::remove_tree(&tmp);
            pin::prune_empty_parents(&tmp);
            return Err(e);
        }
        pin::prune_empty_parents(&tmp);
        Self::open_at(&name, &dir)
    }

    fn load_into(
        dir: &Path,
        cfg: &FilterConfig,
        netns_ino: u32,
        chain: Option<&Chain>,
    ) -> Result<()> {
        let mut open = XdpFilterSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .bpf_context(|| "opening xdp_filter".into())?;
        if let Some(c) = chain {
            c.reuse_in(&mut open.maps.rampart_chain)?;
        }
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::Invalid("internal: xdp_filter has no rodata".into()))?;
        ro.ddos_filter_cfg.sample_shift = cfg.sample_shift;
        ro.ddos_filter_cfg.pass_malformed = u32::from(cfg.pass_malformed);
        ro.ddos_filter_cfg.drop_encap = u32::from(cfg.drop_encap);
        ro.ddos_filter_cfg.limits.max_vlans = cfg.max_vlans as u8;
        ro.ddos_filter_cfg.limits.max_v6_ext = cfg.max_v6_ext as u8;
        // PPPoE and MPLS are walked: a blacklisted source inside them is judged.
        ro.ddos_filter_cfg.limits.shims = 1;
        let cap_buckets = cfg.cap_buckets();
        open.maps
            .ddos_bl4_keys
            .set_max_entries(2 * cap_buckets)
            .map_err(bpf_err("sizing ddos_bl4_keys"))?;
        open.maps
            .ddos_bl4_ids
            .set_max_entries(2 * cap_buckets)
            .map_err(bpf_err("sizing ddos_bl4_ids"))?;
        open.maps
            .ddos_counters
            .set_max_entries(cfg.cap_ids())
            .map_err(bpf_err("sizing ddos_counters"))?;
        open.maps
            .ddos_meta
            .set_max_entries(cfg.cap_ids())
            .map_err(bpf_err("sizing ddos_meta"))?;
        open.maps
            .ddos_bl6
            .set_max_entries(cfg.max_other)
            .map_err(bpf_err("sizing ddos_bl6"))?;
        open.maps
            .ddos_lpm4
            .set_max_entries(cfg.max_other)
            .map_err(bpf_err("sizing ddos_lpm4"))?;
        open.maps
            .ddos_lpm6
            .set_max_entries(cfg.max_other)
            .map_err(bpf_err("sizing ddos_lpm6"))?;
        let mut skel = open
            .load()
            .bpf_context(|| "loading xdp_filter (verifier)".into())?;

        if cfg.features {
            let (cap4, cap6) = cfg.feature_caps();
            let ncpu = maps::possible_cpus() as u32;
            let mut fopen = XdpFeaturesSkelBuilder::default()
                .open(rampart_dataplane::skel::object_storage())
                .bpf_context(|| "opening xdp_features".into())?;
            if let Some(c) = chain {
                c.reuse_in(&mut fopen.maps.rampart_chain)?;
            }
            let fro = fopen
                .maps
                .rodata_data
                .as_deref_mut()
                .ok_or_else(|| Error::Invalid("internal: xdp_features has no rodata".into()))?;
            fro.ddos_feat_cfg.cap4 = cap4;
            fro.ddos_feat_cfg.cap6 = cap6;
            fro.ddos_feat_cfg.ncpu = ncpu;
            fro.ddos_feat_cfg.seed = rand::random();
            fro.ddos_feat_cfg.limits.max_vlans = cfg.max_vlans as u8;
            fro.ddos_feat_cfg.limits.max_v6_ext = cfg.max_v6_ext as u8;
            fro.ddos_feat_cfg.limits.shims = 1;
            let vcap = cfg.victim_cap();
            fro.ddos_feat_cfg.vcap4 = vcap;
            fro.ddos_feat_cfg.vcap6 = vcap;
            fro.ddos_feat_cfg.sock_sample = cfg.sock_sample;
            fro.ddos_feat_cfg.amp_ports[..cfg.amp_ports.len()].copy_from_slice(&cfg.amp_ports);
            let m = &mut fopen.maps;
            m.ddos_fkeys4
                .set_max_entries(2 * cap4)
                .map_err(bpf_err("sizing ddos_fkeys4"))?;
            m.ddos_fvals4
                .set_max_entries(2 * ncpu * cap4)
                .map_err(bpf_err("sizing ddos_fvals4"))?;
            m.ddos_fkeys6
                .set_max_entries(2 * cap6)
                .map_err(bpf_err("sizing ddos_fkeys6"))?;
            m.ddos_faddr6
                .set_max_entries(2 * cap6)
                .map_err(bpf_err("sizing ddos_faddr6"))?;
            m.ddos_fvals6
                .set_max_entries(2 * ncpu * cap6)
                .map_err(bpf_err("sizing ddos_fvals6"))?;
            for (map, n, size) in [
                (&mut m.ddos_vkeys4, "ddos_vkeys4", 2 * vcap),
                (&mut m.ddos_vvals4, "ddos_vvals4", 2 * ncpu * vcap),
                (&mut m.ddos_vhll4, "ddos_vhll4", 2 * vcap),
                (&mut m.ddos_vkeys6, "ddos_vkeys6", 2 * vcap),
                (&mut m.ddos_vvals6, "ddos_vvals6", 2 * ncpu * vcap),
                (&mut m.ddos_vhll6, "ddos_vhll6", 2 * vcap),
            ] {
                map.set_max_entries(size)
                    .map_err(bpf_err(&format!("sizing {n}")))?;
            }
            let mut fskel = fopen
                .load()
                .bpf_context(|| "loading xdp_features (verifier)".into())?;
            // The SYN-cookie key: from the OS's random source, once per attach.
            let mut key = rampart_bpf::abi::ddos::CookieKey::default();
            getrandom_fill(bytemuck::bytes_of_mut(&mut key))?;
            fskel
                .maps
                .ddos_ckey
                .update(
                    &0u32.to_ne_bytes(),
                    bytemuck::bytes_of(&key),
                    libbpf_rs::MapFlags::ANY,
                )
                .bpf_context(|| "setting the SYN-cookie key".into())?;
            // Handshake completions in the interface's namespace (tp_btf).
            let mut copen = TpCompletionsSkelBuilder::default()
                .open(rampart_dataplane::skel::object_storage())
                .bpf_context(|| "opening tp_completions".into())?;
            copen
                .maps
                .rodata_data
                .as_deref_mut()
                .ok_or_else(|| Error::Invalid("internal: tp_completions has no rodata".into()))?
                .ddos_compl_cfg
                .netns_ino = netns_ino;
            let mut cskel = copen
                .load()
                .bpf_context(|| "loading tp_completions (verifier)".into())?;
            let mut clink = cskel
                .progs
                .ddos_completions
                .attach()
                .bpf_context(|| "attaching tp_completions to inet_sock_set_state".into())?;
            clink
                .pin(dir.join(pins::COMPLETIONS_LINK))
                .bpf_context(|| "pinning the completions link".into())?;
            cskel
                .maps
                .ddos_compl
                .pin(dir.join(pins::COMPLETIONS))
                .bpf_context(|| "pinning ddos_compl".into())?;
            let ffd = fskel.progs.xdp_features.as_fd().as_raw_fd();
            skel.maps
                .ddos_next
                .update(
                    &0u32.to_ne_bytes(),
                    &ffd.to_ne_bytes(),
                    libbpf_rs::MapFlags::ANY,
                )
                .bpf_context(|| "installing xdp_features as the next stage".into())?;
            fskel
                .progs
                .xdp_features
                .pin(dir.join(pins::PROG_FEATURES))
                .bpf_context(|| "pinning xdp_features".into())?;
            let m = &mut fskel.maps;
            for (map, n) in [
                (&mut m.ddos_fctl, "ddos_fctl"),
                (&mut m.ddos_fkeys4, "ddos_fkeys4"),
                (&mut m.ddos_fvals4, "ddos_fvals4"),
                (&mut m.ddos_fkeys6, "ddos_fkeys6"),
                (&mut m.ddos_faddr6, "ddos_faddr6"),
                (&mut m.ddos_fvals6, "ddos_fvals6"),
                (&mut m.ddos_featst, "ddos_featst"),
                (&mut m.ddos_vkeys4, "ddos_vkeys4"),
                (&mut m.ddos_vvals4, "ddos_vvals4"),
                (&mut m.ddos_vhll4, "ddos_vhll4"),
                (&mut m.ddos_vkeys6, "ddos_vkeys6"),
                (&mut m.ddos_vvals6, "ddos_vvals6"),
                (&mut m.ddos_vhll6, "ddos_vhll6"),
                (&mut m.ddos_protect, crate::protect::pins::PROTECT),
                (&mut m.ddos_ckey, crate::protect::pins::COOKIE_KEY),
            ] {
                map.pin(dir.join(n))
                    .bpf_context(|| format!("pinning {n}"))?;
            }
        }
        skel.progs
            .xdp_filter
            .pin(dir.join(pins::PROG_FILTER))
            .bpf_context(|| "pinning xdp_filter".into())?;
        let m = &mut skel.maps;
        for (map, n) in [
            (&mut m.ddos_ctl, "ddos_ctl"),
            (&mut m.ddos_bl4_keys, "ddos_bl4_keys"),
            (&mut m.ddos_bl4_ids, "ddos_bl4_ids"),
            (&mut m.ddos_counters, "ddos_counters"),
            (&mut m.ddos_meta, "ddos_meta"),
            (&mut m.ddos_bl6, "ddos_bl6"),
            (&mut m.ddos_lpm4, "ddos_lpm4"),
            (&mut m.ddos_lpm6, "ddos_lpm6"),
            (&mut m.ddos_fstats, "ddos_fstats"),
            (&mut m.ddos_next, "ddos_next"),
            (&mut m.ddos_police, pins::POLICE),
            (&mut m.ddos_capture, crate::evidence::pins::CAPTURE),
            (&mut m.ddos_capctl, crate::evidence::pins::CAPCTL),
            (&mut m.ddos_evidence, crate::evidence::pins::EVIDENCE),
        ] {
            map.pin(dir.join(n))
                .bpf_context(|| format!("pinning {n}"))?;
        }
        // The skeletons are dropped here: the pins hold maps and programs.
        Ok(())
    }

    fn init_ctl(&self, cfg: &FilterConfig) {
        let cap_buckets = cfg.cap_buckets();
        let empty = |base| Bl4Table {
            mult: 1,
            shift: 28,
            mask: 15,
            max_dist: 0,
            base,
            count: 0,
        };
        let c = FilterCtl {
            tab: [empty(0), empty(cap_buckets)],
            sample_shift: cfg.sample_shift,
            cap_exact4: cfg.max_entries,
            cap_other: cfg.max_other,
            cap_ids: cfg.cap_ids(),
            cap_buckets,
            ..Default::default()
        };
        self.ctl.set(0, c);
    }

    /// Open an installed filter by scope name (see [`resolve`]).
    ///
    /// # Errors
    /// [`Error::NotAttached`] when nothing is pinned there,
    /// [`Error::BadState`] for pins from an incompatible build.
    pub fn open(name: &str) -> Result<Self> {
        let dir = pin_dir(name);
        if !pin::exists(&dir)? {
            return Err(Error::NotAttached {
                where_: name.to_string(),
                path: dir,
            });
        }
        Self::open_at(name, &dir)
    }

    fn open_at(name: &str, dir: &Path) -> Result<Self> {
        use std::mem::size_of;
        let open = |n: &str, vs: usize| PinnedMap::open(&dir.join(n), vs);
        let ctl_map = open("ddos_ctl", size_of::<FilterCtl>())?;
        let keys_map = open("ddos_bl4_keys", size_of::<Bl4Bucket>())?;
        let ids_map = open("ddos_bl4_ids", size_of::<Bl4Bucket>())?;
        let counters_map = open("ddos_counters", size_of::<Counter>())?;
        let meta_map = open("ddos_meta", size_of::<EntryMeta>())?;
        let bl6 = open("ddos_bl6", 4)?;
        let lpm4 = open("ddos_lpm4", 4)?;
        let lpm6 = open("ddos_lpm6", 4)?;
        let fstats = open("ddos_fstats", size_of::<RawStats>())?;
        let police = if dir.join(pins::POLICE).exists() {
            Some(open(pins::POLICE, size_of::<PoliceVal>())?)
        } else {
            None
        };
        let ctl = ArrayMmap::new(ctl_map.fd.as_fd(), &ctl_map.info)?;
        let keys = ArrayMmap::new(keys_map.fd.as_fd(), &keys_map.info)?;
        let ids = ArrayMmap::new(ids_map.fd.as_fd(), &ids_map.info)?;
        let counters = ArrayMmap::new(counters_map.fd.as_fd(), &counters_map.info)?;
        let meta = ArrayMmap::new(meta_map.fd.as_fd(), &meta_map.info)?;
        Ok(Self {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            ctl_map,
            keys_map,
            ids_map,
            counters_map,
            meta_map,
            bl6,
            lpm4,
            lpm6,
            fstats,
            police,
            ctl,
            keys,
            ids,
            counters,
            meta,
            rng: rand::rngs::StdRng::from_os_rng(),
        })
    }

    /// Scope name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Pin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Is the pinned link present (the filter is attached)?
    pub fn is_linked(&self) -> bool {
        self.dir.join(pins::LINK).exists()
    }

    fn link_prog(&self, scope: &Scope, mode: XdpMode) -> Result<XdpLink> {
        let prog = pin::open_pinned(&self.dir.join(pins::PROG_FILTER))?;
        Ok(XdpLink::attach(
            prog.as_raw_fd(),
            scope.netns.as_deref(),
            &scope.iface,
            mode,
        )?)
    }

    /// Attach the filter program to `scope` with an unpinned link (it
    /// detaches when the returned link is dropped). For benchmarks that
    /// alternate several programs on one interface.
    ///
    /// # Errors
    /// Attach failures.
    pub fn link(&self, scope: &Scope, mode: XdpMode) -> Result<XdpLink> {
        self.link_prog(scope, mode)
    }

    /// Detach and remove everything pinned for `name`.
    ///
    /// # Errors
    /// [`Error::NotAttached`] when nothing is there; removal failures.
    pub fn detach(name: &str) -> Result<()> {
        rampart_dataplane::features::require_root("rampart ddos detach")?;
        let dir = pin_dir(name);
        if !dir.exists() {
            return Err(Error::NotAttached {
                where_: name.to_string(),
                path: dir,
            });
        }
        let _lock = lock_file(name, "filter")?;
        crate::protect::detach_tc(&dir)?;
        if let Ok(link) = XdpLink::open_pinned(&dir.join(pins::LINK)) {
            // A link whose interface is gone is already detached: the error is moot.
            let _ = link.detach();
        }
        leave_chain(name, &dir)?;
        pin::remove_tree(&dir)?;
        pin::prune_empty_parents(&dir);
        Ok(())
    }

    fn ctl_snapshot(&self) -> FilterCtl {
        self.ctl.get(0)
    }

    fn ctl_atomic_u32(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is a 4-aligned field offset inside the mapped,
        // page-aligned control element, which lives as long as `self`.
        unsafe { &*(self.ctl.at(0).cast::<u8>().add(offset).cast::<AtomicU32>()) }
    }

    fn ctl_atomic_u64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: as in `ctl_atomic_u32`, 8-aligned.
        unsafe { &*(self.ctl.at(0).cast::<u8>().add(offset).cast::<AtomicU64>()) }
    }

    fn set_counts(&self, c: &KindCounts) {
        use std::mem::offset_of;
        self.ctl_atomic_u32(offset_of!(FilterCtl, n_exact6))
            .store(c.exact6 as u32, Ordering::Release);
        self.ctl_atomic_u32(offset_of!(FilterCtl, n_prefix4))
            .store(c.prefix4 as u32, Ordering::Release);
        self.ctl_atomic_u32(offset_of!(FilterCtl, n_prefix6))
            .store(c.prefix6 as u32, Ordering::Release);
    }

    /// Every used entry id with its prefix, and the free ids.
    fn scan(&self) -> (Vec<(Prefix, u32)>, Vec<u32>) {
        let mut used = Vec::new();
        let mut free = Vec::new();
        for id in 0..self.meta.len() {
            let m = self.meta.get(id);
            if m.flags & DDOS_META_USED != 0 {
                if let Some(p) = Prefix::from_words(m.family, m.addr, m.prefixlen) {
                    used.push((p, id as u32));
                    continue;
                }
            }
            free.push(id as u32);
        }
        (used, free)
    }

    fn active_table(&self) -> Bl4Table {
        let c = self.ctl_snapshot();
        c.tab[(c.active & 1) as usize]
    }

    /// Is exact key `k` present (not retired) in the active table?
    fn active_has(&self, k: u32) -> bool {
        let t = self.active_table();
        if t.count == 0 {
            return false;
        }
        let h = table::home(k, t.mult, t.shift);
        let narrow = t.shift & DDOS_BL4_NARROW != 0;
        for i in 0..=t.max_dist {
            let s = h.wrapping_add(i) & t.mask;
            if narrow {
                let b = self
                    .keys
                    .get((t.base + s / DDOS_BL4_N_SLOTS_PER_BUCKET as u32) as usize);
                let j = s as usize % DDOS_BL4_N_SLOTS_PER_BUCKET;
                let [b0, b1, b2, b3] = b.slot[j / 2].to_ne_bytes();
                let v = u16::from_ne_bytes(if j.is_multiple_of(2) {
                    [b0, b1]
                } else {
                    [b2, b3]
                });
                if v == table::narrow_word(k, t.mult, t.shift, i) {
                    return true;
                }
                if v == DDOS_BL4_N_EMPTY {
                    return false;
                }
                continue;
            }
            let b = self
                .keys
                .get((t.base + s / DDOS_BL4_SLOTS_PER_BUCKET as u32) as usize);
            let v = b.slot[(s as usize) % DDOS_BL4_SLOTS_PER_BUCKET];
            if v == k {
                return true;
            }
            if v == 0 {
                return false;
            }
        }
        false
    }

    /// Apply an update, all or nothing. Expired entries are purged on the way.
    ///
    /// # Errors
    /// [`Error::Duplicate`], [`Error::AlreadyBlocked`], [`Error::NotBlocked`],
    /// [`Error::TableFull`] before anything changes; kernel errors while
    /// writing (rolled back where possible).
    pub fn apply(&mut self, up: &Update) -> Result<UpdateReport> {
        let _lock = lock_file(&self.name, "filter")?;
        self.apply_locked(up, false)
    }

    /// Block prefixes (error if any is blocked already).
    ///
    /// # Errors
    /// As [`Filter::apply`].
    pub fn block(&mut self, entries: &[BlockEntry]) -> Result<UpdateReport> {
        self.apply(&Update {
            add: entries.to_vec(),
            ..Default::default()
        })
    }

    /// Unblock prefixes (error if any is not blocked).
    ///
    /// # Errors
    /// As [`Filter::apply`].
    pub fn unblock(&mut self, prefixes: &[Prefix]) -> Result<UpdateReport> {
        self.apply(&Update {
            remove: prefixes.to_vec(),
            ..Default::default()
        })
    }

    /// Make the blacklist exactly `entries`; entries that stay keep their counters.
    ///
    /// # Errors
    /// As [`Filter::apply`].
    pub fn replace(&mut self, entries: &[BlockEntry]) -> Result<UpdateReport> {
        self.apply(&Update {
            add: entries.to_vec(),
            replace: true,
            ..Default::default()
        })
    }

    /// Purge expired entries now (every update does this too).
    ///
    /// # Errors
    /// As [`Filter::apply`].
    pub fn expire(&mut self) -> Result<UpdateReport> {
        self.apply(&Update::default())
    }

    /// One update, in four steps: validate (decide everything, write
    /// nothing), allocate (ids, counters, metadata of new entries), publish
    /// (make the new set visible to the data path), retire (hide and, after
    /// a grace period, free what left).
    fn apply_locked(&mut self, up: &Update, second_phase: bool) -> Result<UpdateReport> {
        let t0 = Instant::now();
        let ctl = self.ctl_snapshot();
        let (used, mut free) = self.scan();
        let plan = self.validate(up, used, &ctl)?;

        // Ids of removed and expired entries are only reusable after the
        // grace period at the end of an update. When the free ids do not
        // cover the additions (a near-full table being replaced), the
        // removals go first as an update of their own, then the rest: still
        // validated as a whole above, so the second phase cannot fail on
        // capacity; new entries just arrive one grace period later.
        if free.len() < plan.adds.len() {
            if second_phase || (plan.expired.is_empty() && plan.removes.is_empty()) {
                return Err(Error::Invalid(format!(
                    "internal: {} free entry ids for {} additions below table capacity",
                    free.len(),
                    plan.adds.len()
                )));
            }
            let first = Update {
                remove: plan.removes.iter().map(|(p, _)| *p).collect(),
                ..Default::default()
            };
            let r1 = self.apply_locked(&first, true)?;
            let mut r2 = self.apply_locked(up, true)?;
            r2.removed += r1.removed;
            r2.expired += r1.expired;
            r2.seconds = t0.elapsed().as_secs_f64();
            return Ok(r2);
        }

        free.sort_unstable();
        let new_ids = self.allocate(&plan, &free);
        let published = self.publish_update(&plan, &new_ids, &ctl)?;
        self.retire(&plan, published.exact4_changed)?;
        Ok(UpdateReport {
            added: new_ids.len(),
            removed: plan.removes.len(),
            expired: plan.expired.len(),
            kept: plan.live.len() - plan.removes.len(),
            counts: plan.after,
            table: published.table,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// Decide the update against the entries in use: which are live and
    /// which expired, what to add, remove and refresh, and whether every
    /// table has room. Writes nothing.
    fn validate(&self, up: &Update, used: Vec<(Prefix, u32)>, ctl: &FilterCtl) -> Result<Plan> {
        let now_boot = clock::boot_ns();
        // Live vs expired. An entry that expires within the next second is
        // treated as expired when it is to be kept: the data path may be
        // retiring its slot right now, so it is re-added with a fresh id.
        const MARGIN_NS: u64 = 1_000_000_000;
        let mut live: HashMap<Prefix, u32> =
            HashMap::with_capacity_and_hasher(used.len(), Default::default());
        let mut expired: Vec<(Prefix, u32)> = Vec::new();
        let mut near: HashSet<Prefix> = HashSet::default();
        for (p, id) in used {
            let c = self.counters.get(id as usize);
            if c.expires_ns != 0 && c.expires_ns <= now_boot {
                expired.push((p, id));
            } else {
                if c.expires_ns != 0 && c.expires_ns <= now_boot + MARGIN_NS {
                    near.insert(p);
                }
                live.insert(p, id);
            }
        }
        let mut plan = Plan {
            live,
            expired,
            adds: Vec::new(),
            removes: Vec::new(),
            refresh: Vec::new(),
            before: KindCounts::default(),
            after: KindCounts::default(),
            now_boot,
        };
        plan.diff(up, &near)?;
        plan.count(ctl)?;
        Ok(plan)
    }

    /// Ids, counters and metadata of the new entries (invisible to the data
    /// path until a table references the id), new expiry times of kept ones.
    fn allocate(&self, plan: &Plan, free: &[u32]) -> Vec<(Prefix, u32)> {
        let now_real = clock::real_ns();
        let mut new_ids: Vec<(Prefix, u32)> = Vec::with_capacity(plan.adds.len());
        for (e, &id) in plan.adds.iter().zip(free.iter()) {
            self.counters.set(
                id as usize,
                Counter {
                    packets: 0,
                    bytes: 0,
                    expires_ns: plan.expires_of(e.ttl),
                    added_ns: now_real,
                },
            );
            let w = e.prefix.addr_words();
            self.meta.set(
                id as usize,
                EntryMeta {
                    addr: w,
                    family: e.prefix.family(),
                    prefixlen: e.prefix.len(),
                    flags: DDOS_META_USED,
                    _pad: 0,
                },
            );
            new_ids.push((e.prefix, id));
        }
        for &(id, exp) in &plan.refresh {
            // SAFETY: `at` is in bounds and 8-aligned; the data path reads this field concurrently.
            let f = unsafe {
                &*(std::ptr::addr_of_mut!((*self.counters.at(id as usize)).expires_ns)
                    .cast::<AtomicU64>())
            };
            f.store(exp, Ordering::Release);
        }
        new_ids
    }

    /// Make the new entries visible: insert them into the prefix and IPv6
    /// tables (after raising their "consult me" counts), and rebuild and
    /// flip the exact IPv4 table when its set changed or a kept entry was
    /// retired by the data path. On failure, undo what this update added.
    fn publish_update(
        &mut self,
        plan: &Plan,
        new_ids: &[(Prefix, u32)],
        ctl: &FilterCtl,
    ) -> Result<Published> {
        let mut wide = plan.before;
        for k in [Kind::Exact6, Kind::Prefix4, Kind::Prefix6] {
            let f = match k {
                Kind::Exact6 => &mut wide.exact6,
                Kind::Prefix4 => &mut wide.prefix4,
                _ => &mut wide.prefix6,
            };
            *f = (*f).max(plan.after.get(k));
        }
        self.set_counts(&wide);
        if let Err(e) = self.insert_other(new_ids) {
            self.roll_back(plan, new_ids);
            return Err(e);
        }

        let exact4_changed = new_ids
            .iter()
            .chain(plan.removes.iter())
            .chain(plan.expired.iter())
            .any(|(p, _)| p.kind() == Kind::Exact4)
            || plan.refresh.iter().any(|(id, _)| {
                let m = self.meta.get(*id as usize);
                m.family == 4
                    && m.prefixlen == 32
                    && Prefix::from_words(4, m.addr, 32).is_some_and(|p| p.kind() == Kind::Exact4)
                    && !self.active_has(m.addr[0])
            });
        if !exact4_changed {
            return Ok(Published {
                exact4_changed,
                table: None,
            });
        }
        let gone = plan.gone_ids();
        let mut entries: Vec<(u32, u32)> = Vec::with_capacity(plan.after.exact4);
        for (p, &id) in &plan.live {
            if p.kind() == Kind::Exact4 && !gone.contains(&id) {
                entries.push((p.addr_words()[0], id));
            }
        }
        for (p, id) in new_ids {
            if p.kind() == Kind::Exact4 {
                entries.push((p.addr_words()[0], *id));
            }
        }
        // Deterministic order: the same set gives the same table for a given multiplier.
        entries.sort_unstable();
        let slots = (ctl.cap_buckets as usize) * DDOS_BL4_SLOTS_PER_BUCKET;
        let built = match table::build(&entries, slots, &mut self.rng) {
            Ok(b) => b,
            Err(e) => {
                self.roll_back(plan, new_ids);
                return Err(e);
            }
        };
        self.publish(&built);
        Ok(Published {
            exact4_changed,
            table: Some(TableInfo {
                entries: built.count,
                slots: built.slots() as u32,
                max_dist: built.max_dist,
                mean_dist: Some(built.mean_dist()),
            }),
        })
    }

    /// Undo a failed publish: remove what was inserted, release the ids,
    /// restore the counts.
    fn roll_back(&self, plan: &Plan, new_ids: &[(Prefix, u32)]) {
        let _ = self.delete_other(new_ids.iter().map(|(p, _)| *p));
        for (_, id) in new_ids {
            self.meta.set(*id as usize, EntryMeta::default());
        }
        self.set_counts(&plan.before);
    }

    /// Remove the removed and expired entries from the prefix and IPv6
    /// tables, set the final counts, and free their ids once no program run
    /// can still hold one (or read the exact table active before the flip).
    fn retire(&self, plan: &Plan, exact4_changed: bool) -> Result<()> {
        let gone = plan.removes.iter().chain(plan.expired.iter());
        self.delete_other(gone.map(|(p, _)| *p))?;
        self.set_counts(&plan.after);
        let gone_ids = plan.gone_ids();
        if !gone_ids.is_empty() || exact4_changed {
            maps::grace_period();
        }
        for id in &gone_ids {
            self.counters.set(*id as usize, Counter::default());
            self.meta.set(*id as usize, EntryMeta::default());
        }
        Ok(())
    }

    /// Copy `b` into the idle half and flip `active` to it.
    fn publish(&self, b: &table::Built) {
        use std::mem::offset_of;
        let ctl = self.ctl_snapshot();
        let idle = (ctl.active & 1) ^ 1;
        let base = if idle == 0 { 0 } else { ctl.cap_buckets };
        for i in 0..b.buckets() {
            let mut ib = Bl4Bucket::default();
            ib.slot.copy_from_slice(
                &b.ids[i * DDOS_BL4_SLOTS_PER_BUCKET..(i + 1) * DDOS_BL4_SLOTS_PER_BUCKET],
            );
            self.ids.set(base as usize + i, ib);
        }
        if b.is_narrow() {
            // 32 16-bit slots per element, in memory order.
            let w = b.narrow_words();
            for (i, chunk) in w.chunks_exact(DDOS_BL4_N_SLOTS_PER_BUCKET).enumerate() {
                let mut kb = Bl4Bucket::default();
                for (j, pair) in chunk.chunks_exact(2).enumerate() {
                    let [a0, a1] = pair[0].to_ne_bytes();
                    let [b0, b1] = pair[1].to_ne_bytes();
                    kb.slot[j] = u32::from_ne_bytes([a0, a1, b0, b1]);
                }
                self.keys.set(base as usize + i, kb);
            }
        } else {
            for i in 0..b.buckets() {
                let mut kb = Bl4Bucket::default();
                kb.slot.copy_from_slice(
                    &b.keys[i * DDOS_BL4_SLOTS_PER_BUCKET..(i + 1) * DDOS_BL4_SLOTS_PER_BUCKET],
                );
                self.keys.set(base as usize + i, kb);
            }
        }
        let desc = Bl4Table {
            mult: b.mult,
            shift: b.shift_word(),
            mask: b.mask(),
            max_dist: b.max_dist,
            base,
            count: b.count,
        };
        let off = offset_of!(FilterCtl, tab) + idle as usize * std::mem::size_of::<Bl4Table>();
        // SAFETY: writing the idle table's descriptor, in bounds of the control element.
        unsafe {
            std::ptr::write_volatile(
                self.ctl.at(0).cast::<u8>().add(off).cast::<Bl4Table>(),
                desc,
            )
        };
        fence(Ordering::SeqCst);
        self.ctl_atomic_u32(offset_of!(FilterCtl, active))
            .store(idle, Ordering::Release);
        self.ctl_atomic_u64(offset_of!(FilterCtl, generation))
            .fetch_add(1, Ordering::AcqRel);
    }

    fn insert_other(&self, new_ids: &[(Prefix, u32)]) -> Result<()> {
        let mut k6 = Vec::new();
        let mut v6 = Vec::new();
        let mut kp4 = Vec::new();
        let mut vp4 = Vec::new();
        let mut kp6 = Vec::new();
        let mut vp6 = Vec::new();
        for (p, id) in new_ids {
            let w = p.addr_words();
            match p.kind() {
                Kind::Exact4 => continue,
                Kind::Exact6 => {
                    w.iter()
                        .for_each(|x| k6.extend_from_slice(&x.to_ne_bytes()));
                    v6.extend_from_slice(&id.to_ne_bytes());
                }
                Kind::Prefix4 => {
                    kp4.extend_from_slice(&u32::from(p.len()).to_ne_bytes());
                    kp4.extend_from_slice(&w[0].to_ne_bytes());
                    vp4.extend_from_slice(&id.to_ne_bytes());
                }
                Kind::Prefix6 => {
                    kp6.extend_from_slice(&u32::from(p.len()).to_ne_bytes());
                    w.iter()
                        .for_each(|x| kp6.extend_from_slice(&x.to_ne_bytes()));
                    vp6.extend_from_slice(&id.to_ne_bytes());
                }
            }
        }
        for (m, k, v) in [
            (&self.bl6, &k6, &v6),
            (&self.lpm4, &kp4, &vp4),
            (&self.lpm6, &kp6, &vp6),
        ] {
            maps::update_batch(m.raw(), k, v, v.len() / 4).map_err(|(_, e)| e)?;
        }
        Ok(())
    }

    fn delete_other(&self, gone: impl Iterator<Item = Prefix>) -> Result<()> {
        for p in gone {
            let w = p.addr_words();
            let mut key = Vec::new();
            let fd = match p.kind() {
                Kind::Exact4 => continue,
                Kind::Exact6 => {
                    w.iter()
                        .for_each(|x| key.extend_from_slice(&x.to_ne_bytes()));
                    self.bl6.raw()
                }
                Kind::Prefix4 => {
                    key.extend_from_slice(&u32::from(p.len()).to_ne_bytes());
                    key.extend_from_slice(&w[0].to_ne_bytes());
                    self.lpm4.raw()
                }
                Kind::Prefix6 => {
                    key.extend_from_slice(&u32::from(p.len()).to_ne_bytes());
                    w.iter()
                        .for_each(|x| key.extend_from_slice(&x.to_ne_bytes()));
                    self.lpm6.raw()
                }
            };
            maps::delete_raw(fd, &key)?;
        }
        Ok(())
    }

    /// Every live entry with its counters (expired ones are left out).
    ///
    /// # Errors
    /// None today (reads go through the mapping); kept fallible for future tiers.
    pub fn entries(&self) -> Result<Vec<EntryInfo>> {
        let now_boot = clock::boot_ns();
        let now_real = clock::real_ns();
        let (used, _) = self.scan();
        let mut out: Vec<EntryInfo> = used
            .into_iter()
            .filter_map(|(p, id)| {
                let c = self.counters.get(id as usize);
                if c.expires_ns != 0 && c.expires_ns <= now_boot {
                    return None;
                }
                Some(EntryInfo {
                    prefix: p,
                    kind: p.kind(),
                    tier: "xdp",
                    packets: c.packets,
                    bytes: c.bytes,
                    age_s: now_real.saturating_sub(c.added_ns) as f64 / 1e9,
                    expires_in_s: (c.expires_ns != 0)
                        .then(|| (c.expires_ns - now_boot) as f64 / 1e9),
                    id,
                })
            })
            .collect();
        out.sort_by_key(|e| e.prefix);
        Ok(out)
    }

    /// Counters of one entry id (packets, bytes), for rate sampling.
    pub fn counter(&self, id: u32) -> PktBytes {
        let c = self.counters.get(id as usize);
        PktBytes {
            packets: c.packets,
            bytes: c.bytes,
        }
    }

    /// The data path's counters, summed over CPUs, and table facts.
    ///
    /// # Errors
    /// A failing per-CPU read.
    pub fn stats(&self) -> Result<FilterStats> {
        let per_cpu: Vec<RawStats> = maps::percpu_values(self.fstats.raw())?;
        let mut drops = vec![PktBytes::default(); DDOS_DROP_REASON_MAX];
        let mut passes = vec![PktBytes::default(); DDOS_PASS_REASON_MAX];
        let (mut no_next, mut sampled, mut expired) = (0, 0, 0);
        for s in &per_cpu {
            for (i, d) in s.drop.iter().enumerate() {
                drops[i].packets += d.packets;
                drops[i].bytes += d.bytes;
            }
            for (i, p) in s.pass.iter().enumerate() {
                passes[i].packets += p.packets;
                passes[i].bytes += p.bytes;
            }
            no_next += s.no_next_stage;
            sampled += s.sampled;
            expired += s.expired;
        }
        let ctl = self.ctl_snapshot();
        let t = ctl.tab[(ctl.active & 1) as usize];
        let (used, _) = self.scan();
        let mut counts = KindCounts::default();
        for (p, _) in &used {
            counts.bump(p.kind(), 1);
        }
        Ok(FilterStats {
            drops: DDOS_DROP_REASON_LABELS.into_iter().zip(drops).collect(),
            passes: DDOS_PASS_REASON_LABELS.into_iter().zip(passes).collect(),
            no_next_stage: no_next,
            sampled,
            expired,
            entries: counts,
            capacity_exact4: ctl.cap_exact4,
            capacity_other: ctl.cap_other,
            sample_shift: ctl.sample_shift,
            table: TableInfo {
                entries: t.count,
                slots: t.mask + 1,
                max_dist: t.max_dist,
                mean_dist: None,
            },
            generation: ctl.generation,
            policed: ctl.n_police,
        })
    }

    fn police_map(&self) -> Result<&PinnedMap> {
        self.police.as_ref().ok_or_else(|| {
            Error::Invalid(format!(
                "the filter {} was attached by a rampart without policing: detach and attach it again",
                self.name
            ))
        })
    }

    fn n_police(&self) -> &AtomicU32 {
        self.ctl_atomic_u32(std::mem::offset_of!(FilterCtl, n_police))
    }

    /// Police `prefix` (a single address) at `rate_pps`: its packets of
    /// `classes` ([`POLICE_ALL`], or a mask of [`POLICE_SYN`],
    /// [`POLICE_UDP`], [`POLICE_ICMP`], [`POLICE_FRAG`]) over that rate are
    /// dropped in XDP (reason `policed`) instead of all of them being
    /// blocked; its other packets pass untouched. A source policed already
    /// gets the new rate and classes and keeps its counters; a new one
    /// starts with a full bucket ([`police_burst`] packets). A blacklisted
    /// source stays dropped as blacklisted: the policer only sees what the
    /// blacklist lets through.
    ///
    /// # Errors
    /// A wider prefix, a rate outside 1..=`DDOS_POLICE_MAX_PPS`, unknown
    /// class bits, [`Error::PoliceFull`], pins without policing, map failures.
    pub fn police(&self, prefix: Prefix, rate_pps: u32, classes: u32) -> Result<()> {
        let key = police_key(&prefix)?;
        let known = POLICE_SYN | POLICE_UDP | POLICE_ICMP | POLICE_FRAG;
        if classes & !known != 0 {
            return Err(Error::Invalid(format!(
                "policing classes {classes:#x} for {prefix}: only the bits of SYN ({POLICE_SYN}), UDP ({POLICE_UDP}), \
                 ICMP ({POLICE_ICMP}) and fragments ({POLICE_FRAG}) exist (0: every packet)"
            )));
        }
        if rate_pps == 0 || rate_pps > DDOS_POLICE_MAX_PPS {
            return Err(Error::Invalid(format!(
                "policing rate {rate_pps} pps for {prefix} out of range: use 1..={DDOS_POLICE_MAX_PPS} \
                 (to drop everything from it, block it)"
            )));
        }
        let map = self.police_map()?;
        let _lock = lock_file(&self.name, "police")?;
        let burst = police_burst(rate_pps);
        let mut cur = PoliceVal::default();
        let have = lookup_locked(map.raw(), &key, &mut cur)?;
        if have && cur.rate_pps == rate_pps && cur.burst == burst && cur.classes == classes {
            return Ok(());
        }
        let n = self.n_police().load(Ordering::Acquire);
        if !have && n >= DDOS_POLICE_MAX {
            return Err(Error::PoliceFull {
                cap: DDOS_POLICE_MAX as usize,
            });
        }
        let full = u64::from(burst) * DDOS_POLICE_NS;
        let val = if have {
            // Counters and bucket carry over (packets counted between the
            // read and this write are lost: a rate change is rare).
            PoliceVal {
                rate_pps,
                burst,
                classes,
                tokens: cur.tokens.min(full),
                ..cur
            }
        } else {
            PoliceVal {
                rate_pps,
                burst,
                classes,
                tokens: full,
                ..Default::default()
            }
        };
        // n_police counts the entries (kept under the lock file by every
        // writer); it is raised before a new entry appears, so the data
        // path never skips a policed source.
        if !have {
            self.n_police().store(n + 1, Ordering::Release);
        }
        let res = maps::update_raw(
            map.raw(),
            bytemuck::bytes_of(&key),
            bytemuck::bytes_of(&val),
            F_LOCK,
        );
        if res.is_err() && !have {
            self.n_police().store(n, Ordering::Release);
        }
        match res {
            Err(Error::Dataplane(rampart_dataplane::Error::Io { err, .. }))
                if err.raw_os_error() == Some(libc::E2BIG) =>
            {
                Err(Error::PoliceFull {
                    cap: DDOS_POLICE_MAX as usize,
                })
            }
            r => r,
        }
    }

    /// Stop policing `prefix`; `false` when it was not policed.
    ///
    /// # Errors
    /// A wider prefix, pins without policing, map failures.
    pub fn unpolice(&self, prefix: Prefix) -> Result<bool> {
        let key = police_key(&prefix)?;
        let map = self.police_map()?;
        let _lock = lock_file(&self.name, "police")?;
        let had = maps::delete_raw(map.raw(), bytemuck::bytes_of(&key))?;
        if had {
            let n = self.n_police().load(Ordering::Acquire);
            self.n_police()
                .store(n.saturating_sub(1), Ordering::Release);
        }
        Ok(had)
    }

    /// Every policed source with its rate and counters, by prefix. Empty
    /// for pins of a rampart without policing.
    ///
    /// # Errors
    /// A failing map walk.
    pub fn policed(&self) -> Result<Vec<(Prefix, PolicedEntry)>> {
        let Some(map) = &self.police else {
            return Ok(Vec::new());
        };
        let ks = std::mem::size_of::<PoliceKey>();
        let vs = std::mem::size_of::<PoliceVal>();
        let mut out = Vec::new();
        // Read without the lock: the counters only grow, and a copy that
        // races a packet is at most that packet behind.
        rampart_dataplane::maps::walk_batch(map.raw(), ks, vs, 1024, false, |k, v| {
            let k: PoliceKey = bytemuck::pod_read_unaligned(k);
            let v: PoliceVal = bytemuck::pod_read_unaligned(v);
            let len = if k.family == 4 { 32 } else { 128 };
            if let Some(p) = Prefix::from_words(k.family as u8, k.addr, len) {
                out.push((
                    p,
                    PolicedEntry {
                        rate_pps: v.rate_pps,
                        classes: v.classes,
                        burst: v.burst,
                        passed: v.passed,
                        dropped: v.dropped,
                    },
                ));
            }
        })?;
        out.sort_by_key(|(p, _)| *p);
        Ok(out)
    }

    /// The sample shift this filter was loaded with.
    pub fn sample_shift(&self) -> u32 {
        self.ctl_snapshot().sample_shift
    }

    /// Raw fds of the maps, for tools and tests: (name, fd).
    pub fn map_fds(&self) -> Vec<(&'static str, BorrowedFd<'_>)> {
        vec![
            ("ddos_ctl", self.ctl_map.fd.as_fd()),
            ("ddos_bl4_keys", self.keys_map.fd.as_fd()),
            ("ddos_bl4_ids", self.ids_map.fd.as_fd()),
            ("ddos_counters", self.counters_map.fd.as_fd()),
            ("ddos_meta", self.meta_map.fd.as_fd()),
            ("ddos_bl6", self.bl6.fd.as_fd()),
            ("ddos_lpm4", self.lpm4.fd.as_fd()),
            ("ddos_lpm6", self.lpm6.fd.as_fd()),
            ("ddos_fstats", self.fstats.fd.as_fd()),
        ]
    }

    /// fd of the pinned filter program (for BPF_PROG_RUN in tests).
    ///
    /// # Errors
    /// A missing pin.
    pub fn prog_fd(&self) -> Result<std::os::fd::OwnedFd> {
        Ok(pin::open_pinned(&self.dir.join(pins::PROG_FILTER))?)
    }
}

/// `bpf_map_lookup_elem` with `BPF_F_LOCK` of a policing entry; `Ok(false)` when absent.
fn lookup_locked(fd: std::os::fd::RawFd, key: &PoliceKey, out: &mut PoliceVal) -> Result<bool> {
    // SAFETY: `key` and `out` are the map's key and value types (the value
    // size was checked when the pin was opened).
    let rc = unsafe {
        libbpf_sys::bpf_map_lookup_elem_flags(
            fd,
            std::ptr::from_ref(key).cast(),
            std::ptr::from_mut(out).cast(),
            F_LOCK,
        )
    };
    if rc < 0 {
        if -rc == libc::ENOENT {
            return Ok(false);
        }
        return Err(Error::errno(
            "reading a policed source (BPF_MAP_LOOKUP_ELEM)",
            rc,
        ));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_are_bpffs_safe() {
        assert_eq!(Scope::new(None, "eth0").unwrap().name(), "eth0");
        assert_eq!(
            Scope::new(Some("rp-host"), "host0").unwrap().name(),
            "rp-host-host0"
        );
        assert_eq!(Scope::new(None, "eth0.100").unwrap().name(), "eth0%2e100");
        assert!(Scope::new(None, "").is_err());
        assert!(Scope::new(None, "a/b").is_err());
        assert!(Scope::new(None, "sixteen-chars-xx").is_err());
        assert!(Scope::new(Some("../x"), "eth0").is_err());
        assert_eq!(
            Scope::new(Some("ns"), "host0").unwrap().describe(),
            "host0 (netns ns)"
        );
    }

    #[test]
    fn config_ranges() {
        assert!(FilterConfig::default().validate().is_ok());
        for bad in [
            FilterConfig {
                max_entries: 0,
                ..Default::default()
            },
            FilterConfig {
                max_entries: MAX_EXACT4_CAP + 1,
                ..Default::default()
            },
            FilterConfig {
                sample_shift: 16,
                ..Default::default()
            },
            FilterConfig {
                max_other: 0,
                ..Default::default()
            },
            FilterConfig {
                features_capacity: 0,
                ..Default::default()
            },
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("out of range"), "{e}");
        }
        // Feature tables: ≤ 5/8 load at the stated capacity, powers of two.
        let c = FilterConfig {
            features_capacity: 300_000,
            ..Default::default()
        };
        assert_eq!(c.feature_caps(), (1 << 19, 1 << 17));
        assert_eq!(
            FilterConfig {
                features_capacity: 1,
                ..Default::default()
            }
            .feature_caps(),
            (64, 64)
        );
    }

    #[test]
    fn kind_counts() {
        let mut k = KindCounts::default();
        k.bump(Kind::Exact4, 3);
        k.bump(Kind::Prefix6, 1);
        k.bump(Kind::Exact4, -1);
        assert_eq!((k.exact4, k.prefix6, k.total()), (2, 1, 3));
        k.bump(Kind::Exact6, -5);
        assert_eq!(k.exact6, 0, "saturates");
    }
}
