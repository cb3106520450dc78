//! Tier backends: where a blocked source is dropped.
//!
//! Every backend states its capacity, what its counters are worth and what
//! one rule update costs ([`TierInfo`]), and installs / removes / lists
//! rules through one trait ([`Tier`]). The daemon keeps two tiers at most:
//! the XDP blacklist (every blocked source, [`xdp::XdpTier`] or the
//! iptables baseline) and a hardware tier holding the planner's top-K
//! (the lab's EMULATED NIC, or — on hosts with the hardware — TC flower,
//! ethtool ntuple, XDP offload). Rules are source prefixes: an exact
//! source (/32, /128) or a blocked network (a /24 of a botnet); the
//! hardware backends match the mask as NICs do (TCAM masks, ntuple masks).

use std::time::Duration;

use rampart_ddos::Prefix;
use serde::Serialize;

use crate::error::Result;

pub mod emulated;
pub mod ethtool;
pub mod iptables;
pub mod netlink;
pub mod tc_flower;
pub mod upstream;
pub mod xdp;
pub mod xdp_hw;

/// What a tier's per-rule counters are worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// Every dropped packet counted.
    Exact,
    /// Sampled 1 in 2^k, scaled back (unbiased, see the ddos data plane docs).
    Sampled,
    /// No per-rule counters (ethtool ntuple): rates are estimated (see [`ethtool`]).
    None,
}

/// What a tier is.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TierInfo {
    /// Backend name (`emulated`, `xdp`, `tc-flower`, `ethtool-ntuple`, `xdp-hw`, `iptables`).
    pub name: &'static str,
    /// `hw` (top-K tier) or `host` (the full blacklist).
    pub role: &'static str,
    /// Where it lives, for humans (`EMULATED NIC of lab demo`, `host0 (netns demo-host)`).
    pub location: String,
    /// Most rules it holds (`None`: bounded only by the blacklist's own capacity).
    pub capacity: Option<usize>,
    /// Cost of one rule insert or removal (`{"secs", "nanos"}`).
    #[schema(value_type = Object)]
    pub update_cost: Duration,
    /// Counter quality.
    pub counters: CounterKind,
    /// Honest about being an emulation (true only for `emulated`).
    pub emulated: bool,
}

/// Cumulative counters of one rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Packets dropped by the rule since it was installed.
    pub packets: u64,
    /// Bytes dropped.
    pub bytes: u64,
}

/// A place where blocked sources are dropped.
pub trait Tier {
    /// Capacity, counters and update cost.
    fn info(&self) -> TierInfo;
    /// Install drop rules (prefixes already present are left as they are, counters kept).
    /// Returns how many rules were added.
    ///
    /// # Errors
    /// Capacity, a prefix the tier cannot hold, or the backend's failure;
    /// rules installed before the failure stay installed (they are reported by [`Tier::rules`]).
    fn install(&mut self, add: &[Prefix]) -> Result<usize>;
    /// Remove drop rules (absent ones are ignored). Returns how many were removed.
    ///
    /// # Errors
    /// The backend's failure.
    fn remove(&mut self, remove: &[Prefix]) -> Result<usize>;
    /// Every installed rule with its cumulative counters.
    ///
    /// # Errors
    /// The backend's failure.
    fn rules(&self) -> Result<Vec<(Prefix, Counts)>>;
}
