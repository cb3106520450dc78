//! `rampart bench features-read`: how long reading one feature interval of
//! N (source, destination) pairs takes, with the pairs recorded by the
//! data path itself on every CPU.
//!
//! The lab's generator sends from N sources to host0 with one thread per
//! CPU (each thread walks the whole shuffled schedule, so every pair gets a
//! per-CPU copy on every CPU: the aggregation's worst case), through the
//! attached filter (empty blacklist) into the feature stage. Then one
//! snapshot: swap, grace period, read + aggregate + clear. Repeated, and
//! the read time reported as median and raw figures, for three readers:
//! a kept vector (`snapshot_into`, what a daemon does every interval), a
//! callback (`snapshot_with`, no vector), and the first read into a fresh
//! vector (`snapshot`, whose page faults dominate on this VM).

use std::sync::atomic::AtomicBool;

use rampart_dataplane::xdp::XdpMode;
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::topology::HOST_IF;
use serde::Serialize;

use super::{check, median, BenchLab};
use crate::error::{Error, Result};
use rampart_ddos::features::Features;
use rampart_ddos::filter::{Filter, FilterConfig, Scope};
use rampart_ddos::maps;

/// What to run.
#[derive(Debug, Clone)]
pub struct FeaturesReadSpec {
    /// Pairs per interval.
    pub entries: u32,
    /// Repetitions (each: one fill, one read per reader).
    pub reps: u32,
    /// Generator threads (one per CPU).
    pub threads: u32,
}

