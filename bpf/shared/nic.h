/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * EMULATED SmartNIC hardware table (lab only): an exact-match table of
 * source addresses with per-rule counters, like TC flower skip_sw rules on
 * a ConnectX/E810/Agilio card. Capacity K is the map's max_entries.
 */
#ifndef RAMPART_SHARED_NIC_H
#define RAMPART_SHARED_NIC_H

#include "abi.h"

#define NIC_DEFAULT_CAPACITY 512

struct nic_rule_key {
	/* IPv4 in addr[0] (network order), rest zero; IPv6 all 16 bytes. */
	__u32 addr[4];
	/* 4 or 6. */
	__u32 family;
};

/* Per-rule hardware counters. */
struct nic_rule_stats {
	__u64 packets;
	__u64 bytes;
};

/* nic_state[0]: number of rules installed (0 = skip the lookup entirely). */
struct nic_state {
	__u32 rules;
	__u32 _pad;
	/* Frames from wan the NIC could not parse: never matched, forwarded to the host. */
	__u64 unparsed;
};

#endif /* RAMPART_SHARED_NIC_H */
