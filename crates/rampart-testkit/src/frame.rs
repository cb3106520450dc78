//! One frame builder for every test and for the lab's generator templates.
//!
//! Headers are etherparse's own types, so lengths and checksums (IPv4
//! header, TCP/UDP/ICMP over their pseudo-headers) are right by
//! construction. What etherparse cannot express — more than two VLAN
//! tags, any order or number of IPv6 extension headers — is assembled
//! from etherparse headers too, around an L4 segment whose checksum does
//! not depend on them; PPPoE session and MPLS headers (between the tags
//! and the IP header) are written by hand.
//!
//! The breakage knobs (`version`, `ihl`, `ip_len`, `udp_len`,
//! `tcp_data_offset`, `truncate`) are applied after the checksums: the L4
//! checksum then no longer matches (as on the wire), while the IPv4 header
//! checksum is recomputed so that only the field asked for is wrong.
//!
//! ```
//! use rampart_testkit::frame::{tcp, Frame};
//! let syn = Frame::tcp("192.0.2.1", "198.51.100.1", 40000, 80).flags(tcp::SYN).build();
//! let cut = Frame::udp("2001:db8::1", "2001:db8::2", 1, 53).zeros(10).truncate(60).build();
//! assert_eq!((syn.len(), cut.len()), (54, 60));
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    ArpEthIpv4Packet, ArpOperation, EtherType, Ethernet2Header, IcmpEchoHeader, Icmpv4Header,
    Icmpv4Type, Icmpv6Header, Icmpv6Type, IpAuthHeader, IpFragOffset, IpNumber, Ipv4Header,
    Ipv6Header, Ipv6RawExtHeader, TcpHeader, UdpHeader,
};

/// Source MAC of every frame unless [`Frame::macs`] says otherwise.
pub const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// Destination MAC of every frame unless [`Frame::macs`] says otherwise.
pub const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// EtherTypes the tests use.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// LLDP.
    pub const LLDP: u16 = 0x88cc;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// MPLS unicast.
    pub const MPLS: u16 = 0x8847;
    /// MPLS multicast.
    pub const MPLS_MC: u16 = 0x8848;
    /// PPPoE session stage.
    pub const PPPOE: u16 = 0x8864;
}

/// TCP flag bits as they stand in the header's 14th byte.
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
    /// URG.
    pub const URG: u8 = 0x20;
    /// ECE.
    pub const ECE: u8 = 0x40;
    /// CWR.
    pub const CWR: u8 = 0x80;
}

/// Anything a test names an address with: `"192.0.2.1"`, `[10, 0, 0, 1]`,
/// a 16-byte array, or an `IpAddr`.
pub trait Addr {
    /// The address.
    fn addr(self) -> IpAddr;
}

impl Addr for &str {
    fn addr(self) -> IpAddr {
        self.parse()
            .unwrap_or_else(|e| panic!("test address {self:?}: {e}"))
    }
}
impl Addr for &String {
    fn addr(self) -> IpAddr {
        self.as_str().addr()
    }
}
impl Addr for IpAddr {
    fn addr(self) -> IpAddr {
        self
    }
}
impl Addr for Ipv4Addr {
    fn addr(self) -> IpAddr {
        self.into()
    }
}
impl Addr for Ipv6Addr {
    fn addr(self) -> IpAddr {
        self.into()
    }
}
impl Addr for [u8; 4] {
    fn addr(self) -> IpAddr {
        Ipv4Addr::from(self).into()
    }
}
impl Addr for [u8; 16] {
    fn addr(self) -> IpAddr {
        Ipv6Addr::from(self).into()
    }
}

/// An IPv6 extension header, in the order given to [`Frame::ext`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ext {
    /// Hop-by-hop options, `(len8 + 1) * 8` bytes of PadN.
    HopByHop(u8),
    /// Routing header (type 0, no segments left), `(len8 + 1) * 8` bytes.
    Routing(u8),
    /// Destination options, `(len8 + 1) * 8` bytes of PadN.
    DestOpts(u8),
    /// Authentication header with `icv_words` 32-bit words of ICV.
    Auth(u8),
    /// Fragment header: offset in 8-byte units, more-fragments flag.
    Fragment(u16, bool),
}

impl Ext {
    fn proto(&self) -> IpNumber {
        match self {
            Ext::HopByHop(_) => IpNumber::IPV6_HEADER_HOP_BY_HOP,
            Ext::Routing(_) => IpNumber::IPV6_ROUTE_HEADER,
            Ext::DestOpts(_) => IpNumber::IPV6_DESTINATION_OPTIONS,
            Ext::Auth(_) => IpNumber::AUTHENTICATION_HEADER,
            Ext::Fragment(..) => IpNumber::IPV6_FRAGMENTATION_HEADER,
        }
    }

