//! Hostile tenants against the API: the corpus of adversarial programs in
//! tests/hostile/ (each refused by the rule it breaks, or accepted), and
//! hostile requests — no token, a wrong one, another scheme, another
//! tenant's token, oversized and malformed bodies, paths that try to leave
//! the tenant's maps, selectors that would take other tenants' packets —
//! each refused with the right status and nothing changed.

mod common;

use std::path::PathBuf;

use rampart_tenant::client::Client;
use rampart_tenant::config::Config;
use rampart_tenant::serve::Server;
use serde_json::{json, Value};

const TOKEN_A: &str = "token-hostile-aaaa";
const TOKEN_B: &str = "token-hostile-bbbb";

/// The server and its token file (removed at the end).
struct Api {
    server: Server,
    _tokens: tempfile::NamedTempFile,
}

impl std::ops::Deref for Api {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.server
    }
}

/// Tenants a (10.20.0.0/16, VLAN 101) and b (a carve-out of a's space,
/// 10.20.7.0/24), on lo, nothing attached.
fn server() -> Api {
    assert!(
        rampart_dataplane::features::is_root(),
        "tenant API tests need root: run them with ./run test"
    );
    let name = rampart_lab::testing::unique_prefix("thost");
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), format!("a {TOKEN_A}\nb {TOKEN_B}\n")).unwrap();
    let cfg = format!(
        r#"
        [server]
        listen = "127.0.0.1:0"
        token_file = "{}"
        [infra]
        name = "{name}"
        interfaces = ["lo"]
        attach = false
        [[tenant]]
        name = "a"
        selectors = ["prefix:10.20.0.0/16", "vlan:101"]
        [[tenant]]
        name = "b"
        selectors = ["prefix:10.20.7.0/24"]
        "#,
        tokens.path().display()
    );
    Api {
        server: Server::start(Config::parse(&cfg).unwrap()).unwrap(),
        _tokens: tokens,
    }
}

fn url(s: &Server) -> String {
    format!("http://{}", s.addr)
}

/// Everything a request could have changed, for both tenants.
fn state(s: &Server) -> Value {
    let mut v = json!({});
    for (who, token) in [("a", TOKEN_A), ("b", TOKEN_B)] {
        let c = Client::new(&url(s), token);
        let me = c.get("/v1/tenant").unwrap().unwrap();
        let maps = c.get("/v1/maps").unwrap().unwrap();
        let mut dumps = json!({});
        for m in maps.as_array().unwrap() {
            let n = m["name"].as_str().unwrap();
            dumps[n] = c.get(&format!("/v1/maps/{n}")).unwrap().unwrap()["entries"].clone();
        }
        v[who] = json!({"selectors": me["selectors"], "program": me["program"], "maps": dumps});
    }
    v
}

/// The corpus: file name, what is expected, the source.
fn corpus() -> Vec<(String, String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .map(|p| {
            let src = std::fs::read_to_string(&p).unwrap();
            let expect = src
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("// expect: "))
                .unwrap_or_else(|| panic!("{}: first line must be `// expect: …`", p.display()))
                .to_string();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                expect,
                src,
            )
        })
        .collect();
    v.sort();
    assert!(v.len() >= 15, "the corpus is in tests/hostile/");
    v
}

#[test]
fn every_hostile_program_is_refused_by_its_rule_or_accepted() {
    assert!(
        rampart_dataplane::maps::possible_cpus() >= 2,
        "percpu_map_times_cpus.c needs a machine with 2 or more CPUs"
    );
    let s = server();
    let a = Client::new(&url(&s), TOKEN_A);
    let mut accepted = 0;
    for (file, expect, src) in corpus() {
        let before = state(&s);
        let r = a.put("/v1/program", src.as_bytes()).unwrap();
        let (kind, text) = expect.split_once(": ").unwrap_or((expect.as_str(), ""));
        match (kind, r) {
            ("accepted", Ok(info)) => {
                assert_eq!(info["status"], "running", "{file}");
                accepted += 1;
            }
            ("refused", Err(e)) => {
                assert_eq!((e.status, e.code()), (422, "refused"), "{file}: {}", e.body);
                for part in text.split(", ") {
                    assert!(
                        e.message().contains(part),
                        "{file}: the reason names the rule ({part}): {}",
                        e.message()
                    );
                }
            }
            ("compile", Err(e)) => {
                assert_eq!((e.status, e.code()), (422, "compile"), "{file}: {}", e.body);
                assert!(
                    e.detail("compiler").unwrap().contains(text),
                    "{file}: {}",
                    e.body
                );
            }
            ("verifier", Err(e)) => {
                assert_eq!(
                    (e.status, e.code()),
                    (422, "verifier"),
                    "{file}: {}",
                    e.body
                );
                assert!(
                    e.detail("verifier_log").unwrap().contains(text),
                    "{file}: {}",
                    e.body
                );
            }
            (k, r) => panic!("{file}: expected {k}, got {r:?}"),
        }
        if kind != "accepted" {
            assert_eq!(
                state(&s),
                before,
                "{file}: a refused program changed nothing"
            );
        }
    }
    assert!(accepted >= 2);
}

