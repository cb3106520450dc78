// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rampart tenant service: SYN-cookie proxy (after SecSoN 2018 §5).
 *
 * A tenant program (compiled by the compiler agent against
 * rampart_tenant.h) protecting the TCP ports listed in `syn_ports`:
 *
 *   SYN        → SYN-ACK built in place and sent back (XDP_TX). Its sequence
 *                number is the kernel's SYN cookie for the 4-tuple
 *                (bpf_tcp_raw_gen_syncookie_ipv4/6: same secret and
 *                encoding as net/ipv4/syncookies.c, MSS from the SYN's
 *                option); with timestamps, TSval carries the client's window
 *                scale, SACK-permitted and ECN like cookie_init_timestamp()
 *                (low 6 bits), TSecr echoes the client. Nothing is stored.
 *   ACK        → its cookie (ack_seq - 1) is checked
 *                (bpf_tcp_raw_check_syncookie_ipv4/6); valid: the flow is
 *                remembered in `syn_flows` and the packet passes to the
 *                tenant's domain; invalid: dropped.
 *   later packets of a remembered flow pass; anything else to a protected
 *   port (SYN-ACK, RST or FIN of no flow, fragments, VLAN-tagged frames,
 *   IPv4 options, IPv6 extension headers) is dropped.
 *
 * The server never sees the SYN: in the tenant's namespace the kernel's
 * SYNPROXY target (iptables, conntrack) takes the validated ACK, checks
 * the same cookie, opens the connection to the local server and splices
 * the sequence numbers — that is how the kernel's own XDP SYN proxy is
 * deployed (tools/testing/selftests/bpf xdp_synproxy). A SYN flood costs
 * the server nothing: no request socket, no backlog entry.
 *
 * SYNs are answered only when well formed: no payload, checksums valid,
 * TCP options well formed (every option's length ≥ 2 and within the
 * header; MSS length 4, window scale 3, SACK-permitted 2, timestamps 10).
 * The first SYN_OPTS_MAX (12) options are read (real stacks send 4 to 9,
 * NOPs included); options after them are ignored, as if absent (the MSS is
 * read by the kernel's helper, whatever its position).
 *
 * Configuration (the tenant's maps): syn_cfg[0] (MSS announced for IPv4
 * and IPv6, window scale, TTL; zero: 1460/1440/7/64), syn_ports (TCP ports
 * to protect, host order). Counters: syn_stats (per-CPU, enum syn_stat).
 */
#include "rampart_tenant.h"

#define TCP_HDR_MAX 60
#define TS_OPT_WSCALE_MASK 0xf
#define TS_OPT_SACK (1 << 4)
#define TS_OPT_ECN (1 << 5)
#define TSMASK 0x3f
#define TCP_MAX_WSCALE 14
/* Options read per SYN (NOPs count): real stacks send 4-9; the rest is ignored. */
#define SYN_OPTS_MAX 12

struct syn_cfg {
	__u16 mss4;
	__u16 mss6;
	__u8 wscale;
	__u8 ttl;
	__u8 pad[2];
};

struct syn_flow {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u32 family;
};

enum syn_stat {
	SYN_ST_SYNACK = 0,      /* SYN answered with a cookie SYN-ACK */
	SYN_ST_ACK_VALID = 1,   /* ACK with a valid cookie: flow opened, passed */
	SYN_ST_ACK_INVALID = 2, /* ACK of no flow with a wrong cookie: dropped */
	SYN_ST_FLOW = 3,        /* packet of a validated flow: passed */
	SYN_ST_BAD_SYN = 4,     /* malformed SYN (options, checksum, payload): dropped */
	SYN_ST_OTHER_DROP = 5,  /* anything else to a protected port: dropped */
	SYN_ST_UNPROTECTED = 6, /* not TCP to a protected port: passed */
	SYN_ST_MAX = 8,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct syn_cfg);
} syn_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u16);
	__type(value, __u8);
} syn_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, struct syn_flow);
	__type(value, __u64);
} syn_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SYN_ST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} syn_stats SEC(".maps");

