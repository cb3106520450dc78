//! `rampart bench tenant-fairness`: three tenants with equal shares, all
//! flooded so the host's core is saturated, their programs differing in
//! cost by ≥ 10×; the same run with fairness on and off (alternated,
//! medians), and how much of the host's receive CPU time the accounting
//! charged to tenants.
//!
//! Setup (see [`crate::hostcpu`]): the lab with three tenants; the
//! infrastructure program on `host0`, whose NAPI runs threaded on its own
//! CPU (`host_cpu`) — the core the tenants share; one generator thread on
//! `gen_cpu` sends UDP frames round robin to the three tenants through the
//! EMULATED NIC hop. Each tenant's program hashes the addresses for a
//! configurable number of rounds and drops the packet.

use std::net::Ipv4Addr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rampart_lab::topology::{UpOptions, HOST_IF};
use rampart_lab::Lab;
use serde::Serialize;

use crate::error::{Error, Result};
use rampart_lab::hostcpu;
use rampart_lab::traffic::{Limit, TenantTraffic};
use rampart_tenant::compiler::{Compiler, Submission};
use rampart_tenant::config::Config;
use rampart_tenant::host::{HostAgent, TenantStats};

/// Options of the benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessOpts {
    /// Lab prefix (a lab of its own, removed at the end).
    pub prefix: String,
    /// Hash rounds of each tenant's program (cost).
    pub rounds: [u32; 3],
    /// Measured seconds per phase.
    pub seconds: f64,
    /// Warm-up seconds before each measured phase.
    pub warmup: f64,
    /// Repetitions of the (fair, unfair) pair.
    pub reps: u32,
    /// Token budget, cores.
    pub budget_cores: f64,
    /// CPU of the host's NAPI thread (the shared core).
    pub host_cpu: usize,
    /// CPU of the generator.
    pub gen_cpu: usize,
    /// Frame size.
    pub size: usize,
    /// Offered load, frames per second over all tenants (`None`: as fast as
    /// the generator goes). The default, 600 kpps (200 kpps per tenant),
    /// is 2–20× what each tenant's share can process with the default
    /// programs, and little enough that rejecting the excess leaves most of
    /// each share for processing; a full-speed flood (~1.4 Mpps per tenant
    /// reach the host) costs each tenant its whole share in rejections.
    pub pps: Option<f64>,
}

impl Default for FairnessOpts {
    fn default() -> Self {
        Self {
            prefix: "tfair".into(),
            rounds: [1500, 5000, 20000],
            seconds: 4.0,
            warmup: 1.0,
            reps: 3,
            budget_cores: 0.8,
            host_cpu: 1,
            gen_cpu: 0,
            size: 64,
            pps: Some(600_000.0),
        }
    }
}

/// One tenant in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct TenantShare {
    /// Tenant name.
    pub name: String,
    /// Its share of the CPU charged to the three tenants, %.
    pub cpu_share_pct: f64,
    /// CPU charged, ns per second.
    pub cpu_ns_per_s: f64,
    /// Packets that reached the dispatcher, per second.
    pub packets_per_s: f64,
    /// Packets its program processed (not rejected), per second.
    pub processed_per_s: f64,
    /// Packets rejected for lack of tokens, per second.
    pub rejected_per_s: f64,
    /// Charged CPU per packet that reached the dispatcher, ns.
    pub ns_per_packet: f64,
}

/// One phase (fairness on or off).
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// Tenants, medians over repetitions.
    pub tenants: Vec<TenantShare>,
    /// Charged CPU (all tenants and no-tenant) / the host's receive CPU time
    /// (NAPI threads' scheduler run time + NET_RX softirq time outside them
    /// in runs that handled tenant packets), %, median.
    pub accounted_pct: f64,
    /// Host NAPI thread busy time / wall time, %, median.
    pub host_busy_pct: f64,
    /// Frames sent per second by the generator, median.
    pub offered_pps: f64,
    /// Raw figures of every repetition.
    pub reps: Vec<PhaseRep>,
}

