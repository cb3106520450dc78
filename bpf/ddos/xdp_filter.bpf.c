// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rampart ddos, first XDP stage: the source blacklist.
 *
 * Every packet is parsed with common/parse.h. When its source address is
 * known (IPv4/IPv6 header parsed) it is looked up in the blacklist (order
 * in ddos/abi.h); a match is dropped (DDOS_DROP_BLACKLIST or
 * DDOS_DROP_BLACKLIST_PREFIX) and, for 1 in 2^sample_shift matches, the
 * entry's counter is advanced by 2^sample_shift packets and as many times
 * the frame length in bytes. A source that matches nothing and is policed
 * (ddos_police, consulted only while ctl.n_police > 0) for the packet's
 * class (its SYNs, its UDP, ... or every packet) takes a token from its
 * bucket or, over its rate, is dropped (DDOS_DROP_POLICED). Then, per
 * parse status:
 *
 *   PARSE_OK          → DDOS_PASS_CLEAN, tail call into ddos_next[0]
 *                       (feature extraction), the chain's next stage if it
 *                       is empty;
 *   PARSE_NOT_IP      → DDOS_PASS_NOT_IP, passed (ARP, LLDP, ... must flow);
 *   PARSE_TRUNCATED   → DDOS_DROP_TRUNCATED     } XDP_DROP, or XDP_PASS with
 *   PARSE_BAD_HEADER  → DDOS_DROP_BAD_HEADER    } DDOS_PASS_MALFORMED when
 *   PARSE_TOO_DEEP    → DDOS_DROP_TOO_DEEP      } loaded with pass_malformed.
 *   a tunnel (pi.encap: GRE, IP in IP, VXLAN, Geneve, MPLS without IP)
 *                     → DDOS_PASS_ENCAP_<kind>, then on as a clean packet
 *                       (MPLS without IP: XDP_PASS); or DDOS_DROP_ENCAP,
 *                       XDP_DROP when loaded with drop_encap.
 *
 * Malformed frames are dropped by default: the stack would discard the
 * truncated and impossible ones anyway, and frames hiding their L4 header
 * behind more tags or extension headers than we walk are a classic way
 * around filters. A blacklisted source is dropped as blacklisted even when
 * the rest of its frame is malformed, and a policed one over its rate as
 * policed (under its rate, its packet is judged like any other).
 *
 * "Passed" is the chain's next stage (common/chain.h), XDP_PASS alone.
 */
#include "common/parse.h"
#include "common/chain.h"
#include "ddos/abi.h"

_Static_assert(DDOS_PASS_ENCAP_MPLS - DDOS_PASS_ENCAP_GRE == PARSE_ENCAP_MPLS - PARSE_ENCAP_GRE &&
		       DDOS_PASS_ENCAP_GRE + PARSE_ENCAP_MAX - 1 == DDOS_PASS_REASON_MAX,
	       "one pass reason per enum parse_encap, in its order");

const volatile struct ddos_filter_config ddos_filter_cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_filter_ctl);
} ddos_ctl SEC(".maps");

