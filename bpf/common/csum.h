/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Internet checksum helpers (RFC 1071, RFC 1624).
 *
 * Sums are kept unfolded in 32 bits over 16-bit words read in host byte
 * order; one's-complement addition commutes with byte swapping, so a sum
 * computed this way and stored back in host order is correct on the wire.
 */
#ifndef RAMPART_COMMON_CSUM_H
#define RAMPART_COMMON_CSUM_H

#include "common/common.h"

static __always_inline __u16 csum_fold32(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Add the two 16-bit halves of a 32-bit word (as stored in memory) to a sum. */
static __always_inline __u32 csum_add_word32(__u32 sum, __u32 word)
{
	__u64 s = (__u64)sum + (word & 0xffff) + (word >> 16);

	return (__u32)((s & 0xffffffff) + (s >> 32));
}

/* RFC 1624 incremental update: replace 32-bit word `from` by `to`. */
static __always_inline __u16 csum_replace4(__u16 check, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~check;

	sum = csum_add_word32(sum, ~from);
	sum = csum_add_word32(sum, to);
	return csum_fold32(sum);
}

#endif /* RAMPART_COMMON_CSUM_H */