/// One measured repetition.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRep {
    /// Wall seconds.
    pub seconds: f64,
    /// Host NAPI thread run time (scheduler, /proc/<pid>/schedstat), ns.
    pub host_runtime_ns: u64,
    /// ksoftirqd on the host CPU, run time ns.
    pub ksoftirqd_ns: u64,
    /// NET_RX softirq time outside the NAPI threads in runs that handled tenant packets, ns.
    pub softirq_out_ns: u64,
    /// `/proc/stat` of the host CPU, ticks.
    pub host_cpu_ticks: hostcpu::CpuTicks,
    /// CPU charged to tenants 1..3 and to no tenant (index 0), ns.
    pub charged_ns: [u64; 4],
    /// Shares, %.
    pub shares_pct: [f64; 3],
    /// accounted_pct of this repetition.
    pub accounted_pct: f64,
    /// Frames sent per tenant.
    pub sent: Vec<u64>,
    /// Per-tenant statistics deltas.
    pub tenants: Vec<TenantShare>,
}

/// The benchmark's output.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessReport {
    /// Fairness on.
    pub fair: Phase,
    /// Fairness off.
    pub unfair: Phase,
    /// Accounting of the kernel path: the tenants without programs, every
    /// packet passed to the stack and forwarded to a UDP sink in the
    /// tenant's namespace (fairness off, same flood).
    pub pass: Phase,
    /// Datagrams the tenants' UDP sinks received per second in the pass phase, median.
    pub pass_delivered_per_s: f64,
    /// Median accounted_pct over every measured phase (fair, unfair, pass).
    pub accounted_pct: f64,
    /// Fair repetitions in which every tenant had packets rejected for lack
    /// of tokens, i.e. every tenant wanted more than its share — the
    /// premise of the comparison. In a repetition where a tenant's demand
    /// stays below its share (e.g. another process took the host core),
    /// Algorithm 1 rightly gives its unused share to the others.
    pub fair_reps_all_throttled: usize,
    /// Each tenant program's own cost (wrapper + tenant code), ns per
    /// packet, measured with BPF_PROG_RUN.
    pub program_ns: [f64; 3],
    /// Most / least expensive program.
    pub program_cost_ratio: f64,
    /// Options used.
    pub opts: FairnessOpts,
    /// Where and when it ran.
    pub machine: crate::report::Machine,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The cost program of the benchmark: `rounds` of xorshift over the addresses, then drop.
pub fn cost_program(rounds: u32) -> String {
    format!(
        r#"#include "rampart_tenant.h"
/* Benchmark load: {rounds} rounds of xorshift over the addresses, then drop. */
int tenant_main(struct xdp_md *ctx)
{{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct iphdr *ip = data + sizeof(struct ethhdr);
    __u32 h;

    if ((void *)(ip + 1) > end)
        return XDP_DROP;
    h = ip->saddr ^ ip->daddr ^ 0x9e3779b9;
#pragma clang loop unroll(disable)
    for (int i = 0; i < {rounds}; i++) {{
        h ^= h << 13;
        h ^= h >> 17;
        h ^= h << 5;
    }}
    return h == 0x2545f491 ? XDP_PASS : XDP_DROP;
}}
"#
    )
}

pub(crate) fn lab_config(lab: &Lab, name: &str, budget: f64, n: u32) -> Result<Config> {
    let mut t = String::new();
    for i in 1..=n {
        t.push_str(&format!(
            "[[tenant]]\nname = \"t{i}\"\nselectors = [\"prefix:10.20.{i}.0/24\"]\n\
             ports = [\"t{i}\"]\ndomain_netns = \"{}\"\n",
            lab.tenant_ns(i)
        ));
    }
    Ok(Config::parse(&format!(
        "[infra]\nname = \"{name}\"\nnetns = \"{}\"\ninterfaces = [\"{HOST_IF}\"]\n\
         [fairness]\nenabled = true\nbudget_cores = {budget}\nperiod_ms = 10\nbucket_ms = 5\n{t}",
        lab.host_ns()
    ))?)
}

