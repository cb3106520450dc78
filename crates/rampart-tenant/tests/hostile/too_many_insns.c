// expect: refused: exceed the budget
/* Far more instructions than the budget: 2000 updates of a volatile, a
 * load, a multiply, an add and a store each. */
#include "rampart_tenant.h"

#define X10(s) s s s s s s s s s s
#define X100(s) X10(X10(s))
#define X1000(s) X10(X100(s))

int tenant_main(struct xdp_md *ctx)
{
	volatile __u64 v = ctx->rx_queue_index;

	X1000(v = v * 3 + 1;)
	X1000(v = v * 5 + 2;)
	return v & 1 ? XDP_PASS : XDP_DROP;
}
