//! The tap: rampart stream on a server's own interface. `xdp_stream_tap`
//! (`bpf/stream/tap.h`) parses every frame, runs the app's offloaded
//! Filter, and either writes the tuple into a BPF ring buffer
//! ([`TapMode::Tuples`]) or adds it to its connection's counts in its
//! slot of the aggregation table ([`TapMode::Aggregate`]); then it
//! passes the frame on; `tc_stream_tap_egress` (TCX) does the same with
//! the host's own sends, so flows are seen both ways (a GSO send counts as
//! the segments it leaves as). The host stack sees every frame: ARP, ND, the
//! services' traffic — a monitor never takes a server's packets (the
//! AF_XDP sources do, and are for dedicated capture ports).
//!
//! Aggregation: the program counts each connection's packets of the
//! current epoch (event time / `epoch`, default 1 s) in its slot of its
//! CPU's segment of the tables (`bpf/stream/tap.h`; IPv4 and IPv6 each
//! have one). Once `e` is over (plus a grace for a CPU still inside the
//! program), this source takes epoch `e`'s counts in place, a connection's
//! slots on every CPU merged as they are taken
//! ([`AggTables::harvest_merged`]), folds in the slots the program sent to
//! the ring buffer (reused before they were read) and the tuples of `e`
//! (connections that found their bucket full), and emits one [`FlowPart`]
//! per connection in order of first packet, with the watermark at the
//! epoch's end ([`EpochParts`]).
//!
//! Tuples: the same, in userspace. The reader sums each tuple into its
//! connection's part of its [`TUPLE_EPOCH`] (10 ms) and emits the epoch's
//! parts as above once every ring has been read past it: an app gets one
//! part per busy connection and 10 ms instead of a record per packet.
//!
//! Each CPU writes its own ring buffer (one shared ring costs 5.4× per
//! record when two CPUs write at once); one reader drains them all. One
//! source replica.

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_dataplane::chain::{Attached, CHAIN_SLOT_STREAM};
use rampart_dataplane::xdp::XdpMode;
use rustc_hash::FxHashMap;

use super::{Applied, PacketSource, SourceStats};
use crate::engine::SourceCtx;
use crate::error::{Error, Result};
use crate::offload::{Entry, OffloadConfig, OffloadProgram, TapCounters, TapSizes};
use crate::part::{ConnKey, FlowPart};
use crate::source::aggtable::{AggRecord, AggTables};
use crate::tuple::StreamTuple;

/// What the tap hands to userspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TapMode {
    /// One tuple per accepted frame, through the ring buffer.
    Tuples,
    /// Per-connection counts per epoch, read in place from a table in XDP.
    Aggregate,
}

/// Settings of a [`TapSource`].
#[derive(Debug, Clone)]
pub struct TapConfig {
    /// Network namespace of the interface (`None`: the current one).
    pub netns: Option<String>,
    /// Interface.
    pub iface: String,
    /// Stop after this many seconds.
    pub seconds: Option<f64>,
    /// Stop after this many packets were analysed.
    pub packets: Option<u64>,
    /// Tuples or aggregation.
    pub mode: TapMode,
    /// Aggregation epoch.
    pub epoch: Duration,
    /// Map sizes.
    pub sizes: TapSizes,
    /// The offloaded Filter (and FlowID, if any); replicas must be 1.
    pub offload: OffloadConfig,
    /// The app operators the tap runs (from the plan).
    pub applied: Applied,
    /// Run as the stream stage of this interface's chain (`rampart run`)
    /// instead of alone on the interface.
    pub chain: Option<rampart_dataplane::chain::Chain>,
}

impl Default for TapConfig {
    fn default() -> Self {
        Self {
            netns: None,
            iface: String::new(),
            seconds: None,
            packets: None,
            mode: TapMode::Tuples,
            epoch: DEFAULT_EPOCH,
            sizes: TapSizes::default(),
            offload: OffloadConfig {
                key_mode: None,
                ..OffloadConfig::default()
            },
            applied: Applied::default(),
            chain: None,
        }
    }
}

/// Aggregation epoch unless the app's graph asks for another (its plan
/// says which): short enough for an alert within a second or two of its
/// window. An epoch must not exceed any session gap of the app, and it
/// divides every tumbling window (both checked by the apps).
pub const DEFAULT_EPOCH: Duration = Duration::from_secs(1);

/// How long after an epoch's end its map is read: a CPU that took its
/// timestamp just before the boundary is still inside the program for
/// microseconds; this leaves it three orders of magnitude more (a vCPU
/// the hypervisor stops for longer sends its counts late through the
/// ring: counted in `late`, not lost). Not longer: every connection whose
/// next packet comes before its slot is read sends that slot through the
/// ring (the program must start the new epoch's counts), which costs the
/// reader a map update per connection.
const GRACE: Duration = Duration::from_millis(5);

