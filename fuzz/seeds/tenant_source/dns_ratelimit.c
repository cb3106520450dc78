// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rampart tenant service: DNS query rate limiter (after SecSoN 2018 §5).
 *
 * A tenant program (compiled by the compiler agent against
 * rampart_tenant.h) for a tenant that runs a DNS server. Every UDP query to
 * port 53 is charged to two budgets: its source address and its source
 * prefix (/24 IPv4, /56 IPv6 by default). A query within both budgets is
 * passed to the server; a query over either budget is answered with an
 * empty truncated response (TC=1, so a real resolver retries over TCP,
 * which is not limited here) or dropped, as the tenant configures. Sources
 * in the exempt prefixes are never limited.
 *
 * Budgets are GCRA token buckets (one u64 "theoretical arrival time" per
 * key): rate = 1 / interval, burst = tau / interval + 1. Concurrent CPUs
 * update a bucket without a lock: under a multi-queue flood a source may
 * get a few queries more than its burst; never fewer.
 *
 * Configuration (the tenant's own maps, written through the API or
 * `rampart_tenant::programs::DnsLimits`):
 *   dns_cfg[0]     struct dns_cfg (all zero: no limit at all)
 *   dns_exempt     LPM trie of exempt source prefixes
 * State: dns_src, dns_pfx (LRU hashes of buckets). Counters: dns_stats
 * (per-CPU, index enum dns_stat).
 *
 * What is DNS here: UDP to port 53 whose payload holds a 12-byte header
 * with QR=0. Shorter payloads, responses sent to port 53 and UDP lengths
 * that disagree with the frame are dropped (malformed) whatever the budget.
 * The question is parsed only to build a TC answer: exactly one question,
 * opcode QUERY, an uncompressed name of at most 255 bytes with labels of
 * at most 63 bytes, QTYPE and QCLASS present. A query that fails these
 * (compressed, truncated or oversized name, several questions) is passed
 * when within budget (the server answers FORMERR) and dropped when over.
 * TC answers are built for plain frames only (no VLAN tag, IPv4 without
 * options, IPv6 without extension headers); over-budget queries in other
 * frames are dropped. An answer is never larger than its query.
 */
#include "rampart_tenant.h"

#define DNS_PORT 53
#define DNS_HDR 12
#define DNS_NAME_MAX 255
#define DNS_LABELS_MAX 128

enum dns_action {
	DNS_ACT_DROP = 0,
	DNS_ACT_TRUNCATE = 1,
};

struct dns_cfg {
	/* Per source: ns between queries (0: no per-source limit) and burst tolerance. */
	__u64 src_interval_ns;
	__u64 src_tau_ns;
	/* Per prefix: same. */
	__u64 pfx_interval_ns;
	__u64 pfx_tau_ns;
	/* enum dns_action for queries over budget. */
	__u32 action;
	/* Prefix lengths (0: 24 for IPv4, 56 for IPv6). IPv6 at most 64. */
	__u32 v4_plen;
	__u32 v6_plen;
	__u32 pad;
};

/* Bucket key: the address (masked for prefixes) and its family. */
struct dns_key {
	__u32 addr[4];
	__u32 family;
};

/* Exempt prefix: LPM over {family byte, 3 zero bytes, address}. prefixlen = 32 + bits. */
struct dns_exempt_key {
	__u32 prefixlen;
	__u8 family;
	__u8 pad[3];
	__u32 addr[4];
};

enum dns_stat {
	DNS_ST_PASS = 0,      /* query within budget, passed */
	DNS_ST_TRUNCATED = 1, /* over budget, answered TC=1 */
	DNS_ST_DROPPED = 2,   /* over budget, dropped */
	DNS_ST_EXEMPT = 3,    /* exempt source, passed */
	DNS_ST_MALFORMED = 4, /* not a DNS query (short, QR=1, bad UDP length), dropped */
	DNS_ST_OTHER = 5,     /* not UDP/53, passed */
	DNS_ST_BAD_FRAME = 6, /* frame the parser refused, dropped */
	DNS_ST_MAX = 8,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dns_cfg);
} dns_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct dns_key);
	__type(value, __u64);
} dns_src SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct dns_key);
	__type(value, __u64);
} dns_pfx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dns_exempt_key);
	__type(value, __u32);
} dns_exempt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DNS_ST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} dns_stats SEC(".maps");

static __always_inline void count(__u32 what)
{
	__u64 *v = bpf_map_lookup_elem(&dns_stats, &what);

	if (v)
		*v += 1;
}

/* GCRA: is a query at `now` within the bucket's budget? (`*tat` 0: fresh bucket). */
static __always_inline int conforms(__u64 *tat, __u64 now, __u64 tau)
{
	return !tat || *tat <= now || *tat - now <= tau;
}

