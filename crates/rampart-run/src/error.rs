//! Errors of `rampart run` (one enum; each application's own errors pass through).

/// What went wrong, with what the user needs to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config that cannot be used: one line naming the key and the fix.
    #[error("{0}")]
    Config(String),
    /// The system lacks something the config needs (an interface, a namespace).
    #[error("{0}")]
    System(String),
    /// From the data-plane toolkit (links, pins, netns).
    #[error(transparent)]
    Dataplane(#[from] rampart_dataplane::Error),
    /// From the ddos application.
    #[error(transparent)]
    Ddos(#[from] rampart_ddosd::Error),
    /// From the tenant application.
    #[error(transparent)]
    Tenant(#[from] rampart_tenant::Error),
    /// From the stream application.
    #[error(transparent)]
    Stream(#[from] rampart_stream::Error),
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
