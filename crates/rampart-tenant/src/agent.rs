//! The host agent on a thread of its own, driven by messages.
//!
//! libbpf objects and skeletons are not meant to be shared between
//! threads, and the HTTP server runs on a tokio runtime: every operation is
//! a closure sent to the one thread that owns the [`HostAgent`], and the
//! answer comes back over a channel. Slow work that needs no BPF state
//! (compiling a tenant program) runs before, outside the agent.

use std::sync::mpsc;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::host::HostAgent;

type Job = Box<dyn FnOnce(&mut HostAgent) + Send>;

/// A handle to the agent thread; cheap to clone.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    tx: mpsc::Sender<Job>,
}

/// The running agent thread.
#[derive(Debug)]
pub struct AgentThread {
    handle: AgentHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AgentThread {
    /// Start the host agent for `cfg` on its own thread.
    ///
    /// # Errors
    /// Whatever [`HostAgent::start`] returns.
    pub fn start(cfg: Config) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
        let thread = std::thread::Builder::new()
            .name("rampart-host-agent".into())
            .spawn(move || {
                let mut agent = match HostAgent::start(cfg) {
                    Ok(a) => {
                        let _ = ready_tx.send(Ok(()));
                        a
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                for job in rx {
                    job(&mut agent);
                }
                agent.shutdown();
            })
            .map_err(|e| Error::io("starting the host agent thread", e))?;
        ready_rx
            .recv()
            .map_err(|_| Error::Invalid("the host agent thread died while starting".into()))??;
        Ok(Self {
            handle: AgentHandle { tx },
            thread: Some(thread),
        })
    }

    /// A handle for callers.
    pub fn handle(&self) -> AgentHandle {
        self.handle.clone()
    }

    /// Stop the agent: detach, unpin, release. Waits for queued work.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        // Dropping the last sender ends the loop; clones held elsewhere keep it alive,
        // so also send an explicit shutdown.
        let _ = self
            .handle
            .tx
            .send(Box::new(|a: &mut HostAgent| a.shutdown()));
        let (tx, _) = mpsc::channel();
        self.handle = AgentHandle { tx };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AgentThread {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_inner();
        }
    }
}

impl AgentHandle {
    /// Run `f` on the agent thread and wait for its result (blocking).
    ///
    /// # Errors
    /// [`Error::Invalid`] if the agent has stopped.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut HostAgent) -> R + Send + 'static,
    ) -> Result<R> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.tx
            .send(Box::new(move |a: &mut HostAgent| {
                let _ = tx.send(f(a));
            }))
            .map_err(|_| Error::Invalid("the host agent has stopped".into()))?;
        rx.recv()
            .map_err(|_| Error::Invalid("the host agent has stopped".into()))
    }

    /// As [`AgentHandle::call`], from async code.
    ///
    /// # Errors
    /// As [`AgentHandle::call`].
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut HostAgent) -> R + Send + 'static,
    ) -> Result<R> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Box::new(move |a: &mut HostAgent| {
                let _ = tx.send(f(a));
            }))
            .map_err(|_| Error::Invalid("the host agent has stopped".into()))?;
        rx.await
            .map_err(|_| Error::Invalid("the host agent has stopped".into()))
    }
}
