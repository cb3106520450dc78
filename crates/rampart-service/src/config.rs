//! Config loading, the same for every daemon: TOML, unknown keys are
//! errors (`deny_unknown_fields` on every section), every error is one line
//! naming the key, and `--print-config` prints the effective config (every
//! default filled in) as TOML.
//!
//! Every daemon's config has a `[server]` section ([`ServerConfig`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A config that cannot be used: one line, naming the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("reading config {}: {err}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error: in the message once, deliberately not a `source()`
        /// (a printed chain would repeat it).
        err: std::io::Error,
    },
    /// Bad TOML, an unknown key, a wrong type.
    #[error("{}{}{message}{}", file_prefix(.path), key_prefix(.key), line_suffix(*.line))]
    Parse {
        /// The file (`None` for text).
        path: Option<PathBuf>,
        /// Dotted path of the key (`daemon.nice`; empty at the top level).
        key: String,
        /// 1-based line.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A value out of range or inconsistent: the message names the key.
    #[error("{}{message}", file_prefix(.path))]
    Invalid {
        /// The file (`None` for text).
        path: Option<PathBuf>,
        /// What is wrong and what is allowed.
        message: String,
    },
}

fn file_prefix(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map(|p| format!("{}: ", p.display()))
        .unwrap_or_default()
}

fn key_prefix(k: &str) -> String {
    if k.is_empty() {
        String::new()
    } else {
        format!("{k}: ")
    }
}

fn line_suffix(l: Option<usize>) -> String {
    l.map(|l| format!(" (line {l})")).unwrap_or_default()
}

impl ConfigError {
    /// A range or consistency error (`message` names the key).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid {
            path: None,
            message: message.into(),
        }
    }

    /// The same error, said of file `path`.
    #[must_use]
    pub fn in_file(self, p: &Path) -> Self {
        match self {
            Self::Parse {
                key, line, message, ..
            } => Self::Parse {
                path: Some(p.to_path_buf()),
                key,
                line,
                message,
            },
            Self::Invalid { message, .. } => Self::Invalid {
                path: Some(p.to_path_buf()),
                message,
            },
            r => r,
        }
    }
}

/// Parse TOML text into `T` (no validation: the daemon's own `validate` follows).
///
/// # Errors
/// [`ConfigError::Parse`] naming the key and line.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // A quoted TOML key may hold any character, a newline included:
        // escaped, so the error stays one line.
        let key: String = e
            .path()
            .to_string()
            .chars()
            .flat_map(char::escape_debug)
            .collect();
        let inner = e.into_inner();
        let line = inner
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        ConfigError::Parse {
            path: None,
            key: if key == "." { String::new() } else { key },
            line,
            message: inner.message().replace('\n', " ").trim().to_string(),
        }
    })
}

/// Read and parse file `path`.
///
/// # Errors
/// [`ConfigError::Read`] or as [`parse`], naming the file.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
        path: path.to_path_buf(),
        err,
    })?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// The effective config as TOML, for `--print-config`.
///
/// # Errors
/// A value TOML cannot hold (a programming error).
pub fn render<T: Serialize>(what: &str, cfg: &T) -> Result<String, ConfigError> {
    let body = toml::to_string_pretty(cfg)
        .map_err(|e| ConfigError::invalid(format!("rendering the config: {e}")))?;
    Ok(format!(
        "# {what}: effective configuration (every default filled in)\n\n{body}"
    ))
}

/// `[server]`: the API, metrics and tokens of a daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// API address (`ADDRESS:PORT`; port 0 picks a free one); `""`: no API.
    /// Default: the daemon's own (`127.0.0.1:9477` for ddos,
    /// `127.0.0.1:9610` for tenant).
    pub listen: Option<String>,
    /// A listener of its own for `GET /metrics` (and `/healthz`), with no
    /// token needed there; `/metrics` then leaves the API listener. Default
    /// none: `/metrics` is served on the API listener.
    pub metrics_listen: Option<String>,
    /// File of API tokens: one a line, `TOKEN` or `NAME TOKEN`, a token may
    /// be `sha256:<hex>`. Needed for any change through the API, and to
    /// listen beyond loopback. Default none. A relative path is relative to
    /// the working directory.
    pub token_file: Option<PathBuf>,
}

fn addr(key: &str, v: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if v.is_empty() {
        return Ok(None);
    }
    v.parse().map(Some).map_err(|_| {
        ConfigError::invalid(format!(
            "server.{key} = {v:?}: use ADDRESS:PORT, e.g. 127.0.0.1:9477, or \"\" for none"
        ))
    })
}

