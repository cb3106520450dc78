//! The tenant HTTP API (`rampart tenant serve`), on the service shell
//! (`rampart_service`).
//!
//! Every `/v1` route of a tenant needs `Authorization: Bearer <token>`;
//! the token (a line `NAME TOKEN` of `server.token_file`) names the tenant,
//! and every route acts on that tenant only — there is no route that takes
//! a tenant name, so a tenant cannot see or change another tenant's
//! program, selectors, maps or statistics.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | /v1/tenant | the caller: selectors, ports, weight, program status |
//! | GET / PUT / DELETE | /v1/program | status / submit or replace (body: C source or BPF object) / remove |
//! | GET / PUT | /v1/selectors | list / replace (body: JSON array of selectors) |
//! | GET | /v1/stats | packets, bytes, verdicts, drops by reason, CPU ns, tokens |
//! | GET | /v1/maps, /v1/maps/{map} | the caller's maps / entries (hex) |
//! | PUT | /v1/maps/{map}/{key} | set an entry (key in hex): `{"value": hex}` |
//! | DELETE | /v1/maps/{map}/{key} | delete an entry (key in hex) |
//! | GET / PUT | /v1/config/dns | the DNS rate limiter's settings by name (PUT: the fields to change) |
//! | GET / PUT | /v1/config/synproxy | the SYN-cookie proxy's settings by name |
//! | GET | /metrics, /healthz, /v1/openapi.json | the shell's (all tenants' metrics; no token on loopback) |
//!
//! Errors are `{"error": {"code", "message", "details"?}}`: a refused
//! program has code `refused` (`details.reason`), `compile`
//! (`details.compiler`: clang's output) or `verifier`
//! (`details.verifier_log`).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::Json;
use rampart_service::auth::Principal;
use rampart_service::{
    ApiBytes, ApiError, ApiJson, ErrorBody, ErrorKind, JsonBody, Routes, ToApiError,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::routes;

use crate::agent::AgentHandle;
use crate::compiler::{Compiler, Submission};
use crate::error::Error;
use crate::host::{HostAgent, ProgramInfo, TenantStats};
use crate::programs::{DnsLimits, SynProxyConfig};
use crate::settings::{DnsSettings, SynSettings};

/// Shared state of the HTTP server.
#[derive(Debug)]
pub struct ApiState {
    /// The host agent.
    pub agent: AgentHandle,
    /// The compiler agent.
    pub compiler: Compiler,
    /// Tenant ids by name (the names tokens carry).
    pub tenants: HashMap<String, u32>,
}

impl ToApiError for Error {
    fn to_api_error(&self) -> ApiError {
        match self {
            Error::Invalid(m) => ApiError::new(ErrorKind::Invalid, m.clone()),
            Error::NotFound(m) => ApiError::new(ErrorKind::NotFound, m.clone()),
            Error::Conflict(m) => ApiError::new(ErrorKind::Conflict, m.clone()),
            Error::Refused { reason } => ApiError::new(ErrorKind::Refused, self.to_string())
                .with_details(json!({ "reason": reason })),
            Error::Compile { stderr } => ApiError::new(ErrorKind::Refused, "compilation failed")
                .with_code("compile")
                .with_details(json!({ "compiler": stderr })),
            Error::Verifier { log, .. } => ApiError::new(ErrorKind::Refused, self.to_string())
                .with_code("verifier")
                .with_details(json!({ "verifier_log": log })),
            Error::Stopped(_) => ApiError::new(ErrorKind::Unavailable, self.to_string()),
            other => ApiError::new(ErrorKind::Internal, other.to_string()),
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The authenticated tenant of a request (its id).
#[derive(Debug, Clone, Copy)]
pub struct Tenant(pub u32);

impl FromRequestParts<Arc<ApiState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Self::Rejection> {
        let p = Principal::from_request_parts(parts, state).await?;
        let none = || ApiError::new(ErrorKind::Unauthorized, "this token names no tenant");
        let name = p.name.ok_or_else(none)?;
        if let Some(id) = state.tenants.get(&name) {
            return Ok(Tenant(*id));
        }
        // A tenant added by a reload since the server started.
        state
            .agent
            .run(move |a| a.tenant_id(&name))
            .await
            .ok()
            .flatten()
            .map(Tenant)
            .ok_or_else(none)
    }
}

/// The routes.
pub fn routes(state: Arc<ApiState>) -> Routes {
    unserved().with_state(state)
}

/// The routes before they have an instance to serve (for their OpenAPI
/// paths: `rampart run` documents them while the tenant stage is off).
pub fn unserved() -> Routes<Arc<ApiState>> {
    Routes::new()
        .routes(routes!(tenant_info))
        .routes(routes!(program_get, program_put, program_delete))
        .routes(routes!(selectors_get, selectors_put))
        .routes(routes!(stats_get))
        .routes(routes!(maps_list))
        .routes(routes!(map_dump))
        .routes(routes!(map_set, map_delete))
        .routes(routes!(dns_config_get, dns_config_put))
        .routes(routes!(syn_config_get, syn_config_put))
}

/// `GET /v1/tenant`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantView {
    name: String,
    id: u32,
    weight: u32,
    /// Selectors (`prefix:ADDR/LEN`, `vlan:ID`, `vni:ID`, `iface:NAME`).
    selectors: Vec<String>,
    ports: Vec<String>,
    program: Option<ProgramInfo>,
    limits: crate::confine::Policy,
}

#[utoipa::path(get, path = "/v1/tenant", tag = "tenant",
    responses((status = 200, description = "The calling tenant", body = TenantView),
        (status = 401, description = "No or unknown token", body = ErrorBody)))]
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
                selectors: t.selectors.iter().map(ToString::to_string).collect(),
                ports: t.ports,
                program: a.program(id).cloned(),
                limits: policy,
            })
        })
        .await?
        .ok_or_else(|| Error::NotFound("no such tenant".into()))?;
    Ok(Json(v))
}

