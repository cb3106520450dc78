/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * rampart ddos data plane ABI: the XDP filter (xdp_filter.bpf.c), the
 * feature extraction stage (xdp_features.bpf.c) and the Rust side
 * (crates/rampart-ddos) share these definitions; Rust gets them from BTF.
 *
 * Filter lookup order for a packet whose source address is known:
 *   IPv4: compact exact table (ddos_bl4_keys)  → LPM trie ddos_lpm4 (only if
 *         ctl.n_prefix4 > 0);
 *   IPv6: exact hash ddos_bl6 (only if ctl.n_exact6 > 0) → LPM trie
 *         ddos_lpm6 (only if ctl.n_prefix6 > 0).
 * The first match wins, so a packet is counted on its most specific entry.
 */
#ifndef RAMPART_DDOS_ABI_H
#define RAMPART_DDOS_ABI_H

#include <linux/bpf.h> /* struct bpf_spin_lock */
#include "common/abi.h"

/*
 * Why the filter dropped a packet. These names are the metric labels
 * (lower-cased, without the prefix): blacklist, blacklist_prefix, ...
 */
enum ddos_drop_reason { /* rust: usize */
	/* Source matched an exact entry (IPv4 /32 or IPv6 /128). */
	DDOS_DROP_BLACKLIST = 0,
	/* Source matched a CIDR prefix. */
	DDOS_DROP_BLACKLIST_PREFIX = 1,
	/* Malformed: the frame ends inside a header it announces (PARSE_TRUNCATED). */
	DDOS_DROP_TRUNCATED = 2,
	/* Malformed: an impossible header field (PARSE_BAD_HEADER). */
	DDOS_DROP_BAD_HEADER = 3,
	/* More VLAN tags, MPLS labels or IPv6 extension headers than the parser walks (PARSE_TOO_DEEP). */
	DDOS_DROP_TOO_DEEP = 4,
	/* A tunnel packet (GRE, IP in IP, VXLAN, Geneve, MPLS without IP) while
	 * the filter was loaded with drop_encap = 1: its inner source is not checked. */
	DDOS_DROP_ENCAP = 5,
	/* Source policed (ddos_police) and over its rate: its token bucket was empty. */
	DDOS_DROP_POLICED = 6,
	DDOS_DROP_REASON_MAX = 7,
};

/* Why the filter let a packet through. Same naming rule as the drop reasons. */
enum ddos_pass_reason { /* rust: usize */
	/* Parsed IPv4/IPv6, no blacklist match: handed to the next stage
	 * (tail call into feature extraction) or XDP_PASS when there is none. */
	DDOS_PASS_CLEAN = 0,
	/* Not IPv4/IPv6 (ARP, LLDP, ...): XDP_PASS untouched. */
	DDOS_PASS_NOT_IP = 1,
	/* Malformed but the filter was loaded with pass_malformed = 1. */
	DDOS_PASS_MALFORMED = 2,
	/*
	 * A tunnel packet whose outer source is not blacklisted; its inner
	 * packet is not walked, so its inner source is not checked (load with
	 * drop_encap = 1 to drop them instead). One reason per enum parse_encap,
	 * in the same order. IP tunnels go on to the next stage like clean ones.
	 */
	DDOS_PASS_ENCAP_GRE = 3,
	DDOS_PASS_ENCAP_IPIP = 4,
	DDOS_PASS_ENCAP_VXLAN = 5,
	DDOS_PASS_ENCAP_GENEVE = 6,
	DDOS_PASS_ENCAP_MPLS = 7,
	DDOS_PASS_REASON_MAX = 8,
};

struct ddos_pkt_counter {
	__u64 packets;
	__u64 bytes;
};

