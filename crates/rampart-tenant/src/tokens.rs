//! Token generation — Algorithm 1 of Chaignon et al. (SecSoN 2018).
//!
//! Every Δt the generator hands out `budget × Δt` tokens (nanoseconds of
//! CPU) to the tenants' buckets in proportion to their weights `v_i`. A
//! bucket holds at most `B` tokens; whatever a full bucket cannot take is
//! redistributed, again by weight, to the buckets that are not full, until
//! no tokens are left or every bucket is full (only then are tokens
//! discarded). An idle tenant's bucket fills up and its share goes to the
//! busy ones: the sharing is work-conserving.
//!
//! In the data path a bucket is `granted - used` (see `bpf/tenant/infra.h`):
//! userspace only ever raises `granted`, BPF only ever raises `used`, so
//! the two never race.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rampart_bpf::abi::tenant::TENANT_GRANT_DEADLINE_KEY;
use serde::Serialize;

use crate::error::{Error, Result};

/// One bucket as the algorithm sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Share `v_i` (≥ 1 to receive anything).
    pub weight: u32,
    /// Current level (`granted - used`); negative when the tenant overdrew.
    pub level: i64,
}

/// Result of one round of generation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Distribution {
    /// Tokens added to each bucket, in the order given.
    pub added: Vec<u64>,
    /// Tokens left over because every bucket was full.
    pub wasted: u64,
}

/// Room left in a bucket below the cap `cap`.
fn room(b: &Bucket, cap: u64) -> u64 {
    let cap = i128::from(cap);
    let lvl = i128::from(b.level);
    if lvl >= cap {
        0
    } else {
        u64::try_from(cap - lvl).unwrap_or(u64::MAX)
    }
}

/// Algorithm 1: distribute `tokens` to `buckets` by weight, capping each
/// bucket at `cap` and redistributing the surplus of full buckets to the
/// others until none is left.
///
/// Exact in integers: `Σ added + wasted == tokens`, and `wasted > 0` only
/// when every bucket with a weight is full.
pub fn generate(tokens: u64, cap: u64, buckets: &[Bucket]) -> Distribution {
    let n = buckets.len();
    let mut added = vec![0u64; n];
    let rooms: Vec<u64> = buckets.iter().map(|b| room(b, cap)).collect();
    let mut remaining = tokens;
    loop {
        let active: Vec<usize> = (0..n)
            .filter(|&i| buckets[i].weight > 0 && added[i] < rooms[i])
            .collect();
        if remaining == 0 || active.is_empty() {
            break;
        }
        let total_w: u128 = active.iter().map(|&i| u128::from(buckets[i].weight)).sum();
        let mut given = 0u64;
        for &i in &active {
            let share = (u128::from(remaining) * u128::from(buckets[i].weight) / total_w) as u64;
            let give = share.min(rooms[i] - added[i]);
            added[i] += give;
            given += give;
        }
        if given == 0 {
            // Every share rounded down to zero (remaining < Σ weights): hand
            // out the last few tokens one at a time, heaviest weight first.
            let mut order = active.clone();
            order.sort_by_key(|&i| (std::cmp::Reverse(buckets[i].weight), i));
            for i in order {
                if given == remaining {
                    break;
                }
                added[i] += 1;
                given += 1;
            }
        }
        remaining -= given;
    }
    Distribution {
        added,
        wasted: remaining,
    }
}

/// How tokens are generated.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TokenConfig {
    /// CPU time handed out per second of wall time (ns/s): the share of a
    /// core the tenants' packets may use together.
    pub budget_ns_per_sec: f64,
    /// Δt between rounds.
    #[serde(serialize_with = "ser_ms")]
    pub period: Duration,
    /// Bucket cap `B` (ns).
    pub cap_ns: u64,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl TokenConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the setting.
    pub fn validate(&self) -> Result<()> {
        if !(self.budget_ns_per_sec.is_finite() && self.budget_ns_per_sec > 0.0) {
            return Err(Error::Invalid(
                "fairness budget must be > 0 (cores, e.g. budget_cores = 0.8)".into(),
            ));
        }
        if self.period < Duration::from_millis(1) || self.period > Duration::from_secs(1) {
            return Err(Error::Invalid(
                "fairness period_ms must be within 1..=1000".into(),
            ));
        }
        if self.cap_ns == 0 {
            return Err(Error::Invalid(
                "fairness bucket cap must be > 0 (bucket_ms)".into(),
            ));
        }
        Ok(())
    }
}

