//! `bpf/common/abi.h`: what `bpf/common/parse.h` produces — `struct
//! pkt_info`, the parse statuses, tunnel kinds and shim bits — and the depth
//! limits it walks. The userspace mirror of the parser
//! (`rampart_stream::parse`) fills the same struct.

use std::mem::size_of;

include!(concat!(env!("OUT_DIR"), "/abi_common.rs"));

/// The depth limits a program passes to `parse_packet_lim()` (`struct parse_limits`).
pub use crate::xdp_parse_probe::types::parse_limits as ParseLimits;
/// What the parser extracts from a frame (`struct pkt_info`).
pub use crate::xdp_parse_probe::types::pkt_info as PktInfo;

pod!(PktInfo, ParseLimits);

const _: () = assert!(size_of::<PktInfo>() == 60);
const _: () = assert!(size_of::<ParseLimits>() == 4);
// The array length in the generated struct and the generated constant agree.
const _: fn(&PktInfo) -> [u16; PARSE_VLAN_IDS] = |p| p.vlan_id;
// The default limits lie within the ceilings the C loops are unrolled to.
const _: () = assert!(PARSE_DEF_VLANS <= PARSE_MAX_VLANS && PARSE_DEF_V6_EXT <= PARSE_MAX_V6_EXT);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_status_labels_follow_the_enum() {
        assert_eq!(PARSE_STATUS_LABELS.len() as u32, PARSE_STATUS_MAX);
        assert_eq!(PARSE_STATUS_LABELS[PARSE_OK as usize], "ok");
        assert_eq!(PARSE_STATUS_LABELS[PARSE_NOT_IP as usize], "not_ip");
        assert_eq!(PARSE_STATUS_LABELS[PARSE_TOO_DEEP as usize], "too_deep");
    }

    #[test]
    fn encap_labels_follow_the_enum() {
        assert_eq!(PARSE_ENCAP_LABELS.len(), usize::from(PARSE_ENCAP_MAX));
        assert_eq!(
            PARSE_ENCAP_LABELS,
            ["none", "gre", "ipip", "vxlan", "geneve", "mpls"]
        );
    }
}
