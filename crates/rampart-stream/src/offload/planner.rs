//! The offload planner: from an app's operator graph and a target profile,
//! which leading operators run in XDP, how records are steered to the
//! source replicas, and whether the key-by after them becomes free.
//!
//! Rules:
//! - the Source (frame → tuple) always goes down;
//! - then, in order, every operator the target can run: a FlowID (a
//!   supported key mode) or a Filter whose predicate fits the program's
//!   maps; the first other operator (a Map changing the record type, a
//!   keyed operator, a sink) stops the offloaded prefix;
//! - steering key: the offloaded FlowID's mode; without one, the mode the
//!   first keyed operator declares compatible with its key (its FlowID
//!   classes refine the key), so the NIC routes by key; without either,
//!   a direction-independent FlowID only spreads load — and with a single
//!   replica there is nothing to steer, so no FlowID is computed;
//! - the key-by of the first keyed operator is free (records handed over
//!   one-to-one, chainable) when it is compatible with the steering mode,
//!   has as many replicas as the source, and only same-parallelism
//!   stateless operators stand between;
//! - the target profile is checked against the built object (instruction
//!   count, stack, map types and entry sizes, helpers, kfuncs, context
//!   stores); any violation refuses the plan, with the reason.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::config::{Action, OffloadConfig, Timestamps};
use super::objcheck::{self, ObjectReport};
use super::predicate::Predicate;
use crate::flowid::KeyMode;
use rampart_bpf::abi::stream::{ST_OFF_CLAUSES, ST_OFF_RANGES, ST_OFF_XSKS};

/// What kind of operator, as far as offloading is concerned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OpKind {
    /// Frame → tuple.
    Source,
    /// FlowID on the tuple (stateless, tuple → tuple).
    FlowId {
        /// Key mode.
        mode: KeyMode,
    },
    /// A Filter on tuples with an offloadable predicate.
    Filter {
        /// The predicate.
        predicate: Predicate,
    },
    /// A stateless operator that XDP cannot run (changes the record type,
    /// or arbitrary code).
    Stateless,
    /// Map: tuple → connection part. Alone it is stateless; the tap can
    /// run it in XDP as a keyed aggregation (per-connection counters per
    /// epoch), which the next keyed operator merges.
    Part,
    /// A keyed (stateful) operator: records are routed by key to it.
    Keyed {
        /// What the key is.
        key: String,
        /// The FlowID mode whose classes refine the key (steering by it
        /// keeps every key on one replica), if any.
        partition: Option<KeyMode>,
        /// Why no FlowID mode partitions the key, when none does.
        note: Option<String>,
        /// Replicas.
        parallelism: usize,
    },
    /// The sink.
    Sink,
}

/// One operator of an app's graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpDesc {
    /// Operator name (as in the built pipeline; the source's name depends
    /// on the source and is `source` here).
    pub name: String,
    /// What it is.
    #[serde(flatten)]
    pub kind: OpKind,
    /// One line for humans.
    pub what: String,
}

impl OpDesc {
    /// Build one.
    pub fn new(name: &str, kind: OpKind, what: &str) -> Self {
        Self {
            name: name.into(),
            kind,
            what: what.into(),
        }
    }
}

/// An app's operator graph (a linear pipe), as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppGraph {
    /// App name.
    pub app: String,
    /// Operators, source first.
    pub ops: Vec<OpDesc>,
    /// The longest XDP aggregation epoch the app tolerates: a part reaches
    /// it up to an epoch after its first packet, and no session gap or
    /// window of the app may split an epoch. Longer epochs mean fewer parts
    /// for userspace to merge (one per connection and epoch).
    #[serde(serialize_with = "secs")]
    pub epoch: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// Offload targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// XDP in the host driver.
    HostXdp,
    /// Netronome nfp SmartNIC (XDP hardware offload): EMULATED profile,
    /// checked statically against the built object; no nfp here.
    Nfp,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::HostXdp => "host-xdp",
            Self::Nfp => "nfp",
        })
    }
}

impl std::str::FromStr for Target {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "host-xdp" => Ok(Self::HostXdp),
            "nfp" => Ok(Self::Nfp),
            o => Err(crate::Error::Invalid(format!(
                "unknown offload target {o:?}: use host-xdp or nfp"
            ))),
        }
    }
}

