//! The HTTP server every daemon runs: axum on a tokio runtime of its own,
//! the daemon's documented routes plus the shell's (`/healthz`,
//! `/metrics`, `/v1/openapi.json`), token auth, JSON errors for unknown
//! routes and methods, and a graceful shutdown.
//!
//! Routes are added only through [`Routes::routes`] with handlers
//! annotated `#[utoipa::path]` (utoipa-axum's `routes!`): a route cannot be
//! served without being in the OpenAPI document.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use axum::{middleware, Extension, Router};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{OpenApi, PathItem};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use crate::auth::{require_token, AuthState, Tokens};
use crate::config::{ConfigError, ServerConfig};
use crate::dashboard::{self, Apps, Shutdown};
use crate::error::{ApiError, ErrorKind};
use crate::metrics::Metrics;
use crate::reload::{Reloader, ServerSide};

/// A daemon's documented routes.
pub struct Routes<S = ()>(OpenApiRouter<S>);

impl<S> std::fmt::Debug for Routes<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Routes")
    }
}

impl<S: Send + Sync + Clone + 'static> Default for Routes<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Send + Sync + Clone + 'static> Routes<S> {
    /// No routes yet.
    pub fn new() -> Self {
        Self(OpenApiRouter::new())
    }

    /// Add the handlers of one path (`utoipa_axum::routes!(get_x, post_x)`).
    #[must_use]
    pub fn routes(self, r: UtoipaMethodRouter<S>) -> Self {
        Self(self.0.routes(r))
    }

    /// Serve `other` (another application's routes) under `prefix`
    /// (`/ddos`): one server for several applications, each path in the
    /// OpenAPI document with its prefix.
    #[must_use]
    pub fn nest(self, prefix: &str, other: Self) -> Self {
        Self(self.0.nest(prefix, other.0))
    }

    /// Give the handlers their state.
    pub fn with_state(self, state: S) -> Routes<()> {
        Routes(self.0.with_state(state))
    }
}

impl Routes<()> {
    /// Serve `slot` under `prefix` (`/tenant`), documenting `doc`'s paths
    /// (the routes the slot holds when the application runs, before their
    /// state): for an application a reload can start and stop ([`RouteSlot`]).
    #[must_use]
    pub fn nest_slot<D: Send + Sync + Clone + 'static>(
        self,
        prefix: &str,
        doc: Routes<D>,
        slot: &RouteSlot,
    ) -> Self {
        let (_, api) = doc.0.split_for_parts();
        // Only the document: an empty router nested adds no route.
        let documented = OpenApiRouter::new().nest(prefix, OpenApiRouter::with_openapi(api));
        let slot = slot.clone();
        let svc = tower::service_fn(move |req: Request| {
            let (router, off) = (slot.get(), slot.off.clone());
            async move {
                use tower::ServiceExt;
                Ok::<_, std::convert::Infallible>(match router {
                    Some(r) => r.oneshot(req).await.into_response(),
                    None => ApiError::new(ErrorKind::Unavailable, &*off).into_response(),
                })
            }
        });
        Self(self.0.merge(documented).nest_service(prefix, svc))
    }
}

/// The routes of an application that a reload starts and stops while the
/// server runs (`rampart run` turning a stage on or off). Its paths stay in
/// the OpenAPI document; while it is empty they answer 503 with the line
/// given at [`RouteSlot::new`], which says how to turn the application on.
#[derive(Clone)]
pub struct RouteSlot {
    router: Arc<std::sync::RwLock<Option<Router>>>,
    off: Arc<str>,
}

impl std::fmt::Debug for RouteSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteSlot")
            .field("on", &self.get().is_some())
            .finish()
    }
}

impl RouteSlot {
    /// An empty slot; `off` is the answer while it stays empty.
    pub fn new(off: &str) -> Self {
        Self {
            router: Arc::default(),
            off: off.into(),
        }
    }

    /// Serve `routes` from now on (`None`: answer `off`).
    pub fn set(&self, routes: Option<Routes>) {
        let r = routes.map(|r| {
            let (router, _) = r.0.split_for_parts();
            router.fallback(|req: Request| async move {
                ApiError::new(
                    ErrorKind::NoRoute,
                    format!(
                        "no route {} {}: GET /v1/openapi.json lists the routes",
                        req.method(),
                        req.uri().path()
                    ),
                )
            })
        });
        match self.router.write() {
            Ok(mut g) => *g = r,
            Err(p) => *p.into_inner() = r,
        }
    }

