//! The daemon's TOML configuration (`rampart ddos run --config FILE`).
//!
//! Every section and key is optional (`serde(default)`) and unknown keys
//! are errors (`deny_unknown_fields`); loading and errors are the service
//! shell's (`rampart_service::config`). Defaults are in the doc comments,
//! in `dist/rampart-ddos.toml` and in `rampart ddos run --print-config`.

use std::path::{Path, PathBuf};

use rampart_ddos_control::{DetectConfig, MonitorConfig, PlannerConfig};
use rampart_service::alert::AlertsConfig;
use rampart_service::{ConfigError, ServerConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::mode::Mode;

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`: the HTTP API (default `listen = "127.0.0.1:9477"`;
    /// `""`: no API), `metrics_listen`, `token_file`.
    pub server: ServerConfig,
    /// `[daemon]`.
    pub daemon: DaemonConfig,
    /// `[filter]`: the XDP blacklist's load-time settings (used when the
    /// daemon attaches; a resumed filter keeps the ones it was loaded with).
    pub filter: FilterSection,
    /// `[hw]`: the hardware tier of the `hw+…` modes.
    pub hw: HwConfig,
    /// `[detect]` (rampart-ddos-control).
    pub detect: DetectConfig,
    /// `[monitor]` (rampart-ddos-control).
    pub monitor: MonitorConfig,
    /// `[offload]` (rampart-ddos-control). `capacity` is capped at the hardware tier's own.
    pub offload: PlannerConfig,
    /// `[alerts]`: where alerts go (a JSON-lines file or stdout, syslog, a webhook).
    pub alerts: AlertsConfig,
}

/// `[daemon]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    /// Placement mode: `xdp-host`, `xdp-nic`, `hw+xdp-nic`, `hw+xdp-host`,
    /// `iptables`. Default `hw+xdp-host`.
    pub mode: Mode,
    /// Host interface (features are read here; the XDP blacklist runs here
    /// in the `*-host` modes). Default `host0` (the lab's).
    pub iface: String,
    /// Named network namespace of `iface`. Default none (the daemon's own);
    /// the lab's host is `<lab>-host`.
    pub netns: Option<String>,
    /// Lab prefix whose EMULATED NIC serves the `emulated` tier and the nic
    /// hop of the `xdp-nic` modes. Default `rp`.
    pub lab: String,
    /// Loop interval (seconds). Default 0.5; 0.05 ≤ x ≤ 1.
    pub interval_s: f64,
    /// Directory of the daemon's state file (`<name>.json`: reasons and
    /// detectors of blocked sources, operator whitelist, learned normal
    /// peak). Default `/run/rampart/ddosd`.
    pub state_dir: PathBuf,
    /// Nice value of the daemon's loop and hardware-update threads
    /// (−20 ..= 19). Default −10: under attack the host is busy, and the
    /// loop that reads features, detects and installs rules must keep its
    /// interval against ordinary (nice 0) work; 0 leaves them as is.
    pub nice: i32,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            mode: Mode::HwXdpHost,
            iface: "host0".into(),
            netns: None,
            lab: "rp".into(),
            interval_s: 0.5,
            state_dir: PathBuf::from("/run/rampart/ddosd"),
            nice: -10,
        }
    }
}

/// `[filter]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilterSection {
    /// Exact IPv4 entries. Default 1048576.
    pub max_entries: u32,
    /// Each of exact IPv6 / IPv4 prefixes / IPv6 prefixes. Default 65536.
    pub max_prefixes: u32,
    /// Per-entry counters sample 1 in 2^k. Default 4.
    pub sample_shift: u32,
    /// (src, dst) pairs per feature interval. Default 262144.
    pub features_capacity: u32,
    /// XDP attach mode: `native` or `generic`. Default `native`.
    pub xdp_mode: String,
}

impl Default for FilterSection {
    fn default() -> Self {
        Self {
            max_entries: 1 << 20,
            max_prefixes: 1 << 16,
            sample_shift: 4,
            features_capacity: 1 << 18,
            xdp_mode: "native".into(),
        }
    }
}

