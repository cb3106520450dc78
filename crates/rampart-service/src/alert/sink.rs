//! Alert sinks: a JSON-lines file (or stdout), syslog (RFC 5424 on the
//! local socket) and an HTTP webhook, configured in `[alerts]`.
//!
//! No sink ever blocks the caller for long: the file and syslog writes are
//! local; the webhook posts from a thread of its own behind a bounded
//! queue (full: the alert is dropped for that sink and counted).

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec, Opts};
use serde::{Deserialize, Serialize};

use super::Alert;
use crate::metrics::Metrics;

/// `[alerts]`: where alerts go. Every sink configured gets every alert.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// JSON lines: `-` is standard output, `""` none, else a file, appended
    /// (created with its directory) and reopened on SIGHUP (logrotate).
    /// Default `-`.
    pub file: String,
    /// Also send every alert to syslog (RFC 5424). Default false.
    pub syslog: bool,
    /// The local syslog socket (datagram). Default `/dev/log`.
    pub syslog_socket: PathBuf,
    /// Syslog facility: `daemon`, `user`, `local0` … `local7`, … Default `daemon`.
    pub syslog_facility: String,
    /// HTTP(S) URL that receives a POST of each alert (one JSON object,
    /// `Content-Type: application/json`). Default `""`: none.
    pub webhook: String,
    /// Alerts waiting for the webhook; beyond, new ones are dropped for
    /// the webhook (counted). Default 1024.
    pub webhook_queue: usize,
    /// Retries of a failed POST (1 s, 2 s, 4 s … apart). Default 3.
    pub webhook_retries: u32,
    /// Timeout of one POST, seconds. Default 5.
    pub webhook_timeout_s: f64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            file: "-".into(),
            syslog: false,
            syslog_socket: "/dev/log".into(),
            syslog_facility: "daemon".into(),
            webhook: String::new(),
            webhook_queue: 1024,
            webhook_retries: 3,
            webhook_timeout_s: 5.0,
        }
    }
}

const FACILITIES: [&str; 20] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
];

fn facility_code(name: &str) -> Option<u8> {
    let i = FACILITIES.iter().position(|f| *f == name)?;
    // local0 is facility 16: ntp, security, console, solaris-cron sit between.
    Some(if i >= 12 {
        16 + (i - 12) as u8
    } else {
        i as u8
    })
}

/// A sink that cannot be used: one line naming the `[alerts]` key.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A bad value.
    #[error("alerts.{key} = {value:?}: {why}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// Its value.
        value: String,
        /// What is wrong and what is allowed.
        why: String,
    },
    /// The alerts file (or the syslog socket) cannot be opened.
    #[error("alerts.file = {path:?}: {err}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The OS error: in the message only, not also a `source()` (a
        /// printed chain would say it twice).
        err: std::io::Error,
    },
    /// The alert metrics cannot be registered (a name registered twice).
    #[error("alert metrics: {0}")]
    Metrics(String),
}

impl AlertsConfig {
    /// No sink at all (alerts kept in memory and counted only).
    pub fn none() -> Self {
        Self {
            file: String::new(),
            ..Self::default()
        }
    }