    fn get(&self) -> Option<Router> {
        match self.router.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

/// What a daemon serves.
#[derive(Debug)]
pub struct Service {
    /// Name of the threads (`rampart-ddos` → `rampart-ddos-api`).
    pub name: &'static str,
    /// Title of the OpenAPI document.
    pub title: &'static str,
    /// Version of the API (the daemon crate's version).
    pub version: &'static str,
    /// One paragraph on what the API is for.
    pub description: &'static str,
    /// The daemon's routes.
    pub routes: Routes,
    /// The daemon's registry.
    pub metrics: Metrics,
    /// Accepted tokens ([`Tokens::from_file`] of `server.token_file`).
    pub tokens: Tokens,
    /// The applications it runs and its alerts: the dashboard (`/ui/`)
    /// and its routes ([`crate::dashboard`]).
    pub apps: Apps,
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Bad `[server]` settings.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An address that cannot be bound.
    #[error("binding {addr} ({key}): {err}")]
    Bind {
        /// `server.listen` or `server.metrics_listen`.
        key: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error: in the message once, deliberately not a `source()`
        /// (a printed chain would repeat it).
        err: std::io::Error,
    },
    /// The async runtime could not start (the OS error in the message only).
    #[error("starting the API runtime: {0}")]
    Runtime(std::io::Error),
}

#[utoipa::path(get, path = "/healthz", tag = "service",
    responses((status = 200, description = "The daemon is up: `ok`", content_type = "text/plain", body = String)))]
async fn healthz() -> &'static str {
    "ok\n"
}

#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text format, read from the daemon's state now",
        content_type = "text/plain; version=0.0.4", body = String)))]
async fn metrics(Extension(m): Extension<Metrics>) -> Response {
    match tokio::task::spawn_blocking(move || m.render()).await {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        Err(e) => {
            ApiError::new(ErrorKind::Internal, format!("collecting metrics: {e}")).into_response()
        }
    }
}

/// What `POST /v1/reload` did.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Reloaded {
    /// One line: what changed.
    pub message: String,
    /// Reloads applied since the daemon started.
    pub reloads: u64,
}

#[utoipa::path(post, path = "/v1/reload", tag = "service",
    responses(
        (status = 200, description = "The configuration file was re-read and applied", body = Reloaded),
        (status = 422, description = "The new configuration was refused (the running one stays): why", body = crate::ErrorBody)))]
async fn reload(
    r: Option<Extension<Reloader>>,
    who: Option<Extension<crate::Principal>>,
) -> Response {
    let Some(Extension(r)) = r else {
        return ApiError::new(
            ErrorKind::Refused,
            "this daemon cannot reload its configuration: restart it",
        )
        .into_response();
    };
    let who = who.and_then(|Extension(p)| p.name).map_or_else(
        || "POST /v1/reload".to_string(),
        |n| format!("POST /v1/reload by {n}"),
    );
    let r2 = r.clone();
    match tokio::task::spawn_blocking(move || r2.reload(&who)).await {
        Ok(Ok(message)) => axum::Json(Reloaded {
            message,
            reloads: r.reloads(),
        })
        .into_response(),
        Ok(Err(e)) => ApiError::new(ErrorKind::Refused, e).into_response(),
        Err(e) => ApiError::new(ErrorKind::Internal, format!("reloading: {e}")).into_response(),
    }
}

type DocCell = Arc<OnceLock<String>>;

#[utoipa::path(get, path = "/v1/openapi.json", tag = "service",
    responses((status = 200, description = "This document (OpenAPI 3.1)", content_type = "application/json")))]
async fn openapi_json(Extension(doc): Extension<DocCell>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        doc.get().cloned().unwrap_or_default(),
    )
        .into_response()
}

fn operations(item: &mut PathItem) -> [(Method, Option<&mut utoipa::openapi::path::Operation>); 5] {
    [
        (Method::GET, item.get.as_mut()),
        (Method::PUT, item.put.as_mut()),
        (Method::POST, item.post.as_mut()),
        (Method::DELETE, item.delete.as_mut()),
        (Method::PATCH, item.patch.as_mut()),
    ]
}

