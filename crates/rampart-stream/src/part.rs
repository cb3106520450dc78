//! Connection parts: what the apps' first keyed operators consume.
//!
//! A [`FlowPart`] is what some packets of one connection did: both
//! directions' packets, bytes, first/last time, TCP flag counts. A tuple
//! source turns every packet into a one-packet part
//! ([`FlowPart::from_tuple`]); the tap's XDP aggregation builds parts of
//! many packets per connection and epoch in a slot per CPU
//! (`bpf/stream/tap.h`, `stream_agg_key_of` / `stream_agg_add`, which this
//! file mirrors) and userspace merges the CPUs' slots ([`FlowPart::merge`]).
//! Every app folds parts with [`FlowPart::merge`] — an associative,
//! commutative sum — so a connection's result is the same whether its
//! packets came one by one or pre-summed per epoch, as long as an epoch
//! never straddles a window boundary (tumbling windows are whole epochs)
//! and is no longer than a session gap (no gap can hide inside a part).

use crate::apps::Addr;
use crate::tuple::{proto, tcp, StreamTuple, TupleExt};
use rampart_bpf::abi::stream::{StreamAggHead, StreamAggSlot, StreamAggSlot6};

/// A connection: its two endpoints ordered (endpoint 0 is the smaller
/// (address, port) pair), protocol and VLAN. ICMP keys have no ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ConnKey {
    /// Endpoint addresses, network-order words (IPv4 in `[i][0]`).
    pub addr: [[u32; 4]; 2],
    /// Endpoint ports (host order).
    pub port: [u16; 2],
    /// IP protocol.
    pub proto: u8,
    /// IPv6?
    pub v6: bool,
    /// Outermost VLAN id (0: untagged).
    pub vlan: u16,
}

/// One word, mixed: a connection is looked up for every packet of the
/// tap's tuples. Fed field by field, hashers that only multiply (Fx) keep
/// connections that differ in a port in the same few high bits, and
/// hashbrown's tag bits collide.
impl std::hash::Hash for ConnKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u64(self.hash64());
    }
}

impl ConnKey {
    /// A hash of every field (a multiply-xorshift per word).
    pub fn hash64(&self) -> u64 {
        let mut h = u64::from(self.port[0]) << 48
            | u64::from(self.port[1]) << 32
            | u64::from(self.vlan) << 16
            | u64::from(self.proto) << 8
            | u64::from(self.v6);
        for a in &self.addr {
            for w in [
                u64::from(a[0]) | u64::from(a[1]) << 32,
                u64::from(a[2]) | u64::from(a[3]) << 32,
            ] {
                h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                h ^= h >> 29;
            }
        }
        h.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    /// Endpoint `i`'s address.
    pub fn addr(&self, i: usize) -> Addr {
        Addr {
            w: self.addr[i & 1],
            v6: self.v6,
        }
    }
}

/// What one direction of a connection sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirCounts {
    /// Packets.
    pub packets: u64,
    /// IP bytes.
    pub bytes: u64,
    /// First packet, ns since the epoch (0: no packet).
    pub first_ns: u64,
    /// Last packet, ns.
    pub last_ns: u64,
    /// SYN without ACK.
    pub syn: u32,
    /// SYN with ACK.
    pub synack: u32,
    /// ACK without SYN and RST.
    pub ack: u32,
    /// RST.
    pub rst: u32,
    /// FIN.
    pub fin: u32,
    /// OR of the TCP flags.
    pub tcp_flags: u8,
    /// ICMP type of the first packet.
    pub icmp_type: u8,
    /// ICMP code of the first packet.
    pub icmp_code: u8,
}