/* Both exact IPv4 tables; max_entries (2 × cap_buckets) is set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_bl4_bucket);
} ddos_bl4_keys SEC(".maps");

/* Entry id of each slot of ddos_bl4_keys, same layout. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_bl4_bucket);
} ddos_bl4_ids SEC(".maps");

/* Per-entry counters and expiry, by entry id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_counter);
} ddos_counters SEC(".maps");

/* What each entry id stands for; read and written by userspace only. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ddos_entry_meta);
} ddos_meta SEC(".maps");

/* Exact IPv6 sources → entry id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct ddos_addr6);
	__type(value, __u32);
} ddos_bl6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ddos_lpm4_key);
	__type(value, __u32);
} ddos_lpm4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ddos_lpm6_key);
	__type(value, __u32);
} ddos_lpm6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ddos_filter_stats);
} ddos_fstats SEC(".maps");

/*
 * Policed sources: one token bucket per source (ddos/abi.h), pinned with
 * the blacklist so a daemon restart keeps it.
 *
 * Concurrency: one bucket shared by every CPU, updated under its
 * bpf_spin_lock. Per-CPU buckets would have to split a source's rate
 * between CPUs, and RSS spreads one source's flows unevenly (often all on
 * one CPU): a share of rate/ncpu each starves a source whose packets land
 * on one CPU, a full rate each lets ncpu times the rate through. A
 * lock-free bucket needs a compare-and-swap retry loop over two fields
 * (tokens, last_ns) that do not fit one word. The locked section is a
 * dozen instructions, and it is contended only when one source's packets
 * reach several CPUs at the same instant: rare, and cheap when it happens.
 * A packet the bucket clearly cannot take is dropped after an unlocked
 * look (bucket_over), so a source far over its rate mostly skips the lock.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DDOS_POLICE_MAX);
	__type(key, struct ddos_police_key);
	__type(value, struct ddos_police_val);
} ddos_police SEC(".maps");

/* The next stage (feature extraction) at index 0. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ddos_next SEC(".maps");

/* Evidence (see ddos/abi.h): the victims marked, the switch, the ring. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DDOS_CAPTURE_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ddos_capture_key);
	__type(value, struct ddos_capture_val);
} ddos_capture SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ddos_capture_ctl);
} ddos_capctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, DDOS_EVIDENCE_RING);
} ddos_evidence SEC(".maps");

/* Never read: it puts the ring's record type into the object's BTF, where
 * Rust's type for it comes from (a ring buffer map names no value type). */
const volatile struct ddos_evidence_rec ddos_evidence_rec_btf = {};

enum match_kind {
	MATCH_NONE = 0,
	MATCH_EXACT = 1,
	MATCH_PREFIX = 2,
};

/* 1 in 2^sample_shift: should this match update its entry's counter? */
static __always_inline int sample(struct ddos_filter_stats *st)
{
	__u32 x = st->rng;

	if (!ddos_filter_cfg.sample_shift)
		return 1;
	if (unlikely(!x))
		x = 0x9e3779b9u ^ bpf_get_smp_processor_id();
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	st->rng = x;
	return (x & ((1u << ddos_filter_cfg.sample_shift) - 1)) == 0;
}

static __always_inline void count_entry(struct ddos_counter *c, __u64 len)
{
	__u32 k = ddos_filter_cfg.sample_shift;

	__sync_fetch_and_add(&c->packets, 1ull << k);
	__sync_fetch_and_add(&c->bytes, len << k);
}

static __always_inline int expired(const struct ddos_counter *c)
{
	__u64 exp = c->expires_ns;

	return exp && bpf_ktime_get_boot_ns() >= exp;
}

/* Where a key sits: slot index and the table's first element. */
struct bl4_pos {
	__u32 slot;
	__u32 base;
	__u32 narrow;
};

/* Exact IPv4 lookup in the active compact table (wide or narrow, see ddos.h). */
static __always_inline int bl4_find(const struct ddos_filter_ctl *ctl, __u32 key, struct bl4_pos *p)
{
	const struct ddos_bl4_table *t = &ctl->tab[ctl->active & 1];
	__u32 mask = t->mask, max_dist = t->max_dist, base = t->base, shift = t->shift;
	__u32 h = key * t->mult, home;
	int i;

	if (!t->count)
		return 0;
	h ^= h >> 16;
	h *= DDOS_BL4_MIX;
	home = h >> (shift & 31);
	p->base = base;
	if (shift & DDOS_BL4_NARROW) {
		__u32 want = DDOS_BL4_N_USED | (h & ((1u << (shift & 31)) - 1));

		p->narrow = 1;
#pragma unroll
		for (i = 0; i < DDOS_BL4_MAX_PROBES; i++) {
			__u32 s = (home + i) & mask;
			__u32 e = base + s / DDOS_BL4_N_SLOTS_PER_BUCKET;
			struct ddos_bl4_bucket *b;
			__u16 v;

			if (i > max_dist)
				return 0;
			b = bpf_map_lookup_elem(&ddos_bl4_keys, &e);
			if (!b)
				return 0;
			v = ((__u16 *)b->slot)[s & (DDOS_BL4_N_SLOTS_PER_BUCKET - 1)];
			if (v == (want | ((__u32)i << 11))) {
				p->slot = s;
				return 1;
			}
			if (v == DDOS_BL4_N_EMPTY)
				return 0;
		}
		return 0;
	}
	p->narrow = 0;
#pragma unroll
	for (i = 0; i < DDOS_BL4_MAX_PROBES; i++) {
		__u32 s = (home + i) & mask;
		__u32 e = base + (s / DDOS_BL4_SLOTS_PER_BUCKET);
		struct ddos_bl4_bucket *b;
		__u32 k;

		if (i > max_dist)
			return 0;
		b = bpf_map_lookup_elem(&ddos_bl4_keys, &e);
		if (!b)
			return 0;
		k = b->slot[s & (DDOS_BL4_SLOTS_PER_BUCKET - 1)];
		if (k == key) {
			p->slot = s;
			return 1;
		}
		if (k == DDOS_BL4_EMPTY)
			return 0;
	}
	return 0;
}