    fn write(&self, next: IpNumber, out: &mut Vec<u8>) {
        // Options headers carry one PadN option filling them (RFC 8200 4.2);
        // the routing header is type 0 with no segments left.
        let options = |len8: u8, padn: bool| {
            let mut body = vec![0u8; 6 + 8 * usize::from(len8)];
            if padn {
                body[0] = 1;
                body[1] = (body.len() - 2) as u8;
            }
            Ipv6RawExtHeader::new_raw(next, &body).expect("extension header length")
        };
        match *self {
            Ext::HopByHop(n) | Ext::DestOpts(n) => options(n, true).write(out),
            Ext::Routing(n) => options(n, false).write(out),
            Ext::Auth(words) => IpAuthHeader::new(next, 0x100, 1, &vec![0; 4 * usize::from(words)])
                .expect("ICV length")
                .write(out),
            Ext::Fragment(offset, more) => {
                // By hand: etherparse 0.18's Ipv6FragmentHeader::to_bytes
                // puts the offset's low bits and the M flag in the wrong
                // places (RFC 8200 4.5: offset in the top 13 bits, M last).
                let field = (frag_offset(offset).value() << 3) | u16::from(more);
                out.extend_from_slice(&[next.0, 0]);
                out.extend_from_slice(&field.to_be_bytes());
                out.extend_from_slice(&7u32.to_be_bytes());
                Ok(())
            }
        }
        .expect("writing to a Vec");
    }
}

fn frag_offset(units: u16) -> IpFragOffset {
    IpFragOffset::try_new(units).expect("fragment offset below 8192 units")
}

#[derive(Debug, Clone)]
enum Net {
    Ip { src: IpAddr, dst: IpAddr },
    Other { ethertype: u16 },
}

#[derive(Debug, Clone)]
enum L4 {
    /// The payload follows the IP headers as it is, under this protocol number.
    Raw(u8),
    Udp {
        sport: u16,
        dport: u16,
    },
    Tcp {
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        window: u16,
        flags: u8,
        options: Vec<u8>,
    },
    IcmpEcho {
        id: u16,
        seq: u16,
        reply: bool,
    },
}

/// A frame to build. Start from [`Frame::udp`], [`Frame::tcp`],
/// [`Frame::icmp_echo`], [`Frame::ip`] (raw protocol), [`Frame::arp`] or
/// [`Frame::ethertype`]; change what the test is about; [`Frame::build`].
#[derive(Debug, Clone)]
#[must_use]
pub struct Frame {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    vlans: Vec<(u16, u16)>,
    pppoe: Option<u16>,
    mpls: Vec<u32>,
    mpls_ethertype: u16,
    net: Net,
    l4: L4,
    payload: Vec<u8>,
    ttl: u8,
    ipv4_id: u16,
    ipv4_options: Vec<u8>,
    ipv4_frag: (u16, bool),
    exts: Vec<Ext>,
    version: Option<u8>,
    ihl: Option<u8>,
    ip_len: Option<u16>,
    udp_len: Option<u16>,
    tcp_doff: Option<u8>,
    pad_to: usize,
    truncate: Option<usize>,
}

impl Frame {
    fn with(net: Net, l4: L4) -> Self {
        Self {
            src_mac: MAC_A,
            dst_mac: MAC_B,
            vlans: Vec::new(),
            pppoe: None,
            mpls: Vec::new(),
            mpls_ethertype: ethertype::MPLS,
            net,
            l4,
            payload: Vec::new(),
            ttl: 64,
            ipv4_id: 0,
            ipv4_options: Vec::new(),
            ipv4_frag: (0, false),
            exts: Vec::new(),
            version: None,
            ihl: None,
            ip_len: None,
            udp_len: None,
            tcp_doff: None,
            pad_to: 0,
            truncate: None,
        }
    }

    fn ip_pair(src: impl Addr, dst: impl Addr) -> Net {
        let (src, dst) = (src.addr(), dst.addr());
        assert_eq!(
            src.is_ipv4(),
            dst.is_ipv4(),
            "{src} and {dst}: one family per frame"
        );
        Net::Ip { src, dst }
    }

    /// IP from `src` to `dst` (one family) carrying the payload as protocol
    /// `proto` (ESP, GRE, a later fragment's bytes, ...).
    pub fn ip(src: impl Addr, dst: impl Addr, proto: u8) -> Self {
        Self::with(Self::ip_pair(src, dst), L4::Raw(proto))
    }

    /// UDP datagram, empty unless a payload is added.
    pub fn udp(src: impl Addr, dst: impl Addr, sport: u16, dport: u16) -> Self {
        Self::with(Self::ip_pair(src, dst), L4::Udp { sport, dport })
    }

