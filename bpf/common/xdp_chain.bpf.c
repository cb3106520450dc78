// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The entry point of an interface's chain (common/chain.h): the program
 * attached to the interface, with the chain's program array as its own.
 * It runs the first installed stage; with none installed, XDP_PASS.
 */
#include "common/chain.h"

SEC("xdp")
int xdp_chain(struct xdp_md *ctx)
{
	return chain_from(ctx, 0);
}

RAMPART_LICENSE;