/// How often the reader reads the rings while records flow: a ring of
/// 1 MiB (the smallest by default) holds 16,384 tuples, 16 ms of one CPU
/// at a million packets per second. Every read costs a sleep and a
/// wakeup (tens of µs in a VM).
const PACE: Duration = Duration::from_millis(5);

/// The longest the reader sleeps between reads while records trickle
/// (the aggregation's overflow and flushed slots): its pace doubles up to
/// this while each read holds under 1/64 of a ring, and drops back to
/// [`PACE`] when one holds over 1/8. No longer than a ring takes to fill
/// a quarter at a million records a second (the default 8 MiB rings:
/// 33 ms), so a sudden flood finds room.
const MAX_PACE: Duration = Duration::from_millis(20);

/// Records (tuples, the largest) a ring of `ring_bytes` holds.
fn ring_records(ring_bytes: u32) -> u64 {
    // Each record has an 8-byte header.
    u64::from(ring_bytes) / (std::mem::size_of::<StreamTuple>() as u64 + 8)
}

/// The reader's sleep after a read of `read` records (rings of
/// `ring_records` each), from its sleep before (`pace`): see [`MAX_PACE`].
fn next_pace(pace: Duration, read: u64, ring_records: u64) -> Duration {
    let max = MAX_PACE
        .min(Duration::from_micros(ring_records / 4))
        .max(PACE);
    if read * 8 > ring_records {
        PACE
    } else if read * 64 < ring_records {
        (pace * 2).min(max)
    } else {
        pace.min(max)
    }
}

/// What the tap sums a connection's tuples over in tuples mode: the
/// reader folds each tuple into its connection's part of its 10 ms epoch,
/// and hands the app one part per connection and epoch (once the epoch
/// is over and [`GRACE`] has passed: every CPU's tuples of it are in its
/// ring). A server's busy connection sends many packets in 10 ms; the
/// app's window then merges one part for them instead of one tuple each.
/// An app's session gaps must be at least this, and its tumbling windows
/// whole numbers of it (checked by the apps).
pub const TUPLE_EPOCH: Duration = Duration::from_millis(10);

/// The program's clock (CLOCK_MONOTONIC + the offset it adds), ns.
fn prog_clock_ns(offset: u64) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64).saturating_add(offset)
}

/// Parse `xdp:[NETNS/]IFACE[,seconds=S][,packets=P][,connections=N][,connections6=N][,table_mib=M]`
/// (the last three: the aggregation tables' sizing rule, [`TapSizes::for_connections`]).
///
/// # Errors
/// [`Error::Invalid`] saying what is wrong and what is accepted.
pub fn parse_spec(spec: &str) -> Result<TapConfig> {
    let rest = spec.strip_prefix("xdp:").ok_or_else(|| {
        Error::Invalid(format!(
            "--source {spec}: the tap is --source xdp:[NETNS/]IFACE"
        ))
    })?;
    let mut parts = rest.split(',').filter(|s| !s.is_empty());
    let head = parts.next().unwrap_or("");
    let (ns, iface) = match head.split_once('/') {
        Some((n, i)) => (Some(n.to_string()), i.to_string()),
        None => (None, head.to_string()),
    };
    if iface.is_empty() {
        return Err(Error::Invalid(format!(
            "--source {spec}: no interface: use --source xdp:[NETNS/]IFACE"
        )));
    }
    let mut c = TapConfig {
        netns: ns,
        iface,
        ..TapConfig::default()
    };
    // The tables' sizing rule's inputs (`[stream]` of rampart run has the same).
    let d = crate::apps::config::StreamConfig::default();
    let mut sizing = (d.connections, d.connections6, d.table_mib);
    let mut sized = false;
    for p in parts {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        let x = v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| Error::Invalid(format!("--source {spec}: {k}={v:?} is not a number")))?;
        let count = |max: u32| {
            (x.fract() == 0.0 && (1.0..=f64::from(max)).contains(&x))
                .then_some(x as u32)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "--source {spec}: {k}={v}: use a whole number from 1 to {max}"
                    ))
                })
        };
        match k {
            "seconds" => c.seconds = Some(x),
            "packets" => c.packets = Some(x as u64),
            "connections" => sizing.0 = count(crate::apps::config::MAX_CONNECTIONS)?,
            "connections6" => sizing.1 = count(crate::apps::config::MAX_CONNECTIONS)?,
            "table_mib" => sizing.2 = count(65_536)?,
            _ => {
                return Err(Error::Invalid(format!(
                    "--source {spec}: unknown option {k:?} (xdp takes seconds=S, packets=P, \
                     connections=N, connections6=N, table_mib=M)"
                )))
            }
        }
        sized |= k.starts_with("conn") || k == "table_mib";
    }
    if sized {
        c.sizes = TapSizes::for_connections(
            sizing.0,
            sizing.1,
            u64::from(sizing.2) << 20,
            rampart_dataplane::maps::possible_cpus(),
        );
    }
    Ok(c)
}

