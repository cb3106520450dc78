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

/* ---- the tap ---- */

/*
 * The stream tap (bpf/stream/tap.h, entry point xdp_stream_tap): on a
 * server's interface it runs the offloaded Source (parse), Filter and —
 * with ST_TAP_AGGREGATE — the first keyed aggregation, hands the result to
 * userspace through a BPF ring buffer per CPU or a table of per-connection
 * counts read in place (a segment per CPU), and passes every frame on (a
 * tail call into the next stage, XDP_PASS when there is none). It never
 * takes a frame from the host.
 */

/* stream_tap_cfg[0].mode. */
enum stream_tap_mode {
	/* Every accepted frame becomes a struct stream_tuple in the ring buffer. */
	ST_TAP_TUPLES = 0,
	/*
	 * Every accepted frame is added to its connection's slot (struct
	 * stream_agg_slot, IPv6: stream_agg_slot6) in this CPU's segment of
	 * the table stream_tap_agg (stream_tap_agg6); userspace reads the
	 * counts of an epoch in place once it is over. A frame whose bucket
	 * holds ST_AGG_WAYS other connections of this epoch goes to the ring
	 * buffer as a tuple.
	 */
	ST_TAP_AGGREGATE = 1,
};

/* stream_tap_cfg[0]. */
struct stream_tap_cfg {
	/* enum stream_tap_mode. */
	__u32 mode;
	/* Slots per CPU segment of stream_tap_agg, minus one (a power of two, at least ST_AGG_WAYS). */
	__u32 slot_mask;
	/* Length of an aggregation epoch, ns (epoch = event time / epoch_ns); at most ST_AGG_EPOCH_MAX_NS. */
	__u64 epoch_ns;
	/* Slots per CPU segment of stream_tap_agg6, minus one (likewise). */
	__u32 slot_mask6;
	__u32 _pad;
};

/*
 * The aggregation table is two mmapable arrays, a segment per CPU each:
 * stream_tap_agg holds IPv4 connections in 64-byte slots (one cache line:
 * updating a connection's counts is one cache miss, and the table is half
 * the size two-line slots would make it, so fewer TLB misses),
 * stream_tap_agg6 IPv6 ones in 128-byte slots (their addresses alone are
 * 32 bytes). A connection's bucket is ST_AGG_WAYS slots in a row, aligned,
 * chosen by a hash of its key.
 *
 * Both slots begin with the same 48 bytes (struct stream_agg_head: the
 * state word, then the counts) and end with the family's key, so one piece
 * of code handles both and the word both sides compare-and-swap is at the
 * start of every slot.
 */

/* Slots per bucket: four IPv4 slots are 256 bytes in a row, two pairs of
 * the cache lines the CPU fetches together. With half the slots live (the
 * default sizing: two per connection), 3.7 % of the connections find
 * their bucket full with four ways, 10 % with two (Poisson, measured
 * alike: their packets go to the ring as tuples). More slots per
 * connection would fill fewer buckets but make the table, which
 * userspace reads whole every epoch, larger. */
#define ST_AGG_WAYS 4 /* rust: u32 */

/*
 * An IPv4 connection: the two endpoints ordered (endpoint 0 is the
 * smaller (address, port) pair), so both directions of a connection share
 * it. ICMP keys carry no ports (type and code are in the counts); non-first
 * fragments have none either. 16 bytes: two 8-byte words.
 */
struct stream_agg_key {
	/* Network byte order. */
	__u32 addr[2];
	/* Host byte order. */
	__u16 port[2];
	__u8 proto;
	__u8 _pad;
	/* Outermost VLAN id, 0 when untagged. */
	__u16 vlan_id;
};

/* An IPv6 connection, ordered the same way. 40 bytes: five 8-byte words. */
struct stream_agg_key6 {
	/* Network byte order. */
	__u32 addr[2][4];
	/* Host byte order. */
	__u16 port[2];
	__u8 proto;
	__u8 _pad;
	__u16 vlan_id;
};

/*
 * What both directions of a connection sent in one epoch, besides the
 * packets (in the head's state word): [0] endpoint 0 → endpoint 1, [1] the
 * other way. 40 bytes. The widths hold because a slot goes to the ring
 * buffer before a count would pass its limit: at most ST_AGG_MAX_PACKETS
 * packets of at most 65,535 bytes (bytes fits 32 bits), ST_AGG_MAX_TCP of
 * each TCP count.
 */
struct stream_agg_cnt {
	/* Event time of the first and last packet, ns after the epoch's start. */
	__u32 first_off[2];
	__u32 last_off[2];
	/* IP bytes (IP total length), as stream_tuple.ip_len. */
	__u32 bytes[2];
	/* TCP segments with SYN and not ACK. */
	__u8 syn[2];
	/* TCP segments with SYN and ACK. */
	__u8 synack[2];
	/* TCP segments with neither SYN nor ACK-without-RST: a direction's
	 * segments with ACK and neither SYN nor RST (a handshake's third step,
	 * data) are its TCP packets less syn, synack and these, so the most
	 * common count needs no byte of its own. */
	__u8 other[2];
	/* TCP segments with RST. */
	__u8 rst[2];
	/* TCP segments with FIN. */
	__u8 fin[2];
	/* OR of the TCP flags. */
	__u8 tcp_flags[2];
	/* ICMP/ICMPv6 type and code of the first packet (0 otherwise). */
	__u8 icmp_type[2];
	__u8 icmp_code[2];
};

