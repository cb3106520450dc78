// expect: refused: extern symbol
/* Another tenant's map by name: an extern the static linker would resolve. */
#include "rampart_tenant.h"

extern struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&counts, &k);

	if (v)
		*v = 0;
	return XDP_PASS;
}
