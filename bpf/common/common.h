/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Includes and small helpers every rampart BPF program uses. */
#ifndef RAMPART_COMMON_COMMON_H
#define RAMPART_COMMON_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef likely
#define likely(x) __builtin_expect(!!(x), 1)
#endif
#ifndef unlikely
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#define RAMPART_LICENSE char LICENSE[] SEC("license") = "Dual BSD/GPL"

#endif /* RAMPART_COMMON_COMMON_H */