#[test]
fn a_source_over_the_size_limit_and_garbage_are_refused() {
    let s = server();
    let a = Client::new(&url(&s), TOKEN_A);
    let before = state(&s);
    // Over the source limit but under the HTTP body limit: refused by rampart.
    let big = format!(
        "// {}\nint tenant_main(void *c) {{ return 2; }}\n",
        "x".repeat(1 << 20)
    );
    let e = a.put("/v1/program", big.as_bytes()).unwrap().unwrap_err();
    assert_eq!(e.status, 400, "{}", e.body);
    assert!(e.message().contains("exceeds"), "{}", e.message());
    // Neither ELF nor text.
    let e = a
        .put("/v1/program", &[0xff, 0xfe, 0, 1])
        .unwrap()
        .unwrap_err();
    assert_eq!(e.status, 400, "{}", e.body);
    // ELF magic and nothing else, and a truncated real object.
    let e = a
        .put("/v1/program", b"\x7fELF\x02\x01\x01")
        .unwrap()
        .unwrap_err();
    assert_eq!((e.status, e.code()), (422, "refused"), "{}", e.body);
    let good = common::build(&common::counter_prog(1, "XDP_DROP"));
    let cut = &good.tenant_object[..good.tenant_object.len() / 2];
    let e = a.put("/v1/program", cut).unwrap().unwrap_err();
    assert_eq!((e.status, e.code()), (422, "refused"), "{}", e.body);
    assert_eq!(state(&s), before);
}

/// A raw request: method, path, Authorization header (if any), body.
fn raw(s: &Server, method: &str, path: &str, auth: Option<&str>, body: &[u8]) -> (u16, Value) {
    if body.len() > rampart_service::error::BODY_LIMIT {
        return oversized(s, method, path, auth, body);
    }
    let mut req = ureq::request(method, &format!("{}{path}", url(s)));
    if let Some(a) = auth {
        req = req.set("Authorization", a);
    }
    let r = if body.is_empty() && method == "GET" {
        req.call()
    } else {
        req.send_bytes(body)
    };
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {path}: {e}"),
    };
    let status = resp.status();
    let text = resp.into_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A request with a body over the server's limit. The body is written from
/// another thread while this one reads the answer: the server answers once
/// it has read past the limit and closes the connection, so a client that
/// writes the whole body before reading (ureq) sees a broken pipe or a reset
/// instead of the answer, depending on timing.
fn oversized(
    s: &Server,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    use std::io::{Read, Write};
    let host = url(s).trim_start_matches("http://").to_string();
    let mut c = std::net::TcpStream::connect(&host).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(a) = auth {
        head += &format!("Authorization: {a}\r\n");
    }
    head += "\r\n";
    c.write_all(head.as_bytes()).unwrap();
    let mut w = c.try_clone().unwrap();
    let body = body.to_vec();
    // Write errors are expected: the server stops reading at its limit.
    let writer = std::thread::spawn(move || w.write_all(&body).is_ok());
    // No answer at all is a failure, not a hang.
    c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut resp = Vec::new();
    let mut buf = [0u8; 4096];
    // Until the server closes; a reset after its answer still leaves the
    // answer read.
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
        resp.extend_from_slice(&buf[..n]);
    }
    let _ = c.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    let resp = String::from_utf8_lossy(&resp);
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no answer: {resp:?}"));
    (
        status,
        serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
    )
}

