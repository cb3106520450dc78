//! `rampart stream run --listen ADDR`: Prometheus metrics of a running app
//! on `http://ADDR/metrics` (and `/healthz`), served by the service shell's
//! metrics listener and read at every scrape from the source's counters
//! (and the tap's, for ring-buffer drops) and the engine's queues.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, Result};
use rampart_service::{
    Metrics, Routes, Samples, Server, ServerConfig, ServerError, Service, StateCollector, Tokens,
};
use rampart_stream::engine::QueueGauges;
use rampart_stream::source::{AnySource, PacketSource};

/// Counts the app's outputs (flow records or alerts: the `kind` given to
/// [`serve`]), for the metrics.
pub static OUTPUTS: AtomicU64 = AtomicU64::new(0);

/// The samples of one scrape.
fn read(src: &AnySource, queues: Option<&QueueGauges>, kind: &str, m: &mut Samples) {
    let packets = "rampart_stream_packets_total";
    let s = src.stats().snapshot();
    for (l, v) in [
        ("seen", s.frames),
        ("analysed", s.tuples),
        ("not_ip", s.not_ip),
        ("malformed", s.truncated + s.bad_header + s.too_deep),
        ("filtered", s.filtered),
        ("dropped", s.dropped),
    ] {
        m.set(packets, &[l], v as f64);
    }
    if let AnySource::Tap(t) = src {
        if let Ok(c) = t.counters() {
            m.set(packets, &["ring_full"], c.ring_full as f64);
            m.set(packets, &["aggregated"], c.aggregated as f64);
        }
    }
    m.set(
        "rampart_stream_outputs_total",
        &[kind],
        OUTPUTS.load(Ordering::Relaxed) as f64,
    );
    for (op, d) in queues.map(QueueGauges::depths).unwrap_or_default() {
        m.set("rampart_stream_queue_depth", &[&op], d as f64);
    }
}

/// Serve `/metrics` on `addr` until the returned server is dropped; the
/// app's outputs are counted as `kind` (`records` or `alerts`).
///
/// # Errors
/// The address cannot be bound (in use, not local) — said with the OS error.
pub fn serve(
    addr: SocketAddr,
    src: AnySource,
    queues: Option<QueueGauges>,
    kind: &'static str,
) -> Result<Server> {
    let metrics = Metrics::new();
    metrics.register(
        StateCollector::new(move |m| {
            read(&src, queues.as_ref(), kind, m);
            Ok(())
        })
        .counter(
            "rampart_stream_packets_total",
            "Frames by what became of them: seen by the source, analysed (tuples or packets in XDP aggregates), not IP, malformed, filtered, dropped before the app (AF_XDP ring full, tap ring buffer full), ring_full, aggregated",
            &["outcome"],
        )
        .counter(
            "rampart_stream_outputs_total",
            "What the app emitted: kind=records (flowmeter's flow records) or kind=alerts (portscan, synflood)",
            &["kind"],
        )
        .gauge(
            "rampart_stream_queue_depth",
            "Records waiting in the input queues of each operator",
            &["operator"],
        ),
    )?;
    let cfg = ServerConfig {
        metrics_listen: Some(addr.to_string()),
        ..ServerConfig::default()
    };
    let svc = Service {
        name: "rampart-stream",
        title: "rampart stream",
        version: env!("CARGO_PKG_VERSION"),
        description: "Metrics of a running stream app.",
        routes: Routes::new(),
        metrics,
        tokens: Tokens::none(),
        apps: rampart_service::Apps::none(),
    };
    Server::start(&cfg, svc).map_err(|e| match e {
        ServerError::Bind { addr, err, .. } => anyhow!("--listen {addr}: {err}"),
        e => e.into(),
    })
}
