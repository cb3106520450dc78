// expect: refused: not allowed
/* A program array alone (no call yet): its map type is refused. */
#include "rampart_tenant.h"

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} progs SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(&progs, &k) ? XDP_PASS : XDP_DROP;
}
