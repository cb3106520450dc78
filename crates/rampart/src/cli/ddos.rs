//! `rampart ddos ...`: the DDoS data plane without a daemon. Every command
//! works on the state pinned under `/sys/fs/bpf/rampart/ddos/<scope>/`, so
//! filtering stays in force after the command exits.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use rampart_dataplane::xdp::XdpMode;
use rampart_ddos::features::Features;
use rampart_ddos::filter::{self, BlockEntry, Filter, FilterConfig, Scope, Update};
use rampart_ddos::prefix::{self, Prefix};
use serde::Serialize;

use super::util::{print_json, si, usage, usage_bail};

/// Which filter (optional when exactly one is installed).
#[derive(Debug, Args, Clone)]
pub struct Which {
    /// Interface the filter is attached to.
    #[arg(long)]
    pub iface: Option<String>,
    /// Named network namespace of the interface (`ip netns` name).
    #[arg(long, requires = "iface")]
    pub netns: Option<String>,
}

impl Which {
    fn resolve(&self) -> Result<String> {
        let scope = match &self.iface {
            Some(i) => Some(Scope::new(self.netns.as_deref(), i)?),
            None => None,
        };
        Ok(filter::resolve(scope.as_ref())?)
    }
}

#[derive(Debug, Subcommand)]
pub enum DdosCmd {
    /// Run the mitigation daemon (detection, mitigation, top-K offload, HTTP API, metrics, alerts).
    Run(super::ddosd::RunArgs),
    /// Load the filter and the feature stage on an interface; state is pinned.
    Attach(AttachArgs),
    /// Detach and remove everything pinned for the interface.
    Detach {
        /// Interface.
        #[arg(long)]
        iface: String,
        /// Named network namespace of the interface.
        #[arg(long)]
        netns: Option<String>,
    },
    /// Block source prefixes (addresses or CIDR, IPv4 or IPv6).
    Block {
        /// Prefixes, e.g. 192.0.2.7 198.51.100.0/24 2001:db8::/32.
        prefixes: Vec<String>,
        /// Read prefixes from FILE, one a line (`#` comments, blank lines ignored; `-` is stdin).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Remove the entries automatically after SECONDS (> 0).
        #[arg(long, value_parser = ttl_secs)]
        ttl: Option<u64>,
        /// Make the blacklist exactly these prefixes: others are removed, the
        /// ones that stay keep their counters.
        #[arg(long)]
        replace: bool,
        #[command(flatten)]
        which: Which,
        /// Print a JSON report.
        #[arg(long)]
        json: bool,
    },
    /// Unblock source prefixes.
    Unblock {
        /// Prefixes, as given to block.
        prefixes: Vec<String>,
        /// Read prefixes from FILE, one a line (`-` is stdin).
        #[arg(long)]
        file: Option<PathBuf>,
        #[command(flatten)]
        which: Which,
        /// Print a JSON report.
        #[arg(long)]
        json: bool,
    },
    /// List blacklist entries: prefix, tier, packets, bytes, current rate, age.
    List {
        #[command(flatten)]
        which: Which,
        /// Seconds between the two counter readings the rate comes from (0: no rate).
        #[arg(long, default_value_t = 1.0)]
        window: f64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drop and pass counters by reason, table sizes, feature stage counters.
    Stats {
        #[command(flatten)]
        which: Which,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// End the current feature interval and print its records (top pairs by packets).
    Snapshot {
        #[command(flatten)]
        which: Which,
        /// How many records to print (0: all).
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Print JSON (one object with every record).
        #[arg(long)]
        json: bool,
    },
}

impl DdosCmd {
    /// `rampart ddos run` is a daemon (its log shows `info`).
    pub fn is_daemon(&self) -> bool {
        matches!(self, DdosCmd::Run(a) if !a.print_config)
    }
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Interface to attach to.
    #[arg(long)]
    pub iface: String,
    /// Named network namespace of the interface (`ip netns` name).
    #[arg(long)]
    pub netns: Option<String>,
    /// XDP mode: native or generic.
    #[arg(long, default_value = "native")]
    pub mode: String,
    /// Capacity of the exact IPv4 table.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_entries: u32,
    /// Capacity of each of: exact IPv6, IPv4 prefixes, IPv6 prefixes.
    #[arg(long, default_value_t = 1 << 16)]
    pub max_prefixes: u32,
    /// Per-entry counters count 1 in 2^N matches (0: every packet, slower).
    #[arg(long, default_value_t = 4)]
    pub sample_shift: u32,
    /// Pass malformed frames instead of dropping them.
    #[arg(long)]
    pub pass_malformed: bool,
    /// Drop tunnel packets (GRE, IP in IP, VXLAN, Geneve, MPLS without IP),
    /// whose inner source is not checked, instead of passing them.
    #[arg(long)]
    pub drop_encap: bool,
    /// VLAN tags the parser walks before a frame is `too_deep` (0-8).
    #[arg(long, default_value_t = rampart_ddos::filter::FILTER_DEF_VLANS)]
    pub max_vlans: u32,
    /// IPv6 extension headers the parser walks before a frame is `too_deep` (0-16).
    #[arg(long, default_value_t = rampart_ddos::filter::PARSE_DEF_V6_EXT)]
    pub max_v6_ext: u32,
    /// Do not chain the feature extraction stage.
    #[arg(long)]
    pub no_features: bool,
    /// (source, destination) pairs one feature interval is sized for.
    #[arg(long, default_value_t = 1 << 18)]
    pub features_capacity: u32,
}

/// `--ttl`: whole seconds > 0 (clap reports a failure as a usage error).
fn ttl_secs(s: &str) -> std::result::Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("give a number of seconds > 0, or omit --ttl for no expiry".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}: give a whole number of seconds > 0")),
    }
}

