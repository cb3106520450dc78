//! What detection reads ([`Interval`]) and decides ([`Verdict`]), and
//! the names of the attack vectors.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::features::UDP_CLASSES;
use crate::{FeatureRecord, Prefix, VictimRecord};

/// Vectors judged per victim, plus `port_scan` (judged per source).
pub const NV: usize = 13;

/// The names of the vectors, by [`Vector::index`].
pub const VECTOR_NAMES: [&str; NV] = [
    "syn_flood",
    "ack_flood",
    "udp_amplification/dns",
    "udp_amplification/ntp",
    "udp_amplification/memcached",
    "udp_amplification/ssdp",
    "udp_amplification/cldap",
    "udp_amplification/chargen",
    "udp_amplification/snmp",
    "udp_flood",
    "icmp_flood",
    "fragment_flood",
    "port_scan",
];

const _: () = assert!(UDP_CLASSES.len() == 8);

/// An attack vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Vector {
    /// Incomplete TCP handshakes.
    SynFlood,
    /// Out-of-state TCP (ACK, RST, FIN floods).
    AckFlood,
    /// UDP from an amplification source port; the class index 0..7 of
    /// [`UDP_CLASSES`].
    UdpAmplification(u8),
    /// UDP from any other source port.
    UdpFlood,
    /// ICMP/ICMPv6.
    IcmpFlood,
    /// IP fragments.
    FragmentFlood,
    /// One source probing many ports of a victim.
    PortScan,
}

impl Vector {
    /// Every vector, by index.
    pub const ALL: [Vector; NV] = [
        Vector::SynFlood,
        Vector::AckFlood,
        Vector::UdpAmplification(0),
        Vector::UdpAmplification(1),
        Vector::UdpAmplification(2),
        Vector::UdpAmplification(3),
        Vector::UdpAmplification(4),
        Vector::UdpAmplification(5),
        Vector::UdpAmplification(6),
        Vector::UdpFlood,
        Vector::IcmpFlood,
        Vector::FragmentFlood,
        Vector::PortScan,
    ];

    /// Position in [`Vector::ALL`] and [`VECTOR_NAMES`].
    pub fn index(self) -> usize {
        match self {
            Vector::SynFlood => 0,
            Vector::AckFlood => 1,
            Vector::UdpAmplification(c) => 2 + usize::from(c.min(6)),
            Vector::UdpFlood => 9,
            Vector::IcmpFlood => 10,
            Vector::FragmentFlood => 11,
            Vector::PortScan => 12,
        }
    }

    /// The name alerts and decisions carry, e.g. `udp_amplification/ntp`.
    pub fn name(self) -> &'static str {
        VECTOR_NAMES[self.index()]
    }

    /// The family (the name up to a `/`): the `detector` of a decision.
    pub fn family(self) -> &'static str {
        let n = self.name();
        n.split('/').next().unwrap_or(n)
    }

    /// The vector of a name given by [`Vector::name`].
    pub fn from_name(s: &str) -> Option<Vector> {
        VECTOR_NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| Vector::ALL[i])
    }
}

impl Serialize for Vector {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Vector {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Vector::from_name(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown vector {s:?}")))
    }
}

/// Records the data path could not keep in the interval (its tables were
/// full): attribution may miss sources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skips {
    /// Packets whose (source, destination) pair found no free slot.
    pub pairs: u64,
    /// Packets whose victim found no free slot.
    pub victims: u64,
}

/// A measured rate of one blocked or policed prefix in the interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SourceRate {
    /// The blocked or policed prefix.
    pub prefix: Prefix,
    /// Packets/s: for a blocked prefix, what every tier dropped of it; for
    /// a policed one, what the policer dropped (what it passed is in the
    /// pair records).
    pub pps: f64,
}

