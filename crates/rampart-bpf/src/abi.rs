//! Shared ABI types (from `bpf/<dir>/abi.h`, via the skeletons' BTF) with layout checks.
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

// --- rampart stream (bpf/stream/abi.h) ---------------------------------

/// The packet tuple of rampart stream (`struct stream_tuple`).
pub use crate::xdp_stream_probe::types::stream_tuple as StreamTuple;

/// `enum stream_tuple_flag` bits of [`StreamTuple::flags`].
pub const ST_F_IPV6: u8 = 1 << 0;
/// First fragment.
pub const ST_F_FRAG_FIRST: u8 = 1 << 1;
/// Non-first fragment (no ports).
pub const ST_F_FRAG_LATER: u8 = 1 << 2;
/// Direction-independent key swapped the addresses.
pub const ST_F_IP_REV: u8 = 1 << 3;
/// Direction-independent key swapped the ports.
pub const ST_F_PORT_REV: u8 = 1 << 4;
/// Timestamp from the NIC.
pub const ST_F_TS_HW: u8 = 1 << 5;
/// `flags >> ST_KEY_MODE_SHIFT` is the `enum stream_key_mode`.
pub const ST_KEY_MODE_SHIFT: u8 = 6;
/// Seed of the FlowID jhash.
pub const ST_FLOWID_SEED: u32 = 0x7261;

const _: () = assert!(size_of::<StreamTuple>() == 56);
const _: () = assert!(std::mem::align_of::<StreamTuple>() == 8);

// --- rampart stream offload (bpf/stream/abi.h) -----------------

/// Configuration of `xdp_stream` (`struct stream_off_cfg`, map `stream_off_cfg[0]`).
pub use crate::xdp_stream::types::stream_off_cfg as StreamOffCfg;
/// An inclusive port range (`struct stream_off_port_range`).
pub use crate::xdp_stream::types::stream_off_port_range as StreamOffPortRange;
/// An address prefix as (address, mask) words (`struct stream_off_prefix`).
pub use crate::xdp_stream::types::stream_off_prefix as StreamOffPrefix;

/// TCP flag clauses, and port ranges / prefixes per direction (`ST_OFF_CLAUSES`, `ST_OFF_RANGES`).
pub const ST_OFF_CLAUSES: usize = 4;
/// Port ranges and prefixes per direction.
pub const ST_OFF_RANGES: usize = 4;
/// XSKMAP slots (`ST_OFF_XSKS`): RX queue × replicas + replica.
pub const ST_OFF_XSKS: u32 = 64;
/// `enum stream_off_counter` entries (`ST_CNT_MAX`).
pub const ST_CNT_MAX: u32 = 9;

const _: () = assert!(size_of::<StreamOffCfg>() == 40);
const _: () = assert!(size_of::<StreamOffPortRange>() == 4);
const _: () = assert!(size_of::<StreamOffPrefix>() == 36);
// The nfp profile: every map entry of the offload fits in 64 bytes.
const _: () = assert!(size_of::<StreamOffCfg>() <= 64 && size_of::<StreamOffPrefix>() <= 64);
// The array lengths repeat `#define`s that BTF does not carry: these fail to compile if they drift.
const _: fn(&StreamOffCfg) -> [u8; ST_OFF_CLAUSES] = |c| c.clause_mask;
const _: fn(&StreamOffPrefix) -> [u32; 4] = |p| p.mask;

// --- rampart stream tap (bpf/stream/abi.h, bpf/stream/tap.h) ------------

/// What one direction of a connection sent (`struct stream_agg_dir`).
pub use crate::xdp_stream::types::stream_agg_dir as StreamAggDir;
/// One connection in one epoch (`struct stream_agg_key`).
pub use crate::xdp_stream::types::stream_agg_key as StreamAggKey;
/// Both directions (`struct stream_agg_val`).
pub use crate::xdp_stream::types::stream_agg_val as StreamAggVal;
/// The tap's settings (`struct stream_tap_cfg`, map `stream_tap_cfg[0]`).
pub use crate::xdp_stream::types::stream_tap_cfg as StreamTapCfg;
/// `enum stream_tap_mode`: tuples to the ring buffer.
pub const ST_TAP_TUPLES: u32 = 0;
/// `enum stream_tap_mode`: per-connection counters in per-CPU maps.
pub const ST_TAP_AGGREGATE: u32 = 1;
/// `enum stream_tap_counter` entries (`ST_TAP_CNT_MAX`).
pub const ST_TAP_CNT_MAX: u32 = 10;

const _: () = assert!(size_of::<StreamTapCfg>() == 16);
const _: () = assert!(size_of::<StreamAggKey>() == 44);
const _: () = assert!(size_of::<StreamAggDir>() == 56);
const _: () = assert!(size_of::<StreamAggVal>() == 112);

pub mod ddos;
