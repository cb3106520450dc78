//! Detection end to end, one test per detector family, as a user meets it:
//! the daemon on the SHIPPED configuration (`dist/rampart-ddos.toml`; only
//! the interface, namespace, state and alert files and the API port are
//! adapted to the lab, never a `[detect]` key), nginx on `host`, and real
//! tools in `wan` — hping3, nmap, wrk, curl — or the lab generator where
//! hping3 cannot go: the 300 low-rate reflectors of an amplification attack,
//! and a UDP flood above the `udp_flood` floor (50 kpps).
//!
//! The tests assert behaviour: who is blocked, the vector the alerts and
//! the API name, protection state, drop counters. They wait with deadlines
//! (poll until it happens or fail), never on a rate or a time being below
//! a number. The tools run at modest rates (the machine is shared); every
//! rate is far above the shipped floors. One test runs at a time: each
//! floods its own lab, and two floods on a small machine would starve each
//! other's daemon.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rampart_ddos::filter::Scope;
use rampart_ddos::protect::Protect;
use rampart_ddos::Prefix;
use rampart_ddosd::Handle;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_lab::topology::{GEN_ANCHOR_IF, HOST_IF};
use rampart_lab::web::{Nginx, Wrk};
use rampart_service::Server;

mod common;
use common::{
    add_wan_aliases, alerts, api_get, curl_ok, poll, shipped_config, Cleanup, Client, Crowd, Tool,
};

/// The victim: nginx on `host`.
const VICTIM: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 2);
/// wan0's own address: the legitimate client (curl, wrk).
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 1);

/// Attacker alias `i` of wan0.
fn attacker(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 66, 0, i)
}

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One lab with nginx, the daemon on the shipped config and its API, and a
/// legitimate curl client from wan0's own address. Dropped in the order
/// that leaves nothing behind: tools, client, API, daemon, nginx, pins and
/// files, lab.
struct Scene {
    tools: Vec<Tool>,
    client: Option<Client>,
    api: Option<Server>,
    h: Option<Handle>,
    nginx: Option<Nginx>,
    c: Cleanup,
    lab: TestLab,
    _one: MutexGuard<'static, ()>,
}

impl Scene {
    /// Lab `tag`, `aliases` on wan0, nginx, the daemon; waits until the
    /// daemon has run `warm` intervals with the client's requests.
    fn up(tag: &str, aliases: &[Ipv4Addr], warm: u64) -> Self {
        let mut me = Self::without_daemon(tag, aliases);
        me.start_daemon();
        me.warm(warm);
        me
    }

    /// Lab `tag`, `aliases` on wan0, nginx and the client; no daemon yet.
    fn without_daemon(tag: &str, aliases: &[Ipv4Addr]) -> Self {
        let one = one_at_a_time();
        let lab = TestLab::up(tag, 0);
        let c = Cleanup::new(&lab);
        add_wan_aliases(&lab, aliases);
        let nginx = Nginx::start(
            &lab.host_ns(),
            &VICTIM.to_string(),
            None,
            &c.dir,
            &lab.wan_ns(),
        )
        .expect("nginx on host");
        let mut me = Self {
            tools: Vec::new(),
            client: None,
            api: None,
            h: None,
            nginx: Some(nginx),
            c,
            lab,
            _one: one,
        };
        me.client = Some(Client::start(&me.lab.wan_ns(), &me.url()));
        me
    }

    /// Start the daemon (and its API) on the shipped config; its state
    /// directory is kept across restarts.
    fn start_daemon(&mut self) {
        let cfg = shipped_config(&self.lab, &self.c);
        let server = cfg.server.clone();
        let h = Handle::spawn(cfg).expect("the daemon starts on the shipped config");
        self.api = Some(rampart_ddosd::api::start(&h, &server).expect("the API starts"));
        self.h = Some(h);
    }

    /// Stop the daemon as an operator would (its state is saved, its
    /// pinned filter stays).
    fn stop_daemon(&mut self) {
        self.api = None;
        if let Some(h) = self.h.take() {
            h.stop().expect("the daemon stops cleanly");
        }
    }

    /// Wait until the daemon has run `n` more intervals.
    fn warm(&self, n: u64) {
        let n0 = self.h().view().intervals;
        common::wait_for("the daemon's warm-up", Duration::from_secs(30), || {
            self.h().view().intervals >= n0 + n
        });
    }

    fn h(&self) -> &Handle {
        self.h.as_ref().expect("the daemon runs")
    }

    fn api(&self) -> SocketAddr {
        self.api
            .as_ref()
            .and_then(Server::api_addr)
            .expect("the API listens")
    }

    fn url(&self) -> String {
        format!("http://{VICTIM}/")
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("the client runs")
    }

    /// Start `prog args` in `wan`; it runs until `stop_tools` or the end.
    fn tool(&mut self, prog: &str, args: &[&str]) {
        let log = self.c.dir.join(format!("{prog}-{}.log", self.tools.len()));
        self.tools
            .push(Tool::spawn(&self.lab.wan_ns(), prog, args, &log));
    }

    fn stop_tools(&mut self) {
        for t in &mut self.tools {
            t.stop();
        }
        self.tools.clear();
    }

    fn blocked(&self) -> Vec<Prefix> {
        self.h()
            .view()
            .blocked
            .iter()
            .map(|b| Prefix::parse(&b.prefix).unwrap())
            .collect()
    }

