//! Raw AF_XDP source: `xdp_stream_rx` redirects every frame to the AF_XDP
//! socket of its RX queue (one socket per queue, one source replica per
//! socket), and the replica parses the frame in userspace
//! ([`crate::parse::parse_frame`]) — the "no offload" baseline.
//!
//! The socket is written against the kernel ABI (`linux/if_xdp.h`, through
//! `libc`) rather than with xsk-rs: xsk-rs links libxdp, which bundles a
//! second copy of libbpf next to the one `libbpf-sys` vendors for the rest
//! of rampart. On veth (the lab) AF_XDP runs in copy mode (zero-copy
//! returns EOPNOTSUPP there, DESIGN §7). Needs kernel ≥ 5.4 (XSKMAP
//! lookups by `bpf_redirect_map` flags); tested on 6.18.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use rampart_bpf::xdp_stream_rx::XdpStreamRxSkelBuilder;
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::netns;
use rampart_dataplane::xdp::{XdpLink, XdpMode};

use super::{PacketSource, SourceStats};
use crate::engine::SourceCtx;
use crate::error::{io as io_err, Error, Result};
use crate::parse::parse_frame;
use crate::tuple::StreamTuple;

/// UMEM frame size (one frame per chunk; a veth frame fits).
pub const FRAME_SIZE: u32 = 2048;

struct Ring {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    size: u32,
    map: *mut libc::c_void,
    map_len: usize,
}

impl Ring {
    /// # Safety
    /// `fd` is an XDP socket whose ring `pgoff` has `size` entries of
    /// `entry` bytes at the offsets `off`.
    unsafe fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        pgoff: i64,
    ) -> io::Result<Self> {
        let len = off.desc as usize + size as usize * entry;
        // SAFETY: mapping a kernel ring of the socket; length from XDP_MMAP_OFFSETS.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = map.cast::<u8>();
        // SAFETY: the offsets are inside the mapping (kernel-provided).
        unsafe {
            Ok(Self {
                producer: base.add(off.producer as usize).cast(),
                consumer: base.add(off.consumer as usize).cast(),
                desc: base.add(off.desc as usize),
                mask: size - 1,
                size,
                map,
                map_len: len,
            })
        }
    }
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping, a u32 the kernel updates atomically.
        unsafe { &*self.producer }
    }
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe {
            libc::munmap(self.map, self.map_len);
        }
    }
}

/// One AF_XDP socket with its own UMEM, bound to one RX queue, receiving.
pub struct Xsk {
    rx: Ring,
    fill: Ring,
    _comp: Ring,
    umem: *mut u8,
    umem_len: usize,
    fd: OwnedFd,
    queue: u32,
}

// SAFETY: the raw pointers are private mappings owned by this value; only
// the owning thread touches them (the kernel synchronises through the ring
// indices, which are atomics).
unsafe impl Send for Xsk {}

impl std::fmt::Debug for Xsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xsk")
            .field("fd", &self.fd.as_raw_fd())
            .field("queue", &self.queue)
            .finish()
    }
}

