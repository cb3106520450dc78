//! `rampart bench <name>`: every application's benchmarks in one group.
//! Each parses its flags into a spec and calls one function of
//! rampart-bench, which runs it in a lab of its own (unique prefix, removed
//! at the end, also on error and Ctrl-C) and prints the results.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::{Args, Subcommand};
use rampart_bench::ddos::experiments::DdosBenchSpec;
use rampart_bench::ddos::features::FeaturesReadSpec;
use rampart_bench::ddos::filter::{FilterBenchSpec, Peer};
use rampart_bench::ddos::update::UpdateSpec;
use rampart_bench::stream::engine::EngineSpec;
use rampart_bench::stream::offload::OffloadSpec;
use rampart_bench::tenant::fairness::FairnessOpts;
use rampart_bench::tenant::services::TenantBenchOpts;
use rampart_lab::dist::Dist;

use super::stream::{App, OnOff, TsArg};

#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// ddos blacklist drop rate vs bare XDP_DROP, nftables, iptables, xdp-filter.
    Filter(FilterArgs),
    /// ddos feature stage: time to read one interval of N (src, dst) pairs.
    FeaturesRead(FeaturesReadArgs),
    /// ddos blacklist: updates of up to 1M entries under a flood from the entries that stay.
    FilterUpdate(FilterUpdateArgs),
    /// ddos experiments: the four figures of Miano et al., IEEE Access 2019 (drop rate vs attackers per
    /// mode and peer, CPU per mode, requests/s under attack, hybrid offload
    /// quality) as CSV, JSON and PNG in --out.
    Ddos(DdosArgs),
    /// The stream engine benchmark: full and empty pipelines.
    StreamEngine(StreamEngineArgs),
    /// The stream offload benchmark: an app fed by the lab
    /// generator with the XDP offload on and off, and the raw AF_XDP
    /// receive ceiling, in a lab of its own.
    Stream(StreamArgs),
    /// Flow monitoring on a server: the tap (tuples, XDP aggregation), raw
    /// AF_XDP and softflowd on the same traffic into the lab's host, with
    /// the host CPU each costs and nginx's requests/s beside it.
    StreamHost(StreamHostArgs),
    /// Three tenants, equal shares, flooded; fairness on vs off; accounting coverage.
    TenantFairness(FairnessArgs),
    /// The tenant services' evaluation: accounting overhead, offload gain (data, plots, summary.json).
    Tenant(ServicesBenchArgs),
    /// ddos detection scenario suite: real tools against the daemon on the shipped
    /// dist/rampart-ddos.toml, one lab per scenario; one JSON object per scenario and a summary.
    Detect(DetectArgs),
    /// ddos soak: the daemon on the shipped config for N minutes under the demo's traffic mix
    /// (attack cycles); RSS, map occupancy, loop jitter, errors and leaked packets.
    Soak(SoakArgs),
    /// The tiers beyond the host: FlowSpec and RTBH through ExaBGP to the lab's
    /// router (BIRD; its forwarding EMULATED), flow input, the fleet through CrowdSec.
    Upstream(UpstreamArgs),
}

#[derive(Debug, Args)]
pub struct UpstreamArgs {
    /// Print one JSON object (the report, with the bar).
    #[arg(long)]
    pub json: bool,
    /// Directory for summary.json and each part's files: the daemon's config, log, alerts (created).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reflectors of the BGP part's NTP flood.
    #[arg(long, default_value_t = 300)]
    pub reflectors: u32,
    /// The flood's packets per second (all reflectors).
    #[arg(long, default_value_t = 20_000.0)]
    pub pps: f64,
    /// The link capacity the daemon's config declares (packets/s): the tier engages
    /// when the blocked volume reaches 0.8 of it.
    #[arg(long, default_value_t = 10_000.0)]
    pub link_pps: f64,
}

#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Minutes the daemon runs under the mix (10 for the bar; 60 or more for the recorded run).
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// UDP flood rate during each attack (packets/s, 4000 Zipf sources).
    #[arg(long, default_value_t = 100_000.0)]
    pub udp_pps: f64,
    /// SYN flood rate during each attack (packets/s, 2000 Zipf sources).
    #[arg(long, default_value_t = 50_000.0)]
    pub syn_pps: f64,
    /// Print one JSON object (the report).
    #[arg(long)]
    pub json: bool,
    /// Directory for summary.json, samples.jsonl, the daemon's log and config (created).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DetectArgs {
    /// Scenarios to run (comma-separated or repeated; default: all).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// Repetitions of each scenario (the summary takes medians).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Print one JSON object per scenario (medians), then the summary object.
    #[arg(long)]
    pub json: bool,
    /// Directory for results.jsonl, runs.jsonl, summary.json and each run's files (created).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct StreamHostArgs {
    /// One JSON object per run, one per feed (medians), then a summary with the bar.
    #[arg(long)]
    pub json: bool,
    /// Also write runs.csv, feeds.csv, summary.json and PNG plots here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seconds of generator traffic per ingest phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Seconds of wrk against nginx per service phase.
    #[arg(long, default_value_t = 5.0)]
    pub wrk_seconds: f64,
    /// wrk connections.
    #[arg(long, default_value_t = 32)]
    pub wrk_conns: u32,
    /// Repetitions (every feed once per repetition, the baseline first).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Distinct flows (generator source addresses).
    #[arg(long, default_value_t = 65536)]
    pub flows: u32,
    /// Offered packets per second (the same for every feed).
    #[arg(long, default_value_t = 300_000.0)]
    pub pps: f64,
    /// 64-byte packets: udp, or ack (TCP).
    #[arg(long, default_value = "udp", value_parser = ["udp", "ack"])]
    pub proto: String,
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