    /// TCP segment without flags (add them with [`Frame::flags`]),
    /// sequence number 1, window 1000, no options.
    pub fn tcp(src: impl Addr, dst: impl Addr, sport: u16, dport: u16) -> Self {
        Self::with(
            Self::ip_pair(src, dst),
            L4::Tcp {
                sport,
                dport,
                seq: 1,
                ack: 0,
                window: 1000,
                flags: 0,
                options: Vec::new(),
            },
        )
    }

    /// ICMP echo request (ICMPv6 for IPv6 addresses), id 1, sequence 1.
    pub fn icmp_echo(src: impl Addr, dst: impl Addr) -> Self {
        Self::with(
            Self::ip_pair(src, dst),
            L4::IcmpEcho {
                id: 1,
                seq: 1,
                reply: false,
            },
        )
    }

    /// ICMP echo reply (ICMPv6 for IPv6 addresses), id 1, sequence 1.
    pub fn icmp_echo_reply(src: impl Addr, dst: impl Addr) -> Self {
        Self::with(
            Self::ip_pair(src, dst),
            L4::IcmpEcho {
                id: 1,
                seq: 1,
                reply: true,
            },
        )
    }

    /// ARP request from `sender` for `target` (IPv4 addresses), broadcast.
    pub fn arp(sender: [u8; 4], target: [u8; 4]) -> Self {
        let arp = ArpEthIpv4Packet {
            operation: ArpOperation::REQUEST,
            sender_mac: MAC_A,
            sender_ipv4: sender,
            target_mac: [0; 6],
            target_ipv4: target,
        };
        Self::ethertype(ethertype::ARP)
            .macs(MAC_A, [0xff; 6])
            .payload(&arp.to_bytes())
    }

    /// A frame of another EtherType: only the payload follows.
    pub fn ethertype(ethertype: u16) -> Self {
        Self::with(Net::Other { ethertype }, L4::Raw(0))
    }

    /// Source and destination MAC.
    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Self {
        (self.src_mac, self.dst_mac) = (src, dst);
        self
    }

    /// Add an 802.1Q tag with VLAN id `id` (tags stack outermost first).
    pub fn vlan(self, id: u16) -> Self {
        self.vlan_tag(ethertype::VLAN, id)
    }

    /// Add a tag with TPID `tpid` (e.g. [`ethertype::QINQ`]) and TCI `tci`.
    pub fn vlan_tag(mut self, tpid: u16, tci: u16) -> Self {
        self.vlans.push((tpid, tci));
        self
    }

    /// Put the IP packet in PPPoE session `session` (after the VLAN tags):
    /// a PPPoE header of version 1, type 1, code 0 and the PPP protocol of
    /// the packet's family (IPv4 0x0021, IPv6 0x0057).
    pub fn pppoe(mut self, session: u16) -> Self {
        assert!(self.mpls.is_empty(), "PPPoE or MPLS, not both");
        self.pppoe = Some(session);
        self
    }

    /// Push an MPLS label stack entry with label `label` (stacked
    /// outermost first, after the VLAN tags; the last one carries the
    /// bottom-of-stack bit; TTL 64).
    pub fn mpls(mut self, label: u32) -> Self {
        assert!(self.pppoe.is_none(), "PPPoE or MPLS, not both");
        assert!(label < 1 << 20, "MPLS labels have 20 bits");
        self.mpls.push(label);
        self
    }

    /// Announce the MPLS labels with the multicast EtherType (0x8848).
    pub fn mpls_multicast(mut self) -> Self {
        self.mpls_ethertype = ethertype::MPLS_MC;
        self
    }

    /// The payload after the L4 header (or after the IP headers for
    /// [`Frame::ip`], after the Ethernet header for [`Frame::ethertype`]).
    pub fn payload(mut self, bytes: &[u8]) -> Self {
        self.payload = bytes.to_vec();
        self
    }

    /// `n` zero bytes of payload.
    pub fn zeros(self, n: usize) -> Self {
        self.payload(&vec![0; n])
    }

    /// IPv4 TTL / IPv6 hop limit (64 unless set).
    pub fn ttl(mut self, ttl: u8) -> Self {
        self.ttl = ttl;
        self
    }

    /// IPv4 identification.
    pub fn ipv4_id(mut self, id: u16) -> Self {
        self.ipv4_id = id;
        self
    }

    /// IPv4 options (a multiple of 4 bytes, at most 40).
    pub fn ipv4_options(mut self, options: &[u8]) -> Self {
        self.ipv4_options = options.to_vec();
        self
    }

    /// Make the packet a fragment: offset in 8-byte units, more-fragments
    /// flag. IPv4 sets the header's fields; IPv6 appends a fragment header
    /// to the extension headers.
    pub fn fragment(mut self, offset: u16, more: bool) -> Self {
        match self.net {
            Net::Ip { src, .. } if src.is_ipv6() => self.exts.push(Ext::Fragment(offset, more)),
            _ => self.ipv4_frag = (offset, more),
        }
        self
    }

