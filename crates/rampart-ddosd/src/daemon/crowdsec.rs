//! CrowdSec in the daemon: decisions pulled from the LAPI become
//! blacklist entries, and detection's blocks are pushed to it.
//!
//! **Threads.** A puller thread asks `GET /v1/decisions/stream` every
//! `pull_interval_s` (`startup=true` until one pull worked, then deltas)
//! and hands each answer to the daemon's loop; a pusher thread logs the
//! machine in and posts alerts. Neither ever blocks the loop: an
//! unreachable LAPI, refused credentials or a garbage answer is one log
//! line (when the failure starts or changes), `rampart_ddos_crowdsec_errors_total`
//! and the `error` of `/v1/status`'s `crowdsec`; filtering goes on with
//! what the blacklist holds.
//!
//! **One publish per pull.** The loop keeps every decision by id (a
//! prefix may have several) and, after each answer, makes the blacklist's
//! CrowdSec entries exactly what the live decisions want: adds (with the
//! decision's time left as the entry's expiry, so the data path ends the
//! ban on time even with the daemon down), removes and expiry changes go
//! in ONE `Filter::apply` — 100,000 decisions are one table publish, and
//! entries that stay keep their id and counters.
//!
//! **Kept apart from detection.** CrowdSec's entries are not in the
//! daemon's blocked list (`/v1/blocked`): detection's unbans never see
//! them. A prefix both want is held by detection (or the operator), with
//! no expiry; when detection lets it go, CrowdSec takes it back with its
//! decision's expiry instead of it being removed, and a deletion from the
//! LAPI only removes what CrowdSec itself holds. Whitelisted prefixes are
//! never entered (counted).
//!
//! **Restart.** What CrowdSec holds in the blacklist is saved in
//! `<state_dir>/<name>.crowdsec.json` after each change, so a new daemon
//! does not take those entries for blocks of its own; its first pull is
//! `startup=true`, the complete set of active decisions, and reconciles
//! (what was deleted while it was down goes, what was added comes). Until
//! that pull works the entries stay, each ending at its own expiry: the
//! file alone could not know about deletions, and a re-pull alone could
//! not tell the pinned entries apart from operator blocks.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use rampart_ddos::filter::{BlockEntry, Filter, Update};
use rampart_ddos::Prefix;
use serde::{Deserialize, Serialize};

use crate::crowdsec::{CrowdsecConfig, Delta, Lapi, LapiError, Push, Skipped, ERROR_KINDS};

/// CrowdSec as `/v1/status` shows it.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct CrowdsecView {
    /// The LAPI.
    pub lapi_url: String,
    /// Live ban decisions pulled (each prefix once).
    pub decisions: usize,
    /// Of them, entries CrowdSec holds in the blacklist.
    pub enforced: usize,
    /// Of them, prefixes detection or the operator hold already.
    pub shadowed: usize,
    /// Of them, whitelisted prefixes never entered.
    pub whitelisted: usize,
    /// Pulls that worked since start.
    pub pulls: u64,
    /// The first pull (`startup=true`) worked.
    pub synced: bool,
    /// Seconds since the last pull that worked.
    pub last_pull_age_s: Option<f64>,
    /// Wall time of the last blacklist update for CrowdSec (one publish).
    pub last_apply_s: f64,
    /// Entries added, removed, refreshed by that update.
    pub last_apply: [usize; 3],
    /// Decisions not enforced since start, by why.
    pub skipped: Skipped,
    /// Failures since start, by kind (`unreachable`, `credentials`, `status`, `garbage`, `apply`).
    pub errors: HashMap<String, u64>,
    /// The last failure, until a pull (or update) works again.
    pub error: Option<String>,
    /// Pushing detection's blocks (`push = true`).
    pub push: bool,
    /// Blocks pushed as alerts since start.
    pub pushed: u64,
    /// Blocks waiting to be pushed (the LAPI failed).
    pub push_pending: usize,
    /// The last push failure, until a push works again.
    pub push_error: Option<String>,
}

