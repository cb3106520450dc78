//! HTTP API of the daemon, on the service shell (`rampart_service`).
//!
//! | method | path | body | answer |
//! |---|---|---|---|
//! | GET | `/v1/status` | | mode, intervals, attack state, normal peak, threshold |
//! | GET | `/v1/blocked` | | blocked sources with detector, reason, since |
//! | POST | `/v1/blocked` | `{"prefix": "192.0.2.7", "reason": "..."}` | 200, 400 bad prefix, 409 blocked/whitelisted |
//! | DELETE | `/v1/blocked/{prefix}` | | 200, 400, 404 not blocked (prefix URL-encoded: `10.0.0.0%2F8`) |
//! | GET | `/v1/whitelist` | | whitelist |
//! | POST | `/v1/whitelist` | `{"prefix": "10.0.0.0/8"}` | 200 (blocked overlaps released) |
//! | DELETE | `/v1/whitelist/{prefix}` | | 200, 400, 404 |
//! | GET | `/v1/rates` | | per-source pps (all tiers, hw, host) |
//! | GET | `/v1/tiers` | | tiers: capacity, counters, update cost, rules |
//! | GET | `/metrics`, `/healthz`, `/v1/openapi.json` | | the shell's |
//!
//! Changes need `Authorization: Bearer <token>` (`server.token_file`).
//! Errors are `{"error": {"code", "message"}}`; the OpenAPI document at
//! `/v1/openapi.json` is generated from the handlers below.

use std::sync::{Arc, RwLock};

use axum::extract::{Path, State};
use axum::{Extension, Json};
use rampart_ddos::Prefix;
use rampart_service::alert::App;
use rampart_service::auth::Principal;
use rampart_service::{
    ApiError, ApiJson, Apps, ErrorBody, ErrorKind, JsonBody, OwnerHandle, Routes, Server, Service,
    ToApiError, Tokens,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::routes;

use crate::daemon::{
    Blocked, Command, CommandError, Daemon, Handle, Policed, RateView, TierView, View,
};

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The daemon's view (reads).
    pub view: Arc<RwLock<View>>,
    /// The daemon's owner thread (commands).
    pub owner: OwnerHandle<Daemon>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiState")
    }
}

impl ApiState {
    /// From a running daemon.
    pub fn of(h: &Handle) -> Self {
        Self {
            view: h.view.clone(),
            owner: h.owner(),
        }
    }
}

impl ToApiError for CommandError {
    fn to_api_error(&self) -> ApiError {
        let kind = match self {
            CommandError::Whitelisted(_) | CommandError::AlreadyBlocked(_) => ErrorKind::Conflict,
            CommandError::NotBlocked(_) | CommandError::NotWhitelisted(_) => ErrorKind::NotFound,
            CommandError::CrowdsecDecision(_) => ErrorKind::Conflict,
            CommandError::Stopped => ErrorKind::Unavailable,
            CommandError::Failed(_) => ErrorKind::Internal,
        };
        ApiError::new(kind, self.to_string())
    }
}

/// `POST /v1/blocked`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockBody {
    /// Address or CIDR prefix, IPv4 or IPv6.
    #[schema(example = "192.0.2.7")]
    pub prefix: String,
    /// Why (free text; shown in `/v1/blocked` and the alert).
    #[serde(default)]
    pub reason: String,
}

impl JsonBody for BlockBody {
    const EXAMPLE: &'static str = r#"{"prefix": "192.0.2.7", "reason": "manual"}"#;
}

/// `POST /v1/whitelist`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WhitelistBody {
    /// Address or CIDR prefix, IPv4 or IPv6.
    #[schema(example = "10.0.0.0/8")]
    pub prefix: String,
}

impl JsonBody for WhitelistBody {
    const EXAMPLE: &'static str = r#"{"prefix": "10.0.0.0/8"}"#;
}

/// What a change did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Done {
    /// One line, e.g. `192.0.2.7/32 blocked`.
    pub message: String,
}

