//! Flow input's sliding window: the records of the last export interval,
//! judged every step.
//!
//! An exporter sends a flow's record when the flow reaches its active
//! timeout (the export interval) or ends, so records arrive in rounds, a
//! round holding up to an export interval of traffic. Summing an export
//! interval of arrivals and judging it once, on a clock of its own, waits
//! up to another interval after a round lands; judging each step's
//! arrivals alone would see a round as a rate several times too high, then
//! as nothing. So each step's sums are kept ([`FlowBucket`]), and every
//! step detection judges the last [`FlowWindow::steps`] of them — the last
//! export interval — with rates over the seconds they cover
//! ([`crate::detection::Interval::window_s`]) while its clock advances by
//! the step.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use super::{estimated, sorted, VictimAcc};
use crate::{FeatureRecord, Prefix, VictimRecord};

/// Steps per export interval: a round of records is judged at most a
/// third of an interval after it lands.
pub const STEPS_PER_WINDOW: usize = 3;

/// The shortest step (seconds): the daemon's loop runs every half second
/// by default, so shorter steps would not come sooner.
pub const MIN_STEP_S: f64 = 0.5;

/// One step's sums ([`super::FlowAggregator::take_bucket`]): pair
/// records, and victim records with their distinct-source registers.
#[derive(Clone, Default)]
pub struct FlowBucket {
    pub(super) pairs: Vec<FeatureRecord>,
    pub(super) victims: Vec<VictimAcc>,
    pub(super) outside: u64,
}

impl std::fmt::Debug for FlowBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowBucket")
            .field("pairs", &self.pairs.len())
            .field("victims", &self.victims.len())
            .field("outside", &self.outside)
            .finish()
    }
}

impl FlowBucket {
    /// Its records alone (pairs by destination then source, victims by
    /// prefix).
    pub fn into_records(self) -> (Vec<FeatureRecord>, Vec<VictimRecord>) {
        let victims = self.victims.iter().map(estimated).collect();
        sorted(self.pairs, victims)
    }

    /// Samples it ignored: destination outside the protected prefixes.
    pub fn outside(&self) -> u64 {
        self.outside
    }
}

/// The last export interval of steps.
#[derive(Debug, Clone)]
pub struct FlowWindow {
    export_interval_s: f64,
    steps: usize,
    max_pairs: usize,
    /// (seconds the step lasted, its sums), oldest first.
    buckets: VecDeque<(f64, FlowBucket)>,
}

impl FlowWindow {
    /// A window of `export_interval_s` seconds (anything but a positive
    /// finite length counts as 1 s) in [`STEPS_PER_WINDOW`] steps, fewer
    /// when they would be shorter than [`MIN_STEP_S`] (never fewer than
    /// one). The window's records keep at most `max_pairs` (source,
    /// destination) pairs, the newest steps' first.
    pub fn new(export_interval_s: f64, max_pairs: usize) -> Self {
        let e = if export_interval_s.is_finite() && export_interval_s > 0.0 {
            export_interval_s
        } else {
            1.0
        };
        let steps = ((e / MIN_STEP_S).floor() as usize).clamp(1, STEPS_PER_WINDOW);
        FlowWindow {
            export_interval_s: e,
            steps,
            max_pairs,
            buckets: VecDeque::with_capacity(steps + 1),
        }
    }

    /// Steps per window.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// How often the window is judged (seconds).
    pub fn step_s(&self) -> f64 {
        self.export_interval_s / self.steps as f64
    }

    /// The export interval (seconds).
    pub fn export_interval_s(&self) -> f64 {
        self.export_interval_s
    }

    /// Add the step that just ended, `secs` long; the oldest step leaves
    /// once the window holds [`FlowWindow::steps`].
    pub fn push(&mut self, secs: f64, b: FlowBucket) {
        let secs = if secs.is_finite() { secs.max(0.0) } else { 0.0 };
        self.buckets.push_back((secs, b));
        while self.buckets.len() > self.steps {
            self.buckets.pop_front();
        }
    }