/// A target's limits.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// Target.
    pub target: Target,
    /// Entry point of `xdp_stream` the target runs.
    pub program: &'static str,
    /// How records reach the replica that owns the key.
    pub delivery: &'static str,
    /// Where record timestamps come from.
    pub timestamps: &'static str,
    /// Most BPF instructions.
    pub max_insns: usize,
    /// Most stack bytes.
    pub max_stack: usize,
    /// Map types allowed (`None`: any).
    pub map_types: Option<&'static [u32]>,
    /// Largest key and value, bytes.
    pub max_entry_bytes: u32,
    /// Helpers allowed (`None`: any the kernel offers XDP).
    pub helpers: Option<&'static [u32]>,
    /// kfuncs allowed.
    pub kfuncs: bool,
    /// `struct xdp_md` fields the program may write (offsets).
    pub ctx_stores: &'static [u32],
    /// Most source replicas (sockets per RX queue / RX queues).
    pub max_replicas: u32,
}

/// XDP in the host driver: the kernel's own limits.
pub const HOST_XDP: Profile = Profile {
    target: Target::HostXdp,
    program: "xdp_stream",
    delivery: "bpf_redirect_map through an XSKMAP to the owner's AF_XDP socket on the frame's RX queue (the queue's sockets share its UMEM)",
    timestamps: "driver RX timestamp (device-bound entry xdp_stream_rxmeta) when the driver has one, else bpf_ktime_get_ns; flagged ST_F_TS_HW",
    max_insns: 1_000_000,
    max_stack: 512,
    map_types: None,
    max_entry_bytes: u32::MAX,
    helpers: None,
    kfuncs: true,
    ctx_stores: &[],
    max_replicas: ST_OFF_XSKS,
};

/// nfp map types: hash (1) and array (2).
const NFP_MAPS: &[u32] = &[1, 2];
/// nfp helpers (drivers/net/ethernet/netronome/nfp/bpf/verifier.c):
/// map lookup/update/delete, get_prandom_u32, perf_event_output,
/// xdp_adjust_head, xdp_adjust_tail.
const NFP_HELPERS: &[u32] = &[1, 2, 3, 7, 25, 44, 65];

/// Netronome nfp: ~8K instructions, one program, no per-CPU
/// maps, ≤ 64-byte map entries, no clock helper, queue selection by
/// writing `rx_queue_index` (offset 16).
pub const NFP: Profile = Profile {
    target: Target::Nfp,
    program: "xdp_stream_nfp",
    delivery: "RX queue select (ctx->rx_queue_index = owner, XDP_PASS); on the host xdp_stream_rx hands queue q to replica q's AF_XDP socket",
    timestamps: "none on the NIC (no bpf_ktime_get_ns): ts_ns 0, stamped by the host on receive",
    max_insns: 8192,
    max_stack: 512,
    map_types: Some(NFP_MAPS),
    max_entry_bytes: 64,
    helpers: Some(NFP_HELPERS),
    kfuncs: false,
    ctx_stores: &[16],
    max_replicas: 64,
};

impl Target {
    /// The profile.
    pub fn profile(self) -> &'static Profile {
        match self {
            Self::HostXdp => &HOST_XDP,
            Self::Nfp => &NFP,
        }
    }
}

impl Profile {
    /// Every way `r` breaks this profile (empty: it fits).
    pub fn violations(&self, r: &ObjectReport) -> Vec<String> {
        let mut v = Vec::new();
        if r.insns > self.max_insns {
            v.push(format!(
                "{} has {} instructions, the limit is {}",
                r.program, r.insns, self.max_insns
            ));
        }
        if r.stack_bytes > self.max_stack {
            v.push(format!(
                "{} uses {} stack bytes, the limit is {}",
                r.program, r.stack_bytes, self.max_stack
            ));
        }
        for m in &r.maps {
            if let Some(ok) = self.map_types {
                if !ok.contains(&m.map_type) {
                    v.push(format!(
                        "map {} is a {} map, which {} does not support",
                        m.name, m.type_name, self.target
                    ));
                }
            }
            if m.key_size > self.max_entry_bytes || m.value_size > self.max_entry_bytes {
                v.push(format!(
                    "map {} has {}-byte keys and {}-byte values, the limit is {} bytes",
                    m.name, m.key_size, m.value_size, self.max_entry_bytes
                ));
            }
        }
        if let Some(ok) = self.helpers {
            for h in &r.helpers {
                if !ok.contains(&h.id) {
                    v.push(format!(
                        "{} calls {} (helper {}), not available on {}",
                        r.program, h.name, h.id, self.target
                    ));
                }
            }
        }
        if !self.kfuncs {
            for k in &r.kfuncs {
                v.push(format!(
                    "{} calls the kfunc {k}, not available on {}",
                    r.program, self.target
                ));
            }
        }
        for s in &r.ctx_stores {
            if !self.ctx_stores.contains(s) {
                v.push(format!(
                    "{} writes the context at offset {s}, which {} does not allow",
                    r.program, self.target
                ));
            }
        }
        v
    }
}

