//! The compiler agent: turns a tenant's submission — C source
//! or a BPF object — into a checked, linked XDP program ready for the host
//! agent.
//!
//! ```text
//! C source ──(include check, clang -target bpf against rampart_tenant.h)──┐
//! BPF object ─────────────────────────────────────────────────────────────┴─▶ confinement checks
//!   ─▶ libbpf static link with the infrastructure wrapper (verdict mapping,
//!      redirect to own ports, re-demultiplexing) ─▶ linked object
//! ```
//!
//! The verifier runs when the host agent loads the linked object; its log
//! goes back to the tenant on failure.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::confine::{self, CheckReport, Policy};
use crate::error::{Error, Result};

/// The tenant API header, shipped inside the binary.
pub const TENANT_HEADER: &str = include_str!("../../../bpf/tenant/api/rampart_tenant.h");

/// Headers the tenant API header includes, with their paths relative to the include root.
const HEADERS: &[(&str, &str)] = &[
    ("rampart_tenant.h", TENANT_HEADER),
    (
        "common/common.h",
        include_str!("../../../bpf/common/common.h"),
    ),
    (
        "common/parse.h",
        include_str!("../../../bpf/common/parse.h"),
    ),
    ("common/csum.h", include_str!("../../../bpf/common/csum.h")),
    (
        "common/synack.h",
        include_str!("../../../bpf/common/synack.h"),
    ),
    ("common/abi.h", include_str!("../../../bpf/common/abi.h")),
];

/// The infrastructure wrapper object (built by build.rs from `bpf/tenant/api/wrapper.bpf.c`).
pub const WRAPPER_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/wrapper.bpf.o"));

/// Longest a compilation may take.
const CLANG_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest source accepted.
pub const MAX_SOURCE: usize = 1 << 20;
/// Largest object accepted.
pub const MAX_OBJECT: usize = 8 << 20;

/// What a tenant submits.
#[derive(Debug, Clone, Copy)]
pub enum Submission<'a> {
    /// C source using `rampart_tenant.h`.
    C(&'a str),
    /// A BPF ELF object (clang -target bpf -g), defining `tenant_main` in .text.
    Object(&'a [u8]),
}

impl<'a> Submission<'a> {
    /// Classify raw bytes: an ELF object if it starts with the ELF magic, else C source.
    ///
    /// # Errors
    /// Source that is not UTF-8.
    pub fn detect(bytes: &'a [u8]) -> Result<Self> {
        if bytes.starts_with(b"\x7fELF") {
            Ok(Submission::Object(bytes))
        } else {
            std::str::from_utf8(bytes).map(Submission::C).map_err(|_| {
                Error::Invalid("the program is neither a BPF ELF object nor UTF-8 C source".into())
            })
        }
    }
}

/// A checked and linked tenant program.
#[derive(Debug, Clone)]
pub struct Built {
    /// The tenant's own object (as compiled or submitted).
    pub tenant_object: Vec<u8>,
    /// Tenant object linked with the wrapper: what the host agent loads.
    pub linked: Vec<u8>,
    /// What the checks found.
    pub report: CheckReport,
    /// How it was built.
    pub info: BuildInfo,
}

/// How a program was built.
#[derive(Debug, Clone, Serialize)]
pub struct BuildInfo {
    /// `c` or `object`.
    pub from: &'static str,
    /// Compile time (0 for objects).
    pub compile_ms: f64,
    /// clang warnings, if any.
    pub warnings: String,
}

/// The compiler agent.
#[derive(Debug, Clone)]
pub struct Compiler {
    policy: Policy,
    clang: String,
}

/// Find clang the way the build does: `RAMPART_CLANG`, then `clang-14`, then `clang`.
pub fn find_clang() -> Option<String> {
    if let Ok(c) = std::env::var("RAMPART_CLANG") {
        return Some(c);
    }
    ["clang-14", "clang"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        })
        .map(str::to_string)
}

impl Compiler {
    /// A compiler agent enforcing `policy`.
    ///
    /// # Errors
    /// No clang on the machine.
    pub fn new(policy: Policy) -> Result<Self> {
        let clang = find_clang().ok_or_else(|| {
            Error::Invalid("no clang found: install clang 14 (`apt-get install clang-14`) or set RAMPART_CLANG".into())
        })?;
        Ok(Self { policy, clang })
    }

