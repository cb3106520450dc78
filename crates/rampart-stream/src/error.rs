//! Errors of rampart-stream (the engine has its own, [`crate::engine::Error`]).

/// What went wrong, with what the user needs to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building or running the operator graph.
    #[error(transparent)]
    Engine(#[from] crate::engine::Error),
    /// A capture file that cannot be used.
    #[error("{path}: {msg}")]
    Capture {
        /// File.
        path: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A source or app setting is wrong.
    #[error("{0}")]
    Invalid(String),
    /// A system call failed.
    #[error("{context}: {err}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error: in the message once, deliberately not a `source()`
        /// (a printed chain would repeat it).
        err: std::io::Error,
    },
    /// Loading, attaching or updating BPF objects.
    #[error(transparent)]
    Dataplane(#[from] rampart_dataplane::Error),
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |err| Error::Io { context, err }
}
