//! Configuration of the control logic: the `[detect]`, `[monitor]` and
//! `[offload]` sections of the daemon's TOML file.
//!
//! Every struct is `serde(default, deny_unknown_fields)`: a missing key
//! takes the default written in its doc comment (the `Default` impl), an
//! unknown key is an error. [`DetectConfig::validate`],
//! [`MonitorConfig::validate`] and [`PlannerConfig::validate`] check
//! ranges and return a [`ConfigError`] naming the key and the allowed range.

use serde::{Deserialize, Serialize};

use crate::error::{check_f64, check_f64_open, check_u64, ConfigError};

/// `[detect]`: which detectors run, their settings, and the whitelist.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DetectConfig {
    /// `[detect.rate]`: per-source rate above a learned baseline.
    pub rate: RateConfig,
    /// `[detect.entropy]`: change of source/destination/port entropy.
    pub entropy: EntropyConfig,
    /// `[detect.signatures.*]`: UDP amplification, SYN flood, ICMP flood.
    pub signatures: SignatureConfig,
    /// Prefixes never blocked (IPv4/IPv6 addresses or CIDR prefixes, host
    /// bits zero). Their traffic is removed from each interval before
    /// detection (it neither triggers a detector nor enters a baseline),
    /// and a decision whose prefix overlaps a whitelisted prefix is
    /// dropped. Default: empty.
    pub whitelist: Vec<String>,
    /// An attack is "in progress" ([`crate::Detection::under_attack`])
    /// until this many consecutive intervals pass with no detector
    /// flagging anything. Default 3; 1..=100000.
    pub attack_end_intervals: u32,
    /// Most decisions returned for one interval (the highest-pps sources
    /// first; the rest are decided in the next intervals if they persist).
    /// Default 65536; 1..=16777216.
    pub max_blocks_per_interval: usize,
}

impl Default for DetectConfig {
    fn default() -> Self {
        Self {
            rate: RateConfig::default(),
            entropy: EntropyConfig::default(),
            signatures: SignatureConfig::default(),
            whitelist: Vec::new(),
            attack_end_intervals: 3,
            max_blocks_per_interval: 65536,
        }
    }
}

impl DetectConfig {
    /// Check every value (whitelist syntax included).
    ///
    /// # Errors
    /// The first bad key, with its allowed range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.rate.validate()?;
        self.entropy.validate()?;
        self.signatures.validate()?;
        check_u64(
            "detect.attack_end_intervals",
            u64::from(self.attack_end_intervals),
            1,
            100_000,
        )?;
        check_u64(
            "detect.max_blocks_per_interval",
            self.max_blocks_per_interval as u64,
            1,
            1 << 24,
        )?;
        crate::detect::parse_whitelist(&self.whitelist).map(|_| ())
    }
}

/// `[detect.rate]`: block a source whose packet or bit rate exceeds
/// `max(floor, multiplier × baseline)`.
///
/// The baseline is learned from normal intervals (intervals in which this
/// detector flagged nothing): each such interval gives the `quantile` of
/// the per-source rates (pps and bps separately), and the baseline is the
/// exponentially weighted moving average of these samples (weight `alpha`).
/// The baseline rises by at most `max_growth` (a fraction of itself) per
/// learned interval, so sources ramping up faster than that cannot drag
/// the threshold along with them (a ramp slower than `max_growth` per
/// interval is learned as normal growth: that is the limit of any learned
/// baseline). Until `warmup_intervals` normal intervals are learned the
/// threshold is `max(floor, warmup_pps)` / `max(floor, warmup_bps)`.
///
/// A flash crowd (many new sources, each at a normal rate) leaves the
/// per-source quantile where it was: nothing is blocked.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateConfig {
    /// Run this detector. Default true.
    pub enabled: bool,
    /// Quantile of per-source rates learned each normal interval.
    /// Default 0.99; 0 < x <= 1.
    pub quantile: f64,
    /// EWMA weight of a new sample. Default 0.05; 0 < x <= 1.
    pub alpha: f64,
    /// Threshold = multiplier × baseline. Default 8; 1 < x <= 10000.
    pub multiplier: f64,
    /// Largest rise of the baseline per learned interval, as a fraction of
    /// itself. Default 0.02; 0 <= x <= 10.
    pub max_growth: f64,
    /// Packet-rate floor: never block below this (pps). Default 1000;
    /// 0 <= x <= 1e12.
    pub min_pps: f64,
    /// Bit-rate floor (bits/s). Default 200e6 (200 Mbit/s); 0 <= x <= 1e15.
    pub min_bps: f64,
    /// Normal intervals to learn before the baseline is used. Default 5;
    /// 0..=100000.
    pub warmup_intervals: u32,
    /// Packet-rate threshold during warm-up: only blatant sources, since
    /// nothing is known yet (heavy legitimate clients such as load
    /// generators or backup hosts often exceed 10 kpps). Default 100000;
    /// 0 <= x <= 1e12.
    pub warmup_pps: f64,
    /// Bit-rate threshold during warm-up. Default 1e9; 0 <= x <= 1e15.
    pub warmup_bps: f64,
}

