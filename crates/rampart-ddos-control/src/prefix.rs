//! Blacklist entries: parsing, normalisation and where each one lives
//! (the data path's tables and address layout, described in plain Rust).
//!
//! An entry is an IPv4 or IPv6 prefix. `/32` IPv4 and `/128` IPv6 entries
//! are exact addresses; everything else is a CIDR prefix. Which data-path
//! table holds an entry is decided here ([`Kind`]).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Serialize, Serializer};

use crate::error::{ConfigError, PrefixError as Error};

type Result<T, E = Error> = std::result::Result<T, E>;

/// A normalised blacklist prefix (host bits zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix(IpNet);

/// Which table holds an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Exact IPv4 address in the compact table.
    Exact4,
    /// Exact IPv6 address in the IPv6 hash.
    Exact6,
    /// IPv4 CIDR prefix (and the two IPv4 addresses the compact table
    /// reserves as markers, 0.0.0.0 and 255.255.255.255) in the LPM trie.
    Prefix4,
    /// IPv6 CIDR prefix in the LPM trie.
    Prefix6,
}

impl Kind {
    /// Name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Exact4 => "exact IPv4",
            Kind::Exact6 => "exact IPv6",
            Kind::Prefix4 => "IPv4 prefix",
            Kind::Prefix6 => "IPv6 prefix",
        }
    }
}

impl Prefix {
    /// Parse `ADDR` or `ADDR/LEN`, refusing host bits and /0.
    ///
    /// # Errors
    /// [`Error::BadPrefix`] saying what is wrong.
    pub fn parse(s: &str) -> Result<Self> {
        Self::parse_at(s, None)
    }

    fn parse_at(s: &str, line: Option<usize>) -> Result<Self> {
        let bad = |reason: String| Error::BadPrefix {
            input: s.to_string(),
            line,
            reason,
        };
        let t = s.trim();
        if t.is_empty() {
            return Err(bad(
                "empty: write an address (192.0.2.1, 2001:db8::1) or a CIDR prefix (192.0.2.0/24)"
                    .into(),
            ));
        }
        let net = if t.contains('/') {
            IpNet::from_str(t).map_err(|_| {
                bad("not an address/length: write e.g. 192.0.2.0/24 or 2001:db8::/32 (IPv4 length 0-32, IPv6 0-128)".into())
            })?
        } else {
            let a = IpAddr::from_str(t).map_err(|_| {
                bad("not an IPv4 or IPv6 address: write e.g. 192.0.2.1 or 2001:db8::1".into())
            })?;
            IpNet::from(a)
        };
        if net.prefix_len() == 0 {
            return Err(bad(
                "a /0 prefix would drop every packet of its family: refused".into(),
            ));
        }
        if net.trunc() != net {
            return Err(bad(format!(
                "host bits are set: did you mean {}?",
                net.trunc()
            )));
        }
        Ok(Prefix(net))
    }

    /// From a network that is already normalised (host bits zero, length > 0).
    ///
    /// # Errors
    /// As [`Prefix::parse`].
    pub fn from_net(net: IpNet) -> Result<Self> {
        Self::parse(&net.to_string())
    }

    /// One address.
    pub fn host(a: IpAddr) -> Self {
        Prefix(IpNet::from(a))
    }

    /// The `len`-bit prefix containing `a` (host bits cleared; `len`
    /// clamped to the family's width, at least 1).
    pub fn truncate(a: IpAddr, len: u8) -> Self {
        let max = if a.is_ipv4() { 32 } else { 128 };
        let net = IpNet::new(a, len.clamp(1, max)).map_or_else(|_| IpNet::from(a), |n| n.trunc());
        Prefix(net)
    }

    /// The network.
    pub fn net(&self) -> IpNet {
        self.0
    }

    /// The table that holds it.
    pub fn kind(&self) -> Kind {
        match self.0 {
            IpNet::V4(n) if n.prefix_len() == 32 => {
                let a = u32::from(n.addr());
                if a == 0 || a == u32::MAX {
                    Kind::Prefix4
                } else {
                    Kind::Exact4
                }
            }
            IpNet::V4(_) => Kind::Prefix4,
            IpNet::V6(n) if n.prefix_len() == 128 => Kind::Exact6,
            IpNet::V6(_) => Kind::Prefix6,
        }
    }

