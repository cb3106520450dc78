//! Frame templates for the generator and packet checks for the tests.
//!
//! A template is a complete, valid frame for source index 0, built with the
//! test kit's frame builder; the generator program rewrites the source
//! address and fixes checksums from the partial sums computed here (see
//! `bpf/lab/abi.h`, `struct gen_config`).

use std::net::IpAddr;

use rampart_testkit::frame::{self, tcp, Frame};
use serde::Serialize;

use crate::error::{Error, Result};

/// What the generator sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// UDP datagram with a zero payload (a volumetric flood).
    Udp,
    /// TCP SYN with an MSS option (a SYN flood).
    Syn,
    /// TCP ACK (an ACK flood, or the end of a handshake).
    Ack,
    /// TCP RST (an out-of-state RST flood).
    Rst,
    /// DNS query for `example.com` A, EDNS(0), padded to size.
    Dns,
    /// ICMP / ICMPv6 echo request.
    Icmp,
}

impl std::str::FromStr for Proto {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "udp" => Proto::Udp,
            "syn" => Proto::Syn,
            "ack" => Proto::Ack,
            "rst" => Proto::Rst,
            "dns" => Proto::Dns,
            "icmp" => Proto::Icmp,
            o => {
                return Err(Error::InvalidSpec(format!(
                    "unknown protocol {o:?}: use udp, syn, ack, rst, dns or icmp"
                )))
            }
        })
    }
}

impl Proto {
    /// Default destination port.
    pub fn default_dport(self) -> u16 {
        match self {
            Proto::Udp => 9,
            Proto::Syn | Proto::Ack | Proto::Rst => 80,
            Proto::Dns => 53,
            Proto::Icmp => 0,
        }
    }
}

/// Everything that defines a template.
#[derive(Debug, Clone)]
pub struct FrameSpec {
    /// Protocol.
    pub proto: Proto,
    /// Frame length in bytes as carried by the veth (no FCS): 60–1514.
    pub size: usize,
    /// Source address of index 0 (its family decides IPv4/IPv6).
    pub src: IpAddr,
    /// Destination address (same family as `src`).
    pub dst: IpAddr,
    /// Source port (TCP/UDP).
    pub sport: u16,
    /// Destination port (TCP/UDP).
    pub dport: u16,
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
}

/// A built template plus what the generator program needs to patch it.
#[derive(Debug, Clone)]
pub struct Template {
    /// The frame.
    pub frame: Vec<u8>,
    /// Sum of the IPv4 header without saddr and check (0 for IPv6).
    pub ip_sum_nosrc: u32,
    /// Sum of pseudo-header + L4 without the source address.
    pub l4_sum_nosrc: u32,
    /// Offset of the L4 checksum, 0 when the L4 checksum does not cover the source.
    pub l4_csum_off: u32,
    /// The L4 checksum is UDP's (0 must be sent as 0xffff).
    pub l4_is_udp: bool,
}

/// Smallest frame that holds `proto`'s headers (and never below [`MIN_FRAME`]).
pub fn min_size(proto: Proto, v6: bool) -> usize {
    let l3 = if v6 { 40 } else { 20 };
    let l4 = match proto {
        Proto::Udp | Proto::Icmp => 8,
        Proto::Syn => 24,
        Proto::Ack | Proto::Rst => 20,
        Proto::Dns => 8 + 12 + 13 + 4 + 11,
    };
    (14 + l3 + l4).max(MIN_FRAME)
}

/// Minimum and maximum frame sizes accepted.
pub const MIN_FRAME: usize = 60;
/// 1500-byte MTU plus the Ethernet header.
pub const MAX_FRAME: usize = 1514;

fn dns_query(pad_to: usize) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in ["example", "com"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    // OPT RR: root name, type 41, UDP size 1232, no extended flags.
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    let base = q.len() + 2;
    if pad_to >= base + 4 {
        let pad = pad_to - base - 4;
        q.extend_from_slice(&((pad + 4) as u16).to_be_bytes());
        q.extend_from_slice(&12u16.to_be_bytes()); // EDNS Padding (RFC 7830)
        q.extend_from_slice(&(pad as u16).to_be_bytes());
        q.extend(std::iter::repeat_n(0u8, pad));
    } else {
        q.extend_from_slice(&[0, 0]);
    }
    q
}

