//! Checks a daemon's tests run against its router.

use axum::body::Body;
use axum::http::{header, Method, Request};
use axum::Router;
use tower::util::ServiceExt;
use utoipa::openapi::OpenApi;

use crate::error::ErrorBody;
use crate::server::documented;

const METHODS: [Method; 5] = [
    Method::GET,
    Method::PUT,
    Method::POST,
    Method::DELETE,
    Method::PATCH,
];

/// Every route `router` serves must be in `doc`, with the methods `doc`
/// lists: each documented method of each path is answered by a handler
/// (not "no route" / "method not allowed"), and every other method on that
/// path is refused with 405. Path parameters are filled with `x`.
/// `token` must be one the router accepts (changes need one).
/// Returns the problems found (empty: none).
pub async fn undocumented_routes(router: Router, doc: &OpenApi, token: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, methods) in documented(doc) {
        let uri: String = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "x" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        for m in METHODS {
            let req = Request::builder()
                .method(m.clone())
                .uri(&uri)
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .body(Body::empty())
                .expect("request");
            let res = match router.clone().oneshot(req).await {
                Ok(r) => r,
                Err(e) => match e {},
            };
            let status = res.status().as_u16();
            // Only errors say whether a route exists (and a success may be
            // an endless event stream).
            let body = if res.status().is_success() {
                Default::default()
            } else {
                axum::body::to_bytes(res.into_body(), 1 << 20)
                    .await
                    .unwrap_or_default()
            };
            let code = serde_json::from_slice::<ErrorBody>(&body)
                .map(|b| b.error.code)
                .unwrap_or_default();
            let routed = !(code == "no_route" || code == "method_not_allowed");
            if methods.contains(&m) && !routed {
                problems.push(format!(
                    "{m} {path} is documented but not served ({status} {code})"
                ));
            }
            if !methods.contains(&m) && status != 405 {
                problems.push(format!(
                    "{m} {path} is served ({status}) but not in the OpenAPI document"
                ));
            }
        }
    }
    problems
}

/// What `promtool check metrics` (Prometheus' own linter, Debian package
/// `prometheus`) says about a `/metrics` text: one problem per line, empty
/// when it reports nothing.
///
/// # Panics
/// `promtool` is not installed (`./run test` installs it) or cannot run.
pub fn promtool_check_metrics(text: &str) -> Vec<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("promtool: {e} (apt-get install prometheus; ./run test installs it)")
        });
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .expect("writing to promtool");
    }
    let out = child.wait_with_output().expect("promtool runs");
    let mut problems: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if !out.status.success() && problems.is_empty() {
        problems.push(format!("promtool exited with {}", out.status));
    }
    problems
}

/// The metric names of a `/metrics` text (its samples' names, histogram
/// series included: `…_bucket`, `…_sum`, `…_count`).
pub fn exposed_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every `rampart_…` metric name in `text` (a PromQL expression, a rules
/// file): recording rules' names (`rampart:…`) are not metrics.
fn metric_tokens(text: &str, out: &mut std::collections::BTreeSet<String>) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    for tok in text.split(|c: char| !word(c)) {
        if tok.starts_with("rampart_") && !tok.contains(':') {
            out.insert(tok.to_string());
        }
    }
}

