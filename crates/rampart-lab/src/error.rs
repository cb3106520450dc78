//! Lab errors.

/// What can go wrong in the lab.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the data-plane toolkit (BPF, netns, pins, features).
    #[error(transparent)]
    Dataplane(#[from] rampart_dataplane::Error),
    /// The lab (or part of it) is not up.
    #[error("lab {prefix:?} is not up ({detail}): run `rampart lab up{}` first", if prefix == crate::topology::DEFAULT_PREFIX { String::new() } else { format!(" --prefix {prefix}") })]
    NotUp {
        /// Lab prefix.
        prefix: String,
        /// What is missing.
        detail: String,
    },
    /// A generator or topology setting is out of range.
    #[error("{0}")]
    InvalidSpec(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Dataplane(rampart_dataplane::Error::Io {
            context: context.into(),
            err: source,
        })
    }

    pub(crate) fn bpf(context: impl Into<String>, source: libbpf_rs::Error) -> Self {
        Error::Dataplane(rampart_dataplane::Error::Bpf {
            context: context.into(),
            err: source,
        })
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