    /// The limits enforced.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Compile (for C), check and link a submission.
    ///
    /// # Errors
    /// [`Error::Compile`] with clang's diagnostics, [`Error::Refused`] with
    /// the confinement rule broken, or a link failure.
    pub fn build(&self, sub: Submission<'_>) -> Result<Built> {
        let dir = tempfile::Builder::new()
            .prefix("rampart-tenant-")
            .tempdir()
            .map_err(|e| Error::io("creating a build directory", e))?;
        let (obj, info) = match sub {
            Submission::C(src) => {
                let t0 = Instant::now();
                let (obj, warnings) = self.compile(src, dir.path())?;
                (
                    obj,
                    BuildInfo {
                        from: "c",
                        compile_ms: t0.elapsed().as_secs_f64() * 1e3,
                        warnings,
                    },
                )
            }
            Submission::Object(b) => {
                if b.len() > MAX_OBJECT {
                    return Err(Error::Invalid(format!(
                        "object of {} bytes exceeds {MAX_OBJECT}",
                        b.len()
                    )));
                }
                (
                    b.to_vec(),
                    BuildInfo {
                        from: "object",
                        compile_ms: 0.0,
                        warnings: String::new(),
                    },
                )
            }
        };
        let mut report = confine::check_elf(&obj, &self.policy)?;
        confine::check_maps(&obj, &self.policy, &mut report)?;
        let linked = link(&obj, dir.path())?;
        Ok(Built {
            tenant_object: obj,
            linked,
            report,
            info,
        })
    }

    fn compile(&self, src: &str, dir: &Path) -> Result<(Vec<u8>, String)> {
        if src.len() > MAX_SOURCE {
            return Err(Error::Invalid(format!(
                "source of {} bytes exceeds {MAX_SOURCE}",
                src.len()
            )));
        }
        check_source(src)?;
        // Everything clang reads or writes lives in build/: the sandbox
        // lets it see nothing else but the system's programs and headers.
        let build = dir.join("build");
        let inc = build.join("include");
        for (rel, text) in HEADERS {
            let p = inc.join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::io("writing the tenant headers", e))?;
            }
            std::fs::write(&p, text).map_err(|e| Error::io("writing the tenant headers", e))?;
        }
        std::fs::write(build.join("tenant.c"), src)
            .map_err(|e| Error::io("writing the tenant source", e))?;
        let sandbox = Sandbox::prepare(&self.clang, &build)?;
        let _give_back = sandbox.as_nobody.then(|| GiveBack(build.clone()));
        let mut cmd = Command::new(&self.clang);
        cmd.args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-Wall",
            "-Wno-unused-function",
            "-fno-color-diagnostics",
        ])
        .arg("-I")
        .arg(&inc)
        .arg("-I/usr/include/x86_64-linux-gnu")
        .arg("-c")
        .arg("tenant.c")
        .arg("-o")
        .arg("tenant.o")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TMPDIR", &build)
        .current_dir(&build)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        sandbox.apply(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| Error::Io {
            context: format!(
                "running {} in its sandbox (Landlock: only /usr and the build directory, no capabilities)",
                self.clang
            ),
            err: e,
        })?;
        let mut stderr = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(e) = stderr.as_mut() {
                let _ = e.take(256 * 1024).read_to_string(&mut s);
            }
            s
        });
        let t0 = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if t0.elapsed() > CLANG_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::Compile {
                        stderr: format!("compilation took longer than {CLANG_TIMEOUT:?}"),
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(Error::io("waiting for clang", e)),
            }
        };
        let diag = reader.join().unwrap_or_default();
        // Paths of the temporary directory mean nothing to the tenant.
        let diag = diag.replace(&format!("{}/", build.display()), "");
        if !status.success() {
            return Err(Error::Compile {
                stderr: diag.trim().to_string(),
            });
        }
        let obj = std::fs::read(build.join("tenant.o"))
            .map_err(|e| Error::io("reading the compiled object", e))?;
        Ok((obj, diag.trim().to_string()))
    }
}

/// The user clang runs as when the agent may switch to it (`nobody`).
const SANDBOX_UID: u32 = 65534;

