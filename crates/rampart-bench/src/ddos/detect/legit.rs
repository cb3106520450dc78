//! The legitimate client of the detection suite: new HTTP connections
//! (`Connection: close`) at a steady rate from many bound source addresses
//! (aliases of `wan0`, IPv4 and IPv6), counting the requests that got a
//! `200` within the timeout.
//!
//! Open loop: request *k* is due at `start + k / rate`, from source
//! `k mod n`. A request that a worker reaches more than `timeout` after its
//! due time is counted as failed without being sent (a real user gives up
//! too), so a stalled server lowers the success count instead of the rate.
//! Counts are kept per 100 ms bucket of the due time, so the harness can
//! ask for the successes within any window of the run.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::error::{Error, Result};

/// Bucket width of the counts.
const BUCKET_S: f64 = 0.1;

/// What one client does.
#[derive(Debug, Clone)]
pub struct LegitSpec {
    /// Source addresses (bound before connecting), used round robin.
    pub sources: Vec<IpAddr>,
    /// Server for IPv4 sources.
    pub dst_v4: SocketAddr,
    /// Server for IPv6 sources.
    pub dst_v6: SocketAddr,
    /// New connections per second, over all sources.
    pub rate: f64,
    /// Connect + response deadline of one request.
    pub timeout: Duration,
    /// Worker threads (requests in flight at most).
    pub workers: usize,
    /// Longest run (seconds); the client stops earlier when stopped.
    pub max_seconds: f64,
}

struct Shared {
    start: Instant,
    ok: Vec<AtomicU64>,
    due: Vec<AtomicU64>,
    next: AtomicU64,
    stop: AtomicBool,
}

/// A running client; [`LegitClient::stop`] ends it.
pub struct LegitClient {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for LegitClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegitClient").finish_non_exhaustive()
    }
}

/// Successes and attempts in a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Window {
    /// Requests due in the window.
    pub due: u64,
    /// Of those, answered `200` in time.
    pub ok: u64,
}

impl Window {
    /// Successes per second over `seconds`.
    pub fn ok_rate(&self, seconds: f64) -> f64 {
        self.ok as f64 / seconds.max(1e-9)
    }
}

fn one_request(src: IpAddr, dst: SocketAddr, timeout: Duration) -> bool {
    let run = || -> std::io::Result<bool> {
        let dom = if dst.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let s = Socket::new(dom, Type::STREAM, Some(Protocol::TCP))?;
        s.bind(&SockAddr::from(SocketAddr::new(src, 0)))?;
        // Closed sockets go to TIME_WAIT on our side; reuse keeps the
        // ephemeral ports of one source from running out at high rates.
        s.set_reuse_address(true)?;
        let t0 = Instant::now();
        s.connect_timeout(&SockAddr::from(dst), timeout)?;
        let left = timeout
            .saturating_sub(t0.elapsed())
            .max(Duration::from_millis(10));
        s.set_read_timeout(Some(left))?;
        s.set_write_timeout(Some(left))?;
        let mut st: std::net::TcpStream = s.into();
        st.write_all(b"GET / HTTP/1.1\r\nHost: victim\r\nConnection: close\r\n\r\n")?;
        let mut buf = [0u8; 512];
        let mut got = Vec::with_capacity(256);
        loop {
            if t0.elapsed() > timeout {
                return Ok(false);
            }
            let n = st.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if got.len() > 4096 {
                break;
            }
        }
        Ok(got.starts_with(b"HTTP/1.1 200") || got.starts_with(b"HTTP/1.0 200"))
    };
    run().unwrap_or(false)
}

impl LegitClient {
    /// Start the client; its threads live in the network namespace `ns`.
    ///
    /// # Errors
    /// No sources, a rate ≤ 0, or a thread that cannot enter `ns`.
    pub fn start(ns: &str, spec: &LegitSpec) -> Result<Self> {
        if spec.sources.is_empty() || spec.rate.is_nan() || spec.rate <= 0.0 || spec.workers == 0 {
            return Err(Error::Invalid(
                "the legitimate client needs sources, a rate > 0 and workers".into(),
            ));
        }
        let buckets = (spec.max_seconds / BUCKET_S).ceil() as usize + 2;
        let shared = Arc::new(Shared {
            start: Instant::now(),
            ok: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            due: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            next: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let mut threads = Vec::new();
        for _ in 0..spec.workers {
            let sh = shared.clone();
            let spec = spec.clone();
            let ns = ns.to_string();
            let tx = tx.clone();
            let h = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .name("legit".into())
                .spawn(move || {
                    if let Err(e) = rampart_dataplane::netns::enter_current_thread(&ns) {
                        let _ = tx.send(Err(e.into()));
                        return;
                    }
                    let _ = tx.send(Ok(()));
                    drop(tx);
                    worker(&sh, &spec);
                })
                .map_err(|e| Error::io("starting a legitimate client thread", e))?;
            threads.push(h);
        }
        drop(tx);
        let me = Self { shared, threads };
        for r in rx.iter() {
            r?;
        }
        Ok(me)
    }

    /// Seconds since the client started (its time base).
    pub fn elapsed(&self) -> f64 {
        self.shared.start.elapsed().as_secs_f64()
    }

    /// The instant the client started.
    pub fn started(&self) -> Instant {
        self.shared.start
    }

    /// Counts of the requests due in `[from, to)` seconds of the client's time.
    pub fn window(&self, from: f64, to: f64) -> Window {
        let a = (from / BUCKET_S).floor().max(0.0) as usize;
        let b = ((to / BUCKET_S).floor().max(0.0) as usize).min(self.shared.ok.len());
        let mut w = Window::default();
        for i in a..b {
            w.ok += self.shared.ok[i].load(Ordering::Relaxed);
            w.due += self.shared.due[i].load(Ordering::Relaxed);
        }
        w
    }

    /// Stop and wait for the workers (each finishes its request in flight).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for LegitClient {
    fn drop(&mut self) {
        self.halt();
    }
}

fn worker(sh: &Shared, spec: &LegitSpec) {
    let n = spec.sources.len() as u64;
    loop {
        if sh.stop.load(Ordering::Relaxed) {
            return;
        }
        let k = sh.next.fetch_add(1, Ordering::Relaxed);
        let due = k as f64 / spec.rate;
        if due >= spec.max_seconds {
            return;
        }
        let bucket = ((due / BUCKET_S) as usize).min(sh.ok.len() - 1);
        let now = sh.start.elapsed().as_secs_f64();
        if due > now {
            // Sleep in short steps so a stop is seen quickly.
            let mut left = due - now;
            while left > 0.0 {
                if sh.stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_secs_f64(left.min(0.05)));
                left = due - sh.start.elapsed().as_secs_f64();
            }
        }
        sh.due[bucket].fetch_add(1, Ordering::Relaxed);
        if sh.start.elapsed().as_secs_f64() - due > spec.timeout.as_secs_f64() {
            continue; // given up before it was sent: a failure
        }
        let src = spec.sources[(k % n) as usize];
        let dst = if src.is_ipv4() {
            spec.dst_v4
        } else {
            spec.dst_v6
        };
        if one_request(src, dst, spec.timeout) {
            sh.ok[bucket].fetch_add(1, Ordering::Relaxed);
        }
    }
}