/// One interval of the data path, as detection reads it.
#[derive(Debug, Clone, Copy)]
pub struct Interval<'a> {
    /// Interval number (increasing; gaps allowed).
    pub index: u64,
    /// Length in seconds (a non-positive or non-finite length counts as
    /// 1 s): how far detection's clock advances, so hold times, quiet
    /// times, baseline growth per minute and warm-up are in seconds.
    pub secs: f64,
    /// Seconds of traffic the records were summed over, when that is
    /// longer than `secs`: a sliding window judged every `secs` (flow
    /// input's). Rates divide by it; the clock still advances by `secs`.
    /// `None`: the records are the interval's own (`secs`).
    pub window_s: Option<f64>,
    /// Per-(source, destination) records.
    pub pairs: &'a [FeatureRecord],
    /// Per-victim records. A victim that has pair records but no victim
    /// record (the victims table was full) is judged from its pairs.
    pub victims: &'a [VictimRecord],
    /// What the data path could not record.
    pub skips: Skips,
    /// Measured rates of blocked prefixes (all tiers). Prefixes that
    /// detection did not block are ignored; a blocked prefix missing here
    /// counts as 0 pps.
    pub blocked: &'a [SourceRate],
    /// The records count the blocked prefixes' packets already (flow
    /// exports: a router sees them before any tier drops them). Their
    /// rates then only time the unblocks; added to their victims' rates
    /// as well, they would count twice. `false` for the data path's
    /// intervals, whose records hold only what passed.
    pub blocked_in_records: bool,
    /// Measured dropped rates of policed prefixes.
    pub policed: &'a [SourceRate],
}

impl Interval<'_> {
    /// `secs`, or 1.0 when it is not a positive finite number.
    pub fn secs_or_one(&self) -> f64 {
        if self.secs.is_finite() && self.secs > 0.0 {
            self.secs
        } else {
            1.0
        }
    }

    /// The span the records cover, which rates divide by: `window_s` when
    /// it is a finite length of at least `secs`, else
    /// [`Interval::secs_or_one`].
    pub fn span_s(&self) -> f64 {
        let secs = self.secs_or_one();
        match self.window_s {
            Some(w) if w.is_finite() && w > secs => w,
            _ => secs,
        }
    }
}

/// An [`Interval`] that owns its records: one JSON line of a recording
/// (record with [`Recorded::of`], replay with [`Recorded::interval`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    /// [`Interval::index`].
    pub index: u64,
    /// [`Interval::secs`].
    pub secs: f64,
    /// [`Interval::window_s`] (absent in a recording of the data path's
    /// intervals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// [`Interval::pairs`].
    #[serde(default)]
    pub pairs: Vec<FeatureRecord>,
    /// [`Interval::victims`].
    #[serde(default)]
    pub victims: Vec<VictimRecord>,
    /// [`Interval::skips`].
    #[serde(default)]
    pub skips: Skips,
    /// [`Interval::blocked`].
    #[serde(default)]
    pub blocked: Vec<SourceRate>,
    /// [`Interval::blocked_in_records`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocked_in_records: bool,
    /// [`Interval::policed`].
    #[serde(default)]
    pub policed: Vec<SourceRate>,
}

impl Recorded {
    /// Copy an interval.
    pub fn of(iv: &Interval<'_>) -> Self {
        Recorded {
            index: iv.index,
            secs: iv.secs,
            window_s: iv.window_s,
            pairs: iv.pairs.to_vec(),
            victims: iv.victims.to_vec(),
            skips: iv.skips,
            blocked: iv.blocked.to_vec(),
            blocked_in_records: iv.blocked_in_records,
            policed: iv.policed.to_vec(),
        }
    }

    /// The interval it recorded.
    pub fn interval(&self) -> Interval<'_> {
        Interval {
            index: self.index,
            secs: self.secs,
            window_s: self.window_s,
            pairs: &self.pairs,
            victims: &self.victims,
            skips: self.skips,
            blocked: &self.blocked,
            blocked_in_records: self.blocked_in_records,
            policed: &self.policed,
        }
    }
}

