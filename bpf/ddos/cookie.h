/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * rampart ddos SYN cookies: the cookie both stages compute, the XDP
 * stage (xdp_features.bpf.c, SYN → SYN-ACK, ACK validation) and the TC
 * stage (tc_cookie.bpf.c, validated ACK → request socket for the kernel).
 *
 * The cookie is the SYN-ACK's sequence number (ISN):
 *
 *   bits 31..8  the top 24 bits of SipHash-2-4 (key: ddos_ckey, random at
 *               load) over the addresses, ports, the client's ISN, the
 *               low 8 bits below and a time slot of 2^36 ns (~69 s);
 *   bits 7..6   MSS index (COOKIE_MSS_*: 536, 1220, 1440, 1460);
 *   bit 5       ECN agreed; bit 4 SACK-permitted;
 *   bits 3..0   the client's window scale, 0xf = none.
 *
 * An ACK carries the cookie + 1 in its ack number and the client's ISN + 1
 * in its sequence number; it is valid when the hash matches in the
 * current or the previous time slot (a cookie lives 69 to 137 s). Every
 * option the kernel needs is in the ISN, so cookies work without
 * timestamps; with timestamps, TSval is the millisecond clock (the kernel
 * derives the connection's timestamp offset from the TSecr the client
 * echoes). Our own window scale is COOKIE_WSCALE (announced only when the
 * client sent one).
 */
#ifndef RAMPART_DDOS_COOKIE_H
#define RAMPART_DDOS_COOKIE_H

#include "common/common.h"
#include "ddos/abi.h"

#define COOKIE_WSCALE_MASK 0xf
#define COOKIE_SACK (1 << 4)
#define COOKIE_ECN (1 << 5)
#define COOKIE_MSS_SHIFT 6
#define COOKIE_LOW_MASK 0xffu
#define COOKIE_SLOT_SHIFT 36
/* Our window scale and the window of the SYN-ACK. */
#define COOKIE_WSCALE 7
#define COOKIE_WINDOW 64240
/* MSS we announce (the kernel clamps to the route when it builds the socket). */
#define COOKIE_MSS4_OURS 1460
#define COOKIE_MSS6_OURS 1440

/* The MSS an index stands for: the largest entry ≤ the client's MSS. */
static __always_inline __u16 cookie_mss_of(__u32 idx)
{
	switch (idx & 3) {
	case 0:
		return 536;
	case 1:
		return 1220; /* the IPv6 minimum (1280 - 60) */
	case 2:
		return 1440;
	default:
		return 1460;
	}
}

static __always_inline __u32 cookie_mss_index(__u16 mss, int v6)
{
	if (mss >= 1460)
		return 3;
	if (mss >= 1440)
		return 2;
	if (mss >= 1220 || v6) /* IPv6 never goes below its minimum MTU */
		return 1;
	return 0;
}

#define SIP_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND(v0, v1, v2, v3)                                                          \
	do {                                                                               \
		v0 += v1;                                                                  \
		v1 = SIP_ROTL(v1, 13);                                                     \
		v1 ^= v0;                                                                  \
		v0 = SIP_ROTL(v0, 32);                                                     \
		v2 += v3;                                                                  \
		v3 = SIP_ROTL(v3, 16);                                                     \
		v3 ^= v2;                                                                  \
		v0 += v3;                                                                  \
		v3 = SIP_ROTL(v3, 21);                                                     \
		v3 ^= v0;                                                                  \
		v2 += v1;                                                                  \
		v1 = SIP_ROTL(v1, 17);                                                     \
		v1 ^= v2;                                                                  \
		v2 = SIP_ROTL(v2, 32);                                                     \
	} while (0)

/* SipHash-2-4 of six 64-bit words (48 bytes). */
static __always_inline __u64 cookie_siphash(const struct ddos_cookie_key *key, const __u64 m[6])
{
	__u64 v0 = 0x736f6d6570736575ull ^ key->k[0];
	__u64 v1 = 0x646f72616e646f6dull ^ key->k[1];
	__u64 v2 = 0x6c7967656e657261ull ^ key->k[0];
	__u64 v3 = 0x7465646279746573ull ^ key->k[1];
	int i;

#pragma unroll
	for (i = 0; i < 6; i++) {
		v3 ^= m[i];
		SIP_ROUND(v0, v1, v2, v3);
		SIP_ROUND(v0, v1, v2, v3);
		v0 ^= m[i];
	}
	v3 ^= 48ull << 56;
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	v0 ^= 48ull << 56;
	v2 ^= 0xff;
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

/* What a cookie is computed over (the connection as the client sends it). */
struct cookie_in {
	/* Network order; IPv4 in [0]. */
	__u32 saddr[4];
	__u32 daddr[4];
	/* Network order. */
	__u16 sport;
	__u16 dport;
	/* The client's ISN (host order). */
	__u32 isn;
};

static __always_inline __u32 cookie_make(const struct ddos_cookie_key *key, const struct cookie_in *c,
					 __u32 low, __u64 slot)
{
	__u64 m[6];

	m[0] = (__u64)c->saddr[0] << 32 | c->saddr[1];
	m[1] = (__u64)c->saddr[2] << 32 | c->saddr[3];
	m[2] = (__u64)c->daddr[0] << 32 | c->daddr[1];
	m[3] = (__u64)c->daddr[2] << 32 | c->daddr[3];
	m[4] = (__u64)c->sport << 48 | (__u64)c->dport << 32 | c->isn;
	m[5] = slot << 8 | (low & COOKIE_LOW_MASK);
	return ((__u32)cookie_siphash(key, m) & ~COOKIE_LOW_MASK) | (low & COOKIE_LOW_MASK);
}

static __always_inline __u64 cookie_slot(void)
{
	return bpf_ktime_get_ns() >> COOKIE_SLOT_SHIFT;
}

/* Is `cookie` one we made for this connection in this or the previous slot? */
static __always_inline int cookie_valid(const struct ddos_cookie_key *key, const struct cookie_in *c,
					__u32 cookie)
{
	__u64 slot = cookie_slot();
	__u32 low = cookie & COOKIE_LOW_MASK;

	if ((low & COOKIE_WSCALE_MASK) > 14 && (low & COOKIE_WSCALE_MASK) != COOKIE_WSCALE_MASK)
		return 0;
	if (cookie_make(key, c, low, slot) == cookie)
		return 1;
	return slot > 0 && cookie_make(key, c, low, slot - 1) == cookie;
}

/* The victim a destination address belongs to. */
static __always_inline void victim_key_of(struct ddos_victim_key *k, __u8 family, const __u32 daddr[4])
{
	k->family = family;
	k->addr[0] = daddr[0];
	k->addr[1] = family == 6 ? daddr[1] : 0;
	k->_pad = 0;
}

#endif /* RAMPART_DDOS_COOKIE_H */