/// `GET /v1/status`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Status {
    /// Placement mode.
    pub mode: String,
    /// Loop interval (s).
    pub interval_s: f64,
    /// Intervals run.
    pub intervals: u64,
    /// The last intervals' measured lengths (s), oldest first (at most 64).
    pub recent_intervals_s: Vec<f64>,
    /// Pair records in the last feature interval.
    pub feature_pairs: usize,
    /// Victim records in the last feature interval.
    pub feature_victims: usize,
    /// Attack in progress (on any victim).
    pub under_attack: bool,
    /// Victims detection follows.
    pub victims: usize,
    /// Victims under attack now.
    pub victims_under_attack: usize,
    /// Victims with SYN cookies or the ACK guard on.
    pub victims_protected: usize,
    /// Sources policed now.
    pub policed: usize,
    /// Planner swap threshold.
    pub threshold: f64,
    /// Resumed from pinned state at start.
    pub resumed: bool,
    /// Sources blocked now.
    pub blocked: usize,
    /// Sources ever blocked (since start).
    pub blocked_total: u64,
    /// Sources ever unbanned by detection (since start).
    pub unbanned_total: u64,
    /// The `[detect]` section in force (thresholds, floors, whitelist; a
    /// reload shows here).
    #[schema(value_type = Object)]
    pub detect: serde_json::Value,
    /// The upstream tier when `[upstream]` is enabled: engaged or not, the
    /// load, what is announced (or, in a dry run, would be), capacity,
    /// updates, the last update's cost, `counters: "none"`.
    pub upstream: Option<crate::daemon::UpstreamView>,
    /// CrowdSec when `[crowdsec]` is enabled: decisions held, pulls,
    /// failures by kind and the last one, pushes.
    pub crowdsec: Option<crate::daemon::CrowdsecView>,
}

fn view(st: &ApiState) -> View {
    st.view.read().map(|v| v.clone()).unwrap_or_default()
}

fn prefix(s: &str) -> Result<Prefix, ApiError> {
    Prefix::parse(s.trim()).map_err(|e| ApiError::new(ErrorKind::Invalid, e.to_string()))
}

async fn command(
    st: &ApiState,
    who: Option<Extension<Principal>>,
    c: Command,
) -> Result<Json<Done>, ApiError> {
    let what = format!("{c:?}");
    let message = st
        .owner
        .run(move |d| d.command(c))
        .await
        .map_err(|_| CommandError::Stopped)??;
    let who = who
        .and_then(|Extension(p)| p.name)
        .unwrap_or_else(|| "operator".into());
    tracing::info!(%who, "{what}: {message}");
    Ok(Json(Done { message }))
}

#[utoipa::path(get, path = "/v1/status", tag = "ddos",
    responses((status = 200, description = "Daemon state", body = Status)))]
async fn status(State(st): State<ApiState>) -> Json<Status> {
    let v = view(&st);
    Json(Status {
        mode: v.mode,
        interval_s: v.interval_s,
        intervals: v.intervals,
        recent_intervals_s: v.recent_intervals_s.clone(),
        feature_pairs: v.feature_pairs,
        feature_victims: v.feature_victims,
        under_attack: v.under_attack,
        victims: v.victims.len(),
        victims_under_attack: v.victims.iter().filter(|x| x.under_attack).count(),
        victims_protected: v.victims.iter().filter(|x| !x.protection.is_off()).count(),
        policed: v.policed.len(),
        threshold: v.threshold,
        resumed: v.resumed,
        blocked: v.blocked.len(),
        blocked_total: v.blocked_total,
        unbanned_total: v.unbanned_total,
        detect: serde_json::to_value(&v.detect).unwrap_or_default(),
        upstream: v.upstream.clone(),
        crowdsec: v.crowdsec.clone(),
    })
}

#[utoipa::path(get, path = "/v1/blocked", tag = "ddos",
    responses((status = 200, description = "Blocked sources", body = Vec<Blocked>)))]