impl Default for RateConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            quantile: 0.99,
            alpha: 0.05,
            multiplier: 8.0,
            max_growth: 0.02,
            min_pps: 1000.0,
            min_bps: 200e6,
            warmup_intervals: 5,
            warmup_pps: 100_000.0,
            warmup_bps: 1e9,
        }
    }
}

impl RateConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_f64_open("detect.rate.quantile", self.quantile, 0.0, 1.0)?;
        check_f64_open("detect.rate.alpha", self.alpha, 0.0, 1.0)?;
        if !(self.multiplier.is_finite() && self.multiplier > 1.0 && self.multiplier <= 10_000.0) {
            return Err(ConfigError::OutOfRange {
                key: "detect.rate.multiplier".into(),
                value: format!("{}", self.multiplier),
                allowed: "1 < x <= 10000".into(),
            });
        }
        check_f64("detect.rate.max_growth", self.max_growth, 0.0, 10.0)?;
        check_f64("detect.rate.min_pps", self.min_pps, 0.0, 1e12)?;
        check_f64("detect.rate.min_bps", self.min_bps, 0.0, 1e15)?;
        check_u64(
            "detect.rate.warmup_intervals",
            u64::from(self.warmup_intervals),
            0,
            100_000,
        )?;
        check_f64("detect.rate.warmup_pps", self.warmup_pps, 0.0, 1e12)?;
        check_f64("detect.rate.warmup_bps", self.warmup_bps, 0.0, 1e15)
    }
}

/// `[detect.entropy]`: flag an anomaly when the Shannon entropy (bits) of
/// the source, destination or destination-port distribution of the
/// packets changes between consecutive intervals by more than
/// `max(min_delta_bits, sensitivity × mean |change|)`, the mean being an
/// EWMA (weight `alpha`) over normal intervals. While the anomaly lasts,
/// the sources that drive it are blocked: sources ranked by their
/// contribution p·log2(p/q) to the divergence of the current source
/// distribution p from the last normal one q, taken in that order until
/// they cover `driver_share` of the positive divergence (and then every
/// further source contributing at least half as much as the one that
/// completed the cover, so near-equal attackers are not split by the
/// cut), keeping only those
/// whose rate is at least `max(min_pps, driver_rate_factor × median
/// per-source pps of the last normal interval)`: the new clients of a flash
/// crowd, at ordinary per-source rates, are never drivers.
///
/// The destination-port distribution is not recorded exactly (the data
/// plane keeps a distinct-port sketch per (source, destination), no
/// per-port counts): its entropy is estimated as Σ_d p_d · log2(n̂_d) over
/// destinations d, p_d the destination's packet share and n̂_d its distinct
/// ports (OR of its records' sketches), i.e. the port entropy at each
/// destination if its packets were spread evenly over its ports. A random
/// port flood raises it, a flash crowd to one service leaves it alone.
/// Per-destination-port packet counts would make it exact.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EntropyConfig {
    /// Run this detector. Default true.
    pub enabled: bool,
    /// Smallest change (bits) that can flag an anomaly. Default 0.5;
    /// 0 < x <= 64.
    pub min_delta_bits: f64,
    /// A change must exceed sensitivity × the learned mean change.
    /// Default 4; 1 <= x <= 1000.
    pub sensitivity: f64,
    /// EWMA weight of the mean change. Default 0.1; 0 < x <= 1.
    pub alpha: f64,
    /// Normal intervals to learn before anomalies are flagged. Default 3;
    /// 1..=100000.
    pub warmup_intervals: u32,
    /// Intervals with fewer packets are not judged (entropy of a tiny
    /// sample is noise). Default 1000; 0..=1e12.
    pub min_packets: u64,
    /// Drivers cover this share of the positive divergence. Default 0.9;
    /// 0 < x <= 1.
    pub driver_share: f64,
    /// A driver's pps must be at least this × the median per-source pps of
    /// the last normal interval. Default 4; 1 <= x <= 10000.
    pub driver_rate_factor: f64,
    /// A driver's pps must be at least this. Default 100; 0 <= x <= 1e12.
    pub min_pps: f64,
    /// After this many anomalous intervals in a row the current
    /// distribution becomes the new normal (a lasting shift, not an
    /// attack). Default 60; 1..=1000000.
    pub max_anomaly_intervals: u32,
}

