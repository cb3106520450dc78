//! The tap's aggregation tables read in place: `stream_tap_agg` (IPv4
//! connections, 64-byte [`StreamAggSlot`]s) and `stream_tap_agg6` (IPv6,
//! 128-byte [`StreamAggSlot6`]s), mmapable arrays with a segment per CPU
//! (`bpf/stream/tap.h`). The program keeps each connection in a slot from
//! one epoch to the next and counts the current epoch there; this reader
//! takes a finished epoch's counts by setting `ST_AGG_HARVESTED` with a
//! compare-and-swap of the slot's state word (its first 8 bytes: state and
//! packets), the program reuses unread counts only after winning its own
//! compare-and-swap (`ST_AGG_FLUSHING`) and then sends the slot to the ring
//! buffer. Either way each epoch's counts arrive once ([`AggTables::harvest`]
//! + the ring's slot records, [`AggRecord`]).

use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rampart_bpf::abi::stream::{
    StreamAggSlot, StreamAggSlot6, ST_AGG_EPOCH_MASK, ST_AGG_FLUSHING, ST_AGG_HARVESTED,
    ST_AGG_USED, ST_AGG_WAYS,
};

use crate::error::{Error, Result};
use crate::offload::TapMaps;
use crate::part::FlowPart;

/// The epoch number whose low bits (`ST_AGG_EPOCH_MASK`) are those of
/// `state`, at or before `reference`.
pub fn full_epoch(state: u32, reference: u64) -> u64 {
    let back = (reference as u32).wrapping_sub(state) & ST_AGG_EPOCH_MASK;
    reference.saturating_sub(u64::from(back))
}

/// A slot type of the aggregation tables: its state word is its first 8
/// bytes (asserted in rampart-bpf).
pub trait AggSlot: bytemuck::Pod {
    /// The part its counts make, their epoch having started at `epoch_start_ns`.
    fn part(&self, epoch_start_ns: u64) -> FlowPart;
}

impl AggSlot for StreamAggSlot {
    fn part(&self, epoch_start_ns: u64) -> FlowPart {
        FlowPart::from_slot(self, epoch_start_ns)
    }
}

impl AggSlot for StreamAggSlot6 {
    fn part(&self, epoch_start_ns: u64) -> FlowPart {
        FlowPart::from_slot6(self, epoch_start_ns)
    }
}

/// One table, mapped into this process (read and compare-and-swap).
pub struct AggTable<S> {
    base: *mut S,
    slots: usize,
    bytes: usize,
    _slot: PhantomData<S>,
}

// SAFETY: the mapping is shared memory owned by this value; every access
// goes through volatile reads or atomics, from whichever thread holds it.
unsafe impl<S> Send for AggTable<S> {}

impl<S> std::fmt::Debug for AggTable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggTable")
            .field("slots", &self.slots)
            .field("slot_bytes", &std::mem::size_of::<S>())
            .finish()
    }
}

impl<S> Drop for AggTable<S> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}

impl<S: AggSlot> AggTable<S> {
    /// Map the table `fd` of `slots` slots.
    ///
    /// # Errors
    /// The kernel's mmap error (a map made without `BPF_F_MMAPABLE`).
    pub fn map(fd: BorrowedFd<'_>, slots: usize) -> Result<Self> {
        let page = 4096;
        let bytes = (slots * std::mem::size_of::<S>()).next_multiple_of(page);
        // SAFETY: a fresh shared mapping of the map's data; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::Invalid(format!(
                "mapping the tap's aggregation table ({bytes} bytes): {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Self {
            base: p.cast(),
            slots,
            bytes,
            _slot: PhantomData,
        })
    }

    /// Slots in all.
    pub fn slots(&self) -> usize {
        self.slots
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: i < slots; the state word is the slot's first 8 bytes,
        // 8-byte aligned (slots of 64 or 128 bytes from a page boundary).
        unsafe { AtomicU64::from_ptr(self.base.add(i).cast::<u64>()) }
    }

    /// Take slot `i`'s counts when they are unread and of epoch `epoch` or
    /// earlier: a copy of the slot and its full epoch. Counts the program
    /// is sending to the ring buffer meanwhile are not taken here.
    fn take(&self, i: usize, epoch: u64) -> Option<(S, u64)> {
        let half = ST_AGG_EPOCH_MASK / 2;
        let w = self.word(i);
        let mut spins = 0u32;
        loop {
            let x = w.load(Ordering::Acquire);
            let s = x as u32;
            if s & ST_AGG_FLUSHING != 0 {
                // The program is inside its flush (microseconds).
                spins += 1;
                if spins > 1_000_000 {
                    return None;
                }
                std::hint::spin_loop();
                continue;
            }
            if s & ST_AGG_USED == 0 || s & ST_AGG_HARVESTED != 0 {
                return None;
            }
            if ((epoch as u32).wrapping_sub(s) & ST_AGG_EPOCH_MASK) > half {
                // A later epoch: still being counted.
                return None;
            }
            // SAFETY: i < slots; a volatile copy of shared memory the
            // program may write (it cannot change these counts without
            // changing the state word, which the swap below checks: a new
            // epoch or a flush changes the state, a packet added late the
            // packets).
            let snap = unsafe { std::ptr::read_volatile(self.base.add(i)) };
            if w.compare_exchange(
                x,
                x | u64::from(ST_AGG_HARVESTED),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
            {
                return Some((snap, full_epoch(s, epoch)));
            }
            // The program took the slot meanwhile: look again.
        }
    }

    /// Take the counts of every slot whose unread counts are of epoch
    /// `epoch` or earlier (earlier: a CPU that wrote long after its epoch
    /// ended; handed on as `late`), calling `f(slot, its full epoch)` for
    /// each slot. Counts the program is sending to the ring buffer
    /// meanwhile are not taken here: read the ring after this returns.
    pub fn harvest(&self, epoch: u64, mut f: impl FnMut(&S, u64)) {
        for i in 0..self.slots {
            if let Some((s, e)) = self.take(i, epoch) {
                f(&s, e);
            }
        }
    }

    /// [`Self::harvest`] bucket by bucket across the table's `segments`
    /// (one per CPU): a connection's bucket is at the same place in every
    /// segment (the same hash and mask), so its slots of every CPU are
    /// merged here into one part, without a map. `f(part, the oldest
    /// epoch of its slots)` once per connection (epochs of `epoch_ns`).
    pub fn harvest_merged(
        &self,
        epoch: u64,
        epoch_ns: u64,
        segments: usize,
        mut f: impl FnMut(FlowPart, u64),
    ) {
        let segments = segments.max(1);
        let seg = self.slots / segments;
        let ways = (ST_AGG_WAYS as usize).min(seg.max(1));
        let mut group: Vec<(FlowPart, u64)> = Vec::with_capacity(ways * segments);
        for b in (0..seg).step_by(ways) {
            for c in 0..segments {
                for i in c * seg + b..c * seg + b + ways {
                    let Some((s, e)) = self.take(i, epoch) else {
                        continue;
                    };
                    let p = s.part(e * epoch_ns);
                    match group.iter_mut().find(|(g, _)| g.key == p.key) {
                        Some((g, ge)) => {
                            g.merge(&p);
                            *ge = (*ge).min(e);
                        }
                        None => group.push((p, e)),
                    }
                }
            }
            for (p, e) in group.drain(..) {
                f(p, e);
            }
        }
    }
}

