//! Errors of the tenant offload.

/// Everything that can go wrong in `rampart tenant`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad configuration or request input; the message says what and how to fix it.
    #[error("{0}")]
    Invalid(String),
    /// A tenant program was refused before it reached the kernel (confinement rule).
    #[error("program refused: {reason}")]
    Refused {
        /// Which rule, in words the tenant can act on.
        reason: String,
    },
    /// The C source did not compile.
    /// (One line: the first error clang reports; the full diagnostics
    /// travel in `stderr`, which the API returns as its own field.)
    #[error("compilation failed: {}", first_error(stderr))]
    Compile {
        /// clang's diagnostics.
        stderr: String,
    },
    /// The kernel's verifier rejected the program.
    #[error("the kernel verifier rejected the program: {summary}")]
    Verifier {
        /// The last line(s) of the log that say why.
        summary: String,
        /// The verifier log (tail if very long).
        log: String,
    },
    /// Unknown tenant, map or key.
    #[error("{0}")]
    NotFound(String),
    /// A selector is already owned by another tenant.
    #[error("{0}")]
    Conflict(String),
    /// Data-plane failure (load, attach, map access).
    #[error(transparent)]
    Dataplane(#[from] rampart_dataplane::Error),
    /// The host agent's thread has stopped.
    #[error("the host agent has stopped")]
    Stopped(#[from] rampart_service::Stopped),
    /// I/O failure with context.
    #[error("{context}: {err}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error: in the message once, deliberately not a `source()`
        /// (a printed chain would repeat it).
        err: std::io::Error,
    },
}

/// The first line of clang's output that reports an error (else its first line).
fn first_error(stderr: &str) -> &str {
    let mut lines = stderr.lines().map(str::trim).filter(|l| !l.is_empty());
    stderr
        .lines()
        .map(str::trim)
        .find(|l| l.contains("error:"))
        .or_else(|| lines.next())
        .unwrap_or("no diagnostics")
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            err: source,
        }
    }

    pub(crate) fn bpf(context: impl Into<String>, source: libbpf_rs::Error) -> Self {
        Error::Dataplane(rampart_dataplane::Error::Bpf {
            context: context.into(),
            err: source,
        })
    }
}
