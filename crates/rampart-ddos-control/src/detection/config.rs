//! `[detect]` of detection: thresholds per vector, baselines,
//! attribution, policing, aggregation, protection and the attack
//! lifecycle. Every key has a default a real server can ship; the doc
//! comment of each says why.

use serde::{Deserialize, Serialize};

use crate::error::{check_f64, check_f64_open, check_u64, ConfigError};

/// Absolute per-vector floors (packets/s to one victim). The threshold of
/// a victim's vector is `max(floor, multiplier × baseline)`; with no
/// baseline yet (warm-up, or after a configuration change) only the floor
/// applies. Each floor is a rate a healthy server does not reach in that
/// vector, so that nothing is flagged before a baseline exists.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Floors {
    /// Incomplete TCP handshakes/s (SYNs that no completion follows).
    /// Default 1000: a healthy server completes nearly every handshake; the
    /// lost ones (client gave up, SYN retransmits) are a few per cent of
    /// its new connections, and a server with 20,000 new connections/s is
    /// rare enough to raise this or let the baseline learn it.
    pub syn_flood: f64,
    /// Out-of-state TCP packets/s (no socket, no valid cookie): late
    /// segments after a close are a handful per second. Default 2000.
    pub ack_flood: f64,
    /// UDP packets/s from one amplification source port (DNS, NTP, ...).
    /// Default 2000: a server that is not itself a busy DNS/NTP client sees
    /// a few replies per second from those ports (a recursive resolver
    /// should raise this or whitelist its upstream servers).
    pub udp_amplification: f64,
    /// UDP packets/s from any other source port. Default 50000: high,
    /// because UDP services (DNS servers, QUIC, games) legitimately receive
    /// a lot of it; the learned baseline raises it further.
    pub udp_flood: f64,
    /// ICMP/ICMPv6 packets/s. Default 2000: monitoring pings and
    /// path-MTU messages are far below.
    pub icmp_flood: f64,
    /// IP fragments/s. Default 2000: fragmented traffic toward a server is
    /// rare (large UDP replies to the server's own queries).
    pub fragment_flood: f64,
}

impl Default for Floors {
    fn default() -> Self {
        Self {
            syn_flood: 1000.0,
            ack_flood: 2000.0,
            udp_amplification: 2000.0,
            udp_flood: 50_000.0,
            icmp_flood: 2000.0,
            fragment_flood: 2000.0,
        }
    }
}

