//! rampart as a CrowdSec bouncer and source, against the Debian `crowdsec`
//! package's Local API run offline in a private directory
//! ([`rampart_lab::crowdsec::CrowdsecLab`]), decisions added with `cscli`:
//! 100,000 decisions enter the XDP blacklist in one publish and a flood
//! from two of them is dropped; a deletion and an expiry take entries out;
//! detection's and the operator's blocks stay apart from CrowdSec's; a
//! restart keeps them without taking them for its own; an unreachable
//! LAPI, a refused key and a garbage answer are one line, a metric, and
//! filtering goes on. Then a fleet: a daemon that detects a flood pushes
//! its sources to the LAPI, and a second daemon on another lab drops them.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rampart_ddos::filter::Filter;
use rampart_ddos::Prefix;
use rampart_ddosd::{Command, Config, Handle};
use rampart_lab::crowdsec::CrowdsecLab;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::testing::TestLab;

mod common;
use common::{sample, wait_for, Cleanup};

const DEADLINE: Duration = Duration::from_secs(180);

/// The shipped configuration with `[crowdsec]` on (a 2 s pull: the
/// shipped 10 s would only make the test slower).
fn config(lab: &TestLab, c: &Cleanup, section: &str) -> Config {
    let base = common::shipped_config(lab, c);
    let mut t: toml::Table = toml::from_str(&base.render().unwrap()).unwrap();
    let cs: toml::Table =
        toml::from_str(&format!("enabled = true\npull_interval_s = 2.0\n{section}")).unwrap();
    t.insert("crowdsec".into(), toml::Value::Table(cs));
    t.get_mut("server")
        .and_then(|s| s.as_table_mut())
        .unwrap()
        .insert("listen".into(), "".into());
    Config::parse(&toml::to_string(&t).unwrap()).unwrap()
}

fn bouncer(lapi: &CrowdsecLab, name: &str) -> String {
    let key = lapi.add_bouncer(name).unwrap();
    format!("lapi_url = \"{}\"\nbouncer_key = \"{key}\"\n", lapi.url())
}

/// The blacklist's prefixes now (expired entries are not listed).
fn entries(c: &Cleanup) -> HashSet<Prefix> {
    Filter::open(&c.scope)
        .unwrap()
        .entries()
        .unwrap()
        .into_iter()
        .map(|e| e.prefix)
        .collect()
}

fn host(s: &str) -> Prefix {
    Prefix::parse(s).unwrap()
}

fn source(spec: &GenSpec, i: u32) -> Prefix {
    Prefix::host(spec.source_addr(i))
}

/// A flood of `spec` until the flag is set.
fn flood(lab: &TestLab, spec: &GenSpec) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let gen = Generator::new(lab, spec).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let c = cancel.clone();
    let t = std::thread::spawn(move || {
        gen.run(&c).unwrap();
    });
    (cancel, t)
}

/// The daemon's log on stderr (shown for a failing test).
fn log() {
    let _ = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_test_writer()
        .try_init();
}

