// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rampart stream offload: an app's leading stateless
 * operators in XDP. Per frame:
 *
 *   parse → struct stream_tuple (stream/tuple.h, the parser the
 *   userspace one is tested against) → Filter (protocol, TCP flag clauses,
 *   port ranges, address prefixes) → FlowID (enum stream_key_mode) →
 *   timestamp → the frame becomes the 56-byte tuple record (written in
 *   the headroom, packet cut off: bpf_xdp_adjust_head/tail) → delivered to the replica that owns the key:
 *   owner = flow_id * replicas >> 32.
 *
 * One pipeline, configured only through maps (stream/abi.h):
 * a new query changes map entries, never the program. It is compiled into
 * three entry points that differ only in how the record leaves and where
 * the time comes from:
 *
 *  - xdp_stream: host XDP. The record goes through the XSKMAP to the
 *    AF_XDP socket of the owner on this RX queue (slot queue * replicas +
 *    owner; the sockets of one queue share its UMEM). Software time.
 *  - xdp_stream_rxmeta: the same, loaded device-bound so that it can ask
 *    the driver for the frame's RX timestamp (a metadata kfunc); frames
 *    without one (ENODATA on veth) get software time.
 *  - xdp_stream_nfp: the nfp profile: no XSKMAP, no clock
 *    helper, no per-CPU map. It selects the owner's RX queue by writing
 *    ctx->rx_queue_index (nfp "queue select") and passes the record up,
 *    where xdp_stream_rx hands each queue to its socket; ts_ns stays 0 and
 *    the host stamps the record. It cannot be loaded on this machine (the
 *    kernel allows that store only to offloaded programs); the planner
 *    checks its instructions, maps and helpers in the built object.
 *
 *  - xdp_stream_tap: the tap (stream/tap.h) for a server's own interface:
 *    tuples to a ring buffer or per-connection counters in per-CPU maps,
 *    and every frame passed on. The three above take the frames and are
 *    for dedicated capture ports.
 *
 * Frames that are not IP go to the stack; malformed IP frames and frames
 * the Filter rejects are dropped or passed as configured; every outcome is
 * counted (enum stream_off_counter).
 */
#include "stream/offload.h"
#include "stream/tap.h"

extern int bpf_xdp_metadata_rx_timestamp(const struct xdp_md *ctx, __u64 *timestamp) __ksym;

/* Host entry points: slot rx_queue * replicas + owner → AF_XDP socket. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, ST_OFF_XSKS);
	__type(key, __u32);
	__type(value, __u32);
} stream_off_xsks SEC(".maps");

/* Host entry points: per-CPU counters. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ST_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stream_off_stats SEC(".maps");

/* nfp entry point: the same counters, shared, atomic adds (no per-CPU maps there). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ST_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stream_off_stats_nfp SEC(".maps");

enum target {
	T_HOST = 0,
	T_HOST_RXMETA = 1,
	T_NFP = 2,
};

/* Sentinel of stream_offload(): the record is ready, deliver it. */
#define ST_DELIVER (-1)

static __always_inline void count(int target, __u32 idx)
{
	__u64 *c;

	if (target == T_NFP) {
		c = bpf_map_lookup_elem(&stream_off_stats_nfp, &idx);
		if (c)
			__sync_fetch_and_add(c, 1);
	} else {
		c = bpf_map_lookup_elem(&stream_off_stats, &idx);
		if (c)
			*c += 1;
	}
}

/*
 * Everything but the delivery. Returns an XDP action for frames that end
 * here, or ST_DELIVER with the record written at the start of the frame
 * and *owner set.
 */
static __always_inline int stream_offload(struct xdp_md *ctx, int target, __u32 *owner,
					  __u32 *replicas)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct stream_off_cfg *cfg;
	struct stream_tuple t;
	__u32 zero = 0;
	int st, delta;

	cfg = bpf_map_lookup_elem(&stream_off_cfg, &zero);
	if (!cfg)
		return XDP_PASS;
	st = stream_tuple_from_frame(data, data_end, 0, &t);
	if (st == PARSE_NOT_IP) {
		count(target, ST_CNT_NOT_IP);
		return XDP_PASS;
	}
	if (st != PARSE_OK) {
		count(target, ST_CNT_NOT_IP + st - PARSE_NOT_IP);
		return cfg->on_malformed == ST_OFF_PASS ? XDP_PASS : XDP_DROP;
	}
	if (cfg->filters && !stream_off_match(cfg, &t)) {
		count(target, ST_CNT_FILTERED);
		return cfg->on_filtered == ST_OFF_PASS ? XDP_PASS : XDP_DROP;
	}
	if (cfg->key_mode != ST_KEY_NONE)
		stream_flow_id(&t, cfg->key_mode);

	if (target == T_HOST_RXMETA && cfg->ts_source == ST_TS_RX_META) {
		__u64 hw = 0;

		/* veth answers 0 with a zero stamp for skb frames: not a stamp either. */
		if (bpf_xdp_metadata_rx_timestamp(ctx, &hw) == 0 && hw != 0) {
			t.ts_ns = hw;
			t.flags |= ST_F_TS_HW;
			count(target, ST_CNT_TS_HW);
		}
	}
	if (target != T_NFP && !(t.flags & ST_F_TS_HW) && cfg->ts_source != ST_TS_NONE)
		t.ts_ns = bpf_ktime_get_ns() + cfg->clock_offset_ns;

	/*
	 * The frame becomes the record, exactly sizeof(t) bytes. The record is
	 * written into the headroom in front of the packet and the packet is cut
	 * off behind it, so the packet bytes themselves are never written: a
	 * page that goes back to its owner unchanged (the lab generator's live
	 * frames are recycled without being re-initialised). A driver without
	 * that much headroom gets the record written over the packet instead.
	 */
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(t)) == 0) {
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + sizeof(t) > data_end) {
			count(target, ST_CNT_REWRITE_FAILED);
			return XDP_DROP;
		}
		__builtin_memcpy(data, &t, sizeof(t));
		if (bpf_xdp_adjust_tail(ctx, (int)sizeof(t) - (int)(data_end - data))) {
			count(target, ST_CNT_REWRITE_FAILED);
			return XDP_DROP;
		}
	} else {
		delta = (int)sizeof(t) - (int)(data_end - data);
		if (delta != 0 && bpf_xdp_adjust_tail(ctx, delta)) {
			count(target, ST_CNT_REWRITE_FAILED);
			return XDP_DROP;
		}
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + sizeof(t) > data_end) {
			count(target, ST_CNT_REWRITE_FAILED);
			return XDP_DROP;
		}
		__builtin_memcpy(data, &t, sizeof(t));
	}
	*replicas = cfg->replicas;
	/* Without a FlowID (ST_KEY_NONE) flow_id is 0: replica 0. */
	*owner = (__u32)(((__u64)t.flow_id * cfg->replicas) >> 32);
	return ST_DELIVER;
}

