/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * SYN-ACK crafting for SYN cookies answered from XDP: one implementation
 * for every program that answers SYNs without keeping state (the tenant
 * SYN-cookie proxy, bpf/tenant/api/programs/synproxy.c, and the ddos
 * protection stage, bpf/ddos/xdp_features.bpf.c). What goes into the
 * sequence number (the cookie) and into TSval is the caller's: the tenant
 * proxy uses the kernel's cookie, ddos its own keyed one.
 *
 *   synack_check()  the frame is a SYN worth answering: plain headers at
 *                   fixed offsets (Ethernet, 20-byte IPv4 or 40-byte IPv6,
 *                   TCP), no payload, IPv4 header and TCP checksums valid,
 *                   options well formed (each option's length ≥ 2 and
 *                   within the header; MSS length 4, window scale 3,
 *                   SACK-permitted 2, timestamps 10); the options are read
 *                   into struct syn_opts. The first SYN_OPTS_MAX (12)
 *                   options are read (real stacks send 4 to 9, NOPs
 *                   included); later ones are ignored, as if absent.
 *   synack_build()  turns that SYN, in place, into the SYN-ACK: MACs,
 *                   addresses and ports swapped, ack = seq + 1, the given
 *                   ISN, options MSS, [SACK-permitted,] [timestamps (given
 *                   TSval, TSecr = the client's TSval),] [window scale],
 *                   IPv4 header and TCP checksums; the frame trimmed to
 *                   the new length. The caller returns XDP_TX.
 *
 * A SYN-ACK carries SACK-permitted and window scale only with timestamps
 * when the caller's cookie can only carry them in TSval (the kernel's);
 * SYNACK_OPTS_ALWAYS makes them independent of timestamps (a cookie that
 * encodes them in the ISN).
 */
#ifndef RAMPART_COMMON_SYNACK_H
#define RAMPART_COMMON_SYNACK_H

#include "common/common.h"

#define SYNACK_TCP_HDR_MAX 60
/* struct syn_opts.wscale when the SYN has no window scale option. */
#define SYN_NO_WSCALE 0xf
#define SYN_MAX_WSCALE 14
/* Options read per SYN (NOPs count): real stacks send 4-9; the rest is ignored. */
#define SYN_OPTS_MAX 12
/* synack_build() flag: SACK-permitted and window scale even without timestamps. */
#define SYNACK_OPTS_ALWAYS 1

/* What a SYN asked for. */
struct syn_opts {
	/* The client's TSval, network order, as received. */
	__u32 tsval;
	/* TSecr (host order): what the other side's TSval was, in an ACK. */
	__u32 tsecr;
	/* The client's MSS option (host order); 0 when absent. */
	__u16 mss;
	/* The client's window scale (at most SYN_MAX_WSCALE), SYN_NO_WSCALE when absent. */
	__u8 wscale;
	/* Timestamps and SACK-permitted present. */
	__u8 ts;
	__u8 sack;
	/* ECE and CWR both set: the client asks for ECN. */
	__u8 ecn;
	__u8 pad[2];
};

/* The SYN's options, copied out of the packet (40 bytes max; 64 so that any 6-bit index is inside). */
struct syn_optbuf {
	__u8 b[64];
};

/* How to answer: the SYN-ACK's own parameters. */
struct synack_params {
	/* Sequence number (the cookie). */
	__u32 isn;
	/* TSval (host order), used when the SYN had timestamps. */
	__u32 tsval;
	/* MSS announced. */
	__u16 mss;
	/* Receive window (unscaled, as every SYN segment's). */
	__u16 window;
	/* Our window scale, announced when the SYN had one. */
	__u8 wscale;
	/* IPv4 TTL / IPv6 hop limit. */
	__u8 ttl;
	/* Set ECE (agree to ECN). */
	__u8 ece;
	/* SYNACK_OPTS_* */
	__u8 flags;
};

static __always_inline __u16 synack_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Pseudo-header sum (native word order) for TCP over IPv4 or IPv6. */
static __always_inline __u64 synack_pseudo_sum(void *l3, int v6, __u32 tcp_len)
{
	__u64 s = 0;

	if (v6) {
		struct ipv6hdr *ip6 = l3;
		int i;

#pragma unroll
		for (i = 0; i < 4; i++) {
			s += ip6->saddr.in6_u.u6_addr32[i];
			s += ip6->daddr.in6_u.u6_addr32[i];
		}
		s += bpf_htonl(tcp_len);
		s += bpf_htonl(IPPROTO_TCP);
	} else {
		struct iphdr *ip = l3;

		s += ip->saddr;
		s += ip->daddr;
		s += bpf_htons(tcp_len);
		s += bpf_htons(IPPROTO_TCP);
	}
	return s;
}

/*
 * Walk the options (`len32` bytes of `buf`). Not inlined: verified once
 * per call site rather than once per path through the caller; static, so
 * that every object including this header (tenant programs, the tenant
 * wrapper) may have its own copy. Returns 0 when well formed, 1 otherwise.
 */
static __attribute__((noinline)) int syn_parse_opts(struct syn_optbuf *buf, __u32 len32, struct syn_opts *o)
{
	/* 64-bit offsets: no zero-extension copies that lose the bounds
	 * the comparisons establish (the verifier then prunes the loop). */
	__u64 off = 0, len = len32;
	int i;

	if (!buf || !o || len > 40) /* options fit in 40 bytes */
		return 1;
	o->wscale = SYN_NO_WSCALE;
	o->ts = 0;
	o->sack = 0;
	o->mss = 0;
	o->tsval = 0;
	o->tsecr = 0;
	for (i = 0; i < SYN_OPTS_MAX; i++) {
		__u64 kind, olen;

		if (off >= len)
			return 0;
		kind = buf->b[off & 0x3f];
		if (kind == 0) /* end of options */
			return 0;
		if (kind == 1) { /* NOP */
			off++;
			continue;
		}
		if (off + 2 > len)
			return 1;
		olen = buf->b[(off + 1) & 0x3f];
		if (olen < 2 || off + olen > len)
			return 1;
		switch (kind) {
		case 2: /* MSS */
			if (olen != 4)
				return 1;
			o->mss = (__u16)buf->b[(off + 2) & 0x3f] << 8 | buf->b[(off + 3) & 0x3f];
			break;
		case 3: /* window scale */
			if (olen != 3)
				return 1;
			o->wscale = buf->b[(off + 2) & 0x3f];
			if (o->wscale > SYN_MAX_WSCALE)
				o->wscale = SYN_MAX_WSCALE;
			break;
		case 4: /* SACK permitted */
			if (olen != 2)
				return 1;
			o->sack = 1;
			break;
		case 8: /* timestamps: TSval kept in network order */
			if (olen != 10)
				return 1;
			o->ts = 1;
			o->tsval = (__u32)buf->b[(off + 2) & 0x3f] | (__u32)buf->b[(off + 3) & 0x3f] << 8 |
				   (__u32)buf->b[(off + 4) & 0x3f] << 16 |
				   (__u32)buf->b[(off + 5) & 0x3f] << 24;
			o->tsecr = (__u32)buf->b[(off + 6) & 0x3f] << 24 | (__u32)buf->b[(off + 7) & 0x3f] << 16 |
				   (__u32)buf->b[(off + 8) & 0x3f] << 8 | (__u32)buf->b[(off + 9) & 0x3f];
			break;
		}
		off += olen;
	}
	return 0;
}

/*
 * Is the frame a SYN to answer (see the top of this file)? `v6` says which
 * IP header sits after the Ethernet header. Grows the frame to hold the
 * largest TCP header, so packet pointers must be reloaded afterwards.
 * Returns 0 with *o filled, -1 when it is not.
 */
static __always_inline int synack_check(struct xdp_md *ctx, int v6, struct syn_opts *o)
{
	const __u32 l3 = sizeof(struct ethhdr);
	const __u32 l4 = l3 + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct syn_optbuf ob = {};
	struct tcphdr *th;
	__u32 old_len, tcp_len;
	__u64 sum;

	/* Room for the largest TCP header so the checksum gets a bounded length. */
	old_len = bpf_xdp_get_buff_len(ctx);
	if (old_len < l4 + SYNACK_TCP_HDR_MAX) {
		if (bpf_xdp_adjust_tail(ctx, (int)(l4 + SYNACK_TCP_HDR_MAX) - (int)old_len))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
	}
	if (data + l4 + SYNACK_TCP_HDR_MAX > data_end)
		return -1;
	th = data + l4;
	tcp_len = th->doff * 4;
	if (tcp_len < sizeof(*th) || tcp_len > SYNACK_TCP_HDR_MAX)
		return -1;
	if (v6) {
		struct ipv6hdr *ip6 = data + l3;

		if (bpf_ntohs(ip6->payload_len) != tcp_len)
			return -1; /* data on a SYN */
	} else {
		struct iphdr *ip = data + l3;
		__u16 *w = (__u16 *)ip;
		__u32 isum = 0;
		int i;

		if (bpf_ntohs(ip->tot_len) != sizeof(*ip) + tcp_len)
			return -1;
#pragma unroll
		for (i = 0; i < 10; i++)
			isum += w[i];
		if (synack_fold(isum) != 0)
			return -1;
	}
	sum = (__u32)bpf_csum_diff(0, 0, (__be32 *)th, tcp_len & 0x3c, 0);
	if (synack_fold(sum + synack_pseudo_sum(data + l3, v6, tcp_len)) != 0)
		return -1;

	__builtin_memcpy(ob.b, (__u8 *)th + 20, 40);
	if (syn_parse_opts(&ob, tcp_len - 20, o))
		return -1;
	o->ecn = (((__u8 *)th)[13] & 0xc0) == 0xc0;
	return 0;
}

/*
 * Turn the SYN that synack_check() accepted into the SYN-ACK described by
 * `p` and `o` (see the top of this file). Returns 0, or -1 when the frame
 * cannot be resized (then drop it).
 */
static __always_inline int synack_build(struct xdp_md *ctx, int v6, const struct synack_params *p,
					const struct syn_opts *o)
{
	const __u32 l3 = sizeof(struct ethhdr);
	const __u32 l4 = l3 + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tcphdr *th;
	__u32 hlen, seq, *opt, old_len;
	int sack, ws, n = 1;
	__u16 port;
	__u8 mac[6];
	__u64 sum;

	if (data + l4 + SYNACK_TCP_HDR_MAX > data_end)
		return -1;
	th = data + l4;
	sack = o->sack && (o->ts || (p->flags & SYNACK_OPTS_ALWAYS));
	ws = o->wscale != SYN_NO_WSCALE && (o->ts || (p->flags & SYNACK_OPTS_ALWAYS));

	/* Ethernet: back to the sender. */
	{
		struct ethhdr *eth = data;

		__builtin_memcpy(mac, eth->h_dest, 6);
		__builtin_memcpy(eth->h_dest, eth->h_source, 6);
		__builtin_memcpy(eth->h_source, mac, 6);
	}

	/* TCP options, 4-byte words: MSS, then SACK-permitted/timestamps, then window scale. */
	opt = (__u32 *)(th + 1);
	opt[0] = bpf_htonl((2 << 24) | (4 << 16) | p->mss);
	if (o->ts) {
		opt[1] = bpf_htonl(sack ? (4 << 24) | (2 << 16) | (8 << 8) | 10
				       : (1 << 24) | (1 << 16) | (8 << 8) | 10);
		opt[2] = bpf_htonl(p->tsval);
		opt[3] = o->tsval;
		n = 4;
	} else if (sack) {
		opt[1] = bpf_htonl((1 << 24) | (1 << 16) | (4 << 8) | 2);
		n = 2;
	}
	if (ws) {
		if (n == 4)
			opt[4] = bpf_htonl((1 << 24) | (3 << 16) | (3 << 8) | p->wscale);
		else if (n == 2)
			opt[2] = bpf_htonl((1 << 24) | (3 << 16) | (3 << 8) | p->wscale);
		else
			opt[1] = bpf_htonl((1 << 24) | (3 << 16) | (3 << 8) | p->wscale);
		n++;
	}
	hlen = 20 + 4 * n;

	port = th->source;
	th->source = th->dest;
	th->dest = port;
	seq = bpf_ntohl(th->seq);
	th->ack_seq = bpf_htonl(seq + 1);
	th->seq = bpf_htonl(p->isn);
	((__u8 *)th)[12] = (hlen / 4) << 4;
	((__u8 *)th)[13] = 0x12 | (p->ece ? 0x40 : 0); /* SYN|ACK (|ECE) */
	th->window = bpf_htons(p->window);
	th->check = 0;
	th->urg_ptr = 0;

	if (v6) {
		struct ipv6hdr *ip6 = data + l3;
		struct in6_addr a = ip6->saddr;

		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		*(__u32 *)ip6 = bpf_htonl(0x60000000);
		ip6->payload_len = bpf_htons(hlen);
		ip6->hop_limit = p->ttl;
	} else {
		struct iphdr *ip = data + l3;
		__u32 a = ip->saddr, isum = 0;
		__u16 *w = (__u16 *)ip;
		int i;

		ip->saddr = ip->daddr;
		ip->daddr = a;
		ip->tos = 0;
		ip->id = 0;
		ip->frag_off = bpf_htons(0x4000);
		ip->ttl = p->ttl;
		ip->tot_len = bpf_htons(sizeof(*ip) + hlen);
		ip->check = 0;
#pragma unroll
		for (i = 0; i < 10; i++)
			isum += w[i];
		ip->check = synack_fold(isum);
	}
	sum = (__u32)bpf_csum_diff(0, 0, (__be32 *)th, hlen & 0x3c, 0);
	th->check = synack_fold(sum + synack_pseudo_sum(data + l3, v6, hlen));

	old_len = bpf_xdp_get_buff_len(ctx);
	if (bpf_xdp_adjust_tail(ctx, (int)(l4 + hlen) - (int)old_len))
		return -1;
	return 0;
}

#endif /* RAMPART_COMMON_SYNACK_H */
