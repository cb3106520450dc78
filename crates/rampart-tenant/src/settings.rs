//! The tenant services' settings by name: what `GET|PUT /v1/config/dns`,
//! `GET|PUT /v1/config/synproxy` and `rampart tenant config dns|synproxy`
//! carry, so a tenant never packs `struct dns_cfg` or `struct syn_cfg` by
//! hand.
//!
//! A PUT names only the fields it changes; the others keep their current
//! values, read back from the service's own maps (the maps are the truth:
//! they survive restarts and a tenant may still write them directly).
//! Every field is checked on its own, so the CLI refuses a bad flag before
//! any request with the same one-line message the API would return.

use std::net::IpAddr;
use std::os::fd::RawFd;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{Error, Result};
use crate::programs::{DnsLimits, SynProxyConfig};

/// What the DNS limiter does with a query over budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DnsMode {
    /// Answer with an empty TC=1 reply: a real resolver retries over TCP.
    Truncate,
    /// Drop the query.
    Drop,
}

impl std::str::FromStr for DnsMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "truncate" => Ok(Self::Truncate),
            "drop" => Ok(Self::Drop),
            _ => Err(Error::Invalid(format!(
                "mode {s:?}: allowed truncate (answer TC=1) or drop"
            ))),
        }
    }
}

/// The DNS rate limiter's settings (`dns_ratelimit.c`). In a PUT every
/// field is optional; a GET fills them all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DnsSettings {
    /// Queries per second per source address: 0 (no limit) or 0.001..=1000000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_source_qps: Option<f64>,
    /// Queries a source may send at once: 1..=1000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_source_burst: Option<i64>,
    /// Queries per second per source prefix: 0 (no limit) or 0.001..=1000000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_prefix_qps: Option<f64>,
    /// Queries a prefix may send at once: 1..=1000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_prefix_burst: Option<i64>,
    /// Over budget: `truncate` (empty TC=1 answer) or `drop`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<DnsMode>,
    /// The per-prefix budget's IPv4 prefix length: 1..=32.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_len_v4: Option<i64>,
    /// The per-prefix budget's IPv6 prefix length: 1..=64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_len_v6: Option<i64>,
    /// Sources never limited (`ADDR/LEN`, or an address), replacing the list; at most 1024.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exempt: Option<Vec<String>>,
}

impl rampart_service::JsonBody for DnsSettings {
    const EXAMPLE: &'static str = r#"{"per_source_qps": 10, "per_source_burst": 20, "mode": "truncate", "exempt": ["192.0.2.0/24"]}"#;
}

/// Largest rate, queries/s (one query per ns).
const QPS_MAX: f64 = 1e9;
/// Smallest non-zero rate, queries/s (one per 1000 s).
const QPS_MIN: f64 = 0.001;
const BURST_MAX: i64 = 1_000_000;
/// `dns_exempt`'s max_entries.
const EXEMPT_MAX: usize = 1024;
/// `syn_ports`' max_entries.
const PORTS_MAX: usize = 64;

fn check_qps(field: &str, v: f64) -> Result<()> {
    if v == 0.0 || (v.is_finite() && (QPS_MIN..=QPS_MAX).contains(&v)) {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "{field} {v}: allowed 0 (no limit) or {QPS_MIN}..=1000000000 queries/s"
    )))
}

fn check_int(field: &str, v: i64, lo: i64, hi: i64, unit: &str) -> Result<()> {
    if (lo..=hi).contains(&v) {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "{field} {v}: allowed {lo}..={hi}{unit}"
    )))
}

/// `ADDR/LEN` or a bare address (a host prefix).
fn parse_exempt(s: &str) -> Result<(IpAddr, u8)> {
    let bad = || {
        Error::Invalid(format!(
            "exempt {s:?}: allowed ADDR/LEN prefixes, LEN within 0..=32 (IPv4) or 0..=128 (IPv6)"
        ))
    };
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.trim().parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        Some(l) => l.trim().parse::<u8>().map_err(|_| bad())?,
        None => max,
    };
    if len > max {
        return Err(bad());
    }
    Ok((addr, len))
}