/// What clang may see of the host when it compiles a tenant's source.
///
/// The source checks ([`check_source`]) are lexical, and a preprocessor
/// and an assembler can be made to read files in ways no lexical check
/// sees (token pasting into `_Pragma` or `asm(".incbin …")`, for example),
/// and the diagnostics go back to the tenant. So clang runs under a
/// Landlock ruleset (the kernel's unprivileged sandbox) that lets it read
/// and execute beneath `/usr` (and `/bin`, `/lib*`, and clang's own prefix
/// when it lives elsewhere) and write only its build directory: no `/etc`,
/// `/root`, `/home`, `/run`, `/var`, no other temporary file — a tenant can
/// make clang read nothing of the host's state. On kernels with Landlock
/// scoping (6.12+) it can signal no process outside the sandbox either.
///
/// It runs with no capabilities and no new privileges: as `nobody` when
/// the agent may switch users (a root shell), else — under the systemd
/// unit, which grants no CAP_SETUID — as the unit's root without any
/// capability (the unit's `SecureBits=noroot` keeps an exec from regaining
/// them; the ambient set is cleared). Landlock rather than a chroot in a
/// mount namespace: it needs no capability, so the unit's exposure stays
/// low. A kernel without Landlock gets no compilation (one line saying
/// so); BPF objects are still accepted.
struct Sandbox {
    /// The ruleset, built here; the child only enforces it.
    ruleset: std::os::fd::OwnedFd,
    /// The build directory was handed to `nobody`, and clang runs as it.
    as_nobody: bool,
}

// The Landlock ABI (linux/landlock.h). By hand: the ruleset must be enforced
// between fork and exec, where only raw system calls are safe.
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_RULE_PATH_BENEATH: u32 = 1;
const FS_EXECUTE: u64 = 1 << 0;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
/// Every file-system right of ABI 1 (execute … make_sym).
const FS_ABI1: u64 = (1 << 13) - 1;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

fn no_landlock_message(e: &std::io::Error) -> String {
    format!(
        "the tenant compiler's sandbox needs Landlock (Linux 5.13 or later with landlock in its lsm= list): {e}; submit a BPF object instead of C source"
    )
}

/// The Landlock ABI version this kernel offers the compiler's sandbox, or
/// the one line saying why tenants cannot submit C source here (BPF
/// objects still work). `rampart run --check` and the daemons' start ask.
///
/// # Errors
/// The kernel has no Landlock (too old, or not in its `lsm=` list).
pub fn sandbox_abi() -> std::result::Result<u32, String> {
    // SAFETY: the version query takes no attribute (NULL, 0).
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi < 1 {
        return Err(no_landlock_message(&std::io::Error::last_os_error()));
    }
    Ok(abi as u32)
}