async fn blocked(State(st): State<ApiState>) -> Json<Vec<Blocked>> {
    Json(view(&st).blocked)
}

#[utoipa::path(post, path = "/v1/blocked", tag = "ddos", request_body = BlockBody,
    responses(
        (status = 200, description = "Blocked", body = Done),
        (status = 400, description = "Bad body or prefix", body = ErrorBody),
        (status = 409, description = "Already blocked, or whitelisted", body = ErrorBody)))]
async fn block(
    State(st): State<ApiState>,
    who: Option<Extension<Principal>>,
    ApiJson(b): ApiJson<BlockBody>,
) -> Result<Json<Done>, ApiError> {
    let prefix = prefix(&b.prefix)?;
    command(
        &st,
        who,
        Command::Block {
            prefix,
            reason: b.reason,
        },
    )
    .await
}

#[utoipa::path(delete, path = "/v1/blocked/{prefix}", tag = "ddos",
    params(("prefix" = String, Path, description = "Blocked prefix, URL-encoded (`10.0.0.0%2F8`)")),
    responses(
        (status = 200, description = "Unblocked", body = Done),
        (status = 400, description = "Bad prefix", body = ErrorBody),
        (status = 404, description = "Not blocked", body = ErrorBody)))]
async fn unblock(
    State(st): State<ApiState>,
    who: Option<Extension<Principal>>,
    Path(p): Path<String>,
) -> Result<Json<Done>, ApiError> {
    let p = prefix(&p)?;
    command(&st, who, Command::Unblock(p)).await
}

#[utoipa::path(get, path = "/v1/whitelist", tag = "ddos",
    responses((status = 200, description = "Whitelist (config and operator)", body = Vec<String>)))]
async fn whitelist(State(st): State<ApiState>) -> Json<Vec<String>> {
    Json(view(&st).whitelist)
}

#[utoipa::path(post, path = "/v1/whitelist", tag = "ddos", request_body = WhitelistBody,
    responses(
        (status = 200, description = "Whitelisted; blocked overlaps released", body = Done),
        (status = 400, description = "Bad body or prefix", body = ErrorBody)))]
async fn whitelist_add(
    State(st): State<ApiState>,
    who: Option<Extension<Principal>>,
    ApiJson(b): ApiJson<WhitelistBody>,
) -> Result<Json<Done>, ApiError> {
    let p = prefix(&b.prefix)?;
    command(&st, who, Command::Whitelist(p)).await
}

#[utoipa::path(delete, path = "/v1/whitelist/{prefix}", tag = "ddos",
    params(("prefix" = String, Path, description = "Whitelisted prefix, URL-encoded (`10.0.0.0%2F8`)")),
    responses(
        (status = 200, description = "Removed", body = Done),
        (status = 400, description = "Bad prefix", body = ErrorBody),
        (status = 404, description = "Not on the operator whitelist", body = ErrorBody)))]
async fn whitelist_remove(
    State(st): State<ApiState>,
    who: Option<Extension<Principal>>,
    Path(p): Path<String>,
) -> Result<Json<Done>, ApiError> {
    let p = prefix(&p)?;
    command(&st, who, Command::Unwhitelist(p)).await
}

#[utoipa::path(get, path = "/v1/rates", tag = "ddos",
    responses((status = 200, description = "Rates of blocked sources, heaviest first", body = Vec<RateView>)))]
async fn rates(State(st): State<ApiState>) -> Json<Vec<RateView>> {
    Json(view(&st).rates)
}

#[utoipa::path(get, path = "/v1/victims", tag = "ddos",
    responses((status = 200, description = "Victims detection follows: `[{\"victim\", \"under_attack\", \"vectors\": [{\"vector\", \"current_pps\", \"baseline_pps\", \"threshold_pps\", \"anomalous\"}], \"source_level_pps\", \"protection\": {\"syn_cookies\", \"ack_guard\"}, \"blocked\", \"policed\"}]`", body = Object)))]