struct Inner {
    cfg: TapConfig,
    // Detach before closing the program.
    link: Attached,
    /// The egress half (TCX): closing it detaches it.
    egress: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
    prog: OffloadProgram,
    stats: Arc<SourceStats>,
    analysed: AtomicU64,
    late: AtomicU64,
    bad_records: AtomicU64,
    /// What a part sums: the configured epoch (aggregation) or
    /// [`TUPLE_EPOCH`] (tuples).
    epoch: Duration,
    /// The epoch the program was attached in (the first to harvest).
    start_epoch: u64,
    /// What the program adds to CLOCK_MONOTONIC to stamp tuples.
    clock_offset: u64,
}

impl Inner {
    fn epoch_ns(&self) -> u64 {
        u64::try_from(self.epoch.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Both halves off the interface (egress first: closing its link).
    fn detach(&self) -> Result<()> {
        if let Ok(mut e) = self.egress.lock() {
            e.take();
        }
        Ok(self.link.detach()?)
    }
}

/// The tap on one interface. Dropping the last clone detaches it.
#[derive(Clone)]
pub struct TapSource {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TapSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapSource")
            .field("cfg", &self.inner.cfg)
            .finish()
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl TapSource {
    /// Load `xdp_stream_tap`, configure it, attach it (a bpf_link, native
    /// XDP).
    ///
    /// # Errors
    /// Invalid settings, not root, no such namespace/interface, another
    /// XDP program already attached there.
    pub fn open(cfg: TapConfig) -> Result<Self> {
        if cfg.iface.is_empty() {
            return Err(Error::Invalid(
                "the tap needs an interface: --source xdp:[NETNS/]IFACE".into(),
            ));
        }
        if cfg.offload.replicas != 1 {
            return Err(Error::Invalid(
                "the tap has one source replica (one reader of its rings): use --sources 1".into(),
            ));
        }
        let epoch = match cfg.mode {
            TapMode::Aggregate => cfg.epoch,
            TapMode::Tuples => TUPLE_EPOCH,
        };
        let epoch_ns = u64::try_from(epoch.as_nanos()).unwrap_or(u64::MAX);
        if epoch_ns < 1_000_000 {
            return Err(Error::Invalid(format!(
                "tap epoch {:?}: use at least 1 ms",
                cfg.epoch
            )));
        }
        cfg.offload.validate(1)?;
        let ns = cfg.netns.clone();
        // The aggregation table is preallocated: a tap that sends tuples
        // keeps it at one bucket per CPU.
        let mut sizes = cfg.sizes;
        if cfg.mode != TapMode::Aggregate {
            sizes.agg_slots = rampart_bpf::abi::stream::ST_AGG_WAYS;
            sizes.agg6_slots = rampart_bpf::abi::stream::ST_AGG_WAYS;
        }
        let prog = OffloadProgram::load_in_chain(Entry::Tap, None, None, sizes, cfg.chain.clone())?;
        prog.configure(&cfg.offload)?;
        prog.configure_tap(cfg.mode == TapMode::Aggregate, epoch_ns)?;
        let start_epoch = now_ns() / epoch_ns;
        let link = Attached::new(
            prog.prog_fd(),
            cfg.chain.as_ref(),
            CHAIN_SLOT_STREAM,
            ns.as_deref(),
            &cfg.iface,
            XdpMode::Native,
        )?;
        // The host's own sends, so that a flow is seen both ways. Closed
        // (detached) with the source, before the XDP link.
        let egress_prog = prog
            .tap_maps()
            .map(|m| std::os::fd::AsRawFd::as_raw_fd(&m.egress))
            .ok_or_else(|| Error::Invalid("the tap program has no egress entry".into()))?;
        let egress = match rampart_dataplane::tcx::attach(
            egress_prog,
            ns.as_deref(),
            &cfg.iface,
            rampart_dataplane::tcx::Hook::Egress,
            "the stream tap",
        ) {
            Ok(l) => l,
            Err(e) => {
                let _ = link.detach();
                return Err(e.into());
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                link,
                egress: std::sync::Mutex::new(Some(egress)),
                prog,
                stats: Arc::default(),
                analysed: AtomicU64::new(0),
                late: AtomicU64::new(0),
                bad_records: AtomicU64::new(0),
                epoch,
                start_epoch,
                clock_offset: crate::offload::prog::clock_offset_ns(),
            }),
        })
    }

    /// The program's counters.
    ///
    /// # Errors
    /// Reading the map.
    pub fn counters(&self) -> Result<TapCounters> {
        self.inner.prog.tap_counters()
    }

    /// The mode.
    pub fn mode(&self) -> TapMode {
        self.inner.cfg.mode
    }

    /// Packets handed to the engine (tuples, or packets inside parts).
    pub fn analysed(&self) -> u64 {
        self.inner.analysed.load(Ordering::Relaxed)
    }

    /// Parts or tuples that arrived after their epoch was emitted (their
    /// time was clamped forward; expected never).
    pub fn late(&self) -> u64 {
        self.inner.late.load(Ordering::Relaxed)
    }

    /// The program fd (for BPF_PROG_RUN in tests).
    pub fn prog_fd(&self) -> i32 {
        self.inner.prog.prog_fd()
    }

    /// Detach now (the host keeps every frame; the tap stops seeing them).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn detach(&self) -> Result<()> {
        self.inner.detach()
    }