/* Retire the slot at p in place: later packets from its source miss it. */
static __always_inline void bl4_retire(const struct bl4_pos *p)
{
	struct ddos_bl4_bucket *keys;
	__u32 e;

	if (p->narrow) {
		e = p->base + p->slot / DDOS_BL4_N_SLOTS_PER_BUCKET;
		keys = bpf_map_lookup_elem(&ddos_bl4_keys, &e);
		if (keys)
			((__u16 *)keys->slot)[p->slot & (DDOS_BL4_N_SLOTS_PER_BUCKET - 1)] = DDOS_BL4_N_TOMBSTONE;
		return;
	}
	e = p->base + p->slot / DDOS_BL4_SLOTS_PER_BUCKET;
	keys = bpf_map_lookup_elem(&ddos_bl4_keys, &e);
	if (keys)
		keys->slot[p->slot & (DDOS_BL4_SLOTS_PER_BUCKET - 1)] = DDOS_BL4_TOMBSTONE;
}

static __always_inline int match_v4(const struct ddos_filter_ctl *ctl, struct ddos_filter_stats *st, __u32 saddr,
				    __u64 len)
{
	struct bl4_pos p;
	__u32 *id;

	if (saddr != DDOS_BL4_EMPTY && saddr != DDOS_BL4_TOMBSTONE && bl4_find(ctl, saddr, &p)) {
		struct ddos_bl4_bucket *ids;
		struct ddos_counter *c;
		__u32 elem;

		if (!sample(st))
			return MATCH_EXACT;
		st->sampled++;
		elem = p.base + p.slot / DDOS_BL4_SLOTS_PER_BUCKET;
		ids = bpf_map_lookup_elem(&ddos_bl4_ids, &elem);
		if (!ids)
			return MATCH_EXACT;
		c = bpf_map_lookup_elem(&ddos_counters, &ids->slot[p.slot & (DDOS_BL4_SLOTS_PER_BUCKET - 1)]);
		if (!c)
			return MATCH_EXACT;
		if (!expired(c)) {
			count_entry(c, len);
			return MATCH_EXACT;
		}
		bl4_retire(&p);
		st->expired++;
	}
	if (ctl->n_prefix4) {
		struct ddos_lpm4_key k = { .prefixlen = 32, .addr = saddr };
		struct ddos_counter *c;

		id = bpf_map_lookup_elem(&ddos_lpm4, &k);
		if (id) {
			c = bpf_map_lookup_elem(&ddos_counters, id);
			/* Prefix entries are checked for expiry on every match (no in-place retirement). */
			if (c && !expired(c)) {
				if (sample(st)) {
					st->sampled++;
					count_entry(c, len);
				}
				return MATCH_PREFIX;
			}
		}
	}
	return MATCH_NONE;
}

static __always_inline int match_id(__u32 *id, struct ddos_filter_stats *st, __u64 len)
{
	struct ddos_counter *c;

	if (!id)
		return 0;
	c = bpf_map_lookup_elem(&ddos_counters, id);
	if (!c || expired(c))
		return 0;
	if (sample(st)) {
		st->sampled++;
		count_entry(c, len);
	}
	return 1;
}

static __always_inline int match_v6(const struct ddos_filter_ctl *ctl, struct ddos_filter_stats *st,
				    const __u32 *saddr, __u64 len)
{
	if (ctl->n_exact6) {
		struct ddos_addr6 a;

		__builtin_memcpy(a.addr, saddr, 16);
		if (match_id(bpf_map_lookup_elem(&ddos_bl6, &a), st, len))
			return MATCH_EXACT;
	}
	if (ctl->n_prefix6) {
		struct ddos_lpm6_key k = { .prefixlen = 128 };

		__builtin_memcpy(k.addr, saddr, 16);
		if (match_id(bpf_map_lookup_elem(&ddos_lpm6, &k), st, len))
			return MATCH_PREFIX;
	}
	return MATCH_NONE;
}

