//! `rampart tenant serve --config FILE`: the operator's configuration
//! (`dist/rampart-tenant.toml` is the commented reference). Loading,
//! errors and `--print-config` are the service shell's
//! (`rampart_service::config`).
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:9610"
//! token_file = "/etc/rampart/tenant.tokens"   # lines `acme <token>` (or `acme sha256:<hex>`)
//!
//! [infra]
//! name = "default"          # pins under /sys/fs/bpf/rampart/tenant/<name>
//! netns = "rp-host"         # namespace of the interfaces (omit: the current one)
//! interfaces = ["host0"]    # where the infrastructure program runs (XDP ingress)
//! default_action = "pass"   # packets of no tenant: pass or drop
//! used_flush_us = 20        # per-CPU batching of the shared used counters (0: none)
//!
//! [fairness]
//! enabled = true
//! budget_cores = 0.8        # CPU the tenants' packets may use together
//! period_ms = 10            # Δt of the token generator
//! bucket_ms = 20            # cap B of each bucket, ms of CPU
//!
//! [[tenant]]
//! name = "acme"
//! weight = 1
//! selectors = ["prefix:10.20.1.0/24", "vlan:101"]
//! ports = ["t1"]                       # interfaces RAMPART_REDIRECT(n) may use
//! domain_netns = "rp-t1"               # the tenant's side, for accounting
//! ```

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use rampart_dataplane::xdp::XdpMode;
use rampart_service::{ConfigError, ServerConfig, Tokens};
use serde::{Deserialize, Serialize};

use crate::confine::Policy;
use crate::error::{Error, Result};
use crate::selector::Selector;
use crate::tokens::TokenConfig;
use rampart_bpf::abi::tenant::{TENANT_MAX, TENANT_PORTS_MAX};

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[server]`: the HTTP API (default `listen = "127.0.0.1:9610"`),
    /// `metrics_listen`, `token_file` (the tenants' tokens, `NAME TOKEN`).
    #[serde(default)]
    pub server: ServerConfig,
    /// The infrastructure program.
    #[serde(default)]
    pub infra: InfraConfig,
    /// Token buckets.
    #[serde(default)]
    pub fairness: FairnessConfig,
    /// Limits on tenant programs.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Tenants.
    #[serde(default, rename = "tenant")]
    pub tenants: Vec<TenantConfig>,
}

/// The API's address when `[server] listen` is not given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9610";

impl Default for Config {
    fn default() -> Self {
        Self {
            server: ServerConfig::default().with_default_listen(DEFAULT_LISTEN),
            infra: InfraConfig::default(),
            fairness: FairnessConfig::default(),
            limits: LimitsConfig::default(),
            tenants: Vec::new(),
        }
    }
}

/// What to do with packets of no tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DefaultAction {
    /// Hand them to the host's stack.
    #[default]
    Pass,
    /// Drop them (counted, reason `default`).
    Drop,
}

/// `[infra]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InfraConfig {
    /// Instance name: pins live under `/sys/fs/bpf/rampart/tenant/<name>`.
    #[serde(default = "default_name")]
    pub name: String,
    /// Network namespace of the interfaces (`None`: the caller's).
    #[serde(default)]
    pub netns: Option<String>,
    /// Interfaces the infrastructure program runs on (XDP, ingress). Required.
    #[serde(default)]
    pub interfaces: Vec<String>,
    /// Attach to the interfaces (false: load only, for BPF_PROG_RUN tests).
    #[serde(default = "yes")]
    pub attach: bool,
    /// XDP mode.
    #[serde(default, with = "mode_serde")]
    pub mode: XdpMode,
    /// Packets of no tenant.
    #[serde(default)]
    pub default_action: DefaultAction,
    /// UDP destination port that marks VXLAN.
    #[serde(default = "default_vxlan")]
    pub vxlan_port: u16,
    /// Re-demultiplex after XDP_PASS (drop packets a tenant rewrote into another's space).
    #[serde(default = "yes")]
    pub recheck: bool,
    /// CPU accounting: the dispatcher's per-packet time slices and the
    /// tracepoints that follow the kernel path after XDP. Fairness needs it.
    #[serde(default = "yes")]
    pub accounting: bool,
    /// Per-CPU batching of the tenants' shared `used` counters (µs): a CPU
    /// adds what it charged to a tenant once per this much CPU time, on a
    /// change of tenant, or when its NAPI work stops. Buckets seen by other
    /// CPUs and by the token generator lag by less than this per CPU.
    /// 0: every charge is added at once (one atomic per packet).
    #[serde(default = "default_flush_us")]
    pub used_flush_us: u32,
    /// Run as the tenant stage of these interfaces' chains (`rampart run`)
    /// instead of alone on them: an interface with a chain here gets the
    /// dispatcher in the chain's tenant slot. Not a config key.
    #[serde(skip)]
    pub chains: Vec<rampart_dataplane::chain::Chain>,
}