/* Per-CPU counters of the filter (map ddos_fstats, one element). */
struct ddos_filter_stats {
	/* First: what a blacklist drop touches shares one cache line. */
	/* State of the per-CPU sampling generator (xorshift32; 0 = unseeded). */
	__u32 rng;
	__u32 _pad;
	/* Matches that updated a per-entry counter (1 in 2^sample_shift). */
	__u64 sampled;
	struct ddos_pkt_counter drop[DDOS_DROP_REASON_MAX];
	struct ddos_pkt_counter pass[DDOS_PASS_REASON_MAX];
	/* Clean packets whose tail call failed (no next stage installed): XDP_PASS. */
	__u64 no_next_stage;
	/* Exact IPv4 entries found expired and retired by the data path. */
	__u64 expired;
};

/* Load-time configuration of xdp_filter (rodata). */
struct ddos_filter_config {
	/* Per-entry counters are updated for 1 in 2^sample_shift matches, by
	 * 2^sample_shift packets and 2^sample_shift × length bytes (an
	 * unbiased estimate); 0 counts every packet exactly. At most 15. */
	__u32 sample_shift;
	/* 1: malformed frames are passed (DDOS_PASS_MALFORMED) instead of dropped. */
	__u32 pass_malformed;
	/* 1: tunnel packets are dropped (DDOS_DROP_ENCAP) instead of passed. */
	__u32 drop_encap;
	/* How deep the parser walks (VLAN tags, IPv6 extension headers). */
	struct parse_limits limits;
};

/*
 * The compact exact IPv4 table: open addressing over 4-byte slots holding
 * the source address as it is on the wire, 16 slots (one cache line) per
 * array element. Two tables live in one map, each `cap_buckets` elements
 * long; userspace builds the idle one (Robin Hood insertion, load ≤ 50%,
 * every key within max_dist of its home slot) and publishes it by flipping
 * ctl.active. The entry id of slot s is in the same position of
 * ddos_bl4_ids and is only read when a counter is updated.
 */
#define DDOS_BL4_SLOTS_PER_BUCKET 16 /* rust: usize */
/* An empty slot; 0.0.0.0/32 is therefore kept in the LPM trie. */
#define DDOS_BL4_EMPTY 0x00000000u
/* A retired (expired) slot: lookups probe past it. 255.255.255.255/32 goes to the LPM trie. */
#define DDOS_BL4_TOMBSTONE 0xffffffffu
/* Most probes a lookup makes: every key sits at most this - 1 slots from home. */
#define DDOS_BL4_MAX_PROBES 16
/* Home slot of key k: h = k * mult; h ^= h >> 16; h *= DDOS_BL4_MIX; h >> shift. */
#define DDOS_BL4_MIX 0x85ebca6bu
/*
 * Narrow tables. The home hash is a bijection of the key (two odd
 * multiplications and a xor-shift), so a key is known from its home slot
 * (h >> shift) and its remainder (h & (2^shift - 1)). Tables of 2^21 slots
 * or more (shift <= DDOS_BL4_NARROW_MAX_SHIFT) therefore store 16-bit slots,
 *   DDOS_BL4_N_USED | distance from home << 11 | remainder,
 * 32 per array element: half the memory (4 MB instead of 8 MB at 1M
 * entries), so random lookups miss the caches and the TLB less often. Such
 * a table has DDOS_BL4_NARROW set in its `shift` field. The ids keep one
 * 4-byte slot each (ddos_bl4_ids, 16 per element), at the same slot index.
 */
#define DDOS_BL4_NARROW 0x100u
#define DDOS_BL4_NARROW_MAX_SHIFT 11
#define DDOS_BL4_N_SLOTS_PER_BUCKET 32 /* rust: usize */
#define DDOS_BL4_N_EMPTY 0x0000u /* rust: u16 */
#define DDOS_BL4_N_USED 0x8000u /* rust: u16 */
/* A retired narrow slot: never equal to a lookup's value (no USED bit), not empty. */
#define DDOS_BL4_N_TOMBSTONE 0x7fffu /* rust: u16 */
/* Entry ids index ddos_counters and ddos_meta. */
#define DDOS_ID_NONE 0xffffffffu

