//! `rampart bench detect`: the detection scenario suite.
//!
//! Each scenario runs in a lab of its own: nginx on `host` (IPv4 and IPv6),
//! the daemon (`rampart ddos run`) on the configuration shipped in
//! `dist/rampart-ddos.toml` with only the interface, namespace, state
//! directory, API address and alert file changed, a legitimate client that
//! opens new connections at a steady rate from 64 bound source addresses
//! for the whole run, and the scenario's real tools (hping3, nmap, wrk, the
//! lab generator) in `wan`. The harness knows which addresses it gave to
//! which tool — that is the ground truth; rampart's alerts are judged
//! against it.
//!
//! Attack packets reaching the stack are counted on the host, after XDP
//! (nftables netdev ingress on host0: XDP drops and XDP_TX never get
//! there); packets offered are host0's receive counter (before XDP) minus
//! the legitimate ones. Both are sampled every 0.25 s; time to mitigate is
//! the attack start → the first sample from which every later window kept
//! ≥ 99 % of the attack from the stack. `legit_ok_pct` compares the steady
//! client's successes in the attack window with its successes in a
//! reference window of the same run without an attack (one reference per
//! run). Medians over `--repeat` runs; every run's raw object in `--out`.

pub mod env;
pub mod legit;
pub mod measure;
pub mod scenario;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart_lab::web::{Wrk, WrkResult};
use serde::Serialize;

use self::env::{legit_v4, legit_v6, Env, GenRun, Tool, VICTIM_V4, VICTIM_V6};
use self::legit::{LegitClient, LegitSpec, Window};
use self::measure::{judge_alerts, mitigation, parse_alerts, vector_matches, AlertVerdict, Sample};
use self::scenario::{Load, Scenario, Timing};
use crate::ddos::median;
use crate::error::{Error, Result};

/// New connections per second of the steady legitimate client.
pub const LEGIT_RATE: f64 = 60.0;
/// Its sources: this many IPv4 and this many IPv6 aliases of wan0.
pub const LEGIT_SOURCES: u32 = 32;
/// The daemon learns normal traffic this long before a warm attack.
const WARM_S: f64 = 10.0;
/// The reference window (legitimate load alone).
const REF_S: f64 = 5.0;
/// After the attack, before the run ends.
const TAIL_S: f64 = 3.0;
/// The daemon starts (or restarts) this long after an attack already running.
const LATE_START_S: f64 = 2.0;
/// Sampling period of the host-side counters.
const SAMPLE_S: f64 = 0.25;

/// What `rampart bench detect` runs.
#[derive(Debug, Clone)]
pub struct DetectSpec {
    /// Scenario names (empty: all).
    pub scenarios: Vec<String>,
    /// Repetitions of each scenario.
    pub repeat: u32,
    /// JSON lines on stdout (one object per scenario, then the summary).
    pub json: bool,
    /// Directory for the results (created).
    pub out: PathBuf,
    /// The `rampart` binary that runs the daemon (`rampart ddos run`).
    pub rampart_bin: PathBuf,
}

/// One scenario's result: the fields the suite is judged by.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ScenarioResult {
    /// Name.
    pub scenario: String,
    /// Kind of scenario.
    pub family: String,
    /// Does it contain an attack?
    pub attack: bool,
    /// Did rampart raise a detection about an attack source or the victim during the attack?
    pub detected: bool,
    /// What rampart called it.
    pub vector: Option<String>,
    /// Attack start (daemon start in attack-at-start/-restart) → attack ≥ 99 % kept from the stack.
    pub time_to_mitigate_s: Option<f64>,
    /// Attack packets reaching the stack after that time (the whole attack if never), percent.
    pub attack_reaching_stack_pct: Option<f64>,
    /// Bans of legitimate sources.
    pub false_bans: u64,
    /// Attack sources unbanned while the attack ran.
    pub unbans_during_attack: u64,
    /// Legitimate requests served in the attack window, percent of a run without it (the steady
    /// client against its reference window, plus the extra users against all they asked).
    pub legit_ok_pct: f64,
    /// Most sources in the blacklist at once.
    pub blacklist_max: u64,
    /// Alerts raised.
    pub alerts: u64,
    /// Spoofed SYN floods: `legit_ok_pct` of the same flood in the same run with rampart off
    /// (the kernel's own SYN cookies only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_legit_ok_pct: Option<f64>,
    /// Scenarios with wrk: its requests/s under the attack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrk_rps: Option<f64>,
    /// ... and under the same attack with rampart off (scenarios with a peer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_wrk_rps: Option<f64>,
    /// Scenarios with a peer: wrk's requests/s under the attack, percent of
    /// its rate in the no-attack reference window (nothing attached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrk_ok_pct: Option<f64>,
    /// ... and with rampart off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_wrk_ok_pct: Option<f64>,
    /// Attack scenarios: attack packets per second host0 received (before
    /// XDP) while the attack was judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_pps: Option<f64>,
    /// ... and in the peer's window (rampart off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_offered_pps: Option<f64>,
}

