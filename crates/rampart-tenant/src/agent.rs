//! The host agent on the service shell's owner thread.
//!
//! libbpf objects and skeletons are not meant to be shared between
//! threads, and the HTTP server runs on a tokio runtime: every operation is
//! a closure run on the one thread that owns the [`HostAgent`]
//! ([`rampart_service::owner`]). Slow work that needs no BPF state
//! (compiling a tenant program) runs before, outside the agent.

use rampart_service::{Owned, Owner, OwnerHandle, SpawnError};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::host::HostAgent;

/// A handle to the agent thread; cheap to clone. `call` (blocking) and
/// `run` (async) execute a closure on the agent and return its result.
pub type AgentHandle = OwnerHandle<HostAgent>;

/// The running agent thread; dropping it stops the agent (detach, unpin).
pub type AgentThread = Owner<HostAgent>;

/// How often the agent checks its pins (see [`HostAgent::check`]).
const CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl Owned for HostAgent {
    fn interval(&self) -> Option<std::time::Duration> {
        Some(CHECK_INTERVAL)
    }

    fn tick(&mut self) {
        self.check();
    }

    fn finish(&mut self) {
        self.shutdown();
    }
}

/// Start the host agent for `cfg` on its own thread.
///
/// # Errors
/// Whatever [`HostAgent::start`] returns.
pub fn start(cfg: Config) -> Result<AgentThread> {
    Owner::spawn("rampart-host-agent", move || HostAgent::start(cfg)).map_err(|e| match e {
        SpawnError::Init(e) => e,
        SpawnError::Thread(e) => Error::io("starting the host agent thread", e),
        SpawnError::Died => Error::Invalid("the host agent thread died while starting".into()),
    })
}
