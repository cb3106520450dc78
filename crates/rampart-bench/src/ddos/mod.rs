//! Benchmarks of rampart ddos, each in a lab of its own.
//!
//! - [`filter`]: drop rate of the blacklist against bare XDP_DROP and the
//!   peers (nftables set, iptables rules, xdp-filter), alternated
//!   repetitions, medians;
//! - [`detect`]: the detection scenario suite (real tools, the shipped
//!   configuration, ground truth from the harness);
//! - [`features`]: time to read one feature interval;
//! - [`update`]: blacklist updates of up to 1M entries under a flood;
//! - [`experiments`]: the four figures of the placement modes (drop rate,
//!   CPU, requests/s under attack, hybrid offload quality);
//! - [`peers`]: the peers the blacklist is measured against;
//! - [`soak`]: the daemon for N minutes under the demo's mix (memory,
//!   maps, loop jitter, errors, leaks).

pub mod detect;
pub mod experiments;
pub mod features;
pub mod filter;
pub mod peers;
pub mod soak;
pub mod update;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use rampart_ddosd::Config;
use rampart_lab::topology::UpOptions;
use rampart_lab::Lab;

use crate::error::{Error, Result};

/// A lab brought up for one benchmark and removed when dropped.
#[derive(Debug)]
pub struct BenchLab {
    /// The lab.
    pub lab: Lab,
}

impl BenchLab {
    /// Bring up a lab with a unique prefix starting with `tag`.
    ///
    /// # Errors
    /// Lab errors (the partial lab is removed).
    pub fn up(tag: &str) -> Result<Self> {
        Self::up_with(
            &rampart_lab::testing::unique_prefix(tag),
            &UpOptions::default(),
        )
    }

    /// Bring up a lab named `prefix` with `opts` (e.g. the EMULATED NIC's K).
    ///
    /// # Errors
    /// Lab errors (the partial lab is removed).
    pub fn up_with(prefix: &str, opts: &UpOptions) -> Result<Self> {
        let lab = Lab::new(prefix)?;
        if let Err(e) = lab.up(opts) {
            let _ = lab.down();
            return Err(e.into());
        }
        Ok(Self { lab })
    }
}

impl Drop for BenchLab {
    fn drop(&mut self) {
        // A daemon that ran here leaves its filter pinned (a stopped
        // daemon keeps filtering); the pins outlive the namespace.
        if let Ok(scope) = rampart_ddos::filter::Scope::new(
            Some(&self.lab.host_ns()),
            rampart_lab::topology::HOST_IF,
        ) {
            let _ = rampart_ddos::filter::Filter::detach(&scope.name());
        }
        if let Err(e) = self.lab.down() {
            tracing::warn!("removing bench lab {}: {e}", self.lab.prefix());
        }
    }
}

/// The daemon as the demo and `rampart bench ddos` run it in `lab`:
/// `hw+xdp-host` on the lab's `host0` with its EMULATED NIC as the
/// hardware tier (the NIC hop `nic-wan`; K = `nic_capacity`, 2 ms per
/// update), no API, alerts and state in `dir`, detection as shipped but
/// for a shorter unban hold (why: the comment in the text).
///
/// # Errors
/// Out-of-range values ([`Config::parse`]).
pub fn lab_config(
    lab: &Lab,
    interval_s: f64,
    hold_s: f64,
    nic_capacity: u32,
    dir: &std::path::Path,
) -> Result<Config> {
    let (nic_ns, nic_if) = rampart_lab::nic::hop(lab);
    let text = format!(
        r#"
[server]
listen = ""

[daemon]
mode = "hw+xdp-host"
iface = "{iface}"
netns = "{host}"
interval_s = {interval}
state_dir = "{dir}"

[alerts]
file = "{alerts}"

[filter]
max_entries = 65536
max_prefixes = 4096
features_capacity = 65536

# The NIC hop: the EMULATED NIC's side facing the wire.
[hw]
backend = "emulated"
netns = "{nic_ns}"
iface = "{nic_if}"
update_delay_ms = 2

# Detection runs as shipped; only the unban hold is
# shortened so that the demo's run shows sources being unbanned.
[detect]
hold_s = {hold}

[offload]
capacity = {k}
max_updates = 64
host_capacity_pps = 1000000
"#,
        iface = rampart_lab::topology::HOST_IF,
        host = lab.host_ns(),
        nic_ns = nic_ns,
        nic_if = nic_if,
        interval = interval_s,
        alerts = dir.join("alerts.jsonl").display(),
        dir = dir.display(),
        hold = hold_s,
        k = nic_capacity,
    );
    Ok(Config::parse(&text)?)
}