/// Block a source (or a source prefix) attacking a victim.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Block {
    /// What to block: an address, or an aggregated /24 or /64.
    pub prefix: Prefix,
    /// The victim it attacks (an address, an IPv6 /64, or the /24 of a
    /// carpet attack).
    pub victim: Prefix,
    /// The vector, e.g. `syn_flood`, `udp_amplification/dns`,
    /// `carpet/icmp_flood`.
    pub vector: String,
    /// The vector family (the detector): `syn_flood`,
    /// `udp_amplification`, `port_scan`, ...
    pub detector: &'static str,
    /// With the numbers that decided it.
    pub reason: String,
    /// The source's rate of that vector's traffic to the victim (pps).
    pub pps: f64,
    /// The source's bit rate to the victim (bits/s, frame lengths).
    pub bps: f64,
}

/// Unblock a prefix detection blocked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unblock {
    /// The prefix.
    pub prefix: Prefix,
    /// Why (its rate, the level, how long).
    pub reason: String,
}

/// Which of a policed source's packets its rate applies to: the kind of
/// traffic that made it suspect, so that a NAT gateway or a heavy client
/// under a SYN flood has its new connections limited while its established
/// ones pass untouched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoliceScope {
    /// Every packet (what a state file written before scopes holds).
    #[default]
    All,
    /// TCP SYNs without ACK (new connections).
    Syn,
    /// UDP.
    Udp,
}

impl PoliceScope {
    /// The scope that polices what `v` floods with.
    pub fn of(v: Vector) -> Self {
        match v {
            Vector::SynFlood | Vector::PortScan => Self::Syn,
            Vector::UdpFlood | Vector::UdpAmplification(_) => Self::Udp,
            _ => Self::All,
        }
    }

    /// For logs and the API: `all`, `syn`, `udp`.
    pub fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Syn => "syn",
            Self::Udp => "udp",
        }
    }
}

/// Police a source: at most `rate_pps` packets/s of its `scope` pass, the
/// rest is dropped in XDP.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Police {
    /// The source.
    pub prefix: Prefix,
    /// The victim whose attack made it policed.
    pub victim: Prefix,
    /// The victim's anomalous vector.
    pub vector: String,
    /// Which of its packets the rate applies to.
    pub scope: PoliceScope,
    /// Rate it may send (packets/s of its `scope`).
    pub rate_pps: f64,
    /// Why it is policed rather than blocked.
    pub reason: String,
}

/// Protection of one victim in the data path (SYN cookies, ACK guard).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protection {
    /// SYNs answered with XDP SYN cookies.
    pub syn_cookies: bool,
    /// Out-of-state TCP dropped in XDP.
    pub ack_guard: bool,
}

impl Protection {
    /// Nothing on.
    pub fn is_off(self) -> bool {
        !self.syn_cookies && !self.ack_guard
    }
}

/// A change of a victim's protection: set it to `flags` (all off: clear).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectChange {
    /// The victim: an IPv4 address or an IPv6 /64.
    pub victim: Prefix,
    /// What is on from now.
    pub flags: Protection,
}

/// Kind of an [`AttackEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// First interval of an attack on a victim.
    AttackStart,
    /// Something changed: a new vector, new blocks or policed sources,
    /// protection switched, a prefix aggregated.
    AttackUpdate,
    /// Every vector of the victim below its threshold for `attack_end_s`.
    AttackEnd,
}

impl EventKind {
    /// `attack_start`, `attack_update`, `attack_end`.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::AttackStart => "attack_start",
            EventKind::AttackUpdate => "attack_update",
            EventKind::AttackEnd => "attack_end",
        }
    }
}

/// A prefix blocked in place of its attacking addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aggregated {
    /// The /24 or /64.
    pub prefix: Prefix,
    /// Its addresses blocked for the attack.
    pub sources: u32,
    /// Other addresses of it known as legitimate (completed handshakes or
    /// normal traffic recently): blocked with it.
    pub collateral: u32,
}

