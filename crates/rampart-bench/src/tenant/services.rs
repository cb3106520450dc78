//! `rampart bench tenant --out DIR [--quick]`: the evaluation of Chaignon et al. (SecSoN 2018) of
//! the tenant services, in a lab of its own.
//!
//! 1. **Accounting overhead** (fairness machinery on vs off): host0's NAPI
//!    runs threaded on its own CPU (`host_cpu`, SCHED_FIFO, as in
//!    `tenant-fairness`); the generator floods from `gen_cpu`. For each
//!    workload the NAPI thread's CPU time per packet is measured with
//!    accounting and fairness on (bucket budget of a whole core, so no
//!    packet is rejected — checked) and with both off, alternated, medians.
//!    Workloads: a drop-only tenant program (the baseline of Chaignon et al.; UDP
//!    flood), the DNS server (dnsmasq, no program: XDP_PASS, DNS queries)
//!    and nginx (no program, wrk from the wan namespace).
//! 2. **Offload gain of the DNS rate limiter**: queries handled per second
//!    by the XDP rate limiter vs the userspace forwarder
//!    ([`crate::userspace::DnsForwarder`], same policy), both under the
//!    same flood (lab generator, 4096 sources, as fast as it goes) and on
//!    the same core: host0's NAPI thread is moved back to the ordinary
//!    scheduler and pinned to `host_cpu`, and the forwarder's threads are
//!    pinned there too, so the kernel path and the service share that core
//!    as they would on a host. Alternated, medians.
//!
//! Outputs in DIR: `summary.json` (everything, with `fairness_overhead_pct`
//! = the drop-only overhead and `dns_offload_gain`), `overhead.csv`,
//! `offload.csv`, `overhead.png`, `offload.png`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::report::{self, BarChart, Machine};
use rampart_lab::gen::{GenSpec, Generator};
use rampart_lab::packet::Proto;
use rampart_lab::topology::{UpOptions, HOST_IF};
use rampart_lab::Lab;
use serde::Serialize;

use super::figures::{self, FigureOpts, ScalingFigure, SharesFigure};
use crate::error::{Error, Result};
use rampart_lab::hostcpu;
use rampart_lab::traffic::{Limit, TenantTraffic};
use rampart_tenant::compiler::{Compiler, Submission};
use rampart_tenant::config::Config;
use rampart_tenant::host::HostAgent;
use rampart_tenant::programs::{
    DnsLimits, DnsStats, SynProxyConfig, SynStats, DNS_RATELIMIT_C, SYNPROXY_C,
};
use rampart_tenant::userspace::{DnsForwarder, TcpProxy};

/// Options.
#[derive(Debug, Clone, Serialize)]
pub struct TenantBenchOpts {
    /// Lab prefix.
    pub prefix: String,
    /// Measured seconds per repetition.
    pub seconds: f64,
    /// Repetitions per mode (alternated).
    pub reps: u32,
    /// Repetitions of the overhead part: its single repetitions scatter
    /// by ±6 points on this VM (interleaved slices notwithstanding), so
    /// the median of three moved by several points between quick runs of
    /// the same code; seven make it steadier.
    pub overhead_reps: u32,
    /// The host's core.
    pub host_cpu: usize,
    /// The generator's CPU.
    pub gen_cpu: usize,
    /// Parts to run (`overhead`, `offload`, `shares`, `scaling`).
    pub parts: Vec<String>,
    /// Competitor counts of the token-bucket vs cgroup comparison.
    pub scaling_n: Vec<usize>,
    /// Offload part: keep the EMULATED NIC's way back on the host core
    /// (where a veth runs it) instead of the generator's CPU
    /// ([`hostcpu::WireOnCpu`]).
    pub wire_on_host_core: bool,
}

/// Every part of the benchmark, in the order run.
pub const PARTS: [&str; 4] = ["overhead", "shares", "scaling", "offload"];

impl TenantBenchOpts {
    /// `--quick` (3 × 1.5 s) or the full run (5 × 4 s).
    pub fn new(quick: bool) -> Self {
        Self {
            prefix: "tbench".into(),
            seconds: if quick { 1.5 } else { 4.0 },
            reps: if quick { 3 } else { 5 },
            overhead_reps: 7,
            host_cpu: 1,
            gen_cpu: 0,
            parts: PARTS.iter().map(|p| (*p).to_string()).collect(),
            scaling_n: if quick {
                vec![1, 2, 4, 8]
            } else {
                (1..=8).collect()
            },
            wire_on_host_core: false,
        }
    }

    fn has(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

/// One repetition of an overhead measurement.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadRep {
    /// Accounting and fairness on.
    pub on: bool,
    /// Packets the dispatcher saw.
    pub packets: u64,
    /// NAPI-thread CPU time, ns.
    pub cpu_ns: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Packets rejected for lack of tokens (must be 0).
    pub rejected: u64,
    /// Client requests/s (nginx only).
    pub requests_per_s: f64,
}

/// Accounting overhead for one workload.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadRow {
    /// Workload.
    pub workload: String,
    /// Median NAPI ns per packet, accounting off.
    pub off_ns_per_packet: f64,
    /// Median NAPI ns per packet, accounting and fairness on.
    pub on_ns_per_packet: f64,
    /// Median over repetitions of (on / off − 1) × 100, each repetition's
    /// on and off measured interleaved in the same seconds.
    pub overhead_pct: f64,
    /// Every repetition's (on / off − 1) × 100.
    pub paired_overhead_pct: Vec<f64>,
    /// Median packets/s, off.
    pub off_pps: f64,
    /// Median packets/s, on.
    pub on_pps: f64,
    /// Every repetition.
    pub reps: Vec<OverheadRep>,
}

