//! A real browser for the dashboard's tests: headless Chromium (Debian
//! `chromium`) driven over the DevTools protocol — open a page, evaluate
//! JavaScript in it, take a screenshot. Chromium runs in its own process
//! group with a profile of its own; both go when the [`Browser`] drops.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Call `f` every 100 ms until it says yes or `timeout` passes; whether
/// it said yes. (A deadline to give up by, never a measured time.)
pub fn poll(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t0.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Is `prog` on PATH?
pub fn have(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// Headless Chromium with the DevTools protocol on a port of its own;
/// killed and its profile removed when dropped.
pub struct Browser {
    child: Child,
    profile: PathBuf,
    port: u16,
}

impl Browser {
    /// Chromium showing `url` in a `width`×`height` window.
    ///
    /// # Panics
    /// Chromium is not installed or does not open its DevTools port.
    pub fn open(url: &str, width: u32, height: u32) -> Self {
        assert!(
            have("chromium"),
            "chromium is not installed: ./run test installs it (apt-get install chromium)"
        );
        static N: AtomicU32 = AtomicU32::new(0);
        let profile = std::env::temp_dir().join(format!(
            "rampart-chromium-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&profile).expect("a chromium profile directory");
        let child = Command::new("chromium")
            // Its own process group: its helpers (zygote, renderers) go with it.
            .process_group(0)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        let mut me = Self {
            child,
            profile,
            port: 0,
        };
        // Chromium writes the port it bound into the profile.
        let file = me.profile.join("DevToolsActivePort");
        assert!(
            poll(Duration::from_secs(60), || {
                me.port = std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|t| t.lines().next()?.trim().parse().ok())
                    .unwrap_or(0);
                me.port != 0
            }),
            "chromium did not open its DevTools port"
        );
        me
    }

    /// The DevTools connection of the page showing `url_part`.
    ///
    /// # Panics
    /// No such page within 30 s.
    pub fn page(&self, url_part: &str) -> Cdp {
        let mut ws = None;
        assert!(
            poll(Duration::from_secs(30), || {
                let list = http_get(SocketAddr::from(([127, 0, 0, 1], self.port)), "/json/list");
                let v: serde_json::Value = serde_json::from_str(&list).unwrap_or_default();
                ws = v.as_array().into_iter().flatten().find_map(|t| {
                    (t["type"] == "page" && t["url"].as_str()?.contains(url_part))
                        .then(|| t["webSocketDebuggerUrl"].as_str().map(str::to_string))?
                });
                ws.is_some()
            }),
            "chromium shows no page of {url_part}"
        );
        Cdp::connect(&ws.unwrap_or_default())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// GET `path`: the body ("" on any failure). Chromium's DevTools
/// endpoint speaks HTTP/1.1 only and keeps the connection open whatever
/// the request says, so the body is read by its Content-Length. The
/// Host header carries the port: chromium builds its WebSocket URLs from it.
pub fn http_get(addr: SocketAddr, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: Option<usize> = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok());
            if let Some(len) = len {
                if buf.len() >= end + 4 + len {
                    return String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                }
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&buf);
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// A DevTools protocol client over a page's WebSocket.
pub struct Cdp {
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Cdp {
    fn connect(url: &str) -> Self {
        let (ws, _) = tungstenite::connect(url).expect("the page's DevTools WebSocket");
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
            // A browser that stops answering fails the test, not hangs it.
            let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
        }
        Self { ws, next: 1 }
    }

    /// Call `method` and return its result.
    ///
    /// # Panics
    /// A protocol error.
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let r = self.try_call(method, params);
        assert!(r["error"].is_null(), "{method}: {}", r["error"]);
        r["result"].clone()
    }

    /// Call `method`: its whole answer (`result` or `error`).
    ///
    /// # Panics
    /// The WebSocket failing.
    pub fn try_call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next;
        self.next += 1;
        let req = serde_json::json!({"id": id, "method": method, "params": params});
        self.ws
            .send(tungstenite::Message::Text(req.to_string()))
            .expect("DevTools write");
        loop {
            let m = self.ws.read().expect("DevTools read");
            let tungstenite::Message::Text(t) = m else {
                continue;
            };
            let v: serde_json::Value = serde_json::from_str(&t).unwrap_or_default();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// Evaluate `expr` in the page; its value (JSON), null while the
    /// page is between documents.
    pub fn eval(&mut self, expr: &str) -> serde_json::Value {
        let r = self.try_call(
            "Runtime.evaluate",
            serde_json::json!({"expression": expr, "returnByValue": true}),
        );
        r["result"]["result"]["value"].clone()
    }

    /// Evaluate `expr`, a `JSON.stringify(…)`, and parse what it gives
    /// (null while the page is between documents).
    pub fn eval_json(&mut self, expr: &str) -> serde_json::Value {
        let s = self.eval(expr);
        serde_json::from_str(s.as_str().unwrap_or("null")).unwrap_or_default()
    }

    /// Go to `url`.
    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", serde_json::json!({ "url": url }));
    }

    /// A PNG of the whole page.
    ///
    /// # Panics
    /// Chromium does not give one.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine;
        let shot = self.call(
            "Page.captureScreenshot",
            serde_json::json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .expect("base64 screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        png
    }
}
