//! rampart stream: a WindFlow-style stream processing engine
//! ([`engine`]), the packet tuple shared with XDP ([`tuple`], [`parse`],
//! [`flowid`]), packet sources ([`source`]), the XDP offload of the leading
//! operators ([`offload`]) and network analytics apps ([`apps`]) with
//! standard outputs ([`export`]).

pub mod apps;
pub mod engine;
pub mod error;
pub mod export;
pub mod flowid;
pub mod offload;
pub mod parse;
pub mod part;
pub mod source;
pub mod tuple;

pub use error::{Error, Result};
