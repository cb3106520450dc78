// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The Internet beyond the lab's wan (lab/abi.h): frames to wan's own
 * addresses pass to wan's stack; frames to any other unicast address leave
 * (XDP_DROP, counted). Without it, a spoofed flood's replies (a SYN-ACK per
 * spoofed SYN) all climb wan's kernel stack on the CPU that also runs the
 * generator and the host's receive path, and the lab, not the host, sets
 * the flood rate the host can be offered.
 */
#include "common/common.h"
#include "lab/abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, INTERNET_OWN_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct nic_rule_key);
	__type(value, __u32);
} internet_own SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct internet_counters);
} internet_count SEC(".maps");

SEC("xdp")
int xdp_internet(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nic_rule_key key = {};
	struct internet_counters *c;
	struct ethhdr *eth = data;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&internet_count, &zero);
	if (!c)
		return XDP_PASS;
	if ((void *)(eth + 1) > data_end)
		goto deliver;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = (void *)(eth + 1);
		__u32 d;

		if ((void *)(iph + 1) > data_end)
			goto deliver;
		d = bpf_ntohl(iph->daddr);
		/* multicast, limited broadcast */
		if ((d >> 28) == 0xe || d == 0xffffffff)
			goto deliver;
		key.prefixlen = NIC_FAMILY_BITS + 32;
		key.family = 4;
		key.addr[0] = iph->daddr;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6h = (void *)(eth + 1);
		__u8 b0, b1;

		if ((void *)(ip6h + 1) > data_end)
			goto deliver;
		b0 = ip6h->daddr.in6_u.u6_addr8[0];
		b1 = ip6h->daddr.in6_u.u6_addr8[1];
		/* multicast (neighbour discovery), link-local */
		if (b0 == 0xff || (b0 == 0xfe && (b1 & 0xc0) == 0x80))
			goto deliver;
		key.prefixlen = NIC_FAMILY_BITS + 128;
		key.family = 6;
		__builtin_memcpy(key.addr, &ip6h->daddr, 16);
	} else {
		goto deliver; /* ARP and anything else wan's stack handles */
	}
	if (!bpf_map_lookup_elem(&internet_own, &key)) {
		c->departed++;
		return XDP_DROP;
	}
deliver:
	c->delivered++;
	return XDP_PASS;
}

RAMPART_LICENSE;
