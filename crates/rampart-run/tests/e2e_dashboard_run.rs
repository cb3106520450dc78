//! The dashboard of `rampart run` in a real browser, with the three
//! applications on the lab host's `host0`: ddos, the stream apps
//! (flowmeter, portscan, synflood) on the tap, and a tenant whose DNS rate
//! limiter (submitted through the tenant API) sits in front of dnsmasq.
//! nmap scans host0 and dnsperf floods the tenant's resolver; headless
//! Chromium loads `/ui/` with an operator's token and the test reads its
//! DOM (generous deadlines, never a timing threshold) until it shows the
//! scanner's address, open flows, and the tenant with a CPU share and a
//! verdict count that rises between two readings. A tenant's token is
//! refused the dashboard's data (the page shows every tenant).
//! `RAMPART_DASHBOARD_PNG=path` keeps the screenshot (docs/figures/dashboard.png).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rampart_bench::demo::apps;
use rampart_dataplane::chain::Chain;
use rampart_ddos::filter::{Filter, Scope};
use rampart_lab::testing::{unique_prefix, TestLab};
use rampart_lab::topology::HOST_IF;
use rampart_run::{Config, Host};
use rampart_tenant::client::Client;
use rampart_testkit::browser::{http_get, poll, Browser, Cdp};

/// Removes what a stopped `rampart run` leaves on purpose — the ddos
/// stage, still filtering, and the chain — also when the test fails.
struct Leftovers {
    ns: String,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        if let Ok(s) = Scope::new(Some(&self.ns), HOST_IF) {
            let _ = Filter::detach(&s.name());
        }
        let _ = Chain::remove(Some(&self.ns), HOST_IF);
    }
}

/// A process killed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the page shows now.
const READ_PAGE: &str = r##"JSON.stringify({
  conn: document.getElementById("conn").textContent,
  apps: [...document.querySelectorAll("#apps .app-badge")].map(e => e.textContent),
  ddos: !document.getElementById("ddos").hidden,
  stream: !document.getElementById("stream").hidden,
  tenant: !document.getElementById("tenant").hidden,
  flows: [...document.querySelectorAll("#stream-flows tbody tr")].map(r => ({
    src: r.dataset.src, dst: r.dataset.dst, cid: r.dataset.communityId })),
  scanners: [...document.querySelectorAll("#stream-scanners tbody tr")].map(r => r.dataset.src),
  floods: !document.getElementById("stream-floods-part").hidden,
  analysed: Number(document.getElementById("stream-analysed").dataset.value || 0),
  tenants: [...document.querySelectorAll("#tenant-table tbody tr")].map(r => ({
    name: r.dataset.tenant, share: r.dataset.share, verdicts: Number(r.dataset.verdicts || 0),
    program: r.cells[1] ? r.cells[1].textContent : "" })),
})"##;

