//! Tenant C sources before they reach clang (`PUT /v1/program` with C):
//! the lexical checks of `rampart_tenant::compiler::check_source` never
//! panic, refuse in one line, and never accept a source in which a second,
//! independently written reading of the preprocessor's rules (line splices
//! first, then comments and literals, `%:` for `#`) finds a directive other
//! than the allowed ones or an `#include` of anything but the tenant header
//! and kernel/libbpf headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_tenant::compiler::check_source;

/// Translation phase 2: every backslash followed by blanks and a newline goes.
fn splice(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    let mut i = 0;
    while i < src.len() {
        if src[i] == b'\\' {
            let mut j = i + 1;
            while j < src.len() && matches!(src[j], b' ' | b'\t' | 0x0b | 0x0c) {
                j += 1;
            }
            if j < src.len() && src[j] == b'\r' && src.get(j + 1) == Some(&b'\n') {
                j += 1;
            }
            if j < src.len() && src[j] == b'\n' {
                i = j + 1;
                continue;
            }
        }
        out.push(src[i]);
        i += 1;
    }
    out
}

/// Translation phase 3: comments become one space; literals stay.
fn uncomment(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match (s[i], s.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < s.len() && s[i] != b'\n' {
                    i += 1;
                }
                out.push(b' ');
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i < s.len() && !(s[i] == b'*' && s.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
                out.push(b' ');
            }
            (q @ (b'"' | b'\''), _) => {
                out.push(q);
                i += 1;
                while i < s.len() && s[i] != q && s[i] != b'\n' {
                    if s[i] == b'\\' && i + 1 < s.len() && s[i + 1] != b'\n' {
                        out.push(s[i]);
                        i += 1;
                    }
                    out.push(s[i]);
                    i += 1;
                }
                if i < s.len() && s[i] == q {
                    out.push(q);
                    i += 1;
                }
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

const ALLOWED: &[&str] = &[
    "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
    "pragma", "error", "warning", "line",
];

fn include_ok(arg: &str) -> bool {
    if arg == "\"rampart_tenant.h\"" {
        return true;
    }
    let Some(p) = arg.strip_prefix('<').and_then(|a| a.strip_suffix('>')) else {
        return false;
    };
    ["linux/", "bpf/", "asm/"].iter().any(|d| p.starts_with(d))
        && p.ends_with(".h")
        && !p.contains("..")
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_/.-".contains(&b))
}

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = check_source(src) {
        let m = e.to_string();
        assert!(!m.contains('\n'), "one-line refusal: {m:?}");
        return;
    }
    let text = uncomment(&splice(data));
    for line in text.split(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let t = line.trim_start_matches([' ', '\t', '\x0b', '\x0c', '\r']);
        let Some(rest) = t.strip_prefix('#').or_else(|| t.strip_prefix("%:")) else {
            continue;
        };
        let rest = rest.trim_start_matches([' ', '\t', '\x0b', '\x0c', '\r']);
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let (name, arg) = rest.split_at(n);
        let ok = if name.is_empty() {
            arg.trim().is_empty()
        } else if name == "include" {
            include_ok(arg.trim())
        } else {
            ALLOWED.contains(&name)
        };
        assert!(ok, "accepted a source with the directive {line:?}:\n{src}");
    }
});
