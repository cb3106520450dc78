// expect: compile: poisoned
/* The same loop written plainly: the API header stops it at compile time. */
#include "rampart_tenant.h"

int tenant_main(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, 0, 0);
	return XDP_PASS;
}
