//! Ready-to-use tenant services (after Chaignon et al., SecSoN 2018, §5): C sources
//! a tenant submits like any other program, and the layouts of the maps
//! through which it configures them.
//!
//! - [`DNS_RATELIMIT_C`] (`bpf/tenant/api/programs/dns_ratelimit.c`): per-source
//!   and per-prefix query budgets for a DNS server; over budget, an empty
//!   TC=1 answer (XDP_TX) or a drop; exempt prefixes.
//! - [`SYNPROXY_C`] (`bpf/tenant/api/programs/synproxy.c`): SYN cookies in XDP
//!   (SYN → SYN-ACK with the kernel's cookie, XDP_TX); an ACK reaches the
//!   server only with a valid cookie or on an already validated flow.
//!
//! A tenant configures a service by name: `PUT /v1/config/dns` and
//! `PUT /v1/config/synproxy` (`rampart tenant config dns|synproxy`, the
//! fields in [`crate::settings`]), which write these maps; the host's own
//! tools and tests call [`DnsLimits::apply`] on the map fds the host agent
//! hands out.

use std::net::IpAddr;
use std::os::fd::RawFd;

use serde::Serialize;

use crate::error::{Error, Result};

/// The DNS rate limiter's source.
pub const DNS_RATELIMIT_C: &str = include_str!("../../../bpf/tenant/api/programs/dns_ratelimit.c");
/// The SYN-cookie proxy's source.
pub const SYNPROXY_C: &str = include_str!("../../../bpf/tenant/api/programs/synproxy.c");

/// Limits of the DNS rate limiter (`struct dns_cfg` plus the exempt list).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsLimits {
    /// Queries per second per source address (0: no per-source limit).
    pub src_qps: f64,
    /// Queries a source may send at once (≥ 1).
    pub src_burst: u32,
    /// Queries per second per source prefix (0: no per-prefix limit).
    pub pfx_qps: f64,
    /// Burst per prefix (≥ 1).
    pub pfx_burst: u32,
    /// Over budget: answer TC=1 (true) or drop (false).
    pub truncate: bool,
    /// IPv4 prefix length of the per-prefix budget (1..=32).
    pub v4_plen: u8,
    /// IPv6 prefix length of the per-prefix budget (1..=64).
    pub v6_plen: u8,
    /// Sources never limited: (network, prefix length).
    pub exempt: Vec<(IpAddr, u8)>,
}

impl Default for DnsLimits {
    fn default() -> Self {
        Self {
            src_qps: 10.0,
            src_burst: 20,
            pfx_qps: 100.0,
            pfx_burst: 200,
            truncate: true,
            v4_plen: 24,
            v6_plen: 56,
            exempt: Vec::new(),
        }
    }
}

/// Counters of the DNS rate limiter (`enum dns_stat`), summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DnsStats {
    /// Queries within budget, passed to the server.
    pub passed: u64,
    /// Over budget, answered TC=1.
    pub truncated: u64,
    /// Over budget, dropped.
    pub dropped: u64,
    /// From exempt sources, passed.
    pub exempt: u64,
    /// UDP/53 that is no DNS query (short, QR=1, bad UDP length), dropped.
    pub malformed: u64,
    /// Not UDP/53, passed.
    pub other: u64,
    /// Frames the parser refused, dropped.
    pub bad_frame: u64,
}

/// GCRA interval and tolerance (ns) of a rate and burst checked by
/// [`DnsLimits::validate`] (0 queries/s: no limit).
fn gcra(qps: f64, burst: u32) -> (u64, u64) {
    if qps == 0.0 {
        return (0, 0);
    }
    let interval = (1e9 / qps).round().max(1.0) as u64;
    (interval, interval * u64::from(burst.max(1) - 1))
}

impl DnsLimits {
    /// Check the limits.
    ///
    /// # Errors
    /// A rate or prefix length out of range.
    pub fn validate(&self) -> Result<()> {
        // The named fields' ranges: the message names the field.
        crate::settings::DnsSettings::from(self).validate()
    }

