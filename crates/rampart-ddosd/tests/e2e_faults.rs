//! Faults under a flood: the daemon (the shipped configuration, adapted to
//! the lab) holds operator blocks of the lab generator's sources while the
//! generator floods from them, and something breaks behind its back — the
//! interface goes down and up, is deleted and created again, its bpffs pins
//! are removed, its state directory fills up or turns read-only. Each test
//! checks that the daemon survives with every block applied (no blocked
//! packet reaches the host's stack: an iptables counter in the host's raw
//! PREROUTING) and says what happened in one log line, not one per
//! interval. Every test has its own lab; the shared setup is [`Fault`].
//!
//! The clock jumping is not tested here: the daemon's intervals, holds and
//! unbans run on the monotonic clock (wall time only stamps alerts and
//! block records), a time namespace can offset only the monotonic and
//! boot clocks and only before its first process starts (no jump under a
//! running daemon), and stepping the wall clock is machine-wide.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use rampart_ddos::filter::{Filter, Scope};
use rampart_ddos::protect::{Protect, ProtectFlags, TcCheck};
use rampart_ddos::Prefix;
use rampart_ddosd::{Command, Config, Handle};
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_lab::topology::{HOST_IF, NIC_HOST_IF};

mod common;
use common::{shipped_config, wait_for, Cleanup};

static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The daemon's log lines (every test's) are kept in memory.
fn capture_log() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        tracing_subscriber::fmt()
            .with_writer(|| LogWriter)
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .init();
    });
}

/// Log lines containing `marker` (a test's unique prefix or path).
fn log_lines(marker: &str) -> Vec<String> {
    String::from_utf8_lossy(&LOG.lock().unwrap())
        .lines()
        .filter(|l| l.contains(marker))
        .map(str::to_string)
        .collect()
}