impl Sandbox {
    /// Build the ruleset (read and execute beneath the system's directories
    /// and clang's prefix, everything beneath `build`) and hand `build` to
    /// `nobody` when this process may.
    fn prepare(clang: &str, build: &Path) -> Result<Self> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let no_landlock = |e: std::io::Error| Error::Invalid(no_landlock_message(&e));
        let abi = sandbox_abi().map_err(Error::Invalid)?;
        let mut fs = FS_ABI1;
        if abi >= 2 {
            fs |= FS_REFER;
        }
        if abi >= 3 {
            fs |= FS_TRUNCATE;
        }
        if abi >= 5 {
            fs |= FS_IOCTL_DEV;
        }
        let scoped = if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        };
        let attr = RulesetAttr {
            handled_access_fs: fs,
            handled_access_net: 0,
            scoped,
        };
        // Older kernels know a shorter struct; its tail must then be zero.
        let size = if abi >= 6 { 24 } else { 8 };
        // SAFETY: attr is a live RulesetAttr of at least `size` bytes.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size as usize,
                0u32,
            )
        };
        if fd < 0 {
            return Err(no_landlock(std::io::Error::last_os_error()));
        }
        // SAFETY: a new file descriptor the kernel just returned, owned here.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut beneath: Vec<(PathBuf, u64)> =
            ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"]
                .iter()
                .map(|d| {
                    (
                        Path::new("/").join(d),
                        FS_EXECUTE | FS_READ_FILE | FS_READ_DIR,
                    )
                })
                .collect();
        // A clang installed outside /usr (RAMPART_CLANG=/opt/llvm/bin/clang)
        // reads its own headers beneath its prefix.
        if let Some(prefix) = clang_prefix(clang) {
            beneath.push((prefix, FS_EXECUTE | FS_READ_FILE | FS_READ_DIR));
        }
        beneath.push((build.to_path_buf(), fs));
        for (dir, access) in beneath {
            // A directory this system lacks (lib32, …) needs no rule.
            let Ok(f) = std::fs::File::open(&dir) else {
                continue;
            };
            let rule = PathBeneathAttr {
                allowed_access: access & fs,
                parent_fd: f.as_raw_fd(),
            };
            // SAFETY: rule is a live PathBeneathAttr; both fds are open.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset.as_raw_fd(),
                    LANDLOCK_RULE_PATH_BENEATH,
                    &rule as *const PathBeneathAttr,
                    0u32,
                )
            };
            if rc < 0 {
                return Err(Error::io(
                    format!("letting the compiler see {}", dir.display()),
                    std::io::Error::last_os_error(),
                ));
            }
        }
        // The sandbox's user reads every file of the build directory and
        // writes its object there. Modes are set, not left to the umask:
        // under the unit (UMask=0077) the files would be 0600 root's.
        open_up(build)?;
        // SAFETY: a plain getter.
        let root = unsafe { libc::geteuid() } == 0;
        let as_nobody =
            root && std::os::unix::fs::chown(build, Some(SANDBOX_UID), Some(SANDBOX_UID)).is_ok();
        Ok(Self { ruleset, as_nobody })
    }

    /// Make `cmd` enter the sandbox between fork and exec.
    fn apply(self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only
        // makes system calls (umask, prctl, setgroups, setgid, setuid,
        // landlock_restrict_self) on values built beforehand: no
        // allocation, no locks.
        unsafe {
            cmd.pre_exec(move || self.enter());
        }
    }

    /// In the child: drop every capability and privilege, then confine.
    fn enter(&self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        fn check(rc: libc::c_long) -> std::io::Result<()> {
            if rc >= 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
        // SAFETY: plain system calls with integer arguments or null.
        unsafe {
            // The object must be readable by the agent, which may hold no
            // CAP_DAC_OVERRIDE (the unit's UMask=0077 is inherited otherwise).
            libc::umask(0o022);
            check(
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL,
                    0,
                    0,
                    0,
                )
                .into(),
            )?;
            if self.as_nobody {
                check(libc::setgroups(0, std::ptr::null()).into())?;
                check(libc::setgid(SANDBOX_UID).into())?;
                check(libc::setuid(SANDBOX_UID).into())?;
            } else if libc::geteuid() == 0 {
                // Root that may not switch users: exec must not hand it
                // root's capabilities (noroot, as the unit sets; setting it
                // needs CAP_SETPCAP, which the unit does not grant).
                let bits = libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0);
                if bits < 0 || bits & libc::SECBIT_NOROOT == 0 {
                    check(
                        libc::prctl(
                            libc::PR_SET_SECUREBITS,
                            libc::SECBIT_NOROOT | libc::SECBIT_NOROOT_LOCKED,
                            0,
                            0,
                            0,
                        )
                        .into(),
                    )?;
                }
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            check(libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0u32,
            ))?;
        }
        Ok(())
    }
}

/// Dirs 0755 and files 0644 under `dir` (and `dir` itself).
fn open_up(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(format!("opening {} to the compiler", p.display()), e))
    };
    set(dir, 0o755)?;
    for e in std::fs::read_dir(dir)
        .map_err(|e| Error::io("reading the build directory", e))?
        .flatten()
    {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            open_up(&p)?;
        } else {
            set(&p, 0o644)?;
        }
    }
    Ok(())
}

/// Takes the build directory back from the sandbox's user when the
/// compilation ends (however it ends), so the temporary directory can be
/// removed without CAP_DAC_OVERRIDE (the unit grants none).
struct GiveBack(PathBuf);

impl Drop for GiveBack {
    fn drop(&mut self) {
        // SAFETY: plain getters of this process's ids.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if let Err(e) = std::os::unix::fs::chown(&self.0, Some(uid), Some(gid)) {
            tracing::warn!(
                "taking {} back from the compiler: {e} (the temporary directory stays)",
                self.0.display()
            );
        }
    }
}

