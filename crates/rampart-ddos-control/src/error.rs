//! Configuration errors: one line naming the key, the value and what is
//! allowed; prefix errors: what the user wrote and what to write instead.

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A number outside its range.
    #[error("{key} = {value}: out of range, allowed {allowed}")]
    OutOfRange {
        /// Full key, e.g. `detect.rate.multiplier`.
        key: String,
        /// The value given.
        value: String,
        /// The allowed range, e.g. `1 < x <= 1000`.
        allowed: String,
    },
    /// A whitelist entry that is not a prefix.
    #[error("detect.whitelist[{index}] = {value:?}: {reason}")]
    BadWhitelist {
        /// Position in the list (0-based).
        index: usize,
        /// The entry.
        value: String,
        /// Why, and what to write instead.
        reason: String,
    },
    /// Two keys that contradict each other.
    #[error("{key}: {reason}")]
    Inconsistent {
        /// The key to change.
        key: String,
        /// Why, and how to fix it.
        reason: String,
    },
}

/// Check `lo <= v <= hi` (inclusive) for a finite `v`.
pub(crate) fn check_f64(key: &str, v: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            key: key.into(),
            value: format!("{v}"),
            allowed: format!("{lo} <= x <= {hi}"),
        })
    }
}

/// Check `lo < v <= hi` for a finite `v`.
pub(crate) fn check_f64_open(key: &str, v: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v > lo && v <= hi {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            key: key.into(),
            value: format!("{v}"),
            allowed: format!("{lo} < x <= {hi}"),
        })
    }
}

/// Check `lo <= v <= hi` for an integer.
pub(crate) fn check_u64(key: &str, v: u64, lo: u64, hi: u64) -> Result<(), ConfigError> {
    if v >= lo && v <= hi {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            key: key.into(),
            value: format!("{v}"),
            allowed: format!("{lo} <= x <= {hi}"),
        })
    }
}

/// A prefix (or list of prefixes) that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PrefixError {
    /// A prefix that cannot be parsed or is refused.
    #[error("bad prefix {input:?}{}: {reason}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    BadPrefix {
        /// What the user wrote.
        input: String,
        /// Line of the file it came from, if any.
        line: Option<usize>,
        /// Why, and what to write instead.
        reason: String,
    },
    /// The same prefix twice in one request.
    #[error("duplicate prefix {prefix} in the request{}: give each prefix once", .where_.as_ref().map(|w| format!(" ({w})")).unwrap_or_default())]
    Duplicate {
        /// The normalised prefix.
        prefix: String,
        /// Where the two occurrences are (lines), if known.
        where_: Option<String>,
    },
}