impl Default for EntropyConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            min_delta_bits: 0.5,
            sensitivity: 4.0,
            alpha: 0.1,
            warmup_intervals: 3,
            min_packets: 1000,
            driver_share: 0.9,
            driver_rate_factor: 4.0,
            min_pps: 100.0,
            max_anomaly_intervals: 60,
        }
    }
}

impl EntropyConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_f64_open(
            "detect.entropy.min_delta_bits",
            self.min_delta_bits,
            0.0,
            64.0,
        )?;
        check_f64("detect.entropy.sensitivity", self.sensitivity, 1.0, 1000.0)?;
        check_f64_open("detect.entropy.alpha", self.alpha, 0.0, 1.0)?;
        check_u64(
            "detect.entropy.warmup_intervals",
            u64::from(self.warmup_intervals),
            1,
            100_000,
        )?;
        check_u64(
            "detect.entropy.min_packets",
            self.min_packets,
            0,
            1_000_000_000_000,
        )?;
        check_f64_open("detect.entropy.driver_share", self.driver_share, 0.0, 1.0)?;
        check_f64(
            "detect.entropy.driver_rate_factor",
            self.driver_rate_factor,
            1.0,
            10_000.0,
        )?;
        check_f64("detect.entropy.min_pps", self.min_pps, 0.0, 1e12)?;
        check_u64(
            "detect.entropy.max_anomaly_intervals",
            u64::from(self.max_anomaly_intervals),
            1,
            1_000_000,
        )
    }
}

/// `[detect.signatures]`: attack signatures, one sub-section each.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignatureConfig {
    /// `[detect.signatures.udp_amplification]`.
    pub udp_amplification: AmplificationConfig,
    /// `[detect.signatures.syn_flood]`.
    pub syn_flood: SynFloodConfig,
    /// `[detect.signatures.icmp_flood]`.
    pub icmp_flood: IcmpFloodConfig,
    /// `[detect.signatures.udp_flood]`.
    pub udp_flood: UdpFloodConfig,
}

impl SignatureConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.udp_amplification.validate()?;
        self.syn_flood.validate()?;
        self.icmp_flood.validate()?;
        self.udp_flood.validate()
    }
}

/// One UDP amplification vector: the reflector's service port and the
/// smallest mean frame size (bytes, Ethernet frame) of its replies in an
/// attack.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UdpVector {
    /// Name used in reasons, e.g. `"dns"`.
    pub name: String,
    /// The reflector's UDP source port (reported; see
    /// [`AmplificationConfig`] for why it is not matched yet).
    pub port: u16,
    /// Smallest mean frame size of an attack (bytes). 64..=65535.
    pub min_mean_bytes: u32,
}