/// Where one operator runs.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    /// Operator name.
    pub name: String,
    /// `xdp` or `userspace`.
    pub tier: &'static str,
    /// What it does there and why.
    pub note: String,
}

/// A complete plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// App.
    pub app: String,
    /// Target.
    pub target: Target,
    /// Source replicas.
    pub sources: u32,
    /// Every operator, in order, with its tier.
    pub placement: Vec<Placement>,
    /// Names of the operators offloaded (the source included).
    pub offloaded: Vec<String>,
    /// FlowID mode computed in XDP (also the steering key).
    pub key_mode: Option<KeyMode>,
    /// The first keyed operator receives records one-to-one (no key-by).
    pub key_by_free: bool,
    /// Why (not).
    pub key_by_note: String,
    /// What `xdp_stream` is configured with.
    pub config: OffloadConfig,
    /// The aggregation epoch when the keyed aggregation runs in XDP
    /// (seconds in JSON).
    #[serde(serialize_with = "opt_secs", rename = "epoch_s")]
    pub epoch: Option<Duration>,
    /// The target's limits.
    pub profile: Profile,
    /// The built object's program for this target, as checked.
    pub object: ObjectReport,
}

/// Why there is no plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The target cannot run the program as built.
    #[error("{target} cannot run the offload: {}", reasons.join("; "))]
    Target {
        /// Target.
        target: Target,
        /// Every violation.
        reasons: Vec<String>,
    },
    /// The request cannot be met.
    #[error("{0}")]
    Invalid(String),
    /// The object could not be read.
    #[error(transparent)]
    Object(#[from] crate::Error),
}

/// Plan `graph` on `target` with `sources` source replicas, checking the
/// object at `object` (normally [`rampart_bpf::XDP_STREAM_OBJ`]).
///
/// # Errors
/// [`PlanError`]: the object breaks the profile, too many replicas, a
/// graph that does not start with a source.
pub fn plan(
    graph: &AppGraph,
    target: Target,
    sources: u32,
    object: &Path,
) -> Result<Plan, PlanError> {
    let profile = target.profile().clone();
    if sources == 0 || sources > profile.max_replicas {
        return Err(PlanError::Invalid(format!(
            "{sources} source replicas on {target}: use 1..={}",
            profile.max_replicas
        )));
    }
    if graph.ops.first().map(|o| &o.kind) != Some(&OpKind::Source) {
        return Err(PlanError::Invalid(format!(
            "app {}: the graph does not start with a source, nothing to offload",
            graph.app
        )));
    }
    let report = objcheck::inspect(object, profile.program)?;
    let reasons = profile.violations(&report);
    if !reasons.is_empty() {
        return Err(PlanError::Target { target, reasons });
    }

    let mut prefix = offload_prefix(graph);
    let rest = &graph.ops[prefix.len..];
    let keyed = first_keyed(rest);
    // Steering mode: several replicas need a FlowID to steer by.
    let partition = keyed.as_ref().and_then(|k| k.partition);
    if prefix.key_mode.is_none() && sources > 1 {
        let mode = partition.unwrap_or(KeyMode::Bidir);
        prefix.key_mode = Some(mode);
        if let Some(p) = prefix.placement.first_mut() {
            p.note.push_str(&format!(
                "; FlowID ({mode}) computed to steer records to {sources} replicas"
            ));
        }
    }
    let (key_by_free, key_by_note) = match &keyed {
        None => (false, "no keyed operator".to_string()),
        Some(k) => key_by(k, prefix.key_mode, sources),
    };
    let mut placement = prefix.placement;
    for op in rest {
        let note = match (&op.kind, keyed.as_ref()) {
            (OpKind::Keyed { key, .. }, Some(k)) if k.op.name == op.name => {
                format!("keyed by {key}; {key_by_note}")
            }
            (OpKind::Keyed { key, .. }, _) => format!("keyed by {key}"),
            _ => op.what.clone(),
        };
        placement.push(Placement {
            name: op.name.clone(),
            tier: "userspace",
            note,
        });
    }
    let config = OffloadConfig {
        key_mode: prefix.key_mode,
        filter: prefix.filter,
        on_filtered: Action::Drop,
        on_malformed: Action::Drop,
        timestamps: match target {
            Target::HostXdp => Timestamps::RxMeta,
            Target::Nfp => Timestamps::None,
        },
        replicas: sources,
    };
    Ok(Plan {
        app: graph.app.clone(),
        target,
        sources,
        placement,
        offloaded: prefix.offloaded,
        key_mode: prefix.key_mode,
        key_by_free,
        key_by_note,
        config,
        epoch: None,
        profile,
        object: report,
    })
}

