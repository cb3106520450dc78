//! Flow input against real exporters: the time from an attack's first
//! packet to its detection from a router's exports. The lab's router
//! namespace (a bridge on the wire, as in the BGP part) runs what an
//! operator's router would: softflowd exporting IPFIX, or pmacctd's sFlow
//! probe sampling 1 in 10, both watching its `wan` port and exporting to
//! the daemon's receivers (which listen in that namespace). The daemon
//! runs the shipped configuration with `[flow_input]` on for the lab's
//! /24. A SYN flood hits an address of that /24 that is not this host's,
//! so only the exports show it. The export interval (softflowd's active
//! timeout and what the daemon is told) is [`EXPORT_S`].

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_ddosd::{Config, Handle};
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::topology::{UpOptions, HOST_IF, UP_WAN_IF};
use serde::Serialize;

use crate::ddos::detect::env::SHIPPED_CONFIG;
use crate::ddos::{check, BenchLab};
use crate::error::{Error, Result};

/// The export interval (seconds).
pub const EXPORT_S: u32 = 3;

/// The flood's victim: in the protected /24, not this host's address.
const VICTIM: &str = "10.10.0.77";

/// One exporter's run.
#[derive(Debug, Clone, Serialize)]
pub struct ExporterRun {
    /// `ipfix` (softflowd -v 10) or `sflow` (pmacctd sfprobe, 1 in 10).
    pub exporter: String,
    /// Flood start → flow input's `attack_start` for the victim (seconds).
    pub time_to_detect_s: f64,
    /// The vector it named.
    pub vector: String,
}

/// What the flow-input part measured.
#[derive(Debug, Clone, Serialize)]
pub struct FlowInputResult {
    /// The export interval (seconds).
    pub export_interval_s: f64,
    /// The slowest exporter's time to detect (the bar's figure).
    pub time_to_detect_s: f64,
    /// Each exporter.
    pub runs: Vec<ExporterRun>,
}

/// A process in a namespace, killed on drop.
struct Proc(Child);

impl Proc {
    fn spawn(ns: &str, prog: &str, args: &[&str], log: &Path) -> Result<Self> {
        let f = std::fs::File::create(log)
            .map_err(|e| Error::io(format!("creating {}", log.display()), e))?;
        let err = f
            .try_clone()
            .map_err(|e| Error::io(format!("opening {}", log.display()), e))?;
        // A group of its own: pmacctd forks its plugins, which must stop
        // with it.
        let child = Command::new("ip")
            .args(["netns", "exec", ns, prog])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                Error::io(
                    format!("starting {prog} (apt-get install softflowd pmacct)"),
                    e,
                )
            })?;
        Ok(Self(child))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn daemon_config(lab: &rampart_lab::Lab, dir: &Path, sflow: bool, port: u16) -> Result<Config> {
    let mut t: toml::Table = SHIPPED_CONFIG
        .parse()
        .map_err(|e| Error::Invalid(format!("the shipped configuration is not TOML: {e}")))?;
    let mut set = |sec: &str, key: &str, val: toml::Value| {
        if let Some(s) = t
            .entry(sec)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
        {
            s.insert(key.into(), val);
        }
    };
    let addr = format!("127.0.0.1:{port}");
    set("daemon", "iface", HOST_IF.into());
    set("daemon", "netns", lab.host_ns().into());
    set(
        "daemon",
        "state_dir",
        dir.join("state").display().to_string().into(),
    );
    set("server", "listen", "".into());
    set(
        "alerts",
        "file",
        dir.join("alerts.jsonl").display().to_string().into(),
    );
    set("flow_input", "enabled", true.into());
    set("flow_input", "protected", vec!["10.10.0.0/24"].into());
    let (nf, sf): (Vec<&str>, Vec<&str>) = if sflow {
        (vec![], vec![&addr])
    } else {
        (vec![&addr], vec![])
    };
    set("flow_input", "netflow_listen", nf.into());
    set("flow_input", "sflow_listen", sf.into());
    set("flow_input", "netns", lab.up_ns().into());
    set(
        "flow_input",
        "export_interval_s",
        f64::from(EXPORT_S).into(),
    );
    let text = toml::to_string(&t)
        .map_err(|e| Error::Failed(format!("writing the daemon's configuration: {e}")))?;
    std::fs::write(dir.join("rampart-ddos.toml"), &text)
        .map_err(|e| Error::io(format!("writing {}", dir.display()), e))?;
    Ok(Config::parse(&text)?)
}

/// Flow input's `attack_start` vectors for the victim so far.
fn detected(alerts: &Path) -> Option<String> {
    let text = std::fs::read_to_string(alerts).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|a| a["rampart"]["source"] == "flow" && a["rampart"]["event"] == "attack_start")
        .filter(|a| {
            a["dest_ip"] == VICTIM
                || a["rampart"]["victim"]
                    .as_str()
                    .is_some_and(|v| v.trim_end_matches("/32") == VICTIM)
        })
        .find_map(|a| a["rampart"]["vector"].as_str().map(str::to_string))
}

