//! `rampart bench filter-update`: how long blacklist updates of up to 1M
//! entries take while the filter drops a flood from the entries that stay,
//! and whether any packet of theirs leaks through a publish.
//!
//! The filter is attached to host0 and loaded with N exact entries (timed:
//! the initial load). The generator floods from all N sources at full speed
//! while `replace` alternately adds and removes `change` other entries
//! around them, `reps` times (timed: each is a full rebuild and publish of
//! the exact table, plus a grace period; two when the table is near full).
//! Afterwards: packets of the flood that reached the feature stage (must be
//! 0), and whether every per-entry counter only ever grew.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rampart_dataplane::xdp::XdpMode;
use rampart_lab::gen::{GenSpec, Generator, Limit, MAX_SOURCES};
use rampart_lab::topology::HOST_IF;
use serde::Serialize;

use super::{check, median, BenchLab};
use crate::error::{Error, Result};
use rampart_ddos::features::Features;
use rampart_ddos::filter::{BlockEntry, Filter, FilterConfig, Scope};
use rampart_ddos::Prefix;

/// What to run.
#[derive(Debug, Clone)]
pub struct UpdateSpec {
    /// Entries that stay (and flood).
    pub entries: u32,
    /// Entries added/removed around them per update.
    pub change: u32,
    /// Updates.
    pub reps: u32,
}

impl Default for UpdateSpec {
    fn default() -> Self {
        Self {
            entries: 1 << 20,
            change: 100_000,
            reps: 6,
        }
    }
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub struct UpdateReport {
    /// Entries that stay.
    pub entries: u32,
    /// Entries changed per update.
    pub change: u32,
    /// Seconds to load the N entries into an empty filter.
    pub load_seconds: f64,
    /// Median seconds per update.
    pub update_seconds: f64,
    /// Every update (seconds).
    pub update_seconds_raw: Vec<f64>,
    /// Flood packets dropped during the updates (all by entries that stayed).
    pub dropped_during: u64,
    /// Flood packets that got past the filter (reached the feature stage).
    pub leaked: u64,
    /// Did every per-entry counter only grow across the updates?
    pub counters_monotonic: bool,
    /// Sample shift of the filter.
    pub sample_shift: u32,
}

/// Run it.
///
/// # Errors
/// Lab or load failures, [`Error::Interrupted`]; the lab is removed in every case.
pub fn run(spec: &UpdateSpec, cancel: &AtomicBool) -> Result<UpdateReport> {
    if spec.entries == 0 || spec.entries > MAX_SOURCES {
        return Err(Error::Invalid(format!(
            "--entries {} out of range: use 1..={MAX_SOURCES}",
            spec.entries
        )));
    }
    if spec.change > 4_000_000 {
        return Err(Error::Invalid(format!(
            "--change {} out of range: use 0..=4000000",
            spec.change
        )));
    }
    if spec.reps == 0 || spec.reps > 100 {
        return Err(Error::Invalid(format!(
            "--reps {} out of range: use 1..=100",
            spec.reps
        )));
    }
    let bl = BenchLab::up("fu")?;
    let scope = Scope::new(Some(&bl.lab.host_ns()), HOST_IF)?;
    let cfg = FilterConfig {
        max_entries: spec.entries + spec.change,
        ..FilterConfig::default()
    };
    let mut filter = Filter::attach(&scope, &cfg, XdpMode::Native)?;
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Filter::detach(&self.0);
        }
    }
    let _detach = Detach(filter.name().to_string());
    let gspec = GenSpec {
        sources: spec.entries,
        limit: Limit::Seconds(3600.0),
        ..GenSpec::default()
    };
    let stayers: Vec<BlockEntry> = (0..spec.entries)
        .map(|i| BlockEntry {
            prefix: Prefix::host(gspec.source_addr(i)),
            ttl: None,
        })
        .collect();
    let t0 = Instant::now();
    filter.block(&stayers)?;
    let load_seconds = t0.elapsed().as_secs_f64();
    let ids: Vec<u32> = {
        let by: rustc_hash::FxHashMap<Prefix, u32> = filter
            .entries()?
            .into_iter()
            .map(|e| (e.prefix, e.id))
            .collect();
        stayers.iter().map(|s| by[&s.prefix]).collect()
    };
    let mut feats = Features::open(filter.name())?;
    let gen = Generator::new(&bl.lab, &gspec)?;
    let in_range = Prefix::parse("172.16.0.0/12")?;
    feats.snapshot_with(|_| ())?;
    let stop = AtomicBool::new(false);
    let mut times = Vec::new();
    let mut monotonic = true;
    let mut last: Vec<u64> = vec![0; ids.len()];
    let mut drops = (0u64, 0u64);
    let res = std::thread::scope(|s| -> Result<()> {
        let g = s.spawn(|| gen.run(&stop));
        let body = (|| -> Result<()> {
            while filter.stats()?.dropped("blacklist") < 100_000 {
                check(cancel)?;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            drops.0 = filter.stats()?.dropped("blacklist");
            for r in 0..spec.reps {
                check(cancel)?;
                let mut list = stayers.clone();
                if r % 2 == 0 {
                    list.extend((0..spec.change).map(|i| BlockEntry {
                        prefix: Prefix::host(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i * 3 + r))),
                        ttl: None,
                    }));
                }
                let t = Instant::now();
                filter.replace(&list)?;
                times.push(t.elapsed().as_secs_f64());
                for (k, id) in ids.iter().enumerate() {
                    let c = filter.counter(*id).packets;
                    monotonic &= c >= last[k];
                    last[k] = c;
                }
            }
            drops.1 = filter.stats()?.dropped("blacklist");
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        let g = g.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        body?;
        g?;
        Ok(())
    });
    res?;
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut leaked = 0;
    feats.snapshot_with(|r| {
        if in_range.contains(&r.src) {
            leaked += r.packets;
        }
    })?;
    Ok(UpdateReport {
        entries: spec.entries,
        change: spec.change,
        load_seconds,
        update_seconds: median(&times),
        update_seconds_raw: times,
        dropped_during: drops.1 - drops.0,
        leaked,
        counters_monotonic: monotonic,
        sample_shift: filter.sample_shift(),
    })
}

/// Run `rampart bench filter-update` and print its report (one line, or JSON).
///
/// # Errors
/// As [`run`].
pub fn run_and_print(spec: &UpdateSpec, json: bool, cancel: &AtomicBool) -> Result<()> {
    let r = run(spec, cancel)?;
    if json {
        return crate::out::print_json(&r);
    }
    println!(
        "{} entries loaded in {:.2} s; replace ±{} around them: {:.2} s median ({:?}); {} flood packets dropped meanwhile, {} leaked; counters monotonic: {}",
        r.entries, r.load_seconds, r.change, r.update_seconds, r.update_seconds_raw, r.dropped_during, r.leaked, r.counters_monotonic
    );
    Ok(())
}
