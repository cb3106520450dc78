//! The EMULATED upstream router's forwarding: what BIRD learned, as
//! nftables rules on the router namespace's bridge.
//!
//! BIRD 2 learns FlowSpec (RFC 8955/8956) and RTBH routes over BGP but does
//! not program FlowSpec into a kernel (no Linux kernel takes it), and a
//! blackhole route in a kernel table would not act on a bridge. A real
//! router programs both into its forwarding hardware; the lab does it by
//! reading BIRD's tables (`birdc show route table flowtab4/flowtab6/master4/
//! master6 all`) and writing one nftables rule per route in the bridge
//! family's forward hook. This mapping is the EMULATED part; the routes
//! themselves are BIRD's.
//!
//! - FlowSpec `src S; [dst D;]` with traffic-rate 0 → `ip saddr S [ip daddr D] counter drop`;
//!   with traffic-rate R bytes/s → `… limit rate over R bytes/second counter drop`.
//!   A rule with any other component is not mapped (it would drop more than
//!   it matches) and is reported.
//! - A unicast route with the BLACKHOLE community 65535:666 → `ip daddr V counter drop`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};

/// The nftables table the lab writes in the router namespace.
pub const NFT_TABLE: &str = "rampart_emulated_router";

/// The FlowSpec components the EMULATED router maps besides the
/// addresses: a single value or an inclusive range each (BIRD prints
/// `proto 17; sport 123; length 400..1500;`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowComponents {
    /// IP protocol.
    pub proto: Option<u8>,
    /// Source port range.
    pub sport: Option<(u16, u16)>,
    /// Destination port range.
    pub dport: Option<(u16, u16)>,
    /// IP packet length range.
    pub length: Option<(u16, u16)>,
}

fn range(r: (u16, u16)) -> String {
    if r.0 == r.1 {
        r.0.to_string()
    } else {
        format!("{}-{}", r.0, r.1)
    }
}

/// `N` or `A..B` as BIRD prints a FlowSpec numeric component.
fn parse_range(v: &str) -> Option<(u16, u16)> {
    match v.split_once("..") {
        Some((a, b)) => Some((a.trim().parse().ok()?, b.trim().parse().ok()?)),
        None => {
            let n = v.trim().parse().ok()?;
            Some((n, n))
        }
    }
}

/// One route of BIRD mapped to the EMULATED router's forwarding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RouterRule {
    /// FlowSpec: traffic from `src` (to `dst`, when set) that matches
    /// `matching`; `rate` bytes/s let through (0: discard).
    Flow {
        /// Source prefix.
        src: String,
        /// Destination prefix.
        dst: Option<String>,
        /// Protocol, ports, packet length.
        matching: FlowComponents,
        /// Bytes per second let through (0: all dropped).
        rate: u64,
    },
    /// RTBH: all traffic to `dst` dropped.
    Blackhole {
        /// The victim's prefix.
        dst: String,
    },
}

fn family(p: &str) -> &'static str {
    if p.contains(':') {
        "ip6"
    } else {
        "ip"
    }
}

impl RouterRule {
    /// The nftables rule (bridge family, forward hook), with a counter
    /// and a comment naming the route.
    pub fn nft(&self) -> String {
        match self {
            RouterRule::Flow {
                src,
                dst,
                matching: c,
                rate,
            } => {
                let f = family(src);
                let mut m = format!("{f} saddr {src}");
                if let Some(d) = dst {
                    m.push_str(&format!(" {f} daddr {d}"));
                }
                if let Some(p) = c.proto {
                    m.push_str(&format!(" meta l4proto {p}"));
                }
                if let Some(r) = c.sport {
                    m.push_str(&format!(" th sport {}", range(r)));
                }
                if let Some(r) = c.dport {
                    m.push_str(&format!(" th dport {}", range(r)));
                }
                if let Some((lo, hi)) = c.length {
                    // FlowSpec counts the whole IP packet; IPv6's length
                    // field leaves out its 40-byte header.
                    if f == "ip" {
                        m.push_str(&format!(" ip length {}", range((lo, hi))));
                    } else {
                        let r = (lo.saturating_sub(40), hi.saturating_sub(40));
                        m.push_str(&format!(" ip6 length {}", range(r)));
                    }
                }
                let lim = if *rate > 0 {
                    format!(" limit rate over {rate} bytes/second")
                } else {
                    String::new()
                };
                format!("{m}{lim} counter drop comment \"{}\"", self.name())
            }
            RouterRule::Blackhole { dst } => format!(
                "{} daddr {dst} counter drop comment \"{}\"",
                family(dst),
                self.name()
            ),
        }
    }

