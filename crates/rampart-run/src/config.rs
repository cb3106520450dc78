//! The one config of `rampart run` (`dist/rampart.toml` is the commented
//! reference):
//!
//! ```toml
//! [server]                 # the one HTTP API and /metrics (rampart_service::ServerConfig)
//! [alerts]                 # the one alert stream (rampart_service::alert::AlertsConfig)
//! [[interface]]            # each interface gets one XDP entry point chaining the stages
//! name = "eth0"
//! [ddos]                   # rampart ddos run's config, without its [server] and [alerts]
//! [stream]                 # rampart_stream::apps::config::StreamConfig
//! [tenant]                 # rampart tenant serve's config, without [server]; tenants are [[tenant.tenant]]
//! ```
//!
//! Each application's section is its own daemon's config struct, so every
//! key it takes alone it takes here; what `rampart run` owns instead (the
//! API, the alerts, the interfaces and their XDP mode) is refused in the
//! sections with one line saying where it goes. Loading and errors are the
//! service shell's (`rampart_service::config`).

use std::path::Path;

use rampart_dataplane::xdp::XdpMode;
use rampart_service::alert::AlertsConfig;
use rampart_service::{ConfigError, ServerConfig};
use rampart_stream::apps::config::StreamConfig;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The API's address when `[server] listen` is not given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9470";

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`: the one HTTP API (default `listen = "127.0.0.1:9470"`),
    /// `metrics_listen`, `token_file`. Each application's routes are
    /// mounted under its own prefix.
    pub server: ServerConfig,
    /// `[alerts]`: where every application's alerts go (one schema).
    pub alerts: AlertsConfig,
    /// `[[interface]]`: where the applications run. Required: at least one.
    #[serde(rename = "interface")]
    pub interfaces: Vec<InterfaceConfig>,
    /// `[ddos]`: DDoS mitigation (the config of `rampart ddos run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ddos: Option<rampart_ddosd::Config>,
    /// `[stream]`: flow analytics on the interface's tap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamConfig>,
    /// `[tenant]`: tenant programs (the config of `rampart tenant serve`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<rampart_tenant::config::Config>,
    /// The file named no `[[interface]]`: the one listed is the default
    /// route's ([`Config::load`]), which the daemon says at start.
    #[serde(skip)]
    pub interface_from_route: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            server: ServerConfig::default().with_default_listen(DEFAULT_LISTEN),
            alerts: AlertsConfig::default(),
            interfaces: Vec::new(),
            ddos: None,
            stream: None,
            tenant: None,
            interface_from_route: false,
        }
    }
}

/// One `[[interface]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    /// Interface name. Required.
    pub name: String,
    /// Named network namespace (`ip netns` name) of the interface. Default
    /// none: the daemon's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// XDP attach mode of the chain's entry point: `native` or `generic`.
    /// Default `native`.
    #[serde(default = "native")]
    pub xdp_mode: String,
}

fn native() -> String {
    "native".into()
}

impl InterfaceConfig {
    /// The attach mode.
    pub fn mode(&self) -> XdpMode {
        if self.xdp_mode == "generic" {
            XdpMode::Generic
        } else {
            XdpMode::Native
        }
    }

    /// `name` or `name (netns ns)`.
    pub fn describe(&self) -> String {
        match &self.netns {
            Some(ns) => format!("{} (netns {ns})", self.name),
            None => self.name.clone(),
        }
    }
}

