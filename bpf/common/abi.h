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
	/* Not IPv4/IPv6 (ARP, LLDP, PPPoE control, ...): nothing past the L2 headers is read. */
	PARSE_NOT_IP = 1,
	/* Frame ends inside a header it announces, or before the end of the IP
	 * packet its header announces (IPv4 total length, IPv6 payload length;
	 * bytes after the packet are Ethernet padding and allowed). */
	PARSE_TRUNCATED = 2,
	/* A header field is impossible (IPv4 IHL < 5, total length < header, TCP data offset < 5,
	 * a PPPoE session header of another version or with a code, ...). */
	PARSE_BAD_HEADER = 3,
	/* More VLAN tags, MPLS labels or IPv6 extension headers than the limits walk. */
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

/*
 * A packet that carries another packet whose headers the parser does not
 * walk: the addresses in pkt_info are the outer (tunnel) ones. Programs
 * that judge sources count these under their own name (the ddos filter has
 * a pass reason per kind and a switch to drop them all).
 */
enum parse_encap { /* rust: u8 */
	PARSE_ENCAP_NONE = 0,
	/* GRE (IP protocol 47). */
	PARSE_ENCAP_GRE = 1,
	/* IP in IP: IPv4 (protocol 4) or IPv6 (41) inside the IP packet. */
	PARSE_ENCAP_IPIP = 2,
	/* VXLAN: UDP to port 4789. */
	PARSE_ENCAP_VXLAN = 3,
	/* Geneve: UDP to port 6081. */
	PARSE_ENCAP_GENEVE = 4,
	/* MPLS whose payload is not IP (an Ethernet pseudowire, a control word):
	 * status PARSE_NOT_IP. */
	PARSE_ENCAP_MPLS = 5,
	PARSE_ENCAP_MAX = 6,
};

/* Shim headers between Ethernet/VLAN and IP that the parser walked (pkt_info.shim bits). */
enum parse_shim { /* rust: u8 */
	PARSE_SHIM_PPPOE = 1,
	PARSE_SHIM_MPLS = 2,
};

/* VLAN ids kept in pkt_info (the outermost tags). */
#define PARSE_VLAN_IDS 2 /* rust: usize */
/* The depth limits of parse_packet(). Programs configured at load time pass
 * their own (rodata) to parse_packet_lim(), up to the ceilings below: the
 * ddos filter and feature stage, which must judge every source, walk 4
 * VLAN tags and PPPoE/MPLS by default. parse_packet() walks 2 tags (QinQ)
 * and no PPPoE or MPLS (their frames are PARSE_NOT_IP): every shape walked
 * multiplies what the verifier explores in programs that do much after
 * their parse (the tenant dispatcher: 55k verified instructions with 2 tags
 * and 6 extension headers, 82k with 2 and 8, 127k with 4 and 8, 620k with
 * PPPoE and MPLS as well — and the tenant wrapper past the 1M limit). */
#define PARSE_DEF_VLANS 2
/* RFC 8200 §4.1: each extension header at most once, Destination Options
 * at most twice — HBH, DST, RH, FRAG, AH, (ESP: ends the walk), DST = 6
 * walked; 8 leaves room for what the RFC does not forbid. */
#define PARSE_DEF_V6_EXT 8
/* Ceilings of the limits: the walks' unrolled bounds. */
#define PARSE_MAX_VLANS 8
#define PARSE_MAX_V6_EXT 16
/* MPLS label stack entries walked (fixed). */
#define PARSE_MAX_MPLS 8

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
	/* VLAN ids (host order) of the outermost PARSE_VLAN_IDS tags, outermost first. */
	__u16 vlan_id[PARSE_VLAN_IDS];
	/* IP total length as announced by the header (IPv6: 40 + payload length). */
	__u16 ip_len;
	/* IPPROTO_* of the L4 header (after IPv6 extension headers). */
	__u8 l4_proto;
	/* 4 or 6; 0 when not IP. */
	__u8 family;
	/* VLAN tags walked (all of them, not only those in vlan_id). */
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
	/* enum parse_shim bits: PPPoE / MPLS headers before the IP header. */
	__u8 shim;
	/* enum parse_encap: what the packet carries, when it is a tunnel. */
	__u8 encap;
	__u8 _pad[2];
};

/* What parse_packet_lim() walks (a program's load-time config). */
struct parse_limits {
	/* VLAN tags walked, 0 ..= PARSE_MAX_VLANS. */
	__u8 max_vlans;
	/* IPv6 extension headers walked, 0 ..= PARSE_MAX_V6_EXT. */
	__u8 max_v6_ext;
	/* 1: walk PPPoE session and MPLS headers to the IP packet inside;
	 * 0: such frames are PARSE_NOT_IP. */
	__u8 shims;
	__u8 _pad;
};

/*
 * The XDP chain (common/chain.h): one entry point per interface and one
 * program array of stage slots, tried in this order. A stage's verdict
 * other than XDP_PASS is final (so the tenant stage, whose programs'
 * verdicts are theirs, comes last); on XDP_PASS it tries the slots after
 * its own, then passes the frame to the stack.
 */
enum chain_slot {
	/* xdp_filter (blacklist, policing), which tail-calls xdp_features. */
	CHAIN_SLOT_DDOS = 0,
	/* xdp_stream_tap: analyses every frame and passes it on. */
	CHAIN_SLOT_STREAM = 1,
	/* xdp_tenant_dispatch: demux, fairness, the tenant's program. */
	CHAIN_SLOT_TENANT = 2,
	CHAIN_SLOTS = 3,
};

#endif /* RAMPART_COMMON_ABI_H */