#[derive(Debug, Clone)]
struct Snap {
    at: Instant,
    stats: Vec<TenantStats>,
    runtime: u64,
    ksoftirqd: u64,
    ticks: hostcpu::CpuTicks,
    softirq_ours: u64,
}

fn snap(agent: &HostAgent, threads: &hostcpu::NapiThreads, ksoft: Option<i32>) -> Result<Snap> {
    let mut stats = Vec::new();
    for tid in 0..=3 {
        stats.push(agent.stats(tid)?);
    }
    Ok(Snap {
        at: Instant::now(),
        stats,
        runtime: threads.pids.iter().map(|&p| hostcpu::runtime_ns(p)).sum(),
        ksoftirqd: ksoft.map_or(0, hostcpu::runtime_ns),
        ticks: hostcpu::cpu_ticks(threads.cpu),
        softirq_ours: agent.truth()?.net_rx_ours_ns,
    })
}

pub(crate) fn measure(
    agent: &HostAgent,
    traffic: &TenantTraffic,
    threads: &hostcpu::NapiThreads,
    ksoft: Option<i32>,
    opts: &FairnessOpts,
    cancel: &AtomicBool,
) -> Result<PhaseRep> {
    traffic.run(
        Limit::Duration(Duration::from_secs_f64(opts.warmup)),
        opts.pps,
        opts.gen_cpu,
        true,
        cancel,
    )?;
    let a = snap(agent, threads, ksoft)?;
    let rep = traffic.run(
        Limit::Duration(Duration::from_secs_f64(opts.seconds)),
        opts.pps,
        opts.gen_cpu,
        true,
        cancel,
    )?;
    // Frames still in the rings are processed within microseconds.
    std::thread::sleep(Duration::from_millis(20));
    let b = snap(agent, threads, ksoft)?;
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let mut charged = [0u64; 4];
    let mut tenants = Vec::new();
    for (c, (x, y)) in charged.iter_mut().zip(a.stats.iter().zip(&b.stats)) {
        *c = y.cpu_ns - x.cpu_ns;
    }
    let tenant_total: u64 = charged[1..].iter().sum();
    let mut shares = [0.0; 3];
    for i in 1..4 {
        let (x, y) = (&a.stats[i], &b.stats[i]);
        let packets = y.packets - x.packets;
        let rejected = y.drops["no_tokens"] - x.drops["no_tokens"];
        let share = if tenant_total > 0 {
            100.0 * charged[i] as f64 / tenant_total as f64
        } else {
            0.0
        };
        shares[i - 1] = share;
        tenants.push(TenantShare {
            name: y.name.clone(),
            cpu_share_pct: share,
            cpu_ns_per_s: charged[i] as f64 / secs,
            packets_per_s: packets as f64 / secs,
            processed_per_s: (packets - rejected) as f64 / secs,
            rejected_per_s: rejected as f64 / secs,
            ns_per_packet: if packets > 0 {
                charged[i] as f64 / packets as f64
            } else {
                0.0
            },
        });
    }
    let host_runtime = b.runtime - a.runtime;
    let softirq_out = b.softirq_ours - a.softirq_ours;
    let truth = host_runtime + softirq_out;
    let all: u64 = charged.iter().sum();
    Ok(PhaseRep {
        seconds: secs,
        host_runtime_ns: host_runtime,
        ksoftirqd_ns: b.ksoftirqd - a.ksoftirqd,
        softirq_out_ns: softirq_out,
        host_cpu_ticks: b.ticks.since(&a.ticks),
        charged_ns: charged,
        shares_pct: shares,
        accounted_pct: if truth > 0 {
            100.0 * all as f64 / truth as f64
        } else {
            0.0
        },
        sent: rep.sent,
        tenants,
    })
}

