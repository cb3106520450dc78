//! The tap's aggregation table read in place: `stream_tap_agg`
//! (`bpf/stream/tap.h`), an mmapable array of [`StreamAggSlot`]s, a
//! segment per CPU. The program keeps each connection in a slot from one
//! epoch to the next and counts the current epoch there; this reader takes
//! a finished epoch's counts by setting `ST_AGG_HARVESTED` with a
//! compare-and-swap on the slot's state, the program reuses unread counts
//! only after winning its own compare-and-swap (`ST_AGG_FLUSHING`) and
//! then sends them to the ring buffer. Either way each epoch's counts
//! arrive once ([`AggTable::harvest`] + the ring's slot records).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rampart_bpf::abi::stream::{
    StreamAggSlot, ST_AGG_EPOCH_MASK, ST_AGG_FLUSHING, ST_AGG_HARVESTED, ST_AGG_USED,
};

use crate::error::{Error, Result};

/// The table, mapped into this process (read and compare-and-swap).
pub struct AggTable {
    base: *mut StreamAggSlot,
    slots: usize,
    bytes: usize,
}

// SAFETY: the mapping is shared memory owned by this value; every access
// goes through volatile reads or atomics, from whichever thread holds it.
unsafe impl Send for AggTable {}

impl std::fmt::Debug for AggTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggTable")
            .field("slots", &self.slots)
            .finish()
    }
}

impl Drop for AggTable {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}

/// The epoch number whose low 32 bits are `low`, at or before `reference`.
pub fn full_epoch(low: u64, reference: u64) -> u64 {
    let back = (reference as u32).wrapping_sub(low as u32);
    reference.saturating_sub(u64::from(back))
}

impl AggTable {
    /// Map the table `fd` of `slots` slots.
    ///
    /// # Errors
    /// The kernel's mmap error (a map made without `BPF_F_MMAPABLE`).
    pub fn map(fd: BorrowedFd<'_>, slots: usize) -> Result<Self> {
        let page = 4096;
        let bytes = (slots * std::mem::size_of::<StreamAggSlot>()).next_multiple_of(page);
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
        })
    }

    /// Slots in all.
    pub fn slots(&self) -> usize {
        self.slots
    }

    fn state(&self, i: usize) -> &AtomicU64 {
        // SAFETY: i < slots; `state` is an 8-byte-aligned u64 in the slot
        // (the slot is 128 bytes at an 8-byte-aligned offset of a page).
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.base.add(i)).state)) }
    }

    /// Take the counts of every slot whose unread counts are of epoch
    /// `epoch` or earlier (earlier: a CPU that wrote long after its epoch
    /// ended; handed on as `late`), calling `f(slot, its full epoch)`.
    /// Counts the program is sending to the ring buffer meanwhile are not
    /// taken here: read the ring after this returns.
    pub fn harvest(&self, epoch: u64, mut f: impl FnMut(&StreamAggSlot, u64)) {
        for i in 0..self.slots {
            let st = self.state(i);
            let mut spins = 0u32;
            loop {
                let s = st.load(Ordering::Acquire);
                if s & ST_AGG_FLUSHING != 0 {
                    // The program is inside its flush (microseconds).
                    spins += 1;
                    if spins > 1_000_000 {
                        break;
                    }
                    std::hint::spin_loop();
                    continue;
                }
                if s & ST_AGG_USED == 0 || s & ST_AGG_HARVESTED != 0 {
                    break;
                }
                let e = full_epoch(s & ST_AGG_EPOCH_MASK, epoch);
                if (epoch as u32).wrapping_sub(s as u32) > u32::MAX / 2 {
                    // A later epoch: still being counted.
                    break;
                }
                // SAFETY: i < slots; a volatile copy of shared memory the
                // program may write (it cannot change these counts without
                // first changing `state`, which the swap below checks).
                let snap = unsafe { std::ptr::read_volatile(self.base.add(i)) };
                if st
                    .compare_exchange(s, s | ST_AGG_HARVESTED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    f(&snap, e);
                    break;
                }
                // The program took the slot meanwhile: look again.
            }
        }
    }
}
