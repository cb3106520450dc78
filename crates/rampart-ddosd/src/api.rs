//! HTTP API of the daemon (axum on tokio).
//!
//! | method | path | body | answer |
//! |---|---|---|---|
//! | GET | `/v1/status` | | mode, intervals, attack state, normal peak, threshold |
//! | GET | `/v1/blocked` | | blocked sources with detector, reason, since |
//! | POST | `/v1/block` | `{"prefix": "192.0.2.7", "reason": "..."}` | 200, 400 bad prefix, 409 blocked/whitelisted |
//! | POST | `/v1/unblock` | `{"prefix": "192.0.2.7"}` | 200, 400, 404 not blocked |
//! | GET | `/v1/whitelist` | | whitelist |
//! | POST | `/v1/whitelist` | `{"prefix": "10.0.0.0/8"}` | 200 (blocked overlaps released) |
//! | POST | `/v1/whitelist/remove` | `{"prefix": "10.0.0.0/8"}` | 200, 404 |
//! | GET | `/v1/rates` | | per-source pps (all tiers, hw, host) |
//! | GET | `/v1/tiers` | | tiers: capacity, counters, update cost, rules |
//! | GET | `/metrics` | | Prometheus text format |
//!
//! Errors are `{"error": "..."}` with a 4xx status that says what is wrong.

use std::sync::mpsc::Sender;
use std::sync::{Arc, RwLock};

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rampart_ddos::Prefix;
use serde::Deserialize;
use serde_json::json;

use crate::daemon::{Command, Reply, View};
use crate::metrics::Metrics;

/// Sends a command and where to answer it.
pub type CommandSender = Sender<(Command, Sender<Reply>)>;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The daemon's view.
    pub view: Arc<RwLock<View>>,
    /// Metrics.
    pub metrics: Metrics,
    /// Commands to the daemon loop.
    pub cmds: Arc<std::sync::Mutex<CommandSender>>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiState")
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefixBody {
    prefix: String,
    #[serde(default)]
    reason: String,
}

fn err(status: u16, msg: impl Into<String>) -> Response {
    let s = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (s, Json(json!({ "error": msg.into() }))).into_response()
}

// A rejection is a ready response; it is built once per bad request.
#[allow(clippy::result_large_err)]
fn parse_body(
    body: std::result::Result<Json<PrefixBody>, JsonRejection>,
) -> std::result::Result<(Prefix, String), Response> {
    let Json(b) = body.map_err(|e| {
        err(
            400,
            format!("bad request body: {}; send JSON {{\"prefix\": \"192.0.2.7\"}} with Content-Type: application/json", e.body_text()),
        )
    })?;
    let p = Prefix::parse(b.prefix.trim()).map_err(|e| err(400, e.to_string()))?;
    Ok((p, b.reason))
}

async fn send(st: &ApiState, c: Command) -> Response {
    let (tx, rx) = std::sync::mpsc::channel();
    let sent = st
        .cmds
        .lock()
        .map(|s| s.send((c, tx)).is_ok())
        .unwrap_or(false);
    if !sent {
        return err(503, "the daemon loop has stopped");
    }
    let r = tokio::task::spawn_blocking(move || rx.recv()).await;
    match r {
        Ok(Ok(Ok(msg))) => Json(json!({ "ok": msg })).into_response(),
        Ok(Ok(Err((code, msg)))) => err(code, msg),
        _ => err(503, "the daemon loop has stopped"),
    }
}

fn view(st: &ApiState) -> View {
    st.view.read().map(|v| v.clone()).unwrap_or_default()
}

async fn status(State(st): State<ApiState>) -> Response {
    let v = view(&st);
    Json(json!({
        "mode": v.mode, "interval_s": v.interval_s, "intervals": v.intervals,
        "under_attack": v.under_attack, "normal_peak_pps": v.normal_peak_pps,
        "threshold": v.threshold, "resumed": v.resumed, "blocked": v.blocked.len(),
        "blocked_total": v.blocked_total, "unbanned_total": v.unbanned_total,
    }))
    .into_response()
}

