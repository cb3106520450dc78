//! rampart ddos, control logic: what to block, when
//! to unblock, and which blocked sources deserve a hardware rule.
//!
//! Pure logic: no BPF, no namespaces, no sleeping, no clock reads. Time is
//! passed in as [`std::time::Instant`]s, traffic as feature intervals
//! ([`Interval`] of [`FeatureRecord`]s, as the data path's snapshots give them) and
//! per-source rates, so every rule here is testable with synthetic data.
//!
//! - [`v2::Detection`] is detection v2: per victim and per vector against
//!   learned per-victim baselines, then attribution of sources, SYN cookies
//!   and the ACK guard for spoofed and out-of-state floods, policing,
//!   prefix aggregation, unban on the source's own rate, attack events
//!   (its module documentation says how the daemon calls it). It replaces
//!   the v1 [`Detection`] and [`RateMonitor`] below once the daemon is
//!   moved to it.
//! - [`Detection`] runs the enabled [`Detector`]s over one interval
//!   ([`detect::RateDetector`], [`detect::EntropyDetector`],
//!   [`detect::AmplificationDetector`], [`detect::SynFloodDetector`],
//!   [`detect::IcmpFloodDetector`], [`detect::UdpFloodDetector`]), drops whitelisted sources and returns
//!   one [`BlockDecision`] per prefix, each with its detector and reason.
//! - [`RateMonitor`] unbans a blocked source once its measured rate (all
//!   tiers summed) stays below the highest single-source rate seen under
//!   normal activity ([`Detection::normal_peak_pps`]).
//! - [`Planner`] is Algorithm 1 of Miano et al., IEEE Access 2019: the top-K blocked sources by
//!   rate go to the hardware tier, with a swap threshold that falls as the
//!   attack nears what the host can drop, and a bound on rule updates.
//!
//! Configuration: [`DetectConfig`] (`[detect]`), [`MonitorConfig`]
//! (`[monitor]`), [`PlannerConfig`] (`[offload]`); every key has a
//! documented default and bad values give a [`ConfigError`] naming the key
//! and the allowed range.

pub mod config;
pub mod detect;
pub mod error;
pub mod features;
pub mod monitor;
pub mod planner;
pub mod prefix;
pub mod sources;
#[cfg(test)]
mod testutil;
pub mod v2;

pub use config::{
    AmplificationConfig, DetectConfig, EntropyConfig, IcmpFloodConfig, MonitorConfig,
    PlannerConfig, RateConfig, SignatureConfig, SynFloodConfig, UdpFloodConfig, UdpVector,
};
pub use detect::{Detection, Detector, Learned};
pub use error::{ConfigError, PrefixError};
pub use features::{hll_estimate, FeatureRecord, VictimRecord, UDP_CLASSES};
pub use monitor::{RateMonitor, Tracked, Unban};
pub use planner::{Plan, PlanStats, Planner};
pub use prefix::{Kind, Prefix};
pub use sources::{SourceStats, Sources};

use serde::Serialize;

/// One feature interval as the detectors see it.
#[derive(Debug, Clone, Copy)]
pub struct Interval<'a> {
    /// Interval number (increasing; gaps are allowed).
    pub index: u64,
    /// Its length in seconds (rates = counts / secs). Must be > 0; a
    /// non-positive or non-finite length is treated as 1 s.
    pub secs: f64,
    /// Per-(source, destination) records of the interval.
    pub records: &'a [FeatureRecord],
}

impl Interval<'_> {
    /// The length used to compute rates: `secs`, or 1.0 if `secs` is not a
    /// positive finite number.
    pub fn secs_or_one(&self) -> f64 {
        if self.secs.is_finite() && self.secs > 0.0 {
            self.secs
        } else {
            1.0
        }
    }
}

/// A decision to block one source (an exact /32 or /128 prefix, or a CIDR
/// prefix).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockDecision {
    /// What to block.
    pub prefix: Prefix,
    /// Which detector decided: `"rate"`, `"entropy"`,
    /// `"udp_amplification"`, `"syn_flood"`, `"icmp_flood"`, `"udp_flood"`
    /// (or a custom
    /// detector's [`Detector::name`]).
    pub detector: &'static str,
    /// Human-readable, with the numbers that triggered it. When several
    /// detectors flag the same prefix, [`Detection`] keeps the first
    /// detector and appends the others' reasons after `"; also "`.
    pub reason: String,
    /// The source's packet rate in the interval (packets/s).
    pub pps: f64,
    /// The source's bit rate in the interval (bits/s, frame lengths).
    pub bps: f64,
}
