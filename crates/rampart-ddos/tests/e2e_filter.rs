//! End-to-end tests in a lab: the filter attached to host0 with real
//! traffic from the generator in wan — exact per-source drops, bulk
//! updates under traffic that keep counters and leak nothing, feature slot
//! swaps under traffic that lose and duplicate nothing, detach.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rampart_dataplane::xdp::XdpMode;
use rampart_ddos::features::Features;
use rampart_ddos::filter::{Filter, FilterConfig, Scope};
use rampart_ddos::{BlockEntry, Prefix};
use rampart_lab::dist::{self, Dist};
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::testing::{settle, TestLab};
use rampart_lab::topology::HOST_IF;

struct Attached {
    filter: Filter,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = Filter::detach(self.filter.name());
    }
}

fn attach(lab: &TestLab, cfg: &FilterConfig) -> Attached {
    let scope = Scope::new(Some(&lab.host_ns()), HOST_IF).unwrap();
    Attached {
        filter: Filter::attach(&scope, cfg, XdpMode::Native).expect("attach"),
    }
}

fn exact() -> FilterConfig {
    FilterConfig {
        max_entries: 1 << 18,
        max_other: 1024,
        sample_shift: 0,
        features_capacity: 1 << 14,
        ..Default::default()
    }
}

fn host(spec: &GenSpec, i: u32) -> BlockEntry {
    BlockEntry {
        prefix: Prefix::host(spec.source_addr(i)),
        ttl: None,
    }
}

/// Every packet the filter has judged (its drop and pass counters).
fn judged(f: &Filter) -> u64 {
    let st = f.stats().unwrap();
    st.drops
        .iter()
        .chain(&st.passes)
        .map(|(_, c)| c.packets)
        .sum()
}

fn in_gen_range(a: &IpAddr) -> bool {
    Prefix::parse("172.16.0.0/12").unwrap().contains(a)
}

#[test]
fn exact_drops_per_source_then_detach_removes_everything() {
    let lab = TestLab::up("dfe", 0);
    let a = attach(&lab, &exact());
    let n = 200u32;
    let slots = dist::slots_for(n, rampart_bpf::abi::lab::GEN_SLOTS_MAX);
    // One full walk of the schedule: each source sends exactly its quota.
    // Paced so that a 1 ms batch fits the 256-frame veth rings (a full-speed
    // burst can overflow the first hop, which would make counts inexact).
    let spec = GenSpec {
        sources: n,
        limit: Limit::Count(slots as u64),
        pps: Some(100_000.0),
        ..GenSpec::default()
    };
    let quotas = dist::quotas(&Dist::Uniform.shares(n), slots).unwrap();
    let blocked: Vec<BlockEntry> = (0..n).step_by(2).map(|i| host(&spec, i)).collect();
    let mut f = Filter::open(a.filter.name()).unwrap();
    f.block(&blocked).unwrap();
    let mut feats = Features::open(f.name()).unwrap();
    feats.snapshot().unwrap();

    let (j0, lost0) = (judged(&f), lost_on_the_wire(&lab));
    let gen = Generator::new(&lab, &spec).unwrap();
    let r = gen.run(&AtomicBool::new(false)).unwrap();
    assert_eq!(r.sent_packets, slots as u64);
    settle(&lab, lost0, slots as u64, || judged(&f) - j0);

    let want_drop: u64 = (0..n)
        .step_by(2)
        .map(|i| u64::from(quotas[i as usize]))
        .sum();
    let st = f.stats().unwrap();

    assert_eq!(st.dropped("blacklist"), want_drop);
    let entries: HashMap<Prefix, u64> = f
        .entries()
        .unwrap()
        .into_iter()
        .map(|e| (e.prefix, e.packets))
        .collect();
    for i in (0..n).step_by(2) {
        assert_eq!(
            entries[&Prefix::host(spec.source_addr(i))],
            u64::from(quotas[i as usize]),
            "source {i}"
        );
    }
    // The others reached the feature stage, each exactly its quota.
    let snap = feats.snapshot().unwrap();
    let seen: HashMap<IpAddr, u64> = snap
        .records
        .iter()
        .filter(|r| in_gen_range(&r.src))
        .map(|r| (r.src, r.packets))
        .collect();
    assert_eq!(seen.len(), (n / 2) as usize);
    for i in (1..n).step_by(2) {
        assert_eq!(
            seen[&spec.source_addr(i)],
            u64::from(quotas[i as usize]),
            "source {i}"
        );
    }

    let name = f.name().to_string();
    let dir = f.dir().to_path_buf();
    drop(feats);
    drop(f);
    drop(a);
    assert!(!dir.exists(), "pins removed");
    assert!(!rampart_ddos::filter::installed().contains(&name));
    assert_eq!(
        rampart_dataplane::xdp::attached_prog_id(Some(&lab.host_ns()), HOST_IF).unwrap(),
        None
    );
}