static __always_inline void charge(void *map, struct dns_key *k, __u64 *tat, __u64 now,
				   __u64 interval)
{
	__u64 t = (tat && *tat > now ? *tat : now) + interval;

	if (tat)
		*tat = t;
	else
		bpf_map_update_elem(map, k, &t, BPF_ANY);
}

/* Mask `a` (network order words) to `plen` bits: IPv4 uses word 0, IPv6 words 0-1. */
static __always_inline __u32 mask32(__u32 word, __u32 bits)
{
	if (bits >= 32)
		return word;
	if (bits == 0)
		return 0;
	return word & bpf_htonl(~((1U << (32 - bits)) - 1));
}

/*
 * Parse the question at `q` (just after the header): returns the offset of
 * the end of QTYPE/QCLASS from `q`, or 0 when the name is compressed,
 * truncated or oversized.
 */
static __always_inline __u32 question_len(void *q, void *data_end)
{
	__u32 off = 0;
	int i;

	for (i = 0; i < DNS_LABELS_MAX; i++) {
		__u8 *lp;
		__u8 l;

		if (off > DNS_NAME_MAX)
			return 0;
		lp = q + off;
		if ((void *)(lp + 1) > data_end)
			return 0;
		l = *lp;
		if (l == 0) {
			off += 1;
			if (off > DNS_NAME_MAX)
				return 0;
			if (q + off + 4 > data_end)
				return 0;
			return off + 4;
		}
		if (l > 63) /* compression pointer (0xc0) or reserved label type */
			return 0;
		off += 1 + l;
	}
	return 0;
}

static __always_inline __u32 sum_words(void *p, void *data_end, __u32 sum)
{
	int i;

	for (i = 0; i < (8 + DNS_HDR + DNS_NAME_MAX + 4 + 1) / 2; i++) {
		__u16 *w = p + 2 * i;
		__u8 *b = p + 2 * i;

		if ((void *)(w + 1) > data_end) {
			if ((void *)(b + 1) <= data_end)
				sum += *b;
			break;
		}
		sum += *w;
	}
	return sum;
}

static __always_inline __u16 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/*
 * Turn the query into an empty TC=1 answer in place: header flags and
 * counts, everything after the question cut, addresses and ports swapped,
 * lengths and checksums rewritten. `qlen` is the question's length.
 */
static __always_inline int answer_truncated(struct xdp_md *ctx, int v6, __u32 qlen)
{
	__u32 l4 = sizeof(struct ethhdr) + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	__u32 new_len = l4 + sizeof(struct udphdr) + DNS_HDR + qlen;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 old_len = data_end - data;
	struct ethhdr *eth;
	struct udphdr *udp;
	__u8 *dns, mac[6];
	__u16 udp_len, port;
	__u32 sum = 0;

	if (new_len > old_len)
		return XDP_DROP;
	if (new_len < old_len && bpf_xdp_adjust_tail(ctx, (int)new_len - (int)old_len))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if (data + l4 + sizeof(struct udphdr) + DNS_HDR > data_end)
		return XDP_DROP;
	udp = data + l4;
	dns = (void *)(udp + 1);

	__builtin_memcpy(mac, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, mac, 6);

	/* Header: QR=1, opcode kept (0), AA=0, TC=1, RD kept; RA=0, Z=0, RCODE=0. */
	dns[2] = 0x80 | 0x02 | (dns[2] & 0x01);
	dns[3] = 0;
	/* QDCOUNT stays 1; ANCOUNT, NSCOUNT, ARCOUNT = 0. */
	__builtin_memset(dns + 6, 0, 6);

	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	udp_len = sizeof(struct udphdr) + DNS_HDR + qlen;
	udp->len = bpf_htons(udp_len);
	udp->check = 0;

	if (v6) {
		struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
		struct in6_addr a;
		int i;

		if ((void *)(ip6 + 1) > data_end)
			return XDP_DROP;
		a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		ip6->payload_len = bpf_htons(udp_len);
		ip6->hop_limit = 64;
#pragma unroll
		for (i = 0; i < 4; i++) {
			sum = csum_add_word32(sum, ip6->saddr.in6_u.u6_addr32[i]);
			sum = csum_add_word32(sum, ip6->daddr.in6_u.u6_addr32[i]);
		}
	} else {
		struct iphdr *ip = data + sizeof(struct ethhdr);
		__u32 a, isum = 0;
		__u16 *w;
		int i;

		if ((void *)(ip + 1) > data_end)
			return XDP_DROP;
		a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		ip->tot_len = bpf_htons(sizeof(struct iphdr) + udp_len);
		ip->ttl = 64;
		ip->check = 0;
		w = (__u16 *)ip;
#pragma unroll
		for (i = 0; i < 10; i++)
			isum += w[i];
		ip->check = fold(isum);
		sum = csum_add_word32(sum, ip->saddr);
		sum = csum_add_word32(sum, ip->daddr);
	}
	sum += bpf_htons(IPPROTO_UDP);
	sum += bpf_htons(udp_len);
	sum = sum_words(udp, data_end, sum);
	udp->check = fold(sum);
	if (udp->check == 0)
		udp->check = 0xffff;
	return XDP_TX;
}

