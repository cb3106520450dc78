//! Human and JSON output of the benchmark commands.

use crate::error::{Error, Result};

/// Print a value as one line of JSON on stdout.
///
/// # Errors
/// A value serde cannot serialize.
pub fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    let line = serde_json::to_string(v).map_err(|e| Error::Failed(format!("JSON output: {e}")))?;
    println!("{line}");
    Ok(())
}

/// `12345678` → `"12.35 M"`, for human output.
pub fn si(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.2} k", x / 1e3)
    } else {
        format!("{x:.0} ")
    }
}
