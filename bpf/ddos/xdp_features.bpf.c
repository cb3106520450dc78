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
 *
 * Protection (only while ddos_fctl.n_protect > 0, after the victim record
 * and before the pair record, for TCP to a victim in ddos_protect; see
 * ddos/cookie.h for the cookie). What it answers or drops updates a pair
 * already in the interval's table but takes a new slot only with
 * probability 1/DDOS_FEAT_PROTECTED_ADMIT (else DDOS_FEAT_SKIP_PROTECTED),
 * so a spoofed flood's million sources stay out of the table:
 *   SYN, SYN_COOKIES on   → bpf_skc_lookup_tcp in the device's netns:
 *                           a listener → cookie SYN-ACK (XDP_TX, no state);
 *                           nothing → XDP_DROP (no_listener); a request
 *                           socket (the kernel holds this handshake) →
 *                           XDP_DROP (syn_pending); another socket, or
 *                           headers the crafting does not rewrite →
 *                           XDP_PASS (syn_passed).
 *   no SYN, SYN_COOKIES or ACK_GUARD on → lookup: any socket but a
 *                           listener → XDP_PASS (in state); only a
 *                           listener, SYN_COOKIES on, ACK without RST →
 *                           cookie valid: XDP_PASS (tc_cookie.bpf.c hands
 *                           the kernel a request socket), invalid:
 *                           XDP_DROP; otherwise, ACK_GUARD on → XDP_DROP
 *                           (guard_dropped), off → XDP_PASS.
 * This stage passes everything else: to the chain's next stage
 * (common/chain.h), XDP_PASS alone.
 */
#include "common/parse.h"
#include "common/chain.h"
#include "common/synack.h"
#include "ddos/abi.h"
#include "ddos/cookie.h"

#define TCP_FIN 0x01
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

/* Victim records (ddos/abi.h); sizes set at load like the pairs'. */
#define VICTIM_MAPS(f)                                                                    \
	struct {                                                                          \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                         \
		__uint(max_entries, 1);                                                   \
		__uint(map_flags, BPF_F_MMAPABLE);                                        \
		__type(key, __u32);                                                       \
		__type(value, __u64);                                                     \
	} ddos_vkeys##f SEC(".maps");                                                     \
	struct {                                                                          \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                         \
		__uint(max_entries, 1);                                                   \
		__uint(map_flags, BPF_F_MMAPABLE);                                        \
		__type(key, __u32);                                                       \
		__type(value, struct ddos_victim_val);                                    \
	} ddos_vvals##f SEC(".maps");                                                     \
	struct {                                                                          \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                         \
		__uint(max_entries, 1);                                                   \
		__uint(map_flags, BPF_F_MMAPABLE);                                        \
		__type(key, __u32);                                                       \
		__type(value, struct ddos_victim_hll);                                    \
	} ddos_vhll##f SEC(".maps");
VICTIM_MAPS(4)
VICTIM_MAPS(6)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DDOS_PROTECT_MAX);
	__type(key, struct ddos_victim_key);
	__type(value, struct ddos_protect_val);
} ddos_protect SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ddos_cookie_key);
} ddos_ckey SEC(".maps");

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
 * index, with TAKE_FRESH set when this call took the slot, -1 when
 * DDOS_FEAT_MAX_PROBES slots were all held by other pairs, or TAKE_NONE
 * when the key is not there and `take` is 0 (update only).
 *
 * One global (non-inlined) function per key array: the verifier checks a
 * global function once, instead of once per parser outcome at every call
 * site, which keeps loading under 100 ms.
 */
#define TAKE_FRESH (1 << 30)
#define TAKE_NONE -2
#define DEFINE_FIND_OR_TAKE(name, keys)                                                  \
	__attribute__((noinline)) int name(__u64 key, __u32 h, __u32 base, __u32 mask, int take) \
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
				if (!take)                                                \
					return TAKE_NONE;                                 \
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
DEFINE_FIND_OR_TAKE(ddos_vict_take4, ddos_vkeys4)
DEFINE_FIND_OR_TAKE(ddos_vict_take6, ddos_vkeys6)

/* Must stay equal to features::sketch_bit in Rust (unit-tested there). */
static __always_inline __u32 sketch_hash(__u32 port)
{
	__u32 h = port * 0x9e3779b1u;

	h ^= h >> 15;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	return h;
}

