//! The dashboard in a real browser during a lab attack: the daemon runs
//! on the shipped configuration, a DNS amplification attack is blocked,
//! and headless Chromium (Debian `chromium`) loads `/ui/` from the API
//! listener. The API listens beyond loopback with a token file, so the
//! page's data routes need the token: without it the page asks for one;
//! given it in the address's fragment (`/ui/#token=…`) it goes live. The
//! test reads the page's DOM through the DevTools protocol and waits
//! (generous deadlines, never a timing threshold) until it shows the
//! attack in progress with its victim and vector, the blocked reflectors,
//! and a drop counter that rises between two readings. It takes a
//! screenshot (`RAMPART_DASHBOARD_PNG=path` keeps it: the README's
//! docs/figures/dashboard.png comes from here). `rampart status`'s reading
//! of the same daemon is checked beside it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rampart_ddosd::Handle;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_testkit::browser::{http_get, Browser, Cdp};

mod common;
use common::{poll, shipped_config, Cleanup};

/// What the page shows now: connection state, attack rows, blocked
/// sources and the drop counter.
const READ_PAGE: &str = r##"JSON.stringify({
  conn: document.getElementById("conn").textContent,
  login: !document.getElementById("login").hidden,
  hash: location.hash,
  ddos: !document.getElementById("ddos").hidden,
  state: document.getElementById("ddos-state").textContent,
  attacks: [...document.querySelectorAll("#attacks tbody tr")].map(r => ({
    active: r.dataset.active, victim: r.dataset.victim, vector: r.dataset.vector })),
  blocked: [...document.querySelectorAll("#ddos-blocked tbody tr")].map(r => r.dataset.prefix),
  dropped: Number(document.getElementById("ddos-dropped-total").dataset.value || 0),
})"##;

fn read_page(cdp: &mut Cdp) -> serde_json::Value {
    let s = cdp.eval(READ_PAGE);
    serde_json::from_str(s.as_str().unwrap_or("{}")).unwrap_or_default()
}

#[test]
fn dashboard_in_chromium_shows_the_attack_its_blocked_sources_and_rising_drops() {
    let lab = TestLab::up("edash", 0);
    let c = Cleanup::new(&lab);
    let mut cfg = shipped_config(&lab, &c);
    // Beyond loopback: the data routes need a token, even from this host.
    let token = format!("dashboard-{}", lab.prefix());
    let tokens = c.dir.join("tokens");
    std::fs::write(&tokens, format!("operator {token}\n")).unwrap();
    cfg.server.listen = Some("0.0.0.0:0".into());
    cfg.server.token_file = Some(tokens);
    let server = cfg.server.clone();
    let h = Handle::spawn(cfg).expect("the daemon starts on the shipped config");
    let api = rampart_ddosd::api::start(&h, &server).expect("the API starts");
    let port = api.api_addr().expect("the API listens").port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let url = format!("http://{addr}/ui/");
    // The page itself is embedded and needs no token; its data does.
    assert!(http_get(addr, "/ui/").contains("/ui/app.js"));
    assert!(http_get(addr, "/v1/dashboard").contains("\"unauthorized\""));

    let spec = GenSpec {
        sources: 40,
        proto: Proto::Udp,
        sport: 53,
        dport: Some(33_333),
        size: 600,
        pps: Some(10_000.0),
        limit: Limit::Seconds(120.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let reflectors: Vec<std::net::IpAddr> =
        (0..spec.sources).map(|i| spec.source_addr(i)).collect();
    std::thread::scope(|sc| {
        let run = sc.spawn(|| g.run(&stop));
        let checks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let browser = Browser::open(&url, 1400, 1700);
            let mut cdp = browser.page("/ui/");
            // No token: the page asks for one.
            let mut seen = serde_json::Value::Null;
            assert!(
                poll(Duration::from_secs(60), || {
                    seen = read_page(&mut cdp);
                    seen["login"] == true && seen["conn"] == "token needed"
                }),
                "without a token the page does not ask for one: {seen}"
            );
            // The token in the fragment: the page goes live and takes it
            // out of the address bar.
            cdp.call("Page.navigate", serde_json::json!({"url": "about:blank"}));
            cdp.call(
                "Page.navigate",
                serde_json::json!({"url": format!("{url}#token={token}")}),
            );
            let t0 = Instant::now();
            let shown = poll(Duration::from_secs(90), || {
                seen = read_page(&mut cdp);
                let attack = seen["attacks"].as_array().into_iter().flatten().any(|a| {
                    a["active"] == "true"
                        && a["victim"] == "10.10.0.2/32"
                        && a["vector"]
                            .as_str()
                            .is_some_and(|v| v.starts_with("udp_amplification"))
                });
                let blocked: Vec<rampart_ddos::Prefix> = seen["blocked"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| rampart_ddos::Prefix::parse(p.as_str()?).ok())
                    .collect();
                let all = reflectors
                    .iter()
                    .all(|a| blocked.iter().any(|p| p.contains(a)));
                seen["ddos"] == true
                    && seen["conn"] == "live"
                    && seen["hash"] == ""
                    && attack
                    && all
                    && seen["dropped"].as_f64() > Some(0.0)
            });
            assert!(
                shown,
                "after {:?} the page shows no attack in progress on 10.10.0.2/32 with all 40 reflectors blocked and drops: {seen}",
                t0.elapsed()
            );
            // The counter rises while the reflectors still send.
            let first = seen["dropped"].as_f64().unwrap_or(0.0);
            let mut now = first;
            assert!(
                poll(Duration::from_secs(60), || {
                    now = read_page(&mut cdp)["dropped"].as_f64().unwrap_or(0.0);
                    now > first
                }),
                "the drop counter stayed at {first} (now {now})"
            );
            // `rampart status` reads the same daemon: without the token it
            // says one is needed; with it, what the page shows.
            let base = format!("http://{addr}");
            let r = rampart_service::status::read(std::slice::from_ref(&base), None);
            assert!(
                r.daemons.is_empty()
                    && r.errors.len() == 1
                    && r.errors[0].message.contains("--token"),
                "{r:?}"
            );
            let r = rampart_service::status::read(std::slice::from_ref(&base), Some(&token));
            let text = rampart_service::status::render(&r);
            for want in [
                "ddos at http://127.0.0.1:",
                "UNDER ATTACK",
                "interfaces  host0 (netns ",
                "IN PROGRESS udp_amplification/dns on 10.10.0.2/32",
                " udp_amplification\n",
            ] {
                assert!(text.contains(want), "{want:?} missing in:\n{text}");
            }
            let keep = std::env::var("RAMPART_DASHBOARD_PNG").ok();
            if keep.is_some() {
                // For the figure: let the chart draw some of the attack.
                std::thread::sleep(Duration::from_secs(20));
            }
            let png = cdp.screenshot();
            if let Some(path) = keep {
                std::fs::write(&path, &png).unwrap();
            }
        }));
        stop.store(true, Ordering::Relaxed);
        assert!(run.join().unwrap().unwrap().sent_packets > 0);
        if let Err(e) = checks {
            std::panic::resume_unwind(e);
        }
    });
    drop(api);
    h.stop().expect("the daemon stops cleanly");
}
