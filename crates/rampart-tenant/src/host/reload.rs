//! Reload of `rampart tenant serve` (SIGHUP, `POST /v1/reload`): the
//! instance re-reads its file and applies what can change while it runs,
//! keeping every tenant's program, maps, selectors and counters.
//!
//! Applied: new `[[tenant]]` sections (the tenant is added, its token line
//! works at once), the tokens, `infra.default_action`, `infra.vxlan_port`,
//! `infra.recheck`, `infra.used_flush_us` and `fairness.enabled`. A removed
//! or changed tenant and every other key need a restart: such a reload is
//! refused whole, in one line naming them.

use std::path::Path;

use rampart_service::reload::ServerSide;
use serde_json::Value;

use super::HostAgent;
use crate::agent::AgentHandle;
use crate::config::Config;
use rampart_service::reload::{diff_keys as diff, to_value as json};

/// Keys the global switches carry (written to the shared map at once).
const LIVE: &[&str] = &[
    "infra.default_action",
    "infra.vxlan_port",
    "infra.recheck",
    "infra.used_flush_us",
    "fairness.enabled",
];

impl HostAgent {
    /// Apply `new` (loaded and validated) or refuse it whole.
    ///
    /// # Errors
    /// One line: what needs a restart, or what failed.
    pub(crate) fn reload(&mut self, new: Config) -> Result<String, String> {
        self.check_reload(&new)?;
        self.apply_reload(new)
    }

    /// The keys that changed between the running config and `new`
    /// (tenants and `[server]` aside).
    fn changed_keys(&self, new: &Config) -> Vec<String> {
        let strip = |c: &Config| {
            let mut v = json(c);
            if let Value::Object(m) = &mut v {
                m.remove("server");
                m.remove("tenant");
            }
            v
        };
        let mut changed = Vec::new();
        diff("", &strip(&self.cfg), &strip(new), &mut changed);
        changed
    }

    /// Would [`HostAgent::reload`] take `new`? Nothing is applied.
    ///
    /// # Errors
    /// One line: what needs a restart.
    pub(crate) fn check_reload(&self, new: &Config) -> Result<(), String> {
        let changed = self.changed_keys(new);
        let mut fixed: Vec<String> = changed
            .iter()
            .filter(|k| !LIVE.contains(&k.as_str()))
            .cloned()
            .collect();
        for t in &self.cfg.tenants {
            match new.tenants.iter().find(|n| n.name == t.name) {
                None => fixed.push(format!("tenant {} removed", t.name)),
                Some(n) if json(n) != json(t) => {
                    let mut keys = Vec::new();
                    diff("", &json(t), &json(n), &mut keys);
                    fixed.push(format!("tenant {} changed ({})", t.name, keys.join(", ")));
                }
                Some(_) => {}
            }
        }
        if !fixed.is_empty() {
            return Err(format!(
                "{}: a restart is needed for {} (new tenants can be added while running; give tenants fixed ids to add one in the middle of the file), nothing was reloaded",
                fixed.join(", "),
                if fixed.len() == 1 { "that" } else { "these" }
            ));
        }
        if new.fairness.enabled && !new.infra.accounting {
            return Err("fairness.enabled needs infra.accounting = true".into());
        }
        Ok(())
    }

    fn apply_reload(&mut self, new: Config) -> Result<String, String> {
        let changed = self.changed_keys(&new);
        let added: Vec<_> = new
            .tenants
            .iter()
            .filter(|n| !self.cfg.tenants.iter().any(|t| t.name == n.name))
            .cloned()
            .collect();
        let mut done = Vec::new();
        for t in added {
            let name = t.name.clone();
            self.add_tenant(t.clone())
                .map_err(|e| format!("adding tenant {name}: {e}"))?;
            self.cfg.tenants.push(t);
            done.push(format!("tenant {name} added"));
        }
        if !changed.is_empty() {
            let refill = new.fairness.enabled && !self.cfg.fairness.enabled;
            self.cfg.infra = new.infra.clone();
            self.cfg.fairness.enabled = new.fairness.enabled;
            if refill {
                self.tokens.refill_all().map_err(|e| e.to_string())?;
            }
            self.set_global().map_err(|e| e.to_string())?;
            done.push(format!("{} changed", changed.join(", ")));
        }
        self.cfg.server = new.server;
        Ok(if done.is_empty() {
            "no change to the instance".into()
        } else {
            done.join("; ")
        })
    }
}

/// The instance's reload hook: re-read `path`, check it whole (file,
/// tokens against the new tenant list, listeners), apply it on the agent.
///
/// # Errors
/// One line: why nothing was applied.
pub fn reload_file(agent: &AgentHandle, path: &Path, side: &ServerSide) -> Result<String, String> {
    let new = Config::load(path).map_err(|e| e.to_string())?;
    let tokens = new.tokens().map_err(|e| e.to_string())?;
    side.check(&new.server, &tokens)?;
    let server = new.server.clone();
    let msg = apply(agent, new)?;
    let n = tokens.names().count();
    side.commit(server, tokens);
    Ok(format!("{msg}; {n} API token(s)"))
}

/// Check `new` (loaded and validated) against the running instance
/// without applying anything: `Err` is why [`apply`] would refuse it.
///
/// # Errors
/// One line: what needs a restart.
pub fn check(agent: &AgentHandle, new: Config) -> Result<(), String> {
    agent
        .call(move |a| a.check_reload(&new))
        .map_err(|_| "the host agent has stopped".to_string())?
}

/// Apply `new` (loaded and validated; the `[server]` part is the caller's)
/// to the running instance, or refuse it whole.
///
/// # Errors
/// One line: why nothing was applied.
pub fn apply(agent: &AgentHandle, new: Config) -> Result<String, String> {
    agent
        .call(move |a| a.reload(new))
        .map_err(|_| "the host agent has stopped".to_string())?
}
