//! Engine properties: results are identical to a sequential reference for
//! any parallelism degree, with batching and chaining on or off; wrong
//! settings are refused before anything runs; bounded queues apply
//! backpressure.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use rampart_stream::engine::{
    agg, Error, ExecMode, Filter, FlatMap, GraphConfig, KeyedWindow, Map, ParallelWindow,
    PipeGraph, Sink, Source, WindowInfo, WindowSpec,
};

#[derive(Debug, Clone, Copy)]
struct In {
    key: u16,
    val: u32,
    ts: u64,
}

/// A window result: key, window id, the values in arrival order (so the
/// order each key's records were processed in is part of the result), count.
type Res = (u16, u64, Vec<u32>, u64, bool);

#[derive(Debug, Clone)]
struct Setup {
    par: [usize; 5],
    batch: usize,
    chaining: bool,
    capacity: usize,
}

fn run(input: &[In], spec: WindowSpec, parallel_window: bool, s: &Setup) -> Vec<Res> {
    let g = PipeGraph::new(GraphConfig {
        name: "t".into(),
        mode: ExecMode::Deterministic,
        chaining: s.chaining,
        queue_capacity: s.capacity,
        ..GraphConfig::default()
    })
    .unwrap();
    let data = Arc::new(input.to_vec());
    let src = Source::new("src", move |ctx| {
        let (r, p) = (ctx.replica(), ctx.parallelism());
        for (i, x) in data.iter().enumerate() {
            if i % p == r {
                ctx.emit_seq(x.ts, i as u64, *x);
            }
        }
        Ok(())
    })
    .with_parallelism(s.par[0])
    .with_output_batch(s.batch);
    let out: Arc<Mutex<Vec<Res>>> = Arc::default();
    let o2 = Arc::clone(&out);
    let mut local = Vec::new();
    let sink = Sink::new("sink", move |r: Option<Res>| match r {
        Some(r) => local.push(r),
        None => o2.lock().unwrap().append(&mut local),
    })
    .with_parallelism(s.par[4]);
    let f = agg(
        Vec::new,
        |v: &mut Vec<u32>, x: &In| v.push(x.val),
        |k: &u16, v: Vec<u32>, w: &WindowInfo| (*k, w.id, v, w.count, w.closed_by_eos),
    );
    let pipe = g
        .source(src)
        .unwrap()
        .add(
            Map::new("map", |x: In| In {
                val: x.val * 2 + 1,
                ..x
            })
            .with_parallelism(s.par[1])
            .with_output_batch(s.batch),
        )
        .unwrap()
        // FlatMap that drops multiples of 7 and duplicates multiples of 5.
        .add(
            FlatMap::new(
                "flatmap",
                |x: In, sh: &mut rampart_stream::engine::Shipper<'_, In>| {
                    if !x.val.is_multiple_of(7) {
                        sh.ship(x);
                        if x.val.is_multiple_of(5) {
                            sh.ship(In {
                                val: x.val + 1,
                                ..x
                            });
                        }
                    }
                },
            )
            .with_parallelism(s.par[1])
            .with_output_batch(s.batch),
        )
        .unwrap()
        .add(
            Filter::new("filter", |x: &In| !x.val.is_multiple_of(3))
                .with_parallelism(s.par[2])
                .with_output_batch(s.batch),
        )
        .unwrap();
    let pipe = if parallel_window {
        pipe.add(
            ParallelWindow::new("win", |x: &In| x.key, spec, f)
                .with_parallelism(s.par[3])
                .with_output_batch(s.batch),
        )
        .unwrap()
    } else {
        pipe.add(
            KeyedWindow::new("win", |x: &In| x.key, spec, f)
                .with_parallelism(s.par[3])
                .with_output_batch(s.batch),
        )
        .unwrap()
    };
    let st = pipe.sink(sink).unwrap().run().unwrap();
    assert_eq!(st.source_tuples, input.len() as u64);
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    v
}

