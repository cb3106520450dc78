//! `bpf/tenant/abi.h`: the tenant infrastructure's selectors, configuration,
//! statistics and accounting state.

use std::mem::size_of;

include!(concat!(env!("OUT_DIR"), "/abi_tenant.rs"));

pub use crate::xdp_tenant_acct::types::{tenant_dev_key as DevKey, tenant_truth as Truth};
pub use crate::xdp_tenant_dispatch::types::{
    tenant_acct_cpu as AcctCpu, tenant_cfg as Cfg, tenant_global as Global,
    tenant_sel_key as SelKey, tenant_stats as Stats,
};

pod!(DevKey, Truth, AcctCpu, Cfg, Global, SelKey, Stats);

/// The metric label of each counted verdict: the kernel's `enum xdp_action`
/// (`XDP_ABORTED` = 0 … `XDP_REDIRECT` = 4), lower-cased without `XDP_`.
pub const VERDICT_LABELS: [&str; TENANT_VERDICTS] = ["aborted", "drop", "pass", "tx", "redirect"];

const _: () = assert!(size_of::<SelKey>() == 28);
const _: () = assert!(size_of::<Cfg>() == 8);
const _: () = assert!(size_of::<Global>() == 24);
const _: () = assert!(size_of::<Stats>() == 8 * (4 + TENANT_VERDICTS + TDROP_MAX));
const _: () = assert!(size_of::<AcctCpu>() == 80);
const _: () = assert!(size_of::<DevKey>() == 8);
const _: () = assert!(size_of::<Truth>() == 48);