fn default_flush_us() -> u32 {
    20
}

impl Default for InfraConfig {
    fn default() -> Self {
        Self {
            name: default_name(),
            netns: None,
            interfaces: Vec::new(),
            attach: true,
            mode: XdpMode::default(),
            default_action: DefaultAction::default(),
            vxlan_port: default_vxlan(),
            recheck: true,
            accounting: true,
            used_flush_us: default_flush_us(),
            chains: Vec::new(),
        }
    }
}

mod mode_serde {
    use rampart_dataplane::xdp::XdpMode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &XdpMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match m {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
            XdpMode::Hw => "hw",
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<XdpMode, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

fn default_name() -> String {
    "default".into()
}
fn yes() -> bool {
    true
}
fn default_vxlan() -> u16 {
    4789
}

/// `[fairness]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FairnessConfig {
    /// Reject packets of tenants whose bucket is empty.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// CPU the tenants may use together, in cores. Shares are only
    /// enforced if this is at most what the core can give the tenants'
    /// packets (see docs/tenant.md).
    #[serde(default = "default_budget")]
    pub budget_cores: f64,
    /// Δt of the token generator, ms.
    #[serde(default = "default_period")]
    pub period_ms: u64,
    /// Bucket cap B, ms of CPU.
    #[serde(default = "default_bucket")]
    pub bucket_ms: f64,
}

fn default_budget() -> f64 {
    0.8
}
fn default_period() -> u64 {
    10
}
fn default_bucket() -> f64 {
    20.0
}

impl Default for FairnessConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            budget_cores: default_budget(),
            period_ms: default_period(),
            bucket_ms: default_bucket(),
        }
    }
}

impl FairnessConfig {
    /// The token generator's settings.
    pub fn tokens(&self) -> TokenConfig {
        TokenConfig {
            budget_ns_per_sec: self.budget_cores * 1e9,
            period: Duration::from_millis(self.period_ms),
            cap_ns: (self.bucket_ms * 1e6).max(0.0) as u64,
        }
    }
}

/// `[limits]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Instruction budget per tenant program.
    #[serde(default = "default_insns")]
    pub max_insns: usize,
    /// Map memory budget per tenant, bytes.
    #[serde(default = "default_map_bytes")]
    pub max_map_bytes: u64,
    /// Most maps per tenant program.
    #[serde(default = "default_maps")]
    pub max_maps: usize,
}

fn default_insns() -> usize {
    Policy::default().max_insns
}
fn default_map_bytes() -> u64 {
    Policy::default().max_map_bytes
}
fn default_maps() -> usize {
    Policy::default().max_maps
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_insns: default_insns(),
            max_map_bytes: default_map_bytes(),
            max_maps: default_maps(),
        }
    }
}

impl LimitsConfig {
    /// As a confinement policy.
    pub fn policy(&self) -> Policy {
        Policy {
            max_insns: self.max_insns,
            max_map_bytes: self.max_map_bytes,
            max_maps: self.max_maps,
        }
    }
}

/// One `[[tenant]]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Name (letters, digits, `-`, `_`; used in pins, metrics and the API).
    pub name: String,
    /// Tenant id 1..63 (default: the next free one, in file order).
    #[serde(default)]
    pub id: Option<u32>,
    /// Tokens moved to `server.token_file`: present only to say so.
    #[serde(default, skip_serializing)]
    pub(crate) token: Option<serde::de::IgnoredAny>,
    /// As `token`.
    #[serde(default, skip_serializing)]
    pub(crate) token_sha256: Option<serde::de::IgnoredAny>,
    /// Weight `v_i` in the token generator.
    #[serde(default = "one")]
    pub weight: u32,
    /// Selectors.
    #[serde(default)]
    pub selectors: Vec<Selector>,
    /// Interfaces (in the infra namespace) this tenant may redirect to, by port number.
    #[serde(default)]
    pub ports: Vec<String>,
    /// The tenant's own network namespace, whose stack processing is charged to it.
    #[serde(default)]
    pub domain_netns: Option<String>,
}