#[test]
fn lapi_decisions_are_enforced_in_one_publish_and_follow_deletions_expiry_and_restarts() {
    log();
    let lab = TestLab::up("csb", 0);
    let c = Cleanup::new(&lab);
    let lapi = CrowdsecLab::start(&c.dir.join("lapi")).expect("the CrowdSec LAPI up");
    let spec = GenSpec {
        sources: 4,
        pps: Some(2000.0),
        limit: Limit::Seconds(600.0),
        ..GenSpec::default()
    };
    // 100,000 bans: the flood's sources 0 and 1, and 99,998 others.
    let mut values: Vec<String> = (0..2).map(|i| spec.source_addr(i).to_string()).collect();
    let base = u32::from(Ipv4Addr::new(172, 20, 0, 0));
    values.extend((0..99_998u32).map(|k| Ipv4Addr::from(base + k).to_string()));
    lapi.import(&values, "ip", "4h").unwrap();

    let cfg = config(&lab, &c, &bouncer(&lapi, "rampart"));
    let h = Handle::spawn(cfg.clone()).unwrap();
    wait_for("the 100,000 decisions", DEADLINE, || {
        h.view().crowdsec.is_some_and(|v| v.enforced == 100_000)
    });
    let v = h.view().crowdsec.unwrap();
    assert_eq!(
        v.last_apply,
        [100_000, 0, 0],
        "one update entered them all: {v:?}"
    );
    assert!(v.synced && v.error.is_none(), "{v:?}");
    eprintln!(
        "100,000 decisions: one blacklist update of {:.3} s",
        v.last_apply_s
    );
    assert!(
        h.view().blocked.is_empty(),
        "CrowdSec's entries are not the daemon's blocks"
    );
    let have = entries(&c);
    assert_eq!(have.len(), 100_000);
    assert!(have.contains(&source(&spec, 0)) && !have.contains(&source(&spec, 2)));

    // A flood from four sources: XDP drops the two banned ones (their
    // entries count packets) and passes the others.
    let (cancel, gen) = flood(&lab, &spec);
    let counted = |p: Prefix| {
        Filter::open(&c.scope)
            .unwrap()
            .entries()
            .unwrap()
            .into_iter()
            .find(|e| e.prefix == p)
            .map_or(0, |e| e.packets)
    };
    wait_for("drops of the banned sources", DEADLINE, || {
        counted(source(&spec, 0)) > 0 && counted(source(&spec, 1)) > 0
    });
    cancel.store(true, Ordering::Relaxed);
    gen.join().unwrap();

    // A deletion in CrowdSec takes the entry out; the rest keep theirs.
    let before = counted(source(&spec, 1));
    lapi.delete_ip(&spec.source_addr(0).to_string()).unwrap();
    wait_for("the deletion", DEADLINE, || {
        !entries(&c).contains(&source(&spec, 0))
            && h.view().crowdsec.is_some_and(|v| v.enforced == 99_999)
    });
    let v = h.view().crowdsec.unwrap();
    assert_eq!((v.enforced, v.last_apply), (99_999, [0, 1, 0]), "{v:?}");
    assert_eq!(
        counted(source(&spec, 1)),
        before,
        "kept entries keep their counters"
    );

    // A decision's duration is the entry's expiry, in the data path.
    lapi.add(&["-i", "172.16.0.2", "-d", "6s"]).unwrap();
    wait_for("the short decision", DEADLINE, || {
        entries(&c).contains(&host("172.16.0.2"))
    });
    let e = Filter::open(&c.scope)
        .unwrap()
        .entries()
        .unwrap()
        .into_iter()
        .find(|e| e.prefix == host("172.16.0.2"))
        .unwrap();
    assert!(e.expires_in_s.is_some_and(|s| s <= 6.0), "{e:?}");
    wait_for("the expiry", DEADLINE, || {
        !entries(&c).contains(&host("172.16.0.2"))
    });

    // The operator's blocks and CrowdSec's stay apart: blocking what
    // CrowdSec holds makes it the operator's (no expiry), a deletion in
    // CrowdSec then leaves it ...
    let s1 = source(&spec, 1);
    h.command(Command::Block {
        prefix: s1,
        reason: "test".into(),
    })
    .unwrap();
    lapi.delete_ip(&spec.source_addr(1).to_string()).unwrap();
    let pulls = h.view().crowdsec.unwrap().pulls;
    wait_for("two more pulls", DEADLINE, || {
        h.view().crowdsec.unwrap().pulls >= pulls + 2
    });
    assert!(
        entries(&c).contains(&s1),
        "a CrowdSec deletion removed the operator's block"
    );
    h.command(Command::Unblock(s1)).unwrap();
    assert!(!entries(&c).contains(&s1));
    // ... and what the operator lets go while a decision wants it stays, as CrowdSec's.
    let s3 = source(&spec, 3);
    h.command(Command::Block {
        prefix: s3,
        reason: "test".into(),
    })
    .unwrap();
    lapi.add(&["-i", &spec.source_addr(3).to_string(), "-d", "1h"])
        .unwrap();
    wait_for("the shadowed decision", DEADLINE, || {
        h.view().crowdsec.unwrap().shadowed == 1
    });
    h.command(Command::Unblock(s3)).unwrap();
    let e = Filter::open(&c.scope)
        .unwrap()
        .entries()
        .unwrap()
        .into_iter()
        .find(|e| e.prefix == s3)
        .expect("CrowdSec keeps it");
    assert!(e.expires_in_s.is_some_and(|s| s > 3000.0), "{e:?}");
    // The operator cannot unblock a decision: CrowdSec owns it.
    let e = h.command(Command::Unblock(host("172.20.0.1"))).unwrap_err();
    assert!(e.to_string().contains("CrowdSec decision"), "{e}");

    // A restart: the entries stay (counters too), are not taken for the
    // daemon's own blocks, and the startup pull changes nothing.
    h.stop().unwrap();
    let n = entries(&c).len();
    let h = Handle::spawn(cfg).unwrap();
    assert!(h.view().blocked.is_empty(), "{:?}", &h.view().blocked[..3]);
    wait_for("the startup pull", DEADLINE, || {
        h.view().crowdsec.is_some_and(|v| v.synced && v.pulls >= 1)
    });
    let v = h.view().crowdsec.unwrap();
    assert_eq!(v.enforced, n, "{v:?}");
    assert_eq!(v.last_apply[0], 0, "nothing entered twice: {v:?}");

    // The LAPI goes away: one error of kind unreachable, filtering goes on.
    drop(lapi);
    wait_for("the unreachable LAPI", DEADLINE, || {
        h.view()
            .crowdsec
            .is_some_and(|v| v.errors.get("unreachable").copied().unwrap_or(0) > 0)
    });
    let v = h.view().crowdsec.unwrap();
    let msg = v.error.clone().unwrap();
    assert!(msg.contains("unreachable") && !msg.contains('\n'), "{msg}");
    assert_eq!(entries(&c).len(), n);
    let m = h.metrics.render();
    assert!(
        m.contains("rampart_ddos_crowdsec_errors_total{kind=\"unreachable\"}"),
        "{m}"
    );
    let i = h.view().intervals;
    wait_for("intervals going on", DEADLINE, || {
        h.view().intervals > i + 2
    });
    h.stop().unwrap();
}