    fn is_blocked(&self, a: IpAddr) -> bool {
        self.blocked().iter().any(|p| p.contains(&a))
    }

    /// `GET /v1/victims`: the entry of `victim` (a prefix: `ADDR/32`, an IPv6 /64).
    fn victim(&self, victim: &str) -> Option<serde_json::Value> {
        api_get(self.api(), "/v1/victims")
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["victim"] == victim)
            .cloned()
    }

    /// What a failure message needs: the victims, the blocked and policed
    /// sources, the alerts, the tools' output.
    fn evidence(&self) -> String {
        let Some(h) = &self.h else {
            return "\n(the daemon is not running)".into();
        };
        let v = h.view();
        let alerts: Vec<String> = alerts(&self.c)
            .iter()
            .filter(|a| a["rampart"]["event"] != "hw_add")
            .map(|a| {
                let r = &a["rampart"];
                format!(
                    "{} victim={} vector={} prefix={} detector={} reason={}",
                    r["event"], r["victim"], r["vector"], r["prefix"], r["detector"], r["reason"]
                )
            })
            .collect();
        let mut tools = String::new();
        if let Ok(d) = std::fs::read_dir(&self.c.dir) {
            for e in d.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "log") {
                    let t = std::fs::read_to_string(&p).unwrap_or_default();
                    let tail: Vec<&str> = t.lines().rev().take(3).collect();
                    tools.push_str(&format!("\n  {}: {:?}", p.display(), tail));
                }
            }
        }
        format!(
            "\nvictims: {}\nblocked: {:?}\npoliced: {:?}\nclient: {} ok, {} failed\nalerts ({}):\n  {}\ntools:{tools}",
            serde_json::to_string(&v.victims).unwrap_or_default(),
            v.blocked
                .iter()
                .map(|b| format!("{} [{}] {}", b.prefix, b.detector, b.reason))
                .collect::<Vec<_>>(),
            v.policed
                .iter()
                .map(|p| format!("{} {} {}", p.prefix, p.vector, p.reason))
                .collect::<Vec<_>>(),
            self.client().ok(),
            self.client().failed(),
            alerts.len(),
            alerts.join("\n  ")
        )
    }

    /// Poll `f` until it holds; fail after `secs` with the evidence.
    fn expect(&self, what: &str, secs: u64, mut f: impl FnMut(&Self) -> bool) {
        if !poll(Duration::from_secs(secs), || f(self)) {
            panic!("timed out ({secs} s) waiting for {what}{}", self.evidence());
        }
    }

    /// The attack events (`attack_start` / `attack_update`) of `victim`.
    fn attack_vectors(&self, victim: &str) -> Vec<String> {
        let mut out = Vec::new();
        for a in alerts(&self.c) {
            let r = &a["rampart"];
            let ev = r["event"].as_str().unwrap_or("");
            if (ev == "attack_start" || ev == "attack_update") && r["victim"] == victim {
                if let Some(v) = r["vector"].as_str() {
                    out.push(v.to_string());
                }
                for v in r["vectors"].as_array().into_iter().flatten() {
                    if let Some(v) = v.as_str().or_else(|| v["vector"].as_str()) {
                        out.push(v.to_string());
                    }
                }
            }
        }
        out
    }

    /// Blocks (alerts) of sources inside `p`.
    fn block_alerts_of(&self, a: IpAddr) -> Vec<serde_json::Value> {
        alerts(&self.c)
            .into_iter()
            .filter(|x| {
                x["rampart"]["event"] == "block"
                    && x["rampart"]["prefix"]
                        .as_str()
                        .and_then(|p| Prefix::parse(p).ok())
                        .is_some_and(|p| p.contains(&a))
            })
            .collect()
    }

    /// The legitimate client was never blocked, and it was served.
    fn assert_client_served_and_never_banned(&self) {
        let client = IpAddr::V4(CLIENT);
        assert!(
            self.block_alerts_of(client).is_empty() && !self.is_blocked(client),
            "the legitimate client {CLIENT} was banned{}",
            self.evidence()
        );
        assert!(
            curl_ok(&self.lab.wan_ns(), &self.url()),
            "a request from {CLIENT} was not served{}",
            self.evidence()
        );
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // What detection did, for `--nocapture` (a failure prints it in its message).
            eprintln!("{}: {}", self.lab.prefix(), self.evidence());
        }
        self.stop_tools();
        self.client = None;
        self.api = None;
        if let Some(h) = self.h.take() {
            let _ = h.stop();
        }
        self.nginx = None;
    }
}

fn hping_from(s: &mut Scene, from: &[Ipv4Addr], args: &[&str]) {
    let victim = VICTIM.to_string();
    for a in from {
        let a = a.to_string();
        let mut v: Vec<&str> = args.to_vec();
        v.extend(["-q", "-a", &a, &victim]);
        s.tool("hping3", &v);
    }
}