/*
 * The first 48 bytes of every slot. `state` and `packets` are one 8-byte
 * word (offset 0): the compare-and-swaps below compare both, so userspace
 * also sees a packet added while it read the counts.
 *
 * A connection stays in its slot from one epoch to the next; only its
 * counts start again. Only the CPU of the segment writes a slot's key and
 * counts; userspace reads them in place and takes an epoch's counts by
 * setting ST_AGG_HARVESTED in `state` with a compare-and-swap of the word;
 * the program, before it reuses the counts of an earlier epoch, sets
 * ST_AGG_FLUSHING the same way and, when that wins, sends the slot to the
 * ring buffer (the whole slot, as it is in the table). So each epoch's
 * counts reach userspace exactly once: read in place or as a record.
 * Slots also go to the ring when a count would overflow.
 */
struct stream_agg_head {
	/* Epoch of the counts (event time / epoch_ns, the bits of ST_AGG_EPOCH_MASK)
	 * | ST_AGG_* bits; 0: never used. */
	__u32 state;
	/* Packets per direction. */
	__u16 packets[2];
	struct stream_agg_cnt cnt;
};

/* A slot of stream_tap_agg: an IPv4 connection, 64 bytes (one cache line). */
struct stream_agg_slot {
	struct stream_agg_head h;
	struct stream_agg_key key;
};

/* A slot of stream_tap_agg6: an IPv6 connection, 128 bytes (a pair of lines). */
struct stream_agg_slot6 {
	struct stream_agg_head h;
	struct stream_agg_key6 key;
	__u8 _pad[40];
};

/* The epoch's bits in stream_agg_head.state (its low 29 bits: userspace
 * restores the rest from the current epoch); the ST_AGG_* bits above. */
#define ST_AGG_EPOCH_MASK 0x1fffffff /* rust: u32 */
/* The slot holds a connection and counts of the epoch in the low bits. */
#define ST_AGG_USED (1u << 29) /* rust: u32 */
/* Userspace took these counts (read in place). */
#define ST_AGG_HARVESTED (1u << 30) /* rust: u32 */
/* The program is sending these counts to the ring buffer; the slot is
 * being reused (userspace waits for the bit to clear). */
#define ST_AGG_FLUSHING (1u << 31) /* rust: u32 */
/* Packets per direction (16 bits): a slot goes to the ring buffer before
 * its packets would pass this. */
#define ST_AGG_MAX_PACKETS 0xffff /* rust: u32 */
/* Each TCP count per direction (8 bits), likewise. */
#define ST_AGG_MAX_TCP 0xff /* rust: u32 */
/* first_off / last_off are 32-bit ns: an epoch is at most ~4.29 s. */
#define ST_AGG_EPOCH_MAX_NS 4000000000ULL /* rust: u64 */

/* The tap wakes its reader when the ring buffer's unread data crosses
 * 1/ST_TAP_WAKEUP_DIV of it (within ST_TAP_WAKEUP_WINDOW records). */
#define ST_TAP_WAKEUP_DIV 16
#define ST_TAP_WAKEUP_WINDOW 8

/* Frames per outcome of the tap (per CPU). */
enum stream_tap_counter { /* rust: usize */
	/* Frames the tap saw (every one is passed on). */
	ST_TAP_FRAMES = 0,
	ST_TAP_NOT_IP = 1,
	ST_TAP_TRUNCATED = 2,
	ST_TAP_BAD_HEADER = 3,
	ST_TAP_TOO_DEEP = 4,
	/* Rejected by the offloaded Filter. */
	ST_TAP_FILTERED = 5,
	/* Tuples written to the ring buffer. */
	ST_TAP_TUPLES_OUT = 6,
	/* This CPU's ring buffer was full: the record is lost to the analysis
	 * (not the frame). Per CPU, so per ring: each CPU writes its own. */
	ST_TAP_RING_FULL = 7,
	/* Frames added to an aggregate. */
	ST_TAP_AGGREGATED = 8,
	/* Every slot of the connection's bucket held another connection of this
	 * epoch: the frame went to the ring buffer as a tuple. */
	ST_TAP_AGG_FULL = 9,
	/* Frames seen at egress (also in ST_TAP_FRAMES). */
	ST_TAP_EGRESS = 10,
	/* Wire packets beyond the first of egress GSO sends (a send of n segments adds n - 1). */
	ST_TAP_GSO_EXTRA = 11,
	/* GSO sends the tap could not split into its segments (more than
	 * ST_TAP_GSO_MAX of them, or no length to split): analysed as one packet. */
	ST_TAP_GSO_WHOLE = 12,
	/* Slots whose counts went to the ring buffer (the slot was reused for
	 * a later epoch or another connection before userspace read them, or
	 * its counts were about to overflow). */
	ST_TAP_AGG_FLUSHED = 13,
	ST_TAP_CNT_MAX = 14,
};

/* Segments of one egress GSO send the tap splits it into, at most. TCP's
 * own limit (64 KiB of payload in MSS-sized segments) stays below it for an
 * MSS of 1,024 bytes or more; larger sends are counted in ST_TAP_GSO_WHOLE. */
#define ST_TAP_GSO_MAX 64

#endif /* RAMPART_STREAM_ABI_H */
