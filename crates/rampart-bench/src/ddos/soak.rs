//! `rampart bench soak`: the daemon for N minutes under the demo's traffic
//! mix, watched from outside.
//!
//! The environment is the detection suite's ([`super::detect::env::Env`]):
//! a lab of its own, nginx on `host`, the daemon as a process (`rampart
//! ddos run`) on the configuration shipped in `dist/rampart-ddos.toml`
//! with only the lab wiring changed. wrk keeps 8 connections to nginx for
//! the whole run; the demo's attack (a UDP flood and a SYN flood from
//! thousands of spoofed sources with Zipf rates, the lab generator) comes
//! in cycles of [`ATTACK_S`] on, [`QUIET_S`] off, so that the run goes
//! through detection, blocking, the end of attacks and unbans again and
//! again.
//!
//! What is measured, every [`SAMPLE_S`]:
//! - the daemon's RSS (`/proc/<pid>/status`);
//! - map occupancy: blacklist and policing entries read from the pinned
//!   maps, and the feature stage's pair and victim records of the last
//!   interval, and the victims detection follows (`GET /v1/status`);
//! - loop interval jitter: every interval's measured length (the daemon
//!   keeps the last 64 in `GET /v1/status`, read every [`TICK_S`], so none
//!   is missed) against the configured `interval_s`;
//! - errors: daemon log lines at WARN or ERROR, and API requests that
//!   failed;
//! - leaked: packets of blocked attack sources that reached the host's
//!   stack. The harness mirrors the daemon's blacklist (`GET /v1/blocked`,
//!   every [`TICK_S`]) into an nftables set on host0's ingress (after XDP)
//!   and counts the packets from the attack range whose source is in it.
//!   A source enters the set only after the daemon reported it blocked,
//!   so every packet counted passed XDP after its block.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rampart_ddos::filter::{Filter, Scope};
use rampart_lab::dist::Dist;
use rampart_lab::gen::GenSpec;
use rampart_lab::packet::Proto;
use rampart_lab::topology::{GEN_ANCHOR_IF, HOST_IF};
use rampart_lab::web::Wrk;
use serde::Serialize;

use super::detect::env::{api_get, Env, GenRun};
use super::run_cmd;
use crate::error::{Error, Result};
use crate::out::print_json;

/// Seconds of wrk alone before the first attack (the daemon learns normal traffic).
pub const WARM_S: f64 = 30.0;
/// Seconds each attack lasts.
pub const ATTACK_S: f64 = 60.0;
/// Seconds between attacks: long enough for the shipped `attack_end_s`
/// (30 s) and `hold_s` (60 s) to end the attack and unban its sources.
pub const QUIET_S: f64 = 120.0;
/// Seconds between samples of RSS, maps and counters.
pub const SAMPLE_S: f64 = 5.0;
/// Seconds between reads of the daemon's blacklist and loop intervals.
pub const TICK_S: f64 = 0.5;
/// The generator's sources (the attack range).
const ATTACK_NET: &str = "172.16.0.0/12";
const URL: &str = "http://10.10.0.2/";
const WRK_CONNS: u32 = 8;

/// What `rampart bench soak` runs.
#[derive(Debug, Clone)]
pub struct SoakSpec {
    /// Minutes the daemon runs under the mix.
    pub minutes: f64,
    /// UDP flood, packets/s (paced), 4000 sources.
    pub udp_pps: f64,
    /// SYN flood on port 80, packets/s (paced), 2000 sources.
    pub syn_pps: f64,
    /// One JSON object on stdout.
    pub json: bool,
    /// Directory for summary.json, samples.jsonl, the daemon's log and config.
    pub out: Option<PathBuf>,
    /// The `rampart` binary that runs the daemon.
    pub rampart_bin: PathBuf,
}

/// One sample.
#[derive(Debug, Clone, Serialize)]
pub struct SoakSample {
    /// Seconds since the daemon started.
    pub t: f64,
    /// Daemon RSS (kB).
    pub rss_kb: u64,
    /// Blacklist entries (pinned map).
    pub blacklist: usize,
    /// Policing entries (pinned map).
    pub policed: usize,
    /// Pair records of the last feature interval.
    pub feature_pairs: usize,
    /// Victim records of the last feature interval.
    pub feature_victims: usize,
    /// Victims detection follows.
    pub victims: usize,
    /// Intervals the daemon ran.
    pub intervals: u64,
    /// Leaked packets so far.
    pub leaked: u64,
    /// Errors so far (log lines at WARN/ERROR + failed API requests).
    pub errors: u64,
    /// The attack generator is sending.
    pub attack: bool,
}

