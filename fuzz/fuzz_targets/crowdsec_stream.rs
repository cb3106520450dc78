//! The CrowdSec LAPI's decision stream body (`GET /v1/decisions/stream`),
//! as the bouncer parses it before anything reaches the blacklist, and Go
//! durations on their own. The first byte chooses: the stream with or
//! without an origin filter, or a duration. Every body is accepted or
//! refused in one line; an accepted ban is a prefix that prints back to
//! itself, with a positive finite duration; a duration rampart writes
//! parses back to its seconds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_ddos::prefix::Prefix;
use rampart_ddosd::crowdsec::{go_duration, parse_go_duration, parse_stream};

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 | 1 => {
            let origins = if which % 3 == 0 {
                Vec::new()
            } else {
                vec!["cscli".to_string(), "crowdsec".to_string()]
            };
            match parse_stream(body, which & 0x80 != 0, &origins) {
                Ok(d) => {
                    for b in &d.new {
                        let text = b.prefix.to_string();
                        assert_eq!(Prefix::parse(&text).ok(), Some(b.prefix), "{text}");
                        assert!(b.duration.as_secs_f64() > 0.0, "{b:?}");
                        if !origins.is_empty() {
                            assert!(origins.iter().any(|o| o.eq_ignore_ascii_case(&b.origin)));
                        }
                    }
                }
                Err(e) => assert!(!e.contains('\n'), "one-line error: {e:?}"),
            }
        }
        _ => {
            if let Ok(t) = std::str::from_utf8(body) {
                match parse_go_duration(t) {
                    Ok(s) => {
                        if s.is_finite() && (0.0..1e12).contains(&s) {
                            let back = parse_go_duration(&go_duration(s)).unwrap();
                            assert!((back - s.round()).abs() < 1.0, "{t}: {s} -> {back}");
                        }
                    }
                    Err(e) => assert!(!e.contains('\n'), "one-line error: {e:?}"),
                }
            }
        }
    }
});
