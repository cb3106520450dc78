//! `rampart tenant`: multi-tenant offload of security programs into one
//! infrastructure XDP program (after Chaignon et al., SecSoN 2018).
//!
//! - [`compiler`]: the compiler agent — C source or BPF object → checked
//!   ([`confine`]) and linked with the infrastructure wrapper;
//! - [`host`]: the host agent — shared maps, demultiplexer selectors,
//!   generations swapped atomically with `bpf_link_update`, accounting;
//! - [`tokens`]: Algorithm 1, the work-conserving weighted token generator;
//! - [`api`]: the HTTP API with tenant-token authentication and `/metrics`;
//! - [`programs`], [`settings`]: the ready-made tenant services (DNS rate
//!   limiter, SYN-cookie proxy) and their settings by name;
//! - [`services`]: the lab's tenant services (UDP sink, nginx, dnsmasq).

pub mod agent;
pub mod api;
pub mod client;
pub mod compiler;
pub mod config;
pub mod confine;
pub mod dashboard;
pub mod error;
pub mod host;
pub mod metrics;
pub mod programs;
pub mod selector;
pub mod serve;
pub mod services;
pub mod settings;
pub mod tokens;
pub mod userspace;

pub use error::{Error, Result};
