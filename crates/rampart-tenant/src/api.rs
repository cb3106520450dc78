//! The tenant HTTP API (`rampart tenant serve`) and Prometheus metrics.
//!
//! Every `/v1` request carries `Authorization: Bearer <token>`; the token
//! names the tenant, and every route acts on that tenant only — there is
//! no route that takes a tenant name, so a tenant cannot see or change
//! another tenant's program, selectors, maps or statistics.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | /v1/tenant | the caller: selectors, ports, weight, program status |
//! | GET / PUT / DELETE | /v1/program | status / submit or replace (body: C source or BPF object) / remove |
//! | GET / PUT | /v1/selectors | list / replace (body: JSON array of selectors) |
//! | GET | /v1/stats | packets, bytes, verdicts, drops by reason, CPU ns, tokens |
//! | GET | /v1/maps, /v1/maps/{map} | the caller's maps / entries (hex) |
//! | PUT | /v1/maps/{map} | set an entry: `{"key": hex, "value": hex}` |
//! | DELETE | /v1/maps/{map}/{key} | delete an entry (key in hex) |
//! | GET | /metrics | Prometheus, all tenants (operator endpoint, no token) |
//! | GET | /healthz | liveness |

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::json;

use crate::agent::AgentHandle;
use crate::compiler::{Compiler, Submission};
use crate::error::Error;
use crate::host::{HostAgent, ProgramInfo};
use crate::selector::Selector;

/// Shared state of the HTTP server.
#[derive(Debug)]
pub struct ApiState {
    /// The host agent.
    pub agent: AgentHandle,
    /// The compiler agent.
    pub compiler: Compiler,
}

/// An error as the API returns it.
#[derive(Debug)]
pub struct ApiError(Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (code, body) = match &self.0 {
            Error::Invalid(m) => (
                StatusCode::BAD_REQUEST,
                json!({"error": "invalid", "message": m}),
            ),
            Error::NotFound(m) => (
                StatusCode::NOT_FOUND,
                json!({"error": "not_found", "message": m}),
            ),
            Error::Conflict(m) => (
                StatusCode::CONFLICT,
                json!({"error": "conflict", "message": m}),
            ),
            Error::Refused { reason } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"error": "refused", "message": format!("program refused: {reason}"), "reason": reason}),
            ),
            Error::Compile { stderr } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"error": "compile", "message": "compilation failed", "compiler": stderr}),
            ),
            Error::Verifier { summary, log } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"error": "verifier", "message": format!("the kernel verifier rejected the program: {summary}"),
                       "verifier_log": log}),
            ),
            other => (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": "internal", "message": other.to_string()}),
            ),
        };
        (code, Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The authenticated tenant of a request.
#[derive(Debug, Clone, Copy)]
pub struct Tenant(pub u32);

impl FromRequestParts<Arc<ApiState>> for Tenant {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Self::Rejection> {
        let unauthorized = |m: &str| {
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                Json(json!({"error": "unauthorized", "message": m})),
            )
                .into_response()
        };
        let Some(h) = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Err(unauthorized("missing Authorization: Bearer <token>"));
        };
        let Some(token) = h.strip_prefix("Bearer ").map(str::trim) else {
            return Err(unauthorized("Authorization must be `Bearer <token>`"));
        };
        let token = token.to_string();
        match state.agent.run(move |a| a.authenticate(&token)).await {
            Ok(Some(id)) => Ok(Tenant(id)),
            Ok(None) => Err(unauthorized("unknown token")),
            Err(e) => Err(ApiError(e).into_response()),
        }
    }
}

/// The router.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .route("/v1/tenant", get(tenant_info))
        .route(
            "/v1/program",
            get(program_get).put(program_put).delete(program_delete),
        )
        .route("/v1/selectors", get(selectors_get).put(selectors_put))
        .route("/v1/stats", get(stats_get))
        .route("/v1/maps", get(maps_list))
        .route("/v1/maps/{map}", get(map_dump).put(map_set))
        .route("/v1/maps/{map}/{key}", delete(map_delete))
        .with_state(state)
}

