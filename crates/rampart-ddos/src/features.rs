//! Reading feature intervals: swap the slot, wait for a grace period, read
//! and empty the idle slot in batches, sum across CPUs.
//!
//! Consistency: `xdp_features` reads `ddos_fctl.slot` once per packet and
//! updates only that slot's map. After [`Features::snapshot`] flips the slot,
//! one RCU grace period (see [`crate::maps::grace_period`]) guarantees that
//! every program run that read the old slot has finished, so the idle map
//! is complete and quiescent when it is read, and every packet is counted
//! in exactly one interval.

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rampart_bpf::abi::ddos::{FeatCtl, FeatKey, FeatStats, FeatVal, FEAT_SKETCH_BITS, FEAT_SKIPS};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::filter::pin_dir;
use crate::maps::{self, ArrayMmap, PinnedMap};
use crate::prefix::words_addr;

/// Aggregated counters of one (source, destination) pair over one interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FeatureRecord {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Packets.
    pub packets: u64,
    /// Bytes (frame lengths).
    pub bytes: u64,
    /// TCP packets.
    pub tcp: u64,
    /// UDP packets.
    pub udp: u64,
    /// ICMP/ICMPv6 packets.
    pub icmp: u64,
    /// Other L4 protocols.
    pub other: u64,
    /// TCP SYN without ACK.
    pub syn: u64,
    /// TCP SYN+ACK.
    pub synack: u64,
    /// TCP RST.
    pub rst: u64,
    /// IP fragments.
    pub frags: u64,
    /// Destination-port sketch (OR over CPUs).
    #[serde(skip)]
    pub dport_sketch: [u64; 2],
    /// Distinct destination ports, estimated from the sketch.
    pub dports_est: f64,
}

/// Linear counting on a 128-bit bitmap: with `z` zero bits out of `m`,
/// n̂ = −m·ln(z/m). Standard error ≈ √(m(e^t − t − 1))/n with t = n/m
/// (Whang et al. 1990): about 4% at 20 ports, 6% at 100, 11% at 300. With
/// no zero bit left (≳ 600 ports) it returns the estimate for half a
/// zero bit, a lower bound (≈ 709).
pub fn linear_count(sketch: &[u64; 2]) -> f64 {
    let m = f64::from(FEAT_SKETCH_BITS);
    let ones: u32 = sketch.iter().map(|w| w.count_ones()).sum();
    let zeros = f64::from(FEAT_SKETCH_BITS - ones);
    -m * (zeros.max(0.5) / m).ln()
}

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
    _ctl_map: PinnedMap,
    ctl: ArrayMmap<FeatCtl>,
    slots: [PinnedMap; 2],
    stats: PinnedMap,
    ncpu: usize,
}

impl std::fmt::Debug for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Features").field("dir", &self.dir).finish()
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
        if !dir.exists() {
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
        let ctl_map = PinnedMap::open(&dir.join("ddos_fctl"), size_of::<FeatCtl>())?;
        let a = PinnedMap::open(&dir.join("ddos_feat_a"), size_of::<FeatVal>())?;
        let b = PinnedMap::open(&dir.join("ddos_feat_b"), size_of::<FeatVal>())?;
        let stats = PinnedMap::open(&dir.join("ddos_featst"), size_of::<FeatStats>())?;
        let ctl = ArrayMmap::new(ctl_map.fd.as_fd(), &ctl_map.info)?;
        Ok(Self {
            dir,
            name: name.to_string(),
            _ctl_map: ctl_map,
            ctl,
            slots: [a, b],
            stats,
            ncpu: maps::possible_cpus(),
        })
    }

    /// (src, dst) pairs one interval holds.
    pub fn capacity(&self) -> u32 {
        self.slots[0].info.max_entries
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
    /// grace period, read and empty the idle slot, aggregate across CPUs.
    ///
    /// # Errors
    /// A failing batch read.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let _lock = crate::filter::lock_features(&self.name)?;
        let t0 = Instant::now();
        let old = self.slot_atomic().load(Ordering::Acquire) & 1;
        self.slot_atomic().store(old ^ 1, Ordering::Release);
        let interval = self.interval_atomic().fetch_add(1, Ordering::AcqRel);
        maps::grace_period();
        let swap_wait = t0.elapsed();
        let t1 = Instant::now();
        let records = self.drain(old as usize)?;
        Ok(Snapshot {
            interval,
            records,
            swap_wait,
            read: t1.elapsed(),
        })
    }

    /// Read and empty slot `slot` (0 or 1) without swapping. Only correct
    /// for the idle slot; [`Features::snapshot`] is the way to read.
    fn drain(&self, slot: usize) -> Result<Vec<FeatureRecord>> {
        let ksz = std::mem::size_of::<FeatKey>();
        let vsz = std::mem::size_of::<FeatVal>().next_multiple_of(8);
        let ncpu = self.ncpu;
        let mut out = Vec::with_capacity(self.slots[slot].info.max_entries.min(1 << 20) as usize);
        maps::drain_batch(self.slots[slot].raw(), ksz, vsz * ncpu, 8192, |k, v| {
            let key: FeatKey = maps::from_bytes(k);
            let (Some(src), Some(dst)) = (
                words_addr(key.family, &key.src),
                words_addr(key.family, &key.dst),
            ) else {
                return;
            };
            let mut r = FeatureRecord {
                src,
                dst,
                packets: 0,
                bytes: 0,
                tcp: 0,
                udp: 0,
                icmp: 0,
                other: 0,
                syn: 0,
                synack: 0,
                rst: 0,
                frags: 0,
                dport_sketch: [0; 2],
                dports_est: 0.0,
            };
            for c in 0..ncpu {
                let x: FeatVal = maps::from_bytes(&v[c * vsz..]);
                r.packets += x.packets;
                r.bytes += x.bytes;
                r.tcp += u64::from(x.tcp);
                r.udp += u64::from(x.udp);
                r.icmp += u64::from(x.icmp);
                r.other += u64::from(x.other);
                r.syn += u64::from(x.syn);
                r.synack += u64::from(x.synack);
                r.rst += u64::from(x.rst);
                r.frags += u64::from(x.frags);
                r.dport_sketch[0] |= x.dport_sketch[0];
                r.dport_sketch[1] |= x.dport_sketch[1];
            }
            r.dports_est = linear_count(&r.dport_sketch);
            out.push(r);
        })?;
        Ok(out)
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
            debug_assert_eq!(c.skipped.len(), FEAT_SKIPS);
            s.skipped_not_ip += c.skipped[0];
            s.skipped_malformed += c.skipped[1];
            s.skipped_table_full += c.skipped[2];
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_counting_is_close() {
        // Set the bits the data path would set for n distinct ports.
        for (n, tol) in [(1u32, 0.01), (20, 0.15), (100, 0.2), (300, 0.35)] {
            let mut s = [0u64; 2];
            for port in 1000..1000 + n {
                let bit = (port.wrapping_mul(0x9e37_79b1)) >> 25;
                s[(bit >> 6) as usize] |= 1u64 << (bit & 63);
            }
            let est = linear_count(&s);
            assert!(
                (est - f64::from(n)).abs() <= tol * f64::from(n) + 1.0,
                "n={n} est={est}"
            );
        }
        assert_eq!(linear_count(&[0, 0]), 0.0);
        assert!(linear_count(&[u64::MAX, u64::MAX]) > 700.0);
    }
}
