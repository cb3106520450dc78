//! CrowdSec: rampart as a bouncer and as a source.
//!
//! As a **bouncer** it pulls a CrowdSec Local API's decisions
//! (`GET /v1/decisions/stream`, bouncer key) into the XDP blacklist; as a
//! **source** it pushes its own detections to the LAPI as alerts that
//! carry a decision (`POST /v1/watchers/login` with machine credentials →
//! JWT, then `POST /v1/alerts`), so every other bouncer of the fleet
//! enforces them.
//!
//! This module is the protocol: the `[crowdsec]` section, the decision
//! stream's body (parsed here without I/O, so it is unit-tested on
//! recorded bodies and fuzzed), Go's duration syntax, the alert body, and
//! a blocking HTTP client (ureq) that runs on its own thread. What the
//! daemon does with decisions (ownership of blacklist entries, one atomic
//! publish per pull, restart) is in `daemon/crowdsec.rs`.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use rampart_ddos::Prefix;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// `[crowdsec]` (`[ddos.crowdsec]` under `rampart run`). Off by default.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrowdsecConfig {
    /// Pull the LAPI's decisions into the blacklist. Default false.
    pub enabled: bool,
    /// The Local API (`listen_uri` of crowdsec's `config.yaml`), plain
    /// HTTP. Default `http://127.0.0.1:8080`.
    pub lapi_url: String,
    /// The bouncer key (`cscli bouncers add NAME` prints it). Set this or
    /// `bouncer_key_file`.
    pub bouncer_key: Option<String>,
    /// A file holding the bouncer key (one line; read at start).
    pub bouncer_key_file: Option<PathBuf>,
    /// Seconds between two pulls. Default 10 (the firewall bouncer's
    /// `update_frequency`); 1 ≤ x ≤ 3600.
    pub pull_interval_s: f64,
    /// Seconds one request may take. Default 30 (the first pull of a
    /// large decision list is tens of MB).
    pub timeout_s: f64,
    /// Enforce only decisions of these origins (`crowdsec`, `cscli`,
    /// `CAPI`, `lists`, `rampart`, ...). Default empty: every origin.
    pub origins: Vec<String>,
    /// Push this host's detection blocks to the LAPI as alerts with a ban
    /// decision. Default false.
    pub push: bool,
    /// Machine name for pushing (`cscli machines add NAME --password P`).
    pub machine_id: Option<String>,
    /// Its password. Set this or `password_file`.
    pub password: Option<String>,
    /// A file holding the machine's password (one line; read at start).
    pub password_file: Option<PathBuf>,
    /// Duration of a pushed decision, seconds. Default 14400 (4 h, the
    /// default of crowdsec's own profiles); 60 ≤ x ≤ 31536000.
    pub push_duration_s: f64,
}

impl Default for CrowdsecConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            lapi_url: "http://127.0.0.1:8080".into(),
            bouncer_key: None,
            bouncer_key_file: None,
            pull_interval_s: 10.0,
            timeout_s: 30.0,
            origins: Vec::new(),
            push: false,
            machine_id: None,
            password: None,
            password_file: None,
            push_duration_s: 14400.0,
        }
    }
}

