// expect: accepted
/* A redirect to a port number the tenant does not have: accepted; the
 * infrastructure maps it into the tenant's own port range, where nothing is
 * configured, and the packet is dropped (tests/e2e_tenant.rs). */
#include "rampart_tenant.h"

int tenant_main(struct xdp_md *ctx)
{
	return RAMPART_REDIRECT(3);
}
