//! The web dashboard every daemon serves on its API listener, and the
//! routes it reads.
//!
//! - `GET /` → `/ui/`: one page (HTML, JS, CSS and the vendored uPlot
//!   chart library, all embedded in the binary: no CDN, works offline);
//!   the page and its assets hold no data and need no token;
//! - `GET /v1/apps`: which applications this daemon runs (the page shows
//!   one panel per application present);
//! - `GET /v1/dashboard`: everything the page shows, now: each
//!   application's panel, the attacks, the latest alerts;
//! - `GET /v1/events`: the same as Server-Sent Events — a `snapshot`
//!   every second and an `alert` event for every alert as it is emitted;
//! - `GET /v1/alerts`, `GET /v1/attacks`: the latest alerts and the
//!   attacks (in progress first) from [`crate::alert::Alerts`].
//!
//! Data routes follow the API's token rules (open on loopback, a bearer
//! token elsewhere); the page asks for a token when the API answers 401
//! and sends it in the `Authorization` header (it reads the event stream
//! with `fetch`, not `EventSource`, which cannot send headers).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Query;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::alert::{Alert, Alerts, App, Attack};
use crate::auth::Principal;
use crate::error::{ApiError, ErrorKind};

type PanelFn = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;
type PresentFn = Arc<dyn Fn() -> bool + Send + Sync>;
type RefuseFn = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// One application's panel: whether it runs now (a reload can start or
/// stop it) and the function that reads it.
#[derive(Clone)]
struct Panel {
    app: App,
    present: Option<PresentFn>,
    read: PanelFn,
}

impl Panel {
    fn present(&self) -> bool {
        self.present.as_ref().is_none_or(|f| f())
    }
}

/// The applications a daemon runs: each with the function that reads its
/// dashboard panel (called on a blocking thread at every snapshot), and
/// the daemon's alerts.
#[derive(Clone, Default)]
pub struct Apps {
    panels: Vec<Panel>,
    alerts: Option<Alerts>,
    /// Token names refused the dashboard's data (a tenant's token on a
    /// daemon that also runs other tenants).
    refused: Option<RefuseFn>,
}

type Who = Option<Extension<Principal>>;

fn who(w: &Who) -> Option<&Principal> {
    w.as_ref().map(|Extension(p)| p)
}

impl std::fmt::Debug for Apps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Apps").field("apps", &self.names()).finish()
    }
}

impl Apps {
    /// No application (a daemon without a dashboard panel).
    pub fn none() -> Self {
        Self::default()
    }

    /// Add application `app`, whose panel `panel` reads (a JSON object;
    /// the page knows each application's fields).
    #[must_use]
    pub fn with(
        mut self,
        app: App,
        panel: impl Fn() -> serde_json::Value + Send + Sync + 'static,
    ) -> Self {
        self.panels.push(Panel {
            app,
            present: None,
            read: Arc::new(panel),
        });
        self
    }

    /// Add application `app` while `present()` says it runs (a stage a
    /// reload turns on and off): absent, it is not listed and has no panel.
    #[must_use]
    pub fn with_while(
        mut self,
        app: App,
        present: impl Fn() -> bool + Send + Sync + 'static,
        panel: impl Fn() -> serde_json::Value + Send + Sync + 'static,
    ) -> Self {
        self.panels.push(Panel {
            app,
            present: Some(Arc::new(present)),
            read: Arc::new(panel),
        });
        self
    }

    /// The daemon's alerts (attacks and latest alerts on the page).
    #[must_use]
    pub fn with_alerts(mut self, a: Alerts) -> Self {
        self.alerts = Some(a);
        self
    }

    /// Refuse the dashboard's data to tokens whose name `refused` says
    /// (a tenant's token: the page shows every tenant and the host's
    /// traffic, which a tenant's own routes never do).
    #[must_use]
    pub fn refusing(mut self, refused: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.refused = Some(Arc::new(refused));
        self
    }

