//! XDP attachment through `bpf_link` (kernel ≥ 5.9), which gives atomic
//! program replacement (`bpf_link_update`) and survives the attaching
//! process when pinned.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::netns;
use crate::pin;

/// Where the XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the driver (veth, most NICs); the fast path.
    #[default]
    Native,
    /// On the generic skb path; works everywhere, slow.
    Generic,
    /// Offloaded to the NIC (Netronome nfp); refused where the driver lacks it.
    Hw,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            XdpMode::Native => libbpf_sys::XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => libbpf_sys::XDP_FLAGS_SKB_MODE,
            XdpMode::Hw => libbpf_sys::XDP_FLAGS_HW_MODE,
        }
    }
}

impl std::str::FromStr for XdpMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "native" | "drv" => Ok(Self::Native),
            "generic" | "skb" => Ok(Self::Generic),
            "hw" | "offload" => Ok(Self::Hw),
            _ => Err(format!("unknown XDP mode {s:?}: use native, generic or hw")),
        }
    }
}

/// An XDP `bpf_link`. Dropping it detaches the program unless it is pinned.
#[derive(Debug)]
pub struct XdpLink {
    fd: OwnedFd,
}

fn errno(rc: i32) -> io::Error {
    io::Error::from_raw_os_error(-rc)
}

impl XdpLink {
    /// Attach `prog_fd` to interface `iface` of namespace `ns`.
    ///
    /// # Errors
    /// A missing namespace or interface, an interface that already has an
    /// XDP program (EBUSY), or a mode the driver does not support, each with
    /// a message that says which.
    pub fn attach(prog_fd: RawFd, ns: Option<&str>, iface: &str, mode: XdpMode) -> Result<Self> {
        let ifindex = netns::ifindex(ns, iface)?;
        let where_ = match ns {
            Some(n) => format!("{iface} (netns {n})"),
            None => iface.to_string(),
        };
        let fd = netns::run_in(ns, || {
            let opts = libbpf_sys::bpf_link_create_opts {
                sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
                flags: mode.flags(),
                ..Default::default()
            };
            // SAFETY: `opts` is a valid, fully initialised options struct that outlives the call.
            let rc = unsafe {
                libbpf_sys::bpf_link_create(prog_fd, ifindex as i32, libbpf_sys::BPF_XDP, &opts)
            };
            if rc < 0 {
                let e = errno(rc);
                let hint = match e.raw_os_error() {
                    Some(libc::EBUSY) | Some(libc::EEXIST) => {
                        " (another XDP program is attached there; detach it first)".to_string()
                    }
                    Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) if mode == XdpMode::Hw => {
                        " (the driver cannot offload XDP programs to the NIC)".to_string()
                    }
                    Some(libc::EOPNOTSUPP) => {
                        format!(" ({mode:?} XDP is not supported by this driver)")
                    }
                    _ => String::new(),
                };
                return Err(Error::Io {
                    context: format!("attaching XDP to {where_}{hint}"),
                    err: e,
                });
            }
            Ok(rc)
        })?;
        // SAFETY: the kernel returned a fresh link fd we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    /// Open a pinned XDP link.
    ///
    /// # Errors
    /// [`Error::Pin`] when nothing is pinned at `path`.
    pub fn open_pinned(path: &Path) -> Result<Self> {
        Ok(Self {
            fd: pin::open_pinned(path)?,
        })
    }

    /// Pin the link so it outlives this process.
    ///
    /// # Errors
    /// When the pin cannot be created (exists already, no bpffs).
    pub fn pin(&self, path: &Path) -> Result<()> {
        pin::pin_fd(self.fd.as_raw_fd(), path)
    }

    /// Atomically replace the program behind the link: every packet sees
    /// either the old or the new program, none is lost.
    ///
    /// # Errors
    /// When the kernel refuses (different program type, link detached).
    pub fn update(&self, new_prog_fd: RawFd) -> Result<()> {
        // SAFETY: plain syscall wrapper on fds we own; NULL opts is allowed.
        let rc = unsafe {
            libbpf_sys::bpf_link_update(self.fd.as_raw_fd(), new_prog_fd, std::ptr::null())
        };
        if rc < 0 {
            return Err(Error::Io {
                context: "replacing the XDP program (bpf_link_update)".into(),
                err: errno(rc),
            });
        }
        Ok(())
    }

    /// Detach now (also for a pinned link: the pin stays but is inert).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn detach(&self) -> Result<()> {
        // SAFETY: plain syscall wrapper on an fd we own.
        let rc = unsafe { libbpf_sys::bpf_link_detach(self.fd.as_raw_fd()) };
        if rc < 0 {
            return Err(Error::Io {
                context: "detaching XDP link".into(),
                err: errno(rc),
            });
        }
        Ok(())
    }

    /// Raw fd of the link.
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Id of the XDP program attached to `iface` in `ns` (any mode), if any.
///
/// # Errors
/// Missing namespace or interface.
pub fn attached_prog_id(ns: Option<&str>, iface: &str) -> Result<Option<u32>> {
    let ifindex = netns::ifindex(ns, iface)?;
    netns::run_in(ns, || {
        let mut opts = libbpf_sys::bpf_xdp_query_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _,
            ..Default::default()
        };
        // SAFETY: `opts` is valid for writes for the duration of the call.
        let rc = unsafe { libbpf_sys::bpf_xdp_query(ifindex as i32, 0, &mut opts) };
        if rc < 0 {
            return Err(Error::Io {
                context: format!("querying XDP on {iface}"),
                err: errno(rc),
            });
        }
        let id = [
            opts.prog_id,
            opts.drv_prog_id,
            opts.skb_prog_id,
            opts.hw_prog_id,
        ]
        .into_iter()
        .find(|&id| id != 0);
        Ok(id)
    })
}

/// Name of a loaded program by id (as shown by `bpftool prog`).
pub fn prog_name(id: u32) -> Option<String> {
    // SAFETY: plain syscall wrapper.
    let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fresh fd from the kernel, owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is valid for `len` bytes of writes.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc < 0 {
        return None;
    }
    let name: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Some(String::from_utf8_lossy(&name).into_owned())
}
