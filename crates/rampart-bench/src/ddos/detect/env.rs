//! One scenario's environment: a lab of its own with the harness's
//! addresses on `wan0`, nginx on `host`, host-side counters after XDP
//! (nftables netdev ingress on `host0`), the daemon as a process
//! (`rampart ddos run`) on the shipped configuration, and the tools. Every
//! piece is removed when the value is dropped — also on error and Ctrl-C.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rampart_ddos::filter::{Filter, Scope};
use rampart_ddos::Prefix;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::internet::Internet;
use rampart_lab::topology::{UpOptions, HOST_IF, WAN_IF};
use rampart_lab::web::Nginx;
use rampart_lab::Lab;

use super::measure::{Sample, Truth};
use crate::ddos::run_cmd;
use crate::error::{Error, Result};

/// The configuration the daemon runs: the file shipped in `dist/`, as built.
pub const SHIPPED_CONFIG: &str = include_str!("../../../../../dist/rampart-ddos.toml");

/// The victim (nginx on `host`).
pub const VICTIM_V4: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 2);
/// The victim's IPv6 address.
pub const VICTIM_V6: Ipv6Addr = Ipv6Addr::new(0xfd10, 0, 0, 0, 0, 0, 0, 2);

/// The steady legitimate client's IPv4 source `i` (1-based; aliases of wan0).
pub fn legit_v4(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 30, (i >> 8) as u8, i as u8))
}
/// The steady legitimate client's IPv6 source `i`.
pub fn legit_v6(i: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0xfd10, 0, 0, 0, 0, 0, 1, i as u16))
}
/// The flash crowd's IPv4 source `i` (new legitimate users).
pub fn crowd_v4(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 31, (i >> 8) as u8, i as u8))
}
/// The flash crowd's IPv6 source `i`.
pub fn crowd_v6(i: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0xfd10, 0, 0, 0, 0, 0, 2, i as u16))
}
/// One source carrying many users (a NAT gateway).
pub const NAT_SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 30, 200, 1));
/// Attacker aliases of wan0 (real hosts whose kernel answers SYN-ACKs with RST).
pub fn attacker_v4(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 66, 0, i as u8))
}

/// Every legitimate source the harness may use: the lab's own wan0
/// addresses (wrk), the steady client, the flash crowd, the NAT source.
pub fn truth() -> Truth {
    let p = |s: &str| Prefix::parse(s).expect("static prefix");
    Truth {
        legit: vec![
            p("10.10.0.1/32"),
            p("10.30.0.0/16"),
            p("10.31.0.0/16"),
            p("fd10::1/128"),
            p("fd10::1:0/112"),
            p("fd10::2:0/112"),
        ],
    }
}

fn nft_ruleset() -> String {
    format!(
        r#"table netdev rbench {{
  counter legit {{ }}
  counter attack {{ }}
  counter ignored {{ }}
  chain in {{
    type filter hook ingress device "{HOST_IF}" priority -500; policy accept;
    meta protocol != {{ ip, ip6 }} counter name "ignored" accept
    ip saddr {{ 10.10.0.1, 10.30.0.0/16, 10.31.0.0/16 }} counter name "legit" accept
    ip6 saddr {{ fd10::1, fd10::1:0/112, fd10::2:0/112 }} counter name "legit" accept
    ip6 saddr fe80::/10 counter name "ignored" accept
    counter name "attack" accept
  }}
}}
"#
    )
}

/// Parse `nft -j list counters` output into (legit, attack, ignored) packets.
pub fn parse_nft_counters(json: &str) -> (u64, u64, u64) {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let (mut l, mut a, mut i) = (0, 0, 0);
    for o in v["nftables"].as_array().into_iter().flatten() {
        let c = &o["counter"];
        let n = c["packets"].as_u64().unwrap_or(0);
        match c["name"].as_str() {
            Some("legit") => l = n,
            Some("attack") => a = n,
            Some("ignored") => i = n,
            _ => {}
        }
    }
    (l, a, i)
}

/// A tool process in a namespace (hping3, nmap, …), interrupted on drop.
pub struct Tool {
    name: String,
    child: Option<Child>,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tool({})", self.name)
    }
}

