//! The network analytics apps, each an operator graph over any
//! [`crate::source::PacketSource`]:
//!
//! - [`flowmeter`]: NetFlow/IPFIX-style flow records (session windows per
//!   5-tuple: idle and active timeouts);
//! - [`portscan`]: Threshold Random Walk scanner detection (Jung, Paxson,
//!   Berger, Balakrishnan 2004);
//! - [`synflood`]: incomplete TCP handshakes per destination per window.
//!
//! All run in [`ExecMode::Deterministic`]: the same input gives the same
//! output whatever the number of source replicas or workers, with batching
//! and chaining on or off (tested).

pub mod flowmeter;
pub mod portscan;
pub mod synflood;

use std::net::IpAddr;

use crate::engine::{ExecMode, GraphConfig, Map, PipeGraph};
use crate::flowid::{set_flow_id, KeyMode};
use crate::tuple::{StreamTuple, TupleExt};

/// Engine settings every app takes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineOpts {
    /// Replicas of the keyed operators.
    pub workers: usize,
    /// Output batch (1 = off).
    pub batch: usize,
    /// Operator chaining.
    pub chaining: bool,
}

impl Default for EngineOpts {
    fn default() -> Self {
        Self {
            workers: 1,
            batch: 64,
            chaining: true,
        }
    }
}

impl EngineOpts {
    /// The graph for app `name`.
    ///
    /// # Errors
    /// Invalid settings.
    pub fn graph(&self, name: &str) -> crate::Result<PipeGraph> {
        Ok(PipeGraph::new(GraphConfig {
            name: name.into(),
            mode: ExecMode::Deterministic,
            chaining: self.chaining,
            ..GraphConfig::default()
        })?)
    }
}

/// An IPv4 or IPv6 address as the tuple carries it (hashable, compact).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Addr {
    /// Words in network order (IPv4 in `[0]`).
    pub w: [u32; 4],
    /// IPv6?
    pub v6: bool,
}

impl Addr {
    /// Source address of `t`.
    pub fn src(t: &StreamTuple) -> Self {
        Self {
            w: t.saddr,
            v6: t.is_ipv6(),
        }
    }
    /// Destination address of `t`.
    pub fn dst(t: &StreamTuple) -> Self {
        Self {
            w: t.daddr,
            v6: t.is_ipv6(),
        }
    }
    /// As a std address.
    pub fn ip(&self) -> IpAddr {
        let t = StreamTuple {
            saddr: self.w,
            flags: if self.v6 { crate::tuple::ST_F_IPV6 } else { 0 },
            ..Default::default()
        };
        t.src_ip()
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.ip().fmt(f)
    }
}

/// The FlowID operator: computes `flow_id` in `mode` unless the source
/// already did (an XDP tuple source), so offloading it changes
/// nothing downstream.
pub fn flow_id_map(
    mode: KeyMode,
    parallelism: usize,
    batch: usize,
) -> Map<StreamTuple, StreamTuple, impl FnMut(StreamTuple) -> StreamTuple + Clone + Send + 'static>
{
    Map::new("flowid", move |mut t: StreamTuple| {
        if t.key_mode() != mode as u8 {
            set_flow_id(&mut t, mode);
        }
        t
    })
    .with_parallelism(parallelism)
    .with_output_batch(batch)
}