/// The same computation, sequentially.
fn reference(input: &[In], spec: WindowSpec) -> Vec<Res> {
    use std::collections::BTreeMap;
    let mut stream = Vec::new();
    for x in input {
        let v = x.val * 2 + 1;
        if v % 7 != 0 {
            stream.push(In { val: v, ..*x });
            if v % 5 == 0 {
                stream.push(In { val: v + 1, ..*x });
            }
        }
    }
    stream.retain(|x| x.val % 3 != 0);
    let mut per_key: BTreeMap<u16, Vec<In>> = BTreeMap::new();
    for x in &stream {
        per_key.entry(x.key).or_default().push(*x);
    }
    let mut out = Vec::new();
    for (k, xs) in per_key {
        match spec {
            WindowSpec::CountTumbling { size } | WindowSpec::CountSliding { size, .. } => {
                let slide = match spec {
                    WindowSpec::CountSliding { slide, .. } => slide,
                    _ => size,
                } as usize;
                let size = size as usize;
                let mut start = 0;
                while start < xs.len() {
                    let end = (start + size).min(xs.len());
                    let vals: Vec<u32> = xs[start..end].iter().map(|x| x.val).collect();
                    out.push((
                        k,
                        (start / slide) as u64,
                        vals,
                        (end - start) as u64,
                        end - start < size,
                    ));
                    start += slide;
                }
            }
            WindowSpec::Session { gap_ns, max_ns } => {
                let max_ts = input.iter().map(|x| x.ts).max().unwrap_or(0);
                // A session's id is its start.
                let mut cur: Option<(u64, u64, u64, Vec<u32>)> = None; // id, first, last, vals
                let close = |c: (u64, u64, u64, Vec<u32>), out: &mut Vec<Res>| {
                    let due = (c.2 + gap_ns).min(c.1 + max_ns);
                    let n = c.3.len() as u64;
                    out.push((k, c.0, c.3, n, due > max_ts));
                };
                for x in &xs {
                    if let Some(c) = &cur {
                        if x.ts >= c.2 + gap_ns || x.ts >= c.1 + max_ns {
                            close(cur.take().unwrap(), &mut out);
                        }
                    }
                    match &mut cur {
                        Some(c) => {
                            c.2 = x.ts;
                            c.3.push(x.val);
                        }
                        None => cur = Some((x.ts, x.ts, x.ts, vec![x.val])),
                    }
                }
                if let Some(c) = cur {
                    close(c, &mut out);
                }
            }
            WindowSpec::TimeTumbling { size_ns, .. } | WindowSpec::TimeSliding { size_ns, .. } => {
                let slide = match spec {
                    WindowSpec::TimeSliding { slide_ns, .. } => slide_ns,
                    _ => size_ns,
                };
                let mut wins: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
                for x in &xs {
                    let last = x.ts / slide;
                    let first = if x.ts >= size_ns {
                        (x.ts - size_ns) / slide + 1
                    } else {
                        0
                    };
                    for w in first..=last {
                        wins.entry(w).or_default().push(x.val);
                    }
                }
                let max_ts = input.iter().map(|x| x.ts).max().unwrap_or(0);
                for (w, vals) in wins {
                    let n = vals.len() as u64;
                    out.push((k, w, vals, n, w * slide + size_ns > max_ts));
                }
            }
        }
    }
    out.sort();
    out
}

fn input_strategy() -> impl Strategy<Value = Vec<In>> {
    prop::collection::vec((0u16..12, 0u32..1000, 0u64..40), 0..700).prop_map(|v| {
        let mut ts = 0;
        v.into_iter()
            .map(|(key, val, dt)| {
                ts += dt;
                In { key, val, ts }
            })
            .collect()
    })
}

fn setup_strategy() -> impl Strategy<Value = Setup> {
    (
        prop::array::uniform5(1usize..4),
        prop::sample::select(vec![1usize, 7, 64]),
        any::<bool>(),
        prop::sample::select(vec![4usize, 64, 8192]),
    )
        .prop_map(|(par, batch, chaining, capacity)| Setup {
            par,
            batch,
            chaining,
            capacity,
        })
}

fn spec_strategy() -> impl Strategy<Value = WindowSpec> {
    prop_oneof![
        (1u64..20).prop_map(WindowSpec::count_tumbling),
        (1u64..20, 1u64..20).prop_map(|(a, b)| WindowSpec::count_sliding(a.max(b), a.min(b))),
        (1u64..200).prop_map(|s| WindowSpec::time_tumbling(Duration::from_nanos(s))),
        (1u64..200, 1u64..200).prop_map(|(a, b)| WindowSpec::time_sliding(
            Duration::from_nanos(a.max(b)),
            Duration::from_nanos(a.min(b))
        )),
        (1u64..100, 1u64..400).prop_map(|(g, m)| WindowSpec::session(
            Duration::from_nanos(g),
            Duration::from_nanos(m.max(g))
        )),
    ]
}

