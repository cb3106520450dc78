//! Reload (SIGHUP, `POST /v1/reload`): the daemon re-reads its file and
//! applies what can change while it runs, keeping the blacklist, counters,
//! policed sources, protection and — unless `[detect]` changed — the
//! learned baselines; no packet path is touched.
//!
//! | changes while running | needs a restart (refused, one line) |
//! |---|---|
//! | `[detect]` (thresholds, floors, whitelist, …), `daemon.interval_s`, `daemon.nice`, `server.token_file` (the tokens), the upstream tier's levels (`upstream.link_capacity_bps/pps`, `engage_at`, `withdraw_below`, `hold_s`) | `daemon.mode/iface/netns/state_dir`, `[filter]`, `[hw]`, `[offload]`, `[alerts]`, the rest of `[upstream]`, `[crowdsec]`, `server.listen/metrics_listen` |
//!
//! A `[detect]` change other than the whitelist restarts learning, as a
//! restart with a changed `[detect]` does (the fingerprint of what is
//! learned changed): baselines and attack state start afresh; blocks,
//! policed sources and protection carry over. A whitelist change alone
//! keeps everything and releases the sources it now covers.

use std::path::Path;

use rampart_service::reload::ServerSide;
use rampart_service::Tokens;
use serde_json::Value;

use super::{set_thread_nice, Daemon};
use crate::config::Config;
use rampart_ddos::Prefix;
use rampart_ddos_control::detection::{Detection, Restore};
use rampart_service::reload::{diff_keys as diff, to_value as json};
use rampart_service::OwnerHandle;

/// Every key that differs between `old` and `new`, `[server]` excluded
/// (the service shell checks that part).
fn changed_keys(old: &Config, new: &Config) -> Vec<String> {
    let (mut a, mut b) = (json(old), json(new));
    for v in [&mut a, &mut b] {
        if let Value::Object(m) = v {
            m.remove("server");
        }
    }
    let mut out = Vec::new();
    diff("", &a, &b, &mut out);
    out
}

/// Keys a running daemon can take.
fn reloadable(key: &str) -> bool {
    key.starts_with("detect.")
        || key == "daemon.interval_s"
        || key == "daemon.nice"
        || UPSTREAM_LEVELS
            .iter()
            .any(|k| key.strip_prefix("upstream.") == Some(*k))
}

/// The upstream tier's levels: a reload changes when it engages and
/// withdraws, not what or where it announces.
const UPSTREAM_LEVELS: [&str; 5] = [
    "link_capacity_bps",
    "link_capacity_pps",
    "engage_at",
    "withdraw_below",
    "hold_s",
];

impl Daemon {
    /// Apply `new` (already loaded and validated) or refuse it whole.
    ///
    /// # Errors
    /// One line: the keys that need a restart, or what detection refused.
    pub(crate) fn reload(&mut self, new: Config) -> Result<String, String> {
        let new = self.keep_probed(new);
        self.check_reload(&new)?;
        self.apply_reload(new)
    }

    /// `mode = "auto"` in a reloaded file is what start probed: the
    /// running mode and hardware backend, never a new probe.
    fn keep_probed(&self, mut new: Config) -> Config {
        if new.daemon.mode == crate::mode::Mode::Auto {
            new.daemon.mode = self.cfg.daemon.mode;
            new.hw.backend.clone_from(&self.cfg.hw.backend);
        }
        new
    }

