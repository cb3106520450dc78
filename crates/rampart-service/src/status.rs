//! `rampart status`: what the running daemons do now, read from each
//! one's `GET /v1/dashboard` (the dashboard's data, so the command and the
//! page never disagree) and rendered for a human, or kept as JSON.
//!
//! A daemon that does not answer is not running; one that answers with an
//! error (a token is needed, a wrong token) is reported with the API's own
//! message.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::dashboard::Snapshot;

/// Where the daemons listen unless told otherwise: `rampart run`, `rampart
/// ddos run` and `rampart tenant serve` on their default `[server]
/// listen`. `rampart stream` serves only with `--listen`, so it is asked
/// only when named.
pub const DEFAULT_SERVERS: [&str; 3] = [
    "http://127.0.0.1:9470",
    "http://127.0.0.1:9477",
    "http://127.0.0.1:9610",
];

/// How long one daemon may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What every daemon asked said.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Daemons that answered, in the order asked.
    pub daemons: Vec<Daemon>,
    /// Servers where nothing listens.
    pub not_running: Vec<String>,
    /// Servers that answered with an error.
    pub errors: Vec<ServerError>,
}

/// One daemon's answer.
#[derive(Debug, Clone, Serialize)]
pub struct Daemon {
    /// The URL asked.
    pub server: String,
    /// Its `GET /v1/dashboard`.
    pub dashboard: Snapshot,
}

/// A daemon that answered with an error.
#[derive(Debug, Clone, Serialize)]
pub struct ServerError {
    /// The URL asked.
    pub server: String,
    /// What is wrong (the API's message).
    pub message: String,
}

/// Ask every server in `servers` (base URLs, e.g. `http://127.0.0.1:9477`),
/// sending `token` as a bearer token when given.
pub fn read(servers: &[String], token: Option<&str>) -> Report {
    let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
    let mut r = Report {
        daemons: Vec::new(),
        not_running: Vec::new(),
        errors: Vec::new(),
    };
    for s in servers {
        let base = s.trim_end_matches('/');
        let mut req = agent.get(&format!("{base}/v1/dashboard"));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let error = |message: String| ServerError {
            server: base.to_string(),
            message,
        };
        match req.call() {
            Ok(resp) => match resp
                .into_string()
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str::<Snapshot>(&t).map_err(|e| e.to_string()))
            {
                Ok(dashboard) => r.daemons.push(Daemon {
                    server: base.to_string(),
                    dashboard,
                }),
                Err(e) => r.errors.push(error(format!(
                    "not a rampart daemon's dashboard ({e}): is --server right?"
                ))),
            },
            Err(ureq::Error::Status(code, resp)) => {
                let body: Value = resp
                    .into_string()
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or_default();
                let msg = body["error"]["message"]
                    .as_str()
                    .map_or_else(|| format!("HTTP {code}"), str::to_string);
                let hint = if code == 401 && token.is_none() {
                    " (pass --token or set RAMPART_TOKEN)"
                } else {
                    ""
                };
                r.errors.push(error(format!("{msg}{hint}")));
            }
            Err(ureq::Error::Transport(_)) => r.not_running.push(base.to_string()),
        }
    }
    r
}

/// `x` with an SI prefix (`9.8 k`), `-` when absent.
fn si(x: Option<f64>) -> String {
    let Some(x) = x.filter(|x| x.is_finite()) else {
        return "-".into();
    };
    let a = x.abs();
    for (d, p) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if a >= d {
            return format!("{:.1} {p}", x / d);
        }
    }
    if a >= 100.0 || x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// `n` with thousands separators.
fn int(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", int(n), if n == 1 { one } else { many })
}

