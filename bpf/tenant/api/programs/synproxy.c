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
 * SYNs are answered only when well formed, and the SYN-ACK is built, by
 * the SYN-ACK crafting every rampart SYN-cookie responder shares
 * (common/synack.h, included by rampart_tenant.h): no payload, checksums
 * valid, TCP options well formed (the MSS is read by the kernel's cookie
 * helper, whatever its position).
 *
 * Configuration (the tenant's maps): syn_cfg[0] (MSS announced for IPv4
 * and IPv6, window scale, TTL; zero: 1460/1440/7/64), syn_ports (TCP ports
 * to protect, host order). Counters: syn_stats (per-CPU, enum syn_stat).
 */
#include "rampart_tenant.h"

/* The kernel's cookie_init_timestamp() encoding of the SYN's options in the low 6 bits of TSval. */
#define TS_OPT_WSCALE_MASK 0xf
#define TS_OPT_SACK (1 << 4)
#define TS_OPT_ECN (1 << 5)
#define TSMASK 0x3f

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

static __always_inline void flow_key(struct syn_flow *k, struct pkt_info *pi)
{
	__builtin_memcpy(k->saddr, pi->saddr, sizeof(k->saddr));
	__builtin_memcpy(k->daddr, pi->daddr, sizeof(k->daddr));
	k->sport = pi->sport;
	k->dport = pi->dport;
	k->family = pi->family;
}

/* Answer the SYN (20-byte IPv4 or 40-byte IPv6 header after Ethernet). */
static __always_inline int answer_syn(struct xdp_md *ctx, int v6)
{
	const __u32 l3 = sizeof(struct ethhdr);
	const __u32 l4 = l3 + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	struct synack_params p = {};
	struct syn_opts o = {};
	struct syn_cfg *cfg;
	struct tcphdr *th;
	void *data, *data_end;
	__u32 zero = 0, tcp_len;
	__s64 gen;

	if (synack_check(ctx, v6, &o))
		return count(SYN_ST_BAD_SYN, XDP_DROP);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + l4 + SYNACK_TCP_HDR_MAX > data_end)
		return count(SYN_ST_BAD_SYN, XDP_DROP);
	th = data + l4;
	tcp_len = th->doff * 4;
	if (v6)
		gen = bpf_tcp_raw_gen_syncookie_ipv6(data + l3, th, tcp_len & 0x3c);
	else
		gen = bpf_tcp_raw_gen_syncookie_ipv4(data + l3, th, tcp_len & 0x3c);
	if (gen < 0)
		return count(SYN_ST_BAD_SYN, XDP_DROP);
	p.isn = (__u32)gen;

	cfg = bpf_map_lookup_elem(&syn_cfg, &zero);
	p.mss = v6 ? 1440 : 1460;
	p.wscale = 7;
	p.ttl = 64;
	if (cfg && cfg->ttl) {
		p.mss = v6 ? cfg->mss6 : cfg->mss4;
		p.wscale = cfg->wscale;
		p.ttl = cfg->ttl;
	}
	/* The kernel's cookie keeps wscale, SACK and ECN in TSval only, so
	 * they are agreed to only with timestamps (the default flags). */
	if (o.ts) {
		p.tsval = (__u32)(bpf_ktime_get_ns() / 1000000) & ~TSMASK;
		p.tsval |= o.wscale & TS_OPT_WSCALE_MASK;
		if (o.sack)
			p.tsval |= TS_OPT_SACK;
		if (o.ecn)
			p.tsval |= TS_OPT_ECN;
	}
	p.ece = o.ts && o.ecn;
	if (synack_build(ctx, v6, &p, &o))
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