    /// Address words as the data path stores them (network byte order, IPv4 in word 0).
    pub fn addr_words(&self) -> [u32; 4] {
        addr_words(self.0.addr())
    }

    /// Prefix length.
    pub fn len(&self) -> u8 {
        self.0.prefix_len()
    }

    /// Is the prefix length zero? (Never, for a parsed prefix.)
    pub fn is_empty(&self) -> bool {
        self.0.prefix_len() == 0
    }

    /// Rebuild from stored words (the inverse of [`Prefix::addr_words`]).
    pub fn from_words(family: u8, words: [u32; 4], len: u8) -> Option<Self> {
        let net = match family {
            4 => IpNet::V4(Ipv4Net::new(Ipv4Addr::from(words[0].to_ne_bytes()), len).ok()?),
            6 => {
                let mut b = [0u8; 16];
                for (i, w) in words.iter().enumerate() {
                    b[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
                }
                IpNet::V6(Ipv6Net::new(Ipv6Addr::from(b), len).ok()?)
            }
            _ => return None,
        };
        Some(Prefix(net))
    }

    /// 4 or 6.
    pub fn family(&self) -> u8 {
        match self.0 {
            IpNet::V4(_) => 4,
            IpNet::V6(_) => 6,
        }
    }

    /// Does the prefix contain `a`?
    pub fn contains(&self, a: &IpAddr) -> bool {
        self.0.contains(a)
    }
}

/// Address words in data-path layout.
pub fn addr_words(a: IpAddr) -> [u32; 4] {
    match a {
        IpAddr::V4(v4) => [u32::from_ne_bytes(v4.octets()), 0, 0, 0],
        IpAddr::V6(v6) => {
            let o = v6.octets();
            let mut w = [0u32; 4];
            for (i, word) in w.iter_mut().enumerate() {
                *word = u32::from_ne_bytes([o[i * 4], o[i * 4 + 1], o[i * 4 + 2], o[i * 4 + 3]]);
            }
            w
        }
    }
}

/// The inverse of [`addr_words`].
pub fn words_addr(family: u32, w: &[u32; 4]) -> Option<IpAddr> {
    match family {
        4 => Some(IpAddr::V4(Ipv4Addr::from(w[0].to_ne_bytes()))),
        6 => {
            let mut b = [0u8; 16];
            for (i, word) in w.iter().enumerate() {
                b[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
            }
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Exact addresses print as CIDR too, so a list reads uniformly.
        write!(f, "{}", self.0)
    }
}

impl FromStr for Prefix {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Prefix::parse(s)
    }
}

impl Serialize for Prefix {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Prefix::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Parse many prefixes, refusing duplicates (after normalisation).
///
/// # Errors
/// The first bad prefix, or the first duplicate.
pub fn parse_many<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Vec<Prefix>> {
    let mut out = Vec::new();
    let mut seen: HashMap<Prefix, usize> = HashMap::new();
    for (i, s) in items.into_iter().enumerate() {
        let p = Prefix::parse(s)?;
        if seen.insert(p, i).is_some() {
            return Err(Error::Duplicate {
                prefix: p.to_string(),
                where_: None,
            });
        }
        out.push(p);
    }
    Ok(out)
}

/// Parse a prefix list file: one prefix a line; blank lines and `#`
/// comments are ignored. Errors name the line.
///
/// # Errors
/// The first bad or duplicate prefix, with its line number.
pub fn parse_file_text(text: &str) -> Result<Vec<Prefix>> {
    let mut out = Vec::new();
    let mut seen: HashMap<Prefix, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let p = Prefix::parse_at(line, Some(i + 1))?;
        if let Some(first) = seen.insert(p, i + 1) {
            return Err(Error::Duplicate {
                prefix: p.to_string(),
                where_: Some(format!("lines {first} and {}", i + 1)),
            });
        }
        out.push(p);
    }
    Ok(out)
}

/// Parse whitelist entries (addresses or CIDR prefixes, host bits zero).
///
/// # Errors
/// [`ConfigError::BadWhitelist`] for the first bad entry.
pub fn parse_whitelist(entries: &[String]) -> Result<Vec<Prefix>, ConfigError> {
    entries
        .iter()
        .enumerate()
        .map(|(index, e)| {
            Prefix::parse(e).map_err(|err| ConfigError::BadWhitelist {
                index,
                value: e.clone(),
                reason: match err {
                    Error::BadPrefix { reason, .. } => reason,
                    other => other.to_string(),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_classifies() {
        assert_eq!(Prefix::parse("192.0.2.1").unwrap().kind(), Kind::Exact4);
        assert_eq!(Prefix::parse("192.0.2.1/32").unwrap().kind(), Kind::Exact4);
        assert_eq!(Prefix::parse("192.0.2.0/24").unwrap().kind(), Kind::Prefix4);
        assert_eq!(Prefix::parse("0.0.0.0").unwrap().kind(), Kind::Prefix4);
        assert_eq!(
            Prefix::parse("255.255.255.255").unwrap().kind(),
            Kind::Prefix4
        );
        assert_eq!(Prefix::parse("2001:db8::1").unwrap().kind(), Kind::Exact6);
        assert_eq!(
            Prefix::parse("2001:db8::/32").unwrap().kind(),
            Kind::Prefix6
        );
        assert_eq!(
            Prefix::parse(" 10.0.0.1 ").unwrap().to_string(),
            "10.0.0.1/32"
        );
    }

    #[test]
    fn refuses_bad_input_with_a_hint() {
        let e = Prefix::parse("10.0.0.1/8").unwrap_err().to_string();
        assert!(e.contains("did you mean 10.0.0.0/8"), "{e}");
        assert!(Prefix::parse("10.0.0.0/33").is_err());
        assert!(Prefix::parse("300.1.1.1").is_err());
        assert!(Prefix::parse("0.0.0.0/0")
            .unwrap_err()
            .to_string()
            .contains("/0"));
        assert!(Prefix::parse("::/0").is_err());
        assert!(Prefix::parse("").is_err());
        assert!(Prefix::parse("example.com").is_err());
    }

    #[test]
    fn duplicates_are_found_after_normalisation() {
        let e = parse_many(["10.0.0.1", "10.0.0.2", "10.0.0.1/32"]).unwrap_err();
        assert!(matches!(e, Error::Duplicate { .. }), "{e}");
        let e = parse_file_text("# feed\n10.0.0.1\n\n2001:db8::1\n10.0.0.1 # again\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lines 2 and 5"), "{e}");
        let e = parse_file_text("10.0.0.1\nnope\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn words_round_trip() {
        for s in [
            "192.0.2.7/32",
            "10.1.0.0/16",
            "2001:db8::5/128",
            "2001:db8:1::/48",
        ] {
            let p = Prefix::parse(s).unwrap();
            let q = Prefix::from_words(p.family(), p.addr_words(), p.len()).unwrap();
            assert_eq!(p, q);
        }
        // Network byte order as on the wire: the first octet is the lowest byte on little endian.
        assert_eq!(
            Prefix::parse("1.2.3.4").unwrap().addr_words()[0].to_ne_bytes(),
            [1, 2, 3, 4]
        );
    }

    #[test]
    fn a_bad_whitelist_entry_is_named_by_its_position() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_whitelist(&list(&["10.0.0.0/8", "2001:db8::1"])).unwrap(),
            [
                Prefix::parse("10.0.0.0/8").unwrap(),
                Prefix::parse("2001:db8::1").unwrap()
            ]
        );
        let e = parse_whitelist(&list(&["10.0.0.0/8", "10.1.2.3/8"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("detect.whitelist[1] = \"10.1.2.3/8\": host bits are set"),
            "{e}"
        );
        let e = parse_whitelist(&list(&["not-an-ip"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("detect.whitelist[0]") && e.contains("not an IPv4 or IPv6 address"),
            "{e}"
        );
    }
}
