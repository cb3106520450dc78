//! IPFIX export decoded by an independent decoder (netflow_parser): every
//! field of every record comes back as exported, for IPv4 and IPv6, across
//! several messages, templates resent, sequence numbers as RFC 7011 §3.1
//! says; and the exporter really sends them to a UDP collector.
#![allow(clippy::type_complexity)]

use std::net::{IpAddr, UdpSocket};
use std::time::Duration;

use netflow_parser::NetflowParser;
use rampart_stream::apps::flowmeter::{EndReason, FlowKey, FlowRecord};
use rampart_stream::export::ipfix::{Encoder, Exporter, MAX_MESSAGE, TEMPLATE_SECONDS};
use rampart_stream::tuple::{StreamTuple, TupleExt};
use serde_json::Value;

fn rec(i: u32) -> FlowRecord {
    let v6 = i % 3 == 2;
    let (s, d): (IpAddr, IpAddr) = if v6 {
        (
            format!("fd66::{:x}", i + 1).parse().unwrap(),
            "fd10::2".parse().unwrap(),
        )
    } else {
        (
            format!("172.16.{}.{}", i / 250, i % 250 + 1)
                .parse()
                .unwrap(),
            "10.10.0.2".parse().unwrap(),
        )
    };
    let t = StreamTuple::new_l4(
        0,
        s,
        d,
        if i.is_multiple_of(2) { 6 } else { 17 },
        1000 + i as u16,
        80,
        0,
        0,
    );
    FlowRecord {
        key: FlowKey::of(&t),
        first_ns: 1_704_067_200_123_000_000 + u64::from(i) * 1_000_000,
        last_ns: 1_704_067_260_456_000_000 + u64::from(i) * 1_000_000,
        packets: 10 + u64::from(i),
        bytes: 1_000_000_000_000 + u64::from(i) * 7,
        tcp_flags: if i.is_multiple_of(2) { 0x1b } else { 0 },
        end_reason: [
            EndReason::IdleTimeout,
            EndReason::ActiveTimeout,
            EndReason::ForcedEnd,
        ][i as usize % 3],
        flow_id: 0,
        rev_packets: 3 + u64::from(i),
        rev_bytes: 500 + u64::from(i),
        rev_tcp_flags: if i.is_multiple_of(2) { 0x12 } else { 0 },
        ..Default::default()
    }
}

/// Every data record of the decoded messages as {field name: value}.
fn decode(msgs: &[Vec<u8>]) -> (Vec<serde_json::Map<String, Value>>, Vec<(u64, u64)>) {
    decode_with_stats(msgs, None)
}

/// [`decode`], also collecting the options (statistics) data sets.
fn decode_with_stats(
    msgs: &[Vec<u8>],
    mut stats: Option<&mut Vec<Value>>,
) -> (Vec<serde_json::Map<String, Value>>, Vec<(u64, u64)>) {
    let mut p = NetflowParser::default();
    let mut out = Vec::new();
    let mut seqs = Vec::new();
    for m in msgs {
        let r = p.parse_bytes(m);
        assert!(r.error.is_none(), "decoder error: {:?}", r.error);
        let j = serde_json::to_value(&r.packets).unwrap();
        let pkt = &j[0]["IPFix"];
        if std::env::var("DUMP").is_ok() {
            eprintln!(
                "{}",
                serde_json::to_string(&j)
                    .unwrap()
                    .chars()
                    .take(3000)
                    .collect::<String>()
            );
        }
        assert_eq!(pkt["header"]["version"], 10);
        assert_eq!(pkt["header"]["length"].as_u64().unwrap() as usize, m.len());
        let before = out.len();
        let mut options = 0u64;
        for fs in pkt["flowsets"].as_array().unwrap() {
            if std::env::var("DUMP").is_ok() {
                eprintln!(
                    "set {:?}",
                    fs["body"].as_object().map(|o| o.keys().collect::<Vec<_>>())
                );
            }
            if let Some(data) = fs["body"].get("OptionsData") {
                options += data["fields"].as_array().map_or(0, |v| v.len() as u64);
                if let Some(s) = stats.as_deref_mut() {
                    s.push(data.clone());
                }
            }
            if let Some(data) = fs["body"].get("Data") {
                for rec in data["fields"].as_array().unwrap() {
                    let mut map = serde_json::Map::new();
                    for pair in rec.as_array().unwrap() {
                        // IANA elements by name; RFC 5103 reverse ones by theirs.
                        let k = pair[0]
                            .get("IANA")
                            .or_else(|| pair[0].get("ReverseInformationElement"))
                            .and_then(Value::as_str)
                            .unwrap_or_else(|| panic!("unknown element {}", pair[0]))
                            .to_string();
                        map.insert(k, pair[1].clone());
                    }
                    out.push(map);
                }
            }
        }
        // (sequence number, data records in this message)
        seqs.push((
            pkt["header"]["sequence_number"].as_u64().unwrap(),
            (out.len() - before) as u64 + options,
        ));
    }
    (out, seqs)
}

