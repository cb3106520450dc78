//! Test traffic: frames built with the test kit, written as pcap or pcapng.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use rampart_testkit::frame::Frame;

pub const T0_NS: u64 = 1_704_067_200_000_000_000; // 2024-01-01T00:00:00Z, a multiple of 10 s

/// synflood's window in the tests that send live traffic. The app's
/// windows are aligned to the clock, and a sub-second burst straddled a
/// 10 s boundary in about one run in a hundred: the part after it stayed
/// under the threshold and its SYNs went unreported. An hour makes that
/// about one in 40,000 for a 0.1 s burst.
pub const LIVE_SYN_WINDOW: Duration = Duration::from_secs(3600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Tcp(u8),
    Udp,
    Icmp,
}

/// One frame (IP addresses of one family) with `payload` bytes of 0x5a;
/// TCP with sequence number 1000 and window 65535; ICMP has no ports.
pub fn frame(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, l4: L4, payload: usize) -> Vec<u8> {
    let f = match l4 {
        L4::Udp => Frame::udp(src, dst, sport, dport),
        L4::Icmp => Frame::icmp_echo(src, dst),
        L4::Tcp(flags) => Frame::tcp(src, dst, sport, dport)
            .seq(1000)
            .window(65535)
            .flags(flags),
    };
    f.payload(&vec![0x5a; payload]).build()
}

/// IP total length of a frame built by [`frame`].
pub fn ip_len(f: &[u8]) -> u64 {
    (f.len() - 14) as u64
}

/// A unique file path under the temp dir.
pub fn tmp(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("rampart-stream-{}-{n}-{name}", std::process::id()))
}

/// Removes the file on drop.
pub struct TmpFile(pub PathBuf);
impl Drop for TmpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
impl TmpFile {
    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

/// Write (ts_ns, frame) records as classic pcap (µs timestamps).
pub fn write_pcap(name: &str, pkts: &[(u64, Vec<u8>)]) -> TmpFile {
    let p = tmp(name);
    let f = std::fs::File::create(&p).unwrap();
    let mut w = pcap_file::pcap::PcapWriter::new(f).unwrap();
    for (ts, fr) in pkts {
        let pkt = pcap_file::pcap::PcapPacket::new(Duration::from_nanos(*ts), fr.len() as u32, fr);
        w.write_packet(&pkt).unwrap();
    }
    TmpFile(p)
}

/// Write (ts_ns, frame) records as pcapng (ns timestamps, if_tsresol = 9).
pub fn write_pcapng(name: &str, pkts: &[(u64, Vec<u8>)]) -> TmpFile {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::{
        InterfaceDescriptionBlock, InterfaceDescriptionOption,
    };
    let p = tmp(name);
    let f = std::fs::File::create(&p).unwrap();
    let mut w = pcap_file::pcapng::PcapNgWriter::new(f).unwrap();
    let idb = InterfaceDescriptionBlock {
        linktype: pcap_file::DataLink::ETHERNET,
        snaplen: 65535,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    };
    w.write_pcapng_block(idb).unwrap();
    for (ts, fr) in pkts {
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(*ts),
            original_len: fr.len() as u32,
            data: std::borrow::Cow::Borrowed(fr),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
    }
    TmpFile(p)
}