/// `[detect]` (detection).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DetectionConfig {
    /// `[detect.floors]`.
    pub floors: Floors,
    /// Threshold = max(floor, multiplier × baseline). Default 4: the
    /// baseline is already a high level of the victim's normal traffic, so
    /// 4× is an attack, not a busy hour. 1 < x <= 1000.
    pub multiplier: f64,
    /// EWMA weight of a new sample of a baseline (one sample per interval
    /// judged normal for the victim). Default 0.05 (about 10 s of 0.5 s
    /// intervals). 0 < x <= 1.
    pub baseline_alpha: f64,
    /// Largest rise of a baseline per minute, as a fraction of
    /// max(baseline, floor / multiplier). Default 0.1: legitimate traffic
    /// grows over hours, while a slow ramp that tries to teach the baseline
    /// its flood grows over minutes and crosses the threshold first.
    /// 0 <= x <= 100.
    pub baseline_growth_per_min: f64,
    /// Smallest rate (packets/s) of a source's attack traffic to a victim
    /// for it to be blocked. Default 20: low enough that hundreds of
    /// reflectors at ~100 pps are each caught (it is the victim's
    /// aggregate that triggers, not this), high enough that a spoofed flood
    /// (one or two packets per source per interval) never fills the
    /// blacklist. 0 < x <= 1e9.
    pub source_min_pps: f64,
    /// Quantile of per-source rates to a victim in its normal intervals,
    /// learned (EWMA) as the victim's per-source level: the unban level
    /// and the policing rate. Default 0.9 over at least 10 sources: a
    /// statistic of many sources, never the single heaviest client.
    /// 0 < x <= 1.
    pub source_level_quantile: f64,
    /// Floor of the per-source level (packets/s). Default 50. 0 <= x <= 1e9.
    pub source_level_min_pps: f64,
    /// Smallest policing rate (packets/s): a policed source keeps at least
    /// this. Default 1000: a NAT gateway or a flash-crowd heavy hitter
    /// keeps working while an attack is on. 0 < x <= 1e9.
    pub police_min_pps: f64,
    /// Distinct destination ports (one source to one victim, over
    /// `scan_window_s`) with mostly incomplete handshakes that make a port
    /// scan. Default 32: clients use one to a few ports. 2 <= x <= 65536.
    pub scan_min_ports: f64,
    /// Window over which a source's ports are accumulated. Default 10 s.
    /// 0 < x <= 3600.
    pub scan_window_s: f64,
    /// A SYN flood is spoofed when the distinct sources of the victim's
    /// SYNs are at least this many in the interval... Default 1000.
    /// 1 <= x <= 1e12.
    pub spoof_min_distinct: f64,
    /// ... and at least this fraction of its SYN count (one SYN per
    /// source: random source addresses). Then SYN cookies and the ACK guard
    /// are switched on for the victim instead of filling the blacklist.
    /// Default 0.5 (the estimate's error is about 13%). 0 < x <= 1.
    pub spoof_min_ratio: f64,
    /// IPv4 victims of one /24 are also judged together (carpet bombing)
    /// when at least this many of them receive traffic of the vector and no
    /// single one carries half of it. Default 8. 2..=256.
    pub carpet_min_victims: u32,
    /// Block a /24 (IPv4) or /64 (IPv6) instead of its members when at
    /// least this many of its addresses are blocked for one attack...
    /// Default 16. 2..=1000000.
    pub aggregate_min_sources: u32,
    /// ... and at most this many other addresses of the prefix were seen
    /// completing handshakes or sending normal traffic in the last
    /// `known_good_s` (the collateral, reported in the alert). Default 0.
    /// 0..=1000000.
    pub max_collateral: u32,
    /// How long a source that completed handshakes (or sent traffic to a
    /// victim in a normal interval) is remembered, for policing instead of
    /// blocking and for the collateral of an aggregate. Default 600 s.
    /// 1 <= x <= 604800.
    pub known_good_s: f64,
    /// Sources remembered at most (each of the two sets); beyond, new ones
    /// are not added until the oldest generation expires. Default 262144.
    /// 1..=16777216.
    pub known_good_max: usize,
    /// An attack ends when every vector of the victim (passed traffic,
    /// plus what is dropped from the sources blocked or policed for it)
    /// has stayed below its threshold this long. Default 30 s: a pulse
    /// attack (on/off every few seconds) stays one attack, and nothing is
    /// unbanned in its pauses. 0 < x <= 86400.
    pub attack_end_s: f64,
    /// SYN cookies / ACK guard stay on this long after the flood that
    /// switched them on went below its threshold. Default 30 s.
    /// 0 <= x <= 86400.
    pub protect_hold_s: f64,
    /// A blocked source is unbanned when its own measured rate (all tiers)
    /// has stayed below its victim's per-source level this long, and the
    /// attack on its victim has ended. Default 60 s. 0 <= x <= 31536000.
    pub hold_s: f64,
    /// Victim state (baselines, level) of a victim not seen for this long
    /// is forgotten. Default 86400 s. 1 <= x <= 31536000.
    pub victim_forget_s: f64,
    /// Most block decisions in one interval (the heaviest sources first;
    /// the rest follow in the next intervals if they persist). Default
    /// 65536. 1..=16777216.
    pub max_blocks_per_interval: usize,
    /// Prefixes never blocked nor policed (addresses or CIDR prefixes,
    /// host bits zero). Their pair records are removed before attribution.
    /// Default empty.
    pub whitelist: Vec<String>,
}