    /// The value of `dns_cfg[0]` (`struct dns_cfg`, 48 bytes, host order).
    ///
    /// # Errors
    /// Invalid limits.
    pub fn cfg_value(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let (si, st) = gcra(self.src_qps, self.src_burst);
        let (pi, pt) = gcra(self.pfx_qps, self.pfx_burst);
        let mut v = Vec::with_capacity(48);
        for x in [si, st, pi, pt] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        for x in [
            u32::from(self.truncate),
            u32::from(self.v4_plen),
            u32::from(self.v6_plen),
            0,
        ] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        Ok(v)
    }

    /// Key of `dns_exempt` for one prefix (`struct dns_exempt_key`, 24 bytes).
    pub fn exempt_key(addr: IpAddr, plen: u8) -> Vec<u8> {
        let mut k = Vec::with_capacity(24);
        k.extend_from_slice(&(32 + u32::from(plen)).to_ne_bytes());
        let (fam, bytes) = match addr {
            IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                (4u8, b)
            }
            IpAddr::V6(a) => (6u8, a.octets()),
        };
        k.extend_from_slice(&[fam, 0, 0, 0]);
        k.extend_from_slice(&bytes);
        k
    }

    /// Write the limits into a running rate limiter's maps (`dns_cfg`,
    /// `dns_exempt`). Exempt prefixes are added (existing ones stay).
    ///
    /// # Errors
    /// Invalid limits (nothing written) or a failing map update.
    pub fn apply(&self, cfg_fd: RawFd, exempt_fd: RawFd) -> Result<()> {
        let v = self.cfg_value()?;
        for (a, l) in &self.exempt {
            rampart_dataplane::maps::update_raw(
                exempt_fd,
                &Self::exempt_key(*a, *l),
                &1u32.to_ne_bytes(),
                0,
            )
            .map_err(|e| Error::Invalid(format!("writing dns_exempt: {e}")))?;
        }
        rampart_dataplane::maps::update_raw(cfg_fd, &0u32.to_ne_bytes(), &v, 0)
            .map_err(|e| Error::Invalid(format!("writing dns_cfg: {e}")))
    }
}

/// Sum a per-CPU array of u64 counters, entries `0..n`.
///
/// # Errors
/// A failing lookup.
pub fn percpu_counters(fd: RawFd, n: u32) -> Result<Vec<u64>> {
    (0..n)
        .map(|k| Ok(rampart_dataplane::maps::lookup_percpu_u64_sum(fd, k)?))
        .collect()
}

impl DnsStats {
    /// Read `dns_stats`.
    ///
    /// # Errors
    /// A failing lookup.
    pub fn read(fd: RawFd) -> Result<Self> {
        let c = percpu_counters(fd, 7)?;
        Ok(Self {
            passed: c[0],
            truncated: c[1],
            dropped: c[2],
            exempt: c[3],
            malformed: c[4],
            other: c[5],
            bad_frame: c[6],
        })
    }
}

/// Settings of the SYN-cookie proxy (`struct syn_cfg` plus the protected ports).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SynProxyConfig {
    /// MSS announced in SYN-ACKs over IPv4.
    pub mss4: u16,
    /// MSS announced over IPv6.
    pub mss6: u16,
    /// Window scale announced (0..=14); match the server's (Linux: 7).
    pub wscale: u8,
    /// TTL / hop limit of SYN-ACKs.
    pub ttl: u8,
    /// TCP ports protected.
    pub ports: Vec<u16>,
}

impl Default for SynProxyConfig {
    fn default() -> Self {
        Self {
            mss4: 1460,
            mss6: 1440,
            wscale: 7,
            ttl: 64,
            ports: vec![80],
        }
    }
}

