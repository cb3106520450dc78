//! Errors of the benchmarks and the demo: the product's and the lab's
//! errors as they are, plus what a benchmark itself can get wrong.

/// Everything that can go wrong in a benchmark or the demo.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the data-plane toolkit (BPF, netns, pins, features).
    #[error(transparent)]
    Dataplane(#[from] rampart_dataplane::Error),
    /// From the lab (topology, generator, services, EMULATED NIC).
    #[error(transparent)]
    Lab(#[from] rampart_lab::Error),
    /// From the ddos data plane.
    #[error(transparent)]
    Ddos(#[from] rampart_ddos::Error),
    /// A bad prefix.
    #[error(transparent)]
    Prefix(#[from] rampart_ddos_control::PrefixError),
    /// From the ddos daemon and its tiers.
    #[error(transparent)]
    Ddosd(#[from] rampart_ddosd::Error),
    /// From the stream engine, sources and offload.
    #[error(transparent)]
    Stream(#[from] rampart_stream::Error),
    /// From the stream offload planner.
    #[error(transparent)]
    Plan(#[from] rampart_stream::offload::PlanError),
    /// From the tenant offload.
    #[error(transparent)]
    Tenant(#[from] rampart_tenant::Error),
    /// From `rampart run` (the demo's one daemon).
    #[error(transparent)]
    Run(#[from] rampart_run::Error),
    /// A setting out of range; the message says which and what to use.
    #[error("{0}")]
    Invalid(String),
    /// An external command (a peer, a client, a tool) failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A step of a benchmark failed; the message says which.
    #[error("{0}")]
    Failed(String),
    /// An I/O error with context.
    #[error("{context}: {err}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error: in the message once, deliberately not a `source()`
        /// (a printed chain would repeat it).
        err: std::io::Error,
    },
    /// The run was interrupted (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            err: source,
        }
    }

    /// Bad arguments (the CLI exits 2 for these): a generator or lab
    /// setting out of range.
    pub fn is_usage(&self) -> bool {
        matches!(self, Error::Lab(rampart_lab::Error::InvalidSpec(_)))
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
