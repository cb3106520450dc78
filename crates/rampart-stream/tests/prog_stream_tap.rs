//! `xdp_stream_tap` (the stream tap) under BPF_PROG_RUN: every frame of the
//! parser corpus, its truncations and malformed variants comes back
//! XDP_PASS and byte-identical; accepted frames put the userspace tuple in
//! the ring buffer (tuples mode) or in their connection's per-CPU counters
//! (aggregation mode, the userspace [`FlowPart`] of the same frames, run on
//! both CPUs at once); a full ring buffer loses tuples, never frames; a
//! program in the next-stage slot gets every frame after the tap.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::rc::Rc;

use rampart_dataplane::testrun;
use rampart_stream::offload::{Entry, OffloadConfig, OffloadProgram, Predicate, TapSizes};
use rampart_stream::parse::parse_frame;
use rampart_stream::part::{ConnKey, FlowPart};
use rampart_stream::source::aggtable::{AggRecord, AggTables};
use rampart_stream::source::tap::EpochParts;
use rampart_stream::tuple::{proto, StreamTuple};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;

fn load(ring_bytes: u32, aggregate: bool, filter: Option<Predicate>) -> OffloadProgram {
    rampart_lab::testing::require_kernel();
    let p = OffloadProgram::load_sized(
        Entry::Tap,
        None,
        None,
        TapSizes {
            ring_bytes,
            agg_slots: 4096,
            agg6_slots: 4096,
        },
    )
    .expect("load xdp_stream_tap (verifier)");
    p.configure(&OffloadConfig {
        key_mode: None,
        filter,
        ..OffloadConfig::default()
    })
    .unwrap();
    p.configure_tap(aggregate, 1_000_000_000).unwrap();
    p
}

/// The tap in aggregation mode, `slots` per CPU, epochs of `epoch_ns`.
fn load_agg(slots: u32, epoch_ns: u64) -> OffloadProgram {
    rampart_lab::testing::require_kernel();
    let p = OffloadProgram::load_sized(
        Entry::Tap,
        None,
        None,
        TapSizes {
            ring_bytes: 4 << 20,
            agg_slots: slots,
            agg6_slots: slots,
        },
    )
    .expect("load xdp_stream_tap (verifier)");
    p.configure(&OffloadConfig {
        key_mode: None,
        ..OffloadConfig::default()
    })
    .unwrap();
    p.configure_tap(true, epoch_ns).unwrap();
    p
}

/// Every tuple now in the ring buffers (consumed), CPU 0's first.
fn drain_ring(p: &OffloadProgram) -> Vec<StreamTuple> {
    (0..p.tap_maps().unwrap().rings.len())
        .flat_map(|cpu| drain_ring_of(p, cpu))
        .collect()
}

/// Every tuple now in CPU `cpu`'s ring buffer (consumed).
fn drain_ring_of(p: &OffloadProgram, cpu: usize) -> Vec<StreamTuple> {
    let fd = p.tap_maps().unwrap().rings[cpu].as_raw_fd();
    let id = rampart_dataplane::maps::map_info(fd).unwrap().id;
    let h = libbpf_rs::MapHandle::from_map_id(id).unwrap();
    let out = Rc::new(RefCell::new(Vec::new()));
    let o2 = Rc::clone(&out);
    let mut b = libbpf_rs::RingBufferBuilder::new();
    b.add(&h, move |d: &[u8]| {
        assert_eq!(d.len(), 56, "a tuple");
        o2.borrow_mut().push(bytemuck::pod_read_unaligned(d));
        0
    })
    .unwrap();
    let rb = b.build().unwrap();
    rb.consume().unwrap();
    drop(rb);
    Rc::try_unwrap(out).unwrap().into_inner()
}

/// The program's clock now, as an epoch of `epoch_ns`.
fn epoch_now(epoch_ns: u64) -> u64 {
    let off = rampart_stream::offload::prog::clock_offset_ns();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64 + off) / epoch_ns
}

/// Everything in the rings now: tuples and aggregation slots the
/// program sent (consumed).
fn drain_all(p: &OffloadProgram) -> (Vec<StreamTuple>, Vec<AggRecord>) {
    let (mut tuples, mut slots) = (Vec::new(), Vec::new());
    for fd in &p.tap_maps().unwrap().rings {
        let id = rampart_dataplane::maps::map_info(fd.as_raw_fd())
            .unwrap()
            .id;
        let h = libbpf_rs::MapHandle::from_map_id(id).unwrap();
        let t = Rc::new(RefCell::new(Vec::new()));
        let sl = Rc::new(RefCell::new(Vec::new()));
        let (t2, s2) = (Rc::clone(&t), Rc::clone(&sl));
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&h, move |d: &[u8]| {
            match (d.len(), AggRecord::from_bytes(d)) {
                (56, _) => t2
                    .borrow_mut()
                    .push(bytemuck::pod_read_unaligned::<StreamTuple>(d)),
                (_, Some(r)) => s2.borrow_mut().push(r),
                (n, None) => panic!("a record of {n} bytes"),
            }
            0
        })
        .unwrap();
        let rb = b.build().unwrap();
        rb.consume().unwrap();
        drop(rb);
        tuples.extend(Rc::try_unwrap(t).unwrap().into_inner());
        slots.extend(Rc::try_unwrap(sl).unwrap().into_inner());
    }
    (tuples, slots)
}

