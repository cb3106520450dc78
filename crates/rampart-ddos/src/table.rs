//! The compact exact-IPv4 table (see `bpf/ddos/abi.h`): built here,
//! read by `xdp_filter`.
//!
//! Open addressing with linear probing over 4-byte slots, 16 slots per
//! 64-byte array element (one cache line). The home slot of key `k` (the
//! address as a native-endian load of its network-order bytes) is
//! [`home`]: two multiplications and a xor-shift, so consecutive
//! addresses (a /16 of attackers, or the lab generator's sources) spread
//! like random ones instead of landing in a perfect, unrealistically cheap
//! sequence. Keys are placed with Robin Hood insertion at load ≤ 50%, and
//! every key must sit fewer than [`DDOS_BL4_MAX_PROBES`] slots from home, so a
//! lookup makes at most that many probes and usually touches one cache
//! line. A build that would break the bound retries with another
//! multiplier, then doubles the slots.
//!
//! Tables of 2^21 slots or more are *narrow* in the data path: the hash is
//! a bijection of the key, so a slot only needs the key's remainder below
//! its home slot and its distance from home, 16 bits ([`Built::narrow_words`],
//! `bpf/ddos/abi.h`). That halves the memory a random lookup walks.

use rampart_bpf::abi::ddos::{
    DDOS_BL4_EMPTY, DDOS_BL4_MAX_PROBES, DDOS_BL4_MIX, DDOS_BL4_NARROW, DDOS_BL4_NARROW_MAX_SHIFT,
    DDOS_BL4_N_EMPTY, DDOS_BL4_N_SLOTS_PER_BUCKET, DDOS_BL4_N_USED, DDOS_BL4_SLOTS_PER_BUCKET,
    DDOS_BL4_TOMBSTONE,
};

use crate::error::{Error, Result};

/// The table hash of `key`: a bijection of the 32-bit key (odd
/// multipliers and a xor-shift are invertible).
#[inline]
pub fn hash(key: u32, mult: u32) -> u32 {
    let mut h = key.wrapping_mul(mult);
    h ^= h >> 16;
    h.wrapping_mul(DDOS_BL4_MIX)
}

/// Home slot of `key` for a table of `2^(32 - shift)` slots.
#[inline]
pub fn home(key: u32, mult: u32, shift: u32) -> u32 {
    hash(key, mult) >> (shift & 31)
}

/// Is a table with this `shift` stored narrow (16-bit slots)?
#[inline]
pub fn is_narrow_shift(shift: u32) -> bool {
    (shift & 31) <= DDOS_BL4_NARROW_MAX_SHIFT
}

/// The 16-bit slot of `key` at `dist` slots from its home in a narrow table.
#[inline]
pub fn narrow_word(key: u32, mult: u32, shift: u32, dist: u32) -> u16 {
    let rem = hash(key, mult) & ((1u32 << (shift & 31)) - 1);
    DDOS_BL4_N_USED | (dist << 11) as u16 | rem as u16
}

/// A built table, ready to be copied into one half of `ddos_bl4_keys` /
/// `ddos_bl4_ids`.
#[derive(Debug, Clone)]
pub struct Built {
    /// Keys per slot ([`DDOS_BL4_EMPTY`] when free).
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
        self.keys.len() / DDOS_BL4_SLOTS_PER_BUCKET
    }

    /// `slots - 1`.
    pub fn mask(&self) -> u32 {
        (self.keys.len() - 1) as u32
    }

    /// Stored with 16-bit slots in the data path (2^21 slots or more)?
    pub fn is_narrow(&self) -> bool {
        is_narrow_shift(self.shift)
    }

    /// The `shift` word of the table's descriptor (with `DDOS_BL4_NARROW`).
    pub fn shift_word(&self) -> u32 {
        if self.is_narrow() {
            self.shift | DDOS_BL4_NARROW
        } else {
            self.shift
        }
    }

    /// The 16-bit slots of the narrow form, slot by slot (`DDOS_BL4_N_EMPTY` when free).
    pub fn narrow_words(&self) -> Vec<u16> {
        let mask = self.mask();
        self.keys
            .iter()
            .enumerate()
            .map(|(s, &k)| {
                if k == DDOS_BL4_EMPTY {
                    DDOS_BL4_N_EMPTY
                } else {
                    let d = (s as u32).wrapping_sub(home(k, self.mult, self.shift)) & mask;
                    narrow_word(k, self.mult, self.shift, d)
                }
            })
            .collect()
    }

    /// Array elements of `ddos_bl4_keys` the table takes (narrow: half).
    pub fn key_buckets(&self) -> usize {
        if self.is_narrow() {
            self.keys.len() / DDOS_BL4_N_SLOTS_PER_BUCKET
        } else {
            self.buckets()
        }
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
        if key == DDOS_BL4_EMPTY || key == DDOS_BL4_TOMBSTONE || self.count == 0 {
            return None;
        }
        let mask = self.mask();
        let h = home(key, self.mult, self.shift);
        for i in 0..DDOS_BL4_MAX_PROBES {
            if i > self.max_dist {
                return None;
            }
            let s = (h.wrapping_add(i) & mask) as usize;
            if self.keys[s] == key {
                return Some(s);
            }
            if self.keys[s] == DDOS_BL4_EMPTY {
                return None;
            }
        }
        None
    }
}