int tenant_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct dns_key src = {}, pfx = {};
	struct dns_exempt_key ek = {};
	struct pkt_info pi;
	struct dns_cfg *cfg;
	struct udphdr *udp;
	__u64 *src_tat = 0, *pfx_tat = 0, now;
	__u32 zero = 0, plen, qlen = 0;
	__u16 ulen;
	__u8 *dns;
	int st, plain, src_ok, pfx_ok;

	st = parse_packet(data, data_end, &pi);
	if (st == PARSE_NOT_IP) {
		count(DNS_ST_OTHER);
		return XDP_PASS;
	}
	if (st != PARSE_OK) {
		count(DNS_ST_BAD_FRAME);
		return XDP_DROP;
	}
	if (pi.l4_proto != IPPROTO_UDP || pi.dport != bpf_htons(DNS_PORT) || pi.frag != FRAG_NONE) {
		count(DNS_ST_OTHER);
		return XDP_PASS;
	}
	udp = data + (pi.l4_off & 0x3ff);
	if ((void *)(udp + 1) > data_end)
		return XDP_DROP;
	dns = (void *)(udp + 1);
	ulen = bpf_ntohs(udp->len);
	if ((void *)(dns + DNS_HDR) > data_end || ulen < sizeof(struct udphdr) + DNS_HDR ||
	    (void *)udp + ulen > data_end || (dns[2] & 0x80)) {
		count(DNS_ST_MALFORMED);
		return XDP_DROP;
	}

	cfg = bpf_map_lookup_elem(&dns_cfg, &zero);
	if (!cfg || (!cfg->src_interval_ns && !cfg->pfx_interval_ns)) {
		count(DNS_ST_PASS);
		return XDP_PASS;
	}

	ek.family = pi.family;
	__builtin_memcpy(ek.addr, pi.saddr, sizeof(ek.addr));
	ek.prefixlen = 32 + (pi.family == 6 ? 128 : 32);
	if (bpf_map_lookup_elem(&dns_exempt, &ek)) {
		count(DNS_ST_EXEMPT);
		return XDP_PASS;
	}

	__builtin_memcpy(src.addr, pi.saddr, sizeof(src.addr));
	src.family = pi.family;
	pfx.family = pi.family;
	if (pi.family == 6) {
		plen = cfg->v6_plen ? cfg->v6_plen : 56;
		pfx.addr[0] = mask32(pi.saddr[0], plen);
		pfx.addr[1] = mask32(pi.saddr[1], plen > 32 ? plen - 32 : 0);
	} else {
		plen = cfg->v4_plen ? cfg->v4_plen : 24;
		pfx.addr[0] = mask32(pi.saddr[0], plen);
	}

	now = bpf_ktime_get_ns();
	if (cfg->src_interval_ns)
		src_tat = bpf_map_lookup_elem(&dns_src, &src);
	if (cfg->pfx_interval_ns)
		pfx_tat = bpf_map_lookup_elem(&dns_pfx, &pfx);
	src_ok = !cfg->src_interval_ns || conforms(src_tat, now, cfg->src_tau_ns);
	pfx_ok = !cfg->pfx_interval_ns || conforms(pfx_tat, now, cfg->pfx_tau_ns);
	if (src_ok && pfx_ok) {
		if (cfg->src_interval_ns)
			charge(&dns_src, &src, src_tat, now, cfg->src_interval_ns);
		if (cfg->pfx_interval_ns)
			charge(&dns_pfx, &pfx, pfx_tat, now, cfg->pfx_interval_ns);
		count(DNS_ST_PASS);
		return XDP_PASS;
	}

	/* Over budget. */
	plain = pi.vlan_depth == 0 &&
		pi.l4_off == sizeof(struct ethhdr) +
				     (pi.family == 6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	if (cfg->action == DNS_ACT_TRUNCATE && plain && dns[4] == 0 && dns[5] == 1 &&
	    (dns[2] & 0x78) == 0)
		qlen = question_len(dns + DNS_HDR, data_end);
	if (qlen) {
		int r = answer_truncated(ctx, pi.family == 6, qlen);

		count(r == XDP_TX ? DNS_ST_TRUNCATED : DNS_ST_DROPPED);
		return r;
	}
	count(DNS_ST_DROPPED);
	return XDP_DROP;
}