/// The operators the program takes over, from the source on.
struct OffloadedPrefix {
    /// Their placement (and that of a filter that did not fit, in userspace).
    placement: Vec<Placement>,
    /// Names of the offloaded operators.
    offloaded: Vec<String>,
    /// The FlowID mode an offloaded FlowID operator computes.
    key_mode: Option<KeyMode>,
    /// The offloaded filter.
    filter: Option<Predicate>,
    /// Operators placed so far (the rest start here).
    len: usize,
}

/// Walk the graph from the source while the program can do the operator's
/// work: the source, one FlowID, one filter that fits the program's clause
/// and range tables.
fn offload_prefix(graph: &AppGraph) -> OffloadedPrefix {
    let mut p = OffloadedPrefix {
        placement: Vec::new(),
        offloaded: Vec::new(),
        key_mode: None,
        filter: None,
        len: 0,
    };
    for op in &graph.ops {
        let note = match &op.kind {
            OpKind::Source => {
                "parse the frame into the 56-byte tuple; the frame becomes the record".to_string()
            }
            OpKind::FlowId { mode } if p.key_mode.is_none() => {
                p.key_mode = Some(*mode);
                format!("FlowID = jhash of the {mode} key")
            }
            OpKind::Filter { predicate } if p.filter.is_none() => {
                if let Err(why) = predicate.fits(ST_OFF_CLAUSES, ST_OFF_RANGES) {
                    p.placement.push(Placement {
                        name: op.name.clone(),
                        tier: "userspace",
                        note: format!("{predicate}: stays in userspace ({why})"),
                    });
                    p.len += 1;
                    break;
                }
                p.filter = Some(predicate.clone());
                format!("filter: {predicate}; rejected frames dropped in XDP")
            }
            _ => break,
        };
        p.placement.push(Placement {
            name: op.name.clone(),
            tier: "xdp",
            note,
        });
        p.offloaded.push(op.name.clone());
        p.len += 1;
    }
    p
}

/// The first keyed operator after the offloaded prefix.
struct Keyed<'a> {
    op: &'a OpDesc,
    /// The FlowID mode that partitions its key, if one does.
    partition: Option<KeyMode>,
    /// Why none does.
    note: Option<String>,
    parallelism: usize,
}

/// The first keyed operator in `ops` before the sink. (The apps run every
/// operator before it with the source's parallelism.)
fn first_keyed(ops: &[OpDesc]) -> Option<Keyed<'_>> {
    for op in ops {
        match &op.kind {
            OpKind::Keyed {
                partition,
                note,
                parallelism,
                ..
            } => {
                return Some(Keyed {
                    op,
                    partition: *partition,
                    note: note.clone(),
                    parallelism: *parallelism,
                })
            }
            OpKind::Sink => return None,
            _ => {}
        }
    }
    None
}

/// Whether the keyed operator can take records one-to-one from the source
/// replicas (its key-by handed to the NIC's steering), and why (not).
fn key_by(k: &Keyed<'_>, key_mode: Option<KeyMode>, sources: u32) -> (bool, String) {
    let (name, part, par) = (&k.op.name, k.partition, k.parallelism);
    if sources == 1 && par == 1 {
        return (
            true,
            format!("{name}: one source replica and one worker: one-to-one anyway"),
        );
    }
    if part.is_none() {
        let why = k
            .note
            .clone()
            .unwrap_or_else(|| "no FlowID mode partitions its key".into());
        return (false, format!("{name}: key-by stays in userspace: {why}"));
    }
    if part != key_mode {
        return (
            false,
            format!(
                "{name}: key-by stays: its key needs {} steering, records are steered by {}",
                part.map_or("no".into(), |m| m.to_string()),
                key_mode.map_or("nothing".into(), |m| m.to_string())
            ),
        );
    }
    if par != sources as usize {
        return (
            false,
            format!(
                "{name}: key-by stays: {par} workers for {sources} source replicas (make them equal to hand records over one-to-one)"
            ),
        );
    }
    (
        true,
        format!(
            "{name}: the NIC steers by the {} FlowID, which refines its key: records go one-to-one to its {par} replicas (chained)",
            part.unwrap_or(KeyMode::FiveTuple)
        ),
    )
}

