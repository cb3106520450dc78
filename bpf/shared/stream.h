/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * rampart stream: THE definition of the packet tuple.
 *
 * One tuple per packet, produced either in userspace (raw AF_XDP frames or
 * pcap records parsed by crates/rampart-stream/src/parse.rs) or, later, by
 * the XDP Source of the stream offload (issue #5), which rewrites the frame
 * into this record and hands it over AF_XDP. Both sides use this struct:
 * C directly, Rust through the skeleton's BTF types
 * (rampart_bpf::abi::StreamTuple, size-asserted).
 *
 * Constraints (DESIGN §1, nfp offload): fixed-width fields, explicit
 * padding, no bitfields, at most 64 bytes (nfp map entries are <= 64 B).
 * IPv6 addresses are carried whole, which is why the tuple is 56 bytes and
 * not 32: alerts and IPFIX records need the real addresses.
 */
#ifndef RAMPART_SHARED_STREAM_H
#define RAMPART_SHARED_STREAM_H

#include "abi.h"

/* Bits of stream_tuple.flags. */
enum stream_tuple_flag {
	/* Addresses are IPv6; otherwise IPv4 in saddr[0]/daddr[0], the rest zero. */
	ST_F_IPV6 = 1 << 0,
	/* First fragment of a fragmented IP packet (ports and flags are present). */
	ST_F_FRAG_FIRST = 1 << 1,
	/* Non-first fragment: no L4 header, ports, flags and ICMP fields are zero. */
	ST_F_FRAG_LATER = 1 << 2,
	/* Direction-independent key: the addresses were swapped to build it. */
	ST_F_IP_REV = 1 << 3,
	/* Direction-independent key: the ports were swapped to build it. */
	ST_F_PORT_REV = 1 << 4,
	/* ts_ns comes from the NIC (RX metadata); otherwise software time. */
	ST_F_TS_HW = 1 << 5,
};

/* stream_tuple.flags >> ST_KEY_MODE_SHIFT: how flow_id was computed. */
#define ST_KEY_MODE_SHIFT 6
enum stream_key_mode {
	/* flow_id not computed yet (a userspace FlowID operator will). */
	ST_KEY_NONE = 0,
	/* jhash of the 5-tuple <saddr, daddr, sport, dport, proto>. */
	ST_KEY_FIVE_TUPLE = 1,
	/*
	 * SYN/SYN-ACK pairing: <src, dst, dport> for everything but a SYN-ACK,
	 * <dst, src, sport> for a SYN-ACK, so a SYN and its answer share a key.
	 */
	ST_KEY_SYN_PAIR = 2,
	/* Direction-independent: addresses and ports ordered, ST_F_IP_REV/PORT_REV say how. */
	ST_KEY_BIDIR = 3,
};

/* Seed of every FlowID jhash (userspace and XDP must agree). */
#define ST_FLOWID_SEED 0x7261u

struct stream_tuple {
	/* Event time in ns since the Unix epoch (capture time, or receive time). */
	__u64 ts_ns;
	/* Network byte order; IPv4 in [0]. */
	__u32 saddr[4];
	__u32 daddr[4];
	/*
	 * Host byte order. ICMP/ICMPv6: sport 0, dport = type << 8 | code
	 * (the NetFlow/IPFIX convention). Zero for non-first fragments.
	 */
	__u16 sport;
	__u16 dport;
	/* IP total length announced by the header (IPv6: 40 + payload length): IPFIX octetDeltaCount. */
	__u16 ip_len;
	/* IPPROTO_* of the L4 header (after IPv6 extension headers). */
	__u8 proto;
	/* TCP flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, ...), 0 otherwise. */
	__u8 tcp_flags;
	/* FlowID (jhash, see enum stream_key_mode); 0 when the key mode is ST_KEY_NONE. */
	__u32 flow_id;
	/* enum stream_tuple_flag bits | key mode << ST_KEY_MODE_SHIFT. */
	__u8 flags;
	__u8 _pad;
	/* Outermost VLAN id (host order), 0 when untagged. */
	__u16 vlan_id;
};

#endif /* RAMPART_SHARED_STREAM_H */