/* The bucket's content `elapsed` ns after it held `tokens`, at most full. */
static __always_inline __u64 refill(const struct ddos_police_val *v, __u64 tokens, __u64 elapsed, __u32 rate)
{
	__u64 full = (__u64)v->burst * DDOS_POLICE_NS;

	if (elapsed > DDOS_POLICE_IDLE_MAX_NS)
		elapsed = DDOS_POLICE_IDLE_MAX_NS;
	tokens += elapsed * rate;
	return tokens > full ? full : tokens;
}

/*
 * Is `v` over its rate? Refill the bucket for the time since the last
 * packet, then take one packet's worth of tokens or count a drop.
 */
static __always_inline int bucket_over(struct ddos_police_val *v)
{
	/* Read before the lock: no helper calls while it is held. */
	__u64 now = bpf_ktime_get_ns();
	__u64 last, tokens;
	int over;

	/*
	 * An unlocked look first, for the packets of a source far over its
	 * rate (most of them are dropped): a bucket that cannot hold one
	 * packet even with the refill since last_ns is dropped without
	 * taking the lock. The locked section below stores tokens before
	 * last_ns and this reads last_ns before tokens, so where stores and
	 * loads keep their order (x86) a newer last_ns always comes with its
	 * tokens and this look never sees less than the bucket holds;
	 * elsewhere it may, rarely, drop a packet the bucket had just made
	 * room for.
	 */
	last = *(volatile __u64 *)&v->last_ns;
	tokens = *(volatile __u64 *)&v->tokens;
	if (refill(v, tokens, now > last ? now - last : 0, *(volatile __u32 *)&v->rate_pps) < DDOS_POLICE_NS) {
		__sync_fetch_and_add(&v->dropped, 1);
		return 1;
	}

	bpf_spin_lock(&v->lock);
	/* Another CPU may have refilled with a later `now` already. */
	last = v->last_ns;
	tokens = refill(v, v->tokens, now > last ? now - last : 0, v->rate_pps);
	over = tokens < DDOS_POLICE_NS;
	if (over)
		__sync_fetch_and_add(&v->dropped, 1);
	else {
		tokens -= DDOS_POLICE_NS;
		v->passed++;
	}
	/* tokens, then last_ns: the order the unlocked look relies on. */
	*(volatile __u64 *)&v->tokens = tokens;
	if (now > last)
		*(volatile __u64 *)&v->last_ns = now;
	bpf_spin_unlock(&v->lock);
	return over;
}

/* The DDOS_POLICE_* classes of a parsed packet (0 for a malformed one:
 * only entries that police every packet take it). */
static __always_inline __u32 police_class(const struct pkt_info *pi, int status)
{
	__u32 c = 0;

	if (status != PARSE_OK)
		return 0;
	if (pi->frag != FRAG_NONE)
		c |= DDOS_POLICE_FRAG;
	if (pi->l4_proto == IPPROTO_UDP)
		c |= DDOS_POLICE_UDP;
	else if (pi->l4_proto == IPPROTO_ICMP || pi->l4_proto == IPPROTO_ICMPV6)
		c |= DDOS_POLICE_ICMP;
	else if (pi->l4_proto == IPPROTO_TCP && pi->frag != FRAG_LATER &&
		 (pi->tcp_flags & 0x12) == 0x02)
		c |= DDOS_POLICE_SYN;
	return c;
}

/* Does the entry `v` police a packet of classes `cls`, and is it over its rate? */
static __always_inline int police_over(struct ddos_police_val *v, __u32 cls)
{
	/* (Written by userspace only when the entry is created.) */
	__u32 want = *(volatile __u32 *)&v->classes;

	if (want && !(want & cls))
		return 0;
	return bucket_over(v);
}

/* Is the IPv4 source `saddr` policed for packets of `cls`, and over its rate? */
static __always_inline int police_v4(__u32 saddr, __u32 cls)
{
	struct ddos_police_key k = { .family = 4, .addr = { saddr } };
	struct ddos_police_val *v = bpf_map_lookup_elem(&ddos_police, &k);

	return v && police_over(v, cls);
}