struct ddos_bl4_bucket {
	__u32 slot[DDOS_BL4_SLOTS_PER_BUCKET];
};

/* Geometry of one of the two exact IPv4 tables. */
struct ddos_bl4_table {
	/* Hash parameters (see DDOS_BL4_MIX); mult is odd and chosen per build. */
	__u32 mult;
	/* 32 - log2(slots) in the low 5 bits; | DDOS_BL4_NARROW for 16-bit slots. */
	__u32 shift;
	/* Slots in use minus one (a power of two minus one). */
	__u32 mask;
	/* Largest distance of a key from its home slot (< DDOS_BL4_MAX_PROBES). */
	__u32 max_dist;
	/* First element of this table in ddos_bl4_keys / ddos_bl4_ids. */
	__u32 base;
	/* Keys stored. */
	__u32 count;
};

/* Control block of the filter (map ddos_ctl, one element, mmapable). */
struct ddos_filter_ctl {
	/* Table the data path reads (0 or 1). */
	__u32 active;
	/* Entries in ddos_bl6 / ddos_lpm4 / ddos_lpm6: 0 skips the lookup. */
	__u32 n_exact6;
	__u32 n_prefix4;
	__u32 n_prefix6;
	struct ddos_bl4_table tab[2];
	/* Bumped by userspace on every publish. */
	__u64 generation;
	/* Copy of the rodata sample_shift, for readers of the pins. */
	__u32 sample_shift;
	/* Capacities chosen at attach (userspace bookkeeping). */
	__u32 cap_exact4;
	__u32 cap_other;
	__u32 cap_ids;
	/* Elements per table in ddos_bl4_keys. */
	__u32 cap_buckets;
	/* Entries in ddos_police: 0 skips the policing lookup. (In what was
	 * padding, so the control block keeps its layout.) */
	__u32 n_police;
};

/* Per-entry counters, indexed by entry id (map ddos_counters, mmapable). */
struct ddos_counter {
	/* Estimated packets and bytes dropped by this entry (see sample_shift). */
	__u64 packets;
	__u64 bytes;
	/* CLOCK_BOOTTIME nanoseconds after which the entry no longer matches; 0 = never. */
	__u64 expires_ns;
	/* CLOCK_REALTIME nanoseconds when the entry was added (userspace only). */
	__u64 added_ns;
};

/* Userspace-only description of an entry id (map ddos_meta, mmapable). */
struct ddos_entry_meta {
	/* Network byte order; IPv4 in addr[0]. */
	__u32 addr[4];
	/* 4 or 6; 0 = free id. */
	__u8 family;
	__u8 prefixlen;
	/* DDOS_META_* */
	__u16 flags;
	__u32 _pad;
};

#define DDOS_META_USED 0x1 /* rust: u16 */

struct ddos_lpm4_key {
	__u32 prefixlen;
	__u32 addr;
};

struct ddos_lpm6_key {
	__u32 prefixlen;
	__u32 addr[4];
};

struct ddos_addr6 {
	__u32 addr[4];
};

/* ---- policing (xdp_filter, after a blacklist miss) ---- */

/*
 * A policed source is rate-limited instead of blocked: a token bucket per
 * source address (exact: IPv4 /32, IPv6 /128) in ddos_police. Tokens are
 * counted in nano-packets (DDOS_POLICE_NS = one packet) and refilled by
 * rate_pps per second of bpf_ktime_get_ns(), so the refill is one
 * multiplication (elapsed ns × rate) with no division on the data path.
 * A packet takes one packet's worth or, when the bucket holds less, is
 * dropped (DDOS_DROP_POLICED). The bucket holds at most `burst` packets:
 * burst = max(rate_pps, DDOS_POLICE_BURST_MIN), one second of the rate,
 * so a source may send a second's worth at once after a quiet spell but
 * never more than its rate on average over longer times; the floor keeps
 * a TCP initial window and its retransmissions whole at very low rates.
 *
 * An entry may police only some of the source's packets (`classes`, a
 * mask of DDOS_POLICE_*): the kind of traffic that made it suspect, such
 * as its SYNs under a SYN flood, while its established connections pass
 * untouched. 0 polices every packet.
 */