impl DnsSettings {
    /// Check every field present.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first bad field and its allowed range.
    pub fn validate(&self) -> Result<()> {
        if let Some(v) = self.per_source_qps {
            check_qps("per_source_qps", v)?;
        }
        if let Some(v) = self.per_source_burst {
            check_int("per_source_burst", v, 1, BURST_MAX, " queries")?;
        }
        if let Some(v) = self.per_prefix_qps {
            check_qps("per_prefix_qps", v)?;
        }
        if let Some(v) = self.per_prefix_burst {
            check_int("per_prefix_burst", v, 1, BURST_MAX, " queries")?;
        }
        if let Some(v) = self.prefix_len_v4 {
            check_int("prefix_len_v4", v, 1, 32, "")?;
        }
        if let Some(v) = self.prefix_len_v6 {
            check_int("prefix_len_v6", v, 1, 64, "")?;
        }
        if let Some(list) = &self.exempt {
            if list.len() > EXEMPT_MAX {
                return Err(Error::Invalid(format!(
                    "exempt: {} prefixes, allowed at most {EXEMPT_MAX}",
                    list.len()
                )));
            }
            for p in list {
                parse_exempt(p)?;
            }
        }
        Ok(())
    }

    /// `base` with the fields present here changed.
    ///
    /// # Errors
    /// A field out of range (see [`DnsSettings::validate`]).
    pub fn merge(&self, base: &DnsLimits) -> Result<DnsLimits> {
        self.validate()?;
        let n = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        let mut l = base.clone();
        if let Some(v) = self.per_source_qps {
            l.src_qps = v;
        }
        if let Some(v) = self.per_source_burst {
            l.src_burst = n(v);
        }
        if let Some(v) = self.per_prefix_qps {
            l.pfx_qps = v;
        }
        if let Some(v) = self.per_prefix_burst {
            l.pfx_burst = n(v);
        }
        if let Some(m) = self.mode {
            l.truncate = m == DnsMode::Truncate;
        }
        if let Some(v) = self.prefix_len_v4 {
            l.v4_plen = n(v) as u8;
        }
        if let Some(v) = self.prefix_len_v6 {
            l.v6_plen = n(v) as u8;
        }
        if let Some(list) = &self.exempt {
            l.exempt = list
                .iter()
                .map(|p| parse_exempt(p))
                .collect::<Result<_>>()?;
        }
        Ok(l)
    }
}

impl From<&DnsLimits> for DnsSettings {
    fn from(l: &DnsLimits) -> Self {
        Self {
            per_source_qps: Some(l.src_qps),
            per_source_burst: Some(i64::from(l.src_burst)),
            per_prefix_qps: Some(l.pfx_qps),
            per_prefix_burst: Some(i64::from(l.pfx_burst)),
            mode: Some(if l.truncate {
                DnsMode::Truncate
            } else {
                DnsMode::Drop
            }),
            prefix_len_v4: Some(i64::from(l.v4_plen)),
            prefix_len_v6: Some(i64::from(l.v6_plen)),
            exempt: Some(l.exempt.iter().map(|(a, n)| format!("{a}/{n}")).collect()),
        }
    }
}

/// A rate read back from its GCRA interval, to 6 significant digits (the
/// interval is whole nanoseconds, so 7 queries/s reads back as 6.99999998).
fn qps_of(interval_ns: u64) -> f64 {
    let q = 1e9 / interval_ns as f64;
    format!("{q:.5e}").parse().unwrap_or(q)
}

/// `(rate, burst)` of one GCRA level; with no limit (interval 0) the burst
/// is the default's, the one a rate set later would use.
fn level(interval: u64, tau: u64, default_burst: u32) -> (f64, u32) {
    if interval == 0 {
        return (0.0, default_burst);
    }
    let burst = (tau / interval).saturating_add(1);
    (qps_of(interval), u32::try_from(burst).unwrap_or(u32::MAX))
}

fn ne_u64(b: &[u8]) -> u64 {
    u64::from_ne_bytes(b.try_into().unwrap_or_default())
}

fn ne_u32(b: &[u8]) -> u32 {
    u32::from_ne_bytes(b.try_into().unwrap_or_default())
}

impl DnsLimits {
    /// The limits in `dns_cfg[0]` (48 bytes, see [`DnsLimits::cfg_value`]):
    /// all zero (the program's start) reads as no limit with the default
    /// bursts, prefix lengths 0 as the program's 24 and 56.
    pub fn from_cfg_value(v: &[u8]) -> Result<Self> {
        if v.len() != 48 {
            return Err(Error::Invalid(format!(
                "dns_cfg value of {} bytes, expected 48",
                v.len()
            )));
        }
        let d = Self::default();
        let (src_qps, src_burst) = level(ne_u64(&v[0..8]), ne_u64(&v[8..16]), d.src_burst);
        let (pfx_qps, pfx_burst) = level(ne_u64(&v[16..24]), ne_u64(&v[24..32]), d.pfx_burst);
        let plen = |x: u32, dflt: u8| if x == 0 { dflt } else { x.min(128) as u8 };
        Ok(Self {
            src_qps,
            src_burst,
            pfx_qps,
            pfx_burst,
            truncate: ne_u32(&v[32..36]) == 1,
            v4_plen: plen(ne_u32(&v[36..40]), 24),
            v6_plen: plen(ne_u32(&v[40..44]), 56),
            exempt: Vec::new(),
        })
    }

