// expect: refused: more than the budget
/* One map far over the memory budget. */
#include "rampart_tenant.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 24);
	__type(key, __u64);
	__type(value, __u64);
} big SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	__u64 k = 0;

	return bpf_map_lookup_elem(&big, &k) ? XDP_PASS : XDP_DROP;
}