/// What the puller hands the loop.
type Pulled = std::result::Result<Delta, LapiError>;

#[derive(Debug, Default)]
struct PushStats {
    pushed: u64,
    pending: usize,
    errors: HashMap<&'static str, u64>,
    error: Option<String>,
}

/// The saved file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    /// Decisions: (id, prefix, expiry in Unix seconds).
    decisions: Vec<(i64, String, f64)>,
    /// Entries CrowdSec holds in the blacklist: (prefix, expiry).
    held: Vec<(String, f64)>,
}

/// The decisions, what the blacklist holds for them, and the threads.
#[derive(Debug)]
pub(crate) struct CrowdsecSide {
    cfg: CrowdsecConfig,
    rx: Option<Receiver<Pulled>>,
    push_tx: Option<Sender<Push>>,
    push_stats: Arc<Mutex<PushStats>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Live decisions by id: prefix and expiry (Unix seconds).
    decisions: HashMap<i64, (Prefix, f64)>,
    /// What CrowdSec holds in the blacklist, with the expiry it was given.
    held: HashMap<Prefix, f64>,
    /// Every prefix the decisions wanted at the last reconcile (held,
    /// owned by detection/the operator, or whitelisted), with its expiry.
    wants: HashMap<Prefix, f64>,
    /// Prefixes wanted but held by detection/the operator, and whitelisted ones (last reconcile).
    shadowed: usize,
    whitelisted: usize,
    path: PathBuf,
    /// The blacklist does not match the decisions (an update failed): retried every interval.
    dirty: bool,
    synced: bool,
    pulls: u64,
    last_pull: Option<Instant>,
    last_apply_s: f64,
    last_apply: [usize; 3],
    skipped: Skipped,
    errors: HashMap<String, u64>,
    error: Option<String>,
}

fn unix_now() -> f64 {
    rampart_service::alert::unix_now()
}