#[test]
fn hostile_requests_are_refused_and_change_nothing() {
    let s = server();
    let a = Client::new(&url(&s), TOKEN_A);
    let prog = common::counter_prog(1, "XDP_DROP");
    a.put("/v1/program", prog.as_bytes()).unwrap().unwrap();
    let set = br#"{"value": "0700000000000000"}"#;
    a.put("/v1/maps/counts/00000000", set).unwrap().unwrap();
    let before = state(&s);
    let bearer_a = format!("Bearer {TOKEN_A}");
    let bearer_b = format!("Bearer {TOKEN_B}");
    let almost_a = format!("Bearer {TOKEN_A}x");
    let (a_, b_) = (Some(bearer_a.as_str()), Some(bearer_b.as_str()));
    let entry: &[u8] = br#"{"value": "ff00000000000000"}"#;
    let key0 = "/v1/maps/counts/00000000";
    let sel = "/v1/selectors";
    let many: Vec<u8> = serde_json::to_vec(
        &(0..65)
            .map(|i| format!("prefix:10.20.{i}.0/28"))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let big = vec![b' '; 3 << 20];
    // (method, path, authorization, body, expected status)
    type Request<'a> = (&'a str, &'a str, Option<&'a str>, &'a [u8], u16);
    #[rustfmt::skip]
    let cases: Vec<Request> = vec![
        // Authentication.
        ("PUT", key0, None, entry, 401),
        ("PUT", key0, Some("Bearer"), entry, 401),
        ("PUT", key0, Some("Bearer wrong-token"), entry, 401),
        ("PUT", key0, Some("Basic dG9rZW4taG9zdGlsZS1hYWFhOg=="), entry, 401),
        ("PUT", key0, Some(almost_a.as_str()), entry, 401),
        ("DELETE", "/v1/program", Some("Bearer  "), b"", 401),
        // Another tenant's token acts on that tenant only: b has no such
        // map and no program; a's stay as they are.
        ("PUT", key0, b_, entry, 404),
        ("GET", "/v1/maps/counts", b_, b"", 404),
        ("DELETE", key0, b_, b"", 404),
        // Paths that try to leave the tenant's own maps.
        ("GET", "/v1/maps/..%2F..%2Fb%2Fmaps%2Fcounts", a_, b"", 404),
        ("GET", "/v1/maps/..%2F..%2F..%2Fmaps%2Frampart_t_used", a_, b"", 404),
        ("PUT", "/v1/maps/rampart_t_used/00000000", a_, entry, 404),
        ("GET", "/v1/maps/.rodata", a_, b"", 404),
        // Malformed bodies and keys.
        ("PUT", key0, a_, b"{not json", 400),
        ("PUT", key0, a_, br#"{"value": 2}"#, 400),
        ("PUT", key0, a_, br#"{"value": "ff00000000000000", "key": "00000000"}"#, 400),
        ("PUT", key0, a_, br#"{"value": "00"}"#, 400),
        ("PUT", "/v1/maps/counts/zz000000", a_, br#"{"value": "0000000000000000"}"#, 400),
        ("PUT", "/v1/maps/counts/000000", a_, br#"{"value": "0000000000000000"}"#, 400),
        ("PUT", key0, a_, &[0xff; 64], 400),
        ("DELETE", "/v1/maps/counts/0000", a_, b"", 400),
        ("PUT", sel, a_, b"{}", 400),
        ("PUT", sel, a_, br#"["prefix:10.20.1.0/24", 7]"#, 400),
        ("PUT", sel, a_, br#"["prefix:10.20.1.0/33"]"#, 400),
        ("PUT", sel, a_, br#"["prefix:10.20.1.0/24", "prefix:10.20.1.0/24"]"#, 400),
        ("PUT", "/v1/program", a_, b"", 400),
        // Oversized bodies (beyond the HTTP body limit).
        ("PUT", "/v1/program", a_, &big, 413),
        ("PUT", sel, a_, &big, 413),
        ("PUT", key0, a_, &big, 413),
        // Selectors that would take packets that are not a's: outside its
        // grant (another tenant's space, everything, the interface, another
        // VLAN), and inside b's carve-out of a's own /16 (the longest
        // prefix wins).
        ("PUT", sel, a_, br#"["prefix:10.21.0.0/24"]"#, 400),
        ("PUT", sel, a_, br#"["prefix:0.0.0.0/0"]"#, 400),
        ("PUT", sel, a_, br#"["iface:lo"]"#, 400),
        ("PUT", sel, a_, br#"["vlan:102"]"#, 400),
        ("PUT", sel, a_, br#"["prefix:10.20.7.128/25"]"#, 409),
        ("PUT", sel, a_, br#"["prefix:10.20.7.0/24"]"#, 409),
        ("PUT", sel, b_, br#"["prefix:10.20.0.0/16"]"#, 400),
        // Too many selectors (the demultiplexer's table is shared).
        ("PUT", sel, a_, &many, 400),
    ];
    for (method, path, auth, body, want) in &cases {
        let (status, reply) = raw(&s, method, path, *auth, body);
        assert_eq!(status, *want, "{method} {path} ({auth:?}): {reply}");
        if *want == 413 {
            assert_eq!(
                reply["error"]["code"], "too_large",
                "{method} {path}: {reply}"
            );
        } else {
            assert!(
                reply["error"]
                    .get("message")
                    .and_then(Value::as_str)
                    .is_some_and(|m| !m.contains('\n')),
                "{method} {path}: a one-line message: {reply}"
            );
        }
        assert_eq!(
            state(&s),
            before,
            "{method} {path} ({auth:?}) changed something"
        );
    }
    // a may still narrow within its grant, around b's carve-out.
    let v = a
        .put(
            sel,
            br#"["prefix:10.20.1.0/24", "prefix:10.20.8.0/22", "vlan:101"]"#,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        v,
        json!(["prefix:10.20.1.0/24", "prefix:10.20.8.0/22", "vlan:101"])
    );
}
