//! `tc-flower`: real TC flower `skip_sw` drop rules with hardware counters.
//!
//! On a NIC that offloads flower (ConnectX, Agilio, ice, …) each blocked
//! source or prefix becomes one `flower skip_sw src_ip A/LEN action drop`
//! filter (the card matches the mask in its TCAM) on the
//! interface's clsact ingress hook, installed over rtnetlink
//! (`RTM_NEWTFILTER`); its `gact` action carries the hardware packet/byte
//! counters, read back with an `RTM_GETTFILTER` dump. The messages are built
//! in [`new_filter_msg`], [`del_filter_msg`], [`dump_filters_msg`] and
//! parsed by [`parse_filter`], all unit-tested byte for byte.
//!
//! This VM's kernel has no `cls_flower` and veth cannot offload TC
//! (`hw-tc-offload: off [fixed]`): [`TcFlower::open`] refuses with a message
//! that says which of the two is missing and to use the `emulated` tier in
//! the lab instead.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use rampart_ddos::Prefix;

use super::netlink::{self, Msg};
use super::{CounterKind, Counts, Tier, TierInfo};
use crate::error::{Error, Result};

/// `RTM_NEWTFILTER`.
pub const RTM_NEWTFILTER: u16 = 44;
/// `RTM_DELTFILTER`.
pub const RTM_DELTFILTER: u16 = 45;
/// `RTM_GETTFILTER`.
pub const RTM_GETTFILTER: u16 = 46;
/// clsact ingress parent: `TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)`.
pub const PARENT_INGRESS: u32 = 0xFFFF_FFF2;
/// `TCA_CLS_FLAGS_SKIP_SW`: the rule must live in hardware or fail.
pub const TCA_CLS_FLAGS_SKIP_SW: u32 = 1 << 1;
/// `TC_ACT_SHOT`.
pub const TC_ACT_SHOT: i32 = 2;

const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_FLOWER_ACT: u16 = 3;
const TCA_FLOWER_KEY_ETH_TYPE: u16 = 8;
const TCA_FLOWER_KEY_IPV4_SRC: u16 = 10;
const TCA_FLOWER_KEY_IPV4_SRC_MASK: u16 = 11;
const TCA_FLOWER_KEY_IPV6_SRC: u16 = 14;
const TCA_FLOWER_KEY_IPV6_SRC_MASK: u16 = 15;
const TCA_FLOWER_FLAGS: u16 = 22;
const TCA_ACT_KIND: u16 = 1;
const TCA_ACT_OPTIONS: u16 = 2;
const TCA_ACT_STATS: u16 = 4;
const TCA_GACT_PARMS: u16 = 2;
const TCA_STATS_BASIC: u16 = 1;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;

/// Filter priority per family (flower wants one protocol per priority).
fn prio_proto(a: &IpAddr) -> (u16, u16) {
    match a {
        IpAddr::V4(_) => (1, ETH_P_IP),
        IpAddr::V6(_) => (2, ETH_P_IPV6),
    }
}

