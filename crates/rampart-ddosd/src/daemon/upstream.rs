//! The upstream tier in the daemon's loop: each interval, beside the
//! hardware planner, [`UpstreamPlanner`] decides from the host's view
//! (every tier's counters) whether the router in front of the host should
//! drop the heaviest blocked sources too, and this module writes the
//! announcements and withdrawals to ExaBGP.
//!
//! The host tiers keep every rule whatever the upstream does: the upstream
//! is extra, so a withdrawal (or a speaker that is down) never lets a
//! packet reach the host's services. What is announced is in the state
//! file, so a restarted daemon neither announces it twice nor forgets to
//! withdraw it. Failures (no pipe, a pipe ExaBGP does not read) are one
//! log line each time they change, `rampart_ddos_upstream_errors_total`,
//! and the `error` of `/v1/status`'s `upstream`; host filtering goes on.

use std::collections::{BTreeSet, HashMap};

use rampart_ddos::Prefix;
use rampart_ddos_control::upstream::{SourceLoad, UpstreamInput, UpstreamPlanner, UpstreamStats};
use serde::Serialize;

use super::Daemon;
use crate::alerts;
use crate::tier::upstream::{Announcement, FlowMatch, Upstream, UpstreamConfig};
use crate::tier::{Tier, TierInfo};
use rampart_ddos_control::detection::Vector;
use rampart_ddos_control::features::UDP_AMP_PORTS;

/// The upstream tier as `/v1/status` shows it.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct UpstreamView {
    /// Engaged: the blocked volume reached `engage_at` of the link and has
    /// not stayed below `withdraw_below` for `hold_s` since.
    pub engaged: bool,
    /// Dry run: the announcements below were logged, not sent.
    pub dry_run: bool,
    /// The blocked volume as a share of the link.
    pub load: f64,
    /// The blocked volume (packets/s), the host's view.
    pub volume_pps: f64,
    /// The blocked volume (bits/s), the host's view.
    pub volume_bps: f64,
    /// Engage level (share of the link).
    pub engage_at: f64,
    /// Withdraw level (share of the link).
    pub withdraw_below: f64,
    /// Seconds below the withdraw level needed to withdraw.
    pub hold_s: f64,
    /// Seconds the volume has stayed below the withdraw level.
    pub low_for_s: f64,
    /// What is announced, as the ExaBGP commands that announced it.
    pub announced: Vec<String>,
    /// Most announcements at once (`max_rules`).
    pub capacity: usize,
    /// Blocked sources waiting for room.
    pub deferred: usize,
    /// Sources and victims never announced (whitelist, `never`) in the last plan.
    pub guarded: usize,
    /// Announcements and withdrawals sent since start.
    pub updates: u64,
    /// Cost of the last update on this host: the write to ExaBGP's pipe
    /// (seconds); docs/upstream.md has the measured time until the router
    /// has the route.
    pub last_update_s: f64,
    /// Commands that failed since start.
    pub errors: u64,
    /// The router keeps no per-rule counters: rates are the host's view.
    pub counters: &'static str,
    /// The last failure, until an update works again.
    pub error: Option<String>,
}

/// The tier, its planner and what the loop keeps about them.
#[derive(Debug)]
pub(crate) struct UpstreamSide {
    cfg: UpstreamConfig,
    planner: UpstreamPlanner,
    /// None until ExaBGP's pipe opens (tried every interval).
    tier: Option<Upstream>,
    /// A previous daemon's announcements, adopted once the pipe opens.
    pending: Vec<Announcement>,
    /// Each announced source's rate when it was announced: the router
    /// drops it from then on, so the host sees it idle; detection gets
    /// this rate instead, so it does not unban a source only because the
    /// router holds it.
    held_pps: HashMap<Prefix, f64>,
    updates: u64,
    errors: u64,
    error: Option<String>,
    /// Seconds the pipe has held commands without ExaBGP reading any.
    unread_s: f64,
    unread_last: usize,
    stalled: bool,
}