/// The methods documented for each path, `(path, [GET, POST, …])`.
pub fn documented(doc: &OpenApi) -> Vec<(String, Vec<Method>)> {
    let mut out = Vec::new();
    for (path, item) in &doc.paths.paths {
        let mut item = item.clone();
        let ms: Vec<Method> = operations(&mut item)
            .into_iter()
            .filter_map(|(m, op)| op.map(|_| m))
            .collect();
        out.push((path.clone(), ms));
    }
    out
}

fn finish_doc(doc: &mut OpenApi, svc: &Service) {
    doc.info.title = svc.title.into();
    doc.info.version = svc.version.into();
    doc.info.description = Some(format!(
        "{}\n\nErrors are `{{\"error\": {{\"code\", \"message\", \"details\"?}}}}` with a 4xx/5xx status. \
         Changes (every method but GET) need `Authorization: Bearer <token>` (tokens from the daemon's \
         server.token_file); reads need one too unless the API listens on loopback.",
        svc.description
    ));
    doc.info.license = None;
    let components = doc
        .components
        .get_or_insert_with(utoipa::openapi::Components::new);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    for item in doc.paths.paths.values_mut() {
        for (m, op) in operations(item) {
            if let Some(op) = op {
                let bearer = SecurityRequirement::new("bearer", Vec::<String>::new());
                op.security = Some(if m == Method::GET {
                    // optional on loopback
                    vec![SecurityRequirement::default(), bearer]
                } else {
                    vec![bearer]
                });
            }
        }
    }
}

fn no_route_message(paths: &[String]) -> String {
    format!(
        "no such endpoint: the routes are {} (GET /v1/openapi.json describes them)",
        paths.join(", ")
    )
}

/// `rampart_build_info{version, daemon} 1` in the daemon's registry
/// (once: a registry served twice keeps the first).
fn register_build_info(svc: &Service) {
    let g = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "rampart_build_info",
            "rampart's version and the daemon serving these metrics (always 1)",
        ),
        &["version", "daemon"],
    );
    if let Ok(g) = g {
        g.with_label_values(&[env!("CARGO_PKG_VERSION"), svc.name])
            .set(1);
        // Already registered: the same daemon's registry served again.
        let _ = svc.metrics.register(g);
    }
}

/// The API router and its OpenAPI document. `metrics_here`: serve
/// `/metrics` on this router (no `server.metrics_listen`).
pub fn build(svc: &mut Service, metrics_here: bool, auth: AuthState) -> (Router, OpenApi) {
    // A sender nobody keeps: event streams end only with their client.
    let (_, rx) = tokio::sync::watch::channel(false);
    build_with(svc, metrics_here, auth, rx)
}

