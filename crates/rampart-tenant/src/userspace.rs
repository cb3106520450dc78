//! The tenant services in userspace, on ordinary sockets:
//! the baseline of the offload-gain comparison — what a tenant runs in its
//! own namespace when nothing is offloaded.
//!
//! - [`DnsForwarder`]: a rate-limiting DNS forwarder. The same policy as
//!   the XDP rate limiter ([`crate::programs::DnsLimits`]: GCRA budgets per
//!   source and per prefix, exempt prefixes, TC=1 answers or drops, the
//!   same parsing rules); queries within budget are forwarded to an
//!   upstream server and its answers relayed back.
//! - [`TcpProxy`]: a SYN-proxy on ordinary sockets: the kernel completes
//!   the client's handshake (SYN cookies under a flood, `tcp_syncookies`),
//!   and only an accepted connection opens one to the server; bytes are
//!   spliced both ways.
//!
//! Both are written the way one would write them for production on
//! ordinary sockets (one thread per role, no artificial work): the
//! comparison measures the cost of the socket path, not a strawman.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::programs::DnsLimits;

/// GCRA state of the userspace limiter (same arithmetic as the BPF one).
#[derive(Debug)]
pub struct DnsLimiter {
    src_interval: u64,
    src_tau: u64,
    pfx_interval: u64,
    pfx_tau: u64,
    v4_plen: u8,
    v6_plen: u8,
    truncate: bool,
    exempt: Vec<(IpAddr, u8)>,
    src: HashMap<IpAddr, u64>,
    pfx: HashMap<IpAddr, u64>,
}

/// What the limiter decided for one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within budget (or no limit): forward.
    Pass,
    /// From an exempt prefix: forward.
    Exempt,
    /// Over budget: answer with this many bytes of TC=1 answer (built in place).
    Truncated(usize),
    /// Over budget, dropped.
    Dropped,
    /// Not a DNS query: dropped.
    Malformed,
}

fn mask(a: IpAddr, plen: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let m = if plen == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(plen.min(32)))
            };
            IpAddr::V4((u32::from(v) & m).into())
        }
        IpAddr::V6(v) => {
            let m = if plen == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(plen.min(128)))
            };
            IpAddr::V6((u128::from(v) & m).into())
        }
    }
}

fn in_prefix(a: IpAddr, net: IpAddr, plen: u8) -> bool {
    a.is_ipv4() == net.is_ipv4() && mask(a, plen) == mask(net, plen)
}

/// Length of the question after the 12-byte header (name, QTYPE, QCLASS),
/// or `None` when compressed, truncated or oversized (the BPF rules).
pub fn question_len(q: &[u8]) -> Option<usize> {
    let mut off = 0usize;
    for _ in 0..128 {
        if off > 255 {
            return None;
        }
        let l = *q.get(off)? as usize;
        if l == 0 {
            off += 1;
            if off > 255 || q.len() < off + 4 {
                return None;
            }
            return Some(off + 4);
        }
        if l > 63 {
            return None;
        }
        off += 1 + l;
    }
    None
}

fn conforms(tat: Option<u64>, now: u64, tau: u64) -> bool {
    tat.is_none_or(|t| t <= now || t - now <= tau)
}

impl DnsLimiter {
    /// A limiter enforcing `limits`.
    ///
    /// # Errors
    /// Invalid limits.
    pub fn new(limits: &DnsLimits) -> Result<Self> {
        let v = limits.cfg_value()?;
        let u = |i: usize| u64::from_ne_bytes(v[i..i + 8].try_into().unwrap_or_default());
        Ok(Self {
            src_interval: u(0),
            src_tau: u(8),
            pfx_interval: u(16),
            pfx_tau: u(24),
            v4_plen: limits.v4_plen,
            v6_plen: limits.v6_plen,
            truncate: limits.truncate,
            exempt: limits.exempt.clone(),
            src: HashMap::new(),
            pfx: HashMap::new(),
        })
    }

