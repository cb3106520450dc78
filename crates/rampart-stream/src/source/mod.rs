//! Packet sources: each one produces [`StreamTuple`]s for the engine and is
//! pluggable under any app (the apps take `impl PacketSource`).
//!
//! - [`pcap::PcapSource`]: pcap/pcapng files, replayed on several replicas
//!   (record `i` goes to replica `i mod n`; each replica walks the record
//!   headers and parses only its own records), optionally paced in real time;
//! - [`synthetic::SyntheticSource`]: generated tuples (engine benchmarks, demos);
//! - [`afxdp::AfXdpSource`]: whole frames over AF_XDP (one socket per RX
//!   queue, one replica per socket), parsed in userspace — the "no offload"
//!   baseline;
//! - [`xdp_tuple::XdpTupleSource`]: the offloaded Source — `xdp_stream`
//!   turns frames into tuple records (and runs the app's FlowID and Filter)
//!   in XDP and steers each to the replica that owns its key; the replica
//!   only copies records into the engine. It says what it already applied
//!   ([`PacketSource::applied`]), and the apps skip those operators;
//! - [`tap::TapSource`]: the tap on a server's own interface;
//! - [`tee::tee`]: one source split for several apps.

pub mod afxdp;
pub mod aggtable;
pub mod pcap;
pub mod synthetic;
pub mod tap;
pub mod tee;
pub mod xdp_tuple;
pub mod xsk;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::engine::SourceCtx;
use crate::parse::ParseStatus;
use crate::part::FlowPart;
use crate::tuple::StreamTuple;

/// What a source saw, shared by its replicas (readable while it runs).
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Frames/records read.
    pub frames: AtomicU64,
    /// Tuples emitted.
    pub tuples: AtomicU64,
    /// Frames without a tuple, per [`ParseStatus`] (index = status − 1).
    pub no_tuple: [AtomicU64; 4],
    /// Records whose timestamp went backwards (clamped to the previous one).
    pub reordered: AtomicU64,
    /// Frames the kernel dropped before the source saw them (AF_XDP ring full, ...).
    pub dropped: AtomicU64,
    /// Frames an offloaded Filter rejected before they became tuples.
    pub filtered: AtomicU64,
}

impl SourceStats {
    pub(crate) fn count_status(&self, s: ParseStatus) {
        self.no_tuple[s as usize - 1].fetch_add(1, Ordering::Relaxed);
    }
    /// A JSON-friendly snapshot.
    pub fn snapshot(&self) -> SourceReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SourceReport {
            frames: g(&self.frames),
            tuples: g(&self.tuples),
            not_ip: g(&self.no_tuple[0]),
            truncated: g(&self.no_tuple[1]),
            bad_header: g(&self.no_tuple[2]),
            too_deep: g(&self.no_tuple[3]),
            reordered: g(&self.reordered),
            dropped: g(&self.dropped),
            filtered: g(&self.filtered),
        }
    }
}

/// [`SourceStats`] at one point.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SourceReport {
    /// Frames/records read.
    pub frames: u64,
    /// Tuples emitted.
    pub tuples: u64,
    /// Frames that are not IPv4/IPv6.
    pub not_ip: u64,
    /// Frames cut inside a header.
    pub truncated: u64,
    /// Frames with an impossible header field.
    pub bad_header: u64,
    /// Frames with more VLAN tags / IPv6 extension headers than walked.
    pub too_deep: u64,
    /// Records whose timestamp went backwards.
    pub reordered: u64,
    /// Frames dropped before the source saw them.
    pub dropped: u64,
    /// Frames an offloaded Filter rejected.
    pub filtered: u64,
}

/// What the records of a source have been through already: the app
/// operators an offload ran before the source (by name), and how records
/// are spread over the replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Applied {
    /// The app whose operators were offloaded.
    pub app: Option<String>,
    /// Names of those operators (the app skips them).
    pub ops: Vec<String>,
    /// Records are partitioned over the replicas by the FlowID of this
    /// mode (every key of a compatible keyed operator on one replica).
    pub partition: Option<crate::flowid::KeyMode>,
}

impl Applied {
    /// Was operator `op` applied?
    pub fn has(&self, op: &str) -> bool {
        self.ops.iter().any(|o| o == op)
    }

    /// Check that this was planned for `app` (an offload configured for
    /// another app would silently drop what this one needs).
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] naming both apps.
    pub fn check_app(&self, app: &str) -> crate::Result<()> {
        match &self.app {
            Some(a) if a != app => Err(crate::Error::Invalid(format!(
                "the source's offload was planned for {a}, not {app}: plan it for {app}"
            ))),
            _ => Ok(()),
        }
    }
}