/// hping3 -S from five aliases of wan0: their kernel answers every SYN-ACK
/// with a RST (the handshakes never complete). The five are blocked under
/// `syn_flood`; the web client keeps being served and is never banned.
#[test]
fn few_source_syn_flood_blocks_the_five_sources_not_the_client() {
    let attackers: Vec<Ipv4Addr> = (1..=5).map(attacker).collect();
    let mut s = Scene::up("edsyn", &attackers, 6);
    let ok0 = s.client().ok();
    hping_from(&mut s, &attackers, &["-S", "-p", "80", "-i", "u100"]);
    s.expect("the five hping3 sources blocked", 30, |s| {
        attackers.iter().all(|a| s.is_blocked(IpAddr::V4(*a)))
    });
    let victim = format!("{VICTIM}/32");
    s.expect("an attack alert with vector syn_flood", 10, |s| {
        s.attack_vectors(&victim).iter().any(|v| v == "syn_flood")
    });
    for a in &attackers {
        let b = s.block_alerts_of(IpAddr::V4(*a));
        assert!(
            b.iter().any(|x| x["rampart"]["detector"] == "syn_flood"),
            "{a} blocked as syn_flood: {b:?}"
        );
    }
    s.expect("the blocked sources' packets dropped in XDP", 10, |s| {
        s.h()
            .view()
            .counters
            .drops
            .get(&("xdp", "blacklist".to_string()))
            .is_some_and(|n| n.packets > 0)
    });
    // Under the flood (the sources are blocked, hping3 still sends).
    s.expect("the client served during the flood", 15, |s| {
        s.client().ok() > ok0 + 2
    });
    s.assert_client_served_and_never_banned();
}

/// hping3 -S --rand-source: every packet from another address. No
/// blacklist of spoofed addresses: the victim gets XDP SYN cookies, the
/// client still completes its requests, and the protection goes off after
/// the flood.
#[test]
fn spoofed_syn_flood_turns_syn_cookies_on_then_off_without_filling_the_blacklist() {
    let mut s = Scene::up("edspf", &[], 6);
    let victim = VICTIM.to_string();
    s.tool(
        "hping3",
        &[
            "-S",
            "-p",
            "80",
            "-i",
            "u20",
            "--rand-source",
            "-q",
            &victim,
        ],
    );
    let mut max_blocked = 0;
    let key = format!("{VICTIM}/32");
    s.expect("SYN cookies on for the victim (GET /v1/victims)", 30, |s| {
        max_blocked = max_blocked.max(s.h().view().blocked.len());
        s.victim(&key)
            .is_some_and(|v| v["protection"]["syn_cookies"] == true)
    });
    assert!(
        s.attack_vectors(&key).iter().any(|v| v == "syn_flood"),
        "the attack is called syn_flood{}",
        s.evidence()
    );
    // The client completes handshakes through the cookies.
    let ok0 = s.client().ok();
    s.expect("the client served under SYN cookies", 20, |s| {
        max_blocked = max_blocked.max(s.h().view().blocked.len());
        s.client().ok() > ok0 + 2
    });
    s.assert_client_served_and_never_banned();
    let st = Protect::open(&Scope::new(Some(&s.lab.host_ns()), HOST_IF).unwrap())
        .unwrap()
        .stats(IpAddr::V4(VICTIM))
        .unwrap()
        .expect("the victim is protected");
    assert!(st.synack_sent > 0, "XDP answered SYNs with cookies: {st:?}");
    assert!(
        st.cookie_ack_valid > 0,
        "the client's handshakes completed through the cookies: {st:?}"
    );
    max_blocked = max_blocked.max(s.h().view().blocked.len());
    assert!(
        max_blocked <= 5,
        "a spoofed flood fills no blacklist: {max_blocked} blocked{}",
        s.evidence()
    );
    s.stop_tools();
    s.expect("SYN cookies off after the flood", 120, |s| {
        s.victim(&key)
            .is_none_or(|v| v["protection"]["syn_cookies"] == false)
    });
    // Off in XDP too, and the attack is over.
    let p = Protect::open(&Scope::new(Some(&s.lab.host_ns()), HOST_IF).unwrap()).unwrap();
    s.expect("the victim out of the XDP protection table", 10, |_| {
        p.stats(IpAddr::V4(VICTIM)).unwrap().is_none()
    });
    s.expect("attack_end for the victim", 60, |s| {
        alerts(&s.c).iter().any(|a| {
            a["rampart"]["event"] == "attack_end" && a["rampart"]["victim"] == key.as_str()
        })
    });
}

/// Out-of-state TCP from random sources (`flag`: hping3 -A or -R). The
/// attack is called `ack_flood`, the ACK guard goes on for the victim and
/// drops the segments in XDP (its drop counter moves); nothing spoofed is
/// blacklisted; the client is still served.
fn out_of_state_flood_turns_the_ack_guard_on(tag: &str, flag: &str) {
    let mut s = Scene::up(tag, &[], 6);
    let victim = VICTIM.to_string();
    s.tool(
        "hping3",
        &[
            flag,
            "-p",
            "80",
            "-i",
            "u20",
            "--rand-source",
            "-q",
            &victim,
        ],
    );
    let key = format!("{VICTIM}/32");
    s.expect(
        "the ACK guard on for the victim (GET /v1/victims)",
        30,
        |s| {
            s.victim(&key)
                .is_some_and(|v| v["protection"]["ack_guard"] == true)
        },
    );
    assert!(
        s.attack_vectors(&key).iter().any(|v| v == "ack_flood"),
        "the attack is called ack_flood{}",
        s.evidence()
    );
    let p = Protect::open(&Scope::new(Some(&s.lab.host_ns()), HOST_IF).unwrap()).unwrap();
    let dropped = |p: &Protect| {
        p.stats(IpAddr::V4(VICTIM))
            .unwrap()
            .map_or(0, |st| st.guard_dropped)
    };
    let d0 = dropped(&p);
    s.expect("hping3's segments dropped by the guard", 10, |_| {
        dropped(&p) > d0 + 100
    });
    assert!(
        s.h().view().blocked.len() <= 5,
        "a spoofed {flag} flood fills no blacklist{}",
        s.evidence()
    );
    s.assert_client_served_and_never_banned();
}

