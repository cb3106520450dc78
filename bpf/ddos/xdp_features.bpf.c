// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rampart ddos, second XDP stage (tail-called by xdp_filter for clean
 * packets): per (source, destination) interval records for the detectors.
 * Storage layout: ddos/abi.h ("feature extraction").
 *
 * ddos_fctl.slot says which of the two slots is being filled. Userspace
 * flips it, waits for an RCU grace period (every program run that read the
 * old slot has finished: XDP runs inside an RCU read-side section), then
 * reads and clears the idle slot straight from the mmapped arrays. Each
 * packet is counted exactly once, in the slot it read.
 *
 * Parse status handling (the stage never drops: it always returns XDP_PASS):
 *   PARSE_OK        → recorded;
 *   PARSE_NOT_IP    → DDOS_FEAT_SKIP_NOT_IP;
 *   anything else   → DDOS_FEAT_SKIP_MALFORMED (its fields are untrusted;
 *                     xdp_filter drops these unless told to pass them).
 * A new pair that finds no free key slot is DDOS_FEAT_SKIP_TABLE_FULL.
 */
#include "common/parse.h"
#include "ddos/abi.h"

#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

const volatile struct ddos_feat_config ddos_feat_cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_feat_ctl);
} ddos_fctl SEC(".maps");

/* Sizes (2 × cap, 2 × ncpu × cap) are set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} ddos_fkeys4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_feat_val);
} ddos_fvals4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} ddos_fkeys6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_feat_addr6);
} ddos_faddr6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_feat_val);
} ddos_fvals6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ddos_feat_stats);
} ddos_featst SEC(".maps");

static __always_inline __u32 mix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/*
 * Index (within the slot starting at `base`) of `key` in a key array,
 * taking a free slot by compare-and-swap if the pair is new. Returns the
 * index, with TAKE_FRESH set when this call took the slot, or -1 when
 * DDOS_FEAT_MAX_PROBES slots were all held by other pairs.
 *
 * One global (non-inlined) function per key array: the verifier checks a
 * global function once, instead of once per parser outcome at every call
 * site, which keeps loading under 100 ms.
 */
#define TAKE_FRESH (1 << 30)
#define DEFINE_FIND_OR_TAKE(name, keys)                                                  \
	__attribute__((noinline)) int name(__u64 key, __u32 h, __u32 base, __u32 mask)    \
	{                                                                                 \
		__u32 i;                                                                  \
                                                                                          \
		for (i = 0; i < DDOS_FEAT_MAX_PROBES; i++) {                              \
			__u32 s = (h + i) & mask;                                         \
			__u32 idx = base + s;                                             \
			__u64 *k = bpf_map_lookup_elem(&keys, &idx);                      \
			__u64 cur;                                                        \
                                                                                          \
			if (!k)                                                           \
				return -1;                                                \
			cur = *(volatile __u64 *)k;                                       \
			if (cur == key)                                                   \
				return s & (TAKE_FRESH - 1);                              \
			if (cur == DDOS_FEAT_KEY_FREE) {                                  \
				cur = __sync_val_compare_and_swap(k, DDOS_FEAT_KEY_FREE, key); \
				if (cur == DDOS_FEAT_KEY_FREE)                            \
					return (s & (TAKE_FRESH - 1)) | TAKE_FRESH;       \
				if (cur == key)                                           \
					return s & (TAKE_FRESH - 1);                      \
			}                                                                 \
		}                                                                         \
		return -1;                                                                \
	}

DEFINE_FIND_OR_TAKE(ddos_feat_take4, ddos_fkeys4)
DEFINE_FIND_OR_TAKE(ddos_feat_take6, ddos_fkeys6)

/* Must stay equal to features::sketch_bit in Rust (unit-tested there). */
static __always_inline __u32 sketch_hash(__u32 port)
{
	__u32 h = port * 0x9e3779b1u;

	h ^= h >> 15;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	return h;
}

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
		__u32 bit = sketch_hash(bpf_ntohs(pi->dport)) >> 25;

		v->dport_sketch[(bit >> 6) & 1] |= 1ull << (bit & 63);
	}
}

