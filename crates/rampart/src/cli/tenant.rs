//! `rampart tenant …` (DESIGN §5) and `rampart bench tenant-fairness`.

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::{Args, Subcommand};
use rampart_tenant::bench::{self, FairnessOpts};

use super::util::print_json;

/// `rampart bench <name>`: benchmarks of the tenant offload.
#[derive(Debug, Subcommand)]
pub enum TenantBench {
    /// Three tenants, equal shares, flooded; fairness on vs off; accounting coverage.
    TenantFairness(FairnessArgs),
}

#[derive(Debug, Args)]
pub struct FairnessArgs {
    /// Lab prefix of the benchmark's own lab (removed at the end).
    #[arg(long, default_value = "tfair")]
    pub prefix: String,
    /// Hash rounds of the three tenants' programs (their cost), comma-separated.
    #[arg(long, default_value = "300,1000,4000", value_delimiter = ',')]
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
    #[arg(long, default_value_t = 0.0)]
    pub pps: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run_bench(cmd: TenantBench, cancel: &AtomicBool) -> Result<()> {
    match cmd {
        TenantBench::TenantFairness(a) => {
            let rounds: [u32; 3] = a
                .rounds
                .clone()
                .try_into()
                .map_err(|_| anyhow::anyhow!("--rounds needs exactly three numbers, e.g. 30,300,1000"))?;
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
            for (label, p) in [("fairness on", &r.fair), ("fairness off", &r.unfair)] {
                println!("{label}: host core busy {:.1}%, offered {:.2} Mpps", p.host_busy_pct, p.offered_pps / 1e6);
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
                "programs: {:.0} / {:.0} / {:.0} ns per packet ({:.1}x); accounted {:.1}% of the host core's receive time",
                r.program_ns[0], r.program_ns[1], r.program_ns[2], r.program_cost_ratio, r.accounted_pct
            );
            Ok(())
        }
    }
}
