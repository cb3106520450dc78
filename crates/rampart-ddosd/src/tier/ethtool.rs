//! `ethtool-ntuple`: Flow Director–style receive classification rules that
//! drop a source or a prefix in the NIC (`ethtool -N IF flow-type ip4 src-ip A
//! m MASK action -1`),
//! through the `SIOCETHTOOL` ioctl (`ETHTOOL_SRXCLSRLINS` / `SRXCLSRLDEL`).
//!
//! **No per-rule counters.** ntuple rules have none, so a source held here
//! disappears from every counter. The daemon then estimates its rate by
//! *withdrawal probes*: because the XDP blacklist always holds every
//! blocked source (the zero-leak rule), removing one ntuple rule for one
//! interval lets nothing through — XDP drops and counts that source's
//! packets, which measures its current rate; the rule is then re-installed
//! if the planner still ranks it in the top K. Between probes a source's
//! rate is the last measured value. With U probes per interval
//! (`hw.probes_per_interval`) the oldest measurement is about K/U intervals
//! old. (`Daemon::estimate_counterless` and `Daemon::offload`; tested with
//! the EMULATED NIC's counters hidden, `hw.counters = false`.)
//!
//! veth (this VM) has no ntuple filters: [`EthtoolNtuple::open`] asks the
//! driver for its rule count (`ETHTOOL_GRXCLSRLCNT`) and refuses with the
//! driver's answer.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net};

use rampart_ddos::Prefix;

use super::{CounterKind, Counts, Tier, TierInfo};
use crate::error::{Error, Result};

/// `ETHTOOL_GRXCLSRLCNT`.
pub const ETHTOOL_GRXCLSRLCNT: u32 = 0x2e;
/// `ETHTOOL_SRXCLSRLDEL`.
pub const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
/// `ETHTOOL_SRXCLSRLINS`.
pub const ETHTOOL_SRXCLSRLINS: u32 = 0x32;
/// `IPV4_USER_FLOW`.
pub const IPV4_USER_FLOW: u32 = 0x0d;
/// `RX_CLS_FLOW_DISC`: drop.
pub const RX_CLS_FLOW_DISC: u64 = u64::MAX;
/// `sizeof(struct ethtool_rxnfc)` on 64-bit Linux (without the flexible rule_locs).
pub const RXNFC_LEN: usize = 192;
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// Offsets in `struct ethtool_rxnfc` (x86_64 / aarch64).
mod off {
    pub const CMD: usize = 0;
    pub const FLOW_TYPE: usize = 4;
    pub const FS: usize = 16; // struct ethtool_rx_flow_spec
    pub const FS_FLOW_TYPE: usize = FS;
    pub const FS_H_U: usize = FS + 4; // union ethtool_flow_union (52 bytes)
    pub const FS_M_U: usize = FS + 4 + 52 + 20; // after h_u and h_ext
    pub const FS_RING_COOKIE: usize = FS + 152;
    pub const FS_LOCATION: usize = FS + 160;
    pub const RULE_CNT: usize = 184;
}

/// `ETHTOOL_SRXCLSRLINS` of "drop IPv4 sources in `src`" at rule `location`.
pub fn insert_rule_bytes(src: Ipv4Net, location: u32) -> [u8; RXNFC_LEN] {
    let src = src.trunc();
    let mut b = [0u8; RXNFC_LEN];
    b[off::CMD..off::CMD + 4].copy_from_slice(&ETHTOOL_SRXCLSRLINS.to_ne_bytes());
    b[off::FLOW_TYPE..off::FLOW_TYPE + 4].copy_from_slice(&IPV4_USER_FLOW.to_ne_bytes());
    b[off::FS_FLOW_TYPE..off::FS_FLOW_TYPE + 4].copy_from_slice(&IPV4_USER_FLOW.to_ne_bytes());
    // struct ethtool_usrip4_spec { be32 ip4src; be32 ip4dst; be32 l4_4_bytes; u8 tos; u8 ip_ver; u8 proto; }
    b[off::FS_H_U..off::FS_H_U + 4].copy_from_slice(&src.addr().octets());
    b[off::FS_H_U + 13] = 1; // ETH_RX_NFC_IP4
                             // The kernel's mask: set bits must match (the ethtool command line's
                             // `m` is the inverse, bits to ignore).
    b[off::FS_M_U..off::FS_M_U + 4].copy_from_slice(&src.netmask().octets());
    b[off::FS_RING_COOKIE..off::FS_RING_COOKIE + 8]
        .copy_from_slice(&RX_CLS_FLOW_DISC.to_ne_bytes());
    b[off::FS_LOCATION..off::FS_LOCATION + 4].copy_from_slice(&location.to_ne_bytes());
    b
}

/// `ETHTOOL_SRXCLSRLDEL` of rule `location`.
pub fn delete_rule_bytes(location: u32) -> [u8; RXNFC_LEN] {
    let mut b = [0u8; RXNFC_LEN];
    b[off::CMD..off::CMD + 4].copy_from_slice(&ETHTOOL_SRXCLSRLDEL.to_ne_bytes());
    b[off::FS_LOCATION..off::FS_LOCATION + 4].copy_from_slice(&location.to_ne_bytes());
    b
}

/// Run one `SIOCETHTOOL` on `iface` in the calling thread's namespace.
fn ioctl(iface: &str, data: &mut [u8; RXNFC_LEN]) -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: plain socket(2); owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        data: *mut u8,
        _pad: [u8; 16],
    }
    let mut req = IfReq {
        name: [0; 16],
        data: data.as_mut_ptr(),
        _pad: [0; 16],
    };
    let n = iface.len().min(15);
    req.name[..n].copy_from_slice(&iface.as_bytes()[..n]);
    // SAFETY: `req` is a valid ifreq whose data points at a buffer of the
    // size the kernel reads/writes for these commands.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfReq) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// ntuple drop rules on one interface.