#[utoipa::path(get, path = "/v1/program", tag = "tenant",
    responses((status = 200, description = "The running program", body = ProgramInfo),
        (status = 404, description = "No program", body = ErrorBody)))]
async fn program_get(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<ProgramInfo>> {
    let p = s.agent.run(move |a| a.program(id).cloned()).await?;
    p.map(Json)
        .ok_or_else(|| Error::NotFound("no program: PUT one to /v1/program".into()).into())
}

#[utoipa::path(put, path = "/v1/program", tag = "tenant",
    request_body(content = String, content_type = "application/octet-stream",
        description = "C source (compiled against rampart_tenant.h) or a BPF ELF object"),
    responses((status = 200, description = "Running", body = ProgramInfo),
        (status = 400, description = "Empty body", body = ErrorBody),
        (status = 422, description = "Refused: code refused, compile or verifier, with details", body = ErrorBody)))]
async fn program_put(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    ApiBytes(body): ApiBytes,
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

/// `DELETE /v1/program`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Removed {
    /// false: there was no program.
    removed: bool,
}

#[utoipa::path(delete, path = "/v1/program", tag = "tenant",
    responses((status = 200, description = "Removed (your packets pass untouched; maps stay)", body = Removed)))]
async fn program_delete(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<Removed>> {
    let removed = s.agent.run(move |a| a.remove_program(id)).await??;
    Ok(Json(Removed { removed }))
}

#[utoipa::path(get, path = "/v1/selectors", tag = "tenant",
    responses((status = 200, description = "Selectors", body = Vec<String>)))]
async fn selectors_get(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<Vec<String>>> {
    let v = s
        .agent
        .run(move |a| {
            a.tenant(id)
                .map(|t| t.selectors.iter().map(ToString::to_string).collect())
                .unwrap_or_default()
        })
        .await?;
    Ok(Json(v))
}

#[utoipa::path(put, path = "/v1/selectors", tag = "tenant",
    request_body(content = Vec<String>, description = "Every selector, replacing all: [\"prefix:10.0.0.0/24\", \"vlan:101\"]"),
    responses((status = 200, description = "The selectors now", body = Vec<String>),
        (status = 400, description = "A bad selector", body = ErrorBody),
        (status = 409, description = "A selector of another tenant", body = ErrorBody)))]
