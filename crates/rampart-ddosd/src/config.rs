//! The daemon's TOML configuration (`rampart ddos run --config FILE`).
//!
//! Every section and key is optional (`serde(default)`) and unknown keys
//! are errors (`deny_unknown_fields`); loading and errors are the service
//! shell's (`rampart_service::config`). Defaults are in the doc comments,
//! in `dist/rampart-ddos.toml` and in `rampart ddos run --print-config`.

use std::path::{Path, PathBuf};

use rampart_ddos_control::detection::DetectionConfig;
use rampart_ddos_control::PlannerConfig;
use rampart_service::alert::AlertsConfig;
use rampart_service::{ConfigError, ServerConfig};
use serde::{Deserialize, Serialize};

use crate::crowdsec::CrowdsecConfig;
use crate::error::{Error, Result};
use crate::flow_input::FlowInputConfig;
use crate::mode::Mode;
use crate::tier::upstream::UpstreamConfig;

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
    /// `[hw]`: the hardware tier of the `hw+…` modes and the NIC hop.
    pub hw: HwConfig,
    /// `[detect]`: per-victim detection, attribution, policing, SYN
    /// cookies, unbans and the attack lifecycle (rampart-ddos-control;
    /// docs/ddos.md, "How detection works").
    pub detect: DetectionConfig,
    /// `[offload]` (rampart-ddos-control). `capacity` is capped at the hardware tier's own.
    pub offload: PlannerConfig,
    /// `[alerts]`: where alerts go (a JSON-lines file or stdout, syslog, a webhook).
    pub alerts: AlertsConfig,
    /// `[upstream]`: the router in front of the host over BGP (ExaBGP),
    /// engaged when the blocked volume nears the link's capacity
    /// (docs/upstream.md). Off by default.
    pub upstream: UpstreamConfig,
    /// `[crowdsec]`: pull a CrowdSec Local API's ban decisions into the
    /// XDP blacklist and push detection's blocks to it (docs/crowdsec.md).
    /// Off by default.
    pub crowdsec: CrowdsecConfig,
    /// `[flow_input]`: NetFlow v9 / IPFIX and sFlow v5 receivers feeding a
    /// detection of the protected prefixes from routers' exports
    /// (docs/flow-input.md). Off by default.
    pub flow_input: FlowInputConfig,
    /// Run the host filter as the ddos stage of this chain (`rampart run`)
    /// instead of alone on `[daemon] iface`. Not a config key.
    #[serde(skip)]
    pub chain: Option<rampart_dataplane::chain::Chain>,
}

/// `[daemon]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    /// Placement mode: `xdp-host`, `xdp-nic`, `hw+xdp-nic`, `hw+xdp-host`,
    /// `iptables`. Default `xdp-host` (no hardware tier).
    pub mode: Mode,
    /// Host interface to protect (features are read here; the XDP
    /// blacklist runs here in the `*-host` modes). Required: no default.
    pub iface: String,
    /// Named network namespace of `iface`. Default none (the daemon's own).
    pub netns: Option<String>,
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
            mode: Mode::XdpHost,
            iface: String::new(),
            netns: None,
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
    /// Drop tunnel packets (GRE, IP in IP, VXLAN, Geneve, MPLS without
    /// IP), whose inner source is not checked. Default false (passed and
    /// counted as `encap_<kind>`).
    pub drop_encap: bool,
    /// VLAN tags the parser walks (more: dropped as `too_deep`). Default 4; 0 ≤ x ≤ 8.
    pub max_vlans: u32,
    /// IPv6 extension headers the parser walks (more: `too_deep`). Default 8; 0 ≤ x ≤ 16.
    pub max_v6_ext: u32,
}

impl Default for FilterSection {
    fn default() -> Self {
        Self {
            max_entries: 1 << 20,
            max_prefixes: 1 << 16,
            sample_shift: 4,
            features_capacity: 1 << 18,
            xdp_mode: "native".into(),
            drop_encap: false,
            max_vlans: rampart_ddos::filter::FILTER_DEF_VLANS,
            max_v6_ext: rampart_ddos::filter::PARSE_DEF_V6_EXT,
        }
    }
}