async fn victims(
    State(st): State<ApiState>,
) -> Json<Vec<rampart_ddos_control::detection::VictimView>> {
    Json(view(&st).victims)
}

#[utoipa::path(get, path = "/v1/policed", tag = "ddos",
    responses((status = 200, description = "Sources policed (rate-limited instead of blocked)", body = Vec<Policed>)))]
async fn policed(State(st): State<ApiState>) -> Json<Vec<Policed>> {
    Json(view(&st).policed)
}

#[utoipa::path(get, path = "/v1/tiers", tag = "ddos",
    responses((status = 200, description = "Tiers and their occupancy", body = Vec<TierView>)))]
async fn tiers(State(st): State<ApiState>) -> Json<Vec<TierView>> {
    Json(view(&st).tiers)
}

/// The daemon's routes.
pub fn routes(st: ApiState) -> Routes {
    Routes::new()
        .routes(routes!(status))
        .routes(routes!(blocked, block))
        .routes(routes!(unblock))
        .routes(routes!(whitelist, whitelist_add))
        .routes(routes!(whitelist_remove))
        .routes(routes!(rates))
        .routes(routes!(tiers))
        .routes(routes!(victims))
        .routes(routes!(policed))
        .with_state(st)
}

/// The dashboard's DDoS panel, from one view: traffic by tier (cumulative
/// counters: the page charts their rates), blocked sources with their
/// rates and the tier holding each, tiers, detection's victims.
pub fn panel(v: &View) -> serde_json::Value {
    use crate::daemon::Count;
    let role = |name: &str| {
        v.tiers
            .iter()
            .find(|t| t.info.name == name)
            .map_or("host", |t| t.info.role)
    };
    let host = v
        .tiers
        .iter()
        .find(|t| t.info.role == "host")
        .map_or("xdp", |t| t.info.name);
    let hw = v
        .tiers
        .iter()
        .find(|t| t.info.role == "hw")
        .map(|t| t.info.name);
    // NIC / XDP dropped / policed / SYN cookies / passed.
    let mut traffic: [Count; 5] = Default::default();
    for ((tier, reason), n) in &v.counters.drops {
        let i = match reason.as_str() {
            "policed" => 2,
            "syn_cookie" => 3,
            _ if role(tier) == "hw" => 0,
            _ => 1,
        };
        traffic[i] += *n;
    }
    for n in v.counters.passes.values() {
        traffic[4] += *n;
    }
    let rates: std::collections::HashMap<&str, &crate::daemon::RateView> =
        v.rates.iter().map(|r| (r.prefix.as_str(), r)).collect();
    let mut blocked: Vec<serde_json::Value> = v
        .blocked
        .iter()
        .map(|b| {
            let r = rates.get(b.prefix.as_str());
            let tier = match (r, hw) {
                (Some(r), Some(hw)) if r.in_hw => hw,
                _ => host,
            };
            serde_json::json!({
                "prefix": b.prefix,
                "pps": r.map_or(0.0, |r| r.pps),
                "tier": tier,
                "detector": b.detector,
                "reason": b.reason,
                "since": b.since,
            })
        })
        .collect();
    let pps = |x: &serde_json::Value| x["pps"].as_f64().unwrap_or(0.0);
    blocked.sort_by(|a, b| pps(b).total_cmp(&pps(a)));
    blocked.truncate(100);
    let tiers: Vec<serde_json::Value> = v
        .tiers
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.info.name, "role": t.info.role, "location": t.info.location,
                "capacity": t.info.capacity, "rules": t.rules,
                "dropped_packets": t.dropped_packets, "emulated": t.info.emulated,
            })
        })
        .collect();
    let dropped = v.counters.dropped();
    serde_json::json!({
        "mode": v.mode,
        "interval_s": v.interval_s,
        "intervals": v.intervals,
        "under_attack": v.under_attack,
        "traffic": {
            "nic_dropped": traffic[0], "xdp_dropped": traffic[1], "policed": traffic[2],
            "cookies": traffic[3], "passed": traffic[4],
        },
        "dropped_packets_total": dropped.packets,
        "dropped_bytes_total": dropped.bytes,
        "blocked_count": v.blocked.len(),
        "blocked": blocked,
        "policed": v.policed.len(),
        "tiers": tiers,
        "victims": v.victims,
        "threshold": v.threshold,
    })
}