/// The NIC hop of `lab` (its EMULATED NIC's side facing the wire), as the
/// daemon's config names it.
pub fn nic_hop(lab: &Lab) -> rampart_ddosd::config::NicHop {
    let (netns, iface) = rampart_lab::nic::hop(lab);
    rampart_ddosd::config::NicHop {
        netns: Some(netns),
        iface: iface.to_string(),
    }
}

/// Median of a sample (mean of the middle two for even sizes); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Fail with [`Error::Interrupted`] once `cancel` is set.
///
/// # Errors
/// [`Error::Interrupted`].
pub fn check(cancel: &AtomicBool) -> Result<()> {
    if cancel.load(Ordering::Relaxed) {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// Run a command, optionally feeding `stdin`; stdout on success.
///
/// # Errors
/// [`Error::Command`] with its stderr (or a hint to install the tool).
pub fn run_cmd(prog: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<String> {
    use std::io::Write;
    let line = format!("{prog} {}", args.join(" "));
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(std::process::Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(|e| Error::Command {
        cmd: line.clone(),
        stderr: if e.kind() == std::io::ErrorKind::NotFound {
            format!("{prog} is not installed (./run deps installs the benchmark peers)")
        } else {
            e.to_string()
        },
    })?;
    if let Some(data) = stdin {
        if let Some(mut si) = child.stdin.take() {
            si.write_all(data)
                .map_err(|e| Error::io(format!("writing to {prog}"), e))?;
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::io(format!("waiting for {prog}"), e))?;
    if !out.status.success() {
        let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if stderr.len() > 400 {
            stderr.truncate(400);
            stderr.push('…');
        }
        return Err(Error::Command {
            cmd: truncate_line(&line),
            stderr,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn truncate_line(s: &str) -> String {
    if s.len() > 200 {
        format!("{}…", &s[..200])
    } else {
        s.to_string()
    }
}

/// Frames the XDP program of `iface` (in `ns`) dropped, from the veth
/// driver's per-queue counters (`rx_queue_<n>_xdp_drops`): the counting
/// point every XDP variant shares.
///
/// # Errors
/// A failing `ethtool`.
pub fn veth_xdp_drops(ns: &str, iface: &str) -> Result<u64> {
    let out = run_cmd("ip", &["netns", "exec", ns, "ethtool", "-S", iface], None)?;
    Ok(parse_veth_xdp_drops(&out))
}

/// Sum of the `rx_queue_<n>_xdp_drops` lines of `ethtool -S` on a veth.
pub fn parse_veth_xdp_drops(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.trim().split_once(": "))
        .filter(|(k, _)| k.starts_with("rx_queue_") && k.ends_with("_xdp_drops"))
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_config_is_the_demos() {
        let lab = Lab::new("cfgt").unwrap();
        let c = lab_config(&lab, 0.2, 22.0, 512, std::path::Path::new("/tmp/x")).unwrap();
        assert_eq!(c.daemon.mode, rampart_ddosd::Mode::HwXdpHost);
        assert_eq!(c.daemon.netns.as_deref(), Some("cfgt-host"));
        assert_eq!((c.daemon.interval_s, c.detect.hold_s), (0.2, 22.0));
        assert_eq!(c.offload.capacity, 512);
        assert_eq!(c.detect.floors, Default::default(), "detection as shipped");
        assert_eq!(c.server.listen.as_deref(), Some(""));
        assert_eq!(c.hw.backend, "emulated");
        assert_eq!(c.nic_hop().to_string(), "nic-wan (netns cfgt-nic)");
        c.require_runnable().unwrap();
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[f64::NAN, 1.0]), 1.0);
    }

    #[test]
    fn veth_xdp_drops_sum_every_queue() {
        // `ethtool -S` of a veth (kernel 6.18), two queues.
        let t = "NIC statistics:
     peer_ifindex: 2
     rx_queue_0_xdp_packets: 900
     rx_queue_0_drops: 3
     rx_queue_0_xdp_drops: 800
     rx_queue_0_xdp_tx: 0
     rx_queue_1_xdp_drops: 40
     tx_queue_0_xdp_xmit: 5
";
        assert_eq!(parse_veth_xdp_drops(t), 840);
    }
}
