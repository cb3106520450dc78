//! Request bodies of the HTTP APIs and the text inputs behind them: the
//! tenant API's selector list and map entry bodies (with their hex keys and
//! values), the program body's kind detection, and the DDoS blacklist's
//! prefix lists (API bodies, `--file` lists, arguments). The first byte
//! chooses the parser. Every input is accepted or refused with a one-line
//! message; an accepted prefix prints back to text that parses to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_ddos::prefix::{self, Prefix};
use rampart_tenant::api::{map_entry_body, selectors_body, unhex};
use rampart_tenant::compiler::Submission;

fn one_line(e: impl std::fmt::Display) {
    let m = e.to_string();
    assert!(!m.contains('\n'), "one-line error: {m:?}");
}

fn prefix_round_trip(p: &Prefix) {
    let text = p.to_string();
    let back = Prefix::parse(&text).unwrap_or_else(|e| panic!("{text:?} no longer parses: {e}"));
    assert_eq!(&back, p, "{text:?}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let text = std::str::from_utf8(body).ok();
    match which % 5 {
        0 => match selectors_body(body) {
            Ok(sels) => {
                for s in sels {
                    let again = selectors_body(
                        format!("[{}]", serde_json_string(&s.to_string())).as_bytes(),
                    )
                    .unwrap_or_else(|e| panic!("selector {s} no longer parses: {e}"));
                    assert_eq!(again, vec![s.clone()], "{s} printed and parsed again");
                }
            }
            Err(e) => one_line(e),
        },
        1 => match map_entry_body(body) {
            Ok(e) => {
                let want = (e.key.len() / 2) as u32;
                match unhex(&e.key, want, "key") {
                    Ok(k) => assert_eq!(k.len(), want as usize),
                    Err(err) => one_line(err),
                }
                if let Err(err) = unhex(&e.value, 8, "value") {
                    one_line(err);
                }
            }
            Err(e) => one_line(e),
        },
        2 => {
            let _ = Submission::detect(body).map_err(one_line);
        }
        3 => {
            if let Some(t) = text {
                match prefix::parse_file_text(t) {
                    Ok(v) => v.iter().for_each(prefix_round_trip),
                    Err(e) => one_line(e),
                }
            }
        }
        _ => {
            if let Some(t) = text {
                match prefix::parse_many(t.split_whitespace()) {
                    Ok(v) => v.iter().for_each(prefix_round_trip),
                    Err(e) => one_line(e),
                }
            }
        }
    }
});

/// A JSON string literal (no serde_json dependency needed for this).
fn serde_json_string(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}
