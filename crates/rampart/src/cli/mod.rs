//! Subcommands, one module per application.

pub mod demo;
pub mod lab;
pub mod stream;
pub mod stream_bench;
pub mod tenant;
pub mod util;