/* Classes of packets an entry polices (ddos_police_val.classes). */
/* TCP SYN without ACK (new connections). */
#define DDOS_POLICE_SYN 1
/* UDP (non-first fragments included: their protocol is in the IP header). */
#define DDOS_POLICE_UDP 2
/* ICMP and ICMPv6. */
#define DDOS_POLICE_ICMP 4
/* IP fragments (first and later). */
#define DDOS_POLICE_FRAG 8
/* One packet in tokens. */
#define DDOS_POLICE_NS 1000000000ull /* rust: u64 */
/* Smallest bucket (packets). */
#define DDOS_POLICE_BURST_MIN 64
/* Highest rate (packets/s) a source may be policed at: with the idle
 * clamp below, elapsed × rate stays far inside 64 bits. */
#define DDOS_POLICE_MAX_PPS 100000000
/* Refill time counted at most (ns, ~68.7 s): more than the longest fill
 * (DDOS_POLICE_BURST_MIN packets at 1 pps takes 64 s). */
#define DDOS_POLICE_IDLE_MAX_NS (1ull << 36) /* rust: u64 */
/* Sources ddos_police holds at most. */
#define DDOS_POLICE_MAX 16384

/* Key of ddos_police: the source address, network byte order. */
struct ddos_police_key {
	/* 4 or 6. */
	__u32 family;
	/* IPv4 in addr[0], the rest 0. */
	__u32 addr[4];
};

/*
 * Value of ddos_police. One bucket per source shared by every CPU, taken
 * under its spin lock (see xdp_filter.bpf.c for why). Userspace writes
 * rate_pps/burst (and a full bucket for a new entry) with BPF_F_LOCK and
 * reads passed/dropped, which only grow.
 */
struct ddos_police_val {
	struct bpf_spin_lock lock;
	/* Rate (packets/s, 1..=DDOS_POLICE_MAX_PPS) and bucket size (packets). */
	__u32 rate_pps;
	__u32 burst;
	/* DDOS_POLICE_* classes policed; 0: every packet. */
	__u32 classes;
	/* Tokens in the bucket (DDOS_POLICE_NS per packet, ≤ burst × DDOS_POLICE_NS). */
	__u64 tokens;
	/* bpf_ktime_get_ns() of the last refill (0: never, the bucket starts full). */
	__u64 last_ns;
	/* Packets let through / dropped since the entry was added. */
	__u64 passed;
	__u64 dropped;
};

/* ---- feature extraction ---- */

/*
 * Interval records live in mmapable arrays so userspace reads an interval
 * straight from memory (a syscall per entry, or even a batched hash-map
 * read, is far too slow for 300,000 pairs). Per family, per slot (0/1):
 *
 *   keys  [slot][cap]        u64 pair key, 0 = free. IPv4: src << 32 | dst
 *                            (exact). IPv6: 64-bit keyed hash of (src, dst),
 *                            with the addresses in ddos_faddr6 [slot][cap].
 *   vals  [slot][cpu][cap]   struct ddos_feat_val, one per CPU: the CPU that
 *                            runs the program updates its own copy only.
 *
 * A pair takes a key slot by compare-and-swap on first sight in the
 * interval (linear probing, at most DDOS_FEAT_MAX_PROBES), so its index is
 * the same on every CPU and userspace sums across CPUs by index, without
 * hashing. cap is a power of two.
 */
#define DDOS_FEAT_MAX_PROBES 64
#define DDOS_FEAT_KEY_FREE 0ull /* rust: u64 */