/// The decoder's typed values back to numbers: DataNumber {"U16": n},
/// Duration {secs, nanos} (→ ms), ProtocolType names, TcpControlBits
/// booleans, FlowEndReason names.
fn num(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(s) => match s.as_str() {
            "Tcp" => 6,
            "Udp" => 17,
            "IdleTimeout" => 1,
            "ActiveTimeout" => 2,
            "EndOfFlowDetected" => 3,
            "ForcedEnd" => 4,
            o => panic!("unknown value {o}"),
        },
        Value::Object(o) if o.contains_key("secs") => {
            o["secs"].as_u64().unwrap() * 1000 + o["nanos"].as_u64().unwrap() / 1_000_000
        }
        Value::Object(o) if o.contains_key("syn") => {
            ["fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"]
                .iter()
                .enumerate()
                .map(|(i, f)| u64::from(o[*f].as_bool().unwrap()) << i)
                .sum()
        }
        Value::Object(o) => num(o.values().next().unwrap()),
        other => panic!("not a number: {other}"),
    }
}

fn ip(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => ip(o.values().next().unwrap()),
        other => panic!("not an address: {other}"),
    }
}

#[test]
fn every_field_decodes_as_exported() {
    let mut enc = Encoder::new(7);
    let mut msgs = Vec::new();
    let recs: Vec<FlowRecord> = (0..200).map(rec).collect();
    for r in &recs {
        if let Some(m) = enc.push(*r, 1_704_067_300) {
            msgs.push(m);
        }
    }
    msgs.extend(enc.flush(1_704_067_300));
    assert!(msgs.len() > 5, "{} messages", msgs.len());
    assert!(msgs.iter().all(|m| m.len() <= MAX_MESSAGE));
    let (got, seqs) = decode(&msgs);
    if got.len() != recs.len() {
        panic!(
            "decoded {} of {} records; first: {:?}",
            got.len(),
            recs.len(),
            got.first()
        );
    }
    // Sequence number = data records sent before the message.
    let mut before = 0;
    for (i, (s, n)) in seqs.iter().enumerate() {
        assert_eq!(*s, before, "message {i}");
        before += n;
    }
    // Records come back grouped per message by family; match them by source port.
    for g in &got {
        let sport = num(&g["SourceTransportPort"]);
        let r = recs
            .iter()
            .find(|r| u64::from(r.key.sport) == sport)
            .unwrap();
        let (sk, dk) = if r.key.v6 {
            ("SourceIpv6address", "DestinationIpv6address")
        } else {
            ("SourceIpv4address", "DestinationIpv4address")
        };
        assert_eq!(ip(&g[sk]), r.key.src_addr().to_string(), "{g:?}");
        assert_eq!(ip(&g[dk]), r.key.dst_addr().to_string());
        assert_eq!(num(&g["DestinationTransportPort"]), u64::from(r.key.dport));
        assert_eq!(num(&g["ProtocolIdentifier"]), u64::from(r.key.proto));
        assert_eq!(num(&g["TcpControlBits"]), u64::from(r.tcp_flags));
        assert_eq!(num(&g["PacketDeltaCount"]), r.packets);
        assert_eq!(num(&g["OctetDeltaCount"]), r.bytes);
        assert_eq!(num(&g["FlowStartMilliseconds"]), r.first_ns / 1_000_000);
        assert_eq!(num(&g["FlowEndMilliseconds"]), r.last_ns / 1_000_000);
        assert_eq!(num(&g["FlowEndReason"]), u64::from(r.end_reason.ipfix()));
        // RFC 5103 reverse elements: the responder's direction.
        assert_eq!(num(&g["ReversePacketDeltaCount"]), r.rev_packets, "{g:?}");
        assert_eq!(num(&g["ReverseOctetDeltaCount"]), r.rev_bytes);
        assert_eq!(num(&g["ReverseTcpControlBits"]), u64::from(r.rev_tcp_flags));
    }
    // The exporter statistics (options template 258) came with the templates.
    let mut stats = Vec::new();
    let _ = decode_with_stats(&msgs, Some(&mut stats));
    assert!(
        !stats.is_empty(),
        "an options data set with the exporter statistics"
    );
}

