//! Prometheus metrics of the daemon (`GET /metrics`).
//!
//! One registry. The daemon's state — packets and bytes dropped, passed
//! and seen per tier, sources held per tier, the heaviest sources, attack
//! state, planner threshold, detection's per-victim rates — is read from
//! the published [`View`] at every scrape (what the API shows, so the two
//! agree). Only events (rule updates, blocks, unblocks, latencies) are
//! counters and histograms updated where they happen.
//!
//! Names follow Prometheus' conventions: base units (seconds, bytes,
//! packets per second), `_total` on counters, a bytes twin of every packet
//! counter the data path counts bytes for, and every label combination the
//! daemon can report exists from the first scrape, at 0. `promtool check
//! metrics` on a live daemon reports nothing (tested).

use std::sync::{Arc, RwLock};

use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts};
use rampart_ddos_control::detection::Vector;
use rampart_service::{Samples, StateCollector};

use crate::daemon::View;

/// Every reason a source is unblocked (`rampart_ddos_unblocks_total`).
pub const UNBLOCK_REASONS: [&str; 2] = ["detection", "operator"];

/// Every detector that blocks (`rampart_ddos_blocks_total`): each vector
/// family of detection, and the operator.
pub fn detectors() -> Vec<&'static str> {
    let mut d: Vec<&'static str> = Vector::ALL.iter().map(|v| v.family()).collect();
    d.push("operator");
    d.sort_unstable();
    d.dedup();
    d
}

/// The daemon's registry and its event counters.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// The registry (state collector and event counters).
    pub registry: rampart_service::Metrics,
    /// `rampart_ddos_rule_updates_total{tier,op}`: rule inserts/removals.
    pub rule_updates: IntCounterVec,
    /// `rampart_ddos_detection_latency_seconds`: interval end → blocks installed.
    pub detection_latency: Histogram,
    /// `rampart_ddos_loop_duration_seconds`: one loop iteration.
    pub loop_seconds: Histogram,
    /// `rampart_ddos_blocks_total{detector}`.
    pub blocks: IntCounterVec,
    /// `rampart_ddos_unblocks_total{reason}`.
    pub unblocks: IntCounterVec,
}