/* Why the feature stage did not record a packet (it always passes it). */
enum ddos_feat_skip { /* rust: usize */
	DDOS_FEAT_SKIP_NOT_IP = 0,
	/* Any parse status other than PARSE_OK / PARSE_NOT_IP: fields untrusted.
	 * Also the IPv4 pair 0.0.0.0 → 0.0.0.0, whose key is the free marker
	 * (neither address is valid there, RFC 1122). */
	DDOS_FEAT_SKIP_MALFORMED = 1,
	/* No free key slot within DDOS_FEAT_MAX_PROBES: the interval is full. */
	DDOS_FEAT_SKIP_TABLE_FULL = 2,
	/* Answered or dropped by the protection stage (cookie SYN-ACK, guard)
	 * from a source not in the interval's table, and not admitted: counted
	 * on its victim only (DDOS_FEAT_PROTECTED_ADMIT). */
	DDOS_FEAT_SKIP_PROTECTED = 3,
	DDOS_FEAT_SKIP_MAX = 4,
};

/*
 * Under protection, a packet the protection stage answers or drops takes a
 * new pair slot with probability 1/DDOS_FEAT_PROTECTED_ADMIT only (pairs
 * already in the interval's table are always updated). A spoofed flood's
 * sources send one packet each and never anything that passes: admitted
 * all, a 1 Mpps flood filled the table within an interval and its probing
 * cost a quarter of the receiving CPU. A real source sending hundreds of
 * packets an interval is admitted within its first few hundred, and
 * anything of it that passes (a completed handshake, data) admits it at
 * once.
 */
#define DDOS_FEAT_PROTECTED_ADMIT 64

/* Addresses of an IPv6 pair (network byte order). */
struct ddos_feat_addr6 {
	__u32 src[4];
	__u32 dst[4];
};

/* Value of one interval record (per CPU; userspace sums, ORs the sketch). */
struct ddos_feat_val {
	__u64 packets;
	__u64 bytes;
	/* Packets by L4 protocol (non-first fragments by the IP protocol field). */
	__u32 tcp;
	__u32 udp;
	__u32 icmp;
	__u32 other;
	/* TCP SYN without ACK, SYN with ACK, RST. */
	__u32 syn;
	__u32 synack;
	__u32 rst;
	/* IP fragments (first and later). */
	__u32 frags;
	/* Linear-counting bitmap of destination ports (128 bits): bit
	 * sketch_hash(dport) >> 25 (xdp_features.bpf.c). Distinct ports ≈
	 * -128 ln(zero bits / 128). */
	__u64 dport_sketch[2];
	/* (Second cache line: only FINs and amplification UDP touch it.) */
	/* TCP FIN. */
	__u32 fin;
	/* UDP packets (first fragments) from an amplification source port
	 * (ddos_feat_config.amp_ports), and their bytes. */
	__u32 udp_amp;
	__u64 udp_amp_bytes;
};

#define DDOS_FEAT_SKETCH_BITS 128

/*
 * Victim records: per destination (IPv4 /32, IPv6 /64) with the mechanics
 * of the pairs (two slots, CAS-taken u64 keys, per-CPU values by index),
 * capacity vcap4/vcap6 per slot:
 *
 *   keys [slot][vcap]        IPv4: 1 << 32 | address (as on the wire);
 *                            IPv6: the first 64 bits as on the wire (an
 *                            all-zero /64 is not recorded); 0 = free.
 *   vals [slot][cpu][vcap]   struct ddos_victim_val.
 *   hll  [slot][vcap]        struct ddos_victim_hll, shared by the CPUs:
 *                            a register only grows and is written only
 *                            when it does (rarely), so CPUs race only on
 *                            a lost increase, a small under-estimate.
 */
#define DDOS_HLL_REGISTERS 64 /* rust: usize */
/* UDP source-port classes: ddos_feat_config.amp_ports[0..7], then any other port. */
#define DDOS_UDP_CLASSES 8 /* rust: usize */
#define DDOS_UDP_AMP_PORTS 7 /* rust: usize */