/// Per-tenant token figures, for stats.
#[derive(Debug, Clone, Copy, Default, Serialize, utoipa::ToSchema)]
pub struct TenantTokens {
    /// Tokens granted since the tenant was added (ns).
    pub granted_ns: u64,
    /// Current level (`granted - used`), ns.
    pub level_ns: i64,
}

/// Shared state between the generator thread and the host agent.
#[derive(Debug, Default)]
struct Shared {
    /// tenant id → weight.
    weights: BTreeMap<u32, u32>,
    /// tenant id → granted so far (userspace is the only writer of the map).
    granted: BTreeMap<u32, u64>,
    /// tenant id → last level seen.
    levels: BTreeMap<u32, i64>,
    wasted_ns: u64,
    rounds: u64,
}

/// The running token generator: one thread writing `granted` every Δt.
#[derive(Debug)]
pub struct TokenGenerator {
    cfg: TokenConfig,
    grant_fd: Arc<OwnedFd>,
    used_fd: Arc<OwnedFd>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn read_u64(fd: &OwnedFd, key: u32) -> Result<u64> {
    Ok(rampart_dataplane::maps::lookup_u64(fd.as_raw_fd(), key)?)
}

fn write_u64(fd: &OwnedFd, key: u32, v: u64) -> Result<()> {
    rampart_dataplane::maps::update_raw(fd.as_raw_fd(), &key.to_ne_bytes(), &v.to_ne_bytes(), 0)?;
    Ok(())
}

/// Real-time priority of the token generator thread (SCHED_FIFO), above
/// the NAPI threads' 50. The thread is the fairness machinery's clock and
/// must run every Δt. At an ordinary priority, on a host whose cores are
/// busy with SCHED_FIFO packet work (the lab's generator and NAPI thread),
/// it ran only in the scheduler's throttling windows. It then handed out
/// several periods' tokens at once, the 5 ms caps clipped them, and the
/// tenants were charged less than the budget while being rejected. A round
/// costs a few microseconds per tenant.
pub const TOKEN_THREAD_PRIORITY: i32 = 60;

fn realtime_priority() {
    let param = libc::sched_param {
        sched_priority: TOKEN_THREAD_PRIORITY,
    };
    // SAFETY: plain syscall on the calling thread with a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        tracing::warn!(
            "token generator thread stays at normal priority ({}): rounds may come late on a busy host",
            std::io::Error::last_os_error()
        );
    }
}

/// How long the dispatcher keeps enforcing after the generator's last
/// round: several periods (a late round is no death), at least a second.
fn grace(period: Duration) -> Duration {
    (period * 10).max(Duration::from_secs(1))
}

/// Tell the dispatcher the generator is alive until now + [`grace`] (see
/// `TENANT_GRANT_DEADLINE_KEY`): if this process dies, enforcement stops
/// there instead of every tenant's bucket draining to `no_tokens` drops.
fn write_deadline(grant_fd: &OwnedFd, period: Duration) -> Result<()> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return Err(Error::io(
            "reading CLOCK_MONOTONIC",
            std::io::Error::last_os_error(),
        ));
    }
    let ns = u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0));
    let grace = u64::try_from(grace(period).as_nanos()).unwrap_or(u64::MAX);
    write_u64(
        grant_fd,
        TENANT_GRANT_DEADLINE_KEY,
        ns.saturating_add(grace),
    )
}

