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
    FeatAddr6, FeatCtl, FeatStats, FeatVal, DDOS_FEAT_KEY_FREE, DDOS_FEAT_SKETCH_BITS,
    DDOS_FEAT_SKIP_MALFORMED, DDOS_FEAT_SKIP_NOT_IP, DDOS_FEAT_SKIP_TABLE_FULL,
};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::filter::pin_dir;
use crate::maps::{self, ArrayMmap, PinnedMap};
use crate::prefix::words_addr;

pub use rampart_ddos_control::features::{linear_count, sketch_bit, FeatureRecord};

// The sketch the control logic decodes is the one the data path fills.
const _: () = assert!(rampart_ddos_control::features::SKETCH_BITS == DDOS_FEAT_SKETCH_BITS);

/// One interval as read.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Interval number (counts swaps since attach).
    pub interval: u64,
    /// The records.
    pub records: Vec<FeatureRecord>,
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
    stats: PinnedMap,
    cap4: usize,
    cap6: usize,
    ncpu: usize,
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
        Ok(Self {
            dir,
            name: name.to_string(),
            _pins: vec![ctl_m, k4, v4, k6, a6, v6],
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
        let mut records = Vec::new();
        let (interval, swap_wait, read) = self.snapshot_into(&mut records)?;
        Ok(Snapshot {
            interval,
            records,
            swap_wait,
            read,
        })
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
        self.drain(old, &mut each);
        Ok((interval, swap_wait, t1.elapsed()))
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
        }
        Ok(s)
    }
}