fn build_with(
    svc: &mut Service,
    metrics_here: bool,
    auth: AuthState,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (Router, OpenApi) {
    register_build_info(svc);
    let routes = std::mem::take(&mut svc.routes);
    let mut r = OpenApiRouter::new()
        .merge(routes.0)
        .routes(routes!(healthz))
        .routes(routes!(openapi_json))
        .routes(routes!(dashboard::root))
        .routes(routes!(dashboard::page))
        .routes(routes!(dashboard::file))
        .routes(routes!(dashboard::apps))
        .routes(routes!(dashboard::dashboard))
        .routes(routes!(dashboard::events))
        .routes(routes!(dashboard::alerts))
        .routes(routes!(dashboard::attacks))
        .routes(routes!(reload));
    if metrics_here {
        r = r.routes(routes!(metrics));
    }
    let (router, mut doc) = r.split_for_parts();
    finish_doc(&mut doc, svc);
    let cell: DocCell = Arc::new(OnceLock::new());
    let _ = cell.set(doc.to_pretty_json().unwrap_or_default());
    let paths: Vec<String> = doc.paths.paths.keys().cloned().collect();
    let msg = Arc::new(no_route_message(&paths));
    let router = router
        .fallback({
            let msg = msg.clone();
            move || async move { ApiError::new(ErrorKind::NoRoute, msg.as_str()) }
        })
        .method_not_allowed_fallback(|req: Request| async move {
            ApiError::new(
                ErrorKind::MethodNotAllowed,
                format!(
                    "{} is not served on {}: GET /v1/openapi.json lists the methods of each route",
                    req.method(),
                    req.uri().path()
                ),
            )
        })
        .layer(Extension(cell))
        .layer(Extension(svc.metrics.clone()))
        .layer(Extension(svc.apps.clone()))
        .layer(Extension(Shutdown(stop)))
        .layer(middleware::from_fn_with_state(
            svc.apps.clone(),
            confine_tenants,
        ))
        .layer(middleware::from_fn_with_state(auth, require_token));
    (router, doc)
}

/// A tenant's token (a name the daemon's [`Apps`] refuses: `rampart run`
/// with a `[tenant]` section) reaches the tenant routes only. Without
/// this, one daemon for every application would let a tenant block
/// sources, read the host's flows or reload the daemon.
async fn confine_tenants(
    axum::extract::State(apps): axum::extract::State<Apps>,
    req: Request,
    next: middleware::Next,
) -> Response {
    let path = req.uri().path();
    let open = path == "/healthz" || path == "/" || path.starts_with("/ui/");
    let tenant = req
        .extensions()
        .get::<crate::Principal>()
        .and_then(|p| p.name.as_deref())
        .filter(|n| apps.refuses(n))
        .map(str::to_string);
    match tenant {
        Some(n) if !open && !path.starts_with("/tenant/") => ApiError::new(
            ErrorKind::Unauthorized,
            format!(
                "token {n:?} is a tenant's: it may use the tenant routes under /tenant/v1/ only; \
                 {path} needs an operator's token"
            ),
        )
        .into_response(),
        _ => next.run(req).await,
    }
}

/// The router of `server.metrics_listen`: `/metrics` and `/healthz`, no token.
pub fn metrics_router(m: Metrics) -> Router {
    let (router, _) = OpenApiRouter::new()
        .routes(routes!(metrics))
        .routes(routes!(healthz))
        .split_for_parts();
    router
        .fallback(|| async {
            ApiError::new(
                ErrorKind::NoRoute,
                "this listener serves GET /metrics and GET /healthz only",
            )
        })
        .layer(Extension(m))
}

/// A running server: its listeners on a tokio runtime of its own.
/// Dropping it shuts it down gracefully (requests in flight finish, up to 2 s).
pub struct Server {
    api_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    doc: OpenApi,
    shutdown: Option<tokio::sync::watch::Sender<bool>>,
    runtime: Option<tokio::runtime::Runtime>,
    reloader: Reloader,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("api_addr", &self.api_addr)
            .field("metrics_addr", &self.metrics_addr)
            .finish()
    }
}

fn bind(key: &'static str, addr: SocketAddr) -> Result<std::net::TcpListener, ServerError> {
    let l =
        std::net::TcpListener::bind(addr).map_err(|err| ServerError::Bind { key, addr, err })?;
    l.set_nonblocking(true)
        .map_err(|err| ServerError::Bind { key, addr, err })?;
    Ok(l)
}