/// The tap on a server's interface (host XDP): the kernel's own limits;
/// records leave by ring buffers or a table read in place, never by taking the frame.
pub const TAP: Profile = Profile {
    target: Target::HostXdp,
    program: "xdp_stream_tap",
    delivery: "tuples: a BPF ring buffer per CPU, merged in time order by one reader; aggregation: tables of 64-byte slots (IPv4: one cache line) and 128-byte slots (IPv6), a segment per CPU, four slots per bucket, that keep their connection from one epoch to the next, counts read in place by userspace after each epoch (compare-and-swap against the program's reuse, which sends unread counts to the ring), a full bucket's packets as tuples to the ring; every frame passed on (tail call to the next stage, else XDP_PASS)",
    timestamps: "bpf_ktime_get_ns + the realtime offset",
    ..HOST_XDP
};

/// Plan `graph` for the tap (one source replica): with `aggregate`, the
/// app's `part` operator runs in XDP as per-connection counters. On the
/// nfp profile the tap's program is checked and refused with every
/// reason (no per-CPU maps, no ring buffer, entries over 64 bytes, ...).
///
/// # Errors
/// [`PlanError`]: the target cannot run the tap, or the graph has no
/// `part` operator to aggregate.
pub fn plan_tap(
    graph: &AppGraph,
    target: Target,
    aggregate: bool,
    object: &Path,
) -> Result<Plan, PlanError> {
    let profile = match target {
        Target::HostXdp => TAP.clone(),
        Target::Nfp => Profile {
            program: "xdp_stream_tap",
            ..NFP.clone()
        },
    };
    if graph.ops.first().map(|o| &o.kind) != Some(&OpKind::Source) {
        return Err(PlanError::Invalid(format!(
            "app {}: the graph does not start with a source, nothing to offload",
            graph.app
        )));
    }
    let report = objcheck::inspect(object, profile.program)?;
    let reasons = profile.violations(&report);
    if !reasons.is_empty() {
        return Err(PlanError::Target { target, reasons });
    }
    if aggregate && !graph.ops.iter().any(|o| o.kind == OpKind::Part) {
        return Err(PlanError::Invalid(format!(
            "app {}: no connection-part operator to aggregate in XDP: use --offload tuples",
            graph.app
        )));
    }
    let mut placement = Vec::new();
    let mut offloaded = Vec::new();
    let mut filter: Option<Predicate> = None;
    let mut key_mode = None;
    let mut i = 0;
    for op in &graph.ops {
        let note = match &op.kind {
            OpKind::Source => {
                "parse the frame into the 56-byte tuple; the frame is passed on untouched"
                    .to_string()
            }
            OpKind::Filter { predicate } if filter.is_none() => {
                if let Err(why) = predicate.fits(ST_OFF_CLAUSES, ST_OFF_RANGES) {
                    placement.push(Placement {
                        name: op.name.clone(),
                        tier: "userspace",
                        note: format!("{predicate}: stays in userspace ({why})"),
                    });
                    i += 1;
                    break;
                }
                filter = Some(predicate.clone());
                format!("filter: {predicate}; rejected frames are not analysed (still passed)")
            }
            OpKind::FlowId { mode } if key_mode.is_none() => {
                key_mode = Some(*mode);
                format!("FlowID = jhash of the {mode} key")
            }
            OpKind::Part if aggregate => {
                format!("keyed aggregation: per-connection counts (packets, bytes, first/last seen, TCP flags, SYN/SYN-ACK/ACK/RST/FIN counts) per {:?} epoch in the connection's slot of its CPU's segment of an aggregation table (one slot, one cache line for IPv4, kept across epochs); userspace reads each finished epoch in place and the next keyed operator merges the parts", graph.epoch)
            }
            _ => break,
        };
        placement.push(Placement {
            name: op.name.clone(),
            tier: "xdp",
            note,
        });
        offloaded.push(op.name.clone());
        i += 1;
    }
    for op in &graph.ops[i..] {
        let note = match &op.kind {
            OpKind::Keyed { key, .. } => format!("keyed by {key}"),
            OpKind::Part => "Map: tuple → one-packet connection part".into(),
            _ => op.what.clone(),
        };
        placement.push(Placement {
            name: op.name.clone(),
            tier: "userspace",
            note,
        });
    }
    let config = OffloadConfig {
        key_mode,
        filter,
        on_filtered: Action::Pass,
        on_malformed: Action::Pass,
        timestamps: Timestamps::Software,
        replicas: 1,
    };
    Ok(Plan {
        app: graph.app.clone(),
        target,
        sources: 1,
        placement,
        offloaded,
        key_mode,
        key_by_free: true,
        key_by_note:
            "one source replica (one reader of the per-CPU rings): records go to the keyed operator as they come"
                .into(),
        config,
        epoch: aggregate.then_some(graph.epoch),
        profile,
        object: report,
    })
}

