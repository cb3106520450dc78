//! What the CLI tests share: running the `rampart` binary and judging its
//! one-line errors.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The binary under test, not yet run.
pub fn cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rampart"))
}

/// Run `rampart ARGS` and wait for it.
pub fn rampart(args: &[&str]) -> Output {
    cmd().args(args).output().expect("run rampart")
}

/// A failure with exactly one non-empty stderr line, starting with
/// "error:" and containing `needle`. Returns that line.
pub fn one_error_line(o: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one error line, got: {err:?}");
    assert!(lines[0].starts_with("error:"), "{err:?}");
    assert!(
        lines[0].contains(needle),
        "{err:?} should mention {needle:?}"
    );
    assert_ne!(o.status.code(), Some(0), "{err:?}: exit code 0");
    lines[0].to_string()
}