/// Largest map occupancy seen.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MapsMax {
    /// Blacklist entries.
    pub blacklist: usize,
    /// Policing entries.
    pub policed: usize,
    /// Pair records in one feature interval.
    pub feature_pairs: usize,
    /// Victim records in one feature interval.
    pub feature_victims: usize,
    /// Victims detection follows.
    pub victims: usize,
}

/// Loop interval jitter: |measured interval − configured interval|, ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Jitter {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Intervals measured.
    pub intervals: usize,
}

/// The report (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// Minutes asked for.
    pub minutes: f64,
    /// Seconds the daemon actually ran under the mix.
    pub duration_s: f64,
    /// RSS at the first sample (kB).
    pub rss_start_kb: u64,
    /// RSS at the reference point `rss_growth_from_s` (kB).
    pub rss_ref_kb: u64,
    /// RSS at the end (kB).
    pub rss_end_kb: u64,
    /// Largest RSS (kB).
    pub rss_max_kb: u64,
    /// (rss_end − rss_ref) / rss_ref, %.
    pub rss_growth_pct: f64,
    /// Where growth is measured from (seconds after start).
    pub rss_growth_from_s: f64,
    /// Which rule chose that point.
    pub rss_growth_basis: &'static str,
    /// Largest occupancy of each map.
    pub maps_max: MapsMax,
    /// The configured loop interval (s).
    pub interval_s: f64,
    /// Loop interval jitter (ms).
    pub jitter_ms: Jitter,
    /// log_errors + api_failures.
    pub errors: u64,
    /// Daemon log lines at WARN or ERROR.
    pub log_errors: u64,
    /// API requests that failed (status and blacklist reads).
    pub api_failures: u64,
    /// The first log lines at WARN or ERROR (at most 10).
    pub error_lines: Vec<String>,
    /// Packets of blocked attack sources that reached the host's stack.
    pub leaked: u64,
    /// Attack packets sent.
    pub attack_packets: u64,
    /// Attack cycles started.
    pub attack_cycles: u32,
    /// Sources blocked since start / unbanned since start (daemon's counters).
    pub blocked_total: u64,
    /// Sources unbanned since start.
    pub unbanned_total: u64,
    /// wrk over the whole run: requests/s and socket errors.
    pub wrk_rps: f64,
    /// wrk socket errors and timeouts.
    pub wrk_errors: u64,
    /// Flood rates (pps): UDP, SYN.
    pub attack_pps: (f64, f64),
    /// Attack on / off seconds of a cycle; warm-up seconds.
    pub cycle_s: (f64, f64),
    /// Seconds of wrk alone first.
    pub warm_s: f64,
    /// Samples taken.
    pub samples: usize,
    /// The bar: leaked 0, errors 0, rss_growth_pct < 10.
    pub pass: bool,
    /// Unix time of the start.
    pub started_unix: f64,
}

fn nft_ruleset() -> String {
    format!(
        r#"table netdev rsoak {{
  set blocked4 {{ type ipv4_addr; flags interval; auto-merge; }}
  counter leaked {{ }}
  chain in {{
    type filter hook ingress device "{HOST_IF}" priority -400; policy accept;
    ip saddr {ATTACK_NET} ip saddr @blocked4 counter name "leaked"
  }}
}}
"#
    )
}

/// The nft transaction that makes the mirror set exactly `blocked` (IPv4
/// prefixes; the generator's attack is IPv4 only).
fn nft_sync(blocked: &BTreeSet<String>) -> String {
    let mut s = String::from("flush set netdev rsoak blocked4\n");
    let v4: Vec<&str> = blocked
        .iter()
        .filter(|p| !p.contains(':'))
        .map(String::as_str)
        .collect();
    if !v4.is_empty() {
        s.push_str(&format!(
            "add element netdev rsoak blocked4 {{ {} }}\n",
            v4.join(", ")
        ));
    }
    s
}

