//! The variants a filter benchmark alternates on the lab's `host0`: bare
//! XDP_DROP, rampart, and the peers operators would otherwise use.
//!
//! Each variant is prepared once per blacklist size and then enabled and
//! disabled around every repetition, so only one of them sees traffic at a
//! time. Where drops are counted (what each variant *actually dropped*):
//!
//! - XDP variants (`xdp_drop`, `rampart`, `xdp_filter`): the veth driver's
//!   per-queue `xdp_drops` counters of host0, one counting point for all;
//! - stack variants (`nft_set`, `iptables`): their own rule counters. They
//!   only see what the veth delivers to the stack; frames the stack cannot
//!   take in time are lost before them (ring overflow) and are not counted
//!   as drops of theirs.

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use rampart_bpf::xdp_drop::{XdpDropSkel, XdpDropSkelBuilder};
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::xdp::{XdpLink, XdpMode};
use rampart_lab::topology::HOST_IF;

use super::{run_cmd, veth_xdp_drops};
use crate::error::{Error, Result};
use rampart_ddos::filter::{Filter, Scope};
use rampart_ddos::maps;

/// One thing that drops the benchmark's traffic.
pub trait Variant {
    /// JSON key stem (`rampart` → `drop_mpps`, others → `<name>_mpps`).
    fn name(&self) -> &'static str;
    /// Start dropping (attach, insert the hook).
    ///
    /// # Errors
    /// Attach failures.
    fn enable(&mut self) -> Result<()>;
    /// Stop (detach, remove the hook).
    ///
    /// # Errors
    /// Detach failures.
    fn disable(&mut self) -> Result<()>;
    /// A counter of packets this variant dropped (read before and after a run).
    ///
    /// # Errors
    /// Counter read failures.
    fn dropped(&self) -> Result<u64>;
}

/// `return XDP_DROP;`, the ceiling.
pub struct BareDrop {
    skel: XdpDropSkel<'static>,
    ns: String,
    link: Option<XdpLink>,
}

impl BareDrop {
    /// Load it for host0 of the namespace `ns`.
    ///
    /// # Errors
    /// Load failure.
    pub fn new(ns: &str) -> Result<Self> {
        let skel = XdpDropSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .bpf_context(|| "opening xdp_drop".into())?
            .load()
            .bpf_context(|| "loading xdp_drop".into())?;
        Ok(Self {
            skel,
            ns: ns.to_string(),
            link: None,
        })
    }
}

impl Variant for BareDrop {
    fn name(&self) -> &'static str {
        "xdp_drop"
    }
    fn enable(&mut self) -> Result<()> {
        let fd = self.skel.progs.xdp_drop.as_fd().as_raw_fd();
        self.link = Some(XdpLink::attach(
            fd,
            Some(&self.ns),
            HOST_IF,
            XdpMode::Native,
        )?);
        Ok(())
    }
    fn disable(&mut self) -> Result<()> {
        self.link = None;
        Ok(())
    }
    fn dropped(&self) -> Result<u64> {
        veth_xdp_drops(&self.ns, HOST_IF)
    }
}

/// The rampart filter, created (pinned, filled) once, linked per run.
pub struct Rampart {
    /// The filter.
    pub filter: Filter,
    scope: Scope,
    link: Option<XdpLink>,
}

impl Rampart {
    /// Wrap a created (not linked) filter on `scope`.
    pub fn new(filter: Filter, scope: Scope) -> Self {
        Self {
            filter,
            scope,
            link: None,
        }
    }
}

impl Variant for Rampart {
    fn name(&self) -> &'static str {
        "rampart"
    }
    fn enable(&mut self) -> Result<()> {
        self.link = Some(self.filter.link(&self.scope, XdpMode::Native)?);
        Ok(())
    }
    fn disable(&mut self) -> Result<()> {
        self.link = None;
        Ok(())
    }
    fn dropped(&self) -> Result<u64> {
        veth_xdp_drops(self.scope.netns.as_deref().unwrap_or_default(), HOST_IF)
    }
}

impl Drop for Rampart {
    fn drop(&mut self) {
        self.link = None;
        let _ = Filter::detach(self.filter.name());
    }
}

/// An nftables set of the blacklist in a netdev ingress hook on host0:
/// `ip saddr @bl counter drop`. The table and set are loaded once; the
/// chain (with its hook) is created per run, so its counter starts at 0.
pub struct NftSet {
    ns: String,
    /// Seconds `nft -f` took to load the set.
    pub load_seconds: f64,
}

const NFT_TABLE: &str = "rpbench";