    /// Append an IPv6 extension header.
    pub fn ext(mut self, ext: Ext) -> Self {
        self.exts.push(ext);
        self
    }

    /// TCP flags byte ([`tcp`] bits).
    pub fn flags(mut self, bits: u8) -> Self {
        if let L4::Tcp { flags, .. } = &mut self.l4 {
            *flags = bits;
        } else {
            panic!("flags on a frame that is not TCP");
        }
        self
    }

    /// TCP sequence number.
    pub fn seq(mut self, n: u32) -> Self {
        match &mut self.l4 {
            L4::Tcp { seq, .. } => *seq = n,
            L4::IcmpEcho { seq, .. } => *seq = n as u16,
            _ => panic!("a sequence number on a frame that is not TCP or ICMP echo"),
        }
        self
    }

    /// TCP acknowledgment number (the ACK flag is set with [`Frame::flags`]).
    pub fn ack(mut self, n: u32) -> Self {
        if let L4::Tcp { ack, .. } = &mut self.l4 {
            *ack = n;
        } else {
            panic!("an acknowledgment number on a frame that is not TCP");
        }
        self
    }

    /// TCP window.
    pub fn window(mut self, n: u16) -> Self {
        if let L4::Tcp { window, .. } = &mut self.l4 {
            *window = n;
        } else {
            panic!("a window on a frame that is not TCP");
        }
        self
    }

    /// TCP options, raw (padded to a multiple of 4 with EOL, at most 40).
    pub fn tcp_options(mut self, bytes: &[u8]) -> Self {
        if let L4::Tcp { options, .. } = &mut self.l4 {
            *options = bytes.to_vec();
        } else {
            panic!("TCP options on a frame that is not TCP");
        }
        self
    }

    /// ICMP echo identifier.
    pub fn echo_id(mut self, n: u16) -> Self {
        if let L4::IcmpEcho { id, .. } = &mut self.l4 {
            *id = n;
        } else {
            panic!("an echo id on a frame that is not ICMP echo");
        }
        self
    }

    /// Break: the IP version nibble.
    pub fn version(mut self, v: u8) -> Self {
        self.version = Some(v);
        self
    }

    /// Break: the IPv4 header length field (32-bit words).
    pub fn ihl(mut self, words: u8) -> Self {
        self.ihl = Some(words);
        self
    }

    /// Break: the IPv4 total length / IPv6 payload length field.
    pub fn ip_len(mut self, n: u16) -> Self {
        self.ip_len = Some(n);
        self
    }

    /// Break: the UDP length field.
    pub fn udp_len(mut self, n: u16) -> Self {
        self.udp_len = Some(n);
        self
    }

    /// Break: the TCP data offset field (32-bit words).
    pub fn tcp_data_offset(mut self, words: u8) -> Self {
        self.tcp_doff = Some(words);
        self
    }

    /// Pad with zeros to at least `len` bytes (Ethernet padding: the IP
    /// lengths do not cover it).
    pub fn pad_to(mut self, len: usize) -> Self {
        self.pad_to = len;
        self
    }

    /// Cut the built frame to `len` bytes (the headers keep announcing
    /// what was there).
    pub fn truncate(mut self, len: usize) -> Self {
        self.truncate = Some(len);
        self
    }