/// Keys of the applications' own configs that `rampart run` owns
/// instead, and where they go.
const OWNED_KEYS: &[(&[&str], &str)] = &[
    (
        &["ddos", "server"],
        "rampart run has one API: move these keys to the top-level [server]",
    ),
    (
        &["ddos", "alerts"],
        "rampart run has one alert stream: move these keys to the top-level [alerts]",
    ),
    (
        &["ddos", "daemon", "iface"],
        "the interfaces are the [[interface]] list: remove this key",
    ),
    (
        &["ddos", "daemon", "netns"],
        "the interfaces are the [[interface]] list: set netns there",
    ),
    (
        &["ddos", "filter", "xdp_mode"],
        "the chain's attach mode is [[interface]] xdp_mode: set it there",
    ),
    (
        &["tenant", "server"],
        "rampart run has one API: move these keys to the top-level [server] (its token_file names tenants and operators)",
    ),
    (
        &["tenant", "infra", "interfaces"],
        "the interfaces are the [[interface]] list: remove this key",
    ),
    (
        &["tenant", "infra", "netns"],
        "the interfaces are the [[interface]] list: set netns there",
    ),
    (
        &["tenant", "infra", "mode"],
        "the chain's attach mode is [[interface]] xdp_mode: set it there",
    ),
    (
        &["tenant", "infra", "attach"],
        "rampart run always chains the tenant stage: remove this key",
    ),
];

fn owned_key(text: &str) -> std::result::Result<(), ConfigError> {
    let Ok(table) = text.parse::<toml::Table>() else {
        // The typed parse that follows says what is wrong, with the line.
        return Ok(());
    };
    for (path, fix) in OWNED_KEYS {
        let mut v: Option<&toml::Value> = None;
        let mut t = Some(&table);
        for p in *path {
            v = t.and_then(|t| t.get(*p));
            t = v.and_then(toml::Value::as_table);
        }
        if v.is_some() {
            return Err(ConfigError::invalid(format!("{}: {fix}", path.join("."))));
        }
    }
    Ok(())
}

/// The interface of the default route (IPv4, else IPv6) in the daemon's
/// own network namespace, if there is one.
pub fn default_route_interface() -> Option<String> {
    let v4 = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    // Iface Destination Gateway Flags RefCnt Use Metric Mask …
    let found = v4.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 7 && f[1] == "00000000" && f[7] == "00000000").then(|| f[0].to_string())
    });
    found.or_else(|| {
        let v6 = std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default();
        // dest dest_len src src_len next_hop metric refcnt use flags iface
        v6.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" && f[9] != "lo")
                .then(|| f[9].to_string())
        })
    })
}

impl Config {
    fn checked(
        text: &str,
        c: std::result::Result<Self, ConfigError>,
        route: impl FnOnce() -> Option<String>,
    ) -> std::result::Result<Self, ConfigError> {
        owned_key(text)?;
        let mut c = c?;
        if c.interfaces.is_empty() {
            if let Some(name) = route() {
                c.interfaces.push(InterfaceConfig {
                    name,
                    netns: None,
                    xdp_mode: native(),
                });
                c.interface_from_route = true;
            }
        }
        c.server = c.server.with_default_listen(DEFAULT_LISTEN);
        c.validate()
            .map_err(|e| ConfigError::invalid(e.to_string()))?;
        Ok(c)
    }

    /// Parse TOML text and validate every section.
    ///
    /// # Errors
    /// [`Error::Config`]: one line naming the key and the fix.
    pub fn parse(text: &str) -> Result<Self> {
        Self::checked(text, rampart_service::config::parse(text), || None).map_err(config_error)
    }