/// Both tables of a tap.
#[derive(Debug)]
pub struct AggTables {
    /// IPv4 connections.
    pub v4: AggTable<StreamAggSlot>,
    /// IPv6 connections.
    pub v6: AggTable<StreamAggSlot6>,
    /// Segments of each (possible CPUs).
    pub cpus: usize,
}

impl AggTables {
    /// Map the tap's tables (every CPU's segment).
    ///
    /// # Errors
    /// As [`AggTable::map`].
    pub fn map(m: &TapMaps) -> Result<Self> {
        let cpus = m.rings.len();
        Ok(Self {
            v4: AggTable::map(
                std::os::fd::AsFd::as_fd(&m.agg),
                m.agg_slots as usize * cpus,
            )?,
            v6: AggTable::map(
                std::os::fd::AsFd::as_fd(&m.agg6),
                m.agg6_slots as usize * cpus,
            )?,
            cpus,
        })
    }

    /// [`AggTable::harvest`] on both tables, each slot made a part:
    /// `f(part, its full epoch)` (epochs of `epoch_ns`).
    pub fn harvest(&self, epoch: u64, epoch_ns: u64, mut f: impl FnMut(FlowPart, u64)) {
        self.v4.harvest(epoch, |s, e| f(s.part(e * epoch_ns), e));
        self.v6.harvest(epoch, |s, e| f(s.part(e * epoch_ns), e));
    }

    /// [`AggTable::harvest_merged`] on both tables: one part per
    /// connection, its CPUs' slots merged.
    pub fn harvest_merged(&self, epoch: u64, epoch_ns: u64, mut f: impl FnMut(FlowPart, u64)) {
        self.v4.harvest_merged(epoch, epoch_ns, self.cpus, &mut f);
        self.v6.harvest_merged(epoch, epoch_ns, self.cpus, &mut f);
    }
}

/// A slot the program sent to the ring buffer (its counts reused before
/// userspace read them in place, or about to overflow).
#[derive(Debug, Clone, Copy)]
pub enum AggRecord {
    /// From the IPv4 table (64 bytes).
    V4(StreamAggSlot),
    /// From the IPv6 table (128 bytes).
    V6(StreamAggSlot6),
}

impl AggRecord {
    /// The record in `d`, told apart from a tuple (56 bytes) and from each
    /// other by length; `None` for any other length.
    pub fn from_bytes(d: &[u8]) -> Option<Self> {
        match d.len() {
            n if n == std::mem::size_of::<StreamAggSlot>() => {
                Some(Self::V4(bytemuck::pod_read_unaligned(d)))
            }
            n if n == std::mem::size_of::<StreamAggSlot6>() => {
                Some(Self::V6(bytemuck::pod_read_unaligned(d)))
            }
            _ => None,
        }
    }

    /// Its full epoch (at or before `reference`).
    pub fn epoch(&self, reference: u64) -> u64 {
        let state = match self {
            Self::V4(s) => s.h.state,
            Self::V6(s) => s.h.state,
        };
        full_epoch(state, reference)
    }

    /// Its part, the counts' epoch having started at `epoch_start_ns`.
    pub fn part(&self, epoch_start_ns: u64) -> FlowPart {
        match self {
            Self::V4(s) => s.part(epoch_start_ns),
            Self::V6(s) => s.part(epoch_start_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_epochs_come_back_from_their_low_bits() {
        let m = u64::from(ST_AGG_EPOCH_MASK);
        for reference in [5u64, 1_764_000_000, m, m + 1, 3 * m + 7] {
            for back in [0u64, 1, 2, 1000].into_iter().filter(|b| *b <= reference) {
                let e = reference - back;
                let state = ST_AGG_USED | (e as u32 & ST_AGG_EPOCH_MASK);
                assert_eq!(full_epoch(state, reference), e, "{reference} - {back}");
            }
        }
    }
}