    fn refresh(&self) {
        let s = &self.inner.stats;
        if let Ok(c) = self.inner.prog.tap_counters() {
            s.frames.store(c.frames, Ordering::Relaxed);
            for (i, v) in [c.not_ip, c.truncated, c.bad_header, c.too_deep]
                .into_iter()
                .enumerate()
            {
                s.no_tuple[i].store(v, Ordering::Relaxed);
            }
            s.filtered.store(c.filtered, Ordering::Relaxed);
            s.dropped.store(c.ring_full, Ordering::Relaxed);
        }
        s.tuples.store(
            self.inner.analysed.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }

    fn stop_at(&self) -> (Option<Instant>, u64) {
        let c = &self.inner.cfg;
        (
            c.seconds
                .map(|s| Instant::now() + Duration::from_secs_f64(s)),
            c.packets.unwrap_or(u64::MAX),
        )
    }

    /// Handles on the tap's ring buffers (one per CPU). They must outlive
    /// the [`libbpf_rs::RingBuffer`] built on them: their files are what
    /// its epoll instance waits on.
    fn ring_handles(&self) -> std::result::Result<Vec<libbpf_rs::MapHandle>, String> {
        let maps = self.inner.prog.tap_maps().ok_or("not loaded as the tap")?;
        maps.rings
            .iter()
            .map(|fd| {
                let id = rampart_dataplane::maps::map_info(fd.as_raw_fd())
                    .ok_or("no info on a tap ring buffer")?
                    .id;
                libbpf_rs::MapHandle::from_map_id(id)
                    .map_err(|e| format!("opening a tap ring buffer: {e}"))
            })
            .collect()
    }

    /// One reader over the rings `hs` whose callbacks append tuples to
    /// `buf` and aggregation slots (counts the program sent) to `slots`.
    fn ring(
        &self,
        hs: &[libbpf_rs::MapHandle],
        buf: &Rc<RefCell<Vec<StreamTuple>>>,
        slots: &Rc<RefCell<Vec<AggRecord>>>,
    ) -> std::result::Result<libbpf_rs::RingBuffer<'static>, String> {
        let mut b = libbpf_rs::RingBufferBuilder::new();
        for h in hs {
            let inner = Arc::clone(&self.inner);
            let buf = Rc::clone(buf);
            let slots = Rc::clone(slots);
            b.add(h, move |d: &[u8]| {
                if d.len() == std::mem::size_of::<StreamTuple>() {
                    buf.borrow_mut().push(bytemuck::pod_read_unaligned(d));
                } else if let Some(r) = AggRecord::from_bytes(d) {
                    slots.borrow_mut().push(r);
                } else {
                    inner.bad_records.fetch_add(1, Ordering::Relaxed);
                }
                0
            })
            .map_err(|e| format!("tap ring buffer: {e}"))?;
        }
        b.build().map_err(|e| format!("tap ring buffer: {e}"))
    }

    /// Wait up to `timeout` for a ring's wakeup, then read every ring (a
    /// wakeup comes only when a ring is a sixteenth full: the others are
    /// read anyway).
    fn read_rings(
        rb: &libbpf_rs::RingBuffer<'_>,
        timeout: Option<Duration>,
    ) -> std::result::Result<(), String> {
        let err = |n: i32| {
            format!(
                "reading the tap ring buffers: {}",
                std::io::Error::from_raw_os_error(-n)
            )
        };
        if let Some(t) = timeout {
            let n = rb.poll_raw(t);
            if n < 0 && n != -libc::EINTR {
                return Err(err(n));
            }
        }
        let n = rb.consume_raw();
        if n < 0 {
            return Err(err(n));
        }
        Ok(())
    }
}

/// Fold `p` into its connection's part in `m`.
fn merge_into(m: &mut FxHashMap<ConnKey, FlowPart>, p: FlowPart) {
    if p.packets() == 0 {
        return;
    }
    match m.get_mut(&p.key) {
        Some(a) => a.merge(&p),
        None => {
            m.insert(p.key, p);
        }
    }
}

