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

    /// The program the link runs and the interface it is attached to:
    /// `(prog_id, ifindex)`; ifindex 0 once the link is defunct (its
    /// interface was deleted, or it was detached).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn info(&self) -> Result<(u32, u32)> {
        // SAFETY: a C struct of integers and a union of them: all zeroes is valid.
        let mut info: libbpf_sys::bpf_link_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
        // SAFETY: `info` is valid for `len` bytes of writes.
        let rc = unsafe {
            libbpf_sys::bpf_link_get_info_by_fd(self.fd.as_raw_fd(), &mut info, &mut len)
        };
        if rc != 0 {
            return Err(Error::Io {
                context: "reading an XDP link's info".into(),
                err: errno(rc),
            });
        }
        // SAFETY: the union's `xdp` member is the one the kernel fills for XDP links.
        Ok((info.prog_id, unsafe { info.__bindgen_anon_1.xdp.ifindex }))
    }

    /// Raw fd of the link.
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The `bpf_link` through which program `prog_id` runs on `iface` of
    /// `ns`, found among the kernel's links (an XDP link reports only its
    /// ifindex, so the program id tells apart equal ifindexes of other
    /// namespaces). `None` when the program was attached without a link
    /// (netlink), which cannot be replaced atomically here.
    ///
    /// # Errors
    /// A missing namespace or interface.
    pub fn find(ns: Option<&str>, iface: &str, prog_id: u32) -> Result<Option<Self>> {
        let ifindex = netns::ifindex(ns, iface)?;
        let mut id = 0u32;
        loop {
            let mut next = 0u32;
            // SAFETY: plain syscall wrapper writing one u32.
            if unsafe { libbpf_sys::bpf_link_get_next_id(id, &mut next) } < 0 {
                return Ok(None);
            }
            id = next;
            // SAFETY: plain syscall wrapper.
            let raw = unsafe { libbpf_sys::bpf_link_get_fd_by_id(id) };
            if raw < 0 {
                continue; // gone meanwhile
            }
            // SAFETY: a fresh fd from the kernel, owned here.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: a C struct of integers and a union of them: all zeroes is valid.
            let mut info: libbpf_sys::bpf_link_info = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
            // SAFETY: `info` is valid for `len` bytes of writes.
            let rc =
                unsafe { libbpf_sys::bpf_link_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
            if rc != 0 || info.type_ != libbpf_sys::BPF_LINK_TYPE_XDP || info.prog_id != prog_id {
                continue;
            }
            // SAFETY: the union's `xdp` member is the one the kernel fills for XDP links.
            if unsafe { info.__bindgen_anon_1.xdp.ifindex } == ifindex {
                return Ok(Some(Self { fd }));
            }
        }
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

/// An fd of the loaded program `id`.
///
/// # Errors
/// No such program (unloaded meanwhile), or no privilege.
pub fn prog_fd(id: u32) -> Result<OwnedFd> {
    // SAFETY: plain syscall wrapper.
    let raw = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if raw < 0 {
        return Err(Error::Io {
            context: format!("opening BPF program {id}"),
            err: io::Error::last_os_error(),
        });
    }
    // SAFETY: a fresh fd from the kernel, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Ids of the maps program `id` uses.
///
/// # Errors
/// As [`prog_fd`], or the info query's error.
pub fn prog_map_ids(id: u32) -> Result<Vec<u32>> {
    let fd = prog_fd(id)?;
    let query = |info: &mut libbpf_sys::bpf_prog_info| {
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: `info` is valid for `len` bytes of writes, and any buffer it
        // points to holds `nr_map_ids` u32s (set by the caller).
        let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), info, &mut len) };
        if rc < 0 {
            Err(Error::Io {
                context: format!("reading the maps of BPF program {id}"),
                err: errno(rc),
            })
        } else {
            Ok(())
        }
    };
    let mut info = libbpf_sys::bpf_prog_info::default();
    query(&mut info)?;
    let mut ids = vec![0u32; info.nr_map_ids as usize];
    let mut info = libbpf_sys::bpf_prog_info {
        nr_map_ids: ids.len() as u32,
        map_ids: ids.as_mut_ptr() as u64,
        ..Default::default()
    };
    query(&mut info)?;
    // The program cannot gain maps after load; never read past what was written.
    ids.truncate(info.nr_map_ids as usize);
    Ok(ids)
}

/// Frames the XDP program of veth `iface` (in `ns`) has seen, from the
/// veth driver's per-queue counters (`ethtool -S`, `rx_queue_<n>_xdp_packets`).
///
/// # Errors
/// A failing `ethtool` (not installed, not a veth, no such interface).
pub fn veth_xdp_packets(ns: Option<&str>, iface: &str) -> Result<u64> {
    veth_xdp_counts(ns, iface).map(|(packets, _)| packets)
}

/// Frames and bytes the XDP program of veth `iface` (in `ns`) has seen:
/// the sums of the driver's `rx_queue_<n>_xdp_packets` and `_xdp_bytes`.
///
/// # Errors
/// A failing `ethtool` (not installed, not a veth, no such interface).
pub fn veth_xdp_counts(ns: Option<&str>, iface: &str) -> Result<(u64, u64)> {
    let out = match ns {
        Some(ns) => crate::cmd::in_ns(ns, "ethtool", &["-S", iface])?,
        None => crate::cmd::run("ethtool", &["-S", iface])?,
    };
    Ok(parse_veth_xdp_counts(&out))
}

fn parse_veth_xdp_counts(ethtool: &str) -> (u64, u64) {
    let (mut packets, mut bytes) = (0u64, 0u64);
    for (k, v) in ethtool.lines().filter_map(|l| l.trim().split_once(": ")) {
        let (Some(rest), Ok(v)) = (k.strip_prefix("rx_queue_"), v.trim().parse::<u64>()) else {
            continue;
        };
        if rest.ends_with("_xdp_packets") {
            packets += v;
        } else if rest.ends_with("_xdp_bytes") {
            bytes += v;
        }
    }
    (packets, bytes)
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

/// The id of the program behind `fd`.
///
/// # Errors
/// The kernel's error.
pub fn prog_id_of(fd: RawFd) -> Result<u32> {
    // SAFETY: a C struct of integers and pointers: all zeroes is valid.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is valid for `len` bytes of writes.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    if rc != 0 {
        return Err(Error::Io {
            context: "reading a program's info".into(),
            err: std::io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(info.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_xdp_counts_sum_every_queue_and_skip_the_rest() {
        let t = "NIC statistics:\n     peer_ifindex: 7\n     rx_queue_0_xdp_packets: 10\n     rx_queue_0_xdp_bytes: 640\n     rx_queue_1_xdp_packets: 5\n     rx_queue_1_xdp_bytes: 320\n     rx_queue_1_xdp_drops: 3\n     tx_queue_0_xdp_xmit: 99\n";
        assert_eq!(parse_veth_xdp_counts(t), (15, 960));
    }
}
