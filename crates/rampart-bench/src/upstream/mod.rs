//! `rampart bench upstream`: the tiers beyond the host, in one report —
//! the upstream router over BGP ([`bgp`]: FlowSpec and RTBH announced
//! through ExaBGP, seen in BIRD's tables, the attack dropped by the lab's
//! EMULATED router, everything withdrawn after the attack), flow input
//! from a router's exports and the fleet through CrowdSec.
//!
//! Each part runs in a lab of its own and fills its fields; a part that
//! is not built yet leaves its fields `null` and names itself in
//! `missing`, so the report never claims what it did not measure.

pub mod bgp;
pub mod crowdsec;
pub mod flow_input;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::out::print_json;

/// What `rampart bench upstream` runs.
#[derive(Debug, Clone)]
pub struct UpstreamSpec {
    /// Print the report as one JSON object.
    pub json: bool,
    /// Directory for summary.json and each part's files (created).
    pub out: Option<PathBuf>,
    /// The BGP part's attack and link.
    pub bgp: bgp::BgpSpec,
}

/// The report: the fields first, then each part's detail.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpstreamReport {
    /// FlowSpec rules the daemon announced (its own view).
    pub flowspec_announced: Option<u64>,
    /// FlowSpec routes in the router's (BIRD's) tables at the same time.
    pub flowspec_seen_at_peer: Option<u64>,
    /// RTBH routes with the BLACKHOLE community (65535:666) in BIRD's tables.
    pub rtbh_seen_at_peer: Option<u64>,
    /// Every announcement withdrawn from the router after the attack.
    pub withdrawn_after_attack: Option<bool>,
    /// Share of the attack the EMULATED router dropped once it had the
    /// routes (router drops ÷ (router drops + packets reaching the host's link)).
    pub attack_dropped_upstream_pct: Option<f64>,
    /// Attack start → first detection from flow input (seconds).
    pub flow_input_time_to_detect_s: Option<f64>,
    /// The exporters' export interval in that run (seconds).
    pub flow_input_export_interval_s: Option<f64>,
    /// Decisions pulled from the CrowdSec LAPI.
    pub crowdsec_decisions: Option<u64>,
    /// rampart: decisions in the LAPI → enforced (seconds).
    pub crowdsec_enforce_s: Option<f64>,
    /// crowdsec-firewall-bouncer (nftables): the same, same run (seconds).
    pub crowdsec_peer_enforce_s: Option<f64>,
    /// A detection pushed by one rampart enforced by a second one.
    pub crowdsec_pushed_seen_by_second_host: Option<bool>,
    /// Each bar item: met (true), missed (false) or not measured (null).
    pub bar: Bar,
    /// Parts not measured in this run, with why.
    pub missing: Vec<String>,
    /// The BGP part's detail.
    pub bgp: Option<bgp::BgpResult>,
    /// The CrowdSec part's detail.
    pub crowdsec: Option<crowdsec::CrowdsecResult>,
    /// The flow-input part's detail (each exporter).
    pub flow_input: Option<flow_input::FlowInputResult>,
}

/// The bar, item by item.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Bar {
    /// `flowspec_seen_at_peer` = `flowspec_announced` > 0.
    pub flowspec: Option<bool>,
    /// `rtbh_seen_at_peer` > 0.
    pub rtbh: Option<bool>,
    /// `withdrawn_after_attack`.
    pub withdrawn: Option<bool>,
    /// `flow_input_time_to_detect_s` ≤ 2 export intervals.
    pub flow_input: Option<bool>,
    /// 100,000 decisions enforced in ≤ 5 s and faster than the peer.
    pub crowdsec_enforce: Option<bool>,
    /// Pushed decisions seen by the second host.
    pub crowdsec_push: Option<bool>,
    /// Every item measured and met.
    pub met: bool,
}

impl UpstreamReport {
    /// Evaluate the bar from the fields.
    pub fn judge(&mut self) {
        let b = &mut self.bar;
        b.flowspec = match (self.flowspec_announced, self.flowspec_seen_at_peer) {
            (Some(a), Some(s)) => Some(a > 0 && a == s),
            _ => None,
        };
        b.rtbh = self.rtbh_seen_at_peer.map(|n| n > 0);
        b.withdrawn = self.withdrawn_after_attack;
        b.flow_input = match (
            self.flow_input_time_to_detect_s,
            self.flow_input_export_interval_s,
        ) {
            (Some(t), Some(i)) => Some(t <= 2.0 * i),
            _ => None,
        };
        b.crowdsec_enforce = match (
            self.crowdsec_decisions,
            self.crowdsec_enforce_s,
            self.crowdsec_peer_enforce_s,
        ) {
            (Some(n), Some(t), Some(p)) => Some(n >= 100_000 && t <= 5.0 && t < p),
            _ => None,
        };
        b.crowdsec_push = self.crowdsec_pushed_seen_by_second_host;
        b.met = [
            b.flowspec,
            b.rtbh,
            b.withdrawn,
            b.flow_input,
            b.crowdsec_enforce,
            b.crowdsec_push,
        ]
        .iter()
        .all(|x| *x == Some(true));
    }
}

