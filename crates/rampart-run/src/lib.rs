//! `rampart run`: one daemon per host. One config ([`config`]) names the
//! interfaces and enables any of the three applications (`[ddos]`,
//! `[stream]`, `[tenant]`); on each interface one XDP entry point chains
//! the enabled stages (rampart_dataplane::chain).

pub mod board;
pub mod config;
pub mod error;
pub mod host;

pub use config::Config;
pub use error::{Error, Result};
pub use host::Host;
