//! The network analytics apps, each an operator graph over any
//! [`crate::source::PacketSource`]:
//!
//! - [`flowmeter`]: NetFlow/IPFIX-style flow records (session windows per
//!   5-tuple: idle and active timeouts);
//! - [`portscan`]: Threshold Random Walk scanner detection (Jung, Paxson,
//!   Berger, Balakrishnan 2004);
//! - [`synflood`]: incomplete TCP handshakes per destination per window;
//! - [`live`]: what they see now (open connections, latest findings), bounded.
//!
//! All run in [`ExecMode::Deterministic`]: the same input gives the same
//! output whatever the number of source replicas or workers, with batching
//! and chaining on or off (tested).

pub mod config;
pub mod flowmeter;
pub mod live;
pub mod portscan;
pub mod synflood;

use std::net::IpAddr;

use std::time::Duration;

use crate::engine::{ExecMode, Filter, GraphConfig, Map, Pipe, PipeGraph};
use crate::flowid::{set_flow_id, KeyMode};
use crate::offload::Predicate;
use crate::part::FlowPart;
use crate::source::{self, PacketSource};
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

/// An app's input as connection parts: the source's own parts (the tap's
/// XDP aggregation, which already ran the filter), or its tuples through
/// the app's Filter `filter` (unless the source ran it in XDP) and the
/// `part` Map.
///
/// # Errors
/// The engine's refusal of an operator.
pub(crate) fn part_stream<S: PacketSource>(
    g: &PipeGraph,
    src: S,
    filter: Option<(&str, Predicate)>,
    batch: usize,
) -> crate::Result<Pipe<FlowPart>> {
    if src.delivers_parts() {
        return Ok(g.source(source::part_operator(src, batch))?);
    }
    let applied = src.applied();
    let p = src.parallelism();
    let pipe = g.source(source::operator(src, batch))?;
    let pipe = match filter {
        Some((name, pred)) if !applied.has(name) => {
            let f = pred.compile();
            pipe.add(
                Filter::new(name, move |t: &StreamTuple| f.matches(t))
                    .with_parallelism(p)
                    .with_output_batch(batch),
            )?
        }
        _ => pipe,
    };
    Ok(pipe.add(
        Map::new("part", |t: StreamTuple| FlowPart::from_tuple(&t))
            .with_parallelism(p)
            .with_output_batch(batch),
    )?)
}

/// Parts summed over an epoch are exact only if no session gap is shorter
/// than the epoch (no gap can hide inside a part) and every tumbling
/// window is a whole number of epochs (no part straddles a window).
///
/// # Errors
/// [`crate::Error::Invalid`] naming the setting and the epoch.
pub(crate) fn check_epoch<S: PacketSource>(
    src: &S,
    gaps: &[Duration],
    windows: &[Duration],
) -> crate::Result<()> {
    let Some(e) = src.part_epoch() else {
        return Ok(());
    };
    // The tuples tap sums over 10 ms: a way out of a longer aggregation epoch.
    let or = if e > crate::source::tap::TUPLE_EPOCH {
        ", or --offload tuples"
    } else {
        ""
    };
    if let Some(g) = gaps.iter().find(|g| **g < e) {
        return Err(crate::Error::Invalid(format!(
            "a timeout of {g:?} is shorter than the epoch the tap sums each connection's packets over ({e:?}): use a timeout of at least {e:?}{or}"
        )));
    }
    if let Some(w) = windows.iter().find(|w| w.as_nanos() % e.as_nanos() != 0) {
        return Err(crate::Error::Invalid(format!(
            "a window of {w:?} is not a whole number of the epochs the tap sums each connection's packets over ({e:?}): use a multiple of {e:?}{or}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SourceCtx;
    use crate::source::SourceStats;

    /// A source of parts summed over `0` (nothing to read).
    #[derive(Clone)]
    struct Parts(Duration);

    impl PacketSource for Parts {
        fn name(&self) -> String {
            "parts".into()
        }
        fn parallelism(&self) -> usize {
            1
        }
        fn stats(&self) -> std::sync::Arc<SourceStats> {
            std::sync::Arc::default()
        }
        fn run(&mut self, _: &mut SourceCtx<'_, StreamTuple>) -> Result<(), String> {
            Ok(())
        }
        fn part_epoch(&self) -> Option<Duration> {
            Some(self.0)
        }
    }

    #[test]
    fn parts_must_fit_the_apps_gaps_and_windows_and_the_error_says_how() {
        let ms = Duration::from_millis;
        let tuples = Parts(crate::source::tap::TUPLE_EPOCH);
        assert!(check_epoch(&tuples, &[ms(10), ms(3000)], &[ms(20), ms(1000)]).is_ok());
        let e = check_epoch(&tuples, &[ms(5)], &[]).unwrap_err().to_string();
        assert!(e.contains("5ms") && e.contains("at least 10ms"), "{e}");
        assert!(!e.contains("--offload tuples"), "already tuples: {e}");
        let e = check_epoch(&tuples, &[], &[ms(15)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("15ms") && e.contains("multiple of 10ms"), "{e}");
        let aggregate = Parts(ms(3000));
        let e = check_epoch(&aggregate, &[ms(1000)], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 3s, or --offload tuples"), "{e}");
        assert!(check_epoch(&aggregate, &[], &[ms(1500)]).is_err());
    }
}
