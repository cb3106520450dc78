//! rampart ddos ABI (`bpf/ddos/abi.h`): types from the skeletons' BTF,
//! the `#define`s BTF cannot carry, and layout checks.

use std::mem::size_of;

pub use crate::xdp_features::types::{
    ddos_feat_addr6 as FeatAddr6, ddos_feat_config as FeatConfig, ddos_feat_ctl as FeatCtl,
    ddos_feat_stats as FeatStats, ddos_feat_val as FeatVal,
};
pub use crate::xdp_filter::types::{
    ddos_addr6 as Addr6, ddos_bl4_bucket as Bl4Bucket, ddos_bl4_table as Bl4Table,
    ddos_counter as Counter, ddos_drop_reason as DropReason, ddos_entry_meta as EntryMeta,
    ddos_feat_skip as FeatSkip, ddos_filter_config as FilterConfig, ddos_filter_ctl as FilterCtl,
    ddos_filter_stats as FilterStats, ddos_lpm4_key as Lpm4Key, ddos_lpm6_key as Lpm6Key,
    ddos_pass_reason as PassReason, ddos_pkt_counter as PktCounter,
};

/// `DDOS_BL4_SLOTS_PER_BUCKET`.
pub const BL4_SLOTS_PER_BUCKET: usize = 16;
/// `DDOS_BL4_EMPTY`.
pub const BL4_EMPTY: u32 = 0;
/// `DDOS_BL4_TOMBSTONE`.
pub const BL4_TOMBSTONE: u32 = 0xffff_ffff;
/// `DDOS_BL4_MAX_PROBES`.
pub const BL4_MAX_PROBES: u32 = 16;
/// `DDOS_BL4_MIX`.
pub const BL4_MIX: u32 = 0x85eb_ca6b;
/// `DDOS_BL4_NARROW` (flag in `Bl4Table::shift`).
pub const BL4_NARROW: u32 = 0x100;
/// `DDOS_BL4_NARROW_MAX_SHIFT`: tables of 2^21 slots or more are narrow.
pub const BL4_NARROW_MAX_SHIFT: u32 = 11;
/// `DDOS_BL4_N_SLOTS_PER_BUCKET`.
pub const BL4_N_SLOTS_PER_BUCKET: usize = 32;
/// `DDOS_BL4_N_EMPTY`.
pub const BL4_N_EMPTY: u16 = 0;
/// `DDOS_BL4_N_USED`.
pub const BL4_N_USED: u16 = 0x8000;
/// `DDOS_BL4_N_TOMBSTONE`.
pub const BL4_N_TOMBSTONE: u16 = 0x7fff;
/// `DDOS_ID_NONE`.
pub const ID_NONE: u32 = 0xffff_ffff;
/// `DDOS_META_USED`.
pub const META_USED: u16 = 0x1;
/// `DDOS_FEAT_MAX_PROBES`.
pub const FEAT_MAX_PROBES: u32 = 64;
/// `DDOS_FEAT_KEY_FREE`.
pub const FEAT_KEY_FREE: u64 = 0;
/// `DDOS_FEAT_SKETCH_BITS`.
pub const FEAT_SKETCH_BITS: u32 = 128;
/// Number of drop reasons (`DDOS_DROP_REASON_MAX`).
pub const DROP_REASONS: usize = DropReason::DDOS_DROP_REASON_MAX.0 as usize;
/// Number of pass reasons (`DDOS_PASS_REASON_MAX`).
pub const PASS_REASONS: usize = PassReason::DDOS_PASS_REASON_MAX.0 as usize;
/// Number of feature skip reasons (`DDOS_FEAT_SKIP_MAX`).
pub const FEAT_SKIPS: usize = FeatSkip::DDOS_FEAT_SKIP_MAX.0 as usize;

const _: () = assert!(size_of::<Bl4Bucket>() == 4 * BL4_SLOTS_PER_BUCKET);
const _: () = assert!(size_of::<Bl4Bucket>() == 2 * BL4_N_SLOTS_PER_BUCKET);
// A narrow slot holds USED | dist (4 bits, < BL4_MAX_PROBES) << 11 | remainder (≤ 11 bits).
const _: () = assert!(BL4_MAX_PROBES <= 16 && BL4_NARROW_MAX_SHIFT <= 11);
const _: () = assert!(size_of::<Bl4Table>() == 24);
const _: () = assert!(size_of::<FilterCtl>() == 16 + 2 * 24 + 8 + 24);
const _: () = assert!(size_of::<Counter>() == 32);
const _: () = assert!(size_of::<EntryMeta>() == 24);
const _: () = assert!(size_of::<Lpm4Key>() == 8);
const _: () = assert!(size_of::<Lpm6Key>() == 20);
const _: () = assert!(size_of::<Addr6>() == 16);
const _: () = assert!(size_of::<PktCounter>() == 16);
const _: () = assert!(size_of::<FilterStats>() == 16 * (DROP_REASONS + PASS_REASONS) + 3 * 8 + 8);
// The fast path's counters share the first cache line.
const _: () = assert!(std::mem::offset_of!(FilterStats, drop) == 16);
const _: () = assert!(size_of::<FilterConfig>() == 16);
const _: () = assert!(size_of::<FeatAddr6>() == 32);
const _: () = assert!(size_of::<FeatConfig>() == 20);
const _: () = assert!(size_of::<FeatVal>() == 64);
const _: () = assert!(size_of::<FeatCtl>() == 16);
const _: () = assert!(size_of::<FeatStats>() == 8 * (2 + FEAT_SKIPS));
