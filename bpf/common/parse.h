/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Bounded, verifier-friendly packet parsing shared by every program.
 *
 *   Ethernet → up to PARSE_MAX_VLANS tags (802.1Q 0x8100, 802.1ad 0x88a8)
 *   → IPv4 (options skipped by IHL) | IPv6 (up to PARSE_MAX_V6_EXT extension
 *     headers: hop-by-hop, routing, fragment, destination options, AH)
 *   → TCP | UDP | ICMP | ICMPv6 (unless the packet is a non-first fragment).
 *
 * Rules: a header is read only after its full length is bounds-checked; a
 * non-first fragment never has its payload read as an L4 header; an ESP or
 * unknown next header stops the walk with l4_proto set and no ports. The
 * return value is an enum parse_status; on anything but PARSE_OK the L3/L4
 * fields of `pi` are partial and must not be used for classification.
 */
#ifndef RAMPART_COMMON_PARSE_H
#define RAMPART_COMMON_PARSE_H

#include "common/common.h"
#include "common/abi.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

struct rp_vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
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

static __always_inline int parse_l4(void *data, void *data_end, __u32 off, struct pkt_info *pi)
{
	pi->l4_off = off;
	if (pi->frag == FRAG_LATER)
		return PARSE_OK;
	switch (pi->l4_proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = data + off;

		if ((void *)(th + 1) > data_end)
			return PARSE_TRUNCATED;
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
		pi->sport = uh->source;
		pi->dport = uh->dest;
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
	default:
		return PARSE_OK;
	}
}

static __always_inline int parse_ipv4(void *data, void *data_end, __u32 off, struct pkt_info *pi)
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
	frag = bpf_ntohs(iph->frag_off);
	if (frag & IP_OFFSET)
		pi->frag = FRAG_LATER;
	else if (frag & IP_MF)
		pi->frag = FRAG_FIRST;
	return parse_l4(data, data_end, off + hlen, pi);
}

static __always_inline int parse_ipv6(void *data, void *data_end, __u32 off, struct pkt_info *pi)
{
	struct ipv6hdr *ip6h = data + off;
	__u8 nexthdr;
	int i;

	if ((void *)(ip6h + 1) > data_end)
		return PARSE_TRUNCATED;
	if (ip6h->version != 6)
		return PARSE_BAD_HEADER;
	pi->family = 6;
	__builtin_memcpy(pi->saddr, &ip6h->saddr, 16);
	__builtin_memcpy(pi->daddr, &ip6h->daddr, 16);
	pi->ip_len = bpf_ntohs(ip6h->payload_len) + 40;
	pi->ttl = ip6h->hop_limit;
	nexthdr = ip6h->nexthdr;
	off += sizeof(*ip6h);

#pragma unroll
	for (i = 0; i < PARSE_MAX_V6_EXT; i++) {
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS: {
			struct rp_ipv6_opt_hdr *oh = data + off;

			if ((void *)(oh + 1) > data_end)
				return PARSE_TRUNCATED;
			nexthdr = oh->nexthdr;
			off += (oh->hdrlen + 1) * 8;
			break;
		}
		case IPPROTO_AH: {
			struct rp_ipv6_opt_hdr *oh = data + off;

			if ((void *)(oh + 1) > data_end)
				return PARSE_TRUNCATED;
			nexthdr = oh->nexthdr;
			off += (oh->hdrlen + 2) * 4;
			break;
		}
		case IPPROTO_FRAGMENT: {
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
				pi->l4_off = off;
				return PARSE_OK;
			}
			if (fo & 1)
				pi->frag = FRAG_FIRST;
			break;
		}
		default:
			pi->l4_proto = nexthdr;
			if (off > 0xffff)
				return PARSE_BAD_HEADER;
			return parse_l4(data, data_end, off, pi);
		}
		/* Keep the offset bounded for the verifier (max frame is far below). */
		if (off > 0x3fff)
			return PARSE_TRUNCATED;
	}
	/* Still an extension header after PARSE_MAX_V6_EXT of them. */
	switch (nexthdr) {
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_DSTOPTS:
	case IPPROTO_AH:
	case IPPROTO_FRAGMENT:
		return PARSE_TOO_DEEP;
	}
	pi->l4_proto = nexthdr;
	return parse_l4(data, data_end, off, pi);
}

/*
 * Parse the frame [data, data_end) into *pi (zeroed by this function).
 * Returns an enum parse_status.
 */
static __always_inline int parse_packet(void *data, void *data_end, struct pkt_info *pi)
{
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__u16 proto;
	int i;

	__builtin_memset(pi, 0, sizeof(*pi));
	if ((void *)(eth + 1) > data_end)
		return PARSE_TRUNCATED;
	proto = bpf_ntohs(eth->h_proto);

#pragma unroll
	for (i = 0; i < PARSE_MAX_VLANS; i++) {
		struct rp_vlan_hdr *vh;

		if (proto != ETH_P_8021Q && proto != ETH_P_8021AD)
			break;
		vh = data + off;
		if ((void *)(vh + 1) > data_end)
			return PARSE_TRUNCATED;
		pi->vlan_id[i] = bpf_ntohs(vh->tci) & 0x0fff;
		pi->vlan_depth++;
		proto = bpf_ntohs(vh->encap_proto);
		off += sizeof(*vh);
	}
	pi->l3_proto = proto;
	pi->l3_off = off;
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD)
		return PARSE_TOO_DEEP;
	if (proto == ETH_P_IP)
		return parse_ipv4(data, data_end, off, pi);
	if (proto == ETH_P_IPV6)
		return parse_ipv6(data, data_end, off, pi);
	return PARSE_NOT_IP;
}

#endif /* RAMPART_COMMON_PARSE_H */
