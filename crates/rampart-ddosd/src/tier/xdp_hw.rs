//! `xdp-hw`: the whole filter offloaded to a SmartNIC's XDP (Netronome nfp,
//! the only upstream driver with `XDP_FLAGS_HW_MODE`).
//!
//! Offload needs the program loaded for the device (`prog_ifindex`) and a
//! driver that implements `XDP_SETUP_PROG_HW`. [`check`] reads the driver
//! (`ethtool -i`) and refuses every other driver with a message naming it;
//! rampart has no nfp to test a device-bound load of its filter on, so it
//! refuses on nfp too rather than claim an untested path.

use crate::error::{Error, Result};

/// Refuse with the reason (always, see the module docs).
///
/// # Errors
/// [`Error::Unsupported`].
pub fn check(netns: Option<&str>, iface: &str) -> Result<()> {
    let where_ = match netns {
        Some(ns) => format!("{iface} (netns {ns})"),
        None => iface.to_string(),
    };
    let out = match netns {
        Some(ns) => rampart_dataplane::cmd::in_ns(ns, "ethtool", &["-i", iface]),
        None => rampart_dataplane::cmd::run("ethtool", &["-i", iface]),
    };
    let driver = out
        .ok()
        .and_then(|o| {
            o.lines()
                .find_map(|l| l.strip_prefix("driver:").map(|d| d.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown".into());
    let reason = if driver == "nfp" {
        "the nfp driver offloads XDP, but rampart's filter has not been built and tested as a device-bound program; use mode xdp-host or xdp-nic".to_string()
    } else {
        format!(
            "driver {driver} lacks XDP hardware offload (XDP_FLAGS_HW_MODE is implemented only by Netronome nfp); \
             use mode xdp-host, xdp-nic or hw+xdp-host with the `emulated` tier in the lab"
        )
    };
    Err(Error::Unsupported {
        tier: "xdp-hw",
        where_,
        reason,
    })
}
