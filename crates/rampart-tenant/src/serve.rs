//! `rampart tenant serve`: the host agent, the compiler agent and the HTTP
//! API together, until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::AgentThread;
use crate::api::{router, ApiState};
use crate::compiler::Compiler;
use crate::config::Config;
use crate::error::{Error, Result};

/// A running server (for tests: bound, serving on a runtime of its own).
#[derive(Debug)]
pub struct Server {
    /// Address actually bound (port 0 in the config picks a free one).
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    agent: Option<AgentThread>,
}

impl Server {
    /// Start the agent and the API; returns once the socket is bound.
    ///
    /// # Errors
    /// Agent start failures, a busy address.
    pub fn start(cfg: Config) -> Result<Self> {
        let compiler = Compiler::new(cfg.limits.policy())?;
        let listen = cfg.server.listen;
        let agent = AgentThread::start(cfg)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("rampart-api")
            .build()
            .map_err(|e| Error::io("starting the async runtime", e))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(listen))
            .map_err(|e| Error::io(format!("binding the API to {listen}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the bound address", e))?;
        let state = Arc::new(ApiState {
            agent: agent.handle(),
            compiler,
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(async move {
            let _ = axum::serve(listener, router(state))
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            runtime: Some(runtime),
            shutdown: Some(tx),
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
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
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
pub fn serve(cfg: Config, cancel: &AtomicBool) -> Result<()> {
    let name = cfg.infra.name.clone();
    let server = Server::start(cfg)?;
    tracing::info!(instance = %name, addr = %server.addr, "rampart tenant serving");
    eprintln!(
        "rampart tenant: instance {name} serving on http://{}",
        server.addr
    );
    while !cancel.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    eprintln!("rampart tenant: instance {name} stopped (program detached, pins removed)");
    Ok(())
}