    /// A short name: `flowspec src S [dst D]` or `rtbh D`.
    pub fn name(&self) -> String {
        match self {
            RouterRule::Flow {
                src, dst, matching, ..
            } => {
                let mut n = format!("flowspec src {src}");
                if let Some(d) = dst {
                    n.push_str(&format!(" dst {d}"));
                }
                if let Some(p) = matching.proto {
                    n.push_str(&format!(" proto {p}"));
                }
                if let Some(r) = matching.sport {
                    n.push_str(&format!(" sport {}", range(r)));
                }
                if let Some(r) = matching.dport {
                    n.push_str(&format!(" dport {}", range(r)));
                }
                if let Some(r) = matching.length {
                    n.push_str(&format!(" length {}", range(r)));
                }
                n
            }
            RouterRule::Blackhole { dst } => format!("rtbh {dst}"),
        }
    }
}

/// Parse `birdc show route table … all` output (any of the four tables,
/// concatenated) into rules; routes that cannot be mapped are returned as
/// the second list, one line each.
pub fn parse_routes(text: &str) -> (Vec<RouterRule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut skipped = Vec::new();
    // The route being read: (its first line, its attribute lines).
    let mut blocks: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let indented = line.starts_with(|c: char| c.is_whitespace());
        let t = line.trim();
        if t.is_empty() || t.starts_with("BIRD ") || t.starts_with("Table ") {
            continue;
        }
        if !indented {
            blocks.push((t.to_string(), Vec::new()));
        } else if let Some(b) = blocks.last_mut() {
            b.1.push(t.to_string());
        }
    }
    for (head, attrs) in blocks {
        if head.starts_with("flow4 {") || head.starts_with("flow6 {") {
            let (Some(a), Some(b)) = (head.find('{'), head.find('}')) else {
                skipped.push(head);
                continue;
            };
            let (mut src, mut dst, mut other) = (None, None, false);
            let mut comp = FlowComponents::default();
            for c in head[a + 1..b]
                .split(';')
                .map(str::trim)
                .filter(|c| !c.is_empty())
            {
                match c.split_once(' ') {
                    Some(("src", v)) => src = Some(v.trim().to_string()),
                    Some(("dst", v)) => dst = Some(v.trim().to_string()),
                    Some(("proto", v)) => match v.trim().parse() {
                        Ok(p) => comp.proto = Some(p),
                        Err(_) => other = true,
                    },
                    Some((k @ ("sport" | "dport" | "length"), v)) => match parse_range(v) {
                        Some(r) if k == "sport" => comp.sport = Some(r),
                        Some(r) if k == "dport" => comp.dport = Some(r),
                        Some(r) => comp.length = Some(r),
                        None => other = true,
                    },
                    _ => other = true,
                }
            }
            let rate = attrs
                .iter()
                .filter_map(|l| l.strip_prefix("BGP.ext_community:"))
                .find_map(traffic_rate);
            match (src, other, rate) {
                (Some(src), false, Some(rate)) => rules.push(RouterRule::Flow {
                    src,
                    dst,
                    matching: comp,
                    rate,
                }),
                _ => skipped.push(head),
            }
        } else {
            let Some(prefix) = head.split_whitespace().next() else {
                continue;
            };
            let blackhole = attrs
                .iter()
                .filter_map(|l| l.strip_prefix("BGP.community:"))
                .any(|c| c.contains("(65535,666)"));
            if blackhole && prefix.contains('/') {
                rules.push(RouterRule::Blackhole {
                    dst: prefix.to_string(),
                });
            }
        }
    }
    rules.sort();
    rules.dedup();
    (rules, skipped)
}

/// The traffic-rate (RFC 8955 7.3: type 0x8006, a 4-byte IEEE float of
/// bytes per second) of an ext_community line as BIRD prints it:
/// `(generic, 0x80060000, 0x0)`.
fn traffic_rate(line: &str) -> Option<u64> {
    line.split(')').find_map(|part| {
        let part = part.trim().trim_start_matches('(');
        let mut f = part.split(',').map(str::trim);
        if f.next()? != "generic" {
            return None;
        }
        let hi = u32::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
        let lo = u32::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
        (hi >> 16 == 0x8006).then(|| f32::from_bits(lo).max(0.0) as u64)
    })
}

/// The whole table for `rules` (one atomic `nft -f` transaction: the
/// table is created if missing, emptied, and filled).
pub fn nft_script(rules: &[RouterRule]) -> String {
    let mut s = format!(
        "table bridge {NFT_TABLE} {{}}\ndelete table bridge {NFT_TABLE}\n\
         table bridge {NFT_TABLE} {{\n  chain forward {{\n    type filter hook forward priority filter; policy accept;\n"
    );
    for r in rules {
        s.push_str(&format!("    {}\n", r.nft()));
    }
    s.push_str("  }\n}\n");
    s
}