/// What was done against an attack so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Action {
    /// Prefixes blocked for it.
    pub blocked: u64,
    /// Sources policed for it.
    pub policed: u64,
    /// SYN cookies on for the victim.
    pub syn_cookies: bool,
    /// ACK guard on for the victim.
    pub ack_guard: bool,
    /// Prefixes aggregated, with their collateral.
    pub aggregated: Vec<Aggregated>,
}

/// An attack event for one victim (or one /24 or /64 for a carpet).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttackEvent {
    /// Start, update or end.
    pub event: EventKind,
    /// The victim.
    pub victim: Prefix,
    /// The main vector (the one most sources were blocked for, else the
    /// one with the highest peak), `carpet/...` for a carpet.
    pub vector: String,
    /// Every vector seen in this attack so far, main first.
    pub vectors: Vec<String>,
    /// Interval at which the attack started.
    pub start_index: u64,
    /// Seconds since the start (interval time).
    pub duration_s: f64,
    /// Current rate of the attack's vectors (passed + dropped), pps.
    pub pps: f64,
    /// Current bit rate to the victim, bits/s.
    pub bps: f64,
    /// Peak of `pps`.
    pub peak_pps: f64,
    /// Peak of `bps`.
    pub peak_bps: f64,
    /// Sources involved (attributed: blocked, policed or over the
    /// per-source floor), so far.
    pub sources: u64,
    /// Distinct source addresses sending to the victim (all its traffic,
    /// estimated), the highest of any interval of the attack: for a spoofed
    /// flood, the number of (forged) sources.
    pub distinct_sources: f64,
    /// The heaviest of them (address, peak pps), at most 10.
    pub top_sources: Vec<(IpAddr, f64)>,
    /// What was done.
    pub action: Action,
    /// One line with the numbers.
    pub reason: String,
}

/// What detection decided for one interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Verdict {
    /// Prefixes to block.
    pub blocks: Vec<Block>,
    /// Prefixes to unblock.
    pub unblocks: Vec<Unblock>,
    /// Sources to police.
    pub police: Vec<Police>,
    /// Sources to stop policing.
    pub unpolice: Vec<Prefix>,
    /// Protection changes.
    pub protect: Vec<ProtectChange>,
    /// Attack events.
    pub events: Vec<AttackEvent>,
}

/// One vector of a victim, for the API and metrics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VectorView {
    /// The vector.
    pub vector: &'static str,
    /// Its rate in the last interval (passed + dropped), pps.
    pub current_pps: f64,
    /// Its learned baseline (0: none yet).
    pub baseline_pps: f64,
    /// Its threshold.
    pub threshold_pps: f64,
    /// Over the threshold in the last interval.
    pub anomalous: bool,
}

/// One victim, for the API.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VictimView {
    /// The victim (address, IPv6 /64, or IPv4 /24 aggregate).
    pub victim: Prefix,
    /// An attack is in progress.
    pub under_attack: bool,
    /// Its vectors with traffic, a baseline or an anomaly.
    pub vectors: Vec<VectorView>,
    /// The per-source level (unban level), pps.
    pub source_level_pps: f64,
    /// Protection on.
    pub protection: Protection,
    /// Prefixes blocked for it.
    pub blocked: u64,
    /// Sources policed for it.
    pub policed: u64,
}

/// A number for metrics: `name{victim, vector}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gauge {
    /// `current_pps`, `baseline_pps`, `threshold_pps`,
    /// `source_level_pps`, or a total (`victims`, `attacks`, `blocked`,
    /// `policed`, `protected`) with empty labels.
    pub name: &'static str,
    /// The victim, or empty.
    pub victim: String,
    /// The vector, or empty.
    pub vector: &'static str,
    /// The value.
    pub value: f64,
}
