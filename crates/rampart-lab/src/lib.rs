//! The rampart lab: real packets on one machine.
//!
//! - [`topology`]: the `wan → nic → host` namespaces and veths,
//!   with tenant namespaces behind `host`;
//! - [`gen`]: the line-rate traffic generator (XDP live frames from `wan`);
//! - [`sink`]: the counting XDP_DROP sink on `host`;
//! - [`packet`] and [`dist`]: frame templates and per-source distributions;
//! - [`traffic`]: the tenant experiments' generator (one destination per
//!   tenant, interleaved);
//! - [`hostcpu`]: the host's receive processing on a CPU of its own, and
//!   its CPU time;
//! - [`nic`]: the EMULATED SmartNIC's table;
//! - [`internet`]: the Internet beyond wan (replies to spoofed sources
//!   leave instead of climbing wan's stack);
//! - [`web`]: nginx and wrk;
//! - [`crowdsec`]: a CrowdSec Local API of its own (offline, private config).

pub mod bgp;
pub mod crowdsec;
pub mod dist;
pub mod error;
pub mod gen;
pub mod hostcpu;
pub mod internet;
pub mod nic;
pub mod packet;
pub mod router;
pub mod sink;
pub mod testing;
pub mod topology;
pub mod traffic;
pub mod web;

pub use error::{Error, Result};
pub use topology::Lab;