impl Server {
    /// Bind the listeners of `cfg` and serve `svc`; returns once bound.
    ///
    /// # Errors
    /// Bad addresses, a non-loopback API without tokens, a busy address.
    pub fn start(cfg: &ServerConfig, mut svc: Service) -> Result<Self, ServerError> {
        cfg.validate()?;
        let api = cfg.api_addr()?;
        let maddr = cfg.metrics_addr()?;
        if let Some(a) = api {
            if !a.ip().is_loopback() && svc.tokens.is_empty() {
                return Err(ConfigError::invalid(format!(
                    "server.listen = \"{a}\" is not a loopback address and server.token_file lists no token: add one"
                ))
                .into());
            }
        }
        let api_l = api.map(|a| bind("server.listen", a)).transpose()?;
        let metrics_l = maddr
            .map(|a| bind("server.metrics_listen", a))
            .transpose()?;
        let local =
            |l: &Option<std::net::TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
        let (api_addr, metrics_addr) = (local(&api_l), local(&metrics_l));
        let auth = AuthState {
            tokens: Arc::new(std::mem::take(&mut svc.tokens)).into(),
            loopback: api.is_none_or(|a| a.ip().is_loopback()),
        };
        let (tx, rx) = tokio::sync::watch::channel(false);
        let reloader = Reloader::new(ServerSide::new(cfg.clone(), auth.tokens.clone()));
        let (router, doc) = build_with(&mut svc, metrics_l.is_none(), auth, rx.clone());
        let router = router.layer(Extension(reloader.clone()));
        if api_l.is_none() && metrics_l.is_none() {
            return Ok(Self {
                api_addr,
                metrics_addr,
                doc,
                shutdown: None,
                runtime: None,
                reloader,
            });
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name(format!("{}-api", svc.name))
            .build()
            .map_err(ServerError::Runtime)?;
        let serve =
            |l: std::net::TcpListener, app: Router, mut rx: tokio::sync::watch::Receiver<bool>| {
                let _guard = runtime.enter();
                let l = tokio::net::TcpListener::from_std(l).map_err(ServerError::Runtime)?;
                runtime.spawn(async move {
                    let r = axum::serve(l, app)
                        .with_graceful_shutdown(async move {
                            let _ = rx.wait_for(|stop| *stop).await;
                        })
                        .await;
                    if let Err(e) = r {
                        tracing::error!("API server: {e}");
                    }
                });
                Ok::<_, ServerError>(())
            };
        if let Some(l) = api_l {
            serve(l, router, rx.clone())?;
        }
        if let Some(l) = metrics_l {
            serve(l, metrics_router(svc.metrics.clone()), rx.clone())?;
        }
        Ok(Self {
            api_addr,
            metrics_addr,
            doc,
            shutdown: Some(tx),
            runtime: Some(runtime),
            reloader,
        })
    }

    /// Reload the daemon with `hook` on SIGHUP (while [`Server::wait`] or
    /// [`Server::run_until`] runs) and on `POST /v1/reload` (module
    /// [`crate::reload`]). From this call on, SIGHUP no longer ends the
    /// process.
    pub fn on_reload(
        &self,
        hook: impl Fn(&ServerSide) -> Result<String, String> + Send + Sync + 'static,
    ) {
        self.reloader.set(Box::new(hook));
    }

    /// What runs the reloads (their count, a reload from code).
    pub fn reloader(&self) -> &Reloader {
        &self.reloader
    }

    /// Serve until `cancel` is set, reloading on each SIGHUP.
    pub fn wait(&self, cancel: &AtomicBool) {
        while !cancel.load(Ordering::Relaxed) {
            if self.reloader.take_hup() {
                // The outcome is logged by the reloader.
                let _ = self.reloader.reload("SIGHUP");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The API's bound address (`None`: no API).
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api_addr
    }

    /// The metrics listener's bound address (`None`: metrics are on the API).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The OpenAPI document served at `/v1/openapi.json`.
    pub fn openapi(&self) -> &OpenApi {
        &self.doc
    }

    /// Serve until `cancel` is set (the binary wires SIGINT/SIGTERM to it),
    /// then shut down gracefully.
    pub fn run_until(self, cancel: &AtomicBool) {
        self.wait(cancel);
        self.stop();
    }

    /// Shut down gracefully.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(true);
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Block until `cancel` is set.
pub fn wait_until(cancel: &AtomicBool) {
    while !cancel.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;
    use crate::error::ApiJson;

    #[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
    #[serde(deny_unknown_fields)]
    struct Item {
        name: String,
    }
    impl crate::JsonBody for Item {
        const EXAMPLE: &'static str = r#"{"name": "a"}"#;
    }

    #[utoipa::path(get, path = "/v1/items", responses((status = 200, body = Vec<String>)))]
    async fn items() -> axum::Json<Vec<String>> {
        axum::Json(vec!["a".into()])
    }

    #[utoipa::path(post, path = "/v1/items", request_body = Item, responses((status = 200, body = String)))]
    async fn add(ApiJson(i): ApiJson<Item>) -> String {
        i.name
    }

    #[utoipa::path(delete, path = "/v1/items/{name}", params(("name" = String, Path)), responses((status = 200, body = String)))]
    async fn del(axum::extract::Path(name): axum::extract::Path<String>) -> String {
        name
    }

    fn service(tokens: &str) -> Service {
        let m = Metrics::new();
        let c = prometheus::IntCounter::new("t_requests_total", "t").unwrap();
        m.register(c).unwrap();
        Service {
            name: "rampart-test",
            title: "test",
            version: "0.0.0",
            description: "A test daemon.",
            routes: Routes::new()
                .routes(routes!(items, add))
                .routes(routes!(del)),
            metrics: m,
            tokens: Tokens::parse(tokens).unwrap(),
            apps: Apps::none(),
        }
    }

    fn http(addr: SocketAddr, req: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
        (
            code,
            out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string(),
        )
    }

    fn req(method: &str, path: &str, token: Option<&str>, body: &str) -> String {
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        format!(
            "{method} {path} HTTP/1.1\r\nHost: t\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn cfg(listen: &str, metrics: Option<&str>) -> ServerConfig {
        ServerConfig {
            listen: Some(listen.into()),
            metrics_listen: metrics.map(Into::into),
            token_file: None,
        }
    }

    #[test]
    fn every_served_route_is_documented() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut svc = service("tok-12345678\n");
        let auth = AuthState {
            tokens: Arc::new(std::mem::take(&mut svc.tokens)).into(),
            loopback: true,
        };
        let (router, doc) = build(&mut svc, true, auth);
        let paths: Vec<&String> = doc.paths.paths.keys().collect();
        for p in [
            "/healthz",
            "/metrics",
            "/v1/openapi.json",
            "/v1/items",
            "/v1/items/{name}",
        ] {
            assert!(paths.iter().any(|x| *x == p), "{p} not in {paths:?}");
        }
        let problems = rt.block_on(crate::testing::undocumented_routes(
            router,
            &doc,
            "tok-12345678",
        ));
        assert!(problems.is_empty(), "{problems:#?}");
        // Changes are marked as needing the bearer token.
        let json = doc.to_json().unwrap();
        assert!(json.contains("\"bearer\""), "{json}");
    }

    #[test]
    fn the_checker_sees_an_undocumented_method() {
        // A route whose handler answers every method, documented for GET only.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (_, doc) = OpenApiRouter::<()>::new()
            .routes(routes!(items))
            .split_for_parts();
        let router = Router::new().route("/v1/items", axum::routing::any(|| async { "x" }));
        let problems = rt.block_on(crate::testing::undocumented_routes(router, &doc, "t"));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("POST /v1/items is served")),
            "{problems:?}"
        );
    }

    #[test]
    fn api_over_tcp_auth_errors_and_openapi() {
        let dir = std::env::temp_dir().join(format!("rampart-service-srv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tf = dir.join("tokens");
        std::fs::write(&tf, "ops tok-12345678\n").unwrap();
        let mut c = cfg("127.0.0.1:0", None);
        c.token_file = Some(tf.clone());
        let mut svc = service("");
        svc.tokens = Tokens::from_file(c.token_file.as_deref()).unwrap();
        let s = Server::start(&c, svc).unwrap();
        let a = s.api_addr().unwrap();
        assert_eq!(
            http(a, &req("GET", "/healthz", None, "")),
            (200, "ok\n".into())
        );
        assert_eq!(
            http(a, &req("GET", "/v1/items", None, "")).0,
            200,
            "reads open on loopback"
        );
        let (code, body) = http(a, &req("POST", "/v1/items", None, r#"{"name": "b"}"#));
        assert_eq!(code, 401, "{body}");
        assert!(body.contains("\"code\":\"unauthorized\""), "{body}");
        let (code, body) = http(
            a,
            &req(
                "POST",
                "/v1/items",
                Some("tok-00000000"),
                r#"{"name": "b"}"#,
            ),
        );
        assert_eq!(code, 401);
        assert!(body.contains("unknown token"), "{body}");
        assert_eq!(
            http(
                a,
                &req(
                    "POST",
                    "/v1/items",
                    Some("tok-12345678"),
                    r#"{"name": "b"}"#
                )
            ),
            (200, "b".into())
        );
        let (code, body) = http(a, &req("POST", "/v1/items", Some("tok-12345678"), "{nope"));
        assert_eq!(code, 400);
        assert!(
            body.contains(r#"{\"name\": \"a\"}"#),
            "shows a good body: {body}"
        );
        assert_eq!(
            http(
                a,
                &req("DELETE", "/v1/items/10.0.0.0%2F8", Some("tok-12345678"), "")
            ),
            (200, "10.0.0.0/8".into()),
            "path parameters are URL-decoded"
        );
        let (code, body) = http(a, &req("GET", "/v1/nope", None, ""));
        assert_eq!(code, 404);
        assert!(
            body.contains("no_route") && body.contains("/v1/items"),
            "{body}"
        );
        let (code, body) = http(a, &req("PUT", "/v1/items", Some("tok-12345678"), ""));
        assert_eq!(code, 405);
        assert!(body.contains("method_not_allowed"), "{body}");
        let (code, body) = http(a, &req("GET", "/metrics", None, ""));
        assert_eq!(code, 200);
        assert!(body.contains("t_requests_total 0"), "{body}");
        let (code, body) = http(a, &req("GET", "/v1/openapi.json", None, ""));
        assert_eq!(code, 200);
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["info"]["title"], "test");
        assert!(
            doc["paths"]["/v1/items/{name}"]["delete"].is_object(),
            "{doc}"
        );
        s.stop();
        assert!(std::net::TcpStream::connect(a).is_err(), "stopped");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reload_needs_a_token_and_a_hook() {
        let dir = std::env::temp_dir().join(format!("rampart-service-rl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tf = dir.join("tokens");
        std::fs::write(&tf, "ops tok-12345678\n").unwrap();
        let mut c = cfg("127.0.0.1:0", None);
        c.token_file = Some(tf.clone());
        let mut svc = service("");
        svc.tokens = Tokens::from_file(c.token_file.as_deref()).unwrap();
        let s = Server::start(&c, svc).unwrap();
        let a = s.api_addr().unwrap();
        let (code, _) = http(a, &req("POST", "/v1/reload", None, ""));
        assert_eq!(code, 401, "a reload is a change");
        let tok = Some("tok-12345678");
        let (code, body) = http(a, &req("POST", "/v1/reload", tok, ""));
        assert_eq!(code, 422, "{body}");
        assert!(body.contains("cannot reload"), "{body}");
        // The hook swaps the tokens through the server side.
        let c2 = c.clone();
        s.on_reload(move |side| {
            let t = Tokens::parse("ops tok-87654321\n").unwrap();
            side.check(&c2, &t)?;
            side.commit(c2.clone(), t);
            Ok("tokens replaced".into())
        });
        let (code, body) = http(a, &req("POST", "/v1/reload", tok, ""));
        assert_eq!(code, 200, "{body}");
        assert!(
            body.contains("tokens replaced") && body.contains("\"reloads\":1"),
            "{body}"
        );
        let (code, _) = http(a, &req("POST", "/v1/reload", tok, ""));
        assert_eq!(code, 401, "the old token is gone");
        s.stop();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn metrics_on_a_listener_of_their_own() {
        let s = Server::start(&cfg("127.0.0.1:0", Some("127.0.0.1:0")), service("")).unwrap();
        let (a, m) = (s.api_addr().unwrap(), s.metrics_addr().unwrap());
        assert_ne!(a, m);
        let (code, body) = http(m, &req("GET", "/metrics", None, ""));
        assert_eq!(code, 200);
        assert!(body.contains("t_requests_total"), "{body}");
        assert_eq!(http(m, &req("GET", "/healthz", None, "")).0, 200);
        assert_eq!(
            http(m, &req("GET", "/v1/items", None, "")).0,
            404,
            "no API there"
        );
        assert_eq!(
            http(a, &req("GET", "/metrics", None, "")).0,
            404,
            "metrics left the API"
        );
        // Without tokens, changes are refused with the fix.
        let (code, body) = http(a, &req("POST", "/v1/items", None, r#"{"name": "b"}"#));
        assert_eq!(code, 401);
        assert!(body.contains("server.token_file"), "{body}");
    }

    #[test]
    fn refuses_to_listen_beyond_loopback_without_tokens() {
        let e = Server::start(&cfg("0.0.0.0:0", None), service(""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("server.listen") && e.contains("server.token_file"),
            "{e}"
        );
        let mut c = cfg("0.0.0.0:0", None);
        c.token_file = Some("/dev/null".into());
        let e = Server::start(&c, service("")).unwrap_err().to_string();
        assert!(e.contains("lists no token"), "{e}");
        let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = Server::start(
            &cfg(&busy.local_addr().unwrap().to_string(), None),
            service(""),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("server.listen") && e.contains("in use"), "{e}");
    }
}