async fn selectors_put(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    ApiJson(items): ApiJson<Selectors>,
) -> ApiResult<Json<Vec<String>>> {
    let sels = crate::selector::parse_list(&items.0)?;
    let out = sels.iter().map(ToString::to_string).collect();
    s.agent
        .run(move |a| a.request_selectors(id, sels))
        .await??;
    Ok(Json(out))
}

/// The body of `PUT /v1/selectors`.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct Selectors(pub Vec<String>);

impl JsonBody for Selectors {
    const EXAMPLE: &'static str = r#"["prefix:10.20.1.0/24", "vlan:101"]"#;
}

#[utoipa::path(get, path = "/v1/stats", tag = "tenant",
    responses((status = 200, description = "Packets, verdicts, drops, CPU time, tokens", body = TenantStats)))]
async fn stats_get(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<TenantStats>> {
    Ok(Json(s.agent.run(move |a| a.stats(id)).await??))
}

#[utoipa::path(get, path = "/v1/maps", tag = "tenant",
    responses((status = 200, description = "The caller's maps", body = Vec<MapView>)))]
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

/// A tenant map's definition.
#[derive(Debug, Serialize, ToSchema)]
pub struct MapView {
    name: String,
    /// Kernel map type number.
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

/// `want` bytes written as hex digits (an optional `0x` first), as map keys
/// and values travel in the API.
///
/// # Errors
/// [`Error::Invalid`] when the text is not exactly `2 × want` hex digits.
pub fn unhex(s: &str, want: u32, what: &str) -> Result<Vec<u8>, Error> {
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

#[utoipa::path(get, path = "/v1/maps/{map}", tag = "tenant",
    params(("map" = String, Path, description = "One of the caller's maps")),
    responses((status = 200, description = "`{\"map\": MapView, \"entries\": [{\"key\": hex, \"value\": hex or [hex per CPU]}]}`", body = Object),
        (status = 404, description = "No such map", body = ErrorBody)))]
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

/// The body of `PUT /v1/maps/{map}/{key}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MapValue {
    /// The value, `value_size` bytes in hex (per-CPU maps: the same on every CPU).
    pub value: String,
}

impl JsonBody for MapValue {
    const EXAMPLE: &'static str = r#"{"value": "2a00000000000000"}"#;
}

/// An entry set.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MapEntry {
    /// Key, hex.
    key: String,
    /// Value, hex.
    value: String,
}

#[utoipa::path(put, path = "/v1/maps/{map}/{key}", tag = "tenant",
    params(("map" = String, Path, description = "One of the caller's maps"),
        ("key" = String, Path, description = "Key, `key_size` bytes in hex")),
    request_body = MapValue,
    responses((status = 200, description = "Set", body = MapEntry),
        (status = 400, description = "Bad key or value (size, hex)", body = ErrorBody),
        (status = 404, description = "No such map", body = ErrorBody)))]
async fn map_set(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    Path((map, key)): Path<(String, String)>,
    ApiJson(e): ApiJson<MapValue>,
) -> ApiResult<Json<MapEntry>> {
    let (fd, v) = tenant_map_fd(&s, id, map).await?;
    let key = unhex(&key, v.key_size, "key")?;
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
    Ok(Json(MapEntry {
        key: hex(&key),
        value: e.value,
    }))
}

#[utoipa::path(delete, path = "/v1/maps/{map}/{key}", tag = "tenant",
    params(("map" = String, Path, description = "One of the caller's maps"),
        ("key" = String, Path, description = "Key, `key_size` bytes in hex")),
    responses((status = 200, description = "`{\"deleted\": key}`", body = Object),
        (status = 404, description = "No such map or entry", body = ErrorBody)))]
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

