//! Reading feature intervals: swap the slot, wait for a grace period, read
//! and clear the idle slot straight from the mmapped arrays, summing the
//! per-CPU copies by index (layout: `bpf/ddos/abi.h`).
//!
//! Consistency: `xdp_features` reads `ddos_fctl.slot` once per packet and
//! writes only that slot. After [`Features::snapshot`] flips the slot, one
//! RCU grace period (see [`crate::maps::grace_period`]) guarantees that
//! every program run that read the old slot has finished, so the idle slot
//! is complete and quiescent when it is read, and every packet is counted
//! in exactly one interval.

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rampart_bpf::abi::ddos::{
    FeatAddr6, FeatCtl, FeatStats, FeatVal, VictimHll, VictimVal, DDOS_FEAT_KEY_FREE,
    DDOS_FEAT_SKETCH_BITS, DDOS_FEAT_SKIP_MALFORMED, DDOS_FEAT_SKIP_NOT_IP,
    DDOS_FEAT_SKIP_PROTECTED, DDOS_FEAT_SKIP_TABLE_FULL, DDOS_HLL_REGISTERS,
    DDOS_PROT_COOKIE_ACK_INVALID, DDOS_PROT_COOKIE_ACK_VALID, DDOS_PROT_GUARD_DROPPED,
    DDOS_PROT_NO_LISTENER, DDOS_PROT_SYNACK_SENT, DDOS_UDP_AMP_PORTS, DDOS_UDP_CLASSES,
};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::filter::pin_dir;
use crate::maps::{self, ArrayMmap, PinnedMap};
use crate::prefix::words_addr;

pub use rampart_ddos_control::features::{
    hll_estimate, linear_count, sketch_bit, FeatureRecord, VictimRecord,
};
use rampart_ddos_control::features::{HLL_REGISTERS, UDP_AMP_PORTS, UDP_CLASSES};

// What the control logic decodes is what the data path fills.
const _: () = assert!(rampart_ddos_control::features::SKETCH_BITS == DDOS_FEAT_SKETCH_BITS);
const _: () = assert!(HLL_REGISTERS == DDOS_HLL_REGISTERS);
const _: () = assert!(UDP_CLASSES.len() == DDOS_UDP_CLASSES);
const _: () = assert!(UDP_AMP_PORTS.len() == DDOS_UDP_AMP_PORTS);

/// 32-bit mix of the data path (`mix32` in xdp_features.bpf.c).
fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The hash the data path feeds a victim's HyperLogLog registers with
/// (`hll_hash` in xdp_features.bpf.c): the source address as four
/// 32-bit words as they are on the wire (IPv4 in the first, the rest 0).
/// Registers filled with [`rampart_ddos_control::features::hll_add`] of
/// these hashes are the data path's registers.
pub fn hll_hash(src: IpAddr) -> u32 {
    let w = crate::prefix::addr_words(src);
    w.iter().fold(0x9e37_79b9u32, |h, &x| mix32(h ^ x))
}

/// One interval as read.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Snapshot {
    /// Interval number (counts swaps since attach).
    pub interval: u64,
    /// The (source, destination) pair records.
    pub records: Vec<FeatureRecord>,
    /// The victim records.
    pub victims: Vec<VictimRecord>,
    /// Packets of a new pair that found the interval's pair table full
    /// (recorded in their victim, not as a pair).
    pub pairs_full: u64,
    /// Packets of a new victim that found the victim table full.
    pub victims_full: u64,
    /// Time from the swap to the end of the grace period.
    pub swap_wait: Duration,
    /// Time to read, empty and aggregate the idle slot.
    pub read: Duration,
}

impl Snapshot {
    /// Total packets in the interval.
    pub fn packets(&self) -> u64 {
        self.records.iter().map(|r| r.packets).sum()
    }
}

/// Counters of the feature stage, summed over CPUs.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct FeatureStats {
    /// Packets recorded (both slots).
    pub recorded: u64,
    /// Not IPv4/IPv6.
    pub skipped_not_ip: u64,
    /// Malformed.
    pub skipped_malformed: u64,
    /// New pair, interval table full.
    pub skipped_table_full: u64,
    /// Answered or dropped by protection, from a source not admitted to
    /// the interval's table (counted on its victim only).
    pub skipped_protected: u64,
}