#[test]
fn ack_flood_turns_the_ack_guard_on_and_is_dropped_in_xdp() {
    out_of_state_flood_turns_the_ack_guard_on("edack", "-A");
}

#[test]
fn rst_flood_turns_the_ack_guard_on_and_is_dropped_in_xdp() {
    out_of_state_flood_turns_the_ack_guard_on("edrst", "-R");
}

/// hping3 --icmp from five aliases: blocked under `icmp_flood`.
#[test]
fn icmp_flood_blocks_its_sources() {
    let attackers: Vec<Ipv4Addr> = (1..=5).map(attacker).collect();
    let mut s = Scene::up("edicm", &attackers, 6);
    hping_from(&mut s, &attackers, &["--icmp", "-d", "512", "-i", "u100"]);
    s.expect("the five ICMP sources blocked", 30, |s| {
        attackers.iter().all(|a| s.is_blocked(IpAddr::V4(*a)))
    });
    let victim = format!("{VICTIM}/32");
    s.expect("an attack alert with vector icmp_flood", 10, |s| {
        s.attack_vectors(&victim).iter().any(|v| v == "icmp_flood")
    });
    s.expect("the blocked sources' packets dropped in XDP", 10, |s| {
        s.h()
            .view()
            .counters
            .drops
            .get(&("xdp", "blacklist".to_string()))
            .is_some_and(|n| n.packets > 0)
    });
    for a in &attackers {
        let b = s.block_alerts_of(IpAddr::V4(*a));
        assert!(
            b.iter().any(|x| x["rampart"]["detector"] == "icmp_flood"),
            "{a} blocked as icmp_flood: {b:?}"
        );
    }
    s.assert_client_served_and_never_banned();
}

/// UDP reflection from 300 reflectors at ~100 pps each, 1,200 B, from the
/// service port of `v4` to the IPv4 victim and of `v6` to the IPv6 one, at
/// the same time (two generators). Each victim's alert names its vector
/// (`udp_amplification/<name>`); every reflector ends up inside a blocked
/// prefix (one by one or aggregated).
fn amplification(tag: &str, v4: (u16, &str), v6: (u16, &str)) {
    let s = Scene::up(tag, &[], 6);
    let reflectors = 300u32;
    let spec = |sport: u16, ipv6: bool| GenSpec {
        sources: reflectors,
        proto: Proto::Udp,
        sport,
        dport: Some(33_333),
        size: 1200,
        ipv6,
        pps: Some(100.0 * f64::from(reflectors)),
        limit: Limit::Seconds(40.0),
        ..GenSpec::default()
    };
    let (s4, s6) = (spec(v4.0, false), spec(v6.0, true));
    let g4 = Generator::with_anchor(&s.lab, &s4, GEN_ANCHOR_IF).unwrap();
    let g6 = Generator::with_anchor(&s.lab, &s6, "gen-anchor-p").unwrap();
    let stop = AtomicBool::new(false);
    let all_blocked = |s: &Scene, spec: &GenSpec| {
        let b = s.blocked();
        (0..reflectors).all(|i| b.iter().any(|p| p.contains(&spec.source_addr(i))))
    };
    let (want4, want6) = (
        format!("udp_amplification/{}", v4.1),
        format!("udp_amplification/{}", v6.1),
    );
    std::thread::scope(|sc| {
        let r1 = sc.spawn(|| g4.run(&stop));
        let r2 = sc.spawn(|| g6.run(&stop));
        let checks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let k4 = format!("{VICTIM}/32");
            let k6 = Prefix::truncate(IpAddr::V6(Ipv6Addr::new(0xfd10, 0, 0, 0, 0, 0, 0, 2)), 64)
                .to_string();
            s.expect(&format!("an attack alert naming {want4} (IPv4)"), 30, |s| {
                s.attack_vectors(&k4).contains(&want4)
            });
            s.expect(&format!("an attack alert naming {want6} (IPv6)"), 30, |s| {
                s.attack_vectors(&k6).contains(&want6)
            });
            s.expect("every IPv4 reflector blocked", 30, |s| all_blocked(s, &s4));
            s.expect("every IPv6 reflector blocked", 30, |s| all_blocked(s, &s6));
            // Read while the reflectors still send (the daemon reads the counters each interval).
            s.expect("the reflectors' packets dropped in XDP", 10, |s| {
                s.h().view().tiers.iter().any(|t| t.dropped_packets > 0)
            });
        }));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sent =
            r1.join().unwrap().unwrap().sent_packets + r2.join().unwrap().unwrap().sent_packets;
        if let Err(e) = checks {
            std::panic::resume_unwind(e);
        }
        assert!(sent > 0);
    });
    s.assert_client_served_and_never_banned();
}