#[test]
fn bulk_updates_under_traffic_keep_counters_and_leak_nothing() {
    let lab = TestLab::up("dbu", 0);
    let a = attach(&lab, &exact());
    let n = 4096u32;
    let spec = GenSpec {
        sources: n,
        limit: Limit::Seconds(30.0),
        ..GenSpec::default()
    };
    let stayers: Vec<BlockEntry> = (0..n).map(|i| host(&spec, i)).collect();
    let mut f = Filter::open(a.filter.name()).unwrap();
    f.block(&stayers).unwrap();
    let mut feats = Features::open(f.name()).unwrap();
    feats.snapshot().unwrap();
    let gen = Generator::new(&lab, &spec).unwrap();
    let stop = AtomicBool::new(false);
    let ids: Vec<u32> = {
        let e = f.entries().unwrap();
        let by: HashMap<Prefix, u32> = e.iter().map(|e| (e.prefix, e.id)).collect();
        stayers.iter().map(|s| by[&s.prefix]).collect()
    };
    let mut last: Vec<u64> = vec![0; ids.len()];
    let mut publishes = 0;
    std::thread::scope(|s| {
        let g = s.spawn(|| gen.run(&stop));
        // Wait for traffic to flow.
        while f.stats().unwrap().dropped("blacklist") < 10_000 {
            std::thread::sleep(Duration::from_millis(10));
        }
        for round in 0..6u32 {
            // 100,000 other entries come and go around the stayers: each
            // update rebuilds and republishes the whole exact table.
            let mut list = stayers.clone();
            if round % 2 == 0 {
                list.extend((0..100_000u32).map(|i| BlockEntry {
                    prefix: Prefix::host(IpAddr::V4(std::net::Ipv4Addr::from(
                        0x0a00_0000 + i * 3 + round,
                    ))),
                    ttl: None,
                }));
            }
            let r = f.replace(&list).unwrap();
            assert_eq!(r.kept, if round == 0 { n as usize } else { r.kept });
            assert!(r.table.is_some());
            publishes += 1;
            for (k, id) in ids.iter().enumerate() {
                let c = f.counter(*id).packets;
                assert!(
                    c >= last[k],
                    "counter of stayer {k} went back from {} to {c}",
                    last[k]
                );
                last[k] = c;
            }
        }
        stop.store(true, Ordering::Relaxed);
        g.join().unwrap().unwrap();
    });
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(publishes, 6);
    let st = f.stats().unwrap();
    let sum: u64 = ids.iter().map(|id| f.counter(*id).packets).sum();
    // Every packet was dropped by a stayer's entry, counted once.
    assert!(st.dropped("blacklist") > 100_000);
    assert_eq!(sum, st.dropped("blacklist"));
    assert!(
        ids.iter().all(|id| f.counter(*id).packets > 0),
        "every stayer kept dropping"
    );
    // Not one packet of the generator's sources got past the filter.
    let snap = feats.snapshot().unwrap();
    assert_eq!(
        snap.records.iter().filter(|r| in_gen_range(&r.src)).count(),
        0
    );
    assert_eq!(f.entries().unwrap().len(), n as usize);
}

