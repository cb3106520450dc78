//! The upstream tier end to end: a lab whose wire runs through the
//! EMULATED upstream router (BIRD 2 in a bridge, what BIRD learns mapped
//! to nftables by the lab), ExaBGP beside the daemon, and the daemon on
//! the shipped configuration with `[upstream]` turned on. A reflection
//! flood (NTP, hundreds of reflectors) is detected and blocked at the
//! host; its blocked volume against the link the bench declares engages
//! the tier, which announces FlowSpec rules for the reflectors and an
//! RTBH route for the victim. The bench reads BIRD's tables (what the
//! router has), the router's drop counters against the host link's
//! receive counter (what it stops), and, after the flood, that every
//! route is withdrawn.
//!
//! The lab's link has no real capacity (a veth): the bench declares one
//! (`link_capacity_pps`, below the flood's rate) in the daemon's config,
//! as an operator declares the real link's.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_ddosd::{Config, Handle};
use rampart_lab::bgp::{BgpLab, HOST_ADDR};
use rampart_lab::gen::{iface_rx_packets, GenSpec, Generator, Limit};
use rampart_lab::router::{parse_routes, RouterRule};
use rampart_lab::topology::{UpOptions, HOST_IF};
use serde::Serialize;

use crate::ddos::detect::env::SHIPPED_CONFIG;
use crate::ddos::{check, BenchLab};
use crate::error::{Error, Result};

/// The attack and the declared link.
#[derive(Debug, Clone, Serialize)]
pub struct BgpSpec {
    /// Reflectors (distinct sources, source port 123).
    pub reflectors: u32,
    /// The flood's rate (packets/s, all reflectors).
    pub pps: f64,
    /// Frame size (bytes).
    pub size: usize,
    /// The link capacity the daemon's config declares (packets/s).
    pub link_capacity_pps: f64,
    /// Seconds the blocked volume must stay low before the tier withdraws.
    pub hold_s: f64,
}

impl Default for BgpSpec {
    fn default() -> Self {
        Self {
            reflectors: 300,
            pps: 20_000.0,
            size: 1200,
            link_capacity_pps: 10_000.0,
            hold_s: 5.0,
        }
    }
}

/// What the BGP part measured.
#[derive(Debug, Clone, Serialize)]
pub struct BgpResult {
    /// The run's attack and link.
    pub spec: BgpSpec,
    /// FlowSpec announcements in the daemon's view when the router's
    /// tables were read.
    pub flowspec_announced: u64,
    /// FlowSpec routes in BIRD's tables.
    pub flowspec_seen_at_peer: u64,
    /// RTBH announcements in the daemon's view.
    pub rtbh_announced: u64,
    /// RTBH routes (community 65535:666) in BIRD's tables.
    pub rtbh_seen_at_peer: u64,
    /// The FlowSpec routes as BIRD shows them (what the router matches).
    pub flowspec_at_peer: Vec<String>,
    /// Flood start → the announcements in BIRD's tables (seconds).
    pub announce_s: f64,
    /// The daemon's cost of its last update (the write to ExaBGP's pipe, ms).
    pub last_update_ms: f64,
    /// Packets the router dropped in the measuring window.
    pub router_dropped: u64,
    /// Packets that reached the host's link in the same window.
    pub host_received: u64,
    /// Packets each of the router's rules dropped, by rule, at the end of
    /// the window (the nftables rules the lab made of BIRD's routes).
    pub router_rules: Vec<(String, u64)>,
    /// `router_dropped / (router_dropped + host_received)`, percent.
    pub attack_dropped_upstream_pct: f64,
    /// The measuring window (seconds).
    pub window_s: f64,
    /// Every route gone from BIRD after the flood (within hold_s + 60 s).
    pub withdrawn_after_attack: bool,
    /// Flood end → the last route gone (seconds).
    pub withdraw_s: Option<f64>,
    /// Blocks at the host when the flood ended.
    pub host_blocks: usize,
    /// The daemon's upstream update errors.
    pub errors: u64,
}

