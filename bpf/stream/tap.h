/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The stream tap: rampart stream on a server's own interface. Per frame:
 *
 *   parse → struct stream_tuple (stream/tuple.h) → the offloaded Filter
 *   (stream/offload.h, configured by stream_off_cfg) → either
 *     - ST_TAP_TUPLES: the tuple into the ring buffer stream_tap_ring, or
 *     - ST_TAP_AGGREGATE: the tuple added to its connection's counters in
 *       the per-CPU hash of its epoch (stream_tap_agg_0/1 by epoch parity);
 *       userspace harvests an epoch after it ended, so a map is never read
 *       while this program writes it. A full map sends the tuple to the
 *       ring buffer instead (nothing is lost to the analysis).
 *   → the frame goes on unchanged: the chain's next stage
 *   (common/chain.h), or XDP_PASS.
 *
 * A monitor never takes a server's frames: malformed, filtered and
 * unanalysed frames all go on; only the analysis loses a tuple when the
 * ring buffer is full (counted).
 *
 * stream_tap() is the whole per-packet work, so the tap runs alone
 * (xdp_stream_tap in xdp_stream.bpf.c, attached with a bpf_link) or as one
 * stage of a chain that includes this header. Include stream/offload.h
 * first (its maps hold the Filter and the clock offset).
 */
#ifndef RAMPART_STREAM_TAP_H
#define RAMPART_STREAM_TAP_H

#include "common/chain.h"
#include "stream/offload.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stream_tap_cfg);
} stream_tap_cfg SEC(".maps");

/* Tuples for userspace (size set by the loader; 8 MiB by default). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} stream_tap_ring SEC(".maps");

/*
 * Per-connection counters of the even / odd epochs. Preallocated: a new
 * connection in a non-preallocated per-CPU hash allocates per-CPU memory
 * in the packet path, which measured 15.7 us per new connection under
 * BPF_PROG_RUN against 0.5 us preallocated. The loader sizes them from a
 * memory budget and the CPU count, and to one entry when the tap sends
 * tuples.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct stream_agg_key);
	__type(value, struct stream_agg_val);
} stream_tap_agg_0 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct stream_agg_key);
	__type(value, struct stream_agg_val);
} stream_tap_agg_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ST_TAP_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stream_tap_stats SEC(".maps");

static __always_inline void tap_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&stream_tap_stats, &idx);

	if (c)
		*c += 1;
}

/* Is (a, pa) greater than (b, pb), addresses compared in network byte order? */
static __always_inline int stream_ep_gt(const __u32 *a, __u16 pa, const __u32 *b, __u16 pb)
{
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		__u32 x = bpf_ntohl(a[i]), y = bpf_ntohl(b[i]);

		if (x != y)
			return x > y;
	}
	return pa > pb;
}

/*
 * The connection key of t (epoch left 0) and the direction of t in it:
 * 0 when t goes from endpoint 0 to endpoint 1. The userspace mirror is
 * FlowPart::from_tuple in crates/rampart-stream/src/part.rs.
 */
static __always_inline int stream_agg_key_of(const struct stream_tuple *t, struct stream_agg_key *k)
{
	int icmp = t->proto == IPPROTO_ICMP || t->proto == IPPROTO_ICMPV6;
	__u16 sp = icmp ? 0 : t->sport, dp = icmp ? 0 : t->dport;
	int rev = stream_ep_gt(t->saddr, sp, t->daddr, dp);

	__builtin_memset(k, 0, sizeof(*k));
	if (rev) {
		__builtin_memcpy(k->addr[0], t->daddr, 16);
		__builtin_memcpy(k->addr[1], t->saddr, 16);
		k->port[0] = dp;
		k->port[1] = sp;
	} else {
		__builtin_memcpy(k->addr[0], t->saddr, 16);
		__builtin_memcpy(k->addr[1], t->daddr, 16);
		k->port[0] = sp;
		k->port[1] = dp;
	}
	k->proto = t->proto;
	k->flags = t->flags & ST_F_IPV6;
	k->vlan_id = t->vlan_id;
	return rev;
}

/* Add one packet to one direction's counters (this CPU's copy: no atomics). */
static __always_inline void stream_agg_add(struct stream_agg_dir *d, const struct stream_tuple *t)
{
	__u8 f = t->tcp_flags;

	if (d->packets == 0) {
		d->first_ns = t->ts_ns;
		if (t->proto == IPPROTO_ICMP || t->proto == IPPROTO_ICMPV6) {
			d->icmp_type = t->dport >> 8;
			d->icmp_code = t->dport & 0xff;
		}
	}
	d->packets += 1;
	d->bytes += t->ip_len;
	d->last_ns = t->ts_ns;
	d->tcp_flags |= f;
	if (t->proto == IPPROTO_TCP) {
		if ((f & 0x12) == 0x02)
			d->syn += 1;
		else if ((f & 0x12) == 0x12)
			d->synack += 1;
		else if ((f & 0x16) == 0x10)
			d->ack += 1;
		if (f & 0x04)
			d->rst += 1;
		if (f & 0x01)
			d->fin += 1;
	}
}