/// Sum of 16-bit words in host order, unfolded (RFC 1071).
pub fn sum16(bytes: &[u8]) -> u32 {
    let mut s: u64 = 0;
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        s += u64::from(u16::from_ne_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        s += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    while s >> 32 != 0 {
        s = (s & 0xffff_ffff) + (s >> 32);
    }
    s as u32
}

fn add(a: u32, b: u32) -> u32 {
    let s = u64::from(a) + u64::from(b);
    ((s & 0xffff_ffff) + (s >> 32)) as u32
}

/// Build the template for `spec`.
///
/// # Errors
/// [`Error::InvalidSpec`] for mixed address families or a size the
/// protocol's headers do not fit in (or above the 1500-byte MTU).
pub fn build(spec: &FrameSpec) -> Result<Template> {
    if !(MIN_FRAME..=MAX_FRAME).contains(&spec.size) {
        return Err(Error::InvalidSpec(format!(
            "packet size {} out of range: use {MIN_FRAME}..={MAX_FRAME} bytes (frame without FCS)",
            spec.size
        )));
    }
    if spec.src.is_ipv4() != spec.dst.is_ipv4() {
        return Err(Error::InvalidSpec(
            "source and destination must both be IPv4 or both IPv6".into(),
        ));
    }
    let v6 = spec.src.is_ipv6();
    let l3len = if v6 { 40 } else { 20 };
    let hdrs = 14 + l3len;
    let l4hdr = match spec.proto {
        Proto::Udp | Proto::Dns | Proto::Icmp => 8,
        Proto::Syn => 24,
        Proto::Ack | Proto::Rst => 20,
    };
    let room = spec.size.saturating_sub(hdrs + l4hdr);
    let f = match spec.proto {
        Proto::Udp => Frame::udp(spec.src, spec.dst, spec.sport, spec.dport).zeros(room),
        Proto::Dns => {
            Frame::udp(spec.src, spec.dst, spec.sport, spec.dport).payload(&dns_query(room))
        }
        Proto::Syn => Frame::tcp(spec.src, spec.dst, spec.sport, spec.dport)
            .seq(0x1000_0000)
            .window(64240)
            .flags(tcp::SYN)
            .tcp_options(&[2, 4, 0x05, 0xb4]), // MSS 1460
        Proto::Ack => Frame::tcp(spec.src, spec.dst, spec.sport, spec.dport)
            .seq(0x1000_0001)
            .window(502)
            .flags(tcp::ACK)
            .ack(0x2000_0001),
        Proto::Rst => Frame::tcp(spec.src, spec.dst, spec.sport, spec.dport)
            .seq(0x1000_0001)
            .window(0)
            .flags(tcp::RST),
        Proto::Icmp => Frame::icmp_echo(spec.src, spec.dst)
            .echo_id(0x7261)
            .zeros(room),
    };
    let mut frame = f.macs(spec.src_mac, spec.dst_mac).build();
    if frame.len() > spec.size {
        return Err(Error::InvalidSpec(format!(
            "packet size {} is too small for {:?} over {}: it needs at least {} bytes",
            spec.size,
            spec.proto,
            if v6 { "IPv6" } else { "IPv4" },
            frame.len()
        )));
    }
    frame.resize(spec.size, 0); // Ethernet padding for TCP/DNS leftovers

    let l4_off = hdrs;
    let (l4_proto, ip_payload_len) = if v6 {
        (
            frame[14 + 6],
            usize::from(u16::from_be_bytes([frame[14 + 4], frame[14 + 5]])),
        )
    } else {
        (
            frame[14 + 9],
            usize::from(u16::from_be_bytes([frame[14 + 2], frame[14 + 3]])) - 20,
        )
    };
    let seg_end = l4_off + ip_payload_len;
    let csum_rel = match spec.proto {
        Proto::Udp | Proto::Dns => Some(6),
        Proto::Syn | Proto::Ack | Proto::Rst => Some(16),
        Proto::Icmp if v6 => Some(2),
        Proto::Icmp => None,
    };
    let mut t = Template {
        frame: frame.clone(),
        ip_sum_nosrc: 0,
        l4_sum_nosrc: 0,
        l4_csum_off: 0,
        l4_is_udp: false,
    };
    if !v6 {
        let mut h = frame[14..34].to_vec();
        h[10..12].fill(0);
        h[12..16].fill(0);
        t.ip_sum_nosrc = sum16(&h);
    }
    if let Some(rel) = csum_rel {
        let mut seg = frame[l4_off..seg_end].to_vec();
        seg[rel..rel + 2].fill(0);
        let mut pseudo = Vec::new();
        if v6 {
            pseudo.extend_from_slice(&frame[14 + 24..14 + 40]); // dst
            pseudo.extend_from_slice(&(ip_payload_len as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, l4_proto]);
        } else {
            pseudo.extend_from_slice(&frame[14 + 16..14 + 20]); // dst
            pseudo.extend_from_slice(&[0, l4_proto]);
            pseudo.extend_from_slice(&(ip_payload_len as u16).to_be_bytes());
        }
        t.l4_sum_nosrc = add(sum16(&pseudo), sum16(&seg));
        t.l4_csum_off = (l4_off + rel) as u32;
        t.l4_is_udp = matches!(spec.proto, Proto::Udp | Proto::Dns);
    }
    Ok(t)
}

/// What a received frame turned out to be, after checking it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Protocol as the generator names it.
    pub proto: Proto,
    /// Destination port (0 for ICMP).
    pub dport: u16,
    /// Frame length.
    pub len: usize,
}

