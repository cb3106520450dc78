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