/// One repetition of an offload measurement.
#[derive(Debug, Clone, Serialize)]
pub struct OffloadRep {
    /// `xdp` or `userspace`.
    pub mode: &'static str,
    /// Queries handled.
    pub handled: u64,
    /// Frames the generator sent.
    pub sent: u64,
    /// Seconds.
    pub seconds: f64,
    /// CPU time spent on the host core: host0's NAPI thread, ksoftirqd of
    /// that CPU and (userspace) the forwarder's threads, ns.
    pub cpu_ns: u64,
    /// Of which host0's NAPI thread.
    pub napi_ns: u64,
    /// Of which ksoftirqd of the host core.
    pub ksoftirqd_ns: u64,
    /// Of which the userspace service's threads.
    pub service_ns: u64,
}

/// Offload gain of one service.
#[derive(Debug, Clone, Serialize)]
pub struct OffloadRow {
    /// Service.
    pub service: String,
    /// Median handled per second of host-core CPU time, offloaded (XDP tenant program).
    pub offloaded_pps: f64,
    /// Median handled per second of host-core CPU time, userspace.
    pub userspace_pps: f64,
    /// offloaded / userspace, per CPU-second (the bar's figure).
    pub gain: f64,
    /// Median handled per wall-clock second, offloaded.
    pub offloaded_wall_pps: f64,
    /// Median handled per wall-clock second, userspace.
    pub userspace_wall_pps: f64,
    /// Ratio of the wall-clock rates.
    pub wall_gain: f64,
    /// Median offered (sent) frames/s.
    pub offered_pps: f64,
    /// SYN proxy only: SYN-ACKs the XDP proxy counted itself over all its
    /// repetitions (cross-check of the far-end count).
    pub xdp_synacks: Option<u64>,
    /// Every repetition.
    pub reps: Vec<OffloadRep>,
}

/// Everything the benchmark measured (a part not run is null / empty).
#[derive(Debug, Clone, Serialize)]
pub struct TenantBenchReport {
    /// Drop-only baseline: accounting + fairness overhead, percent.
    pub fairness_overhead_pct: Option<f64>,
    /// DNS rate limiter: offloaded handled/s ÷ userspace handled/s (per CPU-second of the host core).
    pub dns_offload_gain: Option<f64>,
    /// SYN-cookie proxy: SYNs answered per CPU-second of the host core, XDP ÷ userspace (kernel SYN cookies + TcpProxy).
    pub syn_offload_gain: Option<f64>,
    /// The dispatcher's own run time on a drop-only packet (BPF_PROG_RUN,
    /// ns per run, median): [accounting + fairness off, on].
    pub dispatcher_prog_run_ns: Option<[f64; 2]>,
    /// Per-tenant CPU shares with / without fairness under the services' floods.
    pub shares: Option<SharesFigure>,
    /// Token buckets vs cgroups for 1–8 competitors.
    pub scaling: Option<ScalingFigure>,
    /// Accounting overhead per workload.
    pub overhead: Vec<OverheadRow>,
    /// Offload gain per service.
    pub offload: Vec<OffloadRow>,
    /// Machine.
    pub machine: Machine,
    /// /proc/loadavg before and after.
    pub loadavg: [String; 2],
    /// Options.
    pub opts: TenantBenchOpts,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn median(v: Vec<f64>) -> f64 {
    report::median(&v).unwrap_or(0.0)
}

const DROP_ALL: &str = r#"#include "rampart_tenant.h"
/* The drop-only baseline of Chaignon et al. */
int tenant_main(struct xdp_md *ctx)
{
    return XDP_DROP;
}
"#;

fn config(lab: &Lab, name: &str) -> Result<Config> {
    let mut t = String::new();
    for i in 1..=3 {
        t.push_str(&format!(
            "[[tenant]]\nname = \"t{i}\"\nselectors = [\"prefix:10.20.{i}.0/24\"]\n\
             ports = [\"t{i}\"]\ndomain_netns = \"{}\"\n",
            lab.tenant_ns(i)
        ));
    }
    // A budget of a core per tenant and buckets of a second: nothing is
    // rejected even when this busy machine delays the token thread (the
    // overhead measured is the machinery's, not the policy's; checked).
    Ok(Config::parse(&format!(
        "[infra]\nname = \"{name}\"\nnetns = \"{}\"\ninterfaces = [\"{HOST_IF}\"]\n\
         [fairness]\nenabled = false\nbudget_cores = 3.0\nperiod_ms = 10\nbucket_ms = 1000\n{t}",
        lab.host_ns()
    ))?)
}

fn set_mode(agent: &mut HostAgent, on: bool) -> Result<()> {
    if on {
        agent.set_accounting(true)?;
        agent.set_fairness(true)?;
    } else {
        agent.set_fairness(false)?;
        agent.set_accounting(false)?;
    }
    Ok(())
}

fn napi_runtime(threads: &hostcpu::NapiThreads) -> u64 {
    threads.pids.iter().map(|&p| hostcpu::runtime_ns(p)).sum()
}

/// Length of one on or off slice of an interleaved repetition.
const SLICE: Duration = Duration::from_millis(100);

/// Interleaved measurement: while the load runs, accounting + fairness
/// are switched on and off every [`SLICE`], and each slice's NAPI-thread
/// CPU time and packets are added to its mode. Both modes thus sample the
/// same seconds of this shared machine (the other helpers' load changes
/// on a scale of seconds and moved whole 1.5 s repetitions by ±30 %).
struct Toggler<'a> {
    agent: &'a mut HostAgent,
    threads: &'a hostcpu::NapiThreads,
    tid: u32,
    on: bool,
    /// [off, on]: packets, cpu ns, seconds, rejected.
    acc: [(u64, u64, f64, u64); 2],
}