/// Serve `body` as a 200 to every request on a free port until dropped.
fn garbage_server(body: &'static str) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn a_refused_key_and_a_garbage_answer_are_one_line_and_a_metric() {
    log();
    let lab = TestLab::up("csf", 0);
    let c = Cleanup::new(&lab);
    let lapi = CrowdsecLab::start(&c.dir.join("lapi")).expect("the CrowdSec LAPI up");
    lapi.add(&["-i", "192.0.2.9"]).unwrap();
    let bad = format!(
        "lapi_url = \"{}\"\nbouncer_key = \"not-a-key\"\n",
        lapi.url()
    );
    let h = Handle::spawn(config(&lab, &c, &bad)).unwrap();
    wait_for("the refused key", DEADLINE, || {
        h.view()
            .crowdsec
            .is_some_and(|v| v.errors.get("credentials").copied().unwrap_or(0) > 0)
    });
    let v = h.view().crowdsec.unwrap();
    let msg = v.error.unwrap();
    assert!(msg.contains("bouncer key") && !msg.contains('\n'), "{msg}");
    assert_eq!(v.enforced, 0);
    let i = h.view().intervals;
    wait_for("intervals going on", DEADLINE, || {
        h.view().intervals > i + 2
    });
    h.stop().unwrap();

    let port = garbage_server("<html><body>502 Bad Gateway</body></html>");
    let g = format!("lapi_url = \"http://127.0.0.1:{port}\"\nbouncer_key = \"k\"\n");
    let h = Handle::spawn(config(&lab, &c, &g)).unwrap();
    wait_for("the garbage answer", DEADLINE, || {
        h.view()
            .crowdsec
            .is_some_and(|v| v.errors.get("garbage").copied().unwrap_or(0) > 0)
    });
    let msg = h.view().crowdsec.unwrap().error.unwrap();
    assert!(
        msg.contains("not a decision stream") && !msg.contains('\n'),
        "{msg}"
    );
    let m = h.metrics.render();
    // One error a pull (every 2 s): how many depends on when this reads.
    let garbage = sample(&m, "rampart_ddos_crowdsec_errors_total{kind=\"garbage\"}");
    assert!(garbage >= Some(1.0), "{m}");
    h.stop().unwrap();
}