impl TokenGenerator {
    /// Start generating into the `granted`/`used` maps.
    ///
    /// # Errors
    /// Invalid configuration.
    pub fn start(cfg: TokenConfig, grant_fd: OwnedFd, used_fd: OwnedFd) -> Result<Self> {
        cfg.validate()?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        write_deadline(&grant_fd, cfg.period)?;
        let grant_fd = Arc::new(grant_fd);
        let used_fd = Arc::new(used_fd);
        let thread = {
            let (shared, stop, grant_fd, used_fd) = (
                Arc::clone(&shared),
                Arc::clone(&stop),
                Arc::clone(&grant_fd),
                Arc::clone(&used_fd),
            );
            std::thread::Builder::new()
                .name("rampart-tokens".into())
                .spawn(move || {
                    realtime_priority();
                    let mut last = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(cfg.period);
                        let now = Instant::now();
                        // A late wake-up still generates at the configured
                        // rate (bounded, so a stalled process does not
                        // flood buckets afterwards; the cap bounds it anyway).
                        let dt = now.duration_since(last).min(cfg.period * 10);
                        last = now;
                        let tokens = (cfg.budget_ns_per_sec * dt.as_secs_f64()) as u64;
                        if let Err(e) = round(&shared, &grant_fd, &used_fd, tokens, cfg.cap_ns)
                            .and_then(|()| write_deadline(&grant_fd, cfg.period))
                        {
                            tracing::warn!("token generation: {e}");
                        }
                    }
                })
                .map_err(|e| Error::io("starting the token generator thread", e))?
        };
        Ok(Self {
            cfg,
            grant_fd,
            used_fd,
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// The configuration.
    pub fn config(&self) -> TokenConfig {
        self.cfg
    }

    /// Add (or re-weight) a tenant. A new tenant starts with a full bucket.
    ///
    /// # Errors
    /// Map access failure.
    pub fn set_tenant(&self, tid: u32, weight: u32) -> Result<()> {
        let mut sh = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let std::collections::btree_map::Entry::Vacant(e) = sh.granted.entry(tid) {
            let used = read_u64(&self.used_fd, tid)?;
            let g = used + self.cfg.cap_ns;
            write_u64(&self.grant_fd, tid, g)?;
            e.insert(g);
        }
        sh.weights.insert(tid, weight);
        Ok(())
    }

    /// Fill every bucket (granted = used + cap), forgiving any debt. Called
    /// when enforcement is switched on: while it was off, tenants were
    /// charged without being limited, and the debt they ran up then is not
    /// something the fair phase should make them repay.
    ///
    /// # Errors
    /// Map access failure.
    pub fn refill_all(&self) -> Result<()> {
        let mut sh = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tids: Vec<u32> = sh.weights.keys().copied().collect();
        for tid in tids {
            let used = read_u64(&self.used_fd, tid)?;
            let g = used + self.cfg.cap_ns;
            write_u64(&self.grant_fd, tid, g)?;
            sh.granted.insert(tid, g);
            sh.levels
                .insert(tid, i64::try_from(self.cfg.cap_ns).unwrap_or(i64::MAX));
        }
        Ok(())
    }

    /// Stop generating for a tenant.
    pub fn remove_tenant(&self, tid: u32) {
        let mut sh = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sh.weights.remove(&tid);
        sh.granted.remove(&tid);
        sh.levels.remove(&tid);
    }

    /// Current figures of a tenant.
    pub fn tenant(&self, tid: u32) -> TenantTokens {
        let sh = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        TenantTokens {
            granted_ns: sh.granted.get(&tid).copied().unwrap_or(0),
            level_ns: sh.levels.get(&tid).copied().unwrap_or(0),
        }
    }

    /// Tokens discarded so far because every bucket was full, and rounds run.
    pub fn totals(&self) -> (u64, u64) {
        let sh = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (sh.wasted_ns, sh.rounds)
    }
}

fn round(
    shared: &Mutex<Shared>,
    grant_fd: &OwnedFd,
    used_fd: &OwnedFd,
    tokens: u64,
    cap: u64,
) -> Result<()> {
    let mut sh = shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tids: Vec<u32> = sh.weights.keys().copied().collect();
    let mut buckets = Vec::with_capacity(tids.len());
    for &tid in &tids {
        let used = read_u64(used_fd, tid)?;
        let granted = sh.granted.get(&tid).copied().unwrap_or(used);
        let level = i64::try_from(i128::from(granted) - i128::from(used)).unwrap_or(i64::MIN);
        buckets.push(Bucket {
            weight: sh.weights[&tid],
            level,
        });
    }
    let d = generate(tokens, cap, &buckets);
    for (i, &tid) in tids.iter().enumerate() {
        let g = sh.granted.get(&tid).copied().unwrap_or(0) + d.added[i];
        if d.added[i] > 0 {
            write_u64(grant_fd, tid, g)?;
        }
        sh.granted.insert(tid, g);
        sh.levels.insert(
            tid,
            buckets[i]
                .level
                .saturating_add(i64::try_from(d.added[i]).unwrap_or(i64::MAX)),
        );
    }
    sh.wasted_ns += d.wasted;
    sh.rounds += 1;
    Ok(())
}

impl Drop for TokenGenerator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(weight: u32, level: i64) -> Bucket {
        Bucket { weight, level }
    }

    #[test]
    fn equal_weights_split_equally() {
        let d = generate(900, 10_000, &[b(1, 0), b(1, 0), b(1, 0)]);
        assert_eq!(d.added, vec![300, 300, 300]);
        assert_eq!(d.wasted, 0);
    }

    #[test]
    fn weights_are_respected() {
        let d = generate(1000, 10_000, &[b(1, 0), b(3, 0), b(6, 0)]);
        assert_eq!(d.added, vec![100, 300, 600]);
    }

    #[test]
    fn full_bucket_surplus_goes_to_the_others() {
        // Tenant 0 is idle (full): its third goes to the busy tenants, by weight.
        let d = generate(900, 1000, &[b(1, 1000), b(1, 0), b(2, 0)]);
        assert_eq!(d.added, vec![0, 300, 600]);
        // Tenant 0 can take only 50 of its 300: the 250 left are split 1:2.
        let d = generate(900, 1000, &[b(1, 950), b(1, 0), b(1, 0)]);
        assert_eq!(d.added[0], 50);
        assert_eq!(d.added[1] + d.added[2], 850);
        assert!(d.added[1].abs_diff(d.added[2]) <= 1);
    }

    #[test]
    fn tokens_are_wasted_only_when_everyone_is_full() {
        let d = generate(900, 1000, &[b(1, 900), b(1, 950)]);
        assert_eq!(d.added, vec![100, 50]);
        assert_eq!(d.wasted, 750);
        let d = generate(900, 1000, &[]);
        assert_eq!(d.wasted, 900);
    }

    #[test]
    fn a_tenant_in_debt_can_absorb_more_than_the_cap() {
        let d = generate(5000, 1000, &[b(1, -3000), b(1, 1000)]);
        assert_eq!(d.added, vec![4000, 0]);
        assert_eq!(d.wasted, 1000);
    }

    #[test]
    fn rounding_loses_nothing() {
        let d = generate(7, 100, &[b(3, 0), b(3, 0), b(3, 0)]);
        assert_eq!(d.added.iter().sum::<u64>(), 7);
        assert_eq!(d.added, vec![3, 2, 2]);
    }

    fn buckets() -> impl Strategy<Value = Vec<Bucket>> {
        prop::collection::vec(
            (1u32..20, -5_000i64..12_000).prop_map(|(w, l)| b(w, l)),
            0..10,
        )
    }

    proptest! {
        #[test]
        fn no_token_created_or_lost(tokens in 0u64..1_000_000, cap in 1u64..10_000, bs in buckets()) {
            let d = generate(tokens, cap, &bs);
            prop_assert_eq!(d.added.iter().sum::<u64>() + d.wasted, tokens);
        }

        #[test]
        fn caps_hold_and_waste_means_all_full(tokens in 0u64..1_000_000, cap in 1u64..10_000, bs in buckets()) {
            let d = generate(tokens, cap, &bs);
            for (i, bk) in bs.iter().enumerate() {
                prop_assert!(d.added[i] <= room(bk, cap));
            }
            if d.wasted > 0 {
                for (i, bk) in bs.iter().enumerate() {
                    prop_assert_eq!(d.added[i], room(bk, cap), "tokens wasted while bucket {} had room", i);
                }
            }
        }

        #[test]
        fn shares_follow_weights(tokens in 0u64..1_000_000, bs in buckets()) {
            // With room for everything, every tenant gets its weighted share (± rounding).
            let cap = 100_000_000;
            let d = generate(tokens, cap, &bs);
            let w: u64 = bs.iter().map(|b| u64::from(b.weight)).sum();
            for (i, bk) in bs.iter().enumerate() {
                let fair = tokens as f64 * f64::from(bk.weight) / w as f64;
                prop_assert!((d.added[i] as f64 - fair).abs() <= bs.len() as f64 + 1.0,
                    "bucket {i}: got {} want {fair}", d.added[i]);
            }
        }

        #[test]
        fn idle_share_goes_to_busy(tokens in 1u64..1_000_000, cap in 1u64..10_000, bs in buckets()) {
            // Max-min by weight: a bucket that did not fill got at least as
            // much per weight unit as any other bucket (± rounding).
            let d = generate(tokens, cap, &bs);
            for (i, bi) in bs.iter().enumerate() {
                if d.added[i] == room(bi, cap) { continue; }
                let per_i = d.added[i] as f64 / f64::from(bi.weight);
                for (j, bj) in bs.iter().enumerate() {
                    let per_j = d.added[j] as f64 / f64::from(bj.weight);
                    // Each redistribution round can round one token down per bucket.
                    prop_assert!(per_i + 2.0 * (bs.len() as f64 + 2.0) >= per_j,
                        "non-full bucket {i} got {per_i}/w, bucket {j} got {per_j}/w");
                }
            }
        }
    }
}