    /// The seconds the window's records cover, which its rates divide by:
    /// what its steps lasted. Until it holds its steps (just after start)
    /// at least the export interval, since one round of records can hold
    /// that much traffic however long the window has been open.
    pub fn span_s(&self) -> f64 {
        let held: f64 = self.buckets.iter().map(|(s, _)| s).sum();
        if self.buckets.len() < self.steps {
            held.max(self.export_interval_s)
        } else {
            held
        }
    }

    /// The window's records: each (source, destination) pair's and each
    /// victim's counters summed over the steps (port sketches OR-ed,
    /// distinct-source registers merged by max, so a source seen in every
    /// step counts once); pairs by destination then source, victims by
    /// prefix.
    pub fn records(&self) -> (Vec<FeatureRecord>, Vec<VictimRecord>) {
        let mut pairs: HashMap<(IpAddr, IpAddr), FeatureRecord> = HashMap::new();
        for (_, b) in self.buckets.iter().rev() {
            for r in &b.pairs {
                let k = (r.src, r.dst);
                if let Some(a) = pairs.get_mut(&k) {
                    add_pair(a, r);
                } else if pairs.len() < self.max_pairs {
                    pairs.insert(k, *r);
                }
            }
        }
        let mut victims: HashMap<Prefix, VictimAcc> = HashMap::new();
        for (_, b) in &self.buckets {
            for v in &b.victims {
                match victims.get_mut(&v.rec.victim) {
                    Some(a) => add_victim(a, v),
                    None => {
                        victims.insert(v.rec.victim, v.clone());
                    }
                }
            }
        }
        sorted(
            pairs.into_values().collect(),
            victims.values().map(estimated).collect(),
        )
    }

    /// Samples ignored in the window: destination outside the protected
    /// prefixes.
    pub fn outside(&self) -> u64 {
        self.buckets
            .iter()
            .fold(0u64, |n, (_, b)| n.saturating_add(b.outside))
    }
}

fn add_pair(a: &mut FeatureRecord, r: &FeatureRecord) {
    a.packets = a.packets.saturating_add(r.packets);
    a.bytes = a.bytes.saturating_add(r.bytes);
    for (x, y) in [
        (&mut a.tcp, r.tcp),
        (&mut a.udp, r.udp),
        (&mut a.icmp, r.icmp),
        (&mut a.other, r.other),
        (&mut a.syn, r.syn),
        (&mut a.synack, r.synack),
        (&mut a.rst, r.rst),
        (&mut a.fin, r.fin),
        (&mut a.frags, r.frags),
        (&mut a.completions, r.completions),
        (&mut a.udp_amp, r.udp_amp),
    ] {
        *x = x.saturating_add(y);
    }
    a.udp_amp_bytes = a.udp_amp_bytes.saturating_add(r.udp_amp_bytes);
    a.dport_sketch[0] |= r.dport_sketch[0];
    a.dport_sketch[1] |= r.dport_sketch[1];
}

