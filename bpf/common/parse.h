/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Bounded, verifier-friendly packet parsing shared by every program.
 *
 *   Ethernet → VLAN tags (802.1Q 0x8100, 802.1ad 0x88a8; up to max_vlans)
 *   → when asked (shims): PPPoE session (0x8864, PPP IPv4/IPv6) | MPLS
 *     (0x8847/0x8848, up to PARSE_MAX_MPLS labels, payload IPv4/IPv6 by its
 *     version nibble)
 *   → IPv4 (options skipped by IHL) | IPv6 (up to max_v6_ext extension
 *     headers: hop-by-hop, routing, fragment, destination options, AH)
 *   → TCP | UDP | ICMP | ICMPv6 (unless the packet is a non-first fragment);
 *   GRE, IP-in-IP, VXLAN and Geneve are reported in pi->encap (their inner
 *   packet is not walked).
 *
 * Rules: a header is read only after its full length is bounds-checked; a
 * non-first fragment never has its payload read as an L4 header; an ESP or
 * unknown next header stops the walk with l4_proto set and no ports; an IP
 * packet longer than the frame is truncated (a shorter one is followed by
 * Ethernet padding, which is fine). The return value is an enum
 * parse_status; on anything but PARSE_OK the L3/L4 fields of `pi` are
 * partial and must not be used for classification — except that family,
 * saddr and daddr are set as soon as the IP header itself is whole, so a
 * filter can still judge the source of a frame cut short.
 *
 * crates/rampart-stream/src/parse.rs mirrors this line by line; the
 * differential fuzz target and the parse tests hold the two to one outcome.
 */
#ifndef RAMPART_COMMON_PARSE_H
#define RAMPART_COMMON_PARSE_H

#include "common/common.h"
#include "common/abi.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#ifndef ETH_P_MPLS_UC
#define ETH_P_MPLS_UC 0x8847
#endif
#ifndef ETH_P_MPLS_MC
#define ETH_P_MPLS_MC 0x8848
#endif
#ifndef ETH_P_PPP_SES
#define ETH_P_PPP_SES 0x8864
#endif

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

#define PARSE_PPP_IP 0x0021
#define PARSE_PPP_IPV6 0x0057
#define PARSE_UDP_VXLAN 4789
#define PARSE_UDP_GENEVE 6081

struct rp_vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

struct rp_pppoe_hdr {
	__u8 ver_type;
	__u8 code;
	__be16 session;
	__be16 length;
	__be16 ppp_proto;
};

struct rp_ipv6_opt_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct rp_ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 identification;
};

/* The tunnel an IP protocol number stands for (the UDP ones need the port). */
static __always_inline __u8 parse_proto_encap(__u8 proto)
{
	if (proto == IPPROTO_GRE)
		return PARSE_ENCAP_GRE;
	if (proto == IPPROTO_IPIP || proto == IPPROTO_IPV6)
		return PARSE_ENCAP_IPIP;
	return PARSE_ENCAP_NONE;
}

static __always_inline int parse_l4(void *data, void *data_end, __u32 off, struct pkt_info *pi)
{
	pi->l4_off = off;
	if (pi->frag == FRAG_LATER) {
		/* A fragment of a tunnel packet is still one (a UDP port is not known here). */
		pi->encap = parse_proto_encap(pi->l4_proto);
		return PARSE_OK;
	}
	switch (pi->l4_proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = data + off;

		if ((void *)(th + 1) > data_end)
			return PARSE_TRUNCATED;
		barrier_var(th);
		if (th->doff < 5)
			return PARSE_BAD_HEADER;
		pi->sport = th->source;
		pi->dport = th->dest;
		pi->tcp_flags = ((__u8 *)th)[13];
		return PARSE_OK;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = data + off;

		if ((void *)(uh + 1) > data_end)
			return PARSE_TRUNCATED;
		/* Keep the checked pointer: clang would otherwise recompute
		 * data + off further down, a pointer the verifier has not seen checked. */
		barrier_var(uh);
		pi->sport = uh->source;
		pi->dport = uh->dest;
		{
			/* From pi, not the packet again: one read of the header. */
			__u16 d = bpf_ntohs(pi->dport);

			/* One compare for the ports of neither tunnel (the flood case). */
			if (unlikely((__u16)(d - PARSE_UDP_VXLAN) <= PARSE_UDP_GENEVE - PARSE_UDP_VXLAN)) {
				if (d == PARSE_UDP_VXLAN)
					pi->encap = PARSE_ENCAP_VXLAN;
				else if (d == PARSE_UDP_GENEVE)
					pi->encap = PARSE_ENCAP_GENEVE;
			}
		}
		return PARSE_OK;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		__u8 *ih = data + off;

		if ((void *)(ih + 4) > data_end)
			return PARSE_TRUNCATED;
		pi->icmp_type = ih[0];
		pi->icmp_code = ih[1];
		return PARSE_OK;
	}
	case IPPROTO_GRE:
	case IPPROTO_IPIP:
	case IPPROTO_IPV6:
		pi->encap = parse_proto_encap(pi->l4_proto);
		return PARSE_OK;
	default:
		return PARSE_OK;
	}
}