#[derive(Debug, Serialize)]
struct TenantView {
    name: String,
    id: u32,
    weight: u32,
    selectors: Vec<Selector>,
    ports: Vec<String>,
    program: Option<ProgramInfo>,
    limits: crate::confine::Policy,
}

async fn tenant_info(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<TenantView>> {
    let policy = *s.compiler.policy();
    let v = s
        .agent
        .run(move |a| {
            let t = a.tenant(id).cloned();
            t.map(|t| TenantView {
                name: t.name,
                id,
                weight: t.weight,
                selectors: t.selectors,
                ports: t.ports,
                program: a.program(id).cloned(),
                limits: policy,
            })
        })
        .await?
        .ok_or_else(|| Error::NotFound("no such tenant".into()))?;
    Ok(Json(v))
}

async fn program_get(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<ProgramInfo>> {
    let p = s.agent.run(move |a| a.program(id).cloned()).await?;
    p.map(Json)
        .ok_or_else(|| ApiError(Error::NotFound("no program: PUT one to /v1/program".into())))
}

async fn program_put(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    body: Bytes,
) -> ApiResult<Json<ProgramInfo>> {
    if body.is_empty() {
        return Err(Error::Invalid("empty body: send C source or a BPF object".into()).into());
    }
    let compiler = s.compiler.clone();
    let built = tokio::task::spawn_blocking(move || compiler.build(Submission::detect(&body)?))
        .await
        .map_err(|e| Error::Invalid(format!("build task failed: {e}")))??;
    let info = s.agent.run(move |a| a.install(id, &built)).await??;
    Ok(Json(info))
}

async fn program_delete(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<serde_json::Value>> {
    let removed = s.agent.run(move |a| a.remove_program(id)).await??;
    Ok(Json(json!({ "removed": removed })))
}

async fn selectors_get(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<Vec<Selector>>> {
    let v = s
        .agent
        .run(move |a| {
            a.tenant(id)
                .map(|t| t.selectors.clone())
                .unwrap_or_default()
        })
        .await?;
    Ok(Json(v))
}

async fn selectors_put(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    body: Bytes,
) -> ApiResult<Json<Vec<Selector>>> {
    let items: Vec<String> = serde_json::from_slice(&body).map_err(|e| {
        Error::Invalid(format!(
            "body must be a JSON array of selectors like [\"prefix:10.0.0.0/24\"]: {e}"
        ))
    })?;
    let sels = crate::selector::parse_list(&items)?;
    let out = sels.clone();
    s.agent.run(move |a| a.set_selectors(id, sels)).await??;
    Ok(Json(out))
}

async fn stats_get(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<crate::host::TenantStats>> {
    Ok(Json(s.agent.run(move |a| a.stats(id)).await??))
}

async fn maps_list(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<Vec<MapView>>> {
    let fds = s
        .agent
        .run(move |a| {
            a.tenant_map_names(id)
                .into_iter()
                .filter_map(|n| a.tenant_map(id, &n).ok().map(|fd| (n, fd)))
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(Json(
        fds.into_iter()
            .filter_map(|(n, fd)| map_view(n, &fd))
            .collect(),
    ))
}

#[derive(Debug, Serialize)]
struct MapView {
    name: String,
    #[serde(rename = "type")]
    kind: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
}

fn map_view(name: String, fd: &OwnedFd) -> Option<MapView> {
    let info = rampart_dataplane::maps::map_info(fd.as_raw_fd())?;
    Some(MapView {
        name,
        kind: info.type_,
        key_size: info.key_size,
        value_size: info.value_size,
        max_entries: info.max_entries,
    })
}

fn is_percpu(kind: u32) -> bool {
    matches!(kind, 5 | 6 | 10)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str, want: u32, what: &str) -> Result<Vec<u8>, Error> {
    let s = s.trim().trim_start_matches("0x");
    if s.len() != 2 * want as usize || !s.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::Invalid(format!(
            "{what} must be {want} bytes as {} hex digits",
            2 * want
        )));
    }
    Ok((0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
        .collect())
}

async fn tenant_map_fd(s: &ApiState, id: u32, map: String) -> Result<(OwnedFd, MapView), Error> {
    let (fd, name) = s
        .agent
        .run(move |a: &mut HostAgent| a.tenant_map(id, &map).map(|fd| (fd, map)))
        .await??;
    let view = map_view(name, &fd)
        .ok_or_else(|| Error::Invalid("cannot read the map's definition".into()))?;
    Ok((fd, view))
}

async fn map_dump(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    Path(map): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let (fd, v) = tenant_map_fd(&s, id, map).await?;
    let ncpu = rampart_dataplane::maps::possible_cpus();
    let stride = (v.value_size as usize + 7) & !7;
    let vlen = if is_percpu(v.kind) {
        stride * ncpu
    } else {
        v.value_size as usize
    };
    let mut entries = Vec::new();
    let mut key = vec![0u8; v.key_size as usize];
    let mut next = vec![0u8; v.key_size as usize];
    let mut first = true;
    let mut val = vec![0u8; vlen.max(1)];
    // Array maps (and queues/stacks, which have no keys) are walked the same way; at most 65,536 entries.
    while entries.len() < 65_536 {
        // SAFETY: key buffers have the map's key size; NULL asks for the first key.
        let rc = unsafe {
            libbpf_sys::bpf_map_get_next_key(
                fd.as_raw_fd(),
                if first {
                    std::ptr::null()
                } else {
                    key.as_ptr().cast()
                },
                next.as_mut_ptr().cast(),
            )
        };
        if rc < 0 {
            break;
        }
        first = false;
        std::mem::swap(&mut key, &mut next);
        // The value buffer is sized for the map (per-CPU: one rounded value per possible CPU).
        // An entry deleted since get_next_key is skipped.
        if !rampart_dataplane::maps::lookup_raw(fd.as_raw_fd(), &key, &mut val).unwrap_or(false) {
            continue;
        }
        let value = if is_percpu(v.kind) {
            json!(val
                .chunks(stride)
                .map(|c| hex(&c[..v.value_size as usize]))
                .collect::<Vec<_>>())
        } else {
            json!(hex(&val[..v.value_size as usize]))
        };
        entries.push(json!({"key": hex(&key), "value": value}));
    }
    Ok(Json(json!({"map": v, "entries": entries})))
}

async fn map_set(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    Path(map): Path<String>,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    #[derive(serde::Deserialize)]
    struct Entry {
        key: String,
        value: String,
    }
    let e: Entry = serde_json::from_slice(&body).map_err(|e| {
        Error::Invalid(format!(
            "body must be {{\"key\": hex, \"value\": hex}}: {e}"
        ))
    })?;
    let (fd, v) = tenant_map_fd(&s, id, map).await?;
    let key = unhex(&e.key, v.key_size, "key")?;
    let one = unhex(&e.value, v.value_size, "value")?;
    let val = if is_percpu(v.kind) {
        let stride = (v.value_size as usize + 7) & !7;
        let mut b = vec![0u8; stride * rampart_dataplane::maps::possible_cpus()];
        for c in b.chunks_mut(stride) {
            c[..one.len()].copy_from_slice(&one);
        }
        b
    } else {
        one
    };
    rampart_dataplane::maps::update_raw(fd.as_raw_fd(), &key, &val, 0)
        .map_err(|e| Error::Invalid(format!("update refused by the kernel: {e}")))?;
    Ok(Json(json!({"key": hex(&key), "value": e.value})))
}

async fn map_delete(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    Path((map, key)): Path<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let (fd, v) = tenant_map_fd(&s, id, map).await?;
    let k = unhex(&key, v.key_size, "key")?;
    // SAFETY: key buffer of the map's key size.
    let rc = unsafe { libbpf_sys::bpf_map_delete_elem(fd.as_raw_fd(), k.as_ptr().cast()) };
    if rc < 0 {
        return Err(Error::NotFound(format!("no entry {key}")).into());
    }
    Ok(Json(json!({"deleted": key})))
}

async fn metrics(State(s): State<Arc<ApiState>>) -> ApiResult<Response> {
    let text = s.agent.run(|a| crate::metrics::render(a)).await??;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}
