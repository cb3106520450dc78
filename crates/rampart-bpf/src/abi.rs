//! The ABI shared with the BPF programs, one module per `bpf/<dir>/abi.h`.
//!
//! Each module holds the header's structs — the types libbpf-cargo
//! generates from the programs' BTF, under stable names, with layout
//! asserts (a change to a header that alters a size fails the build here,
//! not at run time) — and every integer constant of the header (`#define`s
//! and enum members, under their C names) with a `<ENUM>_LABELS` table per
//! reason enum, generated from the header's text by the build script
//! (`build/cheader.rs`). Nothing here is typed by hand but the names.
//!
//! Every ABI struct is [`bytemuck::Pod`]: map keys and values, rodata and
//! mmapped arrays are viewed as bytes and back with `bytemuck` only.

/// Marks BTF-generated ABI structs as plain old data.
macro_rules! pod {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: libbpf-cargo generates a `#[repr(C)]` struct of integers,
        // arrays and other such structs for a BTF struct, and spells every
        // hole of the C layout out as a `__pad_N: [u8; N]` field: it has no
        // implicit padding, no pointers, no enums or bools, so every bit
        // pattern is a valid value (the size asserts pin the layout).
        unsafe impl bytemuck::Zeroable for $t {}
        // SAFETY: as above.
        unsafe impl bytemuck::Pod for $t {}
    )*};
}

pub mod common;
pub mod ddos;
pub mod lab;
pub mod stream;
pub mod tenant;

// What the BPF_PROG_RUN probes under bpf/test/ write for the tests to read.
pod!(
    crate::xdp_parse_probe::types::parse_out,
    crate::xdp_stream_probe::types::stream_probe_out,
);