    /// Check every value.
    ///
    /// # Errors
    /// [`SinkError::Invalid`] naming the key.
    pub fn validate(&self) -> Result<(), SinkError> {
        let bad = |key, value: &dyn std::fmt::Display, why: &str| SinkError::Invalid {
            key,
            value: value.to_string(),
            why: why.into(),
        };
        if facility_code(&self.syslog_facility).is_none() {
            return Err(bad(
                "syslog_facility",
                &self.syslog_facility,
                &format!("not a facility; one of {}", FACILITIES.join(", ")),
            ));
        }
        if !self.webhook.is_empty() {
            let lower = self.webhook.to_ascii_lowercase();
            if !lower.starts_with("http://") && !lower.starts_with("https://") {
                return Err(bad(
                    "webhook",
                    &self.webhook,
                    "use an http:// or https:// URL, or \"\" for none",
                ));
            }
            if lower.starts_with("https://") {
                return Err(bad(
                    "webhook",
                    &self.webhook,
                    "https is not built into rampart: point the webhook at a local relay over http (e.g. http://127.0.0.1:PORT/...)",
                ));
            }
            if url::Url::parse(&self.webhook).is_err() {
                return Err(bad("webhook", &self.webhook, "not a valid URL"));
            }
        }
        if !(1..=1_000_000).contains(&self.webhook_queue) {
            return Err(bad(
                "webhook_queue",
                &self.webhook_queue,
                "out of range, allowed 1..=1000000",
            ));
        }
        if self.webhook_retries > 10 {
            return Err(bad(
                "webhook_retries",
                &self.webhook_retries,
                "out of range, allowed 0..=10",
            ));
        }
        if !(self.webhook_timeout_s > 0.0 && self.webhook_timeout_s <= 60.0) {
            return Err(bad(
                "webhook_timeout_s",
                &self.webhook_timeout_s,
                "out of range, allowed (0, 60]",
            ));
        }
        Ok(())
    }
}

/// The JSON-lines file (or stdout).
struct FileSink {
    path: Option<PathBuf>,
    out: Mutex<Box<dyn Write + Send>>,
    reopen: Arc<AtomicBool>,
}

fn open_append(p: &Path) -> Result<std::fs::File, SinkError> {
    let err = |err| SinkError::Open {
        path: p.to_path_buf(),
        err,
    };
    if let Some(d) = p.parent() {
        if !d.as_os_str().is_empty() {
            std::fs::create_dir_all(d).map_err(err)?;
        }
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map_err(err)
}

impl FileSink {
    fn open(target: &str) -> Result<Self, SinkError> {
        let reopen = Arc::new(AtomicBool::new(false));
        if target == "-" {
            return Ok(Self {
                path: None,
                out: Mutex::new(Box::new(std::io::stdout())),
                reopen,
            });
        }
        let path = PathBuf::from(target);
        let f = open_append(&path)?;
        // logrotate moves the file and sends SIGHUP: the next alert goes
        // to a new file at the configured path.
        if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGHUP, reopen.clone()) {
            tracing::warn!("alerts.file: SIGHUP will not reopen {target}: {e}");
        }
        Ok(Self {
            path: Some(path),
            out: Mutex::new(Box::new(f)),
            reopen,
        })
    }

    fn write(&self, line: &str) -> std::io::Result<()> {
        let mut o = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = &self.path {
            if self.reopen.swap(false, Ordering::Relaxed) {
                match open_append(p) {
                    Ok(f) => *o = Box::new(f),
                    Err(e) => tracing::warn!("reopening the alerts file: {e}"),
                }
            }
        }
        o.write_all(line.as_bytes())?;
        o.write_all(b"\n")?;
        o.flush()
    }
}

/// RFC 5424 on the local syslog socket.
struct SyslogSink {
    socket: PathBuf,
    facility: u8,
    sock: UnixDatagram,
    host: String,
    pid: u32,
}

/// Syslog severity of an alert: a high-severity rule is `err`, medium
/// `warning`, low `notice`; events without a rule are `info`.
fn syslog_severity(a: &Alert) -> u8 {
    match a.alert.as_ref().map(|x| x.severity) {
        Some(1) => 3,
        Some(2) => 4,
        Some(_) => 5,
        None => 6,
    }
}