/* Keyed 64-bit hash of an IPv6 pair; never DDOS_FEAT_KEY_FREE. */
static __always_inline __u64 pair6_key(const struct pkt_info *pi)
{
	__u64 h = 0xcbf29ce484222325ull ^ ddos_feat_cfg.seed;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		h = (h ^ pi->saddr[i]) * 0x100000001b3ull;
		h = (h ^ pi->daddr[i]) * 0x100000001b3ull;
	}
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 32;
	return h ? h : 1;
}

SEC("xdp")
int xdp_features(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	__u32 zero = 0, slot, cpu, cap, vidx;
	struct ddos_feat_stats *st;
	struct ddos_feat_ctl *ctl;
	struct ddos_feat_val *v;
	struct pkt_info pi;
	int status, s;

	st = bpf_map_lookup_elem(&ddos_featst, &zero);
	ctl = bpf_map_lookup_elem(&ddos_fctl, &zero);
	if (!st || !ctl)
		return XDP_PASS;

	status = parse_packet_lim(data, data_end, &pi, ddos_feat_cfg.limits.max_vlans,
				  ddos_feat_cfg.limits.max_v6_ext, ddos_feat_cfg.limits.shims);
	if (status == PARSE_NOT_IP) {
		st->skipped[DDOS_FEAT_SKIP_NOT_IP]++;
		return XDP_PASS;
	}
	if (status != PARSE_OK) {
		st->skipped[DDOS_FEAT_SKIP_MALFORMED]++;
		return XDP_PASS;
	}

	slot = ctl->slot & 1;
	cpu = bpf_get_smp_processor_id();
	if (pi.family == 4) {
		__u64 key = ((__u64)pi.saddr[0] << 32) | pi.daddr[0];

		if (key == DDOS_FEAT_KEY_FREE) {
			st->skipped[DDOS_FEAT_SKIP_MALFORMED]++;
			return XDP_PASS;
		}
		cap = ddos_feat_cfg.cap4;
		s = ddos_feat_take4(key, mix32(pi.saddr[0] * 0x9e3779b1u ^ pi.daddr[0]), slot * cap, cap - 1);
		if (s < 0) {
			st->skipped[DDOS_FEAT_SKIP_TABLE_FULL]++;
			return XDP_PASS;
		}
		vidx = (slot * ddos_feat_cfg.ncpu + cpu) * cap + ((__u32)s & (TAKE_FRESH - 1));
		v = bpf_map_lookup_elem(&ddos_fvals4, &vidx);
	} else {
		__u64 key = pair6_key(&pi);

		cap = ddos_feat_cfg.cap6;
		s = ddos_feat_take6(key, (__u32)key, slot * cap, cap - 1);
		if (s < 0) {
			st->skipped[DDOS_FEAT_SKIP_TABLE_FULL]++;
			return XDP_PASS;
		}
		if (s & TAKE_FRESH) {
			__u32 aidx = slot * cap + ((__u32)s & (TAKE_FRESH - 1));
			struct ddos_feat_addr6 *a = bpf_map_lookup_elem(&ddos_faddr6, &aidx);

			if (a) {
				__builtin_memcpy(a->src, pi.saddr, 16);
				__builtin_memcpy(a->dst, pi.daddr, 16);
			}
		}
		vidx = (slot * ddos_feat_cfg.ncpu + cpu) * cap + ((__u32)s & (TAKE_FRESH - 1));
		v = bpf_map_lookup_elem(&ddos_fvals6, &vidx);
	}
	if (!v) {
		st->skipped[DDOS_FEAT_SKIP_TABLE_FULL]++;
		return XDP_PASS;
	}
	account(v, &pi, len);
	st->recorded[slot]++;
	return XDP_PASS;
}

RAMPART_LICENSE;
