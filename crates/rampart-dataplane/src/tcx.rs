//! TCX attachment (Linux 6.6+): a `bpf_link` on an interface's ingress or
//! egress hook, which other TC programs on the same hook keep running
//! beside (a program returning `TCX_NEXT` hands the packet on).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::error::{Error, Result};
use crate::netns;

/// Which side of the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// Frames the interface receives (after XDP).
    Ingress,
    /// Frames the host sends out of it.
    Egress,
}

/// Attach `prog_fd` (a `tcx/ingress` or `tcx/egress` program) to `iface`
/// in `ns` (`None`: this namespace); the link detaches when the returned
/// fd is closed, unless it was pinned. `what` names the program in errors.
///
/// # Errors
/// No such interface, or the kernel's refusal (TCX needs Linux 6.6).
pub fn attach(
    prog_fd: RawFd,
    ns: Option<&str>,
    iface: &str,
    hook: Hook,
    what: &str,
) -> Result<OwnedFd> {
    let ifindex = netns::ifindex(ns, iface)?;
    let rc = netns::run_in(ns, || {
        let opts = libbpf_sys::bpf_link_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
            ..Default::default()
        };
        let kind = match hook {
            Hook::Ingress => libbpf_sys::BPF_TCX_INGRESS,
            Hook::Egress => libbpf_sys::BPF_TCX_EGRESS,
        };
        // SAFETY: `opts` is a valid, fully initialised options struct that outlives the call.
        Ok(unsafe { libbpf_sys::bpf_link_create(prog_fd, ifindex as i32, kind, &opts) })
    })?;
    if rc < 0 {
        let side = match hook {
            Hook::Ingress => "ingress",
            Hook::Egress => "egress",
        };
        return Err(Error::Io {
            context: format!(
                "attaching {what} to the TC {side} of {} (TCX needs Linux 6.6 or later)",
                match ns {
                    Some(n) => format!("{iface} in netns {n}"),
                    None => iface.to_string(),
                }
            ),
            err: std::io::Error::from_raw_os_error(-rc),
        });
    }
    // SAFETY: the kernel returned a fresh link fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(rc) })
}
