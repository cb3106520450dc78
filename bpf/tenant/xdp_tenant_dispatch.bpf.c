// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The tenant infrastructure program, attached to the host's
 * ingress with a bpf_link:
 *
 *   accounting (close the previous slice, open this packet's)
 *   → demultiplexer (one LPM lookup: interface, VXLAN VNI, VLAN id or
 *     destination prefix → tenant id)
 *   → fairness check (bucket = granted - used; <= 0 → drop, NO_TOKENS)
 *   → tail call into the tenant's program (its wrapper: tenant code +
 *     verdict mapping); a tenant without a program (empty slot) gets XDP_PASS.
 *
 * A packet's CPU time is charged when the next boundary closes its slice
 * (the next packet's entry here, a kernel-path event in xdp_tenant_acct, or
 * the end of the NAPI poll), so the driver's work after the verdict — the
 * XDP_TX flush, building the skb for XDP_PASS — is charged to it too.
 *
 * One program array per generation: the host agent builds a new
 * dispatcher and array for every change and swaps the link atomically.
 */
#include "tenant/infra.h"

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, TENANT_MAX);
	__type(key, __u32);
	__type(value, __u32);
} rampart_t_progs SEC(".maps");

/*
 * Is the token generator alive (its deadline not passed)? `now` is the
 * clock already read for this packet, or 0.
 */
static __always_inline int tenant_grants_live(__u64 now)
{
	__u32 k = TENANT_GRANT_DEADLINE_KEY;
	__u64 *deadline = bpf_map_lookup_elem(&rampart_t_grant, &k);

	if (!deadline || !*deadline)
		return 1;
	return (now ? now : bpf_ktime_get_ns()) <= *deadline;
}

SEC("xdp")
int xdp_tenant_dispatch(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tenant_acct_cpu *a = tenant_acct();
	struct tenant_global *g;
	struct tenant_stats *s;
	struct tenant_cfg *cfg;
	struct pkt_info pi;
	__u64 *granted = NULL, *used = NULL;
	__u64 now = 0;
	int far = 1, in_run, enforce = 0;
	__u32 zero = 0, tid, action;
	int pstatus, malformed;

	if (!a)
		return XDP_ABORTED;
	g = bpf_map_lookup_elem(&rampart_t_glob, &zero);
	if (!g)
		return XDP_ABORTED;
	/*
	 * The clock is read at entry (parsing belongs to this packet) unless
	 * the packet probably continues a run of its tenant's packets: then
	 * the open slice simply extends over it and one clock read closes up
	 * to TENANT_RUN_MAX packets (see below).
	 */
	if (g->account && !(a->active && a->run))
		now = bpf_ktime_get_ns();
	pstatus = parse_packet(data, data_end, &pi);
	tid = tenant_demux(data, data_end, ctx->ingress_ifindex, pstatus, &pi, g->vxlan_port, &malformed);
	cfg = bpf_map_lookup_elem(&rampart_t_cfg, &tid);
	if (tid && (!cfg || !(cfg->flags & TENANT_F_ACTIVE)))
		tid = 0;
	s = bpf_map_lookup_elem(&rampart_t_stats, &tid);
	/*
	 * This packet continues its tenant's run: the slice extends over it.
	 * A run starts only while the tenant's bucket holds more than
	 * TENANT_FAR_NS (or fairness is off) and lasts at most TENANT_RUN_MAX
	 * packets — far less than TENANT_FAR_NS of any program's time, on
	 * this CPU and on each other — so the bucket cannot run dry inside
	 * it: neither the bucket nor the check is read again until the run
	 * ends (near an empty bucket no run starts and every packet is
	 * checked, so the check never lags where it matters).
	 */
	in_run = g->account && !now && a->owner == tid && a->run < TENANT_RUN_MAX;
	if (g->enforce && tid && !in_run)
		enforce = tenant_grants_live(now);
	if (enforce) {
		granted = bpf_map_lookup_elem(&rampart_t_grant, &tid);
		used = bpf_map_lookup_elem(&rampart_t_used, &tid);
		far = granted && used &&
		      (__s64)(*granted - *used - tenant_pending(a, tid)) > (__s64)TENANT_FAR_NS;
	}
	/*
	 * Trailing boundary: what ran since the last one belongs to its owner
	 * (the driver's work on the previous packet) — or to this packet when
	 * the slice was opened by the NAPI thread waking up for it.
	 */
	if (g->account) {
		if (now) {
			__u32 to = a->owner == TENANT_PENDING ? tid : a->owner;

			tenant_slice_close_s(a, now, to, to == tid ? s : NULL, g->flush_ns);
			tenant_slice_open(a, now, tid, 0);
			/* Two packets of one tenant in a row: the next one may extend the slice. */
			a->run = to == tid && far;
		} else if (in_run) {
			a->run++;
		} else {
			/*
			 * The run ends: its length bound, or a packet of another
			 * tenant — whose parsing (read before the clock) is then
			 * charged to the run's owner: one parse per run, never more.
			 */
			__u32 same = a->owner == tid;

			now = bpf_ktime_get_ns();
			tenant_slice_close_s(a, now, a->owner, same ? s : NULL, g->flush_ns);
			tenant_slice_open(a, now, tid, 0);
			a->run = same && far;
		}
	} else {
		/* No clock: nothing is open, so switching accounting back on never charges the time it was off. */
		a->owner = tid;
		a->run = 0;
		a->active = 0;
	}

	if (s) {
		s->packets++;
		s->bytes += data_end - data;
	}
	if (malformed) {
		tenant_count_drop(s, TDROP_MALFORMED);
		tenant_count_verdict(s, XDP_DROP);
		return XDP_DROP;
	}
	if (tid == 0) {
		action = g->default_action == XDP_DROP ? XDP_DROP : XDP_PASS;
		if (action == XDP_DROP)
			tenant_count_drop(s, TDROP_DEFAULT);
		tenant_count_verdict(s, action);
		return action;
	}
	if (enforce) {
		/* This CPU's unflushed batch counts; other CPUs' lag by < flush_ns each. */
		if (granted && used && (__s64)(*granted - *used - tenant_pending(a, tid)) <= 0) {
			tenant_count_drop(s, TDROP_NO_TOKENS);
			tenant_count_verdict(s, XDP_DROP);
			return XDP_DROP;
		}
	}
	a->entry_tid = tid;
	bpf_tail_call(ctx, &rampart_t_progs, tid);
	/* Only reached when the tenant has no program in this generation. */
	tenant_count_verdict(s, XDP_PASS);
	return XDP_PASS;
}

RAMPART_LICENSE;