impl CrowdsecSide {
    /// The side of `cfg` with what `<state_dir>/<name>.crowdsec.json`
    /// says CrowdSec holds; the threads run only when `cfg.enabled`. A
    /// disabled section still loads the file, so its entries are not
    /// taken for blocks of the daemon's own (they end at their expiry).
    pub(crate) fn start(cfg: &CrowdsecConfig, state_dir: &Path, name: &str) -> Self {
        let path = state_dir.join(format!("{name}.crowdsec.json"));
        let saved: Saved = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
                tracing::warn!(
                    "{} is not CrowdSec state ({e}); its entries in the blacklist end at their expiry, the first pull enters the live decisions again",
                    path.display()
                );
                Saved::default()
            }),
            Err(_) => Saved::default(),
        };
        let p = |s: &str| Prefix::parse(s).ok();
        let mut me = Self {
            cfg: cfg.clone(),
            rx: None,
            push_tx: None,
            push_stats: Arc::default(),
            stop: Arc::default(),
            threads: Vec::new(),
            decisions: saved
                .decisions
                .iter()
                .filter_map(|(id, s, e)| Some((*id, (p(s)?, *e))))
                .collect(),
            held: saved
                .held
                .iter()
                .filter_map(|(s, e)| Some((p(s)?, *e)))
                .collect(),
            wants: HashMap::new(),
            shadowed: 0,
            whitelisted: 0,
            path,
            dirty: false,
            synced: false,
            pulls: 0,
            last_pull: None,
            last_apply_s: 0.0,
            last_apply: [0; 3],
            skipped: Skipped::default(),
            errors: ERROR_KINDS
                .iter()
                .chain(["apply"].iter())
                .map(|k| (k.to_string(), 0))
                .collect(),
            error: None,
        };
        me.wants = me.want_all(unix_now());
        if !cfg.enabled {
            if !me.held.is_empty() {
                tracing::warn!(
                    "[crowdsec] is disabled; the {} CrowdSec entries a previous run left in the blacklist stay until their decisions' expiry",
                    me.held.len()
                );
            }
            return me;
        }
        match (Lapi::new(cfg), Lapi::new(cfg)) {
            (Ok(puller), Ok(pusher)) => {
                let (tx, rx) = mpsc::channel();
                me.rx = Some(rx);
                let stop = me.stop.clone();
                let (interval, origins) = (cfg.pull_interval_s, cfg.origins.clone());
                match std::thread::Builder::new()
                    .name("crowdsec-pull".into())
                    .spawn(move || pull_loop(&puller, &origins, interval, &tx, &stop))
                {
                    Ok(h) => me.threads.push(h),
                    Err(e) => tracing::error!("cannot start the CrowdSec puller thread: {e}"),
                }
                if cfg.push {
                    let (ptx, prx) = mpsc::channel();
                    me.push_tx = Some(ptx);
                    let (stop, stats, d) =
                        (me.stop.clone(), me.push_stats.clone(), cfg.push_duration_s);
                    match std::thread::Builder::new()
                        .name("crowdsec-push".into())
                        .spawn(move || push_loop(pusher, d, &prx, &stats, &stop))
                    {
                        Ok(h) => me.threads.push(h),
                        Err(e) => tracing::error!("cannot start the CrowdSec pusher thread: {e}"),
                    }
                }
                tracing::info!(
                    "CrowdSec bouncer: pulling {} every {} s{}",
                    cfg.lapi_url,
                    cfg.pull_interval_s,
                    if cfg.push {
                        ", pushing detection's blocks as alerts"
                    } else {
                        ""
                    }
                );
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!("CrowdSec disabled: {e}");
                *me.errors.entry("credentials".into()).or_default() += 1;
                me.error = Some(e.to_string());
            }
        }
        me
    }

    /// Whether CrowdSec holds `p` in the blacklist (it is not a block of the daemon's own).
    pub(crate) fn holds(&self, p: &Prefix) -> bool {
        self.held.contains_key(p)
    }

    /// The expiry CrowdSec's live decisions want for `p` (`None`: none wants it).
    fn wanted(&self, p: &Prefix, now: f64) -> Option<f64> {
        self.wants.get(p).copied().filter(|e| *e > now)
    }

    /// Every prefix the live decisions want, with the latest expiry.
    fn want_all(&self, now: f64) -> HashMap<Prefix, f64> {
        let mut w: HashMap<Prefix, f64> = HashMap::with_capacity(self.decisions.len());
        for (p, e) in self.decisions.values() {
            if *e > now {
                let x = w.entry(*p).or_insert(*e);
                *x = x.max(*e);
            }
        }
        w
    }

    /// Take in the answers the puller has handed over. Returns whether
    /// the blacklist should be reconciled.
    fn take_pulls(&mut self) -> bool {
        let Some(rx) = &self.rx else {
            return false;
        };
        let mut got: Vec<Pulled> = Vec::new();
        while let Ok(r) = rx.try_recv() {
            got.push(r);
        }
        let mut changed = false;
        let now = unix_now();
        for r in got {
            match r {
                Ok(d) => {
                    self.pulls += 1;
                    self.last_pull = Some(Instant::now());
                    self.skipped.add(&d.skipped);
                    if d.startup {
                        // The complete set: what is not in it was deleted while we were away.
                        self.decisions.clear();
                        self.synced = true;
                        tracing::info!(
                            "CrowdSec: {} ban decision(s) active on the LAPI ({} skipped: {:?})",
                            d.new.len(),
                            d.skipped.by_reason().iter().map(|r| r.1).sum::<u64>(),
                            d.skipped
                        );
                    }
                    for g in &d.deleted {
                        match g.id {
                            Some(id) => {
                                self.decisions.remove(&id);
                            }
                            None => self.decisions.retain(|_, (p, _)| *p != g.prefix),
                        }
                    }
                    changed |= d.startup || !d.deleted.is_empty() || !d.new.is_empty();
                    for b in d.new {
                        self.decisions
                            .insert(b.id, (b.prefix, now + b.duration.as_secs_f64()));
                    }
                    if self.error.take().is_some() {
                        tracing::info!("CrowdSec: pulls from {} work again", self.cfg.lapi_url);
                    }
                }
                Err(e) => {
                    *self.errors.entry(e.kind().into()).or_default() += 1;
                    let msg = e.to_string();
                    if self.error.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(
                            "{msg}; filtering goes on with the {} CrowdSec entries held (said once until it changes)",
                            self.held.len()
                        );
                        self.error = Some(msg);
                    }
                }
            }
        }
        changed
    }

    /// Make the blacklist's CrowdSec entries what the live decisions want,
    /// in one update; `owned` holds prefixes detection or the operator
    /// block (theirs, left alone), `whitelisted` says which are never entered.
    pub(crate) fn reconcile(
        &mut self,
        filter: &mut Filter,
        owned: &dyn Fn(&Prefix) -> bool,
        whitelisted: &dyn Fn(&Prefix) -> bool,
    ) -> bool {
        let pulled = self.take_pulls();
        if !(pulled || self.dirty) {
            return false;
        }
        let t = Instant::now();
        let now = unix_now();
        let live: HashSet<Prefix> = match filter.entries() {
            Ok(v) => v.into_iter().map(|e| e.prefix).collect(),
            Err(e) => return self.apply_failed(&e.to_string()),
        };
        let mut want = self.want_all(now);
        self.wants = want.clone();
        let (mut shadowed, mut wl) = (0, 0);
        want.retain(|p, _| {
            if whitelisted(p) {
                wl += 1;
                false
            } else if owned(p) {
                shadowed += 1;
                false
            } else {
                true
            }
        });
        let ttl = |e: f64| Some(Duration::from_secs_f64((e - now).max(1.0)));
        let mut up = Update::default();
        for (p, e) in &want {
            match (self.held.get(p), live.contains(p)) {
                (_, false) => up.add.push(BlockEntry {
                    prefix: *p,
                    ttl: ttl(*e),
                }),
                // Seconds apart is the same decision seen again.
                (Some(h), true) if (h - e).abs() < 2.0 => {}
                (_, true) => up.refresh.push(BlockEntry {
                    prefix: *p,
                    ttl: ttl(*e),
                }),
            }
        }
        for p in self.held.keys() {
            if !want.contains_key(p) && live.contains(p) && !owned(p) {
                up.remove.push(*p);
            }
        }
        let counts = [up.add.len(), up.remove.len(), up.refresh.len()];
        if counts != [0, 0, 0] {
            if let Err(e) = filter.apply(&up) {
                return self.apply_failed(&format!(
                    "entering {} CrowdSec decision(s) and removing {} failed: {e}",
                    counts[0], counts[1]
                ));
            }
        }
        self.held = want;
        self.shadowed = shadowed;
        self.whitelisted = wl;
        self.last_apply_s = t.elapsed().as_secs_f64();
        self.last_apply = counts;
        if self.dirty {
            tracing::info!("CrowdSec: the blacklist holds the decisions again");
        }
        self.dirty = false;
        if counts != [0, 0, 0] {
            tracing::info!(
                "CrowdSec: {} entered, {} removed, {} expiry changed in one update ({:.3} s); {} held, {} held by detection or the operator, {} whitelisted",
                counts[0],
                counts[1],
                counts[2],
                self.last_apply_s,
                self.held.len(),
                shadowed,
                wl
            );
            self.save();
        }
        counts != [0, 0, 0]
    }

    /// Reconcile at the next interval even without a pull (the whitelist changed).
    pub(crate) fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    fn apply_failed(&mut self, msg: &str) -> bool {
        *self.errors.entry("apply".into()).or_default() += 1;
        if !self.dirty {
            tracing::error!("{msg}; retried every interval, host filtering goes on");
        }
        self.dirty = true;
        false
    }

    /// Detection or the operator now blocks `ps`: those CrowdSec held
    /// become theirs (no expiry). Returns the prefixes given up.
    pub(crate) fn yield_to(&mut self, filter: &mut Filter, ps: &[Prefix]) -> Vec<Prefix> {
        let mine: Vec<Prefix> = ps.iter().filter(|p| self.holds(p)).copied().collect();
        if mine.is_empty() {
            return mine;
        }
        let up = Update {
            refresh: mine
                .iter()
                .map(|p| BlockEntry {
                    prefix: *p,
                    ttl: None,
                })
                .collect(),
            ..Update::default()
        };
        if let Err(e) = filter.apply(&up) {
            // Still blocked, with CrowdSec's expiry: the next reconcile sees it owned.
            tracing::warn!("CrowdSec entries taken over by detection keep their expiry: {e}");
        }
        for p in &mine {
            self.held.remove(p);
        }
        self.save();
        mine
    }

    /// Detection or the operator lets `ps` go: those a live decision
    /// still wants stay, held by CrowdSec with that decision's expiry.
    /// Returns the prefixes kept (the caller removes the rest).
    pub(crate) fn take_back(
        &mut self,
        filter: &mut Filter,
        ps: &[Prefix],
        whitelisted: &dyn Fn(&Prefix) -> bool,
    ) -> HashSet<Prefix> {
        let now = unix_now();
        let keep: Vec<(Prefix, f64)> = ps
            .iter()
            .filter(|p| !whitelisted(p))
            .filter_map(|p| self.wanted(p, now).map(|e| (*p, e)))
            .collect();
        if keep.is_empty() {
            return HashSet::new();
        }
        let up = Update {
            refresh: keep
                .iter()
                .map(|(p, e)| BlockEntry {
                    prefix: *p,
                    ttl: Some(Duration::from_secs_f64((e - now).max(1.0))),
                })
                .collect(),
            ..Update::default()
        };
        match filter.apply(&up) {
            Ok(_) => {
                self.held.extend(keep.iter().copied());
                self.save();
                keep.into_iter().map(|(p, _)| p).collect()
            }
            Err(e) => {
                tracing::warn!(
                    "CrowdSec could not take back {} entries: {e}; the next pull enters them again",
                    keep.len()
                );
                self.dirty = true;
                HashSet::new()
            }
        }
    }

    /// Push a detection block (not one CrowdSec gave us: a decision is never sent back).
    pub(crate) fn push(&mut self, p: Push) {
        let Some(tx) = &self.push_tx else {
            return;
        };
        if self.wanted(&p.prefix, unix_now()).is_some() {
            return;
        }
        let _ = tx.send(p);
    }

    fn save(&self) {
        let s = Saved {
            decisions: self
                .decisions
                .iter()
                .map(|(id, (p, e))| (*id, p.to_string(), *e))
                .collect(),
            held: self.held.iter().map(|(p, e)| (p.to_string(), *e)).collect(),
        };
        let tmp = self.path.with_extension("json.tmp");
        let r = (|| -> std::io::Result<()> {
            if let Some(d) = self.path.parent() {
                std::fs::create_dir_all(d)?;
            }
            std::fs::write(&tmp, serde_json::to_vec(&s).map_err(std::io::Error::other)?)?;
            std::fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(
                "cannot save CrowdSec's entries to {}: {e}; a restart would list them as blocks of unknown origin",
                self.path.display()
            );
        }
    }

    pub(crate) fn view(&self) -> CrowdsecView {
        let ps = self
            .push_stats
            .lock()
            .map(|s| (s.pushed, s.pending, s.error.clone()));
        let (pushed, push_pending, push_error) = ps.unwrap_or_default();
        let mut errors = self.errors.clone();
        if let Ok(s) = self.push_stats.lock() {
            for (k, n) in &s.errors {
                *errors.entry((*k).to_string()).or_default() += n;
            }
        }
        CrowdsecView {
            lapi_url: self.cfg.lapi_url.clone(),
            decisions: self.held.len() + self.shadowed + self.whitelisted,
            enforced: self.held.len(),
            shadowed: self.shadowed,
            whitelisted: self.whitelisted,
            pulls: self.pulls,
            synced: self.synced,
            last_pull_age_s: self.last_pull.map(|t| t.elapsed().as_secs_f64()),
            last_apply_s: self.last_apply_s,
            last_apply: self.last_apply,
            skipped: self.skipped,
            errors,
            error: self.error.clone(),
            push: self.cfg.push,
            pushed,
            push_pending,
            push_error,
        }
    }
}

