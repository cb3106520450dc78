//! Metrics: one Prometheus registry per daemon, read at scrape time.
//!
//! A daemon's state (BPF counters, blocked sets, token buckets) is the
//! truth; [`StateCollector`] reads it when `/metrics` is scraped and
//! reports it as it is then, so `/metrics` and the API never disagree and
//! no counter drifts from the map it mirrors. Only true event counters
//! (a rule was installed, a loop iteration took this long) are prometheus
//! counters and histograms updated where the event happens, registered in
//! the same registry with [`Metrics::register`].

use std::collections::HashMap;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{CounterVec, Encoder, GaugeVec, Opts, Registry, TextEncoder};

/// A daemon's registry (cheap to clone: clones share it).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    registry: Registry,
}

/// A metric that cannot be registered (a programming error: names clash).
/// prometheus's error is in the message only, not also a `source()`.
#[derive(Debug, thiserror::Error)]
#[error("metrics: {0}")]
pub struct MetricsError(prometheus::Error);

impl From<prometheus::Error> for MetricsError {
    fn from(e: prometheus::Error) -> Self {
        Self(e)
    }
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a collector: a [`StateCollector`] or an event counter.
    ///
    /// # Errors
    /// A name registered twice, or with other labels.
    pub fn register(&self, c: impl Collector + 'static) -> Result<(), MetricsError> {
        Ok(self.registry.register(Box::new(c))?)
    }

    /// The text exposition of everything registered, collected now.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::warn!("encoding metrics: {e}");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

#[derive(Debug, Clone)]
struct Family {
    name: String,
    help: String,
    labels: Vec<String>,
    kind: Kind,
}

type Read = Box<dyn Fn(&mut Samples) -> Result<(), String> + Send + Sync>;

/// A collector that reads a daemon's current state at every scrape.
///
/// Declare its families with [`StateCollector::counter`] and
/// [`StateCollector::gauge`]; the read function fills in the samples.
pub struct StateCollector {
    families: Vec<Family>,
    descs: Vec<Desc>,
    read: Read,
}

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCollector")
            .field("families", &self.families.len())
            .finish()
    }
}

/// The samples of one scrape, by family name.
#[derive(Debug, Default)]
pub struct Samples {
    values: HashMap<String, Vec<(Vec<String>, f64)>>,
}

impl Samples {
    /// Report `value` for family `name` with `labels` (in the order the
    /// family declared them).
    pub fn set(&mut self, name: &str, labels: &[&str], value: f64) {
        self.values
            .entry(name.to_string())
            .or_default()
            .push((labels.iter().map(|s| (*s).to_string()).collect(), value));
    }

    /// Add every sample of `other` (read elsewhere, e.g. on an owner thread).
    pub fn extend(&mut self, other: Samples) {
        for (k, v) in other.values {
            self.values.entry(k).or_default().extend(v);
        }
    }
}

impl StateCollector {
    /// A collector calling `read` at every scrape. An `Err` from `read`
    /// is logged and the scrape shows none of this collector's families.
    pub fn new(read: impl Fn(&mut Samples) -> Result<(), String> + Send + Sync + 'static) -> Self {
        Self {
            families: Vec::new(),
            descs: Vec::new(),
            read: Box::new(read),
        }
    }

    fn family(mut self, kind: Kind, name: &str, help: &str, labels: &[&str]) -> Self {
        let labels: Vec<String> = labels.iter().map(|s| (*s).to_string()).collect();
        // Desc::new only fails on invalid names, which are static here;
        // an invalid one is caught by every test that renders metrics.
        match Desc::new(name.into(), help.into(), labels.clone(), HashMap::new()) {
            Ok(d) => self.descs.push(d),
            Err(e) => tracing::error!("metric {name}: {e}"),
        }
        self.families.push(Family {
            name: name.into(),
            help: help.into(),
            labels,
            kind,
        });
        self
    }

    /// Declare a counter family (a value that only grows, read as it is now).
    #[must_use]
    pub fn counter(self, name: &str, help: &str, labels: &[&str]) -> Self {
        self.family(Kind::Counter, name, help, labels)
    }

