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

/// What both directions of a connection sent in one epoch, but packets (`struct stream_agg_cnt`).
pub use crate::xdp_stream::types::stream_agg_cnt as StreamAggCnt;
/// The first 48 bytes of every aggregation slot: state word, counts (`struct stream_agg_head`).
pub use crate::xdp_stream::types::stream_agg_head as StreamAggHead;
/// An IPv4 connection (`struct stream_agg_key`).
pub use crate::xdp_stream::types::stream_agg_key as StreamAggKey;
/// An IPv6 connection (`struct stream_agg_key6`).
pub use crate::xdp_stream::types::stream_agg_key6 as StreamAggKey6;
/// A slot of the tap's IPv4 aggregation table (`struct stream_agg_slot`).
pub use crate::xdp_stream::types::stream_agg_slot as StreamAggSlot;
/// A slot of the tap's IPv6 aggregation table (`struct stream_agg_slot6`).
pub use crate::xdp_stream::types::stream_agg_slot6 as StreamAggSlot6;
/// The tap's settings (`struct stream_tap_cfg`, map `stream_tap_cfg[0]`).
pub use crate::xdp_stream::types::stream_tap_cfg as StreamTapCfg;

pod!(
    StreamTuple,
    StreamOffCfg,
    StreamOffPortRange,
    StreamOffPrefix,
    StreamAggCnt,
    StreamAggHead,
    StreamAggKey,
    StreamAggKey6,
    StreamAggSlot,
    StreamAggSlot6,
    StreamTapCfg,
);

const _: () = assert!(size_of::<StreamTuple>() == 56);
const _: () = assert!(std::mem::align_of::<StreamTuple>() == 8);
const _: () = assert!(size_of::<StreamOffCfg>() == 40);
const _: () = assert!(size_of::<StreamOffPortRange>() == 4);
const _: () = assert!(size_of::<StreamOffPrefix>() == 36);
const _: () = assert!(size_of::<StreamTapCfg>() == 24);
const _: () = assert!(size_of::<StreamAggKey>() == 16);
const _: () = assert!(size_of::<StreamAggKey6>() == 40);
const _: () = assert!(size_of::<StreamAggCnt>() == 40);
// Every slot starts with the head, whose state word (state + packets) is
// the first 8 bytes: both sides compare-and-swap it as one u64.
const _: () = assert!(size_of::<StreamAggHead>() == 48);
const _: () = assert!(std::mem::offset_of!(StreamAggHead, state) == 0);
const _: () = assert!(std::mem::offset_of!(StreamAggHead, packets) == 4);
// An IPv4 slot is one cache line, an IPv6 slot a pair; the key follows
// the head, 8-byte aligned (the program compares it as words).
const _: () = assert!(size_of::<StreamAggSlot>() == 64);
const _: () = assert!(std::mem::offset_of!(StreamAggSlot, h) == 0);
const _: () = assert!(std::mem::offset_of!(StreamAggSlot, key) == 48);
const _: () = assert!(size_of::<StreamAggSlot6>() == 128);
const _: () = assert!(std::mem::offset_of!(StreamAggSlot6, h) == 0);
const _: () = assert!(std::mem::offset_of!(StreamAggSlot6, key) == 48);
// The nfp profile: every map entry of the offload fits in 64 bytes.
const _: () = assert!(size_of::<StreamOffCfg>() <= 64 && size_of::<StreamOffPrefix>() <= 64);
// The array lengths in the generated structs and the generated constants agree.
const _: fn(&StreamOffCfg) -> [u8; ST_OFF_CLAUSES] = |c| c.clause_mask;
const _: fn(&StreamOffPrefix) -> [u32; 4] = |p| p.mask;
