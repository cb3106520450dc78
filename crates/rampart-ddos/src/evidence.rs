//! Evidence: the filter samples the packets of a marked attack into a ring
//! buffer (`bpf/ddos/abi.h`, "evidence"). [`Capture`] marks and unmarks
//! victims in the pinned `ddos_capture`; [`Ring`] reads the sampled
//! packets from `ddos_evidence`.
//!
//! The filter copies a marked attack's packets before it drops or passes
//! them, so the packets of blocked sources are evidence too: the first
//! `first`, then 1 in `every`, at most [`SNAPLEN`] bytes of each.

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipnet::IpNet;
use rampart_bpf::abi::ddos::{
    CaptureCtl, CaptureKey, CaptureVal, EvidenceRec, DDOS_CAPTURE_FAMILY_BITS,
    DDOS_CAPTURE_HASH_MUL, DDOS_CAPTURE_HASH_SHIFT, DDOS_CAPTURE_MAX, DDOS_CAPTURE_SNAPLEN,
};

use crate::error::{Error, Result};
use crate::filter::{lock_file, pin_dir};
use crate::maps::{self, PinnedMap};

/// Bytes of each packet kept.
pub const SNAPLEN: usize = DDOS_CAPTURE_SNAPLEN as usize;
/// Victims marked at most at once.
pub const MAX_MARKED: usize = DDOS_CAPTURE_MAX as usize;

/// Pin names.
pub mod pins {
    /// The victims marked.
    pub const CAPTURE: &str = "ddos_capture";
    /// Its entry count (the data path's switch).
    pub const CAPCTL: &str = "ddos_capctl";
    /// The ring of sampled packets.
    pub const EVIDENCE: &str = "ddos_evidence";
}

/// What to sample of one attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The attack's number, copied into each of its records.
    pub id: u32,
    /// Its packets' classes (`filter::POLICE_*` bits), 0: every packet to the victim.
    pub classes: u32,
    /// Its packets' UDP/TCP source port, 0: any.
    pub sport: u16,
    /// The first `first` packets...
    pub first: u32,
    /// ...then 1 in `every` (0: only the first).
    pub every: u32,
}

/// How sampling of one victim went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets of the attack the filter saw.
    pub seen: u64,
    /// Packets copied to the ring.
    pub sampled: u64,
    /// Packets to copy that found the ring full.
    pub ring_full: u64,
}

/// The bit of an IPv4 address (network order, as loaded) in the switch's
/// `v4_bits`: the data path's `victim_maybe_marked4` computes the same.
fn addr_bit(a: u32) -> u32 {
    1 << (a.wrapping_mul(DDOS_CAPTURE_HASH_MUL) >> DDOS_CAPTURE_HASH_SHIFT)
}

/// A victim's bits in `v4_bits`: one per address of it (every bit for a
/// prefix of more than 32 addresses), none for IPv6.
fn v4_bits(k: &CaptureKey) -> u32 {
    if k.family != 4 {
        return 0;
    }
    let len = k.prefixlen.saturating_sub(DDOS_CAPTURE_FAMILY_BITS);
    if len < 27 {
        return u32::MAX;
    }
    let base = u32::from_be(k.addr[0]);
    (0..1u32 << (32 - len))
        .map(|i| addr_bit((base | i).to_be()))
        .fold(0, |b, x| b | x)
}

/// The trie key of a victim (a host or a prefix, its host bits cleared).
fn key(victim: IpNet) -> CaptureKey {
    let victim = victim.trunc();
    let mut k = CaptureKey {
        prefixlen: DDOS_CAPTURE_FAMILY_BITS + u32::from(victim.prefix_len()),
        ..CaptureKey::default()
    };
    match victim.addr() {
        IpAddr::V4(a) => {
            k.family = 4;
            k.addr[0] = u32::from_ne_bytes(a.octets());
        }
        IpAddr::V6(a) => {
            k.family = 6;
            for (i, w) in a.octets().chunks_exact(4).enumerate() {
                k.addr[i] = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
            }
        }
    }
    k
}

/// The victims marked in one installed filter.
#[derive(Debug)]
pub struct Capture {
    name: String,
    map: PinnedMap,
    ctl: PinnedMap,
}

impl Capture {
    /// The capture maps of the filter `name` (see `filter::resolve`);
    /// `None` for pins of a rampart without evidence (attach again to get it).
    ///
    /// # Errors
    /// Pins of an incompatible build, or unreadable.
    pub fn open(name: &str) -> Result<Option<Self>> {
        let dir = pin_dir(name);
        if !dir.join(pins::CAPTURE).exists() {
            return Ok(None);
        }
        Ok(Some(Self {
            name: name.to_string(),
            map: PinnedMap::open(&dir.join(pins::CAPTURE), std::mem::size_of::<CaptureVal>())?,
            ctl: PinnedMap::open(&dir.join(pins::CAPCTL), std::mem::size_of::<CaptureCtl>())?,
        }))
    }

