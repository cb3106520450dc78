//! What the daemons' end-to-end tests share to reach a running API and to
//! wait for a condition: a free port, one HTTP request, polling.
//!
//! No timing assertion lives here: a deadline only stops a hung test, so
//! it is generous ([`DEADLINE`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long [`wait_for`] waits before it calls the test hung.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// A TCP port of 127.0.0.1 free right now (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// One HTTP/1.1 request (`Connection: close`): (status, body). A body
/// that starts like JSON (`{`, `[`) or an empty one goes as
/// `application/json`, anything else (a program's source or object) as
/// `application/octet-stream`; `token` goes as `Authorization: Bearer`.
///
/// # Panics
/// When the server cannot be reached or answers no HTTP status line.
pub fn http(
    addr: impl ToSocketAddrs + std::fmt::Debug,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: impl AsRef<[u8]>,
) -> (u16, String) {
    let body = body.as_ref();
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect {addr:?}: {e}"));
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let json = body.is_empty() || body.starts_with(b"{") || body.starts_with(b"[");
    let ctype = if json {
        "application/json"
    } else {
        "application/octet-stream"
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: t\r\n{auth}Content-Type: {ctype}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .and_then(|()| s.write_all(body))
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let mut out = String::new();
    s.read_to_string(&mut out)
        .unwrap_or_else(|e| panic!("{method} {path}: reading the answer: {e}"));
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no HTTP status in {out:?}"));
    let body = out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (code, body)
}

/// Poll `f` every 50 ms until it holds; panic naming `what` after
/// `deadline` (pass [`DEADLINE`] unless the wait is itself bounded).
pub fn wait_for(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < deadline,
            "no {what} after {} s",
            deadline.as_secs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reaches_a_server_and_its_answer_comes_back() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            // The request is whole once its body (Content-Length 7) is in.
            while !req.ends_with(b"int x;\n") {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "{}", String::from_utf8_lossy(&req));
                req.extend_from_slice(&buf[..n]);
            }
            c.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 8\r\n\r\na\r\n\r\nb\r\n")
                .unwrap();
            String::from_utf8(req).unwrap()
        });
        let (code, body) = http(addr, "PUT", "/v1/program", Some("tok"), b"int x;\n");
        assert_eq!((code, body.as_str()), (201, "a\r\n\r\nb\r\n"));
        let req = server.join().unwrap();
        assert!(req.starts_with("PUT /v1/program HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("Authorization: Bearer tok\r\n"), "{req}");
        assert!(
            req.contains("Content-Type: application/octet-stream\r\n"),
            "{req}"
        );
    }

    #[test]
    fn wait_for_returns_once_the_condition_holds() {
        let mut n = 0;
        wait_for("the third call", DEADLINE, || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
        assert_ne!(free_port(), 0);
    }

    #[test]
    #[should_panic(expected = "no never after 0 s")]
    fn wait_for_names_what_never_came() {
        wait_for("never", Duration::ZERO, || false);
    }
}