impl SyslogSink {
    fn open(cfg: &AlertsConfig) -> Result<Self, SinkError> {
        let sock = UnixDatagram::unbound().map_err(|err| SinkError::Open {
            path: cfg.syslog_socket.clone(),
            err,
        })?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "-".into());
        Ok(Self {
            socket: cfg.syslog_socket.clone(),
            facility: facility_code(&cfg.syslog_facility).unwrap_or(3),
            sock,
            host,
            pid: std::process::id(),
        })
    }

    /// `<PRI>1 TIMESTAMP HOST rampart PID MSGID - JSON` (RFC 5424; MSGID is
    /// the application, the message the alert's JSON).
    fn message(&self, line: &str, a: &Alert) -> String {
        format!(
            "<{}>1 {} {} rampart {} {} - {line}",
            u16::from(self.facility) * 8 + u16::from(syslog_severity(a)),
            a.timestamp,
            self.host,
            self.pid,
            a.rampart.app.name(),
        )
    }

    fn write(&self, line: &str, a: &Alert) -> std::io::Result<()> {
        self.sock
            .send_to(self.message(line, a).as_bytes(), &self.socket)
            .map(|_| ())
    }
}

/// POSTs from a thread of its own.
struct WebhookSink {
    tx: SyncSender<String>,
    dropped: IntCounter,
}

impl WebhookSink {
    fn open(
        cfg: &AlertsConfig,
        errors: IntCounter,
        dropped: IntCounter,
    ) -> Result<Self, SinkError> {
        let (tx, rx) = sync_channel::<String>(cfg.webhook_queue);
        let url = cfg.webhook.clone();
        let retries = cfg.webhook_retries;
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs_f64(cfg.webhook_timeout_s))
            .build();
        std::thread::Builder::new()
            .name("rampart-webhook".into())
            .spawn(move || {
                // Ends when every sender is gone (the Alerts were dropped).
                while let Ok(body) = rx.recv() {
                    let mut wait = Duration::from_secs(1);
                    for attempt in 0..=retries {
                        match agent.post(&url).set("Content-Type", "application/json").send_string(&body) {
                            Ok(_) => break,
                            Err(e) if attempt == retries => {
                                errors.inc();
                                tracing::warn!("alerts.webhook {url}: {e} (alert dropped after {retries} retries)");
                            }
                            Err(_) => {
                                std::thread::sleep(wait);
                                wait *= 2;
                            }
                        }
                    }
                }
            })
            .map_err(|err| SinkError::Open {
                path: PathBuf::from("rampart-webhook thread"),
                err,
            })?;
        Ok(Self { tx, dropped })
    }

    fn write(&self, line: &str) {
        match self.tx.try_send(line.to_string()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.dropped.inc(),
            Err(TrySendError::Disconnected(_)) => self.dropped.inc(),
        }
    }
}

/// The configured sinks and their error counters.
pub(super) struct Sinks {
    file: Option<FileSink>,
    syslog: Option<SyslogSink>,
    webhook: Option<WebhookSink>,
    errors: Option<IntCounterVec>,
    warned: Mutex<[bool; 2]>,
}

impl Sinks {
    pub(super) fn none() -> Self {
        Self {
            file: None,
            syslog: None,
            webhook: None,
            errors: None,
            warned: Mutex::new([false; 2]),
        }
    }

    pub(super) fn open(cfg: &AlertsConfig, metrics: &Metrics) -> Result<Self, SinkError> {
        cfg.validate()?;
        let m = |e: prometheus::Error| SinkError::Metrics(e.to_string());
        let errors = IntCounterVec::new(
            Opts::new(
                "rampart_alert_sink_errors_total",
                "Alerts a sink failed to take (file or syslog write error, webhook POST failed after its retries)",
            ),
            &["sink"],
        )
        .map_err(m)?;
        let dropped = IntCounter::new(
            "rampart_alert_webhook_dropped_total",
            "Alerts dropped for the webhook because its queue was full",
        )
        .map_err(m)?;
        for s in ["file", "syslog", "webhook"] {
            errors.with_label_values(&[s]);
        }
        metrics
            .register(errors.clone())
            .map_err(|e| SinkError::Metrics(e.to_string()))?;
        metrics
            .register(dropped.clone())
            .map_err(|e| SinkError::Metrics(e.to_string()))?;
        Ok(Self {
            file: if cfg.file.is_empty() {
                None
            } else {
                Some(FileSink::open(&cfg.file)?)
            },
            syslog: if cfg.syslog {
                Some(SyslogSink::open(cfg)?)
            } else {
                None
            },
            webhook: if cfg.webhook.is_empty() {
                None
            } else {
                Some(WebhookSink::open(
                    cfg,
                    errors.with_label_values(&["webhook"]),
                    dropped,
                )?)
            },
            errors: Some(errors),
            warned: Mutex::new([false; 2]),
        })
    }