/// The daemon's config: the shipped file with the lab's wiring and the
/// upstream tier on (RTBH included; the link as the spec declares).
fn daemon_config(
    lab: &rampart_lab::Lab,
    bgp: &BgpLab,
    spec: &BgpSpec,
    dir: &Path,
) -> Result<Config> {
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
    set("upstream", "enabled", true.into());
    set(
        "upstream",
        "command_pipe",
        bgp.command_pipe().display().to_string().into(),
    );
    set("upstream", "next_hop", HOST_ADDR.into());
    set("upstream", "rtbh", true.into());
    set(
        "upstream",
        "link_capacity_pps",
        spec.link_capacity_pps.into(),
    );
    set("upstream", "hold_s", spec.hold_s.into());
    let text = toml::to_string(&t)
        .map_err(|e| Error::Failed(format!("writing the daemon's configuration: {e}")))?;
    std::fs::write(dir.join("rampart-ddos.toml"), &text)
        .map_err(|e| Error::io(format!("writing {}", dir.display()), e))?;
    Ok(Config::parse(&text)?)
}

/// (FlowSpec, RTBH) among the daemon's announcements (ExaBGP commands).
fn split_announced(a: &[String]) -> (u64, u64) {
    let flow = a.iter().filter(|c| c.contains("flow")).count() as u64;
    (flow, a.len() as u64 - flow)
}

/// (FlowSpec, RTBH) routes in BIRD's tables.
fn at_peer(bgp: &BgpLab) -> Result<(u64, u64)> {
    let (rules, _) = parse_routes(&bgp.routes()?);
    let flow = rules
        .iter()
        .filter(|r| matches!(r, RouterRule::Flow { .. }))
        .count() as u64;
    Ok((flow, rules.len() as u64 - flow))
}