    /// Read, parse and validate a file. A file without `[[interface]]`
    /// runs on the default route's interface
    /// ([`Config::interface_from_route`]).
    ///
    /// # Errors
    /// An unreadable file, or as [`Config::parse`] (naming the file).
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("reading config {}: {e}", path.display())))?;
        Self::checked(
            &text,
            rampart_service::config::parse(&text),
            default_route_interface,
        )
        .map_err(|e| config_error(e.in_file(path)))
    }

    /// The effective config as TOML (`rampart run --print-config`).
    ///
    /// # Errors
    /// A value TOML cannot hold.
    pub fn render(&self) -> Result<String> {
        // The applications' structs carry the keys rampart run owns: not printed.
        let mut table = toml::Table::try_from(self)
            .map_err(|e| Error::Config(format!("rendering the config: {e}")))?;
        for (path, _) in OWNED_KEYS {
            let (last, parents) = path.split_last().unwrap_or((&"", &[]));
            let mut t = Some(&mut table);
            for p in parents {
                t = t
                    .and_then(|t| t.get_mut(*p))
                    .and_then(toml::Value::as_table_mut);
            }
            if let Some(t) = t {
                t.remove(*last);
            }
        }
        rampart_service::config::render("rampart run", &table).map_err(config_error)
    }

    /// The enabled applications, in chain order.
    pub fn stages(&self) -> Vec<&'static str> {
        let mut s = Vec::new();
        if self.ddos.is_some() {
            s.push("ddos");
        }
        if self.stream.is_some() {
            s.push("stream");
        }
        if self.tenant.is_some() {
            s.push("tenant");
        }
        s
    }

    /// `[ddos]` as `rampart ddos run`'s config for interface `i`: its
    /// interface, no API of its own (the one API mounts its routes), the
    /// one alert stream.
    pub fn ddos_for(&self, i: &InterfaceConfig) -> Option<rampart_ddosd::Config> {
        let mut c = self.ddos.clone()?;
        c.daemon.iface = i.name.clone();
        c.daemon.netns = i.netns.clone();
        c.filter.xdp_mode = i.xdp_mode.clone();
        c.server = ServerConfig {
            listen: Some(String::new()),
            ..ServerConfig::default()
        };
        c.alerts = self.alerts.clone();
        Some(c)
    }

    /// `[tenant]` as `rampart tenant serve`'s config: every interface,
    /// the one API's server section.
    pub fn tenant_config(&self) -> Option<rampart_tenant::config::Config> {
        let mut c = self.tenant.clone()?;
        c.infra.interfaces = self.interfaces.iter().map(|i| i.name.clone()).collect();
        c.infra.netns = self.interfaces.first().and_then(|i| i.netns.clone());
        c.infra.mode = self
            .interfaces
            .first()
            .map(InterfaceConfig::mode)
            .unwrap_or_default();
        c.server = self.server.clone();
        Some(c)
    }

    /// Check every section (no system access).
    ///
    /// # Errors
    /// [`Error::Config`] naming the key and the fix.
    pub fn validate(&mut self) -> Result<()> {
        self.server
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        self.alerts
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        if self.interfaces.is_empty() {
            return Err(Error::Config(
                "no [[interface]] and no default route to take it from: add the interface to run on, e.g. `[[interface]]` then `name = \"eth0\"`"
                    .into(),
            ));
        }
        for (n, i) in self.interfaces.iter().enumerate() {
            rampart_ddos::Scope::new(i.netns.as_deref(), &i.name)
                .map_err(|e| Error::Config(format!("interface {:?}: {e}", i.name)))?;
            if !["native", "generic"].contains(&i.xdp_mode.as_str()) {
                return Err(Error::Config(format!(
                    "interface {:?}: xdp_mode = {:?}: use \"native\" or \"generic\"",
                    i.name, i.xdp_mode
                )));
            }
            if self.interfaces[..n]
                .iter()
                .any(|o| o.name == i.name && o.netns == i.netns)
            {
                return Err(Error::Config(format!(
                    "interface {} is listed twice: one [[interface]] per interface",
                    i.describe()
                )));
            }
        }
        if self.stages().is_empty() {
            return Err(Error::Config(
                "no application enabled: add a [ddos], [stream] or [tenant] section".into(),
            ));
        }
        if let Some(d) = &self.ddos {
            use rampart_ddosd::Mode;
            if !matches!(d.daemon.mode, Mode::XdpHost | Mode::HwXdpHost | Mode::Auto) {
                return Err(Error::Config(format!(
                    "ddos.daemon.mode = {:?}: rampart run chains the ddos filter on the interface: use \"auto\", \"xdp-host\" or \"hw+xdp-host\"",
                    d.daemon.mode.name()
                )));
            }
            for i in &self.interfaces {
                let c = self.ddos_for(i).unwrap_or_default();
                c.validate().map_err(|e| {
                    Error::Config(format!(
                        "[ddos] {}",
                        e.to_string().trim_start_matches("config: ")
                    ))
                })?;
            }
        }
        if let Some(s) = &self.stream {
            s.validate().map_err(|e| Error::Config(e.to_string()))?;
        }
        if self.ddos.is_some() && self.interfaces.len() > 1 {
            return Err(Error::Config(
                "[ddos] runs on one interface in rampart run: list one [[interface]] (or run `rampart ddos run` per interface)"
                    .into(),
            ));
        }
        if self.tenant.is_some() {
            if self
                .interfaces
                .iter()
                .any(|i| i.netns != self.interfaces[0].netns)
            {
                return Err(Error::Config(
                    "[tenant] runs on interfaces of one network namespace: give every [[interface]] the same netns"
                        .into(),
                ));
            }
            if self
                .interfaces
                .iter()
                .any(|i| i.xdp_mode != self.interfaces[0].xdp_mode)
            {
                return Err(Error::Config(
                    "[tenant] attaches in one XDP mode: give every [[interface]] the same xdp_mode"
                        .into(),
                ));
            }
            let mut t = self.tenant_config().unwrap_or_default();
            t.validate()
                .map_err(|e| Error::Config(format!("[tenant] {e}")))?;
            // Tenant ids assigned by validate: keep them.
            if let Some(mine) = &mut self.tenant {
                mine.tenants = t.tenants;
            }
        }
        Ok(())
    }

    /// What a start needs from this system beyond a valid file: every
    /// interface present (in its namespace). `rampart run --check` runs it.
    ///
    /// # Errors
    /// [`Error::System`] naming the missing interface or namespace.
    pub fn check_system(&self) -> Result<()> {
        for i in &self.interfaces {
            rampart_dataplane::netns::ifindex(i.netns.as_deref(), &i.name).map_err(|e| {
                Error::System(format!(
                    "[[interface]] name = {:?}: {e} (set name to an interface of this host: `ip link`)",
                    i.name
                ))
            })?;
        }
        Ok(())
    }
}