    /// Is `name` a token name this daemon refuses beyond its tenant
    /// routes (a tenant's, under `rampart run`)?
    pub fn refuses(&self, name: &str) -> bool {
        self.refused.as_ref().is_some_and(|f| f(name))
    }

    /// May `who` read the dashboard's data?
    fn check(&self, who: Option<&Principal>) -> Result<(), ApiError> {
        let name = who.and_then(|p| p.name.as_deref());
        match (name, &self.refused) {
            (Some(n), Some(f)) if f(n) => Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!(
                    "token {n:?} is a tenant's: the dashboard shows every tenant and the host's traffic, \
                     so it needs an operator's token (a tenant reads its own routes under /tenant/v1/)"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The applications present (running now).
    pub fn names(&self) -> Vec<App> {
        self.panels
            .iter()
            .filter(|p| p.present())
            .map(|p| p.app)
            .collect()
    }

    /// Everything the page shows, read now.
    pub fn snapshot(&self, alerts: usize) -> Snapshot {
        let mut panels = serde_json::Map::new();
        let mut apps = Vec::new();
        for p in self.panels.iter().filter(|p| p.present()) {
            panels.insert(p.app.name().into(), (p.read)());
            apps.push(p.app);
        }
        Snapshot {
            ts: crate::alert::unix_now(),
            host: hostname(),
            version: env!("CARGO_PKG_VERSION").into(),
            apps,
            panels,
            attacks: self
                .alerts
                .as_ref()
                .map(Alerts::attacks)
                .unwrap_or_default(),
            alerts: self
                .alerts
                .as_ref()
                .map(|a| a.recent(alerts))
                .unwrap_or_default(),
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `GET /v1/dashboard`: what the page shows.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Snapshot {
    /// Unix time of the reading (s).
    pub ts: f64,
    /// The host's name.
    pub host: String,
    /// rampart's version.
    pub version: String,
    /// Applications present.
    pub apps: Vec<App>,
    /// Each application's panel, by name (`ddos`, `stream`, `tenant`).
    #[schema(value_type = Object)]
    pub panels: serde_json::Map<String, serde_json::Value>,
    /// Attacks in progress (newest first), then ended ones.
    pub attacks: Vec<Attack>,
    /// The latest alerts, oldest first.
    pub alerts: Vec<Alert>,
}

/// `GET /v1/apps`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AppsBody {
    /// Applications this daemon runs.
    pub apps: Vec<App>,
    /// rampart's version.
    pub version: String,
}

/// Alerts kept on the page.
const PAGE_ALERTS: usize = 50;

/// The stream's end: the server is shutting down.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown(pub(crate) tokio::sync::watch::Receiver<bool>);

#[utoipa::path(get, path = "/v1/apps", tag = "dashboard",
    responses((status = 200, description = "Applications this daemon runs", body = AppsBody)))]
pub(crate) async fn apps(
    Extension(apps): Extension<Apps>,
    w: Who,
) -> Result<Json<AppsBody>, ApiError> {
    apps.check(who(&w))?;
    Ok(Json(AppsBody {
        apps: apps.names(),
        version: env!("CARGO_PKG_VERSION").into(),
    }))
}

async fn snapshot_now(apps: Apps) -> Result<Snapshot, ApiError> {
    tokio::task::spawn_blocking(move || apps.snapshot(PAGE_ALERTS))
        .await
        .map_err(|e| ApiError::new(ErrorKind::Internal, format!("reading the dashboard: {e}")))
}

#[utoipa::path(get, path = "/v1/dashboard", tag = "dashboard",
    responses((status = 200, description = "Every panel, the attacks and the latest alerts, read now", body = Snapshot)))]
pub(crate) async fn dashboard(
    Extension(apps): Extension<Apps>,
    w: Who,
) -> Result<Json<Snapshot>, ApiError> {
    apps.check(who(&w))?;
    Ok(Json(snapshot_now(apps).await?))
}

/// `GET /v1/alerts?limit=N`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(crate) struct Limit {
    /// How many (the newest), default 100, at most 500.
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/alerts", tag = "dashboard", params(Limit),
    responses((status = 200, description = "The latest alerts, oldest first (docs/alerts.md)", body = Vec<Alert>)))]