#[test]
fn feature_slot_swaps_under_traffic_conserve_counts() {
    let lab = TestLab::up("dss", 0);
    let a = attach(&lab, &exact());
    let n = 1000u32;
    let slots = dist::slots_for(n, rampart_bpf::abi::lab::GEN_SLOTS_MAX) as u64;
    // Three full walks, paced so that nothing is lost before host0.
    let spec = GenSpec {
        sources: n,
        limit: Limit::Count(3 * slots),
        pps: Some(100_000.0),
        ..GenSpec::default()
    };
    let quotas = dist::quotas(&Dist::Uniform.shares(n), slots as usize).unwrap();
    let mut feats = Features::open(a.filter.name()).unwrap();
    feats.snapshot().unwrap();
    let judge = Filter::open(a.filter.name()).unwrap();
    let (j0, lost0) = (judged(&judge), lost_on_the_wire(&lab));
    let gen = Generator::new(&lab, &spec).unwrap();
    let done = AtomicBool::new(false);
    let mut totals: HashMap<IpAddr, u64> = HashMap::new();
    let mut all = 0u64;
    let mut intervals = 0;
    let mut busy = 0;
    std::thread::scope(|s| {
        let g = s.spawn(|| {
            let r = gen.run(&AtomicBool::new(false));
            done.store(true, Ordering::Relaxed);
            r
        });
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(3));
            let snap = feats.snapshot().unwrap();
            intervals += 1;
            if snap.records.iter().any(|r| in_gen_range(&r.src)) {
                busy += 1;
            }
            for r in &snap.records {
                all += r.packets;
                if in_gen_range(&r.src) {
                    *totals.entry(r.src).or_default() += r.packets;
                }
            }
        }
        let r = g.join().unwrap().unwrap();
        assert_eq!(r.sent_packets, 3 * slots);
    });
    settle(&lab, lost0, 3 * slots, || judged(&judge) - j0);
    let snap = feats.snapshot().unwrap();
    for r in &snap.records {
        all += r.packets;
        if in_gen_range(&r.src) {
            *totals.entry(r.src).or_default() += r.packets;
        }
    }
    assert!(
        busy > 10,
        "only {busy} of {intervals} intervals saw traffic: the swaps did not happen under traffic"
    );
    // Every packet sent was recorded in exactly one interval: each source
    // has exactly three quotas over all intervals (a packet lost at a swap
    // would make one smaller, one counted twice one larger). The tests of
    // this binary run at once, and a busy machine's veth rings may then
    // lose frames before XDP sees them (the veths count those): with such
    // losses, no source may have more than its quotas, and what is missing
    // is at most what the wire lost.
    let lost = lost_on_the_wire(&lab) - lost0;
    assert_eq!(totals.len(), n as usize);
    let gen_total: u64 = totals.values().sum();
    assert!(
        gen_total <= 3 * slots && 3 * slots - gen_total <= lost,
        "{gen_total} of {} recorded, the wire lost {lost}",
        3 * slots
    );
    // The rest is the lab's own background (IPv6 neighbour discovery, ...).
    assert!(
        all - gen_total < 1000,
        "{} background packets",
        all - gen_total
    );
    let spec1 = GenSpec {
        sources: n,
        ..GenSpec::default()
    };
    for i in 0..n {
        let (got, want) = (
            totals[&spec1.source_addr(i)],
            3 * u64::from(quotas[i as usize]),
        );
        if lost == 0 {
            assert_eq!(got, want, "source {i}");
        } else {
            assert!(got <= want, "source {i}: {got} of {want}");
        }
    }
}

#[test]
fn generic_mode_attach_filters_then_detaches() {
    let lab = TestLab::up("dgm", 0);
    let scope = Scope::new(Some(&lab.host_ns()), HOST_IF).unwrap();
    let a = Attached {
        filter: Filter::attach(&scope, &exact(), XdpMode::Generic).expect("attach --mode generic"),
    };
    assert!(
        rampart_dataplane::xdp::attached_prog_id(Some(&lab.host_ns()), HOST_IF)
            .unwrap()
            .is_some()
    );
    let n = 16u32;
    let slots = dist::slots_for(n, rampart_bpf::abi::lab::GEN_SLOTS_MAX);
    let spec = GenSpec {
        sources: n,
        limit: Limit::Count(slots as u64),
        pps: Some(100_000.0),
        ..GenSpec::default()
    };
    let quotas = dist::quotas(&Dist::Uniform.shares(n), slots).unwrap();
    let mut f = Filter::open(a.filter.name()).unwrap();
    f.block(&[host(&spec, 3)]).unwrap();
    let (j0, lost0) = (judged(&f), lost_on_the_wire(&lab));
    let r = Generator::new(&lab, &spec)
        .unwrap()
        .run(&AtomicBool::new(false))
        .unwrap();
    assert_eq!(r.sent_packets, slots as u64);
    settle(&lab, lost0, slots as u64, || judged(&f) - j0);
    let st = f.stats().unwrap();
    assert_eq!(st.dropped("blacklist"), u64::from(quotas[3]));
    let e = f.entries().unwrap();
    assert_eq!((e.len(), e[0].packets), (1, u64::from(quotas[3])));
    // The other sources went on to the stack (the feature stage passes them).
    assert!(st.passed("clean") >= slots as u64 - u64::from(quotas[3]));
    drop(f);
    drop(a);
    assert_eq!(
        rampart_dataplane::xdp::attached_prog_id(Some(&lab.host_ns()), HOST_IF).unwrap(),
        None
    );
}

