//! Placement modes (the comparison in Miano et al., IEEE Access 2019).

use serde::{Deserialize, Serialize};

/// Where the blacklist and the hardware tier run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Mode {
    /// XDP filter on the host's interface; no hardware tier.
    #[default]
    #[serde(rename = "xdp-host")]
    XdpHost,
    /// XDP filter on the NIC hop (`[hw] iface`, `netns`), chained in front
    /// of the program the hop runs; features still read on the host.
    #[serde(rename = "xdp-nic")]
    XdpNic,
    /// Hardware table (top-K) + XDP filter on the NIC hop.
    #[serde(rename = "hw+xdp-nic")]
    HwXdpNic,
    /// Hardware table (top-K) + XDP filter on the host (the best in Miano et al., IEEE Access 2019).
    #[serde(rename = "hw+xdp-host")]
    HwXdpHost,
    /// Baseline: iptables raw PREROUTING + ipset on the host; the XDP
    /// stage only extracts features.
    #[serde(rename = "iptables")]
    Iptables,
    /// Probe the interface at start ([`probe`]): `hw+xdp-host` with the
    /// hardware tier the NIC has (TC flower offload, else ntuple filters),
    /// else `xdp-host`. Resolved once: a reload keeps what start chose.
    #[serde(rename = "auto")]
    Auto,
}

impl Mode {
    /// Config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Mode::XdpHost => "xdp-host",
            Mode::XdpNic => "xdp-nic",
            Mode::HwXdpNic => "hw+xdp-nic",
            Mode::HwXdpHost => "hw+xdp-host",
            Mode::Iptables => "iptables",
            Mode::Auto => "auto",
        }
    }

    /// Does the mode use a hardware tier?
    pub fn has_hw(self) -> bool {
        matches!(self, Mode::HwXdpNic | Mode::HwXdpHost)
    }

    /// Does the XDP blacklist run on the NIC hop?
    pub fn on_nic(self) -> bool {
        matches!(self, Mode::XdpNic | Mode::HwXdpNic)
    }

    /// Parse a config/CLI value.
    ///
    /// # Errors
    /// The allowed values.
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "xdp-host" => Mode::XdpHost,
            "xdp-nic" => Mode::XdpNic,
            "hw+xdp-nic" => Mode::HwXdpNic,
            "hw+xdp-host" => Mode::HwXdpHost,
            "iptables" => Mode::Iptables,
            "auto" => Mode::Auto,
            o => {
                return Err(format!(
                    "unknown mode {o:?}: use auto, xdp-host, xdp-nic, hw+xdp-nic, hw+xdp-host or iptables"
                ))
            }
        })
    }
}

/// What [`probe`] chose, and why (the line the daemon logs at start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probed {
    /// The mode to run.
    pub mode: Mode,
    /// The hardware tier's backend (`[hw] backend`), for `hw+xdp-host`.
    pub backend: Option<&'static str>,
    /// Why, for the log.
    pub reason: String,
}

/// Is an `ethtool -k` feature on (`on`, `on [fixed]`)?
fn feature_on(ethtool_k: &str, name: &str) -> Option<bool> {
    ethtool_k.lines().find_map(|l| {
        let (k, v) = l.trim().split_once(':')?;
        (k == name).then(|| v.trim().starts_with("on"))
    })
}

/// The mode for an interface whose `ethtool -k` prints `ethtool_k`: TC
/// flower offload (`hw-tc-offload`) first — per-rule counters, prefixes
/// as masks — then Flow Director / ntuple rules (`ntuple-filters`), else no
/// hardware tier.
pub fn choose(iface: &str, ethtool_k: &str) -> Probed {
    let tc = feature_on(ethtool_k, "hw-tc-offload");
    let ntuple = feature_on(ethtool_k, "ntuple-filters");
    let show = |v: Option<bool>| match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "absent",
    };
    if tc == Some(true) {
        return Probed {
            mode: Mode::HwXdpHost,
            backend: Some("tc-flower"),
            reason: format!("{iface} offloads TC flower (hw-tc-offload on): hardware tier tc-flower in front of XDP"),
        };
    }
    if ntuple == Some(true) {
        return Probed {
            mode: Mode::HwXdpHost,
            backend: Some("ethtool-ntuple"),
            reason: format!("{iface} has ntuple filters (ntuple-filters on, hw-tc-offload {}): hardware tier ethtool-ntuple in front of XDP", show(tc)),
        };
    }
    Probed {
        mode: Mode::XdpHost,
        backend: None,
        reason: format!(
            "{iface} offloads neither TC flower (hw-tc-offload {}) nor ntuple filters (ntuple-filters {}): no hardware tier, XDP on the host",
            show(tc),
            show(ntuple)
        ),
    }
}

/// Probe `iface` (in `netns`) with `ethtool -k` and [`choose`].
///
/// # Errors
/// `ethtool` missing or failing on the interface.
pub fn probe(netns: Option<&str>, iface: &str) -> rampart_dataplane::Result<Probed> {
    let out = match netns {
        Some(ns) => rampart_dataplane::cmd::in_ns(ns, "ethtool", &["-k", iface])?,
        None => rampart_dataplane::cmd::run("ethtool", &["-k", iface])?,
    };
    Ok(choose(iface, &out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_prefers_tc_flower_then_ntuple_then_none() {
        let veth = "Features for host0:\nntuple-filters: off [fixed]\nhw-tc-offload: off [fixed]\n";
        let p = choose("host0", veth);
        assert_eq!((p.mode, p.backend), (Mode::XdpHost, None));
        assert!(p.reason.contains("hw-tc-offload off"), "{}", p.reason);
        let cx = "ntuple-filters: on\nhw-tc-offload: on\n";
        assert_eq!(choose("eth0", cx).backend, Some("tc-flower"));
        let ixgbe = "ntuple-filters: on\nhw-tc-offload: off\n";
        let p = choose("eth0", ixgbe);
        assert_eq!(
            (p.mode, p.backend),
            (Mode::HwXdpHost, Some("ethtool-ntuple"))
        );
        let old = "rx-checksumming: on\n";
        assert!(choose("eth0", old).reason.contains("absent"));
        assert_eq!(Mode::parse("auto"), Ok(Mode::Auto));
    }
}
