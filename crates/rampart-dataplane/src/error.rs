//! Errors of the data-plane toolkit.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong below the applications.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process lacks the privileges BPF and netns operations need.
    #[error(
        "{what} needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN): run it as root or with sudo"
    )]
    NotRoot {
        /// What was attempted.
        what: String,
    },
    /// The process's effective capability set lacks what loading and
    /// attaching XDP programs needs (root in name only is not enough).
    #[error(
        "{what} needs CAP_BPF and CAP_NET_ADMIN; it lacks {missing} in its effective capabilities (euid {euid}): run it as root, or grant them (the systemd unit's AmbientCapabilities)"
    )]
    MissingCapability {
        /// What was attempted.
        what: String,
        /// The capabilities missing, `CAP_BPF and CAP_NET_ADMIN`.
        missing: String,
        /// The effective user id.
        euid: u32,
    },
    /// A kernel feature rampart relies on is missing.
    #[error("kernel feature missing: {feature} ({detail})")]
    MissingFeature {
        /// Short name of the feature, e.g. "XDP live frames (BPF_F_TEST_XDP_LIVE_FRAMES)".
        feature: &'static str,
        /// What the probe saw.
        detail: String,
    },
    /// A named network namespace does not exist.
    #[error("network namespace {0:?} does not exist (is the lab up? try `rampart lab up`)")]
    NoSuchNetns(String),
    /// A network interface does not exist in the namespace it was looked up in.
    #[error("interface {iface:?} not found{}", ns.as_ref().map(|n| format!(" in network namespace {n:?}")).unwrap_or_default())]
    NoSuchInterface {
        /// Interface name.
        iface: String,
        /// Namespace, `None` for the caller's own.
        ns: Option<String>,
    },
    /// An external command (iproute2, ethtool, ...) failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A libbpf operation failed.
    ///
    /// The wrapped error is part of the message (its whole chain, once)
    /// and deliberately not a `source()`: printing a chain would repeat it.
    #[error("{context}: {err:#}")]
    Bpf {
        /// What was being done.
        context: String,
        /// libbpf's error.
        err: libbpf_rs::Error,
    },
    /// A system call or file operation failed (the OS error in the message
    /// once, not also as a `source()`).
    #[error("{context}: {err}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        err: io::Error,
    },
    /// A pinned object is missing or of the wrong kind.
    #[error("pinned object {path}: {reason}")]
    Pin {
        /// Pin path.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// Invalid input from a caller.
    #[error("{0}")]
    Invalid(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach context to libbpf errors.
pub trait BpfContext<T> {
    /// Wrap the error with what was being done.
    fn bpf_context(self, ctx: impl FnOnce() -> String) -> Result<T>;
}

impl<T> BpfContext<T> for std::result::Result<T, libbpf_rs::Error> {
    fn bpf_context(self, ctx: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|err| Error::Bpf {
            context: ctx(),
            err,
        })
    }
}

/// Attach context to I/O errors.
pub trait IoContext<T> {
    /// Wrap the error with what was being done.
    fn io_context(self, ctx: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::result::Result<T, io::Error> {
    fn io_context(self, ctx: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|err| Error::Io {
            context: ctx(),
            err,
        })
    }
}

impl<T> IoContext<T> for std::result::Result<T, nix::Error> {
    fn io_context(self, ctx: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Io {
            context: ctx(),
            err: io::Error::from(e),
        })
    }
}