async fn blocked(State(st): State<ApiState>) -> Response {
    Json(view(&st).blocked).into_response()
}

async fn rates(State(st): State<ApiState>) -> Response {
    Json(view(&st).rates).into_response()
}

async fn tiers(State(st): State<ApiState>) -> Response {
    Json(view(&st).tiers).into_response()
}

async fn whitelist(State(st): State<ApiState>) -> Response {
    Json(view(&st).whitelist).into_response()
}

async fn block(
    State(st): State<ApiState>,
    body: std::result::Result<Json<PrefixBody>, JsonRejection>,
) -> Response {
    match parse_body(body) {
        Ok((prefix, reason)) => send(&st, Command::Block { prefix, reason }).await,
        Err(r) => r,
    }
}

async fn unblock(
    State(st): State<ApiState>,
    body: std::result::Result<Json<PrefixBody>, JsonRejection>,
) -> Response {
    match parse_body(body) {
        Ok((p, _)) => send(&st, Command::Unblock(p)).await,
        Err(r) => r,
    }
}

async fn wl_add(
    State(st): State<ApiState>,
    body: std::result::Result<Json<PrefixBody>, JsonRejection>,
) -> Response {
    match parse_body(body) {
        Ok((p, _)) => send(&st, Command::Whitelist(p)).await,
        Err(r) => r,
    }
}

async fn wl_remove(
    State(st): State<ApiState>,
    body: std::result::Result<Json<PrefixBody>, JsonRejection>,
) -> Response {
    match parse_body(body) {
        Ok((p, _)) => send(&st, Command::Unwhitelist(p)).await,
        Err(r) => r,
    }
}

async fn metrics(State(st): State<ApiState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        st.metrics.render(),
    )
        .into_response()
}

async fn not_found() -> Response {
    err(404, "no such endpoint: see /v1/status, /v1/blocked, /v1/block, /v1/unblock, /v1/whitelist, /v1/rates, /v1/tiers, /metrics")
}

/// The router.
pub fn router(st: ApiState) -> Router {
    Router::new()
        .route("/v1/status", get(status))
        .route("/v1/blocked", get(blocked))
        .route("/v1/block", post(block))
        .route("/v1/unblock", post(unblock))
        .route("/v1/whitelist", get(whitelist).post(wl_add))
        .route("/v1/whitelist/remove", post(wl_remove))
        .route("/v1/rates", get(rates))
        .route("/v1/tiers", get(tiers))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(st)
}

/// A running API server (its own tokio runtime on a thread).
#[derive(Debug)]
pub struct Server {
    /// Bound address.
    pub addr: std::net::SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Bind `listen` and serve `st` until dropped.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn start(listen: &str, st: ApiState) -> crate::Result<Self> {
        let std_listener = std::net::TcpListener::bind(listen).map_err(|e| {
            crate::Error::io(format!("binding the API on {listen} (daemon.listen)"), e)
        })?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| crate::Error::io("API socket", e))?;
        let addr = std_listener
            .local_addr()
            .map_err(|e| crate::Error::io("API socket", e))?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("rampart-ddosd-api".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("API runtime: {e}");
                        return;
                    }
                };
                rt.block_on(async move {
                    let Ok(l) = tokio::net::TcpListener::from_std(std_listener) else {
                        return;
                    };
                    let _ = axum::serve(l, router(st))
                        .with_graceful_shutdown(async {
                            let _ = rx.await;
                        })
                        .await;
                });
            })
            .map_err(|e| crate::Error::io("starting the API thread", e))?;
        Ok(Self {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl ApiState {
    /// From a running daemon.
    pub fn of(h: &crate::daemon::Handle) -> Self {
        Self {
            view: h.view.clone(),
            metrics: h.metrics.clone(),
            cmds: Arc::new(std::sync::Mutex::new(h.cmds.clone())),
        }
    }
}