fn read_prefixes(args: &[String], file: Option<&PathBuf>) -> Result<Vec<Prefix>> {
    // A bad prefix on the command line is a usage error (exit 2).
    let mut v =
        prefix::parse_many(args.iter().map(String::as_str)).map_err(|e| usage(e.to_string()))?;
    if let Some(f) = file {
        let text = if f.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading prefixes from stdin")?
        } else {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        };
        let from_file =
            prefix::parse_file_text(&text).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        for p in from_file {
            if v.contains(&p) {
                bail!(
                    "duplicate prefix {p} (given as an argument and in {}): give each prefix once",
                    f.display()
                );
            }
            v.push(p);
        }
    }
    if v.is_empty() {
        usage_bail!(
            "no prefixes given: name them (e.g. 192.0.2.7 198.51.100.0/24) or use --file FILE"
        );
    }
    Ok(v)
}

fn print_update(verb: &str, r: &filter::UpdateReport, json: bool) -> Result<()> {
    if json {
        return print_json(r);
    }
    let mut s = format!("{verb}: {} added, {} removed", r.added, r.removed);
    if r.kept > 0 {
        s.push_str(&format!(", {} kept", r.kept));
    }
    if r.expired > 0 {
        s.push_str(&format!(", {} expired purged", r.expired));
    }
    let c = r.counts;
    s.push_str(&format!(
        "; now {} exact IPv4, {} exact IPv6, {} IPv4 prefixes, {} IPv6 prefixes",
        c.exact4, c.exact6, c.prefix4, c.prefix6
    ));
    if let Some(t) = r.table {
        s.push_str(&format!(
            " (IPv4 table {} slots, max probe distance {})",
            t.slots, t.max_dist
        ));
    }
    s.push_str(&format!(" in {:.0} ms", r.seconds * 1e3));
    println!("{s}");
    Ok(())
}

#[derive(Serialize)]
struct ListedEntry<'a> {
    #[serde(flatten)]
    e: &'a filter::EntryInfo,
    rate_pps: Option<f64>,
    rate_bps: Option<f64>,
}

#[derive(Serialize)]
struct ListOut<'a> {
    filter: &'a str,
    sample_shift: u32,
    window_s: f64,
    entries: Vec<ListedEntry<'a>>,
}