fn add_victim(a: &mut VictimAcc, v: &VictimAcc) {
    let (x, r) = (&mut a.rec, &v.rec);
    for (s, y) in [
        (&mut x.packets, r.packets),
        (&mut x.bytes, r.bytes),
        (&mut x.tcp, r.tcp),
        (&mut x.udp, r.udp),
        (&mut x.icmp, r.icmp),
        (&mut x.other, r.other),
        (&mut x.frags, r.frags),
        (&mut x.syn, r.syn),
        (&mut x.synack, r.synack),
        (&mut x.rst, r.rst),
        (&mut x.fin, r.fin),
        (&mut x.tcp_sampled, r.tcp_sampled),
        (&mut x.tcp_nosock, r.tcp_nosock),
        (&mut x.synack_sent, r.synack_sent),
        (&mut x.cookie_ack_valid, r.cookie_ack_valid),
        (&mut x.cookie_ack_invalid, r.cookie_ack_invalid),
        (&mut x.guard_dropped, r.guard_dropped),
        (&mut x.no_listener, r.no_listener),
    ] {
        *s = s.saturating_add(y);
    }
    for i in 0..x.udp_vec_pkts.len() {
        x.udp_vec_pkts[i] = x.udp_vec_pkts[i].saturating_add(r.udp_vec_pkts[i]);
        x.udp_vec_bytes[i] = x.udp_vec_bytes[i].saturating_add(r.udp_vec_bytes[i]);
    }
    for (m, y) in a.srcs.iter_mut().zip(v.srcs) {
        *m = (*m).max(y);
    }
    for (m, y) in a.syn_srcs.iter_mut().zip(v.syn_srcs) {
        *m = (*m).max(y);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::{FlowAggregator, FlowSample, TCP_ACK, TCP_FIN, TCP_SYN};
    use super::*;
    use crate::detection::{Detection, DetectionConfig, EventKind, Interval, SourceRate, Verdict};
    use crate::flow::tests::sample_from as sample;

    const TCP: u8 = 6;
    const UDP: u8 = 17;

    fn prefix(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::from([a, b, c, d])
    }

    /// `secs` of normal traffic: the web servers 10.20.0.2 and 10.20.0.3,
    /// 40 clients' connections each (one record per connection: SYN, ACK,
    /// FIN, 20 packets per 3 s); to 10.20.0.2 from 10 DNS resolvers,
    /// `dns_pps` of replies (source port 53).
    fn background(secs: f64, dns_pps: f64) -> Vec<FlowSample> {
        let mut out = Vec::new();
        for (dst, net) in [("10.20.0.2", 18), ("10.20.0.3", 19)] {
            for c in 0..40u8 {
                let mut s = sample(v4(198, net, 0, c + 1), dst, TCP, 40000, 443);
                s.tcp_flags = TCP_SYN | TCP_ACK | TCP_FIN;
                s.packets = (20.0 * secs / 3.0).round() as u64;
                s.bytes = s.packets * 600;
                out.push(s);
            }
        }
        for r in 0..10u8 {
            let mut s = sample(v4(192, 0, 2, r + 1), "10.20.0.2", UDP, 53, 33000);
            s.packets = (dns_pps * secs / 10.0).round() as u64;
            s.bytes = s.packets * 200;
            out.push(s);
        }
        out
    }

    /// A DNS reflection on 10.20.0.2: `secs` of `pps` from 50 reflectors.
    fn reflection(secs: f64, pps: f64) -> Vec<FlowSample> {
        (0..50u8)
            .map(|r| {
                let mut s = sample(v4(203, 0, 113, r + 1), "10.20.0.2", UDP, 53, 40000);
                s.packets = (pps * secs / 50.0).round() as u64;
                s.bytes = s.packets * 1400;
                s
            })
            .collect()
    }

    /// A SYN flood on 10.20.0.3: `secs` of `pps` from 64 sources, one
    /// flow each (SYNs only).
    fn syn_flood(secs: f64, pps: f64) -> Vec<FlowSample> {
        (0..64u8)
            .map(|i| {
                let mut s = sample(v4(100, 64, 0, i + 1), "10.20.0.3", TCP, 1024, 80);
                s.tcp_flags = TCP_SYN;
                s.packets = (pps * secs / 64.0).round() as u64;
                s.bytes = s.packets * 60;
                s
            })
            .collect()
    }

    /// Flow input's loop (daemon/flow.rs) without the daemon: samples
    /// land, each step its bucket joins the window, the window is judged,
    /// and the blocked prefixes' rates are what the window's records
    /// measure for them.
    struct Run {
        det: Detection,
        agg: FlowAggregator,
        win: FlowWindow,
        blocked: HashSet<Prefix>,
        verdicts: Vec<Verdict>,
    }

    impl Run {
        fn new(cfg: &DetectionConfig, export_s: f64) -> Self {
            Run {
                det: Detection::new(cfg, "flow").unwrap(),
                agg: FlowAggregator::new(vec![prefix("10.20.0.0/24")], 100_000),
                win: FlowWindow::new(export_s, 100_000),
                blocked: HashSet::new(),
                verdicts: Vec::new(),
            }
        }

        fn step(&mut self, samples: &[FlowSample]) -> &Verdict {
            for s in samples {
                self.agg.add(s);
            }
            let secs = self.win.step_s();
            self.win.push(secs, self.agg.take_bucket());
            let (pairs, victims) = self.win.records();
            let span = self.win.span_s();
            let blocked: Vec<SourceRate> = self
                .blocked
                .iter()
                .map(|p| SourceRate {
                    prefix: *p,
                    pps: pairs
                        .iter()
                        .filter(|r| p.contains(&r.src))
                        .map(|r| r.packets)
                        .sum::<u64>() as f64
                        / span,
                })
                .collect();
            let v = self.det.observe(&Interval {
                index: self.verdicts.len() as u64,
                secs,
                window_s: Some(span),
                pairs: &pairs,
                victims: &victims,
                skips: Default::default(),
                blocked: &blocked,
                blocked_in_records: true,
                policed: &[],
            });
            for b in &v.blocks {
                self.blocked.insert(b.prefix);
            }
            for u in &v.unblocks {
                self.blocked.remove(&u.prefix);
            }
            self.verdicts.push(v);
            self.verdicts.last().unwrap()
        }

        /// The rate detection measured for a victim's vector in the last
        /// step (passed plus what its blocked sources sent).
        fn current(&self, victim: &str, vector: &str) -> f64 {
            self.det
                .victims()
                .iter()
                .find(|v| v.victim == prefix(victim))
                .and_then(|v| v.vectors.iter().find(|x| x.vector == vector))
                .map_or(0.0, |x| x.current_pps)
        }

        /// Steps (by index) with an event of `kind`.
        fn steps_with(&self, kind: EventKind) -> Vec<usize> {
            self.verdicts
                .iter()
                .enumerate()
                .filter(|(_, v)| v.events.iter().any(|e| e.event == kind))
                .map(|(i, _)| i)
                .collect()
        }
    }

    #[test]
    fn steps_are_a_third_of_the_export_interval_and_never_below_half_a_second() {
        for (e, steps, step) in [
            (3.0, 3, 1.0),
            (10.0, 3, 10.0 / 3.0),
            (1.5, 3, 0.5),
            (1.4, 2, 0.7),
            (1.0, 2, 0.5),
            (0.2, 1, 0.2),
            (f64::NAN, 2, 0.5),
        ] {
            let w = FlowWindow::new(e, 10);
            assert_eq!(
                (w.steps(), w.step_s()),
                (steps, step),
                "export interval {e}"
            );
        }
    }

    /// The same 100 sources in three steps: their pairs' packets summed,
    /// the victim's distinct sources about 100 (registers merged, not
    /// estimates added); the fourth step pushes the first out; the span is
    /// the export interval until the window holds its steps.
    #[test]
    fn the_window_sums_its_steps_and_counts_a_source_once() {
        let mut agg = FlowAggregator::new(vec![prefix("10.20.0.0/24")], 1000);
        let mut w = FlowWindow::new(3.0, 1000);
        let step = |agg: &mut FlowAggregator, packets: u64| {
            for i in 0..100u8 {
                let mut s = sample(v4(198, 51, 100, i), "10.20.0.9", UDP, 4000, 53);
                s.packets = packets;
                agg.add(&s);
            }
            agg.add(&sample(v4(1, 1, 1, 1), "192.0.2.1", UDP, 1, 1));
            agg.take_bucket()
        };
        w.push(1.0, step(&mut agg, 1));
        assert_eq!(w.span_s(), 3.0);
        w.push(1.0, step(&mut agg, 2));
        assert_eq!(w.span_s(), 3.0);
        w.push(1.5, step(&mut agg, 4));
        assert_eq!(w.span_s(), 3.5);
        assert_eq!(w.outside(), 3);
        let (pairs, victims) = w.records();
        assert_eq!(pairs.len(), 100);
        assert!(
            pairs.iter().all(|p| p.packets == 7 && p.udp == 7),
            "{:?}",
            pairs[0]
        );
        assert_eq!(victims.len(), 1);
        assert_eq!((victims[0].packets, victims[0].udp), (700, 700));
        let d = victims[0].src_distinct;
        assert!((85.0..=115.0).contains(&d), "distinct sources {d}");
        w.push(1.0, step(&mut agg, 8));
        assert_eq!(w.span_s(), 3.5);
        let (pairs, victims) = w.records();
        assert!(pairs.iter().all(|p| p.packets == 14), "{:?}", pairs[0]);
        assert_eq!(victims[0].packets, 1400);
    }

    /// The window keeps `max_pairs` pairs, the newest steps' first (a new
    /// attack's sources are not the ones left out).
    #[test]
    fn the_window_keeps_the_newest_pairs_when_full() {
        let mut agg = FlowAggregator::new(vec![prefix("10.20.0.0/24")], 1000);
        let mut w = FlowWindow::new(3.0, 150);
        for base in [0u8, 100] {
            for i in 0..100u8 {
                agg.add(&sample(v4(198, 51, base, i), "10.20.0.9", UDP, 4000, 53));
            }
            w.push(1.0, agg.take_bucket());
        }
        let (pairs, victims) = w.records();
        assert_eq!(pairs.len(), 150);
        assert_eq!(
            pairs
                .iter()
                .filter(|p| p.src.to_string().starts_with("198.51.100."))
                .count(),
            100
        );
        assert_eq!(victims[0].packets, 200);
    }

    /// softflowd exports flows that started together together: one round
    /// of records per export interval. Judged every step over the last
    /// export interval, a normal load reads at its rate in every step, and
    /// an attack stays one attack between rounds even when a single step
    /// below the threshold would end it.
    #[test]
    fn a_round_of_records_per_export_interval_gives_a_steady_rate_across_steps() {
        let e = 3.0;
        let cfg = DetectionConfig {
            attack_end_s: 1.0,
            ..DetectionConfig::default()
        };
        let mut run = Run::new(&cfg, e);
        assert_eq!(run.win.steps(), 3);
        let round = |i: usize| i.is_multiple_of(3);
        for i in 0..30 {
            let s = if round(i) {
                background(e, 150.0)
            } else {
                vec![]
            };
            run.step(&s);
            let dns = run.current("10.20.0.2/32", "udp_amplification/dns");
            assert!((dns - 150.0).abs() < 0.1, "step {i}: {dns} pps");
        }
        assert!(run.steps_with(EventKind::AttackStart).is_empty());
        let start = run.verdicts.len();
        let mut during = Vec::new();
        for i in start..start + 30 {
            let mut s = vec![];
            if round(i) {
                s = background(e, 150.0);
                s.extend(reflection(e, 20_000.0));
            }
            run.step(&s);
            during.push(run.current("10.20.0.2/32", "udp_amplification/dns"));
        }
        assert_eq!(run.steps_with(EventKind::AttackStart), vec![start]);
        assert!(run.steps_with(EventKind::AttackEnd).is_empty());
        assert!((during[0] - 20_150.0).abs() < 1.0, "{during:?}");
        // Once its sources are blocked the records still hold their
        // packets (the exporter saw them before any tier dropped them):
        // the rate stays the flood's, counted once, and between rounds it
        // stays what it is at a round.
        let after_block = &during[1..];
        assert!(
            after_block.iter().all(|x| (x - during[0]).abs() < 1.0),
            "{during:?}"
        );
        let last_round = (start..start + 30).rev().find(|&i| round(i)).unwrap();
        for i in start + 30..start + 40 {
            let s = if round(i) {
                background(e, 150.0)
            } else {
                vec![]
            };
            run.step(&s);
        }
        // Ended at the first step whose window no longer holds the last
        // round of the flood, once.
        assert_eq!(run.steps_with(EventKind::AttackEnd), vec![last_round + 3]);
        assert_eq!(run.steps_with(EventKind::AttackStart), vec![start]);
    }

    /// An attack is judged in the step its first records land in: a round
    /// of a flood's records (softflowd), or the first step of samples
    /// streaming in (sFlow), each with the sources' rates over the window.
    #[test]
    fn an_attack_is_judged_at_the_first_step_after_its_records_land() {
        let e = 3.0;
        for streaming in [false, true] {
            let mut run = Run::new(&DetectionConfig::default(), e);
            for i in 0..60 {
                let s = if i % 3 == 0 {
                    background(e, 500.0)
                } else {
                    vec![]
                };
                run.step(&s);
            }
            assert!(run
                .verdicts
                .iter()
                .all(|v| v.events.is_empty() && v.blocks.is_empty()));
            // The flood's records land one step after the background's round.
            let first = run.verdicts.len() + 1;
            let mut landed = None;
            for i in first - 1..first + 9 {
                let mut s = if i % 3 == 0 {
                    background(e, 500.0)
                } else {
                    vec![]
                };
                if streaming && i >= first {
                    s.extend(syn_flood(run.win.step_s(), 5000.0));
                } else if !streaming && i >= first && (i - first).is_multiple_of(3) {
                    s.extend(syn_flood(e, 5000.0));
                }
                let v = run.step(&s);
                if landed.is_none() && !v.events.is_empty() {
                    landed = Some((i, v.clone()));
                }
            }
            let (at, v) = landed.expect("the flood was judged");
            assert_eq!(at, first, "streaming {streaming}: judged at step {at}");
            let ev = &v.events[0];
            assert_eq!(ev.event, EventKind::AttackStart);
            assert_eq!(ev.victim, prefix("10.20.0.3/32"));
            assert_eq!(ev.vector, "syn_flood");
            // A round holds an export interval of the flood: 5000 pps, 78
            // per source; streaming, the first step holds a third of it.
            let share = if streaming { 1.0 / 3.0 } else { 1.0 };
            let near = |x: f64, want: f64| (x - want).abs() <= 0.01 * want;
            assert!(!v.blocks.is_empty(), "streaming {streaming}: {v:?}");
            for b in &v.blocks {
                assert!(b.prefix.to_string().starts_with("100.64.0."), "{b:?}");
                let want = 5000.0 * share / if b.prefix.len() == 32 { 64.0 } else { 1.0 };
                assert!(
                    near(b.pps, want),
                    "streaming {streaming}: {b:?}, want {want}"
                );
            }
        }
    }

    /// DNS replies at 90 % of the amplification floor, in rounds: a round
    /// judged as a step's rate would be three times the floor; over the
    /// window it is what it is, and nothing is flagged.
    #[test]
    fn a_normal_load_arriving_in_rounds_is_not_flagged() {
        let e = 3.0;
        let mut run = Run::new(&DetectionConfig::default(), e);
        for i in 0..300 {
            let s = if i % 3 == 1 {
                background(e, 1800.0)
            } else {
                vec![]
            };
            run.step(&s);
        }
        for (i, v) in run.verdicts.iter().enumerate() {
            assert!(
                v.events.is_empty() && v.blocks.is_empty() && v.police.is_empty(),
                "step {i}: {v:?}"
            );
            assert!(v.protect.is_empty(), "step {i}: {v:?}");
        }
        let dns = run.current("10.20.0.2/32", "udp_amplification/dns");
        assert!((dns - 1800.0).abs() < 1.0, "{dns}");
    }

    /// Judged every step over overlapping windows, a baseline rises and
    /// falls at the pace per second it had judged once per export
    /// interval: the same sample three times is not three samples.
    #[test]
    fn baselines_learn_at_the_pace_of_one_sample_per_window() {
        let e = 3.0;
        // Growth unbounded in practice, so that the EWMA's weight shows.
        let cfg = DetectionConfig {
            baseline_growth_per_min: 100.0,
            ..DetectionConfig::default()
        };
        let mut run = Run::new(&cfg, e);
        let mut once = Detection::new(&cfg, "flow").unwrap();
        let mut agg = FlowAggregator::new(vec![prefix("10.20.0.0/24")], 100_000);
        let victim = prefix("10.20.0.2/32");
        let dns = crate::detection::Vector::UdpAmplification(0);
        let mut compared = 0;
        for (phase, pps) in [(0, 1800.0), (1, 200.0)] {
            for i in 0..90 {
                let s = if i % 3 == 0 {
                    background(e, pps)
                } else {
                    vec![]
                };
                run.step(&s);
                for x in &s {
                    agg.add(x);
                }
                if i % 3 != 2 {
                    continue;
                }
                let (pairs, victims) = agg.take();
                once.observe(&Interval {
                    index: i as u64,
                    secs: e,
                    window_s: None,
                    pairs: &pairs,
                    victims: &victims,
                    skips: Default::default(),
                    blocked: &[],
                    blocked_in_records: true,
                    policed: &[],
                });
                let (a, b) = (once.baseline(&victim, dns), run.det.baseline(&victim, dns));
                if i >= 30 {
                    assert!(
                        (a - b).abs() <= 0.05 * a,
                        "phase {phase}, step {i}: {a} pps judged per interval, {b} per step"
                    );
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 40);
        // It did move: up toward 1800, then down toward 200.
        let b = run.det.baseline(&victim, dns);
        assert!(b > 300.0 && b < 1500.0, "{b}");
    }

    /// The attack's end and the unban come `attack_end_s` and `hold_s`
    /// (seconds) after the flood's last records leave the window, whatever
    /// the step: 0.5 s, 1 s or 3 s.
    #[test]
    fn hold_and_unban_times_are_seconds_whatever_the_step() {
        let cfg = DetectionConfig::default();
        for e in [1.0, 3.0, 9.0] {
            let mut run = Run::new(&cfg, e);
            let (steps, step) = (run.win.steps(), run.win.step_s());
            let n = |secs: f64| (secs / step).round() as usize;
            let round = |i: usize| i.is_multiple_of(steps);
            for i in 0..n(60.0) {
                let s = if round(i) {
                    background(e, 100.0)
                } else {
                    vec![]
                };
                run.step(&s);
            }
            let start = run.verdicts.len();
            for i in start..start + n(30.0) {
                let mut s = vec![];
                if round(i) {
                    s = background(e, 100.0);
                    s.extend(reflection(e, 20_000.0));
                }
                run.step(&s);
            }
            let last_round = (start..start + n(30.0)).rev().find(|&i| round(i)).unwrap();
            assert!(!run.blocked.is_empty(), "export interval {e}");
            let reflectors: Vec<Prefix> = run.blocked.iter().copied().collect();
            for i in start + n(30.0)..start + n(150.0) {
                let s = if round(i) {
                    background(e, 100.0)
                } else {
                    vec![]
                };
                run.step(&s);
            }
            // Seconds on detection's clock from the last round of the
            // flood to the end of the attack and to the unban.
            let after = |i: usize| (i - last_round) as f64 * step;
            let ended = run.steps_with(EventKind::AttackEnd);
            assert_eq!(ended.len(), 1, "export interval {e}");
            let end_s = after(ended[0]);
            assert!(
                end_s >= cfg.attack_end_s && end_s <= cfg.attack_end_s + e + 1e-9,
                "export interval {e}: attack_end {end_s} s after the last round"
            );
            let unbans: Vec<usize> = run
                .verdicts
                .iter()
                .enumerate()
                .filter(|(_, v)| v.unblocks.iter().any(|u| reflectors.contains(&u.prefix)))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(unbans.len(), 1, "export interval {e}: {unbans:?}");
            let unban_s = after(unbans[0]);
            assert!(
                unban_s >= cfg.hold_s && unban_s <= cfg.hold_s + e + 1e-9,
                "export interval {e}: unban {unban_s} s after the last round"
            );
            assert!(
                run.blocked.is_empty(),
                "export interval {e}: {:?}",
                run.blocked
            );
        }
    }
}