impl CrowdsecConfig {
    /// Check an enabled section (a disabled one is not looked at);
    /// `section` names it in messages (`crowdsec` or `ddos.crowdsec`).
    ///
    /// # Errors
    /// [`Error::Config`] naming the key, what is wrong and what to write.
    pub fn validate(&self, section: &str) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let bad = |key: &str, what: String| Err(Error::Config(format!("{section}.{key}: {what}")));
        if let Err(e) = base_url(&self.lapi_url) {
            return bad("lapi_url", e);
        }
        if self.bouncer_key.is_some() == self.bouncer_key_file.is_some() {
            return bad(
                "bouncer_key",
                "set exactly one of bouncer_key and bouncer_key_file (`cscli bouncers add rampart` prints a key)".into(),
            );
        }
        if !(1.0..=3600.0).contains(&self.pull_interval_s) {
            return bad(
                "pull_interval_s",
                format!(
                    "{} is out of range: 1 to 3600 seconds",
                    self.pull_interval_s
                ),
            );
        }
        if !(1.0..=600.0).contains(&self.timeout_s) {
            return bad(
                "timeout_s",
                format!("{} is out of range: 1 to 600 seconds", self.timeout_s),
            );
        }
        if self.origins.iter().any(|o| o.trim().is_empty()) {
            return bad(
                "origins",
                "an empty origin: list names like \"cscli\"".into(),
            );
        }
        if self.push {
            if self
                .machine_id
                .as_deref()
                .is_none_or(|m| m.trim().is_empty())
            {
                return bad(
                    "machine_id",
                    "push = true needs a machine (`cscli machines add rampart --password P`)"
                        .into(),
                );
            }
            if self.password.is_some() == self.password_file.is_some() {
                return bad(
                    "password",
                    "push = true needs exactly one of password and password_file".into(),
                );
            }
            if !(60.0..=31_536_000.0).contains(&self.push_duration_s) {
                return bad(
                    "push_duration_s",
                    format!("{} is out of range: 60 s to one year", self.push_duration_s),
                );
            }
        }
        Ok(())
    }

    /// The bouncer key, from the config or its file.
    ///
    /// # Errors
    /// The file cannot be read or is empty.
    pub fn bouncer_key(&self) -> Result<String> {
        secret(
            self.bouncer_key.as_deref(),
            self.bouncer_key_file.as_ref(),
            "bouncer_key_file",
        )
    }

    /// The machine's login (`None` when not pushing).
    ///
    /// # Errors
    /// The password file cannot be read or is empty.
    pub fn machine(&self) -> Result<Option<(String, String)>> {
        if !self.push {
            return Ok(None);
        }
        let pw = secret(
            self.password.as_deref(),
            self.password_file.as_ref(),
            "password_file",
        )?;
        Ok(Some((self.machine_id.clone().unwrap_or_default(), pw)))
    }
}

fn secret(inline: Option<&str>, file: Option<&PathBuf>, key: &str) -> Result<String> {
    if let Some(s) = inline {
        return Ok(s.trim().to_string());
    }
    let Some(f) = file else {
        return Ok(String::new());
    };
    let t = std::fs::read_to_string(f)
        .map_err(|e| Error::io(format!("reading crowdsec.{key} {}", f.display()), e))?;
    let t = t.trim();
    if t.is_empty() {
        return Err(Error::Config(format!(
            "crowdsec.{key}: {} is empty; write the secret on one line",
            f.display()
        )));
    }
    Ok(t.to_string())
}

/// `lapi_url` without its trailing slash, or why it is not usable.
fn base_url(u: &str) -> std::result::Result<String, String> {
    let t = u.trim().trim_end_matches('/');
    if t.starts_with("https://") {
        return Err(format!(
            "{u:?}: HTTPS is not supported; point it at the LAPI's plain-HTTP listen_uri (a local or private address)"
        ));
    }
    let Some(rest) = t.strip_prefix("http://") else {
        return Err(format!(
            "{u:?} is not a URL: write e.g. http://127.0.0.1:8080"
        ));
    };
    if rest.is_empty() || rest.contains(char::is_whitespace) {
        return Err(format!(
            "{u:?} has no host: write e.g. http://127.0.0.1:8080"
        ));
    }
    Ok(t.to_string())
}

/// A decision to enforce: a ban on an address or range.
#[derive(Debug, Clone, PartialEq)]
pub struct Ban {
    /// The LAPI's decision id.
    pub id: i64,
    /// What to drop.
    pub prefix: Prefix,
    /// Time left when it was pulled.
    pub duration: Duration,
    /// `crowdsec`, `cscli`, `CAPI`, `rampart`, ...
    pub origin: String,
    /// Why (the scenario).
    pub scenario: String,
}

/// A decision the LAPI deleted or let expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone {
    /// Its id (`None`: the body had none; every decision on the prefix goes).
    pub id: Option<i64>,
    /// Its prefix.
    pub prefix: Prefix,
}

/// Decisions of a body not enforced, by why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Skipped {
    /// A type other than `ban` (`captcha`, `throttle`, ...): XDP can only drop.
    pub not_ban: u64,
    /// A scope other than `Ip` and `Range` (`Country`, `AS`, `Username`, ...).
    pub scope: u64,
    /// A value that is no address (scope `Ip`) or prefix (scope `Range`).
    pub value: u64,
    /// An origin not in `origins`.
    pub origin: u64,
    /// A duration that is not Go's syntax, or already over.
    pub duration: u64,
}

