/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The XDP chain: several applications' programs on one interface.
 *
 * The interface runs one entry point (xdp_chain.bpf.c) and owns one
 * program array, rampart_chain, with a slot per stage (enum chain_slot in
 * common/abi.h). Each stage program includes this header; its loader
 * makes the object's rampart_chain the interface's array (libbpf map
 * reuse) before load. A stage that passes a frame calls chain_next() with
 * its own slot: the slots after it are tried in order — a tail call into
 * an empty slot fails at once and the next is tried, so a disabled stage
 * costs a failed tail call (a few ns) — and past the last, XDP_PASS.
 *
 * Adding, replacing or removing a stage is one update of its slot, atomic
 * for the packets: each packet sees the old program or the new one, and
 * nothing is re-attached. A stage loaded alone (its own command on an
 * interface) has an array of its own that nobody fills: it is simply the
 * only stage.
 */
#ifndef RAMPART_COMMON_CHAIN_H
#define RAMPART_COMMON_CHAIN_H

#include "common/common.h"
#include "common/abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, CHAIN_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} rampart_chain SEC(".maps");

/* Run the first installed stage from slot `first` on; XDP_PASS when none is. */
static __always_inline int chain_from(struct xdp_md *ctx, __u32 first)
{
#pragma unroll
	for (__u32 i = 0; i < CHAIN_SLOTS; i++)
		if (i >= first)
			bpf_tail_call(ctx, &rampart_chain, i);
	return XDP_PASS;
}

/* The frame passed stage `self`: on to the next installed stage. */
static __always_inline int chain_next(struct xdp_md *ctx, __u32 self)
{
	return chain_from(ctx, self + 1);
}

#endif /* RAMPART_COMMON_CHAIN_H */
