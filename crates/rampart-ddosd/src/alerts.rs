//! The daemon's alerts, in the one schema every application uses
//! (`rampart_service::alert`: EVE JSON with a `rampart` object; docs/alerts.md).
//!
//! `rampart.event` is `attack_start`, `attack_end`, `block`, `unblock`,
//! `hw_add`, `hw_remove` or `resume`; blocks and unblocks carry the
//! detector's signature (`alert.signature_id`), tier moves and resumes are
//! `stats` events.

use std::net::IpAddr;

use rampart_ddos::Prefix;
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

/// A source unblocked (`by`: `rate_monitor` or `operator`; the signature is
/// the one it was blocked under, `blocked_by`).
pub fn unblock(p: &Prefix, blocked_by: &str, by: &str, reason: Option<String>) -> Alert {
    let mut a = Alert::rule(App::Ddos, "unblock", blocked_by, Action::Unblocked);
    a.src_ip = host_addr(p);
    a.rampart.prefix = Some(p.to_string());
    a.rampart.detector = Some(by.into());
    a.rampart.reason = reason;
    a
}

/// An attack started or ended on interface `iface`.
pub fn attack(start: bool, iface: &str, blocked: usize, top: Vec<String>) -> Alert {
    let mut a = Alert::rule(
        App::Ddos,
        if start { "attack_start" } else { "attack_end" },
        "attack",
        Action::Blocked,
    );
    a.in_iface = Some(iface.into());
    a.rampart.reason = Some(format!("{blocked} sources blocked"));
    a.rampart.sources = Some(blocked as u64);
    a.rampart.top_sources = top;
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
