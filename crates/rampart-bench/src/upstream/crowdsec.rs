//! The fleet through CrowdSec: the Debian `crowdsec` package's Local API
//! (offline, private directory: [`rampart_lab::crowdsec`]) holds 100,000
//! ban decisions (`cscli decisions import`), then each bouncer starts
//! with a bouncer key of its own and the clock runs from its start —
//! the decisions are already in the LAPI — until its enforcement
//! structure holds all of them: rampart's XDP exact table (the filter's
//! entry count) and `crowdsec-firewall-bouncer`'s nftables set (Debian
//! 0.0.25, nftables mode; its elements counted with `nft list set`).
//! Both are then probed the same way: a flood from two banned sources at
//! the host, the share of it each one drops (XDP's blacklist counter; the
//! bouncer's rule counter) against what the generator sent. Same lab,
//! same LAPI, same run; rampart repeated (median), the peer once (it
//! takes minutes).
//!
//! The peer runs in the lab's host namespace (its nftables tables go with
//! the namespace); the LAPI listens on a veth between the root namespace
//! and that one, so the daemon (root namespace) and the peer reach the
//! same address. Then the push: two daemons on two labs, the first one's
//! detection pushes an NTP reflection's sources, the second one's
//! blacklist gets them.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_ddos::filter::Filter;
use rampart_ddosd::{Config, Handle};
use rampart_lab::crowdsec::CrowdsecLab;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::topology::HOST_IF;
use serde::Serialize;

use crate::ddos::detect::env::SHIPPED_CONFIG;
use crate::ddos::{check, BenchLab};
use crate::error::{Error, Result};

/// Decisions in the LAPI.
pub const DECISIONS: usize = 100_000;
/// rampart's repetitions.
const REPS: usize = 3;
/// The probe flood (packets/s, two banned sources) and its length (s).
const PROBE_PPS: f64 = 20_000.0;
const PROBE_S: f64 = 3.0;
/// The most the peer may take to enter the decisions.
const PEER_LIMIT: Duration = Duration::from_secs(1200);

/// What the CrowdSec part measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CrowdsecResult {
    /// Decisions in the LAPI (each a ban on one IPv4 address).
    pub decisions: u64,
    /// `cscli decisions import` of them (seconds; the LAPI's own cost).
    pub import_s: f64,
    /// rampart: bouncer start → all in the XDP table, each repetition (s).
    pub enforce_s: Vec<f64>,
    /// Their median.
    pub enforce_median_s: f64,
    /// rampart: the blacklist update itself (one publish), each repetition (s).
    pub apply_s: Vec<f64>,
    /// The peer: bouncer start → all in the nftables set (s; `None`: not
    /// within the limit, `peer_entered` says how far it got).
    pub peer_enforce_s: Option<f64>,
    /// Elements in the peer's set when it was done or the limit passed.
    pub peer_entered: u64,
    /// Share of the probe flood rampart dropped (%).
    pub drop_pct: f64,
    /// Share of the probe flood the peer dropped (%).
    pub peer_drop_pct: Option<f64>,
    /// The probe: packets/s and seconds.
    pub probe_pps: f64,
    /// Seconds of the probe.
    pub probe_s: f64,
    /// A source one daemon detected and pushed was in a second daemon's blacklist.
    pub pushed_seen_by_second_host: bool,
    /// Sources the first daemon pushed.
    pub pushed: u64,
    /// Push (the first daemon's block) → in the second daemon's blacklist (s).
    pub push_to_second_s: Option<f64>,
}

/// The veth the LAPI listens on: the root namespace's end and the lab host's.
const LAPI_ADDR: Ipv4Addr = Ipv4Addr::new(10, 254, 21, 1);
const PEER_ADDR: &str = "10.254.21.2/30";

fn ip(args: &[&str]) -> Result<()> {
    rampart_dataplane::cmd::ip(args)
        .map(|_| ())
        .map_err(|e| Error::Failed(format!("ip {}: {e}", args.join(" "))))
}

/// A veth from the root namespace into `ns`, removed on drop.
struct Link {
    name: String,
}

impl Link {
    fn up(ns: &str, tag: &str) -> Result<Self> {
        let name = format!("cs{tag}");
        let peer = format!("cp{tag}");
        let _ = ip(&["link", "del", &name]);
        ip(&["link", "add", &name, "type", "veth", "peer", "name", &peer])?;
        let me = Self { name };
        ip(&["link", "set", &peer, "netns", ns])?;
        ip(&["addr", "add", &format!("{LAPI_ADDR}/30"), "dev", &me.name])?;
        ip(&["link", "set", &me.name, "up"])?;
        ip(&["-n", ns, "addr", "add", PEER_ADDR, "dev", &peer])?;
        ip(&["-n", ns, "link", "set", &peer, "up"])?;
        Ok(me)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.name]);
    }
}