/// The report for a human: per daemon its interfaces, stages, tiers,
/// traffic, blocked sources, attacks; then what is not running.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    for d in &r.daemons {
        let s = &d.dashboard;
        let apps: Vec<&str> = s.apps.iter().map(|a| a.name()).collect();
        let _ = writeln!(
            o,
            "{} at {} (rampart {} on {})",
            if apps.is_empty() {
                "a daemon".to_string()
            } else {
                apps.join(" + ")
            },
            d.server,
            s.version,
            s.host
        );
        for (name, p) in &s.panels {
            match name.as_str() {
                "ddos" => ddos(&mut o, p),
                "stream" => stream(&mut o, p),
                "tenant" => tenant(&mut o, p),
                _ => {
                    let _ = writeln!(o, "  {name}: {p}");
                }
            }
        }
        attacks(&mut o, s);
        o.push('\n');
    }
    for e in &r.errors {
        let _ = writeln!(o, "{}: {}", e.server, e.message);
    }
    if !r.not_running.is_empty() {
        let _ = writeln!(o, "not running: {}", r.not_running.join(", "));
    }
    o
}

fn names(v: &Value) -> String {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn endpoint(ip: &Value, port: &Value) -> String {
    let ip = ip.as_str().unwrap_or("?");
    let ip = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    match port.as_u64() {
        Some(p) if p > 0 => format!("{ip}:{p}"),
        _ => ip,
    }
}

/// `54.0 kB`, `44 B`.
fn bytes(v: &Value) -> String {
    let s = si(v.as_f64());
    if s.ends_with(|c: char| c.is_ascii_alphabetic()) {
        s + "B"
    } else {
        s + " B"
    }
}

/// Rows of each kind `rampart status` prints.
const STATUS_ROWS: usize = 5;

fn stream(o: &mut String, p: &Value) {
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    let k = &p["packets"];
    let _ = writeln!(
        o,
        "  stream      {} on {} (feed {}): {} analysed, {} lost (ring buffer full); {} exported",
        names(&p["apps"]),
        names(&p["interfaces"]),
        p["feed"].as_str().unwrap_or("?"),
        plural(u(&k["analysed"]), "packet", "packets"),
        int(u(&k["ring_full"])),
        plural(u(&p["flows_total"]), "flow record", "flow records"),
    );
    if p["flows"].is_object() {
        let f = &p["flows"];
        let rows = f["by_bytes"].as_array().cloned().unwrap_or_default();
        let _ = writeln!(
            o,
            "  flows       {} open{}",
            int(u(&f["open"])),
            if rows.is_empty() {
                ""
            } else {
                ", heaviest by bytes:"
            }
        );
        for r in rows.iter().take(STATUS_ROWS) {
            let _ = writeln!(
                o,
                "              {} → {} {}  {} / {} packets, {} / {}, {} s",
                endpoint(&r["src_ip"], &r["src_port"]),
                endpoint(&r["dest_ip"], &r["dest_port"]),
                r["proto"].as_str().unwrap_or("?"),
                int(u(&r["pkts_toserver"])),
                int(u(&r["pkts_toclient"])),
                bytes(&r["bytes_toserver"]),
                bytes(&r["bytes_toclient"]),
                r["age_s"].as_f64().unwrap_or(0.0).round(),
            );
        }
    }
    if let Some(sc) = p["scanners"].as_array() {
        let _ = writeln!(
            o,
            "  scanners    {}",
            plural(sc.len() as u64, "flagged", "flagged")
        );
        for x in sc.iter().take(STATUS_ROWS) {
            let _ = writeln!(
                o,
                "              {} at {}: {} of {} first contacts failed ({}, {})",
                x["src_ip"].as_str().unwrap_or("?"),
                x["flagged_at"].as_str().unwrap_or("?"),
                int(u(&x["failures"])),
                int(u(&x["first_contacts"])),
                plural(u(&x["hosts"]), "host", "hosts"),
                plural(u(&x["ports"]), "port", "ports"),
            );
        }
    }
    if let Some(fl) = p["synfloods"].as_array() {
        let _ = writeln!(
            o,
            "  syn floods  {}",
            plural(fl.len() as u64, "found", "found")
        );
        for x in fl.iter().take(STATUS_ROWS) {
            let _ = writeln!(
                o,
                "              {} in the window ending {}: {} incomplete handshakes (threshold {})",
                endpoint(&x["dest_ip"], &x["dest_port"]),
                x["window_end"].as_str().unwrap_or("?"),
                int(u(&x["incomplete_handshakes"])),
                int(u(&x["threshold"])),
            );
        }
    }
}

fn tenant(o: &mut String, p: &Value) {
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    let _ = writeln!(
        o,
        "  tenants     instance {} on {}: fairness {}, budget {} cores",
        p["instance"].as_str().unwrap_or("?"),
        names(&p["interfaces"]),
        if p["fairness"] == true { "on" } else { "off" },
        p["budget_cores"].as_f64().unwrap_or(0.0),
    );
    for t in p["tenants"].as_array().into_iter().flatten() {
        let name = t["name"].as_str().unwrap_or("?");
        if let Some(e) = t["error"].as_str() {
            let _ = writeln!(o, "              {name}: {e}");
            continue;
        }
        let pr = &t["program"];
        let program = if pr.is_object() {
            format!(
                "program v{} ({}, {} insns)",
                u(&pr["version"]),
                pr["from"].as_str().unwrap_or("?"),
                int(u(&pr["insns"]))
            )
        } else {
            "no program".to_string()
        };
        let v = &t["verdicts"];
        let drops: Vec<String> = t["drops"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, n)| u(n) > 0)
            .map(|(k, n)| format!("{k} {}", int(u(n))))
            .collect();
        let _ = writeln!(
            o,
            "              {name}  {program}, {}, {:.3} s CPU; pass {}, drop {}, tx {}, redirect {}, aborted {}{}",
            plural(u(&t["packets"]), "packet", "packets"),
            t["cpu_seconds"].as_f64().unwrap_or(0.0),
            int(u(&v["pass"])),
            int(u(&v["drop"])),
            int(u(&v["tx"])),
            int(u(&v["redirect"])),
            int(u(&v["aborted"])),
            if drops.is_empty() {
                String::new()
            } else {
                format!("; dropped by rampart: {}", drops.join(", "))
            }
        );
    }
}

