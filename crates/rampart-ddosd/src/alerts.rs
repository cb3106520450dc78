//! JSON-lines alerts: one object per line, appended to a file or stdout.
//!
//! `{"ts": 1732312345.123, "event": "block", "prefix": "172.16.0.9/32",
//! "detector": "syn_flood", "reason": "...", "pps": 51234.0, "tier": "xdp"}`
//! — `event` is `attack_start`, `attack_end`, `block`, `unblock`,
//! `hw_add`, `hw_remove` or `resume`.

use std::io::Write;
use std::sync::Mutex;

use serde::Serialize;

use crate::error::{Error, Result};

/// One alert.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Alert {
    /// Unix time (seconds).
    pub ts: f64,
    /// What happened.
    pub event: &'static str,
    /// The source, for block/unblock/hw events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Detector (block), `operator`, or `rate_monitor` (unblock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detector: Option<String>,
    /// Why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Rate at the time (packets/s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pps: Option<f64>,
    /// Tier concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

/// Unix time now, in seconds.
pub fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Where alerts go.
pub struct Alerts {
    out: Mutex<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Alerts")
    }
}

impl Alerts {
    /// `-` for stdout, else a file opened for appending (created if missing).
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(target: &str) -> Result<Self> {
        let out: Box<dyn Write + Send> = if target == "-" {
            Box::new(std::io::stdout())
        } else {
            if let Some(d) = std::path::Path::new(target).parent() {
                if !d.as_os_str().is_empty() {
                    std::fs::create_dir_all(d)
                        .map_err(|e| Error::io(format!("creating {}", d.display()), e))?;
                }
            }
            Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(target)
                    .map_err(|e| Error::io(format!("opening alerts file {target}"), e))?,
            )
        };
        Ok(Self {
            out: Mutex::new(out),
        })
    }

    /// Write one alert (time stamped now if `ts` is 0).
    pub fn emit(&self, mut a: Alert) {
        if a.ts == 0.0 {
            a.ts = now_unix();
        }
        if let Ok(line) = serde_json::to_string(&a) {
            if let Ok(mut o) = self.out.lock() {
                let _ = writeln!(o, "{line}");
                let _ = o.flush();
            }
        }
    }
}