fn tcmsg(ifindex: u32, handle: u32, prio: u16, proto: u16) -> [u8; 20] {
    let mut t = [0u8; 20];
    // family AF_UNSPEC, 3 bytes padding
    t[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    t[8..12].copy_from_slice(&handle.to_ne_bytes());
    t[12..16].copy_from_slice(&PARENT_INGRESS.to_ne_bytes());
    // info = TC_H_MAKE(prio << 16, htons(proto))
    let info = (u32::from(prio) << 16) | u32::from(proto.to_be());
    t[16..20].copy_from_slice(&info.to_ne_bytes());
    t
}

/// `tc filter add dev IF ingress prio P handle H protocol ip flower skip_sw
/// src_ip A/LEN action drop` as one rtnetlink request.
pub fn new_filter_msg(ifindex: u32, handle: u32, src: IpNet, seq: u32) -> Vec<u8> {
    let src = src.trunc();
    let (prio, proto) = prio_proto(&src.addr());
    let mut m = Msg::new(
        RTM_NEWTFILTER,
        netlink::NLM_F_REQUEST | netlink::NLM_F_ACK | netlink::NLM_F_CREATE | netlink::NLM_F_EXCL,
        seq,
    );
    m.raw(&tcmsg(ifindex, handle, prio, proto));
    m.attr(TCA_KIND, b"flower\0");
    let opts = m.nest_start(TCA_OPTIONS);
    m.attr(TCA_FLOWER_KEY_ETH_TYPE, &proto.to_be_bytes());
    match src {
        IpNet::V4(n) => {
            m.attr(TCA_FLOWER_KEY_IPV4_SRC, &n.addr().octets());
            m.attr(TCA_FLOWER_KEY_IPV4_SRC_MASK, &n.netmask().octets());
        }
        IpNet::V6(n) => {
            m.attr(TCA_FLOWER_KEY_IPV6_SRC, &n.addr().octets());
            m.attr(TCA_FLOWER_KEY_IPV6_SRC_MASK, &n.netmask().octets());
        }
    }
    m.attr(TCA_FLOWER_FLAGS, &TCA_CLS_FLAGS_SKIP_SW.to_ne_bytes());
    let acts = m.nest_start(TCA_FLOWER_ACT);
    let a1 = m.nest_start(1); // action order 1
    m.attr(TCA_ACT_KIND, b"gact\0");
    let ao = m.nest_start(TCA_ACT_OPTIONS);
    // struct tc_gact { index, capab, action, refcnt, bindcnt }
    let mut parms = [0u8; 20];
    parms[8..12].copy_from_slice(&TC_ACT_SHOT.to_ne_bytes());
    m.attr(TCA_GACT_PARMS, &parms);
    m.nest_end(ao);
    m.nest_end(a1);
    m.nest_end(acts);
    m.nest_end(opts);
    m.finish()
}

/// Delete the filter `handle` of `src`'s family.
pub fn del_filter_msg(ifindex: u32, handle: u32, src: IpNet, seq: u32) -> Vec<u8> {
    let (prio, proto) = prio_proto(&src.addr());
    let mut m = Msg::new(
        RTM_DELTFILTER,
        netlink::NLM_F_REQUEST | netlink::NLM_F_ACK,
        seq,
    );
    m.raw(&tcmsg(ifindex, handle, prio, proto));
    m.attr(TCA_KIND, b"flower\0");
    m.finish()
}

/// Dump every ingress filter of the interface (with action statistics).
pub fn dump_filters_msg(ifindex: u32, seq: u32) -> Vec<u8> {
    let mut m = Msg::new(
        RTM_GETTFILTER,
        netlink::NLM_F_REQUEST | netlink::NLM_F_DUMP,
        seq,
    );
    m.raw(&tcmsg(ifindex, 0, 0, 0));
    m.finish()
}

/// Prefix length of a contiguous netmask (`None` for a mask with holes,
/// which rampart never installs).
fn mask_len(mask: &[u8]) -> Option<u8> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let contiguous = mask
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1))
        .skip(ones as usize)
        .all(|bit| bit == 0);
    contiguous.then_some(ones as u8)
}

