//! Flow input in the daemon's loop: every step (a third of the export
//! interval, at least 0.5 s) the records the receivers summed
//! ([`crate::flow_input`]) join a sliding window of the last export
//! interval, the window goes through a detection of its own, and its
//! blocks go where the host's do.
//!
//! Why a window judged every step: a record leaves its exporter when the
//! flow reaches the active timeout (the export interval), so records
//! arrive in rounds, each holding up to an interval of traffic. Judged
//! once per interval on a clock of its own, a round could wait almost
//! another interval; judged alone, a step's arrivals would read as a
//! round's packets over a third of the time, then as nothing. Over the
//! window, rates are the last interval's (sums over the seconds the
//! window covers), and a round is judged at most a step after it lands.
//! Detection's clock advances by the step: hold and quiet times, baseline
//! growth per minute and warm-up stay in seconds
//! ([`detection::Interval::window_s`]).
//!
//! Why a second detection rather than the host's: its records arrive in
//! exporters' rounds, not every half second, its counts are the routers'
//! view of the protected prefixes — for victims on this host, the same
//! packets the data path already counts, which one instance would count
//! twice — and its baselines are per victim of the whole network. It runs
//! with the same `[detect]` settings (shipped defaults, whitelist).
//!
//! Its blocks go to the blacklist like the host detection's (every tier;
//! for victims on this host they drop what reaches it), so the upstream
//! tier — which takes blocked sources by volume — announces them; their
//! volume is what the flows measured over the window, since the host may
//! see none of their traffic. That volume times their unblocks and is not
//! added to their victims' rates: the records count it already. Its
//! unblocks release only what it blocked.
//! Alerts carry `"rampart": {"source": "flow", …}`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rampart_ddos::Prefix;
use rampart_ddos_control::detection::{self, Detection, SourceRate};
use rampart_ddos_control::flow::FlowWindow;
use rampart_ddos_control::BlockDecision;

use super::Daemon;
use crate::alerts;
use crate::flow_input::{FlowInput, FlowInputConfig, FlowInputView, FlowMetrics};

/// The receivers, their window, its detection and what it blocked.
#[derive(Debug)]
pub(crate) struct FlowSide {
    input: FlowInput,
    detection: Detection,
    cfg: FlowInputConfig,
    window: FlowWindow,
    /// When the last step ended.
    last: Instant,
    /// When the next step is due: a grid of steps from the start, so that
    /// late ticks do not stretch the window.
    due: Instant,
    intervals: u64,
    events: u64,
    victims: usize,
    outside: u64,
    /// What this detection blocked (and the blacklist still holds).
    blocked: HashSet<Prefix>,
    /// What it decided to block that was blocked already (by the host's
    /// detection or the operator): its flow rate still goes to the
    /// upstream tier, and it never unblocks them.
    decided: HashSet<Prefix>,
    /// Per blocked source, (packets/s, bits/s) over the window.
    rates: HashMap<Prefix, (f64, f64)>,
}

impl FlowSide {
    /// Start the receivers of an enabled section. A bad section is a
    /// config error (checked at load); sockets that cannot be bound are
    /// logged and listed, and the rest runs.
    pub(crate) fn start(
        cfg: &FlowInputConfig,
        detect: &detection::DetectionConfig,
        name: &str,
        registry: &rampart_service::Metrics,
    ) -> Result<Option<Self>, String> {
        if !cfg.enabled {
            return Ok(None);
        }
        let detection =
            Detection::new(detect, &format!("{name}-flow")).map_err(|e| e.to_string())?;
        let input = FlowInput::start(cfg, FlowMetrics::new(registry))?;
        let window = FlowWindow::new(cfg.export_interval_s, cfg.max_pairs);
        tracing::info!(
            "flow input: watching {} with an export interval of {} s, judged every {:.2} s",
            cfg.protected.join(", "),
            cfg.export_interval_s,
            window.step_s()
        );
        let now = Instant::now();
        Ok(Some(FlowSide {
            input,
            detection,
            cfg: cfg.clone(),
            due: now + Duration::from_secs_f64(window.step_s()),
            window,
            last: now,
            intervals: 0,
            events: 0,
            victims: 0,
            outside: 0,
            blocked: HashSet::new(),
            decided: HashSet::new(),
            rates: HashMap::new(),
        }))
    }

    /// The rate flows measured for a blocked source: (packets/s, bits/s).
    pub(crate) fn rate(&self, p: &Prefix) -> (f64, f64) {
        self.rates.get(p).copied().unwrap_or_default()
    }

    /// Victims flow detection has under attack.
    pub(crate) fn under_attack(&self) -> Vec<Prefix> {
        self.detection
            .victims()
            .into_iter()
            .filter(|v| v.under_attack)
            .map(|v| v.victim)
            .collect()
    }

    pub(crate) fn view(&self) -> FlowInputView {
        let (listening, errors, exporters) = self.input.sockets();
        FlowInputView {
            listening,
            errors,
            export_interval_s: self.cfg.export_interval_s,
            protected: self.cfg.protected.clone(),
            intervals: self.intervals,
            victims: self.victims,
            blocked: self.blocked.len() + self.decided.len(),
            events: self.events,
            outside: self.outside,
            exporters,
        }
    }
}

