//! The integer constants of an ABI header (`bpf/<dir>/abi.h`), read by
//! rampart-bpf's build script so Rust never retypes a value that C defines.
//!
//! What is read:
//!  - every `#define NAME VALUE` whose value is an integer constant
//!    expression (literals with `u`/`l` suffixes, earlier names, parentheses,
//!    `+ - * / % << >> & | ^ ~`); include guards are skipped, anything else
//!    (a function-like macro, a string, `#if`) is an error: an ABI header
//!    holds only what Rust can see;
//!  - every enum member (`NAME = VALUE,` or `NAME,`).
//!
//! Each becomes `pub const NAME: T = value;`, documented with the C comment
//! right above it. T is `u32` (`u64` when the value does not fit, `i32`/`i64`
//! when negative) unless the line says otherwise in a trailing
//! `/* rust: T */` (on the `enum name {` line for all its members).
//!
//! An enum whose last member is `<PREFIX>MAX` — PREFIX being what all its
//! member names share up to an underscore — is a list of reasons: its
//! values must be 0, 1, ... and it also becomes `<ENUM NAME>_LABELS`, the
//! metric label of each value (the member name without PREFIX, lower-cased).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One constant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Const {
    /// C name.
    pub name: String,
    /// Value.
    pub value: i128,
    /// Rust type.
    pub ty: String,
    /// The C comment above it, `*` margins removed.
    pub doc: String,
    /// 1-based line in the header.
    pub line: usize,
    /// Written in hex in C (and so in Rust).
    pub hex: bool,
}

/// A reason enum's label table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    /// C enum name (`ddos_drop_reason`).
    pub enum_name: String,
    /// The prefix removed from each member name (`DDOS_DROP_`).
    pub prefix: String,
    /// Labels in value order.
    pub labels: Vec<String>,
}

/// What one header defines.
#[derive(Debug, Default)]
pub struct Header {
    /// Constants in header order.
    pub consts: Vec<Const>,
    /// Label tables in header order.
    pub labels: Vec<Labels>,
}

/// Rust types a `/* rust: T */` annotation may name.
const TYPES: [&str; 9] = [
    "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64",
];

fn fits(ty: &str, v: i128) -> bool {
    let (lo, hi): (i128, i128) = match ty {
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        // usize is at least 32 bits on every target rampart builds for.
        "u64" | "usize" => (0, u64::MAX.into()),
        "i8" => (i8::MIN.into(), i8::MAX.into()),
        "i16" => (i16::MIN.into(), i16::MAX.into()),
        "i32" => (i32::MIN.into(), i32::MAX.into()),
        _ => (i64::MIN.into(), i64::MAX.into()),
    };
    (lo..=hi).contains(&v)
}

fn default_type(v: i128) -> &'static str {
    ["u32", "u64", "i32", "i64"]
        .into_iter()
        .find(|t| fits(t, v))
        .unwrap_or("i128")
}

/// Splits `code /* comment */` (or `// comment`) into the code and the comment text.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    if let Some(i) = line.find("/*") {
        let rest = &line[i + 2..];
        let end = rest.find("*/").unwrap_or(rest.len());
        return (line[..i].trim(), Some(rest[..end].trim()));
    }
    if let Some(i) = line.find("//") {
        return (line[..i].trim(), Some(line[i + 2..].trim()));
    }
    (line.trim(), None)
}

