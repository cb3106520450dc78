//! rampart ddos, control logic: what to block, when to unblock, and which
//! blocked sources deserve a hardware rule.
//!
//! Pure logic: no BPF, no namespaces, no sleeping, no clock reads. Traffic
//! comes in as the data path's feature snapshots ([`FeatureRecord`]s per
//! (source, destination) pair, [`VictimRecord`]s per victim) and per-source
//! rates, time as interval lengths, so every rule here is testable with
//! synthetic or recorded data.
//!
//! - [`detection::Detection`] runs detection per victim and per vector against
//!   learned per-victim baselines, then attributes sources; it decides SYN
//!   cookies and the ACK guard for spoofed and out-of-state floods,
//!   policing, prefix aggregation, unban on the source's own rate, and
//!   attack events (its module documentation says how the daemon calls it).
//! - [`Planner`] is Algorithm 1 of Miano et al., IEEE Access 2019: the top-K
//!   blocked sources by rate go to the hardware tier, with a swap threshold
//!   that falls as the attack nears what the host can drop, and a bound on
//!   rule updates.
//!
//! - [`upstream::UpstreamPlanner`] decides when the router in front of the
//!   host (FlowSpec, RTBH over BGP) drops the heaviest blocked sources too:
//!   when their volume nears the host link's capacity, with hysteresis.
//!
//! Configuration: [`detection::DetectionConfig`] (`[detect]`), [`PlannerConfig`]
//! (`[offload]`); every key has a documented default and bad values give a
//! [`ConfigError`] naming the key and the allowed range.

pub mod config;
pub mod detection;
pub mod error;
pub mod features;
pub mod flow;
mod numbers;
pub mod planner;
pub mod prefix;
pub mod upstream;

pub use config::PlannerConfig;
pub use error::{ConfigError, PrefixError};
pub use features::{hll_estimate, FeatureRecord, VictimRecord, UDP_CLASSES};
pub use planner::{Plan, PlanStats, Planner};
pub use prefix::{Kind, Prefix};

use serde::Serialize;

/// A decision to block one source (an exact /32 or /128 prefix, or a CIDR
/// prefix): what the daemon's blacklist takes, from detection
/// ([`detection::Block`]) or from the operator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockDecision {
    /// What to block.
    pub prefix: Prefix,
    /// Who decided: the vector family of a [`detection::Block`] (`"syn_flood"`,
    /// `"udp_amplification"`, `"port_scan"`, ...) or `"operator"`.
    pub detector: &'static str,
    /// Human-readable, with the numbers that triggered it.
    pub reason: String,
    /// The source's packet rate in the interval (packets/s).
    pub pps: f64,
    /// The source's bit rate in the interval (bits/s, frame lengths).
    pub bps: f64,
}