    /// Decide for a datagram `msg` (the UDP payload) from `src` at `now`
    /// (ns, monotonic). A TC answer is written over `msg` (its first
    /// `n` bytes, `Verdict::Truncated(n)`).
    pub fn decide(&mut self, src: IpAddr, msg: &mut [u8], now: u64) -> Verdict {
        if msg.len() < 12 || msg[2] & 0x80 != 0 {
            return Verdict::Malformed;
        }
        if self.src_interval == 0 && self.pfx_interval == 0 {
            return Verdict::Pass;
        }
        if self.exempt.iter().any(|(n, l)| in_prefix(src, *n, *l)) {
            return Verdict::Exempt;
        }
        let p = mask(
            src,
            if src.is_ipv4() {
                self.v4_plen
            } else {
                self.v6_plen
            },
        );
        let st = (self.src_interval != 0).then(|| self.src.get(&src).copied());
        let pt = (self.pfx_interval != 0).then(|| self.pfx.get(&p).copied());
        let ok_s = st.is_none_or(|t| conforms(t, now, self.src_tau));
        let ok_p = pt.is_none_or(|t| conforms(t, now, self.pfx_tau));
        if ok_s && ok_p {
            if let Some(t) = st {
                self.src.insert(
                    src,
                    t.filter(|t| *t > now).unwrap_or(now) + self.src_interval,
                );
            }
            if let Some(t) = pt {
                self.pfx
                    .insert(p, t.filter(|t| *t > now).unwrap_or(now) + self.pfx_interval);
            }
            return Verdict::Pass;
        }
        if self.truncate && msg[4] == 0 && msg[5] == 1 && msg[2] & 0x78 == 0 {
            if let Some(ql) = question_len(&msg[12..]) {
                msg[2] = 0x80 | 0x02 | (msg[2] & 0x01);
                msg[3] = 0;
                msg[6..12].fill(0);
                return Verdict::Truncated(12 + ql);
            }
        }
        Verdict::Dropped
    }

    /// Forget buckets that are full again (bounded memory, like the LRU maps).
    pub fn expire(&mut self, now: u64) {
        let (st, pt) = (self.src_tau, self.pfx_tau);
        self.src.retain(|_, t| *t > now && *t - now <= st);
        self.pfx.retain(|_, t| *t > now && *t - now <= pt);
    }
}

/// Counters of the userspace forwarder.
#[derive(Debug, Default)]
pub struct ForwarderCounters {
    /// Datagrams decided (every one read from the socket).
    pub handled: AtomicU64,
    /// Forwarded upstream (within budget or exempt).
    pub forwarded: AtomicU64,
    /// Answered TC=1.
    pub truncated: AtomicU64,
    /// Dropped (over budget or malformed).
    pub dropped: AtomicU64,
    /// Upstream answers relayed to clients.
    pub relayed: AtomicU64,
}

/// A snapshot of [`ForwarderCounters`].
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct ForwarderStats {
    /// Datagrams decided.
    pub handled: u64,
    /// Forwarded upstream.
    pub forwarded: u64,
    /// Answered TC=1.
    pub truncated: u64,
    /// Dropped.
    pub dropped: u64,
    /// Answers relayed.
    pub relayed: u64,
}

fn pin_to(cpu: Option<usize>) {
    if let Some(c) = cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(c).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
}

/// The rate-limiting DNS forwarder, running until dropped.
#[derive(Debug)]
pub struct DnsForwarder {
    stop: Arc<AtomicBool>,
    counters: Arc<ForwarderCounters>,
    threads: Vec<JoinHandle<()>>,
    tids: Arc<Mutex<Vec<i32>>>,
}

const NO_SLOT: (SocketAddr, u16) = (
    SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::UNSPECIFIED,
        0,
    )),
    0,
);