/// The feature reader of an installed filter.
pub struct Features {
    dir: PathBuf,
    name: String,
    _pins: Vec<PinnedMap>,
    ctl: ArrayMmap<FeatCtl>,
    keys4: ArrayMmap<u64>,
    vals4: ArrayMmap<FeatVal>,
    keys6: ArrayMmap<u64>,
    addr6: ArrayMmap<FeatAddr6>,
    vals6: ArrayMmap<FeatVal>,
    victims: [VictimTable; 2],
    stats: PinnedMap,
    cap4: usize,
    cap6: usize,
    ncpu: usize,
    /// Cumulative per-slot "table full" counts at the last snapshot.
    full_seen: [[u64; 2]; 2],
    last_victims: Vec<VictimRecord>,
    /// Handshake completions per (client, server), drained each interval.
    completions: Option<PinnedMap>,
}

/// The victim arrays of one family.
struct VictimTable {
    v6: bool,
    keys: ArrayMmap<u64>,
    vals: ArrayMmap<VictimVal>,
    hll: ArrayMmap<VictimHll>,
    cap: usize,
}

impl VictimTable {
    fn open(
        dir: &std::path::Path,
        fam: &str,
        ncpu: usize,
        pins: &mut Vec<PinnedMap>,
    ) -> Result<Self> {
        use std::mem::size_of;
        let k = PinnedMap::open(&dir.join(format!("ddos_vkeys{fam}")), 8)?;
        let v = PinnedMap::open(
            &dir.join(format!("ddos_vvals{fam}")),
            size_of::<VictimVal>(),
        )?;
        let h = PinnedMap::open(&dir.join(format!("ddos_vhll{fam}")), size_of::<VictimHll>())?;
        let keys = ArrayMmap::new(k.fd.as_fd(), &k.info)?;
        let vals = ArrayMmap::new(v.fd.as_fd(), &v.info)?;
        let hll = ArrayMmap::new(h.fd.as_fd(), &h.info)?;
        let cap = keys.len() / 2;
        if cap == 0 || vals.len() != 2 * ncpu * cap || hll.len() != 2 * cap {
            return Err(Error::BadState {
                path: dir.to_path_buf(),
                reason: "victim arrays of inconsistent sizes".into(),
            });
        }
        pins.extend([k, v, h]);
        Ok(Self {
            v6: fam == "6",
            keys,
            vals,
            hll,
            cap,
        })
    }

    /// Read, hand out and clear slot `slot` (idle, past its grace period).
    fn drain(&self, slot: usize, ncpu: usize, each: &mut impl FnMut(&VictimRecord)) {
        let cap = self.cap;
        // SAFETY: as `Features::drain`: the slot is idle and past its grace
        // period, and the features lock excludes other readers.
        let (keys, vals, hll) = unsafe {
            (
                self.keys.slice_mut(slot * cap, cap),
                self.vals.slice_mut(slot * ncpu * cap, ncpu * cap),
                self.hll.slice_mut(slot * cap, cap),
            )
        };
        for (i, k) in keys.iter_mut().enumerate() {
            if *k == DDOS_FEAT_KEY_FREE {
                continue;
            }
            let victim = if self.v6 {
                let mut o = [0u8; 16];
                o[..4].copy_from_slice(&((*k >> 32) as u32).to_ne_bytes());
                o[4..8].copy_from_slice(&(*k as u32).to_ne_bytes());
                VictimRecord::key_of(IpAddr::V6(std::net::Ipv6Addr::from(o)))
            } else {
                VictimRecord::key_of(IpAddr::V4(std::net::Ipv4Addr::from(
                    (*k as u32).to_ne_bytes(),
                )))
            };
            let mut r = VictimRecord::new(victim);
            for c in 0..ncpu {
                let x = &mut vals[c * cap + i];
                r.packets += x.packets;
                r.bytes += x.bytes;
                r.tcp += u64::from(x.tcp);
                r.udp += u64::from(x.udp);
                r.icmp += u64::from(x.icmp);
                r.other += u64::from(x.other);
                r.frags += u64::from(x.frags);
                r.syn += u64::from(x.syn);
                r.synack += u64::from(x.synack);
                r.rst += u64::from(x.rst);
                r.fin += u64::from(x.fin);
                r.tcp_sampled += u64::from(x.tcp_sampled);
                r.tcp_nosock += u64::from(x.tcp_nosock);
                r.synack_sent += u64::from(x.prot[DDOS_PROT_SYNACK_SENT]);
                r.cookie_ack_valid += u64::from(x.prot[DDOS_PROT_COOKIE_ACK_VALID]);
                r.cookie_ack_invalid += u64::from(x.prot[DDOS_PROT_COOKIE_ACK_INVALID]);
                r.guard_dropped += u64::from(x.prot[DDOS_PROT_GUARD_DROPPED]);
                r.no_listener += u64::from(x.prot[DDOS_PROT_NO_LISTENER]);
                for j in 0..DDOS_UDP_CLASSES {
                    r.udp_vec_pkts[j] += u64::from(x.udp_vec_pkts[j]);
                    r.udp_vec_bytes[j] += x.udp_vec_bytes[j];
                }
                *x = VictimVal::default();
            }
            r.src_distinct = hll_estimate(&hll[i].src);
            r.syn_src_distinct = if r.syn > 0 {
                hll_estimate(&hll[i].syn_src)
            } else {
                0.0
            };
            hll[i] = VictimHll::default();
            each(&r);
            *k = DDOS_FEAT_KEY_FREE;
        }
    }
}