#[test]
fn amplification_ntp_and_dns_from_300_reflectors_is_named_and_dropped() {
    amplification("edamp", (123, "ntp"), (53, "dns"));
}

#[test]
fn amplification_memcached_and_ssdp_from_300_reflectors_is_named_and_dropped() {
    amplification("edam2", (11211, "memcached"), (1900, "ssdp"));
}

#[test]
fn amplification_cldap_and_snmp_from_300_reflectors_is_named_and_dropped() {
    amplification("edam3", (389, "cldap"), (161, "snmp"));
}

#[test]
fn amplification_chargen_and_ipv6_cldap_from_300_reflectors_is_named_and_dropped() {
    amplification("edam4", (19, "chargen"), (389, "cldap"));
}

/// nmap -sS of ports 1-2000 from one alias: the scanner is blocked as a
/// `port_scan`; the web client is not.
#[test]
fn port_scan_blocks_the_scanner_not_the_web_client() {
    let scanner = attacker(9);
    let mut s = Scene::up("edscn", &[scanner], 6);
    let src = scanner.to_string();
    let victim = VICTIM.to_string();
    let args = [
        "-sS",
        "-Pn",
        "-n",
        "-T4",
        "--max-retries",
        "1",
        "-p",
        "1-2000",
        "-S",
        &src,
        "-e",
        "wan0",
        &victim,
    ];
    s.tool("nmap", &args);
    // nmap again whenever a scan ends before the block (one scan can be short).
    let t0 = std::time::Instant::now();
    while !s.is_blocked(IpAddr::V4(scanner)) {
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "timed out (40 s) waiting for the scanner to be blocked{}",
            s.evidence()
        );
        if s.tools.iter_mut().all(Tool::exited) {
            s.stop_tools();
            s.tool("nmap", &args);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let b = s.block_alerts_of(IpAddr::V4(scanner));
    assert!(
        b.iter().any(|x| x["rampart"]["detector"] == "port_scan"),
        "the scanner is blocked as port_scan: {b:?}{}",
        s.evidence()
    );
    s.assert_client_served_and_never_banned();
}

/// wrk at full speed from wan0's own address, the daemon warm: a heavy
/// client of a healthy service is a customer — no ban, no attack.
#[test]
fn heavy_legitimate_client_is_never_banned() {
    let s = Scene::up("edwrk", &[], 10);
    let wrk = Wrk::spawn(&s.lab.wan_ns(), &s.url(), 10.0, 16, None).expect("wrk");
    let r = wrk.finish().expect("wrk's report");
    assert!(r.requests > 0, "wrk was served: {r:?}");
    // Two more intervals so that the daemon judged the whole run.
    let n0 = s.h().view().intervals;
    s.expect("two intervals after wrk", 10, |s| {
        s.h().view().intervals >= n0 + 2
    });
    let a = alerts(&s.c);
    assert!(
        !a.iter().any(|x| x["rampart"]["event"] == "attack_start"),
        "no attack_start for a heavy client ({r:?}){}",
        s.evidence()
    );
    assert_eq!(
        s.h().view().blocked_total,
        0,
        "nothing blocked ({r:?}){}",
        s.evidence()
    );
    assert!(
        s.h().view().policed.is_empty(),
        "nothing policed ({r:?}){}",
        s.evidence()
    );
    s.assert_client_served_and_never_banned();
}

/// The same scan at 300 probes/s (nmap --max-rate), far below the
/// victim's `syn_flood` floor: the scanner is still blocked as a
/// `port_scan` (a per-source signature, not a victim's volume).
#[test]
fn slow_port_scan_is_caught_per_source() {
    let scanner = attacker(9);
    let mut s = Scene::up("edsls", &[scanner], 6);
    let src = scanner.to_string();
    let victim = VICTIM.to_string();
    s.tool(
        "nmap",
        &[
            "-sS",
            "-Pn",
            "-n",
            "--max-rate",
            "300",
            "--max-retries",
            "1",
            "-p",
            "1-2000",
            "-S",
            &src,
            "-e",
            "wan0",
            &victim,
        ],
    );
    s.expect("the scanner blocked", 30, |s| {
        s.is_blocked(IpAddr::V4(scanner))
    });
    let b = s.block_alerts_of(IpAddr::V4(scanner));
    assert!(
        b.iter().any(|x| x["rampart"]["detector"] == "port_scan"),
        "the scanner is blocked as port_scan: {b:?}{}",
        s.evidence()
    );
    s.assert_client_served_and_never_banned();
}

/// A UDP flood from five sources (the lab generator: ordinary source
/// port, well above the shipped `udp_flood` floor): the five are blocked
/// under `udp_flood`.
#[test]
fn udp_flood_blocks_its_sources() {
    let s = Scene::up("edudp", &[], 6);
    let spec = GenSpec {
        sources: 5,
        proto: Proto::Udp,
        sport: 40_000,
        size: 200,
        pps: Some(300_000.0),
        limit: Limit::Seconds(40.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&s.lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let key = format!("{VICTIM}/32");
    std::thread::scope(|sc| {
        let run = sc.spawn(|| g.run(&stop));
        let checks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.expect("the five UDP sources blocked", 30, |s| {
                (0..spec.sources).all(|i| s.is_blocked(spec.source_addr(i)))
            });
            s.expect("an attack alert with vector udp_flood", 10, |s| {
                s.attack_vectors(&key).iter().any(|v| v == "udp_flood")
            });
        }));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(run.join().unwrap().unwrap().sent_packets > 0);
        if let Err(e) = checks {
            std::panic::resume_unwind(e);
        }
    });
    for i in 0..spec.sources {
        let b = s.block_alerts_of(spec.source_addr(i));
        assert!(
            b.iter().any(|x| x["rampart"]["detector"] == "udp_flood"),
            "{} blocked as udp_flood: {b:?}",
            spec.source_addr(i)
        );
    }
    s.assert_client_served_and_never_banned();
}