fn setsockopt<T>(fd: RawFd, opt: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a valid value of the size we pass.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Xsk {
    /// Create a socket for `queue` of `ifindex` (in the calling thread's
    /// network namespace), copy mode, with `frames` UMEM frames and rings
    /// of `ring` entries (powers of two).
    ///
    /// # Errors
    /// The failing step and the kernel's error.
    pub fn new(ifindex: u32, queue: u32, frames: u32, ring: u32) -> Result<Self> {
        if !frames.is_power_of_two() || !ring.is_power_of_two() || ring > frames {
            return Err(Error::Invalid(format!(
                "AF_XDP frames {frames} / ring {ring}: powers of two, ring <= frames"
            )));
        }
        // SAFETY: plain syscall.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(
                io_err("socket(AF_XDP) (needs root and CONFIG_XDP_SOCKETS)")(
                    io::Error::last_os_error(),
                ),
            );
        }
        // SAFETY: fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem_len = (frames * FRAME_SIZE) as usize;
        // SAFETY: anonymous private mapping.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(io_err("mmap of the AF_XDP UMEM")(io::Error::last_os_error()));
        }
        let umem = umem.cast::<u8>();
        // From here on, unmap on error.
        let cleanup = |e: Error| {
            // SAFETY: unmapping the region mapped above.
            unsafe { libc::munmap(umem.cast(), umem_len) };
            e
        };
        let reg = libc::xdp_umem_reg {
            addr: umem as u64,
            len: umem_len as u64,
            chunk_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(raw, libc::XDP_UMEM_REG, &reg)
            .map_err(|e| cleanup(io_err("XDP_UMEM_REG")(e)))?;
        setsockopt(raw, libc::XDP_UMEM_FILL_RING, &frames)
            .map_err(|e| cleanup(io_err("XDP_UMEM_FILL_RING")(e)))?;
        setsockopt(raw, libc::XDP_UMEM_COMPLETION_RING, &ring)
            .map_err(|e| cleanup(io_err("XDP_UMEM_COMPLETION_RING")(e)))?;
        setsockopt(raw, libc::XDP_RX_RING, &ring).map_err(|e| cleanup(io_err("XDP_RX_RING")(e)))?;
        // SAFETY: zeroed POD filled by the kernel.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut optlen = std::mem::size_of::<libc::xdp_mmap_offsets>() as u32;
        // SAFETY: valid out-pointer and length.
        let rc = unsafe {
            libc::getsockopt(
                raw,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&raw mut off).cast(),
                &mut optlen,
            )
        };
        if rc < 0 {
            return Err(cleanup(io_err("XDP_MMAP_OFFSETS")(
                io::Error::last_os_error(),
            )));
        }
        // SAFETY: ring sizes and offsets as configured/reported above.
        let rx = unsafe { Ring::map(raw, &off.rx, ring, 16, libc::XDP_PGOFF_RX_RING) }
            .map_err(|e| cleanup(io_err("mmap of the RX ring")(e)))?;
        // SAFETY: as above.
        let fill = unsafe {
            Ring::map(
                raw,
                &off.fr,
                frames,
                8,
                libc::XDP_UMEM_PGOFF_FILL_RING as i64,
            )
        }
        .map_err(|e| cleanup(io_err("mmap of the fill ring")(e)))?;
        // SAFETY: as above.
        let comp = unsafe {
            Ring::map(
                raw,
                &off.cr,
                ring,
                8,
                libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64,
            )
        }
        .map_err(|e| cleanup(io_err("mmap of the completion ring")(e)))?;
        let mut s = Self {
            rx,
            fill,
            _comp: comp,
            umem,
            umem_len,
            fd,
            queue,
        };
        // Every frame starts in the fill ring.
        for i in 0..frames {
            // SAFETY: index < fill ring size, entries are u64 addresses.
            unsafe { *(s.fill.desc.cast::<u64>().add(i as usize)) = u64::from(i * FRAME_SIZE) };
        }
        s.fill.prod().store(frames, Ordering::Release);
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: valid sockaddr of the stated size.
        let rc = unsafe {
            libc::bind(
                raw,
                (&raw const sa).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as u32,
            )
        };
        if rc < 0 {
            return Err(io_err(format!(
                "binding AF_XDP to ifindex {ifindex} queue {queue}"
            ))(io::Error::last_os_error()));
        }
        s.queue = queue;
        Ok(s)
    }

    /// The socket fd (for the XSKMAP).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Receive up to `max` frames, call `f` on each, give their frames back
    /// to the kernel. Returns how many were received.
    pub fn recv(&mut self, max: u32, mut f: impl FnMut(&[u8])) -> u32 {
        let cons = self.rx.cons().load(Ordering::Relaxed);
        let prod = self.rx.prod().load(Ordering::Acquire);
        let n = prod.wrapping_sub(cons).min(max);
        if n == 0 {
            return 0;
        }
        let fprod = self.fill.prod().load(Ordering::Relaxed);
        for k in 0..n {
            let idx = (cons.wrapping_add(k) & self.rx.mask) as usize;
            // SAFETY: idx < ring size; the kernel produced this descriptor (acquire above).
            let d = unsafe { std::ptr::read(self.rx.desc.cast::<libc::xdp_desc>().add(idx)) };
            let (addr, len) = (d.addr as usize, d.len as usize);
            if addr + len <= self.umem_len {
                // SAFETY: inside the UMEM, written by the kernel before publishing the descriptor.
                let frame = unsafe { std::slice::from_raw_parts(self.umem.add(addr), len) };
                f(frame);
            }
            let base = (d.addr as u64) & !u64::from(FRAME_SIZE - 1);
            let fidx = (fprod.wrapping_add(k) & self.fill.mask) as usize;
            // SAFETY: the fill ring holds `frames` entries and we only return
            // frames we received, so it cannot overflow.
            unsafe { *(self.fill.desc.cast::<u64>().add(fidx)) = base };
        }
        self.rx
            .cons()
            .store(cons.wrapping_add(n), Ordering::Release);
        self.fill
            .prod()
            .store(fprod.wrapping_add(n), Ordering::Release);
        let _ = self.fill.size;
        n
    }

    /// Wait up to `timeout` for frames.
    pub fn wait(&self, timeout: Duration) {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
    }

    /// Frames the kernel dropped for this socket (ring full, no fill frame).
    pub fn dropped(&self) -> u64 {
        // SAFETY: zeroed POD filled by the kernel.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as u32;
        // SAFETY: valid out-pointer and length.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&raw mut st).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return 0;
        }
        st.rx_dropped + st.rx_ring_full + st.rx_fill_ring_empty_descs
    }
}

