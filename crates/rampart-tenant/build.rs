//! Compiles the per-tenant wrapper (`bpf/tenant/api/wrapper.bpf.c`) into an
//! object the compiler agent links with each tenant program at run time.
//! It is not a rampart-bpf program: `tenant_main` stays an unresolved
//! extern until that link, so it has no skeleton.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn clang() -> String {
    if let Ok(c) = env::var("RAMPART_CLANG") {
        return c;
    }
    for c in ["clang-14", "clang"] {
        if Command::new(c).arg("--version").output().is_ok() {
            return c.to_string();
        }
    }
    panic!("no clang found: install clang 14 (`apt-get install clang-14`) or set RAMPART_CLANG");
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let bpf = manifest
        .join("../../bpf")
        .canonicalize()
        .expect("bpf/ directory");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    for d in ["tenant/api", "tenant", "common"] {
        println!("cargo:rerun-if-changed={}", bpf.join(d).display());
        for e in std::fs::read_dir(bpf.join(d))
            .expect("bpf subdir")
            .flatten()
        {
            println!("cargo:rerun-if-changed={}", e.path().display());
        }
    }
    println!("cargo:rerun-if-env-changed=RAMPART_CLANG");
    let obj = out.join("wrapper.bpf.o");
    let st = Command::new(clang())
        .args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-Wall",
            "-Wno-unused-function",
            "-Werror",
        ])
        .arg("-I/usr/include/x86_64-linux-gnu")
        .arg("-I")
        .arg(&bpf)
        .arg("-c")
        .arg(bpf.join("tenant/api/wrapper.bpf.c"))
        .arg("-o")
        .arg(&obj)
        .status()
        .expect("running clang");
    assert!(
        st.success(),
        "compiling bpf/tenant/api/wrapper.bpf.c failed"
    );
}