#[derive(Debug, Args)]
pub struct StreamEngineArgs {
    /// One JSON object per configuration (medians, raw runs included).
    #[arg(long)]
    pub json: bool,
    /// Flow counts to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "65536")]
    pub flows: Vec<u32>,
    /// Seconds each run's source generates.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Repetitions (configurations alternate within each repetition).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Output batch size when batching is on.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Tuple: 32 (the 32-byte packet tuple) or 56 (the shared
    /// `struct stream_tuple` the apps use).
    #[arg(long, default_value_t = 32, value_parser = clap::builder::TypedValueParser::map(clap::builder::PossibleValuesParser::new(["32", "56"]), |s: String| s.parse::<usize>().unwrap_or(32)))]
    pub tuple_bytes: usize,
}

#[derive(Debug, Args)]
pub struct StreamArgs {
    /// The app.
    #[arg(long, value_enum, default_value = "flowmeter")]
    pub app: App,
    /// Offload modes to measure (comma-separated; alternated in each repetition).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on,off")]
    pub offload: Vec<OnOff>,
    /// Source replicas to measure (comma-separated, 1..=8).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub sources: Vec<u32>,
    /// Output batching to measure (comma-separated): on = --batch, off = 1.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub batching: Vec<OnOff>,
    /// Output batch size when batching is on.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Seconds of traffic per run.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Repetitions.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Distinct flows (generator source addresses).
    #[arg(long, default_value_t = 4096)]
    pub flows: u32,
    /// Generator rate, packets per second (default: as fast as it goes).
    #[arg(long)]
    pub pps: Option<f64>,
    /// Offload record timestamps: the driver's RX metadata when it has
    /// them (device-bound program), or software time only.
    #[arg(long, value_enum, default_value = "rx-meta")]
    pub timestamps: TsArg,
    /// One JSON object per run, then one per configuration (medians).
    #[arg(long)]
    pub json: bool,
    /// Also write runs.csv, summary.csv and PNG plots into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
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

pub fn run(cmd: BenchCmd, cancel: &AtomicBool) -> Result<()> {
    match cmd {
        BenchCmd::Detect(a) => {
            let spec = rampart_bench::ddos::detect::DetectSpec {
                scenarios: a.scenario,
                repeat: a.repeat,
                json: a.json,
                out: a.out,
                rampart_bin: std::env::current_exe()?,
            };
            Ok(rampart_bench::ddos::detect::run_and_print(&spec, cancel)?)
        }
        BenchCmd::Upstream(a) => {
            if a.reflectors == 0 || a.reflectors > 1 << 20 {
                super::util::usage_bail!(
                    "--reflectors {} is out of range: pick 1 to 1048576",
                    a.reflectors
                );
            }
            if !(a.pps > 0.0 && a.link_pps > 0.0) {
                super::util::usage_bail!("--pps and --link-pps must be positive");
            }
            let spec = rampart_bench::upstream::UpstreamSpec {
                json: a.json,
                out: a.out,
                bgp: rampart_bench::upstream::bgp::BgpSpec {
                    reflectors: a.reflectors,
                    pps: a.pps,
                    link_capacity_pps: a.link_pps,
                    ..Default::default()
                },
            };
            let r = rampart_bench::upstream::run_and_print(&spec, cancel)?;
            if !r.bar.met {
                anyhow::bail!(
                    "the upstream bar is not met (bar: {})",
                    serde_json::to_string(&r.bar).unwrap_or_default()
                );
            }
            Ok(())
        }
        BenchCmd::Soak(a) => {
            if !(a.minutes >= 1.0 && a.minutes <= 1440.0) {
                super::util::usage_bail!(
                    "--minutes {} is out of range: pick 1 to 1440 (10 for the bar, 60 or more for the recorded run)",
                    a.minutes
                );
            }
            if !(a.udp_pps > 0.0 && a.syn_pps > 0.0) {
                super::util::usage_bail!("--udp-pps and --syn-pps must be positive");
            }
            let spec = rampart_bench::ddos::soak::SoakSpec {
                minutes: a.minutes,
                udp_pps: a.udp_pps,
                syn_pps: a.syn_pps,
                json: a.json,
                out: a.out,
                rampart_bin: std::env::current_exe()?,
            };
            let r = rampart_bench::ddos::soak::run_and_print(&spec, cancel)?;
            if !r.pass {
                anyhow::bail!(
                    "the soak missed its bar (leaked {}, errors {}, RSS growth {:.1} %)",
                    r.leaked,
                    r.errors,
                    r.rss_growth_pct
                );
            }
            Ok(())
        }
        BenchCmd::Filter(a) => {
            let dist = if a.dist == "random" {
                Dist::parse("uniform", a.dist_param)?
            } else {
                Dist::parse(&a.dist, a.dist_param)?
            };
            let peers = if a.peers.iter().any(|p| p == "none") {
                if a.peers.len() > 1 {
                    super::util::usage_bail!("--peers none cannot be combined with other peers");
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
            Ok(rampart_bench::ddos::filter::run_and_print(
                &spec, a.json, cancel,
            )?)
        }
        BenchCmd::FilterUpdate(a) => {
            let spec = UpdateSpec {
                entries: a.entries,
                change: a.change,
                reps: a.reps,
            };
            Ok(rampart_bench::ddos::update::run_and_print(
                &spec, a.json, cancel,
            )?)
        }
        BenchCmd::FeaturesRead(a) => {
            let spec = FeaturesReadSpec {
                entries: a.entries,
                reps: a.reps,
                threads: a.threads,
            };
            Ok(rampart_bench::ddos::features::run_and_print(
                &spec, a.json, cancel,
            )?)
        }
        BenchCmd::Ddos(a) => {
            if a.smoke && !a.quick {
                super::util::usage_bail!("--smoke is a variant of --quick: pass --quick --smoke");
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
            Ok(rampart_bench::ddos::experiments::run_and_print(
                &spec, &a.out, a.json, cancel,
            )?)
        }
        BenchCmd::StreamEngine(a) => {
            let spec = EngineSpec {
                flows: a.flows,
                seconds: a.seconds,
                repeat: a.repeat,
                batch: a.batch,
                tuple_bytes: a.tuple_bytes,
                json: a.json,
            };
            Ok(rampart_bench::stream::engine::run_and_print(&spec)?)
        }
        BenchCmd::StreamHost(a) => {
            let spec = rampart_bench::stream::host::HostSpec {
                seconds: a.seconds,
                wrk_seconds: a.wrk_seconds,
                wrk_conns: a.wrk_conns,
                repeat: a.repeat,
                flows: a.flows,
                pps: a.pps,
                proto: if a.proto == "ack" {
                    rampart_lab::packet::Proto::Ack
                } else {
                    rampart_lab::packet::Proto::Udp
                },
                json: a.json,
                out: a.out,
            };
            Ok(rampart_bench::stream::host::run(&spec, cancel)?)
        }
        BenchCmd::Stream(a) => {
            use rampart_bench::stream::offload::App as BenchApp;
            let spec = OffloadSpec {
                app: match a.app {
                    App::Flowmeter => BenchApp::Flowmeter,
                    App::Portscan => BenchApp::Portscan,
                    App::Synflood => BenchApp::Synflood,
                },
                offload: a.offload.iter().map(|&o| o == OnOff::On).collect(),
                sources: a.sources,
                batching: a.batching.iter().map(|&b| b == OnOff::On).collect(),
                batch: a.batch,
                seconds: a.seconds,
                repeat: a.repeat,
                flows: a.flows,
                pps: a.pps,
                json: a.json,
                out: a.out,
            };
            Ok(rampart_bench::stream::offload::run(&spec, cancel)?)
        }
        BenchCmd::Tenant(a) => {
            let opts = TenantBenchOpts {
                prefix: a.prefix,
                host_cpu: a.host_cpu,
                gen_cpu: a.gen_cpu,
                wire_on_host_core: a.wire_on_host_core,
                ..TenantBenchOpts::new(a.quick)
            };
            let opts = if a.only.is_empty() {
                opts
            } else {
                TenantBenchOpts {
                    parts: a.only.clone(),
                    ..opts
                }
            };
            Ok(rampart_bench::tenant::services::run_and_print(
                &opts, &a.out, cancel,
            )?)
        }
        BenchCmd::TenantFairness(a) => {
            let rounds: [u32; 3] = a.rounds.clone().try_into().map_err(|_| {
                super::util::usage("--rounds needs exactly three numbers, e.g. 30,300,1000")
            })?;
            if !(a.seconds > 0.0 && a.seconds <= 600.0) || a.reps == 0 {
                super::util::usage_bail!("--seconds must be within (0, 600] and --reps ≥ 1");
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
            Ok(rampart_bench::tenant::fairness::run_and_print(
                &opts, a.json, cancel,
            )?)
        }
    }
}