/// A source policed at R pps sending far above R (≥ 10 × R) through a real
/// interface: most of its packets are dropped as `policed`, some pass, and
/// every packet is accounted for — passed ones reach the feature stage,
/// the rest are counted by the policer and the filter's `policed` reason.
/// A second, unpoliced source in the same run is untouched. IPv4 and IPv6.
#[test]
fn a_policed_source_far_above_its_rate_is_mostly_dropped_as_policed() {
    let lab = TestLab::up("dpo", 0);
    let a = attach(&lab, &exact());
    let f = &a.filter;
    const RATE: u32 = 1000;
    for ipv6 in [false, true] {
        // Two sources sharing 40,000 pps: 20,000 pps each, 20 × RATE, for
        // about a second (the exact rate does not matter: the bucket
        // passes at most a burst of RATE plus RATE per second).
        let spec = GenSpec {
            sources: 2,
            ipv6,
            limit: Limit::Count(40_000),
            pps: Some(40_000.0),
            ..GenSpec::default()
        };
        let (policed, free) = (spec.source_addr(0), spec.source_addr(1));
        f.police(
            Prefix::host(policed),
            RATE,
            rampart_ddos::filter::POLICE_ALL,
        )
        .unwrap();
        let mut feats = Features::open(f.name()).unwrap();
        feats.snapshot().unwrap();
        let dropped_before = f.stats().unwrap().dropped("policed");
        // A busy machine's veth rings can overflow and lose a few of the
        // generator's frames before XDP sees them; the kernel counts them.
        let lost_before = lost_on_the_wire(&lab);

        let r = Generator::new(&lab, &spec)
            .unwrap()
            .run(&AtomicBool::new(false))
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));

        let seen: HashMap<IpAddr, u64> = feats
            .snapshot()
            .unwrap()
            .records
            .iter()
            .map(|r| (r.src, r.packets))
            .fold(HashMap::new(), |mut m, (s, n)| {
                *m.entry(s).or_default() += n;
                m
            });
        let e = f
            .policed()
            .unwrap()
            .into_iter()
            .find(|(p, _)| *p == Prefix::host(policed))
            .map(|(_, e)| e)
            .expect("still policed");
        let what = if ipv6 { "ipv6" } else { "ipv4" };
        assert!(e.passed > 0, "{what}: some of its packets pass: {e:?}");
        assert!(
            e.dropped > 5 * e.passed,
            "{what}: most are dropped at 20 × its rate: {e:?}"
        );
        assert_eq!(
            f.stats().unwrap().dropped("policed") - dropped_before,
            e.dropped,
            "{what}: every policer drop is counted under the reason `policed`"
        );
        let got = |a: &IpAddr| seen.get(a).copied().unwrap_or(0);
        assert_eq!(
            got(&policed),
            e.passed,
            "{what}: what the policer passed reached the feature stage"
        );
        let lost = lost_on_the_wire(&lab) - lost_before;
        let accounted = got(&policed) + e.dropped + got(&free);
        assert!(
            accounted <= r.sent_packets,
            "{what}: {accounted} packets counted, only {} sent",
            r.sent_packets
        );
        // Whatever did not reach XDP was reported lost by the veths.
        assert!(
            r.sent_packets - accounted <= lost,
            "{what}: {} of {} packets unaccounted for, the wire reported {lost} lost",
            r.sent_packets - accounted,
            r.sent_packets
        );
        assert!(
            got(&free) > 10_000,
            "{what}: the other source is not policed"
        );
        assert!(f.unpolice(Prefix::host(policed)).unwrap());
    }
}

/// Frames the lab's veths dropped on the way to `host0` (ring overflow).
fn lost_on_the_wire(lab: &rampart_lab::Lab) -> u64 {
    rampart_lab::gen::wire_lost_total(lab).unwrap()
}
