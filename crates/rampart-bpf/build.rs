//! Compiles every `bpf/<dir>/*.bpf.c` (product programs in `common`, `ddos`,
//! `stream`, `tenant`; lab programs in `lab`; probes in `test`) with clang
//! and generates one libbpf-rs skeleton per program. A new program needs no
//! change here: drop the file in one of those directories and it appears as
//! `rampart_bpf::<name>` (for `xdp_foo.bpf.c`, module `xdp_foo`, skeleton
//! `XdpFooSkelBuilder`). Subdirectories are not scanned: `bpf/tenant/api/`
//! is built at run time (tenant programs) and by rampart-tenant.
//!
//! It also reads every `bpf/<dir>/abi.h` into `OUT_DIR/abi_<dir>.rs` (the
//! header's constants and reason labels, see `build/cheader.rs`), which
//! `rampart_bpf::abi::<dir>` includes.

use std::env;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

#[path = "build/cheader.rs"]
mod cheader;

fn clang() -> String {
    if let Ok(c) = env::var("RAMPART_CLANG") {
        return c;
    }
    // Debian 12 ships clang 14 as `clang-14` and (with the `clang` package) `clang`.
    for c in ["clang-14", "clang"] {
        if Command::new(c).arg("--version").output().is_ok() {
            return c.to_string();
        }
    }
    panic!(
        "no clang found: install clang 14 (`apt-get install clang-14`) or set RAMPART_CLANG; \
         `./run test` installs it for you"
    );
}

fn rerun_dir(dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                rerun_dir(&p);
            } else {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let bpf_dir = manifest
        .join("../../bpf")
        .canonicalize()
        .expect("bpf/ directory");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    rerun_dir(&bpf_dir);
    println!("cargo:rerun-if-env-changed=RAMPART_CLANG");

    abi_consts(&bpf_dir, &out);

    let clang = clang();
    let mut progs: Vec<PathBuf> = Vec::new();
    for dir in fs::read_dir(&bpf_dir).expect("bpf/").flatten() {
        if dir.path().is_dir() {
            progs.extend(
                fs::read_dir(dir.path())
                    .expect("bpf/<dir>")
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.to_string_lossy().ends_with(".bpf.c")),
            );
        }
    }
    progs.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    // Modules are named by the file alone: two programs may not share one.
    for w in progs.windows(2) {
        assert!(
            w[0].file_name() != w[1].file_name(),
            "{} and {} would both be rampart_bpf::{}: rename one",
            w[0].display(),
            w[1].display(),
            w[0].file_name()
                .unwrap()
                .to_string_lossy()
                .trim_end_matches(".bpf.c")
        );
    }

    let mut index = String::new();
    for src in &progs {
        let file = src.file_name().and_then(OsStr::to_str).unwrap();
        let name = file.trim_end_matches(".bpf.c");
        let skel = out.join(format!("{name}.skel.rs"));
        let obj = out.join(format!("{name}.bpf.o"));
        SkeletonBuilder::new()
            .source(src)
            .obj(&obj)
            .clang(&clang)
            .clang_args([
                OsStr::new("-I/usr/include/x86_64-linux-gnu"),
                OsStr::new("-I"),
                bpf_dir.as_os_str(),
                OsStr::new("-Wall"),
                OsStr::new("-Wno-unused-function"),
                OsStr::new("-Werror"),
            ])
            .reference_obj(true)
            .build_and_generate(&skel)
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
        writeln!(
            index,
            "#[allow(clippy::all, clippy::pedantic, missing_docs, non_camel_case_types, \
             non_snake_case, non_upper_case_globals, dead_code, unused_imports, \
             unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]\n\
             pub mod {name} {{ include!(concat!(env!(\"OUT_DIR\"), \"/{name}.skel.rs\")); }}"
        )
        .unwrap();
        writeln!(
            index,
            "/// Path of the compiled object, for tools that inspect it (instruction counts, maps).\n\
             pub const {}_OBJ: &str = concat!(env!(\"OUT_DIR\"), \"/{name}.bpf.o\");",
            name.to_uppercase()
        )
        .unwrap();
    }
    fs::write(out.join("skels.rs"), index).unwrap();
}

/// `OUT_DIR/abi_<dir>.rs` for every `bpf/<dir>/abi.h`; `common` first, as
/// the others include it (its names may appear in their expressions).
fn abi_consts(bpf_dir: &Path, out: &Path) {
    let mut dirs: Vec<String> = fs::read_dir(bpf_dir)
        .expect("bpf/")
        .flatten()
        .filter(|e| e.path().join("abi.h").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort_by_key(|d| (d != "common", d.clone()));
    let mut common = std::collections::BTreeMap::new();
    for dir in dirs {
        let file = format!("bpf/{dir}/abi.h");
        let src = fs::read_to_string(bpf_dir.join(&dir).join("abi.h")).expect("reading abi.h");
        let mut known = common.clone();
        let header = cheader::parse(&file, &src, &mut known).unwrap_or_else(|e| panic!("{e}"));
        if dir == "common" {
            common = known;
        }
        fs::write(
            out.join(format!("abi_{dir}.rs")),
            cheader::rust(&file, &header),
        )
        .unwrap();
    }
}
