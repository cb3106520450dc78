//! Reload: a running daemon re-reads its configuration file and applies
//! it without a restart, on SIGHUP or `POST /v1/reload` (a change: it
//! needs a token).
//!
//! The daemon gives the shell one hook ([`crate::Server::on_reload`]):
//! re-read the file, check all of it, then apply it — or refuse it whole
//! with one line saying what is wrong, the running configuration staying in
//! force. The shell serialises reloads, logs each outcome once, answers the
//! API, and owns the `[server]` part: the listeners cannot move without a
//! restart ([`ServerSide::check`]); the tokens are replaced
//! ([`ServerSide::commit`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::auth::TokenSlot;
use crate::config::ServerConfig;
use crate::Tokens;

/// The keys (dotted paths, `a.b.c`) under `prefix` whose values differ
/// between two serialised configurations: what a reload changes, so a
/// daemon can refuse the keys it cannot apply by name.
pub fn diff_keys(
    prefix: &str,
    a: &serde_json::Value,
    b: &serde_json::Value,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                diff_keys(
                    &key,
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}

/// A configuration as a JSON value (for [`diff_keys`]); `Null` if it does
/// not serialise.
pub fn to_value(v: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// The `[server]` side of a reload.
#[derive(Debug)]
pub struct ServerSide {
    cfg: Mutex<ServerConfig>,
    tokens: TokenSlot,
}

impl ServerSide {
    pub(crate) fn new(cfg: ServerConfig, tokens: TokenSlot) -> Self {
        Self {
            cfg: Mutex::new(cfg),
            tokens,
        }
    }

    fn current(&self) -> ServerConfig {
        self.cfg
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Can the running server take `new` with `tokens`? The listeners
    /// (`server.listen`, `server.metrics_listen`) need a restart to move;
    /// an API beyond loopback needs a token.
    ///
    /// # Errors
    /// One line naming the key.
    pub fn check(&self, new: &ServerConfig, tokens: &Tokens) -> Result<(), String> {
        new.validate().map_err(|e| e.to_string())?;
        let old = self.current();
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(default)".into());
        for (key, a, b) in [
            ("server.listen", &old.listen, &new.listen),
            (
                "server.metrics_listen",
                &old.metrics_listen,
                &new.metrics_listen,
            ),
        ] {
            if a != b {
                return Err(format!(
                    "{key} changed ({} -> {}): moving a listener needs a restart",
                    show(a),
                    show(b)
                ));
            }
        }
        if let Ok(Some(a)) = new.api_addr() {
            if !a.ip().is_loopback() && tokens.is_empty() {
                return Err(format!(
                    "server.token_file lists no token and the API listens on {a}, beyond loopback: add one"
                ));
            }
        }
        Ok(())
    }

    /// Take `new`: from now on the API accepts `tokens`.
    pub fn commit(&self, new: ServerConfig, tokens: Tokens) {
        self.tokens.set(tokens);
        match self.cfg.lock() {
            Ok(mut c) => *c = new,
            Err(p) => *p.into_inner() = new,
        }
    }
}

/// A daemon's reload hook: re-read, check, apply; `Ok(what changed)` or
/// `Err(why nothing was applied)`, one line each.
pub type Hook = dyn Fn(&ServerSide) -> Result<String, String> + Send + Sync;

struct Inner {
    hook: Mutex<Option<Box<Hook>>>,
    server: ServerSide,
    hup: Arc<AtomicBool>,
    hup_registered: AtomicBool,
    reloads: AtomicU64,
}

/// Runs a daemon's reloads (shared by the API route and the SIGHUP watch).
#[derive(Clone)]
pub struct Reloader(Arc<Inner>);

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("reloads", &self.reloads())
            .finish()
    }
}

impl Reloader {
    pub(crate) fn new(server: ServerSide) -> Self {
        Self(Arc::new(Inner {
            hook: Mutex::new(None),
            server,
            hup: Arc::new(AtomicBool::new(false)),
            hup_registered: AtomicBool::new(false),
            reloads: AtomicU64::new(0),
        }))
    }

    /// Use `hook` for reloads, and take SIGHUP as a reload request (instead
    /// of its default, ending the process).
    pub(crate) fn set(&self, hook: Box<Hook>) {
        match self.0.hook.lock() {
            Ok(mut h) => *h = Some(hook),
            Err(p) => *p.into_inner() = Some(hook),
        }
        if !self.0.hup_registered.swap(true, Ordering::SeqCst) {
            if let Err(e) =
                signal_hook::flag::register(signal_hook::consts::SIGHUP, self.0.hup.clone())
            {
                tracing::warn!(
                    "SIGHUP will not reload the configuration: {e} (POST /v1/reload still does)"
                );
            }
        }
    }

    /// Reloads applied since start.
    pub fn reloads(&self) -> u64 {
        self.0.reloads.load(Ordering::Relaxed)
    }

    /// A SIGHUP arrived since the last call.
    pub(crate) fn take_hup(&self) -> bool {
        self.0.hup.swap(false, Ordering::SeqCst)
    }

    /// Reload now (`trigger`: `SIGHUP`, `POST /v1/reload by NAME`); the
    /// outcome is logged once.
    ///
    /// # Errors
    /// Why the new configuration was refused (the old one runs on).
    pub fn reload(&self, trigger: &str) -> Result<String, String> {
        let guard = self.0.hook.lock().unwrap_or_else(|p| p.into_inner());
        let r = match guard.as_ref() {
            Some(h) => h(&self.0.server),
            None => Err("this daemon cannot reload its configuration: restart it".into()),
        };
        drop(guard);
        match &r {
            Ok(m) => {
                self.0.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!("configuration reloaded ({trigger}): {m}");
            }
            Err(e) => tracing::error!(
                "configuration not reloaded ({trigger}): {e}; the running configuration stays in force"
            ),
        }
        r
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn diff_keys_names_every_changed_path_once() {
        let a =
            serde_json::json!({"detect": {"multiplier": 4, "whitelist": []}, "mode": "xdp-host"});
        let b = serde_json::json!({"detect": {"multiplier": 6, "whitelist": []}, "extra": 1, "mode": "xdp-host"});
        let mut out = Vec::new();
        diff_keys("", &a, &b, &mut out);
        assert_eq!(out, ["detect.multiplier", "extra"]);
        out.clear();
        diff_keys("", &a, &a, &mut out);
        assert!(out.is_empty());
    }

    use super::*;

    fn cfg(listen: &str, tokens: Option<&str>) -> ServerConfig {
        ServerConfig {
            listen: Some(listen.into()),
            metrics_listen: None,
            token_file: tokens.map(Into::into),
        }
    }

    #[test]
    fn listeners_stay_tokens_change() {
        let slot = TokenSlot::from(Arc::new(Tokens::parse("a tok-aaaaaaaa\n").unwrap()));
        let side = ServerSide::new(cfg("127.0.0.1:9477", None), slot.clone());
        let e = side
            .check(&cfg("127.0.0.1:9999", None), &Tokens::none())
            .unwrap_err();
        assert!(e.contains("server.listen") && e.contains("restart"), "{e}");
        let new = Tokens::parse("b tok-bbbbbbbb\n").unwrap();
        side.check(&cfg("127.0.0.1:9477", Some("/x")), &new)
            .unwrap();
        side.commit(cfg("127.0.0.1:9477", Some("/x")), new);
        assert!(slot.get().check("tok-bbbbbbbb").is_some());
        assert!(slot.get().check("tok-aaaaaaaa").is_none());
    }

    #[test]
    fn a_refused_reload_counts_nothing() {
        let slot = TokenSlot::default();
        let r = Reloader::new(ServerSide::new(cfg("127.0.0.1:0", None), slot));
        assert!(r.reload("test").unwrap_err().contains("restart"));
        r.set(Box::new(|_| Err("detect.multiplier: must be > 1".into())));
        assert!(r.reload("test").unwrap_err().contains("multiplier"));
        assert_eq!(r.reloads(), 0);
        r.set(Box::new(|_| Ok("detect changed".into())));
        assert_eq!(r.reload("test").unwrap(), "detect changed");
        assert_eq!(r.reloads(), 1);
    }
}