/// `[hw]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HwConfig {
    /// `emulated` (the lab's EMULATED NIC), `tc-flower`, `ethtool-ntuple`,
    /// `xdp-hw`. Default `emulated`.
    pub backend: String,
    /// Per-update delay of the EMULATED NIC (milliseconds), what a real
    /// card costs. Default 2; 0 ≤ x ≤ 1000.
    pub update_delay_ms: f64,
    /// Interface of the real-NIC backends. Default: `[daemon].iface`.
    pub iface: Option<String>,
    /// Its network namespace. Default: `[daemon].netns`.
    pub netns: Option<String>,
    /// Rule capacity of the real-NIC backends. Default 512.
    pub capacity: usize,
    /// EMULATED NIC only: `false` hides its per-rule counters, to run the
    /// daemon as on an ethtool-ntuple card (rates then come from
    /// withdrawal probes). Default true.
    pub counters: bool,
    /// Tiers without per-rule counters (ethtool-ntuple, `counters =
    /// false`): rules withdrawn per interval to measure their sources in
    /// XDP (each costs a removal now and usually an add later). Default 8;
    /// 1 ..= 4096.
    pub probes_per_interval: usize,
}

impl Default for HwConfig {
    fn default() -> Self {
        Self {
            backend: "emulated".into(),
            update_delay_ms: 2.0,
            iface: None,
            netns: None,
            capacity: 512,
            counters: true,
            probes_per_interval: 8,
        }
    }
}

/// The API's address when `[server] listen` is not given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9477";

impl Default for Config {
    fn default() -> Self {
        Self {
            server: ServerConfig::default().with_default_listen(DEFAULT_LISTEN),
            daemon: DaemonConfig::default(),
            filter: FilterSection::default(),
            hw: HwConfig::default(),
            detect: DetectConfig::default(),
            monitor: MonitorConfig::default(),
            offload: PlannerConfig::default(),
            alerts: AlertsConfig::default(),
        }
    }
}

impl Config {
    fn checked(
        c: std::result::Result<Self, ConfigError>,
    ) -> std::result::Result<Self, ConfigError> {
        let mut c = c?;
        c.server = c.server.with_default_listen(DEFAULT_LISTEN);
        c.validate()
            .map_err(|e| ConfigError::invalid(e.to_string()))?;
        Ok(c)
    }

    /// Parse TOML text and validate every section.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key: TOML error (unknown key, wrong type) or bad value.
    pub fn parse(text: &str) -> Result<Self> {
        Self::checked(rampart_service::config::parse(text)).map_err(config_error)
    }

    /// Read and parse a file.
    ///
    /// # Errors
    /// Unreadable file, or as [`Config::parse`] (the message names the file).
    pub fn load(path: &Path) -> Result<Self> {
        Self::checked(rampart_service::config::load(path))
            .map_err(|e| config_error(e.in_file(path)))
    }

    /// The effective config as TOML (`rampart ddos run --print-config`).
    ///
    /// # Errors
    /// A value TOML cannot hold.
    pub fn render(&self) -> Result<String> {
        rampart_service::config::render("rampart ddos run", self).map_err(config_error)
    }

