//! A small client of the tenant API, for the CLI and the tests.

use serde_json::Value;

use crate::error::{Error, Result};

/// An API error as the server described it.
#[derive(Debug, Clone)]
pub struct ApiFailure {
    /// HTTP status.
    pub status: u16,
    /// The JSON body: `{"error": {"code", "message", "details"?}}`.
    pub body: Value,
}

impl ApiFailure {
    /// The one-line message.
    pub fn message(&self) -> String {
        self.body["error"]["message"]
            .as_str()
            .map_or_else(|| format!("HTTP {}", self.status), str::to_string)
    }

    /// The stable code (`invalid`, `not_found`, `refused`, `compile`, `verifier`, …).
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }

    /// A detail field (`verifier_log`, `compiler`, `reason`), if the server sent it.
    pub fn detail(&self, name: &str) -> Option<&str> {
        self.body["error"]["details"][name].as_str()
    }
}

/// What a call returned.
pub type Reply = std::result::Result<Value, ApiFailure>;

/// Client for one tenant.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl Client {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:9610`) using `token`.
    pub fn new(base: &str, token: &str) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout(std::time::Duration::from_secs(120))
            .build();
        Self {
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
            agent,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<(&[u8], &str)>) -> Result<Reply> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .agent
            .request(method, &url)
            .set("Authorization", &format!("Bearer {}", self.token));
        if let Some((_, ctype)) = body {
            req = req.set("Content-Type", ctype);
        }
        let body = body.map(|(b, _)| b);
        let res = match body {
            Some(b) => req.send_bytes(b),
            None => req.call(),
        };
        match res {
            Ok(r) => {
                let text = r.into_string().map_err(|e| Error::io(format!("reading the reply of {url}"), e))?;
                Ok(Ok(serde_json::from_str(&text).unwrap_or(Value::String(text))))
            }
            Err(ureq::Error::Status(status, r)) => {
                let text = r.into_string().unwrap_or_default();
                let body = serde_json::from_str(&text)
                    .unwrap_or(serde_json::json!({ "error": { "message": text.trim() } }));
                Ok(Err(ApiFailure { status, body }))
            }
            Err(e) => Err(Error::Invalid(format!(
                "cannot reach the tenant API at {}: {e} (is `rampart tenant serve` running? see --server)",
                self.base
            ))),
        }
    }

    /// GET.
    ///
    /// # Errors
    /// Transport failures (the server's own errors are in the [`Reply`]).
    pub fn get(&self, path: &str) -> Result<Reply> {
        self.call("GET", path, None)
    }

    /// PUT with a body (a program: C source or a BPF object).
    ///
    /// # Errors
    /// As [`Client::get`].
    pub fn put(&self, path: &str, body: &[u8]) -> Result<Reply> {
        self.call("PUT", path, Some((body, "application/octet-stream")))
    }

    /// PUT with a JSON body.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub fn put_json(&self, path: &str, body: &Value) -> Result<Reply> {
        let b = body.to_string();
        self.call("PUT", path, Some((b.as_bytes(), "application/json")))
    }

    /// DELETE.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub fn delete(&self, path: &str) -> Result<Reply> {
        self.call("DELETE", path, None)
    }

    /// GET without authentication (e.g. `/metrics`), as text.
    ///
    /// # Errors
    /// Transport failures or a non-200 status.
    pub fn get_text(&self, path: &str) -> Result<String> {
        let url = format!("{}{path}", self.base);
        self.agent
            .get(&url)
            .call()
            .map_err(|e| Error::Invalid(format!("GET {url}: {e}")))?
            .into_string()
            .map_err(|e| Error::io(format!("reading {url}"), e))
    }
}
