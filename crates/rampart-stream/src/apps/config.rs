//! The stream apps' settings as a config section (`[stream]` of
//! `rampart run`): which apps run on the interface's tap and their
//! parameters, in seconds and plain numbers. Every key is optional
//! (defaults as `rampart stream run`'s flags) and unknown keys are errors.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{flowmeter, portscan, synflood, EngineOpts};
use crate::error::{Error, Result};
use crate::offload::TapSizes;

/// An app that runs on the tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AppName {
    /// Flow records ([`flowmeter`]).
    Flowmeter,
    /// Scanner detection ([`portscan`]).
    Portscan,
    /// Incomplete handshakes per destination ([`synflood`]).
    Synflood,
}

/// What the tap hands to userspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TapFeed {
    /// Per-connection counters kept in XDP (the cheaper feed).
    #[default]
    Aggregate,
    /// One tuple per frame.
    Tuples,
}

/// `[stream]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Apps fed by the tap. Default `["portscan"]`.
    pub apps: Vec<AppName>,
    /// What the tap hands to userspace: `aggregate` or `tuples`. Default `aggregate`.
    pub feed: TapFeed,
    /// Replicas of the keyed operators. Default 1; 1 ≤ x ≤ 64.
    pub workers: usize,
    /// Live IPv4 connections per CPU and epoch the tap's aggregation table
    /// is sized for: two 64-byte slots each, rounded up to a power of two
    /// (a bucket of four slots that all count other connections sends
    /// the packets of a fifth as tuples: nothing is lost, they cost more).
    /// Default 65,536 (8 MiB per CPU).
    pub connections: u32,
    /// The same for IPv6 connections (128-byte slots). Default 16,384
    /// (4 MiB per CPU).
    pub connections6: u32,
    /// Most memory both tables take, all CPUs together (MiB): both are
    /// halved until they fit. Default 64.
    pub table_mib: u32,
    /// `[stream.flowmeter]`.
    pub flowmeter: FlowmeterSection,
    /// `[stream.portscan]`.
    pub portscan: PortscanSection,
    /// `[stream.synflood]`.
    pub synflood: SynfloodSection,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            apps: vec![AppName::Portscan],
            feed: TapFeed::Aggregate,
            workers: 1,
            connections: crate::offload::prog::TAP_AGG_CONNECTIONS,
            connections6: crate::offload::prog::TAP_AGG6_CONNECTIONS,
            table_mib: (crate::offload::prog::TAP_AGG_BUDGET_BYTES >> 20) as u32,
            flowmeter: FlowmeterSection::default(),
            portscan: PortscanSection::default(),
            synflood: SynfloodSection::default(),
        }
    }
}

/// `[stream.flowmeter]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowmeterSection {
    /// A flow idle this long ends (seconds). Default 15.
    pub idle_timeout_s: f64,
    /// A flow this old ends and a new record starts (seconds). Default 1800.
    pub active_timeout_s: f64,
}

impl Default for FlowmeterSection {
    fn default() -> Self {
        let d = flowmeter::FlowmeterConfig::default();
        Self {
            idle_timeout_s: d.idle.as_secs_f64(),
            active_timeout_s: d.active.as_secs_f64(),
        }
    }
}

/// `[stream.portscan]` (names as in the Threshold Random Walk paper).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PortscanSection {
    /// θ0 = Pr[success | benign]. Default 0.8.
    pub theta0: f64,
    /// θ1 = Pr[success | scanner]. Default 0.2.
    pub theta1: f64,
    /// α, the false-positive bound. Default 0.01.
    pub alpha: f64,
    /// β, the detection probability. Default 0.99.
    pub beta: f64,
    /// Seconds without an answer after which an attempt failed. Default 3.
    pub response_timeout_s: f64,
    /// Seconds (event time) after which an idle host's walk is forgotten. Default 600.
    pub host_idle_s: f64,
    /// What counts as a first contact: `service` (address and port) or `host`. Default `service`.
    pub first_contact: String,
}

impl Default for PortscanSection {
    fn default() -> Self {
        let d = portscan::PortscanConfig::default();
        Self {
            theta0: d.theta0,
            theta1: d.theta1,
            alpha: d.alpha,
            beta: d.beta,
            response_timeout_s: d.response_timeout.as_secs_f64(),
            host_idle_s: d.host_idle.as_secs_f64(),
            first_contact: "service".into(),
        }
    }
}

/// `[stream.synflood]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SynfloodSection {
    /// Window (seconds). Default 10.
    pub window_s: f64,
    /// Incomplete handshakes per destination per window that alert. Default 200.
    pub threshold: u64,
}

impl Default for SynfloodSection {
    fn default() -> Self {
        let d = synflood::SynfloodConfig::default();
        Self {
            window_s: d.window.as_secs_f64(),
            threshold: d.threshold,
        }
    }
}

