//! `rampart demo`: the product's demo, in a lab of its own. One `rampart
//! run` (rampart_run::Host) runs the three applications as the stages of
//! one XDP chain on the lab host's `host0`: ddos → stream (flowmeter and
//! portscan sharing the tap) → tenant (a tenant's DNS rate limiter).
//!
//! - **ddos**: nginx on `host` serves wrk in `wan` (fixed connections). The
//!   mitigation daemon runs in `hw+xdp-host` mode with the lab's EMULATED
//!   NIC as the hardware tier. A mixed attack from the lab generator (a UDP
//!   flood and a SYN flood, thousands of spoofed sources, Zipf rates) runs
//!   for `--attack-seconds`; rampart detects and blocks it, moves the
//!   heaviest sources to the NIC table, and unbans every source once the
//!   attack has stopped. The report compares wrk with and without the
//!   attack and counts where every attack packet went.
//! - **stream** ([`apps::scan`]), between the reference run and the
//!   attack: nmap scans host0 from a wan address and the port-scan app on
//!   the tap flags it; the flowmeter on the same tap counts every flow of
//!   the whole demo.
//! - **tenant** ([`apps::run`]), once the attack is over (while detection
//!   unbans its sources, so the DDoS figures stay comparable with the DDoS
//!   daemon alone): the tenant submits its DNS rate limiter through the
//!   tenant API, dnsperf floods the tenant's resolver (dnsmasq) from one
//!   wan address and `dig` from four others must be answered.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rampart_ddos::filter::{Filter, Scope};
use rampart_ddos::Prefix;
use rampart_ddosd::{Config, Mode, View};
use rampart_lab::dist::Dist;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::topology::{UpOptions, HOST_IF};
use rampart_lab::web::{self, Nginx, Wrk};
use rampart_lab::Lab;
use rampart_run::Host;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::out::{print_json, si};

pub mod apps;

const URL: &str = "http://10.10.0.2/";

/// Seconds of wrk before the reference run, while rampart run starts.
const WARM_UP_S: f64 = 3.0;

/// What `rampart demo` runs (the CLI's flags, with their defaults there).
#[derive(Debug, Clone)]
pub struct DemoSpec {
    /// Which demo: `all` (the only one; the default).
    pub which: String,
    /// Lab prefix for the demo's own lab (removed at the end).
    pub prefix: String,
    /// Seconds of wrk without an attack (the reference); the daemon learns normal traffic meanwhile.
    pub baseline_seconds: f64,
    /// Seconds the attack lasts.
    pub attack_seconds: f64,
    /// UDP flood: packets per second (paced).
    pub udp_pps: f64,
    /// UDP flood: distinct sources (Zipf rates).
    pub udp_sources: u32,
    /// SYN flood on port 80: packets per second (paced).
    pub syn_pps: f64,
    /// SYN flood: distinct sources (Zipf rates; the first ones also send the UDP flood).
    pub syn_sources: u32,
    /// Zipf exponent of both floods.
    pub zipf: f64,
    /// K: rules of the EMULATED NIC table.
    pub nic_capacity: u32,
    /// Daemon interval (seconds).
    pub interval: f64,
    /// wrk connections (fixed for the whole run).
    pub connections: u32,
    /// CPU for nginx and wrk in both runs (the generator, a stand-in for
    /// attackers on other machines, runs on CPU 0).
    pub service_cpu: usize,
    /// Do not pin nginx and wrk: they then share CPU 0 with the generator
    /// under attack but not in the reference run (legit_ok_pct then measures
    /// the lab's generator as much as the attack).
    pub no_pin: bool,
    /// Longest wait for every source to be unbanned after the attack (seconds).
    pub unban_timeout: f64,
    /// Seconds of the dnsperf flood on the tenant's resolver.
    pub dns_seconds: f64,
    /// dnsperf's query rate (queries/s, from one source).
    pub dns_qps: u32,
    /// Print one JSON object.
    pub json: bool,
}

/// The report (`--json`): one section per application, all from one
/// `rampart run` on one interface.
#[derive(Debug, Serialize)]
pub struct RunDemoReport {
    /// The whole demo, lab up to lab down (seconds).
    pub duration_s: f64,
    /// Where the chain ran.
    pub interface: String,
    /// The chain's stages, in order.
    pub stages: Vec<&'static str>,
    /// The DDoS mitigation.
    pub ddos: DemoReport,
    /// The stream apps on the tap.
    pub stream: apps::StreamSection,
    /// The tenant's DNS rate limiter.
    pub tenant: apps::TenantSection,
}

