//! The sFlow v5 decoder of flow input (`[ddos.flow_input]`, UDP datagrams
//! from any agent): any bytes decode without a panic; a refused datagram
//! adds no sample and its error is one line; an accepted one gives samples
//! worth their sampling rate, which the aggregator takes without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_ddos_control::flow::{sflow, FlowAggregator};
use rampart_ddos_control::Prefix;

/// Every address (a /0 is not a prefix rampart takes).
fn everything() -> Vec<Prefix> {
    ["0.0.0.0/1", "128.0.0.0/1", "::/1", "8000::/1"]
        .iter()
        .map(|p| Prefix::parse(p).unwrap())
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    match sflow::decode(data, None, &mut out) {
        Ok(d) => {
            assert_eq!(d.records as usize, out.len());
            let mut agg = FlowAggregator::new(everything(), 64);
            for s in &out {
                assert!(s.rate >= 1 && s.packets == s.rate, "{s:?}");
                agg.add(s);
            }
            let _ = agg.take();
        }
        Err(e) => {
            assert!(out.is_empty(), "a refused datagram adds nothing");
            assert!(!e.to_string().contains('\n'), "one-line error: {e:?}");
        }
    }
});