fn age(s: f64) -> String {
    let s = s.max(0.0) as u64;
    if s >= 86_400 {
        format!("{}d{}h", s / 86_400, (s % 86_400) / 3600)
    } else if s >= 3600 {
        format!("{}h{}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

pub fn run(cmd: DdosCmd, cancel: &AtomicBool) -> Result<()> {
    match cmd {
        DdosCmd::Run(a) => super::ddosd::run(a, cancel),
        DdosCmd::Attach(a) => {
            let mode: XdpMode = a.mode.parse().map_err(|e: String| usage(e))?;
            if mode == XdpMode::Hw {
                usage_bail!("--mode hw: the ddos filter uses maps and helpers no XDP offload supports: use native or generic");
            }
            let scope = Scope::new(a.netns.as_deref(), &a.iface)?;
            let cfg = FilterConfig {
                max_entries: a.max_entries,
                max_other: a.max_prefixes,
                sample_shift: a.sample_shift,
                pass_malformed: a.pass_malformed,
                features: !a.no_features,
                features_capacity: a.features_capacity,
                drop_encap: a.drop_encap,
                max_vlans: a.max_vlans,
                max_v6_ext: a.max_v6_ext,
                ..FilterConfig::default()
            };
            let f = Filter::attach(&scope, &cfg, mode)?;
            println!(
                "rampart ddos filter attached to {} ({mode:?}); state pinned at {}",
                scope.describe(),
                f.dir().display()
            );
            Ok(())
        }
        DdosCmd::Detach { iface, netns } => {
            let scope = Scope::new(netns.as_deref(), &iface)?;
            Filter::detach(&scope.name())?;
            println!("rampart ddos filter detached from {}", scope.describe());
            Ok(())
        }
        DdosCmd::Block {
            prefixes,
            file,
            ttl,
            replace,
            which,
            json,
        } => {
            let list = read_prefixes(&prefixes, file.as_ref())?;
            let mut f = Filter::open(&which.resolve()?)?;
            let ttl = ttl.map(Duration::from_secs);
            let entries: Vec<BlockEntry> = list
                .into_iter()
                .map(|prefix| BlockEntry { prefix, ttl })
                .collect();
            let r = f.apply(&Update {
                add: entries,
                replace,
                ..Default::default()
            })?;
            print_update(if replace { "replaced" } else { "blocked" }, &r, json)
        }
        DdosCmd::Unblock {
            prefixes,
            file,
            which,
            json,
        } => {
            let list = read_prefixes(&prefixes, file.as_ref())?;
            let mut f = Filter::open(&which.resolve()?)?;
            let r = f.unblock(&list)?;
            print_update("unblocked", &r, json)
        }
        DdosCmd::List {
            which,
            window,
            json,
        } => {
            if !(window.is_finite() && (0.0..=60.0).contains(&window)) {
                usage_bail!("--window {window} out of range: use 0 (no rate) to 60 seconds");
            }
            let name = which.resolve()?;
            let f = Filter::open(&name)?;
            let entries = f.entries()?;
            let mut rates: HashMap<u32, (f64, f64)> = HashMap::new();
            if window > 0.0 {
                let t0 = std::time::Instant::now();
                let first: HashMap<u32, filter::PktBytes> =
                    entries.iter().map(|e| (e.id, f.counter(e.id))).collect();
                let step = Duration::from_millis(50);
                while t0.elapsed().as_secs_f64() < window
                    && !cancel.load(std::sync::atomic::Ordering::Relaxed)
                {
                    std::thread::sleep(step);
                }
                let dt = t0.elapsed().as_secs_f64();
                for (id, c0) in first {
                    let c1 = f.counter(id);
                    rates.insert(
                        id,
                        (
                            c1.packets.saturating_sub(c0.packets) as f64 / dt,
                            8.0 * c1.bytes.saturating_sub(c0.bytes) as f64 / dt,
                        ),
                    );
                }
            }
            let listed: Vec<ListedEntry<'_>> = entries
                .iter()
                .map(|e| ListedEntry {
                    e,
                    rate_pps: rates.get(&e.id).map(|r| r.0),
                    rate_bps: rates.get(&e.id).map(|r| r.1),
                })
                .collect();
            if json {
                return print_json(&ListOut {
                    filter: &name,
                    sample_shift: f.sample_shift(),
                    window_s: window,
                    entries: listed,
                });
            }
            println!(
                "{:<43} {:<5} {:>12} {:>14} {:>11} {:>8} {:>8}",
                "PREFIX", "TIER", "PACKETS", "BYTES", "RATE(pps)", "AGE", "TTL"
            );
            for l in &listed {
                println!(
                    "{:<43} {:<5} {:>12} {:>14} {:>11} {:>8} {:>8}",
                    l.e.prefix.to_string(),
                    l.e.tier,
                    l.e.packets,
                    l.e.bytes,
                    l.rate_pps.map(si).unwrap_or_else(|| "-".into()),
                    age(l.e.age_s),
                    l.e.expires_in_s.map(age).unwrap_or_else(|| "-".into()),
                );
            }
            if f.sample_shift() > 0 {
                println!(
                    "({} entries; counts are estimates from 1 in {} matches, see docs/ddos.md)",
                    listed.len(),
                    1u32 << f.sample_shift()
                );
            }
            Ok(())
        }
        DdosCmd::Stats { which, json } => {
            let name = which.resolve()?;
            let f = Filter::open(&name)?;
            let st = f.stats()?;
            let fs = match Features::open(&name) {
                Ok(feat) => Some(feat.stats()?),
                Err(_) => None,
            };
            if json {
                #[derive(Serialize)]
                struct Out<'a> {
                    filter: &'a str,
                    linked: bool,
                    #[serde(flatten)]
                    st: &'a filter::FilterStats,
                    features: Option<rampart_ddos::features::FeatureStats>,
                }
                return print_json(&Out {
                    filter: &name,
                    linked: f.is_linked(),
                    st: &st,
                    features: fs,
                });
            }
            println!(
                "filter {name} ({})",
                if f.is_linked() {
                    "attached"
                } else {
                    "not linked"
                }
            );
            let e = st.entries;
            println!(
                "entries: {} exact IPv4 (capacity {}), {} exact IPv6, {} IPv4 prefixes, {} IPv6 prefixes (capacity {} each)",
                e.exact4, st.capacity_exact4, e.exact6, e.prefix4, e.prefix6, st.capacity_other
            );
            println!(
                "IPv4 table: {} keys in {} slots, max probe distance {}; {} publishes; counters sample 1 in {}",
                st.table.entries,
                st.table.slots,
                st.table.max_dist,
                st.generation,
                1u32 << st.sample_shift
            );
            for (n, c) in &st.drops {
                println!(
                    "drop {n:<17} {:>14} packets {:>16} bytes",
                    c.packets, c.bytes
                );
            }
            for (n, c) in &st.passes {
                println!(
                    "pass {n:<17} {:>14} packets {:>16} bytes",
                    c.packets, c.bytes
                );
            }
            println!(
                "no next stage: {}; expired in data path: {}; sources policed: {}",
                st.no_next_stage, st.expired, st.policed
            );
            if let Some(fs) = fs {
                println!(
                    "features: {} recorded, skipped {} not IP, {} malformed, {} table full, {} protected",
                    fs.recorded,
                    fs.skipped_not_ip,
                    fs.skipped_malformed,
                    fs.skipped_table_full,
                    fs.skipped_protected
                );
            }
            Ok(())
        }
        DdosCmd::Snapshot { which, top, json } => {
            let name = which.resolve()?;
            let mut feat = Features::open(&name)?;
            let mut s = feat.snapshot()?;
            s.records.sort_by_key(|r| std::cmp::Reverse(r.packets));
            if json {
                return print_json(&s);
            }
            println!(
                "interval {}: {} pairs, {} packets (swap wait {:.1} ms, read {:.1} ms)",
                s.interval,
                s.records.len(),
                s.packets(),
                s.swap_wait.as_secs_f64() * 1e3,
                s.read.as_secs_f64() * 1e3
            );
            let n = if top == 0 {
                s.records.len()
            } else {
                top.min(s.records.len())
            };
            for r in &s.records[..n] {
                println!(
                    "{:>39} -> {:<39} {:>10} pkts {:>12} B tcp {} udp {} icmp {} syn {} synack {} ports~{:.0}",
                    r.src.to_string(),
                    r.dst.to_string(),
                    r.packets,
                    r.bytes,
                    r.tcp,
                    r.udp,
                    r.icmp,
                    r.syn,
                    r.synack,
                    r.dports_est()
                );
            }
            Ok(())
        }
    }
}
