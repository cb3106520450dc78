//! The lab's upstream router: BIRD 2 in a namespace of its own, peered over
//! a veth with ExaBGP in the protected host's namespace, which reads the
//! command pipe rampart's upstream tier writes. The tests read what the
//! router learned with `birdc` (the unicast table for RTBH, `flowtab4` /
//! `flowtab6` for FlowSpec). [`BgpLab::up`] is control plane only;
//! [`BgpLab::in_path`] runs BIRD in the lab's EMULATED upstream router
//! (a lab built with `upstream_router`), whose bridge carries the lab's
//! traffic and drops what BIRD learned ([`crate::router`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The router's AS and address on the session.
pub const ROUTER_AS: u32 = 65000;
/// The host's (ExaBGP's) AS.
pub const HOST_AS: u32 = 65001;
/// The router's address on the session link.
pub const ROUTER_ADDR: &str = "10.99.0.1";
/// The host's address on the session link (RTBH next hop).
pub const HOST_ADDR: &str = "10.99.0.2";

/// BIRD (router) and ExaBGP (host) peered across two namespaces; removed on drop.
#[derive(Debug)]
pub struct BgpLab {
    router_ns: String,
    host_ns: String,
    dir: PathBuf,
    exabgp: Option<Child>,
    bird_pid: Option<u32>,
    owns_host_ns: bool,
    owns_router_ns: bool,
    /// The session link's router end (removed with the lab when the
    /// namespaces are not ours).
    router_if: String,
    forwarding: Option<crate::router::EmulatedForwarding>,
}

fn tool(prog: &str) -> Result<()> {
    if crate::web::have(prog) {
        Ok(())
    } else {
        Err(Error::InvalidSpec(format!(
            "{prog} is not installed: `./run deps` installs it (apt-get install bird2 exabgp)"
        )))
    }
}

fn ip(args: &[&str]) -> Result<()> {
    rampart_dataplane::cmd::ip(args)?;
    Ok(())
}

