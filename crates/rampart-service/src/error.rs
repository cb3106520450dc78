//! The one error body every daemon's API answers with, and the one mapping
//! from a domain error to an HTTP status and a stable code.
//!
//! Body: `{"error": {"code": "not_found", "message": "…", "details": {…}}}`
//! — `code` is stable (clients branch on it), `message` is one line a human
//! can act on, `details` is optional structured context (a verifier log, the
//! compiler's output). Domain crates never name HTTP statuses: their error
//! types implement [`ToApiError`] by picking an [`ErrorKind`].

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use utoipa::ToSchema;

/// What went wrong, as an API client sees it. Each kind has one HTTP status
/// and one default code ([`ErrorKind::status`], [`ErrorKind::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or a value is out of range (400 `invalid`).
    Invalid,
    /// No or an unknown bearer token (401 `unauthorized`).
    Unauthorized,
    /// The thing named does not exist (404 `not_found`).
    NotFound,
    /// No such route (404 `no_route`).
    NoRoute,
    /// The route exists, the method does not (405 `method_not_allowed`).
    MethodNotAllowed,
    /// The request clashes with the current state (409 `conflict`).
    Conflict,
    /// The request body is larger than the server reads (413 `too_large`).
    TooLarge,
    /// Well-formed but refused by a rule of the domain (422 `refused`).
    Refused,
    /// The daemon cannot answer now, e.g. its loop has stopped (503 `unavailable`).
    Unavailable,
    /// The daemon failed doing what was asked (500 `internal`).
    Internal,
}

impl ErrorKind {
    /// The HTTP status of this kind.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::Invalid => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::NotFound | ErrorKind::NoRoute => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Refused => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable code of this kind (a domain may refine it, see [`ApiError::with_code`]).
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::NotFound => "not_found",
            ErrorKind::NoRoute => "no_route",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Conflict => "conflict",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Refused => "refused",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
        }
    }
}

/// An error as the API returns it.
#[derive(Debug, Clone)]
pub struct ApiError {
    kind: ErrorKind,
    code: Cow<'static, str>,
    message: String,
    details: Option<serde_json::Value>,
}

/// The JSON body of every error answer.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// `{"code", "message", "details"?}`.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code: `invalid`, `unauthorized`, `not_found`,
    /// `no_route`, `method_not_allowed`, `conflict`, `refused` (and the
    /// domain's refinements of it, e.g. `compile`, `verifier`),
    /// `unavailable`, `internal`.
    pub code: String,
    /// One line saying what is wrong and how to fix it.
    pub message: String,
    /// Structured context, when there is any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    /// An error of `kind` with its default code.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            code: Cow::Borrowed(kind.code()),
            message: message.into(),
            details: None,
        }
    }

    /// A refined stable code (e.g. `verifier` for a [`ErrorKind::Refused`]).
    #[must_use]
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Cow::Borrowed(code);
        self
    }

    /// Structured context under `details`.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message.clone(),
                details: self.details.clone(),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = axum::Json(self.body());
        if self.kind == ErrorKind::Unauthorized {
            (status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (status, body).into_response()
        }
    }
}

/// A domain error's meaning to an API client: the one place a domain maps
/// its errors to kinds (and so to HTTP statuses and codes).
pub trait ToApiError {
    /// The API error for `self`.
    fn to_api_error(&self) -> ApiError;
}

impl<E: ToApiError> From<E> for ApiError {
    fn from(e: E) -> Self {
        e.to_api_error()
    }
}

/// A JSON request body type, with an example shown to a client whose body
/// could not be read.
pub trait JsonBody: DeserializeOwned {
    /// A valid body, e.g. `{"prefix": "192.0.2.7"}`.
    const EXAMPLE: &'static str;
}

impl JsonBody for Vec<String> {
    const EXAMPLE: &'static str = r#"["a", "b"]"#;
}

/// The body of `what` could not be read as `T`: the message names the
/// field (when there is one) and shows a valid body.
pub fn bad_body<T: JsonBody>(what: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        ErrorKind::Invalid,
        format!(
            "bad request body: {what}; send JSON like {} (Content-Type: application/json)",
            T::EXAMPLE
        ),
    )
}

/// Parse a JSON body, naming the offending field in the error.
///
/// # Errors
/// [`ErrorKind::Invalid`], see [`bad_body`].
pub fn parse_json<T: JsonBody>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(bad_body::<T>("the body is empty"));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // The path and serde's message quote the client's keys and values,
        // which may hold escaped control characters (`"a\nb"`): shown
        // escaped, so the message stays one line.
        let what = if path == "." || path.is_empty() {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        };
        bad_body::<T>(escape_controls(&what))
    })
}