/*
 * `frame_len` is the frame's length: data_end - data, except where only
 * the headers are in reach (a TC program sees an skb's linear part), the
 * whole packet's.
 */
static __always_inline int parse_ipv4(void *data, void *data_end, __u32 off, struct pkt_info *pi,
				      __u32 frame_len)
{
	struct iphdr *iph = data + off;
	__u32 hlen;
	__u16 frag;

	if ((void *)(iph + 1) > data_end)
		return PARSE_TRUNCATED;
	if (iph->version != 4 || iph->ihl < 5)
		return PARSE_BAD_HEADER;
	hlen = iph->ihl * 4;
	if (data + off + hlen > data_end)
		return PARSE_TRUNCATED;
	pi->ip_len = bpf_ntohs(iph->tot_len);
	if (pi->ip_len < hlen)
		return PARSE_BAD_HEADER;
	pi->family = 4;
	pi->saddr[0] = iph->saddr;
	pi->daddr[0] = iph->daddr;
	pi->l4_proto = iph->protocol;
	pi->ttl = iph->ttl;
	/* The packet must end inside the frame (what follows it is padding). */
	if (off + pi->ip_len > frame_len)
		return PARSE_TRUNCATED;
	frag = bpf_ntohs(iph->frag_off);
	if (frag & IP_OFFSET)
		pi->frag = FRAG_LATER;
	else if (frag & IP_MF)
		pi->frag = FRAG_FIRST;
	return parse_l4(data, data_end, off + hlen, pi);
}

/* Is this IPv6 next header an extension header the walk steps over? */
static __always_inline int parse_v6_ext(__u8 nexthdr)
{
	return nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_ROUTING || nexthdr == IPPROTO_DSTOPTS ||
	       nexthdr == IPPROTO_AH || nexthdr == IPPROTO_FRAGMENT;
}

