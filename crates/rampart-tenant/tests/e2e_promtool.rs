//! Prometheus' own linter on the tenant service's live `/metrics`: two
//! tenants, one with a program that saw a packet, scraped over HTTP from
//! the service's listener; `promtool check metrics` must print nothing, and
//! every tenant metric the shipped Grafana board and rules query exists.

mod common;

use rampart_tenant::client::Client;
use rampart_tenant::config::Config;
use rampart_tenant::serve::Server;

#[test]
fn live_metrics_pass_promtool() {
    assert!(
        rampart_dataplane::features::is_root(),
        "tenant tests need root: run them with ./run test"
    );
    let name = rampart_lab::testing::unique_prefix("tprom");
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), "a token-aaaaaaaa\n").unwrap();
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
        selectors = ["prefix:10.20.1.0/24"]
        [[tenant]]
        name = "b"
        selectors = ["prefix:10.20.2.0/24"]
        "#,
        tokens.path().display()
    );
    let s = Server::start(Config::parse(&cfg).unwrap()).unwrap();
    let a = Client::new(&format!("http://{}", s.addr), "token-aaaaaaaa");
    a.put(
        "/v1/program",
        common::counter_prog(1, "XDP_DROP").as_bytes(),
    )
    .unwrap()
    .unwrap();
    let agent = s.agent().unwrap();
    let frame = common::udp4([10, 20, 1, 2], 9);
    let act = agent
        .call(move |h| {
            rampart_dataplane::testrun::run_packet(h.dispatcher_fd(), &frame, 1)
                .unwrap()
                .retval
        })
        .unwrap();
    assert_eq!(act, 1, "the tenant's program dropped the packet");
    let m = a.get_text("/metrics").unwrap();
    let problems = rampart_service::testing::promtool_check_metrics(&m);
    assert!(problems.is_empty(), "promtool: {problems:#?}\n{m}");
    let missing = rampart_service::testing::dist_queries_missing(&m, &["rampart_tenant_"]);
    assert!(
        missing.is_empty(),
        "dist/ (Grafana board, rules) queries metrics the tenant service does not serve: {missing:?}"
    );
    for line in [
        "rampart_tenant_verdict_packets_total{tenant=\"a\",verdict=\"drop\"} 1",
        "rampart_tenant_packets_total{tenant=\"b\"} 0",
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line:?} in:\n{m}");
    }
    assert!(
        m.lines().any(
            |l| l.starts_with("rampart_build_info{") && l.contains("daemon=\"rampart-tenant\"")
        ),
        "{m}"
    );
}
