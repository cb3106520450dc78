/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The stream tap: rampart stream on a server's own interface. Per frame:
 *
 *   parse → struct stream_tuple (stream/tuple.h) → the offloaded Filter
 *   (stream/offload.h, configured by stream_off_cfg) → either
 *     - ST_TAP_TUPLES: the tuple into this CPU's ring buffer (stream_tap_rings), or
 *     - ST_TAP_AGGREGATE: the tuple added to its connection's counts in
 *       its slot of this CPU's segment of the table stream_tap_agg (struct
 *       stream_agg_slot: stream/abi.h says who writes what); userspace
 *       reads an epoch's counts in place after it ended. A bucket full of
 *       other connections of this epoch sends the tuple to the ring buffer
 *       instead (nothing is lost to the analysis).
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

/*
 * Tuples for userspace: a ring buffer per CPU, slot = CPU id. One shared
 * ring costs 5.4x per record when two CPUs write at once (its spin lock
 * and cache lines bounce between them; a ring each costs what one CPU
 * alone does, measured by tap_ring_contention). The loader creates the
 * inner rings (one per possible CPU, sized by it) and puts them in the
 * slots; the template below only fixes the inner map's type.
 */
struct stream_tap_ring_inner {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct stream_tap_ring_inner);
} stream_tap_rings SEC(".maps");

/*
 * The aggregation table: a segment of slot_mask + 1 slots per CPU,
 * ST_AGG_WAYS slots per bucket, a connection's bucket chosen by a hash of
 * its key; IPv4 connections here (64-byte slots), IPv6 ones in
 * stream_tap_agg6 (128 bytes). A slot outlives the epoch: the per-CPU hash
 * maps per epoch it replaces cost a bucket, an element and a per-CPU value
 * per update (several cache misses at 65,536 live connections: 365 ns per
 * packet) and re-created every entry each epoch (539 ns). Mmapable, so
 * userspace reads it in place. The loader sizes both (CPUs x slots), and
 * to one bucket per CPU when the tap sends tuples.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, ST_AGG_WAYS);
	__type(key, __u32);
	__type(value, struct stream_agg_slot);
} stream_tap_agg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, ST_AGG_WAYS);
	__type(key, __u32);
	__type(value, struct stream_agg_slot6);
} stream_tap_agg6 SEC(".maps");

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

/* t's ports as its connection key has them (ICMP: none). */
static __always_inline void stream_agg_ports(const struct stream_tuple *t, __u16 *sp, __u16 *dp)
{
	int icmp = t->proto == IPPROTO_ICMP || t->proto == IPPROTO_ICMPV6;

	*sp = icmp ? 0 : t->sport;
	*dp = icmp ? 0 : t->dport;
}

/*
 * The IPv4 connection key of t and the direction of t in it: 0 when t
 * goes from endpoint 0 to endpoint 1. The userspace mirror is
 * FlowPart::from_tuple in crates/rampart-stream/src/part.rs.
 */
static __always_inline int stream_agg_key4_of(const struct stream_tuple *t,
					      struct stream_agg_key *k)
{
	__u16 sp, dp;
	__u32 s = bpf_ntohl(t->saddr[0]), d = bpf_ntohl(t->daddr[0]);
	int rev;

	stream_agg_ports(t, &sp, &dp);
	rev = s != d ? s > d : sp > dp;
	k->addr[0] = rev ? t->daddr[0] : t->saddr[0];
	k->addr[1] = rev ? t->saddr[0] : t->daddr[0];
	k->port[0] = rev ? dp : sp;
	k->port[1] = rev ? sp : dp;
	k->proto = t->proto;
	k->_pad = 0;
	k->vlan_id = t->vlan_id;
	return rev;
}

/* The same for an IPv6 connection. */
static __always_inline int stream_agg_key6_of(const struct stream_tuple *t,
					      struct stream_agg_key6 *k)
{
	__u16 sp, dp;
	int rev;

	stream_agg_ports(t, &sp, &dp);
	rev = stream_ep_gt(t->saddr, sp, t->daddr, dp);
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
	k->_pad = 0;
	k->vlan_id = t->vlan_id;
	return rev;
}