impl Toggler<'_> {
    fn slice(&mut self, stop: &dyn Fn() -> bool) -> Result<()> {
        set_mode(self.agent, self.on)?;
        let s0 = self.agent.stats(self.tid)?;
        let r0 = napi_runtime(self.threads);
        let t0 = Instant::now();
        while t0.elapsed() < SLICE && !stop() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let s1 = self.agent.stats(self.tid)?;
        let r1 = napi_runtime(self.threads);
        let a = &mut self.acc[usize::from(self.on)];
        a.0 += s1.packets - s0.packets;
        a.1 += r1 - r0;
        a.2 += t0.elapsed().as_secs_f64();
        a.3 += s1.drops["no_tokens"] - s0.drops["no_tokens"];
        self.on = !self.on;
        Ok(())
    }

    fn reps(&self, requests_per_s: f64) -> [OverheadRep; 2] {
        let rep = |on: bool| {
            let a = self.acc[usize::from(on)];
            OverheadRep {
                on,
                packets: a.0,
                cpu_ns: a.1,
                seconds: a.2,
                rejected: a.3,
                requests_per_s,
            }
        };
        [rep(false), rep(true)]
    }
}

fn overhead_row(workload: &str, reps: Vec<OverheadRep>) -> OverheadRow {
    let per = |on: bool| -> (f64, f64) {
        let r: Vec<&OverheadRep> = reps.iter().filter(|r| r.on == on).collect();
        (
            median(
                r.iter()
                    .filter(|r| r.packets > 0)
                    .map(|r| r.cpu_ns as f64 / r.packets as f64)
                    .collect(),
            ),
            median(r.iter().map(|r| r.packets as f64 / r.seconds).collect()),
        )
    };
    let (off_ns, off_pps) = per(false);
    let (on_ns, on_pps) = per(true);
    // Repetitions come in (off, on) pairs measured in the same seconds:
    // the figure is the median of the pairs' ratios.
    let ns = |r: &OverheadRep| r.cpu_ns as f64 / r.packets.max(1) as f64;
    let paired: Vec<f64> = reps
        .chunks_exact(2)
        .filter(|p| p[0].packets > 0 && p[1].packets > 0)
        .map(|p| {
            let (off, on) = if p[0].on {
                (&p[1], &p[0])
            } else {
                (&p[0], &p[1])
            };
            (ns(on) / ns(off) - 1.0) * 100.0
        })
        .collect();
    OverheadRow {
        workload: workload.into(),
        off_ns_per_packet: off_ns,
        on_ns_per_packet: on_ns,
        overhead_pct: median(paired.clone()),
        paired_overhead_pct: paired,
        off_pps,
        on_pps,
        reps,
    }
}

/// Start `wrk -t1 -c16` from the wan namespace on `cpu`.
fn wrk_start(lab: &Lab, cpu: usize, url: &str, seconds: f64) -> Result<std::process::Child> {
    std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.wan_ns(),
            "taskset",
            "-c",
            &cpu.to_string(),
        ])
        .args([
            "wrk",
            "-t1",
            "-c16",
            &format!("-d{}s", seconds.ceil() as u64),
            url,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            Error::io(
                "running wrk (is wrk installed? `./run test` installs it)",
                e,
            )
        })
}