/// hping3 -f (every datagram in 16-byte IP fragments) from five aliases:
/// blocked under `fragment_flood`.
#[test]
fn fragment_flood_blocks_its_sources() {
    let attackers: Vec<Ipv4Addr> = (1..=5).map(attacker).collect();
    let mut s = Scene::up("edfrg", &attackers, 6);
    hping_from(
        &mut s,
        &attackers,
        &["--udp", "-p", "53", "-f", "-d", "200", "-i", "u200"],
    );
    s.expect("the five fragmenting sources blocked", 30, |s| {
        attackers.iter().all(|a| s.is_blocked(IpAddr::V4(*a)))
    });
    let key = format!("{VICTIM}/32");
    s.expect("an attack alert with vector fragment_flood", 10, |s| {
        s.attack_vectors(&key).iter().any(|v| v == "fragment_flood")
    });
    for a in &attackers {
        let b = s.block_alerts_of(IpAddr::V4(*a));
        assert!(
            b.iter()
                .any(|x| x["rampart"]["detector"] == "fragment_flood"),
            "{a} blocked as fragment_flood: {b:?}"
        );
    }
    s.assert_client_served_and_never_banned();
}

/// Carpet bombing: hping3 SYNs with random sources to random addresses of
/// the host's /24 (the host owns all of it). The /24 is judged as one
/// victim: the attack is `carpet/syn_flood` on 10.10.0.0/24, SYN cookies go
/// on for it, no spoofed source is blacklisted, the client is served.
#[test]
fn carpet_bombing_of_the_24_is_one_attack_answered_with_cookies() {
    let mut s = Scene::up("edcpt", &[], 6);
    let batch = s.c.dir.join("carpet.ip");
    let lines: String = (3..=254)
        .map(|i| format!("addr add 10.10.0.{i}/32 dev {HOST_IF}\n"))
        .collect();
    std::fs::write(&batch, lines).unwrap();
    rampart_dataplane::cmd::in_ns(
        &s.lab.host_ns(),
        "ip",
        &["-batch", &batch.display().to_string()],
    )
    .unwrap();
    s.tool(
        "hping3",
        &[
            "-S",
            "-p",
            "80",
            "-i",
            "u50",
            "--rand-source",
            "--rand-dest",
            "-I",
            "wan0",
            "-q",
            "10.10.0.x",
        ],
    );
    let key = "10.10.0.0/24";
    s.expect(
        "an attack alert with vector carpet/syn_flood on the /24",
        30,
        |s| {
            s.attack_vectors(key)
                .iter()
                .any(|v| v == "carpet/syn_flood")
        },
    );
    s.expect("SYN cookies on for the /24 (GET /v1/victims)", 20, |s| {
        s.victim(key)
            .is_some_and(|v| v["protection"]["syn_cookies"] == true)
    });
    assert!(
        s.h().view().blocked.len() <= 5,
        "a spoofed carpet fills no blacklist{}",
        s.evidence()
    );
    s.assert_client_served_and_never_banned();
}

/// The few-source SYN flood is already running when the daemon starts
/// for the first time (no state, nothing learned): it is not learned as
/// normal; the five are blocked under `syn_flood`, the client is not.
#[test]
fn syn_flood_running_when_the_daemon_first_starts_is_blocked() {
    let attackers: Vec<Ipv4Addr> = (1..=5).map(attacker).collect();
    let mut s = Scene::without_daemon("edats", &attackers);
    hping_from(&mut s, &attackers, &["-S", "-p", "80", "-i", "u100"]);
    std::thread::sleep(Duration::from_secs(2));
    s.start_daemon();
    s.expect("the five hping3 sources blocked", 30, |s| {
        attackers.iter().all(|a| s.is_blocked(IpAddr::V4(*a)))
    });
    for a in &attackers {
        let b = s.block_alerts_of(IpAddr::V4(*a));
        assert!(
            b.iter().any(|x| x["rampart"]["detector"] == "syn_flood"),
            "{a} blocked as syn_flood: {b:?}"
        );
    }
    s.assert_client_served_and_never_banned();
}

/// The daemon learned normal traffic and was stopped; the flood starts
/// while it is down and runs when it starts again on its state file: the
/// five are blocked, the client is not.
#[test]
fn syn_flood_running_when_the_daemon_restarts_on_its_state_is_blocked() {
    let attackers: Vec<Ipv4Addr> = (1..=5).map(attacker).collect();
    let mut s = Scene::up("edatr", &attackers, 10);
    s.stop_daemon();
    hping_from(&mut s, &attackers, &["-S", "-p", "80", "-i", "u100"]);
    std::thread::sleep(Duration::from_secs(2));
    s.start_daemon();
    s.expect("the five hping3 sources blocked", 30, |s| {
        attackers.iter().all(|a| s.is_blocked(IpAddr::V4(*a)))
    });
    s.assert_client_served_and_never_banned();
}

