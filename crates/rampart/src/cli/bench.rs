//! `rampart bench <name>`: every application's benchmarks in one group.
//! The ddos ones run in a lab of their own (unique prefix, removed at the
//! end, also on error and Ctrl-C); rampart stream's come from cli/stream.rs.

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::{Args, Subcommand};
use rampart_ddos::bench::features::{self as fbench, FeaturesReadSpec};
use rampart_ddos::bench::filter::{self as filt, FilterBenchSpec, Peer};
use rampart_lab::dist::Dist;

use super::util::print_json;

#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// ddos blacklist drop rate vs bare XDP_DROP, nftables, iptables, xdp-filter.
    Filter(FilterArgs),
    /// ddos feature stage: time to read one interval of N (src, dst) pairs.
    FeaturesRead(FeaturesReadArgs),
    /// ddos blacklist: updates of up to 1M entries under a flood from the entries that stay.
    FilterUpdate(FilterUpdateArgs),
    /// ddos experiments: the paper's four figures (drop rate vs attackers per
    /// mode and peer, CPU per mode, requests/s under attack, hybrid offload
    /// quality) as CSV, JSON and PNG in --out.
    Ddos(DdosArgs),
    /// rampart stream's benchmarks (cli/stream.rs).
    #[command(flatten)]
    Stream(super::stream::BenchCmd),
    /// rampart tenant's benchmarks (cli/tenant.rs).
    #[command(flatten)]
    Tenant(super::tenant::TenantBench),
}

#[derive(Debug, Args)]
pub struct DdosArgs {
    /// Directory for CSV, JSON (summary.json) and PNG files (created).
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// The reduced set (a few minutes; 131,072 sources and every series kept).
    #[arg(long)]
    pub quick: bool,
    /// With --quick: every series with tiny sizes (CI, < 2 min); its numbers mean nothing.
    #[arg(long)]
    pub smoke: bool,
    /// K: rules of the EMULATED NIC table in the drop-rate, CPU and service figures.
    #[arg(long)]
    pub nic_capacity: Option<u32>,
    /// Print summary.json to stdout at the end.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FilterUpdateArgs {
    /// Entries that stay (and flood).
    #[arg(long, default_value_t = 1 << 20)]
    pub entries: u32,
    /// Entries added and removed around them per update.
    #[arg(long, default_value_t = 100_000)]
    pub change: u32,
    /// Updates.
    #[arg(long, default_value_t = 6)]
    pub reps: u32,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FilterArgs {
    /// Blacklist sizes (= attacking sources), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,131072,1048576")]
    pub sources: Vec<u32>,
    /// Per-source shares: random (= uniform shares, random order), uniform, gaussian, zipf.
    #[arg(long, default_value = "random")]
    pub dist: String,
    /// Distribution parameter (gaussian sigma, zipf exponent).
    #[arg(long)]
    pub dist_param: Option<f64>,
    /// Seconds per run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Repetitions per variant (alternated).
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Peers to run besides bare XDP_DROP: nft, iptables, ipset, xdp-filter, or none.
    #[arg(long, value_delimiter = ',', default_value = "nft,iptables,xdp-filter")]
    pub peers: Vec<String>,
    /// rampart's per-entry counters count 1 in 2^N matches.
    #[arg(long, default_value_t = 4)]
    pub sample_shift: u32,
    /// iptables rules every packet walks.
    #[arg(long, default_value_t = 1000)]
    pub iptables_rules: u32,
    /// Print one JSON object per point.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FeaturesReadArgs {
    /// (src, dst) pairs in the interval.
    #[arg(long, default_value_t = 300_000)]
    pub entries: u32,
    /// Repetitions.
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Generator threads, one per CPU (each CPU then holds a copy of every pair).
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into())
}

