//! `rampart tenant …` (DESIGN §5) and `rampart bench tenant-fairness`.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use rampart_tenant::bench::{self, FairnessOpts};
use rampart_tenant::client::{Client, Reply};
use serde_json::Value;

use super::util::print_json;

/// How a client reaches the API.
#[derive(Debug, Args, Clone)]
pub struct ClientArgs {
    /// URL of `rampart tenant serve`.
    #[arg(
        long,
        env = "RAMPART_TENANT_SERVER",
        default_value = "http://127.0.0.1:9610",
        global = true
    )]
    pub server: String,
    /// The tenant's API token.
    #[arg(
        long,
        env = "RAMPART_TENANT_TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum TenantCmd {
    /// Run the host agent, compiler agent and HTTP API for a config file.
    Serve {
        /// TOML configuration (see docs/architecture.md, "Tenant offload").
        #[arg(long)]
        config: PathBuf,
    },
    /// Submit or replace your program (C source or BPF object).
    Submit {
        #[command(flatten)]
        client: ClientArgs,
        /// The program: a .c file (compiled against rampart_tenant.h) or a BPF .o.
        file: PathBuf,
    },
    /// Remove your program (your packets then pass untouched; your maps stay).
    Remove {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Your selectors, program and limits.
    Status {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Your packets, verdicts, drops by reason, CPU time and tokens.
    Stats {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show your selectors, or replace them with --set.
    Selectors {
        #[command(flatten)]
        client: ClientArgs,
        /// New selectors (prefix:ADDR/LEN, vlan:ID, vni:ID, iface:NAME), replacing all.
        #[arg(long, num_args = 1..)]
        set: Option<Vec<String>>,
    },
    /// List your maps, dump one, or change an entry.
    Maps {
        #[command(flatten)]
        client: ClientArgs,
        /// Map to dump or change.
        map: Option<String>,
        /// Set an entry: KEY=VALUE, both hex.
        #[arg(long, requires = "map", conflicts_with = "delete")]
        set: Option<String>,
        /// Delete the entry with this key (hex).
        #[arg(long, requires = "map")]
        delete: Option<String>,
    },
    /// Print the tenant API header programs compile against.
    Header,
    /// Remove the pins of a crashed `serve` instance.
    Cleanup {
        /// Instance name (infra.name in the config).
        #[arg(long, default_value = "default")]
        name: String,
    },
}

fn client(a: &ClientArgs) -> Result<Client> {
    let Some(token) = a.token.as_deref() else {
        bail!("no token: pass --token or set RAMPART_TENANT_TOKEN");
    };
    Ok(Client::new(&a.server, token))
}

/// Print a reply (JSON or the given human form); an API error becomes the one-line error.
fn show(reply: Reply, json: bool, human: impl FnOnce(&Value)) -> Result<()> {
    match reply {
        Ok(v) => {
            if json {
                print_json(&v)
            } else {
                human(&v);
                Ok(())
            }
        }
        Err(f) => {
            if let Some(log) = f.body["verifier_log"].as_str() {
                eprintln!(
                    "--- verifier log ---\n{}\n--- end of verifier log ---",
                    log.trim_end()
                );
            }
            if let Some(c) = f.body["compiler"].as_str() {
                eprintln!(
                    "--- compiler output ---\n{}\n--- end of compiler output ---",
                    c.trim_end()
                );
            }
            bail!("{}", f.message())
        }
    }
}

fn pretty(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

pub fn run(cmd: TenantCmd, cancel: &AtomicBool) -> Result<()> {
    match cmd {
        TenantCmd::Serve { config } => {
            let cfg = rampart_tenant::config::Config::load(&config)?;
            rampart_tenant::serve::serve(cfg, cancel)?;
            Ok(())
        }
        TenantCmd::Submit { client: c, file } => {
            let body =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            show(client(&c)?.put("/v1/program", &body)?, c.json, |v| {
                println!(
                    "program v{} running (generation {}): {} instructions, {} verified, maps: {}",
                    v["version"],
                    v["generation"],
                    v["insns"],
                    v["verified_insns"],
                    v["maps"]
                        .as_array()
                        .map(|m| m
                            .iter()
                            .map(|x| format!(
                                "{}{}",
                                x["name"].as_str().unwrap_or("?"),
                                if x["kept"] == true {
                                    " (state kept)"
                                } else {
                                    ""
                                }
                            ))
                            .collect::<Vec<_>>()
                            .join(", "))
                        .unwrap_or_default()
                );
            })
        }
        TenantCmd::Remove { client: c } => show(client(&c)?.delete("/v1/program")?, c.json, |v| {
            println!(
                "{}",
                if v["removed"] == true {
                    "program removed"
                } else {
                    "no program was running"
                }
            );
        }),
        TenantCmd::Status { client: c } => show(client(&c)?.get("/v1/tenant")?, c.json, pretty),
        TenantCmd::Stats { client: c } => show(client(&c)?.get("/v1/stats")?, c.json, pretty),
        TenantCmd::Selectors { client: c, set } => {
            let cl = client(&c)?;
            let reply = match set {
                Some(s) => cl.put("/v1/selectors", &serde_json::to_vec(&s)?)?,
                None => cl.get("/v1/selectors")?,
            };
            show(reply, c.json, |v| {
                for s in v.as_array().into_iter().flatten() {
                    println!("{}", s.as_str().unwrap_or_default());
                }
            })
        }
        TenantCmd::Maps {
            client: c,
            map,
            set,
            delete,
        } => {
            let cl = client(&c)?;
            let reply = match (map, set, delete) {
                (None, _, _) => cl.get("/v1/maps")?,
                (Some(m), Some(kv), _) => {
                    let (k, v) = kv.split_once('=').context("--set takes KEY=VALUE (hex)")?;
                    cl.put(
                        &format!("/v1/maps/{m}"),
                        &serde_json::to_vec(&serde_json::json!({"key": k, "value": v}))?,
                    )?
                }
                (Some(m), None, Some(k)) => cl.delete(&format!("/v1/maps/{m}/{k}"))?,
                (Some(m), None, None) => cl.get(&format!("/v1/maps/{m}"))?,
            };
            show(reply, c.json, pretty)
        }
        TenantCmd::Header => {
            print!("{}", rampart_tenant::compiler::TENANT_HEADER);
            Ok(())
        }
        TenantCmd::Cleanup { name } => {
            if rampart_tenant::host::cleanup(&name)? {
                println!("removed the pins of tenant instance {name}");
            } else {
                println!("no pins for tenant instance {name}");
            }
            Ok(())
        }
    }
}

/// `rampart bench <name>`: benchmarks of the tenant offload.
#[derive(Debug, Subcommand)]
pub enum TenantBench {
    /// Three tenants, equal shares, flooded; fairness on vs off; accounting coverage.
    TenantFairness(FairnessArgs),
    /// The tenant services' evaluation: accounting overhead, offload gain (data, plots, summary.json).
    Tenant(ServicesBenchArgs),
}

#[derive(Debug, Args)]
pub struct ServicesBenchArgs {
    /// Directory for summary.json, CSV data and PNG plots (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Shorter run (3 repetitions of 1.5 s per mode instead of 5 of 4 s; 1, 2, 4, 8 competitors).
    #[arg(long)]
    pub quick: bool,
    /// Parts to run, comma-separated (default: all of overhead, shares, scaling, offload).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Lab prefix of the benchmark's own lab (removed at the end).
    #[arg(long, default_value = "tbench")]
    pub prefix: String,
    /// CPU of the host's receive processing (the core the services share).
    #[arg(long, default_value_t = 1)]
    pub host_cpu: usize,
    /// CPU of the traffic generator.
    #[arg(long, default_value_t = 0)]
    pub gen_cpu: usize,
    /// Offload part: leave the EMULATED NIC's way back (answers crossing nic-host → nic-wan → wan0)
    /// on the host core, where a veth puts it, and charge it to both modes (the method before
    /// 2026-11-23; default: it runs on the generator's CPU, like the way in).
    #[arg(long)]
    pub wire_on_host_core: bool,
}

#[derive(Debug, Args)]
pub struct FairnessArgs {
    /// Lab prefix of the benchmark's own lab (removed at the end).
    #[arg(long, default_value = "tfair")]
    pub prefix: String,
    /// Hash rounds of the three tenants' programs (their cost), comma-separated.
    #[arg(long, default_value = "1500,5000,20000", value_delimiter = ',')]
    pub rounds: Vec<u32>,
    /// Measured seconds per phase.
    #[arg(long, default_value_t = 4.0)]
    pub seconds: f64,
    /// Repetitions of the (fair, unfair) pair, alternated.
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// CPU budget of the token generator, in cores.
    #[arg(long, default_value_t = 0.8)]
    pub budget_cores: f64,
    /// CPU that runs the host's receive processing (the shared core).
    #[arg(long, default_value_t = 1)]
    pub host_cpu: usize,
    /// CPU of the traffic generator.
    #[arg(long, default_value_t = 0)]
    pub gen_cpu: usize,
    /// Offered load over all tenants, frames/s (0: as fast as the generator goes).
    #[arg(long, default_value_t = 600_000.0)]
    pub pps: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run_bench(cmd: TenantBench, cancel: &AtomicBool) -> Result<()> {
    match cmd {
        TenantBench::Tenant(a) => {
            let opts = rampart_tenant::bench_services::TenantBenchOpts {
                prefix: a.prefix,
                host_cpu: a.host_cpu,
                gen_cpu: a.gen_cpu,
                wire_on_host_core: a.wire_on_host_core,
                ..rampart_tenant::bench_services::TenantBenchOpts::new(a.quick)
            };
            let opts = if a.only.is_empty() {
                opts
            } else {
                rampart_tenant::bench_services::TenantBenchOpts {
                    parts: a.only.clone(),
                    ..opts
                }
            };
            let r = rampart_tenant::bench_services::run(&opts, &a.out, cancel)?;
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
                println!("dispatcher alone (BPF_PROG_RUN, drop-only packet): off {off:.1} ns, on {on:.1} ns");
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
                a.out.join("summary.json").display()
            );
            Ok(())
        }
        TenantBench::TenantFairness(a) => {
            let rounds: [u32; 3] = a.rounds.clone().try_into().map_err(|_| {
                anyhow::anyhow!("--rounds needs exactly three numbers, e.g. 30,300,1000")
            })?;
            if !(a.seconds > 0.0 && a.seconds <= 600.0) || a.reps == 0 {
                anyhow::bail!("--seconds must be within (0, 600] and --reps ≥ 1");
            }
            let opts = FairnessOpts {
                prefix: a.prefix,
                rounds,
                seconds: a.seconds,
                reps: a.reps,
                budget_cores: a.budget_cores,
                host_cpu: a.host_cpu,
                gen_cpu: a.gen_cpu,
                pps: (a.pps > 0.0).then_some(a.pps),
                ..FairnessOpts::default()
            };
            let r = bench::fairness(&opts, cancel)?;
            if a.json {
                return print_json(&r);
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
    }
}