/// An IPv6 SYN flood (the lab generator: 16 sources of one /64; hping3
/// has no IPv6) at nginx's IPv6 address: the attack on the victim's /64
/// is `syn_flood`, every source ends up blocked (one by one or as their
/// /64), the IPv4 client is not.
#[test]
fn ipv6_syn_flood_blocks_its_sources() {
    let s = Scene::up("edsy6", &[], 6);
    let victim6 = Ipv6Addr::new(0xfd10, 0, 0, 0, 0, 0, 0, 2);
    let _nginx6 = Nginx::start(
        &s.lab.host_ns(),
        &format!("[{victim6}]"),
        None,
        &s.c.dir.join("v6"),
        &s.lab.wan_ns(),
    )
    .expect("nginx on host's IPv6 address");
    let spec = GenSpec {
        sources: 16,
        proto: Proto::Syn,
        ipv6: true,
        size: rampart_lab::packet::min_size(Proto::Syn, true),
        pps: Some(40_000.0),
        limit: Limit::Seconds(40.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&s.lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let key = Prefix::truncate(IpAddr::V6(victim6), 64).to_string();
    std::thread::scope(|sc| {
        let run = sc.spawn(|| g.run(&stop));
        let checks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.expect("every IPv6 source blocked", 30, |s| {
                (0..spec.sources).all(|i| s.is_blocked(spec.source_addr(i)))
            });
            s.expect(
                "an attack alert with vector syn_flood on the /64",
                10,
                |s| s.attack_vectors(&key).iter().any(|v| v == "syn_flood"),
            );
        }));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(run.join().unwrap().unwrap().sent_packets > 0);
        if let Err(e) = checks {
            std::panic::resume_unwind(e);
        }
    });
    s.assert_client_served_and_never_banned();
}