/// `[hw]`: the hardware tier of the `hw+…` modes and the NIC hop.
///
/// The NIC hop (`iface` in `netns`) is the interface in front of the host
/// where the hardware tier's rules live — the NIC's own interface for
/// `tc-flower`, `ethtool-ntuple` and `xdp-hw`, or the interface whose XDP
/// program is the EMULATED NIC for `emulated` — and where the `xdp-nic`
/// modes chain their filter in front of the program that runs there.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HwConfig {
    /// `tc-flower`, `ethtool-ntuple`, `xdp-hw`, or `emulated` (the
    /// EMULATED NIC of the lab). Default `tc-flower`.
    pub backend: String,
    /// Per-update delay of the EMULATED NIC (milliseconds), what a real
    /// card costs. Default 2; 0 ≤ x ≤ 1000.
    pub update_delay_ms: f64,
    /// The NIC hop's interface. Default: `[daemon].iface` (a NIC's own
    /// tables); required by `emulated` and the `xdp-nic` modes.
    pub iface: Option<String>,
    /// The NIC hop's network namespace. Default: `[daemon].netns`.
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
            backend: "tc-flower".into(),
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
            detect: DetectionConfig::default(),
            offload: PlannerConfig::default(),
            alerts: AlertsConfig::default(),
            upstream: UpstreamConfig::default(),
            crowdsec: CrowdsecConfig::default(),
            flow_input: FlowInputConfig::default(),
            chain: None,
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
        use rampart_ddos::filter::{PARSE_MAX_V6_EXT, PARSE_MAX_VLANS};
        let f = &self.filter;
        if f.max_vlans > PARSE_MAX_VLANS || f.max_v6_ext > PARSE_MAX_V6_EXT {
            return Err(Error::Config(format!(
                "filter.max_vlans = {}, filter.max_v6_ext = {}: use 0 ≤ max_vlans ≤ {PARSE_MAX_VLANS}, 0 ≤ max_v6_ext ≤ {PARSE_MAX_V6_EXT}",
                f.max_vlans, f.max_v6_ext
            )));
        }
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
        self.flow_input.check().map_err(Error::Config)?;
        self.alerts
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        if !d.iface.is_empty() {
            rampart_ddos::Scope::new(d.netns.as_deref(), &d.iface)
                .map_err(|e| Error::Config(format!("daemon.iface/netns: {e}")))?;
        }
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
        if h.iface.is_none() && (d.mode.on_nic() || (d.mode.has_hw() && h.backend == "emulated")) {
            return Err(Error::Config(format!(
                "mode {} with hw.backend = {:?} works on the NIC hop: set [hw] iface (and netns) to it",
                d.mode.name(),
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
        self.offload
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        self.upstream.validate("upstream")?;
        self.crowdsec.validate("crowdsec")?;
        Ok(())
    }
}

fn config_error(e: ConfigError) -> Error {
    match e {
        ConfigError::Read { path, err } => {
            Error::io(format!("reading config {}", path.display()), err)
        }
        // Validation errors already carry "config: " from Error::Config.
        e => Error::Config(e.to_string().replacen("config: ", "", 1)),
    }
}

impl Config {
    /// What the daemon needs to run beyond a valid file: the interface to
    /// protect.
    ///
    /// # Errors
    /// [`Error::Config`] saying which key to set.
    pub fn require_runnable(&self) -> Result<()> {
        if self.daemon.iface.is_empty() {
            return Err(Error::Config(
                "daemon.iface is not set: set [daemon] iface to the interface to protect, e.g. iface = \"eth0\"".into(),
            ));
        }
        Ok(())
    }

    /// The NIC hop (`[hw] iface`, `netns`; by default the daemon's own).
    pub fn nic_hop(&self) -> NicHop {
        NicHop {
            netns: self.hw.netns.clone().or_else(|| self.daemon.netns.clone()),
            iface: self
                .hw
                .iface
                .clone()
                .unwrap_or_else(|| self.daemon.iface.clone()),
        }
    }
}

/// A NIC hop: an interface, in a named network namespace or the daemon's
/// own, in front of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicHop {
    /// Named network namespace (`None`: the daemon's own).
    pub netns: Option<String>,
    /// Interface.
    pub iface: String,
}

impl std::fmt::Display for NicHop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.netns {
            Some(n) => write!(f, "{} (netns {n})", self.iface),
            None => write!(f, "{}", self.iface),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_all_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.server.listen.as_deref(), Some(DEFAULT_LISTEN));
        assert_eq!(c.daemon.mode, Mode::XdpHost);
        assert_eq!(c.hw.backend, "tc-flower");
        assert_eq!(c.daemon.interval_s, 0.5);
        assert_eq!(c.offload.capacity, 512);
    }

    #[test]
    fn shipped_example_parses() {
        let c = Config::parse(include_str!("../../../dist/rampart-ddos.toml")).unwrap();
        // The NIC is probed at start (a hardware tier only where it has one).
        assert_eq!(c.daemon.mode, Mode::Auto);
        assert_eq!(
            c.detect,
            DetectionConfig::default(),
            "the shipped [detect] is the defaults"
        );
        assert!(
            !c.daemon.mode.has_hw(),
            "no hardware tier unless configured"
        );
        // The interface to protect is the one key a host must set.
        let e = c.require_runnable().unwrap_err().to_string();
        assert!(e.contains("set [daemon] iface"), "{e}");
    }

    #[test]
    fn the_interface_is_required_to_run_and_nothing_else() {
        let c = Config::parse("[daemon]\niface = \"eth0\"\n").unwrap();
        c.require_runnable().unwrap();
        assert_eq!(
            c.nic_hop(),
            NicHop {
                netns: None,
                iface: "eth0".into()
            },
            "the NIC hop defaults to the daemon's interface (a NIC's own tables)"
        );
    }

    #[test]
    fn the_nic_hop_comes_from_hw_and_nic_modes_require_it() {
        let c = Config::parse(
            "[daemon]\nmode = \"hw+xdp-nic\"\niface = \"host0\"\nnetns = \"h\"\n\
             [hw]\nbackend = \"emulated\"\nnetns = \"n\"\niface = \"nic-wan\"\n",
        )
        .unwrap();
        let hop = c.nic_hop();
        assert_eq!(
            (hop.netns.as_deref(), hop.iface.as_str()),
            (Some("n"), "nic-wan")
        );
        assert_eq!(hop.to_string(), "nic-wan (netns n)");
        for (mode, backend) in [("xdp-nic", "tc-flower"), ("hw+xdp-host", "emulated")] {
            let e = Config::parse(&format!(
                "[daemon]\nmode = \"{mode}\"\niface = \"eth0\"\n[hw]\nbackend = \"{backend}\"\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains("set [hw] iface"), "{mode}: {e}");
        }
        // A real NIC's tables are on the host's own interface: no hop needed.
        Config::parse("[daemon]\nmode = \"hw+xdp-host\"\niface = \"eth0\"\n").unwrap();
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
             hold_s = 1\n[offload]\ncapacity = 64\n",
        )
        .unwrap();
        assert_eq!(c.daemon.mode, Mode::XdpHost);
        assert_eq!(c.detect.whitelist, vec!["10.10.0.1".to_string()]);
        assert_eq!(c.detect.hold_s, 1.0);
        assert_eq!(c.offload.capacity, 64);
    }

    #[test]
    fn the_upstream_tier_is_off_unless_enabled_and_then_checked() {
        let c = Config::parse("").unwrap();
        assert!(!c.upstream.enabled);
        let c = Config::parse(
            "[upstream]\nenabled = true\nlink_capacity_bps = 1e9\naction = \"rate-limit 1000\"\n\
             never = [\"192.0.2.0/24\"]\nhold_s = 60\n",
        )
        .unwrap();
        assert_eq!(c.upstream.levels().hold_s, 60.0);
        assert_eq!(c.upstream.never.len(), 1);
        // Reads back as written.
        let again = Config::parse(&c.render().unwrap()).unwrap();
        assert_eq!(again.upstream, c.upstream);
        let e = Config::parse("[upstream]\nenabled = true\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("upstream.link_capacity_bps"), "{e}");
        let e = Config::parse("[upstream]\naction = \"drop\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("discard"), "{e}");
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
