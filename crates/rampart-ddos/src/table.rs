//! The compact exact-IPv4 table (see `bpf/shared/ddos.h`): built here,
//! read by `xdp_filter`.
//!
//! Open addressing with linear probing over 4-byte slots, 16 slots per
//! 64-byte array element (one cache line). The home slot of key `k` (the
//! address as a native-endian load of its network-order bytes) is
//! [`home`]: two multiplications and a xor-shift, so consecutive
//! addresses (a /16 of attackers, or the lab generator's sources) spread
//! like random ones instead of landing in a perfect, unrealistically cheap
//! sequence. Keys are placed with Robin Hood insertion at load ≤ 50%, and
//! every key must sit fewer than [`BL4_MAX_PROBES`] slots from home, so a
//! lookup makes at most that many probes and usually touches one cache
//! line. A build that would break the bound retries with another
//! multiplier, then doubles the slots.

use rampart_bpf::abi::ddos::{
    BL4_EMPTY, BL4_MAX_PROBES, BL4_MIX, BL4_SLOTS_PER_BUCKET, BL4_TOMBSTONE,
};

use crate::error::{Error, Result};

/// Home slot of `key` for a table of `2^(32 - shift)` slots.
#[inline]
pub fn home(key: u32, mult: u32, shift: u32) -> u32 {
    let mut h = key.wrapping_mul(mult);
    h ^= h >> 16;
    h = h.wrapping_mul(BL4_MIX);
    h >> (shift & 31)
}

/// A built table, ready to be copied into one half of `ddos_bl4_keys` /
/// `ddos_bl4_ids`.
#[derive(Debug, Clone)]
pub struct Built {
    /// Keys per slot ([`BL4_EMPTY`] when free).
    pub keys: Vec<u32>,
    /// Entry id per slot.
    pub ids: Vec<u32>,
    /// First multiplier.
    pub mult: u32,
    /// `32 - log2(slots)`.
    pub shift: u32,
    /// Largest distance of a key from its home slot.
    pub max_dist: u32,
    /// Keys stored.
    pub count: u32,
    /// Sum of distances (for the mean probe count).
    pub total_dist: u64,
}

impl Built {
    /// Slots in the table.
    pub fn slots(&self) -> usize {
        self.keys.len()
    }

    /// Array elements (cache lines) the table spans.
    pub fn buckets(&self) -> usize {
        self.keys.len() / BL4_SLOTS_PER_BUCKET
    }

    /// `slots - 1`.
    pub fn mask(&self) -> u32 {
        (self.keys.len() - 1) as u32
    }

    /// Mean distance from home over the stored keys.
    pub fn mean_dist(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_dist as f64 / f64::from(self.count)
        }
    }

    /// The lookup `xdp_filter` does (for tests and for userspace checks):
    /// the slot holding `key`, if any.
    pub fn find(&self, key: u32) -> Option<usize> {
        if key == BL4_EMPTY || key == BL4_TOMBSTONE || self.count == 0 {
            return None;
        }
        let mask = self.mask();
        let h = home(key, self.mult, self.shift);
        for i in 0..BL4_MAX_PROBES {
            if i > self.max_dist {
                return None;
            }
            let s = (h.wrapping_add(i) & mask) as usize;
            if self.keys[s] == key {
                return Some(s);
            }
            if self.keys[s] == BL4_EMPTY {
                return None;
            }
        }
        None
    }
}

/// Slots for `n` keys: load ≤ 50%, at least one cache line.
pub fn slots_for(n: usize) -> usize {
    (2 * n).next_power_of_two().max(BL4_SLOTS_PER_BUCKET)
}

enum Try {
    Built(Built),
    TooFar,
    Duplicate(u32),
}

fn try_build(entries: &[(u32, u32)], slots: usize, mult: u32) -> Try {
    let bits = slots.trailing_zeros();
    let shift = 32 - bits;
    let mask = slots - 1;
    let mut keys = vec![BL4_EMPTY; slots];
    let mut ids = vec![0u32; slots];
    let mut dist = vec![0u8; slots];
    let limit = BL4_MAX_PROBES - 1;
    for &(k0, id0) in entries {
        let (mut k, mut id, mut d) = (k0, id0, 0u32);
        let mut s = home(k, mult, shift) as usize;
        loop {
            if keys[s] == k {
                // Robin Hood keeps a cluster ordered by home slot, so a
                // second copy always meets the first before it could stop.
                return Try::Duplicate(k);
            }
            if keys[s] == BL4_EMPTY {
                keys[s] = k;
                ids[s] = id;
                dist[s] = d as u8;
                break;
            }
            if u32::from(dist[s]) < d {
                // Robin Hood: the richer key (closer to home) moves on.
                std::mem::swap(&mut keys[s], &mut k);
                std::mem::swap(&mut ids[s], &mut id);
                let old = u32::from(dist[s]);
                dist[s] = d as u8;
                d = old;
            }
            s = (s + 1) & mask;
            d += 1;
            if d > limit {
                return Try::TooFar;
            }
        }
    }
    let mut max_dist = 0;
    let mut total = 0u64;
    for (i, &k) in keys.iter().enumerate() {
        if k != BL4_EMPTY {
            max_dist = max_dist.max(u32::from(dist[i]));
            total += u64::from(dist[i]);
        }
    }
    Try::Built(Built {
        keys,
        ids,
        mult,
        shift,
        max_dist,
        count: entries.len() as u32,
        total_dist: total,
    })
}