    pub(super) fn names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.file.is_some() {
            v.push("file");
        }
        if self.syslog.is_some() {
            v.push("syslog");
        }
        if self.webhook.is_some() {
            v.push("webhook");
        }
        v
    }

    /// A failed local write: counted, and logged the first time only (an
    /// alert storm must not become a log storm).
    fn failed(&self, i: usize, sink: &'static str, e: &std::io::Error) {
        if let Some(c) = &self.errors {
            c.with_label_values(&[sink]).inc();
        }
        let mut w = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if !w[i] {
            w[i] = true;
            tracing::warn!("alerts {sink}: {e} (further failures are only counted in rampart_alert_sink_errors_total)");
        }
    }

    pub(super) fn write(&self, line: &str, a: &Alert) {
        if let Some(f) = &self.file {
            if let Err(e) = f.write(line) {
                self.failed(0, "file", &e);
            }
        }
        if let Some(s) = &self.syslog {
            if let Err(e) = s.write(line, a) {
                self.failed(1, "syslog", &e);
            }
        }
        if let Some(w) = &self.webhook {
            w.write(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Action, Alerts, App, EventType};
    use super::*;
    use std::io::{BufRead, BufReader, Read};
    use std::net::TcpListener;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rampart-alerts-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn block() -> Alert {
        Alert::rule(App::Ddos, "block", "syn_flood", Action::Blocked)
            .with_src("10.10.0.101".parse().unwrap())
    }

    #[test]
    fn bad_values_name_the_key() {
        let c = |f: &dyn Fn(&mut AlertsConfig)| {
            let mut c = AlertsConfig::default();
            f(&mut c);
            c.validate()
                .map(|_| String::new())
                .unwrap_or_else(|e| e.to_string())
        };
        assert_eq!(c(&|_| {}), "");
        assert!(c(&|c| c.syslog_facility = "local9".into())
            .starts_with("alerts.syslog_facility = \"local9\": not a facility"));
        assert!(c(&|c| c.webhook = "ftp://x".into()).contains("alerts.webhook"));
        assert!(c(&|c| c.webhook = "https://x.example/hook".into()).contains("local relay"));
        assert!(c(&|c| c.webhook_queue = 0).contains("alerts.webhook_queue"));
        assert!(c(&|c| c.webhook_timeout_s = 0.0).contains("alerts.webhook_timeout_s"));
        assert_eq!(facility_code("local0"), Some(16));
        assert_eq!(facility_code("local7"), Some(23));
        assert_eq!(facility_code("daemon"), Some(3));
    }

    #[test]
    fn file_gets_json_lines_and_is_reopened_on_sighup() {
        let d = tmp("file");
        let p = d.join("sub/alerts.jsonl");
        let cfg = AlertsConfig {
            file: p.display().to_string(),
            ..AlertsConfig::default()
        };
        let al = Alerts::open(&cfg, &[App::Ddos], &Metrics::new()).unwrap();
        al.emit(block());
        al.emit(Alert::new(App::Ddos, EventType::Stats, "resume"));
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<Alert> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].rampart.event, "block");
        // logrotate: move the file away, signal; the next alert starts a new file.
        std::fs::rename(&p, d.join("rotated")).unwrap();
        // The sink registered a SIGHUP handler, so this does not end the process.
        signal_hook::low_level::raise(signal_hook::consts::SIGHUP).unwrap();
        al.emit(block());
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 1);
        assert_eq!(
            std::fs::read_to_string(d.join("rotated"))
                .unwrap()
                .lines()
                .count(),
            2
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn syslog_gets_rfc5424_messages() {
        let d = tmp("syslog");
        let sock = d.join("log");
        let rx = UnixDatagram::bind(&sock).unwrap();
        let cfg = AlertsConfig {
            file: String::new(),
            syslog: true,
            syslog_socket: sock.clone(),
            syslog_facility: "local3".into(),
            ..AlertsConfig::default()
        };
        let m = Metrics::new();
        let al = Alerts::open(&cfg, &[App::Ddos], &m).unwrap();
        al.emit(block());
        let mut buf = vec![0u8; 65536];
        let n = rx.recv(&mut buf).unwrap();
        let msg = std::str::from_utf8(&buf[..n]).unwrap();
        // local3 (19) * 8 + err (3): a severity-1 rule
        assert!(msg.starts_with("<155>1 20"), "{msg}");
        let parts: Vec<&str> = msg.splitn(8, ' ').collect();
        assert_eq!(parts[3], "rampart", "{msg}");
        assert_eq!(parts[4], std::process::id().to_string());
        assert_eq!(parts[5], "ddos");
        assert_eq!(parts[6], "-");
        let a: Alert = serde_json::from_str(parts[7]).unwrap();
        assert_eq!(a.rampart.event, "block");
        // The socket going away is counted, not fatal.
        drop(rx);
        std::fs::remove_file(&sock).unwrap();
        al.emit(block());
        assert!(
            m.render()
                .contains("rampart_alert_sink_errors_total{sink=\"syslog\"} 1"),
            "{}",
            m.render()
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A tiny HTTP server answering `codes` in turn; returns the bodies it got.
    fn server(codes: Vec<u16>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", l.local_addr().unwrap());
        let h = std::thread::spawn(move || {
            let mut bodies = Vec::new();
            for code in codes {
                let (s, _) = l.accept().unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut len = 0;
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                assert!(line.starts_with("POST /hook "), "{line}");
                loop {
                    line.clear();
                    r.read_line(&mut line).unwrap();
                    if line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                bodies.push(String::from_utf8(body).unwrap());
                let mut s = s;
                write!(
                    s,
                    "HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
            }
            bodies
        });
        (url, h)
    }

    #[test]
    fn webhook_posts_each_alert_and_retries_failures() {
        // First POST fails with 503, the retry and the second alert succeed.
        let (url, h) = server(vec![503, 200, 200]);
        let cfg = AlertsConfig {
            file: String::new(),
            webhook: url,
            webhook_retries: 2,
            ..AlertsConfig::default()
        };
        let m = Metrics::new();
        let al = Alerts::open(&cfg, &[App::Ddos], &m).unwrap();
        al.emit(block());
        al.emit(Alert::new(App::Ddos, EventType::Stats, "resume"));
        let bodies = h.join().unwrap();
        assert_eq!(bodies.len(), 3);
        assert_eq!(bodies[0], bodies[1], "the failed POST is retried");
        let a: Alert = serde_json::from_str(&bodies[2]).unwrap();
        assert_eq!(a.rampart.event, "resume");
        assert!(m
            .render()
            .contains("rampart_alert_sink_errors_total{sink=\"webhook\"} 0"));
    }

    #[test]
    fn a_webhook_that_never_answers_never_blocks_emit() {
        // Accepts connections (the kernel's backlog) but never reads.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let cfg = AlertsConfig {
            file: String::new(),
            webhook: format!("http://{}/hook", l.local_addr().unwrap()),
            webhook_queue: 4,
            webhook_timeout_s: 30.0,
            ..AlertsConfig::default()
        };
        let m = Metrics::new();
        let al = Alerts::open(&cfg, &[App::Ddos], &m).unwrap();
        // 100 alerts return at once; at most queue + 1 (in flight) wait, the rest are dropped.
        for _ in 0..100 {
            al.emit(block());
        }
        let text = m.render();
        let dropped: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("rampart_alert_webhook_dropped_total "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((95..=96).contains(&dropped), "{dropped} dropped:\n{text}");
        assert_eq!(
            al.recent(1000).len(),
            100,
            "every alert is still kept and counted"
        );
    }
}
