// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Bare XDP_DROP: the ceiling every XDP drop benchmark is compared with.
 * It touches neither the packet nor a map; the veth driver still counts
 * what it drops per queue (`ethtool -S IF`, rx_queue_<n>_xdp_drops), which
 * is where benchmarks read its rate.
 */
#include "common/common.h"

SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

RAMPART_LICENSE;