/// `nft -j list counter netdev rsoak leaked` → packets.
fn parse_leaked(json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v["nftables"]
        .as_array()?
        .iter()
        .find_map(|o| o["counter"]["packets"].as_u64())
}

/// VmRSS of `pid` in kB.
fn rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ … final byte in @..~
            for d in it.by_ref() {
                if ('@'..='~').contains(&d) && d != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The daemon's log lines at WARN or ERROR (tracing's fmt layout, with or without colours).
pub fn error_lines(log: &str) -> Vec<String> {
    log.lines()
        .map(strip_ansi)
        .filter(|l| {
            l.split_whitespace()
                .take(3)
                .any(|w| w == "WARN" || w == "ERROR")
        })
        .collect()
}

/// Nearest-rank percentile of a sorted slice.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

fn jitter(intervals: &[f64], interval_s: f64) -> Jitter {
    let mut d: Vec<f64> = intervals
        .iter()
        .map(|x| (x - interval_s).abs() * 1000.0)
        .collect();
    d.sort_by(f64::total_cmp);
    Jitter {
        p50: pct(&d, 50.0),
        p99: pct(&d, 99.0),
        max: d.last().copied().unwrap_or(0.0),
        intervals: d.len(),
    }
}

/// Where RSS growth is measured from: 5 minutes in, or a third of the run when it is shorter than 15 minutes.
fn growth_from(minutes: f64) -> (f64, &'static str) {
    if minutes >= 15.0 {
        (300.0, "after the first 5 minutes")
    } else {
        (
            minutes * 60.0 / 3.0,
            "after the first third (run shorter than 15 minutes)",
        )
    }
}

/// The generator phases of a run of `total` seconds: warm-up, then attack/quiet cycles.
fn phases(total: f64, pps: f64) -> (Vec<(f64, Option<f64>)>, u32) {
    let mut v = vec![(WARM_S.min(total), None)];
    let mut t = WARM_S;
    let mut cycles = 0;
    while t < total {
        let on = ATTACK_S.min(total - t);
        v.push((on, Some(pps)));
        cycles += 1;
        t += on;
        if t < total {
            let off = QUIET_S.min(total - t);
            v.push((off, None));
            t += off;
        }
    }
    (v, cycles)
}