impl Skipped {
    /// Add another body's counts.
    pub fn add(&mut self, o: &Skipped) {
        self.not_ban += o.not_ban;
        self.scope += o.scope;
        self.value += o.value;
        self.origin += o.origin;
        self.duration += o.duration;
    }

    /// Each reason with its count (the metric's labels).
    pub fn by_reason(&self) -> [(&'static str, u64); 5] {
        [
            ("not_ban", self.not_ban),
            ("scope", self.scope),
            ("value", self.value),
            ("origin", self.origin),
            ("duration", self.duration),
        ]
    }
}

/// One pull's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delta {
    /// Asked with `startup=true`: `new` is every active decision (what the
    /// blacklist should hold from CrowdSec, all of it).
    pub startup: bool,
    /// Decisions to enforce.
    pub new: Vec<Ban>,
    /// Decisions deleted or expired since the last pull.
    pub deleted: Vec<Gone>,
    /// Decisions not enforced (of `new`; a deletion is never skipped for
    /// its type or origin).
    pub skipped: Skipped,
}

#[derive(Debug, Deserialize)]
struct RawDecision {
    #[serde(default)]
    id: Option<i64>,
    #[serde(default)]
    origin: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    duration: Option<String>,
    #[serde(default)]
    scenario: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawStream {
    #[serde(default)]
    new: Option<Vec<RawDecision>>,
    #[serde(default)]
    deleted: Option<Vec<RawDecision>>,
}

/// The prefix of a decision's scope and value (`None`: not one rampart
/// can drop; the reason is counted).
fn decision_prefix(d: &RawDecision, sk: &mut Skipped) -> Option<Prefix> {
    let scope = d.scope.as_deref().unwrap_or("").to_ascii_lowercase();
    let value = d.value.as_deref().unwrap_or("").trim();
    let ok = match scope.as_str() {
        "ip" => !value.contains('/'),
        "range" => value.contains('/'),
        _ => {
            sk.scope += 1;
            return None;
        }
    };
    match Prefix::parse(value) {
        Ok(p) if ok => Some(p),
        _ => {
            sk.value += 1;
            None
        }
    }
}

/// Parse a decision stream body; `origins` (empty: all) filters `new`.
///
/// A body that is not the stream's JSON is an error (nothing of it is
/// applied); a decision in it that rampart cannot enforce is skipped and
/// counted in [`Delta::skipped`].
///
/// # Errors
/// A one-line reason the body is not a decision stream.
pub fn parse_stream(
    body: &[u8],
    startup: bool,
    origins: &[String],
) -> std::result::Result<Delta, String> {
    let raw: RawStream = serde_json::from_slice(body)
        .map_err(|e| format!("not a decision stream ({e}); it starts {:?}", excerpt(body)))?;
    let mut d = Delta {
        startup,
        ..Delta::default()
    };
    for r in raw.new.unwrap_or_default() {
        if !r.kind.as_deref().unwrap_or("").eq_ignore_ascii_case("ban") {
            d.skipped.not_ban += 1;
            continue;
        }
        let origin = r.origin.clone().unwrap_or_default();
        if !origins.is_empty() && !origins.iter().any(|o| o.eq_ignore_ascii_case(&origin)) {
            d.skipped.origin += 1;
            continue;
        }
        let Some(prefix) = decision_prefix(&r, &mut d.skipped) else {
            continue;
        };
        let duration = match r.duration.as_deref().map(parse_go_duration) {
            Some(Ok(s)) if s > 0.0 && s.is_finite() => Duration::from_secs_f64(s.min(1e10)),
            _ => {
                d.skipped.duration += 1;
                continue;
            }
        };
        d.new.push(Ban {
            id: r.id.unwrap_or(0),
            prefix,
            duration,
            origin,
            scenario: r.scenario.unwrap_or_default(),
        });
    }
    let mut ignored = Skipped::default();
    for r in raw.deleted.unwrap_or_default() {
        if let Some(prefix) = decision_prefix(&r, &mut ignored) {
            d.deleted.push(Gone { id: r.id, prefix });
        }
    }
    Ok(d)
}

/// The start of a body, for a message (at most 80 characters, one line).
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(80)])
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Seconds of a Go duration (`time.Duration.String()`: "3h59m58.5s",
/// "-1.5s", "250ms", "0s"), or what is wrong with it.
///
/// # Errors
/// Not Go's syntax.
pub fn parse_go_duration(s: &str) -> std::result::Result<f64, String> {
    let bad = || format!("{s:?} is not a duration like 3h59m58.5s");
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0.0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let num = &rest[..n];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(bad());
        }
        let v: f64 = num.parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let (unit, len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("μs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .iter()
        .find(|(u, _)| rest.starts_with(u))
        .map(|(u, f)| (*f, u.len()))
        .ok_or_else(bad)?;
        total += v * unit;
        rest = &rest[len..];
    }
    Ok(if neg { -total } else { total })
}

/// Go's text for `secs` seconds (whole seconds): "4h0m0s".
pub fn go_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    format!("{}h{}m{}s", s / 3600, (s / 60) % 60, s % 60)
}