/// Commands unread this long mean the speaker is not reading.
const STALL_S: f64 = 2.0;

impl UpstreamSide {
    /// The tier of an enabled section, with what the state file says is
    /// announced. A pipe that does not open yet is logged and tried again
    /// every interval: the host's filtering never waits for it.
    pub(crate) fn start(cfg: &UpstreamConfig, saved: Vec<Announcement>) -> Option<Self> {
        if !cfg.enabled {
            if !saved.is_empty() {
                tracing::warn!(
                    "[upstream] is disabled, but the state file lists {} announcement(s) a previous run left with ExaBGP; withdraw them by hand or enable the section so they are withdrawn: {:?}",
                    saved.len(),
                    saved
                );
            }
            return None;
        }
        let mut me = Self {
            cfg: cfg.clone(),
            planner: UpstreamPlanner::new(cfg.levels()),
            tier: None,
            pending: saved,
            held_pps: HashMap::new(),
            updates: 0,
            errors: 0,
            error: None,
            unread_s: 0.0,
            unread_last: 0,
            stalled: false,
        };
        me.try_open();
        if me.tier.is_some() {
            tracing::info!(
                "upstream tier{}: engages at {} of the link ({}), withdraws below {} for {} s, at most {} rules",
                if cfg.dry_run { " (dry run)" } else { "" },
                cfg.engage_at,
                link(cfg),
                cfg.withdraw_below,
                cfg.hold_s,
                cfg.max_rules
            );
        }
        Some(me)
    }

    fn try_open(&mut self) {
        if self.tier.is_some() {
            return;
        }
        match Upstream::open(self.cfg.clone()) {
            Ok(mut t) => {
                t.adopt(&self.pending);
                self.pending.clear();
                if self.error.take().is_some() {
                    tracing::info!("upstream: ExaBGP's pipe is open again");
                }
                self.tier = Some(t);
            }
            Err(e) => self.fail(format!(
                "upstream tier not available: {e}; host filtering goes on"
            )),
        }
    }

    /// Is ExaBGP reading what is written? Commands that sit unread for
    /// [`STALL_S`] seconds (none read meanwhile) are one error line, a
    /// count each interval and the status's `error`, until it reads them
    /// (it then applies them in order). Host filtering is not affected.
    fn check_reader(&mut self, secs: f64) {
        let Some(n) = self.tier.as_ref().and_then(Upstream::unread_bytes) else {
            return;
        };
        if n == 0 || n < self.unread_last {
            self.unread_s = 0.0;
        } else {
            self.unread_s += secs;
        }
        self.unread_last = n;
        if self.unread_s >= STALL_S {
            self.stalled = true;
            self.fail(format!(
                "upstream: ExaBGP has not read its command pipe {} for {STALL_S} s or more (announcements and \
                 withdrawals wait there; is ExaBGP running, with `process rampart` reading the pipe?); host filtering goes on",
                self.cfg.command_pipe.display()
            ));
        } else if self.stalled && n == 0 {
            self.stalled = false;
            if self.error.take().is_some() {
                tracing::info!("upstream: ExaBGP reads its command pipe again");
            }
        }
    }

    fn fail(&mut self, msg: String) {
        self.errors += 1;
        if self.error.as_deref() != Some(msg.as_str()) {
            tracing::error!("{msg}");
            self.error = Some(msg);
        }
    }

    /// What is announced (or waits to be adopted).
    pub(crate) fn announced(&self) -> Vec<Announcement> {
        match &self.tier {
            Some(t) => t.announced(),
            None => self.pending.clone(),
        }
    }

    /// The rate detection sees for a source the router holds.
    pub(crate) fn held_pps(&self, p: &Prefix) -> f64 {
        self.held_pps.get(p).copied().unwrap_or(0.0)
    }

    /// New levels (a reload).
    pub(crate) fn set_config(&mut self, cfg: &UpstreamConfig) {
        self.planner.set_levels(cfg.levels());
        self.cfg = cfg.clone();
    }