/// The shipped configuration with the lab's wiring and `[crowdsec]` on.
fn daemon_config(lab: &rampart_lab::Lab, dir: &Path, crowdsec: &str) -> Result<Config> {
    let mut t: toml::Table = SHIPPED_CONFIG
        .parse()
        .map_err(|e| Error::Invalid(format!("the shipped configuration is not TOML: {e}")))?;
    let mut set = |sec: &str, key: &str, val: toml::Value| {
        if let Some(s) = t
            .entry(sec)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
        {
            s.insert(key.into(), val);
        }
    };
    set("daemon", "iface", HOST_IF.into());
    set("daemon", "netns", lab.host_ns().into());
    set(
        "daemon",
        "state_dir",
        dir.join("state").display().to_string().into(),
    );
    set("server", "listen", "".into());
    set(
        "alerts",
        "file",
        dir.join("alerts.jsonl").display().to_string().into(),
    );
    let cs: toml::Table = toml::from_str(&format!("enabled = true\n{crowdsec}"))
        .map_err(|e| Error::Invalid(format!("the crowdsec section: {e}")))?;
    t.insert("crowdsec".into(), toml::Value::Table(cs));
    let text = toml::to_string(&t)
        .map_err(|e| Error::Failed(format!("writing the daemon's configuration: {e}")))?;
    Ok(Config::parse(&text)?)
}