    /// The frame's bytes.
    ///
    /// # Panics
    /// On a frame no knob can make (a payload above 64 KiB, more than 40
    /// bytes of options, ...): a mistake in the test.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        let ethertype = match self.net {
            Net::Ip { src, .. } if src.is_ipv4() => ethertype::IPV4,
            Net::Ip { .. } => ethertype::IPV6,
            Net::Other { ethertype } => ethertype,
        };
        let ip_ethertype = ethertype;
        let ethertype = if self.pppoe.is_some() {
            ethertype::PPPOE
        } else if self.mpls.is_empty() {
            ethertype
        } else {
            self.mpls_ethertype
        };
        // Each tag names what follows it: the next tag's TPID or the EtherType.
        let first = self.vlans.first().map_or(ethertype, |v| v.0);
        Ethernet2Header {
            source: self.src_mac,
            destination: self.dst_mac,
            ether_type: EtherType(first),
        }
        .write(&mut out)
        .expect("writing to a Vec");
        for (i, (_, tci)) in self.vlans.iter().enumerate() {
            let next = self.vlans.get(i + 1).map_or(ethertype, |v| v.0);
            out.extend_from_slice(&tci.to_be_bytes());
            out.extend_from_slice(&next.to_be_bytes());
        }
        let pppoe_off = out.len();
        if let Some(session) = self.pppoe {
            let ppp: u16 = match ip_ethertype {
                ethertype::IPV4 => 0x0021,
                ethertype::IPV6 => 0x0057,
                t => panic!("PPPoE carrying EtherType {t:#06x}: build it as a payload"),
            };
            out.extend_from_slice(&[0x11, 0]);
            out.extend_from_slice(&session.to_be_bytes());
            out.extend_from_slice(&[0, 0]); // the length, once the packet is there
            out.extend_from_slice(&ppp.to_be_bytes());
        }
        for (i, label) in self.mpls.iter().enumerate() {
            let bottom = u32::from(i + 1 == self.mpls.len());
            out.extend_from_slice(&(label << 12 | bottom << 8 | 64).to_be_bytes());
        }
        let l3_off = out.len();
        match self.net {
            Net::Ip { src, dst } => self.write_ip(src, dst, &mut out),
            Net::Other { .. } => out.extend_from_slice(&self.payload),
        }
        if self.pppoe.is_some() {
            // RFC 2516: the length of the PPPoE payload (the PPP protocol field onwards).
            let len = u16::try_from(out.len() - pppoe_off - 6).expect("PPPoE length");
            out[pppoe_off + 4..pppoe_off + 6].copy_from_slice(&len.to_be_bytes());
        }
        self.break_headers(l3_off, &mut out);
        if out.len() < self.pad_to {
            out.resize(self.pad_to, 0);
        }
        if let Some(n) = self.truncate {
            assert!(
                n <= out.len(),
                "truncate({n}) of a {}-byte frame",
                out.len()
            );
            out.truncate(n);
        }
        out
    }

    /// The L4 header (with its checksum) and payload, and their protocol.
    fn segment(&self, src: IpAddr, dst: IpAddr) -> (IpNumber, Vec<u8>) {
        let mut seg = Vec::new();
        let p = &self.payload[..];
        let proto = match (&self.l4, src, dst) {
            (L4::Raw(proto), ..) => IpNumber(*proto),
            (L4::Udp { sport, dport }, IpAddr::V4(s), IpAddr::V4(d)) => {
                let ip = Ipv4Header::new(0, 0, IpNumber::UDP, s.octets(), d.octets()).unwrap();
                let h = UdpHeader::with_ipv4_checksum(*sport, *dport, &ip, p).expect("UDP length");
                h.write(&mut seg).expect("writing to a Vec");
                IpNumber::UDP
            }
            (L4::Udp { sport, dport }, IpAddr::V6(s), IpAddr::V6(d)) => {
                let ip = v6_header(s, d, 0, IpNumber::UDP);
                let h = UdpHeader::with_ipv6_checksum(*sport, *dport, &ip, p).expect("UDP length");
                h.write(&mut seg).expect("writing to a Vec");
                IpNumber::UDP
            }
            (
                L4::Tcp {
                    sport,
                    dport,
                    seq,
                    ack,
                    window,
                    flags,
                    options,
                },
                s,
                d,
            ) => {
                let mut h = TcpHeader::new(*sport, *dport, *seq, *window);
                h.acknowledgment_number = *ack;
                (h.fin, h.syn, h.rst, h.psh) = (
                    flags & tcp::FIN != 0,
                    flags & tcp::SYN != 0,
                    flags & tcp::RST != 0,
                    flags & tcp::PSH != 0,
                );
                (h.ack, h.urg, h.ece, h.cwr) = (
                    flags & tcp::ACK != 0,
                    flags & tcp::URG != 0,
                    flags & tcp::ECE != 0,
                    flags & tcp::CWR != 0,
                );
                h.set_options_raw(options)
                    .expect("at most 40 bytes of TCP options");
                h.checksum = match (s, d) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => {
                        h.calc_checksum_ipv4_raw(s.octets(), d.octets(), p)
                    }
                    (IpAddr::V6(s), IpAddr::V6(d)) => {
                        h.calc_checksum_ipv6_raw(s.octets(), d.octets(), p)
                    }
                    _ => unreachable!("one family per frame"),
                }
                .expect("TCP length");
                h.write(&mut seg).expect("writing to a Vec");
                IpNumber::TCP
            }
            (L4::IcmpEcho { id, seq, reply }, IpAddr::V4(_), _) => {
                let echo = IcmpEchoHeader { id: *id, seq: *seq };
                let ty = if *reply {
                    Icmpv4Type::EchoReply(echo)
                } else {
                    Icmpv4Type::EchoRequest(echo)
                };
                Icmpv4Header::with_checksum(ty, p)
                    .write(&mut seg)
                    .expect("writing to a Vec");
                IpNumber::ICMP
            }
            (L4::IcmpEcho { id, seq, reply }, IpAddr::V6(s), IpAddr::V6(d)) => {
                let echo = IcmpEchoHeader { id: *id, seq: *seq };
                let ty = if *reply {
                    Icmpv6Type::EchoReply(echo)
                } else {
                    Icmpv6Type::EchoRequest(echo)
                };
                Icmpv6Header::with_checksum(ty, s.octets(), d.octets(), p)
                    .expect("ICMPv6 length")
                    .write(&mut seg)
                    .expect("writing to a Vec");
                IpNumber::IPV6_ICMP
            }
            _ => unreachable!("one family per frame"),
        };
        seg.extend_from_slice(p);
        (proto, seg)
    }

    fn write_ip(&self, src: IpAddr, dst: IpAddr, out: &mut Vec<u8>) {
        let (proto, seg) = self.segment(src, dst);
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut ip = Ipv4Header::new(0, self.ttl, proto, s.octets(), d.octets()).unwrap();
                ip.identification = self.ipv4_id;
                ip.options = self.ipv4_options[..]
                    .try_into()
                    .expect("IPv4 options: a multiple of 4 bytes, at most 40");
                if self.ipv4_frag != (0, false) {
                    (ip.dont_fragment, ip.more_fragments) = (false, self.ipv4_frag.1);
                    ip.fragment_offset = frag_offset(self.ipv4_frag.0);
                }
                ip.set_payload_len(seg.len()).expect("IPv4 payload length");
                ip.write(out).expect("writing to a Vec");
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut chain = Vec::new();
                for (i, e) in self.exts.iter().enumerate() {
                    let next = self.exts.get(i + 1).map_or(proto, Ext::proto);
                    e.write(next, &mut chain);
                }
                let first = self.exts.first().map_or(proto, Ext::proto);
                let mut ip = v6_header(s, d, self.ttl, first);
                ip.set_payload_length(chain.len() + seg.len())
                    .expect("IPv6 payload length");
                ip.write(out).expect("writing to a Vec");
                out.extend_from_slice(&chain);
            }
            _ => unreachable!("one family per frame"),
        }
        out.extend_from_slice(&seg);
    }

    /// Apply the breakage knobs to the built headers.
    fn break_headers(&self, l3: usize, f: &mut [u8]) {
        let Net::Ip { src, .. } = self.net else {
            return;
        };
        if let Some(v) = self.version {
            f[l3] = (v << 4) | (f[l3] & 0x0f);
        }
        if src.is_ipv4() {
            let hlen = 20 + self.ipv4_options.len();
            if let Some(w) = self.ihl {
                f[l3] = (f[l3] & 0xf0) | (w & 0x0f);
            }
            if let Some(n) = self.ip_len {
                f[l3 + 2..l3 + 4].copy_from_slice(&n.to_be_bytes());
            }
            // Only the field asked for is wrong: the header checksum follows it.
            f[l3 + 10..l3 + 12].fill(0);
            let sum = ipv4_header_checksum(&f[l3..l3 + hlen]);
            f[l3 + 10..l3 + 12].copy_from_slice(&sum.to_be_bytes());
        } else if let Some(n) = self.ip_len {
            f[l3 + 4..l3 + 6].copy_from_slice(&n.to_be_bytes());
        }
        let l4 = l3
            + if src.is_ipv4() {
                20 + self.ipv4_options.len()
            } else {
                40 + self.exts_len()
            };
        if let Some(n) = self.udp_len {
            f[l4 + 4..l4 + 6].copy_from_slice(&n.to_be_bytes());
        }
        if let Some(w) = self.tcp_doff {
            f[l4 + 12] = (w << 4) | (f[l4 + 12] & 0x0f);
        }
    }

    fn exts_len(&self) -> usize {
        let mut v = Vec::new();
        for e in &self.exts {
            e.write(IpNumber::UDP, &mut v);
        }
        v.len()
    }
}