    pub(crate) fn view(&self) -> UpstreamView {
        let s: UpstreamStats = self.planner.stats();
        UpstreamView {
            engaged: s.engaged,
            dry_run: self.cfg.dry_run,
            load: s.load,
            volume_pps: s.pps,
            volume_bps: s.bps,
            engage_at: self.cfg.engage_at,
            withdraw_below: self.cfg.withdraw_below,
            hold_s: self.cfg.hold_s,
            low_for_s: s.low_for_s,
            announced: self
                .tier
                .as_ref()
                .map(Upstream::announced_lines)
                .unwrap_or_default(),
            capacity: self.cfg.max_rules,
            deferred: s.deferred,
            guarded: s.guarded,
            updates: self.updates,
            last_update_s: self
                .tier
                .as_ref()
                .map_or(0.0, |t| t.info().update_cost.as_secs_f64()),
            errors: self.errors,
            counters: "none",
            error: self.error.clone(),
        }
    }

    /// The tier's line of `/v1/tiers`.
    pub(crate) fn tier_info(&self) -> Option<(TierInfo, usize)> {
        self.tier.as_ref().map(|t| (t.info(), t.announced().len()))
    }
}

fn link(c: &UpstreamConfig) -> String {
    let mut v = Vec::new();
    if c.link_capacity_bps > 0.0 {
        v.push(format!("{} bit/s", c.link_capacity_bps));
    }
    if c.link_capacity_pps > 0.0 {
        v.push(format!("{} packets/s", c.link_capacity_pps));
    }
    v.join(", ")
}

