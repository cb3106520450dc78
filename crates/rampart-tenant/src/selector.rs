//! Tenant selectors: which packets belong to a tenant.
//!
//! Written as `prefix:10.20.1.0/24`, `prefix:fd20:0:0:1::/64`, `vlan:100`,
//! `vni:5001` or `iface:t1`. Each becomes one entry of the demultiplexer's
//! LPM trie per interface the dispatcher runs on (see `bpf/tenant/abi.h`):
//! `[ifindex:32][kind:8][pad:24][value:128]`, prefix length
//! `64 + value bits` (interface selectors: 32, the ifindex alone).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use rampart_bpf::abi::tenant::{
    SelKey, SEL_PREFIX4, SEL_PREFIX6, SEL_VLAN, SEL_VNI, TENANT_SEL_HDR_BITS,
};

/// Largest VLAN id (12 bits; 0 and 4095 are reserved by 802.1Q).
pub const VLAN_MAX: u16 = 4094;
/// Largest VXLAN network identifier (24 bits).
pub const VNI_MAX: u32 = (1 << 24) - 1;

/// One selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Selector {
    /// Destination prefix (IPv4 or IPv6), normalised to its network address.
    Prefix(IpNet),
    /// Outermost 802.1Q/802.1ad VLAN id.
    Vlan(u16),
    /// VXLAN network identifier (UDP to the VXLAN port, I flag set).
    Vni(u32),
    /// Every frame that arrives on this interface (of the dispatcher's namespace).
    Iface(String),
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Prefix(p) => write!(f, "prefix:{p}"),
            Selector::Vlan(v) => write!(f, "vlan:{v}"),
            Selector::Vni(v) => write!(f, "vni:{v}"),
            Selector::Iface(i) => write!(f, "iface:{i}"),
        }
    }
}

impl FromStr for Selector {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::Invalid(format!(
                "bad selector {s:?}: {why} (use prefix:ADDR/LEN, vlan:1-{VLAN_MAX}, vni:0-{VNI_MAX} or iface:NAME)"
            ))
        };
        let (kind, val) = s.split_once(':').ok_or_else(|| bad("missing KIND:"))?;
        match kind {
            "prefix" => {
                let net: IpNet = match val.parse() {
                    Ok(n) => n,
                    Err(_) => match val.parse::<IpAddr>() {
                        Ok(a) => IpNet::from(a),
                        Err(_) => return Err(bad("not an address or ADDR/LEN")),
                    },
                };
                Ok(Selector::Prefix(net.trunc()))
            }
            "vlan" => {
                let v: u16 = val.parse().map_err(|_| bad("VLAN id is not a number"))?;
                if v == 0 || v > VLAN_MAX {
                    return Err(bad("VLAN id out of range"));
                }
                Ok(Selector::Vlan(v))
            }
            "vni" => {
                let v: u32 = val.parse().map_err(|_| bad("VNI is not a number"))?;
                if v > VNI_MAX {
                    return Err(bad("VNI out of range (24 bits)"));
                }
                Ok(Selector::Vni(v))
            }
            "iface" => {
                if val.is_empty()
                    || val.len() > 15
                    || val.contains('/')
                    || val.contains(char::is_whitespace)
                {
                    return Err(bad("not an interface name"));
                }
                Ok(Selector::Iface(val.to_string()))
            }
            _ => Err(bad("unknown kind")),
        }
    }
}