pub(crate) async fn alerts(
    Extension(apps): Extension<Apps>,
    w: Who,
    Query(q): Query<Limit>,
) -> Result<Json<Vec<Alert>>, ApiError> {
    apps.check(who(&w))?;
    let n = q.limit.unwrap_or(100).min(500);
    Ok(Json(
        apps.alerts
            .as_ref()
            .map(|a| a.recent(n))
            .unwrap_or_default(),
    ))
}

#[utoipa::path(get, path = "/v1/attacks", tag = "dashboard",
    responses((status = 200, description = "Attacks in progress (newest first), then ended ones", body = Vec<Attack>)))]
pub(crate) async fn attacks(
    Extension(apps): Extension<Apps>,
    w: Who,
) -> Result<Json<Vec<Attack>>, ApiError> {
    apps.check(who(&w))?;
    Ok(Json(
        apps.alerts
            .as_ref()
            .map(Alerts::attacks)
            .unwrap_or_default(),
    ))
}

/// How often the event stream sends a snapshot.
const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);

struct Feed {
    apps: Apps,
    live: Option<tokio::sync::broadcast::Receiver<Arc<Alert>>>,
    tick: tokio::time::Interval,
    stop: tokio::sync::watch::Receiver<bool>,
}

fn json_event(kind: &str, v: &impl Serialize) -> Event {
    Event::default()
        .event(kind)
        .data(serde_json::to_string(v).unwrap_or_default())
}

async fn next_event(f: Feed) -> Option<(Result<Event, Infallible>, Feed)> {
    let Feed {
        apps,
        mut live,
        mut tick,
        mut stop,
    } = f;
    if *stop.borrow() {
        return None;
    }
    let ev = tokio::select! {
        _ = tick.tick() => match snapshot_now(apps.clone()).await {
            Ok(s) => json_event("snapshot", &s),
            Err(e) => json_event("error", &e.message()),
        },
        a = async {
            match live.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        } => match a {
            Ok(a) => json_event("alert", &*a),
            // Fell behind: the next snapshot carries the latest alerts.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => json_event("lagged", &n),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                live = None;
                Event::default().comment("alerts closed")
            }
        },
        () = async {
            // No sender (a router built without a server): never stops.
            if stop.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        } => return None,
    };
    Some((
        Ok(ev),
        Feed {
            apps,
            live,
            tick,
            stop,
        },
    ))
}

#[utoipa::path(get, path = "/v1/events", tag = "dashboard",
    responses((status = 200, description = "Server-Sent Events: `snapshot` (the /v1/dashboard object) every second, \
        `alert` (one alert) as each is emitted", content_type = "text/event-stream", body = String)))]
pub(crate) async fn events(
    Extension(apps): Extension<Apps>,
    Extension(Shutdown(stop)): Extension<Shutdown>,
    w: Who,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>, ApiError> {
    apps.check(who(&w))?;
    let mut tick = tokio::time::interval(SNAPSHOT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let feed = Feed {
        live: apps.alerts.as_ref().map(Alerts::subscribe),
        apps,
        tick,
        stop,
    };
    Ok(Sse::new(futures_util::stream::unfold(feed, next_event)).keep_alive(KeepAlive::default()))
}

/// The page's files, embedded in the binary.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../ui/style.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/vendor/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../ui/vendor/uPlot.min.css"),
    ),
    (
        "uPlot.LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("../ui/vendor/uPlot.LICENSE"),
    ),
];

fn asset(name: &str) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, ct, body)) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, *ct),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *body,
        )
            .into_response(),
        None => ApiError::new(
            ErrorKind::NotFound,
            format!(
                "no dashboard file {name:?}: the files are {}",
                ASSETS
                    .iter()
                    .map(|(n, _, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .into_response(),
    }
}

#[utoipa::path(get, path = "/", tag = "dashboard",
    responses((status = 303, description = "To the dashboard, /ui/")))]
