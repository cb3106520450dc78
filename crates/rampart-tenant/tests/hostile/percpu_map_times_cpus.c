// expect: refused: more than the budget
/* A per-CPU array whose one copy fits the budget but whose copies on every
 * CPU do not: a per-CPU value costs value_size on each possible CPU.
 * 40 MB per CPU, the test's budget is 64 MB and the machine has 2+ CPUs. */
#include "rampart_tenant.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 40960);
	__type(key, __u32);
	__type(value, char[1024]);
} per_cpu SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(&per_cpu, &k) ? XDP_PASS : XDP_DROP;
}