impl Daemon {
    /// One flow step when it is due: the step's records join the window
    /// and the window is judged. Returns whether the blacklist changed.
    pub(super) fn flow_step(&mut self) -> crate::Result<bool> {
        // The loop calls this once per tick; a step due within half a
        // tick runs now, else a step on the tick grid (1 s steps on 0.5 s
        // ticks) would slip to the next tick whenever this tick's work
        // was a little shorter.
        let half_tick = Duration::from_secs_f64(self.cfg.daemon.interval_s / 2.0);
        let Some(f) = self.flow.as_mut() else {
            return Ok(false);
        };
        let now = Instant::now();
        if now + half_tick < f.due {
            return Ok(false);
        }
        let step = Duration::from_secs_f64(f.window.step_s());
        f.due += step;
        if f.due <= now {
            // Behind by more than a step (a stalled loop): restart the grid.
            f.due = now + step;
        }
        let secs = now.duration_since(f.last).as_secs_f64();
        f.last = now;
        f.window.push(secs, f.input.take_bucket());
        let (pairs, victims) = f.window.records();
        let span = f.window.span_s();
        f.outside = f.window.outside();
        f.victims = victims.len();
        // Per-source rates of what this detection blocked, from the flows
        // over the window (the host may see none of that traffic).
        let mut by_src: HashMap<std::net::IpAddr, (u64, u64)> = HashMap::new();
        for r in &pairs {
            let e = by_src.entry(r.src).or_default();
            e.0 = e.0.saturating_add(r.packets);
            e.1 = e.1.saturating_add(r.bytes);
        }
        f.rates.clear();
        for p in f.blocked.iter().chain(&f.decided) {
            let (pk, by) = if matches!(p.len(), 32 | 128) {
                by_src.get(&p.net().addr()).copied().unwrap_or_default()
            } else {
                by_src
                    .iter()
                    .filter(|(a, _)| p.contains(a))
                    .fold((0, 0), |acc, (_, v)| (acc.0 + v.0, acc.1 + v.1))
            };
            f.rates
                .insert(*p, (pk as f64 / span, by as f64 * 8.0 / span));
        }
        let blocked_rates: Vec<SourceRate> = f
            .rates
            .iter()
            .map(|(p, r)| SourceRate {
                prefix: *p,
                pps: r.0,
            })
            .collect();
        let iv = detection::Interval {
            index: f.intervals,
            secs,
            window_s: Some(span),
            pairs: &pairs,
            victims: &victims,
            skips: detection::Skips::default(),
            blocked: &blocked_rates,
            // The exporters saw the blocked sources' packets before any
            // tier dropped them: the records hold them already.
            blocked_in_records: true,
            policed: &[],
        };
        f.intervals += 1;
        let v = f.detection.observe(&iv);
        f.events += v.events.len() as u64;

        let mut decisions = Vec::new();
        let mut attacks = Vec::new();
        let f = self.flow.as_mut().expect("checked");
        for b in &v.blocks {
            if self.blocked.contains_key(&b.prefix) {
                if !f.blocked.contains(&b.prefix) {
                    f.decided.insert(b.prefix);
                    f.rates.insert(b.prefix, (b.pps, b.bps));
                }
                continue;
            }
            decisions.push(BlockDecision {
                prefix: b.prefix,
                detector: b.detector,
                reason: format!("{} (flow input): {}", b.vector, b.reason),
                pps: b.pps,
                bps: b.bps,
            });
            attacks.push((b.victim, b.vector.clone()));
        }
        let f = self.flow.as_mut().expect("checked");
        for u in &v.unblocks {
            if f.decided.remove(&u.prefix) {
                f.rates.remove(&u.prefix);
            }
        }
        let unbans: Vec<Prefix> = v
            .unblocks
            .iter()
            .map(|u| u.prefix)
            .filter(|p| f.blocked.contains(p))
            .collect();
        for d in &decisions {
            f.blocked.insert(d.prefix);
            f.rates.insert(d.prefix, (d.pps, d.bps));
        }
        for p in &unbans {
            f.blocked.remove(p);
            f.rates.remove(p);
        }
        let reasons: Vec<String> = v
            .unblocks
            .iter()
            .filter(|u| unbans.contains(&u.prefix))
            .map(|u| format!("{} (flow input)", u.reason))
            .collect();
        if !decisions.is_empty() {
            self.block_for(&decisions, &attacks, false, Some("flow"))?;
        }
        let unbans: Vec<Prefix> = unbans
            .into_iter()
            .filter(|p| self.blocked.get(p).is_some_and(|b| !b.operator))
            .collect();
        if !unbans.is_empty() {
            self.unblock_now(&unbans, "detection", &reasons)?;
            self.unbanned_total += unbans.len() as u64;
        }
        for e in &v.events {
            self.alerts
                .emit(alerts::from_flow(alerts::attack_event(e, "flow")));
        }
        Ok(!decisions.is_empty() || !unbans.is_empty())
    }
}