/// Run every part, print the report (JSON or a few lines) and write
/// `summary.json` to `--out`.
///
/// # Errors
/// A part that cannot run at all (its lab, its tools); Ctrl-C.
pub fn run_and_print(spec: &UpstreamSpec, cancel: &AtomicBool) -> Result<UpstreamReport> {
    if let Some(d) = &spec.out {
        std::fs::create_dir_all(d)
            .map_err(|e| Error::io(format!("creating {}", d.display()), e))?;
    }
    let mut r = UpstreamReport::default();
    let dir = spec
        .out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("rampart-bench-upstream"));
    let b = bgp::measure(&spec.bgp, &dir.join("bgp"), cancel)?;
    r.flowspec_announced = Some(b.flowspec_announced);
    r.flowspec_seen_at_peer = Some(b.flowspec_seen_at_peer);
    r.rtbh_seen_at_peer = Some(b.rtbh_seen_at_peer);
    r.withdrawn_after_attack = Some(b.withdrawn_after_attack);
    r.attack_dropped_upstream_pct = Some(b.attack_dropped_upstream_pct);
    r.bgp = Some(b);
    let f = flow_input::measure(&dir.join("flow-input"), cancel)?;
    r.flow_input_time_to_detect_s = Some(f.time_to_detect_s);
    r.flow_input_export_interval_s = Some(f.export_interval_s);
    r.flow_input = Some(f);
    let c = crowdsec::measure(&dir.join("crowdsec"), cancel)?;
    r.crowdsec_decisions = Some(c.decisions);
    r.crowdsec_enforce_s = Some(c.enforce_median_s);
    // A peer that did not finish within the limit is slower than the limit.
    r.crowdsec_peer_enforce_s = Some(c.peer_enforce_s.unwrap_or(f64::INFINITY));
    r.crowdsec_pushed_seen_by_second_host = Some(c.pushed_seen_by_second_host);
    r.crowdsec = Some(c);
    r.judge();
    if let Some(d) = &spec.out {
        let p = d.join("summary.json");
        let text = serde_json::to_string_pretty(&r)
            .map_err(|e| Error::Failed(format!("encoding the report: {e}")))?;
        std::fs::write(&p, text).map_err(|e| Error::io(format!("writing {}", p.display()), e))?;
    }
    if spec.json {
        print_json(&r)?;
    } else {
        print_text(&r);
    }
    Ok(r)
}

fn print_text(r: &UpstreamReport) {
    let s = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
    let n = |v: Option<u64>| v.map_or("-".into(), |x| x.to_string());
    let yn = |v: Option<bool>| v.map_or("-", |x| if x { "yes" } else { "no" });
    println!(
        "FlowSpec announced {} / seen at the router {}; RTBH seen {}; withdrawn after the attack: {}",
        n(r.flowspec_announced),
        n(r.flowspec_seen_at_peer),
        n(r.rtbh_seen_at_peer),
        yn(r.withdrawn_after_attack)
    );
    println!(
        "attack dropped upstream: {} %",
        s(r.attack_dropped_upstream_pct)
    );
    println!(
        "flow input: detected in {} s (export interval {} s)",
        s(r.flow_input_time_to_detect_s),
        s(r.flow_input_export_interval_s)
    );
    println!(
        "crowdsec: {} decisions enforced in {} s (nftables bouncer {} s); pushed seen by a second host: {}",
        n(r.crowdsec_decisions),
        s(r.crowdsec_enforce_s),
        s(r.crowdsec_peer_enforce_s),
        yn(r.crowdsec_pushed_seen_by_second_host)
    );
    for m in &r.missing {
        println!("not measured: {m}");
    }
    println!("bar met: {}", if r.bar.met { "yes" } else { "no" });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> UpstreamReport {
        UpstreamReport {
            flowspec_announced: Some(3),
            flowspec_seen_at_peer: Some(3),
            rtbh_seen_at_peer: Some(1),
            withdrawn_after_attack: Some(true),
            attack_dropped_upstream_pct: Some(99.0),
            flow_input_time_to_detect_s: Some(1.5),
            flow_input_export_interval_s: Some(1.0),
            crowdsec_decisions: Some(100_000),
            crowdsec_enforce_s: Some(1.0),
            crowdsec_peer_enforce_s: Some(4.0),
            crowdsec_pushed_seen_by_second_host: Some(true),
            ..UpstreamReport::default()
        }
    }

    #[test]
    fn the_bar_is_met_only_when_every_item_is_measured_and_met() {
        let mut r = full();
        r.judge();
        assert!(r.bar.met, "{:?}", r.bar);

        let mut r = full();
        r.flowspec_seen_at_peer = Some(2);
        r.judge();
        assert_eq!(r.bar.flowspec, Some(false));
        assert!(!r.bar.met);

        let mut r = full();
        r.flow_input_time_to_detect_s = Some(2.5);
        r.judge();
        assert_eq!(r.bar.flow_input, Some(false));

        let mut r = full();
        r.crowdsec_enforce_s = Some(4.5);
        r.judge();
        assert_eq!(r.bar.crowdsec_enforce, Some(false), "slower than the peer");

        let mut r = full();
        r.crowdsec_pushed_seen_by_second_host = None;
        r.judge();
        assert_eq!(r.bar.crowdsec_push, None);
        assert!(!r.bar.met, "an item not measured is not met");
    }
}