static __always_inline int deliver_xsk(struct xdp_md *ctx, int target, __u32 owner, __u32 replicas)
{
	__u32 slot = ctx->rx_queue_index * replicas + owner;
	long act;

	if (slot >= ST_OFF_XSKS) {
		count(target, ST_CNT_NO_SOCKET);
		return XDP_DROP;
	}
	act = bpf_redirect_map(&stream_off_xsks, slot, 0);
	if (act != XDP_REDIRECT) {
		count(target, ST_CNT_NO_SOCKET);
		return XDP_DROP;
	}
	count(target, ST_CNT_RECORDS);
	return XDP_REDIRECT;
}

SEC("xdp")
int xdp_stream(struct xdp_md *ctx)
{
	__u32 owner = 0, replicas = 1;
	int act = stream_offload(ctx, T_HOST, &owner, &replicas);

	return act == ST_DELIVER ? deliver_xsk(ctx, T_HOST, owner, replicas) : act;
}

SEC("xdp")
int xdp_stream_rxmeta(struct xdp_md *ctx)
{
	__u32 owner = 0, replicas = 1;
	int act = stream_offload(ctx, T_HOST_RXMETA, &owner, &replicas);

	return act == ST_DELIVER ? deliver_xsk(ctx, T_HOST_RXMETA, owner, replicas) : act;
}

SEC("xdp")
int xdp_stream_nfp(struct xdp_md *ctx)
{
	__u32 owner = 0, replicas = 1;
	int act = stream_offload(ctx, T_NFP, &owner, &replicas);

	if (act != ST_DELIVER)
		return act;
	/* nfp queue select: the owner's RX queue, whose socket xdp_stream_rx feeds. */
	ctx->rx_queue_index = owner;
	count(T_NFP, ST_CNT_RECORDS);
	return XDP_PASS;
}

/*
 * The tap alone on an interface (stream/tap.h): analyse, then pass the
 * frame on. Never redirects, never drops.
 */
SEC("xdp")
int xdp_stream_tap(struct xdp_md *ctx)
{
	stream_tap(ctx);
	return stream_tap_next_stage(ctx);
}

/* TCX: run the next program on the hook (or the default action). */
#define TCX_NEXT -1
/* Header bytes the egress tap pulls into the linear part when they are not all there. */
#define ST_TAP_EGRESS_PULL 128

/*
 * Are the headers the tap reads in [data, data_end): Ethernet, IPv4 or
 * IPv6, and a TCP (20 bytes) or UDP/ICMP (8) header? Anything else (VLAN
 * tags, IPv6 extension headers, other protocols) counts as not: it is
 * pulled, as every send was before. Not the tap's parser run twice (before
 * and after a pull): two inlined parses take the verifier past its
 * million instructions.
 */
static __always_inline int stream_tap_headers_linear(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	void *l4;
	__u8 proto;

	if ((void *)(eth + 1) > data_end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end)
			return 0;
		l4 = (void *)ip + ip->ihl * 4;
		proto = ip->protocol;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		l4 = (void *)(ip6 + 1);
		proto = ip6->nexthdr;
	} else {
		return 0;
	}
	if (proto == IPPROTO_TCP)
		return l4 + sizeof(struct tcphdr) <= data_end;
	if (proto == IPPROTO_UDP || proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6)
		return l4 + 8 <= data_end;
	return 0;
}

/*
 * The tap at egress (TCX): the host's own sends, so that flows are seen in
 * both directions. Analyses, never changes a verdict. A GSO send is
 * counted as the segments it leaves as.
 */
SEC("tcx/egress")
int tc_stream_tap_egress(struct __sk_buff *skb)
{
	__u32 linear = skb->data_end - skb->data;
	__u32 segs = skb->gso_segs;

	/*
	 * The stack's sends have their headers in the linear part (the
	 * payload may be in pages). Only when they do not are they pulled
	 * there: a pull makes the head writable, and the head of a TCP send is
	 * shared with the copy kept for retransmission, so pulling every send
	 * copied every head.
	 */
	if (skb->len > linear &&
	    !stream_tap_headers_linear((void *)(long)skb->data, (void *)(long)skb->data_end))
		bpf_skb_pull_data(skb, skb->len < ST_TAP_EGRESS_PULL ? skb->len : ST_TAP_EGRESS_PULL);
	tap_count(ST_TAP_EGRESS);
	stream_tap_frame((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len,
			 segs > 1 ? segs : 1, skb->gso_size);
	return TCX_NEXT;
}

RAMPART_LICENSE;