static __always_inline void account(struct ddos_feat_val *v, const struct pkt_info *pi, __u64 len,
				    __u32 udp_class)
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
			if (f & TCP_FIN)
				v->fin++;
		}
		break;
	case IPPROTO_UDP:
		v->udp++;
		if (udp_class < DDOS_UDP_AMP_PORTS) {
			v->udp_amp++;
			v->udp_amp_bytes += len;
		}
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

/* A protection verdict with the event to count in the victim record. */
#define PROT(verdict, ev) ((verdict) | ((ev) + 1) << 8)

static __always_inline void cookie_in_of(struct cookie_in *c, const struct pkt_info *pi, __u32 isn)
{
	__builtin_memcpy(c->saddr, pi->saddr, 16);
	__builtin_memcpy(c->daddr, pi->daddr, 16);
	c->sport = pi->sport;
	c->dport = pi->dport;
	c->isn = isn;
}

/* The state of the socket the packet belongs to: BPF_TCP_* or -1 when none. */
static __always_inline int sock_state(struct xdp_md *ctx, const struct pkt_info *pi)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	__u32 size;
	int state;

	if (pi->family == 4) {
		t.ipv4.saddr = pi->saddr[0];
		t.ipv4.daddr = pi->daddr[0];
		t.ipv4.sport = pi->sport;
		t.ipv4.dport = pi->dport;
		size = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, pi->saddr, 16);
		__builtin_memcpy(t.ipv6.daddr, pi->daddr, 16);
		t.ipv6.sport = pi->sport;
		t.ipv6.dport = pi->dport;
		size = sizeof(t.ipv6);
	}
	sk = bpf_skc_lookup_tcp(ctx, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return -1;
	state = sk->state;
	bpf_sk_release(sk);
	return state;
}

static __always_inline int answer_syn(struct xdp_md *ctx, const struct pkt_info *pi,
				      struct ddos_protect_val *pv)
{
	struct synack_params p = {};
	struct syn_opts o = {};
	struct ddos_cookie_key *key;
	struct cookie_in c;
	__u32 zero = 0, low, seq;
	int v6 = pi->family == 6;
	void *data, *data_end;
	struct tcphdr *th;

	key = bpf_map_lookup_elem(&ddos_ckey, &zero);
	if (!key)
		return XDP_PASS;
	if (synack_check(ctx, v6, &o)) {
		__sync_fetch_and_add(&pv->bad_syn, 1);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	th = data + sizeof(struct ethhdr) + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	if ((void *)(th + 1) > data_end)
		return XDP_DROP;
	seq = bpf_ntohl(th->seq);

	low = (o.wscale & COOKIE_WSCALE_MASK) | (o.sack ? COOKIE_SACK : 0) | (o.ecn ? COOKIE_ECN : 0) |
	      cookie_mss_index(o.mss ? o.mss : 536, v6) << COOKIE_MSS_SHIFT;
	cookie_in_of(&c, pi, seq);
	p.isn = cookie_make(key, &c, low, cookie_slot());
	p.tsval = (__u32)(bpf_ktime_get_ns() / 1000000);
	p.mss = v6 ? COOKIE_MSS6_OURS : COOKIE_MSS4_OURS;
	p.window = COOKIE_WINDOW;
	p.wscale = COOKIE_WSCALE;
	p.ttl = 64;
	p.ece = o.ecn;
	p.flags = SYNACK_OPTS_ALWAYS;
	if (synack_build(ctx, v6, &p, &o)) {
		__sync_fetch_and_add(&pv->bad_syn, 1);
		return XDP_DROP;
	}
	__sync_fetch_and_add(&pv->synack_sent, 1);
	return PROT(XDP_TX, DDOS_PROT_SYNACK_SENT);
}

/* Is the ACK's cookie (ack_seq - 1, for the ISN seq - 1) one of ours? */
static __always_inline int ack_cookie_valid(struct xdp_md *ctx, const struct pkt_info *pi)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ddos_cookie_key *key;
	struct cookie_in c;
	struct tcphdr *th;
	__u32 zero = 0;

