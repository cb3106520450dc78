// expect: refused: pinning
/* A pinned map: libbpf would open whatever is pinned under that name. */
#include "rampart_tenant.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counts SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(&counts, &k) ? XDP_PASS : XDP_DROP;
}