/// `[detect.signatures.udp_amplification]`: a source that sends almost only
/// UDP (`min_udp_share`), in large frames (mean size at least the smallest
/// `min_mean_bytes` of `vectors`), at `min_pps` or more.
///
/// The data plane does not record UDP source ports, so the vector cannot
/// be confirmed by port: the reason names the vectors whose size profile
/// the traffic fits, "by size, source port not recorded". A per-record
/// source-port field (or a bit per well-known amplification port set by
/// the feature stage) would make it exact and would rule out large-frame
/// UDP that is not amplification (e.g. QUIC downloads from port 443).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AmplificationConfig {
    /// Run this detector. Default true.
    pub enabled: bool,
    /// Packet-rate floor per source (pps). Default 2000; 0 <= x <= 1e12.
    pub min_pps: f64,
    /// UDP share of the source's packets. Default 0.9; 0 < x <= 1.
    pub min_udp_share: f64,
    /// Vectors. Default: dns 53 (400 B), ntp 123 (400 B), ssdp 1900
    /// (250 B), memcached 11211 (1000 B), cldap 389 (1000 B), chargen 19
    /// (250 B), snmp 161 (400 B), ws-discovery 3702 (400 B). At least one.
    pub vectors: Vec<UdpVector>,
}

impl Default for AmplificationConfig {
    fn default() -> Self {
        let v = |name: &str, port: u16, min_mean_bytes: u32| UdpVector {
            name: name.into(),
            port,
            min_mean_bytes,
        };
        Self {
            enabled: true,
            min_pps: 2000.0,
            min_udp_share: 0.9,
            vectors: vec![
                v("dns", 53, 400),
                v("ntp", 123, 400),
                v("ssdp", 1900, 250),
                v("memcached", 11211, 1000),
                v("cldap", 389, 1000),
                v("chargen", 19, 250),
                v("snmp", 161, 400),
                v("ws-discovery", 3702, 400),
            ],
        }
    }
}

impl AmplificationConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = "detect.signatures.udp_amplification";
        check_f64(&format!("{k}.min_pps"), self.min_pps, 0.0, 1e12)?;
        check_f64_open(&format!("{k}.min_udp_share"), self.min_udp_share, 0.0, 1.0)?;
        if self.enabled && self.vectors.is_empty() {
            return Err(ConfigError::Inconsistent {
                key: format!("{k}.vectors"),
                reason: "empty while the detector is enabled: give at least one vector or set enabled = false".into(),
            });
        }
        for (i, v) in self.vectors.iter().enumerate() {
            check_u64(
                &format!("{k}.vectors[{i}].min_mean_bytes"),
                u64::from(v.min_mean_bytes),
                64,
                65535,
            )?;
            if v.name.trim().is_empty() {
                return Err(ConfigError::Inconsistent {
                    key: format!("{k}.vectors[{i}].name"),
                    reason: "empty: give the vector a name such as \"dns\"".into(),
                });
            }
        }
        Ok(())
    }
}

/// `[detect.signatures.syn_flood]`: SYNs without completion.
///
/// Per record, `incomplete = max(0, syn − (tcp − syn − rst))`: SYNs not
/// matched by later non-SYN, non-RST segments (the ACK and data of a
/// completed handshake) from the same source to the same destination. A
/// source is flagged when its incomplete SYNs reach `min_syn_pps` and SYNs
/// are at least `min_syn_share` of its TCP packets. A destination receiving
/// at least `victim_syn_pps` incomplete SYNs/s is under a SYN flood; then
/// every source sending it at least `flood_min_syn_pps` incomplete SYNs/s
/// with the same SYN share is flagged too (spread-out floods). Legitimate
/// clients complete their handshakes and stay below the SYN share.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SynFloodConfig {
    /// Run this detector. Default true.
    pub enabled: bool,
    /// Incomplete SYNs/s from one source. Default 200; 0 <= x <= 1e12.
    pub min_syn_pps: f64,
    /// SYN share of the source's TCP packets. Default 0.8; 0 < x <= 1.
    pub min_syn_share: f64,
    /// Incomplete SYNs/s to one destination that make it a victim.
    /// Default 5000; 0 < x <= 1e12.
    pub victim_syn_pps: f64,
    /// Per-source incomplete SYNs/s flagged toward a victim. Default 5;
    /// 0 <= x <= 1e12.
    pub flood_min_syn_pps: f64,
}

