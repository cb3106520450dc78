//! The NetFlow v9 / IPFIX decoder of flow input (`[ddos.flow_input]`, UDP
//! packets from any exporter, templates kept per exporter and scope): any
//! bytes, decoded twice from one exporter (so a packet's own templates are
//! cached for the second pass), give no panic; a refused packet adds no
//! sample and its error is one line.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use rampart_ddos_control::flow::netflow::NetflowDecoder;
use rampart_ddos_control::flow::FlowAggregator;
use rampart_ddos_control::Prefix;

/// Every address (a /0 is not a prefix rampart takes).
fn everything() -> Vec<Prefix> {
    ["0.0.0.0/1", "128.0.0.0/1", "::/1", "8000::/1"]
        .iter()
        .map(|p| Prefix::parse(p).unwrap())
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let mut dec = NetflowDecoder::new(Duration::from_secs(60), None);
    let from = SocketAddr::from(([192, 0, 2, 1], 2055));
    let mut agg = FlowAggregator::new(everything(), 64);
    for _ in 0..2 {
        let mut out = Vec::new();
        match dec.decode(from, data, &mut out) {
            Ok(d) => {
                assert_eq!(d.records as usize, out.len());
                for s in &out {
                    assert!(s.rate >= 1);
                    agg.add(s);
                }
            }
            Err(e) => {
                assert!(out.is_empty(), "a refused packet adds nothing");
                assert!(!e.to_string().contains('\n'), "one-line error: {e:?}");
            }
        }
    }
    let _ = agg.take();
});