fn bouncer_section(lapi: &CrowdsecLab, name: &str) -> Result<String> {
    let key = lapi.add_bouncer(name)?;
    Ok(format!(
        "lapi_url = \"{}\"\nbouncer_key = \"{key}\"\n",
        lapi.url()
    ))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Flood the host from the two banned sources for [`PROBE_S`]; packets sent.
fn probe(lab: &rampart_lab::Lab) -> Result<u64> {
    let spec = GenSpec {
        sources: 2,
        pps: Some(PROBE_PPS),
        limit: Limit::Seconds(PROBE_S),
        ..GenSpec::default()
    };
    let r = Generator::new(lab, &spec)?.run(&AtomicBool::new(false))?;
    Ok(r.sent_packets)
}

/// One rampart run: (start → all entered, the update's own time, drop %).
fn rampart_run(
    lab: &rampart_lab::Lab,
    lapi: &CrowdsecLab,
    dir: &Path,
    rep: usize,
    cancel: &AtomicBool,
) -> Result<(f64, f64, f64)> {
    let scope = rampart_ddos::filter::Scope::new(Some(&lab.host_ns()), HOST_IF)?.name();
    let _ = std::fs::remove_dir_all(dir.join("state"));
    let cfg = daemon_config(lab, dir, &bouncer_section(lapi, &format!("rampart-{rep}"))?)?;
    let t0 = Instant::now();
    let h = Handle::spawn(cfg)?;
    let r = (|| -> Result<(f64, f64, f64)> {
        let took = loop {
            check(cancel)?;
            let n = Filter::open(&scope)
                .and_then(|f| f.stats())
                .map_or(0, |s| s.entries.total());
            if n >= DECISIONS {
                break t0.elapsed().as_secs_f64();
            }
            if t0.elapsed() > PEER_LIMIT {
                return Err(Error::Failed(format!(
                    "rampart entered {n} of {DECISIONS} decisions in {} s",
                    PEER_LIMIT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // The view follows at the interval's end.
        let t = Instant::now();
        let apply = loop {
            if let Some(v) = h.view().crowdsec.filter(|v| v.enforced >= DECISIONS) {
                break v.last_apply_s;
            }
            if t.elapsed() > Duration::from_secs(30) {
                break f64::NAN;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let f = Filter::open(&scope)?;
        let before = f.stats()?.dropped("blacklist");
        let sent = probe(lab)?;
        let dropped = f.stats()?.dropped("blacklist") - before;
        Ok((took, apply, 100.0 * dropped as f64 / sent.max(1) as f64))
    })();
    let _ = h.stop();
    let _ = Filter::detach(&scope);
    r
}

/// Elements of the peer's set (`nft list set` in the host namespace).
fn peer_elements(ns: &str) -> u64 {
    rampart_dataplane::cmd::in_ns(
        ns,
        "nft",
        &["list", "set", "ip", "crowdsec", "crowdsec-blacklists"],
    )
    .map(|t| {
        t.split(|c: char| c == ',' || c == '{' || c == '}' || c.is_whitespace())
            .filter(|w| w.parse::<Ipv4Addr>().is_ok())
            .count() as u64
    })
    .unwrap_or(0)
}

/// The rule's packet counter (`ip saddr @crowdsec-blacklists counter packets N`).
fn peer_counter(ns: &str) -> u64 {
    rampart_dataplane::cmd::in_ns(
        ns,
        "nft",
        &["list", "chain", "ip", "crowdsec", "crowdsec-chain"],
    )
    .ok()
    .and_then(|t| {
        let w: Vec<&str> = t.split_whitespace().collect();
        w.windows(2)
            .find(|p| p[0] == "packets")
            .and_then(|p| p[1].parse().ok())
    })
    .unwrap_or(0)
}

struct Peer {
    child: Child,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The peer's run: (start → all entered or None, entered, drop %).
fn peer_run(
    lab: &rampart_lab::Lab,
    lapi: &CrowdsecLab,
    dir: &Path,
    cancel: &AtomicBool,
) -> Result<(Option<f64>, u64, Option<f64>)> {
    let key = lapi.add_bouncer("firewall-bouncer")?;
    let d = dir.join("peer");
    std::fs::create_dir_all(&d).map_err(|e| Error::io("creating the peer's dir", e))?;
    let cfg = format!(
        "mode: nftables\npid_dir: {d}/\nupdate_frequency: 10s\ndaemonize: false\nlog_mode: file\nlog_dir: {d}/\n\
         log_level: info\napi_url: {url}/\napi_key: {key}\ndisable_ipv6: false\ndeny_action: DROP\ndeny_log: false\n\
         supported_decisions_types:\n  - ban\nblacklists_ipv4: crowdsec-blacklists\nblacklists_ipv6: crowdsec6-blacklists\n\
         nftables:\n  ipv4:\n    enabled: true\n    set-only: false\n    table: crowdsec\n    chain: crowdsec-chain\n\
         \x20 ipv6:\n    enabled: true\n    set-only: false\n    table: crowdsec6\n    chain: crowdsec6-chain\n\
         prometheus:\n  enabled: false\n  listen_addr: 127.0.0.1\n  listen_port: 60601\n",
        d = d.display(),
        url = lapi.url()
    );
    let path = d.join("crowdsec-firewall-bouncer.yaml");
    std::fs::write(&path, cfg).map_err(|e| Error::io("writing the peer's config", e))?;
    let ns = lab.host_ns();
    let t0 = Instant::now();
    let child = Command::new("ip")
        .args(["netns", "exec", &ns, "crowdsec-firewall-bouncer", "-c"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io("starting crowdsec-firewall-bouncer", e))?;
    let _peer = Peer { child };
    let mut n;
    let took = loop {
        check(cancel)?;
        n = peer_elements(&ns);
        if n >= DECISIONS as u64 {
            break Some(t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > PEER_LIMIT {
            break None;
        }
        // Listing 100,000 elements takes about a second itself.
        std::thread::sleep(Duration::from_millis(200));
    };
    let drop = if n > 0 {
        let before = peer_counter(&ns);
        let sent = probe(lab)?;
        Some(100.0 * (peer_counter(&ns) - before) as f64 / sent.max(1) as f64)
    } else {
        None
    };
    Ok((took, n, drop))
}

/// Two daemons, two labs: the first detects an NTP reflection and
/// pushes; (pushed, seen by the second, push → seen seconds).
fn push_run(
    lapi: &CrowdsecLab,
    dir: &Path,
    cancel: &AtomicBool,
) -> Result<(u64, bool, Option<f64>)> {
    let a = BenchLab::up("bcsa")?;
    let b = BenchLab::up("bcsb")?;
    lapi.add_machine("rampart-a", "bench-machine-password")?;
    let push = format!(
        "{}push = true\nmachine_id = \"rampart-a\"\npassword = \"bench-machine-password\"\n",
        bouncer_section(lapi, "push-a")?
    );
    let ha = Handle::spawn(daemon_config(&a.lab, &dir.join("a"), &push)?)?;
    let hb = Handle::spawn(daemon_config(
        &b.lab,
        &dir.join("b"),
        &format!(
            "{}pull_interval_s = 10.0\n",
            bouncer_section(lapi, "push-b")?
        ),
    )?)?;
    let scope_a = rampart_ddos::filter::Scope::new(Some(&a.lab.host_ns()), HOST_IF)?.name();
    let scope_b = rampart_ddos::filter::Scope::new(Some(&b.lab.host_ns()), HOST_IF)?.name();
    let r = (|| -> Result<(u64, bool, Option<f64>)> {
        let spec = GenSpec {
            sources: 30,
            sport: 123,
            dport: Some(33_333),
            size: 1200,
            pps: Some(6000.0),
            limit: Limit::Seconds(120.0),
            ..GenSpec::default()
        };
        let gen = Generator::new(&a.lab, &spec)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || gen.run(&s));
        let t0 = Instant::now();
        let mut pushed_at = None;
        let mut seen = None;
        while t0.elapsed() < Duration::from_secs(110) {
            check(cancel)?;
            let va = ha.view();
            if pushed_at.is_none() && va.crowdsec.as_ref().is_some_and(|v| v.pushed > 0) {
                pushed_at = Some(Instant::now());
            }
            if let Some(p) = pushed_at {
                let blocked: Vec<rampart_ddos::Prefix> = va
                    .blocked
                    .iter()
                    .filter_map(|x| rampart_ddos::Prefix::parse(&x.prefix).ok())
                    .collect();
                let have: std::collections::HashSet<_> = Filter::open(&scope_b)
                    .and_then(|f| f.entries())
                    .map(|e| e.into_iter().map(|x| x.prefix).collect())
                    .unwrap_or_default();
                if !blocked.is_empty() && blocked.iter().any(|x| have.contains(x)) {
                    seen = Some(p.elapsed().as_secs_f64());
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        let _ = t.join();
        let pushed = ha.view().crowdsec.map_or(0, |v| v.pushed);
        Ok((pushed, seen.is_some(), seen))
    })();
    let _ = ha.stop();
    let _ = hb.stop();
    let _ = Filter::detach(&scope_a);
    let _ = Filter::detach(&scope_b);
    r
}

/// Run the CrowdSec part, files in `dir`.
///
/// # Errors
/// The lab, the LAPI or a daemon failing to start; Ctrl-C.
pub fn measure(dir: &Path, cancel: &AtomicBool) -> Result<CrowdsecResult> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let lab = BenchLab::up("bcs")?;
    let link = Link::up(
        &lab.lab.host_ns(),
        &lab.lab.prefix().chars().rev().take(6).collect::<String>(),
    )?;
    let lapi = CrowdsecLab::start_on(&dir.join("lapi"), LAPI_ADDR)?;
    let spec = GenSpec::default();
    let mut values: Vec<String> = (0..2).map(|i| spec.source_addr(i).to_string()).collect();
    let base = u32::from(Ipv4Addr::new(172, 20, 0, 0));
    values.extend((0..(DECISIONS as u32 - 2)).map(|k| Ipv4Addr::from(base + k).to_string()));
    let t = Instant::now();
    lapi.import(&values, "ip", "4h")?;
    let mut r = CrowdsecResult {
        decisions: DECISIONS as u64,
        import_s: t.elapsed().as_secs_f64(),
        probe_pps: PROBE_PPS,
        probe_s: PROBE_S,
        ..CrowdsecResult::default()
    };
    let mut drops = Vec::new();
    for rep in 0..REPS {
        let (took, apply, drop) = rampart_run(&lab.lab, &lapi, dir, rep, cancel)?;
        tracing::info!("crowdsec: rampart run {rep}: {took:.2} s to enter {DECISIONS} (update {apply:.3} s), {drop:.1} % of the probe dropped");
        r.enforce_s.push(took);
        r.apply_s.push(apply);
        drops.push(drop);
    }
    r.enforce_median_s = median(&r.enforce_s);
    r.drop_pct = median(&drops);
    let (took, n, pdrop) = peer_run(&lab.lab, &lapi, dir, cancel)?;
    tracing::info!("crowdsec: the nftables bouncer entered {n} in {took:?} s, dropped {pdrop:?} % of the probe");
    r.peer_enforce_s = took;
    r.peer_entered = n;
    r.peer_drop_pct = pdrop;
    drop(link);
    drop(lab);
    let lapi2 = CrowdsecLab::start(&dir.join("lapi-push"))?;
    let (pushed, seen, s) = push_run(&lapi2, dir, cancel)?;
    r.pushed = pushed;
    r.pushed_seen_by_second_host = seen;
    r.push_to_second_s = s;
    Ok(r)
}