static __always_inline int parse_ipv6(void *data, void *data_end, __u32 off, struct pkt_info *pi,
				      __u32 max_ext, __u32 frame_len)
{
	struct ipv6hdr *ip6h = data + off;
	/* Bit i set: the walk may take an (i+1)-th extension header. A mask,
	 * not `i < max_ext`, so the loop keeps its constant trip count and
	 * clang can unroll it (a runtime bound would make it a runtime loop). */
	__u32 walk = (1u << (max_ext < PARSE_MAX_V6_EXT ? max_ext : PARSE_MAX_V6_EXT)) - 1;
	__u16 payload;
	__u8 nexthdr;
	int i;

	if ((void *)(ip6h + 1) > data_end)
		return PARSE_TRUNCATED;
	if (ip6h->version != 6)
		return PARSE_BAD_HEADER;
	pi->family = 6;
	__builtin_memcpy(pi->saddr, &ip6h->saddr, 16);
	__builtin_memcpy(pi->daddr, &ip6h->daddr, 16);
	payload = bpf_ntohs(ip6h->payload_len);
	pi->ip_len = payload + 40;
	pi->ttl = ip6h->hop_limit;
	/* Payload length 0 is a jumbogram (RFC 2675): its length is in a hop-by-hop option. */
	if (payload && off + 40 + payload > frame_len)
		return PARSE_TRUNCATED;
	nexthdr = ip6h->nexthdr;
	off += sizeof(*ip6h);

#pragma unroll
	for (i = 0; i < PARSE_MAX_V6_EXT; i++) {
		if (!parse_v6_ext(nexthdr)) {
			pi->l4_proto = nexthdr;
			if (off > 0xffff)
				return PARSE_BAD_HEADER;
			return parse_l4(data, data_end, off, pi);
		}
		/* The limit is looked at only when there is a header to walk. */
		if (!(walk & (1u << i)))
			return PARSE_TOO_DEEP;
		if (nexthdr == IPPROTO_FRAGMENT) {
			struct rp_ipv6_frag_hdr *fh = data + off;
			__u16 fo;

			if ((void *)(fh + 1) > data_end)
				return PARSE_TRUNCATED;
			fo = bpf_ntohs(fh->frag_off);
			/* IPv6: offset in the top 13 bits, M flag is bit 0. */
			nexthdr = fh->nexthdr;
			off += sizeof(*fh);
			if (fo & 0xfff8) {
				/*
				 * A later fragment: everything after this header is
				 * fragment payload, extension headers of the
				 * fragmentable part included. Never walk it.
				 */
				pi->frag = FRAG_LATER;
				pi->l4_proto = nexthdr;
				return parse_l4(data, data_end, off, pi);
			}
			if (fo & 1)
				pi->frag = FRAG_FIRST;
		} else {
			struct rp_ipv6_opt_hdr *oh = data + off;

			if ((void *)(oh + 1) > data_end)
				return PARSE_TRUNCATED;
			/* AH counts its length in 4-byte units minus 2, the others in 8-byte units minus 1. */
			if (nexthdr == IPPROTO_AH)
				off += (oh->hdrlen + 2) * 4;
			else
				off += (oh->hdrlen + 1) * 8;
			nexthdr = oh->nexthdr;
		}
		/* Keep the offset bounded for the verifier (max frame is far below). */
		if (off > 0x3fff)
			return PARSE_TRUNCATED;
	}
	/* PARSE_MAX_V6_EXT headers walked and still one: too deep. */
	if (parse_v6_ext(nexthdr))
		return PARSE_TOO_DEEP;
	pi->l4_proto = nexthdr;
	return parse_l4(data, data_end, off, pi);
}

/*
 * Parse the frame [data, data_end) into *pi (zeroed by this function),
 * walking at most `max_vlans` VLAN tags and `max_v6_ext` IPv6 extension
 * headers (each capped at its PARSE_MAX_* ceiling), and PPPoE/MPLS when
 * `shims`. Returns an enum parse_status.
 */
