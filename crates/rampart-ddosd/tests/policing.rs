//! The daemon's policing against a real filter: detection's decisions
//! carried out on the XDP policer (and refused for sources the operator
//! blocked or whitelisted), the policer's drops measured per interval, and
//! the pinned policer reconciled with what the daemon wants at start —
//! directly ([`Policing`]) and through a restarted daemon.

use std::sync::atomic::{AtomicU32, Ordering};

use rampart_ddos::filter::{Filter, FilterConfig, Scope, POLICE_ALL};
use rampart_ddos::Prefix;
use rampart_ddos_control::detection::{LearnedPolice, Police, PoliceScope};
use rampart_ddosd::police::Policing;
use rampart_ddosd::{Command, Config, Handle};
use rampart_lab::testing::TestLab;
use rampart_lab::topology::HOST_IF;
use rampart_testkit::frame::Frame;
use rampart_testkit::prog::{run_n, XDP_DROP, XDP_PASS};

fn p(s: &str) -> Prefix {
    Prefix::parse(s).unwrap()
}

/// A filter on `lo` of a throwaway namespace; both removed on drop.
struct Bare {
    ns: String,
    filter: Filter,
}

impl Bare {
    fn new() -> Self {
        rampart_lab::testing::require_kernel();
        static N: AtomicU32 = AtomicU32::new(0);
        let ns = format!(
            "dpol{:x}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        rampart_dataplane::cmd::run("ip", &["netns", "add", &ns]).unwrap();
        let cfg = FilterConfig {
            max_entries: 1024,
            max_other: 64,
            sample_shift: 0,
            features_capacity: 1024,
            ..FilterConfig::default()
        };
        let filter = match Filter::create(&Scope::new(Some(&ns), "lo").unwrap(), &cfg) {
            Ok(f) => f,
            Err(e) => {
                let _ = rampart_dataplane::cmd::run("ip", &["netns", "del", &ns]);
                panic!("creating the filter: {e}");
            }
        };
        Self { ns, filter }
    }

    fn rates(&self) -> Vec<(Prefix, u32)> {
        self.filter
            .policed()
            .unwrap()
            .into_iter()
            .map(|(q, e)| (q, e.rate_pps))
            .collect()
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = Filter::detach(self.filter.name());
        let _ = rampart_dataplane::cmd::run("ip", &["netns", "del", &self.ns]);
    }
}

fn decision(src: &str, rate: f64) -> Police {
    Police {
        prefix: p(src),
        victim: p("198.51.100.1"),
        vector: "udp_flood".into(),
        scope: PoliceScope::All,
        rate_pps: rate,
        reason: "test".into(),
    }
}

#[test]
fn decisions_reach_the_policer_and_its_drops_are_measured() {
    let b = Bare::new();
    let f = &b.filter;
    let mut pol = Policing::default();
    // 192.0.2.66 stands for a source the operator blocked.
    let never = |q: &Prefix| *q == p("192.0.2.66");
    let changed = pol.apply(
        f,
        &[
            decision("192.0.2.1", 63.2),
            decision("2001:db8::1", 1000.0),
            decision("192.0.2.66", 1000.0),
        ],
        &[],
        never,
    );
    assert!(changed);
    // Rates round up to whole packets/s; the refused source is not policed.
    assert_eq!(rates(&b), [(p("192.0.2.1"), 64), (p("2001:db8::1"), 1000)]);

    // The policer's drops, as detection reads them: a fresh bucket at
    // 64 pps holds 64 packets, so of 100 sent in a burst 36 are dropped,
    // less what the elapsed time refilled.
    let prog = f.prog_fd().unwrap();
    use std::os::fd::AsRawFd;
    let frame = Frame::udp("192.0.2.1", "198.51.100.1", 40000, 53).build();
    let t0 = std::time::Instant::now();
    let mut drops = 0u64;
    for _ in 0..100 {
        if run_n(prog.as_raw_fd(), &frame, 1) == XDP_DROP {
            drops += 1;
        }
    }
    let refill = (t0.elapsed().as_secs_f64() * 64.0).ceil() as u64;
    assert!(drops + refill >= 36, "dropped {drops}");
    let r = pol.measure(f, 2.0);
    let got: Vec<(Prefix, f64)> = r.iter().map(|s| (s.prefix, s.pps)).collect();
    assert_eq!(
        got,
        [
            (p("192.0.2.1"), drops as f64 / 2.0),
            (p("2001:db8::1"), 0.0)
        ],
        "dropped packets over the interval's seconds"
    );
    // The next interval counts from there.
    assert!(pol.measure(f, 1.0).iter().all(|s| s.pps == 0.0));
    let v = pol.view();
    assert_eq!(v.len(), 2);
    assert_eq!((v[0].dropped, v[0].passed), (drops, 100 - drops));
    assert_eq!(v[0].burst, 64);

    // Unpolice, and the operator's block releases what it covers.
    assert!(pol.apply(f, &[], &[p("2001:db8::1")], never));
    assert_eq!(run_n(prog.as_raw_fd(), &frame, 1), XDP_DROP);
    assert_eq!(pol.release_within(f, &p("192.0.2.0/24")), 1);
    assert!(rates(&b).is_empty());
    assert_eq!(run_n(prog.as_raw_fd(), &frame, 1), XDP_PASS);
    assert!(pol.view().is_empty());
}

fn rates(b: &Bare) -> Vec<(Prefix, u32)> {
    b.rates()
}

#[test]
fn restore_makes_the_pins_what_the_daemon_wants() {
    let b = Bare::new();
    let f = &b.filter;
    // Pinned: one source nobody wants any more, one at an old rate, one
    // the operator has blocked since.
    f.police(p("192.0.2.1"), 500, POLICE_ALL).unwrap();
    f.police(p("192.0.2.2"), 500, POLICE_ALL).unwrap();
    f.police(p("192.0.2.66"), 500, POLICE_ALL).unwrap();
    let learned = |s: &str, r: f64| LearnedPolice {
        prefix: p(s),
        victim: p("198.51.100.1"),
        rate_pps: r,
        scope: PoliceScope::All,
    };
    let mut pol = Policing::default();
    pol.restore(
        f,
        &[
            learned("192.0.2.2", 2000.0),
            learned("192.0.2.3", 1000.0),
            learned("192.0.2.66", 1000.0),
        ],
        |q| *q == p("192.0.2.66"),
    );
    assert_eq!(
        rates(&b),
        [(p("192.0.2.2"), 2000), (p("192.0.2.3"), 1000)],
        "unwanted and operator-blocked sources removed, the others (re-)policed"
    );
    let v: Vec<(String, f64)> = pol
        .view()
        .into_iter()
        .map(|x| (x.prefix, x.rate_pps))
        .collect();
    assert_eq!(
        v,
        [
            ("192.0.2.2/32".to_string(), 2000.0),
            ("192.0.2.3/32".to_string(), 1000.0)
        ]
    );
    assert_eq!(f.stats().unwrap().policed, 2);
}

/// A daemon that starts on pins holding policed sources it does not know
/// (its state file does not list them) removes them before it runs; the
/// policer's drops are counted in its metrics.
#[test]
fn a_restarted_daemon_removes_policed_sources_it_does_not_want() {
    let lab = TestLab::up("dtpol", 0);
    let dir = std::env::temp_dir().join(format!("rampart-ddosd-test-{}", lab.prefix()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scope = Scope::new(Some(&lab.host_ns()), HOST_IF).unwrap().name();
    struct Clean(String, std::path::PathBuf);
    impl Drop for Clean {
        fn drop(&mut self) {
            let _ = Filter::detach(&self.0);
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
    let _clean = Clean(scope.clone(), dir.clone());
    let cfg = Config::parse(&format!(
        "[server]\nlisten = \"\"\n[daemon]\nmode = \"xdp-host\"\niface = \"{HOST_IF}\"\nnetns = \"{}\"\n\
         interval_s = 0.1\nstate_dir = \"{}\"\n[alerts]\nfile = \"{}\"\n[filter]\nmax_entries = 4096\n\
         max_prefixes = 256\nfeatures_capacity = 8192\nsample_shift = 0\n",
        lab.host_ns(),
        dir.display(),
        dir.join("alerts.jsonl").display(),
    ))
    .unwrap();
    let h = Handle::spawn(cfg.clone()).unwrap();
    h.command(Command::Block {
        prefix: p("192.0.2.66"),
        reason: "test".into(),
    })
    .unwrap();
    h.stop().unwrap();
    // Policed behind the daemon's back while it was down.
    let f = Filter::open(&scope).unwrap();
    f.police(p("192.0.2.1"), 1000, POLICE_ALL).unwrap();
    f.police(p("192.0.2.66"), 1000, POLICE_ALL).unwrap();
    assert_eq!(f.stats().unwrap().policed, 2);
    let h = Handle::spawn(cfg).unwrap();
    assert!(f.policed().unwrap().is_empty(), "{:?}", f.policed());
    assert_eq!(f.stats().unwrap().policed, 0);
    assert!(h.view().policed.is_empty());

    // The policer's drops reach the metrics under the reason `policed`:
    // a fresh bucket at 1 pps passes 64 packets, so 100 in a burst drop
    // 36, less one per second they take.
    f.police(p("192.0.2.1"), 1, POLICE_ALL).unwrap();
    let prog = f.prog_fd().unwrap();
    let frame = Frame::udp("192.0.2.1", "198.51.100.1", 40000, 53).build();
    use std::os::fd::AsRawFd;
    let t0 = std::time::Instant::now();
    let dropped = (0..100)
        .filter(|_| run_n(prog.as_raw_fd(), &frame, 1) == XDP_DROP)
        .count();
    let refill = t0.elapsed().as_secs_f64().ceil() as usize;
    assert!(dropped + refill >= 36, "{dropped}");
    let want =
        format!("rampart_ddos_dropped_packets_total{{reason=\"policed\",tier=\"xdp\"}} {dropped}");
    let t0 = std::time::Instant::now();
    while !h.metrics.render().contains(&want) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "no {want} in\n{}",
            h.metrics.render()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    h.stop().unwrap();
    f.unpolice(p("192.0.2.1")).unwrap();
}
