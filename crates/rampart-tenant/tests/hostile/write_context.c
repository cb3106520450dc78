// expect: verifier: invalid bpf_context access
/* Rewriting the context to point the infrastructure elsewhere. */
#include "rampart_tenant.h"

int tenant_main(struct xdp_md *ctx)
{
	ctx->ingress_ifindex = 1;
	return XDP_PASS;
}