impl DirCounts {
    /// The counts of one packet, tuple `t`.
    pub fn of_tuple(t: &StreamTuple) -> Self {
        let icmp = t.proto == proto::ICMP || t.proto == proto::ICMPV6;
        let f = t.tcp_flags;
        let is_tcp = t.proto == proto::TCP;
        Self {
            packets: 1,
            bytes: u64::from(t.ip_len),
            first_ns: t.ts_ns,
            last_ns: t.ts_ns,
            syn: u32::from(is_tcp && f & (tcp::SYN | tcp::ACK) == tcp::SYN),
            synack: u32::from(is_tcp && f & (tcp::SYN | tcp::ACK) == tcp::SYN | tcp::ACK),
            ack: u32::from(is_tcp && f & (tcp::SYN | tcp::ACK | tcp::RST) == tcp::ACK),
            rst: u32::from(is_tcp && f & tcp::RST != 0),
            fin: u32::from(is_tcp && f & tcp::FIN != 0),
            tcp_flags: f,
            icmp_type: if icmp { (t.dport >> 8) as u8 } else { 0 },
            icmp_code: if icmp { t.dport as u8 } else { 0 },
        }
    }

    /// Fold `o` in (earlier first packet wins the ICMP fields).
    pub fn merge(&mut self, o: &DirCounts) {
        if o.packets == 0 {
            return;
        }
        if self.packets == 0 || o.first_ns < self.first_ns {
            self.first_ns = o.first_ns;
            self.icmp_type = o.icmp_type;
            self.icmp_code = o.icmp_code;
        }
        self.last_ns = self.last_ns.max(o.last_ns);
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.syn += o.syn;
        self.synack += o.synack;
        self.ack += o.ack;
        self.rst += o.rst;
        self.fin += o.fin;
        self.tcp_flags |= o.tcp_flags;
    }

    /// Direction `d` of a slot's head, the epoch having started at `base`
    /// ns; `tcp`: the connection is TCP (the slot keeps no ACK count: it is
    /// the TCP packets less SYN, SYN-ACK and the others).
    fn from_head(h: &StreamAggHead, d: usize, tcp: bool, base: u64) -> Self {
        let c = &h.cnt;
        let packets = u32::from(h.packets[d]);
        if packets == 0 {
            return Self::default();
        }
        let (syn, synack, other) = (
            u32::from(c.syn[d]),
            u32::from(c.synack[d]),
            u32::from(c.other[d]),
        );
        Self {
            packets: u64::from(packets),
            bytes: u64::from(c.bytes[d]),
            first_ns: base + u64::from(c.first_off[d]),
            last_ns: base + u64::from(c.last_off[d]),
            syn,
            synack,
            ack: if tcp {
                packets.saturating_sub(syn + synack + other)
            } else {
                0
            },
            rst: u32::from(c.rst[d]),
            fin: u32::from(c.fin[d]),
            tcp_flags: c.tcp_flags[d],
            icmp_type: c.icmp_type[d],
            icmp_code: c.icmp_code[d],
        }
    }
}

/// Some packets of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowPart {
    /// The connection.
    pub key: ConnKey,
    /// `dir[0]`: endpoint 0 → endpoint 1; `dir[1]` the other way.
    pub dir: [DirCounts; 2],
}

fn ep_gt(a: &[u32; 4], pa: u16, b: &[u32; 4], pb: u16) -> bool {
    (a.map(u32::from_be), pa) > (b.map(u32::from_be), pb)
}

impl FlowPart {
    /// The one-packet part of `t` (as `stream_agg_key_of` + `stream_agg_add`).
    pub fn from_tuple(t: &StreamTuple) -> Self {
        let (key, d) = Self::conn_of(t);
        Self::of_packet(key, d, t)
    }

    /// The one-packet part of `t`, its connection `key` and direction `d`
    /// already known ([`Self::conn_of`]).
    pub fn of_packet(key: ConnKey, d: usize, t: &StreamTuple) -> Self {
        let mut p = FlowPart {
            key,
            dir: [DirCounts::default(); 2],
        };
        p.dir[d & 1] = DirCounts::of_tuple(t);
        p
    }

