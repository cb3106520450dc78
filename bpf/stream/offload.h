/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The offloaded Filter of rampart stream and the maps that configure it
 * (stream/abi.h), shared by every program that runs an app's leading
 * operators: xdp_stream (records over AF_XDP) and the tap (stream/tap.h).
 * Include it from exactly one .bpf.c per object: it defines the maps.
 */
#ifndef RAMPART_STREAM_OFFLOAD_H
#define RAMPART_STREAM_OFFLOAD_H

#include "stream/tuple.h"
#include "stream/abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stream_off_cfg);
} stream_off_cfg SEC(".maps");

/* Index = IP protocol; non-zero = accepted (ST_FLT_PROTO). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} stream_off_protos SEC(".maps");

/* [0, ST_OFF_RANGES): source port ranges; [ST_OFF_RANGES, 2 * ST_OFF_RANGES): destination. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * ST_OFF_RANGES);
	__type(key, __u32);
	__type(value, struct stream_off_port_range);
} stream_off_ports SEC(".maps");

/* [0, ST_OFF_RANGES): source prefixes; [ST_OFF_RANGES, 2 * ST_OFF_RANGES): destination. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * ST_OFF_RANGES);
	__type(key, __u32);
	__type(value, struct stream_off_prefix);
} stream_off_prefixes SEC(".maps");

static __always_inline int port_in(__u32 base, __u8 n, __u16 port)
{
	int i;

#pragma unroll
	for (i = 0; i < ST_OFF_RANGES; i++) {
		__u32 key = base + i;
		struct stream_off_port_range *r;

		if (i >= n)
			break;
		r = bpf_map_lookup_elem(&stream_off_ports, &key);
		if (r && port >= r->lo && port <= r->hi)
			return 1;
	}
	return 0;
}

static __always_inline int prefix_in(__u32 base, __u8 n, const __u32 *a, __u32 v6)
{
	int i;

#pragma unroll
	for (i = 0; i < ST_OFF_RANGES; i++) {
		__u32 key = base + i;
		struct stream_off_prefix *p;

		if (i >= n)
			break;
		p = bpf_map_lookup_elem(&stream_off_prefixes, &key);
		if (p && p->v6 == v6 && (a[0] & p->mask[0]) == p->addr[0] &&
		    (a[1] & p->mask[1]) == p->addr[1] && (a[2] & p->mask[2]) == p->addr[2] &&
		    (a[3] & p->mask[3]) == p->addr[3])
			return 1;
	}
	return 0;
}

/* The offloaded Filter: every active predicate must hold. */
static __always_inline int stream_off_match(const struct stream_off_cfg *c, const struct stream_tuple *t)
{
	__u32 f = c->filters, v6 = t->flags & ST_F_IPV6 ? 1 : 0;
	int i;

	if (f & ST_FLT_PROTO) {
		__u32 key = t->proto;
		__u32 *ok = bpf_map_lookup_elem(&stream_off_protos, &key);

		if (!ok || !*ok)
			return 0;
	}
	if (f & ST_FLT_TCP_FLAGS) {
		int any = 0;

#pragma unroll
		for (i = 0; i < ST_OFF_CLAUSES; i++) {
			if (i >= c->n_clauses)
				break;
			if ((t->tcp_flags & c->clause_mask[i]) == c->clause_value[i]) {
				any = 1;
				break;
			}
		}
		if (!any)
			return 0;
	}
	if ((f & ST_FLT_SPORT) && !port_in(0, c->n_sport, t->sport))
		return 0;
	if ((f & ST_FLT_DPORT) && !port_in(ST_OFF_RANGES, c->n_dport, t->dport))
		return 0;
	if ((f & ST_FLT_SRC) && !prefix_in(0, c->n_src, t->saddr, v6))
		return 0;
	if ((f & ST_FLT_DST) && !prefix_in(ST_OFF_RANGES, c->n_dst, t->daddr, v6))
		return 0;
	return 1;
}

#endif /* RAMPART_STREAM_OFFLOAD_H */