pub(crate) fn phase(reps: Vec<PhaseRep>) -> Phase {
    let n = reps.first().map_or(0, |r| r.tenants.len());
    let tenants = (0..n)
        .map(|i| {
            let m = |f: &dyn Fn(&TenantShare) -> f64| {
                median(reps.iter().map(|r| f(&r.tenants[i])).collect())
            };
            TenantShare {
                name: reps[0].tenants[i].name.clone(),
                cpu_share_pct: m(&|t| t.cpu_share_pct),
                cpu_ns_per_s: m(&|t| t.cpu_ns_per_s),
                packets_per_s: m(&|t| t.packets_per_s),
                processed_per_s: m(&|t| t.processed_per_s),
                rejected_per_s: m(&|t| t.rejected_per_s),
                ns_per_packet: m(&|t| t.ns_per_packet),
            }
        })
        .collect();
    Phase {
        tenants,
        accounted_pct: median(reps.iter().map(|r| r.accounted_pct).collect()),
        host_busy_pct: median(
            reps.iter()
                .map(|r| 100.0 * r.host_runtime_ns as f64 / (r.seconds * 1e9))
                .collect(),
        ),
        offered_pps: median(
            reps.iter()
                .map(|r| r.sent.iter().sum::<u64>() as f64 / r.seconds)
                .collect(),
        ),
        reps,
    }
}

/// Run the benchmark in a lab of its own.
///
/// # Errors
/// Lab, load, compile or measurement failures (the lab is removed).
pub fn fairness(opts: &FairnessOpts, cancel: &AtomicBool) -> Result<FairnessReport> {
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if opts.host_cpu >= ncpu || opts.gen_cpu >= ncpu || opts.host_cpu == opts.gen_cpu {
        return Err(Error::Invalid(format!(
            "host CPU {} and generator CPU {} must differ and exist (this machine has {ncpu})",
            opts.host_cpu, opts.gen_cpu
        )));
    }
    let lab = Lab::new(&opts.prefix)?;
    lab.up(&UpOptions {
        tenants: 3,
        ..UpOptions::default()
    })?;
    let res = run_in_lab(&lab, opts, cancel);
    let _ = hostcpu::unthreaded_napi(&lab.host_ns(), HOST_IF);
    let down = lab.down();
    let r = res?;
    down?;
    Ok(r)
}

fn run_in_lab(lab: &Lab, opts: &FairnessOpts, cancel: &AtomicBool) -> Result<FairnessReport> {
    let name = format!("bench-{}", opts.prefix);
    let _ = rampart_tenant::host::cleanup(&name);
    let mut agent = HostAgent::start(lab_config(lab, &name, opts.budget_cores, 3)?)?;
    let compiler = Compiler::new(rampart_tenant::confine::Policy::default())?;
    let mut program_ns = [0.0; 3];
    for (i, rounds) in opts.rounds.iter().enumerate() {
        let tid = agent
            .tenant_id(&format!("t{}", i + 1))
            .ok_or_else(|| Error::Invalid("tenant missing".into()))?;
        let built = compiler.build(Submission::C(&cost_program(*rounds)))?;
        agent.install(tid, &built)?;
    }
    let threads = hostcpu::threaded_napi(&lab.host_ns(), HOST_IF, opts.host_cpu)?;
    agent.watch_napi_threads(&threads.pids)?;
    let ksoft = hostcpu::ksoftirqd(opts.host_cpu);
    let dsts: Vec<Ipv4Addr> = (1..=3).map(|i| Ipv4Addr::from(Lab::tenant_v4(i))).collect();
    let traffic = TenantTraffic::new(lab, &dsts, opts.size, 9)?;
    // Each program's own cost, on the generator's template (BPF_PROG_RUN, repeated).
    for (i, ns) in program_ns.iter_mut().enumerate() {
        let tid = (i + 1) as u32;
        let fd = agent
            .program_fd(tid)
            .ok_or_else(|| Error::Invalid("program missing".into()))?;
        let mut frame = traffic.template().to_vec();
        frame[30..34].copy_from_slice(&dsts[i].octets());
        *ns = prog_cost_ns(fd, &frame)?;
    }
    let mut fair = Vec::new();
    let mut unfair = Vec::new();
    for r in 0..opts.reps {
        let order = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for on in order {
            agent.set_fairness(on)?;
            let rep = measure(&agent, &traffic, &threads, ksoft, opts, cancel)?;
            if on {
                fair.push(rep);
            } else {
                unfair.push(rep);
            }
        }
    }
    // The kernel path: no programs, every packet passed to a UDP sink in its tenant's namespace.
    for tid in 1..=3 {
        agent.remove_program(tid)?;
    }
    agent.set_fairness(false)?;
    let sinks = (1..=3u32)
        .map(|i| {
            rampart_tenant::services::UdpSink::start(
                &lab.tenant_ns(i),
                std::net::SocketAddrV4::new(dsts[i as usize - 1], 9),
            )
        })
        .collect::<rampart_tenant::Result<Vec<_>>>()?;
    let mut pass = Vec::new();
    let mut delivered = Vec::new();
    for _ in 0..opts.reps {
        let before: u64 = sinks
            .iter()
            .map(rampart_tenant::services::UdpSink::packets)
            .sum();
        let rep = measure(&agent, &traffic, &threads, ksoft, opts, cancel)?;
        let after: u64 = sinks
            .iter()
            .map(rampart_tenant::services::UdpSink::packets)
            .sum();
        // The sinks also count the warm-up; rate over the whole run.
        delivered.push((after - before) as f64 / (rep.seconds + opts.warmup));
        pass.push(rep);
    }
    drop(sinks);
    let all: Vec<f64> = fair
        .iter()
        .chain(unfair.iter())
        .chain(pass.iter())
        .map(|r| r.accounted_pct)
        .collect();
    let lo = program_ns.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = program_ns.iter().copied().fold(0.0, f64::max);
    let throttled = fair
        .iter()
        .filter(|r| r.tenants.iter().all(|t| t.rejected_per_s > 0.0))
        .count();
    Ok(FairnessReport {
        fair_reps_all_throttled: throttled,
        fair: phase(fair),
        unfair: phase(unfair),
        pass: phase(pass),
        pass_delivered_per_s: median(delivered),
        accounted_pct: median(all),
        program_ns,
        program_cost_ratio: if lo > 0.0 { hi / lo } else { 0.0 },
        opts: opts.clone(),
        machine: crate::report::Machine::collect(),
    })
}

