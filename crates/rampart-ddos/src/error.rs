//! Errors of the ddos data plane. Each message says what is wrong and how
//! to fix it, on one line.

use std::path::PathBuf;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the data-plane toolkit (BPF, netns, pins, features).
    #[error(transparent)]
    Dataplane(#[from] rampart_dataplane::Error),
    /// A bad prefix, or a duplicate in a list.
    #[error(transparent)]
    Prefix(#[from] rampart_ddos_control::PrefixError),
    /// The same prefix twice in one update.
    #[error("duplicate prefix {prefix} in the request{}: give each prefix once", .where_.as_ref().map(|w| format!(" ({w})")).unwrap_or_default())]
    Duplicate {
        /// The normalised prefix.
        prefix: String,
        /// Where the two occurrences are, if known.
        where_: Option<String>,
    },
    /// A prefix to block is blocked already.
    #[error("{prefix} is already blocked: unblock it first, or use --replace to make the list exactly what you give")]
    AlreadyBlocked {
        /// The prefix.
        prefix: String,
    },
    /// A prefix to unblock is not blocked.
    #[error("{prefix} is not blocked (see `rampart ddos list`)")]
    NotBlocked {
        /// The prefix.
        prefix: String,
    },
    /// The update would exceed a table's capacity.
    #[error("{kind} table full: {have} entries + {adding} new > capacity {cap}; nothing was changed (re-attach with a larger {flag})")]
    TableFull {
        /// Which table.
        kind: &'static str,
        /// Entries in it now (after the update's removals).
        have: usize,
        /// Entries the update adds.
        adding: usize,
        /// Its capacity.
        cap: usize,
        /// The attach option that sets it.
        flag: &'static str,
    },
    /// The policing table holds as many sources as it can.
    #[error("policing table full: {cap} sources are policed already; nothing was changed (unpolice some, or block the heaviest, first)")]
    PoliceFull {
        /// Its capacity.
        cap: usize,
    },
    /// No filter is attached where the user pointed.
    #[error("no rampart ddos filter at {where_} (pins {}): attach one with `rampart ddos attach --iface IF [--netns NS]`", path.display())]
    NotAttached {
        /// Interface description.
        where_: String,
        /// Pin directory looked at.
        path: PathBuf,
    },
    /// A filter is attached already.
    #[error("a rampart ddos filter is already attached at {where_} (pins {}): detach it first with `rampart ddos detach`", path.display())]
    AlreadyAttached {
        /// Interface description.
        where_: String,
        /// Pin directory.
        path: PathBuf,
    },
    /// Several filters exist and the command did not say which.
    #[error(
        "several rampart ddos filters are attached ({0}): choose one with --iface IF [--netns NS]"
    )]
    Ambiguous(String),
    /// The pinned state is not what this version expects.
    #[error("pinned ddos state at {} is unusable ({reason}): detach and attach again", path.display())]
    BadState {
        /// Pin directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Invalid(String),
    /// An I/O error with context.
    #[error("{context}: {err}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error: in the message once, deliberately not a `source()`
        /// (a printed chain would repeat it).
        err: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            err: source,
        }
    }

    pub(crate) fn errno(context: impl Into<String>, rc: i32) -> Self {
        Error::Io {
            context: context.into(),
            err: std::io::Error::from_raw_os_error(rc.abs()),
        }
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
