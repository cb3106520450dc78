// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test harness for common/parse.h: parses the frame with the limits in
 * rodata (parse_packet()'s defaults unless a test sets others), stores the
 * result and the pkt_info in `parse_out` (key 0), returns XDP_PASS. Never
 * attached; run only with BPF_PROG_RUN by the parse tests and the
 * differential fuzz target, so every parse path is checked in the kernel's
 * verifier and JIT exactly as programs use it.
 */
#include "common/parse.h"

const volatile struct parse_limits parse_probe_limits = {
	.max_vlans = PARSE_DEF_VLANS,
	.max_v6_ext = PARSE_DEF_V6_EXT,
};

struct parse_out {
	struct pkt_info info;
	__u32 status;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct parse_out);
} parse_out SEC(".maps");

SEC("xdp")
int xdp_parse_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct parse_out *out = bpf_map_lookup_elem(&parse_out, &zero);

	if (!out)
		return XDP_ABORTED;
	out->status = parse_packet_lim(data, data_end, &out->info, parse_probe_limits.max_vlans,
				       parse_probe_limits.max_v6_ext, parse_probe_limits.shims);
	return XDP_PASS;
}

RAMPART_LICENSE;
