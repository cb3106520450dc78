// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Per-tenant wrapper, linked (libbpf static linker) with one tenant's
 * checked object into the XDP program the dispatcher tail-calls for that
 * tenant. Built by crates/rampart-tenant/build.rs, not by rampart-bpf
 * (`tenant_main` is an unresolved extern until the link).
 *
 *   tenant_main(ctx) → verdict mapping:
 *     XDP_DROP / XDP_PASS / XDP_TX          as returned
 *     RAMPART_REDIRECT_BASE + port          bpf_redirect_map into the tenant's
 *                                           own ports (devmap slot tid*PORTS+port)
 *     anything else (XDP_ABORTED, a raw
 *     XDP_REDIRECT, garbage)                dropped, reason ABORTED
 *   then, for XDP_PASS, the frame is demultiplexed again: a tenant that
 *   rewrote its packet into another tenant's selectors loses it
 *   (SELECTOR_CHANGED) — no way to deliver into another tenant's space.
 *
 * The wrapper has no global variables: the linked object's .data/.bss
 * belong to the tenant alone, so nothing of the infrastructure's lives in
 * memory the tenant's code can address.
 */
#include "tenant/infra.h"

extern int tenant_main(struct xdp_md *ctx);

SEC("xdp")
int rampart_tenant_entry(struct xdp_md *ctx)
{
	struct tenant_acct_cpu *a = tenant_acct();
	struct tenant_stats *s;
	__u32 tid, action, reason = TDROP_MAX, zero = 0;
	int ret;

	if (!a)
		return XDP_ABORTED;
	tid = a->entry_tid;
	ret = tenant_main(ctx);

	if (ret == XDP_DROP || ret == XDP_PASS || ret == XDP_TX) {
		action = ret;
	} else if (ret >= RAMPART_REDIRECT_BASE && ret < RAMPART_REDIRECT_BASE + TENANT_PORTS_MAX &&
		   tid < TENANT_MAX) {
		__u32 slot = tid * TENANT_PORTS_MAX + (ret - RAMPART_REDIRECT_BASE);

		action = bpf_redirect_map(&rampart_t_ports, slot, XDP_DROP);
		if (action != XDP_REDIRECT)
			reason = TDROP_BAD_REDIRECT;
	} else {
		action = XDP_DROP;
		reason = TDROP_ABORTED;
	}

	if (action == XDP_PASS) {
		struct tenant_global *g = bpf_map_lookup_elem(&rampart_t_glob, &zero);

		if (g && g->recheck) {
			void *data = (void *)(long)ctx->data;
			void *data_end = (void *)(long)ctx->data_end;
			struct pkt_info pi;
			int pstatus, malformed;
			__u32 now_tid;

			pstatus = parse_packet(data, data_end, &pi);
			now_tid = tenant_demux(data, data_end, ctx->ingress_ifindex, pstatus, &pi,
					       g->vxlan_port, &malformed);
			if (now_tid != tid) {
				action = XDP_DROP;
				reason = TDROP_SELECTOR_CHANGED;
			}
		}
	}

	s = bpf_map_lookup_elem(&rampart_t_stats, &tid);
	if (reason < TDROP_MAX)
		tenant_count_drop(s, reason);
	tenant_count_verdict(s, action);
	return action;
}

RAMPART_LICENSE;

/*
 * The tenant API header repeats the two values a tenant program needs
 * (it does not ship tenant/abi.h). Included last — it poisons helpers the
 * wrapper itself calls — so that a drift fails this build: a different
 * RAMPART_REDIRECT_BASE is a macro redefinition (-Werror).
 */
#include "tenant/api/rampart_tenant.h"
_Static_assert(RAMPART_PORTS_MAX == TENANT_PORTS_MAX, "rampart_tenant.h: RAMPART_PORTS_MAX");