/// What userspace gets of the aggregation up to now: the slots it takes
/// in place (every epoch up to the current one) and the slots and tuples
/// the program sent to the rings, each as a part (one per slot or tuple).
fn harvest_all(p: &OffloadProgram, epoch_ns: u64) -> Vec<FlowPart> {
    let table = AggTables::map(p.tap_maps().unwrap()).unwrap();
    let now = epoch_now(epoch_ns) + 1;
    let mut out = Vec::new();
    table.harvest(now, epoch_ns, |part, _| out.push(part));
    let (tuples, slots) = drain_all(p);
    for s in slots {
        out.push(s.part(s.epoch(now) * epoch_ns));
    }
    out.extend(tuples.iter().map(FlowPart::from_tuple));
    out.retain(|p| p.packets() > 0);
    out
}

/// [`harvest_all`] by connection: one part per slot (a CPU's, an epoch's).
fn harvest(p: &OffloadProgram) -> HashMap<ConnKey, Vec<FlowPart>> {
    let mut out: HashMap<ConnKey, Vec<FlowPart>> = HashMap::new();
    for part in harvest_all(p, 1_000_000_000) {
        out.entry(part.key).or_default().push(part);
    }
    out
}

/// Parts summed by connection.
fn summed(parts: impl IntoIterator<Item = FlowPart>) -> HashMap<ConnKey, FlowPart> {
    let mut m: HashMap<ConnKey, FlowPart> = HashMap::new();
    for part in parts {
        m.entry(part.key)
            .and_modify(|a| a.merge(&part))
            .or_insert(part);
    }
    m
}

/// What userspace makes of `corpus` run `times` times: its one-packet
/// parts summed by connection.
fn corpus_parts(corpus: &[Vec<u8>], times: usize) -> HashMap<ConnKey, FlowPart> {
    summed((0..times).flat_map(|_| {
        corpus
            .iter()
            .filter_map(|f| parse_frame(f, 0).ok())
            .map(|t| FlowPart::from_tuple(&t))
            .collect::<Vec<_>>()
    }))
}

/// The test kit's parse corpus (every parse path, every status).
fn corpus() -> Vec<(String, Vec<u8>)> {
    rampart_testkit::corpus::base()
        .into_iter()
        .map(|c| (c.name, c.frame))
        .collect()
}

/// A part without its times (the program stamps its own clock).
fn untimed(mut p: FlowPart) -> FlowPart {
    for d in &mut p.dir {
        d.first_ns = 0;
        d.last_ns = 0;
    }
    p
}

/// The corpus, its truncations, and every frame with one byte flipped.
fn frames() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for (n, f) in corpus() {
        for cut in [14, 20, 34, 40, 54] {
            if cut < f.len() {
                v.push((format!("{n}[..{cut}]"), f[..cut].to_vec()));
            }
        }
        let mut bad = f.clone();
        if bad.len() > 14 {
            bad[14] ^= 0x0f;
            v.push((format!("{n} bad IHL/version"), bad));
        }
        v.push((n, f));
    }
    v
}

#[test]
fn every_frame_passes_unchanged_and_accepted_ones_become_the_userspace_tuple() {
    let p = load(1 << 20, false, None);
    let mut want = Vec::new();
    for (n, f) in frames() {
        let out = testrun::run_packet(p.prog_fd(), &f, 0).expect("BPF_PROG_RUN");
        assert_eq!(out.retval, XDP_PASS, "{n}: the tap passes every frame");
        assert_eq!(out.data, f, "{n}: untouched");
        if let Ok(t) = parse_frame(&f, 0) {
            want.push(t);
        }
    }
    let got = drain_ring(&p);
    assert_eq!(got.len(), want.len(), "one tuple per IP frame");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            g.ts_ns > 1_600_000_000_000_000_000,
            "epoch time: {}",
            g.ts_ns
        );
        assert!(
            rampart_stream::tuple::same(&StreamTuple { ts_ns: 0, ..*g }, w),
            "{g:?} vs {w:?}"
        );
    }
    let c = p.tap_counters().unwrap();
    assert_eq!(c.tuples, want.len() as u64);
    assert_eq!(c.frames, frames().len() as u64);
    assert_eq!(
        c.frames,
        c.tuples + c.not_ip + c.truncated + c.bad_header + c.too_deep,
        "{c:?}"
    );
}

#[test]
fn filtered_frames_pass_but_are_not_analysed() {
    let udp_only = Predicate {
        protos: vec![proto::UDP],
        ..Predicate::default()
    };
    let p = load(1 << 20, false, Some(udp_only));
    for (n, f) in corpus() {
        let out = testrun::run_packet(p.prog_fd(), &f, 0).unwrap();
        assert_eq!(out.retval, XDP_PASS, "{n}");
    }
    let got = drain_ring(&p);
    assert!(!got.is_empty());
    assert!(got.iter().all(|t| t.proto == proto::UDP));
    assert!(p.tap_counters().unwrap().filtered > 0);
}