/// Input and session windows at `scale` ns per unit: sessions whose due
/// times fall in the same and in different ticks of the window's timers.
fn scaled_sessions(scale: u64) -> impl Strategy<Value = (Vec<In>, WindowSpec)> {
    (input_strategy(), 1u64..100, 1u64..400).prop_map(move |(input, g, m)| {
        let input = input
            .into_iter()
            .map(|x| In {
                ts: x.ts * scale,
                ..x
            })
            .collect();
        let spec = WindowSpec::session(
            Duration::from_nanos(g * scale),
            Duration::from_nanos(m.max(g) * scale),
        );
        (input, spec)
    })
}

/// What differs between two sorted result lists (small enough to read).
fn diff(got: &[Res], want: &[Res]) -> (Vec<Res>, Vec<Res>) {
    let extra: Vec<Res> = got
        .iter()
        .filter(|r| !want.contains(r))
        .take(5)
        .cloned()
        .collect();
    let missing: Vec<Res> = want
        .iter()
        .filter(|r| !got.contains(r))
        .take(5)
        .cloned()
        .collect();
    (extra, missing)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Keyed windows (count and time, tumbling and sliding): same results,
    /// in the same per-key order, as the sequential reference, for any
    /// parallelism, batching, chaining and queue capacity.
    #[test]
    fn keyed_windows_match_reference(input in input_strategy(), spec in spec_strategy(), s in setup_strategy()) {
        let (got, want) = (run(&input, spec, false, &s), reference(&input, spec));
        prop_assert!(got == want, "{:?} {:?}: (extra, missing) = {:?}", spec, s, diff(&got, &want));
    }

    /// Session windows whose timers span many ticks (about 1 ms each):
    /// the same sessions, closed by their gap, their longest duration or
    /// the end of the stream, as the reference.
    #[test]
    fn session_windows_match_reference_across_timer_ticks((input, spec) in scaled_sessions(40_000), s in setup_strategy()) {
        let (got, want) = (run(&input, spec, false, &s), reference(&input, spec));
        prop_assert!(got == want, "{:?} {:?}: (extra, missing) = {:?}", spec, s, diff(&got, &want));
    }

    /// Parallel windows (time-based) give the keyed windows' results.
    #[test]
    fn parallel_windows_match_reference(input in input_strategy(), size in 1u64..200, slide in 1u64..200, s in setup_strategy()) {
        let spec = WindowSpec::time_sliding(Duration::from_nanos(size.max(slide)), Duration::from_nanos(size.min(slide)));
        let (got, want) = (run(&input, spec, true, &s), reference(&input, spec));
        prop_assert!(got == want, "{:?} {:?}: (extra, missing) = {:?}", spec, s, diff(&got, &want));
    }
}

#[test]
fn batching_and_chaining_grid_is_identical() {
    let input: Vec<In> = (0..5000u64)
        .map(|i| In {
            key: (i * 7 % 13) as u16,
            val: (i * 31 % 1000) as u32,
            ts: i / 3,
        })
        .collect();
    let spec = WindowSpec::count_sliding(10, 4);
    let want = reference(&input, spec);
    for par in [
        [1, 1, 1, 1, 1],
        [2, 1, 1, 2, 1],
        [3, 2, 2, 3, 2],
        [1, 2, 2, 2, 2],
    ] {
        for batch in [1, 256] {
            for chaining in [false, true] {
                let got = run(
                    &input,
                    spec,
                    false,
                    &Setup {
                        par,
                        batch,
                        chaining,
                        capacity: 16,
                    },
                );
                assert_eq!(got, want, "par {par:?} batch {batch} chaining {chaining}");
            }
        }
    }
}

fn graph() -> PipeGraph {
    PipeGraph::new(GraphConfig::default()).unwrap()
}

