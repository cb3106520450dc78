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
            o => {
                return Err(format!(
                    "unknown mode {o:?}: use xdp-host, xdp-nic, hw+xdp-nic, hw+xdp-host or iptables"
                ))
            }
        })
    }
}
