//! Bearer-token authentication, the same for every daemon.
//!
//! Tokens come from the file named by `server.token_file`: one entry a
//! line, `TOKEN` or `NAME TOKEN`; `#` starts a comment. A token may be
//! given as `sha256:<64 hex digits>` (the hash of the secret) so the file
//! need not hold secrets. `NAME` is who the token belongs to: the tenant
//! daemon maps it to a tenant, the DDoS daemon logs it.
//!
//! Rules (applied by [`require_token`] to every API route):
//! - `GET`/`HEAD` routes are open on a loopback listener, and need a token
//!   on any other address;
//! - every other method (a change) needs a valid token, always;
//! - `/healthz` is always open, and so are the dashboard's page and files
//!   (`GET /`, `GET /ui/…`: no data in them; its data routes follow the rules);
//! - a token that is sent is checked even where none is needed (a wrong
//!   token is an error, never silently ignored).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ErrorKind};

/// Shortest token accepted (a guessable token is no protection).
pub const MIN_TOKEN_LEN: usize = 8;

/// Who a valid token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// `NAME` of the token's line (`None`: an unnamed operator token).
    pub name: Option<String>,
}

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("server.token_file {}: {err}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error: in the message once, deliberately not a `source()`
        /// (a printed chain would repeat it).
        err: std::io::Error,
    },
    /// A line is wrong.
    #[error("server.token_file {} line {line}: {reason}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong and how to fix it.
        reason: String,
    },
}

/// The tokens a daemon accepts (hashes only: secrets are not kept).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<(Option<String>, [u8; 32])>,
    source: Option<PathBuf>,
}

/// SHA-256 of a token, lowercase hex (what a `sha256:` entry holds).
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()).into())
}

fn hex(b: &[u8; 32]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Tokens {
    /// No tokens: reads open on loopback, every change refused.
    pub fn none() -> Self {
        Self::default()
    }

    /// The tokens of `path` (see the module docs for the format).
    ///
    /// # Errors
    /// [`TokenError`] naming the file and line.
    pub fn load(path: &Path) -> Result<Self, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|err| TokenError::Read {
            path: path.to_path_buf(),
            err,
        })?;
        let mut t = Self::parse(&text).map_err(|(line, reason)| TokenError::Line {
            path: path.to_path_buf(),
            line,
            reason,
        })?;
        t.source = Some(path.to_path_buf());
        Ok(t)
    }

    /// Parse the text of a token file: errors are (line, reason).
    ///
    /// # Errors
    /// A line with more than two fields, a short token, a bad hash, a token
    /// given twice.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut entries: Vec<(Option<String>, [u8; 32])> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (name, tok) = match fields.as_slice() {
                [t] => (None, *t),
                [n, t] => (Some((*n).to_string()), *t),
                _ => {
                    return Err((
                        i + 1,
                        format!(
                            "{} fields: write TOKEN or NAME TOKEN (a token holds no spaces)",
                            fields.len()
                        ),
                    ))
                }
            };
            let hash = if let Some(h) = tok.strip_prefix("sha256:") {
                unhex32(&h.to_ascii_lowercase()).ok_or_else(|| {
                    (
                        i + 1,
                        "sha256: must be followed by 64 hex digits (`sha256sum` of the token)"
                            .to_string(),
                    )
                })?
            } else {
                if tok.len() < MIN_TOKEN_LEN {
                    return Err((
                        i + 1,
                        format!("token shorter than {MIN_TOKEN_LEN} characters: use a long random one (e.g. `openssl rand -hex 16`)"),
                    ));
                }
                Sha256::digest(tok.as_bytes()).into()
            };
            if entries.iter().any(|(_, h)| *h == hash) {
                return Err((i + 1, "this token is also on an earlier line".into()));
            }
            entries.push((name, hash));
        }
        Ok(Self {
            entries,
            source: None,
        })
    }

    /// The optional `server.token_file` of a config.
    ///
    /// # Errors
    /// As [`Tokens::load`].
    pub fn from_file(path: Option<&Path>) -> Result<Self, TokenError> {
        path.map_or_else(|| Ok(Self::none()), Self::load)
    }

    /// True when no token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The names on the file's lines (unnamed lines give `None`).
    pub fn names(&self) -> impl Iterator<Item = Option<&str>> {
        self.entries.iter().map(|(n, _)| n.as_deref())
    }

    /// The file the tokens came from.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// Who `token` belongs to; every entry is compared, in constant time.
    pub fn check(&self, token: &str) -> Option<Principal> {
        let want: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (name, have) in &self.entries {
            let diff = have
                .iter()
                .zip(want.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 {
                found = Some(Principal { name: name.clone() });
            }
        }
        found
    }
}