impl Tool {
    /// Start `prog args` in `ns`, its output appended to `log`.
    ///
    /// # Errors
    /// The tool missing or not starting.
    pub fn spawn(ns: &str, prog: &str, args: &[String], log: &Path) -> Result<Self> {
        if !rampart_lab::web::have(prog) {
            return Err(Error::Invalid(format!(
                "{prog} is not installed: `./run deps` installs the suite's tools (apt-get install {prog})"
            )));
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(format!("opening {}", log.display()), e))?;
        let f2 = f
            .try_clone()
            .map_err(|e| Error::io("duplicating a log file", e))?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns, prog])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .spawn()
            .map_err(|e| Error::io(format!("starting {prog} in {ns}"), e))?;
        Ok(Self {
            name: prog.into(),
            child: Some(child),
        })
    }

    /// Has it exited?
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // `ip netns exec` execs the tool: the pid is the tool's. SIGINT
            // lets hping3 and nmap print their statistics.
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(2) {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The lab generator in a thread of its own, running `phases` (seconds,
/// packets/s or `None` for a pause) one after the other.
pub struct GenRun {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<u64>>>,
}

impl std::fmt::Debug for GenRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GenRun")
    }
}

impl GenRun {
    /// Load the generator for the first phase and start it; returns once
    /// the first frames are being sent.
    ///
    /// # Errors
    /// The generator failing to load.
    pub fn start(
        lab: &Lab,
        spec: &GenSpec,
        phases: Vec<(f64, Option<f64>)>,
        anchor: &'static str,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let (lab, spec, st) = (lab.clone(), spec.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("detect-gen".into())
            .spawn(move || -> Result<u64> {
                let mut sent = 0;
                let mut first = Some(tx);
                for (secs, pps) in phases {
                    if st.load(Ordering::Relaxed) {
                        break;
                    }
                    let Some(pps) = pps else {
                        if let Some(tx) = first.take() {
                            let _ = tx.send(Ok(()));
                        }
                        let t0 = Instant::now();
                        while t0.elapsed().as_secs_f64() < secs && !st.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        continue;
                    };
                    let s = GenSpec {
                        pps: (pps > 0.0).then_some(pps),
                        limit: Limit::Seconds(secs),
                        ..spec.clone()
                    };
                    let g = match Generator::with_anchor(&lab, &s, anchor) {
                        Ok(g) => g,
                        Err(e) => {
                            let msg = e.to_string();
                            if let Some(tx) = first.take() {
                                let _ = tx.send(Err(e.into()));
                            }
                            return Err(Error::Failed(format!("lab generator: {msg}")));
                        }
                    };
                    if let Some(tx) = first.take() {
                        let _ = tx.send(Ok(()));
                    }
                    sent += g.run(&st)?.sent_packets;
                }
                Ok(sent)
            })
            .map_err(|e| Error::io("starting the generator thread", e))?;
        let me = Self {
            stop,
            handle: Some(handle),
        };
        // No message: no phase, nothing to wait for.
        if let Ok(r) = rx.recv() {
            r?;
        }
        Ok(me)
    }

    /// Stop and return the frames sent.
    ///
    /// # Errors
    /// The generator failing while it ran.
    pub fn finish(mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Failed("the generator thread panicked".into())),
            None => Ok(0),
        }
    }
}

impl Drop for GenRun {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The daemon, `rampart ddos run --config FILE`, as a process.
pub struct Daemon {
    child: Option<Child>,
    api: SocketAddr,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Daemon(api {})", self.api)
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io("finding a free port for the daemon's API", e))?;
    Ok(l.local_addr()
        .map_err(|e| Error::io("finding a free port", e))?
        .port())
}

