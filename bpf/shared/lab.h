/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Lab ABI: traffic generator, counting sink, emulated NIC forwarder. */
#ifndef RAMPART_SHARED_LAB_H
#define RAMPART_SHARED_LAB_H

#include "abi.h"

/*
 * The generator walks a schedule of source indices. Each array element
 * packs GEN_SLOTS_PER_ELEM indices so the table costs 4 bytes a slot
 * (an ARRAY map rounds values up to 8 bytes).
 */
#define GEN_SLOTS_PER_ELEM 16
#define GEN_SLOTS_MAX (1u << 22)
#define GEN_ELEMS_MAX (GEN_SLOTS_MAX / GEN_SLOTS_PER_ELEM)
#define GEN_MAX_CPUS 64

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
	__u32 _pad;
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

#endif /* RAMPART_SHARED_LAB_H */