fn v6_header(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, next: IpNumber) -> Ipv6Header {
    Ipv6Header {
        next_header: next,
        hop_limit,
        source: src.octets(),
        destination: dst.octets(),
        ..Default::default()
    }
}

fn ipv4_header_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// What [`check`] found in a frame whose checksums are all right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol of the transport header (6, 17, 1, 58).
    pub proto: u8,
    /// Source port (0 for ICMP).
    pub sport: u16,
    /// Destination port (0 for ICMP).
    pub dport: u16,
    /// TCP flags byte (0 for others).
    pub tcp_flags: u8,
    /// The transport payload.
    pub payload: Vec<u8>,
    /// Frame length.
    pub len: usize,
}

/// Parse `frame` with etherparse (an implementation independent of ours)
/// and verify the IPv4 header checksum and the TCP/UDP/ICMP checksum.
///
/// # Errors
/// A description of the first thing that is wrong.
pub fn check(frame: &[u8]) -> Result<Checked, String> {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    let p = SlicedPacket::from_ethernet(frame).map_err(|e| format!("unparseable frame: {e}"))?;
    let (src, dst, pseudo): (IpAddr, IpAddr, Pseudo) = match &p.net {
        Some(NetSlice::Ipv4(s)) => {
            let h = s.header().to_header();
            if h.calc_header_checksum() != h.header_checksum {
                return Err("bad IPv4 header checksum".into());
            }
            (
                Ipv4Addr::from(h.source).into(),
                Ipv4Addr::from(h.destination).into(),
                Pseudo::V4(h.source, h.destination),
            )
        }
        Some(NetSlice::Ipv6(s)) => {
            let h = s.header();
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                Pseudo::V6(h.source(), h.destination()),
            )
        }
        _ => return Err("not an IP frame".into()),
    };
    let bad = |what: &str, got: u16, want: u16| {
        Err(format!(
            "bad {what} checksum {got:#06x}, expected {want:#06x}"
        ))
    };
    let err = |e: etherparse::err::ValueTooBigError<usize>| e.to_string();
    let (proto, sport, dport, tcp_flags, payload) = match &p.transport {
        Some(TransportSlice::Udp(u)) => {
            let h = u.to_header();
            let want = match pseudo {
                Pseudo::V4(s, d) => h.calc_checksum_ipv4_raw(s, d, u.payload()).map_err(err)?,
                Pseudo::V6(s, d) => h.calc_checksum_ipv6_raw(s, d, u.payload()).map_err(err)?,
            };
            if want != h.checksum {
                return bad("UDP", h.checksum, want);
            }
            (17, h.source_port, h.destination_port, 0, u.payload())
        }
        Some(TransportSlice::Tcp(t)) => {
            let want = match pseudo {
                Pseudo::V4(s, d) => t.calc_checksum_ipv4(s, d).map_err(err)?,
                Pseudo::V6(s, d) => t.calc_checksum_ipv6(s, d).map_err(err)?,
            };
            if want != t.checksum() {
                return bad("TCP", t.checksum(), want);
            }
            let flags = t.slice()[13];
            (6, t.source_port(), t.destination_port(), flags, t.payload())
        }
        Some(TransportSlice::Icmpv4(i)) => {
            let want = i.header().icmp_type.calc_checksum(i.payload());
            if want != i.checksum() {
                return bad("ICMP", i.checksum(), want);
            }
            (1, 0, 0, 0, i.payload())
        }
        Some(TransportSlice::Icmpv6(i)) => {
            let Pseudo::V6(s, d) = pseudo else {
                return Err("ICMPv6 over IPv4".into());
            };
            let want = i
                .header()
                .icmp_type
                .calc_checksum(s, d, i.payload())
                .map_err(err)?;
            if want != i.checksum() {
                return bad("ICMPv6", i.checksum(), want);
            }
            (58, 0, 0, 0, i.payload())
        }
        _ => return Err("no transport header".into()),
    };
    Ok(Checked {
        src,
        dst,
        proto,
        sport,
        dport,
        tcp_flags,
        payload: payload.to_vec(),
        len: frame.len(),
    })
}