/// A source of packet tuples that any app can run on.
pub trait PacketSource: Clone + Send + 'static {
    /// Name of the source operator.
    fn name(&self) -> String;
    /// Replicas (files are split by record, AF_XDP by RX queue).
    fn parallelism(&self) -> usize;
    /// Counters, shared by all replicas.
    fn stats(&self) -> Arc<SourceStats>;
    /// Operators already applied before the records reach the source
    /// (an offload); nothing for a plain source.
    fn applied(&self) -> Applied {
        Applied::default()
    }
    /// Replica `ctx.replica()`: emit tuples until the input ends or
    /// `ctx.is_cancelled()`. Emitted in non-decreasing timestamp order, with
    /// a global sequence number when the input has one.
    ///
    /// # Errors
    /// A message saying what failed (the graph reports it with the replica).
    fn run(&mut self, ctx: &mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String>;
    /// Does the source deliver connection parts (an XDP aggregation)
    /// rather than tuples? Then the app runs [`Self::run_parts`].
    fn delivers_parts(&self) -> bool {
        false
    }
    /// With parts: the epoch they are summed over (a part's packets all
    /// lie in one epoch `[e·epoch, (e+1)·epoch)` of event time).
    fn part_epoch(&self) -> Option<std::time::Duration> {
        None
    }
    /// Replica `ctx.replica()`: emit connection parts in non-decreasing
    /// order of their first packet until the input ends or
    /// `ctx.is_cancelled()`.
    ///
    /// # Errors
    /// A source that delivers tuples says so.
    fn run_parts(&mut self, _ctx: &mut SourceCtx<'_, FlowPart>) -> std::result::Result<(), String> {
        Err(format!(
            "{} delivers tuples, not connection parts",
            self.name()
        ))
    }
}

/// The engine operator for a [`PacketSource`] that delivers connection parts.
pub fn part_operator<S: PacketSource>(
    src: S,
    batch: usize,
) -> crate::engine::Source<
    FlowPart,
    impl FnMut(&mut SourceCtx<'_, FlowPart>) -> std::result::Result<(), String> + Clone + Send + 'static,
> {
    let name = src.name();
    let p = src.parallelism();
    let mut s = src;
    crate::engine::Source::new(&name, move |ctx: &mut SourceCtx<'_, FlowPart>| {
        s.run_parts(ctx)
    })
    .with_parallelism(p)
    .with_output_batch(batch)
}

/// The engine operator for a [`PacketSource`].
pub fn operator<S: PacketSource>(
    src: S,
    batch: usize,
) -> crate::engine::Source<
    StreamTuple,
    impl FnMut(&mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String>
        + Clone
        + Send
        + 'static,
> {
    let name = src.name();
    let p = src.parallelism();
    let mut s = src;
    crate::engine::Source::new(&name, move |ctx: &mut SourceCtx<'_, StreamTuple>| {
        s.run(ctx)
    })
    .with_parallelism(p)
    .with_output_batch(batch)
}

/// Parse `spec` into a source: `pcap:PATH[,replicas=N][,pace=SPEED]`,
/// `synthetic:flows=N,tuples=M[,replicas=R][,seed=S]`,
/// `afxdp:[NETNS/]IFACE[,queues=Q][,seconds=S][,packets=P]`.
///
/// # Errors
/// [`crate::Error::Invalid`] saying what is wrong and what is accepted.
pub fn parse_spec(spec: &str) -> crate::Result<AnySource> {
    let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let mut parts = rest.split(',').filter(|s| !s.is_empty());
    let head = parts.next().unwrap_or("");
    let kv: Vec<(&str, &str)> = parts
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    let num = |k: &str, v: &str| -> crate::Result<f64> {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| {
                crate::Error::Invalid(format!("--source {spec}: {k}={v:?} is not a number"))
            })
    };
    match kind {
        "pcap" => {
            let mut replicas = 1usize;
            let mut pace = None;
            for (k, v) in kv {
                match k {
                    "replicas" => replicas = num(k, v)? as usize,
                    "pace" => pace = Some(num(k, v)?),
                    _ => return Err(crate::Error::Invalid(format!("--source {spec}: unknown option {k:?} (pcap takes replicas=N, pace=SPEED)"))),
                }
            }
            Ok(AnySource::Pcap(pcap::PcapSource::open(head, replicas, pace)?))
        }
        "synthetic" => {
            let mut s = synthetic::SyntheticConfig::default();
            for (k, v) in std::iter::once(head.split_once('=').unwrap_or((head, ""))).filter(|(k, _)| !k.is_empty()).chain(kv) {
                match k {
                    "flows" => s.flows = num(k, v)? as u32,
                    "tuples" => s.tuples = num(k, v)? as u64,
                    "replicas" => s.replicas = num(k, v)? as usize,
                    "seed" => s.seed = num(k, v)? as u64,
                    _ => return Err(crate::Error::Invalid(format!("--source {spec}: unknown option {k:?} (synthetic takes flows=N, tuples=M, replicas=R, seed=S)"))),
                }
            }
            Ok(AnySource::Synthetic(synthetic::SyntheticSource::new(s)?))
        }
        "afxdp" => Ok(AnySource::AfXdp(afxdp::AfXdpSource::open(parse_afxdp(spec)?)?)),
        _ => Err(crate::Error::Invalid(format!(
            "--source {spec}: unknown source kind {kind:?}: use pcap:FILE, synthetic:flows=N,tuples=M or afxdp:[NETNS/]IFACE"
        ))),
    }
}

