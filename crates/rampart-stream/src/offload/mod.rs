//! The stream offload: an app's leading stateless
//! operators — Source (frame → tuple), FlowID, Filter — run in XDP
//! (`bpf/stream/xdp_stream.bpf.c`), which rewrites each frame into the
//! 56-byte tuple record and hands it to the AF_XDP socket of the source
//! replica that owns its key; userspace receives finished tuples
//! ([`crate::source::xdp_tuple::XdpTupleSource`]).
//!
//! - [`predicate`]: the Filter predicates both tiers evaluate;
//! - [`config`]: what the program is told, as map entries;
//! - [`prog`]: loading it and reading its counters;
//! - [`planner`]: which operators go down for an app and a target
//!   (`host-xdp`, or the `nfp` profile checked against the built object by
//!   [`objcheck`]).

pub mod config;
pub mod objcheck;
pub mod planner;
pub mod predicate;
pub mod prog;

pub use config::{Action, OffloadConfig, Timestamps};
pub use planner::{plan, plan_tap, AppGraph, OpDesc, OpKind, Plan, PlanError, Target};
pub use predicate::{FlagClause, PortRange, Predicate};
pub use prog::{Counters, Entry, OffloadProgram, TapCounters, TapMaps, TapSizes};