impl Plan {
    /// The epoch a tap opened for this plan aggregates over: the plan's,
    /// else the default (nothing is aggregated in XDP then).
    pub fn tap_epoch(&self) -> Duration {
        self.epoch.unwrap_or(crate::source::tap::DEFAULT_EPOCH)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} on {}, {} source replica(s): {} of {} operators in XDP",
            self.app,
            self.target,
            self.sources,
            self.offloaded.len(),
            self.placement.len()
        )?;
        for p in &self.placement {
            writeln!(f, "  {:<9} {:<16} {}", p.tier, p.name, p.note)?;
        }
        writeln!(f, "  delivery: {}", self.profile.delivery)?;
        writeln!(f, "  timestamps: {}", self.profile.timestamps)?;
        let o = &self.object;
        let maps: Vec<String> = o
            .maps
            .iter()
            .map(|m| {
                format!(
                    "{} ({}, {}+{} B)",
                    m.name, m.type_name, m.key_size, m.value_size
                )
            })
            .collect();
        let helpers: Vec<&str> = o.helpers.iter().map(|h| h.name.as_str()).collect();
        writeln!(
            f,
            "  object: {} — {} instructions (limit {}), {} stack bytes, helpers [{}]{}, maps [{}]",
            o.program,
            o.insns,
            self.profile.max_insns,
            o.stack_bytes,
            helpers.join(", "),
            if o.kfuncs.is_empty() {
                String::new()
            } else {
                format!(", kfuncs [{}]", o.kfuncs.join(", "))
            },
            maps.join(", ")
        )?;
        write!(f, "  fits {}: yes", self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::{flowmeter, portscan, synflood, EngineOpts};
    use crate::offload::predicate::PortRange;

    fn obj() -> &'static Path {
        Path::new(rampart_bpf::XDP_STREAM_OBJ)
    }

    fn engine(workers: usize) -> EngineOpts {
        EngineOpts {
            workers,
            ..EngineOpts::default()
        }
    }

    fn fm(workers: usize) -> AppGraph {
        flowmeter::graph(&flowmeter::FlowmeterConfig {
            engine: engine(workers),
            ..Default::default()
        })
    }

    #[test]
    fn flowmeter_offloads_its_source_and_spreads_by_the_bidirectional_flowid() {
        let p = plan(&fm(1), Target::HostXdp, 1, obj()).unwrap();
        assert_eq!(p.offloaded, ["source"]);
        assert_eq!(p.key_mode, None);
        assert!(p.key_by_free, "one replica, one worker");
        assert_eq!(p.config.filter, None);
        assert_eq!(p.config.timestamps, Timestamps::RxMeta);
        let tiers: Vec<&str> = p.placement.iter().map(|x| x.tier).collect();
        assert_eq!(tiers, ["xdp", "userspace", "userspace", "userspace"]);
        // Two replicas: a FlowID spreads the load, but ICMP requests and
        // replies would part, so the key-by stays.
        let p = plan(&fm(2), Target::HostXdp, 2, obj()).unwrap();
        assert_eq!(p.key_mode, Some(KeyMode::Bidir));
        assert!(!p.key_by_free);
        assert!(p.key_by_note.contains("ICMP"), "{}", p.key_by_note);
    }

    #[test]
    fn the_tap_aggregates_each_apps_parts_in_xdp_on_the_host_only() {
        let g = synflood::graph(&synflood::SynfloodConfig::default());
        let p = plan_tap(&g, Target::HostXdp, true, obj()).unwrap();
        assert_eq!(p.offloaded, ["source", "tcp", "part"]);
        assert_eq!(p.object.program, "xdp_stream_tap");
        assert_eq!(p.config.filter, Some(synflood::tcp_filter()));
        assert!(p.to_string().contains("xdp       part"), "{p}");
        assert!(p.to_string().contains("aggregation table"), "{p}");
        assert_eq!(
            p.epoch,
            Some(Duration::from_secs(1)),
            "alerts come each second"
        );
        let p = plan_tap(&g, Target::HostXdp, false, obj()).unwrap();
        assert_eq!(p.offloaded, ["source", "tcp"]);
        assert_eq!(p.placement[2].tier, "userspace");
        assert_eq!(p.epoch, None, "nothing aggregated in XDP");
        assert_eq!(p.tap_epoch(), Duration::from_secs(1), "the default");
        // flowmeter's records wait for their idle timeout anyway: longer
        // epochs, shown in the plan and its JSON.
        let p = plan_tap(&fm(1), Target::HostXdp, true, obj()).unwrap();
        assert_eq!(p.epoch, Some(Duration::from_secs(3)));
        assert!(p.to_string().contains("per 3s epoch"), "{p}");
        assert_eq!(serde_json::to_value(&p).unwrap()["epoch_s"], 3.0);
        for g in [fm(1), portscan::graph(&portscan::PortscanConfig::default())] {
            let p = plan_tap(&g, Target::HostXdp, true, obj()).unwrap();
            assert!(p.offloaded.contains(&"part".to_string()), "{p}");
        }
        // The nfp cannot run the tap: per-CPU counters, ring buffers (an
        // array of them), the IPv6 table's 128-byte slots, the CPU id and
        // ring helpers.
        let e = plan_tap(&g, Target::Nfp, true, obj())
            .unwrap_err()
            .to_string();
        for why in [
            "percpu_array",
            "array_of_maps",
            "128-byte values",
            "bpf_get_smp_processor_id",
            "bpf_ringbuf_reserve",
        ] {
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn portscan_offloads_its_filter_but_keeps_its_key_by() {
        let g = portscan::graph(&portscan::PortscanConfig {
            engine: engine(2),
            ..Default::default()
        });
        let p = plan(&g, Target::HostXdp, 2, obj()).unwrap();
        assert_eq!(p.offloaded, ["source", "handshake"]);
        assert_eq!(p.config.filter, Some(portscan::handshake_filter()));
        // Two replicas need a steering key; none partitions the attempt key.
        assert_eq!(p.key_mode, Some(KeyMode::Bidir));
        assert!(!p.key_by_free);
        assert!(p.key_by_note.contains("RST-ACK"), "{}", p.key_by_note);
        // One replica: nothing to steer, no FlowID in XDP.
        let p = plan(&g, Target::HostXdp, 1, obj()).unwrap();
        assert_eq!(p.key_mode, None);
    }

    #[test]
    fn synflood_steers_by_the_bidirectional_key_of_its_window() {
        let g = synflood::graph(&synflood::SynfloodConfig {
            engine: engine(2),
            ..Default::default()
        });
        let p = plan(&g, Target::HostXdp, 2, obj()).unwrap();
        assert_eq!(p.offloaded, ["source", "tcp"]);
        assert_eq!(p.key_mode, Some(KeyMode::Bidir));
        assert!(p.key_by_free, "{}", p.key_by_note);
        assert!(p.to_string().contains("xdp       tcp"));
    }

    #[test]
    fn a_filter_too_big_for_the_maps_stays_in_userspace() {
        let mut g = portscan::graph(&portscan::PortscanConfig::default());
        g.ops[1].kind = OpKind::Filter {
            predicate: Predicate {
                dport: vec![PortRange { lo: 1, hi: 2 }; 5],
                ..Predicate::default()
            },
        };
        let p = plan(&g, Target::HostXdp, 1, obj()).unwrap();
        assert_eq!(p.offloaded, ["source"]);
        assert_eq!(p.placement[1].tier, "userspace");
        assert!(p.placement[1].note.contains("5 destination port ranges"));
        assert_eq!(p.config.filter, None);
    }

    #[test]
    fn the_nfp_entry_point_fits_the_nfp_profile() {
        let p = plan(&fm(1), Target::Nfp, 1, obj()).unwrap();
        let o = &p.object;
        assert_eq!(o.program, "xdp_stream_nfp");
        assert!(
            o.insns > 500 && o.insns <= NFP.max_insns,
            "{} insns",
            o.insns
        );
        assert!(o.kfuncs.is_empty());
        assert_eq!(o.ctx_stores, [16], "only rx_queue_index is written");
        let helpers: Vec<u32> = o.helpers.iter().map(|h| h.id).collect();
        assert!(helpers.contains(&65), "bpf_xdp_adjust_tail: {helpers:?}");
        assert!(
            helpers.iter().all(|h| NFP_HELPERS.contains(h)),
            "{helpers:?}"
        );
        assert!(o.maps.iter().all(|m| m.map_type == 2), "{:?}", o.maps);
        assert!(o.maps.iter().any(|m| m.name == "stream_off_stats_nfp"));
        assert!(!o.maps.iter().any(|m| m.name == "stream_off_xsks"));
        assert_eq!(p.config.timestamps, Timestamps::None);
    }

    #[test]
    fn the_host_entry_point_breaks_the_nfp_profile_and_says_how() {
        // The check is real: the host program (XSKMAP, per-CPU counters,
        // bpf_ktime_get_ns, bpf_redirect_map) is refused by the nfp limits.
        let r = objcheck::inspect(obj(), "xdp_stream").unwrap();
        let v = NFP.violations(&r);
        let all = v.join("\n");
        for needle in [
            "stream_off_xsks is a xskmap map",
            "stream_off_stats is a percpu_array map",
            "bpf_ktime_get_ns (helper 5)",
            "bpf_redirect_map (helper 51)",
        ] {
            assert!(all.contains(needle), "{needle:?} in\n{all}");
        }
        let rx = objcheck::inspect(obj(), "xdp_stream_rxmeta").unwrap();
        assert_eq!(rx.kfuncs, ["bpf_xdp_metadata_rx_timestamp"]);
        assert!(NFP
            .violations(&rx)
            .iter()
            .any(|x| x.contains("kfunc bpf_xdp_metadata_rx_timestamp")));
        assert!(HOST_XDP.violations(&r).is_empty());
        // A profile with a tighter instruction budget refuses the plan.
        let tight = Profile {
            max_insns: 100,
            ..NFP
        };
        let e = tight.violations(&objcheck::inspect(obj(), "xdp_stream_nfp").unwrap());
        assert!(e[0].contains("instructions, the limit is 100"), "{e:?}");
    }

    #[test]
    fn impossible_requests_are_refused() {
        let e = plan(&fm(1), Target::HostXdp, 0, obj())
            .unwrap_err()
            .to_string();
        assert!(e.contains("use 1..=64"), "{e}");
        let e = plan(&fm(1), Target::Nfp, 65, obj())
            .unwrap_err()
            .to_string();
        assert!(e.contains("65 source replicas on nfp"), "{e}");
        let mut g = fm(1);
        g.ops.remove(0);
        let e = plan(&g, Target::HostXdp, 1, obj()).unwrap_err().to_string();
        assert!(e.contains("does not start with a source"), "{e}");
        let e = plan(&fm(1), Target::HostXdp, 1, Path::new("/nonexistent.o"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("reading the BPF object /nonexistent.o"), "{e}");
        assert!("smartnic".parse::<Target>().is_err());
    }

    #[test]
    fn graphs_name_the_operators_the_apps_build() {
        use crate::source::synthetic::{SyntheticConfig, SyntheticSource};
        let src = || {
            SyntheticSource::new(SyntheticConfig {
                tuples: 10,
                ..SyntheticConfig::default()
            })
            .unwrap()
        };
        let names = |g: &AppGraph| -> Vec<String> {
            g.ops.iter().skip(1).map(|o| o.name.clone()).collect()
        };
        let fc = flowmeter::FlowmeterConfig::default();
        let built = flowmeter::build(src(), &fc, |_| {}).unwrap().operators();
        assert_eq!(built[1..], names(&flowmeter::graph(&fc))[..]);
        let pc = portscan::PortscanConfig::default();
        let built = portscan::build(src(), &pc, |_| {}).unwrap().operators();
        assert_eq!(built[1..], names(&portscan::graph(&pc))[..]);
        let sc = synflood::SynfloodConfig::default();
        let built = synflood::build(src(), &sc, |_| {}).unwrap().operators();
        assert_eq!(built[1..], names(&synflood::graph(&sc))[..]);
    }
}
