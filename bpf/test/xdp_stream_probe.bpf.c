// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test harness for stream/tuple.h: parses the frame into a struct
 * stream_tuple, computes the FlowID in every key mode and stores the
 * results in `stream_probe_out` (key 0). Never attached; run only with
 * BPF_PROG_RUN by crates/rampart-stream/tests/prog_stream_tuple.rs, which
 * compares it with the userspace parser. It is also what puts
 * struct stream_tuple into BTF, so Rust gets the type from the skeleton.
 */
#include "stream/tuple.h"

struct stream_probe_out {
	/* Index = enum stream_key_mode (0: no FlowID). */
	struct stream_tuple t[4];
	__u32 status;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stream_probe_out);
} stream_probe_out SEC(".maps");

SEC("xdp")
int xdp_stream_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct stream_probe_out *out = bpf_map_lookup_elem(&stream_probe_out, &zero);
	int i;

	if (!out)
		return XDP_ABORTED;
	out->status = stream_tuple_from_frame(data, data_end, 0, &out->t[0]);
#pragma unroll
	for (i = 1; i < 4; i++) {
		out->t[i] = out->t[0];
		if (out->status == PARSE_OK)
			stream_flow_id(&out->t[i], i);
	}
	return XDP_PASS;
}

RAMPART_LICENSE;