	key = bpf_map_lookup_elem(&ddos_ckey, &zero);
	if (!key)
		return 0;
	th = data + (pi->l4_off & 0x3fff);
	if ((void *)(th + 1) > data_end)
		return 0;
	cookie_in_of(&c, pi, bpf_ntohl(th->seq) - 1);
	return cookie_valid(key, &c, bpf_ntohl(th->ack_seq) - 1);
}

/*
 * The protection stage for one TCP packet (not a fragment) to a victim
 * (top of this file): the verdict, with PROT() the event the victim
 * record counts. A global function: verified once, on its own.
 */
__attribute__((noinline)) int ddos_protect_tcp(struct xdp_md *ctx, const struct pkt_info *pi)
{
	struct ddos_victim_key vk;
	struct ddos_protect_val *pv;
	__u8 f;
	int state;

	if (!ctx || !pi)
		return XDP_PASS;
	victim_key_of(&vk, pi->family, pi->daddr);
	pv = bpf_map_lookup_elem(&ddos_protect, &vk);
	if (!pv)
		return XDP_PASS;
	f = pi->tcp_flags;
	if ((f & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN)) == TCP_SYN) {
		int plain;

		if (!(pv->flags & DDOS_PROTECT_SYN_COOKIES))
			return XDP_PASS;
		state = sock_state(ctx, pi);
		if (state < 0) {
			__sync_fetch_and_add(&pv->no_listener, 1);
			return PROT(XDP_DROP, DDOS_PROT_NO_LISTENER);
		}
		plain = pi->vlan_depth == 0 && pi->l3_off == sizeof(struct ethhdr) &&
			pi->l4_off == sizeof(struct ethhdr) +
					      (pi->family == 6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
		if (state == BPF_TCP_NEW_SYN_RECV) {
			__sync_fetch_and_add(&pv->syn_pending, 1);
			return XDP_DROP;
		}
		if (state != BPF_TCP_LISTEN || !plain) {
			__sync_fetch_and_add(&pv->syn_passed, 1);
			return XDP_PASS;
		}
		return answer_syn(ctx, pi, pv);
	}
	if (f & TCP_SYN) /* SYN-ACK, or SYN with RST/FIN: the guard's */
		goto out_of_state;
	if (!(pv->flags & DDOS_PROTECT_ALL))
		return XDP_PASS;
	state = sock_state(ctx, pi);
	if (state >= 0 && state != BPF_TCP_LISTEN)
		return XDP_PASS; /* established, request or time-wait socket */
	if (state == BPF_TCP_LISTEN && (pv->flags & DDOS_PROTECT_SYN_COOKIES) && (f & TCP_ACK) &&
	    !(f & TCP_RST)) {
		if (ack_cookie_valid(ctx, pi)) {
			__sync_fetch_and_add(&pv->cookie_ack_valid, 1);
			return PROT(XDP_PASS, DDOS_PROT_COOKIE_ACK_VALID);
		}
		__sync_fetch_and_add(&pv->cookie_ack_invalid, 1);
		return PROT(XDP_DROP, DDOS_PROT_COOKIE_ACK_INVALID);
	}
out_of_state:
	if (pv->flags & DDOS_PROTECT_ACK_GUARD) {
		__sync_fetch_and_add(&pv->guard_dropped, 1);
		return PROT(XDP_DROP, DDOS_PROT_GUARD_DROPPED);
	}
	return XDP_PASS;
}

/* UDP source-port class of the packet (DDOS_UDP_AMP_PORTS for any other port or not UDP). */
static __always_inline __u32 udp_class_of(const struct pkt_info *pi)
{
	__u16 sport = bpf_ntohs(pi->sport);
	int i;

	if (pi->l4_proto != IPPROTO_UDP || pi->frag == FRAG_LATER)
		return DDOS_UDP_CLASSES;
#pragma unroll
	for (i = 0; i < DDOS_UDP_AMP_PORTS; i++)
		if (sport == ddos_feat_cfg.amp_ports[i])
			return i;
	return DDOS_UDP_AMP_PORTS;
}

/* Must stay equal to features::hll_hash in Rust (unit-tested there and through BPF_PROG_RUN). */
static __always_inline __u32 hll_hash(const __u32 a[4])
{
	__u32 h = 0x9e3779b9u;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++)
		h = mix32(h ^ a[i]);
	return h;
}

