/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Common ABI definitions shared by every BPF program and, through the
 * skeleton types libbpf-cargo generates from BTF, by the Rust userspace.
 *
 * Rules for everything under bpf/shared/:
 *  - fixed-width types only, explicit padding, no bitfields;
 *  - every struct that crosses the boundary has a size assert in Rust
 *    (crates/rampart-bpf/src/abi.rs);
 *  - enums are the single source of truth for names shown to users
 *    (drop reasons, tiers, ...).
 */
#ifndef RAMPART_SHARED_ABI_H
#define RAMPART_SHARED_ABI_H

#include <linux/types.h>

#endif /* RAMPART_SHARED_ABI_H */
