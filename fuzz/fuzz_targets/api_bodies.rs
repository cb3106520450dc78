//! Request bodies of the HTTP APIs and the text inputs behind them: the
//! tenant API's selector list and map entry bodies (with their hex keys and
//! values), the program body's kind detection, and the DDoS blacklist's
//! prefix lists (API bodies, `--file` lists, arguments), the tenant
//! services' settings by name (`PUT /v1/config/dns`, `/v1/config/synproxy`:
//! checked, then merged into the service's defaults). The first byte
//! chooses the parser. Every input is accepted or refused with a one-line
//! message; an accepted prefix prints back to text that parses to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_ddos::prefix::{self, Prefix};
use rampart_ddosd::api::{BlockBody, WhitelistBody};
use rampart_service::error::parse_json;
use rampart_tenant::api::{unhex, MapValue, Selectors};
use rampart_tenant::compiler::Submission;
use rampart_tenant::programs::{DnsLimits, SynProxyConfig};
use rampart_tenant::selector::parse_list;
use rampart_tenant::settings::{DnsSettings, SynSettings};

fn one_line(e: impl std::fmt::Display) {
    let m = e.to_string();
    assert!(!m.contains('\n'), "one-line error: {m:?}");
}

fn prefix_round_trip(p: &Prefix) {
    let text = p.to_string();
    let back = Prefix::parse(&text).unwrap_or_else(|e| panic!("{text:?} no longer parses: {e}"));
    assert_eq!(&back, p, "{text:?}");
}

fn prefix_body(text: &str) {
    match Prefix::parse(text) {
        Ok(p) => prefix_round_trip(&p),
        Err(e) => one_line(e),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let text = std::str::from_utf8(body).ok();
    match which % 9 {
        // PUT /v1/selectors (tenant API).
        0 => match parse_json::<Selectors>(body).map_err(|e| e.to_string()) {
            Ok(items) => match parse_list(&items.0) {
                Ok(sels) => {
                    for s in sels {
                        let again = parse_list(&[s.to_string()])
                            .unwrap_or_else(|e| panic!("selector {s} no longer parses: {e}"));
                        assert_eq!(again, vec![s.clone()], "{s} printed and parsed again");
                        let json = format!("[{}]", json_string(&s.to_string()));
                        assert!(parse_json::<Selectors>(json.as_bytes()).is_ok(), "{json}");
                    }
                }
                Err(e) => one_line(e),
            },
            Err(e) => one_line(e),
        },
        // PUT /v1/maps/{map}/{key} (tenant API): the body and the hex.
        1 => match parse_json::<MapValue>(body).map_err(|e| e.to_string()) {
            Ok(v) => {
                let want = (v.value.len() / 2) as u32;
                match unhex(&v.value, want, "value") {
                    Ok(b) => assert_eq!(b.len(), want as usize),
                    Err(e) => one_line(e),
                }
                if let Err(e) = unhex(&v.value, 8, "value") {
                    one_line(e);
                }
            }
            Err(e) => one_line(e),
        },
        // PUT /v1/program: C source or ELF object?
        2 => {
            let _ = Submission::detect(body).map_err(one_line);
        }
        // rampart ddos block --file: a prefix list.
        3 => {
            if let Some(t) = text {
                match prefix::parse_file_text(t) {
                    Ok(v) => v.iter().for_each(prefix_round_trip),
                    Err(e) => one_line(e),
                }
            }
        }
        // rampart ddos block PREFIX...: arguments.
        4 => {
            if let Some(t) = text {
                match prefix::parse_many(t.split_whitespace()) {
                    Ok(v) => v.iter().for_each(prefix_round_trip),
                    Err(e) => one_line(e),
                }
            }
        }
        // PUT /v1/config/dns (tenant API): a body that passes the checks
        // merges into the limiter's settings without a panic.
        7 => match parse_json::<DnsSettings>(body).map_err(|e| e.to_string()) {
            Ok(s) => match s.validate() {
                Ok(()) => {
                    let _ = s.merge(&DnsLimits::default()).map_err(one_line);
                }
                Err(e) => one_line(e),
            },
            Err(e) => one_line(e),
        },
        // PUT /v1/config/synproxy (tenant API).
        8 => match parse_json::<SynSettings>(body).map_err(|e| e.to_string()) {
            Ok(s) => match s.validate() {
                Ok(()) => {
                    let _ = s.merge(&SynProxyConfig::default()).map_err(one_line);
                }
                Err(e) => one_line(e),
            },
            Err(e) => one_line(e),
        },
        // POST /v1/blocked (ddos daemon API).
        5 => match parse_json::<BlockBody>(body).map_err(|e| e.to_string()) {
            Ok(b) => prefix_body(&b.prefix),
            Err(e) => one_line(e),
        },
        // POST /v1/whitelist, DELETE /v1/blocked/{prefix} (ddos daemon API).
        _ => match parse_json::<WhitelistBody>(body).map_err(|e| e.to_string()) {
            Ok(b) => prefix_body(&b.prefix),
            Err(e) => {
                one_line(e);
                if let Some(t) = text {
                    prefix_body(t);
                }
            }
        },
    }
});

/// A JSON string literal (no serde_json dependency needed for this).
fn json_string(s: &str) -> String {
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
