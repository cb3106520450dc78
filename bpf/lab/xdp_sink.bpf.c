// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Counting sink: counts every frame (per CPU) and drops it. With
 * `sink_histogram` set it also counts frames per source address, which the
 * lab's distribution tests read back; that mode costs a hash update per
 * packet and is not meant for rate measurements.
 */
#include "common/common.h"
#include "lab/abi.h"

const volatile __u32 sink_histogram = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_counters);
} sink_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 21);
	__type(key, struct sink_src_key);
	__type(value, __u64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} sink_sources SEC(".maps");

static __always_inline void count_source(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct sink_src_key key = {};
	__u64 one = 1, *val;

	if ((void *)(eth + 1) > data_end)
		return;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = (void *)(eth + 1);

		if ((void *)(iph + 1) > data_end)
			return;
		__builtin_memcpy(key.addr, &iph->saddr, 4);
		key.family = 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6h = (void *)(eth + 1);

		if ((void *)(ip6h + 1) > data_end)
			return;
		__builtin_memcpy(key.addr, &ip6h->saddr, 16);
		key.family = 6;
	} else {
		return;
	}
	val = bpf_map_lookup_elem(&sink_sources, &key);
	if (val)
		__sync_fetch_and_add(val, 1);
	else
		bpf_map_update_elem(&sink_sources, &key, &one, BPF_NOEXIST);
}

SEC("xdp")
int xdp_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct sink_counters *c;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&sink_count, &zero);
	if (c) {
		c->packets++;
		c->bytes += data_end - data;
	}
	if (sink_histogram)
		count_source(data, data_end);
	return XDP_DROP;
}

RAMPART_LICENSE;