    /// Would [`Daemon::reload`] take `new`? (What refuses a reload, with
    /// nothing applied: so a host running several applications can check
    /// them all before applying any.)
    ///
    /// # Errors
    /// One line: the keys that need a restart, or what detection refused.
    pub(crate) fn check_reload(&self, new: &Config) -> Result<(), String> {
        let new = &self.keep_probed(new.clone());
        let changed = changed_keys(&self.cfg, new);
        let fixed: Vec<&String> = changed.iter().filter(|k| !reloadable(k)).collect();
        if !fixed.is_empty() {
            return Err(format!(
                "{} changed: {} a restart (systemctl restart rampart), nothing was reloaded",
                fixed
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                if fixed.len() == 1 {
                    "that needs"
                } else {
                    "these need"
                },
            ));
        }
        if changed
            .iter()
            .any(|k| k.starts_with("detect.") && k != "detect.whitelist")
        {
            Detection::new(&new.detect, &self.scope.name()).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn apply_reload(&mut self, new: Config) -> Result<String, String> {
        let changed = changed_keys(&self.cfg, &new);
        let detect_keys: Vec<&String> = changed
            .iter()
            .filter(|k| k.starts_with("detect.") && *k != "detect.whitelist")
            .collect();
        let mut done = Vec::new();
        // Detection first: the one step that can still refuse.
        let new_whitelist: Vec<Prefix> = new
            .detect
            .whitelist
            .iter()
            .filter_map(|w| Prefix::parse(w).ok())
            .collect();
        if !detect_keys.is_empty() {
            let mut det =
                Detection::new(&new.detect, &self.scope.name()).map_err(|e| e.to_string())?;
            for p in &self.operator_whitelist {
                det.add_whitelist(*p);
            }
            let kept = match det.restore(&self.detection.learned()) {
                Restore::Fresh { .. } => "baselines learned afresh",
                _ => "baselines kept",
            };
            self.detection = det;
            done.push(format!(
                "{} changed ({kept}; blocks, policed sources and protection kept)",
                detect_keys
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        } else if changed.iter().any(|k| k == "detect.whitelist") {
            let old: Vec<Prefix> = self
                .cfg
                .detect
                .whitelist
                .iter()
                .filter_map(|w| Prefix::parse(w).ok())
                .collect();
            for p in &old {
                if !new_whitelist.contains(p) && !self.operator_whitelist.contains(p) {
                    self.detection.remove_whitelist(p);
                }
            }
            for p in &new_whitelist {
                self.detection.add_whitelist(*p);
            }
        }
        if changed.iter().any(|k| k == "detect.whitelist") {
            // Sources the new whitelist covers go free, as a whitelisting
            // through the API frees them.
            let hit: Vec<Prefix> = self
                .blocked
                .keys()
                .filter(|b| self.detection.is_whitelisted(b))
                .copied()
                .collect();
            for p in &new_whitelist {
                self.release_policed(p);
            }
            let rs = vec!["whitelisted in the configuration".to_string(); hit.len()];
            if let Err(e) = self.unblock_now(&hit, "operator", &rs) {
                tracing::warn!("releasing newly whitelisted sources: {e}");
            }
            done.push(format!(
                "detect.whitelist now {} prefix(es) ({} blocked source(s) released)",
                new_whitelist.len(),
                hit.len()
            ));
        }
        if new.daemon.interval_s != self.cfg.daemon.interval_s {
            done.push(format!(
                "daemon.interval_s {} -> {}",
                self.cfg.daemon.interval_s, new.daemon.interval_s
            ));
        }
        let levels: Vec<&String> = changed
            .iter()
            .filter(|k| k.starts_with("upstream."))
            .collect();
        if !levels.is_empty() {
            if let Some(u) = &mut self.upstream {
                u.set_config(&new.upstream);
            }
            done.push(format!(
                "{} changed (what is announced is kept)",
                levels
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if new.daemon.nice != self.cfg.daemon.nice {
            set_thread_nice(new.daemon.nice);
            done.push(format!(
                "daemon.nice {} -> {} (the loop's thread)",
                self.cfg.daemon.nice, new.daemon.nice
            ));
        }
        self.cfg = new;
        self.save();
        self.publish();
        Ok(if done.is_empty() {
            "no change to the daemon's settings".into()
        } else {
            done.join("; ")
        })
    }
}

/// The daemon's reload hook: re-read `path`, check it whole (the file, the
/// token file, the `[server]` listeners, then the daemon's part on its
/// thread), apply it. `path` is `None` when the daemon started on the
/// defaults (nothing to re-read).
///
/// # Errors
/// One line: why nothing was applied.
pub fn reload_file(
    owner: &OwnerHandle<Daemon>,
    path: Option<&Path>,
    side: &ServerSide,
) -> Result<String, String> {
    let Some(path) = path else {
        return Err(
            "the daemon started without --config: there is no file to re-read (restart it with one)"
                .into(),
        );
    };
    let new = Config::load(path).map_err(|e| e.to_string())?;
    new.require_runnable().map_err(|e| e.to_string())?;
    let tokens = Tokens::from_file(new.server.token_file.as_deref()).map_err(|e| e.to_string())?;
    side.check(&new.server, &tokens)?;
    let server = new.server.clone();
    let msg = apply(owner, new)?;
    let n = tokens.names().count();
    side.commit(server, tokens);
    Ok(format!("{msg}; {n} API token(s)"))
}

/// Check `new` (loaded and validated) against the running daemon without
/// applying anything: `Err` is why [`apply`] would refuse it.
///
/// # Errors
/// One line: the keys that need a restart, or what detection refused.
pub fn check(owner: &OwnerHandle<Daemon>, new: Config) -> Result<(), String> {
    owner
        .call(move |d| d.check_reload(&new))
        .map_err(|_| "the daemon has stopped".to_string())?
}

/// Apply `new` (loaded and validated; the `[server]` part is the caller's)
/// to the running daemon, or refuse it whole.
///
/// # Errors
/// One line: why nothing was applied.
pub fn apply(owner: &OwnerHandle<Daemon>, new: Config) -> Result<String, String> {
    owner
        .call(move |d| d.reload(new))
        .map_err(|_| "the daemon has stopped".to_string())?
}