/// The report (`--json`).
#[derive(Debug, Serialize)]
pub struct DemoReport {
    /// Attack start → first 100 ms window in which ≥ 99% of attack packets were dropped.
    pub time_to_mitigate_s: Option<f64>,
    /// Share of the attack packets that reached the (EMULATED) NIC — whole
    /// attack, detection time included — that rampart dropped.
    pub attack_dropped_pct: f64,
    /// Share of all attack packets sent that rampart dropped (the difference:
    /// frames the lab's wire lost before the NIC, `attack_lost_before_nic`).
    pub attack_dropped_of_sent_pct: f64,
    /// Attack frames lost on the wan → nic veth (queue overflow when the
    /// VM cannot run the NIC hop's NAPI in time): they never reached any tier.
    pub attack_lost_before_nic: u64,
    /// Share of attack packets dropped after `time_to_mitigate_s`.
    pub attack_dropped_after_mitigation_pct: f64,
    /// wrk requests/s under attack as a share of the no-attack run.
    pub legit_ok_pct: f64,
    /// Each CPU's busy and softirq share during the reference run (no
    /// attack) and during the attack, from /proc/stat: on this 2-vCPU VM
    /// the service shares CPU 1 with the lab's wire, so these say whether a
    /// low `legit_ok_pct` is the service's CPU doing less work.
    pub cpu_reference: Vec<CpuShare>,
    /// The same during the attack run.
    pub cpu_attack: Vec<CpuShare>,
    /// Blocks of sources outside the attack's address range.
    pub false_bans: usize,
    /// Each false ban: prefix, detector, reason.
    pub false_ban_details: Vec<String>,
    /// Blocks of the demo's other hostile sources (the port scanner, the
    /// DNS flooder): not false bans.
    pub other_hostile_blocks: Vec<String>,
    /// Share of attack packets dropped by the EMULATED NIC table.
    pub nic_share_pct: f64,
    /// Share a perfect top-K of exact sources (the K heaviest in the NIC from
    /// the first packet) would have reached. Prefix rules can beat it: one
    /// rule for a botnet's /24 holds many sources.
    pub oracle_nic_share_pct: f64,
    /// nic_share_pct / oracle_nic_share_pct.
    pub nic_share_of_oracle_pct: f64,
    /// Attack packets sent (UDP + SYN).
    pub attack_packets: u64,
    /// Dropped by the EMULATED NIC.
    pub nic_dropped: u64,
    /// Dropped in XDP on host0: blocked sources and prefixes, policed sources.
    pub xdp_dropped: u64,
    /// Answered or dropped by the XDP protection of the victim on host0
    /// (SYN cookies, the ACK guard).
    pub protect_handled: u64,
    /// Reached the host's stack (counted by an iptables rule on 172.16.0.0/12).
    pub leaked: u64,
    /// Frames (all traffic) the lab's veth wire lost to queue overflow during the attack phase.
    pub wire_lost: u64,
    /// The same, per veth end (a lost frame shows at both ends of its hop).
    pub wire_lost_by_if: HashMap<String, u64>,
    /// Sources blocked (distinct).
    pub sources_blocked: usize,
    /// Blocks by detector.
    pub blocks_by_detector: HashMap<String, usize>,
    /// Sources rate-limited in XDP during the attack: `source → victim: why`.
    pub policed: Vec<String>,
    /// Victims that had SYN cookies or the ACK guard on during the attack.
    pub protected: Vec<String>,
    /// Sources unbanned by the rate monitor after the attack.
    pub sources_unbanned: u64,
    /// Attack end → blacklist empty (seconds), if it emptied in time.
    pub unbanned_all_after_s: Option<f64>,
    /// Most EMULATED NIC rules at once.
    pub nic_rules_max: usize,
    /// wrk requests/s, no attack.
    pub wrk_rps_baseline: f64,
    /// wrk requests/s, attack phase.
    pub wrk_rps_attack: f64,
    /// wrk socket errors/timeouts in the attack phase.
    pub wrk_errors_attack: u64,
    /// CPU nginx and wrk were pinned to (None: not pinned).
    pub service_cpu: Option<usize>,
    /// Generator rates reached (pps): UDP, SYN.
    pub sent_pps: (f64, f64),
    /// Settings.
    pub mode: &'static str,
    /// Daemon interval.
    pub interval_s: f64,
    /// K.
    pub nic_capacity: u32,
    /// Attack seconds.
    pub attack_seconds: f64,
    /// The evidence of each attack (one pcap per attack the daemon saw,
    /// `tcpdump -r` reads them), copied out of the demo's files: kept
    /// until the next demo.
    pub pcaps: Vec<String>,
}

/// Where the demo keeps the attacks' pcaps (emptied at each demo).
fn evidence_dir() -> PathBuf {
    std::env::temp_dir().join("rampart-demo-evidence")
}

/// Copy the pcaps the alerts named out of the demo's files (removed at
/// the end) into [`evidence_dir`].
fn keep_evidence(pcaps: &[String]) -> Result<Vec<String>> {
    let dir = evidence_dir();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::Invalid(format!("creating {}: {e}", dir.display())))?;
    let mut kept = Vec::new();
    for p in pcaps {
        let src = Path::new(p);
        let Some(name) = src.file_name() else {
            continue;
        };
        let dst = dir.join(name);
        if std::fs::copy(src, &dst).is_ok() {
            kept.push(dst.display().to_string());
        }
    }
    Ok(kept)
}