    /// Check ranges.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self) -> Result<()> {
        let d = &self.daemon;
        if !(d.interval_s.is_finite() && (0.05..=1.0).contains(&d.interval_s)) {
            return Err(Error::Config(format!(
                "daemon.interval_s = {}: use 0.05 ≤ interval_s ≤ 1",
                d.interval_s
            )));
        }
        if !(-20..=19).contains(&d.nice) {
            return Err(Error::Config(format!(
                "daemon.nice = {}: use -20 ..= 19 (lower runs first; 0 = unchanged)",
                d.nice
            )));
        }
        self.server
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        self.alerts
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        rampart_ddos::Scope::new(d.netns.as_deref(), &d.iface)
            .map_err(|e| Error::Config(format!("daemon.iface/netns: {e}")))?;
        if !["native", "generic"].contains(&self.filter.xdp_mode.as_str()) {
            return Err(Error::Config(format!(
                "filter.xdp_mode = {:?}: use \"native\" or \"generic\"",
                self.filter.xdp_mode
            )));
        }
        let h = &self.hw;
        if !["emulated", "tc-flower", "ethtool-ntuple", "xdp-hw"].contains(&h.backend.as_str()) {
            return Err(Error::Config(format!(
                "hw.backend = {:?}: use emulated, tc-flower, ethtool-ntuple or xdp-hw",
                h.backend
            )));
        }
        if !h.counters && h.backend != "emulated" {
            return Err(Error::Config(format!(
                "hw.counters = false applies to the emulated backend only (hw.backend = {:?} reports what its hardware has)",
                h.backend
            )));
        }
        if !(1..=4096).contains(&h.probes_per_interval) {
            return Err(Error::Config(format!(
                "hw.probes_per_interval = {}: use 1 ..= 4096",
                h.probes_per_interval
            )));
        }
        if !(h.update_delay_ms.is_finite() && (0.0..=1000.0).contains(&h.update_delay_ms)) {
            return Err(Error::Config(format!(
                "hw.update_delay_ms = {}: use 0 ≤ x ≤ 1000",
                h.update_delay_ms
            )));
        }
        self.detect
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        self.monitor
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        self.offload
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        Ok(())
    }
}

fn config_error(e: ConfigError) -> Error {
    match e {
        ConfigError::Read { path, source } => {
            Error::io(format!("reading config {}", path.display()), source)
        }
        // Validation errors already carry "config: " from Error::Config.
        e => Error::Config(e.to_string().replacen("config: ", "", 1)),
    }
}

impl Config {
    /// The daemon as the lab's DDoS demo and `rampart bench ddos` run it:
    /// `hw+xdp-host` on the lab's `host0` with its EMULATED NIC as the
    /// hardware tier (K = `nic_capacity`, 2 ms per update), no API, alerts
    /// and state in `dir`, signature detectors only (why: the comments in
    /// the text).
    ///
    /// # Errors
    /// Out-of-range values ([`Config::parse`]).
    pub fn lab_demo(
        lab: &rampart_lab::Lab,
        interval_s: f64,
        hold_s: f64,
        nic_capacity: u32,
        dir: &std::path::Path,
    ) -> Result<Self> {
        let text = format!(
            r#"
[server]
listen = ""

[daemon]
mode = "hw+xdp-host"
iface = "{iface}"
netns = "{host}"
lab = "{lab}"
interval_s = {interval}
state_dir = "{dir}"

[alerts]
file = "{alerts}"

[filter]
max_entries = 65536
max_prefixes = 4096
features_capacity = 65536

[hw]
backend = "emulated"
update_delay_ms = 2

# The rate detector is off here: it learns its baseline (p99 of per-source
# rates) in every interval it does not flag itself, so during this attack,
# caught by the signature detectors, it learns the attackers' rates and
# then bans the legitimate wrk client (one address, ~40k pps) as a rate
# outlier (seen in a run: false_bans = 1). The attack is caught by the SYN
# flood and UDP signatures.
[detect.rate]
enabled = false
# The entropy detector is off too: once the attack is dropped in XDP, the
# feature stage sees only wrk again, the source entropy collapses, and wrk
# "drives" that change (seen in 1 of 3 runs: false_bans = 1).
[detect.entropy]
enabled = false
[detect.signatures.udp_amplification]
# The demo's UDP flood uses 512-byte frames; its Zipf tail sends a few
# packets/s per source, so the per-source floor is low (no legitimate UDP here).
min_pps = 5

[monitor]
hold_s = {hold}
quiet_intervals = 5

[offload]
capacity = {k}
max_updates = 64
host_capacity_pps = 1000000
"#,
            iface = rampart_lab::topology::HOST_IF,
            host = lab.host_ns(),
            lab = lab.prefix(),
            interval = interval_s,
            alerts = dir.join("alerts.jsonl").display(),
            dir = dir.display(),
            hold = hold_s,
            k = nic_capacity,
        );
        Self::parse(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_demo_config_is_the_demos() {
        let lab = rampart_lab::Lab::new("cfgt").unwrap();
        let c = Config::lab_demo(&lab, 0.2, 22.0, 512, std::path::Path::new("/tmp/x")).unwrap();
        assert_eq!(c.daemon.mode, Mode::HwXdpHost);
        assert_eq!(c.daemon.netns.as_deref(), Some("cfgt-host"));
        assert_eq!((c.daemon.interval_s, c.monitor.hold_s), (0.2, 22.0));
        assert_eq!(c.offload.capacity, 512);
        assert!(!c.detect.rate.enabled && !c.detect.entropy.enabled);
        assert_eq!(c.server.listen.as_deref(), Some(""));
    }

    #[test]
    fn empty_file_is_all_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.server.listen.as_deref(), Some(DEFAULT_LISTEN));
        assert_eq!(c.daemon.mode, Mode::HwXdpHost);
        assert_eq!(c.daemon.interval_s, 0.5);
        assert_eq!(c.offload.capacity, 512);
    }

