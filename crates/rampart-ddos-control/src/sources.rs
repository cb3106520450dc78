//! Per-source view of an interval: the per-(source, destination) records
//! summed by source.

use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::{FeatureRecord, Interval};

/// One source's counters over one interval (all its destinations summed).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SourceStats {
    /// The source address.
    pub src: IpAddr,
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
    /// TCP SYN without ACK.
    pub syn: u64,
    /// TCP RST.
    pub rst: u64,
    /// IP fragments.
    pub frags: u64,
    /// SYNs not followed by completion, summed per destination:
    /// `max(0, syn − (tcp − syn − rst))` per record.
    pub incomplete_syn: u64,
    /// Destinations it sent to.
    pub dsts: u32,
    /// Packets per second.
    pub pps: f64,
    /// Bits per second.
    pub bps: f64,
}

impl SourceStats {
    fn new(src: IpAddr) -> Self {
        Self {
            src,
            packets: 0,
            bytes: 0,
            tcp: 0,
            udp: 0,
            icmp: 0,
            syn: 0,
            rst: 0,
            frags: 0,
            incomplete_syn: 0,
            dsts: 0,
            pps: 0.0,
            bps: 0.0,
        }
    }

    /// Mean frame size (bytes); 0 without packets.
    pub fn mean_bytes(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.bytes as f64 / self.packets as f64
        }
    }

    /// `part / packets` (0 without packets).
    pub fn share(&self, part: u64) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            part as f64 / self.packets as f64
        }
    }
}

/// Incomplete SYNs of one record: SYNs beyond the non-SYN, non-RST TCP
/// segments that would complete them.
pub fn incomplete_syn(r: &FeatureRecord) -> u64 {
    let syn = u64::from(r.syn);
    let rest = u64::from(r.tcp).saturating_sub(syn + u64::from(r.rst));
    syn.saturating_sub(rest)
}

/// An interval summed by source, sorted by address (deterministic order).
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Interval length used for rates (seconds).
    pub secs: f64,
    /// One entry per source, sorted by address.
    pub list: Vec<SourceStats>,
    /// Total packets.
    pub packets: u64,
    /// Total bytes.
    pub bytes: u64,
}

impl Sources {
    /// Sum the interval's records by source.
    pub fn from_interval(iv: &Interval<'_>) -> Self {
        let secs = iv.secs_or_one();
        let mut idx: HashMap<IpAddr, usize> =
            HashMap::with_capacity_and_hasher(iv.records.len(), Default::default());
        let mut list: Vec<SourceStats> = Vec::new();
        let (mut packets, mut bytes) = (0u64, 0u64);
        for r in iv.records {
            if r.packets == 0 {
                continue;
            }
            let i = *idx.entry(r.src).or_insert_with(|| {
                list.push(SourceStats::new(r.src));
                list.len() - 1
            });
            let s = &mut list[i];
            s.packets += r.packets;
            s.bytes += r.bytes;
            s.tcp += u64::from(r.tcp);
            s.udp += u64::from(r.udp);
            s.icmp += u64::from(r.icmp);
            s.syn += u64::from(r.syn);
            s.rst += u64::from(r.rst);
            s.frags += u64::from(r.frags);
            s.incomplete_syn += incomplete_syn(r);
            s.dsts += 1;
            packets += r.packets;
            bytes += r.bytes;
        }
        for s in &mut list {
            s.pps = s.packets as f64 / secs;
            s.bps = s.bytes as f64 * 8.0 / secs;
        }
        list.sort_by_key(|s| s.src);
        Self {
            secs,
            list,
            packets,
            bytes,
        }
    }

    /// Highest single-source pps (0 when empty).
    pub fn max_pps(&self) -> f64 {
        self.list.iter().map(|s| s.pps).fold(0.0, f64::max)
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// No source?
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// The `q` quantile (0 < q <= 1, nearest rank) of `v`; 0 when empty.
/// Reorders `v`.
pub(crate) fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable_by(rank, f64::total_cmp);
    *x
}