/// Slots for `n` keys: load ≤ 50%, at least one cache line.
pub fn slots_for(n: usize) -> usize {
    (2 * n).next_power_of_two().max(DDOS_BL4_SLOTS_PER_BUCKET)
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
    let mut keys = vec![DDOS_BL4_EMPTY; slots];
    let mut ids = vec![0u32; slots];
    let mut dist = vec![0u8; slots];
    let limit = DDOS_BL4_MAX_PROBES - 1;
    for &(k0, id0) in entries {
        let (mut k, mut id, mut d) = (k0, id0, 0u32);
        let mut s = home(k, mult, shift) as usize;
        loop {
            if keys[s] == k {
                // Robin Hood keeps a cluster ordered by home slot, so a
                // second copy always meets the first before it could stop.
                return Try::Duplicate(k);
            }
            if keys[s] == DDOS_BL4_EMPTY {
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
        if k != DDOS_BL4_EMPTY {
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
/// Keys must be distinct and neither [`DDOS_BL4_EMPTY`] nor [`DDOS_BL4_TOMBSTONE`].
///
/// # Errors
/// [`Error::Invalid`] for a reserved key or a duplicate, and when no
/// multiplier places every key within the probe bound even at `max_slots`
/// (which takes a pathological, adversarially chosen key set).
pub fn build(entries: &[(u32, u32)], max_slots: usize, rng: &mut impl rand::Rng) -> Result<Built> {
    if let Some(&(k, _)) = entries
        .iter()
        .find(|(k, _)| *k == DDOS_BL4_EMPTY || *k == DDOS_BL4_TOMBSTONE)
    {
        return Err(Error::Invalid(format!(
            "internal: reserved key {k:#x} offered to the exact IPv4 table (it belongs in the prefix trie)"
        )));
    }
    let mut slots = slots_for(entries.len());
    while slots <= max_slots.max(DDOS_BL4_SLOTS_PER_BUCKET) {
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
        DDOS_BL4_MAX_PROBES
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
        assert!(b.max_dist < DDOS_BL4_MAX_PROBES);
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

    /// The narrow lookup `xdp_filter` does, over [`Built::narrow_words`].
    fn find_narrow(b: &Built, w: &[u16], key: u32) -> Option<usize> {
        let h = hash(key, b.mult);
        let home = h >> b.shift;
        let want = DDOS_BL4_N_USED | (h & ((1 << b.shift) - 1)) as u16;
        for i in 0..=b.max_dist {
            let s = (home.wrapping_add(i) & b.mask()) as usize;
            if w[s] == want | (i << 11) as u16 {
                return Some(s);
            }
            if w[s] == DDOS_BL4_N_EMPTY {
                return None;
            }
        }
        None
    }

    #[test]
    fn hash_is_a_bijection_on_a_sample() {
        // Odd multipliers and x ^ x >> 16 are invertible: no two keys share a hash.
        let mut seen = std::collections::HashSet::new();
        for k in (0..1u32 << 20).map(|i| i.wrapping_mul(4099)) {
            assert!(seen.insert(hash(k, 0x9e37_79b1)));
        }
    }

    #[test]
    fn narrow_tables_find_members_and_only_members() {
        // 600,000 keys → 2^21 slots: the first narrow size.
        let n = 600_000u32;
        let e: Vec<(u32, u32)> = (0..n)
            .map(|i| (u32::from_ne_bytes((0xac10_0000u32 + i).to_be_bytes()), i))
            .collect();
        let b = build(&e, 1 << 22, &mut rng()).unwrap();
        assert_eq!(b.slots(), 1 << 21);
        assert!(b.is_narrow() && b.shift_word() == 11 | DDOS_BL4_NARROW);
        assert_eq!(b.key_buckets() * DDOS_BL4_N_SLOTS_PER_BUCKET, 1 << 21);
        let w = b.narrow_words();
        for &(k, id) in &e {
            let s = find_narrow(&b, &w, k).unwrap_or_else(|| panic!("{k:#x} not found"));
            assert_eq!((b.keys[s], b.ids[s]), (k, id));
        }
        // Keys next to members (same high bits, same remainder bits in
        // turn) are not found: the remainder and distance identify a key.
        let mut r = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..200_000 {
            let k: u32 = rand::Rng::random(&mut r);
            let member = b.find(k).is_some();
            assert_eq!(find_narrow(&b, &w, k).is_some(), member, "{k:#x}");
        }
        for i in n..n + 100_000 {
            let k = u32::from_ne_bytes((0xac10_0000u32 + i).to_be_bytes());
            assert_eq!(find_narrow(&b, &w, k), None);
        }
        // Small tables stay wide.
        let small = build(&e[..1000], 1 << 22, &mut rng()).unwrap();
        assert!(!small.is_narrow() && small.shift_word() == small.shift);
    }

    proptest! {
        #[test]
        fn every_key_is_found_and_no_other(keys in proptest::collection::hash_set(1u32..u32::MAX, 0..3000), probes in proptest::collection::vec(1u32..u32::MAX, 50)) {
            let e: Vec<(u32, u32)> = keys.iter().enumerate().map(|(i, &k)| (k, i as u32)).collect();
            let b = build(&e, 1 << 16, &mut rng()).unwrap();
            prop_assert!(b.max_dist < DDOS_BL4_MAX_PROBES);
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
