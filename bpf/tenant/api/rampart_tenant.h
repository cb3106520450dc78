/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * rampart tenant API — the one header a tenant program includes.
 *
 * A tenant program is C compiled for BPF (clang -target bpf) that defines
 *
 *     int tenant_main(struct xdp_md *ctx)
 *
 * and returns one of
 *
 *     XDP_PASS              deliver to the tenant's workload (kernel stack)
 *     XDP_DROP              drop
 *     XDP_TX                send back out of the interface it came in on
 *     RAMPART_REDIRECT(n)   transmit on the tenant's own interface number n
 *                           (0 .. RAMPART_PORTS_MAX-1, as configured by the
 *                           operator; anything else is dropped)
 *
 * The infrastructure runs it only on the tenant's own packets (its
 * selectors), after the fairness check, and charges its CPU time.
 *
 * Rules (checked by the compiler agent on the compiled object; the reason
 * is returned when a program is refused):
 *  - only the helpers listed below; no probe_read, no tail calls, no raw
 *    redirect (use RAMPART_REDIRECT), no kfuncs, no kernel symbols;
 *  - no extern symbols, no symbol starting with `rampart_`, no program
 *    sections (everything lives in .text, entry point tenant_main);
 *  - maps of these types only: HASH, ARRAY, PERCPU_HASH, PERCPU_ARRAY,
 *    LRU_HASH, LRU_PERCPU_HASH, LPM_TRIE, QUEUE, STACK, BLOOM_FILTER; no
 *    pinning attribute (rampart keeps your maps across program swaps when
 *    name, type and sizes are unchanged); at most the operator's number of
 *    maps and bytes of map memory (a per-CPU value counts on every CPU);
 *  - at most the operator's instruction budget (see `rampart tenant status`).
 *
 * Allowed helpers: bpf_map_lookup_elem, bpf_map_update_elem,
 * bpf_map_delete_elem, bpf_map_push_elem, bpf_map_pop_elem,
 * bpf_map_peek_elem, bpf_map_lookup_percpu_elem, bpf_ktime_get_ns,
 * bpf_ktime_get_boot_ns, bpf_ktime_get_coarse_ns, bpf_ktime_get_tai_ns,
 * bpf_jiffies64, bpf_get_prandom_u32, bpf_get_smp_processor_id,
 * bpf_csum_diff, bpf_xdp_adjust_head, bpf_xdp_adjust_tail,
 * bpf_xdp_get_buff_len, bpf_xdp_load_bytes, bpf_xdp_store_bytes,
 * bpf_spin_lock, bpf_spin_unlock, bpf_strncmp,
 * bpf_tcp_raw_gen_syncookie_ipv4/ipv6, bpf_tcp_raw_check_syncookie_ipv4/ipv6.
 *
 * Also available: parse_packet() from parse.h (Ethernet, VLAN, IPv4,
 * IPv6 with extension headers, TCP/UDP/ICMP, tunnels reported in
 * pkt_info.encap; PPPoE and MPLS frames are not IP for it — parse_packet_lim()
 * walks them; bounded and tested), the checksum helpers of csum.h, and
 * SYN-ACK crafting for SYN cookies from synack.h (synack_check,
 * synack_build; see programs/synproxy.c).
 */
#ifndef RAMPART_TENANT_H
#define RAMPART_TENANT_H

#include "common/common.h"
#include "common/parse.h"
#include "common/csum.h"
#include "common/synack.h"

#define RAMPART_REDIRECT_BASE 0x100
#define RAMPART_PORTS_MAX 4
/* Transmit on the tenant's own interface number `port`. */
#define RAMPART_REDIRECT(port) (RAMPART_REDIRECT_BASE + (port))

/* The entry point every tenant program defines. */
int tenant_main(struct xdp_md *ctx);

/* Forbidden helpers fail at compile time with their name (the object check is the real guard). */
#pragma GCC poison bpf_probe_read bpf_probe_read_kernel bpf_probe_read_user bpf_probe_read_str
#pragma GCC poison bpf_probe_read_kernel_str bpf_probe_read_user_str bpf_trace_printk
#pragma GCC poison bpf_tail_call bpf_redirect bpf_redirect_map bpf_xdp_adjust_meta bpf_fib_lookup
#pragma GCC poison bpf_perf_event_output bpf_ringbuf_output bpf_ringbuf_reserve bpf_loop
#pragma GCC poison bpf_get_current_task bpf_get_current_pid_tgid bpf_get_current_comm

#endif /* RAMPART_TENANT_H */