/// The tokens a running server accepts, replaced whole by a reload
/// (requests in flight keep the set they started with).
#[derive(Debug, Clone, Default)]
pub struct TokenSlot(Arc<std::sync::RwLock<Arc<Tokens>>>);

impl TokenSlot {
    /// The tokens now.
    pub fn get(&self) -> Arc<Tokens> {
        self.0
            .read()
            .map(|t| Arc::clone(&t))
            .unwrap_or_else(|p| Arc::clone(&p.into_inner()))
    }

    /// Accept `tokens` from now on.
    pub fn set(&self, tokens: Tokens) {
        let t = Arc::new(tokens);
        match self.0.write() {
            Ok(mut w) => *w = t,
            Err(p) => *p.into_inner() = t,
        }
    }
}

impl From<Arc<Tokens>> for TokenSlot {
    fn from(t: Arc<Tokens>) -> Self {
        Self(Arc::new(std::sync::RwLock::new(t)))
    }
}

/// What [`require_token`] needs.
#[derive(Debug, Clone)]
pub struct AuthState {
    /// Accepted tokens.
    pub tokens: TokenSlot,
    /// The API listens on a loopback address (reads need no token there).
    pub loopback: bool,
}

/// The bearer token of a request: `Ok(None)` if there is no Authorization header.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(h) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::new(
            ErrorKind::Unauthorized,
            "the Authorization header must be `Bearer <token>`",
        )
    };
    let h = h.to_str().map_err(|_| bad())?;
    let (scheme, token) = h.split_once(' ').unwrap_or((h, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(bad());
    }
    let token = token.trim();
    Ok((!token.is_empty()).then_some(token))
}

fn missing(tokens: &Tokens, change: bool) -> ApiError {
    if tokens.is_empty() {
        ApiError::new(
            ErrorKind::Unauthorized,
            if change {
                "changes need `Authorization: Bearer <token>` and this daemon has no tokens: set server.token_file in its config"
            } else {
                "this daemon listens beyond loopback and has no tokens: set server.token_file in its config"
            },
        )
    } else {
        ApiError::new(
            ErrorKind::Unauthorized,
            "missing token: send `Authorization: Bearer <token>`",
        )
    }
}