/// The type a trailing comment names with `rust: T`.
fn annotation(comment: Option<&str>) -> Result<Option<String>, String> {
    let Some(c) = comment else { return Ok(None) };
    let Some(i) = c.find("rust:") else {
        return Ok(None);
    };
    let ty = c[i + 5..].split_whitespace().next().unwrap_or("");
    if TYPES.contains(&ty) {
        Ok(Some(ty.to_string()))
    } else {
        Err(format!(
            "`rust: {ty}` is not a type rampart-bpf emits (one of {})",
            TYPES.join(", ")
        ))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(i128),
    Name(String),
    Op(&'static str),
}

fn tokens(s: &str) -> Result<Vec<Tok>, String> {
    const OPS: [&str; 14] = [
        "<<", ">>", "(", ")", "+", "-", "*", "/", "%", "&", "|", "^", "~", ",",
    ];
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i] as char).is_ascii_alphanumeric() {
                i += 1;
            }
            let lit = &s[start..i];
            let digits = lit.trim_end_matches(['u', 'U', 'l', 'L']);
            let v = if let Some(h) = digits
                .strip_prefix("0x")
                .or_else(|| digits.strip_prefix("0X"))
            {
                i128::from_str_radix(h, 16)
            } else if digits.len() > 1 && digits.starts_with('0') {
                return Err(format!("octal literal `{lit}`: write it in decimal or hex"));
            } else {
                digits.parse()
            };
            out.push(Tok::Num(v.map_err(|_| format!("bad literal `{lit}`"))?));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(s[start..i].to_string()));
        } else if let Some(op) = OPS.iter().find(|op| s[i..].starts_with(**op)) {
            if *op == "," {
                return Err("a comma in a constant expression".into());
            }
            out.push(Tok::Op(op));
            i += op.len();
        } else {
            return Err(format!("unexpected `{c}`"));
        }
    }
    Ok(out)
}

/// Precedence-climbing evaluator over C's integer operators.
struct Eval<'a> {
    toks: Vec<Tok>,
    pos: usize,
    known: &'a BTreeMap<String, i128>,
}

impl Eval<'_> {
    fn peek_op(&self) -> Option<&'static str> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(o)) => Some(o),
            _ => None,
        }
    }

    fn primary(&mut self) -> Result<i128, String> {
        let t = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or("expression ends early")?;
        self.pos += 1;
        match t {
            Tok::Num(v) => Ok(v),
            Tok::Name(n) => self
                .known
                .get(&n)
                .copied()
                .ok_or_else(|| format!("`{n}` is not a constant defined above")),
            Tok::Op("(") => {
                let v = self.binary(0)?;
                if self.peek_op() != Some(")") {
                    return Err("missing `)`".into());
                }
                self.pos += 1;
                Ok(v)
            }
            Tok::Op("-") => Ok(-self.primary()?),
            Tok::Op("+") => self.primary(),
            Tok::Op("~") => {
                // C's ~ on the 32-bit unsigned values these headers use.
                let v = self.primary()?;
                u32::try_from(v)
                    .map(|x| i128::from(!x))
                    .map_err(|_| format!("`~` of {v}, which is not a 32-bit unsigned value"))
            }
            Tok::Op(o) => Err(format!("unexpected `{o}`")),
        }
    }

    fn binary(&mut self, min_prec: u8) -> Result<i128, String> {
        let mut lhs = self.primary()?;
        while let Some(op) = self.peek_op() {
            let prec = match op {
                "|" => 1,
                "^" => 2,
                "&" => 3,
                "<<" | ">>" => 4,
                "+" | "-" => 5,
                "*" | "/" | "%" => 6,
                _ => break,
            };
            if prec < min_prec {
                break;
            }
            self.pos += 1;
            let rhs = self.binary(prec + 1)?;
            let overflow = || format!("`{lhs} {op} {rhs}` overflows");
            lhs = match op {
                "|" => lhs | rhs,
                "^" => lhs ^ rhs,
                "&" => lhs & rhs,
                "<<" => u32::try_from(rhs)
                    .ok()
                    .filter(|s| *s < 64)
                    .and_then(|s| lhs.checked_shl(s))
                    .ok_or_else(overflow)?,
                ">>" => lhs >> u32::try_from(rhs).map_err(|_| overflow())?.min(127),
                "+" => lhs.checked_add(rhs).ok_or_else(overflow)?,
                "-" => lhs.checked_sub(rhs).ok_or_else(overflow)?,
                "*" => lhs.checked_mul(rhs).ok_or_else(overflow)?,
                "/" => lhs.checked_div(rhs).ok_or_else(overflow)?,
                _ => lhs.checked_rem(rhs).ok_or_else(overflow)?,
            };
        }
        Ok(lhs)
    }
}