static __always_inline int parse_packet_lim_len(void *data, void *data_end, __u32 frame_len,
						struct pkt_info *pi, __u32 max_vlans, __u32 max_v6_ext,
						__u32 shims)
{
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__u16 proto;
	int i;

	__builtin_memset(pi, 0, sizeof(*pi));
	if ((void *)(eth + 1) > data_end)
		return PARSE_TRUNCATED;
	proto = bpf_ntohs(eth->h_proto);

	/* Plain IPv4 first: the flood fast path pays for nothing else. */
	if (likely(proto == ETH_P_IP))
		goto ip;
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		/* As in parse_ipv6(): bit i set means tag i may be walked (a mask
		 * keeps the loop's trip count constant for the unroller). */
		__u32 walk = (1u << (max_vlans < PARSE_MAX_VLANS ? max_vlans : PARSE_MAX_VLANS)) - 1;

#pragma unroll
		for (i = 0; i < PARSE_MAX_VLANS; i++) {
			struct rp_vlan_hdr *vh;

			if (!(walk & (1u << i)) || (proto != ETH_P_8021Q && proto != ETH_P_8021AD))
				break;
			vh = data + off;
			if ((void *)(vh + 1) > data_end)
				return PARSE_TRUNCATED;
			if (i < PARSE_VLAN_IDS)
				pi->vlan_id[i] = bpf_ntohs(vh->tci) & 0x0fff;
			pi->vlan_depth++;
			proto = bpf_ntohs(vh->encap_proto);
			off += sizeof(*vh);
		}
		if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
			pi->l3_proto = proto;
			pi->l3_off = off;
			return PARSE_TOO_DEEP;
		}
	}
	if (proto == ETH_P_PPP_SES && shims) {
		struct rp_pppoe_hdr *ph = data + off;

		pi->l3_proto = proto;
		pi->l3_off = off;
		if ((void *)(ph + 1) > data_end)
			return PARSE_TRUNCATED;
		/* RFC 2516: version 1, type 1, code 0 in session frames. */
		if (ph->ver_type != 0x11 || ph->code != 0)
			return PARSE_BAD_HEADER;
		pi->shim |= PARSE_SHIM_PPPOE;
		off += sizeof(*ph);
		if (ph->ppp_proto == bpf_htons(PARSE_PPP_IP))
			proto = ETH_P_IP;
		else if (ph->ppp_proto == bpf_htons(PARSE_PPP_IPV6))
			proto = ETH_P_IPV6;
		else
			return PARSE_NOT_IP; /* LCP, IPCP, ...: the session's control traffic */
	} else if ((proto == ETH_P_MPLS_UC || proto == ETH_P_MPLS_MC) && shims) {
		__u8 *p;

		pi->l3_proto = proto;
		pi->l3_off = off;
#pragma unroll
		for (i = 0; i < PARSE_MAX_MPLS; i++) {
			__u8 *lse = data + off;

			if ((void *)(lse + 4) > data_end)
				return PARSE_TRUNCATED;
			off += 4;
			/* Bottom of stack: the S bit, low bit of the third byte. */
			if (lse[2] & 1)
				break;
		}
		if (i == PARSE_MAX_MPLS)
			return PARSE_TOO_DEEP;
		pi->shim |= PARSE_SHIM_MPLS;
		p = data + off;
		if ((void *)(p + 1) > data_end)
			return PARSE_TRUNCATED;
		/* MPLS does not say what it carries: IP is known by its version. */
		if (*p >> 4 == 4) {
			proto = ETH_P_IP;
		} else if (*p >> 4 == 6) {
			proto = ETH_P_IPV6;
		} else {
			pi->encap = PARSE_ENCAP_MPLS;
			return PARSE_NOT_IP;
		}
	}
	if (proto == ETH_P_IP) {
ip:
		pi->l3_proto = ETH_P_IP;
		pi->l3_off = off;
		return parse_ipv4(data, data_end, off, pi, frame_len);
	}
	pi->l3_proto = proto;
	pi->l3_off = off;
	if (proto == ETH_P_IPV6)
		return parse_ipv6(data, data_end, off, pi, max_v6_ext, frame_len);
	return PARSE_NOT_IP;
}

/*
 * What parse_packet_lim() does with an untagged IPv4 frame, for a caller
 * that already checked that the frame is one (EtherType ETH_P_IP, the
 * Ethernet header inside the frame): the same result without looking at
 * the Ethernet header again.
 */
static __always_inline int parse_packet_ipv4(void *data, void *data_end, struct pkt_info *pi)
{
	__builtin_memset(pi, 0, sizeof(*pi));
	pi->l3_proto = ETH_P_IP;
	pi->l3_off = sizeof(struct ethhdr);
	return parse_ipv4(data, data_end, sizeof(struct ethhdr), pi, (__u32)(data_end - data));
}

/* The whole frame in [data, data_end) (XDP): see parse_packet_lim_len(). */
static __always_inline int parse_packet_lim(void *data, void *data_end, struct pkt_info *pi,
					    __u32 max_vlans, __u32 max_v6_ext, __u32 shims)
{
	return parse_packet_lim_len(data, data_end, (__u32)(data_end - data), pi, max_vlans, max_v6_ext,
				    shims);
}

/* parse_packet_lim() with the default limits (PARSE_DEF_VLANS,
 * PARSE_DEF_V6_EXT, no PPPoE/MPLS: see PARSE_DEF_VLANS in abi.h). */
static __always_inline int parse_packet(void *data, void *data_end, struct pkt_info *pi)
{
	return parse_packet_lim(data, data_end, pi, PARSE_DEF_VLANS, PARSE_DEF_V6_EXT, 0);
}

/* parse_packet() of a frame of frame_len bytes whose first bytes are in
 * [data, data_end) (a TC program's linear part; the headers are there). */
static __always_inline int parse_packet_len(void *data, void *data_end, __u32 frame_len,
					    struct pkt_info *pi)
{
	return parse_packet_lim_len(data, data_end, frame_len, pi, PARSE_DEF_VLANS, PARSE_DEF_V6_EXT, 0);
}

#endif /* RAMPART_COMMON_PARSE_H */
