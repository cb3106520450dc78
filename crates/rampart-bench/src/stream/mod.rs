//! Benchmarks of rampart stream.
//!
//! - [`engine`]: the engine alone, full and empty pipelines on a synthetic
//!   source (`rampart bench stream-engine`);
//! - [`timely_peer`]: the same full pipeline on timely-dataflow, the peer
//!   engine of `rampart bench stream-engine`;
//! - [`offload`]: an app fed by the lab generator with the XDP offload on
//!   and off, against the raw AF_XDP receive ceiling (`rampart bench stream`);
//! - [`host`]: flow monitoring on a server — the tap, raw AF_XDP and
//!   softflowd (`rampart bench stream-host`).

pub mod engine;
pub mod host;
pub mod offload;
pub mod timely_peer;
