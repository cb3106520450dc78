// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * CPU accounting of what follows a tenant's XDP verdict.
 *
 * fentry/kprobes are not available on this kernel; these are
 * BTF tracepoints (tp_btf). They extend the dispatcher's time slices into
 * the kernel path:
 *
 *  - net_dev_xmit on a tenant's interface (host side of its veth): the
 *    forwarding work that led to this transmit belongs to this skb's
 *    tenant (leading boundary: the elapsed slice is charged to the tenant
 *    of the event, which then owns the CPU);
 *  - netif_receive_skb on a tenant's interface (its domain side, or the
 *    host side for traffic the tenant sends): trailing boundary, the
 *    tenant owns what follows (stack, socket delivery);
 *  - the end of a NAPI poll closes a slice opened in the NET_RX softirq
 *    (the next poll may be another device's); a slice opened in a NAPI
 *    thread (threaded NAPI: only that device is polled there) stays open
 *    across its polls and is closed when the thread is switched out
 *    (sched_switch), so the thread's loop between polls is charged and
 *    idle time never is; a NET_RX softirq run inside the thread suspends
 *    the slice until it ends.
 *
 * Kernel-path events only count inside NAPI/NET_RX context (an open slice
 * or the NET_RX softirq), never in process context.
 *
 * The NET_RX softirq time itself is summed per CPU in rampart_t_truth, an
 * independent figure userspace compares the charged total against.
 */
#include "tenant/infra.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* The few kernel fields used, relocated against the running kernel's BTF (CO-RE). */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct net_device {
	int ifindex;
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct napi_struct {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
} __attribute__((preserve_access_index));

#define NET_RX_SOFTIRQ 3

static __always_inline __u32 dev_tenant(struct net_device *dev)
{
	struct tenant_dev_key k = {};
	__u32 *tid;

	if (!dev)
		return 0;
	k.ifindex = dev->ifindex;
	k.netns_ino = dev->nd_net.net->ns.inum;
	tid = bpf_map_lookup_elem(&rampart_t_devs, &k);
	return tid ? *tid : 0;
}

static __always_inline struct tenant_truth *truth(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&rampart_t_truth, &zero);
}

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(tenant_dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	struct tenant_acct_cpu *a = tenant_acct();
	__u32 tid;
	__u64 now;

	if (!a || (!a->active && !a->in_softirq))
		return 0;
	tid = dev_tenant(dev);
	if (!tid)
		return 0;
	now = bpf_ktime_get_ns();
	/* Leading: the path up to this transmit was this skb's. */
	tenant_slice_close(a, now, tid);
	tenant_slice_open(a, now, tid, 1);
	return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(tenant_rx_skb, struct sk_buff *skb)
{
	struct tenant_acct_cpu *a = tenant_acct();
	__u32 tid;
	__u64 now;

	if (!a || (!a->active && !a->in_softirq))
		return 0;
	tid = dev_tenant(skb->dev);
	if (!tid)
		return 0;
	now = bpf_ktime_get_ns();
	tenant_slice_close(a, now, a->owner);
	tenant_slice_open(a, now, tid, 1);
	return 0;
}

SEC("tp_btf/napi_poll")
int BPF_PROG(tenant_napi_poll, struct napi_struct *napi, int work, int budget)
{
	struct tenant_acct_cpu *a = tenant_acct();
	struct tenant_truth *t;

	if (!a || !a->active || !a->softirq_slice)
		return 0;
	tenant_slice_close(a, bpf_ktime_get_ns(), a->owner);
	t = truth();
	if (t)
		t->polls++;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(tenant_sched_switch, int preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct tenant_acct_cpu *a = tenant_acct();
	struct tenant_truth *t = truth();
	__u32 pid;
	__u64 now;

	if (!a || !t)
		return 0;
	a->saved = 0;
	now = bpf_ktime_get_ns();
	if (a->active)
		tenant_slice_close(a, now, a->owner);
	pid = prev->pid;
	if (a->thread_in && bpf_map_lookup_elem(&rampart_t_threads, &pid)) {
		t->thread_ns += now - a->thread_in;
		/* The NAPI thread stops: its CPU's batch of `used` goes out now. */
		tenant_flush(a);
	}
	a->thread_in = 0;
	/* A NAPI thread of ours wakes up: its work until the first packet belongs to that packet. */
	pid = next->pid;
	if (bpf_map_lookup_elem(&rampart_t_threads, &pid)) {
		a->thread_in = now;
		tenant_slice_open(a, now, TENANT_PENDING, 0);
	}
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(tenant_softirq_entry, unsigned int vec)
{
	struct tenant_acct_cpu *a;
	__u64 now;

	if (vec != NET_RX_SOFTIRQ)
		return 0;
	a = tenant_acct();
	if (!a)
		return 0;
	now = bpf_ktime_get_ns();
	/* A NAPI thread's slice pauses while the softirq runs in its context. */
	if (a->active) {
		a->saved_owner = a->owner;
		a->saved = 1;
		tenant_slice_close(a, now, a->owner);
	}
	a->in_softirq = 1;
	a->softirq_start = now;
	a->touched = 0;
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(tenant_softirq_exit, unsigned int vec)
{
	struct tenant_acct_cpu *a;
	struct tenant_truth *t;
	__u64 now;

	if (vec != NET_RX_SOFTIRQ)
		return 0;
	a = tenant_acct();
	if (!a || !a->in_softirq)
		return 0;
	now = bpf_ktime_get_ns();
	tenant_slice_close(a, now, a->owner);
	/* A softirq run that handled tenant packets ends: flush this CPU's batch. */
	if (a->touched && !a->thread_in)
		tenant_flush(a);
	a->in_softirq = 0;
	if (a->saved) {
		tenant_slice_open(a, now, a->saved_owner, 0);
		a->saved = 0;
	}
	t = truth();
	if (t && now > a->softirq_start) {
		t->net_rx_ns += now - a->softirq_start;
		t->net_rx_runs++;
		if (a->touched && !a->thread_in)
			t->net_rx_ours_ns += now - a->softirq_start;
	}
	return 0;
}

RAMPART_LICENSE;
