//! `rampart run --config FILE` (the one daemon's config: `[server]`,
//! `[alerts]`, `[[interface]]` and a section per application): any text is
//! loaded or refused in one line, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_run::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = Config::parse(text) {
        let m = e.to_string();
        assert!(!m.contains('\n'), "one-line error: {m:?}");
    }
});