/// wrk's Requests/sec.
fn wrk_result(child: std::process::Child) -> Result<f64> {
    let out = child
        .wait_with_output()
        .map_err(|e| Error::io("waiting for wrk", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "wrk gave no result (is wrk installed? `./run test` installs it): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })
}

/// Run the benchmark and write its outputs into `out`.
///
/// # Errors
/// Lab, load, compile or measurement failures (the lab is removed), or
/// outputs that cannot be written.
pub fn run(opts: &TenantBenchOpts, out: &Path, cancel: &AtomicBool) -> Result<TenantBenchReport> {
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if opts.host_cpu >= ncpu || opts.gen_cpu >= ncpu || opts.host_cpu == opts.gen_cpu {
        return Err(Error::Invalid(format!(
            "host CPU {} and generator CPU {} must differ and exist (this machine has {ncpu})",
            opts.host_cpu, opts.gen_cpu
        )));
    }
    if let Some(p) = opts.parts.iter().find(|p| !PARTS.contains(&p.as_str())) {
        return Err(Error::Invalid(format!(
            "unknown part {p:?}: choose among {}",
            PARTS.join(", ")
        )));
    }
    if opts.parts.is_empty() {
        return Err(Error::Invalid(format!(
            "no part to run: choose among {}",
            PARTS.join(", ")
        )));
    }
    if let Some(n) = opts.scaling_n.iter().find(|&&n| n == 0 || n > 8) {
        return Err(Error::Invalid(format!(
            "{n} competitors: the comparison takes 1..=8"
        )));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
    let load0 = loadavg();
    let lab = Lab::new(&opts.prefix)?;
    let tenants = if opts.has("scaling") {
        opts.scaling_n.iter().copied().max().unwrap_or(3).max(3) as u32
    } else {
        3
    };
    lab.up(&UpOptions {
        tenants,
        ..UpOptions::default()
    })?;
    let res = run_in_lab(&lab, opts, cancel);
    let _ = hostcpu::unthreaded_napi(&lab.host_ns(), HOST_IF);
    let down = lab.down();
    let m = res?;
    down?;
    let pick = |w: &str| m.overhead.iter().find(|r| r.workload == w);
    let gain = |svc: &str| m.offload.iter().find(|r| r.service == svc).map(|r| r.gain);
    let r = TenantBenchReport {
        fairness_overhead_pct: pick("drop-only").map(|r| r.overhead_pct),
        dns_offload_gain: gain("dns-ratelimit"),
        syn_offload_gain: gain("syn-proxy"),
        dispatcher_prog_run_ns: m.dispatcher_prog_run_ns,
        shares: m.shares,
        scaling: m.scaling,
        overhead: m.overhead,
        offload: m.offload,
        machine: Machine::collect(),
        loadavg: [load0, loadavg()],
        opts: opts.clone(),
    };
    write_outputs(&r, out)?;
    Ok(r)
}

#[derive(Default)]
struct Measured {
    overhead: Vec<OverheadRow>,
    dispatcher_prog_run_ns: Option<[f64; 2]>,
    offload: Vec<OffloadRow>,
    shares: Option<SharesFigure>,
    scaling: Option<ScalingFigure>,
}

fn run_in_lab(lab: &Lab, opts: &TenantBenchOpts, cancel: &AtomicBool) -> Result<Measured> {
    let name = format!("bench-{}", opts.prefix);
    let compiler = Compiler::new(rampart_tenant::confine::Policy::default())?;
    let t = |i: u32| Ipv4Addr::from(Lab::tenant_v4(i));
    let _dns =
        rampart_tenant::services::dnsmasq(&lab.tenant_ns(2), t(2), Ipv4Addr::new(192, 0, 2, 53))?;
    let _web = rampart_tenant::services::nginx(&lab.tenant_ns(3), t(3))?;
    let mut m = Measured::default();
    if opts.has("overhead") {
        let (rows, prog_run) = overhead(lab, opts, &name, &compiler, cancel)?;
        m.overhead = rows;
        m.dispatcher_prog_run_ns = Some(prog_run);
    }
    let fo = FigureOpts {
        name: name.clone(),
        seconds: opts.seconds,
        reps: opts.reps,
        host_cpu: opts.host_cpu,
        gen_cpu: opts.gen_cpu,
    };
    if opts.has("shares") {
        m.shares = Some(figures::shares(lab, &fo, cancel)?);
    }
    if opts.has("scaling") {
        m.scaling = Some(figures::scaling(lab, &fo, &opts.scaling_n, cancel)?);
    }
    if opts.has("offload") {
        m.offload = offload(lab, opts, &name, &compiler, cancel)?;
    }
    Ok(m)
}

fn tenant_ids(a: &HostAgent) -> Result<(u32, u32, u32)> {
    let tid = |n: &str| {
        a.tenant_id(n)
            .ok_or_else(|| Error::Invalid(format!("tenant {n} missing")))
    };
    Ok((tid("t1")?, tid("t2")?, tid("t3")?))
}

/// 1. Accounting overhead (host0's NAPI thread at SCHED_FIFO on host_cpu).
fn overhead(
    lab: &Lab,
    opts: &TenantBenchOpts,
    name: &str,
    compiler: &Compiler,
    cancel: &AtomicBool,
) -> Result<(Vec<OverheadRow>, [f64; 2])> {
    let name = format!("{name}-oh");
    let _ = rampart_tenant::host::cleanup(&name);
    let mut agent = HostAgent::start(config(lab, &name)?)?;
    let t = |i: u32| Ipv4Addr::from(Lab::tenant_v4(i));
    let (t1, t2, t3) = tenant_ids(&agent)?;
    agent.install(t1, &compiler.build(Submission::C(DROP_ALL))?)?;
    // The dispatcher alone (BPF_PROG_RUN, 20,000 runs of one drop-only
    // packet, modes alternated 7 times, medians): the machinery's own cost
    // without the driver, the NAPI loop and this machine's noise.
    let frame = TenantTraffic::new(lab, &[t(1)], 64, 9)?.template().to_vec();
    let mut samples = [Vec::new(), Vec::new()];
    for k in 0..14 {
        let on = k % 2 == 1;
        set_mode(&mut agent, on)?;
        samples[usize::from(on)].push(super::fairness::prog_cost_ns(
            agent.dispatcher_fd(),
            &frame,
        )?);
    }
    let prog_run = [median(samples[0].clone()), median(samples[1].clone())];
    let threads = hostcpu::rethread_napi(&lab.host_ns(), HOST_IF, opts.host_cpu)?;
    agent.watch_napi_threads(&threads.pids)?;
    // The slices' readings (packets, then the NAPI thread's run time) must
    // be one instant: on the host core above the NAPI thread's priority,
    // nothing is processed between the two reads.
    let _reader = hostcpu::ReaderAboveNapi::enter(opts.host_cpu)?;
    let secs = Duration::from_secs_f64(opts.seconds);
    let mut rows = Vec::new();
    for (workload, tenant) in [("drop-only", t1), ("dns-server", t2), ("nginx", t3)] {
        // One generator program at a time holds the lab's anchor.
        let traffic = match workload {
            "drop-only" => Some(TenantTraffic::new(lab, &[t(1)], 64, 9)?),
            "dns-server" => Some(TenantTraffic::with_proto(lab, &[t(2)], Proto::Dns, 82, 53)?),
            _ => None,
        };
        let mut reps = Vec::new();
        for r in 0..opts.overhead_reps {
            let mut tg = Toggler {
                agent: &mut agent,
                threads: &threads,
                tid: tenant,
                on: r % 2 == 1,
                acc: [(0, 0, 0.0, 0); 2],
            };
            let rps = match (&traffic, workload) {
                (Some(tr), w) => {
                    let pps = if w == "drop-only" {
                        None
                    } else {
                        Some(300_000.0)
                    };
                    tr.run_with::<Error>(
                        Limit::Duration(secs),
                        pps,
                        opts.gen_cpu,
                        true,
                        cancel,
                        Some(&mut |done: &AtomicBool| {
                            tg.slice(&|| done.load(std::sync::atomic::Ordering::Relaxed))?;
                            Ok(true)
                        }),
                    )?;
                    0.0
                }
                (None, _) => {
                    let mut child =
                        wrk_start(lab, opts.gen_cpu, "http://10.20.3.2/", opts.seconds)?;
                    while child
                        .try_wait()
                        .map_err(|e| Error::io("waiting for wrk", e))?
                        .is_none()
                    {
                        tg.slice(&|| false)?;
                    }
                    wrk_result(child)?
                }
            };
            reps.extend(tg.reps(rps));
        }
        rows.push(overhead_row(workload, reps));
    }
    set_mode(&mut agent, false)?;
    Ok((rows, prog_run))
}

/// One service of the offload comparison.
struct Service<'a> {
    name: &'static str,
    /// Put the service in place for a repetition (true: offloaded).
    setup: &'a mut dyn FnMut(&mut HostAgent, bool) -> Result<()>,
    /// Requests handled so far.
    handled: &'a dyn Fn(&HostAgent, bool) -> Result<u64>,
    /// The flood.
    spec: &'a dyn Fn(bool) -> GenSpec,
}

fn offload_row(
    lab: &Lab,
    agent: &mut HostAgent,
    opts: &TenantBenchOpts,
    core_cpu: &dyn Fn() -> [u64; 3],
    svc: &mut Service<'_>,
    cancel: &AtomicBool,
) -> Result<OffloadRow> {
    let mut reps = Vec::new();
    for r in 0..opts.reps {
        let order = if r % 2 == 0 {
            ["xdp", "userspace"]
        } else {
            ["userspace", "xdp"]
        };
        for mode in order {
            let xdp = mode == "xdp";
            (svc.setup)(agent, xdp)?;
            // One generator program at a time holds the lab's anchor.
            let gen = Generator::new(lab, &(svc.spec)(xdp))?;
            let h0 = (svc.handled)(agent, xdp)?;
            let c0 = core_cpu();
            let g = gen
                .run(cancel)
                .map_err(|e| Error::Invalid(format!("generator: {e}")))?;
            drop(gen);
            std::thread::sleep(Duration::from_millis(50));
            let h1 = (svc.handled)(agent, xdp)?;
            let c1 = core_cpu();
            reps.push(OffloadRep {
                mode,
                handled: h1 - h0,
                sent: g.sent_packets,
                seconds: g.seconds,
                cpu_ns: (c1[0] - c0[0]) + (c1[1] - c0[1]) + (c1[2] - c0[2]),
                napi_ns: c1[0] - c0[0],
                ksoftirqd_ns: c1[1] - c0[1],
                service_ns: c1[2] - c0[2],
            });
        }
    }
    let m = |mode: &str, per_cpu: bool| {
        median(
            reps.iter()
                .filter(|r| r.mode == mode)
                .map(|r| {
                    r.handled as f64
                        / if per_cpu {
                            (r.cpu_ns as f64 / 1e9).max(1e-9)
                        } else {
                            r.seconds
                        }
                })
                .collect(),
        )
    };
    let (x, u) = (m("xdp", true), m("userspace", true));
    let (xw, uw) = (m("xdp", false), m("userspace", false));
    let offered = median(reps.iter().map(|r| r.sent as f64 / r.seconds).collect());
    Ok(OffloadRow {
        service: svc.name.into(),
        offloaded_pps: x,
        userspace_pps: u,
        gain: if u > 0.0 { x / u } else { 0.0 },
        offloaded_wall_pps: xw,
        userspace_wall_pps: uw,
        wall_gain: if uw > 0.0 { xw / uw } else { 0.0 },
        offered_pps: offered,
        xdp_synacks: None,
        reps,
    })
}

/// 2. Offload gains: the kernel path and the service share host_cpu.
fn offload(
    lab: &Lab,
    opts: &TenantBenchOpts,
    name: &str,
    compiler: &Compiler,
    cancel: &AtomicBool,
) -> Result<Vec<OffloadRow>> {
    let name = format!("{name}-off");
    let _ = rampart_tenant::host::cleanup(&name);
    let mut agent = HostAgent::start(config(lab, &name)?)?;
    agent.set_accounting(true)?;
    let t = |i: u32| Ipv4Addr::from(Lab::tenant_v4(i));
    let (t1, t2, _) = tenant_ids(&agent)?;
    // The NAPI thread goes back to the ordinary scheduler, pinned to host_cpu.
    let threads = hostcpu::rethread_napi(&lab.host_ns(), HOST_IF, opts.host_cpu)?;
    agent.watch_napi_threads(&threads.pids)?;
    for &p in &threads.pids {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscall on a thread id we found in /proc.
        unsafe { libc::sched_setscheduler(p, libc::SCHED_OTHER, &param) };
    }
    let limiter = compiler.build(Submission::C(DNS_RATELIMIT_C))?;
    let proxy = compiler.build(Submission::C(SYNPROXY_C))?;
    let limits = DnsLimits::default();
    // The userspace services listen on second addresses of t1 / t2;
    // during their repetitions the tenant has no program (its traffic is
    // XDP_PASS to the stack), during the offloaded ones the program is
    // installed again.
    for i in [1u32, 2] {
        rampart_dataplane::cmd::in_ns(
            &lab.tenant_ns(i),
            "ip",
            &["addr", "add", &format!("10.20.{i}.3/24"), "dev", "eth0"],
        )?;
    }
    let fwd = DnsForwarder::start(
        &lab.tenant_ns(2),
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 20, 2, 3), 53)),
        SocketAddr::V4(SocketAddrV4::new(t(2), 53)),
        &limits,
        Some(opts.host_cpu),
    )?;
    // The far end of the wire is another machine: answers arriving at wan0
    // are counted and dropped in XDP there (not by wan's IP stack, whose
    // work would otherwise land on the host core in both modes).
    let far_end =
        rampart_lab::sink::Sink::attach(&lab.wan_ns(), rampart_lab::topology::WAN_IF, false)?;
    // The wire's way back runs on the generator's CPU, like its way in:
    // the host core's account ends where a real host's does, at the NIC.
    let _wire = if opts.wire_on_host_core {
        None
    } else {
        Some(hostcpu::WireOnCpu::new(lab, opts.gen_cpu)?)
    };
    let ksoft = hostcpu::ksoftirqd(opts.host_cpu);
    let t_wait = Instant::now();
    while fwd.thread_ids().len() < 2 && t_wait.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let fwd_tids = fwd.thread_ids();
    if fwd_tids.len() < 2 {
        return Err(Error::Invalid(
            "the DNS forwarder's threads did not start".into(),
        ));
    }
    let service_tids = std::cell::RefCell::new(fwd_tids);
    let core_cpu = || -> [u64; 3] {
        [
            napi_runtime(&threads),
            ksoft.map_or(0, hostcpu::runtime_ns),
            service_tids
                .borrow()
                .iter()
                .map(|&p| hostcpu::runtime_ns(p))
                .sum::<u64>(),
        ]
    };
    let spec = |proto: Proto, size: usize, dst: Ipv4Addr, dport: u16| GenSpec {
        sources: 4096,
        proto,
        size,
        limit: rampart_lab::gen::Limit::Seconds(opts.seconds),
        dst: Some(IpAddr::V4(dst)),
        dport: Some(dport),
        ..GenSpec::default()
    };
    let mut rows = Vec::new();

    // DNS rate limiter: XDP program vs the userspace forwarder (same limits).
    let mut setup = |a: &mut HostAgent, xdp: bool| -> Result<()> {
        if xdp {
            a.install(t2, &limiter)?;
            limits.apply(
                a.tenant_map(t2, "dns_cfg")?.as_raw_fd(),
                a.tenant_map(t2, "dns_exempt")?.as_raw_fd(),
            )?;
        } else {
            a.remove_program(t2)?;
        }
        Ok(())
    };
    let handled = |a: &HostAgent, xdp: bool| -> Result<u64> {
        if xdp {
            let s = DnsStats::read(a.tenant_map(t2, "dns_stats")?.as_raw_fd())?;
            Ok(s.passed + s.truncated + s.dropped + s.exempt + s.malformed)
        } else {
            Ok(fwd.stats().handled)
        }
    };
    let dns_spec = |xdp: bool| {
        spec(
            Proto::Dns,
            82,
            if xdp {
                t(2)
            } else {
                Ipv4Addr::new(10, 20, 2, 3)
            },
            53,
        )
    };
    rows.push(offload_row(
        lab,
        &mut agent,
        opts,
        &core_cpu,
        &mut Service {
            name: "dns-ratelimit",
            setup: &mut setup,
            handled: &handled,
            spec: &dns_spec,
        },
        cancel,
    )?);
    agent.remove_program(t2)?;
    drop(fwd);

    // SYN-cookie proxy: XDP program vs the kernel's SYN cookies under the
    // userspace TcpProxy's listener. Handled = SYN-ACKs that reached the
    // far end (the same counter in both modes).
    service_tids.borrow_mut().clear();
    let tcp = TcpProxy::start(
        &lab.tenant_ns(1),
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 20, 1, 3), 80)),
        SocketAddr::V4(SocketAddrV4::new(t(1), 80)),
    )?;
    let syn_cfg = SynProxyConfig::default();
    let mut setup = |a: &mut HostAgent, xdp: bool| -> Result<()> {
        if xdp {
            a.install(t1, &proxy)?;
            syn_cfg.apply(
                a.tenant_map(t1, "syn_cfg")?.as_raw_fd(),
                a.tenant_map(t1, "syn_ports")?.as_raw_fd(),
            )?;
        } else {
            a.remove_program(t1)?;
        }
        Ok(())
    };
    let handled = |_: &HostAgent, _: bool| -> Result<u64> {
        far_end
            .counts()
            .map(|c| c.packets)
            .map_err(|e| Error::Invalid(format!("far-end sink: {e}")))
    };
    let syn_spec = |xdp: bool| {
        spec(
            Proto::Syn,
            64,
            if xdp {
                t(1)
            } else {
                Ipv4Addr::new(10, 20, 1, 3)
            },
            80,
        )
    };
    let mut row = offload_row(
        lab,
        &mut agent,
        opts,
        &core_cpu,
        &mut Service {
            name: "syn-proxy",
            setup: &mut setup,
            handled: &handled,
            spec: &syn_spec,
        },
        cancel,
    )?;
    // Cross-check: the XDP proxy's own count of cookie SYN-ACKs sent.
    row.xdp_synacks = Some(SynStats::read(agent.tenant_map(t1, "syn_stats")?.as_raw_fd())?.synacks);
    rows.push(row);
    drop(tcp);
    Ok(rows)
}