impl std::fmt::Debug for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Features").field("dir", &self.dir).finish()
    }
}

/// Sum of the per-CPU copies of pair `i` (`vals`: one slot, `[cpu][cap]`).
fn aggregate(vals: &[FeatVal], ncpu: usize, cap: usize, i: usize) -> FeatVal {
    let mut a = FeatVal::default();
    for c in 0..ncpu {
        let x = &vals[c * cap + i];
        a.packets += x.packets;
        a.bytes += x.bytes;
        a.tcp = a.tcp.saturating_add(x.tcp);
        a.udp = a.udp.saturating_add(x.udp);
        a.icmp = a.icmp.saturating_add(x.icmp);
        a.other = a.other.saturating_add(x.other);
        a.syn = a.syn.saturating_add(x.syn);
        a.synack = a.synack.saturating_add(x.synack);
        a.rst = a.rst.saturating_add(x.rst);
        a.frags = a.frags.saturating_add(x.frags);
        a.fin = a.fin.saturating_add(x.fin);
        a.udp_amp = a.udp_amp.saturating_add(x.udp_amp);
        a.udp_amp_bytes += x.udp_amp_bytes;
        a.dport_sketch[0] |= x.dport_sketch[0];
        a.dport_sketch[1] |= x.dport_sketch[1];
    }
    a
}

fn record(src: IpAddr, dst: IpAddr, a: &FeatVal) -> FeatureRecord {
    FeatureRecord {
        src,
        dst,
        packets: a.packets,
        bytes: a.bytes,
        tcp: a.tcp,
        udp: a.udp,
        icmp: a.icmp,
        other: a.other,
        syn: a.syn,
        synack: a.synack,
        rst: a.rst,
        frags: a.frags,
        fin: a.fin,
        udp_amp: a.udp_amp,
        udp_amp_bytes: a.udp_amp_bytes,
        dport_sketch: a.dport_sketch,
        ..FeatureRecord::new(src, dst)
    }
}