fn ddos(o: &mut String, p: &Value) {
    let f = |v: &Value| v.as_f64();
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    let state = if p["under_attack"] == true {
        "UNDER ATTACK"
    } else {
        "no attack"
    };
    let _ = writeln!(o, "  ddos        {state}");
    let tiers = p["tiers"].as_array().cloned().unwrap_or_default();
    let host: Vec<&str> = tiers
        .iter()
        .filter(|t| t["role"] == "host")
        .filter_map(|t| t["location"].as_str())
        .collect();
    let _ = writeln!(
        o,
        "  interfaces  {}",
        if host.is_empty() {
            "-".to_string()
        } else {
            host.join(", ")
        }
    );
    let _ = writeln!(
        o,
        "  stages      XDP filter (blacklist, policer) and feature stage; detection every {} s ({} intervals); placement {}",
        si(f(&p["interval_s"])),
        int(u(&p["intervals"])),
        p["mode"].as_str().unwrap_or("-"),
    );
    let protected: Vec<String> = p["victims"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let pr = &v["protection"];
            let on: Vec<&str> = [("syn_cookies", "SYN cookies"), ("ack_guard", "ACK guard")]
                .iter()
                .filter(|(k, _)| pr[*k] == true)
                .map(|(_, n)| *n)
                .collect();
            let victim = v["victim"].as_str()?;
            (!on.is_empty()).then(|| format!("{} on {victim}", on.join(" + ")))
        })
        .collect();
    for x in &protected {
        let _ = writeln!(o, "              {x}");
    }
    for (i, t) in tiers.iter().enumerate() {
        let cap = t["capacity"].as_u64().map_or("unbounded".to_string(), int);
        let _ = writeln!(
            o,
            "  {:<11} {}{} at {}: {} / {}, {} dropped",
            if i == 0 { "tiers" } else { "" },
            t["name"].as_str().unwrap_or("?"),
            if t["emulated"] == true {
                " (EMULATED)"
            } else {
                ""
            },
            t["location"].as_str().unwrap_or("?"),
            plural(u(&t["rules"]), "rule", "rules"),
            cap,
            plural(u(&t["dropped_packets"]), "packet", "packets"),
        );
    }
    let tr = &p["traffic"];
    let pk = |k: &str| u(&tr[k]["packets"]);
    let _ = writeln!(
        o,
        "  traffic     {} dropped since start (NIC {}, XDP {}, policed {}, SYN cookies {}); {} passed",
        plural(u(&p["dropped_packets_total"]), "packet", "packets"),
        int(pk("nic_dropped")),
        int(pk("xdp_dropped")),
        int(pk("policed")),
        int(pk("cookies")),
        int(pk("passed")),
    );
    let blocked = p["blocked"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(
        o,
        "  blocked     {}, {} policed",
        plural(u(&p["blocked_count"]), "source", "sources"),
        int(u(&p["policed"])),
    );
    const SHOWN: usize = 10;
    for b in blocked.iter().take(SHOWN) {
        let _ = writeln!(
            o,
            "              {:<20} {:>9} pps  {:<8} {}",
            b["prefix"].as_str().unwrap_or("?"),
            si(f(&b["pps"])),
            b["tier"].as_str().unwrap_or("-"),
            b["detector"].as_str().unwrap_or("-"),
        );
    }
    let total = u(&p["blocked_count"]) as usize;
    if total > SHOWN {
        let _ = writeln!(
            o,
            "              … and {} more (rampart ddos list, GET /v1/blocked)",
            int((total - SHOWN) as u64)
        );
    }
}

