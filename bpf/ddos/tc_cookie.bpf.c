// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rampart ddos, TC ingress stage of the SYN cookies (TCX link on the
 * protected interface, attached while any victim has SYN cookies on).
 *
 * xdp_features answered the SYN with a cookie SYN-ACK and let the
 * client's ACK through when its cookie was valid; the kernel never saw
 * the SYN, so the ACK finds only the listener. Here that ACK's cookie is
 * checked again and decoded (ddos/cookie.h), and bpf_sk_assign_tcp_reqsk
 * hands the kernel a request socket built from it: the kernel completes
 * the connection as for one of its own SYN cookies (it needs
 * net.ipv4.tcp_syncookies ≠ 0, the default) — no conntrack, no
 * iptables, no sysctl change. Everything else passes untouched
 * (TCX_NEXT): existing connections find their own socket.
 *
 * The ddos_protect and ddos_ckey maps are the feature stage's (reused
 * from their pins); counters in ddos_tcst (enum ddos_tc_stat).
 */
#include "common/parse.h"
#include "common/synack.h"
#include "ddos/abi.h"
#include "ddos/cookie.h"

#define TCX_NEXT -1

/* The kernel's types the kfunc takes (layout of include/net/tcp.h). */
struct sock {
	int __opaque;
};

struct bpf_tcp_req_attrs {
	__u32 rcv_tsval;
	__u32 rcv_tsecr;
	__u16 mss;
	__u8 rcv_wscale;
	__u8 snd_wscale;
	__u8 ecn_ok;
	__u8 wscale_ok;
	__u8 sack_ok;
	__u8 tstamp_ok;
	__u8 usec_ts_ok;
	__u8 reserved[3];
};

extern int bpf_sk_assign_tcp_reqsk(struct __sk_buff *skb, struct sock *sk, struct bpf_tcp_req_attrs *attrs,
				   int attrs__sz) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DDOS_PROTECT_MAX);
	__type(key, struct ddos_victim_key);
	__type(value, struct ddos_protect_val);
} ddos_protect SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ddos_cookie_key);
} ddos_ckey SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DDOS_TC_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} ddos_tcst SEC(".maps");

static __always_inline int count(__u32 what)
{
	__u64 *v = bpf_map_lookup_elem(&ddos_tcst, &what);

	if (v)
		*v += 1;
	return TCX_NEXT;
}

SEC("tcx/ingress")
int tc_cookie(struct __sk_buff *skb)
{
	struct bpf_tcp_req_attrs attrs = {};
	struct ddos_victim_key vk;
	struct ddos_protect_val *pv;
	struct ddos_cookie_key *key;
	struct syn_optbuf ob = {};
	struct syn_opts o = {};
	struct bpf_sock_tuple t = {};
	struct bpf_sock *skc;
	struct tcp_sock *tp;
	struct cookie_in c;
	struct pkt_info pi;
	struct tcphdr th;
	void *data, *data_end;
	__u32 zero = 0, size, cookie, low, olen;
	int err;

	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	err = parse_packet(data, data_end, &pi);
	if (err == PARSE_TRUNCATED && skb->len > 14) {
		/* Headers beyond the linear part: pull them in, once. */
		if (bpf_skb_pull_data(skb, skb->len < 128 ? skb->len : 128))
			return TCX_NEXT;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		err = parse_packet(data, data_end, &pi);
	}
	if (err != PARSE_OK)
		return TCX_NEXT;
	if (pi.l4_proto != IPPROTO_TCP || pi.frag != FRAG_NONE)
		return TCX_NEXT;
	/* An ACK, no SYN/RST/FIN: the third packet of a handshake (or data after it). */
	if ((pi.tcp_flags & 0x17) != 0x10)
		return TCX_NEXT;
	victim_key_of(&vk, pi.family, pi.daddr);
	pv = bpf_map_lookup_elem(&ddos_protect, &vk);
	if (!pv || !(pv->flags & DDOS_PROTECT_SYN_COOKIES))
		return TCX_NEXT;
	key = bpf_map_lookup_elem(&ddos_ckey, &zero);
	if (!key)
		return TCX_NEXT;

	if (pi.family == 4) {
		t.ipv4.saddr = pi.saddr[0];
		t.ipv4.daddr = pi.daddr[0];
		t.ipv4.sport = pi.sport;
		t.ipv4.dport = pi.dport;
		size = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, pi.saddr, 16);
		__builtin_memcpy(t.ipv6.daddr, pi.daddr, 16);
		t.ipv6.sport = pi.sport;
		t.ipv6.dport = pi.dport;
		size = sizeof(t.ipv6);
	}
	skc = bpf_skc_lookup_tcp(skb, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!skc)
		return TCX_NEXT;
	if (skc->state != BPF_TCP_LISTEN) {
		bpf_sk_release(skc);
		return count(DDOS_TC_IN_STATE);
	}

	/* The TCP header and its options (timestamps). */
	if (bpf_skb_load_bytes(skb, pi.l4_off, &th, sizeof(th)))
		goto invalid;
	olen = th.doff * 4;
	if (olen < sizeof(th) || olen > SYNACK_TCP_HDR_MAX)
		goto invalid;
	olen -= sizeof(th);
	if (olen > 0 && olen <= 40 && bpf_skb_load_bytes(skb, pi.l4_off + sizeof(th), ob.b, olen))
		goto invalid;
	if (syn_parse_opts(&ob, olen, &o))
		goto invalid;

	__builtin_memcpy(c.saddr, pi.saddr, 16);
	__builtin_memcpy(c.daddr, pi.daddr, 16);
	c.sport = pi.sport;
	c.dport = pi.dport;
	c.isn = bpf_ntohl(th.seq) - 1;
	cookie = bpf_ntohl(th.ack_seq) - 1;
	if (!cookie_valid(key, &c, cookie))
		goto invalid;

	low = cookie & COOKIE_LOW_MASK;
	attrs.mss = cookie_mss_of(low >> COOKIE_MSS_SHIFT);
	if ((low & COOKIE_WSCALE_MASK) != COOKIE_WSCALE_MASK) {
		attrs.wscale_ok = 1;
		attrs.snd_wscale = low & COOKIE_WSCALE_MASK;
		attrs.rcv_wscale = COOKIE_WSCALE;
	}
	attrs.sack_ok = !!(low & COOKIE_SACK);
	attrs.ecn_ok = !!(low & COOKIE_ECN);
	if (o.ts && o.tsecr) {
		attrs.tstamp_ok = 1;
		attrs.rcv_tsval = bpf_ntohl(o.tsval);
		attrs.rcv_tsecr = o.tsecr;
	}

	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		goto invalid;
	err = bpf_sk_assign_tcp_reqsk(skb, (struct sock *)tp, &attrs, sizeof(attrs));
	bpf_sk_release(skc);
	if (err)
		return count(DDOS_TC_REFUSED);
	__sync_fetch_and_add(&pv->reqsk_assigned, 1);
	return count(DDOS_TC_ASSIGNED);

invalid:
	bpf_sk_release(skc);
	return count(DDOS_TC_INVALID);
}

RAMPART_LICENSE;