fn dns_row(seen: &serde_json::Value) -> serde_json::Value {
    seen["tenants"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == apps::TENANT_NAME)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn dashboard_shows_flows_scanners_and_tenants_of_rampart_run() {
    let lab = TestLab::up("edr", 1);
    let ns = lab.host_ns();
    let dir = tempfile::tempdir().unwrap();
    apps::add_wan_addresses(&lab).unwrap();
    let _resolver = apps::start_resolver(&lab).expect("dnsmasq in the tenant's namespace");
    let op_token = format!("operator-{}", lab.prefix());
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "operator {op_token}\n{} {}\n",
            apps::TENANT_NAME,
            apps::TENANT_TOKEN
        ),
    )
    .unwrap();
    let alerts = dir.path().join("alerts.jsonl");
    // Beyond loopback: the page's data needs a token. The flooder is
    // whitelisted for ddos: the subject is the tenant's view of the flood,
    // which its own limiter handles.
    let cfg = Config::parse(&format!(
        "[server]\nlisten = \"0.0.0.0:0\"\ntoken_file = \"{}\"\n\
         [alerts]\nfile = \"{}\"\n\
         [[interface]]\nname = \"{HOST_IF}\"\nnetns = \"{ns}\"\n\
         [ddos.daemon]\nstate_dir = \"{}\"\nnice = 0\n\
         [ddos.detect]\nwhitelist = [\"{}\"]\n\
         [stream]\napps = [\"flowmeter\", \"portscan\", \"synflood\"]\n{}",
        tokens.display(),
        alerts.display(),
        dir.path().join("state").display(),
        apps::FLOODER,
        apps::tenant_toml(&unique_prefix("edrt")),
    ))
    .unwrap();
    let _leftovers = Leftovers { ns: ns.clone() };
    let host = Host::start(&cfg).expect("rampart run starts with the three applications");
    let port = host.api_addr().expect("the API listens").port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let api = format!("http://{addr}");
    assert!(http_get(addr, "/ui/").contains("/ui/app.js"));

    // The tenant submits its limiter; its token may not read the dashboard.
    apps::install_limiter(&api).expect("the tenant's DNS limiter is accepted");
    let tenant = Client::new(&api, apps::TENANT_TOKEN);
    let refused = tenant.get("/v1/dashboard").unwrap().unwrap_err();
    assert_eq!(refused.status, 401, "{}", refused.message());
    assert!(
        refused.message().contains("operator's token"),
        "{}",
        refused.message()
    );

    // A port scan of host0, then a DNS flood that lasts until the checks end.
    let scan = apps::scan(&lab, &alerts).expect("nmap scans host0");
    let queries = dir.path().join("queries.txt");
    std::fs::write(&queries, "example.com A\n").unwrap();
    let _flood = Proc(
        Command::new("ip")
            .args(["netns", "exec", &lab.wan_ns(), "dnsperf", "-s"])
            .arg(std::net::Ipv4Addr::from(rampart_lab::Lab::tenant_v4(apps::TENANT)).to_string())
            .args(["-a", &apps::FLOODER.to_string(), "-d"])
            .arg(&queries)
            .args(["-l", "600", "-Q", "1000", "-c", "1", "-t", "2"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsperf starts"),
    );

    // The stream stage's own route, bounded.
    let op = Client::new(&api, &op_token);
    let mut top = serde_json::Value::Null;
    assert!(
        poll(Duration::from_secs(60), || {
            top = op
                .get("/stream/v1/top?limit=3")
                .unwrap()
                .unwrap_or_default();
            top["flows"]["by_bytes"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
        }),
        "/stream/v1/top shows no open flow: {top}"
    );
    assert!(
        top["flows"]["by_packets"].as_array().unwrap().len() <= 3,
        "{top}"
    );
    assert_eq!(
        top["apps"],
        serde_json::json!(["flowmeter", "portscan", "synflood"])
    );

    let url = format!("http://{addr}/ui/");
    let browser = Browser::open(&format!("{url}#token={op_token}"), 1400, 2200);
    let mut cdp: Cdp = browser.page("/ui/");
    let scanner = apps::SCANNER.to_string();
    let mut seen = serde_json::Value::Null;
    let shown = poll(Duration::from_secs(120), || {
        seen = cdp.eval_json(READ_PAGE);
        let t = dns_row(&seen);
        let share = t["share"]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
        seen["conn"] == "live"
            && seen["apps"] == serde_json::json!(["ddos", "stream", "tenant"])
            && seen["ddos"] == true
            && seen["stream"] == true
            && seen["tenant"] == true
            && seen["floods"] == true
            && seen["flows"].as_array().is_some_and(|f| {
                f.iter().any(|r| {
                    r["cid"].as_str().is_some_and(|c| c.starts_with("1:"))
                        && r["src"].as_str().is_some_and(|s| !s.is_empty())
                })
            })
            && seen["scanners"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| *x == scanner))
            && share > 0.0
            && t["program"].as_str().is_some_and(|p| p.starts_with("v1 C"))
    });
    assert!(
        shown,
        "the page does not show the three panels, a flow, the scanner {scanner} and the tenant {} with a CPU share and its program: {seen}",
        apps::TENANT_NAME
    );
    assert!(seen["analysed"].as_f64() > Some(0.0), "{seen}");
    let first = dns_row(&seen)["verdicts"].as_f64().unwrap_or(0.0);
    let mut now = first;
    assert!(
        poll(Duration::from_secs(60), || {
            now = dns_row(&cdp.eval_json(READ_PAGE))["verdicts"]
                .as_f64()
                .unwrap_or(0.0);
            now > first
        }),
        "the tenant's verdict count stayed at {first} (now {now}) under the DNS flood"
    );
    assert!(
        scan.finish().is_some(),
        "the scanner's alert is in the alert stream"
    );

    if let Ok(path) = std::env::var("RAMPART_DASHBOARD_PNG") {
        // For the figure: let the charts draw a while of the flood.
        std::thread::sleep(Duration::from_secs(20));
        std::fs::write(path, cdp.screenshot()).unwrap();
    } else {
        assert!(cdp.screenshot().len() > 1000);
    }
    drop(cdp);
    drop(browser);
    host.stop();
}