fn attacking(t: f64) -> bool {
    t >= WARM_S && (t - WARM_S) % (ATTACK_S + QUIET_S) < ATTACK_S
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Run the soak and print its report (human lines, or one JSON object).
/// The lab and everything in it are removed at the end, also on error and Ctrl-C.
///
/// # Errors
/// Settings out of range, lab/daemon/tool failures, [`Error::Interrupted`].
pub fn run_and_print(spec: &SoakSpec, cancel: &AtomicBool) -> Result<SoakReport> {
    if !(spec.minutes >= 1.0 && spec.minutes <= 24.0 * 60.0) {
        return Err(Error::Invalid(format!(
            "--minutes {} is out of range: pick 1 to 1440 (10 for the bar, 60 or more for the recorded run)",
            spec.minutes
        )));
    }
    if !(spec.udp_pps > 0.0 && spec.syn_pps > 0.0) {
        return Err(Error::Invalid(
            "--udp-pps and --syn-pps must be positive".into(),
        ));
    }
    for p in ["nginx", "wrk", "nft"] {
        if !rampart_lab::web::have(p) {
            return Err(Error::Invalid(format!(
                "the soak needs {p}: install it (`./run deps` installs the benchmark tools)"
            )));
        }
    }
    let prefix = rampart_lab::testing::unique_prefix("soak");
    let dir = std::env::temp_dir().join(format!("rampart-soak-{prefix}"));
    let _ = std::fs::remove_dir_all(&dir);
    let r = soak(spec, &prefix, &dir, cancel);
    if let (Some(out), Ok(_)) = (&spec.out, &r) {
        std::fs::create_dir_all(out)
            .map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
        for f in ["daemon.log", "rampart-ddos.toml", "samples.jsonl"] {
            let _ = std::fs::copy(dir.join(f), out.join(f));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let r = r?;
    if let Some(out) = &spec.out {
        let p = out.join("summary.json");
        let text = serde_json::to_string_pretty(&r)
            .map_err(|e| Error::Failed(format!("JSON output: {e}")))?;
        std::fs::write(&p, text + "\n")
            .map_err(|e| Error::io(format!("writing {}", p.display()), e))?;
    }
    if spec.json {
        print_json(&r)?;
    } else {
        println!(
            "{:.0} min: RSS {} → {} kB ({:+.1} % {}), jitter p50/p99/max {:.1}/{:.1}/{:.1} ms, errors {}, leaked {} of {} attack packets, {} blocked / {} unbanned — {}",
            r.minutes,
            r.rss_ref_kb,
            r.rss_end_kb,
            r.rss_growth_pct,
            r.rss_growth_basis,
            r.jitter_ms.p50,
            r.jitter_ms.p99,
            r.jitter_ms.max,
            r.errors,
            r.leaked,
            r.attack_packets,
            r.blocked_total,
            r.unbanned_total,
            if r.pass { "PASS" } else { "FAIL" }
        );
        for l in &r.error_lines {
            println!("  {l}");
        }
    }
    Ok(r)
}

fn soak(spec: &SoakSpec, prefix: &str, dir: &Path, cancel: &AtomicBool) -> Result<SoakReport> {
    let total = spec.minutes * 60.0;
    let mut env = Env::up(prefix, dir, &spec.rampart_bin, &[])?;
    let host = env.lab.host_ns();
    run_cmd(
        "ip",
        &["netns", "exec", &host, "nft", "-f", "-"],
        Some(nft_ruleset().as_bytes()),
    )?;
    env.start_daemon()?;
    let started_unix = unix_now();
    let pid = env
        .daemon
        .as_ref()
        .and_then(super::detect::env::Daemon::pid)
        .ok_or_else(|| Error::Failed("the daemon has no process id".into()))?;
    let api = env
        .daemon
        .as_ref()
        .map(|d| d.api())
        .ok_or_else(|| Error::Failed("the daemon is not running".into()))?;
    let scope = Scope::new(Some(&host), HOST_IF)?.name();
    let filter = Filter::open(&scope)?;
    let interval_s = api_get(api, "/v1/status")
        .and_then(|v| v["interval_s"].as_f64())
        .ok_or_else(|| Error::Failed("the daemon's status has no interval_s".into()))?;

    let wrk = Wrk::spawn(&env.lab.wan_ns(), URL, total, WRK_CONNS, None)?;
    let (udp_phases, cycles) = phases(total, spec.udp_pps);
    let (syn_phases, _) = phases(total, spec.syn_pps);
    let udp = GenSpec {
        sources: 4000,
        dist: Dist::Zipf { s: 1.0 },
        proto: Proto::Udp,
        size: 512,
        seed: 11,
        ..GenSpec::default()
    };
    let syn = GenSpec {
        sources: 2000,
        dist: Dist::Zipf { s: 1.0 },
        proto: Proto::Syn,
        seed: 12,
        ..GenSpec::default()
    };
    let gu = GenRun::start(&env.lab, &udp, udp_phases, GEN_ANCHOR_IF)?;
    let gs = GenRun::start(&env.lab, &syn, syn_phases, "gen-anchor-p")?;

    let log_path = dir.join("daemon.log");
    let mut samples_file = std::fs::File::create(dir.join("samples.jsonl"))
        .map_err(|e| Error::io("creating samples.jsonl", e))?;
    let mut samples: Vec<SoakSample> = Vec::new();
    let mut intervals: Vec<f64> = Vec::new();
    let mut last_intervals: Option<u64> = None;
    let mut mirror: BTreeSet<String> = BTreeSet::new();
    let mut api_failures = 0u64;
    let mut maps = MapsMax::default();
    let (mut blocked_total, mut unbanned_total) = (0, 0);
    let t0 = Instant::now();
    let mut next_sample = 0.0;
    let mut interrupted = false;
    while t0.elapsed().as_secs_f64() < total {
        if cancel.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let tick = Instant::now();
        // The blacklist mirror first: the sooner a block is in the set, the more of a leak is seen.
        match api_get(api, "/v1/blocked").and_then(|v| {
            v.as_array().map(|a| {
                a.iter()
                    .filter_map(|b| b["prefix"].as_str().map(str::to_string))
                    .collect::<BTreeSet<String>>()
            })
        }) {
            Some(now) if now != mirror => {
                run_cmd(
                    "ip",
                    &["netns", "exec", &host, "nft", "-f", "-"],
                    Some(nft_sync(&now).as_bytes()),
                )?;
                mirror = now;
            }
            Some(_) => {}
            None => api_failures += 1,
        }
        let status = api_get(api, "/v1/status");
        match &status {
            Some(s) => {
                let n = s["intervals"].as_u64().unwrap_or(0);
                let recent: Vec<f64> = s["recent_intervals_s"]
                    .as_array()
                    .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                    .unwrap_or_default();
                let new = match last_intervals {
                    // The first read: every interval so far is in the window or lost to it alike.
                    None => 0,
                    Some(prev) => n.saturating_sub(prev) as usize,
                };
                intervals.extend(recent.iter().skip(recent.len().saturating_sub(new)));
                last_intervals = Some(n);
                blocked_total = s["blocked_total"].as_u64().unwrap_or(blocked_total);
                unbanned_total = s["unbanned_total"].as_u64().unwrap_or(unbanned_total);
            }
            None => api_failures += 1,
        }
        let t = t0.elapsed().as_secs_f64();
        if t >= next_sample {
            next_sample += SAMPLE_S;
            let rss = rss_kb(pid).ok_or_else(|| {
                Error::Failed(format!(
                    "the daemon (pid {pid}) is gone; its log: {}",
                    log_path.display()
                ))
            })?;
            let blacklist = filter.entries()?.len();
            let policed = filter.policed()?.len();
            let out = run_cmd(
                "ip",
                &[
                    "netns", "exec", &host, "nft", "-j", "list", "counter", "netdev", "rsoak",
                    "leaked",
                ],
                None,
            )?;
            let leaked = parse_leaked(&out).unwrap_or(0);
            let log_errors =
                error_lines(&std::fs::read_to_string(&log_path).unwrap_or_default()).len() as u64;
            let g = |k: &str| status.as_ref().and_then(|s| s[k].as_u64()).unwrap_or(0) as usize;
            let s = SoakSample {
                t,
                rss_kb: rss,
                blacklist,
                policed,
                feature_pairs: g("feature_pairs"),
                feature_victims: g("feature_victims"),
                victims: g("victims"),
                intervals: last_intervals.unwrap_or(0),
                leaked,
                errors: log_errors + api_failures,
                attack: attacking(t),
            };
            maps.blacklist = maps.blacklist.max(s.blacklist);
            maps.policed = maps.policed.max(s.policed);
            maps.feature_pairs = maps.feature_pairs.max(s.feature_pairs);
            maps.feature_victims = maps.feature_victims.max(s.feature_victims);
            maps.victims = maps.victims.max(s.victims);
            use std::io::Write;
            let line = serde_json::to_string(&s)
                .map_err(|e| Error::Failed(format!("JSON output: {e}")))?;
            writeln!(samples_file, "{line}").map_err(|e| Error::io("writing samples.jsonl", e))?;
            if !spec.json {
                println!(
                    "t={:>5.0}s rss={} kB blacklist={} policed={} pairs={} victims={} leaked={} errors={}{}",
                    s.t, s.rss_kb, s.blacklist, s.policed, s.feature_pairs, s.victims, s.leaked, s.errors,
                    if s.attack { " (attack)" } else { "" }
                );
            }
            samples.push(s);
        }
        let left = Duration::from_secs_f64(TICK_S).saturating_sub(tick.elapsed());
        std::thread::sleep(left);
    }
    let duration_s = t0.elapsed().as_secs_f64();
    let attack_packets = gu.finish()? + gs.finish()?;
    let w = if interrupted {
        None
    } else {
        Some(wrk.finish()?)
    };
    env.stop_daemon();
    if interrupted {
        return Err(Error::Interrupted);
    }
    let w = w.unwrap_or(rampart_lab::web::WrkResult {
        requests: 0,
        seconds: 1.0,
        errors: 0,
    });
    // The stop's own lines count too: a clean stop logs nothing at WARN.
    let lines = error_lines(&std::fs::read_to_string(&log_path).unwrap_or_default());
    let last = samples
        .last()
        .cloned()
        .ok_or_else(|| Error::Failed("no sample was taken".into()))?;
    let (from, basis) = growth_from(spec.minutes);
    let rss_ref = samples
        .iter()
        .find(|s| s.t >= from)
        .map_or(last.rss_kb, |s| s.rss_kb);
    let rss_growth_pct = 100.0 * (last.rss_kb as f64 - rss_ref as f64) / rss_ref.max(1) as f64;
    let errors = lines.len() as u64 + api_failures;
    let leaked = last.leaked;
    Ok(SoakReport {
        minutes: spec.minutes,
        duration_s,
        rss_start_kb: samples.first().map_or(0, |s| s.rss_kb),
        rss_ref_kb: rss_ref,
        rss_end_kb: last.rss_kb,
        rss_max_kb: samples.iter().map(|s| s.rss_kb).max().unwrap_or(0),
        rss_growth_pct,
        rss_growth_from_s: from,
        rss_growth_basis: basis,
        maps_max: maps,
        interval_s,
        jitter_ms: jitter(&intervals, interval_s),
        errors,
        log_errors: lines.len() as u64,
        api_failures,
        error_lines: lines.into_iter().take(10).collect(),
        leaked,
        attack_packets,
        attack_cycles: cycles,
        blocked_total,
        unbanned_total,
        wrk_rps: w.rps(),
        wrk_errors: w.errors,
        attack_pps: (spec.udp_pps, spec.syn_pps),
        cycle_s: (ATTACK_S, QUIET_S),
        warm_s: WARM_S,
        samples: samples.len(),
        pass: leaked == 0 && errors == 0 && rss_growth_pct < 10.0,
        started_unix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_are_read_with_and_without_colours() {
        let log = "\u{1b}[2m2026-11-24T17:00:00.1Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mrampart_ddosd::daemon\u{1b}[0m\u{1b}[2m:\u{1b}[0m interval failed: x\n\
                   2026-11-24T17:00:00.2Z ERROR rampart: boom\n\
                   2026-11-24T17:00:00.3Z  INFO rampart: WARN in a message is not a level\n\
                   listening on 127.0.0.1:9477\n";
        let l = error_lines(log);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l[0].ends_with("interval failed: x"), "{}", l[0]);
    }

    #[test]
    fn jitter_is_the_distance_from_the_interval() {
        let j = jitter(&[0.5, 0.501, 0.499, 0.52], 0.5);
        assert_eq!(j.intervals, 4);
        assert!((j.max - 20.0).abs() < 1e-6);
        assert!((j.p50 - 1.0).abs() < 1e-6, "{j:?}");
        assert_eq!(jitter(&[], 0.5).p99, 0.0);
    }

    #[test]
    fn phases_fill_the_run_with_cycles() {
        let (p, n) = phases(600.0, 10.0);
        let total: f64 = p.iter().map(|x| x.0).sum();
        assert!((total - 600.0).abs() < 1e-9);
        assert_eq!(n, 4);
        assert_eq!(p[0], (WARM_S, None));
        assert_eq!(p[1], (ATTACK_S, Some(10.0)));
        assert!(attacking(WARM_S + 1.0) && !attacking(WARM_S + ATTACK_S + 1.0));
        assert!(!attacking(1.0));
    }

    #[test]
    fn growth_is_measured_after_warm_up() {
        assert_eq!(growth_from(60.0).0, 300.0);
        assert_eq!(growth_from(10.0).0, 200.0);
    }

    #[test]
    fn the_mirror_is_replaced_in_one_transaction() {
        let b: BTreeSet<String> = ["172.16.0.1/32", "172.16.1.0/24", "fd00::1/128"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            nft_sync(&b),
            "flush set netdev rsoak blocked4\nadd element netdev rsoak blocked4 { 172.16.0.1/32, 172.16.1.0/24 }\n"
        );
        assert_eq!(
            nft_sync(&BTreeSet::new()),
            "flush set netdev rsoak blocked4\n"
        );
        let j = r#"{"nftables": [{"metainfo": {}}, {"counter": {"family": "netdev", "name": "leaked", "table": "rsoak", "handle": 1, "packets": 7, "bytes": 0}}]}"#;
        assert_eq!(parse_leaked(j), Some(7));
    }
}
