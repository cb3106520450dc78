/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The infrastructure side of tenant offload, shared by the dispatcher
 * (tenant/xdp_tenant_dispatch.bpf.c), the per-tenant wrapper linked with
 * each tenant program at run time (tenant/api/wrapper.bpf.c) and the
 * accounting tracepoints (tenant/xdp_tenant_acct.bpf.c):
 *
 *  - the maps every one of them uses (the dispatcher's first load creates
 *    them; the host agent hands the same fds to every later object through
 *    libbpf's reuse_fd, so all objects of an instance share them);
 *  - the demultiplexer (one LPM lookup per packet);
 *  - CPU accounting by time slices (see struct tenant_acct_cpu).
 *
 * All names start with `rampart_`: the compiler agent refuses tenant
 * objects that define or reference such symbols, so a tenant program can
 * never name one of these maps.
 */
#ifndef RAMPART_TENANT_INFRA_H
#define RAMPART_TENANT_INFRA_H

#include "common/parse.h"
#include "tenant/abi.h"

#define TENANT_VXLAN_HDR_LEN 8

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, TENANT_SEL_MAX);
	__type(key, struct tenant_sel_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} rampart_t_sel SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TENANT_MAX);
	__type(key, __u32);
	__type(value, struct tenant_cfg);
} rampart_t_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tenant_global);
} rampart_t_glob SEC(".maps");

/* Tokens granted so far (ns); written only by userspace (Algorithm 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TENANT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} rampart_t_grant SEC(".maps");

/*
 * CPU time charged so far (ns); only ever increased, atomically, by BPF.
 * bucket = granted - used: two single-writer counters, so the token
 * generator never races with the data path (no read-modify-write of one
 * shared value from both sides). Each CPU batches its charges to one
 * tenant (tenant_acct_cpu.pend_*) and adds them here once per
 * tenant_global.flush_ns, on a change of tenant, or when its NAPI work
 * stops: `used` lags the truth by less than flush_ns per CPU.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TENANT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} rampart_t_used SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TENANT_MAX);
	__type(key, __u32);
	__type(value, struct tenant_stats);
} rampart_t_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tenant_acct_cpu);
} rampart_t_acct SEC(".maps");

/* The tenants' redirect ports: slot tid * TENANT_PORTS_MAX + n → ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, TENANT_MAX * TENANT_PORTS_MAX);
	__type(key, __u32);
	__type(value, __u32);
} rampart_t_ports SEC(".maps");

/* Tenant-owned interfaces seen by the accounting tracepoints: (netns inode, ifindex) → tenant id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TENANT_MAX * 8);
	__type(key, struct tenant_dev_key);
	__type(value, __u32);
} rampart_t_devs SEC(".maps");

/* NAPI threads of the devices the dispatcher runs on (thread id → 1), for sched_switch. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} rampart_t_threads SEC(".maps");

/* Independent ground truth for validating the accounting (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tenant_truth);
} rampart_t_truth SEC(".maps");

static __always_inline void tenant_count_drop(struct tenant_stats *s, __u32 reason)
{
	if (s && reason < TDROP_MAX)
		s->drop[reason]++;
}

static __always_inline void tenant_count_verdict(struct tenant_stats *s, __u32 action)
{
	if (s && action < TENANT_VERDICTS)
		s->verdict[action]++;
}

/* Add this CPU's batch to the shared `used` counter of its tenant. */
static __always_inline void tenant_flush(struct tenant_acct_cpu *a)
{
	__u32 tid = a->pend_tid;
	__u64 *used;

	if (!a->pend_ns)
		return;
	used = bpf_map_lookup_elem(&rampart_t_used, &tid);
	if (used)
		__sync_fetch_and_add(used, a->pend_ns);
	a->pend_ns = 0;
}

static __always_inline __u32 tenant_flush_ns(void)
{
	__u32 zero = 0;
	struct tenant_global *g = bpf_map_lookup_elem(&rampart_t_glob, &zero);

	return g ? g->flush_ns : 0;
}

/*
 * Charge `d` ns to tenant `tid` (0 = no tenant): the per-CPU stats (`s`
 * when the caller already looked them up for `tid`, else NULL) at once,
 * the shared `used` counter through this CPU's batch: one atomic add per
 * flush instead of one per packet. Nothing is lost or counted twice: at
 * any time, used[tid] + the CPUs' batches for tid = the sum of cpu_ns.
 */