/// Average run time of a program on `frame` (BPF_PROG_RUN, 20,000 repetitions), ns.
///
/// # Errors
/// The kernel's error.
pub fn prog_cost_ns(fd: i32, frame: &[u8]) -> Result<f64> {
    let d = rampart_dataplane::testrun::mean_duration(fd, frame, 20_000)?;
    Ok(d.as_nanos() as f64)
}

/// Run `rampart bench tenant-fairness` and print each phase and the
/// programs' costs (or one JSON object).
///
/// # Errors
/// As [`fairness`].
pub fn run_and_print(opts: &FairnessOpts, json: bool, cancel: &AtomicBool) -> Result<()> {
    let r = fairness(opts, cancel)?;
    if json {
        return crate::out::print_json(&r);
    }
    for (label, p) in [
        ("fairness on", &r.fair),
        ("fairness off", &r.unfair),
        ("no programs, XDP_PASS to UDP sinks", &r.pass),
    ] {
        println!(
            "{label}: host core busy {:.1}%, offered {:.2} Mpps, accounted {:.1}%",
            p.host_busy_pct,
            p.offered_pps / 1e6,
            p.accounted_pct
        );
        for t in &p.tenants {
            println!(
                "  {:<4} cpu share {:5.1}%  {:7.0} kpps in, {:7.0} kpps processed, {:7.0} kpps rejected, {:6.0} ns/packet",
                t.name,
                t.cpu_share_pct,
                t.packets_per_s / 1e3,
                t.processed_per_s / 1e3,
                t.rejected_per_s / 1e3,
                t.ns_per_packet
            );
        }
    }
    println!(
        "programs: {:.0} / {:.0} / {:.0} ns per packet ({:.1}x); UDP sinks received {:.0} kpps in the pass phase",
        r.program_ns[0],
        r.program_ns[1],
        r.program_ns[2],
        r.program_cost_ratio,
        r.pass_delivered_per_s / 1e3
    );
    println!(
        "accounted: {:.1}% of the host core's receive time (median of all phases)",
        r.accounted_pct
    );
    Ok(())
}
