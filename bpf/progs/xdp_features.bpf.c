// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rampart ddos, second XDP stage (tail-called by xdp_filter for clean
 * packets): per (source, destination) interval records for the detectors.
 *
 * Two per-CPU hash maps, ddos_feat_a and ddos_feat_b, are the two slots of
 * the interval; ddos_fctl.slot says which one is being filled. Userspace
 * flips the slot, waits for an RCU grace period (every program run that
 * read the old slot has finished: XDP runs inside an RCU read-side section),
 * then reads and empties the idle slot in one batch. Each packet is thus
 * counted exactly once, in the slot it read.
 *
 * Parse status handling (the stage never drops: it always returns XDP_PASS):
 *   PARSE_OK        → recorded;
 *   PARSE_NOT_IP    → DDOS_FEAT_SKIP_NOT_IP;
 *   anything else   → DDOS_FEAT_SKIP_MALFORMED (its fields are untrusted;
 *                     xdp_filter drops these unless told to pass them).
 * A new pair that does not fit in the slot's map is DDOS_FEAT_SKIP_TABLE_FULL.
 */
#include "../lib/parse.h"
#include "../shared/ddos.h"

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_feat_ctl);
} ddos_fctl SEC(".maps");

/* max_entries of both slots is set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct ddos_feat_key);
	__type(value, struct ddos_feat_val);
} ddos_feat_a SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct ddos_feat_key);
	__type(value, struct ddos_feat_val);
} ddos_feat_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ddos_feat_stats);
} ddos_featst SEC(".maps");

static __always_inline void account(struct ddos_feat_val *v, const struct pkt_info *pi, __u64 len)
{
	v->packets++;
	v->bytes += len;
	if (pi->frag != FRAG_NONE)
		v->frags++;
	switch (pi->l4_proto) {
	case IPPROTO_TCP:
		v->tcp++;
		if (pi->frag != FRAG_LATER) {
			__u8 f = pi->tcp_flags;

			if ((f & (TCP_SYN | TCP_ACK)) == TCP_SYN)
				v->syn++;
			else if ((f & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK))
				v->synack++;
			if (f & TCP_RST)
				v->rst++;
		}
		break;
	case IPPROTO_UDP:
		v->udp++;
		break;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		v->icmp++;
		break;
	default:
		v->other++;
		break;
	}
	/* Only headers that carry ports, and never a later fragment's payload. */
	if ((pi->l4_proto == IPPROTO_TCP || pi->l4_proto == IPPROTO_UDP) && pi->frag != FRAG_LATER) {
		__u32 bit = ((__u32)bpf_ntohs(pi->dport) * 0x9e3779b1u) >> 25;

		v->dport_sketch[(bit >> 6) & 1] |= 1ull << (bit & 63);
	}
}

SEC("xdp")
int xdp_features(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct ddos_feat_stats *st;
	struct ddos_feat_ctl *ctl;
	struct ddos_feat_key key;
	struct ddos_feat_val *v;
	struct pkt_info pi;
	__u32 zero = 0, slot;
	int status;

	st = bpf_map_lookup_elem(&ddos_featst, &zero);
	ctl = bpf_map_lookup_elem(&ddos_fctl, &zero);
	if (!st || !ctl)
		return XDP_PASS;

	status = parse_packet(data, data_end, &pi);
	if (status == PARSE_NOT_IP) {
		st->skipped[DDOS_FEAT_SKIP_NOT_IP]++;
		return XDP_PASS;
	}
	if (status != PARSE_OK) {
		st->skipped[DDOS_FEAT_SKIP_MALFORMED]++;
		return XDP_PASS;
	}

	__builtin_memcpy(key.src, pi.saddr, sizeof(key.src));
	__builtin_memcpy(key.dst, pi.daddr, sizeof(key.dst));
	key.family = pi.family;

	slot = ctl->slot & 1;
	v = slot ? bpf_map_lookup_elem(&ddos_feat_b, &key) : bpf_map_lookup_elem(&ddos_feat_a, &key);
	if (!v) {
		struct ddos_feat_val nv = {};
		long err;

		account(&nv, &pi, len);
		err = slot ? bpf_map_update_elem(&ddos_feat_b, &key, &nv, BPF_NOEXIST)
			   : bpf_map_update_elem(&ddos_feat_a, &key, &nv, BPF_NOEXIST);
		if (!err) {
			st->recorded[slot]++;
			return XDP_PASS;
		}
		/* Another CPU created the pair first: our (zeroed) copy exists now. */
		v = slot ? bpf_map_lookup_elem(&ddos_feat_b, &key) : bpf_map_lookup_elem(&ddos_feat_a, &key);
		if (!v) {
			st->skipped[DDOS_FEAT_SKIP_TABLE_FULL]++;
			return XDP_PASS;
		}
	}
	account(v, &pi, len);
	st->recorded[slot]++;
	return XDP_PASS;
}

RAMPART_LICENSE;