#[test]
fn a_full_ring_buffer_loses_tuples_not_frames() {
    // One page: 4096 / (56 + 8 header) = 64 records at most.
    let p = load(4096, false, None);
    let f = corpus().remove(0).1;
    for _ in 0..200 {
        let out = testrun::run_packet(p.prog_fd(), &f, 0).unwrap();
        assert_eq!(out.retval, XDP_PASS);
        assert_eq!(out.data, f);
    }
    let c = p.tap_counters().unwrap();
    assert_eq!(c.frames, 200);
    assert!(c.ring_full > 0, "{c:?}");
    assert_eq!(c.tuples + c.ring_full, 200, "{c:?}");
    assert_eq!(drain_ring(&p).len() as u64, c.tuples);
}

#[test]
fn each_cpu_writes_its_own_ring_and_a_full_one_is_counted_for_it() {
    let cpus = rampart_dataplane::maps::possible_cpus();
    // One page each: 4096 / (56 + 8 header) = 64 records at most.
    let p = load(4096, false, None);
    assert_eq!(p.tap_maps().unwrap().rings.len(), cpus, "a ring per CPU");
    let frame = |i: u8| {
        rampart_testkit::frame::Frame::udp(
            std::net::Ipv4Addr::new(10, 0, 0, i),
            "10.10.0.2",
            1000,
            53,
        )
        .build()
    };
    let online = std::thread::available_parallelism().map_or(1, usize::from);
    let used = online.min(cpus).min(2);
    // CPU c runs frame c+1, 10 times (c + 1 = 2: 200 times, past its ring).
    let runs = |c: usize| if c == 1 { 200 } else { 10 };
    std::thread::scope(|s| {
        for c in 0..used {
            let p = &p;
            s.spawn(move || {
                rampart_lab::testing::pin_this_thread(c);
                let f = frame(c as u8 + 1);
                for _ in 0..runs(c) {
                    assert_eq!(
                        testrun::run_packet(p.prog_fd(), &f, 0).unwrap().retval,
                        XDP_PASS
                    );
                }
            });
        }
    });
    let full = p.tap_ring_full_per_ring().unwrap();
    for (c, lost) in full.iter().enumerate().take(used) {
        let got = drain_ring_of(&p, c);
        let want = parse_frame(&frame(c as u8 + 1), 0).unwrap();
        assert!(
            got.iter()
                .all(|t| rampart_stream::tuple::same(&StreamTuple { ts_ns: 0, ..*t }, &want)),
            "CPU {c}'s ring holds only the tuples CPU {c} wrote"
        );
        assert_eq!(got.len() as u64 + lost, runs(c) as u64, "CPU {c}");
        assert!(
            got.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
            "in time order"
        );
    }
    assert_eq!(full[0], 0, "CPU 0's ring had room: {full:?}");
    if used == 2 {
        assert_eq!(
            full[1],
            200 - 63,
            "CPU 1's ring full after 63 records: {full:?}"
        );
    }
    assert!(full[used..].iter().all(|&f| f == 0), "{full:?}");
    assert_eq!(
        p.tap_counters().unwrap().ring_full,
        full.iter().sum::<u64>()
    );
}

/// Each of `cpus` CPUs runs every frame `rounds` times, all at once; every
/// frame passes.
fn run_on_every_cpu(p: &OffloadProgram, corpus: &[Vec<u8>], cpus: usize, rounds: usize) {
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            s.spawn(move || {
                rampart_lab::testing::pin_this_thread(cpu);
                for _ in 0..rounds {
                    for f in corpus {
                        let out = testrun::run_packet(p.prog_fd(), f, 0).unwrap();
                        assert_eq!(out.retval, XDP_PASS);
                    }
                }
            });
        }
    });
}

#[test]
fn aggregation_on_both_cpus_sums_to_the_userspace_parts() {
    let p = load(1 << 20, true, None);
    let corpus: Vec<Vec<u8>> = corpus().into_iter().map(|x| x.1).collect();
    let cpus = rampart_dataplane::maps::possible_cpus().min(2);
    // Each CPU runs every frame `rounds` times, both at once.
    let rounds = 50;
    run_on_every_cpu(&p, &corpus, cpus, rounds);
    // The same frames through the userspace parts.
    let want = corpus_parts(&corpus, rounds * cpus);
    let got = harvest(&p);
    assert_eq!(got.len(), want.len(), "one entry per connection");
    for (k, parts) in &got {
        // A slot per CPU (two when an epoch ended during the test).
        assert!(parts.len() <= 2 * cpus, "one slot per CPU and epoch");
        let mut sum = parts[0];
        parts[1..].iter().for_each(|x| sum.merge(x));
        assert_eq!(untimed(sum), untimed(want[k]), "{k:?}");
        assert!(sum.first_ns() > 1_600_000_000_000_000_000);
    }
    if cpus == 2 {
        assert!(
            got.values().all(|v| v.len() >= 2),
            "both CPUs counted every connection in their own copy"
        );
    }
    let c = p.tap_counters().unwrap();
    assert_eq!(c.tuples, 0, "nothing overflowed: {c:?}");
    assert_eq!(
        c.aggregated,
        want.values().map(FlowPart::packets).sum::<u64>()
    );
}

