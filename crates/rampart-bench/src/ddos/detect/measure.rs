//! What the suite measures, from what the harness recorded: the host-side
//! packet counters sampled during the run and the daemon's alerts (JSON
//! lines), judged against the harness's own ground truth (which addresses
//! it gave to which tool). Pure functions, unit-tested below.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use rampart_ddos::Prefix;
use serde::Serialize;

/// One sample of the host-side counters (harness time, seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the scenario's time zero.
    pub t: f64,
    /// Frames that arrived on host0 (its receive counter: counted before XDP).
    pub rx: u64,
    /// Frames from legitimate sources that reached the stack (nftables
    /// ingress, after XDP).
    pub legit: u64,
    /// Frames from any other source that reached the stack (the attack).
    pub attack: u64,
    /// Frames the counters ignore (ARP, link-local ND): not attack, not legit.
    pub ignored: u64,
    /// Sources in the daemon's blacklist (its API), if it answered.
    pub blocked: Option<u64>,
}

/// Packets of the attack offered to the host and reaching its stack in a span.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Span {
    /// Offered: arrived on host0 minus legitimate and ignored frames.
    pub offered: u64,
    /// Reached the stack.
    pub reaching: u64,
}

fn span(a: &Sample, b: &Sample) -> Span {
    let rx = b.rx.saturating_sub(a.rx);
    let legit = b.legit.saturating_sub(a.legit);
    let ign = b.ignored.saturating_sub(a.ignored);
    let reaching = b.attack.saturating_sub(a.attack);
    Span {
        offered: rx.saturating_sub(legit + ign).max(reaching),
        reaching,
    }
}

/// Attack packets offered to host0 between harness times `t0` and `t1`
/// (from the samples closest inside them).
pub fn offered_between(samples: &[Sample], t0: f64, t1: f64) -> u64 {
    let inside: Vec<&Sample> = samples.iter().filter(|x| x.t >= t0 && x.t <= t1).collect();
    match (inside.first(), inside.last()) {
        (Some(a), Some(b)) => span(a, b).offered,
        _ => 0,
    }
}

/// A window with fewer offered attack packets than this says nothing
/// about the share dropped (e.g. between the pulses of a pulse attack).
const MIN_OFFERED: u64 = 50;

/// Time to mitigate and the share reaching the stack after it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Mitigation {
    /// Attack start → the first sample from which every later window of
    /// the attack had ≥ 99 % of its attack packets kept from the stack.
    pub time_to_mitigate_s: Option<f64>,
    /// Attack packets reaching the stack after that time (the whole
    /// attack when never mitigated), percent of those offered.
    pub reaching_pct: Option<f64>,
    /// Attack packets offered to the host during the attack.
    pub offered: u64,
    /// Of those, reached the stack.
    pub reaching: u64,
}

/// Judge the samples of the attack `[a0, a1]` (harness seconds).
pub fn mitigation(samples: &[Sample], a0: f64, a1: f64) -> Mitigation {
    // Only windows inside the attack: after it, the counters' read skew
    // (host0's counter and nftables' are read one after the other) looks
    // like offered packets that never reached the stack.
    let s: Vec<&Sample> = samples
        .iter()
        .filter(|x| x.t >= a0 - 0.3 && x.t <= a1 + 0.05)
        .collect();
    if s.len() < 2 {
        return Mitigation::default();
    }
    let spans: Vec<Span> = s.windows(2).map(|w| span(w[0], w[1])).collect();
    let offered: u64 = spans.iter().map(|x| x.offered).sum();
    let reaching: u64 = spans.iter().map(|x| x.reaching).sum();
    let bad = |x: &Span| {
        x.offered >= MIN_OFFERED && x.reaching as f64 > (0.01 * x.offered as f64).max(1.0)
    };
    // The first window from which no window is bad.
    let last_bad = spans.iter().rposition(bad);
    let from = match last_bad {
        None => 0,
        Some(i) => i + 1,
    };
    let pct = |sp: &[Span]| {
        let o: u64 = sp.iter().map(|x| x.offered).sum();
        let r: u64 = sp.iter().map(|x| x.reaching).sum();
        (o > 0).then(|| 100.0 * r as f64 / o as f64)
    };
    let tail = &spans[from.min(spans.len())..];
    let tail_offered: u64 = tail.iter().map(|x| x.offered).sum();
    if offered == 0 {
        return Mitigation {
            offered,
            reaching,
            ..Mitigation::default()
        };
    }
    if from >= spans.len() || tail_offered < MIN_OFFERED {
        // Bad until the end: never mitigated.
        return Mitigation {
            time_to_mitigate_s: None,
            reaching_pct: pct(&spans),
            offered,
            reaching,
        };
    }
    Mitigation {
        time_to_mitigate_s: Some((s[from].t - a0).max(0.0)),
        reaching_pct: pct(tail),
        offered,
        reaching,
    }
}

