// expect: verifier: invalid access to packet
/* Reading past the packet (into whatever follows it). */
#include "rampart_tenant.h"

int tenant_main(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;

	return p[2000] ? XDP_PASS : XDP_DROP;
}