/// The shipped configuration with only the keys the lab must change:
/// `[daemon] iface, netns, state_dir`, `[server] listen`, `[alerts] file`.
///
/// # Errors
/// The shipped file not being a TOML table.
pub fn lab_config(
    shipped: &str,
    netns: &str,
    state_dir: &Path,
    listen: SocketAddr,
    alerts: &Path,
) -> Result<String> {
    let mut t: toml::Table = shipped
        .parse()
        .map_err(|e| Error::Invalid(format!("the shipped configuration is not TOML: {e}")))?;
    let mut set = |sec: &str, key: &str, val: toml::Value| -> Result<()> {
        let s = t
            .entry(sec)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let s = s.as_table_mut().ok_or_else(|| {
            Error::Invalid(format!(
                "[{sec}] of the shipped configuration is not a table"
            ))
        })?;
        s.insert(key.into(), val);
        Ok(())
    };
    set("daemon", "iface", HOST_IF.into())?;
    set("daemon", "netns", netns.into())?;
    set(
        "daemon",
        "state_dir",
        state_dir.display().to_string().into(),
    )?;
    set("server", "listen", listen.to_string().into())?;
    set("alerts", "file", alerts.display().to_string().into())?;
    toml::to_string(&t)
        .map_err(|e| Error::Failed(format!("writing the daemon's configuration: {e}")))
}

/// GET `path` from the daemon's API; the JSON body.
pub fn api_get(api: SocketAddr, path: &str) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect_timeout(&api, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return None;
    }
    serde_json::from_str(body).ok()
}

