/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Lab ABI: traffic generators, counting sink, the EMULATED NIC forwarder.
 * Lab and benchmark programs only; nothing of the product includes it.
 */
#ifndef RAMPART_LAB_ABI_H
#define RAMPART_LAB_ABI_H

#include "common/abi.h"

/*
 * The generator walks a schedule of source indices. Each array element
 * packs GEN_SLOTS_PER_ELEM indices so the table costs 4 bytes a slot
 * (an ARRAY map rounds values up to 8 bytes).
 */
#define GEN_SLOTS_PER_ELEM 16 /* rust: usize */
#define GEN_SLOTS_MAX (1u << 22) /* rust: usize */
#define GEN_ELEMS_MAX (GEN_SLOTS_MAX / GEN_SLOTS_PER_ELEM) /* rust: usize */
#define GEN_MAX_CPUS 64
/* Bytes of the template written back into every frame (all headers fit). */
#define GEN_HDR_MAX 128 /* rust: usize */

struct gen_slots {
	__u32 idx[GEN_SLOTS_PER_ELEM];
};

enum gen_family {
	GEN_FAMILY_V4 = 4,
	GEN_FAMILY_V6 = 6,
};

/*
 * Read-only configuration of xdp_trafficgen, set through the skeleton's
 * rodata before load. The frame itself is a template built in userspace
 * with correct lengths and checksums for source index 0; per packet the
 * program writes the source address and both checksums from the partial
 * sums below, so no state is carried in the frame between repetitions.
 */
struct gen_config {
	/* Number of schedule slots minus one; slots are a power of two. */
	__u32 slot_mask;
	/* GEN_FAMILY_V4 or GEN_FAMILY_V6. */
	__u32 family;
	/* Offset of the L4 checksum field from the start of the frame, 0 for none. */
	__u32 l4_csum_off;
	/* Unfolded one's-complement sum of the IPv4 header without saddr and check. */
	__u32 ip_sum_nosrc;
	/* Unfolded sum of pseudo-header + L4 header + payload without the source address. */
	__u32 l4_sum_nosrc;
	/* IPv4: first source address (host byte order). */
	__u32 src4_base;
	/* IPv6: first source address; the low 32 bits are src6_lo_base + index. */
	__u32 src6_hi[3];
	__u32 src6_lo_base;
	/* 1 if the L4 checksum is the UDP one (0 means "none" and must become 0xffff). */
	__u32 l4_is_udp;
	/* Low bits of the destination's last 32-bit word drawn at random per
	 * packet (host byte order mask; 0: the template's destination). Carpet
	 * bombing: a /24 is 0xff. */
	__u32 dst_mask;
	/* Offset of the TCP sequence number from the start of the frame, drawn
	 * at random per packet (out-of-state floods); 0: the template's. */
	__u32 seq_off;
	/* Bytes of `hdr` written over the start of every frame (1..GEN_HDR_MAX). */
	__u32 hdr_len;
	/* The template's first hdr_len bytes (headers and the start of the payload). */
	__u8 hdr[GEN_HDR_MAX];
};

struct gen_cpu_state {
	__u64 pos;
	__u64 sent;
};

struct sink_counters {
	__u64 packets;
	__u64 bytes;
};

/* Value of the sink's optional per-source histogram (keyed by IPv4 or IPv6 source). */
struct sink_src_key {
	__u8 addr[16];
	__u32 family;
};

/* ---- EMULATED NIC ---- */

/*
 * EMULATED SmartNIC hardware table: source-prefix rules with per-rule
 * counters, like TC flower skip_sw rules with a src_ip mask on a
 * ConnectX/E810/Agilio card. Capacity K is the map's max_entries. It is a
 * longest-prefix-match table, so an exact source (/32, /128) and a
 * prefix holding it may both be installed: the longer one counts the
 * packet.
 */
/* Default K (rules the table holds), as in the evaluation of Miano et al., IEEE Access 2019. */
#define NIC_DEFAULT_CAPACITY 512
/* Bits of nic_rule_key.family: always matched in full, before the address. */
#define NIC_FAMILY_BITS 32

