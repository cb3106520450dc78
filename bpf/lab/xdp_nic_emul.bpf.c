// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * EMULATED SmartNIC (lab only).
 *
 * Attached to both veths of the lab's `nic` namespace, it makes that hop
 * behave like a NIC between the wire (`wan`) and the host: a transparent
 * L2 bump that forwards every frame to the other side with bpf_redirect,
 * plus a hardware-like table of source-prefix rules (longest prefix match,
 * capacity K = the map's max_entries) whose matches are dropped with
 * per-rule counters (per CPU, in nic_counters: why in lab/abi.h).
 * Only frames from the wire are matched; frames from the host pass.
 *
 * With no rule installed the lookup is skipped (nic_state.rules == 0), so
 * the forwarder runs at full speed. It keeps no per-packet counters of its
 * own: the veth driver counts what its XDP program saw per queue
 * (`ethtool -S nic-wan`, rx_queue_<n>_xdp_packets); a per-packet counter
 * here cost ~10% of the lab's generator ceiling (measured).
 */
#include "common/common.h"
#include "common/parse.h"
#include "lab/abi.h"

/* ifindexes of the two nic veths, set at load (bpf_redirect measured ~5%
 * faster here than a DEVMAP_HASH lookup; both bulk-transmit). */
const volatile __u32 nic_wan_ifindex = 0;
const volatile __u32 nic_host_ifindex = 0;

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* required by LPM tries */
	__uint(max_entries, NIC_DEFAULT_CAPACITY);
	__type(key, struct nic_rule_key);
	__type(value, struct nic_rule_val);
} nic_rules SEC(".maps");

/* max_entries = K too (set with nic_rules' at load). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NIC_DEFAULT_CAPACITY);
	__type(key, __u32);
	__type(value, struct nic_rule_stats);
} nic_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nic_state);
} nic_state SEC(".maps");

static __always_inline int nic_match(struct xdp_md *ctx, struct nic_state *st)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nic_rule_key key = {};
	struct nic_rule_val *r;
	struct nic_rule_stats *c;
	struct pkt_info pi;

	if (parse_packet(data, data_end, &pi) != PARSE_OK) {
		__sync_fetch_and_add(&st->unparsed, 1);
		return 0;
	}
	/* The whole address: a rule matches on its own prefixlen's bits. */
	key.prefixlen = NIC_FAMILY_BITS + 128;
	__builtin_memcpy(key.addr, pi.saddr, sizeof(key.addr));
	key.family = pi.family;
	r = bpf_map_lookup_elem(&nic_rules, &key);
	if (!r)
		return 0;
	c = bpf_map_lookup_elem(&nic_counters, &r->slot);
	if (c) {
		c->packets++;
		c->bytes += data_end - data;
	}
	return 1;
}

SEC("xdp")
int xdp_nic_emul(struct xdp_md *ctx)
{
	__u32 zero = 0;

	if (ctx->ingress_ifindex == nic_wan_ifindex) {
		struct nic_state *st = bpf_map_lookup_elem(&nic_state, &zero);

		if (st && st->rules && nic_match(ctx, st))
			return XDP_DROP;
		return bpf_redirect(nic_host_ifindex, 0);
	}
	return bpf_redirect(nic_wan_ifindex, 0);
}

RAMPART_LICENSE;