impl Default for SynFloodConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            min_syn_pps: 200.0,
            min_syn_share: 0.8,
            victim_syn_pps: 5000.0,
            flood_min_syn_pps: 5.0,
        }
    }
}

impl SynFloodConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = "detect.signatures.syn_flood";
        check_f64(&format!("{k}.min_syn_pps"), self.min_syn_pps, 0.0, 1e12)?;
        check_f64_open(&format!("{k}.min_syn_share"), self.min_syn_share, 0.0, 1.0)?;
        check_f64_open(
            &format!("{k}.victim_syn_pps"),
            self.victim_syn_pps,
            0.0,
            1e12,
        )?;
        check_f64(
            &format!("{k}.flood_min_syn_pps"),
            self.flood_min_syn_pps,
            0.0,
            1e12,
        )
    }
}

/// `[detect.signatures.icmp_flood]`: ICMP/ICMPv6 per source.
///
/// A source is flagged when it sends `min_icmp_pps` ICMP packets/s that are
/// at least `min_icmp_share` of its packets. A destination receiving
/// `victim_icmp_pps` ICMP packets/s is under an ICMP flood; then every
/// source sending it `flood_min_icmp_pps` (same share) is flagged too.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct IcmpFloodConfig {
    /// Run this detector. Default true.
    pub enabled: bool,
    /// ICMP packets/s from one source. Default 500; 0 <= x <= 1e12.
    pub min_icmp_pps: f64,
    /// ICMP share of the source's packets. Default 0.5; 0 < x <= 1.
    pub min_icmp_share: f64,
    /// ICMP packets/s to one destination that make it a victim.
    /// Default 20000; 0 < x <= 1e12.
    pub victim_icmp_pps: f64,
    /// Per-source ICMP packets/s flagged toward a victim. Default 50;
    /// 0 <= x <= 1e12.
    pub flood_min_icmp_pps: f64,
}

impl Default for IcmpFloodConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            min_icmp_pps: 500.0,
            min_icmp_share: 0.5,
            victim_icmp_pps: 20_000.0,
            flood_min_icmp_pps: 50.0,
        }
    }
}

impl IcmpFloodConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = "detect.signatures.icmp_flood";
        check_f64(&format!("{k}.min_icmp_pps"), self.min_icmp_pps, 0.0, 1e12)?;
        check_f64_open(
            &format!("{k}.min_icmp_share"),
            self.min_icmp_share,
            0.0,
            1.0,
        )?;
        check_f64_open(
            &format!("{k}.victim_icmp_pps"),
            self.victim_icmp_pps,
            0.0,
            1e12,
        )?;
        check_f64(
            &format!("{k}.flood_min_icmp_pps"),
            self.flood_min_icmp_pps,
            0.0,
            1e12,
        )
    }
}

/// `[detect.signatures.udp_flood]`: a volumetric UDP flood spread over
/// many sources, each too slow for the rate detector.
///
/// A destination receiving at least `victim_udp_pps` UDP packets/s is under
/// a UDP flood; then every source sending it at least `flood_min_udp_pps`
/// UDP packets/s, UDP being at least `min_udp_share` of its packets, is
/// flagged. Independently, a source sending `min_udp_pps` or more (same
/// share) is flagged. Caveat: toward a UDP service (DNS, QUIC) under
/// flood, legitimate clients above `flood_min_udp_pps` are flagged too:
/// raise it, whitelist them, or disable this detector on such hosts.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UdpFloodConfig {
    /// Run this detector. Default true.
    pub enabled: bool,
    /// UDP packets/s from one source. Default 20000; 0 <= x <= 1e12.
    pub min_udp_pps: f64,
    /// UDP share of the source's packets. Default 0.9; 0 < x <= 1.
    pub min_udp_share: f64,
    /// UDP packets/s to one destination that make it a victim. Default
    /// 50000; 0 < x <= 1e12.
    pub victim_udp_pps: f64,
    /// Per-source UDP packets/s flagged toward a victim. Default 20;
    /// 0 <= x <= 1e12.
    pub flood_min_udp_pps: f64,
}