impl Features {
    /// Open the feature stage of the filter `name`.
    ///
    /// # Errors
    /// Not attached, or attached with `--no-features`.
    pub fn open(name: &str) -> Result<Self> {
        use std::mem::size_of;
        let dir = pin_dir(name);
        if !rampart_dataplane::pin::exists(&dir)? {
            return Err(Error::NotAttached {
                where_: name.to_string(),
                path: dir,
            });
        }
        if !dir.join("ddos_fctl").exists() {
            return Err(Error::Invalid(format!(
                "the filter at {name} was attached with --no-features: detach and attach again without it"
            )));
        }
        let open = |n: &str, vs: usize| PinnedMap::open(&dir.join(n), vs);
        let ctl_m = open("ddos_fctl", size_of::<FeatCtl>())?;
        let k4 = open("ddos_fkeys4", 8)?;
        let v4 = open("ddos_fvals4", size_of::<FeatVal>())?;
        let k6 = open("ddos_fkeys6", 8)?;
        let a6 = open("ddos_faddr6", size_of::<FeatAddr6>())?;
        let v6 = open("ddos_fvals6", size_of::<FeatVal>())?;
        let stats = open("ddos_featst", size_of::<FeatStats>())?;
        if !dir.join("ddos_vkeys4").exists() {
            return Err(Error::BadState {
                path: dir,
                reason: "no victim records (attached by an older rampart)".into(),
            });
        }
        let ctl = ArrayMmap::new(ctl_m.fd.as_fd(), &ctl_m.info)?;
        let keys4 = ArrayMmap::new(k4.fd.as_fd(), &k4.info)?;
        let vals4 = ArrayMmap::new(v4.fd.as_fd(), &v4.info)?;
        let keys6 = ArrayMmap::new(k6.fd.as_fd(), &k6.info)?;
        let addr6 = ArrayMmap::new(a6.fd.as_fd(), &a6.info)?;
        let vals6 = ArrayMmap::new(v6.fd.as_fd(), &v6.info)?;
        let cap4 = keys4.len() / 2;
        let cap6 = keys6.len() / 2;
        let ncpu = if cap4 > 0 {
            vals4.len() / (2 * cap4)
        } else {
            0
        };
        if cap4 == 0
            || cap6 == 0
            || ncpu == 0
            || vals6.len() != 2 * ncpu * cap6
            || addr6.len() != 2 * cap6
        {
            return Err(Error::BadState {
                path: dir,
                reason: "feature arrays of inconsistent sizes".into(),
            });
        }
        let completions = PinnedMap::open(&dir.join(crate::filter::pins::COMPLETIONS), 8).ok();
        let mut pins = vec![ctl_m, k4, v4, k6, a6, v6];
        let victims = [
            VictimTable::open(&dir, "4", ncpu, &mut pins)?,
            VictimTable::open(&dir, "6", ncpu, &mut pins)?,
        ];
        let stats_now: Vec<FeatStats> = maps::percpu_values(stats.raw())?;
        let mut full_seen = [[0u64; 2]; 2];
        for c in &stats_now {
            for (s, (p, v)) in c.pairs_full.iter().zip(&c.victims_full).enumerate() {
                full_seen[0][s] += p;
                full_seen[1][s] += v;
            }
        }
        Ok(Self {
            dir,
            name: name.to_string(),
            _pins: pins,
            victims,
            full_seen,
            last_victims: Vec::new(),
            completions,
            ctl,
            keys4,
            vals4,
            keys6,
            addr6,
            vals6,
            stats,
            cap4,
            cap6,
            ncpu,
        })
    }

    /// (src, dst) pairs one interval holds: (IPv4, IPv6).
    pub fn capacity(&self) -> (usize, usize) {
        (self.cap4, self.cap6)
    }

    fn slot_atomic(&self) -> &AtomicU32 {
        // SAFETY: `slot` is the first, 4-aligned field of the mapped control element.
        unsafe { &*(self.ctl.at(0).cast::<AtomicU32>()) }
    }

    fn interval_atomic(&self) -> &AtomicU64 {
        // SAFETY: `interval` is an 8-aligned field inside the mapped control element.
        unsafe {
            &*(self
                .ctl
                .at(0)
                .cast::<u8>()
                .add(std::mem::offset_of!(FeatCtl, interval))
                .cast::<AtomicU64>())
        }
    }