#[test]
fn the_source_gets_one_part_per_connection_merged_across_cpus_in_time_order() {
    let p = load(1 << 20, true, None);
    let corpus: Vec<Vec<u8>> = corpus().into_iter().map(|x| x.1).collect();
    let cpus = rampart_dataplane::maps::possible_cpus().min(2);
    let rounds = 20;
    let e = epoch_now(1_000_000_000);
    run_on_every_cpu(&p, &corpus, cpus, rounds);
    // As the source does at an epoch's end (every packet is of this epoch
    // or the one before, when one ended during the runs): the table's slots
    // merged across CPUs, then what the program sent to the rings (slots it
    // reused when the epoch changed), folded in by connection.
    let table = AggTables::map(p.tap_maps().unwrap()).unwrap();
    let late = std::sync::atomic::AtomicU64::new(0);
    let mut epoch = EpochParts::default();
    let now = epoch_now(1_000_000_000);
    epoch.take(&table, now, 1_000_000_000, &late);
    let (tuples, slots) = drain_all(&p);
    assert!(tuples.is_empty(), "no bucket was full");
    let other = summed(
        slots
            .iter()
            .map(|s| s.part(s.epoch(now + 1) * 1_000_000_000)),
    );
    epoch.add(&mut other.into_iter().collect());
    let got: Vec<FlowPart> = epoch.ordered().copied().collect();
    let want = corpus_parts(&corpus, rounds * cpus);
    assert_eq!(
        got.len(),
        want.len(),
        "one part per connection: its slots on both CPUs merged"
    );
    for g in &got {
        assert_eq!(untimed(*g), untimed(want[&g.key]), "{:?}", g.key);
    }
    assert!(
        got.windows(2)
            .all(|w| (w[0].first_ns(), w[0].key) < (w[1].first_ns(), w[1].key)),
        "by first packet, then connection"
    );
    if now == e {
        assert_eq!(late.load(std::sync::atomic::Ordering::Relaxed), 0);
    }
}

#[test]
fn a_full_bucket_sends_tuples_instead_and_nothing_is_lost() {
    rampart_lab::testing::require_kernel();
    let p = OffloadProgram::load_sized(
        Entry::Tap,
        None,
        None,
        TapSizes {
            ring_bytes: 1 << 20,
            agg_slots: 2,
            agg6_slots: 2,
        },
    )
    .unwrap();
    p.configure(&OffloadConfig {
        key_mode: None,
        ..OffloadConfig::default()
    })
    .unwrap();
    p.configure_tap(true, 1_000_000_000).unwrap();
    let ips: Vec<Vec<u8>> = corpus()
        .into_iter()
        .map(|x| x.1)
        .filter(|f| parse_frame(f, 0).is_ok())
        .collect();
    for f in &ips {
        assert_eq!(
            testrun::run_packet(p.prog_fd(), f, 0).unwrap().retval,
            XDP_PASS
        );
    }
    let c = p.tap_counters().unwrap();
    assert!(c.agg_full > 0, "{c:?}");
    assert_eq!(c.aggregated + c.agg_full, ips.len() as u64, "{c:?}");
    let parts = harvest_all(&p, 1_000_000_000);
    let want = summed(
        ips.iter()
            .map(|f| FlowPart::from_tuple(&parse_frame(f, 0).unwrap())),
    );
    let got = summed(parts);
    assert_eq!(got.len(), want.len());
    for (k, w) in &want {
        assert_eq!(untimed(got[k]), untimed(*w), "{k:?}");
    }
}

#[test]
fn counts_about_to_overflow_go_to_the_ring_and_add_up() {
    use rampart_testkit::frame::tcp::{ACK, FIN, RST, SYN};
    // A slot keeps each TCP count in 8 bits: 600 SYNs, 300 SYN-ACKs, 300
    // RSTs and 300 FINs of one connection (both ways, IPv4 and IPv6) send
    // its counts to the ring each time one would pass 255.
    let p = load(1 << 20, true, None);
    pin_to(0);
    let mut frames = Vec::new();
    for (a, b) in [("10.0.0.1", "10.0.0.2"), ("2001:db8::1", "2001:db8::2")] {
        let f = |flags: u8, back: bool| {
            let (s, d, sp, dp) = if back {
                (b, a, 80, 40000)
            } else {
                (a, b, 40000, 80)
            };
            rampart_testkit::frame::Frame::tcp(s, d, sp, dp)
                .flags(flags)
                .build()
        };
        frames.extend(std::iter::repeat_n(f(SYN, false), 600));
        frames.extend(std::iter::repeat_n(f(SYN | ACK, true), 300));
        frames.extend(std::iter::repeat_n(f(RST, false), 300));
        frames.extend(std::iter::repeat_n(f(FIN | ACK, true), 300));
        frames.extend(std::iter::repeat_n(f(ACK, false), 10));
    }
    for f in &frames {
        assert_eq!(
            testrun::run_packet(p.prog_fd(), f, 0).unwrap().retval,
            XDP_PASS
        );
    }
    let c = p.tap_counters().unwrap();
    assert_eq!(
        (c.aggregated, c.ring_full),
        (frames.len() as u64, 0),
        "{c:?}"
    );
    // Per connection at least 2 (SYN) + 1 (SYN-ACK) + 1 (RST) + 1 (FIN).
    assert!(c.agg_flushed >= 10, "{c:?}");
    let got = summed(harvest_all(&p, 1_000_000_000));
    let want = summed(
        frames
            .iter()
            .map(|f| FlowPart::from_tuple(&parse_frame(f, 0).unwrap())),
    );
    assert_eq!(got.len(), 2);
    for (k, w) in &want {
        assert_eq!(untimed(got[k]), untimed(*w), "{k:?}");
        let d = &got[k].dir;
        assert_eq!(d[0].syn + d[1].syn, 600);
        assert_eq!(d[0].ack + d[1].ack, 310, "FIN-ACKs and ACKs");
    }
}

