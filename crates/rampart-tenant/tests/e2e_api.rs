//! The HTTP API end to end: token authentication (tokens from
//! `server.token_file`), each tenant confined to its own program, selectors
//! and maps, errors that say what is wrong (refusal reason, compiler
//! output, verifier log), /metrics, and every route in the OpenAPI document.

mod common;

use rampart_tenant::client::Client;
use rampart_tenant::config::Config;
use rampart_tenant::serve::Server;
use serde_json::json;

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

fn server() -> Api {
    assert!(
        rampart_dataplane::features::is_root(),
        "tenant API tests need root: run them with ./run test"
    );
    let name = rampart_lab::testing::unique_prefix("tapi");
    let tokens = tempfile::NamedTempFile::new().unwrap();
    // a's token in clear, b's as its hash.
    std::fs::write(
        tokens.path(),
        format!(
            "# tenant tokens\na token-aaaaaaaa\nb sha256:{}\n",
            rampart_service::auth::token_hash("token-bbbbbbbb")
        ),
    )
    .unwrap();
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
        selectors = ["prefix:10.20.1.0/24", "vlan:101"]
        [[tenant]]
        name = "b"
        selectors = ["prefix:10.20.2.0/24"]
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

#[test]
fn requests_need_a_valid_token() {
    let s = server();
    for token in ["", "wrong-token", "token-aaaaaaa"] {
        let r = Client::new(&url(&s), token)
            .get("/v1/tenant")
            .unwrap()
            .unwrap_err();
        assert_eq!(r.status, 401, "{token:?}");
        assert!(
            r.message().contains("token") || r.message().contains("Bearer"),
            "{}",
            r.message()
        );
    }
    // The hashed token works like the plain one.
    let b = Client::new(&url(&s), "token-bbbbbbbb")
        .get("/v1/tenant")
        .unwrap()
        .unwrap();
    assert_eq!(b["name"], "b");
    // /metrics and /healthz need no token.
    assert_eq!(
        Client::new(&url(&s), "").get_text("/healthz").unwrap(),
        "ok\n"
    );
    assert!(Client::new(&url(&s), "")
        .get_text("/metrics")
        .unwrap()
        .contains("rampart_tenant_generation"));
    // A change without a token is refused before anything runs.
    let r = Client::new(&url(&s), "")
        .delete("/v1/program")
        .unwrap()
        .unwrap_err();
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
}

#[test]
fn every_route_is_in_the_openapi_document() {
    let s = server();
    let doc: serde_json::Value = serde_json::from_str(
        &Client::new(&url(&s), "")
            .get_text("/v1/openapi.json")
            .unwrap(),
    )
    .unwrap();
    let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    for p in [
        "/v1/tenant",
        "/v1/program",
        "/v1/selectors",
        "/v1/stats",
        "/v1/maps",
        "/v1/maps/{map}",
        "/v1/maps/{map}/{key}",
        "/v1/config/dns",
        "/v1/config/synproxy",
        "/metrics",
        "/healthz",
        "/v1/openapi.json",
    ] {
        assert!(paths.iter().any(|x| *x == p), "{p} missing from {paths:?}");
    }
    // Every documented method is served, every other one is refused.
    let doc: utoipa::openapi::OpenApi = serde_json::from_value(doc).unwrap();
    let agent = s.agent().unwrap();
    let state = std::sync::Arc::new(rampart_tenant::api::ApiState {
        agent,
        compiler: rampart_tenant::compiler::Compiler::new(Default::default()).unwrap(),
        tenants: [("a".to_string(), 1)].into(),
    });
    let mut svc = rampart_service::Service {
        name: "t",
        title: "t",
        version: "0",
        description: "t",
        routes: rampart_tenant::api::routes(state),
        metrics: rampart_service::Metrics::new(),
        tokens: rampart_service::Tokens::none(),
        apps: rampart_service::Apps::none(),
    };
    let auth = rampart_service::auth::AuthState {
        tokens: std::sync::Arc::new(rampart_service::Tokens::parse("a token-aaaaaaaa").unwrap())
            .into(),
        loopback: true,
    };
    let (router, built) = rampart_service::server::build(&mut svc, true, auth);
    assert_eq!(
        built.paths.paths.keys().collect::<Vec<_>>(),
        doc.paths.paths.keys().collect::<Vec<_>>(),
        "the served document is the router's"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let problems = rt.block_on(rampart_service::testing::undocumented_routes(
        router,
        &built,
        "token-aaaaaaaa",
    ));
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_tenant_sees_and_changes_only_its_own_things() {
    let s = server();
    let a = Client::new(&url(&s), "token-aaaaaaaa");
    let b = Client::new(&url(&s), "token-bbbbbbbb");
    let me = a.get("/v1/tenant").unwrap().unwrap();
    assert_eq!(
        (me["name"].as_str(), me["selectors"][0].as_str()),
        (Some("a"), Some("prefix:10.20.1.0/24"))
    );
    // Narrowed to the prefix alone: the VLAN stays a's to take back.
    a.put("/v1/selectors", br#"["prefix:10.20.1.0/24"]"#)
        .unwrap()
        .unwrap();
    assert!(me["program"].is_null());

    let info = a
        .put(
            "/v1/program",
            common::counter_prog(1, "XDP_DROP").as_bytes(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        (info["version"].as_u64(), info["status"].as_str()),
        (Some(1), Some("running"))
    );
    assert_eq!(info["maps"][0]["name"], "counts");
    // b has no program and no maps; a's map is invisible to b.
    assert_eq!(b.get("/v1/program").unwrap().unwrap_err().status, 404);
    assert_eq!(b.get("/v1/maps").unwrap().unwrap(), json!([]));
    assert_eq!(b.get("/v1/maps/counts").unwrap().unwrap_err().status, 404);
    // a reads and writes its own map.
    let k = "00000000";
    a.put_json(
        &format!("/v1/maps/counts/{k}"),
        &json!({"value": "2a00000000000000"}),
    )
    .unwrap()
    .unwrap();
    let dump = a.get("/v1/maps/counts").unwrap().unwrap();
    assert_eq!(
        dump["entries"][0],
        json!({"key": k, "value": "2a00000000000000"})
    );
    let e = a
        .put_json("/v1/maps/counts/00", &json!({"value": "00"}))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(e.message().contains("4 bytes"), "{}", e.message());
    let e = a
        .put_json("/v1/maps/counts/00000000", &json!({"key": "00"}))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(
        e.message().contains("unknown field `key`") && e.message().contains("\"value\""),
        "{}",
        e.message()
    );

    // Selectors: b cannot take a's (it is outside what b was given), a can change its own.
    let e = b
        .put("/v1/selectors", br#"["prefix:10.20.1.0/24"]"#)
        .unwrap()
        .unwrap_err();
    assert_eq!(e.status, 400, "{}", e.message());
    assert!(e.message().contains("outside"), "{}", e.message());
    let e = b
        .put("/v1/selectors", br#"["vlan:99999"]"#)
        .unwrap()
        .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(e.message().contains("vlan"), "{}", e.message());
    let v = a
        .put("/v1/selectors", br#"["prefix:10.20.1.0/24", "vlan:101"]"#)
        .unwrap()
        .unwrap();
    assert_eq!(v, json!(["prefix:10.20.1.0/24", "vlan:101"]));
    assert_eq!(
        b.get("/v1/selectors").unwrap().unwrap(),
        json!(["prefix:10.20.2.0/24"])
    );

    // Stats are per tenant.
    assert_eq!(a.get("/v1/stats").unwrap().unwrap()["name"], "a");
    assert_eq!(b.get("/v1/stats").unwrap().unwrap()["name"], "b");

    // Removing a's program leaves b untouched.
    assert_eq!(
        a.delete("/v1/program").unwrap().unwrap(),
        json!({"removed": true})
    );
    assert_eq!(
        a.delete("/v1/program").unwrap().unwrap(),
        json!({"removed": false})
    );
}

#[test]
fn bad_programs_come_back_with_the_reason() {
    let s = server();
    let a = Client::new(&url(&s), "token-aaaaaaaa");
    // Confinement.
    let hostile = "#include \"rampart_tenant.h\"\nint tenant_main(struct xdp_md *ctx) { long (*h)(long) = (void *)113; return h(0); }\n";
    let e = a
        .put("/v1/program", hostile.as_bytes())
        .unwrap()
        .unwrap_err();
    assert_eq!((e.status, e.code()), (422, "refused"));
    assert!(
        e.message().contains("bpf_probe_read_kernel"),
        "{}",
        e.message()
    );
    // Compiler errors.
    let e = a
        .put(
            "/v1/program",
            b"int tenant_main(struct xdp_md *ctx) { return }",
        )
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), "compile");
    assert!(
        e.detail("compiler").unwrap().contains("tenant.c:1:"),
        "{}",
        e.body
    );
    // The verifier's log.
    let unsafe_read = "#include \"rampart_tenant.h\"\nint tenant_main(struct xdp_md *ctx) { __u8 *p = (void *)(long)ctx->data; return p[40]; }\n";
    let e = a
        .put("/v1/program", unsafe_read.as_bytes())
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), "verifier");
    assert!(
        e.detail("verifier_log")
            .unwrap()
            .contains("invalid access to packet"),
        "{}",
        e.body
    );
    // Nothing was installed by any of these.
    assert_eq!(a.get("/v1/program").unwrap().unwrap_err().status, 404);
    assert_eq!(a.put("/v1/program", b"").unwrap().unwrap_err().status, 400);
}

#[test]
fn metrics_cover_every_tenant() {
    let s = server();
    let a = Client::new(&url(&s), "token-aaaaaaaa");
    a.put(
        "/v1/program",
        common::counter_prog(1, "XDP_DROP").as_bytes(),
    )
    .unwrap()
    .unwrap();
    // Drive one packet through the data path.
    let agent = s.agent().unwrap();
    let frame = common::udp4([10, 20, 1, 2], 9);
    let act = agent
        .call(move |h| {
            rampart_dataplane::testrun::run_packet(h.dispatcher_fd(), &frame, 1)
                .unwrap()
                .retval
        })
        .unwrap();
    assert_eq!(act, 1);
    let m = a.get_text("/metrics").unwrap();
    for line in [
        "rampart_tenant_packets_total{tenant=\"a\"} 1",
        "rampart_tenant_packets_total{tenant=\"b\"} 0",
        "rampart_tenant_verdict_packets_total{tenant=\"a\",verdict=\"drop\"} 1",
        "rampart_tenant_dropped_packets_total{reason=\"no_tokens\",tenant=\"a\"} 0",
        "rampart_tenant_program_version{tenant=\"a\"} 1",
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line:?} in:\n{m}");
    }
    assert!(m.contains("rampart_tenant_cpu_seconds_total{tenant=\"a\"}"));
    assert!(m.contains("rampart_tenant_tokens_seconds{tenant=\"b\"}"));
    assert!(
        m.lines().any(
            |l| l.starts_with("rampart_build_info{") && l.contains("daemon=\"rampart-tenant\"")
        ),
        "{m}"
    );
    // Prometheus's own linter, and every metric dist/ queries is served.
    let problems = rampart_service::testing::promtool_check_metrics(&m);
    assert!(problems.is_empty(), "promtool: {problems:#?}\n{m}");
    let missing = rampart_service::testing::dist_queries_missing(&m, &["rampart_tenant_"]);
    assert!(
        missing.is_empty(),
        "dist/ (Grafana board, rules) queries metrics the tenant service does not serve: {missing:?}"
    );
}
