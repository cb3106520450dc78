//! Prometheus metrics of the daemon (`GET /metrics`).
//!
//! One registry. The daemon's state — drops and packets per tier, sources
//! held per tier, the heaviest sources, attack state, planner threshold —
//! is read from the published [`View`] at every scrape (what the API
//! shows, so the two agree). Only events (rule updates, blocks, unblocks,
//! latencies) are counters and histograms updated where they happen.

use std::sync::{Arc, RwLock};

use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts};
use rampart_service::{Samples, StateCollector};

use crate::daemon::View;

/// The daemon's registry and its event counters.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// The registry (state collector and event counters).
    pub registry: rampart_service::Metrics,
    /// `rampart_ddos_rule_updates_total{tier,op}`: rule inserts/removals.
    pub rule_updates: IntCounterVec,
    /// `rampart_ddos_detection_latency_seconds`: interval end → blocks installed.
    pub detection_latency: Histogram,
    /// `rampart_ddos_loop_seconds`: one loop iteration.
    pub loop_seconds: Histogram,
    /// `rampart_ddos_blocks_total{detector}`.
    pub blocks: IntCounterVec,
    /// `rampart_ddos_unblocks_total{reason}`.
    pub unblocks: IntCounterVec,
}

/// What the state collector reports, from one view.
fn read(v: &View, out: &mut Samples) {
    for ((tier, reason), n) in &v.counters.drops {
        out.set("rampart_ddos_drops_total", &[tier, reason], *n as f64);
    }
    for (tier, n) in &v.counters.tier_packets {
        out.set("rampart_ddos_tier_packets_total", &[tier], *n as f64);
    }
    for t in &v.tiers {
        out.set("rampart_ddos_blocked", &[t.info.name], t.rules as f64);
    }
    // `rates` is sorted heaviest first.
    for r in v.rates.iter().take(10) {
        out.set("rampart_ddos_top_source_pps", &[&r.prefix], r.pps);
    }
    out.set(
        "rampart_ddos_under_attack",
        &[],
        f64::from(u8::from(v.under_attack)),
    );
    out.set("rampart_ddos_planner_threshold", &[], v.threshold);
    for g in &v.gauges {
        match g.name {
            "current_pps" | "baseline_pps" | "threshold_pps" => out.set(
                "rampart_ddos_victim_pps",
                &[&g.victim, g.vector, g.name.trim_end_matches("_pps")],
                g.value,
            ),
            "source_level_pps" => {
                out.set(
                    "rampart_ddos_victim_source_level_pps",
                    &[&g.victim],
                    g.value,
                );
            }
            "victims" => out.set("rampart_ddos_victims", &[], g.value),
            "attacks" => out.set("rampart_ddos_attacks", &[], g.value),
            "policed" => out.set("rampart_ddos_policed", &[], g.value),
            "protected" => out.set("rampart_ddos_protected_victims", &[], g.value),
            _ => {}
        }
    }
}

fn state(view: Arc<RwLock<View>>) -> StateCollector {
    StateCollector::new(move |out| {
        let v = view.read().map_err(|_| "the daemon's view is poisoned")?;
        read(&v, out);
        Ok(())
    })
    .counter(
        "rampart_ddos_drops_total",
        "Packets dropped, by tier and reason",
        &["tier", "reason"],
    )
    .counter(
        "rampart_ddos_tier_packets_total",
        "Packets each tier handled",
        &["tier"],
    )
    .gauge("rampart_ddos_blocked", "Sources held per tier", &["tier"])
    .gauge(
        "rampart_ddos_top_source_pps",
        "The 10 heaviest blocked sources (pps, all tiers)",
        &["prefix"],
    )
    .gauge(
        "rampart_ddos_under_attack",
        "1 while an attack is in progress",
        &[],
    )
    .gauge(
        "rampart_ddos_planner_threshold",
        "Offload planner swap threshold",
        &[],
    )
    .gauge(
        "rampart_ddos_victim_pps",
        "Per victim and vector: the last interval's rate (kind current), the learned baseline and the threshold (packets/s; the most loaded victims)",
        &["victim", "vector", "kind"],
    )
    .gauge(
        "rampart_ddos_victim_source_level_pps",
        "Per victim: the per-source level (unban level and policing rate), packets/s",
        &["victim"],
    )
    .gauge("rampart_ddos_victims", "Victims detection follows", &[])
    .gauge("rampart_ddos_attacks", "Attacks in progress", &[])
    .gauge("rampart_ddos_policed", "Sources policed", &[])
    .gauge(
        "rampart_ddos_protected_victims",
        "Victims with SYN cookies or the ACK guard on",
        &[],
    )
}

