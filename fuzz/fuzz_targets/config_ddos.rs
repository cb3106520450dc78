//! `rampart ddos run --config FILE`: any text is loaded or refused in one
//! line, and a config that loads, written back as TOML, loads again to the
//! same settings.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_ddosd::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text) {
        Ok(c) => {
            let back = toml::to_string(&c).expect("a loaded config serializes");
            let again = Config::parse(&back)
                .unwrap_or_else(|e| panic!("written back, it no longer loads: {e}\n{back}"));
            assert_eq!(
                toml::to_string(&again).unwrap(),
                back,
                "the round trip changed a setting"
            );
        }
        Err(e) => {
            let m = e.to_string();
            assert!(!m.contains('\n'), "one-line error: {m:?}");
        }
    }
});
