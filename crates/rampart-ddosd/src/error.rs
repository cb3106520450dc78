//! Errors of the control plane runtime (one enum; the CLI adds context).

use std::path::PathBuf;

/// Everything that can go wrong in a tier backend or the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the ddos data plane (filter, features, prefixes).
    #[error(transparent)]
    Ddos(#[from] rampart_ddos::Error),
    /// From the data-plane toolkit (links, netns).
    #[error(transparent)]
    Dataplane(#[from] rampart_dataplane::Error),
    /// A tier this host cannot provide: what is missing and what to use instead.
    #[error("tier {tier} refused on {where_}: {reason}")]
    Unsupported {
        /// Backend name.
        tier: &'static str,
        /// Interface / namespace.
        where_: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// The tier's table is full.
    #[error("tier {tier} is full ({capacity} rules): remove rules first")]
    Full {
        /// Backend name.
        tier: &'static str,
        /// Its capacity.
        capacity: usize,
    },
    /// A prefix this tier cannot hold (e.g. a CIDR prefix in an exact-match table).
    #[error("tier {tier} cannot hold {prefix}: {reason}")]
    Refused {
        /// Backend name.
        tier: &'static str,
        /// The prefix.
        prefix: String,
        /// Why.
        reason: String,
    },
    /// Bad configuration: which key, what is wrong, what is allowed.
    #[error("config: {0}")]
    Config(String),
    /// A system call or command failed.
    #[error("{context}: {err}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error: in the message once, deliberately not a `source()`
        /// (a printed chain would repeat it).
        err: std::io::Error,
    },
    /// A command (iptables, ipset, tc) failed.
    #[error("{0}")]
    Command(String),
    /// Saved daemon state that cannot be read.
    #[error("daemon state {}: {reason}", path.display())]
    State {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            err: source,
        }
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;