impl SynProxyConfig {
    /// The value of `syn_cfg[0]` (8 bytes, host order).
    ///
    /// # Errors
    /// Values out of range.
    pub fn cfg_value(&self) -> Result<Vec<u8>> {
        crate::settings::SynSettings::from(self).validate()?;
        let mut v = Vec::with_capacity(8);
        v.extend_from_slice(&self.mss4.to_ne_bytes());
        v.extend_from_slice(&self.mss6.to_ne_bytes());
        v.extend_from_slice(&[self.wscale, self.ttl, 0, 0]);
        Ok(v)
    }

    /// Write the settings into a running proxy's maps (`syn_cfg`, `syn_ports`; ports are added).
    ///
    /// # Errors
    /// Invalid settings (nothing written) or a failing map update.
    pub fn apply(&self, cfg_fd: RawFd, ports_fd: RawFd) -> Result<()> {
        let v = self.cfg_value()?;
        for p in &self.ports {
            rampart_dataplane::maps::update_raw(ports_fd, &p.to_ne_bytes(), &[1], 0)
                .map_err(|e| Error::Invalid(format!("writing syn_ports: {e}")))?;
        }
        rampart_dataplane::maps::update_raw(cfg_fd, &0u32.to_ne_bytes(), &v, 0)
            .map_err(|e| Error::Invalid(format!("writing syn_cfg: {e}")))
    }
}

/// Counters of the SYN-cookie proxy (`enum syn_stat`), summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SynStats {
    /// SYNs answered with a cookie SYN-ACK.
    pub synacks: u64,
    /// ACKs with a valid cookie (flow opened, passed).
    pub ack_valid: u64,
    /// ACKs of no flow with a wrong cookie (dropped).
    pub ack_invalid: u64,
    /// Packets of validated flows (passed).
    pub flow: u64,
    /// Malformed SYNs (options, checksums, payload), dropped.
    pub bad_syn: u64,
    /// Anything else to a protected port, dropped.
    pub other_drop: u64,
    /// Not TCP to a protected port, passed.
    pub unprotected: u64,
}

impl SynStats {
    /// Read `syn_stats`.
    ///
    /// # Errors
    /// A failing lookup.
    pub fn read(fd: RawFd) -> Result<Self> {
        let c = percpu_counters(fd, 7)?;
        Ok(Self {
            synacks: c[0],
            ack_valid: c[1],
            ack_invalid: c[2],
            flow: c[3],
            bad_syn: c[4],
            other_drop: c[5],
            unprotected: c[6],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cfg_layout_and_gcra() {
        let l = DnsLimits {
            src_qps: 10.0,
            src_burst: 3,
            pfx_qps: 0.0,
            ..DnsLimits::default()
        };
        let v = l.cfg_value().unwrap();
        assert_eq!(v.len(), 48);
        assert_eq!(u64::from_ne_bytes(v[0..8].try_into().unwrap()), 100_000_000);
        assert_eq!(
            u64::from_ne_bytes(v[8..16].try_into().unwrap()),
            200_000_000
        );
        assert_eq!(u64::from_ne_bytes(v[16..24].try_into().unwrap()), 0);
        assert_eq!(u32::from_ne_bytes(v[32..36].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(v[36..40].try_into().unwrap()), 24);
    }

    #[test]
    fn bad_limits_are_refused() {
        for l in [
            DnsLimits {
                src_burst: 0,
                ..DnsLimits::default()
            },
            DnsLimits {
                src_qps: -1.0,
                ..DnsLimits::default()
            },
            DnsLimits {
                v6_plen: 65,
                ..DnsLimits::default()
            },
            DnsLimits {
                exempt: vec![("10.0.0.0".parse().unwrap(), 33)],
                ..DnsLimits::default()
            },
        ] {
            assert!(l.cfg_value().is_err(), "{l:?}");
        }
    }

    #[test]
    fn exempt_key_layout() {
        let k = DnsLimits::exempt_key("10.1.2.0".parse().unwrap(), 24);
        assert_eq!(k.len(), 24);
        assert_eq!(u32::from_ne_bytes(k[0..4].try_into().unwrap()), 56);
        assert_eq!(&k[4..12], &[4, 0, 0, 0, 10, 1, 2, 0]);
    }
}