/// Parse an alert timestamp (`2026-11-24T09:04:13.123456+00:00`, any
/// offset, or `Z`) into Unix seconds.
pub fn parse_ts(s: &str) -> Option<f64> {
    let (date, rest) = s.split_once('T')?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (time, off) = if let Some(t) = rest.strip_suffix('Z') {
        (t, 0i64)
    } else {
        let i = rest.rfind(['+', '-'])?;
        let (t, o) = rest.split_at(i);
        let sign = if o.starts_with('-') { -1 } else { 1 };
        let (oh, om) = o[1..]
            .split_once(':')
            .unwrap_or((&o[1..3.min(o.len())], "0"));
        (
            t,
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60),
        )
    };
    let mut tp = time.split(':');
    let (h, mi): (i64, i64) = (tp.next()?.parse().ok()?, tp.next()?.parse().ok()?);
    let sec: f64 = tp.next()?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 - off) as f64 + sec)
}

/// One alert line, the fields the suite reads.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertLine {
    /// Unix seconds.
    pub ts: f64,
    /// `alert`, `anomaly`, `stats`, …
    pub event_type: String,
    /// `rampart.event`: block, unblock, attack_start, police, cookies_on, …
    pub event: String,
    /// `rampart.vector`, else `rampart.detector`.
    pub vector: Option<String>,
    /// The source: `rampart.prefix`, else `src_ip` as a host prefix.
    pub source: Option<Prefix>,
}

/// Parse the alert file's lines (lines that are not alerts are skipped).
pub fn parse_alerts(text: &str) -> Vec<AlertLine> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(ts) = v["timestamp"].as_str().and_then(parse_ts) else {
            continue;
        };
        let r = &v["rampart"];
        let s = |x: &serde_json::Value| x.as_str().map(str::to_string);
        let source = s(&r["prefix"])
            .and_then(|p| Prefix::parse(&p).ok())
            .or_else(|| {
                v["src_ip"]
                    .as_str()
                    .and_then(|a| a.parse::<IpAddr>().ok())
                    .and_then(|a| Prefix::parse(&a.to_string()).ok())
            });
        out.push(AlertLine {
            ts,
            event_type: s(&v["event_type"]).unwrap_or_default(),
            event: s(&r["event"]).unwrap_or_default(),
            vector: s(&r["vector"]).or_else(|| s(&r["detector"])),
            source,
        });
    }
    out
}

/// The harness's ground truth: the legitimate sources (everything else the
/// scenario sends is attack).
#[derive(Debug, Clone)]
pub struct Truth {
    /// Prefixes of every legitimate source the harness used.
    pub legit: Vec<Prefix>,
}

fn overlaps(a: &Prefix, b: &Prefix) -> bool {
    a.family() == b.family() && (a.contains(&b.net().addr()) || b.contains(&a.net().addr()))
}

impl Truth {
    /// Does `p` cover or fall inside a legitimate source's prefix?
    pub fn touches_legit(&self, p: &Prefix) -> bool {
        self.legit.iter().any(|l| overlaps(l, p))
    }
}

/// Events that are not detections: unbans, tier moves, resumes.
fn is_detection(a: &AlertLine) -> bool {
    a.event_type == "alert"
        && !matches!(
            a.event.as_str(),
            "unblock" | "unpolice" | "cookies_off" | "attack_end" | "resume"
        )
}

/// What the alerts say about one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AlertVerdict {
    /// A detection naming an attack source or no source (victim level) in the attack window.
    pub detected: bool,
    /// The vector rampart named most often for the attack (None: nothing named).
    pub vector: Option<String>,
    /// Distinct prefixes blocked that touch a legitimate source (whole run).
    pub false_bans: usize,
    /// Each false ban (prefix, vector).
    pub false_ban_details: Vec<String>,
    /// Unblocks of attack sources during the attack.
    pub unbans_during_attack: usize,
    /// Most blacklist entries at once, counted from block/unblock events.
    pub blacklist_max_from_alerts: usize,
    /// Alert lines with `event_type` `alert`.
    pub alerts: usize,
    /// Alerts by `rampart.event`.
    pub by_event: BTreeMap<String, usize>,
}

