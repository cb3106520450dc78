//! What the stream stage shows now: the connections open on the taps (the
//! flowmeter's, with their counters so far), the scanners and SYN floods
//! the detectors found, the taps' packet counters — for the dashboard's
//! stream panel and `GET /stream/v1/top`. Bounded: at most
//! [`MAX_TOP`] rows of each kind per answer, and fixed-size tables behind.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::Json;
use rampart_service::error::{ApiError, ErrorKind};
use rampart_service::Routes;
use rampart_stream::apps::config::{AppName, StreamConfig};
use rampart_stream::apps::live::{Findings, LiveFlows, TopFlows, LIVE_FLOWS, MAX_TOP};
use rampart_stream::source::tap::TapSource;
use serde::{Deserialize, Serialize};
use utoipa_axum::routes;

use crate::host::StreamCounts;

/// Rows of each kind the dashboard shows.
pub const PANEL_ROWS: usize = 20;

/// The stream stage's board: shared by the apps that fill it and the
/// readers (cheap to clone).
#[derive(Clone)]
pub struct StreamBoard {
    inner: Arc<Mutex<Running>>,
    /// Open connections (filled by the flowmeter, when it runs).
    pub live: LiveFlows,
    /// The detectors' findings.
    pub findings: Findings,
    counts: Arc<StreamCounts>,
}

/// What runs now (none: the stream stage is off).
#[derive(Default)]
struct Running {
    apps: Vec<AppName>,
    feed: String,
    /// Each interface's tap (kept to read its counters; released when the
    /// stage stops, so the tap detaches).
    taps: Vec<(String, TapSource)>,
}

impl std::fmt::Debug for StreamBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamBoard")
            .field("live", &self.live)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn app_name(a: AppName) -> &'static str {
    match a {
        AppName::Flowmeter => "flowmeter",
        AppName::Portscan => "portscan",
        AppName::Synflood => "synflood",
    }
}

/// `GET /stream/v1/top`: the stream stage now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Top {
    /// The apps on the taps (`flowmeter`, `portscan`, `synflood`).
    pub apps: Vec<&'static str>,
    /// What the taps hand to userspace: `aggregate` or `tuples`.
    pub feed: String,
    /// The interfaces tapped.
    pub interfaces: Vec<String>,
    /// The taps' frame counters, summed: `seen`, `analysed` (handed to the
    /// apps), `ring_full` (lost: the ring buffer was full), `aggregated`.
    #[schema(value_type = Object)]
    pub packets: serde_json::Value,
    /// Flow records the flowmeter exported (flows that ended).
    pub flows_total: u64,
    /// Alerts of the stream apps.
    pub alerts_total: u64,
    /// The open connections, heaviest first by bytes and by packets
    /// (null without the flowmeter).
    #[schema(value_type = Object)]
    pub flows: Option<TopFlows>,
    /// Scanners flagged, newest first (null without portscan).
    #[schema(value_type = Vec<Object>)]
    pub scanners: Option<Vec<rampart_stream::apps::live::Scanner>>,
    /// SYN floods found, newest first (null without synflood).
    #[schema(value_type = Vec<Object>)]
    pub synfloods: Option<Vec<rampart_stream::apps::live::SynFlood>>,
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl StreamBoard {
    /// An empty board for a stream stage whose flows end after `idle`.
    pub fn new(counts: Arc<StreamCounts>, idle: std::time::Duration) -> Self {
        Self {
            inner: Arc::default(),
            live: LiveFlows::new(LIVE_FLOWS, idle),
            findings: Findings::default(),
            counts,
        }
    }

    /// The stage started with `s` on `taps`.
    pub(crate) fn started(&self, s: &StreamConfig, taps: Vec<(String, TapSource)>) {
        if let Ok(f) = s.flowmeter() {
            self.live.set_idle(f.idle);
        }
        let mut r = lock(&self.inner);
        r.apps = s.apps.clone();
        r.feed = serde_json::to_value(s.feed)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        r.taps = taps;
    }

    /// The stage stopped: the taps are released.
    pub(crate) fn stopped(&self) {
        *lock(&self.inner) = Running::default();
    }

    /// Does the stream stage run?
    pub fn running(&self) -> bool {
        !lock(&self.inner).apps.is_empty()
    }

    /// The stage now, `limit` rows of each kind (at most [`MAX_TOP`]).
    pub fn top(&self, limit: usize) -> Top {
        let limit = limit.min(MAX_TOP);
        let r = lock(&self.inner);
        let (mut seen, mut ring_full, mut aggregated, mut analysed) = (0, 0, 0, 0);
        for (_, t) in &r.taps {
            analysed += t.analysed();
            if let Ok(c) = t.counters() {
                seen += c.frames;
                ring_full += c.ring_full;
                aggregated += c.aggregated;
            }
        }
        let has = |a: AppName| r.apps.contains(&a);
        Top {
            apps: r.apps.iter().map(|a| app_name(*a)).collect(),
            feed: r.feed.clone(),
            interfaces: r.taps.iter().map(|(i, _)| i.clone()).collect(),
            packets: serde_json::json!({
                "seen": seen, "analysed": analysed, "ring_full": ring_full, "aggregated": aggregated,
            }),
            flows_total: self.counts.flows.load(Ordering::Relaxed),
            alerts_total: self.counts.alerts.load(Ordering::Relaxed),
            flows: has(AppName::Flowmeter).then(|| self.live.top(limit, wall_ns())),
            scanners: has(AppName::Portscan).then(|| self.findings.scanners(limit)),
            synfloods: has(AppName::Synflood).then(|| self.findings.floods(limit)),
        }
    }

    /// The dashboard's stream panel.
    pub fn panel(&self) -> serde_json::Value {
        serde_json::to_value(self.top(PANEL_ROWS)).unwrap_or_default()
    }
}

/// `GET /stream/v1/top?limit=N`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
struct Limit {
    /// Rows of each kind (default 20, at most 100).
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/top", tag = "stream", params(Limit),
    responses((status = 200, description = "The stream stage now: open connections heaviest first (by bytes and by packets: \
        5-tuple, community_id, packets and bytes each way, age), scanners and SYN floods found (newest first), \
        the taps' packet counters", body = Top),
        (status = 503, description = "The stream stage is off", body = rampart_service::ErrorBody)))]
async fn top(State(b): State<StreamBoard>, Query(q): Query<Limit>) -> Result<Json<Top>, ApiError> {
    if !b.running() {
        return Err(ApiError::new(ErrorKind::Unavailable, STREAM_OFF));
    }
    // A lock and a partial sort of a bounded table: short enough for the
    // server's thread.
    Ok(Json(b.top(q.limit.unwrap_or(PANEL_ROWS))))
}

/// The answer of `/stream/v1/top` while the stream stage is off.
const STREAM_OFF: &str =
    "the stream application is not enabled: add a [stream] section to the configuration and reload (SIGHUP)";

/// The stream stage's routes (mounted under `/stream`).
pub fn routes(b: StreamBoard) -> Routes {
    Routes::new().routes(routes!(top)).with_state(b)
}
