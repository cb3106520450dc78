//! The tenant ABI (`bpf/tenant/abi.h`) as Rust sees it: types generated
//! from the programs' BTF, with layout checks, and the `#define`s BTF
//! cannot carry, repeated next to the asserts that catch a drift.

use std::mem::size_of;

pub use rampart_bpf::xdp_tenant_acct::types::{tenant_dev_key as DevKey, tenant_truth as Truth};
pub use rampart_bpf::xdp_tenant_dispatch::types::{
    tenant_acct_cpu as AcctCpu, tenant_cfg as Cfg, tenant_global as Global,
    tenant_sel_key as SelKey, tenant_stats as Stats,
};

/// Tenant ids are `1..TENANT_MAX`; 0 collects packets of no tenant.
pub const TENANT_MAX: u32 = 64;
/// Redirect ports per tenant.
pub const TENANT_PORTS_MAX: u32 = 4;
/// Entries of the demultiplexer's LPM trie.
pub const TENANT_SEL_MAX: u32 = 4096;
/// Bits of the selector key before the value (ifindex + kind + pad).
pub const SEL_HDR_BITS: u32 = 64;
/// `TENANT_F_ACTIVE`.
pub const F_ACTIVE: u32 = 1;
/// Verdicts counted per tenant (XDP actions 0..=4).
pub const VERDICTS: usize = 5;
/// `RAMPART_REDIRECT_BASE`.
pub const REDIRECT_BASE: u32 = 0x100;

/// `enum tenant_sel_kind`.
pub mod sel_kind {
    /// IPv4 destination prefix.
    pub const PREFIX4: u8 = 1;
    /// IPv6 destination prefix.
    pub const PREFIX6: u8 = 2;
    /// 802.1Q/802.1ad VLAN id (outermost tag).
    pub const VLAN: u8 = 3;
    /// VXLAN network identifier.
    pub const VNI: u8 = 4;
    /// Anything else (matched by interface selectors only).
    pub const OTHER: u8 = 5;
}

/// `enum tenant_drop_reason`, in order: the names are metric labels.
pub const DROP_REASONS: [&str; 6] = [
    "no_tokens",
    "aborted",
    "bad_redirect",
    "selector_changed",
    "default",
    "malformed",
];
/// Index of `TDROP_NO_TOKENS`.
pub const DROP_NO_TOKENS: usize = 0;
/// Index of `TDROP_ABORTED`.
pub const DROP_ABORTED: usize = 1;
/// Index of `TDROP_BAD_REDIRECT`.
pub const DROP_BAD_REDIRECT: usize = 2;
/// Index of `TDROP_SELECTOR_CHANGED`.
pub const DROP_SELECTOR_CHANGED: usize = 3;
/// Index of `TDROP_DEFAULT`.
pub const DROP_DEFAULT: usize = 4;
/// Index of `TDROP_MALFORMED`.
pub const DROP_MALFORMED: usize = 5;

/// XDP action names, indexed by action (the verdict counters).
pub const VERDICT_NAMES: [&str; VERDICTS] = ["aborted", "drop", "pass", "tx", "redirect"];

const _: () = assert!(size_of::<SelKey>() == 28);
const _: () = assert!(size_of::<Cfg>() == 8);
const _: () = assert!(size_of::<Global>() == 24);
const _: () = assert!(size_of::<Stats>() == 8 * (4 + VERDICTS + DROP_REASONS.len()));
const _: () = assert!(size_of::<AcctCpu>() == 80);
const _: () = assert!(size_of::<DevKey>() == 8);
const _: () = assert!(size_of::<Truth>() == 48);

/// Read a BTF-generated ABI struct from map bytes.
///
/// # Panics
/// If `bytes` is shorter than `T`.
pub(crate) fn read<T: AbiPod>(bytes: &[u8]) -> T {
    assert!(
        bytes.len() >= size_of::<T>(),
        "map value shorter than {}",
        std::any::type_name::<T>()
    );
    // SAFETY: length checked; `T: AbiPod` is plain integers/arrays valid for any bit pattern.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
}

/// View an ABI struct as bytes (map keys and values).
pub(crate) fn bytes<T: AbiPod>(v: &T) -> &[u8] {
    // SAFETY: `T: AbiPod` has no padding-dependent invariants; the slice borrows `v`.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

/// ABI structs made only of integers and byte arrays (valid for any bit pattern).
///
/// # Safety
/// Only for `repr(C)` types without pointers, references or enums.
pub(crate) unsafe trait AbiPod: Copy {}
// SAFETY: generated from BTF; integers and byte arrays only.
unsafe impl AbiPod for Stats {}
// SAFETY: as above.
unsafe impl AbiPod for Truth {}
// SAFETY: as above.
unsafe impl AbiPod for SelKey {}
// SAFETY: as above.
unsafe impl AbiPod for Cfg {}
// SAFETY: as above.
unsafe impl AbiPod for Global {}
// SAFETY: as above.
unsafe impl AbiPod for DevKey {}
// SAFETY: as above.
unsafe impl AbiPod for AcctCpu {}
// SAFETY: integers.
unsafe impl AbiPod for u32 {}
// SAFETY: integers.
unsafe impl AbiPod for u64 {}
