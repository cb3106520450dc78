//! JSON events in the conventions users know: Suricata EVE
//! (`timestamp`, `event_type`, `flow_id`, `src_ip`, `src_port`, `dest_ip`,
//! `dest_port`, `proto`, `alert{signature, signature_id, category,
//! severity, action}`, `flow{pkts_toserver, bytes_toserver, start, end,
//! age, reason}`) plus Zeek notice fields (`ts` as epoch seconds, `note`,
//! `msg`, `src`, `dst`, `p`).

use serde::Serialize;

/// ISO 8601 UTC with microseconds, as Suricata writes `timestamp`
/// (`2024-01-01T00:00:00.000000+0000`).
pub fn iso8601(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let us = (ns % 1_000_000_000) / 1000;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{us:06}+0000",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Zeek's `ts`: epoch seconds with µs.
pub fn epoch_secs(ns: u64) -> f64 {
    (ns / 1000) as f64 / 1e6
}

/// IANA protocol name as EVE writes it.
pub fn proto_name(p: u8) -> String {
    match p {
        1 => "ICMP".into(),
        6 => "TCP".into(),
        17 => "UDP".into(),
        58 => "IPv6-ICMP".into(),
        132 => "SCTP".into(),
        o => o.to_string(),
    }
}

/// The `alert` object of an EVE alert.
#[derive(Debug, Clone, Serialize)]
pub struct AlertInfo {
    /// `allowed` (rampart stream detects; mitigation is `rampart ddos`).
    pub action: &'static str,
    /// Generator id (1, as Suricata's rules).
    pub gid: u32,
    /// Rule id.
    pub signature_id: u32,
    /// Revision.
    pub rev: u32,
    /// Human-readable rule.
    pub signature: String,
    /// Classification.
    pub category: &'static str,
    /// 1 (high) .. 3 (low).
    pub severity: u8,
}

/// One alert line: EVE + Zeek notice fields, plus app details under the app's name.
#[derive(Debug, Clone, Serialize)]
pub struct Alert<D: Serialize> {
    /// EVE timestamp.
    pub timestamp: String,
    /// Zeek ts (epoch seconds).
    pub ts: f64,
    /// `alert`.
    pub event_type: &'static str,
    /// FlowID of the key that raised it.
    pub flow_id: u64,
    /// Source address (the offender), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_ip: Option<String>,
    /// Source port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_port: Option<u16>,
    /// Destination (the victim), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dest_ip: Option<String>,
    /// Destination port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dest_port: Option<u16>,
    /// Protocol name.
    pub proto: String,
    /// Zeek notice type.
    pub note: &'static str,
    /// Zeek notice message.
    pub msg: String,
    /// EVE alert.
    pub alert: AlertInfo,
    /// `portscan` / `synflood`.
    pub app: &'static str,
    /// App-specific details.
    pub details: D,
}

/// The Community ID (v1, seed 0) of a flow: what Zeek, Suricata and most
/// flow tools print, so records from different tools can be joined.
/// For ICMP, `sport`/`dport` are the type and code of the packet; a type
/// with a reply type (echo, timestamp, ...) maps the pair like ports so
/// request and reply get the same id.
pub fn community_id(
    src: &std::net::IpAddr,
    dst: &std::net::IpAddr,
    proto: u8,
    sport: u16,
    dport: u16,
    icmp: bool,
) -> String {
    use base64::Engine as _;
    use sha1::{Digest, Sha1};
    let v6 = src.is_ipv6();
    let bytes = |a: &std::net::IpAddr| -> Vec<u8> {
        match a {
            std::net::IpAddr::V4(x) => x.octets().to_vec(),
            std::net::IpAddr::V6(x) => x.octets().to_vec(),
        }
    };
    let (sa, da) = (bytes(src), bytes(dst));
    let (mut sp, mut dp, mut one_way) = (sport, dport, false);
    if icmp {
        // (type → the type that answers it), from the specification.
        let pairs: &[(u16, u16)] = if v6 {
            &[
                (128, 129),
                (129, 128),
                (133, 134),
                (134, 133),
                (135, 136),
                (136, 135),
                (130, 131),
                (131, 130),
                (144, 145),
                (145, 144),
            ]
        } else {
            &[
                (8, 0),
                (0, 8),
                (13, 14),
                (14, 13),
                (15, 16),
                (16, 15),
                (10, 9),
                (9, 10),
                (17, 18),
                (18, 17),
            ]
        };
        match pairs.iter().find(|p| p.0 == sport) {
            Some(p) => dp = p.1,
            None => one_way = true,
        }
        sp = sport;
    }
    let swap = !one_way && (sa > da || (sa == da && sp > dp));
    let (sa, da, sp, dp) = if swap {
        (da, sa, dp, sp)
    } else {
        (sa, da, sp, dp)
    };
    let mut h = Sha1::new();
    h.update(0u16.to_be_bytes());
    h.update(&sa);
    h.update(&da);
    h.update([proto, 0]);
    h.update(sp.to_be_bytes());
    h.update(dp.to_be_bytes());
    format!(
        "1:{}",
        base64::engine::general_purpose::STANDARD.encode(h.finalize())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples of the Community ID specification's test data
    /// (seed 0): TCP, UDP and ICMP echo both ways.
    #[test]
    fn community_id_matches_the_reference_values() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(
            community_id(
                &ip("128.232.110.120"),
                &ip("66.35.250.204"),
                6,
                34855,
                80,
                false
            ),
            "1:LQU9qZlK+B5F3KDmev6m5PMibrg="
        );
        assert_eq!(
            community_id(
                &ip("66.35.250.204"),
                &ip("128.232.110.120"),
                6,
                80,
                34855,
                false
            ),
            "1:LQU9qZlK+B5F3KDmev6m5PMibrg="
        );
        assert_eq!(
            community_id(&ip("192.168.1.52"), &ip("8.8.8.8"), 17, 54585, 53, false),
            "1:d/FP5EW3wiY1vCndhwleRRKHowQ="
        );
        assert_eq!(
            community_id(&ip("192.168.0.89"), &ip("192.168.0.1"), 1, 8, 0, true),
            "1:X0snYXpgwiv9TZtqg64sgzUn6Dk="
        );
        assert_eq!(
            community_id(&ip("192.168.0.1"), &ip("192.168.0.89"), 1, 0, 0, true),
            "1:X0snYXpgwiv9TZtqg64sgzUn6Dk="
        );
    }
}