impl ServerConfig {
    /// Fill in the daemon's default API address (what `--print-config` shows).
    pub fn with_default_listen(mut self, default: &str) -> Self {
        self.listen.get_or_insert_with(|| default.to_string());
        self
    }

    /// The API address (`None`: no API).
    ///
    /// # Errors
    /// Not `ADDRESS:PORT`.
    pub fn api_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        addr("listen", self.listen.as_deref().unwrap_or_default())
    }

    /// The metrics address (`None`: metrics on the API listener).
    ///
    /// # Errors
    /// Not `ADDRESS:PORT`.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        addr(
            "metrics_listen",
            self.metrics_listen.as_deref().unwrap_or_default(),
        )
    }

    /// Check the addresses, and that an API beyond loopback has tokens.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key and the fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let api = self.api_addr()?;
        self.metrics_addr()?;
        if let Some(a) = api {
            if !a.ip().is_loopback() && self.token_file.is_none() {
                return Err(ConfigError::invalid(format!(
                    "server.listen = \"{a}\" is not a loopback address and server.token_file is not set: \
                     set server.token_file to a file of API tokens, or listen on 127.0.0.1"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize, Serialize)]
    #[serde(default, deny_unknown_fields)]
    struct Daemon {
        server: ServerConfig,
        daemon: Section,
    }

    #[derive(Debug, Deserialize, Serialize)]
    #[serde(default, deny_unknown_fields)]
    struct Section {
        nice: i32,
        iface: String,
    }

    impl Default for Section {
        fn default() -> Self {
            Self {
                nice: -10,
                iface: "eth0".into(),
            }
        }
    }

    #[test]
    fn errors_name_the_key_and_line_on_one_line() {
        for (text, want) in [
            (
                "[daemon]\nbogus = 1\n",
                "daemon.bogus: unknown field `bogus`, expected `nice` or `iface` (line 2)",
            ),
            (
                "[daemon]\nnice = \"x\"\n",
                "daemon.nice: invalid type: string",
            ),
            ("\n\n[server]\nlisten = 7\n", "server.listen: invalid type"),
            ("[nope]\n", "unknown field `nope`"),
            ("[daemon\n", "(line 1)"),
            // Found by the config fuzz target: a quoted key holding a
            // newline put that newline into the message's key part.
            (r#"[ "a\nb" ]"#, "unknown field"),
        ] {
            let e = parse::<Daemon>(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let e = parse::<Daemon>("\n\n[server]\nlisten = 7\n").unwrap_err();
        assert!(
            matches!(e, ConfigError::Parse { line: Some(4), .. }),
            "{e:?}"
        );
    }

    #[test]
    fn files_are_named_in_errors() {
        let dir = std::env::temp_dir().join(format!("rampart-service-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.toml");
        std::fs::write(&p, "[daemon]\nnice = 1\niface = 2\n").unwrap();
        let e = load::<Daemon>(&p).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: daemon.iface", p.display())),
            "{e}"
        );
        assert!(e.ends_with("(line 3)"), "{e}");
        let e = load::<Daemon>(&dir.join("missing.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.toml") && e.contains("reading config"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn print_config_shows_every_default() {
        let mut d: Daemon = parse("").unwrap();
        d.server = d.server.with_default_listen("127.0.0.1:9477");
        let text = render("rampart test", &d).unwrap();
        assert!(text.starts_with("# rampart test: effective configuration"));
        assert!(text.contains("listen = \"127.0.0.1:9477\""), "{text}");
        assert!(
            text.contains("nice = -10") && text.contains("iface = \"eth0\""),
            "{text}"
        );
        // What it prints reads back as the same config.
        let again: Daemon = parse(&text).unwrap();
        assert_eq!(again.server, d.server);
    }

    #[test]
    fn listening_beyond_loopback_needs_tokens() {
        let s = |t: &str| parse::<ServerConfig>(t).unwrap();
        s("listen = \"127.0.0.1:9477\"").validate().unwrap();
        s("listen = \"[::1]:9477\"").validate().unwrap();
        s("listen = \"\"").validate().unwrap();
        let e = s("listen = \"0.0.0.0:9477\"")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("server.listen")
                && e.contains("server.token_file")
                && e.contains("127.0.0.1"),
            "{e}"
        );
        s("listen = \"0.0.0.0:9477\"\ntoken_file = \"/etc/rampart/tokens\"")
            .validate()
            .unwrap();
        let e = s("listen = \"localhost\"")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("server.listen = \"localhost\": use ADDRESS:PORT"),
            "{e}"
        );
        let e = s("metrics_listen = \"x\"")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.metrics_listen"), "{e}");
    }
}
