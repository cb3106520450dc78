//! `rampart stream run --listen ADDR`: Prometheus metrics of a running app
//! on `http://ADDR/metrics`, read from the source's counters (and the
//! tap's, for ring-buffer drops) at every scrape.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::routing::get;
use axum::Router;
use prometheus::{Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
use rampart_stream::source::{AnySource, PacketSource};

/// Counts the app's outputs (flow records or alerts), for the metrics.
pub static OUTPUTS: AtomicU64 = AtomicU64::new(0);

/// What the endpoint reads: the source, and the engine's queues.
struct Scrape {
    src: AnySource,
    queues: Option<rampart_stream::engine::QueueGauges>,
    registry: Registry,
    packets: IntCounterVec,
    outputs: IntCounterVec,
    depth: IntGaugeVec,
}

impl Scrape {
    fn render(&self) -> String {
        let s = self.src.stats().snapshot();
        let set = |c: &IntCounterVec, l: &str, v: u64| {
            let m = c.with_label_values(&[l]);
            let now = m.get();
            if v > now {
                m.inc_by(v - now);
            }
        };
        for (l, v) in [
            ("seen", s.frames),
            ("analysed", s.tuples),
            ("not_ip", s.not_ip),
            ("malformed", s.truncated + s.bad_header + s.too_deep),
            ("filtered", s.filtered),
            ("dropped", s.dropped),
        ] {
            set(&self.packets, l, v);
        }
        if let AnySource::Tap(t) = &self.src {
            if let Ok(c) = t.counters() {
                set(&self.packets, "ring_full", c.ring_full);
                set(&self.packets, "aggregated", c.aggregated);
            }
        }
        set(&self.outputs, "records", OUTPUTS.load(Ordering::Relaxed));
        if let Some(q) = &self.queues {
            for (op, d) in q.depths() {
                self.depth.with_label_values(&[&op]).set(d as i64);
            }
        }
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// The server, stopped when dropped.
pub struct Server {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serve `/metrics` on `addr` until the returned guard is dropped.
///
/// # Errors
/// The address cannot be bound (in use, not local) — said with the OS error.
pub fn serve(
    addr: SocketAddr,
    src: AnySource,
    queues: Option<rampart_stream::engine::QueueGauges>,
) -> Result<Server> {
    let registry = Registry::new();
    let packets = IntCounterVec::new(
        Opts::new(
            "rampart_stream_packets_total",
            "Frames by what became of them: seen by the source, analysed (tuples or packets in XDP aggregates), not IP, malformed, filtered, dropped before the app (AF_XDP ring full, tap ring buffer full), ring_full, aggregated",
        ),
        &["outcome"],
    )?;
    let outputs = IntCounterVec::new(
        Opts::new(
            "rampart_stream_outputs_total",
            "What the app emitted: flow records (flowmeter) or alerts (portscan, synflood)",
        ),
        &["kind"],
    )?;
    let depth = IntGaugeVec::new(
        Opts::new(
            "rampart_stream_queue_depth",
            "Records waiting in the input queues of each operator",
        ),
        &["operator"],
    )?;
    registry.register(Box::new(packets.clone()))?;
    registry.register(Box::new(outputs.clone()))?;
    registry.register(Box::new(depth.clone()))?;
    let st = Arc::new(Scrape {
        src,
        queues,
        registry,
        packets,
        outputs,
        depth,
    });
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("--listen {addr}"))?;
    listener
        .set_nonblocking(true)
        .context("--listen: non-blocking socket")?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(l) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = Router::new().route(
                    "/metrics",
                    get(move || {
                        let st = Arc::clone(&st);
                        async move {
                            (
                                [(
                                    axum::http::header::CONTENT_TYPE,
                                    "text/plain; version=0.0.4",
                                )],
                                st.render(),
                            )
                        }
                    }),
                );
                let _ = axum::serve(l, app)
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await;
            });
        })
        .context("starting the metrics thread")?;
    Ok(Server {
        stop: Some(tx),
        thread: Some(thread),
    })
}
