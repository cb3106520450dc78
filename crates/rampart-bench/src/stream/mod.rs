//! Benchmarks of rampart stream.
//!
//! - [`engine`]: the engine alone, full and empty pipelines on a synthetic
//!   source (`rampart bench stream-engine`);
//! - [`offload`]: an app fed by the lab generator with the XDP offload on
//!   and off, against the raw AF_XDP receive ceiling (`rampart bench stream`).

pub mod engine;
pub mod host;
pub mod offload;
