//! `rampart tenant serve`: the host agent, the compiler agent and the HTTP
//! API (the service shell's server) together, until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::agent::AgentThread;
use crate::api::{routes, ApiState};
use crate::compiler::Compiler;
use crate::config::Config;
use crate::error::{Error, Result};

/// A running server (for tests: bound, serving on a runtime of its own).
#[derive(Debug)]
pub struct Server {
    /// Address of the API actually bound (port 0 in the config picks a free one).
    pub addr: SocketAddr,
    /// Address of the metrics listener (`server.metrics_listen`), if any.
    pub metrics_addr: Option<SocketAddr>,
    server: Option<rampart_service::Server>,
    agent: Option<AgentThread>,
}

impl Server {
    /// Start the agent and the API; returns once the socket is bound.
    ///
    /// # Errors
    /// Bad tokens, agent start failures, a busy address, no API address.
    pub fn start(cfg: Config) -> Result<Self> {
        let tokens = cfg.tokens()?;
        let compiler = Compiler::new(cfg.limits.policy())?;
        let server_cfg = cfg.server.clone();
        if server_cfg.api_addr().ok().flatten().is_none() {
            return Err(Error::Invalid(
                "server.listen is empty: the tenant API needs an address, e.g. \"127.0.0.1:9610\""
                    .into(),
            ));
        }
        let tenants = cfg
            .tenants
            .iter()
            .filter_map(|t| Some((t.name.clone(), t.id?)))
            .collect();
        let agent = crate::agent::start(cfg)?;
        let metrics = rampart_service::Metrics::new();
        metrics
            .register(crate::metrics::collector(agent.handle()))
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let state = Arc::new(ApiState {
            agent: agent.handle(),
            compiler,
            tenants,
        });
        let server = rampart_service::Server::start(
            &server_cfg,
            rampart_service::Service {
                name: "rampart-tenant",
                title: "rampart tenant",
                version: env!("CARGO_PKG_VERSION"),
                description: "A tenant's own program, selectors, maps and statistics \
                              (the token names the tenant).",
                routes: routes(state),
                metrics,
                tokens,
                // No dashboard panel: a tenant's token must not show the others.
                apps: rampart_service::Apps::none(),
            },
        )
        .map_err(|e| Error::Invalid(e.to_string()))?;
        let addr = server
            .api_addr()
            .ok_or_else(|| Error::Invalid("the tenant API did not bind".into()))?;
        Ok(Self {
            addr,
            metrics_addr: server.metrics_addr(),
            server: Some(server),
            agent: Some(agent),
        })
    }

    /// A handle to the host agent (tests drive the data path through it).
    pub fn agent(&self) -> Option<crate::agent::AgentHandle> {
        self.agent.as_ref().map(AgentThread::handle)
    }

    /// Stop serving and tear the instance down (detach, unpin).
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
        if let Some(a) = self.agent.take() {
            a.stop();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Serve `cfg` until `cancel` is set (the binary wires SIGINT/SIGTERM to it).
///
/// # Errors
/// As [`Server::start`].
pub fn serve(cfg: Config, path: Option<&std::path::Path>, cancel: &AtomicBool) -> Result<()> {
    let name = cfg.infra.name.clone();
    let server = Server::start(cfg)?;
    // SIGHUP and POST /v1/reload re-read the file (docs/operations.md).
    if let (Some(s), Some(agent), Some(path)) = (&server.server, server.agent(), path) {
        let path = path.to_path_buf();
        s.on_reload(move |side| crate::host::reload_file(&agent, &path, side));
    }
    let metrics = server
        .metrics_addr
        .map(|m| format!(", metrics on http://{m}/metrics"))
        .unwrap_or_default();
    tracing::info!(
        "rampart tenant: instance {name} serving on http://{}{metrics}",
        server.addr
    );
    match &server.server {
        Some(s) => s.wait(cancel),
        None => rampart_service::server::wait_until(cancel),
    }
    server.stop();
    tracing::info!("rampart tenant: instance {name} stopped (program detached, pins removed)");
    Ok(())
}
