//! The binary's log output: one subscriber for every command, writing to
//! stderr once per event.
//!
//! - text (the default): colours only when stderr is a terminal, so
//!   journald and files get plain lines;
//! - `--log-format json`: one JSON object a line (`timestamp`, `level`,
//!   `target`, `message` and the event's fields), for log shippers;
//! - `RUST_LOG` picks what is shown (`RUST_LOG=debug`,
//!   `RUST_LOG=warn,rampart_ddosd=debug`, tracing-subscriber's EnvFilter
//!   syntax); without it, daemons show `info` and above, one-shot commands
//!   `warn` and above.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colours only on a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// What `RUST_LOG` asks for, or `default` when it is unset. A `RUST_LOG`
/// the filter cannot parse is said once and `default` applies.
fn filter(default: &str) -> (EnvFilter, Option<String>) {
    match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => match EnvFilter::try_new(&v) {
            Ok(f) => (f, None),
            Err(e) => (
                EnvFilter::new(default),
                Some(format!(
                    "RUST_LOG={v:?} is not a log filter ({e}); showing {default} and above \
                     (e.g. RUST_LOG=debug or RUST_LOG=warn,rampart_ddosd=debug)"
                )),
            ),
        },
        _ => (EnvFilter::new(default), None),
    }
}

/// Install the process's subscriber. `default`: the level shown without
/// `RUST_LOG` (`info` for daemons, `warn` for one-shot commands).
pub fn init(format: LogFormat, default: &str) {
    let (filter, bad) = filter(default);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
    if let Some(msg) = bad {
        tracing::warn!("{msg}");
    }
}
