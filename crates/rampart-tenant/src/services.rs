//! Tenant services for the lab: a UDP sink, nginx and a DNS
//! server (dnsmasq), each started inside a tenant's namespace and stopped
//! when the value is dropped. Tests and benchmarks use them as the real
//! workloads behind the infrastructure program.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A UDP socket in a namespace that counts what it receives.
#[derive(Debug)]
pub struct UdpSink {
    packets: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Where it listens.
    pub addr: SocketAddrV4,
}

impl UdpSink {
    /// Listen on `addr` inside namespace `ns`.
    ///
    /// # Errors
    /// Namespace or bind failures.
    pub fn start(ns: &str, addr: SocketAddrV4) -> Result<Self> {
        let packets = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let thread = {
            let (packets, stop, ns) = (Arc::clone(&packets), Arc::clone(&stop), ns.to_string());
            std::thread::Builder::new()
                .name("udp-sink".into())
                .spawn(move || {
                    let setup = || -> Result<UdpSocket> {
                        rampart_dataplane::netns::enter_current_thread(&ns)?;
                        let s = UdpSocket::bind(addr)
                            .map_err(|e| Error::io(format!("binding {addr} in {ns}"), e))?;
                        s.set_read_timeout(Some(Duration::from_millis(50)))
                            .map_err(|e| Error::io("socket timeout", e))?;
                        // A large receive buffer: a sink starved of CPU for a few
                        // milliseconds must not drop (a redirected XDP frame costs a
                        // page of buffer, so the default holds ~50 of them).
                        let size: libc::c_int = 32 << 20;
                        // SAFETY: setsockopt with a valid int option on our socket.
                        unsafe {
                            libc::setsockopt(
                                std::os::fd::AsRawFd::as_raw_fd(&s),
                                libc::SOL_SOCKET,
                                libc::SO_RCVBUFFORCE,
                                (&raw const size).cast(),
                                std::mem::size_of::<libc::c_int>() as u32,
                            )
                        };
                        Ok(s)
                    };
                    let sock = match setup() {
                        Ok(s) => {
                            let _ = tx.send(Ok(()));
                            s
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    let mut buf = [0u8; 2048];
                    while !stop.load(Ordering::Relaxed) {
                        if sock.recv_from(&mut buf).is_ok() {
                            packets.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
                .map_err(|e| Error::io("starting the UDP sink thread", e))?
        };
        rx.recv()
            .map_err(|_| Error::Invalid("UDP sink thread died".into()))??;
        Ok(Self {
            packets,
            stop,
            thread: Some(thread),
            addr,
        })
    }

    /// Datagrams received so far.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }
}

impl Drop for UdpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A daemon running in a namespace, killed on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    _dir: tempfile::TempDir,
    /// What it is.
    pub name: &'static str,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_in(
    ns: &str,
    prog: &str,
    args: &[String],
    dir: tempfile::TempDir,
    name: &'static str,
) -> Result<Daemon> {
    if Command::new(prog)
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
        && Command::new(prog)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
    {
        return Err(Error::Invalid(format!(
            "{prog} is not installed (apt-get install {}; `./run test` installs it)",
            if prog.contains("dnsmasq") {
                "dnsmasq-base"
            } else {
                prog
            }
        )));
    }
    let child = Command::new("ip")
        .args(["netns", "exec", ns, prog])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io(format!("starting {name} in {ns}"), e))?;
    Ok(Daemon {
        child,
        _dir: dir,
        name,
    })
}

/// Wait until something accepts TCP connections on `addr` in `ns`.
fn wait_tcp(ns: &str, addr: SocketAddrV4, d: &mut Daemon) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let ok = rampart_dataplane::netns::run_in(Some(ns), || {
            Ok(
                std::net::TcpStream::connect_timeout(&addr.into(), Duration::from_millis(100))
                    .is_ok(),
            )
        })?;
        if ok {
            return Ok(());
        }
        if let Ok(Some(st)) = d.child.try_wait() {
            return Err(Error::Invalid(format!(
                "{} exited ({st}) before listening on {addr}",
                d.name
            )));
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(Error::Invalid(format!(
                "{} did not listen on {addr} within 10 s",
                d.name
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tmpdir(prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| Error::io("creating a service directory", e))
}

/// nginx serving a small page on `addr:80` inside `ns`.
///
/// # Errors
/// nginx missing, or not listening within 10 s.
pub fn nginx(ns: &str, addr: Ipv4Addr) -> Result<Daemon> {
    let dir = tmpdir("rampart-nginx-")?;
    let root: PathBuf = dir.path().join("www");
    std::fs::create_dir_all(&root).map_err(|e| Error::io("nginx root", e))?;
    std::fs::write(root.join("index.html"), format!("hello from {ns}\n"))
        .map_err(|e| Error::io("nginx page", e))?;
    let p = dir.path().display().to_string();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {p}/nginx.pid;\nerror_log {p}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {p}/body;\n  proxy_temp_path {p}/proxy;\n\
           fastcgi_temp_path {p}/fcgi;\n  uwsgi_temp_path {p}/uwsgi;\n  scgi_temp_path {p}/scgi;\n\
           server {{ listen {addr}:80; root {}; }}\n}}\n",
        root.display()
    );
    let cf = dir.path().join("nginx.conf");
    std::fs::write(&cf, conf).map_err(|e| Error::io("nginx config", e))?;
    let args = vec!["-c".to_string(), cf.display().to_string(), "-p".into(), p];
    let mut d = spawn_in(ns, "nginx", &args, dir, "nginx")?;
    wait_tcp(ns, SocketAddrV4::new(addr, 80), &mut d)?;
    Ok(d)
}

/// dnsmasq answering `example.com A` with `answer` on `addr:53` (UDP and TCP) inside `ns`.
///
/// # Errors
/// dnsmasq missing, or not listening within 10 s.
pub fn dnsmasq(ns: &str, addr: Ipv4Addr, answer: Ipv4Addr) -> Result<Daemon> {
    dnsmasq_at(ns, SocketAddrV4::new(addr, 53), answer)
}

/// dnsmasq as [`dnsmasq`], on any address and port (e.g. behind a forwarder).
///
/// # Errors
/// dnsmasq missing, or not listening within 10 s.
pub fn dnsmasq_at(ns: &str, at: SocketAddrV4, answer: Ipv4Addr) -> Result<Daemon> {
    let (addr, port) = (*at.ip(), at.port());
    let dir = tmpdir("rampart-dns-")?;
    let args = vec![
        "--no-daemon".to_string(),
        "--conf-file=/dev/null".into(),
        format!("--port={port}"),
        format!("--listen-address={addr}"),
        "--bind-interfaces".into(),
        "--no-resolv".into(),
        "--no-hosts".into(),
        "--cache-size=0".into(),
        format!("--address=/example.com/{answer}"),
        format!("--pid-file={}/dnsmasq.pid", dir.path().display()),
        "--user=root".into(),
    ];
    let mut d = spawn_in(ns, "dnsmasq", &args, dir, "dnsmasq")?;
    wait_tcp(ns, SocketAddrV4::new(addr, port), &mut d)?;
    Ok(d)
}

fn run_in_ns(ns: &str, prog: &str, args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, prog])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io(format!("running {prog} in {ns}"), e))?;
    if !out.status.success() {
        return Err(Error::Invalid(format!(
            "{prog} {} in {ns} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The server side of the SYN-cookie proxy in a tenant's namespace: the
/// kernel's SYNPROXY target takes the ACKs the XDP proxy validated (the
/// same cookie, checked again with the same kernel secret), opens the
/// connection to the local server and splices the sequence numbers
/// (conntrack). `mss` and `wscale` must match what the XDP proxy
/// announces. Rules live in the namespace and go with it.
///
/// # Errors
/// iptables/ip6tables or sysctl failing (the message says which).
pub fn synproxy_netfilter(ns: &str, port: u16, mss: u16, wscale: u8) -> Result<()> {
    let port = port.to_string();
    let (mss, ws) = (mss.to_string(), wscale.to_string());
    for ipt in ["iptables", "ip6tables"] {
        run_in_ns(
            ns,
            ipt,
            &[
                "-t",
                "raw",
                "-A",
                "PREROUTING",
                "-p",
                "tcp",
                "--dport",
                &port,
                "--syn",
                "-j",
                "CT",
                "--notrack",
            ],
        )?;
        run_in_ns(
            ns,
            ipt,
            &[
                "-A",
                "INPUT",
                "-p",
                "tcp",
                "--dport",
                &port,
                "-m",
                "conntrack",
                "--ctstate",
                "INVALID,UNTRACKED",
                "-j",
                "SYNPROXY",
                "--sack-perm",
                "--timestamp",
                "--wscale",
                &ws,
                "--mss",
                &mss,
            ],
        )?;
        run_in_ns(
            ns,
            ipt,
            &[
                "-A",
                "INPUT",
                "-p",
                "tcp",
                "--dport",
                &port,
                "-m",
                "conntrack",
                "--ctstate",
                "INVALID",
                "-j",
                "DROP",
            ],
        )?;
    }
    // Mid-stream ACKs must not be picked up as new connections.
    run_in_ns(
        ns,
        "sysctl",
        &["-qw", "net.netfilter.nf_conntrack_tcp_loose=0"],
    )
}
