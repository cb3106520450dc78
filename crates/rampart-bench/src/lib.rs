//! rampart's benchmarks and the demo, each in a lab of its own (unique
//! prefix, removed at the end — also on error and on Ctrl-C, which the
//! binary turns into the `cancel` flag every loop checks), and the CSV,
//! JSON and PNG reports they write. Nothing in the product depends on this
//! crate; it is the only user of plotters.
//!
//! - [`ddos`]: the blacklist against its peers, feature reads, blacklist
//!   updates, and the four figures of the placement modes (`rampart bench
//!   filter | features-read | filter-update | ddos`);
//! - [`stream`]: the engine alone and the XDP offload in the lab
//!   (`rampart bench stream-engine | stream`);
//! - [`tenant`]: fairness, accounting overhead and offload gain of the
//!   tenant services (`rampart bench tenant-fairness | tenant`);
//! - [`upstream`]: the tiers beyond the host: BGP to the router, flow
//!   input, CrowdSec (`rampart bench upstream`);
//! - [`demo`]: `rampart demo`;
//! - [`report`]: machine description, CSV, medians and plots.

pub mod ddos;
pub mod demo;
pub mod error;
pub mod out;
pub mod report;
pub mod stream;
pub mod tenant;
pub mod upstream;

pub use error::{Error, Result};
