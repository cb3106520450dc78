//! The pcap/pcapng reader of `rampart stream` (`--source pcap:FILE`): any
//! bytes are read without a panic; records come in order and each frame
//! goes through the userspace parser as `stream run` does; a refusal is one
//! line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_stream::parse::parse_frame;
use rampart_stream::source::pcap::read_capture;

fuzz_target!(|data: &[u8]| {
    let mut seen = 0u64;
    let r = read_capture(data, |i, ts, frame| {
        assert_eq!(i, seen, "records in file order");
        seen += 1;
        let _ = parse_frame(frame, ts);
        true
    });
    match r {
        Ok(n) => assert_eq!(n, seen, "the count is the records walked"),
        Err(e) => assert!(!e.contains('\n'), "one-line error: {e:?}"),
    }
});