impl NftSet {
    /// Load a set of `addrs` into the netns `ns`.
    ///
    /// # Errors
    /// A failing `nft`.
    pub fn new(ns: &str, addrs: &[std::net::Ipv4Addr]) -> Result<Self> {
        let t0 = std::time::Instant::now();
        let mut script = format!(
            "table netdev {NFT_TABLE} {{\n  set bl {{ type ipv4_addr; size {}; }}\n}}\n",
            addrs.len().max(1)
        );
        for chunk in addrs.chunks(20_000) {
            script.push_str(&format!("add element netdev {NFT_TABLE} bl {{ "));
            for (i, a) in chunk.iter().enumerate() {
                if i > 0 {
                    script.push_str(", ");
                }
                script.push_str(&a.to_string());
            }
            script.push_str(" }\n");
        }
        run_cmd(
            "ip",
            &["netns", "exec", ns, "nft", "-f", "-"],
            Some(script.as_bytes()),
        )?;
        Ok(Self {
            ns: ns.to_string(),
            load_seconds: t0.elapsed().as_secs_f64(),
        })
    }

    fn nft(&self, script: &str) -> Result<String> {
        run_cmd(
            "ip",
            &["netns", "exec", &self.ns, "nft", "-f", "-"],
            Some(script.as_bytes()),
        )
    }
}

impl Drop for NftSet {
    fn drop(&mut self) {
        let _ = self.nft(&format!("delete table netdev {NFT_TABLE}\n"));
    }
}

impl Variant for NftSet {
    fn name(&self) -> &'static str {
        "nft_set"
    }
    fn enable(&mut self) -> Result<()> {
        self.nft(&format!(
            "add chain netdev {NFT_TABLE} ingress {{ type filter hook ingress device {HOST_IF} priority -500; }}\n\
             add rule netdev {NFT_TABLE} ingress ip saddr @bl counter drop\n"
        ))?;
        Ok(())
    }
    fn disable(&mut self) -> Result<()> {
        self.nft(&format!(
            "flush chain netdev {NFT_TABLE} ingress\ndelete chain netdev {NFT_TABLE} ingress\n"
        ))?;
        Ok(())
    }
    fn dropped(&self) -> Result<u64> {
        let out = run_cmd(
            "ip",
            &[
                "netns", "exec", &self.ns, "nft", "-j", "list", "chain", "netdev", NFT_TABLE,
                "ingress",
            ],
            None,
        )?;
        Ok(parse_nft_counters(&out))
    }
}

/// Sum of the `counter` packets of every rule in `nft -j list chain` output.
pub fn parse_nft_counters(json: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let mut total = 0;
    for item in v["nftables"].as_array().into_iter().flatten() {
        for e in item["rule"]["expr"].as_array().into_iter().flatten() {
            total += e["counter"]["packets"].as_u64().unwrap_or(0);
        }
    }
    total
}

/// Packets of the rules of `iptables -L CHAIN -v -x -n` output whose line
/// contains `needle` (every rule when `needle` is empty).
pub fn parse_ipt_packets(text: &str, needle: &str) -> u64 {
    text.lines()
        .skip(2)
        .filter(|l| needle.is_empty() || l.contains(needle))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// iptables (raw PREROUTING) with `rules` rules that every packet walks:
/// `rules - 1` non-matching `/32` sources from 198.18.0.0/15 (never sent),
/// then `-s <generator range> -j DROP`. Toggled by a jump from PREROUTING.
pub struct Iptables {
    ns: String,
    enabled: bool,
}

const IPT_CHAIN: &str = "RPBENCH";

impl Iptables {
    /// Install the chain in the netns `ns`.
    ///
    /// # Errors
    /// A failing `iptables-restore`.
    pub fn new(ns: &str, rules: u32, drop_net: &str) -> Result<Self> {
        let mut s = format!("*raw\n:{IPT_CHAIN} - [0:0]\n");
        for i in 0..rules.saturating_sub(1) {
            let a = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 18, 0, 1)) + i);
            s.push_str(&format!("-A {IPT_CHAIN} -s {a}/32 -j DROP\n"));
        }
        s.push_str(&format!("-A {IPT_CHAIN} -s {drop_net} -j DROP\nCOMMIT\n"));
        run_cmd(
            "ip",
            &["netns", "exec", ns, "iptables-restore", "--noflush"],
            Some(s.as_bytes()),
        )?;
        Ok(Self {
            ns: ns.to_string(),
            enabled: false,
        })
    }

    fn ipt(&self, args: &[&str]) -> Result<String> {
        let mut v = vec!["netns", "exec", self.ns.as_str(), "iptables", "-t", "raw"];
        v.extend_from_slice(args);
        run_cmd("ip", &v, None)
    }
}

impl Drop for Iptables {
    fn drop(&mut self) {
        let _ = self.disable();
        let _ = self.ipt(&["-F", IPT_CHAIN]);
        let _ = self.ipt(&["-X", IPT_CHAIN]);
    }
}

