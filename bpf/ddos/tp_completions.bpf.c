// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rampart ddos: TCP handshakes completed, from the kernel. A TCP socket
 * going from SYN_RECV to ESTABLISHED is a handshake the client finished
 * (its ACK of our SYN-ACK reached the stack: after a normal SYN-ACK, a
 * kernel SYN cookie or an XDP one). Counted per (client, server) address
 * pair, only in the protected interface's network namespace (its inode
 * number in rodata), in an LRU hash that userspace drains every interval
 * (lookup-and-delete batch) and merges into the pair records.
 *
 * Kernel types are read with CO-RE: only the fields used are declared,
 * their offsets come from the running kernel's BTF at load.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ddos/abi.h"

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define TCP_ESTABLISHED 1
#define TCP_SYN_RECV 3

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__u32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	__u32 skc_daddr;
	__u32 skc_rcv_saddr;
	unsigned short skc_family;
	possible_net_t skc_net;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
} __attribute__((preserve_access_index));

const volatile struct ddos_compl_config ddos_compl_cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DDOS_COMPL_MAX);
	__type(key, struct ddos_compl_key);
	__type(value, __u64);
} ddos_compl SEC(".maps");

SEC("tp_btf/inet_sock_set_state")
int ddos_completions(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	int oldstate = (int)ctx[1], newstate = (int)ctx[2];
	struct ddos_compl_key k = {};
	__u64 one = 1, *n;

	if (oldstate != TCP_SYN_RECV || newstate != TCP_ESTABLISHED)
		return 0;
	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	if (sk->__sk_common.skc_net.net->ns.inum != ddos_compl_cfg.netns_ino)
		return 0;
	if (sk->__sk_common.skc_family == AF_INET) {
		k.family = 4;
		k.src[0] = sk->__sk_common.skc_daddr;
		k.dst[0] = sk->__sk_common.skc_rcv_saddr;
	} else if (sk->__sk_common.skc_family == AF_INET6) {
		int i;

		k.family = 6;
#pragma unroll
		for (i = 0; i < 4; i++) {
			k.src[i] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[i];
			k.dst[i] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[i];
		}
		/* An IPv4 client of a dual-stack listener (::ffff:a.b.c.d): an IPv4 pair. */
		if (!k.src[0] && !k.src[1] && k.src[2] == bpf_htonl(0xffff)) {
			k.family = 4;
			k.src[0] = k.src[3];
			k.dst[0] = k.dst[3];
			k.src[1] = k.src[2] = k.src[3] = 0;
			k.dst[1] = k.dst[2] = k.dst[3] = 0;
		}
	} else {
		return 0;
	}
	n = bpf_map_lookup_elem(&ddos_compl, &k);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return 0;
	}
	/* A racing first completion of the same pair on another CPU: retry as an add. */
	if (bpf_map_update_elem(&ddos_compl, &k, &one, BPF_NOEXIST)) {
		n = bpf_map_lookup_elem(&ddos_compl, &k);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