/// The metrics the shipped Grafana board (`dist/grafana/rampart.json`) and
/// Prometheus rules (`dist/prometheus/rampart-rules.yml`) query, after
/// checking the board is a dashboard Grafana imports: JSON with a title,
/// a uid, panels with unique ids and a position, and every query of a
/// panel a non-empty PromQL expression on the `${datasource}` variable.
///
/// # Errors
/// What is wrong with the board, or a file that cannot be read.
pub fn dist_queried_metrics(
    dist: &std::path::Path,
) -> Result<std::collections::BTreeSet<String>, String> {
    let read = |p: &str| {
        std::fs::read_to_string(dist.join(p))
            .map_err(|e| format!("{}: {e}", dist.join(p).display()))
    };
    let board: serde_json::Value = serde_json::from_str(&read("grafana/rampart.json")?)
        .map_err(|e| format!("grafana/rampart.json: {e}"))?;
    let mut names = std::collections::BTreeSet::new();
    for key in ["title", "uid"] {
        if !board[key].is_string() {
            return Err(format!("grafana/rampart.json: no {key}"));
        }
    }
    let panels = board["panels"]
        .as_array()
        .filter(|p| !p.is_empty())
        .ok_or("grafana/rampart.json: no panels")?;
    let mut ids = std::collections::BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or("?");
        let id = p["id"].as_u64().ok_or(format!("panel {title:?}: no id"))?;
        if !ids.insert(id) {
            return Err(format!("panel {title:?}: id {id} twice"));
        }
        if !p["gridPos"]["w"].is_u64() || !p["gridPos"]["h"].is_u64() {
            return Err(format!("panel {title:?}: no gridPos"));
        }
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"]
            .as_array()
            .filter(|t| !t.is_empty())
            .ok_or(format!("panel {title:?}: no queries"))?;
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            if expr.trim().is_empty() {
                return Err(format!("panel {title:?}: an empty query"));
            }
            if t["datasource"]["uid"] != "${datasource}" {
                return Err(format!("panel {title:?}: a query not on ${{datasource}}"));
            }
            metric_tokens(expr, &mut names);
        }
    }
    for a in board["annotations"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        metric_tokens(a["expr"].as_str().unwrap_or_default(), &mut names);
    }
    for v in board["templating"]["list"].as_array().into_iter().flatten() {
        metric_tokens(v["definition"].as_str().unwrap_or_default(), &mut names);
    }
    let rules = read("prometheus/rampart-rules.yml")?;
    for line in rules.lines().filter(|l| !l.trim_start().starts_with('#')) {
        metric_tokens(line, &mut names);
    }
    Ok(names)
}

/// The metrics of `prefixes` the shipped board and rules query that are
/// not in `exposed` (a live `/metrics`): empty when every query names an
/// existing metric.
///
/// # Panics
/// The board is not a valid dashboard, or `dist/` cannot be read.
pub fn dist_queries_missing(exposed: &str, prefixes: &[&str]) -> Vec<String> {
    let dist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist");
    let queried = dist_queried_metrics(&dist).unwrap_or_else(|e| panic!("{e}"));
    let have = exposed_names(exposed);
    queried
        .into_iter()
        .filter(|n| prefixes.iter().any(|p| n.starts_with(p)))
        .filter(|n| !have.contains(n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_board_and_rules_query_every_application() {
        let dist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist");
        let names = dist_queried_metrics(&dist).unwrap();
        for n in [
            "rampart_ddos_dropped_packets_total",
            "rampart_ddos_loop_duration_seconds_bucket",
            "rampart_tenant_cpu_seconds_total",
            "rampart_stream_packets_total",
            "rampart_alerts_total",
            "rampart_build_info",
        ] {
            assert!(names.contains(n), "{n} not queried: {names:?}");
        }
        assert!(
            !names.iter().any(|n| n.contains(':')),
            "recording rules are not metrics"
        );
    }

    #[test]
    fn a_board_with_an_empty_query_is_refused() {
        let dir = std::env::temp_dir().join(format!("rampart-board-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("grafana")).unwrap();
        std::fs::create_dir_all(dir.join("prometheus")).unwrap();
        std::fs::write(dir.join("prometheus/rampart-rules.yml"), "groups: []\n").unwrap();
        std::fs::write(
            dir.join("grafana/rampart.json"),
            r#"{"title": "t", "uid": "u", "panels": [{"id": 1, "title": "p", "type": "timeseries",
                "gridPos": {"h": 1, "w": 1, "x": 0, "y": 0},
                "targets": [{"datasource": {"uid": "${datasource}"}, "expr": " "}]}]}"#,
        )
        .unwrap();
        let e = dist_queried_metrics(&dir).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("empty query"), "{e}");
    }

    #[test]
    fn exposed_names_are_the_samples_names() {
        let t = "# HELP a_total x\n# TYPE a_total counter\na_total{l=\"1\"} 2\nb_seconds_bucket{le=\"1\"} 0\nc 1\n";
        let n: Vec<String> = exposed_names(t).into_iter().collect();
        assert_eq!(n, ["a_total", "b_seconds_bucket", "c"]);
        let mut m = std::collections::BTreeSet::new();
        metric_tokens("rate(rampart_x_total[1m]) / rampart:y:rate1m", &mut m);
        assert_eq!(m.into_iter().collect::<Vec<_>>(), ["rampart_x_total"]);
    }
}