fn nums() -> Source<
    u32,
    impl FnMut(&mut rampart_stream::engine::SourceCtx<'_, u32>) -> Result<(), String>
        + Clone
        + Send
        + 'static,
> {
    Source::new("nums", |ctx| {
        for i in 0..10u32 {
            ctx.emit(u64::from(i), i);
        }
        Ok(())
    })
}

#[test]
fn bad_settings_are_refused_before_running() {
    let e = graph().source(nums().with_parallelism(0)).unwrap_err();
    assert!(matches!(e, Error::InvalidSetting { .. }), "{e}");
    assert!(e.to_string().contains("parallelism 0 out of range"), "{e}");

    let e = graph()
        .source(nums())
        .unwrap()
        .add(Map::new("m", |x: u32| x).with_output_batch(0))
        .unwrap_err();
    assert!(e.to_string().contains("output batch 0"), "{e}");

    let e = graph()
        .source(nums())
        .unwrap()
        .add(ParallelWindow::new(
            "pw",
            |_: &u32| (),
            WindowSpec::count_tumbling(3),
            agg(
                || 0u32,
                |a: &mut u32, _: &u32| *a += 1,
                |_: &(), a: u32, _: &WindowInfo| a,
            ),
        ))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("needs a time-based tumbling or sliding window"),
        "{e}"
    );

    let e = graph()
        .source(nums())
        .unwrap()
        .add(KeyedWindow::new(
            "kw",
            |x: &u32| *x,
            WindowSpec::count_sliding(2, 5),
            agg(
                || 0u32,
                |a: &mut u32, _: &u32| *a += 1,
                |_: &u32, a: u32, _: &WindowInfo| a,
            ),
        ))
        .unwrap_err();
    assert!(e.to_string().contains("slide <= size"), "{e}");

    let e = graph()
        .source(nums())
        .unwrap()
        .add(Map::new("nums", |x: u32| x))
        .unwrap_err();
    assert!(matches!(e, Error::IllegalWiring { .. }), "{e}");

    assert!(PipeGraph::new(GraphConfig {
        queue_capacity: 1,
        ..GraphConfig::default()
    })
    .is_err());
}

#[test]
fn source_errors_are_reported_and_stop_the_graph() {
    let e = graph()
        .source(Source::new(
            "bad",
            |ctx: &mut rampart_stream::engine::SourceCtx<'_, u32>| {
                ctx.emit(0, 1);
                Err("disk on fire".to_string())
            },
        ))
        .unwrap()
        .sink(Sink::new("s", |_: Option<u32>| {}))
        .unwrap()
        .run()
        .unwrap_err();
    assert_eq!(e.to_string(), "source \"bad\" replica 0: disk on fire");
}

#[test]
fn operator_panics_are_reported_not_hung() {
    let e = graph()
        .source(Source::new(
            "many",
            |ctx: &mut rampart_stream::engine::SourceCtx<'_, u32>| {
                for i in 0..100_000u32 {
                    ctx.emit(u64::from(i), i);
                }
                Ok(())
            },
        ))
        .unwrap()
        .add(Map::new("boom", |x: u32| {
            if x == 500 {
                panic!("bad tuple {x}")
            } else {
                x
            }
        }))
        .unwrap()
        .sink(Sink::new("s", |_: Option<u32>| {}))
        .unwrap()
        .run()
        .unwrap_err();
    assert!(e.to_string().contains("bad tuple 500"), "{e}");
}

/// A slow sink with tiny queues: the source is held back (it cannot run
/// ahead by more than the queued records), and nothing is lost.
#[test]
fn bounded_queues_apply_backpressure() {
    let emitted_when_first_seen = Arc::new(Mutex::new(None));
    let progress = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let p2 = Arc::clone(&progress);
    let g = PipeGraph::new(GraphConfig {
        queue_capacity: 8,
        ..GraphConfig::default()
    })
    .unwrap();
    let e2 = Arc::clone(&emitted_when_first_seen);
    let mut seen = 0u64;
    let total = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let t2 = Arc::clone(&total);
    let st = g
        .source(Source::new(
            "fast",
            move |ctx: &mut rampart_stream::engine::SourceCtx<'_, u64>| {
                for i in 0..2000u64 {
                    ctx.emit(i, i);
                    p2.store(i + 1, std::sync::atomic::Ordering::SeqCst);
                }
                Ok(())
            },
        ))
        .unwrap()
        .add(Map::new("id", |x: u64| x))
        .unwrap()
        .sink(Sink::new("slow", move |x: Option<u64>| {
            if x.is_some() {
                if seen == 0 {
                    std::thread::sleep(Duration::from_millis(200));
                    *e2.lock().unwrap() = Some(progress.load(std::sync::atomic::Ordering::SeqCst));
                }
                seen += 1;
            } else {
                t2.store(seen, std::sync::atomic::Ordering::SeqCst);
            }
        }))
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(total.load(std::sync::atomic::Ordering::SeqCst), 2000);
    assert_eq!(st.source_tuples, 2000);
    let ahead = emitted_when_first_seen.lock().unwrap().unwrap();
    // Two queues of 8 and what each thread holds (a drained chunk, the
    // source's batch of 32): a constant, far below the 2,000 records.
    assert!(
        ahead <= 100,
        "source ran {ahead} records ahead of a blocked sink"
    );
}

