/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Tenant offload ABI: selectors, per-tenant configuration,
 * statistics, drop reasons, token buckets and the per-CPU accounting
 * state shared by the infrastructure dispatcher (xdp_tenant_dispatch),
 * the per-tenant wrappers built at run time (tenant/api/wrapper.bpf.c),
 * the accounting tracepoints (xdp_tenant_acct) and the Rust userspace.
 */
#ifndef RAMPART_TENANT_ABI_H
#define RAMPART_TENANT_ABI_H

#include "common/abi.h"

/* Tenant ids are 1 .. TENANT_MAX-1; id 0 collects packets of no tenant. */
#define TENANT_MAX 64
/* Interfaces a tenant may redirect to (RAMPART_REDIRECT(port), port < this). */
#define TENANT_PORTS_MAX 4
/* Longest-prefix-match entries in the demultiplexer. */
#define TENANT_SEL_MAX 4096

/*
 * Demultiplexer key: one LPM trie keyed by
 *   [ingress ifindex : 32][kind : 8][pad : 24][value : 128]
 * so that one lookup picks the most specific selector. An interface
 * selector is the 32-bit prefix (ifindex only); the other kinds are
 * installed once per interface the dispatcher is attached to. The packet's
 * key kind is chosen by its encapsulation: VXLAN → VNI, else an 802.1Q/ad
 * tag → VLAN id (outermost), else IPv4/IPv6 → destination address, else
 * SEL_OTHER (matched only by interface selectors).
 */
enum tenant_sel_kind { /* rust: u8 */
	SEL_PREFIX4 = 1,
	SEL_PREFIX6 = 2,
	SEL_VLAN = 3,
	SEL_VNI = 4,
	SEL_OTHER = 5,
};

/* Bits of the key before `value`: ifindex (32) + kind and pad (32). */
#define TENANT_SEL_HDR_BITS 64

struct tenant_sel_key {
	__u32 prefixlen;
	__u32 ifindex;
	__u8 kind;
	__u8 _pad[3];
	/* Address (network order), or VLAN id / VNI as a big-endian u32 in value[0..4]. */
	__u8 value[16];
};

/*
 * Per-tenant configuration (ARRAY indexed by tenant id). Whether a tenant
 * has a program is not a flag: it is whether its slot in the generation's
 * program array is filled, so a program and the dispatcher that reaches it
 * always change together, in one atomic link update.
 */
#define TENANT_F_ACTIVE 1u

struct tenant_cfg {
	__u32 flags;
	__u32 _pad;
};

/* Global switches (ARRAY, one element). Changed at run time, no reload. */
struct tenant_global {
	/* 1: reject packets of tenants whose bucket is <= 0. */
	__u32 enforce;
	/* XDP action for packets of no tenant (XDP_PASS or XDP_DROP). */
	__u32 default_action;
	/* UDP destination port that marks VXLAN (host order, 4789). */
	__u32 vxlan_port;
	/* 1: after XDP_PASS, re-demultiplex and drop packets a tenant rewrote into another tenant's space. */
	__u32 recheck;
	/* 1: charge CPU time per packet (the dispatcher's slices); 0: no clock reads at all. */
	__u32 account;
	/*
	 * Per-CPU batching of the shared `used` counters: a CPU adds what it
	 * charged to one tenant into rampart_t_used once the batch reaches this
	 * many ns, or when it charges another tenant, or when a watched NAPI
	 * thread is switched out. 0: every charge is added at once.
	 */
	__u32 flush_ns;
};

/* Why the infrastructure dropped a packet (tenant programs' own XDP_DROP is a verdict, not a reason). */
enum tenant_drop_reason { /* rust: usize */
	/* The tenant's bucket was empty: rejected before its program ran. */
	TDROP_NO_TOKENS = 0,
	/* The program returned XDP_ABORTED, a raw XDP_REDIRECT or an unknown value. */
	TDROP_ABORTED = 1,
	/* RAMPART_REDIRECT(n) to a port the tenant does not have. */
	TDROP_BAD_REDIRECT = 2,
	/* After XDP_PASS the packet no longer demultiplexes to the tenant (rewritten). */
	TDROP_SELECTOR_CHANGED = 3,
	/* Packet of no tenant, and the default action is drop. */
	TDROP_DEFAULT = 4,
	/* Truncated or invalid headers: belongs to no tenant. */
	TDROP_MALFORMED = 5,
	TDROP_MAX = 6,
};

/* Final verdicts as counted (index = XDP action). */
#define TENANT_VERDICTS 5 /* rust: usize */

