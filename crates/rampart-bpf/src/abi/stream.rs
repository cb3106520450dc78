//! `bpf/stream/abi.h`: the packet tuple of rampart stream, the offload's
//! configuration and counters, `xdp_stream_rx`'s counters, and the tap's
//! configuration, per-connection aggregates and counters.

use std::mem::size_of;

include!(concat!(env!("OUT_DIR"), "/abi_stream.rs"));

/// The packet tuple (`struct stream_tuple`).
pub use crate::xdp_stream_probe::types::stream_tuple as StreamTuple;

/// Configuration of `xdp_stream` (`struct stream_off_cfg`, map `stream_off_cfg[0]`).
pub use crate::xdp_stream::types::stream_off_cfg as StreamOffCfg;
/// An inclusive port range (`struct stream_off_port_range`).
pub use crate::xdp_stream::types::stream_off_port_range as StreamOffPortRange;
/// An address prefix as (address, mask) words (`struct stream_off_prefix`).
pub use crate::xdp_stream::types::stream_off_prefix as StreamOffPrefix;

/// What one direction of a connection sent in one epoch (`struct stream_agg_cnt`).
pub use crate::xdp_stream::types::stream_agg_cnt as StreamAggCnt;
/// One connection (`struct stream_agg_key`).
pub use crate::xdp_stream::types::stream_agg_key as StreamAggKey;
/// A slot of the tap's aggregation table (`struct stream_agg_slot`).
pub use crate::xdp_stream::types::stream_agg_slot as StreamAggSlot;
/// The tap's settings (`struct stream_tap_cfg`, map `stream_tap_cfg[0]`).
pub use crate::xdp_stream::types::stream_tap_cfg as StreamTapCfg;

pod!(
    StreamTuple,
    StreamOffCfg,
    StreamOffPortRange,
    StreamOffPrefix,
    StreamAggCnt,
    StreamAggKey,
    StreamAggSlot,
    StreamTapCfg,
);

const _: () = assert!(size_of::<StreamTuple>() == 56);
const _: () = assert!(std::mem::align_of::<StreamTuple>() == 8);
const _: () = assert!(size_of::<StreamOffCfg>() == 40);
const _: () = assert!(size_of::<StreamOffPortRange>() == 4);
const _: () = assert!(size_of::<StreamOffPrefix>() == 36);
const _: () = assert!(size_of::<StreamTapCfg>() == 16);
const _: () = assert!(size_of::<StreamAggKey>() == 40);
const _: () = assert!(size_of::<StreamAggCnt>() == 40);
// A slot is a pair of cache lines; its state word is 8-byte aligned.
const _: () = assert!(size_of::<StreamAggSlot>() == 128);
const _: () = assert!(std::mem::offset_of!(StreamAggSlot, state) == 40);
// The nfp profile: every map entry of the offload fits in 64 bytes.
const _: () = assert!(size_of::<StreamOffCfg>() <= 64 && size_of::<StreamOffPrefix>() <= 64);
// The array lengths in the generated structs and the generated constants agree.
const _: fn(&StreamOffCfg) -> [u8; ST_OFF_CLAUSES] = |c| c.clause_mask;
const _: fn(&StreamOffPrefix) -> [u32; 4] = |p| p.mask;