fn write_outputs(r: &TenantBenchReport, out: &Path) -> Result<()> {
    let p = |f: &str| -> PathBuf { out.join(f) };
    let json = serde_json::to_string_pretty(r)
        .map_err(|e| Error::Invalid(format!("serializing the report: {e}")))?;
    std::fs::write(p("summary.json"), json + "\n")
        .map_err(|e| Error::io("writing summary.json", e))?;
    let rows: Vec<Vec<String>> = r
        .overhead
        .iter()
        .flat_map(|row| {
            row.reps.iter().map(move |x| {
                vec![
                    row.workload.clone(),
                    if x.on { "on" } else { "off" }.into(),
                    x.packets.to_string(),
                    x.cpu_ns.to_string(),
                    format!("{:.3}", x.seconds),
                    x.rejected.to_string(),
                    format!("{:.1}", x.requests_per_s),
                ]
            })
        })
        .collect();
    report::write_csv(
        &p("overhead.csv"),
        &[
            "workload",
            "accounting",
            "packets",
            "napi_cpu_ns",
            "seconds",
            "rejected",
            "requests_per_s",
        ],
        &rows,
    )
    .map_err(|e| Error::Invalid(format!("overhead.csv: {e}")))?;
    let rows: Vec<Vec<String>> = r
        .offload
        .iter()
        .flat_map(|row| {
            row.reps.iter().map(move |x| {
                vec![
                    row.service.clone(),
                    x.mode.into(),
                    x.handled.to_string(),
                    x.sent.to_string(),
                    format!("{:.3}", x.seconds),
                    x.cpu_ns.to_string(),
                    x.napi_ns.to_string(),
                    x.ksoftirqd_ns.to_string(),
                    x.service_ns.to_string(),
                ]
            })
        })
        .collect();
    report::write_csv(
        &p("offload.csv"),
        &[
            "service",
            "mode",
            "handled",
            "sent",
            "seconds",
            "host_core_cpu_ns",
        ],
        &rows,
    )
    .map_err(|e| Error::Invalid(format!("offload.csv: {e}")))?;
    let cats: Vec<String> = r.overhead.iter().map(|x| x.workload.clone()).collect();
    report::bar_chart(
        &p("overhead.png"),
        &BarChart {
            title: "Host CPU per packet, accounting + fairness off vs on (median)",
            y_label: "ns per packet (host NAPI thread)",
            categories: &cats,
            series: &[
                (
                    "off".into(),
                    r.overhead.iter().map(|x| x.off_ns_per_packet).collect(),
                ),
                (
                    "on".into(),
                    r.overhead.iter().map(|x| x.on_ns_per_packet).collect(),
                ),
            ],
        },
        &r.machine,
    )
    .map_err(|e| Error::Invalid(format!("overhead.png: {e}")))?;
    if let Some(sh) = &r.shares {
        write_shares(sh, out, &r.machine)?;
    }
    if let Some(sc) = &r.scaling {
        write_scaling(sc, out, &r.machine)?;
    }
    let cats: Vec<String> = r.offload.iter().map(|x| x.service.clone()).collect();
    report::bar_chart(
        &p("offload.png"),
        &BarChart {
            title: "Requests handled per CPU-second of the host core: offloaded (XDP) vs userspace (median)",
            y_label: "DNS queries / SYNs answered per CPU-second",
            categories: &cats,
            series: &[
                (
                    "offloaded".into(),
                    r.offload.iter().map(|x| x.offloaded_pps).collect(),
                ),
                (
                    "userspace".into(),
                    r.offload.iter().map(|x| x.userspace_pps).collect(),
                ),
            ],
        },
        &r.machine,
    )
    .map_err(|e| Error::Invalid(format!("offload.png: {e}")))?;
    Ok(())
}

