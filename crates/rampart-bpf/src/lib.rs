//! rampart's BPF programs, compiled from `bpf/*/*.bpf.c` at build time.
//!
//! Each program is a module holding its libbpf-rs skeleton; the structs of
//! `bpf/<dir>/abi.h` that a program uses are in that module's `types`
//! submodule, generated from the object's BTF — the one definition of the
//! ABI. [`abi`] re-exports the shared ones under stable names, asserts
//! their layout, and holds every constant of the headers.

include!(concat!(env!("OUT_DIR"), "/skels.rs"));

pub mod abi;

// The build script's header reader, unit-tested here.
#[cfg(test)]
#[path = "../build/cheader.rs"]
#[allow(dead_code)]
mod cheader;