/// The final object.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Always true (tells the summary from the scenario objects).
    pub summary: bool,
    /// Scenarios with a result.
    pub scenarios: usize,
    /// Attack scenarios not detected.
    pub missed: usize,
    /// False bans over all scenarios.
    pub false_bans: u64,
    /// Unbans during attacks over all scenarios.
    pub unbans_during_attack: u64,
    /// Attack scenarios detected under a name other than the expected vector.
    pub misnamed: usize,
}

/// Everything else one run recorded (raw data, for diagnosis).
#[derive(Debug, Clone, Serialize)]
pub struct RunDetail {
    /// Repetition (1-based).
    pub repetition: u32,
    /// Lab prefix.
    pub lab: String,
    /// Expected vector names.
    pub expect: Vec<String>,
    /// Harness seconds: attack start, end; the daemon's (re)start that the clock of
    /// time-to-mitigate starts from.
    pub attack_window_s: (f64, f64),
    /// Clock start of time to mitigate.
    pub mitigation_clock_s: f64,
    /// Attack packets offered to host0 / reaching the stack in the judged window.
    pub attack_offered: u64,
    /// Reaching.
    pub attack_reaching: u64,
    /// Offered attack packets per second in the judged window.
    pub attack_offered_pps: f64,
    /// Steady client: reference window, attack window, peer window.
    pub legit_reference: Window,
    /// Attack window.
    pub legit_attack: Window,
    /// Peer window (rampart off).
    pub legit_peer: Option<Window>,
    /// What the alerts said.
    pub alerts: AlertVerdict,
    /// Frames the lab generator sent in the attack window (its own count,
    /// before the lab's wire; the host may receive fewer).
    pub generator_sent: u64,
    /// The same per second of the attack window.
    pub generator_sent_pps: f64,
    /// Frames the lab generator sent in the peer window (rampart off).
    pub peer_generator_sent: u64,
    /// wrk under the scenario, if it ran.
    pub wrk: Option<WrkResult>,
    /// wrk in the reference window (scenarios with a peer).
    pub wrk_reference: Option<WrkResult>,
    /// wrk in the peer's window.
    pub wrk_peer: Option<WrkResult>,
    /// The scenario's extra legitimate users (flash crowd, NAT), whole window.
    pub users: Vec<Window>,
    /// The samples.
    pub samples: Vec<Sample>,
}

/// Find the scenarios to run, in suite order.
///
/// # Errors
/// An unknown name (the message lists the names).
pub fn select(names: &[String]) -> Result<Vec<Scenario>> {
    let all = scenario::all();
    if names.is_empty() {
        return Ok(all);
    }
    let mut out = Vec::new();
    for n in names {
        match all.iter().find(|s| s.name == n) {
            Some(s) => out.push(s.clone()),
            None => {
                let known: Vec<&str> = all.iter().map(|s| s.name).collect();
                return Err(rampart_lab::Error::InvalidSpec(format!(
                    "unknown scenario {n:?}: use one of {}",
                    known.join(", ")
                ))
                .into());
            }
        }
    }
    Ok(out)
}

fn ratio_pct(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        100.0 * a / b
    } else {
        0.0
    }
}

/// The legitimate requests served in a window, percent of those a run
/// without the attack serves: the steady client against its reference
/// rate, plus the scenario's extra users (flash crowd, NAT) against every
/// request they made (nginx serves all of them when nothing blocks them).
fn legit_ok(steady: &Window, seconds: f64, ref_rate: f64, users: &[Window]) -> f64 {
    let want = ref_rate * seconds + users.iter().map(|u| u.due as f64).sum::<f64>();
    let got = steady.ok as f64 + users.iter().map(|u| u.ok as f64).sum::<f64>();
    ratio_pct(got, want)
}