impl Default for DetectionConfig {
    fn default() -> Self {
        Self {
            floors: Floors::default(),
            multiplier: 4.0,
            baseline_alpha: 0.05,
            baseline_growth_per_min: 0.1,
            source_min_pps: 20.0,
            source_level_quantile: 0.9,
            source_level_min_pps: 50.0,
            police_min_pps: 1000.0,
            scan_min_ports: 32.0,
            scan_window_s: 10.0,
            spoof_min_distinct: 1000.0,
            spoof_min_ratio: 0.5,
            carpet_min_victims: 8,
            aggregate_min_sources: 16,
            max_collateral: 0,
            known_good_s: 600.0,
            known_good_max: 262_144,
            attack_end_s: 30.0,
            protect_hold_s: 30.0,
            hold_s: 60.0,
            victim_forget_s: 86_400.0,
            max_blocks_per_interval: 65536,
            whitelist: Vec::new(),
        }
    }
}

impl DetectionConfig {
    /// Check every value (whitelist syntax included).
    ///
    /// # Errors
    /// The first bad key, with its allowed range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let f = &self.floors;
        for (k, v) in [
            ("syn_flood", f.syn_flood),
            ("ack_flood", f.ack_flood),
            ("udp_amplification", f.udp_amplification),
            ("udp_flood", f.udp_flood),
            ("icmp_flood", f.icmp_flood),
            ("fragment_flood", f.fragment_flood),
        ] {
            check_f64_open(&format!("detect.floors.{k}"), v, 0.0, 1e12)?;
        }
        if !(self.multiplier.is_finite() && self.multiplier > 1.0 && self.multiplier <= 1000.0) {
            return Err(ConfigError::OutOfRange {
                key: "detect.multiplier".into(),
                value: format!("{}", self.multiplier),
                allowed: "1 < x <= 1000".into(),
            });
        }
        check_f64_open("detect.baseline_alpha", self.baseline_alpha, 0.0, 1.0)?;
        check_f64(
            "detect.baseline_growth_per_min",
            self.baseline_growth_per_min,
            0.0,
            100.0,
        )?;
        check_f64_open("detect.source_min_pps", self.source_min_pps, 0.0, 1e9)?;
        check_f64_open(
            "detect.source_level_quantile",
            self.source_level_quantile,
            0.0,
            1.0,
        )?;
        check_f64(
            "detect.source_level_min_pps",
            self.source_level_min_pps,
            0.0,
            1e9,
        )?;
        check_f64_open("detect.police_min_pps", self.police_min_pps, 0.0, 1e9)?;
        check_f64("detect.scan_min_ports", self.scan_min_ports, 2.0, 65536.0)?;
        check_f64_open("detect.scan_window_s", self.scan_window_s, 0.0, 3600.0)?;
        check_f64(
            "detect.spoof_min_distinct",
            self.spoof_min_distinct,
            1.0,
            1e12,
        )?;
        check_f64_open("detect.spoof_min_ratio", self.spoof_min_ratio, 0.0, 1.0)?;
        check_u64(
            "detect.carpet_min_victims",
            u64::from(self.carpet_min_victims),
            2,
            256,
        )?;
        check_u64(
            "detect.aggregate_min_sources",
            u64::from(self.aggregate_min_sources),
            2,
            1_000_000,
        )?;
        check_u64(
            "detect.max_collateral",
            u64::from(self.max_collateral),
            0,
            1_000_000,
        )?;
        check_f64("detect.known_good_s", self.known_good_s, 1.0, 604_800.0)?;
        check_u64(
            "detect.known_good_max",
            self.known_good_max as u64,
            1,
            1 << 24,
        )?;
        check_f64_open("detect.attack_end_s", self.attack_end_s, 0.0, 86_400.0)?;
        check_f64("detect.protect_hold_s", self.protect_hold_s, 0.0, 86_400.0)?;
        check_f64("detect.hold_s", self.hold_s, 0.0, 31_536_000.0)?;
        check_f64(
            "detect.victim_forget_s",
            self.victim_forget_s,
            1.0,
            31_536_000.0,
        )?;
        check_u64(
            "detect.max_blocks_per_interval",
            self.max_blocks_per_interval as u64,
            1,
            1 << 24,
        )?;
        crate::prefix::parse_whitelist(&self.whitelist).map(|_| ())
    }

    /// The fingerprint of what detection learns under this configuration
    /// on interface `iface`: FNV-1a (64 bits, hex) of every key but the
    /// whitelist (which changes what is blocked, not what is learned).
    pub fn fingerprint(&self, iface: &str) -> String {
        let mut c = self.clone();
        c.whitelist.clear();
        let text = format!("{c:?}|iface={iface}");
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_parse_from_an_empty_section() {
        DetectionConfig::default().validate().unwrap();
        let c: DetectionConfig = toml::from_str("").unwrap();
        assert_eq!(c, DetectionConfig::default());
        let c: DetectionConfig =
            toml::from_str("multiplier = 6\n[floors]\nsyn_flood = 5000\n").unwrap();
        assert_eq!(c.multiplier, 6.0);
        assert_eq!(c.floors.syn_flood, 5000.0);
        assert_eq!(c.floors.icmp_flood, 2000.0);
        let text = toml::to_string(&DetectionConfig::default()).unwrap();
        assert_eq!(
            toml::from_str::<DetectionConfig>(&text).unwrap(),
            DetectionConfig::default()
        );
        let e = toml::from_str::<DetectionConfig>("multiplyer = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `multiplyer`"), "{e}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = |f: fn(&mut DetectionConfig)| {
            let mut c = DetectionConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert_eq!(
            err(|c| c.multiplier = 1.0),
            "detect.multiplier = 1: out of range, allowed 1 < x <= 1000"
        );
        assert_eq!(
            err(|c| c.floors.syn_flood = 0.0),
            "detect.floors.syn_flood = 0: out of range, allowed 0 < x <= 1000000000000"
        );
        assert_eq!(
            err(|c| c.spoof_min_ratio = f64::NAN),
            "detect.spoof_min_ratio = NaN: out of range, allowed 0 < x <= 1"
        );
        assert_eq!(
            err(|c| c.carpet_min_victims = 1),
            "detect.carpet_min_victims = 1: out of range, allowed 2 <= x <= 256"
        );
        assert!(err(|c| c.whitelist = vec!["10.0.0.1/8".into()]).starts_with("detect.whitelist[0]"));
    }

    #[test]
    fn every_key_is_in_the_how_detection_works_page() {
        let doc = include_str!("../../../../docs/ddos.md");
        let start = doc.find("### How detection works").expect("section");
        let end = doc[start..].find("\n### ").map_or(doc.len(), |e| start + e);
        let page = &doc[start..end];
        let v: toml::Value = toml::Value::try_from(DetectionConfig::default()).unwrap();
        for (k, x) in v.as_table().unwrap() {
            if let Some(t) = x.as_table() {
                assert!(page.contains(&format!("`{k}.<vector>`")), "{k}");
                for (f, val) in t {
                    assert!(page.contains(f.as_str()), "{k}.{f}");
                    let n = val.as_float().unwrap();
                    assert!(
                        page.contains(&format!("| {n} |"))
                            || page.contains(&format!("| {n} each |")),
                        "{k}.{f} = {n}"
                    );
                }
            } else {
                assert!(
                    page.contains(&format!("`{k}`")),
                    "{k} missing from docs/ddos.md"
                );
            }
        }
    }

    #[test]
    fn fingerprint_follows_what_is_learned_not_the_whitelist() {
        let a = DetectionConfig::default();
        let mut b = a.clone();
        b.whitelist.push("192.0.2.0/24".into());
        assert_eq!(a.fingerprint("eth0"), b.fingerprint("eth0"));
        assert_ne!(a.fingerprint("eth0"), a.fingerprint("eth1"));
        b.floors.syn_flood = 999.0;
        assert_ne!(a.fingerprint("eth0"), b.fingerprint("eth0"));
        assert_eq!(a.fingerprint("eth0").len(), 16);
    }
}
