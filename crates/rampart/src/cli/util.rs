//! Small helpers shared by subcommands (the benchmarks' own output helpers).

pub use rampart_bench::out::si;

/// Print a value as one line of JSON on stdout.
pub fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    Ok(rampart_bench::out::print_json(v)?)
}

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Write one line to stdout. When the reader has gone (`rampart … | head`)
/// nothing is printed from then on and [`stdout_closed`] turns true, so a
/// long-running command can stop instead of working for nobody.
pub fn out_line(s: &str) {
    use std::io::Write as _;
    if stdout_closed() {
        return;
    }
    let mut o = std::io::stdout().lock();
    if let Err(e) = writeln!(o, "{s}").and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Write a block of text (lines with their newlines) to stdout, like
/// [`out_line`]: nothing once the reader has gone.
pub fn out_block(s: &str) {
    use std::io::Write as _;
    if stdout_closed() {
        return;
    }
    let mut o = std::io::stdout().lock();
    if let Err(e) = write!(o, "{s}").and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Has stdout's reader gone away?
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Is this panic `println!` finding stdout's reader gone? (Rust ignores
/// SIGPIPE, so a closed pipe makes `println!` panic; for a CLI that is the
/// normal end of `rampart … | head`, not a crash.)
pub fn is_broken_pipe_panic(payload: &(dyn std::any::Any + Send)) -> bool {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    msg.contains("failed printing to stdout") && msg.contains("Broken pipe")
}

/// A mistake in the command line (an argument out of range, options that
/// cannot go together): printed like every error, but the process exits 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] as an `anyhow::Error`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// `return Err(usage(format!(...)))`: the usage-error `bail!`.
macro_rules! usage_bail {
    ($($arg:tt)*) => {
        return Err($crate::cli::util::usage(format!($($arg)*)))
    };
}
pub(crate) use usage_bail;