    /// One exempt prefix from its `dns_exempt` key (see [`DnsLimits::exempt_key`]).
    pub fn from_exempt_key(k: &[u8]) -> Option<(IpAddr, u8)> {
        if k.len() != 24 {
            return None;
        }
        let bits = ne_u32(&k[0..4]).checked_sub(32)?;
        let a: [u8; 16] = k[8..24].try_into().ok()?;
        match k[4] {
            4 => Some((
                IpAddr::from([a[0], a[1], a[2], a[3]]),
                u8::try_from(bits).ok()?,
            )),
            6 => Some((IpAddr::from(a), u8::try_from(bits).ok()?)),
            _ => None,
        }
    }

    /// The limits a running limiter uses, read from its maps.
    ///
    /// # Errors
    /// A failing map read.
    pub fn read(cfg_fd: RawFd, exempt_fd: RawFd) -> Result<Self> {
        let mut v = [0u8; 48];
        rampart_dataplane::maps::lookup_raw(cfg_fd, &0u32.to_ne_bytes(), &mut v)?;
        let mut l = Self::from_cfg_value(&v)?;
        l.exempt = rampart_dataplane::maps::keys_raw(exempt_fd, 24)?
            .iter()
            .filter_map(|k| Self::from_exempt_key(k))
            .collect();
        l.exempt.sort();
        Ok(l)
    }

    /// Write the limits into a running limiter's maps, the exempt list
    /// replacing the one there (unlike [`DnsLimits::apply`], which adds).
    ///
    /// # Errors
    /// Invalid limits (nothing written) or a failing map update.
    pub fn store(&self, cfg_fd: RawFd, exempt_fd: RawFd) -> Result<()> {
        self.apply(cfg_fd, exempt_fd)?;
        let keep: Vec<Vec<u8>> = self
            .exempt
            .iter()
            .map(|(a, l)| Self::exempt_key(*a, *l))
            .collect();
        for k in rampart_dataplane::maps::keys_raw(exempt_fd, 24)? {
            if !keep.contains(&k) {
                rampart_dataplane::maps::delete_raw(exempt_fd, &k)?;
            }
        }
        Ok(())
    }
}

/// The SYN-cookie proxy's settings (`synproxy.c`). In a PUT every field is
/// optional; a GET fills them all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SynSettings {
    /// MSS announced in SYN-ACKs over IPv4: 536..=65535.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mss_v4: Option<i64>,
    /// MSS announced over IPv6: 1220..=65535.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mss_v6: Option<i64>,
    /// Window scale announced: 0..=14 (match the server's; Linux uses 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wscale: Option<i64>,
    /// TTL / hop limit of SYN-ACKs: 1..=255.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
    /// TCP ports protected (1..=65535), replacing the list; at most 64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<i64>>,
}

impl rampart_service::JsonBody for SynSettings {
    const EXAMPLE: &'static str = r#"{"ports": [80, 443], "wscale": 7}"#;
}

impl SynSettings {
    /// Check every field present.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first bad field and its allowed range.
    pub fn validate(&self) -> Result<()> {
        if let Some(v) = self.mss_v4 {
            check_int("mss_v4", v, 536, 65535, " bytes")?;
        }
        if let Some(v) = self.mss_v6 {
            check_int("mss_v6", v, 1220, 65535, " bytes")?;
        }
        if let Some(v) = self.wscale {
            check_int("wscale", v, 0, 14, "")?;
        }
        if let Some(v) = self.ttl {
            check_int("ttl", v, 1, 255, "")?;
        }
        if let Some(ports) = &self.ports {
            if ports.len() > PORTS_MAX {
                return Err(Error::Invalid(format!(
                    "ports: {} ports, allowed at most {PORTS_MAX}",
                    ports.len()
                )));
            }
            for p in ports {
                check_int("ports", *p, 1, 65535, "")?;
            }
        }
        Ok(())
    }