impl Drop for Xsk {
    fn drop(&mut self) {
        // Rings are unmapped by their own Drop; the UMEM here (the socket fd
        // closes after, releasing the kernel's pin on it).
        // SAFETY: unmapping our own region once.
        unsafe { libc::munmap(self.umem.cast(), self.umem_len) };
    }
}

/// Settings of an [`AfXdpSource`].
#[derive(Debug, Clone)]
pub struct AfXdpConfig {
    /// Network namespace of the interface (`None`: the current one).
    pub netns: Option<String>,
    /// Interface.
    pub iface: String,
    /// RX queues 0..queues, one socket and one source replica each.
    pub queues: u32,
    /// Stop after this many seconds.
    pub seconds: Option<f64>,
    /// Stop after this many frames (all queues).
    pub packets: Option<u64>,
    /// UMEM frames per socket.
    pub frames: u32,
    /// RX ring entries.
    pub ring: u32,
}

impl Default for AfXdpConfig {
    fn default() -> Self {
        Self {
            netns: None,
            iface: String::new(),
            queues: 1,
            seconds: None,
            packets: None,
            frames: 4096,
            ring: 2048,
        }
    }
}

struct Inner {
    cfg: AfXdpConfig,
    socks: Mutex<Vec<Option<Xsk>>>,
    received: AtomicU64,
    stats_fd: OwnedFd,
    _xsks_fd: OwnedFd,
    _prog_fd: OwnedFd,
    link: XdpLink,
    stats: Arc<SourceStats>,
}

/// Frames from AF_XDP sockets, parsed in userspace. Dropping the last clone
/// detaches the XDP program and closes the sockets.
#[derive(Clone)]
pub struct AfXdpSource {
    inner: Arc<Inner>,
    start: Option<Instant>,
}

impl std::fmt::Debug for AfXdpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdpSource")
            .field("cfg", &self.inner.cfg)
            .finish()
    }
}

fn dup(fd: std::os::fd::BorrowedFd<'_>, what: &str) -> Result<OwnedFd> {
    fd.try_clone_to_owned()
        .map_err(io_err(format!("duplicating the {what} fd")))
}

