//! Tenant BPF objects (`PUT /v1/program` with an ELF body): the
//! confinement checks (ELF sections, symbols, instructions, then the BTF
//! map definitions through libbpf) take any bytes without a crash, and an
//! accepted object really stays within the policy.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_tenant::confine::{check_elf, check_maps, Policy};

fuzz_target!(|data: &[u8]| {
    static QUIET: std::sync::Once = std::sync::Once::new();
    // libbpf's warnings about broken objects are expected here by the million.
    QUIET.call_once(|| {
        libbpf_rs::set_print(None);
    });
    let policy = Policy {
        max_insns: 4096,
        max_map_bytes: 1 << 20,
        max_maps: 16,
    };
    match check_elf(data, &policy) {
        Ok(mut report) => {
            assert!(report.insns <= policy.max_insns);
            if check_maps(data, &policy, &mut report).is_ok() {
                assert!(report.map_bytes <= policy.max_map_bytes);
                assert!(report.maps.len() <= policy.max_maps);
            }
        }
        Err(e) => {
            let m = e.to_string();
            assert!(!m.contains('\n'), "one-line refusal: {m:?}");
        }
    }
});
