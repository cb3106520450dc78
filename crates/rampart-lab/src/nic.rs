//! The lab's EMULATED SmartNIC: `xdp_nic_emul` on both veths of the `nic`
//! hop, forwarding at L2 and dropping sources its exact-match table holds
//! (the table handle, [`EmulatedNicTable`], is the product's: the ddos
//! daemon's `emulated` tier uses the same one). Everything the hybrid logic
//! does runs for real on this table; what it cannot stand for is the host
//! CPU a real NIC saves.

pub use rampart_dataplane::emulated_nic::{EmulatedNicTable, RuleStats};

use crate::error::Result;
use crate::topology::{Lab, NIC_WAN_IF};

/// Largest table the lab builds (real cards hold ~512–2K exact rules).
pub const MAX_CAPACITY: u32 = 65_536;

/// The table of `lab`'s EMULATED NIC (from its pins).
///
/// # Errors
/// [`crate::Error::NotUp`] when the lab (or its NIC) is not up.
pub fn open(lab: &Lab) -> Result<EmulatedNicTable> {
    lab.require_up()?;
    Ok(EmulatedNicTable::open_pinned(&lab.pin_dir().join("nic"))?)
}

/// The NIC hop of `lab` as the ddos daemon's config names it (`[hw] netns`,
/// `iface`): the EMULATED NIC's side facing the wire, where its table drops
/// and where the `xdp-nic` modes chain their filter in front of it.
pub fn hop(lab: &Lab) -> (String, &'static str) {
    (lab.nic_ns(), NIC_WAN_IF)
}
