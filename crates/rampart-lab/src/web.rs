//! A real web service in the lab: nginx in a namespace, wrk as its client.
//!
//! Both can be pinned to one CPU (`taskset -c`). The lab's generator is a
//! stand-in for attackers on other machines; on a 2-CPU VM it competes for
//! the same cores as the service. Experiments that compare a service with
//! and without an attack pin the service (server and client) to one CPU
//! and the generator to another, in both runs, so that the ratio measures
//! the attack's effect on the service and not the lab's own generator.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, Result};

fn tool_missing(prog: &str) -> Error {
    Error::InvalidSpec(format!(
        "{prog} is not installed: `./run deps` installs nginx, wrk and curl (apt-get install nginx wrk curl)"
    ))
}

/// Is `prog` on PATH (or in /usr/sbin, where Debian puts nginx)?
#[must_use]
pub fn have(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
        || Path::new("/usr/sbin").join(prog).is_file()
}

fn pinned(ns: &str, cpu: Option<usize>, prog: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    if let Some(cpu) = cpu {
        c.args(["taskset", "-c", &cpu.to_string()]);
    }
    c.arg(prog);
    c
}

/// Transmit on queue *i* from CPU *i* (XPS, `queues/tx-<i>/xps_cpus`) on
/// every veth of the `wan → nic → host` wire, as multi-queue NIC drivers
/// set up by default.
///
/// Without it a TCP flow picks its veth queue by hash, and half of a
/// pinned service's connections share queue 0 with the generator (whose
/// XDP frames always use the queue of the CPU it runs on, 0): at the
/// generator's full rate that queue's ring overflows because CPU 0 is busy
/// *generating* — a cost real attackers do not put on the host — and the
/// service's packets are lost with the attack's before any tier sees them.
/// With per-CPU queues the service pinned to CPU 1 uses queue 1 end to
/// end, and the attack's drop work stays on CPU 0 where the lab puts it.
///
/// # Errors
/// A namespace or sysfs write failing (the message names the file).
pub fn steer_queues_by_cpu(lab: &crate::Lab) -> Result<()> {
    use crate::topology::{HOST_IF, NIC_HOST_IF, NIC_WAN_IF, WAN_IF};
    for (ns, dev) in [
        (lab.wan_ns(), WAN_IF),
        (lab.nic_ns(), NIC_WAN_IF),
        (lab.nic_ns(), NIC_HOST_IF),
        (lab.host_ns(), HOST_IF),
    ] {
        // Each queue's mask names CPU i (hex, one word is enough here).
        let script = format!(
            "for q in /sys/class/net/{dev}/queues/tx-*; do i=${{q##*tx-}}; printf '%x' $((1 << i)) > $q/xps_cpus || exit 1; done"
        );
        rampart_dataplane::cmd::in_ns(&ns, "sh", &["-c", &script]).map_err(|e| {
            Error::InvalidSpec(format!(
                "setting per-CPU transmit queues (XPS) of {dev} in {ns}: {e}"
            ))
        })?;
    }
    Ok(())
}

/// nginx (one worker) answering `200 rampart` on `addr:80` in a namespace; killed on drop.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Nginx {
    /// Start nginx in `ns` on `addr` (an address of that namespace), its
    /// files in a fresh directory under `work`, optionally pinned to `cpu`,
    /// and wait (≤ 10 s) until it answers from `client_ns`.
    ///
    /// # Errors
    /// nginx or curl missing, nginx exiting, or not answering in time.
    pub fn start(
        ns: &str,
        addr: &str,
        cpu: Option<usize>,
        work: &Path,
        client_ns: &str,
    ) -> Result<Self> {
        for p in ["nginx", "curl"] {
            if !have(p) {
                return Err(tool_missing(p));
            }
        }
        let dir = work.join(format!("nginx-{ns}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::InvalidSpec(format!("creating {}: {e}", dir.display())))?;
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 4096; }}\n\
                 http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
                 server {{ listen {addr}:80 backlog=4096; location / {{ return 200 \"rampart\\n\"; }} }} }}\n",
                d = dir.display()
            ),
        )
        .map_err(|e| Error::InvalidSpec(format!("writing {}: {e}", conf.display())))?;
        let bin = if Path::new("/usr/sbin/nginx").exists() {
            "/usr/sbin/nginx"
        } else {
            "nginx"
        };
        let child = pinned(ns, cpu, bin)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::InvalidSpec(format!("starting nginx in {ns}: {e}")))?;
        let mut me = Self { child, dir };
        me.wait_http(client_ns, addr)?;
        Ok(me)
    }

    fn wait_http(&mut self, client_ns: &str, addr: &str) -> Result<()> {
        let url = format!("http://{addr}/");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(st)) = self.child.try_wait() {
                let mut e = String::new();
                if let Some(mut s) = self.child.stderr.take() {
                    let _ = s.read_to_string(&mut e);
                }
                return Err(Error::InvalidSpec(format!(
                    "nginx exited ({st}): {}",
                    e.trim()
                )));
            }
            let out = Command::new("ip")
                .args(["netns", "exec", client_ns, "curl", "-s", "-m", "1"])
                .args(["-o", "/dev/null", "-w", "%{http_code}", &url])
                .output();
            if matches!(out, Ok(o) if o.stdout == b"200") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(Error::InvalidSpec(format!(
            "nginx did not answer {url} from namespace {client_ns} within 10 s"
        )))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its worker before exiting. A SIGKILL
        // of the master alone leaves the worker running, orphaned in a
        // deleted namespace (seen: one per run); it is only the fallback.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one wrk run reports.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct WrkResult {
    /// Requests completed.
    pub requests: u64,
    /// Seconds wrk ran.
    pub seconds: f64,
    /// Socket errors (connect, read, write, timeout) plus non-2xx/3xx responses.
    pub errors: u64,
}