/// The settings of an `afxdp:[NETNS/]IFACE[,queues=Q][,seconds=S][,packets=P]`
/// spec, without opening anything (the offload builds its own source from them).
///
/// # Errors
/// [`crate::Error::Invalid`] saying what is wrong and what is accepted.
pub fn parse_afxdp(spec: &str) -> crate::Result<afxdp::AfXdpConfig> {
    let rest = spec.strip_prefix("afxdp:").ok_or_else(|| {
        crate::Error::Invalid(format!(
            "--source {spec}: the offload receives over AF_XDP: use --source afxdp:[NETNS/]IFACE"
        ))
    })?;
    let mut parts = rest.split(',').filter(|s| !s.is_empty());
    let head = parts.next().unwrap_or("");
    let (ns, iface) = match head.split_once('/') {
        Some((n, i)) => (Some(n.to_string()), i.to_string()),
        None => (None, head.to_string()),
    };
    let mut c = afxdp::AfXdpConfig {
        netns: ns,
        iface,
        ..afxdp::AfXdpConfig::default()
    };
    for p in parts {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        let x = v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| {
                crate::Error::Invalid(format!("--source {spec}: {k}={v:?} is not a number"))
            })?;
        match k {
            "queues" => c.queues = x as u32,
            "seconds" => c.seconds = Some(x),
            "packets" => c.packets = Some(x as u64),
            _ => {
                return Err(crate::Error::Invalid(format!(
                    "--source {spec}: unknown option {k:?} (afxdp takes queues=Q, seconds=S, packets=P)"
                )))
            }
        }
    }
    Ok(c)
}

/// Any of this crate's sources (what the CLI builds from `--source`).
#[derive(Clone)]
pub enum AnySource {
    /// A capture file.
    Pcap(pcap::PcapSource),
    /// Generated tuples.
    Synthetic(synthetic::SyntheticSource),
    /// AF_XDP sockets.
    AfXdp(afxdp::AfXdpSource),
    /// Tuple records from the XDP offload over AF_XDP.
    XdpTuple(xdp_tuple::XdpTupleSource),
    /// The tap on a server's interface: tuples or connection parts.
    Tap(tap::TapSource),
}

impl std::fmt::Debug for AnySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl PacketSource for AnySource {
    fn name(&self) -> String {
        match self {
            Self::Pcap(s) => s.name(),
            Self::Synthetic(s) => s.name(),
            Self::AfXdp(s) => s.name(),
            Self::XdpTuple(s) => s.name(),
            Self::Tap(s) => s.name(),
        }
    }
    fn parallelism(&self) -> usize {
        match self {
            Self::Pcap(s) => s.parallelism(),
            Self::Synthetic(s) => s.parallelism(),
            Self::AfXdp(s) => s.parallelism(),
            Self::XdpTuple(s) => s.parallelism(),
            Self::Tap(s) => s.parallelism(),
        }
    }
    fn stats(&self) -> Arc<SourceStats> {
        match self {
            Self::Pcap(s) => s.stats(),
            Self::Synthetic(s) => s.stats(),
            Self::AfXdp(s) => s.stats(),
            Self::XdpTuple(s) => s.stats(),
            Self::Tap(s) => s.stats(),
        }
    }
    fn applied(&self) -> Applied {
        match self {
            Self::XdpTuple(s) => s.applied(),
            Self::Tap(s) => s.applied(),
            _ => Applied::default(),
        }
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String> {
        match self {
            Self::Pcap(s) => s.run(ctx),
            Self::Synthetic(s) => s.run(ctx),
            Self::AfXdp(s) => s.run(ctx),
            Self::XdpTuple(s) => s.run(ctx),
            Self::Tap(s) => s.run(ctx),
        }
    }
    fn delivers_parts(&self) -> bool {
        matches!(self, Self::Tap(s) if s.delivers_parts())
    }
    fn part_epoch(&self) -> Option<std::time::Duration> {
        match self {
            Self::Tap(s) => s.part_epoch(),
            _ => None,
        }
    }
    fn run_parts(&mut self, ctx: &mut SourceCtx<'_, FlowPart>) -> std::result::Result<(), String> {
        match self {
            Self::Tap(s) => s.run_parts(ctx),
            o => Err(format!(
                "{} delivers tuples, not connection parts",
                o.name()
            )),
        }
    }
}