impl Config {
    /// What this system limits without stopping a start, one line each:
    /// with `[tenant]` on a kernel without Landlock, tenants can submit
    /// BPF objects but not C source (the compiler's sandbox needs it).
    /// `rampart run --check` prints them; a start logs them.
    #[must_use]
    pub fn system_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.tenant.is_some() {
            if let Err(why) = rampart_tenant::compiler::sandbox_abi() {
                notes.push(format!("[tenant]: {why}"));
            }
        }
        notes
    }
}

fn config_error(e: ConfigError) -> Error {
    Error::Config(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const IFACE: &str = "[[interface]]\nname = \"eth0\"\n";

    fn err(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn the_shipped_config_is_valid() {
        let text = include_str!("../../../dist/rampart.toml");
        let c = Config::parse(text).unwrap();
        assert_eq!(c.stages(), ["ddos", "stream"]);
        assert!(!c.interfaces.is_empty());
        // What --print-config prints parses back to the same config.
        let again = Config::parse(&c.render().unwrap()).unwrap();
        assert_eq!(again.render().unwrap(), c.render().unwrap());
    }

    #[test]
    fn each_application_is_optional() {
        for s in ["[ddos]", "[stream]", "[tenant]"] {
            let c = Config::parse(&format!("{IFACE}{s}\n")).unwrap();
            assert_eq!(c.stages(), [&s[1..s.len() - 1]]);
        }
        let c = Config::parse(&format!("{IFACE}[ddos]\n[tenant]\n")).unwrap();
        assert_eq!(c.stages(), ["ddos", "tenant"]);
    }

    #[test]
    fn the_sections_are_each_applications_own() {
        let c = Config::parse(&format!(
            "{IFACE}[ddos.detect]\nhold_s = 90.0\n[ddos.daemon]\ninterval_s = 0.25\n\
             [[tenant.tenant]]\nname = \"acme\"\nselectors = [\"prefix:10.1.0.0/16\"]\n"
        ))
        .unwrap();
        let d = c.ddos_for(&c.interfaces[0]).unwrap();
        assert_eq!(d.daemon.iface, "eth0");
        assert_eq!(d.daemon.interval_s, 0.25);
        assert_eq!(d.server.api_addr().unwrap(), None, "no API of its own");
        let t = c.tenant_config().unwrap();
        assert_eq!(t.infra.interfaces, ["eth0"]);
        assert_eq!(t.tenants[0].id, Some(1), "ids assigned");
    }

    #[test]
    fn bad_configs_get_one_line_naming_the_key() {
        for (text, want) in [
            ("[ddos]\n".to_string(), "no [[interface]]"),
            (IFACE.to_string(), "no application enabled"),
            (format!("{IFACE}[dddos]\n"), "unknown field `dddos`"),
            (
                format!("{IFACE}[ddos.daemon]\ninterval_s = 7\n"),
                "[ddos] daemon.interval_s = 7",
            ),
            (
                format!("{IFACE}[ddos.daemon]\niface = \"eth1\"\n"),
                "ddos.daemon.iface: the interfaces are the [[interface]] list",
            ),
            (
                format!("{IFACE}[ddos.server]\nlisten = \"0.0.0.0:1\"\n"),
                "ddos.server: rampart run has one API",
            ),
            (
                format!("{IFACE}[tenant.infra]\ninterfaces = [\"x\"]\n"),
                "tenant.infra.interfaces",
            ),
            (
                format!("{IFACE}[ddos.daemon]\nmode = \"iptables\"\n"),
                "ddos.daemon.mode = \"iptables\"",
            ),
            (
                format!("{IFACE}[stream]\napps = [\"portscan\"]\n[stream.portscan]\nalpha = 2\n"),
                "stream.portscan",
            ),
            (
                format!("{IFACE}[tenant.fairness]\nenabled = true\n[tenant.infra]\naccounting = false\n"),
                "[tenant] fairness.enabled needs infra.accounting",
            ),
            (
                format!("{IFACE}{IFACE}[stream]\n"),
                "interface eth0 is listed twice",
            ),
            (
                "[[interface]]\nname = \"a/b\"\n[stream]\n".to_string(),
                "interface \"a/b\"",
            ),
            (
                "[[interface]]\nname = \"eth0\"\nxdp_mode = \"hw\"\n[stream]\n".to_string(),
                "xdp_mode = \"hw\"",
            ),
        ] {
            let e = err(&text);
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn several_stream_apps_share_the_tap() {
        let c = Config::parse(&format!(
            "{IFACE}[stream]\napps = [\"flowmeter\", \"portscan\"]\n"
        ))
        .unwrap();
        assert_eq!(c.stream.unwrap().apps.len(), 2);
        let e = err(&format!(
            "{IFACE}[stream]\napps = [\"portscan\", \"portscan\"]\n"
        ));
        assert!(e.contains("named twice"), "{e}");
    }

    #[test]
    fn no_interface_means_the_default_routes() {
        let c = Config::checked(
            "[stream]\n",
            rampart_service::config::parse("[stream]\n"),
            || Some("ens3".into()),
        )
        .unwrap();
        assert_eq!(c.interfaces[0].name, "ens3");
        assert!(c.interface_from_route);
        let c = Config::parse(&format!("{IFACE}[stream]\n")).unwrap();
        assert!(!c.interface_from_route);
    }

    #[test]
    fn a_missing_interface_is_named() {
        let c = Config::parse("[[interface]]\nname = \"rp-no-such0\"\n[stream]\n").unwrap();
        let e = c.check_system().unwrap_err().to_string();
        assert!(e.contains("rp-no-such0"), "{e}");
    }
}