/// A pulse attack: 3 s of SYN flood from 64 sources, 3 s of silence, three
/// times. It is one attack: one `attack_start`, no `attack_end` and no
/// unban while the pulses go on.
#[test]
fn pulse_attack_is_one_attack_without_unbans() {
    let s = Scene::up("edpls", &[], 6);
    let spec = GenSpec {
        sources: 64,
        proto: Proto::Syn,
        pps: Some(50_000.0),
        limit: Limit::Seconds(3.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&s.lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let key = format!("{VICTIM}/32");
    for pulse in 0..3 {
        assert!(g.run(&stop).unwrap().sent_packets > 0);
        if pulse == 0 {
            s.expect("the first pulse's sources blocked", 10, |s| {
                !s.blocked().is_empty()
            });
        }
        std::thread::sleep(Duration::from_secs(3));
    }
    let events = |ev: &str| {
        alerts(&s.c)
            .iter()
            .filter(|a| a["rampart"]["event"] == ev && a["rampart"]["victim"] == key.as_str())
            .count()
    };
    assert_eq!(
        (events("attack_start"), events("attack_end")),
        (1, 0),
        "three pulses are one attack, still open{}",
        s.evidence()
    );
    assert_eq!(
        s.h().view().unbanned_total,
        0,
        "no source unbanned between pulses{}",
        s.evidence()
    );
    s.assert_client_served_and_never_banned();
}

/// A flash crowd: 300 new users (aliases of wan0), ~150 requests/s in all
/// for ~10 s — 30 times the steady client — with the daemon warm. New
/// users completing their handshakes are customers: no ban, no policing,
/// no attack.
#[test]
fn flash_crowd_is_not_an_attack() {
    let crowd: Vec<Ipv4Addr> = (1..=300u16)
        .map(|i| Ipv4Addr::new(10, 31, (i >> 8) as u8, i as u8))
        .collect();
    let s = Scene::up("edcrd", &crowd, 10);
    let c = Crowd::start(
        &s.lab.wan_ns(),
        &crowd,
        std::net::SocketAddrV4::new(VICTIM, 80),
        10,
        15.0,
    );
    let n0 = s.h().view().intervals;
    s.expect("20 intervals of the crowd", 30, |s| {
        s.h().view().intervals >= n0 + 20
    });
    let (ok, failed) = (c.ok(), c.failed());
    drop(c);
    eprintln!("flash crowd: {ok} requests served, {failed} failed");
    assert!(ok > 0, "the crowd was served ({failed} failed)");
    let v = s.h().view();
    assert!(
        v.blocked_total == 0
            && v.policed.is_empty()
            && !alerts(&s.c)
                .iter()
                .any(|a| a["rampart"]["event"] == "attack_start"),
        "a flash crowd ({ok} requests served, {failed} failed) is no attack{}",
        s.evidence()
    );
    s.assert_client_served_and_never_banned();
}

/// One source carrying many users (a NAT gateway): ~200 new connections/s
/// from one alias for ~10 s, the daemon warm. Not banned (its handshakes
/// complete), no attack.
#[test]
fn nat_gateway_is_not_banned() {
    let nat = Ipv4Addr::new(10, 30, 200, 1);
    let s = Scene::up("ednat", &[nat], 10);
    let c = Crowd::start(
        &s.lab.wan_ns(),
        &[nat],
        std::net::SocketAddrV4::new(VICTIM, 80),
        8,
        25.0,
    );
    let n0 = s.h().view().intervals;
    s.expect("20 intervals of the NAT's users", 30, |s| {
        s.h().view().intervals >= n0 + 20
    });
    let (ok, failed) = (c.ok(), c.failed());
    drop(c);
    eprintln!("NAT gateway: {ok} requests served, {failed} failed");
    assert!(ok > 0, "the NAT's users were served ({failed} failed)");
    let banned = !s.block_alerts_of(IpAddr::V4(nat)).is_empty();
    assert!(
        !banned
            && !alerts(&s.c)
                .iter()
                .any(|a| a["rampart"]["event"] == "attack_start"),
        "a NAT gateway ({ok} requests served, {failed} failed) is not banned, no attack{}",
        s.evidence()
    );
    s.assert_client_served_and_never_banned();
}

/// A scan and a flood at once: nmap -sS from one alias, hping3 -S from
/// three others. Each is called what it is: the scanner `port_scan`, the
/// flooders `syn_flood`; the client is not banned.
#[test]
fn scan_plus_flood_names_each_source_for_what_it_does() {
    let scanner = attacker(9);
    let flooders: Vec<Ipv4Addr> = (1..=3).map(attacker).collect();
    let mut aliases = flooders.clone();
    aliases.push(scanner);
    let mut s = Scene::up("edsnf", &aliases, 6);
    let (src, victim) = (scanner.to_string(), VICTIM.to_string());
    s.tool(
        "nmap",
        &[
            "-sS",
            "-Pn",
            "-n",
            "-T4",
            "--max-retries",
            "1",
            "-p",
            "1-2000",
            "-S",
            &src,
            "-e",
            "wan0",
            &victim,
        ],
    );
    hping_from(&mut s, &flooders, &["-S", "-p", "80", "-i", "u100"]);
    s.expect("the scanner and the three flooders blocked", 30, |s| {
        aliases.iter().all(|a| s.is_blocked(IpAddr::V4(*a)))
    });
    let by = |a: Ipv4Addr, det: &str| {
        s.block_alerts_of(IpAddr::V4(a))
            .iter()
            .any(|x| x["rampart"]["detector"] == det)
    };
    assert!(
        by(scanner, "port_scan"),
        "the scanner is a port_scan{}",
        s.evidence()
    );
    for a in &flooders {
        assert!(by(*a, "syn_flood"), "{a} is a syn_flood{}", s.evidence());
    }
    s.assert_client_served_and_never_banned();
}

/// A SYN flood from eight sources (the lab generator, 50 kpps, not
/// spoofed): the eight are blocked, and that is the whole answer — no SYN
/// cookies, no ACK guard for the victim (they are for spoofed floods and
/// for floods spread over sources too slow to attribute, docs/ddos.md).
#[test]
fn blocked_few_source_flood_gets_no_cookies() {
    let s = Scene::up("edsnc", &[], 6);
    let spec = GenSpec {
        sources: 8,
        proto: Proto::Syn,
        pps: Some(50_000.0),
        limit: Limit::Seconds(8.0),
        ..GenSpec::default()
    };
    let g = Generator::new(&s.lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let key = format!("{VICTIM}/32");
    let mut protected = None;
    std::thread::scope(|sc| {
        let run = sc.spawn(|| g.run(&stop));
        while !run.is_finished() {
            if protected.is_none() {
                protected = s.victim(&key).filter(|v| {
                    v["protection"]["syn_cookies"] == true || v["protection"]["ack_guard"] == true
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(run.join().unwrap().unwrap().sent_packets > 0);
    });
    assert!(
        (0..spec.sources).all(|i| s.is_blocked(spec.source_addr(i))),
        "the eight are blocked{}",
        s.evidence()
    );
    assert!(
        protected.is_none(),
        "protection switched on for a blocked, non-spoofed flood: {protected:?}{}",
        s.evidence()
    );
}

/// What the ACK guard drops shows in the daemon's drop counters by reason
/// (`rampart_ddos_dropped_packets_total`), as every other XDP drop does.
#[test]
fn ack_guard_drops_are_in_the_drop_metrics() {
    let mut s = Scene::up("edagm", &[], 6);
    let victim = VICTIM.to_string();
    s.tool(
        "hping3",
        &[
            "-A",
            "-p",
            "80",
            "-i",
            "u20",
            "--rand-source",
            "-q",
            &victim,
        ],
    );
    let key = format!("{VICTIM}/32");
    s.expect("the ACK guard on", 30, |s| {
        s.victim(&key)
            .is_some_and(|v| v["protection"]["ack_guard"] == true)
    });
    let m = || s.h().metrics.render();
    if !poll(Duration::from_secs(10), || {
        m().lines().any(|l| {
            l.starts_with("rampart_ddos_dropped_packets_total")
                && l.contains("guard")
                && l.split_whitespace()
                    .last()
                    .and_then(|v| v.parse::<f64>().ok())
                    > Some(0.0)
        })
    }) {
        let drops: Vec<String> = m()
            .lines()
            .filter(|l| l.starts_with("rampart_ddos_dropped_packets_total"))
            .map(str::to_string)
            .collect();
        panic!("no ACK-guard drop reason in the metrics: {drops:?}");
    }
}
