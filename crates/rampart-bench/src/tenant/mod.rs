//! Benchmarks of the tenant offload.
//!
//! - [`fairness`]: three tenants flooded with equal shares, fairness on
//!   vs off, accounting coverage (`rampart bench tenant-fairness`);
//! - [`services`]: the tenant services' evaluation — accounting overhead,
//!   offload gain, CPU shares and scaling (`rampart bench tenant`), with
//!   the share and scaling figures in [`figures`].

pub mod fairness;
pub mod figures;
pub mod services;
