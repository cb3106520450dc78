//! pcap and pcapng files, replayed on several replicas.
//!
//! The file is memory-mapped once and shared. Record `i` belongs to replica
//! `i mod n`: every replica walks all record headers (cheap) and parses
//! only its own records (the expensive part), emitting them with `seq = i`,
//! so downstream operators in deterministic mode see the file's order
//! whatever `n` is. Timestamps are made non-decreasing in file order (a
//! record older than the one before it gets the previous timestamp, and is
//! counted as `reordered`), identically on every replica, so watermarks hold.
//! Optional pacing replays at `pace` × the capture's speed.

use std::borrow::Cow;
use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::DataLink;

use super::{PacketSource, SourceStats};
use crate::engine::SourceCtx;
use crate::error::{Error, Result};
use crate::parse::parse_frame;
use crate::tuple::StreamTuple;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pcap,
    PcapNg,
}

/// A capture file as a tuple source.
#[derive(Clone)]
pub struct PcapSource {
    path: Arc<str>,
    data: Arc<memmap2::Mmap>,
    kind: Kind,
    replicas: usize,
    pace: Option<f64>,
    records: u64,
    stats: Arc<SourceStats>,
}

impl std::fmt::Debug for PcapSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapSource")
            .field("path", &self.path)
            .field("replicas", &self.replicas)
            .finish()
    }
}

/// pcapng timestamp units → ns (`if_tsresol`: 10^-k, or 2^-k with the high bit).
fn tsresol_to_ns(raw: u64, tsresol: u8) -> u64 {
    let k = u32::from(tsresol & 0x7f);
    if tsresol & 0x80 != 0 {
        ((u128::from(raw) * 1_000_000_000) >> k.min(127)) as u64
    } else if k <= 9 {
        raw.saturating_mul(10u64.pow(9 - k))
    } else {
        raw / 10u64.pow((k - 9).min(19))
    }
}

/// pcap or pcapng, from the first four bytes.
fn kind_of(data: &[u8]) -> std::result::Result<Kind, String> {
    let Some(magic) = data.first_chunk::<4>() else {
        return Err(format!(
            "{} bytes: too short for a pcap or pcapng file",
            data.len()
        ));
    };
    match u32::from_le_bytes(*magic) {
        0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => Ok(Kind::Pcap),
        0x0a0d_0d0a => Ok(Kind::PcapNg),
        m => Err(format!("not a pcap or pcapng file (magic {m:#010x})")),
    }
}

/// Read a whole capture held in memory the way [`PcapSource`] reads a
/// file: `f(index, ts_ns, frame)` for every record, in file order (`f`
/// returns false to stop). Returns the number of records.
///
/// # Errors
/// What makes the capture unusable (bad header, damaged record, a link
/// type other than Ethernet), in one line.
pub fn read_capture(
    data: &[u8],
    f: impl FnMut(u64, u64, &[u8]) -> bool,
) -> std::result::Result<u64, String> {
    walk(data, kind_of(data)?, f)
}

/// Walk every record: `f(index, ts_ns, frame)`; `f` returns false to stop.
fn walk(
    data: &[u8],
    kind: Kind,
    mut f: impl FnMut(u64, u64, &[u8]) -> bool,
) -> std::result::Result<u64, String> {
    let mut i = 0u64;
    match kind {
        Kind::Pcap => {
            let (mut rem, parser) =
                PcapParser::new(data).map_err(|e| format!("bad pcap header: {e}"))?;
            let dl = parser.header().datalink;
            if dl != DataLink::ETHERNET {
                return Err(format!(
                    "link type {dl:?} is not supported: rampart stream reads Ethernet captures"
                ));
            }
            while !rem.is_empty() {
                let (r, pkt) = parser
                    .next_packet(rem)
                    .map_err(|e| format!("record {i} (byte {}): {e}", data.len() - rem.len()))?;
                rem = r;
                if !f(i, pkt.timestamp.as_nanos() as u64, &pkt.data) {
                    break;
                }
                i += 1;
            }
        }
        Kind::PcapNg => {
            let (mut rem, mut parser) =
                PcapNgParser::new(data).map_err(|e| format!("bad pcapng section header: {e}"))?;
            let mut last_ts = 0u64;
            while !rem.is_empty() {
                let (r, block) = parser.next_block(rem).map_err(|e| {
                    format!(
                        "block after record {i} (byte {}): {e}",
                        data.len() - rem.len()
                    )
                })?;
                rem = r;
                let (ts, frame): (u64, Cow<'_, [u8]>) = match block {
                    Block::EnhancedPacket(p) => {
                        let iface = parser
                            .interfaces()
                            .get(p.interface_id as usize)
                            .ok_or_else(|| {
                                format!(
                                    "record {i} refers to interface {} that is not described",
                                    p.interface_id
                                )
                            })?;
                        if iface.linktype != DataLink::ETHERNET {
                            return Err(format!(
                                "interface {} has link type {:?}: rampart stream reads Ethernet captures",
                                p.interface_id, iface.linktype
                            ));
                        }
                        let res = iface
                            .options
                            .iter()
                            .find_map(|o| match o {
                                pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                                _ => None,
                            })
                            .unwrap_or(6);
                        // pcap-file hands the raw 64-bit timestamp over as nanoseconds.
                        (tsresol_to_ns(p.timestamp.as_nanos() as u64, res), p.data)
                    }
                    Block::SimplePacket(p) => (last_ts, p.data),
                    _ => continue,
                };
                last_ts = ts;
                if !f(i, ts, &frame) {
                    break;
                }
                i += 1;
            }
        }
    }
    Ok(i)
}