/// Judge the alerts against the truth; the attack ran in `[a0, a1]` (Unix
/// seconds; `None`: a scenario without an attack, where any detection is
/// judged over the whole run).
pub fn judge_alerts(
    alerts: &[AlertLine],
    truth: &Truth,
    attack: Option<(f64, f64)>,
) -> AlertVerdict {
    let mut v = AlertVerdict::default();
    let mut vectors: BTreeMap<String, usize> = BTreeMap::new();
    let mut banned: HashSet<String> = HashSet::new();
    let mut live: HashSet<String> = HashSet::new();
    // Detections shortly after the attack's end are still about it (the
    // daemon's interval, alert queueing).
    let in_attack = |t: f64, slack: f64| match attack {
        Some((a0, a1)) => t >= a0 - 0.5 && t <= a1 + slack,
        None => true,
    };
    for a in alerts {
        if a.event_type == "alert" {
            v.alerts += 1;
            *v.by_event.entry(a.event.clone()).or_default() += 1;
        }
        let legit_src = a.source.as_ref().is_some_and(|p| truth.touches_legit(p));
        match a.event.as_str() {
            "block" => {
                if let Some(p) = &a.source {
                    live.insert(p.to_string());
                    v.blacklist_max_from_alerts = v.blacklist_max_from_alerts.max(live.len());
                    if legit_src && banned.insert(p.to_string()) {
                        v.false_bans += 1;
                        v.false_ban_details
                            .push(format!("{p} ({})", a.vector.as_deref().unwrap_or("?")));
                    }
                }
            }
            "unblock" => {
                if let Some(p) = &a.source {
                    live.remove(&p.to_string());
                    if !legit_src && attack.is_some() && in_attack(a.ts, 0.0) {
                        v.unbans_during_attack += 1;
                    }
                }
            }
            _ => {}
        }
        if is_detection(a) && !legit_src && in_attack(a.ts, 3.0) {
            v.detected = true;
            if let Some(x) = &a.vector {
                *vectors.entry(x.clone()).or_default() += 1;
            }
        }
    }
    v.vector = vectors
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(k, _)| k);
    v
}