impl Variant for Iptables {
    fn name(&self) -> &'static str {
        "iptables"
    }
    fn enable(&mut self) -> Result<()> {
        self.ipt(&["-I", "PREROUTING", "-j", IPT_CHAIN])?;
        self.enabled = true;
        Ok(())
    }
    fn disable(&mut self) -> Result<()> {
        if self.enabled {
            self.ipt(&["-D", "PREROUTING", "-j", IPT_CHAIN])?;
            self.enabled = false;
        }
        Ok(())
    }
    fn dropped(&self) -> Result<u64> {
        let out = self.ipt(&["-L", IPT_CHAIN, "-v", "-x", "-n"])?;
        Ok(parse_ipt_packets(&out, ""))
    }
}

/// An ipset (`hash:ip`, the blacklist) and ONE iptables rule in raw
/// PREROUTING matching it: `-m set --match-set rpbench-bl src -j DROP`
/// (what the daemon's `iptables` mode installs). The set is loaded once
/// (`ipset restore`); the rule is inserted per run, so its counter starts
/// at 0, and it is what counts the drops.
pub struct IpsetRule {
    ns: String,
    enabled: bool,
    /// Seconds `ipset restore` took to load the set.
    pub load_seconds: f64,
}

const IPSET_NAME: &str = "rpbench-bl";

impl IpsetRule {
    /// Create the set of `addrs` in the netns `ns`.
    ///
    /// # Errors
    /// A failing `ipset`.
    pub fn new(ns: &str, addrs: &[std::net::Ipv4Addr]) -> Result<Self> {
        let t0 = std::time::Instant::now();
        let n = addrs.len().max(1);
        let mut s = format!(
            "create {IPSET_NAME} hash:ip family inet hashsize {} maxelem {}\n",
            n.next_power_of_two().max(1024),
            n.max(65_536)
        );
        for a in addrs {
            s.push_str(&format!("add {IPSET_NAME} {a}\n"));
        }
        run_cmd(
            "ip",
            &["netns", "exec", ns, "ipset", "restore", "-exist"],
            Some(s.as_bytes()),
        )?;
        Ok(Self {
            ns: ns.to_string(),
            enabled: false,
            load_seconds: t0.elapsed().as_secs_f64(),
        })
    }

    fn rule(op: &str) -> [&str; 11] {
        [
            "-t",
            "raw",
            op,
            "PREROUTING",
            "-m",
            "set",
            "--match-set",
            IPSET_NAME,
            "src",
            "-j",
            "DROP",
        ]
    }

    fn ipt(&self, args: &[&str]) -> Result<String> {
        let mut v = vec!["netns", "exec", self.ns.as_str(), "iptables"];
        v.extend_from_slice(args);
        run_cmd("ip", &v, None)
    }
}

impl Variant for IpsetRule {
    fn name(&self) -> &'static str {
        "ipset"
    }
    fn enable(&mut self) -> Result<()> {
        self.ipt(&Self::rule("-I"))?;
        self.enabled = true;
        Ok(())
    }
    fn disable(&mut self) -> Result<()> {
        if self.enabled {
            self.ipt(&Self::rule("-D"))?;
            self.enabled = false;
        }
        Ok(())
    }
    fn dropped(&self) -> Result<u64> {
        let out = self.ipt(&["-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n"])?;
        Ok(parse_ipt_packets(
            &out,
            &format!("match-set {IPSET_NAME} src"),
        ))
    }
}

impl Drop for IpsetRule {
    fn drop(&mut self) {
        // The rule first: a set in use cannot be destroyed.
        let _ = self.disable();
        let _ = run_cmd(
            "ip",
            &["netns", "exec", &self.ns, "ipset", "destroy", IPSET_NAME],
            None,
        );
    }
}

/// xdp-filter (xdp-tools) with its default `allow` policy (a blacklist:
/// listed sources are dropped, the rest passes) and the IPv4+IPv6 address
/// features, filled by writing its pinned map directly (the format its own
/// `xdp-filter ip -m src` writes: per-CPU u64 whose low bits are the mode
/// flags). Loaded and unloaded around every run. It runs in the lab's
/// netns through `nsenter --net` (not `ip netns exec`, which hides bpffs);
/// its pins live in the global `/sys/fs/bpf/xdp-filter`, so only one
/// xdp-filter benchmark can run on a machine at a time.
pub struct XdpFilter {
    ns: String,
    addrs: Vec<u32>,
    loaded: bool,
}

/// Most entries xdp-filter's maps hold.
pub const XDP_FILTER_MAX: usize = 10_000;
const XDP_FILTER_PIN: &str = "/sys/fs/bpf/xdp-filter/filter_ipv4";
const MAP_FLAG_SRC: u64 = 1;