/// One epoch's connection parts as the tap emits them: the tables' slots
/// of the epoch (a connection's slots on every CPU merged as they are
/// taken: [`AggTables::harvest_merged`]), with the ring's tuples and slot
/// records of the epoch folded in, ordered by first packet (then by
/// connection, so the order does not depend on the tables' layout). A part
/// is 152 bytes and an epoch's parts outgrow the caches, so each is
/// written once and read once more, to be emitted: what the steps need of
/// it (first packet, a hash of its connection) is kept beside it. Kept
/// from one epoch to the next so its buffers are allocated once.
#[derive(Debug, Default)]
pub struct EpochParts {
    parts: Vec<FlowPart>,
    /// (first packet, index in `parts`).
    order: Vec<(u64, u32)>,
    /// [`ConnKey::hash64`] of each part's connection.
    hashes: Vec<u64>,
}

impl EpochParts {
    /// Start an epoch with no parts (tuples mode: no table).
    pub fn clear(&mut self) {
        self.parts.clear();
        self.order.clear();
        self.hashes.clear();
    }

    /// Start epoch `e`: take its counts from `tables` (epochs of
    /// `epoch_ns`); slots of earlier epochs, read late, count in `late`.
    pub fn take(&mut self, tables: &AggTables, e: u64, epoch_ns: u64, late: &AtomicU64) {
        self.clear();
        tables.harvest_merged(e, epoch_ns, |p, pe| {
            if pe < e {
                late.fetch_add(1, Ordering::Relaxed);
            }
            self.push(p);
        });
    }

    fn push(&mut self, p: FlowPart) {
        if p.packets() == 0 {
            return;
        }
        self.order.push((p.first_ns(), self.parts.len() as u32));
        self.hashes.push(p.key.hash64());
        self.parts.push(p);
    }

    /// Fold in parts that came another way (the ring's tuples and slot
    /// records of the epoch, one part per connection). Few of the epoch's
    /// connections are among them: two bits of 32 per connection of
    /// theirs (from a cheap hash; 0.4 % false positives) spare the others
    /// the map's lookup, and the read of their part.
    /// `o` is left empty, its table kept for the next epoch's.
    pub fn add(&mut self, o: &mut FxHashMap<ConnKey, FlowPart>) {
        if self.parts.is_empty() {
            // The tap's tuples alone: nothing to fold them into.
            for (_, p) in o.drain() {
                self.push(p);
            }
            return;
        }
        if o.is_empty() {
            return;
        }
        let bits = (o.len() * 32).next_power_of_two();
        let mask = bits as u64 - 1;
        let mut filter = vec![0u64; bits.div_ceil(64)];
        let at = |h: u64| [(h & mask) as usize, ((h >> 32) & mask) as usize];
        for k in o.keys() {
            for b in at(k.hash64()) {
                filter[b / 64] |= 1 << (b % 64);
            }
        }
        for (i, h) in self.hashes.iter().enumerate() {
            if at(*h).iter().any(|b| filter[b / 64] & (1 << (b % 64)) == 0) {
                continue;
            }
            let p = &mut self.parts[i];
            if let Some(x) = o.remove(&p.key) {
                p.merge(&x);
                self.order[i].0 = p.first_ns();
                if o.is_empty() {
                    break;
                }
            }
        }
        for (_, p) in o.drain() {
            self.push(p);
        }
    }

    /// The epoch's parts by first packet, then connection. Sorting (time,
    /// index) pairs instead of the parts and settling ties by key
    /// afterwards is what keeps this cheap.
    pub fn ordered(&mut self) -> impl Iterator<Item = &FlowPart> {
        let parts = &self.parts;
        self.order.sort_unstable();
        let mut i = 0;
        while i < self.order.len() {
            let t = self.order[i].0;
            let mut j = i + 1;
            while j < self.order.len() && self.order[j].0 == t {
                j += 1;
            }
            if j - i > 1 {
                self.order[i..j].sort_unstable_by_key(|x| parts[x.1 as usize].key);
            }
            i = j;
        }
        self.order.iter().map(|x| &parts[x.1 as usize])
    }
}

/// Parts that came through the ring (overflow tuples of a full bucket,
/// slots flushed before they were read), folded by connection per epoch
/// until their epoch is harvested.
#[derive(Default)]
struct Overflow {
    by_epoch: FxHashMap<u64, FxHashMap<ConnKey, FlowPart>>,
    /// Maps an earlier epoch emptied: grown anew every epoch, a map's
    /// pages were most of the reader's time (faulted in and zeroed each
    /// time).
    spare: Vec<FxHashMap<ConnKey, FlowPart>>,
}

