// expect: refused: bpf_tail_call
/* An unbounded loop through tail calls into itself, calling the helper by
 * its number to get past the header's poisoned names. */
#include "rampart_tenant.h"

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} jmp SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	long (*tail_call)(void *, void *, __u32) = (void *)12;

	tail_call(ctx, &jmp, 0);
	return XDP_PASS;
}