impl WrkResult {
    /// Requests per second.
    #[must_use]
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds.max(1e-9)
    }

    /// Parse wrk's text output.
    ///
    /// # Errors
    /// Output without the `N requests in Ts` line.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || Error::InvalidSpec(format!("unexpected wrk output: {}", text.trim()));
        // "  123456 requests in 6.00s, 12.34MB read"
        let line = text
            .lines()
            .find(|l| l.contains(" requests in "))
            .ok_or_else(bad)?;
        let f: Vec<&str> = line.split_whitespace().collect();
        let requests: u64 = f.first().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let seconds = f
            .get(3)
            .map(|s| s.trim_end_matches(','))
            .and_then(parse_duration)
            .ok_or_else(bad)?;
        let mut errors = 0;
        for l in text.lines() {
            let l = l.trim();
            if l.starts_with("Socket errors:") {
                errors += l
                    .split(',')
                    .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                    .sum::<u64>();
            } else if let Some(n) = l.strip_prefix("Non-2xx or 3xx responses:") {
                errors += n.trim().parse::<u64>().map_err(|_| bad())?;
            }
        }
        Ok(Self {
            requests,
            seconds,
            errors,
        })
    }
}

fn parse_duration(s: &str) -> Option<f64> {
    if let Some(x) = s.strip_suffix("ms") {
        return x.parse::<f64>().ok().map(|v| v / 1000.0);
    }
    if let Some(x) = s.strip_suffix("us") {
        return x.parse::<f64>().ok().map(|v| v / 1e6);
    }
    if let Some(x) = s.strip_suffix('m') {
        return x.parse::<f64>().ok().map(|v| v * 60.0);
    }
    s.strip_suffix('s')?.parse().ok()
}

/// A running wrk (one thread, fixed connections, 2 s timeout).
pub struct Wrk {
    child: Option<Child>,
}

impl Wrk {
    /// Start wrk in `ns` against `url` for `seconds` (rounded, ≥ 1) with `conns` connections.
    ///
    /// # Errors
    /// wrk missing or not starting.
    pub fn spawn(
        ns: &str,
        url: &str,
        seconds: f64,
        conns: u32,
        cpu: Option<usize>,
    ) -> Result<Self> {
        if !have("wrk") {
            return Err(tool_missing("wrk"));
        }
        let child = pinned(ns, cpu, "wrk")
            .arg("-t1")
            .arg(format!("-c{conns}"))
            .arg(format!("-d{}s", seconds.round().max(1.0) as u64))
            .args(["--timeout", "2s", url])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::InvalidSpec(format!("starting wrk in {ns}: {e}")))?;
        Ok(Self { child: Some(child) })
    }

    /// Wait for wrk to finish and parse its report.
    ///
    /// # Errors
    /// wrk failing or printing no report.
    pub fn finish(mut self) -> Result<WrkResult> {
        let c = self.child.take().expect("wrk child present until finish");
        let out = c
            .wait_with_output()
            .map_err(|e| Error::InvalidSpec(format!("waiting for wrk: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout);
        WrkResult::parse(&text).map_err(|e| {
            Error::InvalidSpec(format!(
                "{e} (stderr: {})",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })
    }
}

impl Drop for Wrk {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "Running 6s test @ http://10.10.0.2/
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   180.12us   90.00us   5.00ms   90.00%
    Req/Sec    40.10k     1.20k   42.00k    70.00%
  239876 requests in 6.00s, 38.89MB read
  Socket errors: connect 0, read 3, write 1, timeout 2
  Non-2xx or 3xx responses: 5
Requests/sec:  39979.33
Transfer/sec:      6.48MB
";

    #[test]
    fn parses_requests_seconds_and_errors() {
        let r = WrkResult::parse(OUT).unwrap();
        assert_eq!(r.requests, 239_876);
        assert!((r.seconds - 6.0).abs() < 1e-9);
        assert_eq!(r.errors, 11);
        assert!((r.rps() - 39_979.33).abs() < 1.0);
    }

    #[test]
    fn parses_short_runs_and_no_errors() {
        let r = WrkResult::parse("  12 requests in 999.50ms, 1KB read\n").unwrap();
        assert_eq!((r.requests, r.errors), (12, 0));
        assert!((r.seconds - 0.9995).abs() < 1e-9);
        let r = WrkResult::parse("  7 requests in 1.00m, 1KB read\n").unwrap();
        assert!((r.seconds - 60.0).abs() < 1e-9);
    }

    #[test]
    fn refuses_output_without_a_report() {
        let e = WrkResult::parse("unable to connect to 10.10.0.2:80 Connection refused\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unexpected wrk output"), "{e}");
        assert!(WrkResult::parse("  x requests in 1.00s\n").is_err());
    }
}
