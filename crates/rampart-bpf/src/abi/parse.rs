//! What `bpf/common/parse.h` produces (`bpf/common/abi.h`): `struct
//! pkt_info` and the parse enums from the probe's BTF, the `#define`d limits
//! BTF cannot carry, and layout checks. The userspace mirror of the parser
//! (`rampart_stream::parse`) fills the same struct.

use std::mem::size_of;

pub use crate::xdp_parse_probe::types::{
    parse_encap as Encap, parse_frag as Frag, parse_limits as Limits, parse_shim as Shim,
    parse_status as Status, pkt_info as PktInfo,
};

/// `PARSE_VLAN_IDS`: VLAN ids kept in `pkt_info.vlan_id`.
pub const PARSE_VLAN_IDS: usize = 2;
/// `PARSE_DEF_VLANS`: VLAN tags `parse_packet()` walks.
pub const PARSE_DEF_VLANS: u32 = 2;
/// `PARSE_DEF_V6_EXT`: IPv6 extension headers `parse_packet()` walks.
pub const PARSE_DEF_V6_EXT: u32 = 8;
/// `PARSE_MAX_VLANS`: ceiling of the VLAN limit.
pub const PARSE_MAX_VLANS: u32 = 8;
/// `PARSE_MAX_V6_EXT`: ceiling of the IPv6 extension header limit.
pub const PARSE_MAX_V6_EXT: u32 = 16;
/// `PARSE_MAX_MPLS`: MPLS labels walked.
pub const PARSE_MAX_MPLS: u32 = 8;
/// `PARSE_SHIM_PPPOE` bit of `pkt_info.shim`.
pub const PARSE_SHIM_PPPOE: u8 = Shim::PARSE_SHIM_PPPOE.0 as u8;
/// `PARSE_SHIM_MPLS` bit of `pkt_info.shim`.
pub const PARSE_SHIM_MPLS: u8 = Shim::PARSE_SHIM_MPLS.0 as u8;
/// Number of `enum parse_encap` values.
pub const PARSE_ENCAPS: usize = Encap::PARSE_ENCAP_MAX.0 as usize;

const _: () = assert!(size_of::<PktInfo>() == 60);
const _: () = assert!(size_of::<Limits>() == 4);
// The default limits lie within the ceilings the C loops are unrolled to.
const _: () = assert!(PARSE_DEF_VLANS <= PARSE_MAX_VLANS && PARSE_DEF_V6_EXT <= PARSE_MAX_V6_EXT);