/// Parse a frame and verify its IPv4 header and L4 checksums (with the
/// test kit's [`frame::check`], independent of the generator's patching).
///
/// # Errors
/// A description of the first thing that is wrong.
pub fn check(frame: &[u8]) -> std::result::Result<Checked, String> {
    let c = frame::check(frame)?;
    let proto = match c.proto {
        17 if c.dport == 53 => Proto::Dns,
        17 => Proto::Udp,
        6 if c.tcp_flags & tcp::SYN != 0 => Proto::Syn,
        6 if c.tcp_flags & tcp::RST != 0 => Proto::Rst,
        6 => Proto::Ack,
        _ => Proto::Icmp,
    };
    Ok(Checked {
        src: c.src,
        dst: c.dst,
        proto,
        dport: c.dport,
        len: c.len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(proto: Proto, v6: bool, size: usize) -> FrameSpec {
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            ("fd66::".parse().unwrap(), "fd10::2".parse().unwrap())
        } else {
            ("172.16.0.0".parse().unwrap(), "10.10.0.2".parse().unwrap())
        };
        FrameSpec {
            proto,
            size,
            src,
            dst,
            sport: 4242,
            dport: proto.default_dport(),
            src_mac: [2; 6],
            dst_mac: [4; 6],
        }
    }

    /// Emulate the BPF program's patch in Rust and check the result with etherparse.
    fn patch(t: &Template, v6: bool, idx: u32) -> Vec<u8> {
        let mut f = t.frame.clone();
        let fold = |s: u32| {
            let s = (s & 0xffff) + (s >> 16);
            let s = (s & 0xffff) + (s >> 16);
            !(s as u16)
        };
        let src_words: Vec<u8> = if v6 {
            let mut a = [0u8; 16];
            a[..12].copy_from_slice(&f[22..34]);
            a[12..].copy_from_slice(&idx.to_be_bytes());
            f[22..38].copy_from_slice(&a);
            a.to_vec()
        } else {
            let a = (u32::from_be_bytes([172, 16, 0, 0]) + idx).to_be_bytes();
            f[26..30].copy_from_slice(&a);
            let c = fold(add(t.ip_sum_nosrc, sum16(&a)));
            f[24..26].copy_from_slice(&c.to_ne_bytes());
            a.to_vec()
        };
        if t.l4_csum_off != 0 {
            let mut c = fold(add(t.l4_sum_nosrc, sum16(&src_words)));
            if t.l4_is_udp && c == 0 {
                c = 0xffff;
            }
            let o = t.l4_csum_off as usize;
            f[o..o + 2].copy_from_slice(&c.to_ne_bytes());
        }
        f
    }

    #[test]
    fn every_template_patches_to_valid_frames() {
        for proto in [
            Proto::Udp,
            Proto::Syn,
            Proto::Ack,
            Proto::Rst,
            Proto::Dns,
            Proto::Icmp,
        ] {
            for v6 in [false, true] {
                for size in [64usize, 128, 1514] {
                    let s = spec(proto, v6, size);
                    if size < min_size(proto, v6) {
                        assert!(build(&s).is_err());
                        continue;
                    }
                    let t = build(&s).unwrap();
                    assert_eq!(t.frame.len(), size);
                    for idx in [0u32, 1, 77, 65_535, 1_048_575] {
                        let f = patch(&t, v6, idx);
                        let c = check(&f).unwrap_or_else(|e| {
                            panic!("{proto:?} v6={v6} size={size} idx={idx}: {e}")
                        });
                        assert_eq!(c.proto, proto);
                    }
                }
            }
        }
    }

    #[test]
    fn too_small_and_mixed_families_are_refused() {
        assert!(build(&spec(Proto::Udp, false, 59)).is_err());
        assert!(build(&spec(Proto::Syn, true, 60)).is_err()); // 14+40+24 = 78
        let mut s = spec(Proto::Udp, false, 64);
        s.dst = "fd10::2".parse().unwrap();
        assert!(build(&s).is_err());
    }
}