/// The installation prefix of a clang binary (`/usr/lib/llvm-14` for
/// Debian's `clang-14`), found on PATH like the shell would.
fn clang_prefix(clang: &str) -> Option<PathBuf> {
    let path = if clang.contains('/') {
        PathBuf::from(clang)
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(clang))
            .find(|p| p.is_file())?
    };
    let real = path.canonicalize().ok()?;
    Some(real.parent()?.parent()?.to_path_buf())
}

/// Link a checked tenant object with the wrapper (libbpf's static linker).
///
/// # Errors
/// The linker's error (e.g. a symbol clash).
pub fn link(tenant_obj: &[u8], dir: &Path) -> Result<Vec<u8>> {
    let t: PathBuf = dir.join("tenant.checked.o");
    let w = dir.join("wrapper.o");
    let out = dir.join("linked.o");
    std::fs::write(&t, tenant_obj).map_err(|e| Error::io("writing the tenant object", e))?;
    std::fs::write(&w, WRAPPER_OBJ).map_err(|e| Error::io("writing the wrapper object", e))?;
    let mut l =
        libbpf_rs::Linker::new(&out).map_err(|e| Error::bpf("starting the BPF linker", e))?;
    l.add_file(&t).map_err(|e| Error::Refused {
        reason: format!("the BPF linker refused the object: {e}"),
    })?;
    l.add_file(&w).map_err(|e| Error::Refused {
        reason: format!("linking with the infrastructure failed: {e}"),
    })?;
    l.link()
        .map_err(|e| Error::bpf("writing the linked object", e))?;
    drop(l);
    std::fs::read(&out).map_err(|e| Error::io("reading the linked object", e))
}

/// Allowed `#include` targets: the tenant API header and kernel/libbpf UAPI headers.
fn include_allowed(target: &str) -> bool {
    if target == "\"rampart_tenant.h\"" {
        return true;
    }
    let Some(inner) = target.strip_prefix('<').and_then(|t| t.strip_suffix('>')) else {
        return false;
    };
    let ok_chars = inner
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | '.' | '-'));
    ok_chars
        && !inner.contains("..")
        && !inner.contains("//")
        && inner.ends_with(".h")
        && (inner.starts_with("linux/") || inner.starts_with("bpf/") || inner.starts_with("asm/"))
}

/// Directives a tenant source may use besides `#include` (which is checked
/// against [`include_allowed`]). Everything else — `#include_next`,
/// `#import`, `#embed`, `#ident`, GNU line markers, unknown directives — is
/// refused: none is needed for a BPF program and some read host files.
const DIRECTIVES: &[&str] = &[
    "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
    "pragma", "error", "warning", "line",
];

/// Identifiers refused anywhere in a source: they probe the host's files.
const REFUSED_IDENTIFIERS: &[&str] = &["__has_include", "__has_include_next", "__has_embed"];

/// Text refused anywhere, strings included: assembler directives that read
/// host files (`.incbin`, `.include` in inline `asm`).
const REFUSED_TEXT: &[&str] = &["incbin", ".include"];