/* What the protection stage did with a packet, counted per victim and interval. */
enum ddos_prot_event { /* rust: usize */
	DDOS_PROT_SYNACK_SENT = 0,
	DDOS_PROT_COOKIE_ACK_VALID = 1,
	DDOS_PROT_COOKIE_ACK_INVALID = 2,
	DDOS_PROT_GUARD_DROPPED = 3,
	DDOS_PROT_NO_LISTENER = 4,
	DDOS_PROT_EVENT_MAX = 5,
};

/* Value of one victim record (per CPU; userspace sums). */
struct ddos_victim_val {
	__u64 packets;
	__u64 bytes;
	/* Packets by L4 protocol (later fragments by the IP protocol field). */
	__u32 tcp;
	__u32 udp;
	__u32 icmp;
	__u32 other;
	/* IP fragments (first and later). */
	__u32 frags;
	/* TCP SYN without ACK, SYN with ACK, RST, FIN. */
	__u32 syn;
	__u32 synack;
	__u32 rst;
	__u32 fin;
	/* TCP packets without SYN looked up in the socket table (1 in
	 * sock_sample TCP packets), and those that matched no connection:
	 * no socket, or only a listener without a valid cookie. */
	__u32 tcp_sampled;
	__u32 tcp_nosock;
	/* enum ddos_prot_event. */
	__u32 prot[DDOS_PROT_EVENT_MAX];
	/* UDP (first fragments) by source-port class. */
	__u32 udp_vec_pkts[DDOS_UDP_CLASSES];
	__u64 udp_vec_bytes[DDOS_UDP_CLASSES];
};

/* HyperLogLog registers of one victim record: register hash >> 26, value
 * 1 + leading zeros of hash << 6 (at most 27), hash = hll_hash(source). */
struct ddos_victim_hll {
	/* Over the source of every packet. */
	__u8 src[DDOS_HLL_REGISTERS];
	/* Over the source of every SYN (without ACK). */
	__u8 syn_src[DDOS_HLL_REGISTERS];
};

/* Load-time configuration of xdp_features (rodata). */
struct ddos_feat_config {
	/* Pairs per slot (powers of two). */
	__u32 cap4;
	__u32 cap6;
	/* Possible CPUs: the per-CPU dimension of the value arrays. */
	__u32 ncpu;
	/* Key of the IPv6 pair hash, random per load. */
	__u32 seed;
	/* The filter's parse limits (the same frames must parse the same way). */
	struct parse_limits limits;
	/* Victims per slot (powers of two). */
	__u32 vcap4;
	__u32 vcap6;
	/* 1 in sock_sample TCP packets to a victim is looked up (when it has
	 * no SYN) for the out-of-state estimate; a power of two. */
	__u32 sock_sample;
	/* UDP source ports (host order) of the amplification classes 0..6. */
	__u16 amp_ports[DDOS_UDP_CLASSES];
};

/* Feature stage control (map ddos_fctl, one element, mmapable). */
struct ddos_feat_ctl {
	/* Slot being filled (0 or 1). */
	__u32 slot;
	/* Entries in ddos_protect: 0 skips the protection stage. */
	__u32 n_protect;
	/* Bumped by userspace on every swap. */
	__u64 interval;
};

/* Per-CPU counters of the feature stage (map ddos_featst). */
struct ddos_feat_stats {
	/* Packets recorded into slot 0 / slot 1. */
	__u64 recorded[2];
	__u64 skipped[DDOS_FEAT_SKIP_MAX];
	/* Per slot: packets of a new pair / a new victim that found its table
	 * full (userspace takes the interval's share as a difference). */
	__u64 pairs_full[2];
	__u64 victims_full[2];
};

/* ---- protection per victim (SYN cookies, ACK guard) ---- */

/*
 * A victim: an IPv4 address (/32) or an IPv6 /64 (a carpet over a /64 is
 * one victim). The key of ddos_protect.
 */
