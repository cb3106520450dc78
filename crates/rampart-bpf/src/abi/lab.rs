//! `bpf/lab/abi.h`: the lab's generators, sink and EMULATED NIC. Lab and
//! benchmark code only.

use std::mem::size_of;

include!(concat!(env!("OUT_DIR"), "/abi_lab.rs"));

pub use crate::xdp_internet::types::internet_counters as InternetCounters;
pub use crate::xdp_nic_emul::types::{
    nic_rule_key as NicRuleKey, nic_rule_stats as NicRuleStats, nic_rule_val as NicRuleVal,
    nic_state as NicState,
};
pub use crate::xdp_sink::types::{sink_counters as SinkCounters, sink_src_key as SinkSrcKey};
pub use crate::xdp_tenant_gen::types::{tgen_config as TgenConfig, tgen_cpu_state as TgenCpuState};
pub use crate::xdp_tenant_mix::types::{tmix_config as TmixConfig, tmix_cpu_state as TmixCpuState};
pub use crate::xdp_trafficgen::types::{
    gen_config as GenConfig, gen_cpu_state as GenCpuState, gen_slots as GenSlots,
};

pod!(
    InternetCounters,
    NicRuleKey,
    NicRuleStats,
    NicRuleVal,
    NicState,
    SinkCounters,
    SinkSrcKey,
    TgenConfig,
    TgenCpuState,
    TmixConfig,
    TmixCpuState,
    GenConfig,
    GenCpuState,
    GenSlots,
);

const _: () = assert!(size_of::<GenConfig>() == 56 + GEN_HDR_MAX);
const _: () = assert!(size_of::<GenSlots>() == 4 * GEN_SLOTS_PER_ELEM);
const _: () = assert!(size_of::<GenCpuState>() == 16);
const _: () = assert!(size_of::<SinkCounters>() == 16);
const _: () = assert!(size_of::<SinkSrcKey>() == 20);
const _: () = assert!(size_of::<NicRuleKey>() == 24);
const _: () = assert!(size_of::<InternetCounters>() == 16);
const _: () = assert!(size_of::<NicRuleStats>() == 16);
const _: () = assert!(size_of::<NicRuleVal>() == 4);
const _: () = assert!(size_of::<NicState>() == 16);
const _: () = assert!(size_of::<TgenConfig>() == 8 + (4 + 2 + 2) * TGEN_MAX_DST + 4 + GEN_HDR_MAX);
const _: () = assert!(size_of::<TgenCpuState>() == 8 * (1 + TGEN_MAX_DST));
const _: () = assert!(size_of::<TmixConfig>() == 8 + TMIX_MAX_SLOT * TMIX_MAX_LEN);
const _: () = assert!(size_of::<TmixCpuState>() == 8 * (1 + TMIX_MAX_SLOT));
