//! `rampart tenant serve --config FILE`: the operator's configuration.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:9610"
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
//! token = "long-random-secret"        # or token_sha256 = "<hex>"
//! weight = 1
//! selectors = ["prefix:10.20.1.0/24", "vlan:101"]
//! ports = ["t1"]                       # interfaces RAMPART_REDIRECT(n) may use
//! domain_netns = "rp-t1"               # the tenant's side, for accounting
//! ```

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use rampart_dataplane::xdp::XdpMode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::confine::Policy;
use crate::error::{Error, Result};
use crate::selector::Selector;
use crate::tokens::TokenConfig;
use rampart_bpf::abi::tenant::{TENANT_MAX, TENANT_PORTS_MAX};

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// HTTP API.
    #[serde(default)]
    pub server: ServerConfig,
    /// The infrastructure program.
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

/// `[server]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the HTTP API and `/metrics`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9610))
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
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
    /// Interfaces the infrastructure program runs on (XDP, ingress).
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
}

fn default_flush_us() -> u32 {
    20
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
    /// packets (see docs/architecture.md).
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
}

fn default_insns() -> usize {
    Policy::default().max_insns
}
fn default_map_bytes() -> u64 {
    Policy::default().max_map_bytes
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_insns: default_insns(),
            max_map_bytes: default_map_bytes(),
        }
    }
}

impl LimitsConfig {
    /// As a confinement policy.
    pub fn policy(&self) -> Policy {
        Policy {
            max_insns: self.max_insns,
            max_map_bytes: self.max_map_bytes,
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
    /// API token (bearer). Prefer `token_sha256`.
    #[serde(default, skip_serializing)]
    pub token: Option<String>,
    /// SHA-256 of the API token, hex.
    #[serde(default, skip_serializing)]
    pub token_sha256: Option<String>,
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

/// SHA-256 of a token, lowercase hex.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl TenantConfig {
    /// The token hash this tenant authenticates with.
    pub fn hash(&self) -> Option<String> {
        self.token_sha256
            .clone()
            .map(|h| h.to_ascii_lowercase())
            .or_else(|| self.token.as_deref().map(token_hash))
    }
}

impl Config {
    /// Read and validate a config file.
    ///
    /// # Errors
    /// Unreadable file, TOML syntax, or [`Config::validate`].
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        Self::parse(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// Parse and validate TOML.
    ///
    /// # Errors
    /// TOML syntax or [`Config::validate`].
    pub fn parse(text: &str) -> Result<Self> {
        let mut c: Config = toml::from_str(text)
            .map_err(|e| Error::Invalid(e.to_string().replace('\n', " ").trim().to_string()))?;
        c.validate()?;
        Ok(c)
    }

    /// Check every rule and assign missing tenant ids.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the setting and how to fix it.
    pub fn validate(&mut self) -> Result<()> {
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
        if self.limits.max_insns == 0 || self.limits.max_insns > 1_000_000 {
            return Err(Error::Invalid(
                "limits.max_insns must be within 1..=1000000".into(),
            ));
        }
        let mut names = BTreeSet::new();
        let mut ids = BTreeSet::new();
        let mut hashes = BTreeSet::new();
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
            match (&t.token, &t.token_sha256) {
                (Some(_), Some(_)) => {
                    return Err(Error::Invalid(format!(
                        "tenant {:?}: give token or token_sha256, not both",
                        t.name
                    )))
                }
                (None, None) => {
                    return Err(Error::Invalid(format!(
                        "tenant {:?}: missing token (or token_sha256)",
                        t.name
                    )))
                }
                (Some(tok), None) if tok.len() < 8 => {
                    return Err(Error::Invalid(format!(
                        "tenant {:?}: token shorter than 8 characters",
                        t.name
                    )))
                }
                (None, Some(h)) if h.len() != 64 || !h.chars().all(|c| c.is_ascii_hexdigit()) => {
                    return Err(Error::Invalid(format!(
                        "tenant {:?}: token_sha256 must be 64 hex digits",
                        t.name
                    )))
                }
                _ => {}
            }
            if !hashes.insert(t.hash()) {
                return Err(Error::Invalid(format!(
                    "tenant {:?}: its token is also another tenant's",
                    t.name
                )));
            }
            if t.ports.len() > TENANT_PORTS_MAX as usize {
                return Err(Error::Invalid(format!(
                    "tenant {:?}: at most {TENANT_PORTS_MAX} ports",
                    t.name
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
        token = "secret-a-123"
        selectors = ["prefix:10.20.1.0/24"]
        [[tenant]]
        name = "b"
        id = 1
        token_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
        selectors = ["vlan:7"]
    "#;

    #[test]
    fn ids_are_assigned_around_explicit_ones() {
        let c = Config::parse(OK).unwrap();
        assert_eq!(c.tenants[0].id, Some(2));
        assert_eq!(c.tenants[1].id, Some(1));
        assert_eq!(c.tenants[0].hash().unwrap(), token_hash("secret-a-123"));
        assert!(c.fairness.enabled);
        assert_eq!(c.infra.default_action, DefaultAction::Pass);
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
                OK.replace("token = \"secret-a-123\"", "token = \"x\""),
                "shorter than 8",
            ),
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
        ] {
            let e = Config::parse(&patch).unwrap_err().to_string();
            assert!(e.contains(why), "want {why:?}, got {e}");
        }
    }
}