struct ddos_victim_key {
	/* 4 or 6. */
	__u32 family;
	/* Network byte order: the IPv4 address in addr[0] (addr[1] = 0), or the first 64 bits of the IPv6 address. */
	__u32 addr[2];
	__u32 _pad;
};

/* Victims ddos_protect holds at most. */
#define DDOS_PROTECT_MAX 4096

/* ddos_protect value flags. */
/* A SYN to the victim: answered from XDP with a cookie SYN-ACK when a
 * listener exists, dropped otherwise; an ACK that finds only a listener
 * must carry a valid cookie. */
#define DDOS_PROTECT_SYN_COOKIES 0x1
/* TCP without SYN to the victim that matches no socket and carries no
 * valid cookie is dropped (ACK, RST and FIN floods). */
#define DDOS_PROTECT_ACK_GUARD 0x2
#define DDOS_PROTECT_ALL 0x3

/*
 * Value of ddos_protect (hash, userspace sets flags; the data path adds to
 * the counters atomically, both the XDP stage and the TC stage).
 */
struct ddos_protect_val {
	/* DDOS_PROTECT_* */
	__u32 flags;
	__u32 _pad;
	/* SYNs answered by a cookie SYN-ACK (XDP_TX). */
	__u64 synack_sent;
	/* ACKs that found only a listener: valid cookie (passed) / invalid (dropped). */
	__u64 cookie_ack_valid;
	__u64 cookie_ack_invalid;
	/* Out-of-state TCP dropped by the ACK guard. */
	__u64 guard_dropped;
	/* SYNs to a port without a listener, dropped. */
	__u64 no_listener;
	/* SYNs left to the kernel (and its own SYN cookies): headers the
	 * SYN-ACK crafting does not rewrite (VLAN tags, IPv4 options, IPv6
	 * extension headers) or a socket other than a listener. */
	__u64 syn_passed;
	/* Malformed SYNs (checksums, options, payload), dropped. */
	__u64 bad_syn;
	/* ACKs handed to the kernel as a request socket by the TC stage. */
	__u64 reqsk_assigned;
	/* SYNs repeating a handshake the kernel already holds (a request
	 * socket from before cookies were on), dropped: the kernel's SYN-ACK
	 * timer answers a real client, and a spoofed flood that repeats its
	 * tuples would otherwise reach the stack through it. */
	__u64 syn_pending;
};

/* The key of the cookie hash (map ddos_ckey, one element): random at load. */
struct ddos_cookie_key {
	__u64 k[2];
};

/* What the TC stage (tc_cookie.bpf.c) did with an ACK it looked at (map ddos_tcst, per CPU). */
enum ddos_tc_stat { /* rust: usize */
	/* Valid cookie: the kernel got a request socket and completes the connection. */
	DDOS_TC_ASSIGNED = 0,
	/* Only a listener and the cookie is invalid: left to the kernel (it answers RST). */
	DDOS_TC_INVALID = 1,
	/* Valid cookie but the kernel refused the request socket (sysctls, listener gone). */
	DDOS_TC_REFUSED = 2,
	/* A socket other than a listener matched: the connection exists. */
	DDOS_TC_IN_STATE = 3,
	DDOS_TC_STAT_MAX = 4,
};

/* ---- handshake completions (tp_completions.bpf.c) ---- */

/* Pairs the completion map holds (LRU: the oldest go when it is full). */
#define DDOS_COMPL_MAX 65536

/* Key of ddos_compl: the client (src) and the server (dst), network order, IPv4 in [0]. */
struct ddos_compl_key {
	/* 4 or 6. */
	__u32 family;
	__u32 src[4];
	__u32 dst[4];
};

/* Load-time configuration of tp_completions (rodata). */
struct ddos_compl_config {
	/* Inode number of the protected interface's network namespace. */
	__u32 netns_ino;
	__u32 _pad;
};

/* ---- evidence: packets of an attack, sampled by the filter ---- */

