//! The daemon's alerts, in the one schema every application uses
//! (`rampart_service::alert`: EVE JSON with a `rampart` object; docs/alerts.md).
//!
//! `rampart.event` is `attack_start`, `attack_end`, `block`, `unblock`,
//! `hw_add`, `hw_remove` or `resume`; blocks and unblocks carry the
//! detector's signature (`alert.signature_id`), tier moves and resumes are
//! `stats` events.

use std::net::IpAddr;

use rampart_ddos::Prefix;
use rampart_ddos_control::detection::AttackEvent;
pub use rampart_service::alert::{Action, Alert, Alerts, App, EventType};

/// The address of a prefix that is one host (`/32`, `/128`).
fn host_addr(p: &Prefix) -> Option<IpAddr> {
    let full = if p.family() == 4 { 32 } else { 128 };
    (p.len() == full).then(|| p.net().addr())
}

/// A source blocked by `detector` (its vector's signature) in `tier`.
pub fn block(p: &Prefix, detector: &str, reason: &str, pps: f64, bps: f64, tier: &str) -> Alert {
    let mut a = Alert::rule(App::Ddos, "block", detector, Action::Blocked);
    a.src_ip = host_addr(p);
    let r = &mut a.rampart;
    r.prefix = Some(p.to_string());
    r.detector = Some(detector.into());
    r.reason = Some(reason.into());
    r.pps = Some(pps);
    r.bps = Some(bps);
    r.tier = Some(tier.into());
    a
}

/// A source unblocked (`by`: `detection` or `operator`; the signature is
/// the one it was blocked under, `blocked_by`).
pub fn unblock(p: &Prefix, blocked_by: &str, by: &str, reason: Option<String>) -> Alert {
    let mut a = Alert::rule(App::Ddos, "unblock", blocked_by, Action::Unblocked);
    a.src_ip = host_addr(p);
    a.rampart.prefix = Some(p.to_string());
    a.rampart.detector = Some(by.into());
    a.rampart.reason = reason;
    a
}

/// `a` decided from routers' flow exports (flow input), not from the
/// traffic the host sees: `"source": "flow"` among rampart's fields.
pub fn from_flow(mut a: Alert) -> Alert {
    a.rampart
        .details
        .insert("source".into(), serde_json::Value::from("flow"));
    a
}

/// `a` (a block) as part of the attack on `victim` by `vector`.
pub fn with_attack(mut a: Alert, victim: &Prefix, vector: &str) -> Alert {
    a.rampart.victim = Some(victim.to_string());
    a.rampart.vector = Some(vector.into());
    a
}

/// An attack event of detection (`attack_start`, `attack_update`,
/// `attack_end`) for one victim, on interface `iface`: the vector's
/// signature, the victim as `dest_ip` (or `rampart.victim` for a prefix),
/// rates, peaks, sources and what was done.
pub fn attack_event(e: &AttackEvent, iface: &str) -> Alert {
    let action = if e.action.blocked > 0 {
        Action::Blocked
    } else {
        Action::Allowed
    };
    let mut a = Alert::rule(App::Ddos, e.event.name(), &e.vector, action);
    a.dest_ip = host_addr(&e.victim);
    a.in_iface = Some(iface.into());
    let r = &mut a.rampart;
    r.attack_id = Some(format!("ddos/{}/{}", e.victim, e.start_index));
    r.victim = Some(e.victim.to_string());
    r.vector = Some(e.vector.clone());
    r.detector = Some("detection".into());
    r.reason = Some(e.reason.clone());
    r.pps = Some(e.pps);
    r.bps = Some(e.bps);
    r.peak_pps = Some(e.peak_pps);
    r.peak_bps = Some(e.peak_bps);
    r.sources = Some(e.sources);
    r.top_sources = e
        .top_sources
        .iter()
        .map(|(ip, pps)| format!("{ip} {pps:.0} pps"))
        .collect();
    let collateral: u64 = e
        .action
        .aggregated
        .iter()
        .map(|g| u64::from(g.collateral))
        .sum();
    if !e.action.aggregated.is_empty() {
        r.collateral = Some(collateral);
    }
    for (k, v) in [
        ("vectors", serde_json::json!(e.vectors)),
        ("duration_s", serde_json::json!(e.duration_s)),
        ("blocked", serde_json::json!(e.action.blocked)),
        ("policed", serde_json::json!(e.action.policed)),
        ("syn_cookies", serde_json::json!(e.action.syn_cookies)),
        ("ack_guard", serde_json::json!(e.action.ack_guard)),
        ("aggregated", serde_json::json!(e.action.aggregated)),
    ] {
        r.details.insert(k.into(), v);
    }
    a
}