/// The caller's maps `cfg` and `list` of a ready-made service, on the agent's
/// thread: the read-change-write of a PUT runs there, so two requests
/// never interleave.
fn service_maps(
    a: &HostAgent,
    id: u32,
    cfg: &str,
    list: &str,
    service: &str,
) -> Result<(OwnedFd, OwnedFd), Error> {
    let missing = |m: &str| {
        Error::NotFound(format!(
            "your program has no {m} map: these settings are the {service}'s (PUT its source to /v1/program first)"
        ))
    };
    let c = a.tenant_map(id, cfg).map_err(|_| missing(cfg))?;
    let l = a.tenant_map(id, list).map_err(|_| missing(list))?;
    Ok((c, l))
}

const DNS: &str = "DNS rate limiter (dns_ratelimit.c)";
const SYN: &str = "SYN-cookie proxy (synproxy.c)";

#[utoipa::path(get, path = "/v1/config/dns", tag = "tenant",
    responses((status = 200, description = "The DNS rate limiter's settings, every field", body = DnsSettings),
        (status = 404, description = "Your program is not the DNS rate limiter", body = ErrorBody)))]
async fn dns_config_get(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<DnsSettings>> {
    let l = s
        .agent
        .run(move |a| {
            let (c, e) = service_maps(a, id, "dns_cfg", "dns_exempt", DNS)?;
            DnsLimits::read(c.as_raw_fd(), e.as_raw_fd())
        })
        .await??;
    Ok(Json(DnsSettings::from(&l)))
}

#[utoipa::path(put, path = "/v1/config/dns", tag = "tenant",
    request_body(content = DnsSettings, description = "The fields to change; the others keep their values"),
    responses((status = 200, description = "The settings now, every field", body = DnsSettings),
        (status = 400, description = "A field out of range (the message names it and the range)", body = ErrorBody),
        (status = 404, description = "Your program is not the DNS rate limiter", body = ErrorBody)))]
async fn dns_config_put(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    ApiJson(change): ApiJson<DnsSettings>,
) -> ApiResult<Json<DnsSettings>> {
    change.validate()?;
    let l = s
        .agent
        .run(move |a| {
            let (c, e) = service_maps(a, id, "dns_cfg", "dns_exempt", DNS)?;
            let l = change.merge(&DnsLimits::read(c.as_raw_fd(), e.as_raw_fd())?)?;
            l.store(c.as_raw_fd(), e.as_raw_fd())?;
            DnsLimits::read(c.as_raw_fd(), e.as_raw_fd())
        })
        .await??;
    Ok(Json(DnsSettings::from(&l)))
}

#[utoipa::path(get, path = "/v1/config/synproxy", tag = "tenant",
    responses((status = 200, description = "The SYN-cookie proxy's settings, every field", body = SynSettings),
        (status = 404, description = "Your program is not the SYN-cookie proxy", body = ErrorBody)))]
async fn syn_config_get(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
) -> ApiResult<Json<SynSettings>> {
    let c = s
        .agent
        .run(move |a| {
            let (c, p) = service_maps(a, id, "syn_cfg", "syn_ports", SYN)?;
            SynProxyConfig::read(c.as_raw_fd(), p.as_raw_fd())
        })
        .await??;
    Ok(Json(SynSettings::from(&c)))
}

#[utoipa::path(put, path = "/v1/config/synproxy", tag = "tenant",
    request_body(content = SynSettings, description = "The fields to change; the others keep their values"),
    responses((status = 200, description = "The settings now, every field", body = SynSettings),
        (status = 400, description = "A field out of range (the message names it and the range)", body = ErrorBody),
        (status = 404, description = "Your program is not the SYN-cookie proxy", body = ErrorBody)))]
async fn syn_config_put(
    State(s): State<Arc<ApiState>>,
    Tenant(id): Tenant,
    ApiJson(change): ApiJson<SynSettings>,
) -> ApiResult<Json<SynSettings>> {
    change.validate()?;
    let c = s
        .agent
        .run(move |a| {
            let (c, p) = service_maps(a, id, "syn_cfg", "syn_ports", SYN)?;
            let new = change.merge(&SynProxyConfig::read(c.as_raw_fd(), p.as_raw_fd())?)?;
            new.store(c.as_raw_fd(), p.as_raw_fd())?;
            SynProxyConfig::read(c.as_raw_fd(), p.as_raw_fd())
        })
        .await??;
    Ok(Json(SynSettings::from(&c)))
}