/// Build a table holding `entries` (key, id), in at most `max_slots` slots.
/// Keys must be distinct and neither [`BL4_EMPTY`] nor [`BL4_TOMBSTONE`].
///
/// # Errors
/// [`Error::Invalid`] for a reserved key or a duplicate, and when no
/// multiplier places every key within the probe bound even at `max_slots`
/// (which takes a pathological, adversarially chosen key set).
pub fn build(entries: &[(u32, u32)], max_slots: usize, rng: &mut impl rand::Rng) -> Result<Built> {
    if let Some(&(k, _)) = entries
        .iter()
        .find(|(k, _)| *k == BL4_EMPTY || *k == BL4_TOMBSTONE)
    {
        return Err(Error::Invalid(format!(
            "internal: reserved key {k:#x} offered to the exact IPv4 table (it belongs in the prefix trie)"
        )));
    }
    let mut slots = slots_for(entries.len());
    while slots <= max_slots.max(BL4_SLOTS_PER_BUCKET) {
        for _ in 0..8 {
            let mult = rng.random::<u32>() | 1;
            match try_build(entries, slots, mult) {
                Try::Built(b) => return Ok(b),
                Try::Duplicate(k) => {
                    return Err(Error::Invalid(format!(
                        "internal: duplicate key {k:#x} offered to the exact IPv4 table"
                    )))
                }
                Try::TooFar => {}
            }
        }
        slots *= 2;
    }
    Err(Error::Invalid(format!(
        "could not place {} exact IPv4 entries within {} probes in {max_slots} slots: \
         re-attach with a larger --max-entries",
        entries.len(),
        BL4_MAX_PROBES
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(7)
    }

    #[test]
    fn sequential_sources_spread_like_random_ones() {
        // The lab's 172.16.0.0 + i, as the data path sees them.
        let n = 131_072u32;
        let e: Vec<(u32, u32)> = (0..n)
            .map(|i| (u32::from_ne_bytes((0xac10_0000u32 + i).to_be_bytes()), i))
            .collect();
        let b = build(&e, 1 << 22, &mut rng()).unwrap();
        assert_eq!(b.slots(), 262_144);
        assert!(b.max_dist < BL4_MAX_PROBES);
        // Random keys at load 0.5 give a mean distance near 0.5; a plain
        // multiplicative hash would give exactly 0 for sequential keys.
        assert!(
            b.mean_dist() > 0.2 && b.mean_dist() < 1.0,
            "{}",
            b.mean_dist()
        );
        for &(k, id) in &e {
            let s = b.find(k).unwrap();
            assert_eq!(b.ids[s], id);
        }
    }

    #[test]
    fn reserved_and_duplicate_keys_are_refused() {
        assert!(build(&[(0, 1)], 1 << 10, &mut rng()).is_err());
        assert!(build(&[(u32::MAX, 1)], 1 << 10, &mut rng()).is_err());
        assert!(build(&[(5, 1), (5, 2)], 1 << 10, &mut rng()).is_err());
    }

    #[test]
    fn empty_and_tiny_tables() {
        let b = build(&[], 1 << 10, &mut rng()).unwrap();
        assert_eq!((b.slots(), b.count), (16, 0));
        assert_eq!(b.find(123), None);
        let b = build(&[(42, 9)], 1 << 10, &mut rng()).unwrap();
        assert_eq!(b.slots(), 16);
        assert_eq!(b.ids[b.find(42).unwrap()], 9);
        assert_eq!(b.find(43), None);
    }

    proptest! {
        #[test]
        fn every_key_is_found_and_no_other(keys in proptest::collection::hash_set(1u32..u32::MAX, 0..3000), probes in proptest::collection::vec(1u32..u32::MAX, 50)) {
            let e: Vec<(u32, u32)> = keys.iter().enumerate().map(|(i, &k)| (k, i as u32)).collect();
            let b = build(&e, 1 << 16, &mut rng()).unwrap();
            prop_assert!(b.max_dist < BL4_MAX_PROBES);
            prop_assert!(b.slots() >= 2 * e.len());
            for &(k, id) in &e {
                let s = b.find(k);
                prop_assert!(s.is_some());
                prop_assert_eq!(b.ids[s.unwrap()], id);
            }
            for p in probes {
                prop_assert_eq!(b.find(p).is_some(), keys.contains(&p));
            }
        }
    }
}