/// Does rampart's name `got` match one of the expected vectors? A match is
/// the same name, or the expected name followed by `/…` (e.g. `carpet`
/// expected, `carpet/syn_flood` named).
pub fn vector_matches(expected: &[&str], got: &str) -> bool {
    expected.iter().any(|e| {
        got == *e
            || got
                .strip_prefix(e)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smp(t: f64, rx: u64, legit: u64, attack: u64) -> Sample {
        Sample {
            t,
            rx,
            legit,
            attack,
            ignored: 0,
            blocked: None,
        }
    }

    #[test]
    fn timestamps_parse_to_unix_seconds() {
        assert_eq!(parse_ts("1970-01-01T00:00:00+00:00"), Some(0.0));
        let t = parse_ts("2026-11-24T09:04:13.5+00:00").unwrap();
        assert!((t - 1_795_511_053.5).abs() < 1e-6, "{t}");
        assert_eq!(parse_ts("2026-11-24T10:04:13.5+01:00"), Some(t));
        assert_eq!(parse_ts("2026-11-24T09:04:13.5Z"), Some(t));
        assert_eq!(parse_ts("garbage"), None);
    }

    #[test]
    fn mitigated_after_the_last_leaking_window() {
        // 0.5 s windows: 1000 attack packets each; leaking fully until
        // t = 1.0, then all dropped; 10 legitimate packets a window.
        let mut s = Vec::new();
        let (mut rx, mut legit, mut atk) = (0, 0, 0);
        for i in 0..=10 {
            let t = f64::from(i) * 0.5;
            s.push(smp(t, rx, legit, atk));
            rx += 1010;
            legit += 10;
            if t < 1.0 {
                atk += 1000;
            }
        }
        let m = mitigation(&s, 0.0, 5.0);
        assert_eq!(m.time_to_mitigate_s, Some(1.0));
        assert_eq!(m.reaching_pct, Some(0.0));
        assert_eq!((m.offered, m.reaching), (10_000, 2_000));
    }

    #[test]
    fn windows_after_the_attack_do_not_count() {
        // Leaking all along; after the end (t = 4) a read skew shows 900
        // frames on host0 that nftables had already counted.
        let mut s: Vec<Sample> = (0..=4)
            .map(|i: u32| smp(f64::from(i), u64::from(i) * 1000, 0, u64::from(i) * 1000))
            .collect();
        s.push(smp(4.25, 4900, 0, 4000));
        let m = mitigation(&s, 0.0, 4.0);
        assert_eq!(m.time_to_mitigate_s, None);
        assert_eq!(m.reaching_pct, Some(100.0));
    }

    #[test]
    fn never_mitigated_reports_the_whole_attack() {
        let s: Vec<Sample> = (0..5)
            .map(|i: u32| smp(f64::from(i), u64::from(i) * 100, 0, u64::from(i) * 50))
            .collect();
        let m = mitigation(&s, 0.0, 4.0);
        assert_eq!(m.time_to_mitigate_s, None);
        assert_eq!(m.reaching_pct, Some(50.0));
    }

    #[test]
    fn quiet_windows_do_not_count_as_leaks() {
        // A pulse: 1000 dropped, then 10 packets of which 5 reach (too few
        // to judge), then 1000 dropped.
        let s = vec![
            smp(0.0, 0, 0, 0),
            smp(1.0, 1000, 0, 0),
            smp(2.0, 1010, 0, 5),
            smp(3.0, 2010, 0, 5),
        ];
        let m = mitigation(&s, 0.0, 3.0);
        assert_eq!(m.time_to_mitigate_s, Some(0.0));
    }

    #[test]
    fn no_attack_traffic_is_neither_mitigated_nor_leaking() {
        let s = vec![smp(0.0, 0, 0, 0), smp(1.0, 10, 10, 0)];
        assert_eq!(mitigation(&s, 0.0, 1.0), Mitigation::default());
    }

    fn line(ts: f64, ev: &str, vector: &str, src: &str) -> AlertLine {
        AlertLine {
            ts,
            event_type: if ev == "hw_add" { "stats" } else { "alert" }.into(),
            event: ev.into(),
            vector: Some(vector.into()),
            source: (!src.is_empty()).then(|| Prefix::parse(src).unwrap()),
        }
    }

    #[test]
    fn alerts_are_judged_against_the_harness_truth() {
        let truth = Truth {
            legit: vec![
                Prefix::parse("10.10.0.1/32").unwrap(),
                Prefix::parse("10.30.0.0/16").unwrap(),
            ],
        };
        let a = vec![
            line(9.0, "block", "udp_flood", "10.30.0.7/32"), // before the attack: still a false ban
            line(10.5, "block", "syn_flood", "10.66.0.1/32"),
            line(10.6, "block", "syn_flood", "10.66.0.2/32"),
            line(10.7, "block", "port_scan", "10.66.0.3/32"),
            line(11.0, "hw_add", "", "10.66.0.1/32"),
            line(12.0, "unblock", "detection", "10.66.0.2/32"),
            line(13.0, "block", "udp_flood", "10.0.0.0/8"), // covers legit: false ban
            line(30.0, "unblock", "detection", "10.66.0.1/32"), // after the attack
        ];
        let v = judge_alerts(&a, &truth, Some((10.0, 20.0)));
        assert!(v.detected);
        assert_eq!(v.vector.as_deref(), Some("syn_flood"));
        assert_eq!(v.false_bans, 2, "{:?}", v.false_ban_details);
        assert_eq!(v.unbans_during_attack, 1);
        assert_eq!(v.blacklist_max_from_alerts, 4);
        assert_eq!(v.alerts, 7);
        // Only a ban of the legitimate client: not a detection of the attack.
        let v = judge_alerts(&a[..1], &truth, Some((10.0, 20.0)));
        assert!(!v.detected);
        // Without an attack any detection of a non-legit source counts.
        let v = judge_alerts(&a[1..2], &truth, None);
        assert!(v.detected);
    }

    #[test]
    fn vector_names_match_exactly_or_by_family() {
        assert!(vector_matches(
            &["udp_amplification/ntp"],
            "udp_amplification/ntp"
        ));
        assert!(!vector_matches(
            &["udp_amplification/ntp"],
            "udp_amplification"
        ));
        assert!(!vector_matches(
            &["udp_amplification/ntp"],
            "udp_amplification/dns"
        ));
        assert!(vector_matches(&["carpet"], "carpet/syn_flood"));
        assert!(!vector_matches(&["syn_flood"], "syn_flood_x"));
        assert!(vector_matches(&["port_scan", "syn_flood"], "syn_flood"));
    }
}
