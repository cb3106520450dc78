// expect: accepted
/* Spinning on the clock as long as the verifier lets a loop run: accepted,
 * and charged for every nanosecond (the fairness test runs it against
 * tenants that do real work). */
#include "rampart_tenant.h"

int tenant_main(struct xdp_md *ctx)
{
	__u64 end = bpf_ktime_get_ns() + 20000;
	int i;

	for (i = 0; i < 4096; i++) {
		if (bpf_ktime_get_ns() >= end)
			break;
	}
	return XDP_DROP;
}