enum Pseudo {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_valid_checksums() {
        let frames = [
            Frame::udp("192.0.2.1", "198.51.100.7", 1234, 53).zeros(10),
            Frame::udp("2001:db8::1", "2001:db8::2", 1, 443).payload(b"abc"),
            Frame::tcp("10.0.0.1", "10.0.0.2", 5, 80)
                .flags(tcp::SYN | tcp::ACK)
                .tcp_options(&[2, 4, 5, 0xb4]),
            Frame::tcp("fd00::1", "fd00::2", 5, 80)
                .flags(tcp::RST)
                .payload(b"x"),
            Frame::icmp_echo("10.0.0.1", "10.0.0.2").zeros(8),
            Frame::icmp_echo("fd00::1", "fd00::2").zeros(8),
            Frame::icmp_echo_reply("10.0.0.2", "10.0.0.1").zeros(8),
            Frame::icmp_echo_reply("fd00::2", "fd00::1").zeros(8),
            Frame::udp("10.0.0.1", "10.0.0.2", 1, 2)
                .ipv4_options(&[1, 1, 1, 0])
                .vlan(5)
                .vlan_tag(ethertype::QINQ, 6),
            Frame::udp("fd00::1", "fd00::2", 1, 2)
                .ext(Ext::HopByHop(0))
                .ext(Ext::Routing(1))
                .ext(Ext::Auth(1))
                .ext(Ext::DestOpts(0)),
        ];
        for f in frames {
            let b = f.build();
            check(&b).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        }
    }