    /// Publish the switch: how many victims are marked and the IPv4
    /// victims' bits — of those in the map plus `extra` (about to be added).
    fn publish(&self, extra: Option<IpNet>) -> Result<()> {
        let mut v = CaptureCtl::default();
        for k in self.keys()? {
            v.n_active += 1;
            v.v4_bits |= v4_bits(&k);
        }
        if let Some(x) = extra {
            v.n_active += 1;
            v.v4_bits |= v4_bits(&key(x));
        }
        maps::update_raw(
            self.ctl.raw(),
            &0u32.to_ne_bytes(),
            bytemuck::bytes_of(&v),
            0,
        )
    }

    /// Sample the packets to `victim` as `spec` says (a victim marked
    /// already gets the new spec and starts counting again).
    ///
    /// # Errors
    /// [`Error::Invalid`] when [`MAX_MARKED`] victims are marked; map failures.
    pub fn mark(&self, victim: impl Into<IpNet>, spec: Spec) -> Result<()> {
        let victim: IpNet = victim.into();
        let _lock = lock_file(&self.name, "capture")?;
        let v = CaptureVal {
            id: spec.id,
            classes: spec.classes,
            sport: spec.sport.to_be(),
            first: spec.first,
            every: spec.every,
            ..Default::default()
        };
        // The switch and the victim's bit go on before the entry appears
        // (the data path never skips a marked victim), and are recounted
        // afterwards.
        self.publish(Some(victim))?;
        let r = maps::update_raw(
            self.map.raw(),
            bytemuck::bytes_of(&key(victim)),
            bytemuck::bytes_of(&v),
            0,
        );
        self.publish(None)?;
        match r {
            Err(Error::Dataplane(rampart_dataplane::Error::Io { err, .. }))
                if matches!(err.raw_os_error(), Some(libc::E2BIG | libc::ENOSPC)) =>
            {
                Err(Error::Invalid(format!(
                    "evidence: {MAX_MARKED} victims are sampled already, {victim} is not"
                )))
            }
            r => r,
        }
    }

    /// How sampling of `victim` goes (`None`: not marked).
    ///
    /// # Errors
    /// Map failures.
    pub fn stats(&self, victim: impl Into<IpNet>) -> Result<Option<Stats>> {
        let k = key(victim.into());
        // A trie lookup finds the longest prefix holding the key: only an
        // exact entry is this victim's.
        let want = bytemuck::bytes_of(&k);
        if !self.keys()?.iter().any(|x| bytemuck::bytes_of(x) == want) {
            return Ok(None);
        }
        let mut v = CaptureVal::default();
        let have = rampart_dataplane::maps::lookup_raw(
            self.map.raw(),
            bytemuck::bytes_of(&k),
            bytemuck::bytes_of_mut(&mut v),
        )?;
        Ok(have.then_some(Stats {
            seen: v.seen,
            sampled: v.sampled,
            ring_full: v.ring_full,
        }))
    }

    /// Stop sampling `victim`: its last stats (`None`: it was not marked).
    ///
    /// # Errors
    /// Map failures.
    pub fn unmark(&self, victim: impl Into<IpNet>) -> Result<Option<Stats>> {
        let victim: IpNet = victim.into();
        let _lock = lock_file(&self.name, "capture")?;
        let st = self.stats(victim)?;
        maps::delete_raw(self.map.raw(), bytemuck::bytes_of(&key(victim)))?;
        self.publish(None)?;
        Ok(st)
    }
}

impl Capture {
    /// The marked victims' keys (an LPM trie has no batch walk).
    fn keys(&self) -> Result<Vec<CaptureKey>> {
        let ks = std::mem::size_of::<CaptureKey>();
        Ok(rampart_dataplane::maps::keys_raw(self.map.raw(), ks)?
            .iter()
            .map(|k| bytemuck::pod_read_unaligned(k))
            .collect())
    }

    /// Unmark every victim (a daemon starting on pins a previous run left marked).
    ///
    /// # Errors
    /// Map failures.
    pub fn clear(&self) -> Result<()> {
        let _lock = lock_file(&self.name, "capture")?;
        for k in self.keys()? {
            maps::delete_raw(self.map.raw(), bytemuck::bytes_of(&k))?;
        }
        self.publish(None)
    }
}

/// One sampled packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// [`Spec::id`] of its attack.
    pub id: u32,
    /// The frame's length on the wire.
    pub len: u32,
    /// CLOCK_MONOTONIC when the filter saw it (ns).
    pub ts_ns: u64,
    /// Its first bytes (at most [`SNAPLEN`]).
    pub data: Vec<u8>,
}

impl Record {
    /// A record as the filter wrote it; `None` for a short one.
    pub fn parse(raw: &[u8]) -> Option<Self> {
        if raw.len() < std::mem::size_of::<EvidenceRec>() {
            return None;
        }
        let r: EvidenceRec =
            bytemuck::pod_read_unaligned(&raw[..std::mem::size_of::<EvidenceRec>()]);
        let cap = (r.caplen as usize).min(SNAPLEN);
        Some(Self {
            id: r.id,
            len: r.len,
            ts_ns: r.ts_ns,
            data: r.data[..cap].to_vec(),
        })
    }
}