impl XdpFilter {
    /// Prepare for the netns `ns` and the sources `addrs` (≤ [`XDP_FILTER_MAX`]).
    ///
    /// # Errors
    /// Too many addresses, or xdp-filter already in use on this machine.
    pub fn new(ns: &str, addrs: &[std::net::Ipv4Addr]) -> Result<Self> {
        if addrs.len() > XDP_FILTER_MAX {
            return Err(Error::Invalid(format!(
                "xdp-filter holds at most {XDP_FILTER_MAX} IPv4 entries"
            )));
        }
        if Path::new("/sys/fs/bpf/xdp-filter").exists() {
            return Err(Error::Invalid(
                "xdp-filter is loaded somewhere on this machine (/sys/fs/bpf/xdp-filter exists): \
                 its pins are global, so the benchmark cannot use it now (skip it with --peers)"
                    .into(),
            ));
        }
        Ok(Self {
            ns: ns.to_string(),
            addrs: addrs
                .iter()
                .map(|a| u32::from_ne_bytes(a.octets()))
                .collect(),
            loaded: false,
        })
    }

    fn xf(&self, args: &[&str]) -> Result<String> {
        let netns = format!("--net=/run/netns/{}", self.ns);
        let mut v = vec![netns.as_str(), "xdp-filter"];
        v.extend_from_slice(args);
        run_cmd("nsenter", &v, None)
    }
}

impl Variant for XdpFilter {
    fn name(&self) -> &'static str {
        "xdp_filter"
    }
    fn enable(&mut self) -> Result<()> {
        self.xf(&[
            "load",
            HOST_IF,
            "--mode",
            "native",
            "--features",
            "ipv4,ipv6",
        ])?;
        self.loaded = true;
        let m = maps::PinnedMap::open(Path::new(XDP_FILTER_PIN), 8)?;
        let ncpu = maps::possible_cpus();
        let keys: Vec<u8> = self.addrs.iter().flat_map(|a| a.to_ne_bytes()).collect();
        let one: Vec<u8> = (0..ncpu).flat_map(|_| MAP_FLAG_SRC.to_ne_bytes()).collect();
        let vals: Vec<u8> = self
            .addrs
            .iter()
            .flat_map(|_| one.iter().copied())
            .collect();
        maps::update_batch(m.raw(), &keys, &vals, self.addrs.len()).map_err(|(_, e)| e)?;
        Ok(())
    }
    fn disable(&mut self) -> Result<()> {
        if self.loaded {
            self.xf(&["unload", HOST_IF])?;
            self.loaded = false;
        }
        Ok(())
    }
    fn dropped(&self) -> Result<u64> {
        veth_xdp_drops(&self.ns, HOST_IF)
    }
}

impl Drop for XdpFilter {
    fn drop(&mut self) {
        let _ = self.disable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from iptables v1.8.9 (nf_tables) and nft 1.0.6 on this machine.
    const IPT_CHAIN_OUT: &str = "Chain RPBENCH (1 references)
    pkts      bytes target     prot opt in     out     source               destination
     100     4600 DROP       0    --  *      *       198.18.0.1           0.0.0.0/0
  812345 37367870 DROP       0    --  *      *       172.16.0.0/12        0.0.0.0/0
";
    const IPT_PRE_OUT: &str = "Chain PREROUTING (policy ACCEPT 0 packets, 0 bytes)
    pkts      bytes target     prot opt in     out     source               destination
   52341  2407686 DROP       0    --  *      *       0.0.0.0/0            0.0.0.0/0            match-set rpbench-bl src
       7      322 RPBENCH    0    --  *      *       0.0.0.0/0            0.0.0.0/0
";
    const NFT_OUT: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}, {"chain": {"family": "netdev", "table": "rpbench", "name": "ingress", "handle": 2, "type": "filter", "hook": "ingress", "prio": -500, "policy": "accept"}}, {"rule": {"family": "netdev", "table": "rpbench", "chain": "ingress", "handle": 3, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@bl"}}, {"counter": {"packets": 4242, "bytes": 195132}}, {"drop": null}]}}]}"#;

    #[test]
    fn iptables_chain_counters_sum_every_rule() {
        assert_eq!(parse_ipt_packets(IPT_CHAIN_OUT, ""), 812_445);
    }

    #[test]
    fn ipset_rule_counter_is_the_match_set_line_only() {
        assert_eq!(
            parse_ipt_packets(IPT_PRE_OUT, &format!("match-set {IPSET_NAME} src")),
            52_341
        );
        assert_eq!(parse_ipt_packets(IPT_PRE_OUT, "match-set other src"), 0);
        // the header lines never count, whatever they contain
        assert_eq!(
            parse_ipt_packets("Chain X (policy ACCEPT 99 packets)\n", ""),
            0
        );
    }

    #[test]
    fn nft_counter_from_json() {
        assert_eq!(parse_nft_counters(NFT_OUT), 4242);
        assert_eq!(parse_nft_counters("not json"), 0);
    }
}