#[test]
fn a_source_one_host_detects_is_dropped_by_the_other_after_its_next_pull() {
    log();
    let (lab_a, lab_b) = (TestLab::up("csa", 0), TestLab::up("csz", 0));
    let (ca, cb) = (Cleanup::new(&lab_a), Cleanup::new(&lab_b));
    let lapi = CrowdsecLab::start(&ca.dir.join("lapi")).expect("the CrowdSec LAPI up");
    lapi.add_machine("rampart-a", "a-password-of-the-test")
        .unwrap();
    let push = format!(
        "{}push = true\nmachine_id = \"rampart-a\"\npassword = \"a-password-of-the-test\"\n",
        bouncer(&lapi, "rampart-a")
    );
    let ha = Handle::spawn(config(&lab_a, &ca, &push)).unwrap();
    let hb = Handle::spawn(config(&lab_b, &cb, &bouncer(&lapi, "rampart-b"))).unwrap();

    // NTP reflection from 30 reflectors at host A, above the shipped
    // floor: A's detection blocks them and pushes each as an alert.
    let spec = GenSpec {
        sources: 30,
        sport: 123,
        dport: Some(33_333),
        size: 1200,
        pps: Some(6000.0),
        limit: Limit::Seconds(600.0),
        ..GenSpec::default()
    };
    let (cancel, gen) = flood(&lab_a, &spec);
    wait_for("A's detection blocks", DEADLINE, || {
        !ha.view().blocked.is_empty()
    });
    wait_for("A's pushes", DEADLINE, || {
        ha.view().crowdsec.is_some_and(|v| v.pushed > 0)
    });
    let pushed: Vec<Prefix> = ha
        .view()
        .blocked
        .iter()
        .map(|b| Prefix::parse(&b.prefix).unwrap())
        .collect();
    cancel.store(true, Ordering::Relaxed);
    gen.join().unwrap();
    let listed = lapi.decisions_json(&["--origin", "rampart"]).unwrap();
    assert!(listed.contains("rampart/"), "{listed}");

    // B pulls them and its XDP drops the same sources.
    // The entries are in the map before the pull's counts are in B's
    // view (published at the end of its tick): wait for both.
    wait_for("B's entries", DEADLINE, || {
        let have = entries(&cb);
        pushed.iter().all(|p| have.contains(p))
            && hb
                .view()
                .crowdsec
                .is_some_and(|v| v.enforced >= pushed.len())
    });
    assert!(hb.view().blocked.is_empty(), "B's entries are CrowdSec's");
    let v = hb.view().crowdsec.unwrap();
    assert!(v.enforced >= pushed.len(), "{v:?}");
    // The same reflectors hit host B: its XDP drops them (their entries
    // count packets) before its own detection has anything to do.
    let (cancel, gen) = flood(&lab_b, &spec);
    wait_for("B dropping the pushed sources", DEADLINE, || {
        let e = Filter::open(&cb.scope).unwrap().entries().unwrap();
        pushed
            .iter()
            .all(|p| e.iter().any(|x| x.prefix == *p && x.packets > 0))
    });
    cancel.store(true, Ordering::Relaxed);
    gen.join().unwrap();
    // A pulls its own pushes back: held by its detection, never pushed again.
    let va = ha.view().crowdsec.unwrap();
    assert!(va.pushed <= ha.view().blocked_total, "{va:?}");
    ha.stop().unwrap();
    hb.stop().unwrap();
}