impl Default for UdpFloodConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            min_udp_pps: 20_000.0,
            min_udp_share: 0.9,
            victim_udp_pps: 50_000.0,
            flood_min_udp_pps: 20.0,
        }
    }
}

impl UdpFloodConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = "detect.signatures.udp_flood";
        check_f64(&format!("{k}.min_udp_pps"), self.min_udp_pps, 0.0, 1e12)?;
        check_f64_open(&format!("{k}.min_udp_share"), self.min_udp_share, 0.0, 1.0)?;
        check_f64_open(
            &format!("{k}.victim_udp_pps"),
            self.victim_udp_pps,
            0.0,
            1e12,
        )?;
        check_f64(
            &format!("{k}.flood_min_udp_pps"),
            self.flood_min_udp_pps,
            0.0,
            1e12,
        )
    }
}

/// `[monitor]`: when a blocked source is unbanned.
///
/// Level = `max(min_level_pps, level_factor × normal peak)`, the normal peak
/// being [`crate::Detection::normal_peak_pps`] (the highest single-source
/// rate seen in intervals judged normal). A blocked prefix is unbanned when
/// it has been blocked at least `hold_s` and its measured rate (all tiers
/// summed) has been below the level for the last `quiet_intervals`
/// observations (and, with `subside_fraction`, at most that fraction of
/// the rate it was blocked at), or, with `ttl_s`, once it has been blocked `ttl_s`
/// whatever its rate. A prefix missing from the measured rates counts as
/// 0 pps (no counter moved).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MonitorConfig {
    /// Minimum time blocked before a rate-based unban (seconds). Default
    /// 30; 0 <= x <= 31536000.
    pub hold_s: f64,
    /// Consecutive observations below the level needed. Default 5;
    /// 1..=1000000.
    pub quiet_intervals: u32,
    /// Unban after this long whatever the rate (seconds). Default none;
    /// 0 < x <= 31536000.
    pub ttl_s: Option<f64>,
    /// Level = level_factor × normal peak. Default 1; 0 < x <= 100.
    pub level_factor: f64,
    /// Floor of the level (pps), used until a normal peak is known.
    /// Default 10; 0 <= x <= 1e12.
    pub min_level_pps: f64,
    /// Optional second condition: the measured rate must also be at most
    /// this fraction of the rate the source was blocked at. The rule of
    /// Miano et al. alone (default: none) unbans a source of a spread flood that
    /// was blocked below the normal peak while it is still attacking (it
    /// is re-detected only if its flood is still visible); with e.g. 0.1
    /// such sources stay blocked until their own traffic subsides, at the
    /// price of keeping a wrongly blocked steady source until `ttl_s`.
    /// 0 < x <= 1.
    pub subside_fraction: Option<f64>,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self {
            hold_s: 30.0,
            quiet_intervals: 5,
            ttl_s: None,
            level_factor: 1.0,
            min_level_pps: 10.0,
            subside_fraction: None,
        }
    }
}

impl MonitorConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_f64("monitor.hold_s", self.hold_s, 0.0, 31_536_000.0)?;
        check_u64(
            "monitor.quiet_intervals",
            u64::from(self.quiet_intervals),
            1,
            1_000_000,
        )?;
        if let Some(t) = self.ttl_s {
            check_f64_open("monitor.ttl_s", t, 0.0, 31_536_000.0)?;
        }
        check_f64_open("monitor.level_factor", self.level_factor, 0.0, 100.0)?;
        check_f64("monitor.min_level_pps", self.min_level_pps, 0.0, 1e12)?;
        if let Some(f) = self.subside_fraction {
            check_f64_open("monitor.subside_fraction", f, 0.0, 1.0)?;
        }
        Ok(())
    }
}

