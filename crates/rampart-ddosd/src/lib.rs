//! rampart ddos control plane, runtime half (issue #3): tier backends
//! ([`tier`]), placement modes ([`mode`]), and the mitigation daemon
//! ([`daemon`]) with its HTTP API ([`api`]), Prometheus metrics
//! ([`metrics`]) and JSON-lines alerts ([`alerts`]). The decisions —
//! detectors, rate monitor, offload planner — come from
//! `rampart-ddos-control`.

pub mod error;
pub mod tier;

pub use error::{Error, Result};
