//! Helpers the daemon's netns end-to-end tests share: the per-test files
//! and pins (`Cleanup`), polling with a deadline, the alert log, plain
//! HTTP to the API, the shipped configuration adapted to a lab, real tools
//! in a namespace and a legitimate curl client.
//!
//! Each test binary uses a part of them.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rampart_ddos::filter::{Filter, Scope};
use rampart_ddosd::config::NicHop;
use rampart_ddosd::Config;
use rampart_lab::testing::TestLab;
use rampart_lab::topology::HOST_IF;

/// The configuration a user starts from: the file shipped in `dist/`.
pub const SHIPPED_CONFIG: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../dist/rampart-ddos.toml"
));

/// The lab's NIC hop, where its EMULATED NIC meets the wire.
pub fn nic_hop(lab: &TestLab) -> NicHop {
    let (netns, iface) = rampart_lab::nic::hop(lab);
    NicHop {
        netns: Some(netns),
        iface: iface.to_string(),
    }
}

/// Removes the daemon's filter pins and files when the test ends.
pub struct Cleanup {
    pub scope: String,
    pub dir: PathBuf,
    pub hop: NicHop,
    pub nic_scope: String,
}

impl Cleanup {
    pub fn new(lab: &TestLab) -> Self {
        let dir = std::env::temp_dir().join(format!("rampart-ddosd-test-{}", lab.prefix()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            scope: Scope::new(Some(&lab.host_ns()), HOST_IF).unwrap().name(),
            dir,
            hop: nic_hop(lab),
            nic_scope: Scope::new(Some(&lab.nic_ns()), rampart_lab::topology::NIC_WAN_IF)
                .unwrap()
                .name(),
        }
    }

    /// The daemon's alert log.
    pub fn alerts_path(&self) -> PathBuf {
        self.dir.join("alerts.jsonl")
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Filter::detach(&self.scope);
        if rampart_ddos::filter::pin_dir(&self.nic_scope).exists() {
            // The xdp-nic modes' filter on the nic hop (even when the test failed).
            let _ = rampart_ddosd::daemon::unchain_nic(&self.hop);
            let _ = Filter::detach(&self.nic_scope);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// The test kit's: every test binary includes this module, not all use both.
#[allow(unused_imports)]
pub use rampart_testkit::http::{http, wait_for};

// The test kit's (Chromium's driver polls the same way).
#[allow(unused_imports)]
pub use rampart_testkit::browser::poll;

/// The value of the sample `line_start` (a name with its labels) in the
/// Prometheus text `text`.
pub fn sample(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(line_start) && l[line_start.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
}

/// The alerts written so far.
pub fn alerts(c: &Cleanup) -> Vec<serde_json::Value> {
    std::fs::read_to_string(c.alerts_path())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// GET `path` from the API: the JSON body of a 200.
pub fn api_get(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (code, body) = http(addr, "GET", path, None, "");
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// The shipped configuration with only what a user adapts to the machine:
/// `[daemon] iface, netns, state_dir`, `[server] listen` (any free
/// loopback port) and `[alerts] file`. Nothing of `[detect]` changes.
pub fn shipped_config(lab: &TestLab, c: &Cleanup) -> Config {
    let mut t: toml::Table = SHIPPED_CONFIG.parse().expect("the shipped config is TOML");
    let mut set = |sec: &str, key: &str, val: toml::Value| {
        t.entry(sec)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("a table")
            .insert(key.into(), val);
    };
    set("daemon", "iface", HOST_IF.into());
    set("daemon", "netns", lab.host_ns().into());
    set(
        "daemon",
        "state_dir",
        c.dir.join("state").display().to_string().into(),
    );
    set("server", "listen", "127.0.0.1:0".into());
    set(
        "alerts",
        "file",
        c.alerts_path().display().to_string().into(),
    );
    Config::parse(&toml::to_string(&t).unwrap()).expect("the daemon accepts the shipped config")
}

/// Add `addrs` (IPv4) to the lab's wan0: real hosts whose kernel answers
/// for them (a SYN-ACK to one gets a RST).
pub fn add_wan_aliases(lab: &TestLab, addrs: &[std::net::Ipv4Addr]) {
    if addrs.is_empty() {
        return;
    }
    let batch = std::env::temp_dir().join(format!("rampart-aliases-{}.ip", lab.prefix()));
    let lines: String = addrs
        .iter()
        .map(|a| format!("addr add {a}/32 dev {}\n", rampart_lab::topology::WAN_IF))
        .collect();
    std::fs::write(&batch, lines).unwrap();
    let r = rampart_dataplane::cmd::in_ns(
        &lab.wan_ns(),
        "ip",
        &["-batch", &batch.display().to_string()],
    );
    let _ = std::fs::remove_file(&batch);
    r.unwrap();
}

/// One HTTP request to `dst` from the local address `src` (a socket bound
/// to it), on the calling thread's namespace: did it complete with a 200?
pub fn request_from(src: std::net::Ipv4Addr, dst: std::net::SocketAddrV4) -> bool {
    use nix::sys::socket::{
        bind, connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    let Ok(fd) = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) else {
        return false;
    };
    let t = nix::sys::time::TimeVal::new(3, 0);
    // A blocking connect gives up after the send timeout.
    let _ = setsockopt(&fd, sockopt::SendTimeout, &t);
    let _ = setsockopt(&fd, sockopt::ReceiveTimeout, &t);
    use std::os::fd::AsRawFd;
    if bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(std::net::SocketAddrV4::new(src, 0)),
    )
    .is_err()
        || connect(fd.as_raw_fd(), &SockaddrIn::from(dst)).is_err()
    {
        return false;
    }
    let mut s = TcpStream::from(fd);
    if write!(
        s,
        "GET / HTTP/1.1\r\nHost: {dst}\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out.starts_with(b"HTTP/1.1 200")
}

/// Legitimate users: `threads` threads in namespace `ns`, each sending
/// requests to `dst` from the sources in turn (`sources[k]`, `k` = the
/// thread's index + `threads` × n), each thread at `per_thread` requests/s,
/// until dropped. Counts completed and failed requests.
pub struct Crowd {
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Crowd {
    pub fn start(
        ns: &str,
        sources: &[std::net::Ipv4Addr],
        dst: std::net::SocketAddrV4,
        threads: usize,
        per_thread: f64,
    ) -> Self {
        let (ok, failed, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let gap = Duration::from_secs_f64(1.0 / per_thread);
        let handles = (0..threads)
            .map(|t| {
                let (o, f, s, ns) = (ok.clone(), failed.clone(), stop.clone(), ns.to_string());
                let mine: Vec<_> = sources.iter().skip(t).step_by(threads).copied().collect();
                std::thread::spawn(move || {
                    rampart_dataplane::netns::enter_current_thread(&ns).unwrap();
                    let mut next = Instant::now();
                    for src in mine.iter().cycle() {
                        if s.load(Ordering::Relaxed) {
                            break;
                        }
                        if request_from(*src, dst) {
                            o.fetch_add(1, Ordering::Relaxed);
                        } else {
                            f.fetch_add(1, Ordering::Relaxed);
                        }
                        next += gap;
                        if let Some(d) = next.checked_duration_since(Instant::now()) {
                            std::thread::sleep(d);
                        }
                    }
                })
            })
            .collect();
        Self {
            ok,
            failed,
            stop,
            handles,
        }
    }

    /// Requests completed so far.
    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Requests failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A real tool (hping3, nmap) in a namespace, its output in a log file;
/// interrupted (SIGINT, then SIGKILL) when dropped.
pub struct Tool {
    name: String,
    child: Option<Child>,
}

impl Tool {
    /// Start `prog args` in `ns`; output appended to `log`.
    pub fn spawn(ns: &str, prog: &str, args: &[&str], log: &Path) -> Self {
        assert!(
            rampart_lab::web::have(prog),
            "{prog} is not installed: ./run test installs it (apt-get install {prog})"
        );
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        // A group of its own: tools that fork (pmacctd's plugins) are
        // stopped with every process they started.
        let child = Command::new("ip")
            .args(["netns", "exec", ns, prog])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {prog} in {ns}: {e}"));
        Self {
            name: prog.into(),
            child: Some(child),
        }
    }

    /// Has it exited?
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Interrupt it and wait for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // `ip netns exec` execs the tool: the pid is the tool's, and
            // its group's.
            let pgid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGINT);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(2) {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // Whatever of the group is left (a child the tool started).
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = c.wait();
        }
    }
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tool({})", self.name)
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One HTTP request with curl from `ns` (from the address its route picks):
/// did it complete with a 200?
pub fn curl_ok(ns: &str, url: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-s", "-m", "3"])
        .args(["-o", "/dev/null", "-w", "%{http_code}", url])
        .output()
        .is_ok_and(|o| o.stdout == b"200")
}

/// A legitimate client: one curl request after another from `ns`, counting
/// the completed (200) and failed ones. Stops when dropped.
pub struct Client {
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Client {
    /// Start requesting `url` from `ns`, one request every ~200 ms.
    pub fn start(ns: &str, url: &str) -> Self {
        let (ok, failed, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (o, f, s, ns, url) = (
            ok.clone(),
            failed.clone(),
            stop.clone(),
            ns.to_string(),
            url.to_string(),
        );
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if curl_ok(&ns, &url) {
                    o.fetch_add(1, Ordering::Relaxed);
                } else {
                    f.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Self {
            ok,
            failed,
            stop,
            handle: Some(handle),
        }
    }

    /// Requests completed so far.
    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Requests failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