impl AfXdpSource {
    /// Load and attach `xdp_stream_rx` on the interface and open one socket
    /// per queue.
    ///
    /// # Errors
    /// Not root, no such namespace/interface, an XDP program already
    /// attached there, or a failing socket step — each said plainly.
    pub fn open(cfg: AfXdpConfig) -> Result<Self> {
        if cfg.iface.is_empty() {
            return Err(Error::Invalid(
                "afxdp source needs an interface: --source afxdp:[NETNS/]IFACE".into(),
            ));
        }
        if !(1..=64).contains(&cfg.queues) {
            return Err(Error::Invalid(format!(
                "afxdp queues={} out of range: use 1..=64",
                cfg.queues
            )));
        }
        rampart_dataplane::features::require_root("the AF_XDP source")?;
        let ns = cfg.netns.clone();
        let skel = XdpStreamRxSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .bpf_context(|| "opening xdp_stream_rx".into())?
            .load()
            .bpf_context(|| "loading xdp_stream_rx".into())?;
        let prog_fd = dup(skel.progs.xdp_stream_rx.as_fd(), "program")?;
        let xsks_fd = dup(skel.maps.stream_xsks.as_fd(), "XSKMAP")?;
        let stats_fd = dup(skel.maps.stream_rx_stats.as_fd(), "stats map")?;
        drop(skel);
        let ifindex = netns::ifindex(ns.as_deref(), &cfg.iface)?;
        // Sockets first, program second: no frame is passed to the stack for
        // lack of a socket once the program is live.
        let mut socks = Vec::new();
        for q in 0..cfg.queues {
            let map = xsks_fd.as_raw_fd();
            let (frames, ring) = (cfg.frames, cfg.ring);
            let xsk = netns::run_in(ns.as_deref(), move || {
                let x = Xsk::new(ifindex, q, frames, ring).map_err(|e| {
                    rampart_dataplane::Error::Io {
                        context: e.to_string(),
                        source: io::Error::other("AF_XDP socket"),
                    }
                })?;
                rampart_dataplane::maps::update_raw(
                    map,
                    &q.to_ne_bytes(),
                    &(x.raw_fd() as u32).to_ne_bytes(),
                    0,
                )?;
                Ok(x)
            })?;
            socks.push(Some(xsk));
        }
        let link = XdpLink::attach(
            prog_fd.as_raw_fd(),
            ns.as_deref(),
            &cfg.iface,
            XdpMode::Native,
        )?;
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                socks: Mutex::new(socks),
                received: AtomicU64::new(0),
                stats_fd,
                _xsks_fd: xsks_fd,
                _prog_fd: prog_fd,
                link,
                stats: Arc::default(),
            }),
            start: None,
        })
    }

    /// Frames `xdp_stream_rx` redirected to sockets, and frames it passed
    /// because their queue had no socket.
    ///
    /// # Errors
    /// Reading the per-CPU counters.
    pub fn redirect_counts(&self) -> Result<(u64, u64)> {
        let ncpu = rampart_dataplane::maps::possible_cpus();
        let mut out = [0u64; 2];
        for (k, o) in out.iter_mut().enumerate() {
            let mut vals = vec![0u64; ncpu];
            // SAFETY: per-CPU array of u64 values: ncpu × 8 bytes out.
            let rc = unsafe {
                libbpf_rs::libbpf_sys::bpf_map_lookup_elem(
                    self.inner.stats_fd.as_raw_fd(),
                    (&raw const k).cast::<u32>().cast(),
                    vals.as_mut_ptr().cast(),
                )
            };
            if rc < 0 {
                return Err(io_err("reading stream_rx_stats")(
                    io::Error::from_raw_os_error(-rc),
                ));
            }
            *o = vals.iter().sum();
        }
        Ok((out[0], out[1]))
    }

    /// Detach the XDP program now (the sockets stop receiving).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn detach(&self) -> Result<()> {
        Ok(self.inner.link.detach()?)
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl PacketSource for AfXdpSource {
    fn name(&self) -> String {
        "afxdp".into()
    }
    fn parallelism(&self) -> usize {
        self.inner.cfg.queues as usize
    }
    fn stats(&self) -> Arc<SourceStats> {
        Arc::clone(&self.inner.stats)
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_, StreamTuple>) -> std::result::Result<(), String> {
        let me = ctx.replica();
        let mut xsk = self
            .inner
            .socks
            .lock()
            .map_err(|_| "socket table poisoned".to_string())?
            .get_mut(me)
            .and_then(Option::take)
            .ok_or_else(|| {
                format!("no AF_XDP socket for replica {me} (a source replica per queue)")
            })?;
        let start = *self.start.get_or_insert_with(Instant::now);
        let deadline = self
            .inner
            .cfg
            .seconds
            .map(|s| start + Duration::from_secs_f64(s));
        let limit = self.inner.cfg.packets.unwrap_or(u64::MAX);
        let stats = &self.inner.stats;
        let (mut frames, mut tuples) = (0u64, 0u64);
        let mut dropped_before = xsk.dropped();
        loop {
            if ctx.is_cancelled()
                || deadline.is_some_and(|d| Instant::now() >= d)
                || self.inner.received.load(Ordering::Relaxed) >= limit
            {
                break;
            }
            let ts = now_ns();
            let n = xsk.recv(256, |frame| {
                frames += 1;
                match parse_frame(frame, ts) {
                    Ok(t) => {
                        tuples += 1;
                        ctx.emit(ts, t);
                    }
                    Err(s) => stats.count_status(s),
                }
            });
            if n == 0 {
                stats
                    .frames
                    .fetch_add(std::mem::take(&mut frames), Ordering::Relaxed);
                stats
                    .tuples
                    .fetch_add(std::mem::take(&mut tuples), Ordering::Relaxed);
                let d = xsk.dropped();
                stats
                    .dropped
                    .fetch_add(d - dropped_before.min(d), Ordering::Relaxed);
                dropped_before = d;
                ctx.progress(now_ns());
                xsk.wait(Duration::from_millis(20));
            } else {
                self.inner
                    .received
                    .fetch_add(u64::from(n), Ordering::Relaxed);
            }
        }
        stats.frames.fetch_add(frames, Ordering::Relaxed);
        stats.tuples.fetch_add(tuples, Ordering::Relaxed);
        let d = xsk.dropped();
        stats
            .dropped
            .fetch_add(d - dropped_before.min(d), Ordering::Relaxed);
        Ok(())
    }
}