/// Wait (spinning) until the program's clock is in a later epoch.
fn next_epoch(epoch_ns: u64) {
    let e = epoch_now(epoch_ns);
    while epoch_now(epoch_ns) == e {
        std::hint::spin_loop();
    }
}

#[test]
fn slots_reused_before_userspace_read_them_send_their_counts_to_the_ring() {
    rampart_lab::testing::require_kernel();
    // One bucket per CPU, 1 ms epochs: every connection after the first
    // two of an epoch collides, and each new epoch reuses the slots of the
    // last one, which userspace has not read.
    let epoch_ns = 1_000_000;
    let p = OffloadProgram::load_sized(
        Entry::Tap,
        None,
        None,
        TapSizes {
            ring_bytes: 1 << 20,
            agg_slots: 2,
            agg6_slots: 2,
        },
    )
    .unwrap();
    p.configure(&OffloadConfig {
        key_mode: None,
        ..OffloadConfig::default()
    })
    .unwrap();
    p.configure_tap(true, epoch_ns).unwrap();
    let ips: Vec<Vec<u8>> = corpus()
        .into_iter()
        .map(|x| x.1)
        .filter(|f| parse_frame(f, 0).is_ok())
        .collect();
    let rounds = 20;
    rampart_lab::testing::pin_this_thread(0);
    for _ in 0..rounds {
        next_epoch(epoch_ns);
        for f in &ips {
            assert_eq!(
                testrun::run_packet(p.prog_fd(), f, 0).unwrap().retval,
                XDP_PASS
            );
        }
    }
    let c = p.tap_counters().unwrap();
    assert!(c.agg_flushed > 0, "slots were reused: {c:?}");
    assert!(c.agg_full > 0, "connections collided: {c:?}");
    assert_eq!(c.ring_full, 0, "{c:?}");
    assert_eq!(
        c.aggregated + c.agg_full,
        (ips.len() * rounds) as u64,
        "{c:?}"
    );
    let got = summed(harvest_all(&p, epoch_ns));
    let want = summed((0..rounds).flat_map(|_| {
        ips.iter()
            .map(|f| FlowPart::from_tuple(&parse_frame(f, 0).unwrap()))
    }));
    assert_eq!(got.len(), want.len());
    for (k, w) in &want {
        assert_eq!(untimed(got[k]), untimed(*w), "{k:?}");
    }
}