/// Loads running during a window.
#[derive(Default)]
struct Running {
    tools: Vec<Tool>,
    nmaps: Vec<(usize, IpAddr, &'static str)>,
    gens: Vec<GenRun>,
    wrk: Option<Wrk>,
    users: Vec<LegitClient>,
}

fn nmap_args(from: IpAddr, ports: &str) -> Vec<String> {
    [
        "-sS",
        "-Pn",
        "-n",
        "-T4",
        "--max-retries",
        "1",
        "-p",
        ports,
        "-S",
        &from.to_string(),
        "-e",
        "wan0",
        &VICTIM_V4.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn start_loads(env: &Env, sc: &Scenario, tag: &str) -> Result<Running> {
    let mut r = Running::default();
    let mut anchors = [rampart_lab::topology::GEN_ANCHOR_IF, "gen-anchor-p"].into_iter();
    for (i, l) in sc.loads.iter().enumerate() {
        match l {
            Load::Hping { from, args } => {
                let target = if args.contains(&"--rand-dest") {
                    "10.10.0.x".to_string()
                } else {
                    VICTIM_V4.to_string()
                };
                let mut base: Vec<String> = args.iter().map(|s| s.to_string()).collect();
                base.push("-q".into());
                if from.is_empty() {
                    let mut a = base.clone();
                    a.push(target.clone());
                    r.tools
                        .push(env.tool("hping3", &a, &format!("{tag}-hping3-{i}"))?);
                }
                for (j, src) in from.iter().enumerate() {
                    let mut a = base.clone();
                    a.extend(["-a".to_string(), src.to_string(), target.clone()]);
                    r.tools
                        .push(env.tool("hping3", &a, &format!("{tag}-hping3-{i}-{j}"))?);
                }
            }
            Load::Gen { spec, phases } => {
                let phases = if phases.is_empty() {
                    vec![(sc.seconds + 1.0, Some(spec.pps.unwrap_or(0.0)))]
                } else {
                    phases.clone()
                };
                let anchor = anchors.next().ok_or_else(|| {
                    Error::Invalid(format!("{}: at most two generators at once", sc.name))
                })?;
                r.gens.push(GenRun::start(&env.lab, spec, phases, anchor)?);
            }
            Load::Nmap { from, ports } => {
                r.nmaps.push((r.tools.len(), *from, ports));
                r.tools.push(env.tool(
                    "nmap",
                    &nmap_args(*from, ports),
                    &format!("{tag}-nmap-{i}"),
                )?);
            }
            Load::Wrk { conns } => {
                r.wrk = Some(Wrk::spawn(
                    &env.lab.wan_ns(),
                    &format!("http://{VICTIM_V4}/"),
                    sc.seconds,
                    *conns,
                    None,
                )?);
            }
            Load::Users { sources, rate } => {
                r.users.push(LegitClient::start(
                    &env.lab.wan_ns(),
                    &LegitSpec {
                        sources: sources.clone(),
                        rate: *rate,
                        max_seconds: sc.seconds + 1.0,
                        workers: 128,
                        ..base_client(1.0)
                    },
                )?);
            }
        }
    }
    Ok(r)
}

impl Running {
    /// Start nmap again when a scan finished inside the window.
    fn poll(&mut self, env: &Env, tag: &str) -> Result<()> {
        for (idx, from, ports) in self.nmaps.clone() {
            if self.tools[idx].exited() {
                self.tools[idx] = env.tool(
                    "nmap",
                    &nmap_args(from, ports),
                    &format!("{tag}-nmap-{idx}"),
                )?;
            }
        }
        Ok(())
    }

    fn stop(mut self) -> Result<(u64, Option<WrkResult>, Vec<Window>)> {
        self.tools.clear();
        let mut users = Vec::new();
        for u in self.users.drain(..) {
            users.push(u.window(0.0, u.elapsed()));
            u.stop();
        }
        let mut sent = 0;
        for g in self.gens.drain(..) {
            sent += g.finish()?;
        }
        let wrk = match self.wrk.take() {
            Some(w) => Some(w.finish()?),
            None => None,
        };
        Ok((sent, wrk, users))
    }
}

fn base_client(max_seconds: f64) -> LegitSpec {
    LegitSpec {
        sources: (1..=LEGIT_SOURCES)
            .map(legit_v4)
            .chain((1..=LEGIT_SOURCES).map(legit_v6))
            .collect(),
        dst_v4: SocketAddr::new(IpAddr::V4(VICTIM_V4), 80),
        dst_v6: SocketAddr::new(IpAddr::V6(VICTIM_V6), 80),
        rate: LEGIT_RATE,
        timeout: Duration::from_secs(2),
        workers: 96,
        max_seconds,
    }
}

/// Sleep until harness time `t`, keeping the loads going; fails on Ctrl-C.
fn wait_until(
    env: &Env,
    t: f64,
    cancel: &AtomicBool,
    mut running: Option<&mut Running>,
    tag: &str,
) -> Result<()> {
    while env.now() < t {
        if cancel.load(Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        if let Some(r) = running.as_deref_mut() {
            r.poll(env, tag)?;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Total seconds the run lasts, for the client's buckets.
fn run_length(sc: &Scenario) -> f64 {
    let peer = if sc.peer {
        REF_S + sc.seconds + 6.0
    } else {
        0.0
    };
    peer + WARM_S + sc.seconds + TAIL_S + LATE_START_S + 60.0
}

fn run_once(
    sc: &Scenario,
    rep: u32,
    spec: &DetectSpec,
    cancel: &AtomicBool,
) -> Result<(ScenarioResult, RunDetail)> {
    let prefix = rampart_lab::testing::unique_prefix("dt");
    let dir = spec.out.join("runs").join(format!("{}-{rep}", sc.name));
    let _ = std::fs::remove_dir_all(&dir);
    let mut aliases: Vec<IpAddr> = (1..=LEGIT_SOURCES)
        .map(legit_v4)
        .chain((1..=LEGIT_SOURCES).map(legit_v6))
        .collect();
    aliases.extend(sc.aliases.iter().copied());
    let mut env = Env::up(&prefix, &dir, &spec.rampart_bin, &aliases)?;
    if sc.host_owns_24 {
        env.host_owns_24()?;
    }
    env.reset_clock();
    let client = LegitClient::start(&env.lab.wan_ns(), &base_client(run_length(sc)))?;
    // The client's clock and the harness's start together (within ms).
    env.reset_clock();
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (probe, samples, stop) = (env.probe(), samples.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(s) = probe.sample() {
                    if let Ok(mut v) = samples.lock() {
                        v.push(s);
                    }
                }
                std::thread::sleep(Duration::from_secs_f64(SAMPLE_S));
            }
        })
    };
    let result = timeline(sc, &mut env, &client, cancel);
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let tl = result?;
    let samples = samples.lock().map(|v| v.clone()).unwrap_or_default();
    client.stop();
    env.stop_daemon();
    let alerts = parse_alerts(&env.alerts_text());
    let truth = env::truth();
    let verdict = judge_alerts(
        &alerts,
        &truth,
        sc.attack.then(|| (env.unix(tl.a0), env.unix(tl.a1))),
    );
    let m = if sc.attack {
        mitigation(&samples, tl.clock0, tl.a1)
    } else {
        measure::Mitigation::default()
    };
    let secs = |w: (f64, f64)| (w.1 - w.0).max(1e-9);
    let ok = |w: &Window, span: (f64, f64)| w.ok_rate(secs(span));
    let ref_rate = ok(&tl.legit_ref, tl.ref_window);
    let blocked_max = samples.iter().filter_map(|s| s.blocked).max().unwrap_or(0);
    let wrk_pct = |w: Option<&WrkResult>| {
        let r = tl.wrk_ref.as_ref()?.rps();
        Some(ratio_pct(w?.rps(), r))
    };
    let result = ScenarioResult {
        scenario: sc.name.into(),
        family: sc.family.into(),
        attack: sc.attack,
        detected: verdict.detected,
        vector: verdict.vector.clone(),
        time_to_mitigate_s: m.time_to_mitigate_s,
        attack_reaching_stack_pct: if sc.attack { m.reaching_pct } else { None },
        false_bans: verdict.false_bans as u64,
        unbans_during_attack: verdict.unbans_during_attack as u64,
        legit_ok_pct: legit_ok(&tl.legit_attack, secs((tl.a0, tl.a1)), ref_rate, &tl.users),
        blacklist_max: blocked_max.max(verdict.blacklist_max_from_alerts as u64),
        alerts: verdict.alerts as u64,
        peer_legit_ok_pct: tl.peer.map(|(w, span)| ratio_pct(ok(&w, span), ref_rate)),
        wrk_rps: tl.wrk.as_ref().map(WrkResult::rps),
        peer_wrk_rps: tl.peer_wrk.as_ref().map(WrkResult::rps),
        wrk_ok_pct: wrk_pct(tl.wrk.as_ref()),
        peer_wrk_ok_pct: wrk_pct(tl.peer_wrk.as_ref()),
        offered_pps: sc
            .attack
            .then(|| m.offered as f64 / (tl.a1 - tl.clock0).max(1e-9)),
        peer_offered_pps: tl.peer.map(|(_, (p0, p1))| {
            measure::offered_between(&samples, p0, p1) as f64 / secs((p0, p1))
        }),
    };
    let judged = (tl.a1 - tl.clock0).max(1e-9);
    let detail = RunDetail {
        repetition: rep,
        lab: prefix,
        expect: sc.expect.iter().map(|s| s.to_string()).collect(),
        attack_window_s: (tl.a0, tl.a1),
        mitigation_clock_s: tl.clock0,
        attack_offered: m.offered,
        attack_reaching: m.reaching,
        attack_offered_pps: m.offered as f64 / judged,
        legit_reference: tl.legit_ref,
        legit_attack: tl.legit_attack,
        legit_peer: tl.peer.map(|p| p.0),
        alerts: verdict,
        generator_sent: tl.gen_sent,
        generator_sent_pps: tl.gen_sent as f64 / (tl.a1 - tl.a0).max(1e-9),
        peer_generator_sent: tl.peer_gen_sent,
        wrk: tl.wrk,
        wrk_reference: tl.wrk_ref,
        wrk_peer: tl.peer_wrk,
        users: tl.users,
        samples,
    };
    drop(env);
    Ok((result, detail))
}

struct Timeline {
    a0: f64,
    a1: f64,
    clock0: f64,
    ref_window: (f64, f64),
    legit_ref: Window,
    legit_attack: Window,
    peer: Option<(Window, (f64, f64))>,
    gen_sent: u64,
    peer_gen_sent: u64,
    wrk: Option<WrkResult>,
    peer_wrk: Option<WrkResult>,
    wrk_ref: Option<WrkResult>,
    users: Vec<Window>,
}

fn timeline(
    sc: &Scenario,
    env: &mut Env,
    client: &LegitClient,
    cancel: &AtomicBool,
) -> Result<Timeline> {
    let mut peer_gen_sent = 0;
    let mut peer_wrk = None;
    let mut wrk_ref = None;
    let mut peer = None;
    let mut ref_window = (1.0, 1.0 + REF_S);
    // The peer: the same loads with rampart off (no XDP program: the
    // kernel alone, with its own SYN cookies), before the daemon ever runs.
    // wrk, when the scenario runs it, also runs in the reference window:
    // its no-attack rate, and the steady client's reference with the same
    // company as in the attack windows.
    if sc.peer {
        wait_until(env, ref_window.0, cancel, None, "ref")?;
        let w = sc
            .loads
            .iter()
            .find_map(|l| match l {
                Load::Wrk { conns } => Some(*conns),
                _ => None,
            })
            .map(|conns| {
                Wrk::spawn(
                    &env.lab.wan_ns(),
                    &format!("http://{VICTIM_V4}/"),
                    REF_S,
                    conns,
                    None,
                )
            })
            .transpose()?;
        wait_until(env, ref_window.1, cancel, None, "ref")?;
        wrk_ref = w.map(|w| w.finish()).transpose()?;
        let p0 = env.now();
        let mut r = start_loads(env, sc, "peer")?;
        wait_until(env, p0 + sc.seconds, cancel, Some(&mut r), "peer")?;
        let p1 = env.now();
        (peer_gen_sent, peer_wrk, _) = r.stop()?;
        peer = Some((client.window(p0, p1), (p0, p1)));
        // Let the backlog and the veth rings drain.
        wait_until(env, p1 + 3.0, cancel, None, "peer")?;
    }
    let (a0, clock0, a1, running_out);
    match sc.timing {
        Timing::Warm => {
            env.start_daemon()?;
            let d0 = env.now();
            if !sc.peer {
                ref_window = (d0 + WARM_S - REF_S, d0 + WARM_S);
            }
            wait_until(env, d0 + WARM_S, cancel, None, "warm")?;
            a0 = env.now();
            clock0 = a0;
            let mut r = start_loads(env, sc, "attack")?;
            wait_until(env, a0 + sc.seconds, cancel, Some(&mut r), "attack")?;
            a1 = env.now();
            running_out = r.stop()?;
        }
        Timing::AtStart => {
            wait_until(env, ref_window.1, cancel, None, "ref")?;
            a0 = env.now();
            let mut r = start_loads(env, sc, "attack")?;
            wait_until(env, a0 + LATE_START_S, cancel, Some(&mut r), "attack")?;
            env.start_daemon()?;
            clock0 = env.now();
            wait_until(env, a0 + sc.seconds, cancel, Some(&mut r), "attack")?;
            a1 = env.now();
            running_out = r.stop()?;
        }
        Timing::AtRestart => {
            env.start_daemon()?;
            let d0 = env.now();
            ref_window = (d0 + WARM_S - REF_S, d0 + WARM_S);
            wait_until(env, d0 + WARM_S, cancel, None, "warm")?;
            env.stop_daemon();
            a0 = env.now();
            let mut r = start_loads(env, sc, "attack")?;
            wait_until(env, a0 + LATE_START_S, cancel, Some(&mut r), "attack")?;
            env.start_daemon()?;
            clock0 = env.now();
            wait_until(env, a0 + sc.seconds, cancel, Some(&mut r), "attack")?;
            a1 = env.now();
            running_out = r.stop()?;
        }
    }
    wait_until(env, a1 + TAIL_S, cancel, None, "tail")?;
    Ok(Timeline {
        a0,
        a1,
        clock0,
        ref_window,
        legit_ref: client.window(ref_window.0, ref_window.1),
        legit_attack: client.window(a0, a1),
        peer,
        gen_sent: running_out.0,
        peer_gen_sent,
        wrk: running_out.1,
        peer_wrk,
        wrk_ref,
        users: running_out.2,
    })
}

/// Median of the repetitions of one scenario (majority for booleans, the
/// most frequent vector; a time to mitigate is the median with "never"
/// counted as longest, "never" when most runs never mitigated).
pub fn median_result(runs: &[ScenarioResult]) -> Option<ScenarioResult> {
    let first = runs.first()?;
    let n = runs.len();
    let med = |f: &dyn Fn(&ScenarioResult) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let med_u = |f: &dyn Fn(&ScenarioResult) -> u64| {
        let mut v: Vec<u64> = runs.iter().map(f).collect();
        v.sort_unstable();
        v[n / 2]
    };
    let med_opt = |f: &dyn Fn(&ScenarioResult) -> Option<f64>| {
        let mut v: Vec<f64> = runs.iter().map(|r| f(r).unwrap_or(f64::INFINITY)).collect();
        v.sort_by(f64::total_cmp);
        let m = v[n / 2];
        m.is_finite().then_some(m)
    };
    // A field the scenario reports (its first run has it): the median.
    let med_some = |f: &dyn Fn(&ScenarioResult) -> Option<f64>| {
        f(first).map(|_| med(&|r| f(r).unwrap_or(f64::NAN)))
    };
    let mut vectors: BTreeMap<String, usize> = BTreeMap::new();
    for r in runs {
        if let Some(v) = &r.vector {
            *vectors.entry(v.clone()).or_default() += 1;
        }
    }
    let detected = runs.iter().filter(|r| r.detected).count() * 2 > n;
    Some(ScenarioResult {
        scenario: first.scenario.clone(),
        family: first.family.clone(),
        attack: first.attack,
        detected,
        vector: vectors
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(k, _)| k),
        time_to_mitigate_s: med_opt(&|r| r.time_to_mitigate_s),
        attack_reaching_stack_pct: {
            let v: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.attack_reaching_stack_pct)
                .collect();
            (!v.is_empty()).then(|| median(&v))
        },
        false_bans: med_u(&|r| r.false_bans),
        unbans_during_attack: med_u(&|r| r.unbans_during_attack),
        legit_ok_pct: med(&|r| r.legit_ok_pct),
        blacklist_max: med_u(&|r| r.blacklist_max),
        alerts: med_u(&|r| r.alerts),
        peer_legit_ok_pct: med_some(&|r| r.peer_legit_ok_pct),
        wrk_rps: med_some(&|r| r.wrk_rps),
        peer_wrk_rps: med_some(&|r| r.peer_wrk_rps),
        wrk_ok_pct: med_some(&|r| r.wrk_ok_pct),
        peer_wrk_ok_pct: med_some(&|r| r.peer_wrk_ok_pct),
        offered_pps: med_some(&|r| r.offered_pps),
        peer_offered_pps: med_some(&|r| r.peer_offered_pps),
    })
}

/// The summary of the scenarios' (median) results.
pub fn summarize(results: &[ScenarioResult], scenarios: &[Scenario]) -> Summary {
    let expect = |name: &str| {
        scenarios
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.expect)
            .unwrap_or(&[])
    };
    Summary {
        summary: true,
        scenarios: results.len(),
        missed: results.iter().filter(|r| r.attack && !r.detected).count(),
        false_bans: results.iter().map(|r| r.false_bans).sum(),
        unbans_during_attack: results.iter().map(|r| r.unbans_during_attack).sum(),
        misnamed: results
            .iter()
            .filter(|r| {
                r.attack
                    && r.detected
                    && !r
                        .vector
                        .as_deref()
                        .is_some_and(|v| vector_matches(expect(&r.scenario), v))
            })
            .count(),
    }
}

fn write_json(path: &Path, v: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| Error::Failed(format!("JSON: {e}")))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// One human line per scenario.
pub fn table_row(r: &ScenarioResult) -> String {
    format!(
        "{:<20} {:<6} {:<8} {:<30} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>8} {:>7}",
        r.scenario,
        r.attack,
        r.detected,
        r.vector.as_deref().unwrap_or("-"),
        fmt_opt(r.time_to_mitigate_s, 2),
        fmt_opt(r.attack_reaching_stack_pct, 2),
        r.false_bans,
        r.unbans_during_attack,
        format!("{:.1}", r.legit_ok_pct),
        fmt_opt(r.peer_legit_ok_pct, 1),
        r.blacklist_max,
        r.alerts
    )
}

/// The results as a Markdown table (docs/benchmarks.md).
pub fn markdown_table(results: &[ScenarioResult]) -> String {
    let mut s = String::from(
        "| scenario | family | attack | detected | vector | time to mitigate (s) | attack reaching stack (%) | false bans | unbans during attack | legit ok (%) | peer legit ok (%) | blacklist max | alerts |\n\
         |---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} | {} |\n",
            r.scenario,
            r.family,
            if r.attack { "yes" } else { "no" },
            if r.detected { "yes" } else { "no" },
            r.vector
                .as_deref()
                .map_or("–".to_string(), |v| format!("`{v}`")),
            match (r.attack, r.time_to_mitigate_s) {
                (false, _) => "–".to_string(),
                (true, None) => "never".to_string(),
                (true, Some(t)) => format!("{t:.2}"),
            },
            fmt_opt(r.attack_reaching_stack_pct, 2).replace('-', "–"),
            r.false_bans,
            r.unbans_during_attack,
            r.legit_ok_pct,
            fmt_opt(r.peer_legit_ok_pct, 1).replace('-', "–"),
            r.blacklist_max,
            r.alerts
        ));
    }
    s
}