/// One filter of a dump: handle, source prefix, hardware counters.
pub fn parse_filter(body: &[u8]) -> Option<(u32, IpNet, Counts)> {
    let handle = u32::from_ne_bytes(body.get(8..12)?.try_into().ok()?);
    let attrs = body.get(20..)?;
    let mut is_flower = false;
    let mut src = None;
    // No mask attribute: the whole address.
    let mut len = None;
    let mut counts = Counts::default();
    for (ty, p) in netlink::attrs(attrs) {
        match ty {
            TCA_KIND => is_flower = p.starts_with(b"flower"),
            TCA_OPTIONS => {
                for (ty, p) in netlink::attrs(p) {
                    match ty {
                        TCA_FLOWER_KEY_IPV4_SRC if p.len() == 4 => {
                            src = Some(IpAddr::from(<[u8; 4]>::try_from(p).ok()?));
                        }
                        TCA_FLOWER_KEY_IPV6_SRC if p.len() == 16 => {
                            src = Some(IpAddr::from(<[u8; 16]>::try_from(p).ok()?));
                        }
                        TCA_FLOWER_KEY_IPV4_SRC_MASK | TCA_FLOWER_KEY_IPV6_SRC_MASK => {
                            len = Some(mask_len(p)?);
                        }
                        TCA_FLOWER_ACT => {
                            for (_, act) in netlink::attrs(p) {
                                for (ty, p) in netlink::attrs(act) {
                                    if ty != TCA_ACT_STATS {
                                        continue;
                                    }
                                    for (ty, p) in netlink::attrs(p) {
                                        // struct gnet_stats_basic { u64 bytes; u32 packets; }
                                        if ty == TCA_STATS_BASIC && p.len() >= 12 {
                                            counts.bytes +=
                                                u64::from_ne_bytes(p[0..8].try_into().ok()?);
                                            counts.packets += u64::from(u32::from_ne_bytes(
                                                p[8..12].try_into().ok()?,
                                            ));
                                        }
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if !is_flower {
        return None;
    }
    let net = match src? {
        IpAddr::V4(a) => IpNet::V4(Ipv4Net::new(a, len.unwrap_or(32)).ok()?),
        IpAddr::V6(a) => IpNet::V6(Ipv6Net::new(a, len.unwrap_or(128)).ok()?),
    };
    Some((handle, net, counts))
}

/// Why this host cannot hold flower `skip_sw` rules on `iface`, if it cannot.
pub fn support_problem(netns: Option<&str>, iface: &str) -> Option<String> {
    let have_module = std::path::Path::new("/sys/module/cls_flower").exists()
        || std::process::Command::new("modprobe")
            .args(["-q", "cls_flower"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if !have_module {
        return Some(
            "this kernel has no TC flower classifier (cls_flower is neither built in nor loadable); \
             use a kernel with CONFIG_NET_CLS_FLOWER and a NIC that offloads it, or the `emulated` tier in the lab"
                .into(),
        );
    }
    let out = match netns {
        Some(ns) => rampart_dataplane::cmd::in_ns(ns, "ethtool", &["-k", iface]),
        None => rampart_dataplane::cmd::run("ethtool", &["-k", iface]),
    };
    match out {
        Ok(o) => {
            let line = o
                .lines()
                .find(|l| l.trim_start().starts_with("hw-tc-offload:"));
            match line {
                Some(l) if l.contains(": on") => None,
                Some(l) => Some(format!(
                    "the driver of {iface} cannot offload TC rules ({}); skip_sw rules need a NIC with hw-tc-offload \
                     (enable it with `ethtool -K {iface} hw-tc-offload on` where supported), or use the `emulated` tier in the lab",
                    l.trim()
                )),
                None => Some(format!("ethtool -k {iface} does not report hw-tc-offload")),
            }
        }
        Err(e) => Some(format!("cannot read the offload features of {iface}: {e}")),
    }
}

/// TC flower `skip_sw` rules on one interface.
#[derive(Debug)]
pub struct TcFlower {
    netns: Option<String>,
    iface: String,
    ifindex: u32,
    capacity: usize,
    handles: HashMap<IpNet, u32>,
    next_handle: u32,
    seq: u32,
}

impl TcFlower {
    /// Check support, add the clsact qdisc, and return the backend.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming what is missing (on this VM: cls_flower).
    pub fn open(netns: Option<&str>, iface: &str, capacity: usize) -> Result<Self> {
        let where_ = match netns {
            Some(ns) => format!("{iface} (netns {ns})"),
            None => iface.to_string(),
        };
        if let Some(reason) = support_problem(netns, iface) {
            return Err(Error::Unsupported {
                tier: "tc-flower",
                where_,
                reason,
            });
        }
        let ifindex = rampart_dataplane::netns::ifindex(netns, iface)?;
        let args = ["qdisc", "replace", "dev", iface, "clsact"];
        match netns {
            Some(ns) => rampart_dataplane::cmd::in_ns(ns, "tc", &args),
            None => rampart_dataplane::cmd::run("tc", &args),
        }?;
        Ok(Self {
            netns: netns.map(str::to_string),
            iface: iface.to_string(),
            ifindex,
            capacity,
            handles: HashMap::new(),
            next_handle: 1,
            seq: 1,
        })
    }

    fn send(&self, msg: Vec<u8>) -> Result<()> {
        let r = rampart_dataplane::netns::run_in(self.netns.as_deref(), move || {
            Ok(netlink::Socket::route().and_then(|s| s.request(&msg)))
        })?;
        r.map_err(|e| Error::io(format!("tc flower on {}", self.iface), e))
    }

    fn dump(&self) -> Result<Vec<(u32, IpNet, Counts)>> {
        let msg = dump_filters_msg(self.ifindex, self.seq);
        let r =
            rampart_dataplane::netns::run_in(self.netns.as_deref(), move || Ok(dump_raw(&msg)))?;
        r.map_err(|e| Error::io(format!("dumping tc filters of {}", self.iface), e))
    }
}

fn dump_raw(msg: &[u8]) -> std::io::Result<Vec<(u32, IpNet, Counts)>> {
    let s = netlink::Socket::route()?;
    let mut out = Vec::new();
    s.dump(msg, |ty, body| {
        if ty == RTM_NEWTFILTER {
            out.extend(parse_filter(body));
        }
    })?;
    Ok(out)
}

impl Tier for TcFlower {
    fn info(&self) -> TierInfo {
        TierInfo {
            name: "tc-flower",
            role: "hw",
            location: match &self.netns {
                Some(ns) => format!("{} (netns {ns}) clsact ingress", self.iface),
                None => format!("{} clsact ingress", self.iface),
            },
            capacity: Some(self.capacity),
            update_cost: Duration::from_millis(2),
            counters: CounterKind::Exact,
            emulated: false,
        }
    }

    fn install(&mut self, add: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in add {
            let a = p.net();
            if self.handles.contains_key(&a) {
                continue;
            }
            if self.handles.len() >= self.capacity {
                return Err(Error::Full {
                    tier: "tc-flower",
                    capacity: self.capacity,
                });
            }
            let h = self.next_handle;
            self.seq += 1;
            self.send(new_filter_msg(self.ifindex, h, a, self.seq))?;
            self.next_handle += 1;
            self.handles.insert(a, h);
            n += 1;
        }
        Ok(n)
    }

    fn remove(&mut self, remove: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in remove {
            let a = p.net();
            if let Some(h) = self.handles.get(&a).copied() {
                self.seq += 1;
                self.send(del_filter_msg(self.ifindex, h, a, self.seq))?;
                self.handles.remove(&a);
                n += 1;
            }
        }
        Ok(n)
    }

    fn rules(&self) -> Result<Vec<(Prefix, Counts)>> {
        Ok(self
            .dump()?
            .into_iter()
            .map(|(_, n, c)| (Prefix::truncate(n.addr(), n.prefix_len()), c))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(b: &[u8], ty: u16) -> Option<&[u8]> {
        netlink::attrs(b).find(|(t, _)| *t == ty).map(|(_, p)| p)
    }

    #[test]
    fn new_filter_message_bytes() {
        let b = new_filter_msg(7, 42, "192.0.2.9/32".parse().unwrap(), 5);
        // nlmsghdr
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize,
            b.len()
        );
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), RTM_NEWTFILTER);
        assert_eq!(u16::from_ne_bytes([b[6], b[7]]), 0x1 | 0x4 | 0x400 | 0x200);
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 5);
        // tcmsg
        let t = &b[16..36];
        assert_eq!(t[0], 0, "AF_UNSPEC");
        assert_eq!(i32::from_ne_bytes(t[4..8].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(t[8..12].try_into().unwrap()), 42);
        assert_eq!(
            u32::from_ne_bytes(t[12..16].try_into().unwrap()),
            0xFFFF_FFF2
        );
        let info = u32::from_ne_bytes(t[16..20].try_into().unwrap());
        assert_eq!(info >> 16, 1, "prio");
        assert_eq!(
            u16::from_be((info & 0xffff) as u16),
            0x0800,
            "protocol ip, network order"
        );
        let attrs = &b[36..];
        assert_eq!(find(attrs, TCA_KIND), Some(&b"flower\0"[..]));
        let opts = find(attrs, TCA_OPTIONS).unwrap();
        assert_eq!(find(opts, TCA_FLOWER_KEY_ETH_TYPE), Some(&[0x08, 0x00][..]));
        assert_eq!(
            find(opts, TCA_FLOWER_KEY_IPV4_SRC),
            Some(&[192, 0, 2, 9][..])
        );
        assert_eq!(
            find(opts, TCA_FLOWER_KEY_IPV4_SRC_MASK),
            Some(&[255; 4][..])
        );
        assert_eq!(
            find(opts, TCA_FLOWER_FLAGS),
            Some(&2u32.to_ne_bytes()[..]),
            "skip_sw"
        );
        let act = find(find(opts, TCA_FLOWER_ACT).unwrap(), 1).unwrap();
        assert_eq!(find(act, TCA_ACT_KIND), Some(&b"gact\0"[..]));
        let parms = find(find(act, TCA_ACT_OPTIONS).unwrap(), TCA_GACT_PARMS).unwrap();
        assert_eq!(parms.len(), 20);
        assert_eq!(
            i32::from_ne_bytes(parms[8..12].try_into().unwrap()),
            TC_ACT_SHOT
        );
        // nested attributes carry NLA_F_NESTED
        let raw_ty = u16::from_ne_bytes([attrs[14], attrs[15]]);
        assert_eq!(raw_ty, TCA_OPTIONS | netlink::NLA_F_NESTED);
    }

    #[test]
    fn ipv6_rule_uses_its_own_priority_and_keys() {
        let b = new_filter_msg(3, 1, "2001:db8::1/128".parse().unwrap(), 1);
        let info = u32::from_ne_bytes(b[32..36].try_into().unwrap());
        assert_eq!(info >> 16, 2);
        assert_eq!(u16::from_be((info & 0xffff) as u16), 0x86DD);
        let opts = find(&b[36..], TCA_OPTIONS).unwrap();
        assert_eq!(find(opts, TCA_FLOWER_KEY_ETH_TYPE), Some(&[0x86, 0xdd][..]));
        let src: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(find(opts, TCA_FLOWER_KEY_IPV6_SRC), Some(&src.octets()[..]));
        assert_eq!(
            find(opts, TCA_FLOWER_KEY_IPV6_SRC_MASK),
            Some(&[255; 16][..])
        );
    }

    #[test]
    fn prefix_rules_carry_their_netmask_and_read_back() {
        for (net, mask) in [
            ("198.51.100.0/24", vec![255, 255, 255, 0]),
            ("198.51.100.77/24", vec![255, 255, 255, 0]), // host bits cleared
            ("2001:db8:1::/48", {
                let mut m = vec![0xff; 6];
                m.resize(16, 0);
                m
            }),
        ] {
            let n: IpNet = net.parse().unwrap();
            let b = new_filter_msg(7, 3, n, 1);
            let opts = find(&b[36..], TCA_OPTIONS).unwrap();
            let (key, key_mask) = if n.addr().is_ipv4() {
                (TCA_FLOWER_KEY_IPV4_SRC, TCA_FLOWER_KEY_IPV4_SRC_MASK)
            } else {
                (TCA_FLOWER_KEY_IPV6_SRC, TCA_FLOWER_KEY_IPV6_SRC_MASK)
            };
            assert_eq!(find(opts, key_mask), Some(&mask[..]), "{net}");
            let addr = match n.trunc() {
                IpNet::V4(v) => v.addr().octets().to_vec(),
                IpNet::V6(v) => v.addr().octets().to_vec(),
            };
            assert_eq!(find(opts, key), Some(&addr[..]), "{net}");
            // The kernel's dump echoes the key and mask back.
            let (_, back, _) = parse_filter(&b[16..]).unwrap();
            assert_eq!(back, n.trunc(), "{net}");
        }
        assert_eq!(mask_len(&[255, 255, 254, 0]), Some(23));
        assert_eq!(mask_len(&[0; 4]), Some(0));
        assert_eq!(mask_len(&[255, 0, 255, 0]), None, "a mask with holes");
    }

    #[test]
    fn delete_and_dump_messages() {
        let d = del_filter_msg(7, 42, "192.0.2.9/32".parse().unwrap(), 9);
        assert_eq!(u16::from_ne_bytes([d[4], d[5]]), RTM_DELTFILTER);
        assert_eq!(u32::from_ne_bytes(d[24..28].try_into().unwrap()), 42);
        let g = dump_filters_msg(7, 1);
        assert_eq!(u16::from_ne_bytes([g[4], g[5]]), RTM_GETTFILTER);
        assert_eq!(
            u16::from_ne_bytes([g[6], g[7]]) & 0x300,
            0x300,
            "NLM_F_DUMP"
        );
        assert_eq!(g.len(), 36);
    }

    #[test]
    fn parses_hardware_counters_from_a_dump_reply() {
        // A reply as the kernel sends it: our request's attributes plus
        // TCA_ACT_STATS/TCA_STATS_BASIC in the action.
        let mut m = Msg::new(RTM_NEWTFILTER, 0, 0);
        m.raw(&tcmsg(7, 42, 1, ETH_P_IP));
        m.attr(TCA_KIND, b"flower\0");
        let o = m.nest_start(TCA_OPTIONS);
        m.attr(TCA_FLOWER_KEY_IPV4_SRC, &[198, 51, 100, 4]);
        let a = m.nest_start(TCA_FLOWER_ACT);
        let a1 = m.nest_start(1);
        m.attr(TCA_ACT_KIND, b"gact\0");
        let st = m.nest_start(TCA_ACT_STATS);
        let mut basic = [0u8; 16];
        basic[0..8].copy_from_slice(&123_456u64.to_ne_bytes());
        basic[8..12].copy_from_slice(&789u32.to_ne_bytes());
        m.attr(TCA_STATS_BASIC, &basic);
        m.nest_end(st);
        m.nest_end(a1);
        m.nest_end(a);
        m.nest_end(o);
        let b = m.finish();
        let (h, src, c) = parse_filter(&b[16..]).unwrap();
        assert_eq!(h, 42);
        assert_eq!(src, "198.51.100.4/32".parse::<IpNet>().unwrap());
        assert_eq!(
            c,
            Counts {
                packets: 789,
                bytes: 123_456
            }
        );
        // Not a flower filter: ignored.
        let mut m = Msg::new(RTM_NEWTFILTER, 0, 0);
        m.raw(&tcmsg(7, 1, 1, ETH_P_IP));
        m.attr(TCA_KIND, b"bpf\0");
        assert!(parse_filter(&m.finish()[16..]).is_none());
    }
}