#[test]
fn counts_read_while_both_cpus_update_them_arrive_exactly_once() {
    rampart_lab::testing::require_kernel();
    // 1 ms epochs: the program reuses slots (its compare-and-swap) while
    // userspace takes finished epochs (its own) many times over.
    let epoch_ns = 1_000_000;
    let p = load_agg(4096, epoch_ns);
    let corpus: Vec<Vec<u8>> = corpus().into_iter().map(|x| x.1).collect();
    let cpus = rampart_dataplane::maps::possible_cpus().min(2);
    let rounds = 300;
    let table = AggTables::map(p.tap_maps().unwrap()).unwrap();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let mut got = Vec::new();
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            let (p, corpus, done) = (&p, &corpus, &done);
            s.spawn(move || {
                rampart_lab::testing::pin_this_thread(cpu);
                for _ in 0..rounds {
                    for f in corpus {
                        assert_eq!(
                            testrun::run_packet(p.prog_fd(), f, 0).unwrap().retval,
                            XDP_PASS
                        );
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        // Userspace as the tap's reader (its slots merged across CPUs, as the
        // source takes them): every epoch finished a while ago
        // (two epochs back: a CPU still inside the program with an older
        // time is microseconds behind), then what the rings hold.
        let mut reads = 0;
        while done.load(std::sync::atomic::Ordering::SeqCst) < cpus {
            let e = epoch_now(epoch_ns).saturating_sub(2);
            table.harvest_merged(e, epoch_ns, |part, _| got.push(part));
            let (tuples, slots) = drain_all(&p);
            let now = epoch_now(epoch_ns) + 1;
            got.extend(slots.iter().map(|sl| sl.part(sl.epoch(now) * epoch_ns)));
            got.extend(tuples.iter().map(FlowPart::from_tuple));
            reads += 1;
        }
        assert!(reads > 0);
    });
    got.extend(harvest_all(&p, epoch_ns));
    let c = p.tap_counters().unwrap();
    assert_eq!(c.ring_full, 0, "{c:?}");
    let want = corpus_parts(&corpus, rounds * cpus);
    let got = summed(got.into_iter().filter(|x| x.packets() > 0));
    assert_eq!(got.len(), want.len(), "one part per connection");
    for (k, w) in &want {
        assert_eq!(untimed(got[k]), untimed(*w), "{k:?}: every packet once");
    }
    assert_eq!(
        c.aggregated + c.agg_full,
        want.values().map(FlowPart::packets).sum::<u64>()
    );
}

#[test]
fn the_next_stage_runs_after_the_tap() {
    let p = load(1 << 20, false, None);
    let f = corpus().remove(0).1;
    assert_eq!(
        testrun::run_packet(p.prog_fd(), &f, 0).unwrap().retval,
        XDP_PASS
    );
    // A stage that drops everything, in the tenant slot of the tap's chain.
    use libbpf_rs::skel::{OpenSkel, SkelBuilder};
    use rampart_dataplane::chain::{CHAIN_SLOT_DDOS, CHAIN_SLOT_TENANT};
    use std::os::fd::AsFd;
    let skel = rampart_bpf::xdp_drop::XdpDropSkelBuilder::default()
        .open(rampart_dataplane::skel::object_storage())
        .unwrap()
        .load()
        .unwrap();
    let next = skel.progs.xdp_drop.as_fd().as_raw_fd() as u32;
    let slot = p.tap_maps().unwrap().next.as_raw_fd();
    // A stage before the tap's own slot is never run after it.
    rampart_dataplane::maps::update_raw(
        slot,
        &CHAIN_SLOT_DDOS.to_ne_bytes(),
        &next.to_ne_bytes(),
        0,
    )
    .unwrap();
    assert_eq!(
        testrun::run_packet(p.prog_fd(), &f, 0).unwrap().retval,
        XDP_PASS
    );
    rampart_dataplane::maps::update_raw(
        slot,
        &CHAIN_SLOT_TENANT.to_ne_bytes(),
        &next.to_ne_bytes(),
        0,
    )
    .unwrap();
    assert_eq!(
        testrun::run_packet(p.prog_fd(), &f, 0).unwrap().retval,
        XDP_DROP
    );
    assert_eq!(
        drain_ring(&p).len(),
        3,
        "the tap ran before the next stage every time"
    );
    rampart_dataplane::maps::delete_raw(slot, &CHAIN_SLOT_TENANT.to_ne_bytes()).unwrap();
    assert_eq!(
        testrun::run_packet(p.prog_fd(), &f, 0).unwrap().retval,
        XDP_PASS
    );
}

/// TCX_NEXT (-1): the egress tap hands every frame on.
const TCX_NEXT: u32 = u32::MAX;

/// What the host's stack hands the device for `payload` bytes of TCP.
fn send(payload: usize, flags: u8) -> Vec<u8> {
    rampart_testkit::frame::Frame::tcp("10.0.0.2", "10.0.0.1", 80, 40000)
        .flags(flags)
        .payload(&vec![0x5a; payload])
        .build()
}

fn egress_fd(p: &OffloadProgram) -> std::os::fd::RawFd {
    p.tap_maps().unwrap().egress.as_raw_fd()
}

#[test]
fn egress_sees_the_hosts_sends_and_splits_a_gso_send_into_its_segments() {
    use rampart_testkit::frame::tcp::{ACK, FIN, PSH};
    let p = load(1 << 20, false, None);
    let eg = egress_fd(&p);
    // A plain send: the userspace tuple, the frame untouched.
    let f = send(100, ACK | PSH);
    let out = testrun::run_skb(eg, &f, testrun::Skb::default()).unwrap();
    assert_eq!((out.retval, &out.data), (TCX_NEXT, &f));
    let got = drain_ring(&p);
    assert_eq!(got.len(), 1);
    assert!(rampart_stream::tuple::same(
        &StreamTuple { ts_ns: 0, ..got[0] },
        &parse_frame(&f, 0).unwrap()
    ));
    // 2,500 bytes leaving as segments of 1,000: three packets of 1,040,
    // 1,040 and 540 IP bytes; FIN and PSH only on the last, as the
    // segmentation writes them.
    let f = send(2500, ACK | PSH | FIN);
    let gso = testrun::Skb {
        gso_segs: 3,
        gso_size: 1000,
    };
    let out = testrun::run_skb(eg, &f, gso).unwrap();
    assert_eq!((out.retval, &out.data), (TCX_NEXT, &f));
    let got = drain_ring(&p);
    let seen: Vec<(u16, u8)> = got.iter().map(|t| (t.ip_len, t.tcp_flags)).collect();
    assert_eq!(
        seen,
        [(1040, ACK), (1040, ACK), (540, ACK | PSH | FIN)],
        "one tuple per segment"
    );
    // More segments than the tap splits: one tuple, counted as such
    // (a test run's frame fits a page, hence the small segments).
    let f = send(2600, ACK);
    let many = testrun::Skb {
        gso_segs: 65,
        gso_size: 40,
    };
    testrun::run_skb(eg, &f, many).unwrap();
    let got = drain_ring(&p);
    assert_eq!(got.iter().map(|t| t.ip_len).collect::<Vec<_>>(), [2640]);
    let c = p.tap_counters().unwrap();
    assert_eq!(
        (c.frames, c.egress, c.tuples, c.gso_extra, c.gso_whole),
        (3, 3, 5, 2, 1),
        "{c:?}"
    );
}

#[test]
fn aggregation_counts_a_gso_send_as_its_segments() {
    use rampart_testkit::frame::tcp::{ACK, PSH};
    let p = load(1 << 20, true, None);
    let gso = testrun::Skb {
        gso_segs: 3,
        gso_size: 1000,
    };
    let out = testrun::run_skb(egress_fd(&p), &send(2500, ACK | PSH), gso).unwrap();
    assert_eq!(out.retval, TCX_NEXT);
    // The three segments as they leave, through the userspace parts.
    let mut want: Option<FlowPart> = None;
    for f in [send(1000, ACK), send(1000, ACK), send(500, ACK | PSH)] {
        let part = FlowPart::from_tuple(&parse_frame(&f, 0).unwrap());
        match &mut want {
            Some(w) => w.merge(&part),
            None => want = Some(part),
        }
    }
    let want = want.unwrap();
    let got = harvest(&p);
    assert_eq!(got.len(), 1, "{got:?}");
    let parts = &got[&want.key];
    assert_eq!(parts.len(), 1, "one CPU ran it");
    assert_eq!(untimed(parts[0]), untimed(want));
    assert_eq!(parts[0].packets(), 3);
    let c = p.tap_counters().unwrap();
    assert_eq!((c.aggregated, c.gso_extra, c.tuples), (1, 2, 0), "{c:?}");
}

/// What the tap costs per packet in XDP, BPF_PROG_RUN, one run: tuples
/// (a ring-buffer record) against aggregation (an update of the
/// connection's slot), on 65,536 connections of one packet each — first
/// packets (the slots are taken), again (they hold them, but 65,536 of
/// them do not fit the caches), the first packets of the next epoch after
/// userspace read the last one in place (the slots start their counts
/// again) — and on one frame repeated (everything cache-hot); and what
/// userspace pays to take a finished epoch in place (`harvest`, per
/// connection, each slot made a part). The program is configured as
/// flowmeter runs it on the tap (no FlowID); `TAP_COST_FLOWID=1` adds the
/// five-tuple FlowID per packet (as this test did before 2026-11-28).
/// `TAP_COST_SLOTS=N` sets the aggregation table's slots per CPU (default:
/// the shipped default), `TAP_COST_CONNS=N` the connections. A benchmark,
/// not a test: run with
/// `cargo test --profile ci -p rampart-stream --test prog_stream_tap -- --ignored --nocapture tap_cost`.
#[test]
#[ignore = "a benchmark"]
fn tap_cost() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    let n = env("TAP_COST_CONNS").unwrap_or(65_536);
    let sizes = TapSizes {
        ring_bytes: 64 << 20,
        agg_slots: env("TAP_COST_SLOTS").unwrap_or(TapSizes::default().agg_slots),
        ..TapSizes::default()
    };
    let key_mode =
        (env("TAP_COST_FLOWID") == Some(1)).then_some(rampart_stream::flowid::KeyMode::FiveTuple);
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            rampart_testkit::frame::Frame::udp(
                std::net::Ipv4Addr::from(0x0a00_0000 + i),
                "10.10.0.2",
                1000 + (i % 1000) as u16,
                53,
            )
            .zeros(18)
            .build()
        })
        .collect();
    let mut json = Vec::new();
    for (name, aggregate) in [("tuples", false), ("aggregate", true)] {
        rampart_lab::testing::require_kernel();
        let p = OffloadProgram::load_sized(Entry::Tap, None, None, sizes).unwrap();
        p.configure(&OffloadConfig {
            key_mode,
            ..OffloadConfig::default()
        })
        .unwrap();
        p.configure_tap(aggregate, 1_000_000_000).unwrap();
        pin_to(0);
        let table = AggTables::map(p.tap_maps().unwrap()).unwrap();
        let pass = || {
            let ns: u128 = frames
                .iter()
                .map(|f| {
                    testrun::run_packet(p.prog_fd(), f, 0)
                        .unwrap()
                        .duration
                        .as_nanos()
                })
                .sum();
            (ns / u128::from(n)) as u64
        };
        let first = pass();
        let again = (0..3).map(|_| pass()).min().unwrap();
        // Right after an epoch ends: userspace takes it, the next begins.
        let mut user_ns = u64::MAX;
        let mut emitted = 0;
        let mut epoch = EpochParts::default();
        let next = (0..3)
            .map(|_| {
                next_epoch(1_000_000_000);
                let (ns, parts) = user_epoch(&p, &table, &mut epoch, epoch_now(1_000_000_000) - 1);
                if parts > 0 && ns / (parts as u64) < user_ns {
                    emitted = parts;
                    user_ns = ns / parts as u64;
                }
                pass()
            })
            .min()
            .unwrap();
        drain_all(&p);
        let hot = testrun::mean_duration(p.prog_fd(), &frames[7], 200_000)
            .unwrap()
            .as_nanos() as u64;
        let user_ns = if aggregate { user_ns } else { 0 };
        let c = p.tap_counters().unwrap();
        println!(
            "{name:>9}: first packets {first} ns, again {again} ns, next epoch {next} ns, one frame repeated {hot} ns; userspace per epoch {user_ns} ns per connection ({emitted} parts; {} of {} packets as tuples)",
            if aggregate { c.agg_full } else { c.tuples },
            c.frames
        );
        json.push(format!(
            "\"{name}\":{{\"first_ns\":{first},\"again_ns\":{again},\"next_epoch_ns\":{next},\"hot_ns\":{hot},\"user_ns_per_connection\":{user_ns},\"tuples\":{},\"frames\":{}}}",
            if aggregate { c.agg_full } else { c.tuples },
            c.frames
        ));
    }
    println!(
        "{{{},\"connections\":{n},\"slots_per_cpu\":{},\"flow_id\":{},\"method\":\"BPF_PROG_RUN, 64-byte UDP, one run per packet, pinned to CPU 0; again, next epoch = best of 3 passes; userspace = best of 3: the finished epoch as the tap source assembles it (EpochParts: slots taken in place and merged across CPUs, the ring's tuples folded in, ordered), per part\"}}",
        json.join(","),
        sizes.agg_slots,
        key_mode.is_some()
    );
}

