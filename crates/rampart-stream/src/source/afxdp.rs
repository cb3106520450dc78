//! Raw AF_XDP source: `xdp_stream_rx` redirects every frame to the AF_XDP
//! socket of its RX queue (one socket per queue, one source replica per
//! socket), and the replica parses the frame in userspace
//! ([`crate::parse::parse_frame`]) — the "no offload" baseline.
//!
//! The sockets are [`super::xsk::Xsk`] (hand-written, copy mode on veth:
//! zero-copy returns EOPNOTSUPP there). Needs kernel ≥ 5.4
//! (XSKMAP lookups by `bpf_redirect_map` flags); tested on 6.18.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use rampart_bpf::abi::stream::{STREAM_RX_NO_SOCKET, STREAM_RX_REDIRECTED};
use rampart_bpf::xdp_stream_rx::XdpStreamRxSkelBuilder;
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::netns;
use rampart_dataplane::xdp::{XdpLink, XdpMode};

use super::{PacketSource, SourceStats};
use crate::engine::SourceCtx;
use crate::error::{io as io_err, Error, Result};
use crate::parse::parse_frame;
use crate::tuple::StreamTuple;

pub use super::xsk::{Xsk, FRAME_SIZE};

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
    /// Take the frames of an interface that carries addresses (a server's:
    /// the host stops receiving everything on the bound queues). Without
    /// it, such an interface is refused: AF_XDP is for capture ports.
    pub consume: bool,
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
            consume: false,
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
        check_capture_port(&cfg)?;
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
                        err: io::Error::other("AF_XDP socket"),
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
        let count =
            |k| rampart_dataplane::maps::lookup_percpu_u64_sum(self.inner.stats_fd.as_raw_fd(), k);
        Ok((count(STREAM_RX_REDIRECTED)?, count(STREAM_RX_NO_SOCKET)?))
    }

    /// The raw AF_XDP receive ceiling: a thread per socket receives frames
    /// and hands them back without reading them, busy polling (give it a
    /// CPU per socket), until `stop` is set.
    /// Returns the frames received. Takes the sockets (the source cannot
    /// run afterwards).
    ///
    /// # Errors
    /// The sockets were already taken.
    pub fn receive_only(&self, stop: &std::sync::atomic::AtomicBool) -> Result<u64> {
        let socks: Vec<Xsk> = self
            .inner
            .socks
            .lock()
            .map_err(|_| Error::Invalid("socket table poisoned".into()))?
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        if socks.len() != self.inner.cfg.queues as usize {
            return Err(Error::Invalid(
                "the AF_XDP sockets are already in use".into(),
            ));
        }
        let total = AtomicU64::new(0);
        std::thread::scope(|s| {
            for mut x in socks {
                let total = &total;
                s.spawn(move || {
                    // Busy polling, never asleep. A reader that slept in
                    // poll() whenever it caught up made every flush of the
                    // ring wake it — a wake-up and an inter-processor
                    // interrupt on the delivering CPU, here the
                    // generator's and the bottleneck — so the faster
                    // reader was measured below the apps (1.6–2.4 M vs
                    // 2.5–3.1 M frames/s for flowmeter with offload off,
                    // 2026-11-23). The ceiling is what a reader that costs
                    // that CPU nothing gets.
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let got = x.recv(256, |_| {});
                        if got == 0 {
                            std::hint::spin_loop();
                        }
                        n += u64::from(got);
                    }
                    total.fetch_add(n, Ordering::Relaxed);
                });
            }
        });
        Ok(total.load(Ordering::Relaxed))
    }

    /// Detach the XDP program now (the sockets stop receiving).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn detach(&self) -> Result<()> {
        Ok(self.inner.link.detach()?)
    }
}

/// The addresses of an interface, IPv6 link-local ones aside (every
/// interface that is up has one; a capture port has nothing else).
///
/// # Errors
/// No such namespace, or `getifaddrs` failing.
pub fn addresses(netns: Option<&str>, iface: &str) -> Result<Vec<std::net::IpAddr>> {
    let iface = iface.to_string();
    Ok(netns::run_in(netns, move || {
        let mut out = Vec::new();
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: getifaddrs fills `head` with a list freed below.
        if unsafe { libc::getifaddrs(&mut head) } != 0 {
            return Err(rampart_dataplane::Error::Io {
                context: "listing interface addresses".into(),
                err: io::Error::last_os_error(),
            });
        }
        let mut p = head;
        while !p.is_null() {
            // SAFETY: a node of the list getifaddrs returned.
            let ifa = unsafe { &*p };
            // SAFETY: ifa_name is a NUL-terminated string.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy();
            if name == iface && !ifa.ifa_addr.is_null() {
                // SAFETY: a sockaddr; its family says which.
                let fam = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
                if fam == libc::AF_INET {
                    // SAFETY: AF_INET: a sockaddr_in.
                    let a = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                    out.push(std::net::IpAddr::from(a.sin_addr.s_addr.to_ne_bytes()));
                } else if fam == libc::AF_INET6 {
                    // SAFETY: AF_INET6: a sockaddr_in6.
                    let a = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                    let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                    if ip.segments()[0] & 0xffc0 != 0xfe80 {
                        out.push(std::net::IpAddr::V6(ip));
                    }
                }
            }
            p = ifa.ifa_next;
        }
        // SAFETY: the list getifaddrs returned, freed once.
        unsafe { libc::freeifaddrs(head) };
        Ok(out)
    })?)
}

/// Refuse to take the frames of a server's interface unless told to.
///
/// # Errors
/// [`Error::Invalid`]: the interface carries an address and `consume` is off.
pub fn check_capture_port(cfg: &AfXdpConfig) -> Result<()> {
    if cfg.consume {
        return Ok(());
    }
    let addrs = addresses(cfg.netns.as_deref(), &cfg.iface)?;
    if let Some(a) = addrs.first() {
        let at = cfg
            .netns
            .as_deref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        return Err(Error::Invalid(format!(
            "--source afxdp:{at}{i}: AF_XDP takes every frame of the bound queues away from the host, and {i} carries {a} (a server's interface): use --source xdp:{at}{i} to analyse without taking frames, or add --consume on a dedicated capture port",
            i = cfg.iface
        )));
    }
    Ok(())
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
