/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The ABI shared by every BPF program and the Rust userspace, and what
 * common/parse.h extracts from a frame (userspace turns parse statuses
 * into counters and metric labels).
 *
 * Rules for every bpf/<dir>/abi.h (the one header of a directory that
 * Rust sees; the other headers are BPF-only helpers):
 *  - fixed-width types only, explicit padding, no bitfields;
 *  - structs reach Rust as the types libbpf-cargo generates from BTF, each
 *    with a size assert in crates/rampart-bpf/src/abi/;
 *  - every `#define NAME VALUE` and enum member reaches Rust as
 *    rampart_bpf::abi::<dir>::NAME, read from this text by rampart-bpf's
 *    build script (crates/rampart-bpf/build/cheader.rs): values are integer
 *    constant expressions, one enum member per line, no conditionals.
 *    The Rust type is u32 (u64 if needed) unless a trailing comment
 *    on the line (the `enum name {` line for an enum) says `rust: T`;
 *  - an enum that ends in <PREFIX>MAX is a list of reasons counted per
 *    value: its members count 0, 1, ... and their names, without PREFIX
 *    and lower-cased, are the metric labels (<ENUM>_LABELS in Rust).
 */
#ifndef RAMPART_COMMON_ABI_H
#define RAMPART_COMMON_ABI_H

#include <linux/types.h>

/*
 * Outcome of parsing. Anything but PARSE_OK / PARSE_NOT_IP is a malformed
 * frame: its L3/L4 fields must not be trusted, and each program documents
 * and counts what it does with it.
 */
enum parse_status {
	PARSE_OK = 0,
	/* Not IPv4/IPv6 (ARP, LLDP, ...): nothing past the Ethernet/VLAN headers is read. */
	PARSE_NOT_IP = 1,
	/* Frame ends inside a header it announces. */
	PARSE_TRUNCATED = 2,
	/* A header field is impossible (IPv4 IHL < 5, total length < header, TCP data offset < 5, ...). */
	PARSE_BAD_HEADER = 3,
	/* More VLAN tags or IPv6 extension headers than we walk. */
	PARSE_TOO_DEEP = 4,
	PARSE_STATUS_MAX = 5,
};

/* Fragment state of the IP packet. */
enum parse_frag { /* rust: u8 */
	FRAG_NONE = 0,
	/* First fragment (offset 0, more fragments): carries the L4 header. */
	FRAG_FIRST = 1,
	/* Later fragment: has no L4 header; ports and flags are zero. */
	FRAG_LATER = 2,
};

#define PARSE_MAX_VLANS 2 /* rust: usize */
#define PARSE_MAX_V6_EXT 6 /* rust: usize */

/* Everything a program needs from the headers, in one place. */
struct pkt_info {
	/* Source and destination; IPv4 in addr[0] (network order), the rest zero. */
	__u32 saddr[4];
	__u32 daddr[4];
	/* L4 ports in network byte order (0 when absent). */
	__u16 sport;
	__u16 dport;
	/* ETH_P_IP or ETH_P_IPV6 in host order, or the EtherType seen for PARSE_NOT_IP. */
	__u16 l3_proto;
	/* Offsets from the start of the frame. */
	__u16 l3_off;
	__u16 l4_off;
	/* VLAN ids (host order), outermost first. */
	__u16 vlan_id[PARSE_MAX_VLANS];
	/* IP total length as announced by the header (IPv6: 40 + payload length). */
	__u16 ip_len;
	/* IPPROTO_* of the L4 header (after IPv6 extension headers). */
	__u8 l4_proto;
	/* 4 or 6; 0 when not IP. */
	__u8 family;
	__u8 vlan_depth;
	/* enum parse_frag. */
	__u8 frag;
	/* TCP flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, ...). */
	__u8 tcp_flags;
	/* ICMP/ICMPv6 type and code. */
	__u8 icmp_type;
	__u8 icmp_code;
	/* IPv4 TTL / IPv6 hop limit. */
	__u8 ttl;
	__u8 _pad[2];
};

#endif /* RAMPART_COMMON_ABI_H */
