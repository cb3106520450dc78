//! `rampart bench filter`: drop rate of the rampart blacklist at several
//! blacklist sizes, against bare XDP_DROP and the peers, in one lab, with
//! alternated repetitions and medians (this VM drifts ±30%).
//!
//! Per size N: the generator (in `wan`, one thread, 64-byte UDP) sends
//! from N sources in random order (a shuffled schedule; every source has
//! the same share), all of them blacklisted. Each variant is enabled on
//! host0 in turn for `seconds`; the order rotates every repetition. The
//! rate of a variant is what it dropped (see [`super::peers`] for where
//! each one is counted) divided by the run's wall time.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rampart_lab::dist::Dist;
use rampart_lab::gen::{GenSpec, Generator, Limit, MAX_SOURCES, SRC_V4_BASE};
use rampart_lab::topology::HOST_IF;
use serde::Serialize;

use super::peers::{
    BareDrop, IpsetRule, Iptables, NftSet, Rampart, Variant, XdpFilter, XDP_FILTER_MAX,
};
use super::{check, median, BenchLab};
use crate::error::{Error, Result};
use rampart_ddos::filter::{BlockEntry, Filter, FilterConfig, Scope, TableInfo};
use rampart_ddos::Prefix;

/// Peers to run besides rampart and bare XDP_DROP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Peer {
    /// nftables set in a netdev ingress hook.
    NftSet,
    /// iptables raw PREROUTING with `iptables_rules` rules.
    Iptables,
    /// xdp-filter (≤ 10,000 entries; skipped above).
    XdpFilter,
    /// An ipset of the blacklist and one iptables raw PREROUTING rule.
    Ipset,
}