/// What the tap source does with finished epoch `e` (`TapSource::run_parts`),
/// timed: the ring's tuples and slot records made parts and folded by
/// connection, the table's slots of `e` taken in place, both put together
/// and ordered ([`EpochParts`]). Reading the rings is not timed (the
/// source keeps them mapped; this test maps them for each read). Returns
/// (ns, parts).
fn user_epoch(
    p: &OffloadProgram,
    table: &AggTables,
    epoch: &mut EpochParts,
    e: u64,
) -> (u64, usize) {
    let epoch_ns = 1_000_000_000;
    let late = std::sync::atomic::AtomicU64::new(0);
    let (tuples, slots) = drain_all(p);
    let t = std::time::Instant::now();
    let mut other: rustc_hash::FxHashMap<ConnKey, FlowPart> = rustc_hash::FxHashMap::default();
    let parts = tuples
        .iter()
        .map(FlowPart::from_tuple)
        .chain(slots.iter().map(|s| s.part(s.epoch(e + 1) * epoch_ns)));
    for x in parts {
        other.entry(x.key).and_modify(|a| a.merge(&x)).or_insert(x);
    }
    epoch.take(table, e, epoch_ns, &late);
    epoch.add(&mut other);
    let (mut n, mut pk) = (0usize, 0u64);
    for x in epoch.ordered() {
        n += 1;
        pk += x.packets();
    }
    let ns = t.elapsed().as_nanos() as u64;
    assert!(pk >= n as u64);
    (ns, n)
}