static __always_inline void tenant_charge(struct tenant_acct_cpu *a, __u32 tid, __u64 d, __u32 stack,
					  struct tenant_stats *s, __u32 flush_ns)
{
	if (!s)
		s = bpf_map_lookup_elem(&rampart_t_stats, &tid);
	if (s) {
		s->cpu_ns += d;
		if (stack)
			s->stack_ns += d;
	}
	if (a->pend_tid != tid) {
		tenant_flush(a);
		a->pend_tid = tid;
	}
	a->pend_ns += d;
	if (a->pend_ns >= flush_ns)
		tenant_flush(a);
}

/* What this CPU charged to `tid` and has not yet added to `used`. */
static __always_inline __u64 tenant_pending(struct tenant_acct_cpu *a, __u32 tid)
{
	return a->pend_tid == tid ? a->pend_ns : 0;
}

/* Close the open slice at `now`, charging it to `to` (its stats are `s` when known, else NULL). */
static __always_inline void tenant_slice_close_s(struct tenant_acct_cpu *a, __u64 now, __u32 to,
						 struct tenant_stats *s, __u32 flush_ns)
{
	if (to == TENANT_PENDING)
		to = 0;
	if (a->active && now > a->t_start) {
		tenant_charge(a, to, now - a->t_start, a->stack, s, flush_ns);
		if (!a->thread_in) {
			__u32 zero = 0;
			struct tenant_truth *t = bpf_map_lookup_elem(&rampart_t_truth, &zero);

			if (t)
				t->charged_out_ns += now - a->t_start;
		}
	}
	a->active = 0;
}

/* Close the open slice at `now`, charging it to `to`. */
static __always_inline void tenant_slice_close(struct tenant_acct_cpu *a, __u64 now, __u32 to)
{
	tenant_slice_close_s(a, now, to, NULL, tenant_flush_ns());
}

static __always_inline void tenant_slice_open(struct tenant_acct_cpu *a, __u64 now, __u32 owner, __u32 stack)
{
	a->t_start = now;
	a->owner = owner;
	a->stack = stack;
	a->active = 1;
	a->softirq_slice = a->in_softirq;
	a->touched = 1;
	a->run = 0;
}

static __always_inline struct tenant_acct_cpu *tenant_acct(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&rampart_t_acct, &zero);
}

/*
 * Demultiplex a parsed frame: returns the tenant id (0 = none). Sets
 * *malformed when the frame cannot be classified (truncated or bad
 * headers, a VXLAN header cut short): such a frame belongs to no tenant.
 */
static __always_inline __u32 tenant_demux(void *data, void *data_end, __u32 ifindex, int pstatus,
					   struct pkt_info *pi, __u32 vxlan_port, int *malformed)
{
	struct tenant_sel_key key = {};
	__u32 *tid;

	*malformed = 0;
	key.prefixlen = TENANT_SEL_HDR_BITS + 128;
	key.ifindex = ifindex;
	if (pstatus != PARSE_OK && pstatus != PARSE_NOT_IP) {
		*malformed = 1;
		return 0;
	}
	if (pstatus == PARSE_OK && pi->l4_proto == IPPROTO_UDP && pi->frag != FRAG_LATER &&
	    pi->dport == bpf_htons((__u16)vxlan_port)) {
		__u8 *vx = data + pi->l4_off + sizeof(struct udphdr);

		if ((void *)(vx + TENANT_VXLAN_HDR_LEN) > data_end) {
			*malformed = 1;
			return 0;
		}
		/* RFC 7348: I flag set means the VNI is valid. */
		if (vx[0] & 0x08) {
			key.kind = SEL_VNI;
			key.value[1] = vx[4];
			key.value[2] = vx[5];
			key.value[3] = vx[6];
			goto lookup;
		}
	}
	if (pi->vlan_depth > 0) {
		key.kind = SEL_VLAN;
		key.value[2] = pi->vlan_id[0] >> 8;
		key.value[3] = pi->vlan_id[0] & 0xff;
	} else if (pstatus == PARSE_OK && pi->family == 4) {
		key.kind = SEL_PREFIX4;
		__builtin_memcpy(key.value, pi->daddr, 4);
	} else if (pstatus == PARSE_OK && pi->family == 6) {
		key.kind = SEL_PREFIX6;
		__builtin_memcpy(key.value, pi->daddr, 16);
	} else {
		key.kind = SEL_OTHER;
	}
lookup:
	tid = bpf_map_lookup_elem(&rampart_t_sel, &key);
	if (!tid || *tid >= TENANT_MAX)
		return 0;
	return *tid;
}

#endif /* RAMPART_TENANT_INFRA_H */