struct Cleanup {
    lab: Lab,
    nginx: Option<Nginx>,
    resolver: Option<rampart_tenant::services::Daemon>,
    dir: PathBuf,
    scope: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.nginx = None;
        self.resolver = None;
        // rampart run leaves its ddos stage filtering in the chain.
        let _ = Filter::detach(&self.scope);
        let _ = rampart_dataplane::chain::Chain::remove(Some(&self.lab.host_ns()), HOST_IF);
        let _ = self.lab.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// iptables counters of the attack range and the legitimate client, in the host's raw PREROUTING.
fn ipt_setup(lab: &Lab) -> Result<()> {
    for src in ["172.16.0.0/12", "10.10.0.1/32"] {
        rampart_dataplane::cmd::in_ns(
            &lab.host_ns(),
            "iptables",
            &["-t", "raw", "-A", "PREROUTING", "-s", src],
        )?;
    }
    Ok(())
}

/// Packets counted by the host's raw PREROUTING rule for `src` (0 if unreadable).
fn ipt_count(lab: &Lab, src: &str) -> u64 {
    let out = rampart_dataplane::cmd::in_ns(
        &lab.host_ns(),
        "iptables",
        &["-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n"],
    )
    .unwrap_or_default();
    let src = src.trim_end_matches("/32");
    out.lines()
        .find(|l| l.split_whitespace().any(|f| f == src))
        .and_then(|l| l.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

fn ipt_leaked(lab: &Lab) -> u64 {
    ipt_count(lab, "172.16.0.0/12")
}

/// Frames that entered the EMULATED NIC (its XDP program on nic-wan saw them).
fn nic_in(lab: &Lab) -> Result<u64> {
    Ok(rampart_dataplane::xdp::veth_xdp_packets(
        Some(&lab.nic_ns()),
        rampart_lab::topology::NIC_WAN_IF,
    )?)
}

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    t: f64,
    nic: u64,
    xdp: u64,
    protect: u64,
    leaked: u64,
    nic_rules: usize,
}

/// Filter drops that are rampart's decisions about sources (not malformed frames).
const DECIDED_DROPS: [&str; 3] = ["blacklist", "blacklist_prefix", "policed"];

/// Protection counters that mean an attack packet never reached the stack
/// (answered with a cookie, or dropped).
fn protect_handled(s: &rampart_ddos::protect::ProtectStats) -> u64 {
    s.synack_sent
        + s.cookie_ack_invalid
        + s.guard_dropped
        + s.no_listener
        + s.bad_syn
        + s.syn_pending
}

/// Add the growth of per-key counters that may restart from zero (a NIC
/// rule removed and re-added, a victim's protection switched off and on).
fn accumulate<K: std::hash::Hash + Eq + Copy>(last: &mut HashMap<K, u64>, now: &[(K, u64)]) -> u64 {
    let mut add = 0;
    for (k, v) in now {
        let prev = last.insert(*k, *v).unwrap_or(0);
        add += if *v >= prev { v - prev } else { *v };
    }
    let live: std::collections::HashSet<K> = now.iter().map(|(k, _)| *k).collect();
    last.retain(|k, _| live.contains(k));
    add
}

/// What the sampler saw of detection's decisions besides blocks.
#[derive(Default)]
struct Seen {
    policed: std::collections::BTreeMap<String, String>,
    protected: std::collections::BTreeSet<String>,
}

/// Every 50 ms: NIC rule counters (accumulated over rule removals), XDP
/// drops of blocked and policed sources, protection's answers, leaks.
/// What the ddos stage of `rampart run` publishes.
struct DdosView(std::sync::Arc<std::sync::RwLock<View>>);

impl DdosView {
    fn view(&self) -> View {
        self.0.read().map(|v| v.clone()).unwrap_or_default()
    }
}

fn sampler(
    lab: &Lab,
    daemon: &DdosView,
    scope: &Scope,
    t0: Instant,
    stop: &AtomicBool,
    out: &Mutex<(Vec<Sample>, Seen)>,
) -> Result<()> {
    let nic = rampart_lab::nic::open(lab)?;
    let filter = Filter::open(&scope.name())?;
    let protect = rampart_ddos::protect::Protect::open(scope)?;
    let decided = |f: &Filter| -> Result<u64> {
        let s = f.stats()?;
        Ok(DECIDED_DROPS.iter().map(|r| s.dropped(r)).sum())
    };
    let (mut last_nic, mut last_prot) = (HashMap::new(), HashMap::new());
    let (mut nic_acc, mut prot_acc) = (0u64, 0u64);
    let xdp0 = decided(&filter)?;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let rules = nic.rules()?;
        let counts: Vec<(ipnet::IpNet, u64)> = rules.iter().map(|(a, s)| (*a, s.packets)).collect();
        nic_acc += accumulate(&mut last_nic, &counts);
        let entries = protect.list()?;
        let counts: Vec<(IpAddr, u64)> = entries
            .iter()
            .map(|e| (e.victim, protect_handled(&e.stats)))
            .collect();
        prot_acc += accumulate(&mut last_prot, &counts);
        let xdp = decided(&filter)? - xdp0;
        let leaked = ipt_leaked(lab);
        let mut g = out
            .lock()
            .map_err(|_| Error::Failed("sampler lock".into()))?;
        g.0.push(Sample {
            t: t0.elapsed().as_secs_f64(),
            nic: nic_acc,
            xdp,
            protect: prot_acc,
            leaked,
            nic_rules: rules.len(),
        });
        for e in &entries {
            g.1.protected.insert(e.victim.to_string());
        }
        // The daemon's view is updated once per interval: read it less often.
        if n.is_multiple_of(4) {
            for p in daemon.view().policed {
                g.1.policed
                    .entry(p.prefix.clone())
                    .or_insert_with(|| format!("{} → {}: {}", p.prefix, p.victim, p.reason));
            }
        }
        n += 1;
        drop(g);
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn demo_config(lab: &Lab, args: &DemoSpec, dir: &Path) -> Result<Config> {
    crate::ddos::lab_config(
        lab,
        args.interval,
        (args.attack_seconds + 2.0).max(4.0),
        args.nic_capacity,
        dir,
    )
}

/// The `rampart run` config of the demo: host0 with the three stages, the
/// ddos section as the DDoS benchmarks' lab config, one API (the tenant
/// uses it) and one alert stream.
fn run_config(lab: &Lab, args: &DemoSpec, dir: &Path) -> Result<rampart_run::Config> {
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!("{} {}\n", apps::TENANT_NAME, apps::TENANT_TOKEN),
    )
    .map_err(|e| Error::io(format!("writing {}", tokens.display()), e))?;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\
         [alerts]\nfile = \"{}\"\n\
         [[interface]]\nname = \"{HOST_IF}\"\nnetns = \"{}\"\n\
         [stream]\napps = [\"flowmeter\", \"portscan\"]\n{}",
        tokens.display(),
        dir.join("alerts.jsonl").display(),
        lab.host_ns(),
        apps::tenant_toml(lab.prefix()),
    );
    let mut c = rampart_run::Config::parse(&text)?;
    c.ddos = Some(demo_config(lab, args, dir)?);
    c.validate()?;
    Ok(c)
}

fn oracle_share(args: &DemoSpec, sent_udp: u64, sent_syn: u64) -> f64 {
    let su = Dist::Zipf { s: args.zipf }.shares(args.udp_sources);
    let ss = Dist::Zipf { s: args.zipf }.shares(args.syn_sources);
    let n = args.udp_sources.max(args.syn_sources) as usize;
    let mut per: Vec<f64> = (0..n)
        .map(|i| {
            su.get(i).copied().unwrap_or(0.0) * sent_udp as f64
                + ss.get(i).copied().unwrap_or(0.0) * sent_syn as f64
        })
        .collect();
    per.sort_by(|a, b| b.total_cmp(a));
    let top: f64 = per.iter().take(args.nic_capacity as usize).sum();
    100.0 * top / (sent_udp + sent_syn).max(1) as f64
}

/// Run the demo in a lab of its own and print its report (human lines,
/// or one JSON object with `json`). The lab, the filter pins and the
/// demo's files are removed at the end, also on error and Ctrl-C.
///
/// # Errors
/// Settings out of range or a missing tool ([`Error::Invalid`]), lab,
/// daemon or generator failures; [`Error::Interrupted`] on Ctrl-C.
pub fn run(args: &DemoSpec, cancel: &AtomicBool) -> Result<()> {
    let started = Instant::now();
    if args.which != "all" {
        return Err(Error::Invalid(format!(
            "unknown demo {:?}: the demo is `all` (rampart demo: the three applications under one rampart run)",
            args.which
        )));
    }
    if !(args.attack_seconds >= 2.0 && args.baseline_seconds >= 3.0) {
        return Err(Error::Invalid(
            "--attack-seconds must be ≥ 2 and --baseline-seconds ≥ 3".into(),
        ));
    }
    if !(args.dns_seconds >= 1.0 && args.dns_qps >= 1) {
        return Err(Error::Invalid(
            "--dns-seconds must be ≥ 1 and --dns-qps ≥ 1".into(),
        ));
    }
    for p in [
        "nginx", "wrk", "curl", "iptables", "dnsperf", "dig", "nmap", "dnsmasq",
    ] {
        if !web::have(p) {
            return Err(Error::Invalid(format!("the demo needs {p}: install it (`./run deps` installs nginx, wrk, curl, iptables, dnsperf, dnsutils, nmap and dnsmasq)")));
        }
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let service_cpu = if args.no_pin || ncpu < 2 {
        None
    } else if args.service_cpu == 0 || args.service_cpu >= ncpu {
        return Err(Error::Invalid(format!("--service-cpu {} is not usable: the generator runs on CPU 0 and this machine has CPUs 0-{}; pick 1-{} or pass --no-pin", args.service_cpu,
            ncpu - 1,
            ncpu - 1)));
    } else {
        Some(args.service_cpu)
    };
    let lab = Lab::new(&args.prefix)?;
    let say = |s: String| {
        if !args.json {
            println!("{s}");
        }
    };
    say(format!(
        "lab {}: wan (wrk, attackers, a scanner, DNS clients) → EMULATED NIC (K = {}) → host (nginx, rampart run) → tenant {} (dnsmasq)",
        lab.prefix(),
        args.nic_capacity,
        apps::TENANT_NAME,
    ));
    lab.up(&UpOptions {
        nic_capacity: Some(args.nic_capacity),
        tenants: apps::TENANT,
        ..UpOptions::default()
    })?;
    let dir = std::env::temp_dir().join(format!("rampart-demo-{}", lab.prefix()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let host_scope = Scope::new(Some(&lab.host_ns()), HOST_IF)?;
    let scope = host_scope.name();
    let _ = Filter::detach(&scope);
    let mut guard = Cleanup {
        lab: Lab::new(&args.prefix)?,
        nginx: None,
        resolver: None,
        dir: dir.clone(),
        scope: scope.clone(),
    };
    if service_cpu.is_some() {
        web::steer_queues_by_cpu(&lab)?;
    }
    guard.nginx = Some(Nginx::start(
        &lab.host_ns(),
        "10.10.0.2",
        service_cpu,
        &dir,
        &lab.wan_ns(),
    )?);
    ipt_setup(&lab)?;
    apps::add_wan_addresses(&lab)?;
    guard.resolver = Some(apps::start_resolver(&lab)?);
    let cfg = run_config(&lab, args, &dir)?;

    // 1. Reference: wrk without attack; rampart run starts once wrk runs and learns it as normal.
    say(format!(
        "no attack: wrk -c{} for {:.0} s against nginx ({}); rampart run starts on {HOST_IF} (ddos → stream → tenant) and learns normal traffic",
        args.connections,
        args.baseline_seconds,
        service_cpu.map_or("not pinned".to_string(), |c| format!(
            "nginx and wrk on CPU {c}, the attack generator on CPU 0"
        ))
    ));
    // rampart run starts while wrk warms up (the ddos daemon learns wrk
    // as normal), so that its start does not share the measured seconds:
    // the reference and the attack run both with the three stages up.
    let warm = Wrk::spawn(&lab.wan_ns(), URL, WARM_UP_S, args.connections, service_cpu)?;
    std::thread::sleep(Duration::from_millis(700));
    // Declared after the guard: stopped before the lab goes.
    let host = Host::start(&cfg)?;
    let daemon = DdosView(
        host.ddos_view()
            .ok_or_else(|| Error::Failed("rampart run started without its ddos stage".into()))?,
    );
    let api = format!(
        "http://{}",
        host.api_addr()
            .ok_or_else(|| Error::Failed("rampart run has no API".into()))?
    );
    warm.finish()?;
    let w = Wrk::spawn(
        &lab.wan_ns(),
        URL,
        args.baseline_seconds,
        args.connections,
        service_cpu,
    )?;
    let cpu0 = CpuTicks::read();
    let base = w.finish()?;
    let cpu_reference = CpuTicks::read().share_since(&cpu0);
    let rps0 = base.rps();
    say(format!("  {} requests/s", si(rps0)));
    if cancel.load(Ordering::Relaxed) {
        return Err(Error::Interrupted);
    }

    // 2. A scan first (the port-scan app must see its SYNs: once the
    // attack is on, the victim's SYN cookies answer them ahead of the tap).
    let alerts_file = dir.join("alerts.jsonl");
    say(format!(
        "scan: nmap -sS of {HOST_IF}'s address from {}",
        apps::SCANNER
    ));
    let scan = apps::scan(&lab, &alerts_file)?;

    // 3. Attack, with wrk running throughout.
    let total = args.attack_seconds + 2.0;
    say(format!(
        "attack: UDP flood {}pps from {} sources + SYN flood {}pps from {} sources (Zipf {}), {:.0} s; mode hw+xdp-host",
        si(args.udp_pps), args.udp_sources, si(args.syn_pps), args.syn_sources, args.zipf, args.attack_seconds
    ));
    let w = Wrk::spawn(&lab.wan_ns(), URL, total, args.connections, service_cpu)?;
    let cpu1 = CpuTicks::read();
    std::thread::sleep(Duration::from_millis(1000));
    let udp = GenSpec {
        sources: args.udp_sources,
        dist: Dist::Zipf { s: args.zipf },
        proto: Proto::Udp,
        size: 512,
        pps: Some(args.udp_pps),
        limit: Limit::Seconds(args.attack_seconds),
        seed: 11,
        ..GenSpec::default()
    };
    let syn = GenSpec {
        sources: args.syn_sources,
        dist: Dist::Zipf { s: args.zipf },
        proto: Proto::Syn,
        pps: Some(args.syn_pps),
        limit: Limit::Seconds(args.attack_seconds),
        seed: 12,
        ..GenSpec::default()
    };
    let lost0 = rampart_lab::gen::wire_lost(&lab)?;
    let (nic_in0, wrk_in0) = (nic_in(&lab)?, ipt_count(&lab, "10.10.0.1/32"));
    let gu = Generator::new(&lab, &udp)?;
    let gs = Generator::with_anchor(&lab, &syn, "gen-anchor-p")?;
    let samples = Mutex::new((Vec::new(), Seen::default()));
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    if std::env::var_os("RAMPART_DEMO_TRACE").is_some() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        eprintln!("trace attack starts at unix {:.3}", now.as_secs_f64());
    }
    let (ru, rs, sres) = std::thread::scope(|s| {
        let smp = s.spawn(|| sampler(&lab, &daemon, &host_scope, t0, &stop, &samples));
        let hu = s.spawn(|| gu.run(cancel));
        let hs = s.spawn(|| gs.run(cancel));
        let ru = hu
            .join()
            .map_err(|_| Error::Failed("generator panicked".into()));
        let rs = hs
            .join()
            .map_err(|_| Error::Failed("generator panicked".into()));
        // Let the last frames land, then stop sampling before any unban.
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        let sres = smp
            .join()
            .map_err(|_| Error::Failed("sampler panicked".into()));
        (ru, rs, sres)
    });
    let attack_end = Instant::now();
    let mut lost_run = rampart_lab::gen::wire_lost(&lab)?;
    for ((_, b), (_, a)) in lost_run.iter_mut().zip(lost0.iter()) {
        *b = b.saturating_sub(*a);
    }
    let wire_lost = rampart_lab::gen::hops_lost(&lost_run);
    let wire_lost_by_if: HashMap<String, u64> =
        lost_run.iter().map(|(i, n)| (i.to_string(), *n)).collect();
    // Attack frames into the NIC = all frames into it − wrk's (counted at the host).
    let wrk_frames = ipt_count(&lab, "10.10.0.1/32").saturating_sub(wrk_in0);
    let nic_frames = nic_in(&lab)?.saturating_sub(nic_in0);
    let (ru, rs) = (ru??, rs??);
    sres??;
    let under = w.finish()?;
    let cpu_attack = CpuTicks::read().share_since(&cpu1);
    let rps1 = under.rps();
    let (samples, seen) = samples
        .into_inner()
        .map_err(|_| Error::Failed("sampler lock".into()))?;
    let last = samples.last().copied().unwrap_or_default();
    if std::env::var_os("RAMPART_DEMO_TRACE").is_some() {
        for s in &samples {
            eprintln!(
                "trace t={:.3} nic={} xdp={} protect={} leaked={} rules={}",
                s.t, s.nic, s.xdp, s.protect, s.leaked, s.nic_rules
            );
        }
    }
    let attack_packets = ru.sent_packets + rs.sent_packets;
    let attack_in = nic_frames.saturating_sub(wrk_frames).min(attack_packets);

    // time to mitigate: first 100 ms window with ≥ 99% of its attack packets dropped.
    let mut ttm = None;
    let mut at_ttm = Sample::default();
    for w in samples.windows(3) {
        let (a, b) = (w[0], w[2]);
        let dropped = (b.nic + b.xdp + b.protect).saturating_sub(a.nic + a.xdp + a.protect);
        let leaked = b.leaked.saturating_sub(a.leaked);
        if dropped + leaked > 100 && dropped as f64 >= 0.99 * (dropped + leaked) as f64 {
            ttm = Some(b.t);
            at_ttm = b;
            break;
        }
    }
    let dropped = last.nic + last.xdp + last.protect;
    let after_dropped = dropped.saturating_sub(at_ttm.nic + at_ttm.xdp + at_ttm.protect);
    let after_leaked = last.leaked.saturating_sub(at_ttm.leaked);

    // 4. The attack is over: while detection ends it and unbans the
    // sources, the DNS flood on the tenant's limiter.
    say(format!(
        "attack stopped; detection unbans the sources. Meanwhile the tenant submits its DNS rate limiter; dnsperf floods the tenant's resolver from {} ({} q/s, {:.0} s) while dig asks from {} other clients",
        apps::FLOODER,
        args.dns_qps,
        args.dns_seconds,
        apps::DIG_CLIENTS.len()
    ));
    let apps_spec = apps::AppsSpec {
        dns_seconds: args.dns_seconds,
        dns_qps: args.dns_qps,
    };
    let (unbanned_after, phase) = std::thread::scope(|s| {
        let phase = s.spawn(|| apps::run(&lab, &apps_spec, &api, &dir, cancel));
        let mut unbanned_after = None;
        while attack_end.elapsed().as_secs_f64() < args.unban_timeout
            && !cancel.load(Ordering::Relaxed)
        {
            let v = daemon.view();
            if v.blocked.is_empty() && v.blocked_total > 0 {
                unbanned_after = Some(attack_end.elapsed().as_secs_f64());
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let phase = phase
            .join()
            .map_err(|_| Error::Failed("the stream and tenant part panicked".into()));
        (unbanned_after, phase)
    });
    let tenant = phase??;
    let view = daemon.view();
    // Stopping ends the tap's input: the stream apps flush what they hold.
    let counts = host.stream_counts.clone();
    host.stop();
    let stream = apps::stream_section(
        counts.flows.load(Ordering::Relaxed),
        counts.alerts.load(Ordering::Relaxed),
        scan.finish(),
        &alerts_file,
    );

    // Alerts: every block and its detector; false bans are blocks outside the attack range.
    let attack_net = Prefix::parse("172.16.0.0/12")?;
    let mut blocked_set = std::collections::HashSet::new();
    let mut by_det: HashMap<String, usize> = HashMap::new();
    let mut false_bans = 0;
    let mut false_ban_details = Vec::new();
    let mut other_hostile_blocks = Vec::new();
    let others = [apps::SCANNER, apps::FLOODER].map(|a| Prefix::parse(&a.to_string()));
    let mut pcaps = Vec::new();
    for line in std::fs::read_to_string(dir.join("alerts.jsonl"))
        .unwrap_or_default()
        .lines()
    {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let v = &v["rampart"];
        if let Some(p) = v["pcap"].as_str() {
            if !pcaps.iter().any(|x| x == p) {
                pcaps.push(p.to_string());
            }
        }
        if v["event"] != "block" {
            continue;
        }
        let p = v["prefix"].as_str().unwrap_or_default().to_string();
        let inside = Prefix::parse(&p)
            .map(|x| attack_net.contains(&x.net().addr()))
            .unwrap_or(false);
        if blocked_set.insert(p.clone()) {
            *by_det
                .entry(v["detector"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
            let other = Prefix::parse(&p).is_ok_and(|x| {
                others
                    .iter()
                    .flatten()
                    .any(|o| x.net().contains(&o.net().addr()))
            });
            if other {
                other_hostile_blocks.push(format!(
                    "{p} by {}: {}",
                    v["detector"].as_str().unwrap_or("?"),
                    v["reason"].as_str().unwrap_or("?")
                ));
            } else if !inside {
                false_bans += 1;
                false_ban_details.push(format!(
                    "{p} by {}: {}",
                    v["detector"].as_str().unwrap_or("?"),
                    v["reason"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    let pct = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
    let oracle = oracle_share(args, ru.sent_packets, rs.sent_packets);
    let nic_share = pct(last.nic, attack_packets);
    let r = DemoReport {
        time_to_mitigate_s: ttm,
        attack_dropped_pct: pct(dropped, attack_in),
        attack_dropped_of_sent_pct: pct(dropped, attack_packets),
        attack_lost_before_nic: attack_packets - attack_in,
        attack_dropped_after_mitigation_pct: pct(after_dropped, after_dropped + after_leaked),
        legit_ok_pct: 100.0 * rps1 / rps0.max(1e-9),
        cpu_reference,
        cpu_attack,
        false_bans,
        false_ban_details,
        other_hostile_blocks,
        nic_share_pct: nic_share,
        oracle_nic_share_pct: oracle,
        nic_share_of_oracle_pct: 100.0 * nic_share / oracle.max(1e-9),
        attack_packets,
        nic_dropped: last.nic,
        xdp_dropped: last.xdp,
        protect_handled: last.protect,
        leaked: last.leaked,
        wire_lost,
        wire_lost_by_if,
        sources_blocked: blocked_set.len(),
        blocks_by_detector: by_det,
        policed: seen.policed.into_values().collect(),
        protected: seen.protected.into_iter().collect(),
        sources_unbanned: view.unbanned_total,
        unbanned_all_after_s: unbanned_after,
        nic_rules_max: samples.iter().map(|s| s.nic_rules).max().unwrap_or(0),
        wrk_rps_baseline: rps0,
        wrk_rps_attack: rps1,
        wrk_errors_attack: under.errors,
        service_cpu,
        sent_pps: (ru.sent_pps, rs.sent_pps),
        mode: Mode::HwXdpHost.name(),
        interval_s: args.interval,
        nic_capacity: args.nic_capacity,
        attack_seconds: args.attack_seconds,
        pcaps: keep_evidence(&pcaps)?,
    };
    drop(guard);
    let report = RunDemoReport {
        duration_s: started.elapsed().as_secs_f64(),
        interface: format!("{HOST_IF} (netns {})", lab.host_ns()),
        stages: cfg.stages(),
        ddos: r,
        stream,
        tenant,
    };
    if args.json {
        return print_json(&report);
    }
    let r = &report.ddos;
    let ttm_s = r
        .time_to_mitigate_s
        .map(|t| format!("{t:.2} s"))
        .unwrap_or_else(|| "never".into());
    println!("ddos:");
    println!(
        "  {} requests/s under attack ({:.1}% of no attack), {} socket errors",
        si(rps1),
        r.legit_ok_pct,
        r.wrk_errors_attack
    );
    let cpus = |v: &[CpuShare]| {
        v.iter()
            .enumerate()
            .map(|(i, c)| format!("CPU {i} {:.0}% (softirq {:.0}%)", c.busy_pct, c.softirq_pct))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "  busy without attack: {}; under attack: {}",
        cpus(&r.cpu_reference),
        cpus(&r.cpu_attack)
    );
    println!(
        "  {} attack packets reached the NIC: {:.2}% stopped (NIC {}, XDP {}, SYN cookies and ACK guard {}), {} reached the host stack",
        r.attack_packets - r.attack_lost_before_nic, r.attack_dropped_pct, r.nic_dropped, r.xdp_dropped, r.protect_handled, r.leaked
    );
    for p in &r.policed {
        println!("  policed {p}");
    }
    if !r.protected.is_empty() {
        println!(
            "  SYN cookies / ACK guard on for {}",
            r.protected.join(", ")
        );
    }
    if r.attack_lost_before_nic > 0 {
        println!(
            "  {} attack frames ({:.2}% of those sent) were lost on the lab's wan → nic veth before any tier ({:.2}% of all sent were dropped by rampart)",
            r.attack_lost_before_nic,
            100.0 * r.attack_lost_before_nic as f64 / r.attack_packets.max(1) as f64,
            r.attack_dropped_of_sent_pct
        );
    }
    println!(
        "  time to mitigate (≥ 99% of attack packets dropped): {ttm_s}; after that {:.3}% dropped",
        r.attack_dropped_after_mitigation_pct
    );
    println!(
        "  {} sources blocked {:?}, {} false bans; up to {} EMULATED NIC rules",
        r.sources_blocked, r.blocks_by_detector, r.false_bans, r.nic_rules_max
    );
    for d in &r.false_ban_details {
        println!("  FALSE BAN {d}");
    }
    println!(
        "  NIC share of attack packets {:.1}% (perfect top-{}: {:.1}%, reached {:.1}% of it)",
        r.nic_share_pct, args.nic_capacity, r.oracle_nic_share_pct, r.nic_share_of_oracle_pct
    );
    match r.unbanned_all_after_s {
        Some(s) => println!(
            "  all {} sources unbanned {s:.1} s after the attack stopped",
            r.sources_unbanned
        ),
        None => println!(
            "  {} sources still blocked after {:.0} s",
            view.blocked.len(),
            args.unban_timeout
        ),
    }
    for p in &r.pcaps {
        println!("  evidence: {p}");
    }
    for b in &r.other_hostile_blocks {
        println!("  also blocked (not a false ban): {b}");
    }
    let s = &report.stream;
    println!("stream ({} on one tap):", s.apps.join(" + "));
    println!(
        "  {} flow records; scanner {} (nmap -sS ports {}) {}; sources flagged: {}",
        s.flows,
        s.scanner,
        s.scanned_ports,
        match (s.scanner_flagged, s.flagged_after_s) {
            (true, Some(t)) => format!("flagged {t:.1} s after the scan started"),
            (true, None) => "flagged".to_string(),
            (false, _) => "NOT flagged".to_string(),
        },
        if s.flagged.is_empty() {
            "none".to_string()
        } else {
            s.flagged.join(", ")
        }
    );
    let t = &report.tenant;
    println!("tenant {} ({}, {}):", t.tenant, t.program, t.resolver);
    println!(
        "  dnsperf from {}: {} queries at {:.0} q/s; the limiter ({} q/s per source, {} q/s per /24, {} over budget) kept {:.1}% from the resolver ({} truncated, {} dropped, {} passed)",
        t.flooder,
        t.flood_queries,
        t.flood_qps,
        t.per_source_qps,
        t.per_prefix_qps,
        t.over_budget,
        t.flood_limited_pct,
        t.truncated,
        t.dropped,
        t.passed
    );
    println!(
        "  dig from {} other clients: {} of {} answered ({:.1}%)",
        t.dig_clients.len(),
        t.dig_ok,
        t.dig_sent,
        t.dig_ok_pct
    );
    println!(
        "lab {} removed; the demo took {:.0} s",
        lab.prefix(),
        report.duration_s
    );
    Ok(())
}

/// One CPU's share of a window: busy (not idle nor waiting for I/O) and
/// softirq, percent of the window.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct CpuShare {
    /// Busy, percent.
    pub busy_pct: f64,
    /// Of which softirq (packet processing), percent.
    pub softirq_pct: f64,
}

/// Per-CPU tick counters of /proc/stat: (total, idle + iowait, softirq).
#[derive(Debug, Clone, Default)]
struct CpuTicks(Vec<(u64, u64, u64)>);

impl CpuTicks {
    fn read() -> Self {
        Self::parse(&std::fs::read_to_string("/proc/stat").unwrap_or_default())
    }

    fn parse(text: &str) -> Self {
        Self(
            text.lines()
                .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
                .map(|l| {
                    let v: Vec<u64> = l
                        .split_whitespace()
                        .skip(1)
                        .filter_map(|x| x.parse().ok())
                        .collect();
                    let at = |i: usize| v.get(i).copied().unwrap_or(0);
                    // user nice system idle iowait irq softirq steal (guest
                    // time is already counted in user).
                    let total: u64 = v.iter().take(8).sum();
                    (total, at(3) + at(4), at(6))
                })
                .collect(),
        )
    }

    fn share_since(&self, before: &Self) -> Vec<CpuShare> {
        self.0
            .iter()
            .zip(&before.0)
            .map(|(a, b)| {
                let total = a.0.saturating_sub(b.0).max(1) as f64;
                let idle = a.1.saturating_sub(b.1) as f64;
                CpuShare {
                    busy_pct: 100.0 * (total - idle).max(0.0) / total,
                    softirq_pct: 100.0 * a.2.saturating_sub(b.2) as f64 / total,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn cpu_shares_come_from_the_per_cpu_lines() {
        let a = CpuTicks::parse(
            "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0 0 0\n",
        );
        let b = CpuTicks::parse(
            "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 5 0 25 40 10 0 20 0 0 0\ncpu1 5 0 5 140 0 0 0 0 0 0\n",
        );
        let s = b.share_since(&a);
        assert_eq!(s.len(), 2);
        // CPU 0: 50 ticks, 10 waiting for I/O, 20 system and 20 softirq.
        assert_eq!(s[0].busy_pct, 80.0);
        assert_eq!(s[0].softirq_pct, 40.0);
        // CPU 1: 100 ticks, all idle.
        assert_eq!(s[1].busy_pct, 0.0);
    }
}