fn one() -> u32 {
    1
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn config_error(e: ConfigError) -> Error {
    match e {
        ConfigError::Read { path, err } => Error::io(format!("reading {}", path.display()), err),
        e => Error::Invalid(e.to_string()),
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

    /// Read and validate a config file.
    ///
    /// # Errors
    /// Unreadable file, TOML syntax, or [`Config::validate`] (the message names the file).
    pub fn load(path: &Path) -> Result<Self> {
        Self::checked(rampart_service::config::load(path))
            .map_err(|e| config_error(e.in_file(path)))
    }

    /// Parse and validate TOML.
    ///
    /// # Errors
    /// TOML syntax or [`Config::validate`].
    pub fn parse(text: &str) -> Result<Self> {
        Self::checked(rampart_service::config::parse(text)).map_err(config_error)
    }

    /// The effective config as TOML (`rampart tenant serve --print-config`).
    ///
    /// # Errors
    /// A value TOML cannot hold.
    pub fn render(&self) -> Result<String> {
        rampart_service::config::render("rampart tenant serve", self).map_err(config_error)
    }

    /// The tenants' API tokens, from `server.token_file` (none without
    /// one): every line names a configured tenant.
    ///
    /// # Errors
    /// An unreadable or malformed file, a line naming no tenant.
    pub fn tokens(&self) -> Result<Tokens> {
        let t = Tokens::from_file(self.server.token_file.as_deref())
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let file = || {
            self.server
                .token_file
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        for name in t.names() {
            match name {
                None => {
                    return Err(Error::Invalid(format!(
                        "server.token_file {}: a tenant token names its tenant: write `NAME TOKEN`",
                        file()
                    )))
                }
                Some(n) if !self.tenants.iter().any(|t| t.name == n) => {
                    return Err(Error::Invalid(format!(
                        "server.token_file {}: no tenant named {n:?} in the config ([[tenant]] name = ...)",
                        file()
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(t)
    }

    /// Check every rule and assign missing tenant ids.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the setting and how to fix it.
    pub fn validate(&mut self) -> Result<()> {
        self.server
            .validate()
            .map_err(|e| Error::Invalid(e.to_string()))?;
        if !valid_name(&self.infra.name) {
            return Err(Error::Invalid(format!(
                "infra.name {:?}: use 1-32 letters, digits, '-' or '_'",
                self.infra.name
            )));
        }
        if self.infra.interfaces.is_empty() {
            return Err(Error::Invalid(
                "infra.interfaces is empty: name at least one interface (e.g. [\"host0\"])".into(),
            ));
        }
        self.fairness.tokens().validate()?;
        if self.fairness.enabled && !self.infra.accounting {
            return Err(Error::Invalid(
                "fairness.enabled needs infra.accounting = true (buckets drain by the CPU time charged)".into(),
            ));
        }
        if self.infra.used_flush_us > 1_000_000 {
            return Err(Error::Invalid(format!(
                "infra.used_flush_us = {}: use 0..=1000000 (µs of CPU time per flush of a CPU's batch)",
                self.infra.used_flush_us
            )));
        }
        if self.limits.max_maps == 0 || self.limits.max_maps > 1024 {
            return Err(Error::Invalid(
                "limits.max_maps must be within 1..=1024".into(),
            ));
        }
        if self.limits.max_insns == 0 || self.limits.max_insns > 1_000_000 {
            return Err(Error::Invalid(
                "limits.max_insns must be within 1..=1000000".into(),
            ));
        }
        let mut names = BTreeSet::new();
        let mut ids = BTreeSet::new();
        let mut sels: Vec<(Selector, String)> = Vec::new();
        for t in &self.tenants {
            if let Some(id) = t.id {
                if id == 0 || id >= TENANT_MAX {
                    return Err(Error::Invalid(format!(
                        "tenant {:?}: id {id} out of range, use 1..={}",
                        t.name,
                        TENANT_MAX - 1
                    )));
                }
                if !ids.insert(id) {
                    return Err(Error::Invalid(format!(
                        "tenant {:?}: id {id} is used twice",
                        t.name
                    )));
                }
            }
        }
        let mut next = 1;
        for t in &mut self.tenants {
            if !valid_name(&t.name) {
                return Err(Error::Invalid(format!(
                    "tenant name {:?}: use 1-32 letters, digits, '-' or '_'",
                    t.name
                )));
            }
            if !names.insert(t.name.clone()) {
                return Err(Error::Invalid(format!(
                    "tenant {:?} is defined twice",
                    t.name
                )));
            }
            if t.id.is_none() {
                while ids.contains(&next) {
                    next += 1;
                }
                if next >= TENANT_MAX {
                    return Err(Error::Invalid(format!(
                        "too many tenants: at most {}",
                        TENANT_MAX - 1
                    )));
                }
                t.id = Some(next);
                ids.insert(next);
            }
            if t.weight == 0 {
                return Err(Error::Invalid(format!(
                    "tenant {:?}: weight must be ≥ 1",
                    t.name
                )));
            }
            if t.token.is_some() || t.token_sha256.is_some() {
                return Err(Error::Invalid(format!(
                    "tenant {:?}: tokens are not set here any more: put the line `{} <token>` in the file named by server.token_file",
                    t.name, t.name
                )));
            }
            if t.ports.len() > TENANT_PORTS_MAX as usize {
                return Err(Error::Invalid(format!(
                    "tenant {:?}: at most {TENANT_PORTS_MAX} ports",
                    t.name
                )));
            }
            if t.selectors.len() > crate::selector::MAX_SELECTORS {
                return Err(Error::Invalid(format!(
                    "tenant {:?}: {} selectors, at most {}",
                    t.name,
                    t.selectors.len(),
                    crate::selector::MAX_SELECTORS
                )));
            }
            for s in &t.selectors {
                if let Some((_, other)) = sels.iter().find(|(o, _)| o.same_key(s)) {
                    return Err(Error::Invalid(format!(
                        "selector {s} is claimed by tenants {other:?} and {:?}",
                        t.name
                    )));
                }
                sels.push((s.clone(), t.name.clone()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
        [infra]
        interfaces = ["host0"]
        [[tenant]]
        name = "a"
        selectors = ["prefix:10.20.1.0/24"]
        [[tenant]]
        name = "b"
        id = 1
        selectors = ["vlan:7"]
    "#;

    #[test]
    fn ids_are_assigned_around_explicit_ones() {
        let c = Config::parse(OK).unwrap();
        assert_eq!(c.tenants[0].id, Some(2));
        assert_eq!(c.tenants[1].id, Some(1));
        assert!(c.fairness.enabled);
        assert_eq!(c.infra.default_action, DefaultAction::Pass);
        assert_eq!(c.server.listen.as_deref(), Some(DEFAULT_LISTEN));
    }

    #[test]
    fn bad_configs_say_what_to_fix() {
        for (patch, why) in [
            (
                OK.replace("vlan:7", "prefix:10.20.1.0/24"),
                "claimed by tenants",
            ),
            (OK.replace("id = 1", "id = 64"), "out of range"),
            (OK.replace("name = \"b\"", "name = \"a\""), "defined twice"),
            (
                OK.replace("interfaces = [\"host0\"]", "interfaces = []"),
                "interfaces is empty",
            ),
            (
                OK.replace("selectors = [\"vlan:7\"]", "selectors = [\"vlan:9999\"]"),
                "out of range",
            ),
            (OK.replace("[infra]", "[infra]\nbogus = 1"), "unknown field"),
            (
                OK.replace("[infra]", "[infra]\naccounting = false"),
                "needs infra.accounting",
            ),
            (
                OK.replace("name = \"a\"", "name = \"a\"\ntoken = \"secret-a-123\""),
                "put the line `a <token>` in the file named by server.token_file",
            ),
            (
                format!("[server]\nlisten = \"0.0.0.0:9610\"\n{OK}"),
                "server.token_file",
            ),
        ] {
            let e = Config::parse(&patch).unwrap_err().to_string();
            assert!(e.contains(why), "want {why:?}, got {e}");
        }
    }

    #[test]
    fn tenant_tokens_come_from_the_token_file() {
        let dir = std::env::temp_dir().join(format!("rampart-tenant-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("tokens");
        let with = |text: &str| {
            std::fs::write(&f, text).unwrap();
            Config::parse(&format!("[server]\ntoken_file = \"{}\"\n{OK}", f.display()))
                .unwrap()
                .tokens()
        };
        let t = with(&format!(
            "a secret-a-123\nb sha256:{}\n",
            rampart_service::auth::token_hash("secret-b-456")
        ))
        .unwrap();
        assert_eq!(t.check("secret-a-123").unwrap().name.as_deref(), Some("a"));
        assert_eq!(t.check("secret-b-456").unwrap().name.as_deref(), Some("b"));
        for (text, why) in [
            ("a x\n", "shorter than 8"),
            ("secret-a-123\n", "names its tenant"),
            ("zed secret-z-123\n", "no tenant named \"zed\""),
        ] {
            let e = with(text).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("server.token_file"),
                "{text:?}: {e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
        // No file: no tokens (the API then serves no tenant).
        assert!(Config::parse(OK).unwrap().tokens().unwrap().is_empty());
    }

    #[test]
    fn shipped_example_parses_as_the_defaults() {
        let c = Config::parse(include_str!("../../../dist/rampart-tenant.toml")).unwrap();
        let mut d = Config::default();
        d.infra.interfaces = vec!["eth0".into()];
        assert_eq!(
            c.render().unwrap(),
            d.render().unwrap(),
            "the file states the defaults"
        );
    }

    #[test]
    fn print_config_reads_back() {
        let c = Config::parse(OK).unwrap();
        let text = c.render().unwrap();
        assert!(text.contains("listen = \"127.0.0.1:9610\""), "{text}");
        assert!(
            text.contains("[[tenant]]") && text.contains("budget_cores = 0.8"),
            "{text}"
        );
        let again = Config::parse(&text).unwrap();
        assert_eq!(again.tenants.len(), 2);
        assert_eq!(again.tenants[0].id, Some(2));
        // The defaults print too (an interface must be named before serving).
        let d = Config::default().render().unwrap();
        assert!(d.contains("interfaces = []"), "{d}");
    }
}
