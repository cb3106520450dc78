//! Confinement: every hostile tenant program is refused with a reason the
//! tenant can act on — by the compiler agent before anything reaches the
//! kernel, or by the verifier, whose log goes back to the tenant.

mod common;

use rampart_tenant::compiler::{Compiler, Submission};
use rampart_tenant::confine::Policy;
use rampart_tenant::Error;

fn refused(src: &str, policy: Policy) -> String {
    match Compiler::new(policy).unwrap().build(Submission::C(src)) {
        Err(Error::Refused { reason }) => reason,
        Err(e) => panic!("expected a refusal, got: {e}"),
        Ok(_) => panic!("hostile program accepted:\n{src}"),
    }
}

fn main_with(body: &str) -> String {
    with_decls("", body)
}

fn with_decls(decls: &str, body: &str) -> String {
    format!("#include \"rampart_tenant.h\"\n{decls}\nint tenant_main(struct xdp_md *ctx)\n{{\n{body}\n}}\n")
}

const HASH_MAP: &str = r#"
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16);
    __type(key, __u32);
    __type(value, __u64);
} m SEC(".maps");
"#;

#[test]
fn forbidden_helpers_are_refused_even_when_called_by_number() {
    for (id, name) in [
        (4, "bpf_probe_read"),
        (113, "bpf_probe_read_kernel"),
        (6, "bpf_trace_printk"),
        (23, "bpf_redirect"),
        (51, "bpf_redirect_map"),
        (12, "bpf_tail_call"),
        (181, "bpf_loop"),
        (14, "#14"),
    ] {
        let src = main_with(&format!(
            "long (*h)(long, long, long) = (void *){id};\nreturn h((long)ctx, 8, 0) ? XDP_PASS : XDP_DROP;"
        ));
        let why = refused(&src, Policy::default());
        assert!(why.contains(name), "helper {id}: {why}");
    }
}

