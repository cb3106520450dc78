//! Named network namespaces (`ip netns` convention: `/run/netns/NAME`).
//!
//! Entering a namespace is per thread (`setns(2)` with `CLONE_NEWNET`), so
//! [`run_in`] runs a closure on a short-lived thread that enters the
//! namespace and never leaves it: the caller's own thread, and the tokio
//! runtime of the daemon, are never moved. The mount namespace is not
//! touched, so bpffs pins keep living under the root namespace's
//! `/sys/fs/bpf` (unlike `ip netns exec`, which remounts `/sys`).

use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;

use nix::sched::{setns, CloneFlags};

use crate::error::{Error, IoContext, Result};

/// Directory where iproute2 keeps named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Path of a named namespace's handle.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

/// Does the named namespace exist?
pub fn exists(name: &str) -> bool {
    path(name).exists()
}

/// Run `f` inside the named network namespace (`None`: the caller's own)
/// and return its result.
///
/// # Errors
/// [`Error::NoSuchNetns`] if the namespace does not exist, an I/O error if
/// it cannot be entered, or whatever `f` returns.
pub fn run_in<T, F>(ns: Option<&str>, f: F) -> Result<T>
where
    T: Send,
    F: FnOnce() -> Result<T> + Send,
{
    let Some(name) = ns else {
        return f();
    };
    let file = File::open(path(name)).map_err(|_| Error::NoSuchNetns(name.to_string()))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            setns(file.as_fd(), CloneFlags::CLONE_NEWNET)
                .io_context(|| format!("entering network namespace {name:?}"))?;
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Enter the named namespace on the *current* thread, for threads that
/// live in one namespace for their whole life (generator workers).
///
/// # Errors
/// As [`run_in`].
pub fn enter_current_thread(name: &str) -> Result<()> {
    let file = File::open(path(name)).map_err(|_| Error::NoSuchNetns(name.to_string()))?;
    setns(file.as_fd(), CloneFlags::CLONE_NEWNET)
        .io_context(|| format!("entering network namespace {name:?}"))
}

/// Interface index of `iface` in the namespace `ns`.
///
/// # Errors
/// [`Error::NoSuchInterface`] when it does not exist there.
pub fn ifindex(ns: Option<&str>, iface: &str) -> Result<u32> {
    let owned_ns = ns.map(str::to_string);
    run_in(ns, || {
        nix::net::if_::if_nametoindex(iface).map_err(|_| Error::NoSuchInterface {
            iface: iface.to_string(),
            ns: owned_ns,
        })
    })
}