    /// Declare a gauge family.
    #[must_use]
    pub fn gauge(self, name: &str, help: &str, labels: &[&str]) -> Self {
        self.family(Kind::Gauge, name, help, labels)
    }
}

impl Collector for StateCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut s = Samples::default();
        if let Err(e) = (self.read)(&mut s) {
            tracing::warn!("collecting metrics: {e}");
            return Vec::new();
        }
        let mut out = Vec::new();
        for f in &self.families {
            let Some(samples) = s.values.remove(&f.name) else {
                continue;
            };
            let labels: Vec<&str> = f.labels.iter().map(String::as_str).collect();
            let opts = Opts::new(f.name.clone(), f.help.clone());
            let fams = match f.kind {
                Kind::Counter => CounterVec::new(opts, &labels).map(|v| {
                    for (l, x) in &samples {
                        let l: Vec<&str> = l.iter().map(String::as_str).collect();
                        match v.get_metric_with_label_values(&l) {
                            Ok(c) => c.inc_by(x.max(0.0)),
                            Err(e) => tracing::error!("metric {}: {e}", f.name),
                        }
                    }
                    v.collect()
                }),
                Kind::Gauge => GaugeVec::new(opts, &labels).map(|v| {
                    for (l, x) in &samples {
                        let l: Vec<&str> = l.iter().map(String::as_str).collect();
                        match v.get_metric_with_label_values(&l) {
                            Ok(g) => g.set(*x),
                            Err(e) => tracing::error!("metric {}: {e}", f.name),
                        }
                    }
                    v.collect()
                }),
            };
            match fams {
                Ok(v) => out.extend(v),
                Err(e) => tracing::error!("metric {}: {e}", f.name),
            }
        }
        for name in s.values.keys() {
            tracing::error!("metric {name} was reported but never declared");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn state_is_read_at_every_scrape() {
        let state = Arc::new(AtomicU64::new(3));
        let s = state.clone();
        let m = Metrics::new();
        m.register(
            StateCollector::new(move |out| {
                let n = s.load(Ordering::Relaxed);
                out.set("t_drops_total", &["xdp", "blacklist"], n as f64);
                out.set("t_blocked", &["xdp"], (n * 2) as f64);
                Ok(())
            })
            .counter("t_drops_total", "Packets dropped", &["tier", "reason"])
            .gauge("t_blocked", "Sources held", &["tier"])
            .gauge("t_absent", "Never reported", &[]),
        )
        .unwrap();
        let text = m.render();
        assert!(
            text.contains("t_drops_total{reason=\"blacklist\",tier=\"xdp\"} 3"),
            "{text}"
        );
        assert!(text.contains("# TYPE t_drops_total counter"), "{text}");
        assert!(text.contains("t_blocked{tier=\"xdp\"} 6"), "{text}");
        assert!(!text.contains("t_absent"), "{text}");
        // The state moved: the next scrape shows it, nothing to update by hand.
        state.store(10, Ordering::Relaxed);
        assert!(m.render().contains("t_blocked{tier=\"xdp\"} 20"));
    }

    #[test]
    fn event_counters_share_the_registry_and_names_stay_unique() {
        let m = Metrics::new();
        let c = prometheus::IntCounter::new("t_events_total", "Events").unwrap();
        m.register(c.clone()).unwrap();
        c.inc();
        assert!(m.render().contains("t_events_total 1"));
        let again = prometheus::IntCounter::new("t_events_total", "Events").unwrap();
        assert!(m.register(again).is_err());
    }

    #[test]
    fn a_failed_read_drops_only_that_collector() {
        let m = Metrics::new();
        m.register(StateCollector::new(|_| Err("agent stopped".into())).gauge("t_g", "g", &[]))
            .unwrap();
        let c = prometheus::IntCounter::new("t_ok_total", "ok").unwrap();
        m.register(c).unwrap();
        let text = m.render();
        assert!(
            text.contains("t_ok_total 0") && !text.contains("t_g"),
            "{text}"
        );
    }
}