#[test]
fn the_api_header_stops_forbidden_helpers_at_compile_time() {
    let src = main_with("char b[8];\nbpf_probe_read_kernel(b, 8, (void *)ctx);\nreturn XDP_PASS;");
    match Compiler::new(Policy::default())
        .unwrap()
        .build(Submission::C(&src))
    {
        Err(Error::Compile { stderr }) => assert!(stderr.contains("poisoned"), "{stderr}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn foreign_symbols_and_infrastructure_names_are_refused() {
    // An extern variable (another object's map or data).
    let why = refused(
        &with_decls(
            "extern __u64 other_tenant_counts;",
            "return other_tenant_counts ? XDP_PASS : XDP_DROP;",
        ),
        Policy::default(),
    );
    assert!(
        why.contains("extern symbol \"other_tenant_counts\""),
        "{why}"
    );
    // A kfunc / kernel symbol.
    let why = refused(
        &with_decls(
            "extern void bpf_rcu_read_lock(void) __ksym;",
            "bpf_rcu_read_lock();\nreturn XDP_PASS;",
        ),
        Policy::default(),
    );
    assert!(
        why.contains("extern symbol") || why.contains("kfunc"),
        "{why}"
    );
    // Defining (or shadowing) one of the infrastructure's maps.
    let src = with_decls(
        &HASH_MAP.replace("} m SEC", "} rampart_t_used SEC"),
        "__u32 k = 0;\nreturn bpf_map_lookup_elem(&rampart_t_used, &k) ? XDP_PASS : XDP_DROP;",
    );
    let why = refused(&src, Policy::default());
    assert!(
        why.contains("\"rampart_t_used\"") && why.contains("infrastructure"),
        "{why}"
    );
    // A weak definition could be overridden at link time.
    let src = with_decls(
        "__attribute__((weak)) int knob = 1;",
        "return knob ? XDP_PASS : XDP_DROP;",
    );
    assert!(refused(&src, Policy::default()).contains("weak"));
}

#[test]
fn program_sections_entry_point_and_license_are_checked() {
    let src = "#include \"rampart_tenant.h\"\nSEC(\"xdp\") int tenant_main(struct xdp_md *ctx) { return XDP_PASS; }\n";
    assert!(refused(src, Policy::default()).contains("holds a program"));
    let src = "#include \"rampart_tenant.h\"\nstatic __attribute__((noinline)) int tenant_main2(struct xdp_md *c) { return XDP_PASS; }\nint other(struct xdp_md *ctx) { return tenant_main2(ctx); }\n";
    assert!(refused(src, Policy::default()).contains("no tenant_main()"));
    let src = with_decls(
        "char LICENSE[] SEC(\"license\") = \"Proprietary\";",
        "return XDP_PASS;",
    );
    assert!(refused(&src, Policy::default()).contains("license"));
}

#[test]
fn forbidden_map_types_pinning_and_memory_are_refused() {
    let prog_array = HASH_MAP
        .replace("BPF_MAP_TYPE_HASH", "BPF_MAP_TYPE_PROG_ARRAY")
        .replace("__type(value, __u64)", "__type(value, __u32)");
    let src = with_decls(&prog_array, "return XDP_PASS;");
    assert!(refused(&src, Policy::default()).contains("not allowed"));
    let devmap = HASH_MAP
        .replace("BPF_MAP_TYPE_HASH", "BPF_MAP_TYPE_DEVMAP")
        .replace("__type(value, __u64)", "__type(value, __u32)");
    let src = with_decls(&devmap, "return XDP_PASS;");
    assert!(refused(&src, Policy::default()).contains("type #14"));
    let pinned = HASH_MAP.replace(
        "__uint(max_entries, 16);",
        "__uint(max_entries, 16);\n    __uint(pinning, LIBBPF_PIN_BY_NAME);",
    );
    let src = with_decls(
        &pinned,
        "__u32 k = 0;\nreturn bpf_map_lookup_elem(&m, &k) ? XDP_PASS : XDP_DROP;",
    );
    assert!(refused(&src, Policy::default()).contains("pinning"));
    let huge = HASH_MAP.replace("max_entries, 16", "max_entries, 10000000");
    let src = with_decls(
        &huge,
        "__u32 k = 0;\nreturn bpf_map_lookup_elem(&m, &k) ? XDP_PASS : XDP_DROP;",
    );
    assert!(refused(&src, Policy::default()).contains("budget"));
}

#[test]
fn the_instruction_budget_is_enforced() {
    let body = "void *d = (void *)(long)ctx->data, *e = (void *)(long)ctx->data_end;\n\
                __u8 *p = d; __u32 s = 0;\nif (p + 64 > (__u8 *)e) return XDP_DROP;\n\
                #pragma unroll\nfor (int i = 0; i < 64; i++) s = s * 31 + p[i];\nreturn s & 1 ? XDP_PASS : XDP_DROP;";
    let why = refused(
        &main_with(body),
        Policy {
            max_insns: 100,
            ..Policy::default()
        },
    );
    assert!(why.contains("exceed the budget of 100"), "{why}");
    // The same program fits the default budget.
    Compiler::new(Policy::default())
        .unwrap()
        .build(Submission::C(&main_with(body)))
        .unwrap();
}

#[test]
fn host_files_cannot_be_pulled_into_a_build() {
    let why = refused(
        "#include \"/etc/passwd\"\nint tenant_main(void *c) { return 2; }",
        Policy::default(),
    );
    assert!(why.contains("only #include"), "{why}");
    let why = refused(
        &main_with("asm volatile(\".incbin \\\"/etc/shadow\\\"\");\nreturn XDP_PASS;"),
        Policy::default(),
    );
    assert!(why.contains("incbin"), "{why}");
    // What only the preprocessor sees as a directive: comments before and
    // inside the directive, a digraph, a line splice with blanks after the
    // backslash.
    for src in [
        "/**/#include \"/etc/passwd\"\n",
        "#/**/include \"/etc/passwd\"\n",
        "%:include \"/etc/passwd\"\n",
        "#inc\\ \nlude \"/etc/passwd\"\n",
    ] {
        let why = refused(
            &format!("{src}int tenant_main(void *c) {{ return 2; }}"),
            Policy::default(),
        );
        assert!(why.contains("only #include"), "{src:?}: {why}");
    }
}

/// A file of the host with a line no compiler output may ever show.
fn host_secret() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("host_secret_{}_xyzzy", std::process::id());
    let p = dir.path().join("secret.h");
    std::fs::write(&p, format!("{marker} = 1;\n")).unwrap();
    (dir, p, marker)
}

#[test]
fn the_compiler_sees_no_host_file_whatever_the_source_assembles() {
    // Lexical checks cannot see through macros: token pasting assembles an
    // assembler `.include` of a host file. clang runs where no host file
    // but /usr exists, so the build fails without showing the file.
    let (_dir, path, marker) = host_secret();
    let src = format!(
        "#include \"rampart_tenant.h\"\n\
         #define STR(x) #x\n#define XSTR(x) STR(x)\n#define CAT(a, b) a##b\n\
         asm(XSTR(CAT(.inc, lude)) \" \\\"{}\\\"\");\n\
         int tenant_main(struct xdp_md *ctx) {{ return XDP_PASS; }}\n",
        path.display()
    );
    match Compiler::new(Policy::default())
        .unwrap()
        .build(Submission::C(&src))
    {
        Err(Error::Compile { stderr }) => {
            assert!(!stderr.contains(&marker), "the host file leaked: {stderr}");
            assert!(
                stderr.contains("secret.h"),
                "the assembler was asked for the file and could not open it: {stderr}"
            );
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    // The same file is readable outside the sandbox (the test is not vacuous).
    assert!(std::fs::read_to_string(&path).unwrap().contains(&marker));
}

#[test]
fn objects_are_checked_like_sources() {
    // A good object compiled by the tenant is accepted…
    let good = common::build(&common::counter_prog(1, "XDP_DROP"));
    Compiler::new(Policy::default())
        .unwrap()
        .build(Submission::Object(&good.tenant_object))
        .unwrap();
    // …a hostile one is refused for the same reason as its source…
    let bad = {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("x.c");
        std::fs::write(&c, "#include <linux/bpf.h>\nint tenant_main(struct xdp_md *ctx) { long (*h)(long) = (void *)4; return h(0); }\n").unwrap();
        let o = dir.path().join("x.o");
        let st = std::process::Command::new(rampart_tenant::compiler::find_clang().unwrap())
            .args([
                "-O2",
                "-g",
                "-target",
                "bpf",
                "-I/usr/include/x86_64-linux-gnu",
                "-c",
            ])
            .arg(&c)
            .arg("-o")
            .arg(&o)
            .status()
            .unwrap();
        assert!(st.success());
        std::fs::read(&o).unwrap()
    };
    match Compiler::new(Policy::default())
        .unwrap()
        .build(Submission::Object(&bad))
    {
        Err(Error::Refused { reason }) => assert!(reason.contains("bpf_probe_read"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // …and an ELF for another machine is not a BPF object.
    let host_elf = std::fs::read("/bin/true").unwrap();
    match Compiler::new(Policy::default())
        .unwrap()
        .build(Submission::Object(&host_elf))
    {
        Err(Error::Refused { reason }) => assert!(reason.contains("not BPF"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_verifier_log_goes_back_to_the_tenant() {
    let mut a = common::agent("", false);
    // Reads the packet without a bounds check.
    let src = main_with("__u8 *p = (void *)(long)ctx->data;\nreturn p[40] ? XDP_PASS : XDP_DROP;");
    let built = common::build(&src);
    let id = a.tenant_id("a").unwrap();
    let g = a.generation();
    match a.install(id, &built) {
        Err(Error::Verifier { summary, log }) => {
            assert!(log.contains("invalid access to packet"), "log: {log}");
            assert!(
                summary.contains("invalid access to packet"),
                "summary: {summary}"
            );
        }
        other => panic!("expected a verifier rejection, got {other:?}"),
    }
    // Nothing changed: same generation, no program.
    assert_eq!(a.generation(), g);
    assert!(a.program(id).is_none());
}
