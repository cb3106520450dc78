//! The offloaded Source: `xdp_stream` parses, filters, computes the FlowID
//! and rewrites every frame into a 56-byte tuple record in XDP, and steers
//! it to the AF_XDP socket of the source replica that owns its key
//! ([`crate::offload`]). A replica here only copies records out of its
//! sockets into the engine — it never looks at a packet.
//!
//! Sockets: one per (RX queue, replica). A socket receives only frames of
//! the queue it is bound to, so the key's owner needs a socket on every
//! queue; the sockets of one queue share that queue's UMEM
//! (`XDP_SHARED_UMEM`) and the program picks one per frame through the
//! XSKMAP slot `queue * replicas + owner`. Replica `r` polls its socket on
//! each queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rampart_dataplane::netns;
use rampart_dataplane::xdp::{XdpLink, XdpMode};

use super::xsk::{wait_any, Xsk};
use super::{Applied, PacketSource, SourceStats};
use crate::engine::SourceCtx;
use crate::error::{Error, Result};
use crate::offload::{Counters, Entry, OffloadConfig, OffloadProgram, Timestamps};
use crate::tuple::StreamTuple;

/// Bytes of one record (`struct stream_tuple`).
pub const RECORD_BYTES: usize = std::mem::size_of::<StreamTuple>();

/// Settings of an [`XdpTupleSource`].
#[derive(Debug, Clone, Default)]
pub struct XdpTupleConfig {
    /// Interface, RX queues 0..queues that carry traffic, limits, UMEM
    /// frames per RX queue and RX ring entries per socket: as for an
    /// [`AfXdpSource`](super::afxdp::AfXdpSource) (`packets` counts records).
    pub rx: super::afxdp::AfXdpConfig,
    /// What XDP does; `offload.replicas` is the number of source replicas.
    pub offload: OffloadConfig,
    /// The app operators this configuration runs in XDP (from the plan).
    pub applied: Applied,
}

impl XdpTupleConfig {
    /// The source a host-XDP offload `plan` needs, on the interface,
    /// queues and UMEM/ring sizes of `rx` (an `afxdp:` spec).
    ///
    /// # Errors
    /// A plan for a target other than host XDP (an nfp plan cannot run here).
    pub fn from_plan(plan: &crate::offload::Plan, rx: &super::afxdp::AfXdpConfig) -> Result<Self> {
        if plan.target != crate::offload::Target::HostXdp {
            return Err(Error::Invalid(format!(
                "a {:?} plan cannot run on this host: run the host-xdp plan (the nfp profile is checked, not loaded)",
                plan.target
            )));
        }
        Ok(Self {
            rx: rx.clone(),
            offload: plan.config.clone(),
            applied: Applied {
                app: Some(plan.app.clone()),
                ops: plan
                    .offloaded
                    .iter()
                    .filter(|o| *o != "source")
                    .cloned()
                    .collect(),
                partition: plan.key_mode.filter(|_| plan.sources > 1),
            },
        })
    }
}

struct Inner {
    cfg: XdpTupleConfig,
    /// Per replica: its socket on each queue.
    socks: Mutex<Vec<Option<Vec<Xsk>>>>,
    received: AtomicU64,
    bad_records: AtomicU64,
    dropped: AtomicU64,
    timestamps: Timestamps,
    // Detach before closing the program and sockets.
    link: XdpLink,
    prog: OffloadProgram,
    stats: Arc<SourceStats>,
}

/// Tuple records from `xdp_stream` over AF_XDP. Dropping the last clone
/// detaches the program and closes the sockets.
#[derive(Clone)]
pub struct XdpTupleSource {
    inner: Arc<Inner>,
    start: Option<Instant>,
}

impl std::fmt::Debug for XdpTupleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpTupleSource")
            .field("cfg", &self.inner.cfg)
            .finish()
    }
}