static __always_inline int count(__u32 what, int verdict)
{
	__u64 *v = bpf_map_lookup_elem(&syn_stats, &what);

	if (v)
		*v += 1;
	return verdict;
}

static __always_inline __u16 fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Pseudo-header sum (native word order) for TCP over IPv4 or IPv6. */
static __always_inline __u64 pseudo_sum(void *l3, int v6, __u32 tcp_len)
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

struct syn_opts {
	__u32 tsval; /* network order, as received */
	__u8 wscale;
	__u8 ts;
	__u8 sack;
	__u8 pad;
};

/* The SYN's options, copied out of the packet (40 bytes max; 64 so that any 6-bit index is inside). */
struct syn_optbuf {
	__u8 b[64];
};

/*
 * Walk the options (`len` bytes of `buf`). A global function: the verifier
 * checks it once, on its own, instead of once per path into it. Returns 0
 * when well formed, 1 otherwise.
 */
__attribute__((noinline)) int syn_parse_opts(struct syn_optbuf *buf, __u32 len, struct syn_opts *o)
{
	__u32 off = 0;
	int i;

	if (!buf || !o)
		return 1;
	o->wscale = TS_OPT_WSCALE_MASK;
	o->ts = 0;
	o->sack = 0;
	o->tsval = 0;
	for (i = 0; i < SYN_OPTS_MAX; i++) {
		__u8 kind, olen;

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
		case 2: /* MSS (read by the cookie helper) */
			if (olen != 4)
				return 1;
			break;
		case 3: /* window scale */
			if (olen != 3)
				return 1;
			o->wscale = buf->b[(off + 2) & 0x3f];
			if (o->wscale > TCP_MAX_WSCALE)
				o->wscale = TCP_MAX_WSCALE;
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
			break;
		}
		off += olen;
	}
	return 0;
}

static __always_inline void flow_key(struct syn_flow *k, struct pkt_info *pi)
{
	__builtin_memcpy(k->saddr, pi->saddr, sizeof(k->saddr));
	__builtin_memcpy(k->daddr, pi->daddr, sizeof(k->daddr));
	k->sport = pi->sport;
	k->dport = pi->dport;
	k->family = pi->family;
}