    #[test]
    fn shipped_example_parses() {
        let c = Config::parse(include_str!("../../../dist/rampart-ddos.toml")).unwrap();
        assert_eq!(c.daemon.mode, Mode::HwXdpHost);
        assert_eq!(c.hw.backend, "emulated");
    }

    #[test]
    fn print_config_reads_back_as_the_same_config() {
        let c = Config::parse("[daemon]\nnice = 3\n[server]\ntoken_file = \"/etc/rampart/t\"\n")
            .unwrap();
        let text = c.render().unwrap();
        assert!(text.contains("listen = \"127.0.0.1:9477\""), "{text}");
        assert!(
            text.contains("nice = 3") && text.contains("[offload]"),
            "{text}"
        );
        let again = Config::parse(&text).unwrap();
        assert_eq!(again.server, c.server);
        assert_eq!(again.daemon.nice, 3);
        assert_eq!(
            Config::default().render().unwrap(),
            Config::parse("").unwrap().render().unwrap()
        );
    }

    #[test]
    fn sections_parse() {
        let c = Config::parse(
            "[daemon]\nmode = \"xdp-host\"\nnetns = \"rp-host\"\ninterval_s = 0.2\n\
             [hw]\nupdate_delay_ms = 0\n[detect]\nwhitelist = [\"10.10.0.1\"]\n\
             [monitor]\nhold_s = 1\n[offload]\ncapacity = 64\n",
        )
        .unwrap();
        assert_eq!(c.daemon.mode, Mode::XdpHost);
        assert_eq!(c.detect.whitelist, vec!["10.10.0.1".to_string()]);
        assert_eq!(c.monitor.hold_s, 1.0);
        assert_eq!(c.offload.capacity, 64);
    }

    #[test]
    fn bad_input_says_what_is_wrong() {
        let e = Config::parse("[daemon]\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field") && e.contains("bogus"), "{e}");
        let e = Config::parse("[daemon]\nmode = \"xdp\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant"), "{e}");
        let e = Config::parse("[daemon]\nnice = -21\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("daemon.nice = -21"), "{e}");
        assert_eq!(Config::parse("").unwrap().daemon.nice, -10);
        let e = Config::parse("[daemon]\ninterval_s = 5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("daemon.interval_s"), "{e}");
        let e = Config::parse("[server]\nlisten = \"nope\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.listen"), "{e}");
        let e = Config::parse("[server]\nlisten = \"0.0.0.0:9477\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.token_file"), "{e}");
        let e = Config::parse("[daemon]\nlisten = \"127.0.0.1:9477\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("daemon.listen: unknown field"),
            "moved to [server]: {e}"
        );
        let e = Config::parse("[hw]\nbackend = \"asic\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hw.backend"), "{e}");
        let e = Config::parse("[offload]\ncapacity = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("capacity"), "{e}");
    }
}