/*
 * Wake the reader once, when the ring's unread data crosses
 * 1/ST_TAP_WAKEUP_DIV of it. A wakeup is an irq_work (a self-IPI: ~5 us in
 * this VM, measured); the default policy sends one per record whenever
 * the reader has caught up, i.e. per packet at moderate rates. The reader
 * polls on a short timeout anyway, so no record waits long for it.
 */
static __always_inline __u64 stream_tap_wakeup(void *ring)
{
	__u64 avail = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);
	__u64 thr = bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) / ST_TAP_WAKEUP_DIV;

	/* A window of a few records: CPUs writing at once may step over one. */
	if (avail >= thr && avail < thr + ST_TAP_WAKEUP_WINDOW * sizeof(struct stream_tuple))
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* This CPU's ring buffer (NULL: the loader left its slot empty). */
static __always_inline void *stream_tap_ring(void)
{
	__u32 cpu = bpf_get_smp_processor_id();

	return bpf_map_lookup_elem(&stream_tap_rings, &cpu);
}

/* A record of `size` bytes into `ring`; 0 when written. A missing ring
 * counts as a full one (the record is lost to the analysis, not the frame). */
static __always_inline int stream_tap_out(void *ring, const void *rec, __u32 size)
{
	if (!ring || bpf_ringbuf_output(ring, (void *)rec, size, stream_tap_wakeup(ring))) {
		tap_count(ST_TAP_RING_FULL);
		return -1;
	}
	return 0;
}

static __always_inline void stream_tap_tuple_out(void *ring, const struct stream_tuple *t)
{
	if (stream_tap_out(ring, t, sizeof(*t)) == 0)
		tap_count(ST_TAP_TUPLES_OUT);
}