impl Daemon {
    /// Start the daemon with `config` and wait (≤ 30 s) for its API.
    ///
    /// # Errors
    /// The daemon exiting or not answering; the message has its log's tail.
    pub fn start(bin: &Path, config: &Path, api: SocketAddr, log: &Path) -> Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(format!("opening {}", log.display()), e))?;
        let f2 = f
            .try_clone()
            .map_err(|e| Error::io("duplicating a log file", e))?;
        let child = Command::new(bin)
            .args(["ddos", "run", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .spawn()
            .map_err(|e| Error::io(format!("starting {} ddos run", bin.display()), e))?;
        let mut me = Self {
            child: Some(child),
            api,
        };
        let t0 = Instant::now();
        loop {
            if api_get(api, "/v1/status").is_some() {
                return Ok(me);
            }
            let exited = me
                .child
                .as_mut()
                .map(|c| matches!(c.try_wait(), Ok(Some(_))))
                .unwrap_or(true);
            if exited || t0.elapsed() > Duration::from_secs(30) {
                let tail = std::fs::read_to_string(log).unwrap_or_default();
                let tail: String = tail
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join(" | ");
                return Err(Error::Failed(format!(
                    "the daemon {} (log {}): {tail}",
                    if exited {
                        "exited"
                    } else {
                        "did not answer within 30 s"
                    },
                    log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The API address.
    pub fn api(&self) -> SocketAddr {
        self.api
    }

    /// The daemon's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stop it as an operator would (SIGTERM; SIGKILL after 10 s).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Reads the host-side counters of one environment (from any thread).
#[derive(Debug, Clone)]
pub struct Probe {
    host_ns: String,
    api: SocketAddr,
    t0: Instant,
}

impl Probe {
    /// One sample of the host-side counters, and the daemon's blacklist
    /// size when its API answers.
    ///
    /// # Errors
    /// A failing `ip` or `nft`.
    pub fn sample(&self) -> Result<Sample> {
        let rx = rampart_lab::gen::iface_rx_packets(&self.host_ns, HOST_IF)?;
        let out = run_cmd(
            "ip",
            &[
                "netns",
                "exec",
                &self.host_ns,
                "nft",
                "-j",
                "list",
                "counters",
                "table",
                "netdev",
                "rbench",
            ],
            None,
        )?;
        let (legit, attack, ignored) = parse_nft_counters(&out);
        let blocked = api_get(self.api, "/v1/status").and_then(|v| v["blocked"].as_u64());
        Ok(Sample {
            t: self.t0.elapsed().as_secs_f64(),
            rx,
            legit,
            attack,
            ignored,
            blocked,
        })
    }
}

/// The environment of one scenario run.
pub struct Env {
    /// The lab.
    pub lab: Lab,
    /// Files of this run (config, alerts, logs, state).
    pub dir: PathBuf,
    scope: String,
    /// nginx on host (IPv4, IPv6).
    nginx: Option<Nginx>,
    nginx6: Option<Nginx>,
    /// The daemon, while it runs.
    pub daemon: Option<Daemon>,
    /// The Internet beyond wan: the host's replies to spoofed sources
    /// leave instead of loading wan's stack on the generator's CPU.
    pub internet: Option<Internet>,
    bin: PathBuf,
    api: SocketAddr,
    /// Harness time zero.
    pub t0: Instant,
    /// The same instant in Unix seconds.
    pub t0_unix: f64,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Env({})", self.lab.prefix())
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `ip -batch` lines adding `addrs` to wan0 (IPv6 without DAD).
fn alias_batch(addrs: &[IpAddr]) -> String {
    let mut s = String::new();
    for a in addrs {
        match a {
            IpAddr::V4(v) => s.push_str(&format!("addr add {v}/32 dev {WAN_IF}\n")),
            IpAddr::V6(v) => s.push_str(&format!("addr add {v}/128 dev {WAN_IF} nodad\n")),
        }
    }
    s
}

impl Env {
    /// Bring up a lab named `prefix`, add `aliases` to wan0, start nginx
    /// and the counters. Nothing of it is left behind when this fails.
    ///
    /// # Errors
    /// Lab, nftables or nginx failures.
    pub fn up(prefix: &str, dir: &Path, bin: &Path, aliases: &[IpAddr]) -> Result<Self> {
        let lab = Lab::new(prefix)?;
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let scope = Scope::new(Some(&lab.host_ns()), HOST_IF)?.name();
        let mut env = Self {
            lab: lab.clone(),
            dir: dir.to_path_buf(),
            scope,
            nginx: None,
            nginx6: None,
            daemon: None,
            internet: None,
            bin: bin.to_path_buf(),
            api: SocketAddr::from(([127, 0, 0, 1], free_port()?)),
            t0: Instant::now(),
            t0_unix: unix_now(),
        };
        lab.up(&UpOptions::default())?;
        if !aliases.is_empty() {
            let wan = lab.wan_ns();
            run_cmd(
                "ip",
                &["-n", &wan, "-batch", "-"],
                Some(alias_batch(aliases).as_bytes()),
            )?;
        }
        env.internet = Some(Internet::attach(&lab.wan_ns(), WAN_IF)?);
        run_cmd(
            "ip",
            &["netns", "exec", &lab.host_ns(), "nft", "-f", "-"],
            Some(nft_ruleset().as_bytes()),
        )?;
        // The lab's nginx listens on one address: one for each family.
        env.nginx = Some(Nginx::start(
            &lab.host_ns(),
            &VICTIM_V4.to_string(),
            None,
            dir,
            &lab.wan_ns(),
        )?);
        env.nginx6 = Some(Nginx::start(
            &lab.host_ns(),
            &format!("[{VICTIM_V6}]"),
            None,
            &dir.join("v6"),
            &lab.wan_ns(),
        )?);
        Ok(env)
    }

    /// Give host0 every address of the victim's /24 (a server with a /24
    /// of service addresses: the target of carpet bombing).
    ///
    /// # Errors
    /// A failing `ip`.
    pub fn host_owns_24(&self) -> Result<()> {
        let mut batch = String::new();
        for i in 3..=254 {
            batch.push_str(&format!("addr add 10.10.0.{i}/32 dev {HOST_IF}\n"));
        }
        run_cmd(
            "ip",
            &["-n", &self.lab.host_ns(), "-batch", "-"],
            Some(batch.as_bytes()),
        )?;
        Ok(())
    }

    /// Restart the harness clock (time zero = now).
    pub fn reset_clock(&mut self) {
        self.t0 = Instant::now();
        self.t0_unix = unix_now();
    }

    /// Seconds since time zero.
    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Harness seconds → Unix seconds.
    pub fn unix(&self, t: f64) -> f64 {
        self.t0_unix + t
    }

    /// The daemon's configuration file (written on first use).
    ///
    /// # Errors
    /// Writing it.
    pub fn config_path(&self) -> Result<PathBuf> {
        let p = self.dir.join("rampart-ddos.toml");
        if !p.exists() {
            let text = lab_config(
                SHIPPED_CONFIG,
                &self.lab.host_ns(),
                &self.dir.join("state"),
                self.api,
                &self.dir.join("alerts.jsonl"),
            )?;
            std::fs::write(&p, text)
                .map_err(|e| Error::io(format!("writing {}", p.display()), e))?;
        }
        Ok(p)
    }

    /// Start the daemon (its state directory is kept across restarts).
    ///
    /// # Errors
    /// As [`Daemon::start`].
    pub fn start_daemon(&mut self) -> Result<()> {
        let cfg = self.config_path()?;
        self.daemon = Some(Daemon::start(
            &self.bin,
            &cfg,
            self.api,
            &self.dir.join("daemon.log"),
        )?);
        Ok(())
    }

    /// Stop the daemon (its pinned filter stays, as after any stop).
    pub fn stop_daemon(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.stop();
        }
    }

    /// What a sampler thread needs to read the counters.
    pub fn probe(&self) -> Probe {
        Probe {
            host_ns: self.lab.host_ns(),
            api: self.api,
            t0: self.t0,
        }
    }

    /// The alerts written so far.
    pub fn alerts_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("alerts.jsonl")).unwrap_or_default()
    }

    /// A tool in `wan`, its output in `<dir>/<log>.log`.
    ///
    /// # Errors
    /// As [`Tool::spawn`].
    pub fn tool(&self, prog: &str, args: &[String], log: &str) -> Result<Tool> {
        Tool::spawn(
            &self.lab.wan_ns(),
            prog,
            args,
            &self.dir.join(format!("{log}.log")),
        )
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop_daemon();
        self.nginx = None;
        self.nginx6 = None;
        self.internet = None;
        let _ = Filter::detach(&self.scope);
        if let Err(e) = self.lab.down() {
            tracing::warn!("removing lab {}: {e}", self.lab.prefix());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_lab_keys_of_the_shipped_config_change() {
        let api: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        let text = lab_config(
            SHIPPED_CONFIG,
            "x-host",
            Path::new("/tmp/s"),
            api,
            Path::new("/tmp/a.jsonl"),
        )
        .unwrap();
        let got: toml::Table = text.parse().unwrap();
        let mut shipped: toml::Table = SHIPPED_CONFIG.parse().unwrap();
        let d = shipped["daemon"].as_table_mut().unwrap();
        d.insert("iface".into(), "host0".into());
        d.insert("netns".into(), "x-host".into());
        d.insert("state_dir".into(), "/tmp/s".into());
        shipped["server"]
            .as_table_mut()
            .unwrap()
            .insert("listen".into(), "127.0.0.1:4242".into());
        shipped["alerts"]
            .as_table_mut()
            .unwrap()
            .insert("file".into(), "/tmp/a.jsonl".into());
        assert_eq!(got, shipped);
        // And the daemon accepts it.
        rampart_ddosd::Config::parse(&text).unwrap();
    }

    #[test]
    fn nft_counters_parse() {
        let j = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"counter": {"family": "netdev", "name": "legit", "table": "rbench", "handle": 1, "packets": 12, "bytes": 900}}, {"counter": {"family": "netdev", "name": "attack", "table": "rbench", "handle": 2, "packets": 5, "bytes": 300}}, {"counter": {"family": "netdev", "name": "ignored", "table": "rbench", "handle": 3, "packets": 2, "bytes": 84}}]}"#;
        assert_eq!(parse_nft_counters(j), (12, 5, 2));
        assert_eq!(parse_nft_counters("not json"), (0, 0, 0));
    }

    #[test]
    fn the_truth_covers_every_legitimate_source_and_no_attacker() {
        let t = truth();
        for a in [
            legit_v4(1),
            legit_v6(7),
            crowd_v4(299),
            crowd_v6(3),
            NAT_SOURCE,
        ] {
            assert!(
                t.touches_legit(&Prefix::parse(&a.to_string()).unwrap()),
                "{a}"
            );
        }
        for a in [attacker_v4(1), IpAddr::V4(Ipv4Addr::new(172, 16, 0, 9))] {
            assert!(
                !t.touches_legit(&Prefix::parse(&a.to_string()).unwrap()),
                "{a}"
            );
        }
    }
}
