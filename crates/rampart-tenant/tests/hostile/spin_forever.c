// expect: verifier: infinite loop
/* Spinning on the clock without a bound. */
#include "rampart_tenant.h"

int tenant_main(struct xdp_md *ctx)
{
	__u64 end = bpf_ktime_get_ns() + 1000000;

	while (bpf_ktime_get_ns() < end)
		;
	return XDP_PASS;
}
