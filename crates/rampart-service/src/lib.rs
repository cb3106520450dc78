//! rampart's service shell: what every daemon (`rampart ddos run`,
//! `rampart tenant serve`) is built from, so they all behave alike.
//!
//! - [`owner`]: the owner thread — one thread owns the daemon's state
//!   (BPF objects are not shared between threads); handlers send it closures
//!   and get the domain's typed results back;
//! - [`server`]: axum on a tokio runtime of its own, `/healthz`,
//!   `/metrics` (on the API or a listener of its own), `/v1/openapi.json`
//!   generated from the handlers (utoipa), graceful shutdown;
//! - [`error`]: one error body `{"error": {"code", "message", "details"?}}`
//!   and one mapping from domain errors to HTTP status and code;
//! - [`auth`]: bearer tokens from `server.token_file` on every change,
//!   reads open on loopback only;
//! - [`metrics`]: one Prometheus registry per daemon, collected from its
//!   state at scrape time;
//! - [`alert`]: the one alert schema (EVE JSON with a `rampart` object)
//!   and its sinks (file, syslog, webhook);
//! - [`dashboard`]: the web dashboard (`/ui/`) and its data routes
//!   (`/v1/apps`, `/v1/dashboard`, `/v1/events`, `/v1/alerts`, `/v1/attacks`);
//! - [`reload`]: SIGHUP and `POST /v1/reload` re-read the configuration
//!   through the daemon's hook (bad files refused whole, one line);
//! - [`config`]: TOML loading with one-line errors naming the key, the
//!   shared `[server]` section, `--print-config`.

pub mod alert;
pub mod auth;
pub mod config;
pub mod dashboard;
pub mod error;
pub mod metrics;
pub mod owner;
pub mod reload;
pub mod server;
pub mod status;
pub mod testing;

pub use auth::{Principal, Tokens};
pub use config::{ConfigError, ServerConfig};
pub use dashboard::Apps;
pub use error::{ApiBytes, ApiError, ApiJson, ErrorBody, ErrorKind, JsonBody, ToApiError};
pub use metrics::{Metrics, Samples, StateCollector};
pub use owner::{Owned, Owner, OwnerHandle, SpawnError, Stopped};
pub use server::{RouteSlot, Routes, Server, ServerError, Service};
