// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Mixed traffic for the tenant experiments: like xdp_tenant_gen
 * (BPF_PROG_RUN live frames on the lab's `wan` veth, XDP_TX through the
 * EMULATED NIC to the host), but every slot of the round robin has a whole
 * frame of its own — any protocol, any destination — so one generator
 * thread interleaves e.g. a SYN flood at tenant 1, a DNS flood at tenant 2
 * and a mix of UDP / TCP ACK / ICMP at tenant 3. All frames have the same
 * length (shorter ones carry Ethernet trailer padding, which IP ignores);
 * each is written whole over the live frame and counted per slot.
 */
#include "common/common.h"
#include "lab/abi.h"

const volatile struct tmix_config tmix_cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tmix_cpu_state);
} tmix_state SEC(".maps");

SEC("xdp")
int xdp_tenant_mix(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tmix_cpu_state *st;
	__u32 zero = 0, slot, i;

	st = bpf_map_lookup_elem(&tmix_state, &zero);
	if (!st || tmix_cfg.n_slot == 0)
		return XDP_ABORTED;
	slot = (__u32)(st->pos % tmix_cfg.n_slot);
	st->pos++;
	if (slot >= TMIX_MAX_SLOT)
		return XDP_ABORTED;
	for (i = 0; i < TMIX_MAX_LEN / 8; i++) {
		__u64 *w = data + i * 8;

		if (i * 8 >= tmix_cfg.len || (void *)(w + 1) > data_end)
			break;
		*w = tmix_cfg.tpl[slot][i];
	}
	st->sent[slot]++;
	return XDP_TX;
}

RAMPART_LICENSE;