    #[test]
    fn layout_of_tags_options_and_extension_headers() {
        let f = Frame::tcp([10, 0, 0, 1], [10, 0, 0, 2], 7, 9)
            .flags(tcp::SYN)
            .vlan(100)
            .vlan(101)
            .vlan(102)
            .ipv4_options(&[1; 8])
            .build();
        assert_eq!(&f[12..14], &[0x81, 0x00]);
        assert_eq!(&f[14..18], &[0, 100, 0x81, 0]);
        assert_eq!(&f[22..26], &[0, 102, 0x08, 0]);
        assert_eq!(f[26], 0x47, "IHL 7 with 8 bytes of options");
        assert_eq!(f[26 + 28 + 13], tcp::SYN);
        assert_eq!(f.len(), 26 + 28 + 20);

        let f = Frame::udp("fd00::1", "fd00::2", 1, 2)
            .ext(Ext::DestOpts(1))
            .fragment(185, false)
            .build();
        assert_eq!(f[14 + 6], 60, "first next header: destination options");
        assert_eq!((f[54], f[55]), (44, 1), "then a fragment header; 16 bytes");
        assert_eq!(f[70], 17, "then UDP");
        assert_eq!(u16::from_be_bytes([f[72], f[73]]), 185 << 3);
        assert_eq!(u16::from_be_bytes([f[18], f[19]]), 16 + 8 + 8);
    }

    #[test]
    fn knobs_break_only_what_they_name() {
        let good = Frame::udp("192.0.2.1", "192.0.2.2", 1, 2).zeros(10);
        let b = good.clone().ip_len(12).build();
        assert_eq!(&b[16..18], &[0, 12]);
        // The IPv4 header checksum still holds; the total length is wrong.
        assert_eq!(ipv4_header_checksum(&b[14..34]), 0);
        assert_eq!(good.clone().version(5).build()[14], 0x55);
        assert_eq!(good.clone().ihl(4).build()[14], 0x44);
        assert_eq!(good.clone().truncate(20).build().len(), 20);
        assert_eq!(good.clone().pad_to(60).build().len(), 60);
        assert_eq!(
            &good.clone().udp_len(500).build()[38..40],
            &500u16.to_be_bytes()
        );
        let t = Frame::tcp("fd00::1", "fd00::2", 1, 2)
            .tcp_data_offset(4)
            .build();
        assert_eq!(t[14 + 40 + 12] >> 4, 4);
        let f = good.clone().fragment(3, true).build();
        assert_eq!(&f[20..22], &[0x20, 0x03]);
        assert!(check(&good.udp_len(30).build()).is_err());
    }

    #[test]
    fn arp_and_other_ethertypes() {
        let a = Frame::arp([10, 0, 0, 1], [10, 0, 0, 2]).build();
        assert_eq!(
            (a.len(), &a[0..6], &a[12..14]),
            (42, &[0xff; 6][..], &[8, 6][..])
        );
        let l = Frame::ethertype(ethertype::LLDP).zeros(4).build();
        assert_eq!((&l[12..14], l.len()), (&[0x88, 0xcc][..], 18));
    }

    #[test]
    fn pppoe_and_mpls_sit_between_the_tags_and_ip() {
        let plain = Frame::udp("192.0.2.1", "192.0.2.2", 1, 2).zeros(4).build();
        let p = Frame::udp("192.0.2.1", "192.0.2.2", 1, 2)
            .zeros(4)
            .vlan(7)
            .pppoe(0x1234)
            .build();
        assert_eq!(&p[12..18], &[0x81, 0x00, 0, 7, 0x88, 0x64]);
        // Version/type, code, session, length (PPP protocol + IP packet), protocol.
        let len = (plain.len() - 14 + 2) as u16;
        assert_eq!(&p[18..22], &[0x11, 0, 0x12, 0x34]);
        assert_eq!(&p[22..24], &len.to_be_bytes());
        assert_eq!(&p[24..26], &[0, 0x21]);
        assert_eq!(&p[26..], &plain[14..]);
        let v6 = Frame::udp("fd00::1", "fd00::2", 1, 2).pppoe(1).build();
        assert_eq!(&v6[20..22], &[0, 0x57]);

        let m = Frame::udp("192.0.2.1", "192.0.2.2", 1, 2)
            .zeros(4)
            .mpls(16)
            .mpls(17)
            .build();
        assert_eq!(&m[12..14], &[0x88, 0x47]);
        // Label 16, then label 17 with the bottom-of-stack bit; TTL 64.
        assert_eq!(&m[14..22], &[0, 1, 0, 64, 0, 1, 0x11, 64]);
        assert_eq!(&m[22..], &plain[14..]);
        let mc = Frame::udp("fd00::1", "fd00::2", 1, 2)
            .mpls(5)
            .mpls_multicast()
            .build();
        assert_eq!((&mc[12..14], mc[18] >> 4), (&[0x88, 0x48][..], 6));
    }
}