impl Daemon {
    /// One interval of the upstream tier. Returns whether what is
    /// announced changed (the state file must then be saved).
    pub(super) fn upstream_step(&mut self, rates: &HashMap<Prefix, (f64, f64)>, secs: f64) -> bool {
        let Some(up) = self.upstream.as_mut() else {
            return false;
        };
        up.try_open();
        up.check_reader(secs);
        let rtbh = up.cfg.rtbh;
        let sources: Vec<SourceLoad> = self
            .blocked
            .keys()
            .map(|p| {
                // Flow input's sources: the routers' view, which the host
                // may not share (their victims need not be on this host).
                let fr = self.flow.as_ref().map_or((0.0, 0.0), |f| f.rate(p));
                SourceLoad {
                    prefix: *p,
                    pps: rates.get(p).map_or(0.0, |r| r.0 + r.1).max(fr.0),
                    bps: self.last_bps.get(p).copied().unwrap_or(0.0).max(fr.1),
                }
            })
            .collect();
        // RTBH is for one address: a /24 victim aggregate is not blackholed.
        let victims: Vec<Prefix> = if rtbh {
            let mut v: Vec<Prefix> = self
                .detection
                .victims()
                .into_iter()
                .filter(|v| v.under_attack)
                .map(|v| v.victim)
                .chain(self.flow.iter().flat_map(|f| f.under_attack()))
                .filter(|v| matches!(v.len(), 32 | 128))
                .collect();
            v.sort();
            v.dedup();
            v
        } else {
            Vec::new()
        };
        // Detection's reason for each source it blocked: a reflector that
        // hits one victim gets a rule for that traffic only (to the
        // victim, UDP from the service's port), so the router drops the
        // reflected packets and nothing else the source sends.
        let mut why: HashMap<Prefix, Vec<(Prefix, Vector)>> = HashMap::new();
        for (src, victim, vector) in self.detection.blocked() {
            why.entry(src).or_default().push((victim, vector));
        }
        let up = self.upstream.as_mut().expect("checked");
        let mut never: Vec<Prefix> = up
            .cfg
            .never
            .iter()
            .filter_map(|n| Prefix::from_net(n.trunc()).ok())
            .collect();
        never.extend(
            self.cfg
                .detect
                .whitelist
                .iter()
                .filter_map(|w| Prefix::parse(w).ok()),
        );
        never.extend(self.operator_whitelist.iter().copied());
        let Some(tier) = up.tier.as_mut() else {
            return false;
        };
        let (mut flows, mut blackholes) = (BTreeSet::new(), BTreeSet::new());
        for a in tier.announced() {
            match a {
                Announcement::Flow { source, .. } => {
                    if let Ok(p) = Prefix::from_net(source) {
                        flows.insert(p);
                    }
                }
                Announcement::Blackhole { victim } => {
                    blackholes.insert(Prefix::host(victim));
                }
            }
        }
        let plan = up.planner.plan(&UpstreamInput {
            secs,
            sources: &sources,
            victims: &victims,
            never: &never,
            flows: &flows,
            blackholes: &blackholes,
        });
        if plan.is_empty() {
            return false;
        }
        let flow = |p: &Prefix| {
            let (mut dest, mut matching) = (None, FlowMatch::default());
            if let Some([(victim, Vector::UdpAmplification(c))]) = why.get(p).map(Vec::as_slice) {
                if let Some(port) = UDP_AMP_PORTS.get(usize::from(*c)) {
                    dest = Some(victim.net());
                    matching.protocol = Some(17);
                    matching.source_port = Some(*port);
                }
            }
            Announcement::Flow {
                source: p.net(),
                dest,
                matching,
            }
        };
        // A withdrawal names what is held from that source, whatever it
        // matched when it was announced.
        let held = tier.announced();
        let held_from = |p: &Prefix| -> Vec<Announcement> {
            held.iter()
                .filter(|a| matches!(a, Announcement::Flow { source, .. } if *source == p.net()))
                .cloned()
                .collect()
        };
        let hole = |p: &Prefix| Announcement::Blackhole {
            victim: p.net().addr(),
        };
        // Withdrawals first: they make room for the announcements.
        let mut ops: Vec<(bool, Announcement, Prefix)> = Vec::new();
        ops.extend(
            plan.withdraw_flows
                .iter()
                .flat_map(|p| held_from(p).into_iter().map(|a| (false, a, *p))),
        );
        ops.extend(
            plan.withdraw_blackholes
                .iter()
                .map(|p| (false, hole(p), *p)),
        );
        ops.extend(plan.announce_blackholes.iter().map(|p| (true, hole(p), *p)));
        ops.extend(plan.announce_flows.iter().map(|p| (true, flow(p), *p)));
        let dry = tier.dry_run();
        let mut failures = Vec::new();
        let mut changed = false;
        for (add, a, p) in ops {
            let r = if add {
                tier.announce(a.clone()).map(|()| true)
            } else {
                tier.withdraw(&a)
            };
            match r {
                Ok(done) => {
                    if !done {
                        continue;
                    }
                    changed = true;
                    up.updates += 1;
                    self.metrics
                        .rule_updates
                        .with_label_values(&["upstream", if add { "add" } else { "remove" }])
                        .inc();
                    if let Announcement::Flow { .. } = a {
                        if add {
                            let pps = sources
                                .iter()
                                .find(|s| s.prefix == p)
                                .map_or(0.0, |s| s.pps);
                            up.held_pps.insert(p, pps);
                        } else {
                            up.held_pps.remove(&p);
                        }
                    }
                    self.alerts.emit(alerts::upstream(add, &a, &p, dry));
                }
                Err(e) => failures.push(format!(
                    "upstream: {} {p}: {e}",
                    if add { "announcing" } else { "withdrawing" }
                )),
            }
        }
        let ok = failures.is_empty();
        // One line per interval at most, however many commands failed.
        if let Some(first) = failures.first() {
            up.errors += failures.len() as u64 - 1;
            up.fail(if failures.len() == 1 {
                first.clone()
            } else {
                format!("{first} (and {} more)", failures.len() - 1)
            });
        }
        if ok && !up.stalled && up.error.take().is_some() {
            tracing::info!("upstream: updates work again");
        }
        changed
    }
}
