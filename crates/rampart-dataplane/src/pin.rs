//! bpffs and rampart's pin layout.
//!
//! Everything rampart pins lives under `/sys/fs/bpf/rampart/<scope>/...`,
//! one directory per owner (a lab prefix, an attached interface), so that
//! removing an owner is removing one directory and nothing else.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Mount point of the BPF filesystem.
pub const BPFFS: &str = "/sys/fs/bpf";
/// rampart's directory on it.
pub const ROOT: &str = "/sys/fs/bpf/rampart";
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Is bpffs mounted at [`BPFFS`]?
pub fn bpffs_mounted() -> bool {
    match nix::sys::statfs::statfs(BPFFS) {
        Ok(st) => st.filesystem_type().0 == BPF_FS_MAGIC,
        Err(_) => false,
    }
}

/// Mount bpffs at [`BPFFS`] if it is not mounted yet (as systemd does at boot).
///
/// # Errors
/// When the mount fails (not root, or no bpffs in this kernel).
pub fn ensure_bpffs() -> Result<()> {
    if bpffs_mounted() {
        return Ok(());
    }
    fs::create_dir_all(BPFFS).io_context(|| format!("creating {BPFFS}"))?;
    nix::mount::mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        Some("mode=0700"),
    )
    .map_err(|e| Error::MissingFeature {
        feature: "BPF filesystem (bpffs)",
        detail: format!("mounting bpf at {BPFFS} failed: {e}"),
    })?;
    if !bpffs_mounted() {
        return Err(Error::MissingFeature {
            feature: "BPF filesystem (bpffs)",
            detail: format!("{BPFFS} is not a bpffs after mounting"),
        });
    }
    Ok(())
}

/// `/sys/fs/bpf/rampart/<parts...>`, created (with bpffs mounted) if missing.
///
/// # Errors
/// When bpffs cannot be mounted or the directory cannot be created.
pub fn dir(parts: &[&str]) -> Result<PathBuf> {
    ensure_bpffs()?;
    let mut p = PathBuf::from(ROOT);
    for part in parts {
        p.push(part);
    }
    fs::create_dir_all(&p).io_context(|| format!("creating pin directory {}", p.display()))?;
    Ok(p)
}

/// Path under rampart's pin root, without creating anything.
pub fn path(parts: &[&str]) -> PathBuf {
    let mut p = PathBuf::from(ROOT);
    for part in parts {
        p.push(part);
    }
    p
}

/// Is something pinned (or a pin directory) at `path`?
///
/// Unlike `Path::exists`, a path that cannot be looked at is an error, not
/// "absent": bpffs is mounted mode 0700, so for a user without root every
/// pin looks missing, and "no filter attached" would send them the wrong way.
///
/// # Errors
/// [`Error::NotRoot`] when permission is denied, [`Error::Io`] for other failures.
pub fn exists(path: &Path) -> Result<bool> {
    match path.try_exists() {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(Error::NotRoot {
            what: format!(
                "reading rampart's BPF pins ({} is not readable)",
                path.display()
            ),
        }),
        Err(e) => Err(Error::Io {
            context: format!("looking for {}", path.display()),
            err: e,
        }),
    }
}

/// Pin a BPF object fd at `path` (replacing nothing: fails if it exists).
///
/// # Errors
/// The pin syscall's error with the path.
pub fn pin_fd(fd: i32, path: &Path) -> Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid("NUL in path".into()))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libbpf_sys::bpf_obj_pin(fd, c.as_ptr()) };
    if rc < 0 {
        return Err(Error::Io {
            context: format!("pinning at {}", path.display()),
            err: io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(())
}

/// Open a pinned object, returning its fd (owned by the caller).
///
/// # Errors
/// [`Error::Pin`] when nothing is pinned there.
pub fn open_pinned(path: &Path) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid("NUL in path".into()))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let fd = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    if fd < 0 {
        return Err(Error::Pin {
            path: path.to_path_buf(),
            reason: io::Error::from_raw_os_error(-fd).to_string(),
        });
    }
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Remove a pin directory and everything in it; missing is fine.
///
/// # Errors
/// When something exists but cannot be removed.
pub fn remove_tree(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Io {
            context: format!("removing pins under {}", path.display()),
            err: e,
        }),
    }
}

/// Remove empty parent directories up to (not including) [`ROOT`]'s parent.
pub fn prune_empty_parents(path: &Path) {
    let mut p = path.parent();
    while let Some(dir) = p {
        if !dir.starts_with(ROOT) || fs::remove_dir(dir).is_err() {
            break;
        }
        p = dir.parent();
    }
}
