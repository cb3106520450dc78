//! rampart ddos, data plane: the XDP source blacklist with
//! per-entry counters ([`filter`]), the per-(source, destination) feature
//! stage with atomic interval snapshots ([`features`]).
//!
//! The control plane (detection, offload planner, daemon)
//! builds on [`filter::Filter`] (block/unblock/replace/entries/stats) and
//! [`features::Features`] (interval snapshots).

pub mod clock;
pub mod error;
pub mod evidence;
pub mod features;
pub mod filter;
pub mod maps;
pub mod protect;
pub mod table;

pub use error::{Error, Result};
pub use features::{FeatureRecord, Features, Snapshot};
pub use filter::{BlockEntry, Filter, FilterConfig, Scope, Update};
pub use prefix::{Kind, Prefix};
pub use protect::{Protect, ProtectFlags};
/// Prefixes and their tables: the control logic's, re-exported.
pub use rampart_ddos_control::prefix;