impl Drop for CrowdsecSide {
    /// The threads stop at their next step; not waited for: one may be
    /// inside a request (up to `timeout_s`), and a daemon that failed to
    /// start returns its error at once.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.push_tx = None;
        self.threads.clear();
    }
}

/// Sleep `secs` in short steps; false once `stop` is set.
fn nap(secs: f64, stop: &AtomicBool) -> bool {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !stop.load(Ordering::Relaxed)
}

fn pull_loop(
    lapi: &Lapi,
    origins: &[String],
    interval: f64,
    tx: &Sender<Pulled>,
    stop: &AtomicBool,
) {
    let mut synced = false;
    while !stop.load(Ordering::Relaxed) {
        let r = lapi.pull(!synced, origins);
        synced |= r.is_ok();
        if tx.send(r).is_err() {
            return;
        }
        if !nap(interval, stop) {
            return;
        }
    }
}

/// Most blocks kept for a LAPI that does not take them.
const MAX_PENDING: usize = 10_000;

fn push_loop(
    mut lapi: Lapi,
    duration_s: f64,
    rx: &Receiver<Push>,
    stats: &Mutex<PushStats>,
    stop: &AtomicBool,
) {
    let mut pending: Vec<Push> = Vec::new();
    let mut failing: Option<String> = None;
    let mut retry_at = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(p) => pending.push(p),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        while let Ok(p) = rx.try_recv() {
            pending.push(p);
        }
        if pending.len() > MAX_PENDING {
            let n = pending.len() - MAX_PENDING;
            pending.drain(..n);
            tracing::warn!(
                "CrowdSec: {n} block(s) not pushed (the LAPI has not taken them for a while)"
            );
        }
        if pending.is_empty() || Instant::now() < retry_at {
            if let Ok(mut s) = stats.lock() {
                s.pending = pending.len();
            }
            continue;
        }
        let batch: Vec<Push> = pending.drain(..pending.len().min(1000)).collect();
        let r = lapi.push(&batch, duration_s);
        let mut s = stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match r {
            Ok(ids) => {
                s.pushed += batch.len() as u64;
                s.error = None;
                tracing::debug!(
                    "CrowdSec: pushed {} block(s) as alert(s) {ids:?}",
                    batch.len()
                );
                if failing.take().is_some() {
                    tracing::info!("CrowdSec: pushes work again");
                }
            }
            Err(e) => {
                *s.errors.entry(e.kind()).or_default() += 1;
                let msg = e.to_string();
                if failing.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(
                        "{msg}; {} block(s) kept to push again (said once until it changes)",
                        batch.len()
                    );
                    failing = Some(msg.clone());
                }
                s.error = Some(msg);
                let mut b = batch;
                b.append(&mut pending);
                pending = b;
                retry_at = Instant::now() + Duration::from_secs(5);
            }
        }
        s.pending = pending.len();
    }
}

/// A block detection made, as a push.
pub(crate) fn push_of(prefix: Prefix, vector: &str, reason: &str) -> Push {
    Push {
        prefix,
        scenario: format!("rampart/{vector}"),
        message: format!("rampart blocked {prefix}: {reason}"),
        at: SystemTime::now(),
    }
}