impl Overflow {
    /// Epoch `e`'s map.
    fn epoch(&mut self, e: u64) -> &mut FxHashMap<ConnKey, FlowPart> {
        let spare = &mut self.spare;
        self.by_epoch
            .entry(e)
            .or_insert_with(|| spare.pop().unwrap_or_default())
    }

    /// File tuples under their epochs of `epoch_ns` (those before `next`,
    /// already emitted, under `next`); the number filed late. `tuples` is
    /// several rings' reads one after the other, each in time order: one
    /// lookup of an epoch's map per run of tuples in one epoch.
    fn file_tuples(&mut self, tuples: &[StreamTuple], epoch_ns: u64, next: u64) -> u64 {
        let mut late = 0;
        let mut rest = tuples;
        while let Some(t) = rest.first() {
            let e = t.ts_ns / epoch_ns;
            let (from, to) = (e * epoch_ns, (e + 1).saturating_mul(epoch_ns));
            let n = rest
                .iter()
                .position(|t| !(from..to).contains(&t.ts_ns))
                .unwrap_or(rest.len());
            if e < next {
                late += n as u64;
            }
            let m = self.epoch(e.max(next));
            for t in &rest[..n] {
                let (k, d) = FlowPart::conn_of(t);
                match m.get_mut(&k) {
                    Some(p) => p.add_tuple(t, d),
                    None => {
                        m.insert(k, FlowPart::of_packet(k, d, t));
                    }
                }
            }
            rest = &rest[n..];
        }
        late
    }

    /// Fold epoch `e`'s parts into `parts`; its map goes back to the spares.
    fn fold_into(&mut self, e: u64, parts: &mut EpochParts) {
        if let Some(mut o) = self.by_epoch.remove(&e) {
            let n = o.len();
            parts.add(&mut o);
            // Sized by the epochs before (a map grows once, not every
            // epoch), but not kept sparse after a burst: a few busy
            // connections spread over a large table miss the caches.
            if o.capacity() > 8 * n.max(64) {
                o.shrink_to(2 * n);
            }
            self.spare.push(o);
        }
    }
}

impl TapSource {
    /// File the ring's tuples and slot records under their epochs (those
    /// before `next`, already emitted, under `next`: late). `reference`:
    /// an epoch at or after every record's (their slots carry 32 bits).
    fn file_records(
        &self,
        buf: &RefCell<Vec<StreamTuple>>,
        slots: &RefCell<Vec<AggRecord>>,
        overflow: &mut Overflow,
        next: u64,
        reference: u64,
    ) {
        let epoch_ns = self.inner.epoch_ns();
        let mut tuples = buf.borrow_mut();
        let late = overflow.file_tuples(&tuples, epoch_ns, next);
        self.inner.late.fetch_add(late, Ordering::Relaxed);
        tuples.clear();
        let mut file = |e: u64, p: FlowPart| {
            if e < next {
                self.inner.late.fetch_add(1, Ordering::Relaxed);
            }
            merge_into(overflow.epoch(e.max(next)), p);
        };
        for s in slots.borrow_mut().drain(..) {
            let e = s.epoch(reference);
            file(e, s.part(e * epoch_ns));
        }
    }
}

impl PacketSource for TapSource {
    fn name(&self) -> String {
        "xdp-tap".into()
    }
    fn parallelism(&self) -> usize {
        1
    }
    fn stats(&self) -> Arc<SourceStats> {
        Arc::clone(&self.inner.stats)
    }
    fn applied(&self) -> Applied {
        self.inner.cfg.applied.clone()
    }
    fn delivers_parts(&self) -> bool {
        true
    }
    fn part_epoch(&self) -> Option<Duration> {
        Some(self.inner.epoch)
    }