/// A detection block to push.
#[derive(Debug, Clone, PartialEq)]
pub struct Push {
    /// The blocked source.
    pub prefix: Prefix,
    /// `rampart/<vector>`.
    pub scenario: String,
    /// The block's reason.
    pub message: String,
    /// When it was blocked.
    pub at: SystemTime,
}

/// The `POST /v1/alerts` body for `pushes`: one alert per block, each
/// carrying one ban decision of `duration_s` seconds with origin `rampart`.
pub fn alerts_body(pushes: &[Push], duration_s: f64) -> serde_json::Value {
    use rampart_service::alert::timestamp;
    let alerts: Vec<serde_json::Value> = pushes
        .iter()
        .map(|p| {
            let (scope, ip) = if p.prefix.net().prefix_len() == p.prefix.net().max_prefix_len() {
                ("Ip", Some(p.prefix.net().addr().to_string()))
            } else {
                ("Range", None)
            };
            let value = match scope {
                "Ip" => p.prefix.net().addr().to_string(),
                _ => p.prefix.to_string(),
            };
            let at = timestamp(p.at);
            let mut source = serde_json::json!({ "scope": scope, "value": value });
            match ip {
                Some(ip) => source["ip"] = ip.into(),
                None => source["range"] = value.clone().into(),
            }
            serde_json::json!({
                "scenario": p.scenario,
                "scenario_hash": "",
                "scenario_version": "",
                "message": p.message,
                "events_count": 1,
                "start_at": at,
                "stop_at": at,
                "capacity": 0,
                "leakspeed": "0",
                "simulated": false,
                "remediation": true,
                "events": [{ "timestamp": at, "meta": [{ "key": "source", "value": "rampart" }] }],
                "source": source,
                "decisions": [{
                    "duration": go_duration(duration_s),
                    "origin": "rampart",
                    "scenario": p.scenario,
                    "scope": scope,
                    "type": "ban",
                    "value": value,
                }],
            })
        })
        .collect();
    serde_json::Value::Array(alerts)
}

/// Why a request to the LAPI failed (one line each; [`LapiError::kind`]
/// is the metric's label).
#[derive(Debug, thiserror::Error)]
pub enum LapiError {
    /// No connection (refused, timed out, no route).
    #[error("the CrowdSec LAPI at {url} is unreachable: {reason}")]
    Unreachable {
        /// The URL.
        url: String,
        /// The transport error.
        reason: String,
    },
    /// 401/403: the key or login is refused.
    #[error("the CrowdSec LAPI refused the {what} (HTTP {code}): {hint}")]
    Credentials {
        /// Which credentials.
        what: &'static str,
        /// The status.
        code: u16,
        /// What to do.
        hint: &'static str,
    },
    /// Another error status.
    #[error("the CrowdSec LAPI answered {what} with HTTP {code}: {body}")]
    Status {
        /// The request.
        what: &'static str,
        /// The status.
        code: u16,
        /// The start of its body.
        body: String,
    },
    /// A body that is not what the API documents.
    #[error("the CrowdSec LAPI's answer to {what} is garbage: {reason}")]
    Garbage {
        /// The request.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl LapiError {
    /// `unreachable`, `credentials`, `status` or `garbage`.
    pub fn kind(&self) -> &'static str {
        match self {
            LapiError::Unreachable { .. } => "unreachable",
            LapiError::Credentials { .. } => "credentials",
            LapiError::Status { .. } => "status",
            LapiError::Garbage { .. } => "garbage",
        }
    }
}

