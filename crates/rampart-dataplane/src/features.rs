//! Probes for what the kernel and the process can do, so a missing feature
//! is reported by name ("kernel feature missing: XDP live frames ...")
//! instead of as a bare errno deep inside an operation.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};

use crate::error::{Error, Result};

/// Is the effective user root?
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Fail with a clear message unless running as root.
///
/// # Errors
/// [`Error::NotRoot`] naming `what`.
pub fn require_root(what: &str) -> Result<()> {
    if is_root() {
        Ok(())
    } else {
        Err(Error::NotRoot {
            what: what.to_string(),
        })
    }
}

/// The effective capability set of this process (`CapEff` in
/// /proc/self/status), or `None` if it cannot be read.
pub fn effective_caps() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let v = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(v.trim(), 16).ok()
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// What a daemon putting XDP programs on interfaces needs, checked before
/// it starts so that what is missing is one line naming it: the
/// capabilities (CAP_BPF — or CAP_SYS_ADMIN — and CAP_NET_ADMIN in the
/// *effective* set: a root process in a container or a unit with bounded
/// capabilities may lack them), the BPF filesystem, and the bpf() syscall
/// accepting an XDP program (its errno says why not).
///
/// # Errors
/// [`Error::MissingFeature`] naming what is missing and how to get it.
pub fn require_xdp_host(what: &str) -> Result<()> {
    let disabled = std::env::var("RAMPART_TEST_DISABLE_FEATURE").unwrap_or_default();
    let off = |k: &str| disabled.split(',').any(|d| d.trim() == k);
    let caps = if off("caps") {
        Some(0)
    } else {
        effective_caps()
    };
    if let Some(caps) = caps {
        let has = |c: u32| caps & (1u64 << c) != 0;
        let mut missing = Vec::new();
        if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
            missing.push("CAP_BPF");
        }
        if !has(CAP_NET_ADMIN) {
            missing.push("CAP_NET_ADMIN");
        }
        if !missing.is_empty() {
            return Err(Error::MissingCapability {
                what: what.to_string(),
                missing: missing.join(" and "),
                euid: nix::unistd::geteuid().as_raw(),
            });
        }
    }
    if off("bpffs") {
        return Err(Error::MissingFeature {
            feature: Feature::Bpffs.name(),
            detail: "disabled by RAMPART_TEST_DISABLE_FEATURE".into(),
        });
    }
    crate::pin::ensure_bpffs()?;
    let errno = if off("xdp") {
        Some(libc::ENOSYS)
    } else {
        match trivial_xdp(1) {
            Some(_) => None,
            None => Some(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
        }
    };
    if let Some(e) = errno {
        let why = match e {
            libc::ENOSYS => "the kernel has no bpf() system call (built without CONFIG_BPF_SYSCALL, or a seccomp filter forbids it)".to_string(),
            libc::EPERM => "bpf() refused with EPERM although the capabilities are there: a kernel lockdown, an LSM policy or kernel.unprivileged_bpf_disabled (see /sys/kernel/security/lockdown)".to_string(),
            libc::EINVAL => "the kernel cannot load an XDP program (EINVAL: built without XDP support?)".to_string(),
            e => format!("loading a two-instruction XDP program failed: {}", std::io::Error::from_raw_os_error(e)),
        };
        return Err(Error::MissingFeature {
            feature: Feature::Xdp.name(),
            detail: why,
        });
    }
    Ok(())
}

/// Load `r0 = action; exit` as an XDP program.
fn trivial_xdp(action: i32) -> Option<OwnedFd> {
    let insns = [
        // BPF_ALU64 | BPF_MOV | BPF_K, dst r0
        libbpf_sys::bpf_insn {
            code: 0xb7,
            _bitfield_align_1: [],
            _bitfield_1: libbpf_sys::bpf_insn::new_bitfield_1(0, 0),
            off: 0,
            imm: action,
        },
        // BPF_JMP | BPF_EXIT
        libbpf_sys::bpf_insn {
            code: 0x95,
            _bitfield_align_1: [],
            _bitfield_1: libbpf_sys::bpf_insn::new_bitfield_1(0, 0),
            off: 0,
            imm: 0,
        },
    ];
    let license = CString::new("GPL").ok()?;
    let name = CString::new("rampart_probe").ok()?;
    // SAFETY: instruction buffer and strings outlive the call; NULL opts allowed.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_XDP,
            name.as_ptr(),
            license.as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            std::ptr::null_mut(),
        )
    };
    // SAFETY: fresh fd owned here.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Can XDP programs be loaded at all?
