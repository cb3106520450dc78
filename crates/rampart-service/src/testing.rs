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
            let body = axum::body::to_bytes(res.into_body(), 1 << 20)
                .await
                .unwrap_or_default();
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
