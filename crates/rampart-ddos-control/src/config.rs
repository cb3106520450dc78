//! Configuration of the offload planner: the `[offload]` section of the
//! daemon's TOML file (detection's `[detect]` is [`crate::detection::DetectionConfig`]).
//!
//! `serde(default, deny_unknown_fields)`: a missing key takes the default
//! written in its doc comment (the `Default` impl), an unknown key is an
//! error. [`PlannerConfig::validate`] checks ranges and returns a
//! [`ConfigError`] naming the key and the allowed range.

use serde::{Deserialize, Serialize};

use crate::error::{check_f64, check_f64_open, check_u64, ConfigError};

/// `[offload]`: Algorithm 1 of Miano et al., IEEE Access 2019 (see [`crate::Planner`]).
///
/// Swap threshold, with R the total rate of all blocked sources and C =
/// `host_capacity_pps`:
///
/// θ = threshold_max − (threshold_max − threshold_min) · min(1, R / C)
///
/// so an idle host swaps only for a much heavier candidate (θ =
/// threshold_max) and a host at or beyond what it can drop swaps for any
/// candidate `threshold_min` times heavier than the weakest offloaded
/// source.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerConfig {
    /// K: rules in the hardware tier. Default 512; 0..=16777216 (0: no
    /// hardware tier, plans are empty).
    pub capacity: usize,
    /// Rule changes per interval (an add and a remove count one each).
    /// Default 64; 1..=16777216.
    pub max_updates: usize,
    /// Most the host tier can drop (pps). Default 5e6; 0 < x <= 1e12.
    pub host_capacity_pps: f64,
    /// Threshold when the host is idle. Default 2; 1 <= x <= 1000 and
    /// >= threshold_min.
    pub threshold_max: f64,
    /// Threshold when the attack reaches host_capacity_pps. Default 1.1;
    /// 1 <= x <= threshold_max (below 1 a weaker source would replace a
    /// heavier one).
    pub threshold_min: f64,
    /// Sources below this rate never get a hardware rule (pps). Default 1;
    /// 0 <= x <= 1e12.
    pub min_pps: f64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            capacity: 512,
            max_updates: 64,
            host_capacity_pps: 5e6,
            threshold_max: 2.0,
            threshold_min: 1.1,
            min_pps: 1.0,
        }
    }
}

impl PlannerConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_u64("offload.capacity", self.capacity as u64, 0, 1 << 24)?;
        check_u64("offload.max_updates", self.max_updates as u64, 1, 1 << 24)?;
        check_f64_open(
            "offload.host_capacity_pps",
            self.host_capacity_pps,
            0.0,
            1e12,
        )?;
        check_f64("offload.threshold_max", self.threshold_max, 1.0, 1000.0)?;
        check_f64("offload.threshold_min", self.threshold_min, 1.0, 1000.0)?;
        if self.threshold_min > self.threshold_max {
            return Err(ConfigError::Inconsistent {
                key: "offload.threshold_min".into(),
                reason: format!(
                    "{} is above offload.threshold_max = {}: allowed 1 <= threshold_min <= threshold_max",
                    self.threshold_min, self.threshold_max
                ),
            });
        }
        check_f64("offload.min_pps", self.min_pps, 0.0, 1e12)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon's section, as the runtime reads it.
    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        offload: PlannerConfig,
    }

    fn parse(s: &str) -> Result<File, String> {
        toml::from_str::<File>(s).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_valid_and_an_empty_file_gives_them() {
        let f = parse("").unwrap();
        assert_eq!(f.offload, PlannerConfig::default());
        f.offload.validate().unwrap();
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let f = File {
            offload: PlannerConfig::default(),
        };
        let text = toml::to_string(&f).unwrap();
        assert_eq!(parse(&text).unwrap(), f, "{text}");
    }

    #[test]
    fn partial_sections_keep_the_other_defaults() {
        let f = parse("[offload]\ncapacity = 1024\n").unwrap();
        assert_eq!(f.offload.capacity, 1024);
        assert_eq!(f.offload.max_updates, 64);
        f.offload.validate().unwrap();
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = parse("[offload]\ncapcity = 5\n").unwrap_err();
        assert!(e.contains("unknown field `capcity`"), "{e}");
    }

    #[test]
    fn bad_values_name_the_key_and_the_allowed_range() {
        let err = |f: fn(&mut PlannerConfig)| {
            let mut c = PlannerConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert_eq!(
            err(|c| c.host_capacity_pps = 0.0),
            "offload.host_capacity_pps = 0: out of range, allowed 0 < x <= 1000000000000"
        );
        assert_eq!(
            err(|c| c.max_updates = 0),
            "offload.max_updates = 0: out of range, allowed 1 <= x <= 16777216"
        );
        assert!(err(|c| c.threshold_min = 3.0)
            .starts_with("offload.threshold_min: 3 is above offload.threshold_max = 2"));
    }

    #[test]
    fn toml_type_errors_name_the_key() {
        let e = parse("[offload]\ncapacity = -3\n").unwrap_err();
        assert!(e.contains("capacity"), "{e}");
    }
}