fn write_shares(sh: &SharesFigure, out: &Path, machine: &Machine) -> Result<()> {
    let mut rows = Vec::new();
    for (phase, p) in [("fair", &sh.fair), ("unfair", &sh.unfair)] {
        for (k, rep) in p.reps.iter().enumerate() {
            for t in &rep.tenants {
                rows.push(vec![
                    phase.to_string(),
                    k.to_string(),
                    t.name.clone(),
                    format!("{:.2}", t.cpu_share_pct),
                    format!("{:.0}", t.cpu_ns_per_s),
                    format!("{:.0}", t.packets_per_s),
                    format!("{:.0}", t.processed_per_s),
                    format!("{:.0}", t.rejected_per_s),
                ]);
            }
        }
    }
    report::write_csv(
        &out.join("shares.csv"),
        &[
            "fairness",
            "rep",
            "tenant",
            "cpu_share_pct",
            "cpu_ns_per_s",
            "packets_per_s",
            "processed_per_s",
            "rejected_per_s",
        ],
        &rows,
    )
    .map_err(|e| Error::Invalid(format!("shares.csv: {e}")))?;
    let cats: Vec<String> = sh.workloads.iter().map(|w| (*w).to_string()).collect();
    let col = |p: &super::fairness::Phase| p.tenants.iter().map(|t| t.cpu_share_pct).collect();
    report::bar_chart(
        &out.join("shares.png"),
        &BarChart {
            title: "Per-tenant share of the host core's charged CPU, fairness on vs off (median)",
            y_label: "CPU share, %",
            categories: &cats,
            series: &[
                ("fairness on".into(), col(&sh.fair)),
                ("fairness off".into(), col(&sh.unfair)),
            ],
        },
        machine,
    )
    .map_err(|e| Error::Invalid(format!("shares.png: {e}")))
}