/// `s` with every control character written as its escape (`\n`, `\u{1b}`).
fn escape_controls(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A body that could not be read: over the size limit (413 `too_large`,
/// the status a client expects for it) or cut short (400).
fn unread_body(
    e: &axum::extract::rejection::BytesRejection,
    bad: impl FnOnce(String) -> ApiError,
) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorKind::TooLarge,
            format!(
                "request body larger than the {} MiB this server reads: send less",
                BODY_LIMIT >> 20
            ),
        )
    } else {
        bad(e.body_text())
    }
}

/// The most a request body may hold (axum's default limit, which every
/// body extractor here applies).
pub const BODY_LIMIT: usize = 2 << 20;

/// A JSON body extractor whose rejection is an [`ApiError`] saying how to
/// fix the request (the `Content-Type` is not checked: curl's default works).
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<T: JsonBody, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| unread_body(&e, bad_body::<T>))?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// A raw body extractor (a program, a file) whose rejection is an
/// [`ApiError`] like every other error of the API.
#[derive(Debug, Clone)]
pub struct ApiBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(req, state)
            .await
            .map(ApiBytes)
            .map_err(|e| {
                unread_body(&e, |m| {
                    ApiError::new(ErrorKind::Invalid, format!("bad request body: {m}"))
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        #[allow(dead_code)]
        prefix: String,
    }
    impl JsonBody for Body {
        const EXAMPLE: &'static str = r#"{"prefix": "192.0.2.7"}"#;
    }

    #[test]
    fn every_kind_has_one_status_and_code() {
        let all = [
            (ErrorKind::Invalid, 400, "invalid"),
            (ErrorKind::Unauthorized, 401, "unauthorized"),
            (ErrorKind::NotFound, 404, "not_found"),
            (ErrorKind::NoRoute, 404, "no_route"),
            (ErrorKind::MethodNotAllowed, 405, "method_not_allowed"),
            (ErrorKind::Conflict, 409, "conflict"),
            (ErrorKind::TooLarge, 413, "too_large"),
            (ErrorKind::Refused, 422, "refused"),
            (ErrorKind::Unavailable, 503, "unavailable"),
            (ErrorKind::Internal, 500, "internal"),
        ];
        for (k, status, code) in all {
            assert_eq!((k.status().as_u16(), k.code()), (status, code), "{k:?}");
        }
    }

    #[test]
    fn body_is_code_message_and_optional_details() {
        let e = ApiError::new(ErrorKind::Conflict, "192.0.2.7/32 is already blocked");
        assert_eq!(
            serde_json::to_value(e.body()).unwrap(),
            serde_json::json!({"error": {"code": "conflict", "message": "192.0.2.7/32 is already blocked"}})
        );
        let e = ApiError::new(ErrorKind::Refused, "the verifier said no")
            .with_code("verifier")
            .with_details(serde_json::json!({"verifier_log": "R1 invalid"}));
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let v = serde_json::to_value(e.body()).unwrap();
        assert_eq!(v["error"]["code"], "verifier");
        assert_eq!(v["error"]["details"]["verifier_log"], "R1 invalid");
    }

    #[test]
    fn unauthorized_asks_for_a_bearer_token() {
        let r = ApiError::new(ErrorKind::Unauthorized, "missing token").into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }

    #[test]
    fn domain_errors_map_through_their_kind() {
        #[derive(Debug)]
        struct NotBlocked;
        impl ToApiError for NotBlocked {
            fn to_api_error(&self) -> ApiError {
                ApiError::new(ErrorKind::NotFound, "192.0.2.7/32 is not blocked")
            }
        }
        let e: ApiError = NotBlocked.into();
        assert_eq!((e.status().as_u16(), e.code()), (404, "not_found"));
    }

    #[test]
    fn bad_bodies_say_what_is_wrong_and_show_a_good_one() {
        for (body, want) in [
            ("", "the body is empty"),
            ("{not json", "key must be a string"),
            (r#"{"prefix": 7}"#, "prefix: invalid type"),
            (r#"{"prefix": "x", "bogus": 1}"#, "unknown field `bogus`"),
            (r#"{}"#, "missing field `prefix`"),
            // A key with escaped control characters (found by the api_bodies fuzz target).
            (
                r#"{"p\\vxl\n:7\u001b": 1}"#,
                r"unknown field `p\vxl\n:7\u{1b}`",
            ),
        ] {
            let e = parse_json::<Body>(body.as_bytes()).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST);
            let m = e.message();
            assert!(m.contains(want), "{body:?}: {m}");
            assert!(m.contains(r#"{"prefix": "192.0.2.7"}"#), "{m}");
            assert!(!m.contains('\n'), "one line: {m}");
        }
    }
}