/// Evaluate a C integer constant expression over the constants in `known`.
pub fn eval(expr: &str, known: &BTreeMap<String, i128>) -> Result<i128, String> {
    let toks = tokens(expr)?;
    if toks.is_empty() {
        return Err("no value".into());
    }
    let mut e = Eval {
        toks,
        pos: 0,
        known,
    };
    let v = e.binary(0)?;
    if e.pos != e.toks.len() {
        return Err(format!("unexpected {:?}", e.toks[e.pos]));
    }
    Ok(v)
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// The comment block text: margins (`/*`, ` * `, `*/`) removed, one line per line.
fn comment_text(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("/*").unwrap_or(l);
            let l = l.strip_suffix("*/").unwrap_or(l).trim();
            let l = l.strip_prefix('*').unwrap_or(l);
            l.trim().to_string()
        })
        .skip_while(String::is_empty)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

/// The label prefix of a reason enum: what every member name shares, up to
/// and including an underscore, when the last member is `<prefix>MAX`.
fn label_prefix(members: &[String]) -> Option<String> {
    let last = members.last()?;
    if members.len() < 2 || !last.ends_with("_MAX") {
        return None;
    }
    let first = &members[0];
    let mut n = first.len();
    for m in members {
        n = n.min(
            first
                .bytes()
                .zip(m.bytes())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    let prefix = &first[..first[..n].rfind('_')? + 1];
    Some(prefix.to_string())
}

/// The enum being read: inside `enum name {`.
struct OpenEnum {
    name: String,
    /// The `rust: T` of its opening line.
    ty: Option<String>,
    /// Member names so far.
    members: Vec<String>,
    /// The value of a member without `= VALUE`.
    next: i128,
    /// Line of `enum name {`.
    start: usize,
}

/// Parse one ABI header. `file` names it in errors; `known` holds the
/// constants of headers it includes (it gains this header's).
///
/// # Errors
/// `file:line: what` for anything an ABI header may not hold.
pub fn parse(file: &str, src: &str, known: &mut BTreeMap<String, i128>) -> Result<Header, String> {
    let mut h = Header::default();
    let mut doc: Vec<&str> = Vec::new();
    let mut in_comment = false;
    let mut comment: Vec<&str> = Vec::new();
    let mut en: Option<OpenEnum> = None;
    let mut depth = 0usize;

    for (i, raw) in src.lines().enumerate() {
        let line_no = i + 1;
        let err = |m: String| format!("{file}:{line_no}: {m}");
        let line = raw.trim();
        if in_comment {
            comment.push(line);
            if line.contains("*/") {
                in_comment = false;
                doc = std::mem::take(&mut comment);
            }
            continue;
        }
        if line.starts_with("/*") {
            if line.contains("*/") {
                doc = vec![line];
            } else {
                in_comment = true;
                comment = vec![line];
            }
            continue;
        }
        if line.starts_with("//") {
            doc = vec![line.trim_start_matches('/')];
            continue;
        }
        if line.find("/*").is_some_and(|i| !line[i..].contains("*/")) {
            return Err(err(
                "a comment that starts after code ends on the same line here".into(),
            ));
        }
        let (code, trailing) = split_comment(line);
        let take_doc = |doc: &mut Vec<&str>| {
            let d = comment_text(doc);
            doc.clear();
            if d.is_empty() {
                trailing
                    .filter(|t| !t.starts_with("rust:"))
                    .unwrap_or_default()
                    .to_string()
            } else {
                d
            }
        };

        if let Some(rest) = code.strip_prefix('#') {
            let rest = rest.trim_start();
            let (kw, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            match kw {
                "define" => {
                    let args = args.trim();
                    let name_end = args
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(args.len());
                    let (name, value) = args.split_at(name_end);
                    if value.starts_with('(') {
                        return Err(err(format!(
                            "function-like macro {name}: an ABI header holds only constants (move it to a helper header)"
                        )));
                    }
                    let value = value.trim();
                    if value.ends_with('\\') {
                        return Err(err(format!("{name}: a define continued over lines")));
                    }
                    if value.is_empty() {
                        // An include guard.
                        doc.clear();
                        continue;
                    }
                    let v = eval(value, known).map_err(|e| {
                        err(format!(
                            "#define {name} {value}: {e} (an ABI header holds only integer constants)"
                        ))
                    })?;
                    let ty = annotation(trailing)
                        .map_err(&err)?
                        .unwrap_or_else(|| default_type(v).to_string());
                    if !fits(&ty, v) {
                        return Err(err(format!("{name} = {v} does not fit {ty}")));
                    }
                    if known.insert(name.to_string(), v).is_some() {
                        return Err(err(format!("{name} is defined twice")));
                    }
                    h.consts.push(Const {
                        name: name.to_string(),
                        value: v,
                        ty,
                        doc: take_doc(&mut doc),
                        line: line_no,
                        hex: value.contains("0x"),
                    });
                }
                "include" | "ifndef" | "endif" => doc.clear(),
                _ => {
                    return Err(err(format!(
                        "#{kw}: an ABI header has no conditionals or other directives (Rust reads it as plain constants)"
                    )))
                }
            }
            continue;
        }

        if let Some(OpenEnum {
            name,
            ty,
            members,
            next,
            start,
        }) = en.as_mut()
        {
            if code.starts_with('}') {
                let prefix = if name.is_empty() {
                    None
                } else {
                    label_prefix(members)
                };
                if let Some(prefix) = prefix {
                    let n = members.len() - 1;
                    for (want, m) in members.iter().enumerate() {
                        if known[m] != want as i128 {
                            return Err(format!(
                                "{file}:{start}: enum {name} ends in {} but {m} is {}, not {want}: a reason enum counts 0, 1, ...",
                                members[n], known[m]
                            ));
                        }
                    }
                    let last = h.consts.last_mut().expect("the MAX member");
                    if last.doc.starts_with("A value of") {
                        last.doc = format!(
                            "How many values `enum {name}` has (the length of `{}_LABELS`).",
                            name.to_uppercase()
                        );
                    }
                    h.labels.push(Labels {
                        enum_name: name.clone(),
                        prefix: prefix.clone(),
                        labels: members[..n]
                            .iter()
                            .map(|m| m[prefix.len()..].to_lowercase())
                            .collect(),
                    });
                }
                en = None;
                doc.clear();
                continue;
            }
            if code.is_empty() {
                doc.clear();
                continue;
            }
            let item = code.trim_end_matches(',');
            let (mname, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (item.trim(), None),
            };
            if !is_ident(mname) || item.contains(',') {
                return Err(err(format!("`{code}`: one enum member per line")));
            }
            let v = match value {
                Some(v) => eval(v, known).map_err(|e| err(format!("{mname} = {v}: {e}")))?,
                None => *next,
            };
            let t = ty.clone().unwrap_or_else(|| default_type(v).to_string());
            if !fits(&t, v) {
                return Err(err(format!("{mname} = {v} does not fit {t}")));
            }
            if known.insert(mname.to_string(), v).is_some() {
                return Err(err(format!("{mname} is defined twice")));
            }
            members.push(mname.to_string());
            *next = v + 1;
            let d = take_doc(&mut doc);
            h.consts.push(Const {
                name: mname.to_string(),
                value: v,
                ty: t,
                doc: if d.is_empty() {
                    format!(
                        "A value of `enum {}`.",
                        if name.is_empty() { "(anonymous)" } else { name }
                    )
                } else {
                    d
                },
                line: line_no,
                hex: value.is_some_and(|v| v.contains("0x")),
            });
            continue;
        }

        if depth == 0 {
            if let Some(rest) = code.strip_prefix("enum") {
                let rest = rest.trim();
                if let Some(name) = rest.strip_suffix('{') {
                    let name = name.trim();
                    let ty = annotation(trailing).map_err(&err)?;
                    en = Some(OpenEnum {
                        name: name.to_string(),
                        ty,
                        members: Vec::new(),
                        next: 0,
                        start: line_no,
                    });
                    doc.clear();
                    continue;
                }
                if rest.contains('{') {
                    return Err(err(format!(
                        "`{code}`: open an enum with `enum name {{` alone on its line, one member per line"
                    )));
                }
            }
        }
        // Anything else (structs and their fields, blank lines) ends a doc comment's reach.
        depth += code.matches('{').count();
        depth = depth.saturating_sub(code.matches('}').count());
        doc.clear();
    }
    if en.is_some() || in_comment || depth != 0 {
        return Err(format!(
            "{file}: ends inside an enum, a struct or a comment"
        ));
    }
    Ok(h)
}

fn doc_lines(out: &mut String, doc: &str) {
    for l in doc.lines() {
        // No leading spaces: rustdoc would take an indented line for a code block.
        let l = l.trim();
        if l.is_empty() {
            out.push_str("///\n");
        } else {
            writeln!(out, "/// {l}").unwrap();
        }
    }
}

/// The Rust items of one header: its constants and label tables.
pub fn rust(file: &str, h: &Header) -> String {
    let mut out = format!(
        "// Generated by rampart-bpf's build script from {file}: edit the header, not this.\n\n"
    );
    for c in &h.consts {
        doc_lines(&mut out, &c.doc);
        if !c.doc.is_empty() {
            out.push_str("///\n");
        }
        writeln!(out, "/// `{}` in `{file}`.", c.name).unwrap();
        if c.hex && c.value >= 0 {
            writeln!(out, "pub const {}: {} = {:#x};", c.name, c.ty, c.value).unwrap();
        } else {
            writeln!(out, "pub const {}: {} = {};", c.name, c.ty, c.value).unwrap();
        }
    }
    for l in &h.labels {
        writeln!(
            out,
            "/// The metric label of each value of `enum {}` (`{file}`): the member name without `{}`, lower-cased.",
            l.enum_name, l.prefix
        )
        .unwrap();
        let items: Vec<String> = l.labels.iter().map(|s| format!("{s:?}")).collect();
        writeln!(
            out,
            "pub const {}_LABELS: [&str; {}] = [{}];",
            l.enum_name.to_uppercase(),
            l.labels.len(),
            items.join(", ")
        )
        .unwrap();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(pairs: &[(&str, i128)]) -> BTreeMap<String, i128> {
        pairs.iter().map(|(n, v)| ((*n).to_string(), *v)).collect()
    }

    #[test]
    fn evaluates_c_integer_expressions() {
        let k = known(&[("A", 16), ("B", 1 << 22)]);
        for (e, v) in [
            ("0x85ebca6bu", 0x85eb_ca6b),
            ("0ull", 0),
            ("(1u << 22)", 1 << 22),
            ("(B / A)", (1 << 22) / 16),
            ("1 + 2 * 3", 7),
            ("(1 + 2) * 3", 9),
            ("1 << 4 | 1", 17),
            ("-1", -1),
            ("~0u", 0xffff_ffff),
            ("A - 1 - 1", 14),
            ("0x10 >> 2 & 3", 0),
        ] {
            assert_eq!(eval(e, &k), Ok(v), "{e}");
        }
    }

    #[test]
    fn refuses_what_is_not_an_integer_constant() {
        let k = known(&[]);
        for e in [
            "UNKNOWN",
            "\"str\"",
            "(1",
            "1 2",
            "010",
            "((__u32)1)",
            "1 << 64",
            "1, 2",
            "",
        ] {
            assert!(eval(e, &k).is_err(), "{e} evaluated");
        }
    }

    const HEADER: &str = r#"/* SPDX */
#ifndef X_H
#define X_H

#include "common/abi.h"

/* Why it was dropped. */
enum x_drop_reason { /* rust: usize */
	/* Matched. */
	X_DROP_MATCHED = 0,
	X_DROP_BAD_HEADER,
	X_DROP_REASON_MAX = 2,
};

/* Bits. */
enum x_flag { /* rust: u8 */
	X_F_A = 1 << 0,
	X_F_B = 1 << 1,
};

/*
 * Slots per
 * bucket.
 */
#define X_SLOTS 16 /* rust: usize */
#define X_MIX 0x85ebca6bu
#define X_BIG (X_MIX * 2)

struct x_val {
	/* A comment in a struct is no constant's doc. */
	__u32 slot[X_SLOTS];
};
#define X_AFTER_STRUCT (X_SLOTS + BASE)

#endif /* X_H */
"#;

    #[test]
    fn reads_defines_enums_docs_and_labels() {
        let mut k = known(&[("BASE", 100)]);
        let h = parse("x.h", HEADER, &mut k).unwrap();
        let got: Vec<(&str, i128, &str)> = h
            .consts
            .iter()
            .map(|c| (c.name.as_str(), c.value, c.ty.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("X_DROP_MATCHED", 0, "usize"),
                ("X_DROP_BAD_HEADER", 1, "usize"),
                ("X_DROP_REASON_MAX", 2, "usize"),
                ("X_F_A", 1, "u8"),
                ("X_F_B", 2, "u8"),
                ("X_SLOTS", 16, "usize"),
                ("X_MIX", 0x85eb_ca6b, "u32"),
                ("X_BIG", 0x85eb_ca6b * 2, "u64"),
                ("X_AFTER_STRUCT", 116, "u32"),
            ]
        );
        assert_eq!(h.consts[0].doc, "Matched.");
        assert_eq!(h.consts[1].doc, "A value of `enum x_drop_reason`.");
        assert!(h.consts[2].doc.starts_with("How many values"));
        assert_eq!(h.consts[5].doc, "Slots per\nbucket.");
        assert_eq!(h.consts[8].doc, "");
        assert_eq!(
            h.labels,
            [Labels {
                enum_name: "x_drop_reason".into(),
                prefix: "X_DROP_".into(),
                labels: vec!["matched".into(), "bad_header".into()],
            }]
        );
        assert_eq!(k["X_BIG"], 0x85eb_ca6b * 2);
        let rs = rust("x.h", &h);
        assert!(rs.contains("pub const X_MIX: u32 = 0x85ebca6b;"), "{rs}");
        assert!(rs.contains("pub const X_SLOTS: usize = 16;"), "{rs}");
        assert!(rs.contains(
            "pub const X_DROP_REASON_LABELS: [&str; 2] = [\"matched\", \"bad_header\"];"
        ));
    }

    #[test]
    fn refuses_what_rust_cannot_see() {
        for (bad, why) in [
            ("#define F(x) (x)\n", "function-like"),
            ("#define S \"s\"\n", "integer constants"),
            ("#ifdef Y\n#endif\n", "conditionals"),
            ("#define A 1\n#define A 2\n", "twice"),
            ("#define A 300 /* rust: u8 */\n", "does not fit u8"),
            ("#define A 3 /* rust: bool */\n", "not a type"),
            ("enum e { A = 1, B = 2 };\n", "alone on its line"),
            (
                "enum e {\n\tA = 1, B = 2,\n};\n",
                "one enum member per line",
            ),
            (
                "enum e_reason {\n\tE_X = 1,\n\tE_MAX = 2,\n};\n",
                "counts 0, 1",
            ),
            ("struct s {\n", "ends inside"),
            ("#define A 1 /* two\n * lines */\n", "same line"),
        ] {
            let e = parse("x.h", bad, &mut BTreeMap::new()).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