/*
 * While an attack is in progress the daemon marks its victim in
 * ddos_capture (and counts the marks in ddos_capctl.n_active: 0 skips the
 * lookup, so the filter pays one array read per packet when no attack is
 * marked). The filter copies the first `first` packets to the victim that
 * are of the attack's kind (`classes`, DDOS_POLICE_* as for policing, 0:
 * every packet; `sport`: a UDP/TCP source port, 0: any), then 1 in
 * `every`, into the ring buffer ddos_evidence, before it drops or passes
 * them: blocked sources' packets are evidence too.
 */
/* Victims marked at most. */
#define DDOS_CAPTURE_MAX 64
/* Bytes of each packet kept (the headers and the start of the payload). */
#define DDOS_CAPTURE_SNAPLEN 256
/* Size of ddos_evidence (bytes, a power of 2 pages). */
#define DDOS_EVIDENCE_RING (1 << 20)

/* ddos_capctl's one element. */
struct ddos_capture_ctl {
	/* Entries in ddos_capture: 0 skips the lookup. */
	__u32 n_active;
	/* One bit per IPv4 address of a marked victim (all 32 for a prefix
	 * of more than 32 addresses), bit DDOS_CAPTURE_HASH of it: a
	 * blocked source's packet to an address whose bit is clear is dropped
	 * without the full parse and lookup (a superset: userspace sets a bit
	 * before the entry appears and clears it after the entry is gone). */
	__u32 v4_bits;
};

/* The bit of an IPv4 address (network order, as loaded) in v4_bits:
 * the top 5 bits of a multiplicative (Fibonacci) hash. */
#define DDOS_CAPTURE_HASH_MUL 2654435761u
#define DDOS_CAPTURE_HASH_SHIFT 27

/* Bits of ddos_capture_key.family: always matched in full, before the address. */
#define DDOS_CAPTURE_FAMILY_BITS 32

/* Key of ddos_capture (a longest-prefix-match trie): the victim, a host or a
 * prefix (a carpet-bombed /24 or /64), network order, IPv4 in [0]. */
struct ddos_capture_key {
	/* DDOS_CAPTURE_FAMILY_BITS + the victim prefix's length; a lookup
	 * gives the packet's full length (32 + 32, or 32 + 128). */
	__u32 prefixlen;
	/* 4 or 6. */
	__u32 family;
	__u32 addr[4];
};

/* Value of ddos_capture: what to sample (userspace) and how it went (data path). */
struct ddos_capture_val {
	/* The attack's number (userspace's; copied into each record). */
	__u32 id;
	/* DDOS_POLICE_* classes of the attack's packets, 0: every packet. */
	__u32 classes;
	/* Source port of the attack's packets (network order), 0: any. */
	__u16 sport;
	__u16 _pad;
	/* The first `first` packets, then 1 in `every` (0: only the first). */
	__u32 first;
	__u32 every;
	__u32 _pad2;
	/* Packets of the attack seen, sampled, and lost to a full ring.
	 * Atomic adds on an LPM trie's value are safe only where the kernel
	 * puts them: the value follows the node's header and key, so it is
	 * not 8-byte aligned, and a counter straddling two cache lines would
	 * be a split lock (~3 us, stalling the other CPUs: measured in the
	 * lab's EMULATED NIC). With this key and value the node is a 128-byte
	 * unit and these three lie at bytes 76-99 of it: in one line. Keep
	 * the sizes, or move the counters to an array. */
	__u64 seen;
	__u64 sampled;
	__u64 ring_full;
};

/* A record of ddos_evidence: one sampled packet. */
struct ddos_evidence_rec {
	/* ddos_capture_val.id of its attack. */
	__u32 id;
	/* Length of the frame on the wire, and of data[] kept. */
	__u32 len;
	__u32 caplen;
	__u32 _pad;
	/* CLOCK_MONOTONIC when the filter saw it (ns). */
	__u64 ts_ns;
	__u8 data[DDOS_CAPTURE_SNAPLEN];
};

#endif /* RAMPART_DDOS_ABI_H */