    /// The connection of `t` and the direction it goes (`dir` index).
    pub fn conn_of(t: &StreamTuple) -> (ConnKey, usize) {
        let icmp = t.proto == proto::ICMP || t.proto == proto::ICMPV6;
        let (sp, dp) = if icmp { (0, 0) } else { (t.sport, t.dport) };
        let rev = ep_gt(&t.saddr, sp, &t.daddr, dp);
        let (a0, a1, p0, p1) = if rev {
            (t.daddr, t.saddr, dp, sp)
        } else {
            (t.saddr, t.daddr, sp, dp)
        };
        let key = ConnKey {
            addr: [a0, a1],
            port: [p0, p1],
            proto: t.proto,
            v6: t.is_ipv6(),
            vlan: t.vlan_id,
        };
        (key, usize::from(rev))
    }

    /// Add tuple `t` of this part's connection going direction `d` (as
    /// merging its one-packet part, without making one).
    pub fn add_tuple(&mut self, t: &StreamTuple, d: usize) {
        self.dir[d & 1].merge(&DirCounts::of_tuple(t));
    }

    /// A part from a slot of the tap's IPv4 aggregation table: its
    /// connection and the counts of the epoch that started at
    /// `epoch_start_ns`.
    pub fn from_slot(s: &StreamAggSlot, epoch_start_ns: u64) -> Self {
        let k = &s.key;
        let key = ConnKey {
            addr: [[k.addr[0], 0, 0, 0], [k.addr[1], 0, 0, 0]],
            port: k.port,
            proto: k.proto,
            v6: false,
            vlan: k.vlan_id,
        };
        Self::from_head(key, &s.h, epoch_start_ns)
    }

    /// The same from a slot of the IPv6 table.
    pub fn from_slot6(s: &StreamAggSlot6, epoch_start_ns: u64) -> Self {
        let k = &s.key;
        let key = ConnKey {
            addr: k.addr,
            port: k.port,
            proto: k.proto,
            v6: true,
            vlan: k.vlan_id,
        };
        Self::from_head(key, &s.h, epoch_start_ns)
    }

    fn from_head(key: ConnKey, h: &StreamAggHead, base: u64) -> Self {
        let tcp = key.proto == proto::TCP;
        Self {
            key,
            dir: [
                DirCounts::from_head(h, 0, tcp, base),
                DirCounts::from_head(h, 1, tcp, base),
            ],
        }
    }

    /// Fold another part of the same connection in.
    pub fn merge(&mut self, o: &FlowPart) {
        self.dir[0].merge(&o.dir[0]);
        self.dir[1].merge(&o.dir[1]);
    }

    /// First packet, ns (either direction).
    pub fn first_ns(&self) -> u64 {
        match (self.dir[0].packets, self.dir[1].packets) {
            (0, _) => self.dir[1].first_ns,
            (_, 0) => self.dir[0].first_ns,
            _ => self.dir[0].first_ns.min(self.dir[1].first_ns),
        }
    }

    /// Last packet, ns.
    pub fn last_ns(&self) -> u64 {
        self.dir[0].last_ns.max(self.dir[1].last_ns)
    }

    /// Packets, both directions.
    pub fn packets(&self) -> u64 {
        self.dir[0].packets + self.dir[1].packets
    }