    /// `base` with the fields present here changed.
    ///
    /// # Errors
    /// A field out of range (see [`SynSettings::validate`]).
    pub fn merge(&self, base: &SynProxyConfig) -> Result<SynProxyConfig> {
        self.validate()?;
        // In range after validate().
        let n16 = |v: i64| u16::try_from(v).unwrap_or(u16::MAX);
        let mut c = base.clone();
        if let Some(v) = self.mss_v4 {
            c.mss4 = n16(v);
        }
        if let Some(v) = self.mss_v6 {
            c.mss6 = n16(v);
        }
        if let Some(v) = self.wscale {
            c.wscale = n16(v) as u8;
        }
        if let Some(v) = self.ttl {
            c.ttl = n16(v) as u8;
        }
        if let Some(p) = &self.ports {
            c.ports = p.iter().map(|&p| n16(p)).collect();
            c.ports.sort_unstable();
            c.ports.dedup();
        }
        Ok(c)
    }
}

impl From<&SynProxyConfig> for SynSettings {
    fn from(c: &SynProxyConfig) -> Self {
        Self {
            mss_v4: Some(i64::from(c.mss4)),
            mss_v6: Some(i64::from(c.mss6)),
            wscale: Some(i64::from(c.wscale)),
            ttl: Some(i64::from(c.ttl)),
            ports: Some(c.ports.iter().map(|&p| i64::from(p)).collect()),
        }
    }
}

impl SynProxyConfig {
    /// The settings in `syn_cfg[0]` (8 bytes); TTL 0 — the program's start —
    /// means the program's defaults (1460/1440/7/64), which
    /// [`SynProxyConfig::default`] has too. No ports.
    pub fn from_cfg_value(v: &[u8]) -> Result<Self> {
        if v.len() != 8 {
            return Err(Error::Invalid(format!(
                "syn_cfg value of {} bytes, expected 8",
                v.len()
            )));
        }
        let d = Self::default();
        if v[5] == 0 {
            return Ok(Self {
                ports: Vec::new(),
                ..d
            });
        }
        Ok(Self {
            mss4: u16::from_ne_bytes([v[0], v[1]]),
            mss6: u16::from_ne_bytes([v[2], v[3]]),
            wscale: v[4],
            ttl: v[5],
            ports: Vec::new(),
        })
    }

    /// The settings a running proxy uses, read from its maps.
    ///
    /// # Errors
    /// A failing map read.
    pub fn read(cfg_fd: RawFd, ports_fd: RawFd) -> Result<Self> {
        let mut v = [0u8; 8];
        rampart_dataplane::maps::lookup_raw(cfg_fd, &0u32.to_ne_bytes(), &mut v)?;
        let mut c = Self::from_cfg_value(&v)?;
        c.ports = rampart_dataplane::maps::keys_raw(ports_fd, 2)?
            .iter()
            .map(|k| u16::from_ne_bytes([k[0], k[1]]))
            .collect();
        c.ports.sort_unstable();
        Ok(c)
    }

