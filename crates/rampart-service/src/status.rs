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
        if let Some(p) = s.panels.get("ddos") {
            ddos(&mut o, p);
        }
        for (name, p) in &s.panels {
            if name != "ddos" {
                let _ = writeln!(o, "  {name}: {p}");
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
