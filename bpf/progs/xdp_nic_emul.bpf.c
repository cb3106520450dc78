// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * EMULATED SmartNIC (lab only).
 *
 * Attached to both veths of the lab's `nic` namespace, it makes that hop
 * behave like a NIC between the wire (`wan`) and the host: a transparent
 * L2 bump that forwards every frame to the other side with XDP_REDIRECT.
 *
 * It keeps no counters of its own: the veth driver already counts the
 * frames its XDP program saw per queue (`ethtool -S nic-wan`,
 * rx_queue_<n>_xdp_packets), and a per-packet counter here cost ~10% of
 * the lab's generator ceiling (measured).
 */
#include "../lib/common.h"
#include "../shared/lab.h"

/*
 * ifindexes of the two nic veths, set at load. bpf_redirect() measured
 * ~5% faster here than a DEVMAP_HASH lookup; both bulk-transmit.
 */
const volatile __u32 nic_wan_ifindex = 0;
const volatile __u32 nic_host_ifindex = 0;

SEC("xdp")
int xdp_nic_emul(struct xdp_md *ctx)
{
	__u32 to = ctx->ingress_ifindex == nic_wan_ifindex ? nic_host_ifindex : nic_wan_ifindex;
	return bpf_redirect(to, 0);
}

RAMPART_LICENSE;