impl std::str::FromStr for Peer {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "nft" | "nft_set" | "nftables" => Ok(Peer::NftSet),
            "iptables" => Ok(Peer::Iptables),
            "xdp-filter" | "xdp_filter" => Ok(Peer::XdpFilter),
            "ipset" => Ok(Peer::Ipset),
            o => Err(Error::Invalid(format!(
                "unknown peer {o:?}: use nft, iptables, ipset, xdp-filter (or none)"
            ))),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct FilterBenchSpec {
    /// Blacklist sizes (= attacking sources), one point each.
    pub sources: Vec<u32>,
    /// Share of packets per source (`random` on the CLI = uniform shares in shuffled order).
    pub dist: Dist,
    /// Seconds per run.
    pub seconds: f64,
    /// Repetitions per variant.
    pub reps: u32,
    /// Peers besides rampart and XDP_DROP.
    pub peers: Vec<Peer>,
    /// rampart's counter sampling (1 in 2^shift).
    pub sample_shift: u32,
    /// iptables rules every packet walks.
    pub iptables_rules: u32,
    /// Frame size.
    pub size: usize,
}

impl Default for FilterBenchSpec {
    fn default() -> Self {
        Self {
            sources: vec![1, 131_072, 1_048_576],
            dist: Dist::Uniform,
            seconds: 5.0,
            reps: 5,
            peers: vec![Peer::NftSet, Peer::Iptables, Peer::XdpFilter],
            sample_shift: 4,
            iptables_rules: 1000,
            size: 64,
        }
    }
}

impl FilterBenchSpec {
    /// Check ranges.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the option.
    pub fn validate(&self) -> Result<()> {
        if self.sources.is_empty() {
            return Err(Error::Invalid(
                "--sources: give at least one size, e.g. 1,131072".into(),
            ));
        }
        if let Some(&n) = self.sources.iter().find(|&&n| n == 0 || n > MAX_SOURCES) {
            return Err(Error::Invalid(format!(
                "--sources {n} out of range: use 1..={MAX_SOURCES}"
            )));
        }
        if !(self.seconds.is_finite() && self.seconds >= 0.2 && self.seconds <= 600.0) {
            return Err(Error::Invalid(format!(
                "--seconds {} out of range: use 0.2..=600",
                self.seconds
            )));
        }
        if self.reps == 0 || self.reps > 100 {
            return Err(Error::Invalid(format!(
                "--reps {} out of range: use 1..=100",
                self.reps
            )));
        }
        if self.sample_shift > 15 {
            return Err(Error::Invalid(format!(
                "--sample-shift {} out of range: use 0..=15",
                self.sample_shift
            )));
        }
        if self.iptables_rules == 0 || self.iptables_rules > 100_000 {
            return Err(Error::Invalid(format!(
                "--iptables-rules {} out of range: use 1..=100000",
                self.iptables_rules
            )));
        }
        Ok(())
    }
}

/// rampart's side of a point.
#[derive(Debug, Clone, Serialize)]
pub struct RampartInfo {
    /// Counter sampling shift.
    pub sample_shift: u32,
    /// The exact table after loading the blacklist.
    pub table: Option<TableInfo>,
    /// Seconds to load the N entries (one `block` call).
    pub load_seconds: f64,
    /// Packets rampart counted as blacklist drops over all its runs.
    pub own_drop_count: u64,
    /// Packets the veth counted as XDP drops over the same runs.
    pub veth_drop_count: u64,
    /// Sum of the per-entry counter estimates over all runs.
    pub entry_counter_sum: u64,
}

/// One point of the benchmark (one JSON object per line on the CLI).
#[derive(Debug, Clone, Serialize)]
pub struct FilterPoint {
    /// Blacklisted (and attacking) sources.
    pub sources: u32,
    /// Distribution name.
    pub dist: String,
    /// Seconds per run.
    pub seconds: f64,
    /// Repetitions per variant.
    pub reps: u32,
    /// Frame size.
    pub size: usize,
    /// rampart's median drop rate.
    pub drop_mpps: f64,
    /// Bare XDP_DROP's median.
    pub xdp_drop_mpps: f64,
    /// nftables set's median (`None` when not run).
    pub nft_set_mpps: Option<f64>,
    /// iptables' median.
    pub iptables_mpps: Option<f64>,
    /// xdp-filter's median (`None` above 10,000 sources or when not run).
    pub xdp_filter_mpps: Option<f64>,
    /// ipset + one iptables rule's median.
    pub ipset_mpps: Option<f64>,
    /// `drop_mpps / xdp_drop_mpps`.
    pub ratio_xdp_drop: f64,
    /// `drop_mpps / nft_set_mpps`.
    pub ratio_nft_set: Option<f64>,
    /// `drop_mpps / iptables_mpps`.
    pub ratio_iptables: Option<f64>,
    /// `drop_mpps / xdp_filter_mpps`.
    pub ratio_xdp_filter: Option<f64>,
    /// Median over repetitions of rampart / XDP_DROP measured in the same
    /// repetition (robust to slow drift).
    pub paired_ratio_xdp_drop: f64,
    /// Per variant, the rate of every run in order (Mpps).
    pub raw_mpps: BTreeMap<&'static str, Vec<f64>>,
    /// Per variant, the generator's send rate of every run (Mpps).
    pub sent_mpps: BTreeMap<&'static str, Vec<f64>>,
    /// rampart details.
    pub rampart: RampartInfo,
    /// Seconds nft took to load the set.
    pub nft_load_seconds: Option<f64>,
    /// What was not run, and why.
    pub notes: Vec<String>,
}

fn source_addrs(n: u32) -> Vec<Ipv4Addr> {
    let spec = GenSpec {
        sources: n,
        ..GenSpec::default()
    };
    (0..n)
        .map(|i| match spec.source_addr(i) {
            IpAddr::V4(a) => a,
            IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        })
        .collect()
}

fn dist_name(d: &Dist) -> String {
    match d {
        Dist::Uniform => "uniform".into(),
        Dist::Gaussian { sigma } => format!("gaussian({sigma})"),
        Dist::Zipf { s } => format!("zipf({s})"),
    }
}

/// Run the benchmark; `on_point` gets each point as it completes.
///
/// # Errors
/// Lab, load or peer failures; [`Error::Interrupted`] on Ctrl-C. The lab
/// and everything in it is removed in every case.
pub fn run(
    spec: &FilterBenchSpec,
    cancel: &AtomicBool,
    mut on_point: impl FnMut(&FilterPoint),
) -> Result<Vec<FilterPoint>> {
    spec.validate()?;
    rampart_dataplane::features::require(
        "rampart bench filter",
        &[
            rampart_dataplane::features::Feature::Root,
            rampart_dataplane::features::Feature::Xdp,
            rampart_dataplane::features::Feature::XdpLiveFrames,
            rampart_dataplane::features::Feature::Bpffs,
        ],
    )?;
    let bl = BenchLab::up("bf")?;
    let mut out = Vec::new();
    for &n in &spec.sources {
        check(cancel)?;
        let p = point(&bl, spec, n, cancel)?;
        on_point(&p);
        out.push(p);
    }
    Ok(out)
}

fn point(
    bl: &BenchLab,
    spec: &FilterBenchSpec,
    n: u32,
    cancel: &AtomicBool,
) -> Result<FilterPoint> {
    let lab = &bl.lab;
    let host = lab.host_ns();
    let gspec = GenSpec {
        sources: n,
        dist: spec.dist,
        size: spec.size,
        limit: Limit::Seconds(spec.seconds),
        threads: 1,
        ..GenSpec::default()
    };
    let gen = Generator::new(lab, &gspec)?;
    let addrs = source_addrs(n);
    let mut notes = Vec::new();

    // rampart: created and filled once, linked per run.
    let scope = Scope::new(Some(&host), HOST_IF)?;
    let cfg = FilterConfig {
        max_entries: n.max(1024),
        sample_shift: spec.sample_shift,
        ..FilterConfig::default()
    };
    let filter = Filter::create(&scope, &cfg)?;
    let mut rampart = Rampart::new(filter, scope);
    let entries: Vec<BlockEntry> = addrs
        .iter()
        .map(|a| BlockEntry {
            prefix: Prefix::host(IpAddr::V4(*a)),
            ttl: None,
        })
        .collect();
    let t0 = Instant::now();
    let rep = rampart.filter.block(&entries)?;
    let load_seconds = t0.elapsed().as_secs_f64();
    drop(entries);

    let mut variants: Vec<Box<dyn Variant>> = vec![Box::new(BareDrop::new(&host)?)];
    let mut nft_load = None;
    for p in &spec.peers {
        check(cancel)?;
        match p {
            Peer::NftSet => {
                let v = NftSet::new(&host, &addrs)?;
                nft_load = Some(v.load_seconds);
                variants.push(Box::new(v));
            }
            Peer::Iptables => {
                let net = format!("{SRC_V4_BASE}/12");
                variants.push(Box::new(Iptables::new(&host, spec.iptables_rules, &net)?));
            }
            Peer::XdpFilter if addrs.len() <= XDP_FILTER_MAX => {
                variants.push(Box::new(XdpFilter::new(&host, &addrs)?))
            }
            Peer::Ipset => variants.push(Box::new(IpsetRule::new(&host, &addrs)?)),
            Peer::XdpFilter => notes.push(format!(
                "xdp_filter not run: it holds at most {XDP_FILTER_MAX} IPv4 entries ({n} needed)"
            )),
        }
    }
    let own0 = rampart.filter.stats()?.dropped("blacklist");

    let mut raw: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut sent: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut veth_rampart = 0u64;
    let total = variants.len() + 1;
    for r in 0..spec.reps as usize {
        for k in 0..total {
            check(cancel)?;
            let idx = (k + r) % total;
            let v: &mut dyn Variant = if idx == 0 {
                &mut rampart
            } else {
                variants[idx - 1].as_mut()
            };
            let name = v.name();
            v.enable()?;
            let res = (|| -> Result<(f64, f64, u64)> {
                let before = v.dropped()?;
                let g = gen.run(cancel)?;
                check(cancel)?;
                // Frames still in the veth rings are handled within microseconds.
                std::thread::sleep(Duration::from_millis(50));
                let after = v.dropped()?;
                let d = after.saturating_sub(before);
                Ok((d as f64 / g.seconds / 1e6, g.sent_pps / 1e6, d))
            })();
            let dis = v.disable();
            let (mpps, sent_mpps, d) = res?;
            dis?;
            if name == "rampart" {
                veth_rampart += d;
            }
            raw.entry(name).or_default().push(mpps);
            sent.entry(name).or_default().push(sent_mpps);
        }
    }
    let own = rampart.filter.stats()?.dropped("blacklist") - own0;
    let counter_sum: u64 = rampart.filter.entries()?.iter().map(|e| e.packets).sum();

    let med = |k: &str| raw.get(k).map(|v| median(v));
    let drop_mpps = med("rampart").unwrap_or(f64::NAN);
    let xdp = med("xdp_drop").unwrap_or(f64::NAN);
    let ratio = |x: Option<f64>| x.map(|x| drop_mpps / x);
    let paired: Vec<f64> = raw["rampart"]
        .iter()
        .zip(raw["xdp_drop"].iter())
        .map(|(a, b)| a / b)
        .collect();
    let point = FilterPoint {
        sources: n,
        dist: dist_name(&spec.dist),
        seconds: spec.seconds,
        reps: spec.reps,
        size: spec.size,
        drop_mpps,
        xdp_drop_mpps: xdp,
        nft_set_mpps: med("nft_set"),
        iptables_mpps: med("iptables"),
        xdp_filter_mpps: med("xdp_filter"),
        ipset_mpps: med("ipset"),
        ratio_xdp_drop: drop_mpps / xdp,
        ratio_nft_set: ratio(med("nft_set")),
        ratio_iptables: ratio(med("iptables")),
        ratio_xdp_filter: ratio(med("xdp_filter")),
        paired_ratio_xdp_drop: median(&paired),
        raw_mpps: raw,
        sent_mpps: sent,
        rampart: RampartInfo {
            sample_shift: spec.sample_shift,
            table: rep.table,
            load_seconds,
            own_drop_count: own,
            veth_drop_count: veth_rampart,
            entry_counter_sum: counter_sum,
        },
        nft_load_seconds: nft_load,
        notes,
    };
    // Peers are torn down here (variants drop); the lab goes with `bl`.
    drop(variants);
    Ok(point)
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into())
}

/// Run `rampart bench filter` and print one line (or JSON object) per point.
///
/// # Errors
/// As [`FilterBenchSpec::validate`] and [`run`].
pub fn run_and_print(spec: &FilterBenchSpec, json: bool, cancel: &AtomicBool) -> Result<()> {
    spec.validate()?;
    if !json {
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
    run(spec, cancel, |p| {
        if json {
            let _ = crate::out::print_json(p);
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