/// The daemon as a service of the shell.
pub fn service(h: &Handle, tokens: Tokens) -> Service {
    let view = h.view.clone();
    Service {
        name: "rampart-ddosd",
        title: "rampart ddos",
        version: env!("CARGO_PKG_VERSION"),
        description:
            "The DDoS mitigation daemon: blocked sources, whitelist, per-source rates, tiers.",
        routes: routes(ApiState::of(h)),
        metrics: h.metrics.registry.clone(),
        tokens,
        apps: Apps::none()
            .with(App::Ddos, move || {
                view.read()
                    .map(|v| panel(&v))
                    .unwrap_or(serde_json::Value::Null)
            })
            .with_alerts(h.alerts.clone()),
    }
}

/// Start the API of `h` as `cfg` says (`[server]`).
///
/// # Errors
/// An unreadable token file, a bad or busy address, an address beyond
/// loopback without tokens.
pub fn start(h: &Handle, cfg: &rampart_service::ServerConfig) -> crate::Result<Server> {
    let tokens = Tokens::from_file(cfg.token_file.as_deref())
        .map_err(|e| crate::Error::Config(e.to_string()))?;
    Server::start(cfg, service(h, tokens)).map_err(|e| crate::Error::Config(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_errors_map_to_status_and_code() {
        let p = Prefix::parse("192.0.2.7").unwrap();
        for (e, status, code) in [
            (CommandError::Whitelisted(p), 409, "conflict"),
            (CommandError::AlreadyBlocked(p), 409, "conflict"),
            (CommandError::NotBlocked(p), 404, "not_found"),
            (CommandError::NotWhitelisted(p), 404, "not_found"),
            (CommandError::Stopped, 503, "unavailable"),
            (
                CommandError::Failed(crate::Error::Command("ipset failed".into())),
                500,
                "internal",
            ),
        ] {
            let a = e.to_api_error();
            assert_eq!((a.status().as_u16(), a.code()), (status, code), "{e}");
            assert_eq!(a.message(), e.to_string());
        }
    }

    /// Routes only: no daemon behind them (503s are answers too).
    fn router() -> (axum::Router, utoipa::openapi::OpenApi) {
        let st = ApiState {
            view: Arc::new(RwLock::new(View::default())),
            owner: OwnerHandle::disconnected(),
        };
        let mut svc = Service {
            name: "t",
            title: "t",
            version: "0",
            description: "t",
            routes: routes(st),
            metrics: rampart_service::Metrics::new(),
            tokens: Tokens::none(),
            apps: Apps::none(),
        };
        let auth = rampart_service::auth::AuthState {
            tokens: Arc::new(Tokens::parse("test-token-1").unwrap()).into(),
            loopback: true,
        };
        rampart_service::server::build(&mut svc, true, auth)
    }

    #[test]
    fn every_route_is_in_the_openapi_document() {
        let (router, doc) = router();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let problems = rt.block_on(rampart_service::testing::undocumented_routes(
            router,
            &doc,
            "test-token-1",
        ));
        assert!(problems.is_empty(), "{problems:#?}");
        let paths: Vec<&str> = doc.paths.paths.keys().map(String::as_str).collect();
        for p in [
            "/v1/status",
            "/v1/blocked",
            "/v1/blocked/{prefix}",
            "/v1/whitelist",
            "/v1/whitelist/{prefix}",
            "/v1/rates",
            "/v1/tiers",
            "/metrics",
            "/healthz",
            "/v1/openapi.json",
        ] {
            assert!(paths.contains(&p), "{p} missing from {paths:?}");
        }
    }
}
