//! Subcommands, one module per application.

pub mod bench;
pub mod ddos;
pub mod ddosd;
pub mod demo;
pub mod lab;
pub mod run;
pub mod status;
pub mod stream;
pub mod stream_metrics;
pub mod tenant;
pub mod util;
