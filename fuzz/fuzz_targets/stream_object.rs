//! The offload planner's object inspection (`rampart stream plan`:
//! instructions, stack, helpers, maps of a built BPF object): any bytes
//! are inspected or refused without a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_stream::offload::objcheck::inspect_bytes;

fuzz_target!(|data: &[u8]| {
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| {
        libbpf_rs::set_print(None);
    });
    for program in ["xdp_stream", "xdp_stream_rx", "xdp_drop"] {
        if let Ok(r) = inspect_bytes(data, "fuzz.o", program) {
            assert!(r.insns > 0 || r.helpers.is_empty());
        }
    }
});
