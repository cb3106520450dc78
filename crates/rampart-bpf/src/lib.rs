//! rampart's BPF programs, compiled from `bpf/*/*.bpf.c` at build time.
//!
//! Each program is a module holding its libbpf-rs skeleton; the structs of
//! `bpf/<dir>/abi.h` that a program uses are in that module's `types`
//! submodule, generated from the object's BTF — the one definition of the
//! ABI. [`abi`] re-exports the shared ones under stable names and asserts
//! their layout.

include!(concat!(env!("OUT_DIR"), "/skels.rs"));

pub mod abi;