/// Event-time tumbling windows fire on watermarks while the stream is
/// still running (not only at the end), and late records are counted.
#[test]
fn watermarks_fire_windows_and_count_late_records() {
    let fired_before_end = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (f2, d2) = (Arc::clone(&fired_before_end), Arc::clone(&done));
    // Chained: the source's watermarks reach the window synchronously, so
    // "late" does not depend on thread timing.
    let g = PipeGraph::new(GraphConfig {
        chaining: true,
        ..GraphConfig::default()
    })
    .unwrap();
    let st = g
        .source(
            Source::new(
                "src",
                move |ctx: &mut rampart_stream::engine::SourceCtx<'_, u64>| {
                    for i in 0..10_000u64 {
                        ctx.emit(i * 1000, i);
                    }
                    // A record 5 µs older than the newest: its window [5 ms, 6 ms) has fired.
                    ctx.emit(5_000_000, 0);
                    std::thread::sleep(Duration::from_millis(100));
                    d2.store(true, std::sync::atomic::Ordering::SeqCst);
                    Ok(())
                },
            )
            .with_max_delay(0),
        )
        .unwrap()
        .add(KeyedWindow::new(
            "win",
            |_: &u64| 0u8,
            WindowSpec::time_tumbling(Duration::from_millis(1)),
            agg(
                || 0u64,
                |a: &mut u64, _: &u64| *a += 1,
                |_: &u8, a: u64, w: &WindowInfo| (w.id, a),
            ),
        ))
        .unwrap()
        .sink(Sink::new("s", move |x: Option<(u64, u64)>| {
            if x.is_some() && !done.load(std::sync::atomic::Ordering::SeqCst) {
                f2.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }))
        .unwrap()
        .run()
        .unwrap();
    assert!(
        fired_before_end.load(std::sync::atomic::Ordering::SeqCst),
        "no window fired before the end of the stream"
    );
    let w = st.operators.iter().find(|o| o.name == "win").unwrap();
    assert_eq!(w.late_dropped, 1);
    assert_eq!(w.windows_fired, 10);
}

/// A source already partitioned by key (replica `r` emits the keys with
/// `key % 2 == r`, as a NIC steering by key would), a count window per key.
fn partitioned(assume: bool, window_par: usize) -> (Vec<(u16, u64)>, usize) {
    let g = PipeGraph::new(GraphConfig {
        name: "p".into(),
        mode: ExecMode::Deterministic,
        chaining: true,
        ..GraphConfig::default()
    })
    .unwrap();
    let src = Source::new("src", |ctx| {
        let r = ctx.replica() as u16;
        for i in 0..10_000u64 {
            let key = (i % 64) as u16;
            if key % 2 == r {
                ctx.emit_seq(i, i, key);
            }
        }
        Ok(())
    })
    .with_parallelism(2)
    .with_output_batch(16);
    let out: Arc<Mutex<Vec<(u16, u64)>>> = Arc::default();
    let o2 = Arc::clone(&out);
    let p = g
        .source(src)
        .unwrap()
        .assume_partitioned(assume)
        .add(
            KeyedWindow::new(
                "count",
                |k: &u16| *k,
                WindowSpec::count_tumbling(10),
                agg(
                    || 0u64,
                    |a: &mut u64, _: &u16| *a += 1,
                    |k: &u16, a: u64, _: &WindowInfo| (*k, a),
                ),
            )
            .with_parallelism(window_par),
        )
        .unwrap()
        .sink(Sink::new("sink", move |r: Option<(u16, u64)>| {
            if let Some(r) = r {
                o2.lock().unwrap().push(r);
            }
        }))
        .unwrap();
    let threads = p.threads();
    p.run().unwrap();
    let mut v = out.lock().unwrap().clone();
    v.sort_unstable();
    (v, threads)
}

#[test]
fn assume_partitioned_hands_records_over_one_to_one() {
    let (keyed, t_keyed) = partitioned(false, 2);
    let (direct, t_direct) = partitioned(true, 2);
    assert_eq!(keyed, direct, "same windows either way");
    assert_eq!(
        keyed.len(),
        64 * 16,
        "156 or 157 records per key: 15 full windows and a partial one"
    );
    // Key-by: 2 source + 2 window threads + sink; one-to-one: the window
    // fuses into each source replica.
    assert_eq!((t_keyed, t_direct), (5, 3));
    // Different parallelism: the declaration cannot apply, key-by as usual.
    let (other, t_other) = partitioned(true, 3);
    assert_eq!(other, keyed);
    assert_eq!(t_other, 6);
}