/* Answer the SYN at l4 (20-byte IPv4 or 40-byte IPv6 header before it). */
static __always_inline int answer_syn(struct xdp_md *ctx, int v6)
{
	const __u32 l3 = sizeof(struct ethhdr);
	const __u32 l4 = l3 + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct syn_cfg *cfg;
	struct syn_opts o = {};
	struct syn_optbuf ob = {};
	struct tcphdr *th;
	__u32 old_len, tcp_len, zero = 0, cookie, hlen, tsv = 0, seq, *opt;
	__u16 mss, port;
	__u8 ws, ttl, ecn, mac[6];
	__s64 gen;
	__u64 sum;

	/* Room for the largest TCP header so the helpers get a bounded length. */
	old_len = bpf_xdp_get_buff_len(ctx);
	if (old_len < l4 + TCP_HDR_MAX) {
		if (bpf_xdp_adjust_tail(ctx, (int)(l4 + TCP_HDR_MAX) - (int)old_len))
			return count(SYN_ST_BAD_SYN, XDP_DROP);
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
	}
	if (data + l4 + TCP_HDR_MAX > data_end)
		return count(SYN_ST_BAD_SYN, XDP_DROP);
	th = data + l4;
	tcp_len = th->doff * 4;
	if (tcp_len < sizeof(*th) || tcp_len > TCP_HDR_MAX)
		return count(SYN_ST_BAD_SYN, XDP_DROP);
	if (v6) {
		struct ipv6hdr *ip6 = data + l3;

		if (bpf_ntohs(ip6->payload_len) != tcp_len)
			return count(SYN_ST_BAD_SYN, XDP_DROP); /* data on a SYN */
	} else {
		struct iphdr *ip = data + l3;
		__u16 *w = (__u16 *)ip;
		__u32 isum = 0;
		int i;

		if (bpf_ntohs(ip->tot_len) != sizeof(*ip) + tcp_len)
			return count(SYN_ST_BAD_SYN, XDP_DROP);
#pragma unroll
		for (i = 0; i < 10; i++)
			isum += w[i];
		if (fold(isum) != 0)
			return count(SYN_ST_BAD_SYN, XDP_DROP);
	}
	sum = (__u32)bpf_csum_diff(0, 0, (__be32 *)th, tcp_len & 0x3c, 0);
	if (fold(sum + pseudo_sum(data + l3, v6, tcp_len)) != 0)
		return count(SYN_ST_BAD_SYN, XDP_DROP);

	__builtin_memcpy(ob.b, (__u8 *)th + 20, 40);
	if (syn_parse_opts(&ob, tcp_len - 20, &o))
		return count(SYN_ST_BAD_SYN, XDP_DROP);

	if (v6)
		gen = bpf_tcp_raw_gen_syncookie_ipv6(data + l3, th, tcp_len & 0x3c);
	else
		gen = bpf_tcp_raw_gen_syncookie_ipv4(data + l3, th, tcp_len & 0x3c);
	if (gen < 0)
		return count(SYN_ST_BAD_SYN, XDP_DROP);
	cookie = (__u32)gen;

	cfg = bpf_map_lookup_elem(&syn_cfg, &zero);
	mss = v6 ? 1440 : 1460;
	ws = 7;
	ttl = 64;
	if (cfg && cfg->ttl) {
		mss = v6 ? cfg->mss6 : cfg->mss4;
		ws = cfg->wscale;
		ttl = cfg->ttl;
	}
	ecn = (((__u8 *)th)[13] & 0xc0) == 0xc0; /* ECE and CWR: ECN setup */

	/* Ethernet and IP: back to the sender. */
	{
		struct ethhdr *eth = data;

		__builtin_memcpy(mac, eth->h_dest, 6);
		__builtin_memcpy(eth->h_dest, eth->h_source, 6);
		__builtin_memcpy(eth->h_source, mac, 6);
	}

	/* TCP header and options. */
	hlen = 24 + (o.ts ? 12 : 0) + (o.ts && o.wscale != TS_OPT_WSCALE_MASK ? 4 : 0);
	if (o.ts) {
		tsv = (__u32)(bpf_ktime_get_ns() / 1000000) & ~TSMASK;
		tsv |= o.wscale & TS_OPT_WSCALE_MASK;
		if (o.sack)
			tsv |= TS_OPT_SACK;
		if (ecn)
			tsv |= TS_OPT_ECN;
	}
	port = th->source;
	th->source = th->dest;
	th->dest = port;
	seq = bpf_ntohl(th->seq);
	th->ack_seq = bpf_htonl(seq + 1);
	th->seq = bpf_htonl(cookie);
	((__u8 *)th)[12] = (hlen / 4) << 4;
	((__u8 *)th)[13] = 0x12 | (o.ts && ecn ? 0x40 : 0); /* SYN|ACK (|ECE) */
	th->window = 0;
	th->check = 0;
	th->urg_ptr = 0;
	opt = (__u32 *)(th + 1);
	opt[0] = bpf_htonl((2 << 24) | (4 << 16) | mss);
	if (o.ts) {
		opt[1] = bpf_htonl(o.sack ? (4 << 24) | (2 << 16) | (8 << 8) | 10
					  : (1 << 24) | (1 << 16) | (8 << 8) | 10);
		opt[2] = bpf_htonl(tsv);
		opt[3] = o.tsval;
		if (o.wscale != TS_OPT_WSCALE_MASK)
			opt[4] = bpf_htonl((1 << 24) | (3 << 16) | (3 << 8) | ws);
	}

	if (v6) {
		struct ipv6hdr *ip6 = data + l3;
		struct in6_addr a = ip6->saddr;

		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		*(__u32 *)ip6 = bpf_htonl(0x60000000);
		ip6->payload_len = bpf_htons(hlen);
		ip6->hop_limit = ttl;
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
		ip->ttl = ttl;
		ip->tot_len = bpf_htons(sizeof(*ip) + hlen);
		ip->check = 0;
#pragma unroll
		for (i = 0; i < 10; i++)
			isum += w[i];
		ip->check = fold(isum);
	}
	sum = (__u32)bpf_csum_diff(0, 0, (__be32 *)th, hlen & 0x3c, 0);
	th->check = fold(sum + pseudo_sum(data + l3, v6, hlen));

	old_len = bpf_xdp_get_buff_len(ctx);
	if (bpf_xdp_adjust_tail(ctx, (int)(l4 + hlen) - (int)old_len))
		return count(SYN_ST_BAD_SYN, XDP_DROP);
	return count(SYN_ST_SYNACK, XDP_TX);
}