/// The header of [`table_row`].
pub fn table_header() -> String {
    format!(
        "{:<20} {:<6} {:<8} {:<30} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>8} {:>7}",
        "scenario",
        "attack",
        "detected",
        "vector",
        "ttm_s",
        "reach%",
        "fbans",
        "unbans",
        "legit%",
        "peer%",
        "bl_max",
        "alerts"
    )
}

/// Run the suite and print the results (a table, or JSON lines with `json`).
///
/// Results go to `--out`: `runs.jsonl` (every run: the result object and
/// its raw detail), `results.jsonl` (the median objects and the summary,
/// as printed with `--json`), `summary.json`, and each run's files
/// (`runs/<scenario>-<rep>/`: the daemon's configuration, alerts and log,
/// the tools' output).
///
/// # Errors
/// An unknown scenario or a bad `--repeat` (usage); Ctrl-C
/// ([`Error::Interrupted`], after removing the lab); runs that failed (the
/// others' results are written and printed first).
pub fn run_and_print(spec: &DetectSpec, cancel: &AtomicBool) -> Result<()> {
    if spec.repeat == 0 || spec.repeat > 20 {
        return Err(rampart_lab::Error::InvalidSpec(format!(
            "--repeat {} out of range: use 1..=20",
            spec.repeat
        ))
        .into());
    }
    let scenarios = select(&spec.scenarios)?;
    for p in ["hping3", "nmap", "wrk", "nginx", "curl", "nft"] {
        if scenarios.iter().any(|s| needs(s, p)) && !rampart_lab::web::have(p) {
            return Err(rampart_lab::Error::InvalidSpec(format!(
                "{p} is not installed: `./run deps` installs the suite's tools (apt-get install {})",
                if p == "nft" { "nftables" } else { p }
            ))
            .into());
        }
    }
    std::fs::create_dir_all(&spec.out)
        .map_err(|e| Error::io(format!("creating {}", spec.out.display()), e))?;
    let runs_path = spec.out.join("runs.jsonl");
    let mut runs_file = std::fs::File::create(&runs_path)
        .map_err(|e| Error::io(format!("creating {}", runs_path.display()), e))?;
    let mut by_name: BTreeMap<&str, Vec<ScenarioResult>> = BTreeMap::new();
    let mut failed = Vec::new();
    if !spec.json {
        println!(
            "rampart bench detect: {} scenarios × {} repetitions; the daemon on dist/rampart-ddos.toml",
            scenarios.len(),
            spec.repeat
        );
    }
    for rep in 1..=spec.repeat {
        for sc in &scenarios {
            if cancel.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            if !spec.json {
                eprintln!("  {} (repetition {rep}) …", sc.name);
            }
            match run_once(sc, rep, spec, cancel) {
                Ok((r, d)) => {
                    let line = serde_json::json!({ "result": &r, "detail": &d });
                    writeln!(runs_file, "{line}")
                        .map_err(|e| Error::io(format!("writing {}", runs_path.display()), e))?;
                    if !spec.json {
                        eprintln!("    {}", table_row(&r));
                    }
                    by_name.entry(sc.name).or_default().push(r);
                }
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => {
                    eprintln!("  {} (repetition {rep}) failed: {e}", sc.name);
                    failed.push(format!("{} #{rep}: {e}", sc.name));
                }
            }
        }
    }
    let medians: Vec<ScenarioResult> = scenarios
        .iter()
        .filter_map(|s| by_name.get(s.name).and_then(|v| median_result(v)))
        .collect();
    let summary = summarize(&medians, &scenarios);
    let mut lines = String::new();
    for r in &medians {
        lines.push_str(&serde_json::to_string(r).map_err(|e| Error::Failed(format!("JSON: {e}")))?);
        lines.push('\n');
    }
    lines.push_str(
        &serde_json::to_string(&summary).map_err(|e| Error::Failed(format!("JSON: {e}")))?,
    );
    lines.push('\n');
    std::fs::write(spec.out.join("results.jsonl"), &lines)
        .map_err(|e| Error::io("writing results.jsonl", e))?;
    std::fs::write(spec.out.join("table.md"), markdown_table(&medians))
        .map_err(|e| Error::io("writing table.md", e))?;
    write_json(
        &spec.out.join("summary.json"),
        &serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "machine": crate::report::Machine::collect(),
            "repeat": spec.repeat,
            "scenarios": &medians,
            "summary": &summary,
            "failed": &failed,
        }),
    )?;
    if spec.json {
        print!("{lines}");
    } else {
        println!("{}", table_header());
        for r in &medians {
            println!("{}", table_row(r));
        }
        println!(
            "summary: {} scenarios, missed {}, false bans {}, unbans during attack {}, misnamed {}",
            summary.scenarios,
            summary.missed,
            summary.false_bans,
            summary.unbans_during_attack,
            summary.misnamed
        );
        println!("results in {}", spec.out.display());
    }
    if !failed.is_empty() {
        return Err(Error::Failed(format!(
            "{} run(s) failed: {}",
            failed.len(),
            failed.join("; ")
        )));
    }
    Ok(())
}