    /// Write the settings into a running proxy's maps, the port list
    /// replacing the one there (unlike [`SynProxyConfig::apply`], which adds).
    ///
    /// # Errors
    /// Invalid settings (nothing written) or a failing map update.
    pub fn store(&self, cfg_fd: RawFd, ports_fd: RawFd) -> Result<()> {
        self.apply(cfg_fd, ports_fd)?;
        for k in rampart_dataplane::maps::keys_raw(ports_fd, 2)? {
            if !self.ports.contains(&u16::from_ne_bytes([k[0], k[1]])) {
                rampart_dataplane::maps::delete_raw(ports_fd, &k)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns(json: &str) -> DnsSettings {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn each_bad_dns_field_is_named_with_its_range() {
        for (json, field, range) in [
            (
                r#"{"per_source_qps": -1}"#,
                "per_source_qps -1",
                "0.001..=1000000000",
            ),
            (
                r#"{"per_source_qps": 0.0001}"#,
                "per_source_qps",
                "0.001..=1000000000",
            ),
            (
                r#"{"per_prefix_qps": 2e9}"#,
                "per_prefix_qps",
                "0.001..=1000000000",
            ),
            (
                r#"{"per_source_burst": 0}"#,
                "per_source_burst 0",
                "1..=1000000",
            ),
            (
                r#"{"per_prefix_burst": 5000000}"#,
                "per_prefix_burst",
                "1..=1000000",
            ),
            (r#"{"prefix_len_v4": 33}"#, "prefix_len_v4 33", "1..=32"),
            (r#"{"prefix_len_v6": 65}"#, "prefix_len_v6 65", "1..=64"),
            (r#"{"prefix_len_v6": -3}"#, "prefix_len_v6 -3", "1..=64"),
            (
                r#"{"exempt": ["10.0.0.0/33"]}"#,
                "exempt \"10.0.0.0/33\"",
                "0..=32",
            ),
            (r#"{"exempt": ["nope"]}"#, "exempt \"nope\"", "ADDR/LEN"),
        ] {
            let e = dns(json).validate().unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(range), "{json}: {e}");
            assert!(!e.contains('\n'), "{e}");
            assert!(dns(json).merge(&DnsLimits::default()).is_err(), "{json}");
        }
        let e = "drop!".parse::<DnsMode>().unwrap_err().to_string();
        assert!(e.contains("mode") && e.contains("truncate"), "{e}");
        // An unknown field is refused by the body's parser.
        assert!(serde_json::from_str::<DnsSettings>(r#"{"qps": 1}"#).is_err());
    }

    #[test]
    fn a_partial_dns_change_keeps_the_other_fields() {
        let base = DnsLimits {
            exempt: vec![("10.1.0.0".parse().unwrap(), 16)],
            ..DnsLimits::default()
        };
        let l = dns(r#"{"per_source_qps": 3, "mode": "drop"}"#)
            .merge(&base)
            .unwrap();
        assert_eq!(l.src_qps, 3.0);
        assert!(!l.truncate);
        assert_eq!((l.src_burst, l.pfx_qps, l.v4_plen), (20, 100.0, 24));
        assert_eq!(l.exempt, base.exempt);
        let l = dns(r#"{"exempt": ["192.0.2.7", "2001:db8::/48"]}"#)
            .merge(&base)
            .unwrap();
        assert_eq!(
            l.exempt,
            vec![
                ("192.0.2.7".parse().unwrap(), 32),
                ("2001:db8::".parse().unwrap(), 48)
            ]
        );
    }

    #[test]
    fn dns_limits_read_back_from_their_bytes() {
        for l in [
            DnsLimits::default(),
            DnsLimits {
                src_qps: 7.0,
                src_burst: 3,
                pfx_qps: 0.01,
                pfx_burst: 1,
                truncate: false,
                v4_plen: 20,
                v6_plen: 48,
                exempt: Vec::new(),
            },
        ] {
            let back = DnsLimits::from_cfg_value(&l.cfg_value().unwrap()).unwrap();
            assert_eq!(back, l);
        }
        // The program's start: no limit, its own prefix lengths.
        let z = DnsLimits::from_cfg_value(&[0; 48]).unwrap();
        assert_eq!(
            (z.src_qps, z.pfx_qps, z.v4_plen, z.v6_plen),
            (0.0, 0.0, 24, 56)
        );
        assert!(!z.truncate);
        for (a, n) in [("10.1.2.0", 24), ("2001:db8::", 48), ("0.0.0.0", 0)] {
            let a: IpAddr = a.parse().unwrap();
            assert_eq!(
                DnsLimits::from_exempt_key(&DnsLimits::exempt_key(a, n)),
                Some((a, n))
            );
        }
    }

    #[test]
    fn each_bad_syn_field_is_named_with_its_range() {
        for (json, field, range) in [
            (r#"{"mss_v4": 100}"#, "mss_v4 100", "536..=65535"),
            (r#"{"mss_v6": 70000}"#, "mss_v6 70000", "1220..=65535"),
            (r#"{"wscale": 15}"#, "wscale 15", "0..=14"),
            (r#"{"ttl": 0}"#, "ttl 0", "1..=255"),
            (r#"{"ports": [80, 0]}"#, "ports 0", "1..=65535"),
        ] {
            let s: SynSettings = serde_json::from_str(json).unwrap();
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(range), "{json}: {e}");
        }
        let many = SynSettings {
            ports: Some((1..=65).collect()),
            ..SynSettings::default()
        };
        assert!(many
            .validate()
            .unwrap_err()
            .to_string()
            .contains("at most 64"));
    }

    #[test]
    fn syn_settings_merge_and_read_back() {
        let s: SynSettings =
            serde_json::from_str(r#"{"ports": [443, 80, 443], "ttl": 32}"#).unwrap();
        let c = s.merge(&SynProxyConfig::default()).unwrap();
        assert_eq!((c.ports.clone(), c.ttl, c.mss4), (vec![80, 443], 32, 1460));
        let mut back = SynProxyConfig::from_cfg_value(&c.cfg_value().unwrap()).unwrap();
        back.ports.clone_from(&c.ports);
        assert_eq!(back, c);
        assert_eq!(
            SynProxyConfig::from_cfg_value(&[0; 8]).unwrap().mss6,
            SynProxyConfig::default().mss6
        );
    }
}
