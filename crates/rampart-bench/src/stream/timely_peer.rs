//! The peer engine of `rampart bench stream-engine`: the same pipeline —
//! Source → Map(FlowID) → Filter(TCP or UDP) → Keyed Window (count-based
//! tumbling, 1,000 tuples, packets + bytes per flow) → Sink — on
//! timely-dataflow (crates.io), with the same 32-byte tuples drawn from the
//! same flows by the same generator. Timely's input is fed in rounds of
//! 65,536 tuples; a worker steps the dataflow until each round has passed
//! through (the bounded lag its examples use). With several workers the
//! window's input is exchanged by FlowID, as rampart's key-by, and each
//! worker runs its own source (as rampart's source replicas would). When the
//! input ends, the partial windows are emitted, as rampart's window does.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::vec::{Filter, Map};
use timely::dataflow::operators::{Input, Inspect, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};

use super::engine::{draw, flow, process_cpu_seconds, seed, BenchItem, BenchTuple};

/// One timely run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TimelyResult {
    /// `timely-dataflow`.
    pub engine: &'static str,
    /// Its version (Cargo.lock).
    pub version: &'static str,
    /// Distinct flows.
    pub flows: u32,
    /// Worker threads.
    pub workers: usize,
    /// Source tuples (all workers).
    pub tuples: u64,
    /// Window results.
    pub windows: u64,
    /// Tuples counted in the windows (every TCP/UDP tuple, once).
    pub windowed_tuples: u64,
    /// Wall time, s.
    pub seconds: f64,
    /// Source tuples per second.
    pub tuples_per_s: f64,
    /// CPU time of the process during the run, s.
    pub cpu_seconds: f64,
    /// Source tuples per CPU second.
    pub tuples_per_cpu_s: f64,
}

/// Run the pipeline on timely-dataflow with `workers` worker threads.
///
/// # Errors
/// Timely's own (it could not start its workers).
pub fn run(flows: u32, seconds: f64, workers: usize) -> crate::Result<TimelyResult> {
    let n = u64::from(flows.max(1));
    let cpu0 = process_cpu_seconds();
    let t0 = Instant::now();
    let guards = timely::execute(timely::Config::process(workers.max(1)), move |worker| {
        let mut input = InputHandle::new();
        let probe = ProbeHandle::new();
        // Window results and the tuples they counted.
        let windows = Rc::new(Cell::new((0u64, 0u64)));
        let w2 = Rc::clone(&windows);
        worker.dataflow::<u64, _, _>(|scope| {
            scope
                .input_from(&mut input)
                .map(|mut t: BenchTuple| {
                    t.compute_flow_id();
                    t
                })
                .filter(|t: &BenchTuple| t.proto() == 6 || t.proto() == 17)
                .unary_frontier(
                    Exchange::new(|t: &BenchTuple| u64::from(t.flow_id())),
                    "window",
                    |cap, _| {
                        // Packets and bytes of at most 1,000 tuples fit 32 bits (as rampart's).
                        let mut state: FxHashMap<u32, (u32, u32)> = FxHashMap::default();
                        // Held to emit the partial windows once the input
                        // has ended (as rampart's window does), downgraded to
                        // the input frontier so rounds still complete.
                        let mut cap = Some(cap);
                        move |(input, frontier), output| {
                            input.for_each_stamp(|c, data| {
                                let mut session = output.session(&c);
                                for batch in data {
                                    for t in batch.iter() {
                                        let e = state.entry(t.flow_id()).or_default();
                                        e.0 += 1;
                                        e.1 += u32::from(t.len);
                                        if e.0 == 1000 {
                                            session.give((t.flow_id(), e.0, e.1));
                                            *e = (0, 0);
                                        }
                                    }
                                }
                            });
                            match frontier.frontier().iter().min() {
                                Some(t) => {
                                    if let Some(c) = cap.as_mut() {
                                        c.downgrade(t);
                                    }
                                }
                                None => {
                                    if let Some(c) = cap.take() {
                                        let mut session = output.session(&c);
                                        for (k, (p, b)) in state.drain() {
                                            if p > 0 {
                                                session.give((k, p, b));
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    },
                )
                .container::<Vec<(u32, u32, u32)>>()
                .inspect(move |&(_, p, _)| {
                    let (w, n) = w2.get();
                    w2.set((w + 1, n + u64::from(p)));
                })
                .probe_with(&probe);
        });
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let mut x = seed(worker.index());
        let (mut sent, mut round) = (0u64, 0u64);
        // At least one round, then until the deadline (as rampart's source).
        loop {
            for _ in 0..65_536 {
                let mut t = flow(draw(&mut x, n));
                sent += 1;
                t.set_ts(sent);
                input.send(t);
            }
            round += 1;
            input.advance_to(round);
            while probe.less_than(input.time()) {
                worker.step();
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        input.close();
        while worker.step() {}
        let (w, windowed) = windows.get();
        (sent, w, windowed)
    })
    .map_err(|e| crate::Error::Failed(format!("timely-dataflow: {e}")))?;
    let mut tuples = 0;
    let mut windows = 0;
    let mut windowed_tuples = 0;
    for r in guards.join() {
        let (t, w, n) = r.map_err(|e| crate::Error::Failed(format!("timely worker: {e}")))?;
        tuples += t;
        windows += w;
        windowed_tuples += n;
    }
    let s = t0.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu0;
    Ok(TimelyResult {
        engine: "timely-dataflow",
        version: "0.32.0",
        flows,
        workers,
        tuples,
        windows,
        windowed_tuples,
        seconds: s,
        tuples_per_s: tuples as f64 / s,
        cpu_seconds: cpu,
        tuples_per_cpu_s: if cpu > 0.0 { tuples as f64 / cpu } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::super::engine::{draw, flow, seed, BenchItem};

    /// The same result as the pipeline computed by hand: every TCP/UDP
    /// tuple counted once, one window per 1,000 tuples of a flow plus its
    /// partial window at the end.
    #[test]
    fn timely_runs_the_same_pipeline() {
        for workers in [1, 2] {
            // A tiny deadline: each worker's source sends exactly one round.
            let r = super::run(64, 1e-6, workers).unwrap();
            assert_eq!(r.tuples, 65_536 * workers as u64, "{r:?}");
            let mut per_flow = std::collections::HashMap::<u32, u64>::new();
            for w in 0..workers {
                let mut x = seed(w);
                for _ in 0..65_536 {
                    let mut t = flow(draw(&mut x, 64));
                    t.compute_flow_id();
                    if t.proto() == 6 || t.proto() == 17 {
                        *per_flow.entry(t.flow_id()).or_default() += 1;
                    }
                }
            }
            let kept: u64 = per_flow.values().sum();
            let windows: u64 = per_flow.values().map(|n| n.div_ceil(1000)).sum();
            assert_eq!(per_flow.len(), 58, "58 of the 64 flows are TCP or UDP");
            assert_eq!(r.windowed_tuples, kept, "{workers} workers: {r:?}");
            assert_eq!(r.windows, windows, "{workers} workers: {r:?}");
        }
    }
}
