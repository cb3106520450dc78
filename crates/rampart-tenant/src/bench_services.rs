//! `rampart bench tenant --out DIR [--quick]`: the paper's evaluation of
//! the tenant services (issue #7 item 4), in a lab of its own.
//!
//! 1. **Accounting overhead** (fairness machinery on vs off): host0's NAPI
//!    runs threaded on its own CPU (`host_cpu`, SCHED_FIFO, as in
//!    `tenant-fairness`); the generator floods from `gen_cpu`. For each
//!    workload the NAPI thread's CPU time per packet is measured with
//!    accounting and fairness on (bucket budget of a whole core, so no
//!    packet is rejected — checked) and with both off, alternated, medians.
//!    Workloads: a drop-only tenant program (the paper's baseline; UDP
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

use rampart_lab::gen::{GenSpec, Generator};
use rampart_lab::packet::Proto;
use rampart_lab::report::{self, BarChart, Machine};
use rampart_lab::topology::{UpOptions, HOST_IF};
use rampart_lab::Lab;
use serde::Serialize;

use crate::compiler::{Compiler, Submission};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::host::HostAgent;
use crate::hostcpu;
use crate::programs::{DnsLimits, DnsStats, DNS_RATELIMIT_C};
use crate::traffic::{Limit, TenantTraffic};
use crate::userspace::DnsForwarder;

/// Options.
#[derive(Debug, Clone, Serialize)]
pub struct TenantBenchOpts {
    /// Lab prefix.
    pub prefix: String,
    /// Measured seconds per repetition.
    pub seconds: f64,
    /// Repetitions per mode (alternated).
    pub reps: u32,
    /// The host's core.
    pub host_cpu: usize,
    /// The generator's CPU.
    pub gen_cpu: usize,
}

