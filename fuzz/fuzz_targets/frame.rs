//! The userspace frame parser (`rampart_stream::parse::parse_frame`, the
//! mirror of bpf/common/parse.h): no panic on any bytes, and a frame that
//! parses keeps parsing to the same tuple when bytes follow it (trailing
//! bytes are Ethernet padding, never a reason to read a header differently).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_stream::parse::parse_frame;

/// The tuple type has no `PartialEq` (it is generated from BTF): compare
/// every field through its `Debug` form.
fn show(
    r: &Result<rampart_stream::tuple::StreamTuple, rampart_stream::parse::ParseStatus>,
) -> String {
    format!("{r:?}")
}

fuzz_target!(|data: &[u8]| {
    let r = parse_frame(data, 1);
    assert_eq!(show(&r), show(&parse_frame(data, 1)), "deterministic");
    if r.is_ok() {
        let mut padded = data.to_vec();
        padded.extend_from_slice(&[0xa5; 64]);
        assert_eq!(
            show(&parse_frame(&padded, 1)),
            show(&r),
            "padding changed the tuple"
        );
    }
});