impl Metrics {
    /// The registry of a daemon publishing `view`.
    ///
    /// # Panics
    /// Never in practice: names are static and unique (every test renders them).
    pub fn new(view: Arc<RwLock<View>>) -> Self {
        let registry = rampart_service::Metrics::new();
        let rule_updates = IntCounterVec::new(
            Opts::new(
                "rampart_ddos_rule_updates_total",
                "Rule inserts and removals per tier",
            ),
            &["tier", "op"],
        )
        .expect("metric");
        let detection_latency = Histogram::with_opts(
            HistogramOpts::new(
                "rampart_ddos_detection_latency_seconds",
                "End of a feature interval to its blocks installed",
            )
            .buckets(vec![
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
            ]),
        )
        .expect("metric");
        let loop_seconds = Histogram::with_opts(
            HistogramOpts::new("rampart_ddos_loop_seconds", "One daemon loop iteration")
                .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0]),
        )
        .expect("metric");
        let blocks = IntCounterVec::new(
            Opts::new("rampart_ddos_blocks_total", "Sources blocked, by detector"),
            &["detector"],
        )
        .expect("metric");
        let unblocks = IntCounterVec::new(
            Opts::new(
                "rampart_ddos_unblocks_total",
                "Sources unblocked, by reason",
            ),
            &["reason"],
        )
        .expect("metric");
        registry.register(state(view)).expect("unique metric");
        registry
            .register(rule_updates.clone())
            .expect("unique metric");
        registry
            .register(detection_latency.clone())
            .expect("unique metric");
        registry
            .register(loop_seconds.clone())
            .expect("unique metric");
        registry.register(blocks.clone()).expect("unique metric");
        registry.register(unblocks.clone()).expect("unique metric");
        Self {
            registry,
            rule_updates,
            detection_latency,
            loop_seconds,
            blocks,
            unblocks,
        }
    }

    /// Text exposition format, collected now.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::{RateView, TierView};

    #[test]
    fn scrape_reads_the_published_view() {
        let view = Arc::new(RwLock::new(View::default()));
        let m = Metrics::new(view.clone());
        let before = m.render();
        assert!(before.contains("rampart_ddos_under_attack 0"), "{before}");
        assert!(!before.contains("rampart_ddos_drops_total{"), "{before}");
        {
            let mut v = view.write().unwrap();
            v.under_attack = true;
            v.threshold = 2.0;
            v.counters.add_drops("xdp", "blacklist", 7);
            v.counters.tier_packets.insert("xdp", 9);
            v.rates = (0..12)
                .map(|i| RateView {
                    prefix: format!("192.0.2.{i}/32"),
                    pps: f64::from(100 - i),
                    hw_pps: 0.0,
                    host_pps: 0.0,
                    in_hw: false,
                })
                .collect();
            v.tiers = vec![TierView {
                info: crate::tier::TierInfo {
                    name: "xdp",
                    role: "host",
                    location: "host0".into(),
                    capacity: None,
                    update_cost: std::time::Duration::ZERO,
                    counters: crate::tier::CounterKind::Sampled,
                    emulated: false,
                },
                rules: 12,
                dropped_packets: 7,
            }];
        }
        m.blocks.with_label_values(&["operator"]).inc();
        let t = m.render();
        for line in [
            "rampart_ddos_under_attack 1",
            "rampart_ddos_planner_threshold 2",
            "rampart_ddos_drops_total{reason=\"blacklist\",tier=\"xdp\"} 7",
            "rampart_ddos_tier_packets_total{tier=\"xdp\"} 9",
            "rampart_ddos_blocked{tier=\"xdp\"} 12",
            "rampart_ddos_top_source_pps{prefix=\"192.0.2.0/32\"} 100",
            "rampart_ddos_blocks_total{detector=\"operator\"} 1",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line:?} in:\n{t}");
        }
        assert_eq!(
            t.lines()
                .filter(|l| l.starts_with("rampart_ddos_top_source_pps{"))
                .count(),
            10,
            "the 10 heaviest only"
        );
    }
}
