//! rampart ddos control plane, runtime half: tier backends
//! ([`tier`]), placement modes ([`mode`]), and the mitigation daemon
//! ([`daemon`]) with its HTTP API ([`api`]), Prometheus metrics
//! ([`metrics`]) and JSON-lines alerts ([`alerts`]); the policer's
//! bookkeeping ([`police`]); the host attachment's watchdog ([`watch`]). The decisions — detection (blocks, policing,
//! protection, unbans) and the offload planner — come from
//! `rampart-ddos-control`.

pub mod alerts;
pub mod api;
pub mod config;
pub mod crowdsec;
pub mod daemon;
pub mod error;
pub mod evidence;
pub mod flow_input;
pub mod hw;
pub mod metrics;
pub mod mode;
pub mod police;
pub mod tier;
pub mod watch;

pub use config::Config;
pub use daemon::{Command, Daemon, Handle, View};
pub use error::{Error, Result};
pub use mode::Mode;
