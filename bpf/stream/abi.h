/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * rampart stream ABI.
 *
 * The packet tuple: one per packet, produced either in userspace (raw
 * AF_XDP frames or pcap records parsed by crates/rampart-stream/src/parse.rs)
 * or by the XDP Source of the stream offload, which rewrites the frame into
 * this record and hands it over AF_XDP. Both sides use this struct: C
 * directly, Rust through the skeleton's BTF types (rampart_bpf::abi::stream).
 * Constraints (nfp offload): fixed-width fields, explicit padding, no
 * bitfields, at most 64 bytes (nfp map entries are <= 64 B). IPv6
 * addresses are carried whole, which is why the tuple is 56 bytes and not
 * 32: alerts and IPFIX records need the real addresses.
 *
 * The offload: the configuration of xdp_stream, the XDP program that runs
 * an app's leading stateless operators — Source (frame → struct
 * stream_tuple), FlowID, Filter — and hands the finished tuple to the
 * AF_XDP socket of the replica that owns its key. It lives in maps written
 * by userspace (crates/rampart-stream/src/offload/), so a new query never
 * recompiles the program. Each map entry is at most 64 bytes and every map
 * is an ARRAY (or the XSKMAP of the host entry point): the nfp offload
 * profile allows no more, and the planner checks the built object against
 * it.
 */
#ifndef RAMPART_STREAM_ABI_H
#define RAMPART_STREAM_ABI_H

#include "common/abi.h"

/* Bits of stream_tuple.flags. */
enum stream_tuple_flag { /* rust: u8 */
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
#define ST_KEY_MODE_SHIFT 6 /* rust: u8 */
enum stream_key_mode { /* rust: u8 */
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

/* ---- offload ---- */

/* What happens to a frame that does not become a tuple record. */
enum stream_off_action { /* rust: u8 */
	ST_OFF_DROP = 0,
	/* Hand it to the kernel stack unchanged. */
	ST_OFF_PASS = 1,
};

/* Where stream_tuple.ts_ns comes from. */
enum stream_off_ts { /* rust: u8 */
	/* bpf_ktime_get_ns() + stream_off_cfg.clock_offset_ns (the epoch). */
	ST_TS_SOFTWARE = 0,
	/*
	 * The RX timestamp of the driver (bpf_xdp_metadata_rx_timestamp, a
	 * device-bound program) when it has one for this frame, flagged
	 * ST_F_TS_HW; software time otherwise.
	 */
	ST_TS_RX_META = 1,
	/* None (nfp: no clock helper on the NIC): ts_ns 0, the host stamps it. */
	ST_TS_NONE = 2,
};

/* Bits of stream_off_cfg.filters: which predicates are active (AND of all). */
enum stream_off_filter {
	/* stream_off_protos[proto] != 0. */
	ST_FLT_PROTO = 1 << 0,
	/* Any flag clause: (tcp_flags & mask[i]) == value[i]. */
	ST_FLT_TCP_FLAGS = 1 << 1,
	/* sport inside any of stream_off_ports[0 .. n_sport). */
	ST_FLT_SPORT = 1 << 2,
	/* dport inside any of stream_off_ports[ST_OFF_RANGES .. + n_dport). */
	ST_FLT_DPORT = 1 << 3,
	/* Source address inside any of stream_off_prefixes[0 .. n_src). */
	ST_FLT_SRC = 1 << 4,
	/* Destination inside any of stream_off_prefixes[ST_OFF_RANGES .. + n_dst). */
	ST_FLT_DST = 1 << 5,
};

/* TCP flag clauses, port ranges and prefixes per direction. */
#define ST_OFF_CLAUSES 4 /* rust: usize */
#define ST_OFF_RANGES 4 /* rust: usize */
/* Sockets in the XSKMAP: RX queue * replicas + replica. */
#define ST_OFF_XSKS 64

/* stream_off_cfg[0]: 40 bytes. */
struct stream_off_cfg {
	/* CLOCK_REALTIME - CLOCK_MONOTONIC, ns, set by userspace at load. */
	__u64 clock_offset_ns;
	/* Source replicas: sockets per RX queue; the key's owner is flow_id * replicas >> 32. */
	__u32 replicas;
	/* enum stream_off_filter bits. */
	__u32 filters;
	/* enum stream_key_mode of the FlowID (ST_KEY_NONE: no FlowID, replica 0). */
	__u8 key_mode;
	/* enum stream_off_action for frames the filter rejects. */
	__u8 on_filtered;
	/* enum stream_off_action for malformed IP frames (truncated, bad header, too deep). */
	__u8 on_malformed;
	/* enum stream_off_ts. */
	__u8 ts_source;
	/* Active entries of the lists below. */
	__u8 n_clauses;
	__u8 n_sport;
	__u8 n_dport;
	__u8 n_src;
	__u8 n_dst;
	__u8 _pad[3];
	/* TCP flag clauses (OR): (tcp_flags & clause_mask[i]) == clause_value[i]. */
	__u8 clause_mask[ST_OFF_CLAUSES];
	__u8 clause_value[ST_OFF_CLAUSES];
};

/* stream_off_ports[i]: an inclusive port range, host byte order. */
struct stream_off_port_range {
	__u16 lo;
	__u16 hi;
};

/* stream_off_prefixes[i]: address & mask == addr (network order words). */
struct stream_off_prefix {
	__u32 addr[4];
	__u32 mask[4];
	/* 1 for an IPv6 prefix; a prefix matches only tuples of its family. */
	__u32 v6;
};

/* Frames per outcome (per CPU on the host entry, atomic on the nfp one). */
enum stream_off_counter { /* rust: usize */
	/* Tuple records handed to a socket (host) / to the RX queue of the replica (nfp). */
	ST_CNT_RECORDS = 0,
	/* Not IPv4/IPv6 (ARP, LLDP, ...): passed to the stack. */
	ST_CNT_NOT_IP = 1,
	ST_CNT_TRUNCATED = 2,
	ST_CNT_BAD_HEADER = 3,
	ST_CNT_TOO_DEEP = 4,
	/* Rejected by the offloaded Filter. */
	ST_CNT_FILTERED = 5,
	/* bpf_xdp_adjust_tail refused to resize the frame to the record: dropped. */
	ST_CNT_REWRITE_FAILED = 6,
	/* No socket in the XSKMAP slot of the key's owner: dropped. */
	ST_CNT_NO_SOCKET = 7,
	/* Records stamped with the driver's RX timestamp. */
	ST_CNT_TS_HW = 8,
	ST_CNT_MAX = 9,
};

/* ---- no offload: xdp_stream_rx ---- */

/* Frames per outcome of xdp_stream_rx (map stream_rx_stats, per CPU). */
enum stream_rx_counter {
	/* Handed to the AF_XDP socket of the frame's RX queue. */
	STREAM_RX_REDIRECTED = 0,
	/* The queue has no socket: passed to the stack. */
	STREAM_RX_NO_SOCKET = 1,
	STREAM_RX_MAX = 2,
};

#endif /* RAMPART_STREAM_ABI_H */