/// Every [`LapiError::kind`] (the metric's labels exist from the start).
pub const ERROR_KINDS: [&str; 4] = ["unreachable", "credentials", "status", "garbage"];

/// Largest body read from the LAPI (a million decisions is ~250 MB).
const MAX_BODY: u64 = 1 << 30;

/// A blocking client of one LAPI.
#[derive(Debug)]
pub struct Lapi {
    agent: ureq::Agent,
    base: String,
    key: String,
    machine: Option<(String, String)>,
    /// JWT and when to log in again.
    token: Option<(String, Instant)>,
}

impl Lapi {
    /// A client of the section's LAPI (keys read from their files now).
    ///
    /// # Errors
    /// A bad section or unreadable key files.
    pub fn new(cfg: &CrowdsecConfig) -> Result<Self> {
        let base = base_url(&cfg.lapi_url)
            .map_err(|e| Error::Config(format!("crowdsec.lapi_url: {e}")))?;
        Ok(Self {
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs_f64(cfg.timeout_s))
                .user_agent("rampart-bouncer/1")
                .build(),
            base,
            key: cfg.bouncer_key()?,
            machine: cfg.machine()?,
            token: None,
        })
    }

    fn fail(&self, what: &'static str, e: ureq::Error, creds: &'static str) -> LapiError {
        match e {
            ureq::Error::Status(code @ (401 | 403), _) => LapiError::Credentials {
                what: creds,
                code,
                hint: if creds == "bouncer key" {
                    "check crowdsec.bouncer_key against `cscli bouncers list`"
                } else {
                    "check crowdsec.machine_id and its password against `cscli machines list`"
                },
            },
            ureq::Error::Status(code, r) => LapiError::Status {
                what,
                code,
                body: excerpt(r.into_string().unwrap_or_default().as_bytes()),
            },
            ureq::Error::Transport(t) => LapiError::Unreachable {
                url: self.base.clone(),
                reason: t.to_string().replace('\n', " "),
            },
        }
    }

    fn read_body(what: &'static str, r: ureq::Response) -> std::result::Result<Vec<u8>, LapiError> {
        use std::io::Read;
        let mut body = Vec::new();
        r.into_reader()
            .take(MAX_BODY)
            .read_to_end(&mut body)
            .map_err(|e| LapiError::Garbage {
                what,
                reason: format!("reading the body: {e}"),
            })?;
        Ok(body)
    }

    /// Pull the decision stream (`startup`: every active decision).
    ///
    /// # Errors
    /// [`LapiError`].
    pub fn pull(&self, startup: bool, origins: &[String]) -> std::result::Result<Delta, LapiError> {
        const WHAT: &str = "GET /v1/decisions/stream";
        let url = format!("{}/v1/decisions/stream?startup={startup}", self.base);
        let r = self
            .agent
            .get(&url)
            .set("X-Api-Key", &self.key)
            .call()
            .map_err(|e| self.fail(WHAT, e, "bouncer key"))?;
        let body = Self::read_body(WHAT, r)?;
        parse_stream(&body, startup, origins)
            .map_err(|reason| LapiError::Garbage { what: WHAT, reason })
    }

    /// Log the machine in (`POST /v1/watchers/login`) unless its token is fresh.
    fn login(&mut self) -> std::result::Result<String, LapiError> {
        const WHAT: &str = "POST /v1/watchers/login";
        if let Some((t, until)) = &self.token {
            if Instant::now() < *until {
                return Ok(t.clone());
            }
        }
        let Some((id, pw)) = &self.machine else {
            return Err(LapiError::Credentials {
                what: "machine login",
                code: 0,
                hint: "no machine configured: set crowdsec.machine_id and its password",
            });
        };
        let r = self
            .agent
            .post(&format!("{}/v1/watchers/login", self.base))
            .set("Content-Type", "application/json")
            .send_string(
                &serde_json::json!({ "machine_id": id, "password": pw, "scenarios": [] })
                    .to_string(),
            )
            .map_err(|e| self.fail(WHAT, e, "machine login"))?;
        let body = Self::read_body(WHAT, r)?;
        #[derive(Deserialize)]
        struct Login {
            token: String,
        }
        let l: Login = serde_json::from_slice(&body).map_err(|e| LapiError::Garbage {
            what: WHAT,
            reason: format!("no token ({e}); it starts {:?}", excerpt(&body)),
        })?;
        // The LAPI's tokens last an hour; renewed well before.
        self.token = Some((l.token.clone(), Instant::now() + Duration::from_secs(1800)));
        Ok(l.token)
    }

    /// Push `pushes` as alerts (one request); returns the alert ids.
    ///
    /// # Errors
    /// [`LapiError`] (a refused token is logged in again once).
    pub fn push(
        &mut self,
        pushes: &[Push],
        duration_s: f64,
    ) -> std::result::Result<Vec<String>, LapiError> {
        const WHAT: &str = "POST /v1/alerts";
        let body = alerts_body(pushes, duration_s).to_string();
        let mut retried = false;
        loop {
            let token = self.login()?;
            let r = self
                .agent
                .post(&format!("{}/v1/alerts", self.base))
                .set("Authorization", &format!("Bearer {token}"))
                .set("Content-Type", "application/json")
                .send_string(&body);
            match r {
                Ok(r) => {
                    let b = Self::read_body(WHAT, r)?;
                    return serde_json::from_slice::<Vec<String>>(&b).map_err(|e| {
                        LapiError::Garbage {
                            what: WHAT,
                            reason: format!(
                                "not a list of alert ids ({e}); it starts {:?}",
                                excerpt(&b)
                            ),
                        }
                    });
                }
                // An expired token: log in again, once.
                Err(ureq::Error::Status(401, _)) if !retried => {
                    self.token = None;
                    retried = true;
                }
                Err(e) => return Err(self.fail(WHAT, e, "machine login")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `startup=true` answer of crowdsec 1.4.6's LAPI (Debian), recorded
    /// after `cscli decisions add` of an address, a range, an IPv6 address
    /// for 1 h, a captcha and a country (the stream leaves the country out).
    const STARTUP: &str = r#"{"deleted":null,"new":[{"duration":"59m58.86815448s","id":3,"origin":"cscli","scenario":"ssh","scope":"Ip","type":"ban","value":"2001:db8::9"},{"duration":"3h59m58.868152907s","id":1,"origin":"cscli","scenario":"manual 'ban' from 'local'","scope":"Ip","type":"ban","value":"192.0.2.7"},{"duration":"3h59m58.868152166s","id":2,"origin":"cscli","scenario":"manual 'ban' from 'local'","scope":"Range","type":"ban","value":"198.51.100.0/24"},{"duration":"3h59m58.868151826s","id":4,"origin":"cscli","scenario":"manual 'captcha' from 'local'","scope":"Ip","type":"captcha","value":"192.0.2.8"}]}"#;

    /// The next pull, recorded after `cscli decisions delete -i 192.0.2.7`
    /// and a new 30 min ban (a deletion's duration is negative).
    const DELTA: &str = r#"{"deleted":[{"duration":"-130.172901ms","id":1,"origin":"cscli","scenario":"manual 'ban' from 'local'","scope":"Ip","type":"ban","value":"192.0.2.7"}],"new":[{"duration":"29m59.618264137s","id":6,"origin":"cscli","scenario":"manual 'ban' from 'local'","scope":"Ip","type":"ban","value":"203.0.113.5"}]}"#;

    /// The pull after that: the LAPI repeats a deletion (the daemon must
    /// take a deletion of an unknown id as nothing to do).
    const AGAIN: &str = r#"{"deleted":[{"duration":"-138.1642ms","id":1,"origin":"cscli","scenario":"manual 'ban' from 'local'","scope":"Ip","type":"ban","value":"192.0.2.7"}],"new":null}"#;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    #[test]
    fn a_startup_body_gives_the_bans_and_counts_the_rest() {
        let d = parse_stream(STARTUP.as_bytes(), true, &[]).unwrap();
        assert!(d.startup);
        let got: Vec<(i64, Prefix)> = d.new.iter().map(|b| (b.id, b.prefix)).collect();
        assert_eq!(
            got,
            vec![
                (3, p("2001:db8::9")),
                (1, p("192.0.2.7")),
                (2, p("198.51.100.0/24"))
            ]
        );
        assert!((d.new[0].duration.as_secs_f64() - 3598.868).abs() < 0.01);
        assert_eq!(d.new[1].origin, "cscli");
        assert_eq!(d.new[0].scenario, "ssh");
        assert_eq!(d.skipped.not_ban, 1);
        assert_eq!(
            d.skipped,
            Skipped {
                not_ban: 1,
                ..Skipped::default()
            }
        );
        assert!(d.deleted.is_empty());
    }

    #[test]
    fn a_delta_gives_deletions_by_id() {
        let d = parse_stream(DELTA.as_bytes(), false, &[]).unwrap();
        assert_eq!(
            d.deleted,
            vec![Gone {
                id: Some(1),
                prefix: p("192.0.2.7")
            }]
        );
        assert_eq!(d.new.len(), 1);
        assert_eq!(d.new[0].prefix, p("203.0.113.5"));
        let d = parse_stream(AGAIN.as_bytes(), false, &[]).unwrap();
        assert!(d.new.is_empty());
        assert_eq!(d.deleted.len(), 1);
    }

    #[test]
    fn origins_filter_new_decisions_only() {
        let only = vec!["crowdsec".to_string()];
        let d = parse_stream(STARTUP.as_bytes(), true, &only).unwrap();
        assert!(d.new.is_empty());
        assert_eq!(d.skipped.origin, 3);
        let d = parse_stream(STARTUP.as_bytes(), true, &["CSCLI".to_string()]).unwrap();
        assert_eq!(d.new.len(), 3);
        // Deletions go through whatever their origin: what was never
        // enforced is simply not found.
        let d = parse_stream(DELTA.as_bytes(), false, &only).unwrap();
        assert_eq!(d.deleted.len(), 1);
        assert!(d.new.is_empty());
    }

    #[test]
    fn an_empty_stream_is_nulls_or_nothing() {
        for b in [
            r#"{"new":null,"deleted":null}"#,
            "{}",
            r#"{"new":[],"deleted":[]}"#,
        ] {
            let d = parse_stream(b.as_bytes(), false, &[]).unwrap();
            assert!(d.new.is_empty() && d.deleted.is_empty(), "{b}");
        }
    }

    #[test]
    fn garbage_is_one_line_and_bad_decisions_are_skipped() {
        for b in [
            "<html>\n<body>502 Bad Gateway</body>",
            "",
            "[1,2]",
            r#"{"new":[{"id":"x"}]}"#,
        ] {
            let e = parse_stream(b.as_bytes(), false, &[]).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains("not a decision stream"), "{e}");
        }
        let body = r#"{"new":[
            {"id":1,"type":"ban","scope":"Ip","value":"300.1.2.3","duration":"1h"},
            {"id":2,"type":"ban","scope":"Ip","value":"192.0.2.0/24","duration":"1h"},
            {"id":3,"type":"ban","scope":"Range","value":"192.0.2.1","duration":"1h"},
            {"id":4,"type":"ban","scope":"Ip","value":"192.0.2.1","duration":"soon"},
            {"id":5,"type":"ban","scope":"Ip","value":"192.0.2.1","duration":"-1s"},
            {"id":6,"type":"ban","scope":"ip","value":"192.0.2.1","duration":"1h"},
            {"id":7},
            {"id":8,"type":"ban","scope":"Country","value":"FR","duration":"1h"}
        ]}"#;
        let d = parse_stream(body.as_bytes(), false, &[]).unwrap();
        assert_eq!(d.new.len(), 1);
        assert_eq!(d.new[0].id, 6);
        assert_eq!(d.skipped.value, 3);
        assert_eq!(d.skipped.duration, 2);
        assert_eq!(d.skipped.not_ban, 1);
        assert_eq!(d.skipped.scope, 1);
    }

    #[test]
    fn go_durations() {
        for (s, want) in [
            ("3h59m58.5s", 14398.5),
            ("1h", 3600.0),
            ("250ms", 0.25),
            ("1m30s", 90.0),
            ("0", 0.0),
            ("0s", 0.0),
            ("-1.5s", -1.5),
            ("1.5µs", 1.5e-6),
            ("2us", 2e-6),
            ("100ns", 1e-7),
            ("167h59m59.999999999s", 604799.999999999),
        ] {
            let got = parse_go_duration(s).unwrap();
            assert!((got - want).abs() < 1e-9, "{s}: {got}");
        }
        for s in ["", "-", "h", "1", "1d", "1.2.3s", ".s", "1h 2m", "s1"] {
            let e = parse_go_duration(s).unwrap_err();
            assert!(e.contains("not a duration"), "{s}: {e}");
        }
        assert_eq!(go_duration(14400.0), "4h0m0s");
        assert_eq!(go_duration(3725.4), "1h2m5s");
        assert_eq!(parse_go_duration(&go_duration(5432.0)).unwrap(), 5432.0);
    }

    #[test]
    fn an_alert_carries_one_ban_for_an_address_or_a_range() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_000_000);
        let b = alerts_body(
            &[
                Push {
                    prefix: p("203.0.113.5"),
                    scenario: "rampart/udp_flood".into(),
                    message: "udp flood".into(),
                    at: t,
                },
                Push {
                    prefix: p("2001:db8:1::/48"),
                    scenario: "rampart/syn_flood".into(),
                    message: "syn".into(),
                    at: t,
                },
            ],
            3600.0,
        );
        let a = &b[0];
        assert_eq!(a["scenario"], "rampart/udp_flood");
        assert_eq!(a["source"]["scope"], "Ip");
        assert_eq!(a["source"]["ip"], "203.0.113.5");
        assert_eq!(a["decisions"][0]["value"], "203.0.113.5");
        assert_eq!(a["decisions"][0]["duration"], "1h0m0s");
        assert_eq!(a["decisions"][0]["type"], "ban");
        assert_eq!(a["decisions"][0]["origin"], "rampart");
        assert!(a["start_at"].as_str().unwrap().starts_with("2025-11-24T"));
        let r = &b[1];
        assert_eq!(r["source"]["scope"], "Range");
        assert_eq!(r["source"]["range"], "2001:db8:1::/48");
        assert_eq!(r["decisions"][0]["scope"], "Range");
    }

    #[test]
    fn the_section_is_checked_only_when_enabled() {
        let mut c = CrowdsecConfig::default();
        c.validate("crowdsec").unwrap();
        c.enabled = true;
        let e = c.validate("crowdsec").unwrap_err().to_string();
        assert!(e.contains("crowdsec.bouncer_key"), "{e}");
        c.bouncer_key = Some("k".into());
        c.validate("crowdsec").unwrap();
        c.lapi_url = "https://lapi:8080".into();
        let e = c.validate("ddos.crowdsec").unwrap_err().to_string();
        assert!(
            e.contains("ddos.crowdsec.lapi_url") && e.contains("HTTPS"),
            "{e}"
        );
        c.lapi_url = "127.0.0.1:8080".into();
        assert!(c.validate("crowdsec").is_err());
        c.lapi_url = "http://127.0.0.1:8080/".into();
        c.push = true;
        let e = c.validate("crowdsec").unwrap_err().to_string();
        assert!(e.contains("machine_id"), "{e}");
        c.machine_id = Some("m".into());
        assert!(c.validate("crowdsec").is_err());
        c.password = Some("pw".into());
        c.validate("crowdsec").unwrap();
        c.pull_interval_s = 0.0;
        assert!(c.validate("crowdsec").is_err());
    }

    #[test]
    fn an_unreachable_lapi_is_one_line_of_kind_unreachable() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = CrowdsecConfig {
            enabled: true,
            lapi_url: format!("http://127.0.0.1:{port}"),
            bouncer_key: Some("k".into()),
            timeout_s: 2.0,
            ..CrowdsecConfig::default()
        };
        let e = Lapi::new(&c).unwrap().pull(true, &[]).unwrap_err();
        assert_eq!(e.kind(), "unreachable");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}