pub fn run(cmd: BenchCmd, cancel: &AtomicBool) -> Result<()> {
    match cmd {
        BenchCmd::Filter(a) => {
            let dist = if a.dist == "random" {
                Dist::parse("uniform", a.dist_param)?
            } else {
                Dist::parse(&a.dist, a.dist_param)?
            };
            let peers = if a.peers.iter().any(|p| p == "none") {
                if a.peers.len() > 1 {
                    anyhow::bail!("--peers none cannot be combined with other peers");
                }
                Vec::new()
            } else {
                a.peers
                    .iter()
                    .map(|p| p.parse::<Peer>())
                    .collect::<Result<Vec<_>, _>>()?
            };
            let spec = FilterBenchSpec {
                sources: a.sources,
                dist,
                seconds: a.seconds,
                reps: a.reps,
                peers,
                sample_shift: a.sample_shift,
                iptables_rules: a.iptables_rules,
                size: 64,
            };
            spec.validate()?;
            if !a.json {
                println!(
                    "{:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   {:>7} {:>7} {:>7} {:>7}",
                    "sources",
                    "rampart",
                    "xdp_drop",
                    "nft_set",
                    "iptables",
                    "xdp-filt",
                    "/drop",
                    "/nft",
                    "/ipt",
                    "/xdpf"
                );
            }
            let json = a.json;
            filt::run(&spec, cancel, |p| {
                if json {
                    let _ = print_json(p);
                } else {
                    println!(
                        "{:>9} {:>9.3} {:>9.3} {:>9} {:>9} {:>9}   {:>7.2} {:>7} {:>7} {:>7}   (Mpps, medians of {})",
                        p.sources,
                        p.drop_mpps,
                        p.xdp_drop_mpps,
                        opt(p.nft_set_mpps),
                        opt(p.iptables_mpps),
                        opt(p.xdp_filter_mpps),
                        p.ratio_xdp_drop,
                        p.ratio_nft_set.map(|r| format!("{r:.1}")).unwrap_or_else(|| "-".into()),
                        p.ratio_iptables.map(|r| format!("{r:.1}")).unwrap_or_else(|| "-".into()),
                        p.ratio_xdp_filter.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into()),
                        p.reps
                    );
                }
            })?;
            Ok(())
        }
        BenchCmd::Ddos(a) => run_ddos(a, cancel),
        BenchCmd::Stream(c) => super::stream::run_bench(c, cancel),
        BenchCmd::Tenant(b) => super::tenant::run_bench(b, cancel),
        BenchCmd::FilterUpdate(a) => {
            let spec = rampart_ddos::bench::update::UpdateSpec {
                entries: a.entries,
                change: a.change,
                reps: a.reps,
            };
            let r = rampart_ddos::bench::update::run(&spec, cancel)?;
            if a.json {
                return print_json(&r);
            }
            println!(
                "{} entries loaded in {:.2} s; replace ±{} around them: {:.2} s median ({:?}); {} flood packets dropped meanwhile, {} leaked; counters monotonic: {}",
                r.entries, r.load_seconds, r.change, r.update_seconds, r.update_seconds_raw, r.dropped_during, r.leaked, r.counters_monotonic
            );
            Ok(())
        }
        BenchCmd::FeaturesRead(a) => {
            let spec = FeaturesReadSpec {
                entries: a.entries,
                reps: a.reps,
                threads: a.threads,
            };
            let r = fbench::run(&spec, cancel)?;
            if a.json {
                return print_json(&r);
            }
            println!(
                "{} pairs on {} CPUs: read+aggregate+clear {:.2} ms median (kept vector), {:.2} ms (callback), {:.2} ms cold (fresh vector); swap wait {:.2} ms",
                r.entries, r.cpus, r.read_ms, r.callback_read_ms, r.cold_read_ms, r.swap_wait_ms
            );
            println!("records per read: {:?}", r.records);
            Ok(())
        }
    }
}

fn run_ddos(a: DdosArgs, cancel: &AtomicBool) -> Result<()> {
    use rampart_ddosd::bench::{self as dbench, DdosBenchSpec};
    if a.smoke && !a.quick {
        anyhow::bail!("--smoke is a variant of --quick: pass --quick --smoke");
    }
    let mut spec = if a.smoke {
        DdosBenchSpec::smoke()
    } else if a.quick {
        DdosBenchSpec::quick()
    } else {
        DdosBenchSpec::full()
    };
    if let Some(k) = a.nic_capacity {
        spec.nic_capacity = k;
    }
    let json = a.json;
    let log = move |s: String| {
        if json {
            eprintln!("{s}");
        } else {
            println!("{s}");
        }
    };
    let r = dbench::run(&spec, &a.out, cancel, &log)?;
    if json {
        return print_json(&r);
    }
    let b = &r.bar;
    let o = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    println!(
        "bar at {} sources: xdp-host/nft {} (≥ 2.5), xdp-host/iptables-{} {} (≥ 10); legit at the highest attack in xdp-host {} of baseline (≥ 0.80): {}",
        b.sources,
        o(b.xdp_host_over_nft),
        r.spec.iptables_rules,
        o(b.xdp_host_over_iptables),
        o(b.legit_ratio_xdp_host),
        if b.met { "met" } else { "NOT met" }
    );
    for n in &r.notes {
        println!("note: {n}");
    }
    println!(
        "{:.0} s; data and plots in {} (summary.json, *.csv, *.png)",
        r.seconds,
        a.out.display()
    );
    Ok(())
}
