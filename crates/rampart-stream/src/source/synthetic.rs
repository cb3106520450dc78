//! Generated tuples: `flows` flows (60% TCP, 30% UDP, 10% ICMP by flow),
//! picked uniformly at random, `tuples` in total split over the replicas,
//! event time advancing 1 µs per tuple from a fixed epoch. Deterministic
//! for a given seed (tuple `i` is the same whatever the parallelism).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{PacketSource, SourceStats};
use crate::engine::SourceCtx;
use crate::error::{Error, Result};
use crate::tuple::{proto, tcp, StreamTuple, TupleExt};

/// Settings of a [`SyntheticSource`].
#[derive(Debug, Clone)]
pub struct SyntheticConfig {
    /// Distinct flows (1..=2^24).
    pub flows: u32,
    /// Tuples in total.
    pub tuples: u64,
    /// Replicas.
    pub replicas: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            flows: 65_536,
            tuples: 1_000_000,
            replicas: 1,
            seed: 1,
        }
    }
}

/// Event time of tuple 0 (2024-01-01T00:00:00Z), so exported records look real.
pub const EPOCH_NS: u64 = 1_704_067_200_000_000_000;

/// A generated tuple source.
#[derive(Debug, Clone)]
pub struct SyntheticSource {
    cfg: SyntheticConfig,
    flows: Arc<Vec<StreamTuple>>,
    stats: Arc<SourceStats>,
}

#[inline]
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl SyntheticSource {
    /// Build the flow table.
    ///
    /// # Errors
    /// Out-of-range settings.
    pub fn new(cfg: SyntheticConfig) -> Result<Self> {
        if cfg.flows == 0 || cfg.flows > 1 << 24 {
            return Err(Error::Invalid(format!(
                "synthetic flows={} out of range: use 1..=16777216",
                cfg.flows
            )));
        }
        if !(1..=64).contains(&cfg.replicas) {
            return Err(Error::Invalid(format!(
                "synthetic replicas={} out of range: use 1..=64",
                cfg.replicas
            )));
        }
        let flows = (0..cfg.flows)
            .map(|i| {
                let r = splitmix(cfg.seed ^ u64::from(i));
                let p = match i % 10 {
                    0..=5 => proto::TCP,
                    6..=8 => proto::UDP,
                    _ => proto::ICMP,
                };
                let src = IpAddr::V4(Ipv4Addr::from(0xac10_0000 | (i & 0xf_ffff)));
                let dst = IpAddr::V4(Ipv4Addr::from(0x0a0a_0002 + (i >> 20)));
                let (sp, dp) = if p == proto::ICMP {
                    (0, 0x0800)
                } else {
                    (1024 + (r as u16) % 60000, 80 + (r >> 16) as u16 % 100)
                };
                StreamTuple::new_l4(
                    0,
                    src,
                    dst,
                    p,
                    sp,
                    dp,
                    if p == proto::TCP { tcp::ACK } else { 0 },
                    64 + (r >> 32) as u16 % 1400,
                )
            })
            .collect();
        Ok(Self {
            cfg,
            flows: Arc::new(flows),
            stats: Arc::default(),
        })
    }

    /// Tuple number `i` (what every replica agrees on).
    #[inline]
    pub fn tuple(&self, i: u64) -> StreamTuple {
        let r = splitmix(self.cfg.seed.rotate_left(17) ^ i);
        let n = self.flows.len() as u64;
        let mut t = self.flows[(((r >> 32) * n) >> 32) as usize];
        t.ts_ns = EPOCH_NS + i * 1000;
        t
    }
}

impl PacketSource for SyntheticSource {
    fn name(&self) -> String {
        "synthetic".into()
    }
    fn parallelism(&self) -> usize {
        self.cfg.replicas
    }
    fn stats(&self) -> Arc<SourceStats> {
        Arc::clone(&self.stats)
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String> {
        let (me, n) = (ctx.replica() as u64, ctx.parallelism() as u64);
        let mut i = me;
        let mut k = 0u64;
        while i < self.cfg.tuples {
            let t = self.tuple(i);
            ctx.emit_seq(t.ts_ns, i, t);
            i += n;
            k += 1;
            if k.is_multiple_of(65_536) && ctx.is_cancelled() {
                break;
            }
        }
        self.stats.frames.fetch_add(k, Ordering::Relaxed);
        self.stats.tuples.fetch_add(k, Ordering::Relaxed);
        Ok(())
    }
}