/// Decide whether `method path` with `headers` may go on (see the module
/// docs); on success, who sent it (if a token came with it).
///
/// # Errors
/// [`ErrorKind::Unauthorized`] with what to send.
pub fn authorize(
    st: &AuthState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<Option<Principal>, ApiError> {
    let tokens = st.tokens.get();
    let principal = match bearer(headers)? {
        Some(t) => Some(tokens.check(t).ok_or_else(|| {
            ApiError::new(
                ErrorKind::Unauthorized,
                "unknown token: use one listed in the daemon's server.token_file",
            )
        })?),
        None => None,
    };
    // The dashboard's page and files hold no data (its data routes are
    // checked like any other): a browser loads the page, then the page
    // asks for a token when the data routes answer 401.
    let page = method == Method::GET && (path == "/" || path.starts_with("/ui/"));
    if principal.is_some() || path == "/healthz" || page {
        return Ok(principal);
    }
    let read = method == Method::GET || method == Method::HEAD;
    if read && st.loopback {
        return Ok(None);
    }
    Err(missing(&tokens, !read))
}

/// axum middleware applying [`authorize`]; the [`Principal`] goes into the
/// request's extensions for handlers that need to know who asks.
pub async fn require_token(State(st): State<AuthState>, mut req: Request, next: Next) -> Response {
    match authorize(&st, req.method(), req.uri().path(), req.headers()) {
        Ok(Some(p)) => {
            req.extensions_mut().insert(p);
            next.run(req).await
        }
        Ok(None) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = ApiError;

    /// The request's principal; a route that needs one (it acts for a
    /// named tenant, say) fails without a token even where reads are open.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Principal>().cloned().ok_or_else(|| {
            ApiError::new(
                ErrorKind::Unauthorized,
                "missing token: send `Authorization: Bearer <token>`",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(text: &str, loopback: bool) -> AuthState {
        AuthState {
            tokens: Arc::new(Tokens::parse(text).unwrap()).into(),
            loopback,
        }
    }

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, a.parse().unwrap());
        }
        h
    }

    #[test]
    fn token_file_lines() {
        let t = Tokens::parse(&format!(
            "# operators\nsecret-one-123\nacme  acme-token-456   # a tenant\n\nbeta sha256:{}\n",
            token_hash("beta-token-789").to_uppercase()
        ))
        .unwrap();
        assert_eq!(
            t.names().collect::<Vec<_>>(),
            vec![None, Some("acme"), Some("beta")]
        );
        assert_eq!(t.check("secret-one-123"), Some(Principal { name: None }));
        assert_eq!(
            t.check("acme-token-456").unwrap().name.as_deref(),
            Some("acme")
        );
        assert_eq!(
            t.check("beta-token-789").unwrap().name.as_deref(),
            Some("beta")
        );
        assert_eq!(t.check("beta-token-78"), None);
        assert_eq!(t.check(""), None);
    }

    #[test]
    fn bad_token_files_name_the_line() {
        for (text, line, why) in [
            ("ok-token-1234\na b c\n", 2, "TOKEN or NAME TOKEN"),
            ("short\n", 1, "shorter than 8"),
            ("x sha256:abcd\n", 1, "64 hex digits"),
            ("a same-token-1\nb same-token-1\n", 2, "earlier line"),
        ] {
            let (l, m) = Tokens::parse(text).unwrap_err();
            assert_eq!(l, line, "{text:?}");
            assert!(m.contains(why), "{text:?}: {m}");
        }
        let e = Tokens::load(Path::new("/nonexistent/tokens")).unwrap_err();
        assert!(
            e.to_string()
                .contains("server.token_file /nonexistent/tokens"),
            "{e}"
        );
    }

    #[test]
    fn changes_need_the_right_token() {
        let s = st("op-token-12345\n", true);
        // no token
        let e = authorize(&s, &Method::POST, "/v1/blocked", &headers(None)).unwrap_err();
        assert_eq!(e.status().as_u16(), 401);
        assert!(e.message().contains("Bearer"), "{}", e.message());
        // wrong token
        let e = authorize(
            &s,
            &Method::DELETE,
            "/v1/blocked/x",
            &headers(Some("Bearer op-token-99999")),
        )
        .unwrap_err();
        assert!(e.message().contains("unknown token"), "{}", e.message());
        // not a bearer token
        let e = authorize(
            &s,
            &Method::POST,
            "/v1/blocked",
            &headers(Some("Basic abc")),
        )
        .unwrap_err();
        assert!(e.message().contains("Bearer <token>"), "{}", e.message());
        // right token
        let p = authorize(
            &s,
            &Method::POST,
            "/v1/blocked",
            &headers(Some("Bearer op-token-12345")),
        )
        .unwrap();
        assert_eq!(p, Some(Principal { name: None }));
    }

    #[test]
    fn reads_are_open_on_loopback_only() {
        let s = st("op-token-12345\n", true);
        assert_eq!(
            authorize(&s, &Method::GET, "/v1/blocked", &headers(None)).unwrap(),
            None
        );
        // a token sent with a read is still checked
        assert!(authorize(
            &s,
            &Method::GET,
            "/v1/blocked",
            &headers(Some("Bearer nope-nope-1"))
        )
        .is_err());
        let wide = st("op-token-12345\n", false);
        let e = authorize(&wide, &Method::GET, "/v1/blocked", &headers(None)).unwrap_err();
        assert_eq!(e.status().as_u16(), 401);
        assert!(authorize(
            &wide,
            &Method::GET,
            "/v1/blocked",
            &headers(Some("Bearer op-token-12345"))
        )
        .is_ok());
        // /healthz is open everywhere
        assert!(authorize(&wide, &Method::GET, "/healthz", &headers(None)).is_ok());
    }

    #[test]
    fn without_tokens_changes_are_refused_with_the_fix() {
        let s = AuthState {
            tokens: Arc::new(Tokens::none()).into(),
            loopback: true,
        };
        let e = authorize(&s, &Method::POST, "/v1/blocked", &headers(None)).unwrap_err();
        assert!(e.message().contains("server.token_file"), "{}", e.message());
        assert!(authorize(&s, &Method::GET, "/v1/status", &headers(None)).is_ok());
    }
}