impl Default for FeaturesReadSpec {
    fn default() -> Self {
        Self {
            entries: 300_000,
            reps: 5,
            threads: 2,
        }
    }
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub struct FeaturesReadReport {
    /// Pairs per interval asked for.
    pub entries: u32,
    /// Possible CPUs (the per-CPU copies summed).
    pub cpus: usize,
    /// Generator threads.
    pub threads: u32,
    /// Repetitions.
    pub reps: u32,
    /// Median read + aggregate + clear time with a kept vector (ms).
    pub read_ms: f64,
    /// Every such read (ms).
    pub read_ms_raw: Vec<f64>,
    /// Median with a callback and no vector (ms).
    pub callback_read_ms: f64,
    /// Every such read (ms).
    pub callback_read_ms_raw: Vec<f64>,
    /// The first read, into a fresh vector (ms).
    pub cold_read_ms: f64,
    /// Median time from the swap to the end of the grace period (ms).
    pub swap_wait_ms: f64,
    /// Records per read (should equal `entries`).
    pub records: Vec<usize>,
    /// Packets summed over the records of each read.
    pub packets: Vec<u64>,
    /// Packets the generator sent for each read.
    pub sent: Vec<u64>,
    /// Packets each CPU recorded over the whole run.
    pub recorded_per_cpu: Vec<u64>,
    /// Interval table capacity (IPv4 key slots).
    pub capacity: usize,
}

struct Detach(String);
impl Drop for Detach {
    fn drop(&mut self) {
        let _ = Filter::detach(&self.0);
    }
}

/// Run it.
///
/// # Errors
/// Lab or load failures, [`Error::Interrupted`] on Ctrl-C; the lab is removed in every case.
pub fn run(spec: &FeaturesReadSpec, cancel: &AtomicBool) -> Result<FeaturesReadReport> {
    let ncpu_online = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    if spec.entries == 0 || spec.entries > rampart_lab::gen::MAX_SOURCES {
        return Err(Error::Invalid(format!(
            "--entries {} out of range: use 1..={}",
            spec.entries,
            rampart_lab::gen::MAX_SOURCES
        )));
    }
    if spec.reps == 0 || spec.reps > 100 {
        return Err(Error::Invalid(format!(
            "--reps {} out of range: use 1..=100",
            spec.reps
        )));
    }
    if spec.threads == 0 || spec.threads > ncpu_online {
        return Err(Error::Invalid(format!(
            "--threads {} out of range: use 1..={ncpu_online}",
            spec.threads
        )));
    }
    let bl = BenchLab::up("fr")?;
    let host = bl.lab.host_ns();
    let scope = Scope::new(Some(&host), HOST_IF)?;
    let cfg = FilterConfig {
        max_entries: 1024,
        features_capacity: spec.entries,
        ..FilterConfig::default()
    };
    let filter = Filter::attach(&scope, &cfg, XdpMode::Native)?;
    let _detach = Detach(filter.name().to_string());
    let mut feats = Features::open(filter.name())?;
    let slots =
        rampart_lab::dist::slots_for(spec.entries, rampart_bpf::abi::lab::GEN_SLOTS_MAX) as u64;
    let gspec = GenSpec {
        sources: spec.entries,
        threads: spec.threads,
        limit: Limit::Count(slots * u64::from(spec.threads)),
        ..GenSpec::default()
    };
    let gen = Generator::new(&bl.lab, &gspec)?;
    let fill = || -> Result<u64> {
        check(cancel)?;
        let r = gen.run(cancel)?;
        check(cancel)?;
        std::thread::sleep(std::time::Duration::from_millis(50));
        Ok(r.sent_packets)
    };
    // Start from an empty interval.
    feats.snapshot_with(|_| ())?;

    let mut records = Vec::new();
    let mut packets = Vec::new();
    let mut sent = Vec::new();
    let mut waits = Vec::new();

    sent.push(fill()?);
    let cold = feats.snapshot()?;
    records.push(cold.records.len());
    packets.push(cold.packets());
    waits.push(cold.swap_wait.as_secs_f64() * 1e3);
    let cold_read_ms = cold.read.as_secs_f64() * 1e3;
    // The daemon's case: the vector of the previous interval is reused.
    let mut buf = cold.records;
    let mut warm = Vec::new();
    let mut cb = Vec::new();
    for _ in 0..spec.reps {
        sent.push(fill()?);
        let (_, w, r) = feats.snapshot_into(&mut buf)?;
        records.push(buf.len());
        packets.push(buf.iter().map(|r| r.packets).sum());
        waits.push(w.as_secs_f64() * 1e3);
        warm.push(r.as_secs_f64() * 1e3);

        sent.push(fill()?);
        let (mut n, mut p) = (0usize, 0u64);
        let (_, w, r) = feats.snapshot_with(|rec| {
            n += 1;
            p += rec.packets;
        })?;
        records.push(n);
        packets.push(p);
        waits.push(w.as_secs_f64() * 1e3);
        cb.push(r.as_secs_f64() * 1e3);
    }
    Ok(FeaturesReadReport {
        entries: spec.entries,
        cpus: maps::possible_cpus(),
        threads: spec.threads,
        reps: spec.reps,
        read_ms: median(&warm),
        read_ms_raw: warm,
        callback_read_ms: median(&cb),
        callback_read_ms_raw: cb,
        cold_read_ms,
        swap_wait_ms: median(&waits),
        records,
        packets,
        sent,
        recorded_per_cpu: feats.recorded_per_cpu()?,
        capacity: feats.capacity().0,
    })
}

/// Run `rampart bench features-read` and print its report (two lines, or JSON).
///
/// # Errors
/// As [`run`].
pub fn run_and_print(spec: &FeaturesReadSpec, json: bool, cancel: &AtomicBool) -> Result<()> {
    let r = run(spec, cancel)?;
    if json {
        return crate::out::print_json(&r);
    }
    println!(
        "{} pairs on {} CPUs: read+aggregate+clear {:.2} ms median (kept vector), {:.2} ms (callback), {:.2} ms cold (fresh vector); swap wait {:.2} ms",
        r.entries, r.cpus, r.read_ms, r.callback_read_ms, r.cold_read_ms, r.swap_wait_ms
    );
    println!("records per read: {:?}", r.records);
    Ok(())
}