pub(crate) async fn root() -> Redirect {
    Redirect::to("/ui/")
}

#[utoipa::path(get, path = "/ui/", tag = "dashboard",
    responses((status = 200, description = "The dashboard page", content_type = "text/html", body = String)))]
pub(crate) async fn page() -> Response {
    asset("index.html")
}

#[utoipa::path(get, path = "/ui/{file}", tag = "dashboard",
    params(("file" = String, Path, description = "app.js, style.css, uPlot.iife.min.js, uPlot.min.css, uPlot.LICENSE")),
    responses((status = 200, description = "A file of the page"),
        (status = 404, description = "No such file", body = crate::ErrorBody)))]
pub(crate) async fn file(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    asset(&name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::{Action, EventType};

    #[test]
    fn snapshot_has_every_panel_attacks_and_alerts() {
        let al = Alerts::memory();
        let apps = Apps::none()
            .with(App::Ddos, || serde_json::json!({"dropped": 7}))
            .with(App::Tenant, || serde_json::json!({"tenants": []}))
            .with_alerts(al.clone());
        let mut a = Alert::rule(App::Ddos, "attack_start", "syn_flood", Action::Blocked);
        a.rampart.victim = Some("10.10.0.2".into());
        al.emit(a);
        al.emit(Alert::new(App::Ddos, EventType::Stats, "resume"));
        let s = apps.snapshot(10);
        assert_eq!(s.apps, vec![App::Ddos, App::Tenant]);
        assert_eq!(s.panels["ddos"]["dropped"], 7);
        assert!(s.panels.contains_key("tenant"));
        assert_eq!(s.attacks.len(), 1);
        assert_eq!(s.attacks[0].victim.as_deref(), Some("10.10.0.2"));
        assert_eq!(s.alerts.len(), 2);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["apps"][0], "ddos");
    }

    #[test]
    fn a_refused_token_name_cannot_read_the_data() {
        let apps = Apps::none().refusing(|n| n == "acme");
        let p = |n: Option<&str>| Principal {
            name: n.map(String::from),
        };
        let e = apps.check(Some(&p(Some("acme")))).unwrap_err();
        assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
        assert!(e.message().contains("operator's token"), "{}", e.message());
        assert!(apps.check(Some(&p(Some("admin")))).is_ok());
        assert!(apps.check(Some(&p(None))).is_ok());
        assert!(apps.check(None).is_ok());
        assert!(Apps::none().check(Some(&p(Some("acme")))).is_ok());
    }

    #[test]
    fn an_application_turned_off_has_no_panel() {
        let on = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = on.clone();
        let apps = Apps::none()
            .with(App::Ddos, || serde_json::json!({}))
            .with_while(
                App::Stream,
                move || flag.load(std::sync::atomic::Ordering::Relaxed),
                || serde_json::json!({"open": 1}),
            );
        assert_eq!(apps.names(), vec![App::Ddos]);
        let s = apps.snapshot(1);
        assert_eq!(s.apps, vec![App::Ddos]);
        assert!(!s.panels.contains_key("stream"));
        on.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(apps.names(), vec![App::Ddos, App::Stream]);
        assert_eq!(apps.snapshot(1).panels["stream"]["open"], 1);
    }

    #[test]
    fn every_asset_is_served_and_the_page_loads_only_embedded_files() {
        for (n, _, body) in ASSETS {
            assert!(!body.is_empty(), "{n}");
        }
        let page = std::str::from_utf8(ASSETS[0].2).unwrap();
        for (n, _, _) in &ASSETS[1..5] {
            assert!(
                page.contains(&format!("/ui/{n}")),
                "index.html does not load {n}"
            );
        }
        // Offline: nothing is fetched from elsewhere.
        for (n, _, body) in &ASSETS[..3] {
            let text = std::str::from_utf8(body).unwrap();
            assert!(
                !text.contains("http://") && !text.contains("https://"),
                "{n} loads from outside"
            );
        }
        let r = asset("nope.js");
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }
}
