//! `bpf/ddos/abi.h`: the filter's tables, counters and reasons, and the
//! feature stage's interval records.

use std::mem::size_of;

include!(concat!(env!("OUT_DIR"), "/abi_ddos.rs"));

pub use crate::tp_completions::types::{
    ddos_compl_config as ComplConfig, ddos_compl_key as ComplKey,
};
pub use crate::xdp_features::types::{
    ddos_cookie_key as CookieKey, ddos_feat_addr6 as FeatAddr6, ddos_feat_config as FeatConfig,
    ddos_feat_ctl as FeatCtl, ddos_feat_stats as FeatStats, ddos_feat_val as FeatVal,
    ddos_protect_val as ProtectVal, ddos_victim_hll as VictimHll, ddos_victim_key as VictimKey,
    ddos_victim_val as VictimVal,
};
pub use crate::xdp_filter::types::{
    ddos_addr6 as Addr6, ddos_bl4_bucket as Bl4Bucket, ddos_bl4_table as Bl4Table,
    ddos_capture_ctl as CaptureCtl, ddos_capture_key as CaptureKey, ddos_capture_val as CaptureVal,
    ddos_counter as Counter, ddos_entry_meta as EntryMeta, ddos_evidence_rec as EvidenceRec,
    ddos_filter_config as FilterConfig, ddos_filter_ctl as FilterCtl,
    ddos_filter_stats as FilterStats, ddos_lpm4_key as Lpm4Key, ddos_lpm6_key as Lpm6Key,
    ddos_pkt_counter as PktCounter, ddos_police_key as PoliceKey, ddos_police_val as PoliceVal,
};

pod!(
    ComplConfig,
    ComplKey,
    CookieKey,
    ProtectVal,
    VictimKey,
    VictimHll,
    VictimVal,
    FeatAddr6,
    FeatConfig,
    FeatCtl,
    FeatStats,
    FeatVal,
    Addr6,
    Bl4Bucket,
    Bl4Table,
    Counter,
    EntryMeta,
    FilterConfig,
    FilterCtl,
    FilterStats,
    Lpm4Key,
    Lpm6Key,
    PktCounter,
    PoliceKey,
    PoliceVal,
    CaptureCtl,
    CaptureKey,
    CaptureVal,
    EvidenceRec,
);

const _: () = assert!(size_of::<Bl4Bucket>() == 4 * DDOS_BL4_SLOTS_PER_BUCKET);
const _: () = assert!(size_of::<Bl4Bucket>() == 2 * DDOS_BL4_N_SLOTS_PER_BUCKET);
// A narrow slot holds USED | dist (4 bits, < MAX_PROBES) << 11 | remainder (≤ 11 bits).
const _: () = assert!(DDOS_BL4_MAX_PROBES <= 16 && DDOS_BL4_NARROW_MAX_SHIFT <= 11);
const _: () = assert!(size_of::<Bl4Table>() == 24);
const _: () = assert!(size_of::<FilterCtl>() == 16 + 2 * 24 + 8 + 24);
const _: () = assert!(size_of::<Counter>() == 32);
const _: () = assert!(size_of::<EntryMeta>() == 24);
const _: () = assert!(size_of::<Lpm4Key>() == 8);
const _: () = assert!(size_of::<Lpm6Key>() == 20);
const _: () = assert!(size_of::<Addr6>() == 16);
const _: () = assert!(size_of::<PktCounter>() == 16);
const _: () = assert!(
    size_of::<FilterStats>() == 16 * (DDOS_DROP_REASON_MAX + DDOS_PASS_REASON_MAX) + 3 * 8 + 8
);
// The fast path's counters share the first cache line.
const _: () = assert!(std::mem::offset_of!(FilterStats, drop) == 16);
const _: () = assert!(size_of::<FilterConfig>() == 16);
const _: () = assert!(size_of::<PoliceKey>() == 20);
const _: () = assert!(size_of::<CaptureCtl>() == 8);
const _: () = assert!(size_of::<CaptureKey>() == 24);
// id, classes, sport + pad, first, every, pad; seen, sampled, ring_full.
const _: () = assert!(size_of::<CaptureVal>() == 24 + 3 * 8);
const _: () = assert!(size_of::<EvidenceRec>() == 24 + DDOS_CAPTURE_SNAPLEN as usize);
// lock, rate, burst, pad; tokens, last_ns, passed, dropped.
const _: () = assert!(size_of::<PoliceVal>() == 16 + 4 * 8);
const _: () = assert!(std::mem::offset_of!(PoliceVal, tokens) == 16);
// Refill: elapsed × rate plus a full bucket stays inside 64 bits.
const _: () = assert!(
    (DDOS_POLICE_IDLE_MAX_NS as u128) * (DDOS_POLICE_MAX_PPS as u128)
        + (DDOS_POLICE_MAX_PPS as u128) * (DDOS_POLICE_NS as u128)
        < u64::MAX as u128
);
// The longest fill (the smallest bucket at 1 pps) is inside the idle clamp.
const _: () = assert!((DDOS_POLICE_BURST_MIN as u64) * DDOS_POLICE_NS < DDOS_POLICE_IDLE_MAX_NS);
const _: () = assert!(size_of::<FeatAddr6>() == 32);
// seed and caps, parse limits, victim caps and sampling, amplification ports.
const _: () = assert!(size_of::<FeatConfig>() == 16 + 4 + 12 + 2 * DDOS_UDP_CLASSES);
const _: () = assert!(size_of::<FeatVal>() == 80);
const _: () = assert!(size_of::<FeatCtl>() == 16);
const _: () = assert!(size_of::<FeatStats>() == 8 * (2 + DDOS_FEAT_SKIP_MAX + 4));
const _: () =
    assert!(size_of::<VictimVal>() == 16 + 4 * (11 + DDOS_PROT_EVENT_MAX) + 12 * DDOS_UDP_CLASSES);
const _: () = assert!(size_of::<VictimHll>() == 2 * DDOS_HLL_REGISTERS);
const _: () = assert!(size_of::<VictimKey>() == 16);
const _: () = assert!(size_of::<ProtectVal>() == 8 + 9 * 8);
const _: () = assert!(size_of::<CookieKey>() == 16);
const _: () = assert!(size_of::<ComplKey>() == 36);
const _: () = assert!(size_of::<ComplConfig>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_labels_are_the_member_names() {
        assert_eq!(
            DDOS_DROP_REASON_LABELS,
            [
                "blacklist",
                "blacklist_prefix",
                "truncated",
                "bad_header",
                "too_deep",
                "encap",
                "policed"
            ]
        );
        assert_eq!(
            DDOS_PASS_REASON_LABELS,
            [
                "clean",
                "not_ip",
                "malformed",
                "encap_gre",
                "encap_ipip",
                "encap_vxlan",
                "encap_geneve",
                "encap_mpls"
            ]
        );
        assert_eq!(
            DDOS_FEAT_SKIP_LABELS,
            ["not_ip", "malformed", "table_full", "protected"]
        );
        assert_eq!(
            DDOS_DROP_REASON_LABELS[DDOS_DROP_BLACKLIST_PREFIX],
            "blacklist_prefix"
        );
    }
}