    /// End the current interval and return it: swap slots, wait for the
    /// grace period, read, aggregate across CPUs and clear the idle slot.
    ///
    /// # Errors
    /// The lock file cannot be taken.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let mut s = Snapshot::default();
        self.snapshot_full(&mut s)?;
        Ok(s)
    }

    /// End the current interval into `snap` (its vectors cleared first and
    /// reused): pairs, victims and the interval's table-full counts.
    ///
    /// # Errors
    /// The lock file cannot be taken; a failing counter read.
    pub fn snapshot_full(&mut self, snap: &mut Snapshot) -> Result<()> {
        snap.records.clear();
        let records = &mut snap.records;
        let (interval, swap_wait, read) = self.snapshot_with(|r| records.push(*r))?;
        snap.interval = interval;
        snap.swap_wait = swap_wait;
        snap.read = read;
        std::mem::swap(&mut snap.victims, &mut self.last_victims);
        self.last_victims.clear();
        let (p, v) = self.interval_full()?;
        snap.pairs_full = p;
        snap.victims_full = v;
        Ok(())
    }

    /// The victim records of the last interval ended by
    /// [`Features::snapshot_into`] or [`Features::snapshot_with`] (the
    /// pair readers; [`Features::snapshot_full`] hands them over instead).
    pub fn victims(&self) -> &[VictimRecord] {
        &self.last_victims
    }

    /// Pair and victim "table full" counts of the slot the last snapshot
    /// read (cumulative per-slot counters, taken as differences).
    fn interval_full(&mut self) -> Result<(u64, u64)> {
        let slot = (self.slot_atomic().load(Ordering::Acquire) & 1) as usize ^ 1;
        let v: Vec<FeatStats> = maps::percpu_values(self.stats.raw())?;
        let (mut p, mut q) = (0u64, 0u64);
        for c in &v {
            p += c.pairs_full[slot];
            q += c.victims_full[slot];
        }
        let dp = p.wrapping_sub(self.full_seen[0][slot]);
        let dq = q.wrapping_sub(self.full_seen[1][slot]);
        self.full_seen[0][slot] = p;
        self.full_seen[1][slot] = q;
        Ok((dp, dq))
    }

    /// As [`Features::snapshot`], into `out` (cleared first). A reader that
    /// snapshots every interval should keep one vector and pass it each
    /// time: its memory is then already mapped, which on this VM is most of
    /// the cost of materialising 300,000 records in a fresh vector.
    /// Returns (interval, swap wait, read time).
    ///
    /// # Errors
    /// The lock file cannot be taken.
    pub fn snapshot_into(
        &mut self,
        out: &mut Vec<FeatureRecord>,
    ) -> Result<(u64, Duration, Duration)> {
        out.clear();
        self.snapshot_with(|r| out.push(*r))
    }

    /// As [`Features::snapshot`], handing each record to `each` instead of
    /// collecting them. Returns (interval, swap wait, read time).
    ///
    /// # Errors
    /// The lock file cannot be taken.
    pub fn snapshot_with(
        &mut self,
        mut each: impl FnMut(&FeatureRecord),
    ) -> Result<(u64, Duration, Duration)> {
        let _lock = crate::filter::lock_features(&self.name)?;
        let t0 = Instant::now();
        let old = (self.slot_atomic().load(Ordering::Acquire) & 1) as usize;
        self.slot_atomic()
            .store((old ^ 1) as u32, Ordering::Release);
        let interval = self.interval_atomic().fetch_add(1, Ordering::AcqRel);
        maps::grace_period();
        let swap_wait = t0.elapsed();
        let t1 = Instant::now();
        // Completions of the interval, merged into their pairs; a pair the
        // table does not hold becomes a record with only completions.
        let mut compl = self.drain_completions()?;
        self.drain(
            old,
            &mut |r: &FeatureRecord| match compl.remove(&(r.src, r.dst)) {
                Some(n) => each(&FeatureRecord {
                    completions: r.completions.saturating_add(n),
                    ..*r
                }),
                None => each(r),
            },
        );
        for ((src, dst), n) in compl {
            each(&FeatureRecord {
                completions: n,
                ..FeatureRecord::new(src, dst)
            });
        }
        let mut victims = std::mem::take(&mut self.last_victims);
        victims.clear();
        for t in &self.victims {
            t.drain(old, self.ncpu, &mut |r| victims.push(*r));
        }
        self.last_victims = victims;
        Ok((interval, swap_wait, t1.elapsed()))
    }

    /// Read and empty the completions map (lookup-and-delete batches).
    fn drain_completions(&self) -> Result<rustc_hash::FxHashMap<(IpAddr, IpAddr), u32>> {
        use rampart_bpf::abi::ddos::ComplKey;
        let mut out = rustc_hash::FxHashMap::default();
        let Some(m) = &self.completions else {
            return Ok(out);
        };
        rampart_dataplane::maps::walk_batch(
            m.raw(),
            std::mem::size_of::<ComplKey>(),
            8,
            1024,
            true,
            |k, v| {
                let k: ComplKey = bytemuck::pod_read_unaligned(k);
                let n: u64 = bytemuck::pod_read_unaligned(v);
                let fam = if k.family == 6 { 6 } else { 4 };
                if let (Some(src), Some(dst)) = (words_addr(fam, &k.src), words_addr(fam, &k.dst)) {
                    let e: &mut u32 = out.entry((src, dst)).or_default();
                    *e = e.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
                }
            },
        )?;
        Ok(out)
    }

    /// Read, hand out and clear slot `slot`. Only sound for the idle slot
    /// after a grace period (no writer left), which is how `snapshot_with` calls it.
    fn drain(&self, slot: usize, each: &mut impl FnMut(&FeatureRecord)) {
        let ncpu = self.ncpu;
        // SAFETY: the slot is idle and past its grace period: the data path
        // no longer writes it, and the features lock excludes other readers.
        let (keys4, vals4, keys6, addr6, vals6) = unsafe {
            (
                self.keys4.slice_mut(slot * self.cap4, self.cap4),
                self.vals4
                    .slice_mut(slot * ncpu * self.cap4, ncpu * self.cap4),
                self.keys6.slice_mut(slot * self.cap6, self.cap6),
                self.addr6.slice(slot * self.cap6, self.cap6),
                self.vals6
                    .slice_mut(slot * ncpu * self.cap6, ncpu * self.cap6),
            )
        };
        let cap4 = self.cap4;
        for (i, k) in keys4.iter_mut().enumerate() {
            if *k == DDOS_FEAT_KEY_FREE {
                continue;
            }
            let a = aggregate(vals4, ncpu, cap4, i);
            let (src, dst) = ((*k >> 32) as u32, *k as u32);
            each(&record(
                IpAddr::V4(std::net::Ipv4Addr::from(src.to_ne_bytes())),
                IpAddr::V4(std::net::Ipv4Addr::from(dst.to_ne_bytes())),
                &a,
            ));
            for c in 0..ncpu {
                vals4[c * cap4 + i] = FeatVal::default();
            }
            *k = DDOS_FEAT_KEY_FREE;
        }
        let cap6 = self.cap6;
        for (i, k) in keys6.iter_mut().enumerate() {
            if *k == DDOS_FEAT_KEY_FREE {
                continue;
            }
            let a = aggregate(vals6, ncpu, cap6, i);
            if let (Some(src), Some(dst)) =
                (words_addr(6, &addr6[i].src), words_addr(6, &addr6[i].dst))
            {
                each(&record(src, dst, &a));
            }
            for c in 0..ncpu {
                vals6[c * cap6 + i] = FeatVal::default();
            }
            *k = DDOS_FEAT_KEY_FREE;
        }
    }

    /// Packets recorded by each CPU (both slots), for checking that an
    /// interval was filled by several CPUs.
    ///
    /// # Errors
    /// A failing per-CPU read.
    pub fn recorded_per_cpu(&self) -> Result<Vec<u64>> {
        let v: Vec<FeatStats> = maps::percpu_values(self.stats.raw())?;
        Ok(v.iter().map(|c| c.recorded[0] + c.recorded[1]).collect())
    }

    /// Counters of the stage, summed over CPUs.
    ///
    /// # Errors
    /// A failing per-CPU read.
    pub fn stats(&self) -> Result<FeatureStats> {
        let v: Vec<FeatStats> = maps::percpu_values(self.stats.raw())?;
        let mut s = FeatureStats::default();
        for c in v {
            s.recorded += c.recorded[0] + c.recorded[1];
            s.skipped_not_ip += c.skipped[DDOS_FEAT_SKIP_NOT_IP];
            s.skipped_malformed += c.skipped[DDOS_FEAT_SKIP_MALFORMED];
            s.skipped_table_full += c.skipped[DDOS_FEAT_SKIP_TABLE_FULL];
            s.skipped_protected += c.skipped[DDOS_FEAT_SKIP_PROTECTED];
        }
        Ok(s)
    }
}