/// What the state collector reports, from one view.
fn read(v: &View, out: &mut Samples) {
    let c = &v.counters;
    for ((tier, reason), n) in &c.drops {
        out.set(
            "rampart_ddos_dropped_packets_total",
            &[tier, reason],
            n.packets as f64,
        );
        if !c.packets_only.contains(&(*tier, reason.clone())) {
            out.set(
                "rampart_ddos_dropped_bytes_total",
                &[tier, reason],
                n.bytes as f64,
            );
        }
    }
    for ((tier, reason), n) in &c.passes {
        out.set(
            "rampart_ddos_passed_packets_total",
            &[tier, reason],
            n.packets as f64,
        );
        out.set(
            "rampart_ddos_passed_bytes_total",
            &[tier, reason],
            n.bytes as f64,
        );
    }
    for (tier, n) in &c.seen {
        out.set("rampart_ddos_seen_packets_total", &[tier], n.packets as f64);
        out.set("rampart_ddos_seen_bytes_total", &[tier], n.bytes as f64);
    }
    for t in &v.tiers {
        out.set(
            "rampart_ddos_blocked_sources",
            &[t.info.name],
            t.rules as f64,
        );
    }
    // `rates` is sorted heaviest first.
    for r in v.rates.iter().take(10) {
        out.set(
            "rampart_ddos_top_source_packets_per_second",
            &[&r.prefix],
            r.pps,
        );
    }
    out.set(
        "rampart_ddos_under_attack",
        &[],
        f64::from(u8::from(v.under_attack)),
    );
    out.set("rampart_ddos_planner_threshold", &[], v.threshold);
    if let Some(u) = &v.upstream {
        out.set(
            "rampart_ddos_upstream_engaged",
            &[],
            f64::from(u8::from(u.engaged)),
        );
        out.set("rampart_ddos_upstream_load", &[], u.load);
        out.set("rampart_ddos_upstream_update_seconds", &[], u.last_update_s);
        out.set("rampart_ddos_upstream_errors_total", &[], u.errors as f64);
    }
    if let Some(c) = &v.crowdsec {
        out.set("rampart_ddos_crowdsec_decisions", &[], c.decisions as f64);
        out.set("rampart_ddos_crowdsec_enforced", &[], c.enforced as f64);
        out.set("rampart_ddos_crowdsec_pulls_total", &[], c.pulls as f64);
        out.set("rampart_ddos_crowdsec_pushed_total", &[], c.pushed as f64);
        out.set("rampart_ddos_crowdsec_apply_seconds", &[], c.last_apply_s);
        for (k, n) in &c.errors {
            out.set("rampart_ddos_crowdsec_errors_total", &[k], *n as f64);
        }
        for (r, n) in c.skipped.by_reason() {
            out.set("rampart_ddos_crowdsec_skipped_total", &[r], n as f64);
        }
    }
    out.set("rampart_ddos_intervals_total", &[], v.intervals as f64);
    out.set("rampart_ddos_policed_sources", &[], v.policed.len() as f64);
    for g in &v.gauges {
        match g.name {
            "current_pps" | "baseline_pps" | "threshold_pps" => out.set(
                "rampart_ddos_victim_packets_per_second",
                &[&g.victim, g.vector, g.name.trim_end_matches("_pps")],
                g.value,
            ),
            "source_level_pps" => {
                out.set(
                    "rampart_ddos_victim_source_level_packets_per_second",
                    &[&g.victim],
                    g.value,
                );
            }
            "victims" => out.set("rampart_ddos_victims", &[], g.value),
            "attacks" => out.set("rampart_ddos_attacks", &[], g.value),
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
        "rampart_ddos_dropped_packets_total",
        "Packets dropped, by tier and reason (the data path's exact counters)",
        &["tier", "reason"],
    )
    .counter(
        "rampart_ddos_dropped_bytes_total",
        "Bytes dropped, by tier and reason (every reason but protection's, which count packets only)",
        &["tier", "reason"],
    )
    .counter(
        "rampart_ddos_passed_packets_total",
        "Packets the XDP filters passed on, by tier and reason",
        &["tier", "reason"],
    )
    .counter(
        "rampart_ddos_passed_bytes_total",
        "Bytes the XDP filters passed on, by tier and reason",
        &["tier", "reason"],
    )
    .counter(
        "rampart_ddos_seen_packets_total",
        "Packets each tier handled",
        &["tier"],
    )
    .counter(
        "rampart_ddos_seen_bytes_total",
        "Bytes each tier handled",
        &["tier"],
    )
    .gauge(
        "rampart_ddos_blocked_sources",
        "Sources (prefixes) held per tier",
        &["tier"],
    )
    .gauge(
        "rampart_ddos_top_source_packets_per_second",
        "The 10 heaviest blocked sources, packets per second over all tiers",
        &["prefix"],
    )
    .gauge(
        "rampart_ddos_under_attack",
        "1 while an attack is in progress",
        &[],
    )
    .gauge(
        "rampart_ddos_planner_threshold",
        "Offload planner swap threshold (a rate ratio)",
        &[],
    )
    .counter(
        "rampart_ddos_intervals_total",
        "Detection intervals run",
        &[],
    )
    .gauge(
        "rampart_ddos_upstream_engaged",
        "1 while the upstream tier (BGP to the router in front) is engaged",
        &[],
    )
    .gauge(
        "rampart_ddos_upstream_load",
        "The blocked volume as a share of the host link (what engages the upstream tier)",
        &[],
    )
    .gauge(
        "rampart_ddos_upstream_update_seconds",
        "Cost of the upstream tier's last update on this host (the write to ExaBGP)",
        &[],
    )
    .counter(
        "rampart_ddos_upstream_errors_total",
        "Upstream announcements or withdrawals that failed (ExaBGP's pipe missing or not read)",
        &[],
    )
    .gauge(
        "rampart_ddos_crowdsec_decisions",
        "CrowdSec ban decisions in force (each prefix once; held by CrowdSec, by detection or the operator, or whitelisted)",
        &[],
    )
    .gauge(
        "rampart_ddos_crowdsec_enforced",
        "Blacklist entries CrowdSec's decisions hold",
        &[],
    )
    .counter(
        "rampart_ddos_crowdsec_pulls_total",
        "Decision stream pulls from the CrowdSec LAPI that worked",
        &[],
    )
    .counter(
        "rampart_ddos_crowdsec_pushed_total",
        "Detection blocks pushed to the CrowdSec LAPI as alerts",
        &[],
    )
    .gauge(
        "rampart_ddos_crowdsec_apply_seconds",
        "Wall time of the last blacklist update for CrowdSec (one publish)",
        &[],
    )
    .counter(
        "rampart_ddos_crowdsec_errors_total",
        "CrowdSec failures by kind: unreachable, credentials, status, garbage (the LAPI), apply (the blacklist update)",
        &["kind"],
    )
    .counter(
        "rampart_ddos_crowdsec_skipped_total",
        "CrowdSec decisions not enforced, by reason: not_ban, scope, value, origin, duration",
        &["reason"],
    )
    .gauge(
        "rampart_ddos_policed_sources",
        "Sources policed (rate-limited in XDP instead of blocked)",
        &[],
    )
    .gauge(
        "rampart_ddos_victim_packets_per_second",
        "Per victim and vector: the last interval's rate (kind current), the learned baseline and the threshold (the most loaded victims)",
        &["victim", "vector", "kind"],
    )
    .gauge(
        "rampart_ddos_victim_source_level_packets_per_second",
        "Per victim: the per-source level (unban level and policing rate)",
        &["victim"],
    )
    .gauge("rampart_ddos_victims", "Victims detection follows", &[])
    .gauge("rampart_ddos_attacks", "Attacks in progress", &[])
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
                "Rule inserts, removals and withdrawal probes per tier",
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
            HistogramOpts::new(
                "rampart_ddos_loop_duration_seconds",
                "One daemon loop iteration",
            )
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
        for d in detectors() {
            blocks.with_label_values(&[d]);
        }
        for r in UNBLOCK_REASONS {
            unblocks.with_label_values(&[r]);
        }
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

    /// Create the rule-update labels of the daemon's tiers (at 0) once
    /// they are known: `add`/`remove` for the host tier and the hardware
    /// tier (if any), `probe` too for a hardware tier without counters
    /// (`(name, counterless)`).
    pub fn tiers(&self, host: &str, hw: Option<(&str, bool)>) {
        let mut ops: Vec<(&str, &str)> = vec![(host, "add"), (host, "remove")];
        if let Some((name, counterless)) = hw {
            ops.extend([(name, "add"), (name, "remove")]);
            if counterless {
                ops.push((name, "probe"));
            }
        }
        for (t, op) in ops {
            self.rule_updates.with_label_values(&[t, op]);
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
    use crate::daemon::{Count, RateView, TierView};

    #[test]
    fn scrape_reads_the_published_view() {
        let view = Arc::new(RwLock::new(View::default()));
        let m = Metrics::new(view.clone());
        let before = m.render();
        assert!(before.contains("rampart_ddos_under_attack 0"), "{before}");
        assert!(
            !before.contains("rampart_ddos_dropped_packets_total{"),
            "{before}"
        );
        for d in ["syn_flood", "udp_amplification", "port_scan", "operator"] {
            let line = format!("rampart_ddos_blocks_total{{detector=\"{d}\"}} 0");
            assert!(
                before.lines().any(|l| l == line),
                "pre-created {d}:\n{before}"
            );
        }
        assert!(
            !before.contains("detector=\"udp_amplification/dns\""),
            "{before}"
        );
        {
            let mut v = view.write().unwrap();
            v.under_attack = true;
            v.threshold = 2.0;
            v.intervals = 5;
            v.counters.add_dropped(
                "xdp",
                "blacklist",
                Count {
                    packets: 7,
                    bytes: 448,
                },
            );
            v.counters.add_drops("xdp", "syn_cookie", 3);
            v.counters.seen.insert(
                "xdp",
                Count {
                    packets: 9,
                    bytes: 576,
                },
            );
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
        m.tiers("xdp", Some(("emulated", true)));
        let t = m.render();
        for line in [
            "rampart_ddos_under_attack 1",
            "rampart_ddos_planner_threshold 2",
            "rampart_ddos_intervals_total 5",
            "rampart_ddos_dropped_packets_total{reason=\"blacklist\",tier=\"xdp\"} 7",
            "rampart_ddos_dropped_bytes_total{reason=\"blacklist\",tier=\"xdp\"} 448",
            "rampart_ddos_dropped_packets_total{reason=\"syn_cookie\",tier=\"xdp\"} 3",
            "rampart_ddos_seen_packets_total{tier=\"xdp\"} 9",
            "rampart_ddos_seen_bytes_total{tier=\"xdp\"} 576",
            "rampart_ddos_blocked_sources{tier=\"xdp\"} 12",
            "rampart_ddos_top_source_packets_per_second{prefix=\"192.0.2.0/32\"} 100",
            "rampart_ddos_blocks_total{detector=\"operator\"} 1",
            "rampart_ddos_rule_updates_total{op=\"add\",tier=\"xdp\"} 0",
            "rampart_ddos_rule_updates_total{op=\"probe\",tier=\"emulated\"} 0",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line:?} in:\n{t}");
        }
        assert!(
            !t.contains("rampart_ddos_dropped_bytes_total{reason=\"syn_cookie\""),
            "protection counts packets only: no bytes twin\n{t}"
        );
        assert_eq!(
            t.lines()
                .filter(|l| l.starts_with("rampart_ddos_top_source_packets_per_second{"))
                .count(),
            10,
            "the 10 heaviest only"
        );
    }
}