fn needs(s: &Scenario, prog: &str) -> bool {
    match prog {
        "nginx" | "curl" | "nft" => true,
        "hping3" => s.loads.iter().any(|l| matches!(l, Load::Hping { .. })),
        "nmap" => s.loads.iter().any(|l| matches!(l, Load::Nmap { .. })),
        "wrk" => s.loads.iter().any(|l| matches!(l, Load::Wrk { .. })),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(
        name: &str,
        attack: bool,
        detected: bool,
        vector: Option<&str>,
        ttm: Option<f64>,
        fb: u64,
    ) -> ScenarioResult {
        ScenarioResult {
            scenario: name.into(),
            family: "f".into(),
            attack,
            detected,
            vector: vector.map(str::to_string),
            time_to_mitigate_s: ttm,
            attack_reaching_stack_pct: Some(1.0),
            false_bans: fb,
            unbans_during_attack: 0,
            legit_ok_pct: 90.0,
            blacklist_max: 5,
            alerts: 3,
            peer_legit_ok_pct: None,
            wrk_rps: None,
            peer_wrk_rps: None,
            wrk_ok_pct: None,
            peer_wrk_ok_pct: None,
            offered_pps: None,
            peer_offered_pps: None,
        }
    }

    #[test]
    fn medians_take_the_majority_and_never_counts_as_longest() {
        let runs = vec![
            r(
                "amp-ntp",
                true,
                true,
                Some("udp_amplification/ntp"),
                Some(1.0),
                0,
            ),
            r("amp-ntp", true, false, None, None, 1),
            r(
                "amp-ntp",
                true,
                true,
                Some("udp_amplification/ntp"),
                Some(3.0),
                0,
            ),
        ];
        let m = median_result(&runs).unwrap();
        assert!(m.detected);
        assert_eq!(m.vector.as_deref(), Some("udp_amplification/ntp"));
        assert_eq!(m.time_to_mitigate_s, Some(3.0));
        assert_eq!(m.false_bans, 0);
        let runs = vec![
            r("x", true, false, None, None, 0),
            r("x", true, true, Some("syn_flood"), Some(1.0), 0),
            r("x", true, false, None, None, 0),
        ];
        let m = median_result(&runs).unwrap();
        assert!(!m.detected);
        assert_eq!(m.time_to_mitigate_s, None);
        assert!(median_result(&[]).is_none());
    }

    #[test]
    fn the_summary_counts_missed_false_bans_and_misnamed() {
        let sc = scenario::all();
        let res = vec![
            r(
                "amp-ntp",
                true,
                true,
                Some("udp_amplification"),
                Some(1.0),
                0,
            ),
            r("syn-rst-5src", true, false, None, None, 0),
            r("heavy-client", false, true, Some("udp_flood"), None, 1),
            r(
                "carpet-v4",
                true,
                true,
                Some("carpet/syn_flood"),
                Some(1.0),
                0,
            ),
        ];
        let s = summarize(&res, &sc);
        assert_eq!(
            s,
            Summary {
                summary: true,
                scenarios: 4,
                missed: 1,
                false_bans: 1,
                unbans_during_attack: 0,
                misnamed: 1,
            }
        );
        let j = serde_json::to_value(&s).unwrap();
        let keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys.len(),
            6,
            "the summary has exactly the issue's fields: {keys:?}"
        );
    }

    #[test]
    fn result_objects_have_exactly_the_issues_fields() {
        let mut x = r("a", true, true, Some("syn_flood"), None, 0);
        let j = serde_json::to_value(&x).unwrap();
        let mut keys: Vec<String> = j.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        let mut want = vec![
            "scenario",
            "family",
            "attack",
            "detected",
            "vector",
            "time_to_mitigate_s",
            "attack_reaching_stack_pct",
            "false_bans",
            "unbans_during_attack",
            "legit_ok_pct",
            "blacklist_max",
            "alerts",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        assert!(j["time_to_mitigate_s"].is_null());
        x.peer_legit_ok_pct = Some(50.0);
        let j = serde_json::to_value(&x).unwrap();
        assert_eq!(j["peer_legit_ok_pct"], 50.0);
    }

    #[test]
    fn blocked_extra_users_lower_legit_ok() {
        let steady = Window { due: 600, ok: 600 };
        // The steady client at its reference rate: 100 %.
        assert!((legit_ok(&steady, 10.0, 60.0, &[]) - 100.0).abs() < 1e-9);
        // A NAT source whose 4,000 requests were mostly refused.
        let nat = Window { due: 4000, ok: 400 };
        let v = legit_ok(&steady, 10.0, 60.0, &[nat]);
        assert!((v - 100.0 * 1000.0 / 4600.0).abs() < 1e-9, "{v}");
    }

    #[test]
    fn unknown_scenarios_are_usage_errors_naming_the_choices() {
        let e = select(&["nope".into()]).unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().contains("syn-rst-5src"), "{e}");
        assert_eq!(select(&["pulse".into()]).unwrap()[0].name, "pulse");
    }
}
