// expect: refused: bpf_probe_read_kernel
/* Reading kernel memory through a helper outside the allow-list. */
#include "rampart_tenant.h"

int tenant_main(struct xdp_md *ctx)
{
	long (*read_kernel)(void *, __u32, const void *) = (void *)113;
	char buf[8];

	read_kernel(buf, sizeof(buf), (void *)ctx);
	return buf[0] ? XDP_PASS : XDP_DROP;
}