/* An LPM-trie key: the family, then the address; prefixlen counts both. */
struct nic_rule_key {
	/* NIC_FAMILY_BITS + the prefix's length (the bits of family+addr that must match). */
	__u32 prefixlen;
	/* 4 or 6. */
	__u32 family;
	/* IPv4 in addr[0] (network order), rest zero; IPv6 all 16 bytes. */
	__u32 addr[4];
};

/* nic_rules' value: the rule's slot in nic_counters (< K). */
struct nic_rule_val {
	__u32 slot;
};

/* Per-rule hardware counters: nic_counters[slot], one copy per CPU, summed
 * by userspace. Not in the trie's value: a trie node is a small kernel
 * allocation whose value is neither 8-byte aligned nor alone on its cache
 * lines, so an atomic add there can straddle two lines (a split lock: a bus
 * lock that stalls every CPU) or bounce a line shared with unrelated kernel
 * objects. Which of them happened depended on where the nodes landed, so
 * the NIC hop cost 5x the CPU in some demo runs and not in others, and
 * slowed the other vCPU with it. Per-CPU counters need no atomics. */
struct nic_rule_stats {
	__u64 packets;
	__u64 bytes;
};

/* nic_state[0]: number of rules installed (0 = skip the lookup entirely). */
struct nic_state {
	__u32 rules;
	__u32 _pad;
	/* Frames from wan the NIC could not parse: never matched, forwarded to the host. */
	__u64 unparsed;
};

/* ---- the Internet beyond wan ---- */

/*
 * xdp_internet, on wan0 when a benchmark asks for it, stands for the
 * Internet behind the lab's wan: a frame to an address no host in wan has
 * (the host's SYN-ACK to a spoofed source, an echo reply to one) leaves
 * into it, dropped and counted, instead of climbing wan's kernel stack, a
 * cost a real uplink never charges to the machine under test. Frames to
 * wan's own addresses (internet_own: an LPM trie keyed like nic_rules),
 * and ARP, multicast, broadcast and link-local frames pass.
 */
#define INTERNET_OWN_MAX 1024

/* Per CPU: frames delivered to wan's own addresses (or not IP) and frames
 * that left for the Internet. */
struct internet_counters {
	__u64 delivered;
	__u64 departed;
};

/* ---- tenant traffic ---- */

/*
 * Tenant traffic generator (xdp_tenant_gen): IPv4 frames (any protocol of
 * the lab's templates) spread round robin over up to TGEN_MAX_DST
 * destinations, one per tenant, so every tenant's packets arrive
 * interleaved from one generator thread. The frames for the destinations
 * differ only in the destination address and the two checksums, all
 * precomputed in userspace.
 */
#define TGEN_MAX_DST 8 /* rust: usize */

struct tgen_config {
	__u32 n_dst;
	/* Offset of the L4 checksum from the frame start (0: none to fix). */
	__u32 l4_csum_off;
	/* Destination addresses (network order) and the template's checksums with each. */
	__u32 daddr[TGEN_MAX_DST];
	__u16 ip_check[TGEN_MAX_DST];
	__u16 l4_check[TGEN_MAX_DST];
	/* The template's first hdr_len bytes, written back into every frame
	 * (recycled pages: see xdp_trafficgen.bpf.c). */
	__u32 hdr_len;
	__u8 hdr[GEN_HDR_MAX];
};

struct tgen_cpu_state {
	__u64 pos;
	__u64 sent[TGEN_MAX_DST];
};

/*
 * Mixed tenant traffic (xdp_tenant_mix): up to TMIX_MAX_SLOT whole frames
 * of `len` bytes (a multiple of 8, at most TMIX_MAX_LEN), sent round robin.
 */
#define TMIX_MAX_SLOT 16 /* rust: usize */
#define TMIX_MAX_LEN 128 /* rust: usize */

struct tmix_config {
	__u32 n_slot;
	__u32 len;
	__u64 tpl[TMIX_MAX_SLOT][TMIX_MAX_LEN / 8];
};

struct tmix_cpu_state {
	__u64 pos;
	__u64 sent[TMIX_MAX_SLOT];
};

#endif /* RAMPART_LAB_ABI_H */