/* The bucket index of a key of `words` 8-byte words: a multiplicative hash. */
static __always_inline __u32 stream_agg_hash(const __u64 *w, int words)
{
	__u64 h = 0;
	int i;

#pragma unroll
	for (i = 0; i < 5; i++) {
		if (i >= words)
			break;
		h = (h ^ w[i]) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	return (__u32)(h >> 32);
}

/* Slot h's whole `size` bytes to the ring buffer, its state word given as `word`. */
static __always_inline void stream_agg_flush(const struct stream_agg_head *h, __u32 size,
					     __u64 word)
{
	void *ring = stream_tap_ring();
	void *r;

	if (!ring) {
		tap_count(ST_TAP_RING_FULL);
		return;
	}
	r = bpf_ringbuf_reserve(ring, size, 0);
	if (!r) {
		tap_count(ST_TAP_RING_FULL);
		return;
	}
	__builtin_memcpy(r, h, size);
	*(__u64 *)r = word;
	bpf_ringbuf_submit(r, stream_tap_wakeup(ring));
	tap_count(ST_TAP_AGG_FLUSHED);
}

/*
 * Before slot h (of `size` bytes) is given other counts (a later epoch,
 * another connection): counts of an earlier epoch that userspace has not
 * taken go to the ring buffer — unless userspace takes them at the same
 * moment: whichever compare-and-swap of the state word wins owns them.
 */
static __always_inline void stream_agg_retire(struct stream_agg_head *h, __u32 size)
{
	__u64 w = *(volatile __u64 *)h;
	__u32 st = (__u32)w;

	if ((st & ST_AGG_USED) && !(st & ST_AGG_HARVESTED) &&
	    __sync_val_compare_and_swap((__u64 *)h, w, w | ST_AGG_FLUSHING) == w)
		stream_agg_flush(h, size, w);
}

/* Empty counts of the epoch `now` (ST_AGG_USED | epoch) in slot h, its key written. */
static __always_inline void stream_agg_start(struct stream_agg_head *h, __u32 now)
{
	h->packets[0] = 0;
	h->packets[1] = 0;
	__builtin_memset(&h->cnt, 0, sizeof(h->cnt));
	/* Key and counts before the state that publishes them. */
	asm volatile("" ::: "memory");
	*(volatile __u32 *)&h->state = now;
}

/*
 * Would n more packets with TCP flags f overflow one of direction d's
 * counts? Only the counts this packet adds are checked: each is at most
 * its limit before it is added to.
 */
static __always_inline int stream_agg_would_overflow(const struct stream_agg_head *h, int d,
						     __u8 proto, __u8 f, __u32 n)
{
	const struct stream_agg_cnt *c = &h->cnt;
	__u32 cls;

	if (h->packets[d] + n > ST_AGG_MAX_PACKETS)
		return 1;
	if (proto != IPPROTO_TCP)
		return 0;
	if (f & 0x02)
		cls = (f & 0x10) ? c->synack[d] : c->syn[d];
	else if ((f & 0x14) != 0x10)
		cls = c->other[d];
	else
		cls = 0;
	return cls + n > ST_AGG_MAX_TCP || ((f & 0x04) && c->rst[d] >= ST_AGG_MAX_TCP) ||
	       ((f & 0x01) && c->fin[d] >= ST_AGG_MAX_TCP);
}

/*
 * Add `n` packets of `bytes` IP bytes in all, t's header, to direction d's
 * counts of the epoch that started at `base` ns (this CPU's segment: no
 * atomics). n > 1 only for a GSO send, whose segments all carry t's flags
 * but FIN and PSH, which only the last has.
 */
static __always_inline void stream_agg_add(struct stream_agg_head *h, int d,
					   const struct stream_tuple *t, __u32 n, __u64 bytes,
					   __u64 base)
{
	struct stream_agg_cnt *c = &h->cnt;
	__u8 f = t->tcp_flags;
	__u32 off = (__u32)(t->ts_ns - base);

	if (h->packets[d] == 0) {
		c->first_off[d] = off;
		if (t->proto == IPPROTO_ICMP || t->proto == IPPROTO_ICMPV6) {
			c->icmp_type[d] = t->dport >> 8;
			c->icmp_code[d] = t->dport & 0xff;
		}
	}
	h->packets[d] += n;
	c->bytes[d] += bytes;
	c->last_off[d] = off;
	c->tcp_flags[d] |= f;
	if (t->proto == IPPROTO_TCP) {
		if ((f & 0x12) == 0x02)
			c->syn[d] += n;
		else if ((f & 0x12) == 0x12)
			c->synack[d] += n;
		else if ((f & 0x16) != 0x10)
			c->other[d] += n;
		if (f & 0x04)
			c->rst[d] += 1;
		if (f & 0x01)
			c->fin[d] += 1;
	}
}

/*
 * Count t (n packets, `bytes` IP bytes, direction d) in slot h of `size`
 * bytes, which holds t's connection. Its counts start again first when
 * they are of an earlier epoch (or userspace took them), and when one
 * would overflow (this epoch's counts so far go to userspace, as any
 * counts it has not taken).
 */
static __always_inline void stream_agg_count(struct stream_agg_head *h, __u32 size,
					     const struct stream_tuple *t, int d, __u32 n, __u64 bytes,
					     __u64 base, __u32 now)
{
	d &= 1;
	if (h->state != now || stream_agg_would_overflow(h, d, t->proto, t->tcp_flags, n)) {
		stream_agg_retire(h, size);
		stream_agg_start(h, now);
	}
	stream_agg_add(h, d, t, n, bytes, base);
}

/*
 * The slot of IPv4 connection k in this CPU's segment, its key written:
 * the bucket's slot that holds k, else one that holds no connection of
 * this epoch (its earlier counts retired); NULL when every slot of the
 * bucket counts another connection of this epoch.
 */
static __always_inline struct stream_agg_head *
stream_agg_slot4(const struct stream_tap_cfg *tc, const struct stream_agg_key *k, __u32 now)
{
	const __u64 *kw = (const __u64 *)k;
	struct stream_agg_slot *s, *take = 0;
	__u32 idx, i;

	idx = bpf_get_smp_processor_id() * (tc->slot_mask + 1) +
	      (stream_agg_hash(kw, 2) & tc->slot_mask & ~(ST_AGG_WAYS - 1));
#pragma unroll
	for (i = 0; i < ST_AGG_WAYS; i++) {
		__u32 j = idx + i;
		const __u64 *sw;

		s = bpf_map_lookup_elem(&stream_tap_agg, &j);
		if (!s)
			return 0;
		sw = (const __u64 *)&s->key;
		if (sw[0] == kw[0] && sw[1] == kw[1] && (s->h.state & ST_AGG_USED))
			return &s->h;
		if (!take && s->h.state != now)
			take = s;
	}
	if (!take)
		return 0;
	stream_agg_retire(&take->h, sizeof(*take));
	__builtin_memcpy(&take->key, k, sizeof(*k));
	stream_agg_start(&take->h, now);
	return &take->h;
}

/* The same for IPv6 connection k (stream_tap_agg6). */
static __always_inline struct stream_agg_head *
stream_agg_slot6(const struct stream_tap_cfg *tc, const struct stream_agg_key6 *k, __u32 now)
{
	const __u64 *kw = (const __u64 *)k;
	struct stream_agg_slot6 *s, *take = 0;
	__u32 idx, i;

	idx = bpf_get_smp_processor_id() * (tc->slot_mask6 + 1) +
	      (stream_agg_hash(kw, 5) & tc->slot_mask6 & ~(ST_AGG_WAYS - 1));
#pragma unroll
	for (i = 0; i < ST_AGG_WAYS; i++) {
		__u32 j = idx + i;
		const __u64 *sw;

		s = bpf_map_lookup_elem(&stream_tap_agg6, &j);
		if (!s)
			return 0;
		sw = (const __u64 *)&s->key;
		if (sw[0] == kw[0] && sw[1] == kw[1] && sw[2] == kw[2] && sw[3] == kw[3] &&
		    sw[4] == kw[4] && (s->h.state & ST_AGG_USED))
			return &s->h;
		if (!take && s->h.state != now)
			take = s;
	}
	if (!take)
		return 0;
	stream_agg_retire(&take->h, sizeof(*take));
	__builtin_memcpy(&take->key, k, sizeof(*k));
	stream_agg_start(&take->h, now);
	return &take->h;
}

/*
 * Add t to its connection's slot in this CPU's segment. Returns 0 when
 * the packet was aggregated, -1 when every slot of its bucket holds
 * another connection of this epoch (the caller sends the tuple instead).
 */
static __always_inline int stream_tap_aggregate(const struct stream_tap_cfg *tc,
						const struct stream_tuple *t, __u32 n, __u64 bytes)
{
	struct stream_agg_head *h;
	__u64 epoch, base;
	__u32 now;
	int dir;

	epoch = tc->epoch_ns ? t->ts_ns / tc->epoch_ns : 0;
	base = epoch * tc->epoch_ns;
	now = ST_AGG_USED | ((__u32)epoch & ST_AGG_EPOCH_MASK);
	if (t->flags & ST_F_IPV6) {
		struct stream_agg_key6 k;

		dir = stream_agg_key6_of(t, &k);
		h = stream_agg_slot6(tc, &k, now);
		if (!h)
			return -1;
		stream_agg_count(h, sizeof(struct stream_agg_slot6), t, dir, n, bytes, base, now);
	} else {
		struct stream_agg_key k;

		dir = stream_agg_key4_of(t, &k);
		h = stream_agg_slot4(tc, &k, now);
		if (!h)
			return -1;
		stream_agg_count(h, sizeof(struct stream_agg_slot), t, dir, n, bytes, base, now);
	}
	return 0;
}

/*
 * Bytes of IP and L4 header in each segment of a GSO send of frame pi (the
 * same in every segment), or 0 when it is not one the tap can split: TCP
 * (its data offset) or UDP (UDP_SEGMENT), not a fragment.
 */
static __always_inline __u32 stream_gso_hdr_len(void *data, void *data_end, const struct pkt_info *pi)
{
	__u8 *l4 = data + (pi->l4_off & 0x3ff);
	__u32 ip = (__u32)pi->l4_off - pi->l3_off;

	if (pi->frag != FRAG_NONE)
		return 0;
	if (pi->l4_proto == IPPROTO_UDP)
		return ip + 8;
	if (pi->l4_proto != IPPROTO_TCP || (void *)(l4 + 13) > data_end)
		return 0;
	return ip + (l4[12] >> 4) * 4;
}

/*
 * The tap's work on one frame, parsed (status st into *t and *pi), the
 * headers of which are in [data, data_end); the frame itself is never
 * changed. `segs` and `gso_size` describe an egress GSO send (the stack
 * hands the device one frame that leaves as `segs` packets of `gso_size`
 * payload bytes, the last shorter); at ingress and for a plain frame segs
 * is 1. Each segment is analysed as the packet it becomes on the wire: one
 * tuple each, or n packets and their bytes in one aggregate update.
 */
static __always_inline void stream_tap_parsed(int st, struct stream_tuple *t, struct pkt_info *pi,
					      void *data, void *data_end, __u32 segs, __u32 gso_size)
{
	struct stream_off_cfg *cfg;
	struct stream_tap_cfg *tc;
	__u32 zero = 0, hdr = 0, rem = 0, i;
	void *ring;
	__u64 bytes;

	cfg = bpf_map_lookup_elem(&stream_off_cfg, &zero);
	tc = bpf_map_lookup_elem(&stream_tap_cfg, &zero);
	if (!cfg || !tc)
		return;
	tap_count(ST_TAP_FRAMES);
	if (st != PARSE_OK) {
		tap_count(ST_TAP_NOT_IP + st - PARSE_NOT_IP);
		return;
	}
	if (cfg->filters && !stream_off_match(cfg, t)) {
		tap_count(ST_TAP_FILTERED);
		return;
	}
	if (segs > 1) {
		hdr = stream_gso_hdr_len(data, data_end, pi);
		/* IPv4 above 64 KiB (BIG TCP) announces a total length of 0. */
		if (!hdr || !gso_size || t->ip_len <= hdr || segs > ST_TAP_GSO_MAX) {
			tap_count(ST_TAP_GSO_WHOLE);
			segs = 1;
		} else {
			rem = t->ip_len - hdr;
		}
	}
	t->ts_ns = bpf_ktime_get_ns() + cfg->clock_offset_ns;
	if (segs > 1) {
		/* One counter per extra segment: what leaves the host is packets. */
		__u32 k = ST_TAP_GSO_EXTRA;
		__u64 *c = bpf_map_lookup_elem(&stream_tap_stats, &k);

		if (c)
			*c += segs - 1;
	}
	bytes = (__u64)t->ip_len + (__u64)(segs - 1) * hdr;
	if (tc->mode == ST_TAP_AGGREGATE) {
		if (stream_tap_aggregate(tc, t, segs, bytes) == 0) {
			tap_count(ST_TAP_AGGREGATED);
			return;
		}
		tap_count(ST_TAP_AGG_FULL);
	}
	/* Only a tuple carries the FlowID (an aggregate's key is its connection). */
	if (cfg->key_mode != ST_KEY_NONE)
		stream_flow_id(t, cfg->key_mode);
	ring = stream_tap_ring();
	if (segs <= 1) {
		stream_tap_tuple_out(ring, t);
		return;
	}
	{
		__u8 last_flags = t->tcp_flags;

		for (i = 0; i < ST_TAP_GSO_MAX; i++) {
			__u32 p = rem < gso_size ? rem : gso_size;

			if (i >= segs)
				break;
			rem -= p;
			t->ip_len = hdr + p;
			t->tcp_flags = i + 1 < segs ? last_flags & ~0x09 : last_flags;
			stream_tap_tuple_out(ring, t);
		}
	}
}

/* The tap's work on a frame of frame_len bytes whose headers are in [data, data_end). */
static __always_inline void stream_tap_frame(void *data, void *data_end, __u32 frame_len, __u32 segs,
					     __u32 gso_size)
{
	struct stream_tuple t;
	struct pkt_info pi;
	int st = stream_tuple_from_frame_pi(data, data_end, frame_len, 0, &t, &pi);

	stream_tap_parsed(st, &t, &pi, data, data_end, segs, gso_size);
}

/* The tap at ingress (XDP). */
static __always_inline void stream_tap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	stream_tap_frame(data, data_end, (__u32)(data_end - data), 1, 0);
}

/* After the tap: the chain's next installed stage, else the stack. */
static __always_inline int stream_tap_next_stage(struct xdp_md *ctx)
{
	return chain_next(ctx, CHAIN_SLOT_STREAM);
}

#endif /* RAMPART_STREAM_TAP_H */
