//! Shared ABI types (from `bpf/shared/*.h`, via the skeletons' BTF) with layout checks.
//!
//! A change to a header that alters a size fails the build here, not at run time.

use std::mem::size_of;

pub use crate::xdp_nic_emul::types::{
    nic_rule_key as NicRuleKey, nic_rule_stats as NicRuleStats, nic_state as NicState,
};
pub use crate::xdp_sink::types::{sink_counters as SinkCounters, sink_src_key as SinkSrcKey};
pub use crate::xdp_trafficgen::types::{
    gen_config as GenConfig, gen_cpu_state as GenCpuState, gen_slots as GenSlots,
};

/// Slots packed in one element of the generator's schedule map.
pub const GEN_SLOTS_PER_ELEM: usize = 16;
/// Most schedule slots the generator's map holds.
pub const GEN_SLOTS_MAX: usize = 1 << 22;
/// `enum gen_family` values.
pub const GEN_FAMILY_V4: u32 = 4;
/// `enum gen_family` values.
pub const GEN_FAMILY_V6: u32 = 6;

const _: () = assert!(size_of::<GenConfig>() == 48);
const _: () = assert!(size_of::<GenSlots>() == 4 * GEN_SLOTS_PER_ELEM);
const _: () = assert!(size_of::<GenCpuState>() == 16);
const _: () = assert!(size_of::<SinkCounters>() == 16);
const _: () = assert!(size_of::<SinkSrcKey>() == 20);
const _: () = assert!(size_of::<NicRuleKey>() == 20);
const _: () = assert!(size_of::<NicRuleStats>() == 16);
const _: () = assert!(size_of::<NicState>() == 16);