/* 1 + leading zeros of the 26 low bits of h (shifted up), at most 27. */
static __always_inline __u8 hll_rank(__u32 h)
{
	__u32 x = h << 6;
	__u8 n = 1;

	if (!x)
		return 27;
	if (!(x & 0xffff0000u)) {
		n += 16;
		x <<= 16;
	}
	if (!(x & 0xff000000u)) {
		n += 8;
		x <<= 8;
	}
	if (!(x & 0xf0000000u)) {
		n += 4;
		x <<= 4;
	}
	if (!(x & 0xc0000000u)) {
		n += 2;
		x <<= 2;
	}
	if (!(x & 0x80000000u))
		n += 1;
	return n > 27 ? 27 : n;
}

static __always_inline void hll_update(__u8 *regs, __u32 h)
{
	__u32 idx = h >> 26;
	__u8 r = hll_rank(h);

	if (regs[idx & (DDOS_HLL_REGISTERS - 1)] < r)
		regs[idx & (DDOS_HLL_REGISTERS - 1)] = r;
}

/* Is the packet out of state (no socket, or only a listener and no valid cookie ACK)? */
static __always_inline int tcp_out_of_state(struct xdp_md *ctx, const struct pkt_info *pi)
{
	int state = sock_state(ctx, pi);

	if (state < 0)
		return 1;
	if (state != BPF_TCP_LISTEN)
		return 0;
	return !((pi->tcp_flags & TCP_ACK) && !(pi->tcp_flags & TCP_RST) && ack_cookie_valid(ctx, pi));
}

/* Count the packet in its victim's value and registers. */
static __always_inline void count_victim(struct xdp_md *ctx, struct ddos_victim_val *v, struct ddos_victim_hll *hl,
					 const struct pkt_info *pi, __u64 len, __u32 udp_class)
{
	__u32 h;

	v->packets++;
	v->bytes += len;
	if (pi->frag != FRAG_NONE)
		v->frags++;
	h = hll_hash(pi->saddr);
	hll_update(hl->src, h);
	switch (pi->l4_proto) {
	case IPPROTO_TCP:
		v->tcp++;
		if (pi->frag != FRAG_LATER) {
			__u8 f = pi->tcp_flags;

			if ((f & (TCP_SYN | TCP_ACK)) == TCP_SYN) {
				v->syn++;
				hll_update(hl->syn_src, h);
			} else if ((f & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK)) {
				v->synack++;
			}
			if (f & TCP_RST)
				v->rst++;
			if (f & TCP_FIN)
				v->fin++;
			if (!(f & TCP_SYN) && pi->frag == FRAG_NONE &&
			    (v->tcp & (ddos_feat_cfg.sock_sample - 1)) == 0) {
				v->tcp_sampled++;
				if (tcp_out_of_state(ctx, pi))
					v->tcp_nosock++;
			}
		}
		break;
	case IPPROTO_UDP:
		v->udp++;
		if (udp_class < DDOS_UDP_CLASSES) {
			v->udp_vec_pkts[udp_class & (DDOS_UDP_CLASSES - 1)]++;
			v->udp_vec_bytes[udp_class & (DDOS_UDP_CLASSES - 1)] += len;
		}
		break;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		v->icmp++;
		break;
	default:
		v->other++;
		break;
	}
}

/* The victim key of the destination and its probe hash; 1 when it has none. */
static __always_inline int victim_key(const struct pkt_info *pi, __u64 *key, __u32 *h)
{
	if (pi->family == 4) {
		*key = (1ull << 32) | pi->daddr[0];
		*h = mix32(pi->daddr[0]);
		return 0;
	}
	*key = (__u64)pi->daddr[0] << 32 | pi->daddr[1];
	*h = mix32(pi->daddr[0] ^ mix32(pi->daddr[1]));
	return *key == 0;
}

/*
 * Record the packet in its victim's interval record. Returns the index of
 * this CPU's value in ddos_vvals4/6 (for the protection stage's events),
 * VICTIM_FULL when the table had no room, VICTIM_NONE when not recorded.
 * Global functions, one per family: each verified once, on its own, and
 * each with its own maps (a lookup whose map depends on the family is not
 * inlined by the verifier: an indirect call per packet).
 */
