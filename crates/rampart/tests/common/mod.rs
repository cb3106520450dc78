//! What the CLI tests share: running the `rampart` binary and judging its
//! one-line errors.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The binary under test, not yet run.
pub fn cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rampart"))
}

/// Run `rampart ARGS` and wait for it.
pub fn rampart(args: &[&str]) -> Output {
    cmd().args(args).output().expect("run rampart")
}

/// A failure with exactly one non-empty stderr line, starting with
/// "error:" and containing `needle`. Returns that line.
pub fn one_error_line(o: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one error line, got: {err:?}");
    assert!(lines[0].starts_with("error:"), "{err:?}");
    assert!(
        lines[0].contains(needle),
        "{err:?} should mention {needle:?}"
    );
    assert_ne!(o.status.code(), Some(0), "{err:?}: exit code 0");
    lines[0].to_string()
}

/// A network namespace of the test's own with one veth pair, both ends up
/// (`<name>a` carries 10.77.0.1/24); deleted on drop (with its links).
pub struct Netns {
    /// The namespace's name (also the stem of its links' names).
    pub name: String,
}

impl Netns {
    /// Create it; `tag` makes the name unique (rampart_lab::testing::unique_prefix).
    pub fn new(tag: &str) -> Self {
        let name = rampart_lab::testing::unique_prefix(tag);
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("run ip");
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ip(&["netns", "add", &name]);
        let me = Self { name };
        let (a, b) = (me.iface(), format!("{}b", me.name));
        ip(&[
            "-n", &me.name, "link", "add", &a, "type", "veth", "peer", "name", &b,
        ]);
        ip(&["-n", &me.name, "link", "set", &a, "up"]);
        ip(&["-n", &me.name, "link", "set", &b, "up"]);
        ip(&["-n", &me.name, "addr", "add", "10.77.0.1/24", "dev", &a]);
        me
    }

    /// The interface a daemon attaches to.
    pub fn iface(&self) -> String {
        format!("{}a", self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A daemon started from the binary, its stderr in a file; SIGTERM and
/// wait on drop.
pub struct Daemon {
    /// The process.
    pub child: std::process::Child,
    /// Where its stderr goes.
    pub stderr: std::path::PathBuf,
}

impl Daemon {
    /// `rampart ARGS` with stdout to null, stderr to `stderr`, `env` set.
    pub fn spawn(args: &[&str], env: &[(&str, &str)], stderr: &std::path::Path) -> Self {
        let f = std::fs::File::create(stderr).unwrap();
        let mut c = cmd();
        c.args(args)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(f);
        Self {
            child: c.spawn().expect("start rampart"),
            stderr: stderr.to_path_buf(),
        }
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Wait until its stderr contains `needle` (it exiting first fails the
    /// test with its log). The deadline is generous: this is not a timing
    /// assertion, only a guard against a hung test.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let t0 = std::time::Instant::now();
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("rampart exited ({st}) before saying {needle:?}: {log}");
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(120),
                "no {needle:?} after 120 s: {log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Send `sig` (libc::SIGHUP, …).
    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Is it still running?
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, wait, and return its whole stderr.
    pub fn stop(mut self) -> String {
        self.signal(libc::SIGTERM);
        let _ = self.child.wait();
        self.log()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal(libc::SIGTERM);
            let _ = self.child.wait();
        }
    }
}