/// Packets counted by each rule of the table (by comment), from `nft -j`.
fn counters(json: &str) -> Vec<(String, u64)> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let mut out = Vec::new();
    for item in v["nftables"].as_array().into_iter().flatten() {
        let r = &item["rule"];
        if r.is_null() {
            continue;
        }
        let name = r["comment"].as_str().unwrap_or_default().to_string();
        let packets = r["expr"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|e| e["counter"]["packets"].as_u64())
            .unwrap_or(0);
        out.push((name, packets));
    }
    out
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<RouterRule>,
    /// Packets counted by rules that were replaced since (their counters go with them).
    retired: u64,
    /// The table was written at least once.
    applied: bool,
    error: Option<String>,
}

/// The thread that keeps the router's nftables in step with BIRD (every
/// 100 ms, as a router's FIB follows its RIB); stopped and its table
/// removed on drop.
#[derive(Debug)]
pub struct EmulatedForwarding {
    ns: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EmulatedForwarding {
    /// Start following `routes` (a reader of BIRD's tables) in namespace `ns`,
    /// writing the script to `dir`.
    ///
    /// # Errors
    /// The first sync fails (nft missing, no bridge family in the kernel).
    pub fn start(
        ns: &str,
        dir: PathBuf,
        routes: impl Fn() -> Result<String> + Send + 'static,
    ) -> Result<Self> {
        let state = Arc::new(Mutex::new(State::default()));
        sync(ns, &dir, &routes, &state)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ns2, st2, stop2) = (ns.to_string(), state.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("emulated-router".into())
            .spawn(move || {
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    if let Err(e) = sync(&ns2, &dir, &routes, &st2) {
                        let msg = e.to_string();
                        if let Ok(mut s) = st2.lock() {
                            if s.error.as_deref() != Some(msg.as_str()) {
                                tracing::warn!("EMULATED router: {msg}");
                                s.error = Some(msg);
                            }
                        }
                    }
                }
            })
            .map_err(|e| Error::io("starting the EMULATED router's thread", e))?;
        Ok(Self {
            ns: ns.to_string(),
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// The rules in force now.
    pub fn rules(&self) -> Vec<RouterRule> {
        self.state
            .lock()
            .map(|s| s.rules.clone())
            .unwrap_or_default()
    }

    /// Packets the router dropped since it started (every rule, including
    /// those withdrawn since).
    ///
    /// # Errors
    /// A failing `nft`.
    pub fn dropped_packets(&self) -> Result<u64> {
        let retired = self.state.lock().map(|s| s.retired).unwrap_or(0);
        let now: u64 = self.counters()?.iter().map(|c| c.1).sum();
        Ok(retired + now)
    }

    /// Packets counted by each rule in force, by its name ([`RouterRule::name`]).
    ///
    /// # Errors
    /// A failing `nft`.
    pub fn counters(&self) -> Result<Vec<(String, u64)>> {
        let j = rampart_dataplane::cmd::in_ns(
            &self.ns,
            "nft",
            &["-j", "list", "table", "bridge", NFT_TABLE],
        )?;
        Ok(counters(&j))
    }
}

fn sync(
    ns: &str,
    dir: &std::path::Path,
    routes: &dyn Fn() -> Result<String>,
    state: &Mutex<State>,
) -> Result<()> {
    let (rules, skipped) = parse_routes(&routes()?);
    let mut st = state
        .lock()
        .map_err(|_| Error::InvalidSpec("EMULATED router state poisoned".into()))?;
    if !skipped.is_empty() && st.error.is_none() {
        tracing::warn!("EMULATED router: routes not mapped to nftables: {skipped:?}");
    }
    if st.applied && rules == st.rules {
        return Ok(());
    }
    // The replaced rules' counters would be lost with them: kept in `retired`.
    if let Ok(j) =
        rampart_dataplane::cmd::in_ns(ns, "nft", &["-j", "list", "table", "bridge", NFT_TABLE])
    {
        st.retired += counters(&j).iter().map(|c| c.1).sum::<u64>();
    }
    let script = dir.join("router.nft");
    std::fs::write(&script, nft_script(&rules))
        .map_err(|e| Error::io(format!("writing {}", script.display()), e))?;
    rampart_dataplane::cmd::in_ns(ns, "nft", &["-f", &script.to_string_lossy()])?;
    st.rules = rules;
    st.applied = true;
    st.error = None;
    Ok(())
}

impl Drop for EmulatedForwarding {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = rampart_dataplane::cmd::in_ns(
            &self.ns,
            "nft",
            &["delete", "table", "bridge", NFT_TABLE],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIRD: &str = "BIRD 2.0.12 ready.
Table master4:
198.51.100.7/32      unicast [host 02:51:10.312] * (100) [AS65001i]
\tvia 10.99.0.2 on bgu1
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path: 65001
\tBGP.next_hop: 10.99.0.2
\tBGP.local_pref: 100
\tBGP.community: (65535,666) (65001,42)
192.0.2.0/24         unicast [host 02:51:10.312] * (100) [AS65001i]
\tBGP.community: (65001,42)
Table flowtab4:
flow4 { src 203.0.113.0/24; }  [host 02:51:10.312] * (100) [AS65001i]
\tType: BGP univ
\tBGP.ext_community: (generic, 0x80060000, 0x0)
flow4 { dst 10.10.0.2/32; src 172.16.0.1/32; }  [host 02:51:10.312] * (100) [AS65001i]
\tBGP.ext_community: (generic, 0x80060000, 0x47f42400)
flow4 { src 172.16.0.9/32; proto 17; }  [host 02:51:10.312] * (100) [AS65001i]
\tBGP.ext_community: (generic, 0x80060000, 0x0)
flow4 { src 172.16.0.10/32; tcp flags 0x2/0x2; }  [host 02:51:10.312] * (100) [AS65001i]
\tBGP.ext_community: (generic, 0x80060000, 0x0)
Table flowtab6:
flow6 { src 2001:db8:bad::/48; }  [host 02:51:10.312] * (100) [AS65001i]
\tBGP.ext_community: (generic, 0x80060000, 0x0)
";

    #[test]
    fn bird_routes_map_to_rules_and_unknown_components_are_not_mapped() {
        let (rules, skipped) = parse_routes(BIRD);
        assert_eq!(
            rules,
            vec![
                RouterRule::Flow {
                    src: "172.16.0.1/32".into(),
                    dst: Some("10.10.0.2/32".into()),
                    matching: FlowComponents::default(),
                    rate: 125_000
                },
                RouterRule::Flow {
                    src: "172.16.0.9/32".into(),
                    dst: None,
                    matching: FlowComponents {
                        proto: Some(17),
                        ..FlowComponents::default()
                    },
                    rate: 0
                },
                RouterRule::Flow {
                    src: "2001:db8:bad::/48".into(),
                    dst: None,
                    matching: FlowComponents::default(),
                    rate: 0
                },
                RouterRule::Flow {
                    src: "203.0.113.0/24".into(),
                    dst: None,
                    matching: FlowComponents::default(),
                    rate: 0
                },
                RouterRule::Blackhole {
                    dst: "198.51.100.7/32".into()
                },
            ]
        );
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(skipped[0].contains("tcp flags"));
        let ntp = "flow4 { dst 198.51.100.9/32; src 198.18.0.0/24; proto 17; dport 33333; sport 123; length 400..1500; }  [host 06:06:40.305 from 10.99.0.2] * (100) [AS65001i]
\tBGP.ext_community: (generic, 0x80060000, 0x0)
";
        let (rules, skipped) = parse_routes(ntp);
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(
            rules[0].nft(),
            "ip saddr 198.18.0.0/24 ip daddr 198.51.100.9/32 meta l4proto 17 th sport 123 th dport 33333 \
             ip length 400-1500 counter drop comment \"flowspec src 198.18.0.0/24 dst 198.51.100.9/32 proto 17 \
             sport 123 dport 33333 length 400-1500\""
        );
    }

    #[test]
    fn rules_are_bridge_nftables() {
        let (rules, _) = parse_routes(BIRD);
        let s = nft_script(&rules);
        assert!(s.contains("type filter hook forward priority filter; policy accept;"));
        assert!(s.contains(
            "ip saddr 172.16.0.1/32 ip daddr 10.10.0.2/32 limit rate over 125000 bytes/second counter drop comment \"flowspec src 172.16.0.1/32 dst 10.10.0.2/32\""
        ));
        assert!(s.contains("ip6 saddr 2001:db8:bad::/48 counter drop"));
        assert!(
            s.contains("ip daddr 198.51.100.7/32 counter drop comment \"rtbh 198.51.100.7/32\"")
        );
        assert!(nft_script(&[]).contains("policy accept;\n  }\n}"));
    }

    #[test]
    fn counters_are_read_by_rule() {
        let j = r#"{"nftables": [{"metainfo": {}}, {"table": {"family": "bridge"}},
            {"rule": {"comment": "rtbh 198.51.100.7/32", "expr": [{"match": {}}, {"counter": {"packets": 7, "bytes": 448}}, {"drop": null}]}}]}"#;
        assert_eq!(counters(j), vec![("rtbh 198.51.100.7/32".to_string(), 7)]);
    }
}