/* Is the IPv6 source `saddr` policed for packets of `cls`, and over its rate? */
static __always_inline int police_v6(const __u32 *saddr, __u32 cls)
{
	struct ddos_police_key k = { .family = 6 };
	struct ddos_police_val *v;

	__builtin_memcpy(k.addr, saddr, 16);
	v = bpf_map_lookup_elem(&ddos_police, &k);
	return v && police_over(v, cls);
}

/*
 * May the IPv4 address be a marked victim (its bit in v4_bits)? While
 * evidence is armed, a multiply and a test instead of a hash lookup for
 * every packet — and, for a blocked source's, instead of the full parse.
 */
static __always_inline int victim_maybe_marked4(const struct ddos_capture_ctl *cc, __u32 daddr)
{
	return cc->v4_bits & (1u << ((daddr * DDOS_CAPTURE_HASH_MUL) >> DDOS_CAPTURE_HASH_SHIFT));
}

/*
 * Evidence: is the packet of an attack marked in ddos_capture, and is it
 * one to keep (the first `first`, then 1 in `every`)? Then copy its first
 * DDOS_CAPTURE_SNAPLEN bytes into ddos_evidence.
 */
static __always_inline int capture(struct xdp_md *ctx, const struct ddos_capture_ctl *cc,
				   const struct pkt_info *pi, int status)
{
	struct ddos_capture_key k = { .family = pi->family };
	struct ddos_capture_val *v;
	struct ddos_evidence_rec *r;
	__u64 n, len, cap;

	if (pi->family == 4) {
		if (!victim_maybe_marked4(cc, pi->daddr[0]))
			return 0;
		k.prefixlen = DDOS_CAPTURE_FAMILY_BITS + 32;
		k.addr[0] = pi->daddr[0];
	} else if (pi->family == 6) {
		k.prefixlen = DDOS_CAPTURE_FAMILY_BITS + 128;
		__builtin_memcpy(k.addr, pi->daddr, 16);
	} else {
		return 0;
	}
	v = bpf_map_lookup_elem(&ddos_capture, &k);
	if (!v)
		return 0;
	if (v->classes && !(v->classes & police_class(pi, status)))
		return 0;
	if (v->sport && (status != PARSE_OK || pi->sport != v->sport))
		return 0;
	n = __sync_fetch_and_add(&v->seen, 1);
	if (n >= v->first && (!v->every || (n - v->first) % v->every))
		return 0;
	r = bpf_ringbuf_reserve(&ddos_evidence, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&v->ring_full, 1);
		return 0;
	}
	len = ctx->data_end - ctx->data;
	/* Opaque before it is bounded: clang would otherwise hand the helper
	 * `len` itself (equal where it is short), unbounded for the verifier. */
	cap = len;
	barrier_var(cap);
	if (cap > DDOS_CAPTURE_SNAPLEN)
		cap = DDOS_CAPTURE_SNAPLEN;
	r->id = v->id;
	r->len = len;
	r->_pad = 0;
	r->ts_ns = bpf_ktime_get_ns();
	if (cap < 1 || bpf_xdp_load_bytes(ctx, 0, r->data, cap))
		cap = 0;
	r->caplen = cap;
	bpf_ringbuf_submit(r, 0);
	__sync_fetch_and_add(&v->sampled, 1);
	return 0;
}

/*
 * The flood fast path: an untagged IPv4 frame whose header passes the same
 * checks parse_ipv4() makes before it trusts the source (version 4, IHL ≥ 5,
 * the whole header inside the frame, total length ≥ header length). Such a
 * frame's source is looked up before the full parse, so a blacklisted
 * source costs no L4 parsing. Everything else takes the full parse first.
 */