#[derive(Debug)]
pub struct EthtoolNtuple {
    netns: Option<String>,
    iface: String,
    capacity: usize,
    locs: HashMap<Ipv4Net, u32>,
}

impl EthtoolNtuple {
    /// Ask the driver for its classification rules; refuse when it has none.
    ///
    /// # Errors
    /// [`Error::Unsupported`] with the driver's answer (veth: "Operation not supported").
    pub fn open(netns: Option<&str>, iface: &str, capacity: usize) -> Result<Self> {
        let where_ = match netns {
            Some(ns) => format!("{iface} (netns {ns})"),
            None => iface.to_string(),
        };
        let name = iface.to_string();
        let r = rampart_dataplane::netns::run_in(netns, move || {
            let mut b = [0u8; RXNFC_LEN];
            b[..4].copy_from_slice(&ETHTOOL_GRXCLSRLCNT.to_ne_bytes());
            Ok(ioctl(&name, &mut b).map(|()| {
                u32::from_ne_bytes(
                    b[off::RULE_CNT..off::RULE_CNT + 4]
                        .try_into()
                        .unwrap_or_default(),
                )
            }))
        })?;
        if let Err(e) = r {
            return Err(Error::Unsupported {
                tier: "ethtool-ntuple",
                where_,
                reason: format!(
                    "the driver has no ntuple (Flow Director) rules: ETHTOOL_GRXCLSRLCNT failed with \"{e}\"; \
                     use a NIC whose driver supports `ethtool -N {iface} flow-type ip4 ... action -1`, or the `emulated` tier in the lab"
                ),
            });
        }
        Ok(Self {
            netns: netns.map(str::to_string),
            iface: iface.to_string(),
            capacity,
            locs: HashMap::new(),
        })
    }

    fn call(&self, mut b: [u8; RXNFC_LEN]) -> Result<()> {
        let name = self.iface.clone();
        rampart_dataplane::netns::run_in(self.netns.as_deref(), move || Ok(ioctl(&name, &mut b)))?
            .map_err(|e| Error::io(format!("ethtool ntuple on {}", self.iface), e))
    }
}

impl Tier for EthtoolNtuple {
    fn info(&self) -> TierInfo {
        TierInfo {
            name: "ethtool-ntuple",
            role: "hw",
            location: self.iface.clone(),
            capacity: Some(self.capacity),
            update_cost: Duration::from_millis(2),
            counters: CounterKind::None,
            emulated: false,
        }
    }

    fn install(&mut self, add: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in add {
            let IpNet::V4(a) = p.net() else {
                return Err(Error::Refused {
                    tier: "ethtool-ntuple",
                    prefix: p.to_string(),
                    reason: "rampart installs IPv4 ntuple rules only; IPv6 sources stay in XDP"
                        .into(),
                });
            };
            if self.locs.contains_key(&a) {
                continue;
            }
            let used: std::collections::HashSet<u32> = self.locs.values().copied().collect();
            let Some(loc) = (0..self.capacity as u32).find(|l| !used.contains(l)) else {
                return Err(Error::Full {
                    tier: "ethtool-ntuple",
                    capacity: self.capacity,
                });
            };
            self.call(insert_rule_bytes(a, loc))?;
            self.locs.insert(a, loc);
            n += 1;
        }
        Ok(n)
    }

    fn remove(&mut self, remove: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in remove {
            if let IpNet::V4(a) = p.net() {
                if let Some(loc) = self.locs.get(&a).copied() {
                    self.call(delete_rule_bytes(loc))?;
                    self.locs.remove(&a);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    fn rules(&self) -> Result<Vec<(Prefix, Counts)>> {
        // No counters: zero, and the daemon probes by withdrawal (module docs).
        Ok(self
            .locs
            .keys()
            .map(|a| {
                (
                    Prefix::truncate(IpAddr::V4(a.addr()), a.prefix_len()),
                    Counts::default(),
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_rule_layout() {
        let b = insert_rule_bytes("192.0.2.1/32".parse().unwrap(), 17);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 0x32);
        assert_eq!(
            u32::from_ne_bytes(b[16..20].try_into().unwrap()),
            IPV4_USER_FLOW
        );
        assert_eq!(&b[20..24], &[192, 0, 2, 1]);
        assert_eq!(b[33], 1, "ip_ver = ETH_RX_NFC_IP4");
        assert_eq!(&b[92..96], &[0xff; 4], "source mask");
        assert!(b[96..168].iter().all(|&x| x == 0), "nothing else matched");
        assert_eq!(
            u64::from_ne_bytes(b[168..176].try_into().unwrap()),
            u64::MAX,
            "action drop"
        );
        assert_eq!(u32::from_ne_bytes(b[176..180].try_into().unwrap()), 17);
        let p = insert_rule_bytes("198.51.100.9/24".parse().unwrap(), 3);
        assert_eq!(&p[20..24], &[198, 51, 100, 0], "host bits cleared");
        assert_eq!(&p[92..96], &[255, 255, 255, 0], "the prefix's netmask");
        let d = delete_rule_bytes(17);
        assert_eq!(u32::from_ne_bytes(d[0..4].try_into().unwrap()), 0x31);
        assert_eq!(u32::from_ne_bytes(d[176..180].try_into().unwrap()), 17);
    }
}
