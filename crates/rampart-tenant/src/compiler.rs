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
        let inc = dir.join("include");
        for (rel, text) in HEADERS {
            let p = inc.join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::io("writing the tenant headers", e))?;
            }
            std::fs::write(&p, text).map_err(|e| Error::io("writing the tenant headers", e))?;
        }
        let c = dir.join("tenant.c");
        let o = dir.join("tenant.o");
        std::fs::write(&c, src).map_err(|e| Error::io("writing the tenant source", e))?;
        let mut child = Command::new(&self.clang)
            .args([
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
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(format!("running {}", self.clang), e))?;
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
        let diag = diag.replace(&format!("{}/", dir.display()), "");
        if !status.success() {
            return Err(Error::Compile {
                stderr: diag.trim().to_string(),
            });
        }
        let obj = std::fs::read(&o).map_err(|e| Error::io("reading the compiled object", e))?;
        Ok((obj, diag.trim().to_string()))
    }
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
    let inner = &target[1..target.len() - 1];
    if inner == "rampart_tenant.h" {
        return true;
    }
    if !target.starts_with('<') {
        return false;
    }
    let ok_chars = inner
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | '.' | '-'));
    ok_chars
        && !inner.contains("..")
        && inner.ends_with(".h")
        && (inner.starts_with("linux/") || inner.starts_with("bpf/") || inner.starts_with("asm/"))
}

/// Refuse sources that could make clang read files of the host: only
/// known headers may be included, and no `__has_include` or `.incbin`.
///
/// # Errors
/// [`Error::Refused`] naming the line.
pub fn check_source(src: &str) -> Result<()> {
    // Line splices first, as the preprocessor does.
    let joined = src.replace("\\\r\n", "").replace("\\\n", "");
    for word in ["__has_include", "incbin", "#embed"] {
        if joined.contains(word) {
            return Err(Error::Refused {
                reason: format!("{word:?} is not allowed in tenant sources"),
            });
        }
    }
    for (n, line) in joined.lines().enumerate() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix('#') else {
            continue;
        };
        let rest = rest.trim_start();
        let directive: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphabetic() || *c == '_')
            .collect();
        if matches!(
            directive.as_str(),
            "include" | "include_next" | "import" | "embed"
        ) {
            let arg = rest[directive.len()..].trim();
            let target_end = match arg.chars().next() {
                Some('<') => arg.find('>'),
                Some('"') => arg[1..].find('"').map(|i| i + 1),
                _ => None,
            };
            let ok = target_end.is_some_and(|e| {
                let target = &arg[..=e];
                let tail = arg[e + 1..].trim();
                directive == "include"
                    && include_allowed(target)
                    && (tail.is_empty() || tail.starts_with("//"))
            });
            if !ok {
                return Err(Error::Refused {
                    reason: format!(
                        "line {}: `{}` — only #include \"rampart_tenant.h\" and <linux/*.h>, <bpf/*.h> headers are allowed",
                        n + 1,
                        line.trim()
                    ),
                });
            }
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