#define VICTIM_NONE -1
#define VICTIM_FULL -2
#define DEFINE_RECORD_VICTIM(f)                                                                        \
	__attribute__((noinline)) int ddos_record_victim##f(struct xdp_md *ctx, const struct pkt_info *pi, \
							    __u32 slot, __u64 len, __u32 udp_class)        \
	{                                                                                              \
		struct ddos_victim_val *v;                                                             \
		struct ddos_victim_hll *hl;                                                            \
		__u32 cpu = bpf_get_smp_processor_id(), cap = ddos_feat_cfg.vcap##f, idx, vidx, h;    \
		__u64 key;                                                                             \
		int s;                                                                                 \
                                                                                                       \
		if (!ctx || !pi || victim_key(pi, &key, &h))                                           \
			return VICTIM_NONE;                                                            \
		slot &= 1;                                                                             \
		s = ddos_vict_take##f(key, h, slot * cap, cap - 1, 1);                                 \
		if (s < 0)                                                                             \
			return VICTIM_FULL;                                                            \
		s &= TAKE_FRESH - 1;                                                                   \
		vidx = (slot * ddos_feat_cfg.ncpu + cpu) * cap + s;                                    \
		idx = slot * cap + s;                                                                  \
		v = bpf_map_lookup_elem(&ddos_vvals##f, &vidx);                                        \
		hl = bpf_map_lookup_elem(&ddos_vhll##f, &idx);                                         \
		if (!v || !hl)                                                                         \
			return VICTIM_FULL;                                                            \
		count_victim(ctx, v, hl, pi, len, udp_class);                                          \
		return vidx & 0x7fffffff;                                                              \
	}                                                                                              \
                                                                                                       \
	/* Count a protection event (enum ddos_prot_event) in value vidx. */                           \
	__attribute__((noinline)) int ddos_victim_event##f(__u32 vidx, __u64 ev)                       \
	{                                                                                              \
		struct ddos_victim_val *v = bpf_map_lookup_elem(&ddos_vvals##f, &vidx);                \
                                                                                                       \
		if (!v || ev >= DDOS_PROT_EVENT_MAX)                                                   \
			return 0;                                                                      \
		v->prot[ev]++;                                                                         \
		return 0;                                                                              \
	}
DEFINE_RECORD_VICTIM(4)
DEFINE_RECORD_VICTIM(6)

/*
 * Record the packet in its pair's interval record: 0, or PAIR_FULL /
 * PAIR_MALFORMED, or PAIR_NOT_TAKEN when the pair is new and `take` is 0.
 * One global function per family, as for the victims.
 */
#define PAIR_FULL -2
#define PAIR_MALFORMED -3
#define PAIR_NOT_TAKEN -4
__attribute__((noinline)) int ddos_record_pair4(const struct pkt_info *pi, __u32 slot, __u64 len, __u32 udp_class,
						int take)
{
	__u32 cpu = bpf_get_smp_processor_id(), cap = ddos_feat_cfg.cap4, vidx;
	struct ddos_feat_val *v;
	__u64 key;
	int s;

	if (!pi)
		return PAIR_MALFORMED;
	slot &= 1;
	key = ((__u64)pi->saddr[0] << 32) | pi->daddr[0];
	if (key == DDOS_FEAT_KEY_FREE)
		return PAIR_MALFORMED;
	s = ddos_feat_take4(key, mix32(pi->saddr[0] * 0x9e3779b1u ^ pi->daddr[0]), slot * cap, cap - 1, take);
	if (s == TAKE_NONE)
		return PAIR_NOT_TAKEN;
	if (s < 0)
		return PAIR_FULL;
	vidx = (slot * ddos_feat_cfg.ncpu + cpu) * cap + ((__u32)s & (TAKE_FRESH - 1));
	v = bpf_map_lookup_elem(&ddos_fvals4, &vidx);
	if (!v)
		return PAIR_FULL;
	account(v, pi, len, udp_class);
	return 0;
}

__attribute__((noinline)) int ddos_record_pair6(const struct pkt_info *pi, __u32 slot, __u64 len, __u32 udp_class,
						int take)
{
	__u32 cpu = bpf_get_smp_processor_id(), cap = ddos_feat_cfg.cap6, vidx;
	struct ddos_feat_val *v;
	__u64 key;
	int s;

	if (!pi)
		return PAIR_MALFORMED;
	slot &= 1;
	key = pair6_key(pi);
	s = ddos_feat_take6(key, (__u32)key, slot * cap, cap - 1, take);
	if (s == TAKE_NONE)
		return PAIR_NOT_TAKEN;
	if (s < 0)
		return PAIR_FULL;
	if (s & TAKE_FRESH) {
		__u32 aidx = slot * cap + ((__u32)s & (TAKE_FRESH - 1));
		struct ddos_feat_addr6 *a = bpf_map_lookup_elem(&ddos_faddr6, &aidx);

		if (a) {
			__builtin_memcpy(a->src, pi->saddr, 16);
			__builtin_memcpy(a->dst, pi->daddr, 16);
		}
	}
	vidx = (slot * ddos_feat_cfg.ncpu + cpu) * cap + ((__u32)s & (TAKE_FRESH - 1));
	v = bpf_map_lookup_elem(&ddos_fvals6, &vidx);
	if (!v)
		return PAIR_FULL;
	account(v, pi, len, udp_class);
	return 0;
}

SEC("xdp")
int xdp_features(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	__u32 zero = 0, slot, udp_class;
	struct ddos_feat_stats *st;
	struct ddos_feat_ctl *ctl;
	struct pkt_info pi;
	int status, vi, r, verdict = XDP_PASS, take = 1;

	st = bpf_map_lookup_elem(&ddos_featst, &zero);
	ctl = bpf_map_lookup_elem(&ddos_fctl, &zero);
	if (!st || !ctl)
		return chain_next(ctx, CHAIN_SLOT_DDOS);

	status = parse_packet_lim(data, data_end, &pi, ddos_feat_cfg.limits.max_vlans,
				  ddos_feat_cfg.limits.max_v6_ext, ddos_feat_cfg.limits.shims);
	if (status == PARSE_NOT_IP) {
		st->skipped[DDOS_FEAT_SKIP_NOT_IP]++;
		return chain_next(ctx, CHAIN_SLOT_DDOS);
	}
	if (status != PARSE_OK) {
		st->skipped[DDOS_FEAT_SKIP_MALFORMED]++;
		return chain_next(ctx, CHAIN_SLOT_DDOS);
	}

	slot = ctl->slot & 1;
	udp_class = udp_class_of(&pi);
	if (pi.family == 4)
		vi = ddos_record_victim4(ctx, &pi, slot, len, udp_class);
	else
		vi = ddos_record_victim6(ctx, &pi, slot, len, udp_class);
	if (vi == VICTIM_FULL)
		st->victims_full[slot]++;
	if (ctl->n_protect && pi.l4_proto == IPPROTO_TCP && pi.frag == FRAG_NONE) {
		__u32 ev;

		r = ddos_protect_tcp(ctx, &pi);
		ev = (((__u32)r >> 8) - 1) & 7;
		if (vi >= 0 && ev < DDOS_PROT_EVENT_MAX) {
			if (pi.family == 4)
				ddos_victim_event4(vi, ev);
			else
				ddos_victim_event6(vi, ev);
		}
		verdict = r & 0xff;
		/* Answered or dropped here: a new source gets a pair slot only
		 * now and then (DDOS_FEAT_PROTECTED_ADMIT in ddos/abi.h). The
		 * packet may have been rewritten into a SYN-ACK; pi and len
		 * still describe what arrived. */
		if (verdict != XDP_PASS)
			take = (bpf_get_prandom_u32() & (DDOS_FEAT_PROTECTED_ADMIT - 1)) == 0;
	}
	if (pi.family == 4)
		r = ddos_record_pair4(&pi, slot, len, udp_class, take);
	else
		r = ddos_record_pair6(&pi, slot, len, udp_class, take);
	if (r == PAIR_MALFORMED) {
		st->skipped[DDOS_FEAT_SKIP_MALFORMED]++;
	} else if (r == PAIR_FULL) {
		st->skipped[DDOS_FEAT_SKIP_TABLE_FULL]++;
		st->pairs_full[slot]++;
	} else if (r == PAIR_NOT_TAKEN) {
		st->skipped[DDOS_FEAT_SKIP_PROTECTED]++;
	} else {
		st->recorded[slot]++;
	}
	if (verdict != XDP_PASS)
		return verdict;
	return chain_next(ctx, CHAIN_SLOT_DDOS);
}

RAMPART_LICENSE;
