/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Frame → struct stream_tuple, and the FlowID of a tuple, for BPF programs.
 * The userspace mirror is crates/rampart-stream/src/{parse,flowid}.rs; the
 * BPF_PROG_RUN test crates/rampart-stream/tests/prog_stream_tuple.rs runs
 * both on the same frames (well-formed and malformed) and compares them
 * field by field.
 */
#ifndef RAMPART_STREAM_TUPLE_H
#define RAMPART_STREAM_TUPLE_H

#include "common/parse.h"
#include "common/jhash.h"
#include "stream/abi.h"

/*
 * Parse [data, data_end) into *t (zeroed first). Returns PARSE_OK when a
 * tuple was built; any other enum parse_status (including PARSE_NOT_IP)
 * means there is no tuple and *t stays zero.
 */
static __always_inline int stream_tuple_from_frame_pi(void *data, void *data_end, __u32 frame_len,
						      __u64 ts_ns, struct stream_tuple *t,
						      struct pkt_info *pi)
{
	int st = parse_packet_len(data, data_end, frame_len, pi);

	__builtin_memset(t, 0, sizeof(*t));
	if (st != PARSE_OK)
		return st;
	t->ts_ns = ts_ns;
	__builtin_memcpy(t->saddr, pi->saddr, 16);
	__builtin_memcpy(t->daddr, pi->daddr, 16);
	t->proto = pi->l4_proto;
	t->ip_len = pi->ip_len;
	if (pi->family == 6)
		t->flags |= ST_F_IPV6;
	if (pi->frag == FRAG_FIRST)
		t->flags |= ST_F_FRAG_FIRST;
	else if (pi->frag == FRAG_LATER)
		t->flags |= ST_F_FRAG_LATER;
	if (pi->vlan_depth)
		t->vlan_id = pi->vlan_id[0];
	if (pi->frag != FRAG_LATER) {
		if (pi->l4_proto == IPPROTO_ICMP || pi->l4_proto == IPPROTO_ICMPV6) {
			t->dport = ((__u16)pi->icmp_type << 8) | pi->icmp_code;
		} else {
			t->sport = bpf_ntohs(pi->sport);
			t->dport = bpf_ntohs(pi->dport);
			t->tcp_flags = pi->tcp_flags;
		}
	}
	return PARSE_OK;
}

static __always_inline int stream_tuple_from_frame(void *data, void *data_end, __u64 ts_ns,
						   struct stream_tuple *t)
{
	struct pkt_info pi;

	return stream_tuple_from_frame_pi(data, data_end, (__u32)(data_end - data), ts_ns, t, &pi);
}

/* Is address a greater than b, comparing the bytes in network order? */
static __always_inline int stream_addr_gt(const __u32 *a, const __u32 *b)
{
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		__u32 x = bpf_ntohl(a[i]), y = bpf_ntohl(b[i]);

		if (x != y)
			return x > y;
	}
	return 0;
}

/*
 * Compute t->flow_id for `mode` (enum stream_key_mode) and record the mode
 * and the ST_F_IP_REV / ST_F_PORT_REV bits in t->flags. The hashed words:
 * addr A[4], addr B[4], ports, proto — see enum stream_key_mode for A, B
 * and the ports word of each mode.
 */
static __always_inline void stream_flow_id(struct stream_tuple *t, __u32 mode)
{
	__u32 k[10];
	const __u32 *a = t->saddr, *b = t->daddr;
	__u32 ports;

	t->flags &= ~(ST_F_IP_REV | ST_F_PORT_REV | (3u << ST_KEY_MODE_SHIFT));
	switch (mode) {
	case ST_KEY_FIVE_TUPLE:
		ports = ((__u32)t->sport << 16) | t->dport;
		break;
	case ST_KEY_SYN_PAIR:
		if (t->proto == IPPROTO_TCP && (t->tcp_flags & 0x12) == 0x12) {
			a = t->daddr;
			b = t->saddr;
			ports = t->sport;
		} else {
			ports = t->dport;
		}
		break;
	case ST_KEY_BIDIR:
		if (stream_addr_gt(t->saddr, t->daddr)) {
			a = t->daddr;
			b = t->saddr;
			t->flags |= ST_F_IP_REV;
		}
		if (t->sport > t->dport) {
			ports = ((__u32)t->dport << 16) | t->sport;
			t->flags |= ST_F_PORT_REV;
		} else {
			ports = ((__u32)t->sport << 16) | t->dport;
		}
		break;
	default:
		t->flow_id = 0;
		return;
	}
	__builtin_memcpy(&k[0], a, 16);
	__builtin_memcpy(&k[4], b, 16);
	k[8] = ports;
	k[9] = t->proto;
	t->flow_id = rp_jhash2(k, 10, ST_FLOWID_SEED);
	t->flags |= mode << ST_KEY_MODE_SHIFT;
}

#endif /* RAMPART_STREAM_TUPLE_H */