    /// The endpoint that opened the connection: the sender of the
    /// earliest SYN (without ACK); failing that, the receiver of a SYN-ACK;
    /// failing that, the sender of the first packet (endpoint 0 on a tie).
    pub fn client(&self) -> usize {
        let d = &self.dir;
        match (d[0].syn > 0, d[1].syn > 0) {
            (true, false) => return 0,
            (false, true) => return 1,
            (true, true) => return usize::from(d[1].first_ns < d[0].first_ns),
            _ => {}
        }
        match (d[0].synack > 0, d[1].synack > 0) {
            (true, false) => return 1,
            (false, true) => return 0,
            _ => {}
        }
        usize::from(d[0].packets == 0 || (d[1].packets > 0 && d[1].first_ns < d[0].first_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16, flags: u8, ts: u64) -> StreamTuple {
        StreamTuple {
            ts_ns: ts,
            saddr: [u32::from_ne_bytes(src), 0, 0, 0],
            daddr: [u32::from_ne_bytes(dst), 0, 0, 0],
            sport: sp,
            dport: dp,
            proto: proto::TCP,
            tcp_flags: flags,
            ip_len: 40,
            ..Default::default()
        }
    }

    #[test]
    fn both_directions_share_a_key_and_fill_their_own_side() {
        let a = FlowPart::from_tuple(&t([10, 0, 0, 2], 40000, [10, 0, 0, 1], 80, tcp::SYN, 5));
        let b = FlowPart::from_tuple(&t(
            [10, 0, 0, 1],
            80,
            [10, 0, 0, 2],
            40000,
            tcp::SYN | tcp::ACK,
            7,
        ));
        assert_eq!(a.key, b.key);
        // 10.0.0.1:80 is endpoint 0: the client's SYN is dir[1].
        assert_eq!(a.dir[1].syn, 1);
        assert_eq!(a.dir[0].packets, 0);
        assert_eq!(b.dir[0].synack, 1);
        let mut m = a;
        m.merge(&b);
        assert_eq!(m.client(), 1);
        assert_eq!((m.first_ns(), m.last_ns(), m.packets()), (5, 7, 2));
    }

    #[test]
    fn adding_tuples_in_place_equals_merging_their_parts() {
        let ts = [
            t([10, 0, 0, 2], 40000, [10, 0, 0, 1], 80, tcp::SYN, 5),
            t(
                [10, 0, 0, 1],
                80,
                [10, 0, 0, 2],
                40000,
                tcp::SYN | tcp::ACK,
                7,
            ),
            t([10, 0, 0, 2], 40000, [10, 0, 0, 1], 80, tcp::ACK, 9),
            t(
                [10, 0, 0, 2],
                40000,
                [10, 0, 0, 1],
                80,
                tcp::FIN | tcp::ACK,
                12,
            ),
        ];
        let mut merged = FlowPart::from_tuple(&ts[0]);
        ts[1..]
            .iter()
            .for_each(|x| merged.merge(&FlowPart::from_tuple(x)));
        let (k, d) = FlowPart::conn_of(&ts[0]);
        let mut added = FlowPart::of_packet(k, d, &ts[0]);
        for x in &ts[1..] {
            let (kx, dx) = FlowPart::conn_of(x);
            assert_eq!(kx, k, "one connection both ways");
            added.add_tuple(x, dx);
        }
        assert_eq!(added, merged);
        assert_eq!((added.dir[1].packets, added.dir[0].packets), (3, 1));
    }

    #[test]
    fn equal_addresses_order_by_port_and_merge_is_order_free() {
        let x = FlowPart::from_tuple(&t([1, 1, 1, 1], 9, [1, 1, 1, 1], 3, tcp::ACK, 1));
        assert_eq!(x.key.port, [3, 9]);
        assert_eq!(x.dir[1].ack, 1);
        let ps: Vec<FlowPart> = (0..6u64)
            .map(|i| {
                let mut tu = t([1, 1, 1, 1], 9, [1, 1, 1, 1], 3, (i as u8) & 0x17, 10 + i);
                if i % 2 == 1 {
                    std::mem::swap(&mut tu.saddr, &mut tu.daddr);
                    std::mem::swap(&mut tu.sport, &mut tu.dport);
                }
                FlowPart::from_tuple(&tu)
            })
            .collect();
        let mut fwd = ps[0];
        ps[1..].iter().for_each(|p| fwd.merge(p));
        let mut back = ps[5];
        ps[..5].iter().rev().for_each(|p| back.merge(p));
        assert_eq!(fwd, back);
    }
}
