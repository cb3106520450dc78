// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The "no offload" baseline of rampart stream: every frame goes whole to
 * the AF_XDP socket bound to the RX queue it arrived on, and userspace
 * parses it (crates/rampart-stream/src/source/afxdp.rs). A queue without
 * a socket passes frames to the stack, counted.
 */
#include "common/common.h"
#include "stream/abi.h"

/* Up to 64 RX queues. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} stream_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STREAM_RX_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stream_rx_stats SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&stream_rx_stats, &idx);

	if (c)
		*c += 1;
}

SEC("xdp")
int xdp_stream_rx(struct xdp_md *ctx)
{
	int act = bpf_redirect_map(&stream_xsks, ctx->rx_queue_index, XDP_PASS);

	count(act == XDP_REDIRECT ? STREAM_RX_REDIRECTED : STREAM_RX_NO_SOCKET);
	return act;
}

RAMPART_LICENSE;