/// The source as the preprocessor sees its lines: line splices removed
/// (a backslash, optional blanks, a newline — clang accepts the blanks),
/// comments replaced by one space (a block comment spanning lines joins
/// them, as in translation phase 3), string and character literals kept.
/// Returns the logical lines with the original line each starts on.
fn logical_lines(src: &str) -> Vec<(usize, String)> {
    #[derive(Clone, Copy, PartialEq)]
    enum St {
        Code,
        Str(char),
        LineComment,
        BlockComment,
    }
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut line, mut start_line) = (1usize, 1usize);
    let mut st = St::Code;
    let mut i = 0;
    // The next character after line splices, and how many characters (and
    // newlines) the splices took.
    let peek = |mut j: usize| -> (Option<char>, usize, usize) {
        let (mut used, mut nl) = (0, 0);
        loop {
            if chars.get(j) == Some(&'\\') {
                let mut k = j + 1;
                while matches!(chars.get(k), Some(' ' | '\t' | '\x0b' | '\x0c')) {
                    k += 1;
                }
                if chars.get(k) == Some(&'\r') && chars.get(k + 1) == Some(&'\n') {
                    k += 1;
                }
                if chars.get(k) == Some(&'\n') {
                    used += k + 1 - j;
                    nl += 1;
                    j = k + 1;
                    continue;
                }
            }
            return (chars.get(j).copied(), used, nl);
        }
    };
    while i < chars.len() {
        let (c, used, nl) = peek(i);
        i += used;
        line += nl;
        let Some(c) = c else { break };
        let (next, _, _) = peek(i + 1);
        match st {
            St::Code => match c {
                '/' if next == Some('/') => {
                    st = St::LineComment;
                    let (_, u, n) = peek(i + 1);
                    i += 1 + u;
                    line += n;
                }
                '/' if next == Some('*') => {
                    st = St::BlockComment;
                    let (_, u, n) = peek(i + 1);
                    i += 1 + u;
                    line += n;
                    cur.push(' ');
                }
                '"' | '\'' => {
                    st = St::Str(c);
                    cur.push(c);
                }
                '\n' => {
                    out.push((start_line, std::mem::take(&mut cur)));
                    line += 1;
                    start_line = line;
                }
                _ => cur.push(c),
            },
            St::Str(q) => match c {
                '\\' => {
                    cur.push(c);
                    if let Some(n) = next {
                        if n != '\n' {
                            cur.push(n);
                            let (_, u, nl2) = peek(i + 1);
                            i += 1 + u;
                            line += nl2;
                        }
                    }
                }
                '\n' => {
                    // An unterminated literal ends with its line.
                    st = St::Code;
                    out.push((start_line, std::mem::take(&mut cur)));
                    line += 1;
                    start_line = line;
                }
                _ => {
                    cur.push(c);
                    if c == q {
                        st = St::Code;
                    }
                }
            },
            St::LineComment => {
                if c == '\n' {
                    st = St::Code;
                    cur.push(' ');
                    out.push((start_line, std::mem::take(&mut cur)));
                    line += 1;
                    start_line = line;
                }
            }
            St::BlockComment => {
                if c == '\n' {
                    line += 1;
                } else if c == '*' && next == Some('/') {
                    st = St::Code;
                    let (_, u, n) = peek(i + 1);
                    i += 1 + u;
                    line += n;
                }
            }
        }
        i += 1;
    }
    if !cur.is_empty() {
        out.push((start_line, cur));
    }
    out
}

/// The identifiers of a logical line outside string and character literals.
fn identifiers(line: &str) -> Vec<&str> {
    let mut v = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            v.push(&line[s..i]);
        } else if c.is_ascii_digit() {
            // A pp-number (1e10, 0x1f, 42u) is not an identifier.
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    v
}