/// Lines at WARN or ERROR among them.
fn problems(marker: &str) -> Vec<String> {
    log_lines(marker)
        .into_iter()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

/// Packets from the attack range counted in the host's raw PREROUTING.
fn leaked(lab: &TestLab) -> u64 {
    let out = rampart_dataplane::cmd::in_ns(
        &lab.host_ns(),
        "iptables",
        &["-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n"],
    )
    .unwrap();
    out.lines()
        .find(|l| l.contains("172.16.0.0/12"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Sources of the flood; each blocked by the operator.
const SOURCES: u32 = 16;

/// One fault test's lab, daemon and flood (dropped in field order: the
/// daemon, then its files and pins, then the lab).
struct Fault {
    daemon: Option<Handle>,
    cfg: Config,
    c: Cleanup,
    lab: TestLab,
}

impl Fault {
    /// A lab, the daemon on the shipped configuration (`state_dir` set by
    /// `state` when given) and every flood source blocked by the operator.
    fn up(tag: &str, state: impl FnOnce(&Cleanup) -> Option<std::path::PathBuf>) -> Self {
        capture_log();
        let lab = TestLab::up(tag, 0);
        let c = Cleanup::new(&lab);
        let mut cfg = shipped_config(&lab, &c);
        if let Some(dir) = state(&c) {
            cfg.daemon.state_dir = dir;
        }
        rampart_dataplane::cmd::in_ns(
            &lab.host_ns(),
            "iptables",
            &["-t", "raw", "-A", "PREROUTING", "-s", "172.16.0.0/12"],
        )
        .unwrap();
        let h = Handle::spawn(cfg.clone()).unwrap();
        let spec = flood(1.0);
        for i in 0..SOURCES {
            h.command(Command::Block {
                prefix: Prefix::host(spec.source_addr(i)),
                reason: "fault test".into(),
            })
            .unwrap();
        }
        Self {
            daemon: Some(h),
            cfg,
            c,
            lab,
        }
    }

    fn daemon(&self) -> &Handle {
        self.daemon.as_ref().unwrap()
    }

    /// Wait for `n` more intervals of the daemon's loop.
    fn intervals(&self, n: u64) {
        let start = self.daemon().view().intervals;
        wait_for("the daemon's intervals", Duration::from_secs(30), || {
            self.daemon().view().intervals >= start + n
        });
    }

    /// Id of the XDP program on host0 (None: nothing attached).
    fn attached(&self) -> Option<u32> {
        rampart_dataplane::xdp::attached_prog_id(Some(&self.lab.host_ns()), HOST_IF).unwrap()
    }

    fn ip(&self, args: &[&str]) {
        rampart_dataplane::cmd::ip(args).unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
    }
}

impl Drop for Fault {
    fn drop(&mut self) {
        if let Some(h) = self.daemon.take() {
            let _ = h.stop();
        }
    }
}

/// The flood: the blocked sources at a modest rate for `secs`.
fn flood(secs: f64) -> GenSpec {
    GenSpec {
        sources: SOURCES,
        proto: Proto::Udp,
        pps: Some(20_000.0),
        limit: Limit::Seconds(secs),
        ..GenSpec::default()
    }
}

/// Run the flood on a thread while `f` breaks things; the frames sent.
fn under_flood(fx: &Fault, secs: f64, f: impl FnOnce()) -> u64 {
    let g = Generator::new(&fx.lab, &flood(secs)).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let run = s.spawn(|| g.run(&stop).unwrap());
        f();
        let r = run.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        r.sent_packets
    })
}

#[test]
fn interface_down_and_up_keeps_every_block() {
    let fx = Fault::up("dfdown", |_| None);
    let prog = fx.attached().expect("the filter is attached");
    let host = fx.lab.host_ns();
    let f = Filter::open(&fx.c.scope).unwrap();
    let drops = || f.stats().unwrap().dropped("blacklist");
    let sent = under_flood(&fx, 8.0, || {
        wait_for("blocked frames dropped", Duration::from_secs(10), || {
            drops() > 1000
        });
        fx.ip(&["-n", &host, "link", "set", HOST_IF, "down"]);
        fx.intervals(2);
        fx.ip(&["-n", &host, "link", "set", HOST_IF, "up"]);
        let d0 = drops();
        wait_for(
            "blocked frames dropped after the interface came up",
            Duration::from_secs(10),
            || drops() > d0 + 1000,
        );
    });
    fx.intervals(2);
    assert!(sent > 10_000, "the flood ran ({sent} frames)");
    assert_eq!(fx.attached(), Some(prog), "the same filter stays attached");
    assert_eq!(leaked(&fx.lab), 0, "no blocked frame reached the stack");
    assert_eq!(fx.daemon().view().blocked.len(), SOURCES as usize);
    assert!(
        problems(fx.lab.prefix()).is_empty(),
        "a link going down and up is not a problem: {:?}",
        problems(fx.lab.prefix())
    );
}

#[test]
fn interface_deleted_and_created_again_gets_the_filter_back() {
    let fx = Fault::up("dfdel", |_| None);
    let prog = fx.attached().expect("the filter is attached");
    let (host, nic) = (fx.lab.host_ns(), fx.lab.nic_ns());
    // SYN cookies on for the host: their TC stage is attached too.
    let mut protect = Protect::open(&Scope::new(Some(&host), HOST_IF).unwrap()).unwrap();
    let victim: std::net::IpAddr = "10.10.0.2".parse().unwrap();
    protect
        .set(
            victim,
            ProtectFlags {
                syn_cookies: true,
                ack_guard: false,
            },
        )
        .unwrap();
    assert!(protect.tc_attached(), "the TC stage is attached");
    under_flood(&fx, 4.0, || {
        std::thread::sleep(Duration::from_millis(500));
        // Deleting host0 deletes its veth peer nic-host too.
        fx.ip(&["-n", &host, "link", "del", HOST_IF]);
        fx.intervals(3);
    });
    let gone = log_lines(fx.lab.prefix());
    assert_eq!(
        gone.iter().filter(|l| l.contains("is gone")).count(),
        1,
        "one line says the interface is gone: {gone:?}"
    );
    fx.ip(&[
        "-n",
        &host,
        "link",
        "add",
        HOST_IF,
        "type",
        "veth",
        "peer",
        "name",
        NIC_HOST_IF,
        "netns",
        &nic,
    ]);
    fx.ip(&["-n", &host, "addr", "add", "10.10.0.2/24", "dev", HOST_IF]);
    fx.ip(&["-n", &host, "link", "set", HOST_IF, "up"]);
    fx.ip(&["-n", &nic, "link", "set", NIC_HOST_IF, "up"]);
    wait_for(
        "the filter attached to the new host0",
        Duration::from_secs(10),
        || fx.attached() == Some(prog),
    );
    wait_for(
        "the TC stage attached to the new host0",
        Duration::from_secs(10),
        || {
            problems(fx.lab.prefix())
                .iter()
                .any(|l| l.contains("the SYN-cookie TC stage was not attached"))
        },
    );
    // Its pinned link is on the new host0 (a stale one would be attached
    // again by this check: Reattached).
    assert_eq!(protect.check_tc().unwrap(), TcCheck::Attached);
    fx.intervals(2);
    let lines = problems(fx.lab.prefix());
    for stage in ["the XDP filter", "the SYN-cookie TC stage"] {
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains(&format!("{stage} was not attached")))
                .count(),
            1,
            "one line says {stage} was attached again: {lines:?}"
        );
    }

    // Frames from a blocked source and from another one, sent into the new
    // host0 from its peer (the EMULATED NIC's redirect still points at the
    // deleted peer): the first are dropped, the second reach the stack.
    // /sys shows the reader's namespace: read host0's address from its own.
    let mac = rampart_dataplane::cmd::in_ns(
        &host,
        "cat",
        &[&format!("/sys/class/net/{HOST_IF}/address")],
    )
    .unwrap()
    .trim()
    .to_string();
    let blocked = flood(1.0).source_addr(0).to_string();
    for (src, route) in [
        (blocked.as_str(), "10.10.0.2/32"),
        ("10.99.0.1", "10.10.0.3/32"),
    ] {
        fx.ip(&[
            "-n",
            &nic,
            "addr",
            "add",
            &format!("{src}/32"),
            "dev",
            NIC_HOST_IF,
        ]);
        fx.ip(&[
            "-n",
            &nic,
            "route",
            "add",
            route,
            "dev",
            NIC_HOST_IF,
            "src",
            src,
        ]);
    }
    fx.ip(&["-n", &host, "addr", "add", "10.10.0.3/24", "dev", HOST_IF]);
    for dst in ["10.10.0.2", "10.10.0.3"] {
        fx.ip(&[
            "-n",
            &nic,
            "neigh",
            "replace",
            dst,
            "lladdr",
            &mac,
            "dev",
            NIC_HOST_IF,
        ]);
    }
    rampart_dataplane::cmd::in_ns(
        &host,
        "iptables",
        &["-t", "raw", "-A", "PREROUTING", "-s", "10.99.0.1/32"],
    )
    .unwrap();
    for dst in ["10.10.0.2", "10.10.0.3"] {
        // Replies are not expected (the host has no route back): exit codes ignored.
        let _ =
            rampart_dataplane::cmd::in_ns(&nic, "ping", &["-c", "5", "-i", "0.1", "-W", "1", dst]);
    }
    let out = rampart_dataplane::cmd::in_ns(
        &host,
        "iptables",
        &["-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n"],
    )
    .unwrap();
    let other: u64 = out
        .lines()
        .find(|l| l.contains("10.99.0.1"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(
        other >= 5,
        "frames of an unblocked source reach the stack: {out}"
    );
    assert_eq!(
        leaked(&fx.lab),
        0,
        "no blocked frame reached the stack: {out}"
    );
    assert_eq!(fx.daemon().view().blocked.len(), SOURCES as usize);
    protect.clear(victim).unwrap();
}

#[test]
fn pins_removed_keep_the_filter_and_a_restart_brings_the_blocks_back() {
    let mut fx = Fault::up("dfpin", |_| None);
    let prog = fx.attached().expect("the filter is attached");
    let dir = rampart_ddos::filter::pin_dir(&fx.c.scope);
    under_flood(&fx, 5.0, || {
        std::thread::sleep(Duration::from_millis(500));
        std::fs::remove_dir_all(&dir).unwrap();
        fx.intervals(4);
    });
    assert_eq!(fx.attached(), Some(prog), "the filter stays attached");
    assert_eq!(leaked(&fx.lab), 0, "no blocked frame reached the stack");
    let lines = problems(fx.lab.prefix());
    assert_eq!(lines.len(), 1, "one line, not one per interval: {lines:?}");
    assert!(lines[0].contains("pins under"), "{}", lines[0]);

    // A restart attaches a new filter; the operator's blocks come back
    // from the state file. (Between the stop and the new attach nothing
    // filters: the old link went with its last holder.)
    fx.daemon.take().unwrap().stop().unwrap();
    fx.daemon = Some(Handle::spawn(fx.cfg.clone()).unwrap());
    let v = fx.daemon().view();
    assert_eq!(v.blocked.len(), SOURCES as usize, "{:?}", v.blocked);
    assert!(v.blocked.iter().all(|b| b.operator));
    assert!(Scope::new(Some(&fx.lab.host_ns()), HOST_IF).is_ok());
    let before = leaked(&fx.lab);
    under_flood(&fx, 2.0, || {});
    assert_eq!(
        leaked(&fx.lab),
        before,
        "the restored blocks drop the flood"
    );
}

#[test]
fn a_full_or_read_only_state_directory_is_one_line_and_blocking_goes_on() {
    let fx = Fault::up("dfst", |c| {
        let d = c.dir.join("state");
        std::fs::create_dir_all(&d).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&d)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs on {}", d.display());
        Some(d)
    });
    let state = fx.cfg.daemon.state_dir.clone();
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _unmount = Unmount(state.clone());
    let marker = state.display().to_string();
    let block = |a: &str| {
        fx.daemon()
            .command(Command::Block {
                prefix: Prefix::parse(a).unwrap(),
                reason: "fault test".into(),
            })
            .unwrap()
    };
    // Full: one file takes every byte left.
    let filler = state.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    while f.write_all(&[0u8; 4096]).is_ok() {}
    drop(f);
    let sent = under_flood(&fx, 3.0, || {
        block("192.0.2.1/32");
        block("192.0.2.2/32");
        fx.intervals(2);
    });
    assert!(sent > 1000);
    assert_eq!(leaked(&fx.lab), 0, "blocking goes on");
    let lines = problems(&marker);
    assert_eq!(lines.len(), 1, "one line while saving fails: {lines:?}");
    assert!(lines[0].contains("cannot save"), "{}", lines[0]);
    assert!(
        fx.daemon()
            .view()
            .blocked
            .iter()
            .any(|b| b.prefix == "192.0.2.2/32"),
        "blocks still work"
    );
    // Space again: saved, and the file has the blocks made meanwhile.
    std::fs::remove_file(&filler).unwrap();
    block("192.0.2.3/32");
    let saved = std::fs::read_to_string(state.join(format!("{}.json", fx.c.scope))).unwrap();
    assert!(saved.contains("192.0.2.2/32") && saved.contains("192.0.2.3/32"));
    assert!(log_lines(&marker)
        .iter()
        .any(|l| l.contains("saved to") && l.contains("again")));

    // Read-only: the same, one line.
    let ok = std::process::Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&state)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    block("192.0.2.4/32");
    block("192.0.2.5/32");
    fx.intervals(2);
    let lines = problems(&marker);
    assert_eq!(
        lines.len(),
        2,
        "one more line for the read-only directory: {lines:?}"
    );
    assert!(
        lines[1].contains("Read-only"),
        "the OS error says why: {}",
        lines[1]
    );
    assert_eq!(leaked(&fx.lab), 0);
}