fn write_scaling(sc: &ScalingFigure, out: &Path, machine: &Machine) -> Result<()> {
    let mut rows = Vec::new();
    for p in &sc.points {
        for (method, reps) in [
            ("token-buckets", &p.buckets_reps),
            ("cgroups", &p.cgroups_reps),
        ] {
            for (k, shares) in reps.iter().enumerate() {
                rows.push(vec![
                    p.n.to_string(),
                    method.to_string(),
                    k.to_string(),
                    format!("{:.3}", figures::max_dev(shares)),
                    format!("{:.5}", figures::jain(shares)),
                    shares
                        .iter()
                        .map(|s| format!("{s:.2}"))
                        .collect::<Vec<_>>()
                        .join(";"),
                ]);
            }
        }
    }
    report::write_csv(
        &out.join("scaling.csv"),
        &["n", "method", "rep", "max_dev_pts", "jain", "shares_pct"],
        &rows,
    )
    .map_err(|e| Error::Invalid(format!("scaling.csv: {e}")))?;
    let line = |name: &str, f: &dyn Fn(&figures::ScalingPoint) -> f64| report::Series {
        name: name.into(),
        points: sc.points.iter().map(|p| (p.n as f64, f(p))).collect(),
    };
    report::line_chart(
        &out.join("scaling.png"),
        &report::LineChart {
            title: "Share accuracy vs competitors: token buckets (XDP) vs cgroups (CFS)",
            x_label: "competing programs / processes",
            y_label: "largest |share - 100/N|, points (median)",
            log_x: false,
            series: &[
                line("token buckets", &|p| p.buckets_max_dev_pts),
                line("cgroups", &|p| p.cgroups_max_dev_pts),
            ],
        },
        machine,
    )
    .map_err(|e| Error::Invalid(format!("scaling.png: {e}")))?;
    report::line_chart(
        &out.join("scaling_jain.png"),
        &report::LineChart {
            title: "Jain's fairness index vs competitors: token buckets (XDP) vs cgroups (CFS)",
            x_label: "competing programs / processes",
            y_label: "Jain's index (1 = equal shares), median",
            log_x: false,
            series: &[
                line("token buckets", &|p| p.buckets_jain),
                line("cgroups", &|p| p.cgroups_jain),
            ],
        },
        machine,
    )
    .map_err(|e| Error::Invalid(format!("scaling_jain.png: {e}")))
}