impl PcapSource {
    /// Open and check `path` (every record is read once here, so a damaged
    /// file is refused before anything runs).
    ///
    /// # Errors
    /// [`Error::Capture`] for a missing, empty, non-pcap, non-Ethernet or
    /// damaged file; [`Error::Invalid`] for bad `replicas`/`pace`.
    pub fn open(path: &str, replicas: usize, pace: Option<f64>) -> Result<Self> {
        let cap = |msg: String| Error::Capture {
            path: path.to_string(),
            msg,
        };
        if path.is_empty() {
            return Err(Error::Invalid(
                "pcap source needs a file: --source pcap:FILE".into(),
            ));
        }
        if !(1..=64).contains(&replicas) {
            return Err(Error::Invalid(format!(
                "pcap replicas={replicas} out of range: use 1..=64"
            )));
        }
        if let Some(p) = pace {
            if !(p.is_finite() && p > 0.0) {
                return Err(Error::Invalid(format!(
                    "pace={p}: use a speed factor > 0 (1 = real time)"
                )));
            }
        }
        let f = File::open(path).map_err(|e| cap(format!("cannot open: {e}")))?;
        let len = f
            .metadata()
            .map_err(|e| cap(format!("cannot stat: {e}")))?
            .len();
        if len < 24 {
            return Err(cap(format!(
                "{len} bytes: too short for a pcap or pcapng file"
            )));
        }
        // SAFETY: the map is read-only and private to this process; a file
        // truncated under us while mapped would fault, as for any reader of
        // a capture that is still being written (rampart reads finished captures).
        let data =
            unsafe { memmap2::Mmap::map(&f) }.map_err(|e| cap(format!("cannot map: {e}")))?;
        let kind = kind_of(&data).map_err(cap)?;
        let records = walk(&data, kind, |_, _, _| true).map_err(cap)?;
        Ok(Self {
            path: path.into(),
            data: Arc::new(data),
            kind,
            replicas,
            pace,
            records,
            stats: Arc::default(),
        })
    }

    /// Records in the file.
    pub fn records(&self) -> u64 {
        self.records
    }
}

impl PacketSource for PcapSource {
    fn name(&self) -> String {
        "pcap".into()
    }
    fn parallelism(&self) -> usize {
        self.replicas
    }
    fn stats(&self) -> Arc<SourceStats> {
        Arc::clone(&self.stats)
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String> {
        let (me, n) = (ctx.replica() as u64, ctx.parallelism() as u64);
        let stats = Arc::clone(&self.stats);
        let mut max_ts = 0u64;
        let mut first: Option<(u64, Instant)> = None;
        let pace = self.pace;
        let (mut frames, mut tuples, mut seen) = (0u64, 0u64, 0u64);
        walk(&self.data, self.kind, |i, ts, frame| {
            let ts = if ts < max_ts {
                if me == 0 {
                    stats.reordered.fetch_add(1, Ordering::Relaxed);
                }
                max_ts
            } else {
                max_ts = ts;
                ts
            };
            if i % n != me {
                return true;
            }
            seen += 1;
            if seen % 4096 == 0 {
                // Publish counters now and then (one shared cache line per 4096 records).
                stats
                    .frames
                    .fetch_add(std::mem::take(&mut frames), Ordering::Relaxed);
                stats
                    .tuples
                    .fetch_add(std::mem::take(&mut tuples), Ordering::Relaxed);
                if ctx.is_cancelled() {
                    return false;
                }
            }
            if let Some(speed) = pace {
                let (t0, w0) = *first.get_or_insert((ts, Instant::now()));
                let due = w0 + Duration::from_secs_f64((ts - t0) as f64 / 1e9 / speed);
                let now = Instant::now();
                if due > now {
                    // Publish progress before sleeping so windows keep firing.
                    ctx.progress(ts);
                    std::thread::sleep(due - now);
                }
            }
            frames += 1;
            match parse_frame(frame, ts) {
                Ok(t) => {
                    tuples += 1;
                    ctx.emit_seq(ts, i, t);
                }
                Err(s) => stats.count_status(s),
            }
            true
        })?;
        stats.frames.fetch_add(frames, Ordering::Relaxed);
        stats.tuples.fetch_add(tuples, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::tsresol_to_ns;

    #[test]
    fn pcapng_resolutions() {
        assert_eq!(tsresol_to_ns(5, 6), 5_000);
        assert_eq!(tsresol_to_ns(5, 9), 5);
        assert_eq!(tsresol_to_ns(5_000, 12), 5);
        assert_eq!(tsresol_to_ns(1 << 20, 0x80 | 20), 1_000_000_000);
    }
}