fn secs(key: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0 && v < 1e9) {
        return Err(Error::Invalid(format!(
            "stream.{key} = {v}: use a number of seconds > 0"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Most connections per CPU either table may be sized for.
pub const MAX_CONNECTIONS: u32 = 1 << 24;

impl StreamConfig {
    /// The tap's map sizes on `cpus` CPUs: [`TapSizes::for_connections`].
    pub fn tap_sizes(&self, cpus: usize) -> TapSizes {
        TapSizes::for_connections(
            self.connections,
            self.connections6,
            u64::from(self.table_mib) << 20,
            cpus,
        )
    }

    fn engine(&self) -> EngineOpts {
        EngineOpts {
            workers: self.workers,
            ..EngineOpts::default()
        }
    }

    /// Check every value (the messages name the key).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the key and what is allowed.
    pub fn validate(&self) -> Result<()> {
        if self.apps.is_empty() {
            return Err(Error::Invalid(
                "stream.apps is empty: name at least one of \"flowmeter\", \"portscan\", \"synflood\" (or remove [stream])".into(),
            ));
        }
        for (i, a) in self.apps.iter().enumerate() {
            if self.apps[..i].contains(a) {
                return Err(Error::Invalid(format!("stream.apps: {a:?} is named twice")));
            }
        }
        if !(1..=64).contains(&self.workers) {
            return Err(Error::Invalid(format!(
                "stream.workers = {}: use 1 ≤ workers ≤ 64",
                self.workers
            )));
        }
        for (key, v) in [
            ("connections", self.connections),
            ("connections6", self.connections6),
        ] {
            if !(1..=MAX_CONNECTIONS).contains(&v) {
                return Err(Error::Invalid(format!(
                    "stream.{key} = {v}: use 1 ≤ {key} ≤ {MAX_CONNECTIONS} (per CPU)"
                )));
            }
        }
        if !(1..=65_536).contains(&self.table_mib) {
            return Err(Error::Invalid(format!(
                "stream.table_mib = {}: use 1 ≤ table_mib ≤ 65536",
                self.table_mib
            )));
        }
        self.flowmeter()?;
        self.portscan()?;
        self.synflood()?;
        Ok(())
    }

    /// The flowmeter's settings.
    ///
    /// # Errors
    /// A bad timeout.
    pub fn flowmeter(&self) -> Result<flowmeter::FlowmeterConfig> {
        Ok(flowmeter::FlowmeterConfig {
            idle: secs("flowmeter.idle_timeout_s", self.flowmeter.idle_timeout_s)?,
            active: secs(
                "flowmeter.active_timeout_s",
                self.flowmeter.active_timeout_s,
            )?,
            engine: self.engine(),
        })
    }

    /// The port-scan detector's settings.
    ///
    /// # Errors
    /// A bad parameter (named).
    pub fn portscan(&self) -> Result<portscan::PortscanConfig> {
        let p = &self.portscan;
        let c = portscan::PortscanConfig {
            theta0: p.theta0,
            theta1: p.theta1,
            alpha: p.alpha,
            beta: p.beta,
            response_timeout: secs("portscan.response_timeout_s", p.response_timeout_s)?,
            host_idle: secs("portscan.host_idle_s", p.host_idle_s)?,
            first_contact: match p.first_contact.as_str() {
                "service" => portscan::FirstContact::Service,
                "host" => portscan::FirstContact::Host,
                o => {
                    return Err(Error::Invalid(format!(
                        "stream.portscan.first_contact = {o:?}: use \"service\" or \"host\""
                    )))
                }
            },
            engine: self.engine(),
        };
        c.validate()
            .map_err(|e| Error::Invalid(format!("stream.{e}")))?;
        Ok(c)
    }

    /// The SYN-flood detector's settings.
    ///
    /// # Errors
    /// A bad window or threshold.
    pub fn synflood(&self) -> Result<synflood::SynfloodConfig> {
        if self.synflood.threshold == 0 {
            return Err(Error::Invalid(
                "stream.synflood.threshold = 0: use at least 1 incomplete handshake".into(),
            ));
        }
        Ok(synflood::SynfloodConfig {
            window: secs("synflood.window_s", self.synflood.window_s)?,
            threshold: self.synflood.threshold,
            engine: self.engine(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> std::result::Result<StreamConfig, String> {
        let c: StreamConfig = toml::from_str(s).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn defaults_are_valid_and_match_the_apps() {
        let c = parse("").unwrap();
        assert_eq!(c, StreamConfig::default());
        assert_eq!(c.flowmeter().unwrap().idle, Duration::from_secs(15));
        assert_eq!(c.portscan().unwrap().host_idle, Duration::from_secs(600));
    }

    #[test]
    fn bad_values_name_their_key() {
        let e = parse("[portscan]\ntheta1 = 0.9\n").unwrap_err();
        assert!(e.contains("stream.portscan") && e.contains("θ1"), "{e}");
        let e = parse("[flowmeter]\nidle_timeout_s = 0\n").unwrap_err();
        assert!(e.contains("stream.flowmeter.idle_timeout_s"), "{e}");
        let e = parse("apps = []\n").unwrap_err();
        assert!(e.contains("stream.apps"), "{e}");
        let e = parse("apps = [\"portscan\", \"portscan\"]\n").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(parse("apps = [\"netflow\"]\n").is_err());
        assert!(parse("wokers = 2\n").is_err());
        let e = parse("connections = 0\n").unwrap_err();
        assert!(e.contains("stream.connections"), "{e}");
        let e = parse("table_mib = 0\n").unwrap_err();
        assert!(e.contains("stream.table_mib"), "{e}");
    }

    #[test]
    fn the_tables_are_sized_from_the_connections() {
        let c = parse("connections = 1000\nconnections6 = 50000\n").unwrap();
        let t = c.tap_sizes(2);
        assert_eq!((t.agg_slots, t.agg6_slots), (2048, 131_072));
        let d = StreamConfig::default().tap_sizes(2);
        assert_eq!((d.agg_slots, d.agg6_slots), (131_072, 32_768));
        let small = parse("table_mib = 6\n").unwrap().tap_sizes(2);
        assert!(small.agg_bytes(2) <= 6 << 20, "{small:?}");
    }
}
