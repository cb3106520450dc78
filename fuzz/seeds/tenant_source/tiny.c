#include "rampart_tenant.h"
#include <linux/if_ether.h>
/* a comment */
int tenant_main(struct xdp_md *ctx) { return XDP_PASS; }