#[test]
fn templates_are_resent_on_a_timer_as_well_as_a_count() {
    let has_templates = |m: &[u8]| m.len() > 20 && m[16..18] == [0, 2];
    let mut enc = Encoder::new(1);
    enc.push(rec(0), 1000);
    let first = enc.flush(1000).unwrap();
    assert!(has_templates(&first));
    enc.push(rec(1), 1010);
    assert!(
        !has_templates(&enc.flush(1010).unwrap()),
        "10 s later, 1 message later: no templates"
    );
    enc.push(rec(2), 1000 + TEMPLATE_SECONDS);
    let late = enc.flush(1000 + TEMPLATE_SECONDS).unwrap();
    assert!(
        has_templates(&late),
        "TEMPLATE_SECONDS later: templates again"
    );
    let (got, _) = decode(&[first, late]);
    assert_eq!(got.len(), 2);
}

#[test]
fn exporter_sends_to_a_udp_collector() {
    let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
    collector
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut x = Exporter::connect(collector.local_addr().unwrap(), 1).unwrap();
    for i in 0..100 {
        x.export(rec(i)).unwrap();
    }
    x.flush().unwrap();
    let mut msgs = Vec::new();
    let mut buf = [0u8; 65536];
    while (msgs.len() as u64) < x.messages {
        let n = collector.recv(&mut buf).unwrap();
        msgs.push(buf[..n].to_vec());
    }
    let (got, _) = decode(&msgs);
    assert_eq!(got.len(), 100);
    assert_eq!(x.records, 100);
    let _ = TupleExt::is_ipv6(&StreamTuple::default());
}

/// The messages as UDP datagrams to port 4739 in a pcap file.
fn pcap_of(msgs: &[Vec<u8>], path: &std::path::Path) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = pcap_file::pcap::PcapWriter::new(f).unwrap();
    for (i, m) in msgs.iter().enumerate() {
        let pkt = rampart_testkit::frame::Frame::udp([127, 0, 0, 1], [127, 0, 0, 1], 40000, 4739)
            .payload(m)
            .build();
        w.write_packet(&pcap_file::pcap::PcapPacket::new(
            Duration::from_millis(1_704_067_300_000 + i as u64),
            pkt.len() as u32,
            &pkt,
        ))
        .unwrap();
    }
}

/// A real collector's decoder: tshark (Wireshark's CFLOW dissector) reads
/// every message without an error and finds every record's counters,
/// forward and reverse.
#[test]
fn tshark_decodes_the_biflows_cleanly() {
    assert!(
        std::process::Command::new("tshark")
            .arg("-v")
            .output()
            .is_ok(),
        "tshark is not installed: ./run test installs it (apt-get install tshark)"
    );
    let recs: Vec<FlowRecord> = (0..60).map(rec).collect();
    let mut enc = Encoder::new(7);
    let mut msgs = Vec::new();
    for r in &recs {
        if let Some(m) = enc.push(*r, 1_704_067_300) {
            msgs.push(m);
        }
    }
    msgs.extend(enc.flush(1_704_067_300));
    let dir = std::env::temp_dir().join(format!("rampart-ipfix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ipfix.pcap");
    pcap_of(&msgs, &path);
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args(["-d", "udp.port==4739,cflow", "-V"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for bad in [
        "Malformed",
        "[Expert Info (Error",
        "Unknown(",
        "no template found",
    ] {
        assert!(
            !text.contains(bad),
            "tshark: {bad}\n{}",
            &text[..text.len().min(4000)]
        );
    }
    if std::env::var("DUMP").is_ok() {
        eprintln!("{text}");
    }
    for r in &recs {
        assert!(
            text.contains(&format!("Packets: {}\n", r.packets)),
            "forward packets {}",
            r.packets
        );
        assert!(
            text.contains(&format!("Packets: {} (Reverse Type 2 PKTS)", r.rev_packets)),
            "reverse packets {}",
            r.rev_packets
        );
        assert!(text.contains(&format!("Octets: {} (Reverse Type 1 BYTES)", r.rev_bytes)));
    }
    assert_eq!(text.matches("(Reverse Type 2 PKTS)").count(), recs.len());
    assert!(
        text.contains("Options Template (Id = 258)"),
        "the statistics options template"
    );
}