fn attacks(o: &mut String, s: &Snapshot) {
    const ENDED_SHOWN: usize = 5;
    let active: Vec<_> = s.attacks.iter().filter(|a| a.active()).collect();
    let ended: Vec<_> = s.attacks.iter().filter(|a| !a.active()).collect();
    if s.attacks.is_empty() {
        let _ = writeln!(o, "  attacks     none since start");
        return;
    }
    let mut first = true;
    let mut line = |o: &mut String, text: String| {
        let _ = writeln!(o, "  {:<11} {text}", if first { "attacks" } else { "" });
        first = false;
    };
    for a in active.iter().chain(ended.iter().take(ENDED_SHOWN)) {
        let mut t = format!(
            "{} {} on {} since {}",
            if a.active() { "IN PROGRESS" } else { "ended" },
            a.vector
                .as_deref()
                .or(a.signature.as_deref())
                .unwrap_or("-"),
            a.victim.as_deref().unwrap_or("-"),
            a.start,
        );
        if let Some(end) = &a.end {
            let _ = write!(t, " until {end}");
        }
        let _ = write!(
            t,
            ", peak {} pps, {}",
            si(Some(a.peak_pps)),
            plural(a.sources, "source", "sources")
        );
        if let Some(act) = &a.action {
            let _ = write!(
                t,
                ", {}",
                serde_json::to_value(act)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            );
        }
        if let Some(tier) = &a.tier {
            let _ = write!(t, " in {tier}");
        }
        if let Some(p) = &a.pcap {
            let _ = write!(t, "; evidence {p}");
        }
        line(o, t);
    }
    if ended.len() > ENDED_SHOWN {
        line(
            o,
            format!(
                "… and {} more ended (GET /v1/attacks)",
                ended.len() - ENDED_SHOWN
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::{Action, Alert, Alerts, App};
    use crate::dashboard::Apps;

    fn ddos_panel() -> Value {
        serde_json::json!({
            "mode": "xdp-host", "interval_s": 0.5, "intervals": 44, "under_attack": true,
            "traffic": {
                "nic_dropped": {"packets": 0, "bytes": 0},
                "xdp_dropped": {"packets": 214_810, "bytes": 1},
                "policed": {"packets": 3, "bytes": 1},
                "cookies": {"packets": 0, "bytes": 0},
                "passed": {"packets": 12, "bytes": 1},
            },
            "dropped_packets_total": 214_813, "blocked_count": 12, "policed": 2,
            "blocked": (0..12).map(|i| serde_json::json!({
                "prefix": format!("172.16.{i}.0/24"), "pps": 9800.0 - f64::from(i),
                "tier": "xdp", "detector": "udp_amplification"})).collect::<Vec<_>>(),
            "tiers": [
                {"name": "xdp", "role": "host", "location": "eth0", "capacity": 1_048_576,
                 "rules": 12, "dropped_packets": 213_040, "emulated": false},
                {"name": "nic", "role": "hw", "location": "nic0", "capacity": 512,
                 "rules": 0, "dropped_packets": 0, "emulated": true},
            ],
            "victims": [{"victim": "10.10.0.2/32", "protection": {"syn_cookies": true, "ack_guard": false}}],
        })
    }

    fn report() -> Report {
        let al = Alerts::memory();
        let mut a = Alert::rule(
            App::Ddos,
            "attack_start",
            "udp_amplification/dns",
            Action::Blocked,
        );
        a.rampart.victim = Some("10.10.0.2/32".into());
        a.rampart.vector = Some("udp_amplification/dns".into());
        a.rampart.pcap = Some("/var/lib/rampart/pcap/1.pcap".into());
        al.emit(a);
        let snap = Apps::none()
            .with(App::Ddos, ddos_panel)
            .with_alerts(al)
            .snapshot(10);
        Report {
            daemons: vec![Daemon {
                server: "http://127.0.0.1:9477".into(),
                dashboard: snap,
            }],
            not_running: vec!["http://127.0.0.1:9610".into()],
            errors: vec![ServerError {
                server: "http://10.0.0.1:9477".into(),
                message: "no token".into(),
            }],
        }
    }

    #[test]
    fn a_ddos_daemon_under_attack_reads_as_interfaces_stages_tiers_attacks() {
        let t = render(&report());
        let has = |s: &str| assert!(t.contains(s), "{s:?} missing in:\n{t}");
        has("ddos at http://127.0.0.1:9477 (rampart ");
        has("UNDER ATTACK");
        has("interfaces  eth0\n");
        has("detection every 0.5 s (44 intervals); placement xdp-host");
        has("SYN cookies on 10.10.0.2/32");
        has("xdp at eth0: 12 rules / 1,048,576, 213,040 packets dropped");
        has("nic (EMULATED) at nic0: 0 rules / 512");
        has("214,813 packets dropped since start (NIC 0, XDP 214,810, policed 3, SYN cookies 0); 12 passed");
        has("12 sources, 2 policed");
        has("172.16.0.0/24");
        has("… and 2 more");
        assert!(!t.contains("172.16.11.0/24"), "only the heaviest ten:\n{t}");
        has("IN PROGRESS udp_amplification/dns on 10.10.0.2/32 since ");
        has("evidence /var/lib/rampart/pcap/1.pcap");
        has("http://10.0.0.1:9477: no token");
        has("not running: http://127.0.0.1:9610");
    }

    #[test]
    fn stream_and_tenant_panels_read_as_lines() {
        let snap = Apps::none()
            .with(App::Stream, || {
                serde_json::json!({
                    "apps": ["flowmeter", "portscan"], "feed": "aggregate", "interfaces": ["host0"],
                    "packets": {"seen": 1300, "analysed": 1234, "ring_full": 0, "aggregated": 1200},
                    "flows_total": 7, "alerts_total": 1,
                    "flows": {"open": 2, "capacity": 32768, "evicted": 0, "by_packets": [], "by_bytes": [
                        {"src_ip": "10.10.3.1", "src_port": 5353, "dest_ip": "10.20.1.2", "dest_port": 53,
                         "proto": "UDP", "pkts_toserver": 900, "pkts_toclient": 900,
                         "bytes_toserver": 54000, "bytes_toclient": 90000, "age_s": 12.4}]},
                    "scanners": [{"src_ip": "10.10.5.1", "flagged_at": "2026-11-25T02:44:01.000Z",
                                  "first_contacts": 6, "failures": 6, "hosts": 1, "ports": 6}],
                    "synfloods": null,
                })
            })
            .with(App::Tenant, || {
                serde_json::json!({
                    "instance": "demo", "interfaces": ["host0"], "fairness": true, "budget_cores": 0.8,
                    "tenants": [{"name": "dns", "program": {"version": 1, "from": "c", "insns": 812},
                                 "packets": 1800, "cpu_seconds": 0.0123,
                                 "verdicts": {"pass": 900, "drop": 0, "tx": 900, "redirect": 0, "aborted": 0},
                                 "drops": {"no_tokens": 3, "no_program": 0}}],
                })
            })
            .snapshot(0);
        let t = render(&Report {
            daemons: vec![Daemon {
                server: "http://127.0.0.1:9470".into(),
                dashboard: snap,
            }],
            not_running: vec![],
            errors: vec![],
        });
        let has = |s: &str| assert!(t.contains(s), "{s:?} missing in:\n{t}");
        has("stream + tenant at http://127.0.0.1:9470");
        has("stream      flowmeter, portscan on host0 (feed aggregate): 1,234 packets analysed, 0 lost");
        has("flows       2 open, heaviest by bytes:");
        has("10.10.3.1:5353 → 10.20.1.2:53 UDP  900 / 900 packets, 54.0 kB / 90.0 kB, 12 s");
        has(
            "10.10.5.1 at 2026-11-25T02:44:01.000Z: 6 of 6 first contacts failed (1 host, 6 ports)",
        );
        has("tenants     instance demo on host0: fairness on, budget 0.8 cores");
        has("dns  program v1 (c, 812 insns), 1,800 packets, 0.012 s CPU; pass 900, drop 0, tx 900, redirect 0, aborted 0; dropped by rampart: no_tokens 3");
        assert!(!t.contains("syn floods"), "no synflood app, no line:\n{t}");
        assert!(!t.contains('{'), "no raw JSON:\n{t}");
    }

    #[test]
    fn a_calm_daemon_says_so_and_json_keeps_the_dashboard() {
        let snap = Apps::none().with(App::Ddos, || {
            let mut p = ddos_panel();
            p["under_attack"] = false.into();
            p
        });
        let r = Report {
            daemons: vec![Daemon {
                server: "u".into(),
                dashboard: snap.snapshot(1),
            }],
            not_running: vec![],
            errors: vec![],
        };
        let t = render(&r);
        assert!(
            t.contains("no attack") && t.contains("attacks     none since start"),
            "{t}"
        );
        assert!(!t.contains("not running"), "{t}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["daemons"][0]["dashboard"]["panels"]["ddos"]["mode"],
            "xdp-host"
        );
    }

    #[test]
    fn nothing_listening_is_not_running_and_numbers_read_well() {
        // A port nothing listens on: bind one, then close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let s = format!("http://127.0.0.1:{port}");
        let r = read(std::slice::from_ref(&s), None);
        assert!(r.daemons.is_empty() && r.errors.is_empty());
        assert_eq!(r.not_running, vec![s]);
        assert_eq!(int(1_234_567), "1,234,567");
        assert_eq!(int(12), "12");
        assert_eq!(si(Some(9800.0)), "9.8 k");
        assert_eq!(si(Some(0.5)), "0.5");
        assert_eq!(si(None), "-");
    }
}