/// `[offload]`: Algorithm 1 of Miano et al., IEEE Access 2019 (see [`crate::Planner`]).
///
/// Swap threshold, with R the total rate of all blocked sources and C =
/// `host_capacity_pps`:
///
/// θ = threshold_max − (threshold_max − threshold_min) · min(1, R / C)
///
/// so an idle host swaps only for a much heavier candidate (θ =
/// threshold_max) and a host at or beyond what it can drop swaps for any
/// candidate `threshold_min` times heavier than the weakest offloaded
/// source.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerConfig {
    /// K: rules in the hardware tier. Default 512; 0..=16777216 (0: no
    /// hardware tier, plans are empty).
    pub capacity: usize,
    /// Rule changes per interval (an add and a remove count one each).
    /// Default 64; 1..=16777216.
    pub max_updates: usize,
    /// Most the host tier can drop (pps). Default 5e6; 0 < x <= 1e12.
    pub host_capacity_pps: f64,
    /// Threshold when the host is idle. Default 2; 1 <= x <= 1000 and
    /// >= threshold_min.
    pub threshold_max: f64,
    /// Threshold when the attack reaches host_capacity_pps. Default 1.1;
    /// 1 <= x <= threshold_max (below 1 a weaker source would replace a
    /// heavier one).
    pub threshold_min: f64,
    /// Sources below this rate never get a hardware rule (pps). Default 1;
    /// 0 <= x <= 1e12.
    pub min_pps: f64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            capacity: 512,
            max_updates: 64,
            host_capacity_pps: 5e6,
            threshold_max: 2.0,
            threshold_min: 1.1,
            min_pps: 1.0,
        }
    }
}