/// Run `rampart bench tenant` into `out` and print one line per
/// measurement and the headline numbers.
///
/// # Errors
/// As [`run`].
pub fn run_and_print(opts: &TenantBenchOpts, out: &Path, cancel: &AtomicBool) -> Result<()> {
    let r = run(opts, out, cancel)?;
    for o in &r.overhead {
        println!(
            "{:<11} accounting off {:6.1} ns/packet ({:6.0} kpps), on {:6.1} ns/packet ({:6.0} kpps): overhead {:+.1}%",
            o.workload,
            o.off_ns_per_packet,
            o.off_pps / 1e3,
            o.on_ns_per_packet,
            o.on_pps / 1e3,
            o.overhead_pct
        );
    }
    for o in &r.offload {
        println!(
            "{:<13} per CPU-second of the host core: offloaded {:7.0} k, userspace {:7.0} k: gain {:.1}x; \
             per wall second: {:.0} k vs {:.0} k ({:.1}x; offered {:.0} kpps)",
            o.service,
            o.offloaded_pps / 1e3,
            o.userspace_pps / 1e3,
            o.gain,
            o.offloaded_wall_pps / 1e3,
            o.userspace_wall_pps / 1e3,
            o.wall_gain,
            o.offered_pps / 1e3
        );
    }
    if let Some([off, on]) = r.dispatcher_prog_run_ns {
        println!(
            "dispatcher alone (BPF_PROG_RUN, drop-only packet): off {off:.1} ns, on {on:.1} ns"
        );
    }
    if let Some(sh) = &r.shares {
        for (phase, p) in [("fair", &sh.fair), ("unfair", &sh.unfair)] {
            let v: Vec<String> = p
                .tenants
                .iter()
                .map(|t| format!("{} {:.1}%", t.name, t.cpu_share_pct))
                .collect();
            println!("shares {phase:<6} {}", v.join(", "));
        }
    }
    if let Some(sc) = &r.scaling {
        for p in &sc.points {
            println!(
                "N={} token buckets: max dev {:.1} pt, Jain {:.4}; cgroups: max dev {:.1} pt, Jain {:.4}",
                p.n, p.buckets_max_dev_pts, p.buckets_jain, p.cgroups_max_dev_pts, p.cgroups_jain
            );
        }
    }
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    println!(
        "fairness_overhead_pct {}, dns_offload_gain {}, syn_offload_gain {} (written to {})",
        f(r.fairness_overhead_pct),
        f(r.dns_offload_gain),
        f(r.syn_offload_gain),
        out.join("summary.json").display()
    );
    Ok(())
}
