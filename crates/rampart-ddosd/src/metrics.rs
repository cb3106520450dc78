//! Prometheus metrics of the daemon (`GET /metrics`).

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Every metric, registered in one registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// The registry.
    pub registry: Registry,
    /// `rampart_ddos_drops_total{tier,reason}`: packets dropped.
    pub drops: IntCounterVec,
    /// `rampart_ddos_tier_packets_total{tier}`: packets each tier handled (saw).
    pub tier_packets: IntCounterVec,
    /// `rampart_ddos_rule_updates_total{tier,op}`: rule inserts/removals.
    pub rule_updates: IntCounterVec,
    /// `rampart_ddos_detection_latency_seconds`: interval end → blocks installed.
    pub detection_latency: Histogram,
    /// `rampart_ddos_loop_seconds`: one loop iteration.
    pub loop_seconds: Histogram,
    /// `rampart_ddos_blocked{tier}`: sources held per tier.
    pub blocked: IntGaugeVec,
    /// `rampart_ddos_top_source_pps{prefix}`: the 10 heaviest blocked sources.
    pub top_sources: GaugeVec,
    /// `rampart_ddos_under_attack`.
    pub under_attack: IntGauge,
    /// `rampart_ddos_planner_threshold`.
    pub threshold: Gauge,
    /// `rampart_ddos_blocks_total{detector}`.
    pub blocks: IntCounterVec,
    /// `rampart_ddos_unblocks_total{reason}`.
    pub unblocks: IntCounterVec,
}

impl Metrics {
    /// Create and register everything.
    ///
    /// # Panics
    /// Never in practice: names are static and unique.
    pub fn new() -> Self {
        let registry = Registry::new();
        let drops = IntCounterVec::new(
            Opts::new(
                "rampart_ddos_drops_total",
                "Packets dropped, by tier and reason",
            ),
            &["tier", "reason"],
        )
        .expect("metric");
        let tier_packets = IntCounterVec::new(
            Opts::new(
                "rampart_ddos_tier_packets_total",
                "Packets each tier handled",
            ),
            &["tier"],
        )
        .expect("metric");
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
        let blocked = IntGaugeVec::new(
            Opts::new("rampart_ddos_blocked", "Sources held per tier"),
            &["tier"],
        )
        .expect("metric");
        let top_sources = GaugeVec::new(
            Opts::new(
                "rampart_ddos_top_source_pps",
                "The 10 heaviest blocked sources (pps, all tiers)",
            ),
            &["prefix"],
        )
        .expect("metric");
        let under_attack = IntGauge::new(
            "rampart_ddos_under_attack",
            "1 while an attack is in progress",
        )
        .expect("metric");
        let threshold = Gauge::new(
            "rampart_ddos_planner_threshold",
            "Offload planner swap threshold",
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
        for c in [
            Box::new(drops.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(tier_packets.clone()),
            Box::new(rule_updates.clone()),
            Box::new(detection_latency.clone()),
            Box::new(loop_seconds.clone()),
            Box::new(blocked.clone()),
            Box::new(top_sources.clone()),
            Box::new(under_attack.clone()),
            Box::new(threshold.clone()),
            Box::new(blocks.clone()),
            Box::new(unblocks.clone()),
        ] {
            registry.register(c).expect("unique metric");
        }
        Self {
            registry,
            drops,
            tier_packets,
            rule_updates,
            detection_latency,
            loop_seconds,
            blocked,
            top_sources,
            under_attack,
            threshold,
            blocks,
            unblocks,
        }
    }

    /// Text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