impl PlannerConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_u64("offload.capacity", self.capacity as u64, 0, 1 << 24)?;
        check_u64("offload.max_updates", self.max_updates as u64, 1, 1 << 24)?;
        check_f64_open(
            "offload.host_capacity_pps",
            self.host_capacity_pps,
            0.0,
            1e12,
        )?;
        check_f64("offload.threshold_max", self.threshold_max, 1.0, 1000.0)?;
        check_f64("offload.threshold_min", self.threshold_min, 1.0, 1000.0)?;
        if self.threshold_min > self.threshold_max {
            return Err(ConfigError::Inconsistent {
                key: "offload.threshold_min".into(),
                reason: format!(
                    "{} is above offload.threshold_max = {}: allowed 1 <= threshold_min <= threshold_max",
                    self.threshold_min, self.threshold_max
                ),
            });
        }
        check_f64("offload.min_pps", self.min_pps, 0.0, 1e12)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon's sections, as the runtime reads them.
    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        detect: DetectConfig,
        #[serde(default)]
        monitor: MonitorConfig,
        #[serde(default)]
        offload: PlannerConfig,
    }

    fn parse(s: &str) -> Result<File, String> {
        toml::from_str::<File>(s).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_valid_and_an_empty_file_gives_them() {
        let f = parse("").unwrap();
        assert_eq!(f.detect, DetectConfig::default());
        assert_eq!(f.monitor, MonitorConfig::default());
        assert_eq!(f.offload, PlannerConfig::default());
        f.detect.validate().unwrap();
        f.monitor.validate().unwrap();
        f.offload.validate().unwrap();
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let f = File {
            detect: DetectConfig::default(),
            monitor: MonitorConfig {
                ttl_s: Some(600.0),
                ..MonitorConfig::default()
            },
            offload: PlannerConfig::default(),
        };
        let text = toml::to_string(&f).unwrap();
        assert_eq!(parse(&text).unwrap(), f, "{text}");
        assert!(text.contains("[detect.signatures.syn_flood]"), "{text}");
    }

    #[test]
    fn partial_sections_keep_the_other_defaults() {
        let f = parse(
            r#"
            [detect]
            whitelist = ["10.0.0.0/8", "2001:db8::/32"]
            [detect.rate]
            multiplier = 5
            [detect.signatures.udp_amplification]
            enabled = false
            [monitor]
            ttl_s = 3600
            [offload]
            capacity = 1024
            "#,
        )
        .unwrap();
        assert_eq!(f.detect.rate.multiplier, 5.0);
        assert_eq!(f.detect.rate.quantile, 0.99);
        assert!(!f.detect.signatures.udp_amplification.enabled);
        assert!(f.detect.signatures.syn_flood.enabled);
        assert_eq!(f.monitor.ttl_s, Some(3600.0));
        assert_eq!(f.offload.capacity, 1024);
        assert_eq!(f.offload.max_updates, 64);
        f.detect.validate().unwrap();
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = parse("[detect.rate]\nmultiplyer = 5\n").unwrap_err();
        assert!(e.contains("unknown field `multiplyer`"), "{e}");
        let e = parse("[offload]\ncapcity = 5\n").unwrap_err();
        assert!(e.contains("unknown field `capcity`"), "{e}");
    }

    fn detect_err(f: impl FnOnce(&mut DetectConfig)) -> String {
        let mut c = DetectConfig::default();
        f(&mut c);
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn bad_values_name_the_key_and_the_allowed_range() {
        let cases: Vec<(String, &str)> = vec![
            (detect_err(|c| c.rate.multiplier = 0.5), "detect.rate.multiplier = 0.5: out of range, allowed 1 < x <= 10000"),
            (detect_err(|c| c.rate.quantile = 0.0), "detect.rate.quantile = 0: out of range, allowed 0 < x <= 1"),
            (detect_err(|c| c.rate.alpha = f64::NAN), "detect.rate.alpha = NaN: out of range, allowed 0 < x <= 1"),
            (detect_err(|c| c.rate.min_pps = -1.0), "detect.rate.min_pps = -1: out of range, allowed 0 <= x <= 1000000000000"),
            (detect_err(|c| c.entropy.sensitivity = 0.5), "detect.entropy.sensitivity = 0.5: out of range, allowed 1 <= x <= 1000"),
            (detect_err(|c| c.entropy.driver_share = 1.5), "detect.entropy.driver_share = 1.5: out of range, allowed 0 < x <= 1"),
            (detect_err(|c| c.entropy.warmup_intervals = 0), "detect.entropy.warmup_intervals = 0: out of range, allowed 1 <= x <= 100000"),
            (detect_err(|c| c.signatures.syn_flood.min_syn_share = 0.0), "detect.signatures.syn_flood.min_syn_share = 0: out of range, allowed 0 < x <= 1"),
            (detect_err(|c| c.signatures.icmp_flood.victim_icmp_pps = 0.0), "detect.signatures.icmp_flood.victim_icmp_pps = 0: out of range, allowed 0 < x <= 1000000000000"),
            (detect_err(|c| c.signatures.udp_amplification.vectors[2].min_mean_bytes = 10), "detect.signatures.udp_amplification.vectors[2].min_mean_bytes = 10: out of range, allowed 64 <= x <= 65535"),
            (detect_err(|c| c.attack_end_intervals = 0), "detect.attack_end_intervals = 0: out of range, allowed 1 <= x <= 100000"),
            (detect_err(|c| c.whitelist = vec!["::/0".into()]), "detect.whitelist[0] = \"::/0\": a /0 prefix would drop every packet of its family: refused"),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        let e = detect_err(|c| c.signatures.udp_amplification.vectors.clear());
        assert!(
            e.starts_with(
                "detect.signatures.udp_amplification.vectors: empty while the detector is enabled"
            ),
            "{e}"
        );
        let mut c = DetectConfig::default();
        c.signatures.udp_amplification.enabled = false;
        c.signatures.udp_amplification.vectors.clear();
        c.validate().unwrap();
        let e = MonitorConfig {
            hold_s: -5.0,
            ..MonitorConfig::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "monitor.hold_s = -5: out of range, allowed 0 <= x <= 31536000"
        );
        let e = PlannerConfig {
            host_capacity_pps: 0.0,
            ..PlannerConfig::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "offload.host_capacity_pps = 0: out of range, allowed 0 < x <= 1000000000000"
        );
    }

    #[test]
    fn toml_type_errors_name_the_key() {
        let e = parse("[offload]\ncapacity = -3\n").unwrap_err();
        assert!(e.contains("capacity"), "{e}");
        let e = parse("[detect]\nwhitelist = \"10.0.0.0/8\"\n").unwrap_err();
        assert!(e.contains("whitelist"), "{e}");
    }
}