int tenant_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct syn_flow key = {};
	struct pkt_info pi;
	struct tcphdr *th;
	__u16 port;
	__u64 now;
	__u8 flags;
	int st, v6, plain;
	long err;

	st = parse_packet(data, data_end, &pi);
	if (st == PARSE_NOT_IP)
		return count(SYN_ST_UNPROTECTED, XDP_PASS);
	if (st != PARSE_OK)
		return count(SYN_ST_OTHER_DROP, XDP_DROP);
	if (pi.l4_proto != IPPROTO_TCP)
		return count(SYN_ST_UNPROTECTED, XDP_PASS);
	/* Later fragments carry no ports: they pass, and die in reassembly
	 * without their first fragment, which is dropped below. */
	port = bpf_ntohs(pi.dport);
	if (!bpf_map_lookup_elem(&syn_ports, &port))
		return count(SYN_ST_UNPROTECTED, XDP_PASS);
	if (pi.frag != FRAG_NONE)
		return count(SYN_ST_OTHER_DROP, XDP_DROP);

	v6 = pi.family == 6;
	plain = pi.vlan_depth == 0 &&
		pi.l4_off == sizeof(struct ethhdr) + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	if (!plain)
		return count(SYN_ST_OTHER_DROP, XDP_DROP);
	flags = pi.tcp_flags;

	if ((flags & 0x17) == 0x02) /* SYN without ACK, RST, FIN */
		return answer_syn(ctx, v6);
	if (flags & 0x02) /* SYN-ACK or SYN with RST/FIN to a server */
		return count(SYN_ST_OTHER_DROP, XDP_DROP);

	flow_key(&key, &pi);
	if (bpf_map_lookup_elem(&syn_flows, &key))
		return count(SYN_ST_FLOW, XDP_PASS);
	if ((flags & 0x14) != 0x10) /* not an ACK, or a RST of no flow */
		return count(SYN_ST_OTHER_DROP, XDP_DROP);

	th = data + pi.l4_off;
	if ((void *)(th + 1) > data_end)
		return count(SYN_ST_OTHER_DROP, XDP_DROP);
	if (v6) {
		struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);

		if ((void *)(ip6 + 1) > data_end)
			return XDP_DROP;
		err = bpf_tcp_raw_check_syncookie_ipv6(ip6, th);
	} else {
		struct iphdr *ip = data + sizeof(struct ethhdr);

		if ((void *)(ip + 1) > data_end)
			return XDP_DROP;
		err = bpf_tcp_raw_check_syncookie_ipv4(ip, th);
	}
	if (err)
		return count(SYN_ST_ACK_INVALID, XDP_DROP);
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&syn_flows, &key, &now, BPF_ANY);
	return count(SYN_ST_ACK_VALID, XDP_PASS);
}
