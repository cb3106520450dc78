// expect: refused: belong to the infrastructure
/* Defining one of the infrastructure's shared maps to shadow it. */
#include "rampart_tenant.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} rampart_t_used SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	__u32 k = 1;
	__u64 *v = bpf_map_lookup_elem(&rampart_t_used, &k);

	if (v)
		*v = 0;
	return XDP_PASS;
}