pub fn xdp_supported() -> bool {
    trivial_xdp(1).is_some()
}

/// Does `BPF_PROG_RUN` accept `BPF_F_TEST_XDP_LIVE_FRAMES` (Linux ≥ 5.18)?
/// Probed by dropping one live frame on the loopback interface of the
/// caller's namespace.
pub fn xdp_live_frames_supported() -> bool {
    use std::os::fd::AsRawFd;
    let Some(fd) = trivial_xdp(1) else {
        return false;
    };
    let frame = [0u8; 64];
    let mut ctx = crate::testrun::XdpMd {
        data_end: 64,
        ingress_ifindex: 1,
        ..Default::default()
    };
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: 64,
        ctx_in: (&raw mut ctx).cast_const().cast(),
        ctx_size_in: std::mem::size_of::<crate::testrun::XdpMd>() as u32,
        repeat: 1,
        flags: crate::testrun::BPF_F_TEST_XDP_LIVE_FRAMES,
        ..Default::default()
    };
    // SAFETY: buffers referenced by `opts` outlive the call.
    unsafe { libbpf_sys::bpf_prog_test_run_opts(fd.as_raw_fd(), &mut opts) == 0 }
}

/// A kernel capability rampart needs somewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// Root privileges.
    Root,
    /// The bpf() syscall and XDP program loading.
    Xdp,
    /// BPF_PROG_RUN live frames (the lab generator).
    XdpLiveFrames,
    /// bpffs, mounted (or mountable) at /sys/fs/bpf.
    Bpffs,
    /// veth pairs and network namespaces.
    Veth,
}

impl Feature {
    /// Short key, as accepted by `RAMPART_TEST_DISABLE_FEATURE`.
    pub fn key(self) -> &'static str {
        match self {
            Feature::Root => "root",
            Feature::Xdp => "xdp",
            Feature::XdpLiveFrames => "xdp-live-frames",
            Feature::Bpffs => "bpffs",
            Feature::Veth => "veth",
        }
    }

    /// Human name, used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Root => "root privileges",
            Feature::Xdp => {
                "BPF XDP programs (bpf() syscall, CONFIG_BPF_SYSCALL, CONFIG_XDP_SOCKETS)"
            }
            Feature::XdpLiveFrames => {
                "XDP live frames (BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES, Linux ≥ 5.18)"
            }
            Feature::Bpffs => "BPF filesystem (bpffs at /sys/fs/bpf)",
            Feature::Veth => "veth devices and network namespaces (CONFIG_VETH, CONFIG_NET_NS)",
        }
    }
}

/// Check every feature in `list`; the first missing one is the error.
///
/// # Errors
/// [`Error::NotRoot`] or [`Error::MissingFeature`].
pub fn require(what: &str, list: &[Feature]) -> Result<()> {
    // Lets the test suite exercise the "feature missing" path on a kernel
    // that has everything: a comma-separated list of Feature::key()s.
    let disabled = std::env::var("RAMPART_TEST_DISABLE_FEATURE").unwrap_or_default();
    for f in list {
        if disabled.split(',').any(|k| k.trim() == f.key()) {
            return Err(Error::MissingFeature {
                feature: f.name(),
                detail: "disabled by RAMPART_TEST_DISABLE_FEATURE".into(),
            });
        }
        match f {
            Feature::Root => require_root(what)?,
            Feature::Xdp => {
                if !xdp_supported() {
                    return Err(Error::MissingFeature {
                        feature: f.name(),
                        detail: "loading a two-instruction XDP program failed".into(),
                    });
                }
            }
            Feature::XdpLiveFrames => {
                if !xdp_live_frames_supported() {
                    return Err(Error::MissingFeature {
                        feature: f.name(),
                        detail: "a one-frame live run on lo was refused".into(),
                    });
                }
            }
            Feature::Bpffs => crate::pin::ensure_bpffs()?,
            Feature::Veth => {
                if !std::path::Path::new("/proc/self/ns/net").exists() {
                    return Err(Error::MissingFeature {
                        feature: f.name(),
                        detail: "/proc/self/ns/net missing".into(),
                    });
                }
            }
        }
    }
    Ok(())
}