/// A source moved into (`add`) or out of a hardware tier.
pub fn hw_move(add: bool, p: &Prefix, tier: &str) -> Alert {
    let mut a = Alert::new(
        App::Ddos,
        EventType::Stats,
        if add { "hw_add" } else { "hw_remove" },
    );
    a.src_ip = host_addr(p);
    a.rampart.prefix = Some(p.to_string());
    a.rampart.tier = Some(tier.into());
    a
}

/// The upstream tier announced (`add`) or withdrew `a` (for `p`, a blocked
/// source or an RTBH victim); `dry_run`: only logged.
pub fn upstream(
    add: bool,
    a: &crate::tier::upstream::Announcement,
    p: &Prefix,
    dry_run: bool,
) -> Alert {
    use crate::tier::upstream::Announcement;
    let kind = match a {
        Announcement::Flow { .. } => "flowspec",
        Announcement::Blackhole { .. } => "rtbh",
    };
    let mut al = Alert::new(
        App::Ddos,
        EventType::Stats,
        if add {
            "upstream_announce"
        } else {
            "upstream_withdraw"
        },
    );
    match a {
        Announcement::Flow { .. } => al.src_ip = host_addr(p),
        Announcement::Blackhole { victim } => al.dest_ip = Some(*victim),
    }
    al.rampart.prefix = Some(p.to_string());
    al.rampart.tier = Some("upstream".into());
    al.rampart.reason = Some(format!(
        "{} {kind} {p}{}",
        if add { "announced" } else { "withdrew" },
        if dry_run {
            " (dry run: logged, not sent)"
        } else {
            ""
        }
    ));
    al
}

/// The daemon started on pinned state.
pub fn resume(blocked: usize) -> Alert {
    let mut a = Alert::new(App::Ddos, EventType::Stats, "resume");
    a.rampart.reason = Some(format!(
        "resumed from pinned state: {blocked} blocked sources, filtering never stopped"
    ));
    a.rampart.sources = Some(blocked as u64);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_carry_the_detectors_signature_and_the_source() {
        let p = Prefix::parse("172.16.0.9/32").unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&block(&p, "syn_flood", "why", 5.0, 40.0, "xdp").to_json())
                .unwrap();
        assert_eq!(v["event_type"], "alert");
        assert_eq!(v["src_ip"], "172.16.0.9");
        assert_eq!(v["alert"]["signature_id"], 9_100_001);
        assert_eq!(v["alert"]["action"], "blocked");
        assert_eq!(v["rampart"]["prefix"], "172.16.0.9/32");
        assert_eq!(v["rampart"]["detector"], "syn_flood");
        let net = Prefix::parse("172.16.0.0/12").unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&unblock(&net, "operator", "operator", None).to_json()).unwrap();
        assert!(v.get("src_ip").is_none(), "a prefix is not one source: {v}");
        assert_eq!(v["alert"]["action"], "unblocked");
        assert_eq!(v["alert"]["signature_id"], 9_100_090);
        let v: serde_json::Value =
            serde_json::from_str(&hw_move(true, &p, "emulated").to_json()).unwrap();
        assert_eq!(v["event_type"], "stats");
        assert!(v.get("alert").is_none());
    }
}