impl XdpTupleSource {
    /// Load `xdp_stream` (the device-bound RX-metadata entry when
    /// `offload.timestamps` asks for it and the driver accepts it, the
    /// plain one otherwise), configure it, open the sockets, attach.
    ///
    /// # Errors
    /// Invalid settings, not root, no such namespace/interface, an XDP
    /// program already attached there, a failing socket step.
    pub fn open(cfg: XdpTupleConfig) -> Result<Self> {
        if cfg.rx.iface.is_empty() {
            return Err(Error::Invalid(
                "the offloaded source needs an interface: --source afxdp:[NETNS/]IFACE".into(),
            ));
        }
        let (q, r) = (cfg.rx.queues, cfg.offload.replicas);
        cfg.offload.validate(q)?;
        super::afxdp::check_capture_port(&cfg.rx)?;
        let ns = cfg.rx.netns.clone();
        let (prog, timestamps) = match cfg.offload.timestamps {
            Timestamps::RxMeta => {
                match OffloadProgram::load(Entry::HostRxMeta, ns.as_deref(), Some(&cfg.rx.iface)) {
                    Ok(p) => (p, Timestamps::RxMeta),
                    Err(e) => {
                        tracing::warn!(
                            "no RX-metadata timestamps on {} ({e}): software time",
                            cfg.rx.iface
                        );
                        (
                            OffloadProgram::load(Entry::Host, None, None)?,
                            Timestamps::Software,
                        )
                    }
                }
            }
            t => (OffloadProgram::load(Entry::Host, None, None)?, t),
        };
        let mut effective = cfg.offload.clone();
        effective.timestamps = timestamps;
        prog.configure(&effective)?;
        let ifindex = netns::ifindex(ns.as_deref(), &cfg.rx.iface)?;
        let map = prog.xsks_fd();
        let (frames, ring) = (cfg.rx.frames, cfg.rx.ring);
        // Sockets before the program: no record finds an empty slot once
        // it runs.
        let per_queue: Vec<Vec<Xsk>> = netns::run_in(ns.as_deref(), move || {
            let as_dp = |e: Error| rampart_dataplane::Error::Io {
                context: e.to_string(),
                err: std::io::Error::other("AF_XDP socket"),
            };
            let mut all = Vec::new();
            for queue in 0..q {
                let owner = Xsk::new(ifindex, queue, frames, ring).map_err(as_dp)?;
                let mut socks = vec![];
                for _ in 1..r {
                    socks.push(Xsk::new_shared(&owner, ring).map_err(as_dp)?);
                }
                socks.insert(0, owner);
                for (rep, s) in socks.iter().enumerate() {
                    let slot = queue * r + rep as u32;
                    rampart_dataplane::maps::update_raw(
                        map,
                        &slot.to_ne_bytes(),
                        &(s.raw_fd() as u32).to_ne_bytes(),
                        0,
                    )?;
                }
                all.push(socks);
            }
            Ok(all)
        })?;
        let mut by_replica: Vec<Vec<Xsk>> = (0..r).map(|_| Vec::new()).collect();
        for socks in per_queue {
            for (rep, s) in socks.into_iter().enumerate() {
                by_replica[rep].push(s);
            }
        }
        let link = XdpLink::attach(
            prog.prog_fd(),
            ns.as_deref(),
            &cfg.rx.iface,
            XdpMode::Native,
        )?;
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                socks: Mutex::new(by_replica.into_iter().map(Some).collect()),
                received: AtomicU64::new(0),
                bad_records: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                timestamps,
                link,
                prog,
                stats: Arc::default(),
            }),
            start: None,
        })
    }

    /// The program's counters.
    ///
    /// # Errors
    /// Reading the map.
    pub fn counters(&self) -> Result<Counters> {
        self.inner.prog.counters()
    }

    /// Where timestamps come from (RX metadata fell back to software if the
    /// driver refused a device-bound program).
    pub fn timestamps(&self) -> Timestamps {
        self.inner.timestamps
    }

    /// Which entry point runs.
    pub fn entry(&self) -> Entry {
        self.inner.prog.entry()
    }

    /// Records that were not 56 bytes (never expected; counted, skipped).
    pub fn bad_records(&self) -> u64 {
        self.inner.bad_records.load(Ordering::Relaxed)
    }

    /// Detach the program now (the sockets stop receiving).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn detach(&self) -> Result<()> {
        Ok(self.inner.link.detach()?)
    }

    /// Copy the program's counters into the shared [`SourceStats`].
    fn refresh(&self) {
        let s = &self.inner.stats;
        if let Ok(c) = self.inner.prog.counters() {
            s.frames.store(c.frames(), Ordering::Relaxed);
            for (i, v) in [c.not_ip, c.truncated, c.bad_header, c.too_deep]
                .into_iter()
                .enumerate()
            {
                s.no_tuple[i].store(v, Ordering::Relaxed);
            }
            s.filtered.store(c.filtered, Ordering::Relaxed);
            s.dropped.store(
                self.inner.dropped.load(Ordering::Relaxed) + c.no_socket + c.rewrite_failed,
                Ordering::Relaxed,
            );
        }
    }
}