impl TenantBenchOpts {
    /// `--quick` (3 × 1.5 s) or the full run (5 × 4 s).
    pub fn new(quick: bool) -> Self {
        Self {
            prefix: "tbench".into(),
            seconds: if quick { 1.5 } else { 4.0 },
            reps: if quick { 3 } else { 5 },
            host_cpu: 1,
            gen_cpu: 0,
        }
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
    /// (on / off − 1) × 100.
    pub overhead_pct: f64,
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
    /// Every repetition.
    pub reps: Vec<OffloadRep>,
}

/// Everything the benchmark measured.
#[derive(Debug, Clone, Serialize)]
pub struct TenantBenchReport {
    /// Drop-only baseline: accounting + fairness overhead, percent.
    pub fairness_overhead_pct: f64,
    /// DNS rate limiter: offloaded handled/s ÷ userspace handled/s.
    pub dns_offload_gain: f64,
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
/* The paper's drop-only baseline. */
int tenant_main(struct xdp_md *ctx)
{
    return XDP_DROP;
}
"#;

fn config(lab: &Lab, name: &str) -> Result<Config> {
    let mut t = String::new();
    for i in 1..=3 {
        t.push_str(&format!(
            "[[tenant]]\nname = \"t{i}\"\ntoken = \"bench-token-{i}-{name}\"\nselectors = [\"prefix:10.20.{i}.0/24\"]\n\
             ports = [\"t{i}\"]\ndomain_netns = \"{}\"\n",
            lab.tenant_ns(i)
        ));
    }
    // A budget of a core per tenant and buckets of a second: nothing is
    // rejected even when this busy machine delays the token thread (the
    // overhead measured is the machinery's, not the policy's; checked).
    Config::parse(&format!(
        "[infra]\nname = \"{name}\"\nnetns = \"{}\"\ninterfaces = [\"{HOST_IF}\"]\n\
         [fairness]\nenabled = false\nbudget_cores = 3.0\nperiod_ms = 10\nbucket_ms = 1000\n{t}",
        lab.host_ns()
    ))
}

fn set_mode(agent: &mut HostAgent, on: bool) -> Result<()> {
    if on {
        agent.set_accounting(true)?;
        agent.set_fairness(true)
    } else {
        agent.set_fairness(false)?;
        agent.set_accounting(false)
    }
}

fn napi_runtime(threads: &hostcpu::NapiThreads) -> u64 {
    threads.pids.iter().map(|&p| hostcpu::runtime_ns(p)).sum()
}

/// Run `load` (blocking, about `seconds`) and measure tenant `tid`.
fn overhead_rep(
    agent: &HostAgent,
    threads: &hostcpu::NapiThreads,
    tid: u32,
    on: bool,
    load: &mut dyn FnMut() -> Result<f64>,
) -> Result<OverheadRep> {
    let s0 = agent.stats(tid)?;
    let r0 = napi_runtime(threads);
    let t0 = Instant::now();
    let requests_per_s = load()?;
    std::thread::sleep(Duration::from_millis(20));
    let s1 = agent.stats(tid)?;
    let r1 = napi_runtime(threads);
    Ok(OverheadRep {
        on,
        packets: s1.packets - s0.packets,
        cpu_ns: r1 - r0,
        seconds: t0.elapsed().as_secs_f64(),
        rejected: s1.drops["no_tokens"] - s0.drops["no_tokens"],
        requests_per_s,
    })
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
    OverheadRow {
        workload: workload.into(),
        off_ns_per_packet: off_ns,
        on_ns_per_packet: on_ns,
        overhead_pct: if off_ns > 0.0 {
            (on_ns / off_ns - 1.0) * 100.0
        } else {
            0.0
        },
        off_pps,
        on_pps,
        reps,
    }
}

fn wrk(lab: &Lab, cpu: usize, url: &str, seconds: f64) -> Result<f64> {
    let out = std::process::Command::new("ip")
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
        .output()
        .map_err(|e| Error::io("running wrk", e))?;
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
    std::fs::create_dir_all(out)
        .map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
    let load0 = loadavg();
    let lab = Lab::new(&opts.prefix)?;
    lab.up(&UpOptions {
        tenants: 3,
        ..UpOptions::default()
    })?;
    let res = run_in_lab(&lab, opts, cancel);
    let _ = hostcpu::unthreaded_napi(&lab.host_ns(), HOST_IF);
    let down = lab.down();
    let (overhead, offload) = res?;
    down?;
    let pick = |w: &str| overhead.iter().find(|r| r.workload == w);
    let r = TenantBenchReport {
        fairness_overhead_pct: pick("drop-only").map_or(0.0, |r| r.overhead_pct),
        dns_offload_gain: offload.first().map_or(0.0, |r| r.gain),
        overhead,
        offload,
        machine: Machine::collect(),
        loadavg: [load0, loadavg()],
        opts: opts.clone(),
    };
    write_outputs(&r, out)?;
    Ok(r)
}

type Measured = (Vec<OverheadRow>, Vec<OffloadRow>);

fn run_in_lab(lab: &Lab, opts: &TenantBenchOpts, cancel: &AtomicBool) -> Result<Measured> {
    let name = format!("bench-{}", opts.prefix);
    let _ = crate::host::cleanup(&name);
    let mut agent = HostAgent::start(config(lab, &name)?)?;
    let compiler = Compiler::new(crate::confine::Policy::default())?;
    let t = |i: u32| Ipv4Addr::from(Lab::tenant_v4(i));
    let tid = |a: &HostAgent, n: &str| {
        a.tenant_id(n)
            .ok_or_else(|| Error::Invalid(format!("tenant {n} missing")))
    };
    let (t1, t2, t3) = (tid(&agent, "t1")?, tid(&agent, "t2")?, tid(&agent, "t3")?);
    agent.install(t1, &compiler.build(Submission::C(DROP_ALL))?)?;
    let _dns = crate::services::dnsmasq(&lab.tenant_ns(2), t(2), Ipv4Addr::new(192, 0, 2, 53))?;
    let _web = crate::services::nginx(&lab.tenant_ns(3), t(3))?;
    let threads = hostcpu::threaded_napi(&lab.host_ns(), HOST_IF, opts.host_cpu)?;
    agent.watch_napi_threads(&threads.pids)?;
    let secs = Duration::from_secs_f64(opts.seconds);

    // 1. Accounting overhead.
    let mut rows = Vec::new();
    for (workload, tenant) in [("drop-only", t1), ("dns-server", t2), ("nginx", t3)] {
        // One generator program at a time holds the lab's anchor.
        let traffic = match workload {
            "drop-only" => Some(TenantTraffic::new(lab, &[t(1)], 64, 9)?),
            "dns-server" => Some(TenantTraffic::with_proto(lab, &[t(2)], Proto::Dns, 82, 53)?),
            _ => None,
        };
        let mut reps = Vec::new();
        for r in 0..opts.reps {
            let order = if r % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for on in order {
                set_mode(&mut agent, on)?;
                let mut load = || -> Result<f64> {
                    match (&traffic, workload) {
                        (Some(tr), "drop-only") => {
                            tr.run(Limit::Duration(secs), None, opts.gen_cpu, true, cancel)?;
                            Ok(0.0)
                        }
                        (Some(tr), _) => {
                            tr.run(
                                Limit::Duration(secs),
                                Some(300_000.0),
                                opts.gen_cpu,
                                true,
                                cancel,
                            )?;
                            Ok(0.0)
                        }
                        (None, _) => wrk(lab, opts.gen_cpu, "http://10.20.3.2/", opts.seconds),
                    }
                };
                reps.push(overhead_rep(&agent, &threads, tenant, on, &mut load)?);
            }
        }
        rows.push(overhead_row(workload, reps));
    }
    set_mode(&mut agent, false)?;
    agent.set_accounting(true)?;

    // 2. DNS offload gain: the kernel path and the service share host_cpu.
    for &p in &threads.pids {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscall on a thread id we found in /proc.
        unsafe { libc::sched_setscheduler(p, libc::SCHED_OTHER, &param) };
    }
    let limiter = compiler.build(Submission::C(DNS_RATELIMIT_C))?;
    let limits = DnsLimits::default();
    // The userspace forwarder listens on a second address of t2; during its
    // repetitions t2 has no program (its traffic is XDP_PASS to the stack),
    // during the offloaded ones the rate limiter is installed again.
    rampart_lab::cmd::in_ns(
        &lab.tenant_ns(2),
        "ip",
        &["addr", "add", "10.20.2.3/24", "dev", "eth0"],
    )?;
    let fwd = DnsForwarder::start(
        &lab.tenant_ns(2),
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 20, 2, 3), 53)),
        SocketAddr::V4(SocketAddrV4::new(t(2), 53)),
        &limits,
        Some(opts.host_cpu),
    )?;
    let spec = |dst: Ipv4Addr| GenSpec {
        sources: 4096,
        proto: Proto::Dns,
        size: 82,
        limit: rampart_lab::gen::Limit::Seconds(opts.seconds),
        dst: Some(IpAddr::V4(dst)),
        ..GenSpec::default()
    };
    let handled_x = |a: &HostAgent| -> Result<u64> {
        let fd = a.tenant_map(t2, "dns_stats")?;
        let s = DnsStats::read(fd.as_raw_fd())?;
        Ok(s.passed + s.truncated + s.dropped + s.exempt + s.malformed)
    };
    // The far end of the wire is another machine: answers arriving at wan0
    // are counted and dropped in XDP there (not by wan's IP stack, whose
    // work would otherwise land on the host core in both modes).
    let _far_end =
        rampart_lab::sink::Sink::attach(&lab.wan_ns(), rampart_lab::topology::WAN_IF, false)?;
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
    let core_cpu = || -> [u64; 3] {
        [
            napi_runtime(&threads),
            ksoft.map_or(0, hostcpu::runtime_ns),
            fwd_tids
                .iter()
                .map(|&p| hostcpu::runtime_ns(p))
                .sum::<u64>(),
        ]
    };
    let mut reps = Vec::new();
    for r in 0..opts.reps {
        let order = if r % 2 == 0 {
            ["xdp", "userspace"]
        } else {
            ["userspace", "xdp"]
        };
        for mode in order {
            let xdp = mode == "xdp";
            if xdp {
                agent.install(t2, &limiter)?;
                limits.apply(
                    agent.tenant_map(t2, "dns_cfg")?.as_raw_fd(),
                    agent.tenant_map(t2, "dns_exempt")?.as_raw_fd(),
                )?;
            } else {
                agent.remove_program(t2)?;
            }
            let h0 = if xdp {
                handled_x(&agent)?
            } else {
                fwd.stats().handled
            };
            // One generator program at a time holds the lab's anchor.
            let gen = Generator::new(
                lab,
                &spec(if xdp {
                    t(2)
                } else {
                    Ipv4Addr::new(10, 20, 2, 3)
                }),
            )?;
            let c0 = core_cpu();
            let g = gen
                .run(cancel)
                .map_err(|e| Error::Invalid(format!("generator: {e}")))?;
            drop(gen);
            std::thread::sleep(Duration::from_millis(50));
            let h1 = if xdp {
                handled_x(&agent)?
            } else {
                fwd.stats().handled
            };
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
    drop(fwd);
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
    let offload = vec![OffloadRow {
        service: "dns-ratelimit".into(),
        offloaded_pps: x,
        userspace_pps: u,
        gain: if u > 0.0 { x / u } else { 0.0 },
        offloaded_wall_pps: xw,
        userspace_wall_pps: uw,
        wall_gain: if uw > 0.0 { xw / uw } else { 0.0 },
        offered_pps: offered,
        reps,
    }];
    Ok((rows, offload))
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
    let cats: Vec<String> = r.offload.iter().map(|x| x.service.clone()).collect();
    report::bar_chart(
        &p("offload.png"),
        &BarChart {
            title: "DNS queries handled per CPU-second of the host core: offloaded (XDP) vs userspace (median)",
            y_label: "queries per CPU-second",
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
