//! The packet tuple, [`StreamTuple`] — `struct stream_tuple` of
//! `bpf/stream/abi.h`, generated from BTF (one definition for Rust and
//! XDP) — with accessors that turn its raw fields into addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use rampart_bpf::abi::stream::{
    StreamTuple, ST_FLOWID_SEED, ST_F_FRAG_FIRST, ST_F_FRAG_LATER, ST_F_IPV6, ST_F_IP_REV,
    ST_F_PORT_REV, ST_F_TS_HW, ST_KEY_MODE_SHIFT,
};

/// IP protocol numbers used by the apps.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// TCP flag bits of [`StreamTuple::tcp_flags`].
pub mod tcp {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

fn words_to_ip(w: &[u32; 4], v6: bool) -> IpAddr {
    if v6 {
        let mut o = [0u8; 16];
        for (i, x) in w.iter().enumerate() {
            o[i * 4..i * 4 + 4].copy_from_slice(&x.to_ne_bytes());
        }
        IpAddr::V6(Ipv6Addr::from(o))
    } else {
        IpAddr::V4(Ipv4Addr::from(w[0].to_ne_bytes()))
    }
}

/// Address → the tuple's word representation (network byte order in memory).
pub fn ip_to_words(ip: IpAddr) -> [u32; 4] {
    let mut w = [0u32; 4];
    match ip {
        IpAddr::V4(a) => w[0] = u32::from_ne_bytes(a.octets()),
        IpAddr::V6(a) => {
            let o = a.octets();
            for (i, x) in w.iter_mut().enumerate() {
                *x = u32::from_ne_bytes([o[i * 4], o[i * 4 + 1], o[i * 4 + 2], o[i * 4 + 3]]);
            }
        }
    }
    w
}

/// Convenience accessors of [`StreamTuple`] (a type generated from BTF, so
/// an extension trait rather than inherent methods).
pub trait TupleExt {
    /// IPv6 tuple?
    fn is_ipv6(&self) -> bool;
    /// Source address.
    fn src_ip(&self) -> IpAddr;
    /// Destination address.
    fn dst_ip(&self) -> IpAddr;
    /// Key mode the FlowID was computed with (`enum stream_key_mode`).
    fn key_mode(&self) -> u8;
    /// TCP with all of `flags` set.
    fn tcp_has(&self, flags: u8) -> bool;
    /// Build an IPv4/IPv6 tuple (tests, synthetic sources).
    #[allow(clippy::too_many_arguments)]
    fn new_l4(
        ts_ns: u64,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        sport: u16,
        dport: u16,
        tcp_flags: u8,
        ip_len: u16,
    ) -> Self;
}

impl TupleExt for StreamTuple {
    fn is_ipv6(&self) -> bool {
        self.flags & ST_F_IPV6 != 0
    }
    fn src_ip(&self) -> IpAddr {
        words_to_ip(&self.saddr, self.is_ipv6())
    }
    fn dst_ip(&self) -> IpAddr {
        words_to_ip(&self.daddr, self.is_ipv6())
    }
    fn key_mode(&self) -> u8 {
        self.flags >> ST_KEY_MODE_SHIFT
    }
    fn tcp_has(&self, flags: u8) -> bool {
        self.proto == proto::TCP && self.tcp_flags & flags == flags
    }
    fn new_l4(
        ts_ns: u64,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        sport: u16,
        dport: u16,
        tcp_flags: u8,
        ip_len: u16,
    ) -> Self {
        StreamTuple {
            ts_ns,
            saddr: ip_to_words(src),
            daddr: ip_to_words(dst),
            sport,
            dport,
            ip_len,
            proto,
            tcp_flags,
            flags: if src.is_ipv6() { ST_F_IPV6 } else { 0 },
            ..Default::default()
        }
    }
}

/// Byte-wise equality (the BTF-generated type has no `PartialEq`).
pub fn same(a: &StreamTuple, b: &StreamTuple) -> bool {
    a.ts_ns == b.ts_ns
        && a.saddr == b.saddr
        && a.daddr == b.daddr
        && a.sport == b.sport
        && a.dport == b.dport
        && a.ip_len == b.ip_len
        && a.proto == b.proto
        && a.tcp_flags == b.tcp_flags
        && a.flow_id == b.flow_id
        && a.flags == b.flags
        && a.vlan_id == b.vlan_id
}