/* Per-tenant, per-CPU statistics (PERCPU_ARRAY indexed by tenant id). */
struct tenant_stats {
	__u64 packets;
	__u64 bytes;
	/* CPU time charged (ns): XDP part + what followed until the next boundary. */
	__u64 cpu_ns;
	/* Of cpu_ns, the part charged by kernel-path events after XDP (stack, xmit, tenant domain). */
	__u64 stack_ns;
	__u64 verdict[TENANT_VERDICTS];
	__u64 drop[TDROP_MAX];
};

/*
 * Per-CPU accounting state: the CPU's time is partitioned into slices,
 * each owned by one tenant. A slice opens at a boundary event (dispatcher
 * entry, a tenant interface's transmit or receive) and is charged to its
 * owner when the next boundary closes it, or when the CPU stops doing
 * packet work:
 *  - a slice opened inside the NET_RX softirq ends with the NAPI poll it
 *    belongs to (other devices' polls may follow in the same softirq);
 *  - a slice opened in a NAPI thread (threaded NAPI) runs across that
 *    thread's polls — nothing else runs there — and ends when the thread
 *    is switched out; a NET_RX softirq run inside the thread (when it
 *    re-enables bottom halves) suspends it, so unrelated softirq work is
 *    never charged.
 */
struct tenant_acct_cpu {
	__u64 t_start;
	__u64 softirq_start;
	/* When a watched NAPI thread was switched in on this CPU (0: none is running). */
	__u64 thread_in;
	__u32 owner;
	__u32 active;
	/* Set by the dispatcher before a tail call: whose program runs now. */
	__u32 entry_tid;
	/* 1 while the slice was opened by a kernel-path event (stack_ns). */
	__u32 stack;
	/* Inside the NET_RX softirq on this CPU. */
	__u32 in_softirq;
	/* The open slice was opened inside the NET_RX softirq. */
	__u32 softirq_slice;
	/* A NAPI-thread slice suspended while a NET_RX softirq runs in that thread. */
	__u32 saved_owner;
	__u32 saved;
	/* The current NET_RX softirq run handled a tenant packet. */
	__u32 touched;
	/*
	 * Clock amortization in the dispatcher: packets of the open slice's
	 * owner since its last clock read. 0: read the clock at the next
	 * packet's entry. While 1 <= run < TENANT_RUN_MAX a packet of the same
	 * owner extends the slice without reading the clock.
	 */
	__u32 run;
	/* This CPU's batch of `used` not yet added to rampart_t_used: pend_ns for tenant pend_tid. */
	__u64 pend_ns;
	__u32 pend_tid;
	__u32 _pad;
};

/*
 * Longest run of packets of one tenant that share one clock read (one
 * slice). Bounds how far the bucket check can lag: at most this many
 * packets of a tenant pass on a CPU after its bucket went empty.
 */
#define TENANT_RUN_MAX 32
/*
 * Runs extend only while the tenant's bucket holds more than this (ns) —
 * more than 32 packets of any reasonable program cost — or fairness is off.
 */
#define TENANT_FAR_NS 1000000

/*
 * Slot of rampart_t_grant that holds no tenant's tokens (tenant 0 is "no
 * tenant") but the token generator's deadline: each round writes
 * CLOCK_MONOTONIC ns (bpf_ktime_get_ns's clock) plus a grace of several
 * periods. Past it the generator is dead (the agent crashed and no one
 * has adopted the instance yet): the buckets would only drain and every
 * tenant's packets would be dropped as `no_tokens`, so the dispatcher
 * stops enforcing until a generator runs again. 0: no deadline (enforce).
 */
#define TENANT_GRANT_DEADLINE_KEY 0

/*
 * Owner of a slice opened when a NAPI thread is switched in, before its
 * first packet is known: the dispatcher charges it to that packet's tenant
 * (a thread that finds nothing to do charges it to tenant 0).
 */
#define TENANT_PENDING TENANT_MAX

/* Ground truth for validating the accounting (per CPU). */
struct tenant_truth {
	/* NET_RX softirq time (softirq_entry → softirq_exit), ns. */
	__u64 net_rx_ns;
	__u64 net_rx_runs;
	/* NAPI polls that closed an accounting slice. */
	__u64 polls;
	/* Time the watched NAPI threads were on this CPU (sched_switch in → out), ns. */
	__u64 thread_ns;
	/* NET_RX softirq time outside those threads, in runs that handled a tenant packet, ns. */
	__u64 net_rx_ours_ns;
	/* CPU time charged while no watched thread was on this CPU, ns. */
	__u64 charged_out_ns;
};

/* Key of the map of tenant-owned interfaces seen by the accounting tracepoints. */
struct tenant_dev_key {
	__u32 netns_ino;
	__u32 ifindex;
};

/* Redirect: a tenant program returns RAMPART_REDIRECT_BASE + port. */
#define RAMPART_REDIRECT_BASE 0x100

#endif /* RAMPART_TENANT_ABI_H */