/// The ring of sampled packets of one filter.
pub struct Ring {
    rb: libbpf_rs::RingBuffer<'static>,
    // Dropped after `rb`: the ring's epoll and mapping use its fd.
    _map: libbpf_rs::MapHandle,
    got: Arc<Mutex<Vec<Record>>>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring").finish_non_exhaustive()
    }
}

impl Ring {
    /// The ring of the filter `name`; `None` for pins without evidence.
    ///
    /// # Errors
    /// Unreadable pins.
    pub fn open(name: &str) -> Result<Option<Self>> {
        Self::open_at(&pin_dir(name).join(pins::EVIDENCE))
    }

    /// The ring pinned at `path`; `None` when nothing is pinned there.
    ///
    /// # Errors
    /// Unreadable pins.
    pub fn open_at(path: &Path) -> Result<Option<Self>> {
        if !path.exists() {
            return Ok(None);
        }
        let map = libbpf_rs::MapHandle::from_pinned_path(path).map_err(|e| Error::BadState {
            path: path.to_path_buf(),
            reason: format!("cannot open the evidence ring: {e}"),
        })?;
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&map, move |raw: &[u8]| {
            if let Some(r) = Record::parse(raw) {
                if let Ok(mut g) = sink.lock() {
                    g.push(r);
                }
            }
            0
        })
        .map_err(|e| Error::BadState {
            path: path.to_path_buf(),
            reason: format!("cannot read the evidence ring: {e}"),
        })?;
        let rb = b.build().map_err(|e| Error::BadState {
            path: path.to_path_buf(),
            reason: format!("cannot read the evidence ring: {e}"),
        })?;
        Ok(Some(Self { rb, _map: map, got }))
    }

    /// Every record waiting now, oldest first (never blocks).
    pub fn drain(&mut self) -> Vec<Record> {
        let _ = self.rb.consume();
        self.got
            .lock()
            .map(|mut g| std::mem::take(&mut *g))
            .unwrap_or_default()
    }

    /// Wait up to `timeout` for records, then drain.
    pub fn wait(&mut self, timeout: Duration) -> Vec<Record> {
        let _ = self.rb.poll(timeout);
        self.drain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keeps_only_what_was_captured() {
        let mut r = EvidenceRec {
            id: 7,
            len: 1500,
            caplen: 3,
            ts_ns: 42,
            ..Default::default()
        };
        r.data[..4].copy_from_slice(&[1, 2, 3, 4]);
        let rec = Record::parse(bytemuck::bytes_of(&r)).unwrap();
        assert_eq!((rec.id, rec.len, rec.ts_ns), (7, 1500, 42));
        assert_eq!(rec.data, vec![1, 2, 3]);
        // A caplen beyond the buffer is clamped, a short record refused.
        r.caplen = 10_000;
        assert_eq!(
            Record::parse(bytemuck::bytes_of(&r)).unwrap().data.len(),
            SNAPLEN
        );
        assert!(Record::parse(&[0u8; 8]).is_none());
    }

    #[test]
    fn keys_hold_the_address_in_network_order() {
        let k = key("10.1.2.3/32".parse().unwrap());
        assert_eq!((k.family, k.prefixlen), (4, 64));
        assert_eq!(k.addr[0].to_ne_bytes(), [10, 1, 2, 3]);
        let k = key("2001:db8::1/128".parse().unwrap());
        assert_eq!((k.family, k.prefixlen), (6, 160));
        assert_eq!(k.addr[0].to_ne_bytes(), [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(k.addr[3].to_ne_bytes(), [0, 0, 0, 1]);
    }

    #[test]
    fn v4_bits_spread_victims_cover_prefixes_and_leave_ipv6_out() {
        let k = |s: &str| key(s.parse().unwrap());
        assert_eq!(v4_bits(&k("2001:db8::1/128")), 0);
        let bits: std::collections::HashSet<u32> = (1..=32u8)
            .map(|i| v4_bits(&k(&format!("198.51.100.{i}/32"))))
            .collect();
        assert!(bits.iter().all(|b| b.count_ones() == 1));
        // 32 neighbouring addresses land on many of the 32 bits, not a few.
        assert!(bits.len() >= 16, "{} distinct bits", bits.len());
        // A /28 has the bits of its 16 addresses; a /24 has them all.
        let p28 = (0..16u8).fold(0, |b, i| {
            b | v4_bits(&k(&format!("198.51.100.{}/32", 32 + i)))
        });
        assert_eq!(v4_bits(&k("198.51.100.37/28")), p28);
        assert_eq!(v4_bits(&k("198.51.100.0/24")), u32::MAX);
        // The key holds the network, host bits cleared.
        assert_eq!(
            k("198.51.100.37/28").addr[0].to_ne_bytes(),
            [198, 51, 100, 32]
        );
    }
}