impl DnsForwarder {
    /// Listen on `listen` inside namespace `ns`, forward to `upstream`
    /// (reachable from `ns`), enforcing `limits`; threads pinned to `cpu`.
    ///
    /// # Errors
    /// Invalid limits, or sockets that cannot be bound.
    pub fn start(
        ns: &str,
        listen: SocketAddr,
        upstream: SocketAddr,
        limits: &DnsLimits,
        cpu: Option<usize>,
    ) -> Result<Self> {
        let mut limiter = DnsLimiter::new(limits)?;
        let (sock, up) = rampart_dataplane::netns::run_in(Some(ns), || {
            let s = UdpSocket::bind(listen).map_err(|e| rampart_dataplane::Error::Io {
                context: format!("binding {listen}"),
                err: e,
            })?;
            let u = UdpSocket::bind(if upstream.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            })
            .and_then(|u| u.connect(upstream).map(|()| u))
            .map_err(|e| rampart_dataplane::Error::Io {
                context: format!("upstream {upstream}"),
                err: e,
            })?;
            Ok((s, u))
        })
        .map_err(|e| Error::Invalid(format!("starting the DNS forwarder in {ns}: {e}")))?;
        let tick = Some(Duration::from_millis(50));
        sock.set_read_timeout(tick)
            .and_then(|()| up.set_read_timeout(tick))
            .map_err(|e| Error::io("socket timeouts", e))?;
        let sock2 = sock.try_clone().map_err(|e| Error::io("socket clone", e))?;
        let up2 = up.try_clone().map_err(|e| Error::io("socket clone", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(ForwarderCounters::default());
        let slots: Arc<Mutex<Vec<(SocketAddr, u16)>>> = Arc::new(Mutex::new(vec![NO_SLOT; 65536]));
        let tids = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        {
            let (stop, c, slots, tids) =
                (stop.clone(), counters.clone(), slots.clone(), tids.clone());
            threads.push(std::thread::spawn(move || {
                pin_to(cpu);
                tids.lock()
                    .map(|mut t| t.push(nix::unistd::gettid().as_raw()))
                    .ok();
                let t0 = Instant::now();
                let mut buf = [0u8; 4096];
                let mut next_id: u16 = 0;
                let mut last_expire = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let (n, from) = match sock.recv_from(&mut buf) {
                        Ok(x) => x,
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                        {
                            continue
                        }
                        Err(_) => continue,
                    };
                    let now = t0.elapsed().as_nanos() as u64;
                    c.handled.fetch_add(1, Ordering::Relaxed);
                    match limiter.decide(from.ip(), &mut buf[..n], now) {
                        Verdict::Pass | Verdict::Exempt => {
                            let orig = u16::from_be_bytes([buf[0], buf[1]]);
                            if let Ok(mut s) = slots.lock() {
                                s[usize::from(next_id)] = (from, orig);
                            }
                            buf[0..2].copy_from_slice(&next_id.to_be_bytes());
                            next_id = next_id.wrapping_add(1);
                            let _ = up.send(&buf[..n]);
                            c.forwarded.fetch_add(1, Ordering::Relaxed);
                        }
                        Verdict::Truncated(len) => {
                            let _ = sock.send_to(&buf[..len], from);
                            c.truncated.fetch_add(1, Ordering::Relaxed);
                        }
                        Verdict::Dropped | Verdict::Malformed => {
                            c.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if now - last_expire > 1_000_000_000 {
                        limiter.expire(now);
                        last_expire = now;
                    }
                }
            }));
        }
        {
            let (stop, c, tids) = (stop.clone(), counters.clone(), tids.clone());
            threads.push(std::thread::spawn(move || {
                pin_to(cpu);
                tids.lock()
                    .map(|mut t| t.push(nix::unistd::gettid().as_raw()))
                    .ok();
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    let Ok(n) = up2.recv(&mut buf) else { continue };
                    if n < 12 {
                        continue;
                    }
                    let id = u16::from_be_bytes([buf[0], buf[1]]);
                    let Some((to, orig)) = slots.lock().ok().map(|s| s[usize::from(id)]) else {
                        continue;
                    };
                    if to.port() == 0 {
                        continue;
                    }
                    buf[0..2].copy_from_slice(&orig.to_be_bytes());
                    if sock2.send_to(&buf[..n], to).is_ok() {
                        c.relayed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        Ok(Self {
            stop,
            counters,
            threads,
            tids,
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ForwarderStats {
        let c = &self.counters;
        ForwarderStats {
            handled: c.handled.load(Ordering::Relaxed),
            forwarded: c.forwarded.load(Ordering::Relaxed),
            truncated: c.truncated.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            relayed: c.relayed.load(Ordering::Relaxed),
        }
    }

    /// Thread ids of the forwarder (for CPU-time measurements).
    pub fn thread_ids(&self) -> Vec<i32> {
        self.tids.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

impl Drop for DnsForwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The userspace SYN-proxy: accepts connections (the kernel completes the
/// handshake, with SYN cookies when its queue overflows) and only then
/// connects to the server and splices.
#[derive(Debug)]
pub struct TcpProxy {
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

fn splice(mut a: TcpStream, mut b: TcpStream) {
    let (Ok(mut a2), Ok(mut b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let t = std::thread::spawn(move || {
        let _ = std::io::copy(&mut a2, &mut b2);
        let _ = b2.shutdown(Shutdown::Write);
    });
    let mut buf = [0u8; 16384];
    loop {
        match b.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if a.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = a.shutdown(Shutdown::Write);
    let _ = t.join();
}

impl TcpProxy {
    /// Listen on `listen` in `ns` (backlog 511, like nginx) and splice each
    /// accepted connection to `server`.
    ///
    /// # Errors
    /// The listener cannot be bound.
    pub fn start(ns: &str, listen: SocketAddr, server: SocketAddr) -> Result<Self> {
        let l = rampart_dataplane::netns::run_in(Some(ns), || {
            TcpListener::bind(listen).map_err(|e| rampart_dataplane::Error::Io {
                context: format!("binding {listen}"),
                err: e,
            })
        })
        .map_err(|e| Error::Invalid(format!("starting the TCP proxy in {ns}: {e}")))?;
        l.set_nonblocking(true)
            .map_err(|e| Error::io("listener", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let (s2, a2) = (stop.clone(), accepted.clone());
        let ns = ns.to_string();
        // Connections to the server are made from the tenant's namespace:
        // the accepting thread runs inside it (threads inherit it).
        let thread = std::thread::spawn(move || {
            let _ = rampart_dataplane::netns::run_in(Some(&ns), move || {
                while !s2.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((c, _)) => {
                            a2.fetch_add(1, Ordering::Relaxed);
                            let _ = c.set_nonblocking(false);
                            std::thread::spawn(move || {
                                if let Ok(s) =
                                    TcpStream::connect_timeout(&server, Duration::from_secs(2))
                                {
                                    splice(c, s);
                                }
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
                Ok(())
            });
        });
        Ok(Self {
            stop,
            accepted,
            thread: Some(thread),
        })
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for TcpProxy {
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

    fn q(name: &[u8]) -> Vec<u8> {
        let mut v = vec![0xbe, 0xef, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1];
        v.extend_from_slice(name);
        v.extend_from_slice(&[0, 1, 0, 1]);
        v.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        v
    }

    #[test]
    fn same_policy_as_the_bpf_limiter() {
        let mut l = DnsLimiter::new(&DnsLimits {
            src_qps: 0.01,
            src_burst: 2,
            pfx_qps: 0.01,
            pfx_burst: 3,
            truncate: true,
            exempt: vec![("10.9.0.0".parse().unwrap(), 16)],
            ..DnsLimits::default()
        })
        .unwrap();
        let a: IpAddr = "172.16.0.1".parse().unwrap();
        let b: IpAddr = "172.16.0.2".parse().unwrap();
        let name = b"\x07example\x03com\x00";
        let mut m = q(name);
        assert_eq!(l.decide(a, &mut m, 1), Verdict::Pass);
        assert_eq!(l.decide(a, &mut q(name), 2), Verdict::Pass);
        let mut m = q(name);
        assert_eq!(l.decide(a, &mut m, 3), Verdict::Truncated(12 + 13 + 4));
        assert_eq!(&m[2..12], &[0x83, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(l.decide(b, &mut q(name), 4), Verdict::Pass, "prefix 3rd");
        assert!(matches!(
            l.decide(b, &mut q(name), 5),
            Verdict::Truncated(_)
        ));
        assert_eq!(l.decide(b, &mut q(b"\xc0\x0c"), 6), Verdict::Dropped);
        let e: IpAddr = "10.9.3.3".parse().unwrap();
        assert_eq!(l.decide(e, &mut q(name), 7), Verdict::Exempt);
        assert_eq!(l.decide(a, &mut [0u8; 8], 8), Verdict::Malformed);
        // The clock refills: 100 s later the source has budget again.
        assert_eq!(l.decide(a, &mut q(name), 300_000_000_000), Verdict::Pass);
    }

    #[test]
    fn question_rules() {
        assert_eq!(question_len(b"\x01a\x00\x00\x01\x00\x01"), Some(7));
        assert_eq!(question_len(b"\x01a\x00\x00\x01\x00"), None);
        assert_eq!(question_len(b"\xc0\x0c\x00\x01\x00\x01"), None);
        let mut long = Vec::new();
        for _ in 0..4 {
            long.push(63);
            long.extend_from_slice(&[b'x'; 63]);
        }
        long.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert_eq!(question_len(&long), None, "257-byte name");
    }
}
