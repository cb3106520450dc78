//! What the stream offload saves a source replica per packet, measured in
//! userspace alone (docs/benchmarks.md, "Stream offload"): the offload-off
//! source parses each frame and the FlowID operator hashes it; the
//! offload-on source copies a 56-byte record. Frames and records lie in a
//! UMEM-like buffer (2 KiB stride, larger than the caches, walked in order
//! as the RX ring hands them out), so each one is a cache miss as it is
//! when the kernel has just written it on another CPU.
//!
//! `cargo run --release -p rampart-bench --example offload_parse_cost`
use std::hint::black_box;
use std::time::Instant;

use rampart_stream::flowid::{set_flow_id, KeyMode};
use rampart_stream::parse::parse_frame;
use rampart_stream::tuple::StreamTuple;
use rampart_testkit::frame::Frame;

const STRIDE: usize = 2048;
const FRAMES: usize = 65_536; // 128 MiB of UMEM

/// A 60-byte Ethernet/IPv4/UDP frame from 172.16.x.y (the lab generator's shape).
fn frame(i: u32) -> Vec<u8> {
    let src = (0xac10_0000u32 + i % 4096).to_be_bytes();
    Frame::udp(src, [10, 10, 0, 2], 1024, 9).zeros(18).build()
}

fn main() {
    // Frame i at i * STRIDE, its record at i * STRIDE + REC: the same
    // pages (and TLB entries) for both walks.
    const REC: usize = STRIDE / 2;
    let mut umem = vec![0u8; STRIDE * FRAMES];
    for i in 0..FRAMES {
        let f = frame(i as u32);
        umem[i * STRIDE..i * STRIDE + 60].copy_from_slice(&f);
        let mut t = parse_frame(&f, 1).expect("frame parses");
        set_flow_id(&mut t, KeyMode::FiveTuple);
        // SAFETY: StreamTuple is plain data; the slot holds 56 bytes.
        unsafe {
            std::ptr::write_unaligned(
                umem[i * STRIDE + REC..].as_mut_ptr().cast::<StreamTuple>(),
                t,
            )
        };
    }
    let rounds = 20;
    let mut acc = 0u32;
    for pass in 0..6 {
        let off_walk = |acc: &mut u32| {
            let t0 = Instant::now();
            for _ in 0..rounds {
                for i in 0..FRAMES {
                    let d = &umem[i * STRIDE..i * STRIDE + 60];
                    let mut t = parse_frame(black_box(d), 1).expect("frame parses");
                    set_flow_id(&mut t, KeyMode::FiveTuple);
                    *acc ^= black_box(t).flow_id;
                }
            }
            t0.elapsed().as_secs_f64() * 1e9 / (rounds * FRAMES) as f64
        };
        let on_walk = |acc: &mut u32| {
            let t0 = Instant::now();
            for _ in 0..rounds {
                for i in 0..FRAMES {
                    let r = &umem[i * STRIDE + REC..i * STRIDE + REC + 56];
                    let t: StreamTuple = bytemuck::pod_read_unaligned(black_box(r));
                    *acc ^= black_box(t).flow_id;
                }
            }
            t0.elapsed().as_secs_f64() * 1e9 / (rounds * FRAMES) as f64
        };
        // Alternate which walk goes first.
        let (off, on) = if pass % 2 == 0 {
            let off = off_walk(&mut acc);
            (off, on_walk(&mut acc))
        } else {
            let on = on_walk(&mut acc);
            (off_walk(&mut acc), on)
        };
        println!(
            "{{\"pass\":{pass},\"off_parse_flowid_ns\":{off:.1},\"on_record_copy_ns\":{on:.1},\"saved_ns\":{:.1},\"check\":{acc}}}",
            off - on
        );
    }
}