static __always_inline int quick_src4(void *data, void *data_end, __u32 *saddr, __u32 *daddr)
{
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	__u32 hlen;

	if ((void *)(iph + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	if (iph->version != 4 || iph->ihl < 5)
		return 0;
	hlen = iph->ihl * 4;
	if ((void *)iph + hlen > data_end || bpf_ntohs(iph->tot_len) < hlen)
		return 0;
	*saddr = iph->saddr;
	*daddr = iph->daddr;
	return 1;
}

static __always_inline void bump(struct ddos_pkt_counter *c, __u64 len)
{
	c->packets++;
	c->bytes += len;
}

SEC("xdp")
int xdp_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct ddos_filter_stats *st;
	struct ddos_filter_ctl *ctl;
	struct ddos_capture_ctl *cc;
	struct pkt_info pi;
	__u32 zero = 0, saddr, daddr, capturing;
	int status, m = MATCH_NONE, checked4 = 0;

	st = bpf_map_lookup_elem(&ddos_fstats, &zero);
	ctl = bpf_map_lookup_elem(&ddos_ctl, &zero);
	cc = bpf_map_lookup_elem(&ddos_capctl, &zero);
	if (!st || !ctl || !cc)
		return XDP_ABORTED;
	/* Evidence of an attack in progress needs the parse even for blocked sources. */
	capturing = cc->n_active;

	if (quick_src4(data, data_end, &saddr, &daddr)) {
		m = match_v4(ctl, st, saddr, len);
		checked4 = 1;
		if (m != MATCH_NONE && (likely(!capturing) || !victim_maybe_marked4(cc, daddr)))
			goto drop;
	}
	if (checked4)
		status = parse_packet_ipv4(data, data_end, &pi);
	else
		status = parse_packet_lim(data, data_end, &pi, ddos_filter_cfg.limits.max_vlans,
					  ddos_filter_cfg.limits.max_v6_ext, ddos_filter_cfg.limits.shims);
	if (pi.family == 4 && !checked4)
		m = match_v4(ctl, st, pi.saddr[0], len);
	else if (pi.family == 6)
		m = match_v6(ctl, st, pi.saddr, len);
	if (unlikely(capturing))
		capture(ctx, cc, &pi, status);
drop:
	if (m == MATCH_EXACT) {
		bump(&st->drop[DDOS_DROP_BLACKLIST], len);
		return XDP_DROP;
	}
	if (m == MATCH_PREFIX) {
		bump(&st->drop[DDOS_DROP_BLACKLIST_PREFIX], len);
		return XDP_DROP;
	}
	/* Policing needs the parse: an entry may police only some classes. */
	if (ctl->n_police) {
		__u32 cls = police_class(&pi, status);

		if (pi.family == 4 && police_v4(pi.saddr[0], cls))
			goto policed;
		if (pi.family == 6 && police_v6(pi.saddr, cls))
			goto policed;
	}

	if (unlikely(pi.encap) && (status == PARSE_OK || status == PARSE_NOT_IP)) {
		__u32 k = pi.encap;

		if (ddos_filter_cfg.drop_encap) {
			bump(&st->drop[DDOS_DROP_ENCAP], len);
			return XDP_DROP;
		}
		if (k >= PARSE_ENCAP_MAX)
			return XDP_ABORTED;
		bump(&st->pass[DDOS_PASS_ENCAP_GRE + k - PARSE_ENCAP_GRE], len);
		if (status == PARSE_NOT_IP)
			return chain_next(ctx, CHAIN_SLOT_DDOS);
		goto next;
	}

	switch (status) {
	case PARSE_OK:
		break;
	case PARSE_NOT_IP:
		bump(&st->pass[DDOS_PASS_NOT_IP], len);
		return chain_next(ctx, CHAIN_SLOT_DDOS);
	default:
		if (ddos_filter_cfg.pass_malformed) {
			bump(&st->pass[DDOS_PASS_MALFORMED], len);
			return chain_next(ctx, CHAIN_SLOT_DDOS);
		}
		if (status == PARSE_TRUNCATED)
			bump(&st->drop[DDOS_DROP_TRUNCATED], len);
		else if (status == PARSE_BAD_HEADER)
			bump(&st->drop[DDOS_DROP_BAD_HEADER], len);
		else
			bump(&st->drop[DDOS_DROP_TOO_DEEP], len);
		return XDP_DROP;
	}

	bump(&st->pass[DDOS_PASS_CLEAN], len);
next:
	bpf_tail_call(ctx, &ddos_next, 0);
	st->no_next_stage++;
	return chain_next(ctx, CHAIN_SLOT_DDOS);
policed:
	bump(&st->drop[DDOS_DROP_POLICED], len);
	return XDP_DROP;
}

RAMPART_LICENSE;
