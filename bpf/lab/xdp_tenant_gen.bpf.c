// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Traffic for the tenant experiments: run with BPF_PROG_RUN live frames on
 * the lab's `wan` veth like the lab generator, but spreading frames round
 * robin over several destinations (one per tenant) so that one generator
 * thread floods every tenant with interleaved packets. Per frame the
 * destination address and the precomputed IPv4 and L4 checksums for it
 * are written, and the frame is counted per destination.
 */
#include "common/common.h"
#include "lab/abi.h"

const volatile struct tgen_config tgen_cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tgen_cpu_state);
} tgen_state SEC(".maps");

SEC("xdp")
int xdp_tenant_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + sizeof(struct ethhdr);
	struct tgen_cpu_state *st;
	__u32 zero = 0, i, n;

	n = tgen_cfg.hdr_len;
	/* A recycled page may come back rewritten by the receiver (an
	 * XDP_TX answer): the template's headers first. */
	if (n < 1 || n > GEN_HDR_MAX)
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, (void *)tgen_cfg.hdr, n))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	iph = data + sizeof(struct ethhdr);
	st = bpf_map_lookup_elem(&tgen_state, &zero);
	if (!st || tgen_cfg.n_dst == 0)
		return XDP_ABORTED;
	if ((void *)(iph + 1) > data_end)
		return XDP_ABORTED;
	i = (__u32)(st->pos % tgen_cfg.n_dst);
	st->pos++;
	if (i >= TGEN_MAX_DST)
		return XDP_ABORTED;
	iph->daddr = tgen_cfg.daddr[i];
	iph->check = tgen_cfg.ip_check[i];
	if (tgen_cfg.l4_csum_off) {
		__u16 *l4 = data + (tgen_cfg.l4_csum_off & 0xff);

		if ((void *)(l4 + 1) > data_end)
			return XDP_ABORTED;
		*l4 = tgen_cfg.l4_check[i];
	}
	st->sent[i]++;
	return XDP_TX;
}

RAMPART_LICENSE;
