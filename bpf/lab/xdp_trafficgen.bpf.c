// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Lab traffic generator.
 *
 * Run by userspace with BPF_PROG_RUN and BPF_F_TEST_XDP_LIVE_FRAMES on the
 * `wan` veth: every repetition gets a fresh copy of a template frame built
 * in userspace (right lengths and checksums for source index 0); this
 * program picks the next source index from a pre-shuffled schedule whose
 * per-source share follows the requested distribution, writes the source
 * address, fixes both checksums from partial sums, and returns XDP_TX, which
 * live-frames mode turns into a transmit out of the veth. Optionally it also
 * draws the low bits of the destination (carpet bombing over a prefix) and
 * the TCP sequence number (out-of-state floods) at random per packet.
 *
 * Nothing is carried in the frame from one repetition to the next. The
 * kernel fills a page with the template only when its page pool allocates
 * it; a recycled page keeps whatever was written into it last, and that is
 * not always us: a transmitted frame travels by reference through the
 * veths, so an XDP program on the receiving side that rewrites frames in
 * place (a SYN answered with a SYN-ACK by XDP_TX) hands the page back to
 * this pool changed. So the template's headers are written back first, and
 * every varying byte is written absolutely.
 */
#include "common/common.h"
#include "common/csum.h"
#include "lab/abi.h"

const volatile struct gen_config gen_cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GEN_ELEMS_MAX);
	__type(key, __u32);
	__type(value, struct gen_slots);
} gen_schedule SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_cpu_state);
} gen_state SEC(".maps");

static __always_inline int write_l4_csum(void *data, void *data_end, __u32 sum)
{
	__u32 off = gen_cfg.l4_csum_off;
	__u16 *check;
	__u16 folded;

	if (!off)
		return 0;
	off &= 0xff;
	check = data + off;
	if ((void *)(check + 1) > data_end)
		return -1;
	folded = csum_fold32(sum);
	if (gen_cfg.l4_is_udp && folded == 0)
		folded = 0xffff;
	*check = folded;
	return 0;
}

/* Replace 32-bit word `from` by `to` in an unfolded sum (RFC 1624). */
static __always_inline __u32 csum_replace_sum(__u32 sum, __u32 from, __u32 to)
{
	return csum_add_word32(csum_add_word32(sum, ~from), to);
}

/* The destination word `w` (as stored) with its dst_mask bits drawn at random. */
static __always_inline __u32 spread(__u32 w)
{
	__u32 m = gen_cfg.dst_mask;

	return bpf_htonl((bpf_ntohl(w) & ~m) | (bpf_get_prandom_u32() & m));
}

SEC("xdp")
int xdp_trafficgen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct gen_cpu_state *st;
	struct gen_slots *slots;
	__u32 zero = 0, slot, elem, idx, sum, n;

	n = gen_cfg.hdr_len;
	if (n < 1 || n > GEN_HDR_MAX)
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, (void *)gen_cfg.hdr, n))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;

	st = bpf_map_lookup_elem(&gen_state, &zero);
	if (!st)
		return XDP_ABORTED;
	slot = (__u32)st->pos & gen_cfg.slot_mask;
	st->pos++;
	elem = slot / GEN_SLOTS_PER_ELEM;
	slots = bpf_map_lookup_elem(&gen_schedule, &elem);
	if (!slots)
		return XDP_ABORTED;
	idx = slots->idx[slot & (GEN_SLOTS_PER_ELEM - 1)];

	if (gen_cfg.family == GEN_FAMILY_V4) {
		struct iphdr *iph = data + sizeof(struct ethhdr);
		__u32 saddr, ip_sum;

		if ((void *)(iph + 1) > data_end)
			return XDP_ABORTED;
		saddr = bpf_htonl(gen_cfg.src4_base + idx);
		iph->saddr = saddr;
		ip_sum = csum_add_word32(gen_cfg.ip_sum_nosrc, saddr);
		sum = csum_add_word32(gen_cfg.l4_sum_nosrc, saddr);
		if (gen_cfg.dst_mask) {
			__u32 old = iph->daddr;
			__u32 new = spread(old);

			iph->daddr = new;
			ip_sum = csum_replace_sum(ip_sum, old, new);
			sum = csum_replace_sum(sum, old, new);
		}
		iph->check = csum_fold32(ip_sum);
	} else {
		struct ipv6hdr *ip6h = data + sizeof(struct ethhdr);
		__u32 lo;

		if ((void *)(ip6h + 1) > data_end)
			return XDP_ABORTED;
		lo = bpf_htonl(gen_cfg.src6_lo_base + idx);
		ip6h->saddr.in6_u.u6_addr32[0] = gen_cfg.src6_hi[0];
		ip6h->saddr.in6_u.u6_addr32[1] = gen_cfg.src6_hi[1];
		ip6h->saddr.in6_u.u6_addr32[2] = gen_cfg.src6_hi[2];
		ip6h->saddr.in6_u.u6_addr32[3] = lo;
		sum = csum_add_word32(gen_cfg.l4_sum_nosrc, gen_cfg.src6_hi[0]);
		sum = csum_add_word32(sum, gen_cfg.src6_hi[1]);
		sum = csum_add_word32(sum, gen_cfg.src6_hi[2]);
		sum = csum_add_word32(sum, lo);
		if (gen_cfg.dst_mask) {
			__u32 old = ip6h->daddr.in6_u.u6_addr32[3];
			__u32 new = spread(old);

			ip6h->daddr.in6_u.u6_addr32[3] = new;
			sum = csum_replace_sum(sum, old, new);
		}
	}
	if (gen_cfg.seq_off) {
		__u32 *seq = data + (gen_cfg.seq_off & 0xff);
		__u32 old, new;

		if ((void *)(seq + 1) > data_end)
			return XDP_ABORTED;
		old = *seq;
		new = bpf_get_prandom_u32();
		*seq = new;
		sum = csum_replace_sum(sum, old, new);
	}
	if (write_l4_csum(data, data_end, sum))
		return XDP_ABORTED;
	return XDP_TX;
}

RAMPART_LICENSE;