impl Serialize for Selector {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Selector {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Most selectors a tenant may hold (the demultiplexer's table is shared
/// by every tenant: one tenant must not fill it).
pub const MAX_SELECTORS: usize = 64;

impl Selector {
    /// Does `self` cover `other`: every packet `other` selects, `self`
    /// selects too (a prefix containing the other, or the same VLAN, VNI
    /// or interface)?
    pub fn covers(&self, other: &Selector) -> bool {
        match (self, other) {
            (Selector::Prefix(a), Selector::Prefix(b)) => a.contains(b),
            (a, b) => a == b,
        }
    }

    /// Do two selectors claim overlapping packets in a way that makes the
    /// owner ambiguous? Exact duplicates always do; prefixes never do (the
    /// longest match wins, so nested prefixes of different tenants are a
    /// deliberate carve-out) — except identical ones.
    pub fn same_key(&self, other: &Selector) -> bool {
        self == other
    }

    /// The demultiplexer key for this selector on interface `ifindex`
    /// (for [`Selector::Iface`], `ifindex` must be the interface's own).
    pub fn key(&self, ifindex: u32) -> SelKey {
        let mut k = SelKey {
            ifindex,
            ..SelKey::default()
        };
        match self {
            Selector::Prefix(IpNet::V4(n)) => {
                k.kind = SEL_PREFIX4;
                k.value[..4].copy_from_slice(&n.network().octets());
                k.prefixlen = TENANT_SEL_HDR_BITS + u32::from(n.prefix_len());
            }
            Selector::Prefix(IpNet::V6(n)) => {
                k.kind = SEL_PREFIX6;
                k.value.copy_from_slice(&n.network().octets());
                k.prefixlen = TENANT_SEL_HDR_BITS + u32::from(n.prefix_len());
            }
            Selector::Vlan(v) => {
                k.kind = SEL_VLAN;
                k.value[..4].copy_from_slice(&u32::from(*v).to_be_bytes());
                k.prefixlen = TENANT_SEL_HDR_BITS + 32;
            }
            Selector::Vni(v) => {
                k.kind = SEL_VNI;
                k.value[..4].copy_from_slice(&v.to_be_bytes());
                k.prefixlen = TENANT_SEL_HDR_BITS + 32;
            }
            Selector::Iface(_) => {
                k.prefixlen = 32;
            }
        }
        k
    }
}

/// Parse a list of selectors, refusing duplicates within the list.
///
/// # Errors
/// The first bad or duplicate selector.
pub fn parse_list(items: &[String]) -> Result<Vec<Selector>> {
    if items.len() > MAX_SELECTORS {
        return Err(Error::Invalid(format!(
            "{} selectors: at most {MAX_SELECTORS}",
            items.len()
        )));
    }
    let mut out: Vec<Selector> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for s in items {
        let sel: Selector = s.parse()?;
        if !seen.insert(sel.clone()) {
            return Err(Error::Invalid(format!("selector {sel} is listed twice")));
        }
        out.push(sel);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for s in [
            "prefix:10.20.1.0/24",
            "prefix:fd20:0:0:1::/64",
            "vlan:100",
            "vni:5001",
            "iface:t1",
        ] {
            let sel: Selector = s.parse().unwrap();
            assert_eq!(sel.to_string(), s);
        }
        // Host bits are cleared; a bare address is a host route.
        assert_eq!(
            "prefix:10.20.1.7/24"
                .parse::<Selector>()
                .unwrap()
                .to_string(),
            "prefix:10.20.1.0/24"
        );
        assert_eq!(
            "prefix:10.20.1.7".parse::<Selector>().unwrap().to_string(),
            "prefix:10.20.1.7/32"
        );
    }

    #[test]
    fn bad_selectors_say_why() {
        for (s, why) in [
            ("10.0.0.0/8", "missing KIND"),
            ("prefix:10.0.0.0/33", "not an address"),
            ("vlan:0", "out of range"),
            ("vlan:4095", "out of range"),
            ("vni:16777216", "out of range"),
            ("vni:x", "not a number"),
            ("iface:", "not an interface"),
            ("mac:00:11", "unknown kind"),
        ] {
            let e = s.parse::<Selector>().unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
            assert!(e.contains("use prefix:"), "{e}");
        }
        let e = parse_list(&["vlan:5".into(), "vlan:5".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn keys_encode_kind_value_and_length() {
        let k = "prefix:10.20.1.0/24".parse::<Selector>().unwrap().key(7);
        assert_eq!((k.prefixlen, k.ifindex, k.kind), (64 + 24, 7, SEL_PREFIX4));
        assert_eq!(&k.value[..4], &[10, 20, 1, 0]);
        let k = "vlan:100".parse::<Selector>().unwrap().key(7);
        assert_eq!(
            (k.prefixlen, k.kind, &k.value[..4]),
            (96, SEL_VLAN, &[0u8, 0, 0, 100][..])
        );
        let k = "vni:70000".parse::<Selector>().unwrap().key(7);
        assert_eq!(&k.value[..4], &70000u32.to_be_bytes());
        let k = "iface:t1".parse::<Selector>().unwrap().key(9);
        assert_eq!((k.prefixlen, k.ifindex, k.kind), (32, 9, 0));
    }
}