impl BgpLab {
    /// Bring up namespaces `<prefix>-up` (BIRD) and, unless `host_ns` names
    /// an existing one, `<prefix>-bh` (ExaBGP), a veth between them, both
    /// daemons, and the command pipe `<dir>/exabgp.cmd`; wait until the
    /// session is established (at most 30 s).
    ///
    /// # Errors
    /// A missing tool, a failing `ip` call, or no session.
    pub fn up(prefix: &str, host_ns: Option<&str>, dir: &Path) -> Result<Self> {
        tool("bird")?;
        tool("exabgp")?;
        let router_ns = format!("{prefix}-up");
        let (host_ns, owns_host_ns) = match host_ns {
            Some(n) => (n.to_string(), false),
            None => (format!("{prefix}-bh"), true),
        };
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("{}", dir.display()), e))?;
        let mut lab = Self {
            router_ns,
            host_ns,
            dir: dir.to_path_buf(),
            exabgp: None,
            bird_pid: None,
            owns_host_ns,
            owns_router_ns: true,
            router_if: String::new(),
            forwarding: None,
        };
        if let Err(e) = lab.start(prefix) {
            lab.down();
            return Err(e);
        }
        Ok(lab)
    }

    /// BIRD in `lab`'s EMULATED upstream router (`lab.up_ns()`, a lab
    /// built with `upstream_router`), ExaBGP in its host namespace, and the
    /// router's forwarding following BIRD's tables ([`crate::router`]):
    /// what rampart announces then drops the lab's traffic before the
    /// host's link. Removed on drop (the lab's namespaces stay).
    ///
    /// # Errors
    /// A lab without the router, a missing tool, no session, or nftables
    /// that cannot be written.
    pub fn in_path(lab: &crate::topology::Lab, dir: &Path) -> Result<Self> {
        tool("bird")?;
        tool("exabgp")?;
        tool("nft")?;
        if !lab.has_upstream_router() {
            return Err(Error::InvalidSpec(format!(
                "lab {} has no upstream router: bring it up with upstream_router",
                lab.prefix()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("{}", dir.display()), e))?;
        let mut me = Self {
            router_ns: lab.up_ns(),
            host_ns: lab.host_ns(),
            dir: dir.to_path_buf(),
            exabgp: None,
            bird_pid: None,
            owns_host_ns: false,
            owns_router_ns: false,
            router_if: String::new(),
            forwarding: None,
        };
        let r = me.start(lab.prefix()).and_then(|()| {
            let ctl = me.dir.join("bird.ctl");
            let ns = me.router_ns.clone();
            let routes = move || {
                let mut out = String::new();
                for t in ["master4", "master6", "flowtab4", "flowtab6"] {
                    out.push_str(&rampart_dataplane::cmd::in_ns(
                        &ns,
                        "birdc",
                        &[
                            "-s",
                            &ctl.to_string_lossy(),
                            "show",
                            "route",
                            "table",
                            t,
                            "all",
                        ],
                    )?);
                }
                Ok(out)
            };
            me.forwarding = Some(crate::router::EmulatedForwarding::start(
                &me.router_ns,
                me.dir.clone(),
                routes,
            )?);
            Ok(())
        });
        if let Err(e) = r {
            me.down();
            return Err(e);
        }
        Ok(me)
    }

    /// The EMULATED router's forwarding ([`BgpLab::in_path`] only).
    #[must_use]
    pub fn forwarding(&self) -> Option<&crate::router::EmulatedForwarding> {
        self.forwarding.as_ref()
    }

    fn start(&mut self, prefix: &str) -> Result<()> {
        let (r, h) = (self.router_ns.clone(), self.host_ns.clone());
        if self.owns_router_ns {
            ip(&["netns", "add", &r])?;
        }
        if self.owns_host_ns {
            ip(&["netns", "add", &h])?;
        }
        // Interface names are 15 bytes at most: derive them from a short tag.
        let tag: String = prefix.chars().rev().take(6).collect::<String>();
        let (ri, hi) = (format!("bgu{tag}"), format!("bgh{tag}"));
        ip(&["link", "add", &ri, "type", "veth", "peer", "name", &hi])?;
        self.router_if.clone_from(&ri);
        ip(&["link", "set", &ri, "netns", &r])?;
        ip(&["link", "set", &hi, "netns", &h])?;
        ip(&[
            "-n",
            &r,
            "addr",
            "add",
            &format!("{ROUTER_ADDR}/30"),
            "dev",
            &ri,
        ])?;
        ip(&[
            "-n",
            &h,
            "addr",
            "add",
            &format!("{HOST_ADDR}/30"),
            "dev",
            &hi,
        ])?;
        for (ns, dev) in [(&r, &ri), (&h, &hi)] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        let d = &self.dir;
        let bird_conf = d.join("bird.conf");
        std::fs::write(
            &bird_conf,
            format!(
                "router id {ROUTER_ADDR};\nprotocol device {{}}\nflow4 table flowtab4;\nflow6 table flowtab6;\n\
                 protocol bgp host {{\n  local {ROUTER_ADDR} as {ROUTER_AS};\n  neighbor {HOST_ADDR} as {HOST_AS};\n\
                 ipv4 {{ import all; export none; }};\n  ipv6 {{ import all; export none; }};\n\
                 flow4 {{ table flowtab4; import all; export none; }};\n  flow6 {{ table flowtab6; import all; export none; }};\n}}\n"
            ),
        )
        .map_err(|e| Error::io("writing bird.conf", e))?;
        let ctl = d.join("bird.ctl");
        let pidf = d.join("bird.pid");
        rampart_dataplane::cmd::in_ns(
            &r,
            "bird",
            &[
                "-c",
                &bird_conf.to_string_lossy(),
                "-s",
                &ctl.to_string_lossy(),
                "-P",
                &pidf.to_string_lossy(),
            ],
        )?;
        self.bird_pid = std::fs::read_to_string(&pidf)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let pipe = self.command_pipe();
        let c = std::ffi::CString::new(pipe.to_string_lossy().as_bytes()).unwrap_or_default();
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            return Err(Error::io(
                format!("mkfifo {}", pipe.display()),
                std::io::Error::last_os_error(),
            ));
        }
        let exa_conf = d.join("exabgp.conf");
        std::fs::write(
            &exa_conf,
            format!(
                "process rampart {{\n    run /bin/cat {p};\n    encoder text;\n}}\n\
                 neighbor {ROUTER_ADDR} {{\n    router-id {HOST_ADDR};\n    local-address {HOST_ADDR};\n\
                 local-as {HOST_AS};\n    peer-as {ROUTER_AS};\n\
                 family {{ ipv4 unicast; ipv6 unicast; ipv4 flow; ipv6 flow; }}\n\
                 api {{ processes [ rampart ]; }}\n}}\n",
                p = pipe.display()
            ),
        )
        .map_err(|e| Error::io("writing exabgp.conf", e))?;
        let log = std::fs::File::create(d.join("exabgp.log"))
            .map_err(|e| Error::io("creating exabgp.log", e))?;
        let log2 = log.try_clone().map_err(|e| Error::io("exabgp.log", e))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &h, "exabgp"])
            .arg(&exa_conf)
            .env("exabgp.daemon.user", "root")
            .env("exabgp.daemon.daemonize", "false")
            // ExaBGP's own CLI pipes are not used (rampart writes the process's pipe).
            .env("exabgp.cli.enable", "false")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| Error::io("starting exabgp", e))?;
        self.exabgp = Some(child);
        let t0 = Instant::now();
        while !self
            .birdc(&["show", "protocols", "host"])?
            .contains("Established")
        {
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(Error::InvalidSpec(format!(
                    "BGP session between BIRD ({r}) and ExaBGP ({h}) not established after 30 s; see {}",
                    d.join("exabgp.log").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// The pipe ExaBGP reads (rampart's `ddos.upstream.command_pipe`).
    #[must_use]
    pub fn command_pipe(&self) -> PathBuf {
        self.dir.join("exabgp.cmd")
    }

    /// The namespace ExaBGP (the protected host's side) runs in.
    #[must_use]
    pub fn host_ns(&self) -> &str {
        &self.host_ns
    }

    /// Run `birdc` on the router.
    ///
    /// # Errors
    /// A failing `birdc`.
    pub fn birdc(&self, args: &[&str]) -> Result<String> {
        let ctl = self.dir.join("bird.ctl");
        let mut a = vec!["-s", ctl.to_str().unwrap_or_default()];
        a.extend_from_slice(args);
        Ok(rampart_dataplane::cmd::in_ns(&self.router_ns, "birdc", &a)?)
    }

    /// What the router learned: `show route table T all` for the unicast
    /// (`master4`/`master6`) and FlowSpec (`flowtab4`/`flowtab6`) tables.
    ///
    /// # Errors
    /// A failing `birdc`.
    pub fn routes(&self) -> Result<String> {
        let mut out = String::new();
        for t in ["master4", "master6", "flowtab4", "flowtab6"] {
            out.push_str(&self.birdc(&["show", "route", "table", t, "all"])?);
        }
        Ok(out)
    }

    /// Stop both daemons and remove the namespaces (what exists of them).
    pub fn down(&mut self) {
        self.forwarding = None;
        if let Some(mut c) = self.exabgp.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // `ip netns exec` may leave ExaBGP's own process behind the killed one.
        let _ = Command::new("pkill")
            .args([
                "-f",
                &format!("exabgp {}", self.dir.join("exabgp.conf").display()),
            ])
            .status();
        let _ = Command::new("pkill")
            .args(["-f", &format!("cat {}", self.command_pipe().display())])
            .status();
        // BIRD's daemonised child may write its pid file after the parent
        // returned (so `start` can miss it): read it again now.
        let pid = self.bird_pid.take().or_else(|| {
            std::fs::read_to_string(self.dir.join("bird.pid"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
        });
        if let Some(pid) = pid {
            // SAFETY: a signal to a process the lab started.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        if self.owns_router_ns {
            let _ = rampart_dataplane::cmd::ip(&["netns", "del", &self.router_ns]);
        } else if !self.router_if.is_empty() {
            // The session link (its peer goes with it).
            let _ = rampart_dataplane::cmd::ip(&[
                "-n",
                &self.router_ns,
                "link",
                "del",
                &self.router_if,
            ]);
        }
        if self.owns_host_ns {
            let _ = rampart_dataplane::cmd::ip(&["netns", "del", &self.host_ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for BgpLab {
    fn drop(&mut self) {
        self.down();
    }
}
