// expect: refused: not allowed
/* An output channel to the host: a ring buffer map. */
#include "rampart_tenant.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} out SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(&out, &k) ? XDP_PASS : XDP_DROP;
}
