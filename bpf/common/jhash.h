/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Bob Jenkins' lookup3 hash as in the kernel's include/linux/jhash.h
 * (jhash2 over u32 words). Header-only, bounded loops, verifier-friendly.
 * The Rust mirror is crates/rampart-stream/src/flowid.rs; a BPF_PROG_RUN
 * test checks both give the same values.
 */
#ifndef RAMPART_COMMON_JHASH_H
#define RAMPART_COMMON_JHASH_H

#include "common/common.h"

#define JHASH_INITVAL 0xdeadbeef

static __always_inline __u32 rp_rol32(__u32 word, unsigned int shift)
{
	return (word << shift) | (word >> ((-shift) & 31));
}

#define __rp_jhash_mix(a, b, c)                                                \
	{                                                                      \
		a -= c;  a ^= rp_rol32(c, 4);  c += b;                         \
		b -= a;  b ^= rp_rol32(a, 6);  a += c;                         \
		c -= b;  c ^= rp_rol32(b, 8);  b += a;                         \
		a -= c;  a ^= rp_rol32(c, 16); c += b;                         \
		b -= a;  b ^= rp_rol32(a, 19); a += c;                         \
		c -= b;  c ^= rp_rol32(b, 4);  b += a;                         \
	}

#define __rp_jhash_final(a, b, c)                                              \
	{                                                                      \
		c ^= b; c -= rp_rol32(b, 14);                                  \
		a ^= c; a -= rp_rol32(c, 11);                                  \
		b ^= a; b -= rp_rol32(a, 25);                                  \
		c ^= b; c -= rp_rol32(b, 16);                                  \
		a ^= c; a -= rp_rol32(c, 4);                                   \
		b ^= a; b -= rp_rol32(a, 14);                                  \
		c ^= b; c -= rp_rol32(b, 24);                                  \
	}

/* jhash2: hash `length` u32 words (length known at compile time in callers). */
static __always_inline __u32 rp_jhash2(const __u32 *k, __u32 length, __u32 initval)
{
	__u32 a, b, c;

	a = b = c = JHASH_INITVAL + (length << 2) + initval;
	while (length > 3) {
		a += k[0];
		b += k[1];
		c += k[2];
		__rp_jhash_mix(a, b, c);
		length -= 3;
		k += 3;
	}
	switch (length) {
	case 3:
		c += k[2];
		/* fallthrough */
	case 2:
		b += k[1];
		/* fallthrough */
	case 1:
		a += k[0];
		__rp_jhash_final(a, b, c);
		break;
	case 0:
		break;
	}
	return c;
}

#endif /* RAMPART_COMMON_JHASH_H */