    fn run(&mut self, _ctx: &mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String> {
        Err("the tap delivers connection parts: read them with run_parts".into())
    }

    fn run_parts(&mut self, ctx: &mut SourceCtx<'_, FlowPart>) -> std::result::Result<(), String> {
        let epoch_ns = self.inner.epoch_ns();
        let grace = GRACE.as_nanos() as u64;
        let buf = Rc::new(RefCell::new(Vec::<StreamTuple>::with_capacity(4096)));
        let slots = Rc::new(RefCell::new(Vec::<AggRecord>::new()));
        let hs = self.ring_handles()?;
        let rb = self.ring(&hs, &buf, &slots)?;
        // Tuples mode has no table: an epoch's parts are its tuples summed.
        let table = match self.inner.cfg.mode {
            TapMode::Aggregate => {
                let m = self.inner.prog.tap_maps().ok_or("not loaded as the tap")?;
                Some(AggTables::map(m).map_err(|e| e.to_string())?)
            }
            TapMode::Tuples => None,
        };
        let (deadline, limit) = self.stop_at();
        let ring_records = ring_records(self.inner.cfg.sizes.ring_bytes);
        let mut pace = PACE;
        // The maps were new when the program was attached.
        let mut next = self.inner.start_epoch;
        let mut overflow = Overflow::default();
        let mut epoch = EpochParts::default();
        let mut last = 0u64;
        let mut finishing = false;
        let mut flowing = false;
        loop {
            let stop = ctx.is_cancelled()
                || deadline.is_some_and(|d| Instant::now() >= d)
                || self.inner.analysed.load(Ordering::Relaxed) >= limit;
            if stop && !finishing {
                let _ = self.inner.detach();
                finishing = true;
            }
            // Up to 20 ms, or until the next epoch is due: read on time,
            // fewer slots go through the ring.
            let due = (next + 1)
                .saturating_mul(epoch_ns)
                .saturating_add(grace)
                .saturating_sub(prog_clock_ns(self.inner.clock_offset));
            // In whole ms, rounded up: the rings' poll takes milliseconds,
            // and a wait under 1 ms would be none (the reader would spin
            // until the epoch is due).
            let wait = Duration::from_millis(due.div_ceil(1_000_000).clamp(1, 20));
            // A ring that has unread records is ready at once (the kernel
            // polls them level-triggered): while tuples flow, waiting on
            // the rings would wake the reader for every few records. It
            // reads them every `pace` instead (a wakeup costs tens of µs
            // in a VM), and waits on them (their wakeup at 1/16 full, or
            // the epoch) when the last read was empty.
            if flowing && !finishing {
                std::thread::sleep(wait.min(pace));
            }
            Self::read_rings(&rb, (!finishing && !flowing).then_some(wait))?;
            let read = (buf.borrow().len() + slots.borrow().len()) as u64;
            flowing = read > 0;
            pace = next_pace(pace, read, ring_records);
            let now = prog_clock_ns(self.inner.clock_offset);
            self.file_records(&buf, &slots, &mut overflow, next, now / epoch_ns + 1);
            // Every finished epoch (all of them once the program is detached).
            let upto = if finishing {
                now / epoch_ns + 1
            } else {
                now.saturating_sub(grace) / epoch_ns
            };
            while next < upto {
                let late = &self.inner.late;
                match &table {
                    Some(t) => epoch.take(t, next, epoch_ns, late),
                    None => epoch.clear(),
                }
                // Counts the program sent while the table was read.
                Self::read_rings(&rb, None)?;
                self.file_records(&buf, &slots, &mut overflow, next, now / epoch_ns + 1);
                overflow.fold_into(next, &mut epoch);
                let mut pk = 0u64;
                for p in epoch.ordered() {
                    let ts = p.first_ns().max(last);
                    if ts > p.first_ns() {
                        late.fetch_add(1, Ordering::Relaxed);
                    }
                    last = ts;
                    pk += p.packets();
                    ctx.emit(ts, *p);
                }
                self.inner.analysed.fetch_add(pk, Ordering::Relaxed);
                next += 1;
                ctx.progress((next * epoch_ns).max(last));
                self.refresh();
            }
            if finishing {
                break;
            }
        }
        self.refresh();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuple::proto;

    /// A packet of connection `i` (UDP, 10.0.x.y:1000 → 10.10.0.2:53) at `ts`.
    fn tuple(i: u32, ts: u64) -> StreamTuple {
        StreamTuple {
            ts_ns: ts,
            saddr: [(0x0a00_0000u32 + i).to_be(), 0, 0, 0],
            daddr: [0x0a0a_0002u32.to_be(), 0, 0, 0],
            sport: 1000,
            dport: 53,
            proto: proto::UDP,
            ip_len: 46,
            ..Default::default()
        }
    }

    /// Its one-packet part.
    fn part(i: u32, ts: u64) -> FlowPart {
        FlowPart::from_tuple(&tuple(i, ts))
    }

    #[test]
    fn parts_from_the_rings_fold_into_their_connections_and_the_rest_join() {
        let mut e = EpochParts::default();
        for i in 0..5000 {
            e.push(part(i, 1_000 + u64::from(i)));
        }
        // Connections 10, 20, ..., 990 got more packets another way, some
        // earlier than their slot's; 10,000.. came only that way.
        let mut o: FxHashMap<ConnKey, FlowPart> = FxHashMap::default();
        for i in (10..1000).step_by(10).chain(10_000..10_050) {
            let p = part(i, if i % 20 == 0 { 5 } else { 100_000 });
            o.insert(p.key, p);
        }
        e.add(&mut o);
        assert!(o.is_empty(), "every part was taken");
        let got: Vec<FlowPart> = e.ordered().copied().collect();
        assert_eq!(got.len(), 5050, "one part per connection");
        let by: FxHashMap<ConnKey, FlowPart> = got.iter().map(|p| (p.key, *p)).collect();
        for i in 0..5000 {
            let p = by[&part(i, 0).key];
            let more = (10..1000).contains(&i) && i % 10 == 0;
            assert_eq!(p.packets(), 1 + u64::from(more), "{i}");
            let first = if more && i % 20 == 0 {
                5
            } else {
                1_000 + u64::from(i)
            };
            assert_eq!(
                p.first_ns(),
                first,
                "{i}: merged, and ordered by its new first packet"
            );
        }
        assert!(got
            .windows(2)
            .all(|w| (w[0].first_ns(), w[0].key) < (w[1].first_ns(), w[1].key)));
        assert_eq!(got[0].first_ns(), 5);
        assert_eq!(got.last().unwrap().first_ns(), 100_000);
    }

    /// The reader's pace: longer while reads trickle, back to PACE when
    /// one brings a flood, never more than a small ring allows.
    #[test]
    fn the_reader_reads_less_often_while_records_trickle() {
        let ring = ring_records(8 << 20);
        let mut pace = PACE;
        for _ in 0..10 {
            pace = next_pace(pace, 10, ring);
        }
        assert_eq!(pace, MAX_PACE, "a trickle: the longest pace");
        assert_eq!(
            next_pace(pace, ring / 32, ring),
            MAX_PACE,
            "in between: kept"
        );
        assert_eq!(
            next_pace(pace, ring / 4, ring),
            PACE,
            "a flood: at once back"
        );
        // A 1 MiB ring fills a quarter in under 5 ms at a million records
        // a second: it is read every PACE, trickle or not.
        let small = ring_records(1 << 20);
        assert_eq!(next_pace(PACE, 0, small), PACE);
        assert_eq!(next_pace(MAX_PACE, 0, small), PACE);
    }

    /// Two rings' reads one after the other, each in time order, over
    /// three 10 ms epochs: every tuple is summed into its own epoch's part
    /// of its connection; those of an epoch already emitted go to the next
    /// one and are counted late.
    #[test]
    fn tuples_are_summed_per_connection_and_epoch_and_late_ones_are_counted() {
        let ms = 1_000_000u64;
        // Ring A: epochs 100, 101, 102; ring B: 99 (late: 100 is next),
        // 100 again, 101. Epoch 100's tuples are not one run of the read.
        let a = [(0, 1000), (1, 1011), (0, 1025)];
        let b = [(0, 995), (0, 1001), (0, 1003), (1, 1004), (0, 1015)];
        let tuples: Vec<StreamTuple> = a.iter().chain(&b).map(|&(i, t)| tuple(i, t * ms)).collect();
        let mut o = Overflow::default();
        assert_eq!(
            o.file_tuples(&tuples, 10 * ms, 100),
            1,
            "one tuple of epoch 99"
        );
        let got = |o: &mut Overflow, e: u64, i: u32| {
            o.epoch(e).get(&part(i, 0).key).map_or(0, FlowPart::packets)
        };
        assert_eq!(
            [100, 101, 102].map(|e| got(&mut o, e, 0)),
            [4, 1, 1],
            "connection 0: 1000, 995 (late), 1001, 1003 | 1015 | 1025"
        );
        assert_eq!([100, 101, 102].map(|e| got(&mut o, e, 1)), [1, 1, 0]);
        assert_eq!(o.epoch(100)[&part(0, 0).key].first_ns(), 995 * ms);
    }

    #[test]
    fn the_source_spec_sizes_the_tables() {
        let c = parse_spec("xdp:ns/eth0,seconds=2,connections=1000,connections6=10").unwrap();
        assert_eq!((c.netns.as_deref(), c.iface.as_str()), (Some("ns"), "eth0"));
        assert_eq!(c.sizes.agg_slots, 2048);
        assert_eq!(c.sizes.agg6_slots, crate::offload::prog::TAP_AGG_MIN_SLOTS);
        assert_eq!(parse_spec("xdp:eth0").unwrap().sizes, TapSizes::default());
        for bad in ["connections=0", "connections=1.5", "table_mib=0", "slots=4"] {
            let e = parse_spec(&format!("xdp:eth0,{bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(bad.split('=').next().unwrap()), "{bad}: {e}");
        }
    }

    #[test]
    fn parts_with_the_same_first_packet_come_by_connection_whatever_their_order() {
        let mut a = EpochParts::default();
        let mut b = EpochParts::default();
        for i in 0..100 {
            a.push(part(i, 7));
            b.push(part(99 - i, 7));
        }
        let (x, y): (Vec<ConnKey>, Vec<ConnKey>) = (
            a.ordered().map(|p| p.key).collect(),
            b.ordered().map(|p| p.key).collect(),
        );
        assert_eq!(x, y);
        assert!(x.windows(2).all(|w| w[0] < w[1]));
    }
}