/// Refuse sources that could make clang read files of the host: only
/// known headers may be included, only the usual directives are allowed
/// (recognised as the preprocessor does: after line splices and comments,
/// `%:` as `#`), and no `__has_include` or assembler `.incbin`/`.include`.
///
/// These checks give a tenant a clear reason; they are not the boundary.
/// Macros can assemble text no lexical check sees, so clang itself runs
/// where it can read nothing of the host but `/usr` (see [`Compiler::build`]).
///
/// # Errors
/// [`Error::Refused`] naming the line.
pub fn check_source(src: &str) -> Result<()> {
    let refuse = |n: usize, what: String| Error::Refused {
        reason: format!("line {n}: {what}"),
    };
    if src.contains('\0') {
        return Err(Error::Refused {
            reason: "the source contains a NUL byte".into(),
        });
    }
    // Trigraphs are off in clang's default C mode; refusing them outright
    // keeps this check true whatever the language mode.
    for (p, _) in src.match_indices("??") {
        let next = src[p + 2..].chars().next();
        if matches!(
            next,
            Some('=' | '/' | '\'' | '(' | ')' | '!' | '<' | '>' | '-')
        ) {
            let n = src[..p].matches('\n').count() + 1;
            return Err(refuse(n, "trigraphs are not allowed".into()));
        }
    }
    for (n, line) in logical_lines(src) {
        for word in REFUSED_TEXT {
            if line.contains(word) {
                return Err(refuse(
                    n,
                    format!("{word:?} is not allowed in tenant sources"),
                ));
            }
        }
        if let Some(id) = identifiers(&line)
            .into_iter()
            .find(|id| REFUSED_IDENTIFIERS.contains(id))
        {
            return Err(refuse(n, format!("{id} is not allowed in tenant sources")));
        }
        let t = line.trim_start_matches([' ', '\t', '\x0b', '\x0c', '\r']);
        let Some(rest) = t.strip_prefix('#').or_else(|| t.strip_prefix("%:")) else {
            continue;
        };
        let rest = rest.trim_start_matches([' ', '\t', '\x0b', '\x0c', '\r']);
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, arg) = rest.split_at(name_len);
        let shown = line.trim();
        if name.is_empty() {
            if arg.trim().is_empty() {
                continue; // the null directive
            }
            return Err(refuse(
                n,
                format!("`{shown}` is not a directive tenant sources may use"),
            ));
        }
        if name == "include" {
            let target = arg.trim();
            if !include_allowed(target) {
                return Err(refuse(
                    n,
                    format!(
                        "`{shown}` — only #include \"rampart_tenant.h\" and <linux/*.h>, <bpf/*.h>, <asm/*.h> headers are allowed"
                    ),
                ));
            }
        } else if !DIRECTIVES.contains(&name) {
            return Err(refuse(
                n,
                format!(
                    "`{shown}` — #{name} is not allowed in tenant sources (allowed: #include, #{})",
                    DIRECTIVES.join(", #")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_are_restricted() {
        check_source("#include \"rampart_tenant.h\"\n#include <linux/if_ether.h>\n# include <bpf/bpf_endian.h> // x\n")
            .unwrap();
        for bad in [
            "/**/#include \"/etc/passwd\"",
            "#/**/include \"/etc/passwd\"",
            "#/*\n*/include \"/etc/passwd\"",
            "%:include \"/etc/passwd\"",
            "%: include </etc/passwd>",
            "#inc\\  \nlude \"/etc/passwd\"",
            "#include <linux/x.h> /* ok */ \"/etc/passwd\"",
            "# 1 \"/etc/passwd\"",
            "#import <linux/bpf.h>",
            "#embed \"/etc/shadow\"",
            "#ident \"x\"",
            "asm(\".include \\\"/etc/passwd\\\"\");",
            "??=include \"/etc/passwd\"",
            "int x = __has_include(<linux/bpf.h>);",
            "int a\0;",
            "#include \"/etc/passwd\"",
            "#include </etc/shadow>",
            "#include <linux/../../etc/passwd.h>",
            "#include MACRO",
            "#inc\\\nlude \"/etc/passwd\"",
            "#include_next <linux/bpf.h>",
            "#if __has_include(\"/etc/x\")\n#endif",
            "asm(\".incbin \\\"/etc/shadow\\\"\");",
            "#include <stdio.h>",
        ] {
            assert!(check_source(bad).is_err(), "accepted: {bad}");
        }
        // What only looks like a directive is not one.
        for good in [
            "// #include \"/etc/passwd\"\nint x;",
            "/* #include </etc/passwd>\n */ int x;",
            "const char *s = \"#include </etc/passwd>\";",
            "int a; // it's fine\n#include <linux/bpf.h>",
            "#if 0\n#error don't\n#endif",
            "int y = 1e10 + 0x1f;",
            "#define X(a) #a\n#pragma once",
        ] {
            check_source(good).unwrap_or_else(|e| panic!("refused {good:?}: {e}"));
        }
    }

    #[test]
    fn the_stock_programs_pass_the_source_checks() {
        for (name, src) in [
            ("dns_ratelimit.c", crate::programs::DNS_RATELIMIT_C),
            ("synproxy.c", crate::programs::SYNPROXY_C),
        ] {
            check_source(src).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn submissions_are_detected() {
        assert!(matches!(
            Submission::detect(b"\x7fELF\x02").unwrap(),
            Submission::Object(_)
        ));
        assert!(matches!(
            Submission::detect(b"int x;").unwrap(),
            Submission::C(_)
        ));
        assert!(Submission::detect(&[0xff, 0xfe, 0]).is_err());
    }

    #[test]
    fn the_wrapper_has_no_writable_data_a_tenant_could_address() {
        use object::{Object, ObjectSection};
        let buf = crate::confine::aligned(WRAPPER_OBJ);
        let f = object::File::parse(&*buf).unwrap();
        for s in f.sections() {
            let n = s.name().unwrap();
            assert!(
                !(n.starts_with(".data") || n.starts_with(".bss") || n.starts_with(".rodata")),
                "wrapper has {n}"
            );
        }
    }
}