/// Pin the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t, then CPU_SET on a valid index.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "pinning to CPU {cpu}");
}

/// One shared ring buffer or one per CPU? Each CPU's XDP writes its
/// records with `bpf_ringbuf_output`, which takes the ring's spin lock:
/// with one shared ring the CPUs contend for that lock and its cache
/// lines. Measured under BPF_PROG_RUN (tuples mode, one 64-byte UDP frame
/// repeated, nobody reading), one program each time: one CPU alone; two
/// CPUs at once with CPU 0's ring in both slots (one shared ring, as the
/// tap had); two CPUs at once on a ring each (the tap as it is).
/// Run on an idle machine with at least two CPUs:
/// `cargo test --profile ci -p rampart-stream --test prog_stream_tap -- --ignored --nocapture tap_ring_contention`
#[test]
#[ignore = "a benchmark: run by hand on an idle machine"]
fn tap_ring_contention() {
    rampart_lab::testing::require_kernel();
    const REPEAT: u32 = 200_000;
    let frame = rampart_testkit::frame::Frame::udp(
        std::net::Ipv4Addr::new(10, 0, 0, 7),
        "10.10.0.2",
        1000,
        53,
    )
    .zeros(18)
    .build();
    // Large enough for every record of a measurement (no `ring full`
    // shortcut): 2 × 3 × REPEAT records of < 100 bytes in one ring.
    let fresh = || load(256 << 20, false, None);
    // ns per packet on `cpu`, the repeat run `rounds` times (best of).
    let on = |cpu: usize, p: &OffloadProgram| -> u64 {
        pin_to(cpu);
        (0..3)
            .map(|_| {
                testrun::mean_duration(p.prog_fd(), &frame, REPEAT)
                    .unwrap()
                    .as_nanos() as u64
            })
            .min()
            .unwrap()
    };
    let ncpu = std::thread::available_parallelism().map_or(1, usize::from);
    assert!(ncpu >= 2, "needs two CPUs");
    let mut rows = Vec::new();
    for round in 0..5 {
        let one = on(0, &fresh());
        let shared = {
            let p = fresh();
            let m = p.tap_maps().unwrap();
            rampart_dataplane::maps::update_raw(
                m.ring_slots.as_raw_fd(),
                &1u32.to_ne_bytes(),
                &m.rings[0].as_raw_fd().to_ne_bytes(),
                0,
            )
            .unwrap();
            let (a, b) = std::thread::scope(|s| {
                let a = s.spawn(|| on(0, &p));
                let b = s.spawn(|| on(1, &p));
                (a.join().unwrap(), b.join().unwrap())
            });
            (a + b) / 2
        };
        let split = {
            let p = fresh();
            let (a, b) = std::thread::scope(|s| {
                let a = s.spawn(|| on(0, &p));
                let b = s.spawn(|| on(1, &p));
                (a.join().unwrap(), b.join().unwrap())
            });
            (a + b) / 2
        };
        println!(
            "round {round}: one CPU {one} ns; two CPUs, one ring {shared} ns; two CPUs, a ring each {split} ns"
        );
        rows.push((one, shared, split));
    }
    let median = |f: fn(&(u64, u64, u64)) -> u64| {
        let mut v: Vec<u64> = rows.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (one, shared, split) = (median(|r| r.0), median(|r| r.1), median(|r| r.2));
    println!(
        "{{\"one_cpu_ns\":{one},\"two_cpus_one_ring_ns\":{shared},\"two_cpus_ring_each_ns\":{split},\"shared_over_split\":{:.2},\"rounds\":{},\"method\":\"BPF_PROG_RUN repeat {REPEAT}, tuples mode, one 64-byte UDP frame, best of 3 per CPU, median of rounds\"}}",
        shared as f64 / split.max(1) as f64,
        rows.len()
    );
}