/// Poll `f` every 20 ms until it returns `Some` or `limit` passes.
fn poll<T>(
    limit: Duration,
    cancel: &AtomicBool,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    let t0 = Instant::now();
    loop {
        check(cancel)?;
        if let Some(v) = f()? {
            return Ok(Some(v));
        }
        if t0.elapsed() > limit {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run the BGP part in a lab of its own, files in `dir`.
///
/// # Errors
/// The lab, BIRD/ExaBGP or the daemon failing to start; the tier never
/// engaging (with what the daemon and the router showed); Ctrl-C.
pub fn measure(spec: &BgpSpec, dir: &Path, cancel: &AtomicBool) -> Result<BgpResult> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let lab = BenchLab::up_with(
        &rampart_lab::testing::unique_prefix("bup"),
        &UpOptions {
            upstream_router: true,
            ..UpOptions::default()
        },
    )?;
    let lab = &lab.lab;
    let bgp = BgpLab::in_path(lab, &dir.join("bgp"))?;
    let fwd = bgp
        .forwarding()
        .ok_or_else(|| Error::Failed("the lab's router has no forwarding".into()))?;
    let h = Handle::spawn(daemon_config(lab, &bgp, spec, dir)?)?;

    let gen_spec = GenSpec {
        sources: spec.reflectors,
        sport: 123,
        dport: Some(33_333),
        size: spec.size,
        pps: Some(spec.pps),
        limit: Limit::Seconds(600.0),
        ..GenSpec::default()
    };
    let gen = Generator::new(lab, &gen_spec)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let t_flood = Instant::now();
    let flood = std::thread::spawn(move || gen.run(&stop2));
    let result = (|| -> Result<BgpResult> {
        // Announced: both kinds at the router, and the router's count
        // equal to the daemon's at one reading (the planner may still be
        // adding rules for a second or two).
        let seen = poll(Duration::from_secs(120), cancel, || {
            let v = h.view().upstream;
            let (fa, ra) = v.as_ref().map_or((0, 0), |v| split_announced(&v.announced));
            let (fp, rp) = at_peer(&bgp)?;
            Ok((fa > 0 && ra > 0 && fa == fp && ra == rp).then_some((fa, fp, ra, rp)))
        })?;
        let announce_s = t_flood.elapsed().as_secs_f64();
        let flowspec_at_peer: Vec<String> = bgp
            .routes()?
            .lines()
            .filter(|l| l.starts_with("flow4 {") || l.starts_with("flow6 {"))
            .map(|l| l.split('}').next().unwrap_or(l).to_string() + "}")
            .collect();
        let Some((flowspec_announced, flowspec_seen_at_peer, rtbh_announced, rtbh_seen_at_peer)) =
            seen
        else {
            let v = h.view().upstream;
            return Err(Error::Failed(format!(
                "the upstream tier did not engage within 120 s: the daemon's view {v:?}, BIRD's tables:\n{}",
                bgp.routes().unwrap_or_default()
            )));
        };
        // Wait until the router's forwarding follows BIRD (its thread
        // syncs every 100 ms), then measure a window of the flood.
        poll(Duration::from_secs(30), cancel, || {
            Ok(
                (fwd.rules().len() as u64 >= rtbh_seen_at_peer + flowspec_seen_at_peer)
                    .then_some(()),
            )
        })?;
        let w0 = Instant::now();
        let (h0, r0) = (
            iface_rx_packets(&lab.host_ns(), HOST_IF)?,
            fwd.dropped_packets()?,
        );
        let window = Duration::from_secs(3);
        while w0.elapsed() < window {
            check(cancel)?;
            std::thread::sleep(Duration::from_millis(100));
        }
        let (h1, r1) = (
            iface_rx_packets(&lab.host_ns(), HOST_IF)?,
            fwd.dropped_packets()?,
        );
        let window_s = w0.elapsed().as_secs_f64();
        let router_rules = fwd.counters()?;
        let (router_dropped, host_received) = (r1.saturating_sub(r0), h1.saturating_sub(h0));
        let total = router_dropped + host_received;
        let pct = if total == 0 {
            0.0
        } else {
            100.0 * router_dropped as f64 / total as f64
        };
        let last_update_ms = h.view().upstream.map_or(0.0, |v| v.last_update_s * 1e3);
        let host_blocks = h.view().blocked.len();

        // The flood ends: every route must go after hold_s.
        stop.store(true, Ordering::Relaxed);
        let t_end = Instant::now();
        let gone = poll(Duration::from_secs_f64(spec.hold_s + 60.0), cancel, || {
            let (f, r) = at_peer(&bgp)?;
            Ok((f == 0 && r == 0).then_some(t_end.elapsed().as_secs_f64()))
        })?;
        let errors = h.view().upstream.map_or(0, |v| v.errors);
        Ok(BgpResult {
            spec: spec.clone(),
            flowspec_announced,
            flowspec_seen_at_peer,
            rtbh_announced,
            rtbh_seen_at_peer,
            flowspec_at_peer,
            announce_s,
            last_update_ms,
            router_dropped,
            host_received,
            router_rules,
            attack_dropped_upstream_pct: pct,
            window_s,
            withdrawn_after_attack: gone.is_some(),
            withdraw_s: gone,
            host_blocks,
            errors,
        })
    })();
    stop.store(true, Ordering::Relaxed);
    let gen_result = flood.join();
    let stopped = h.stop();
    drop(bgp);
    let r = result?;
    match gen_result {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => return Err(Error::Failed("the flood's thread panicked".into())),
    }
    stopped?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_split_into_flowspec_and_rtbh() {
        let a = vec![
            "announce flow route { match { source 172.16.0.0/24; } then { discard; } }".to_string(),
            "announce route 10.10.0.2/32 next-hop 10.99.0.2 community [65535:666]".to_string(),
            "announce flow route { match { source 172.16.1.0/24; } then { discard; } }".to_string(),
        ];
        assert_eq!(split_announced(&a), (2, 1));
        assert_eq!(split_announced(&[]), (0, 0));
    }
}