fn one(exporter: &str, dir: &Path, cancel: &AtomicBool) -> Result<ExporterRun> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let lab = BenchLab::up_with(
        &rampart_lab::testing::unique_prefix("bfl"),
        &UpOptions {
            upstream_router: true,
            ..UpOptions::default()
        },
    )?;
    let lab = &lab.lab;
    let port = rampart_dataplane::netns::run_in(Some(&lab.up_ns()), || {
        Ok(std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .unwrap_or(0))
    })?;
    let sflow = exporter == "sflow";
    let h = Handle::spawn(daemon_config(lab, dir, sflow, port)?)?;
    let dest = format!("127.0.0.1:{port}");
    let _exporter = if sflow {
        let conf = dir.join("pmacctd.conf");
        std::fs::write(
            &conf,
            format!(
                "daemonize: false\npcap_interface: {UP_WAN_IF}\nplugins: sfprobe\n\
                 sfprobe_receiver: {dest}\nsfprobe_agentip: 10.99.0.1\nsampling_rate: 10\n"
            ),
        )
        .map_err(|e| Error::io(format!("writing {}", conf.display()), e))?;
        Proc::spawn(
            &lab.up_ns(),
            "pmacctd",
            &["-f", &conf.to_string_lossy()],
            &dir.join("pmacctd.log"),
        )?
    } else {
        let t = |k: &str| format!("{k}={EXPORT_S}");
        let (ml, ge, tc, ud) = (t("maxlife"), t("general"), t("tcp"), t("udp"));
        // A control socket of its own: the default path is shared by every
        // softflowd on the machine, and a second one exits on finding it.
        let ctl = dir.join("softflowd.ctl").to_string_lossy().into_owned();
        let pid = dir.join("softflowd.pid").to_string_lossy().into_owned();
        Proc::spawn(
            &lab.up_ns(),
            "softflowd",
            &[
                "-d", "-i", UP_WAN_IF, "-n", &dest, "-v", "10", "-m", "65536", "-c", &ctl, "-p",
                &pid, "-t", &ml, "-t", "expint=1", "-t", &ge, "-t", &tc, "-t", &ud,
            ],
            &dir.join("softflowd.log"),
        )?
    };
    // The exporter is up when it has sent its first datagram (templates,
    // counters) or after 3 s.
    let t_up = Instant::now();
    while t_up.elapsed() < Duration::from_secs(3) {
        check(cancel)?;
        let seen = h
            .view()
            .flow_input
            .is_some_and(|f| f.exporters.iter().any(|e| e.records > 0 || e.errors > 0));
        if seen {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let spec = GenSpec {
        sources: 64,
        proto: Proto::Syn,
        pps: Some(5000.0),
        limit: Limit::Seconds(600.0),
        dst: Some(VICTIM.parse().map_err(|e| Error::Invalid(format!("{e}")))?),
        ..GenSpec::default()
    };
    let gen = Generator::new(lab, &spec)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let t0 = Instant::now();
    let flood = std::thread::spawn(move || gen.run(&stop2));
    let alerts = dir.join("alerts.jsonl");
    let found = (|| -> Result<Option<(f64, String)>> {
        while t0.elapsed() < Duration::from_secs(120) {
            check(cancel)?;
            if let Some(v) = detected(&alerts) {
                return Ok(Some((t0.elapsed().as_secs_f64(), v)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(None)
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = flood.join();
    let stopped = h.stop();
    let found = found?;
    stopped?;
    let Some((time_to_detect_s, vector)) = found else {
        return Err(Error::Failed(format!(
            "flow input from {exporter} did not detect the flood on {VICTIM} within 120 s (alerts in {})",
            alerts.display()
        )));
    };
    Ok(ExporterRun {
        exporter: exporter.into(),
        time_to_detect_s,
        vector,
    })
}

/// Run the flow-input part (IPFIX, then sFlow), files in `dir`.
///
/// # Errors
/// A lab, exporter or daemon that does not start; no detection within
/// 120 s; Ctrl-C.
pub fn measure(dir: &Path, cancel: &AtomicBool) -> Result<FlowInputResult> {
    let mut runs = Vec::new();
    for e in ["ipfix", "sflow"] {
        runs.push(one(e, &dir.join(e), cancel)?);
    }
    let time_to_detect_s = runs.iter().map(|r| r.time_to_detect_s).fold(0.0, f64::max);
    Ok(FlowInputResult {
        export_interval_s: f64::from(EXPORT_S),
        time_to_detect_s,
        runs,
    })
}