/* Returns 0 when the packet was aggregated, -1 when the map was full. */
static __always_inline int stream_tap_aggregate(const struct stream_tap_cfg *tc, const struct stream_tuple *t)
{
	struct stream_agg_key k;
	struct stream_agg_val *v;
	void *map;
	__u64 epoch;
	int dir;

	dir = stream_agg_key_of(t, &k);
	epoch = tc->epoch_ns ? t->ts_ns / tc->epoch_ns : 0;
	k.epoch = (__u32)epoch;
	map = (epoch & 1) ? (void *)&stream_tap_agg_1 : (void *)&stream_tap_agg_0;
	v = bpf_map_lookup_elem(map, &k);
	if (!v) {
		struct stream_agg_val zero;

		__builtin_memset(&zero, 0, sizeof(zero));
		/* EEXIST: created meanwhile on another CPU; this CPU's copy is still zero. */
		if (bpf_map_update_elem(map, &k, &zero, BPF_NOEXIST) && !bpf_map_lookup_elem(map, &k))
			return -1;
		v = bpf_map_lookup_elem(map, &k);
		if (!v)
			return -1;
	}
	if (dir)
		stream_agg_add(&v->dir[1], t);
	else
		stream_agg_add(&v->dir[0], t);
	return 0;
}

/*
 * Wake the reader once, when the ring's unread data crosses
 * 1/ST_TAP_WAKEUP_DIV of it. A wakeup is an irq_work (a self-IPI: ~5 us in
 * this VM, measured); the default policy sends one per record whenever
 * the reader has caught up, i.e. per packet at moderate rates. The reader
 * polls on a short timeout anyway, so no record waits long for it.
 */
static __always_inline __u64 stream_tap_wakeup(void)
{
	__u64 avail = bpf_ringbuf_query(&stream_tap_ring, BPF_RB_AVAIL_DATA);
	__u64 thr = bpf_ringbuf_query(&stream_tap_ring, BPF_RB_RING_SIZE) / ST_TAP_WAKEUP_DIV;

	/* A window of a few records: CPUs writing at once may step over one. */
	if (avail >= thr && avail < thr + ST_TAP_WAKEUP_WINDOW * sizeof(struct stream_tuple))
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void stream_tap_tuple_out(const struct stream_tuple *t)
{
	if (bpf_ringbuf_output(&stream_tap_ring, (void *)t, sizeof(*t), stream_tap_wakeup()))
		tap_count(ST_TAP_RING_FULL);
	else
		tap_count(ST_TAP_TUPLES_OUT);
}

/* The tap's work on one frame; the frame itself is never changed. */
static __always_inline void stream_tap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct stream_off_cfg *cfg;
	struct stream_tap_cfg *tc;
	struct stream_tuple t;
	__u32 zero = 0;
	int st;

	cfg = bpf_map_lookup_elem(&stream_off_cfg, &zero);
	tc = bpf_map_lookup_elem(&stream_tap_cfg, &zero);
	if (!cfg || !tc)
		return;
	tap_count(ST_TAP_FRAMES);
	st = stream_tuple_from_frame(data, data_end, 0, &t);
	if (st != PARSE_OK) {
		tap_count(ST_TAP_NOT_IP + st - PARSE_NOT_IP);
		return;
	}
	if (cfg->filters && !stream_off_match(cfg, &t)) {
		tap_count(ST_TAP_FILTERED);
		return;
	}
	if (cfg->key_mode != ST_KEY_NONE)
		stream_flow_id(&t, cfg->key_mode);
	t.ts_ns = bpf_ktime_get_ns() + cfg->clock_offset_ns;
	if (tc->mode == ST_TAP_AGGREGATE) {
		if (stream_tap_aggregate(tc, &t) == 0) {
			tap_count(ST_TAP_AGGREGATED);
			return;
		}
		tap_count(ST_TAP_AGG_FULL);
	}
	stream_tap_tuple_out(&t);
}

/* After the tap: the chain's next installed stage, else the stack. */
static __always_inline int stream_tap_next_stage(struct xdp_md *ctx)
{
	return chain_next(ctx, CHAIN_SLOT_STREAM);
}

#endif /* RAMPART_STREAM_TAP_H */