/// How often an idle receive loop copies the program's counters into the
/// source's stats (they are copied once more when the source stops).
const REFRESH_EVERY: Duration = Duration::from_millis(50);

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl PacketSource for XdpTupleSource {
    fn name(&self) -> String {
        "xdp-tuple".into()
    }
    fn parallelism(&self) -> usize {
        self.inner.cfg.offload.replicas as usize
    }
    fn stats(&self) -> Arc<SourceStats> {
        Arc::clone(&self.inner.stats)
    }
    fn applied(&self) -> Applied {
        self.inner.cfg.applied.clone()
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String> {
        let me = ctx.replica();
        let mut socks = self
            .inner
            .socks
            .lock()
            .map_err(|_| "socket table poisoned".to_string())?
            .get_mut(me)
            .and_then(Option::take)
            .ok_or_else(|| format!("no AF_XDP sockets for replica {me}"))?;
        let start = *self.start.get_or_insert_with(Instant::now);
        let deadline = self
            .inner
            .cfg
            .rx
            .seconds
            .map(|s| start + Duration::from_secs_f64(s));
        let limit = self.inner.cfg.rx.packets.unwrap_or(u64::MAX);
        let stats = Arc::clone(&self.inner.stats);
        let (mut tuples, mut bad, mut last) = (0u64, 0u64, 0u64);
        let mut dropped_before: Vec<u64> = socks.iter().map(Xsk::dropped).collect();
        let mut last_refresh = Instant::now();
        let account = |socks: &[Xsk], before: &mut Vec<u64>| {
            for (s, b) in socks.iter().zip(before.iter_mut()) {
                let d = s.dropped();
                self.inner
                    .dropped
                    .fetch_add(d - (*b).min(d), Ordering::Relaxed);
                *b = d;
            }
        };
        loop {
            if ctx.is_cancelled()
                || deadline.is_some_and(|d| Instant::now() >= d)
                || self.inner.received.load(Ordering::Relaxed) >= limit
            {
                break;
            }
            let mut got = 0u32;
            // Records without a time (nfp profile) are stamped on receive.
            let mut now = 0u64;
            for s in &mut socks {
                got += s.recv(256, |rec| {
                    if rec.len() != RECORD_BYTES {
                        bad += 1;
                        return;
                    }
                    let mut t: StreamTuple = bytemuck::pod_read_unaligned(rec);
                    let ts = if t.ts_ns != 0 {
                        t.ts_ns
                    } else {
                        if now == 0 {
                            now = now_ns();
                        }
                        now
                    };
                    // Non-decreasing per replica (the engine's contract):
                    // two queues interleave, CPUs' clocks differ by a hair.
                    last = last.max(ts);
                    t.ts_ns = last;
                    tuples += 1;
                    ctx.emit(last, t);
                });
            }
            if got == 0 {
                stats
                    .tuples
                    .fetch_add(std::mem::take(&mut tuples), Ordering::Relaxed);
                self.inner
                    .bad_records
                    .fetch_add(std::mem::take(&mut bad), Ordering::Relaxed);
                account(&socks, &mut dropped_before);
                // The program's counters cost a dozen map reads: not at
                // every empty ring (that was ~45% of this thread's CPU per
                // tuple when it kept up with the traffic).
                if last_refresh.elapsed() >= REFRESH_EVERY {
                    self.refresh();
                    last_refresh = Instant::now();
                }
                ctx.progress(now_ns().max(last));
                let refs: Vec<&Xsk> = socks.iter().collect();
                wait_any(&refs, Duration::from_millis(20));
            } else {
                self.inner
                    .received
                    .fetch_add(u64::from(got), Ordering::Relaxed);
            }
        }
        stats.tuples.fetch_add(tuples, Ordering::Relaxed);
        self.inner.bad_records.fetch_add(bad, Ordering::Relaxed);
        account(&socks, &mut dropped_before);
        self.refresh();
        Ok(())
    }
}
