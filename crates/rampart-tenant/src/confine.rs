//! Confinement of tenant programs: what the compiler agent checks on a
//! tenant's BPF object before it is linked into the infrastructure.
//!
//! The kernel's verifier guarantees memory safety; it does not know that
//! several tenants share one data path. These rules do:
//!
//! - **helpers**: every `call` instruction's helper id is on an allow-list
//!   (no `probe_read*`, no tail calls, no raw redirect — redirects go
//!   through the infrastructure to the tenant's own ports — no tracing or
//!   output helpers); calls to kfuncs and indirect calls are refused;
//! - **symbols**: no extern (undefined) symbol, no weak symbol, nothing
//!   named `rampart_*` (the infrastructure's maps and functions), an entry
//!   `tenant_main` defined as a global function in `.text`, and no program
//!   sections — so a tenant object can name nothing but its own code and
//!   maps, and the static linker cannot resolve anything of it to ours;
//! - **maps**: allow-listed types only (no program arrays, devmaps, map in
//!   map, ring buffers…), no `pinning` attribute (which would make libbpf
//!   open a pinned map by name), a memory budget (per-CPU values counted on
//!   every CPU) and a number of maps;
//! - **size**: at most the instruction budget.
//!
//! Everything the program can reach is then its own object's: maps are
//! created per tenant object (namespaced), and the dispatcher runs the
//! program only on the tenant's packets.

use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolSection};
use serde::Serialize;

use crate::error::{Error, Result};

/// Symbol every tenant program defines.
pub const ENTRY: &str = "tenant_main";
/// Prefix reserved for the infrastructure.
pub const RESERVED_PREFIX: &str = "rampart_";
/// The license the infrastructure program carries (a tenant object may
/// carry the same one, or none).
pub const LICENSE: &str = "Dual BSD/GPL";

/// Helpers a tenant program may call, with their names (ids from `linux/bpf.h`).
pub const ALLOWED_HELPERS: &[(i32, &str)] = &[
    (1, "bpf_map_lookup_elem"),
    (2, "bpf_map_update_elem"),
    (3, "bpf_map_delete_elem"),
    (5, "bpf_ktime_get_ns"),
    (7, "bpf_get_prandom_u32"),
    (8, "bpf_get_smp_processor_id"),
    (28, "bpf_csum_diff"),
    (44, "bpf_xdp_adjust_head"),
    (65, "bpf_xdp_adjust_tail"),
    (87, "bpf_map_push_elem"),
    (88, "bpf_map_pop_elem"),
    (89, "bpf_map_peek_elem"),
    (93, "bpf_spin_lock"),
    (94, "bpf_spin_unlock"),
    (118, "bpf_jiffies64"),
    (125, "bpf_ktime_get_boot_ns"),
    (160, "bpf_ktime_get_coarse_ns"),
    (182, "bpf_strncmp"),
    (188, "bpf_xdp_get_buff_len"),
    (189, "bpf_xdp_load_bytes"),
    (190, "bpf_xdp_store_bytes"),
    (195, "bpf_map_lookup_percpu_elem"),
    (204, "bpf_tcp_raw_gen_syncookie_ipv4"),
    (205, "bpf_tcp_raw_gen_syncookie_ipv6"),
    (206, "bpf_tcp_raw_check_syncookie_ipv4"),
    (207, "bpf_tcp_raw_check_syncookie_ipv6"),
    (208, "bpf_ktime_get_tai_ns"),
];

/// Names of refused helpers that deserve a specific reason.
fn refused_reason(id: i32) -> Option<(&'static str, &'static str)> {
    Some(match id {
        4 => ("bpf_probe_read", "reads arbitrary kernel memory"),
        112 => ("bpf_probe_read_user", "reads arbitrary memory"),
        113 => ("bpf_probe_read_kernel", "reads arbitrary kernel memory"),
        45 => ("bpf_probe_read_str", "reads arbitrary kernel memory"),
        114 => ("bpf_probe_read_user_str", "reads arbitrary memory"),
        115 => ("bpf_probe_read_kernel_str", "reads arbitrary kernel memory"),
        12 => ("bpf_tail_call", "a tail call would leave the infrastructure's accounting and could jump into programs that are not yours; use static functions"),
        23 => ("bpf_redirect", "raw redirects could reach other tenants' interfaces; return RAMPART_REDIRECT(port) for your own ports"),
        51 => ("bpf_redirect_map", "raw redirects could reach other tenants' interfaces; return RAMPART_REDIRECT(port) for your own ports"),
        54 => ("bpf_xdp_adjust_meta", "the metadata area belongs to the infrastructure"),
        6 => ("bpf_trace_printk", "writes to the host's trace buffer"),
        25 => ("bpf_perf_event_output", "output channels to the host are not offered"),
        69 => ("bpf_fib_lookup", "reveals the host's routing tables"),
        181 => ("bpf_loop", "unbounded per-packet work; use bounded loops"),
        130..=134 => ("bpf_ringbuf_*", "output channels to the host are not offered"),
        _ => return None,
    })
}

/// Map types a tenant may define (`enum bpf_map_type`).
pub const ALLOWED_MAP_TYPES: &[(u32, &str)] = &[
    (1, "hash"),
    (2, "array"),
    (5, "percpu_hash"),
    (6, "percpu_array"),
    (9, "lru_hash"),
    (10, "lru_percpu_hash"),
    (11, "lpm_trie"),
    (22, "queue"),
    (23, "stack"),
    (30, "bloom_filter"),
];

/// Limits the operator sets for every tenant.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct Policy {
    /// Most BPF instructions (8-byte slots) in the tenant's code.
    pub max_insns: usize,
    /// Most bytes of map memory (keys + values × entries, summed; a
    /// per-CPU value counts once per possible CPU).
    pub max_map_bytes: u64,
    /// Most maps (the object's global data sections count: each is a map).
    pub max_maps: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            max_insns: 4096,
            max_map_bytes: 64 << 20,
            max_maps: 16,
        }
    }
}

/// A tenant map as declared in the object.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct MapDecl {
    /// Name (as the tenant wrote it).
    pub name: String,
    /// Type name.
    pub kind: String,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
}

/// What the checks found in an accepted object.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Instructions (8-byte slots) in the tenant's code.
    pub insns: usize,
    /// Helpers called, by name, sorted.
    pub helpers: Vec<String>,
    /// Maps the tenant defines (global data sections not included).
    pub maps: Vec<MapDecl>,
    /// Map memory, bytes.
    pub map_bytes: u64,
}

fn refuse(reason: impl Into<String>) -> Error {
    Error::Refused {
        reason: reason.into(),
    }
}

fn section_allowed(name: &str) -> bool {
    matches!(
        name,
        "" | ".text" | ".maps" | ".bss" | "license" | ".BTF" | ".BTF.ext" | ".symtab" | ".strtab"
    ) || name == ".rodata"
        || name.starts_with(".rodata.")
        || name == ".data"
        || name.starts_with(".data.")
        || name.starts_with(".debug")
        || name == ".llvm_addrsig"
        || name.starts_with(".rel")
}

/// A copy of `bytes` in 8-byte aligned memory (the ELF parser reads
/// headers in place and needs their natural alignment).
pub(crate) fn aligned(bytes: &[u8]) -> AlignedBytes {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    AlignedBytes {
        words,
        len: bytes.len(),
    }
}

/// Bytes stored 8-byte aligned.
pub(crate) struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl std::ops::Deref for AlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
}

/// Check a tenant object against the confinement rules (ELF level:
/// sections, symbols, instructions). Map declarations are checked by
/// [`check_maps`], which needs libbpf to read BTF-defined maps.
///
/// # Errors
/// [`Error::Refused`] with the first rule broken.
pub fn check_elf(obj: &[u8], policy: &Policy) -> Result<CheckReport> {
    let buf = aligned(obj);
    let file = object::File::parse(&*buf).map_err(|e| refuse(format!("not an ELF object: {e}")))?;
    if file.architecture() != object::Architecture::Bpf {
        return Err(refuse(format!(
            "object is for {:?}, not BPF: compile with clang -target bpf",
            file.architecture()
        )));
    }
    let mut text_index = None;
    let mut insns = 0usize;
    let mut helpers: Vec<String> = Vec::new();
    for sec in file.sections() {
        let name = sec.name().unwrap_or("?");
        if !section_allowed(name) {
            return Err(refuse(if sec.kind() == SectionKind::Text {
                format!(
                    "section {name:?} holds a program: tenant code lives in .text with the entry point {ENTRY}() \
                     (drop the SEC(...) annotation)"
                )
            } else {
                format!("section {name:?} is not allowed in a tenant object")
            }));
        }
        if sec.kind() == SectionKind::Text && name != ".text" {
            return Err(refuse(format!(
                "executable section {name:?}: only .text is allowed"
            )));
        }
        if name == "license" {
            let data = sec.data().unwrap_or_default();
            let lic = data.split(|&b| b == 0).next().unwrap_or_default();
            if lic != LICENSE.as_bytes() {
                return Err(refuse(format!(
                    "license {:?} differs from the infrastructure's {LICENSE:?}: remove your LICENSE definition \
                     (the infrastructure supplies it) or use the same string",
                    String::from_utf8_lossy(lic)
                )));
            }
        }
        if name == ".text" {
            text_index = Some(sec.index());
            let code = sec
                .data()
                .map_err(|e| refuse(format!("unreadable .text: {e}")))?;
            let (n, h) = check_insns(code)?;
            insns = n;
            helpers = h;
        }
    }
    if text_index.is_none() {
        return Err(refuse(format!(
            "no .text section: the object must define {ENTRY}()"
        )));
    }
    if insns > policy.max_insns {
        return Err(refuse(format!(
            "{insns} instructions exceed the budget of {}: simplify the program",
            policy.max_insns
        )));
    }
    let mut entry = false;
    for sym in file.symbols() {
        let name = sym.name().unwrap_or("");
        if name.starts_with(RESERVED_PREFIX) {
            return Err(refuse(format!(
                "symbol {name:?}: names starting with {RESERVED_PREFIX:?} belong to the infrastructure"
            )));
        }
        if sym.is_undefined() && !name.is_empty() {
            return Err(refuse(format!(
                "extern symbol {name:?}: tenant programs cannot reference anything outside their own object \
                 (no extern maps, kfuncs or kernel symbols)"
            )));
        }
        if sym.is_weak() {
            return Err(refuse(format!(
                "weak symbol {name:?}: weak definitions are not allowed"
            )));
        }
        if name == ENTRY {
            let in_text =
                matches!(sym.section(), SymbolSection::Section(i) if Some(i) == text_index);
            if !(in_text && sym.is_global() && sym.kind() == object::SymbolKind::Text) {
                return Err(refuse(format!(
                    "{ENTRY} must be a global (non-static) function in .text"
                )));
            }
            entry = true;
        }
    }
    if !entry {
        return Err(refuse(format!(
            "no {ENTRY}() found: define `int {ENTRY}(struct xdp_md *ctx)` (non-static)"
        )));
    }
    Ok(CheckReport {
        insns,
        helpers,
        maps: Vec::new(),
        map_bytes: 0,
    })
}

/// Walk the instructions of `.text`: count them and check every call.
/// Returns the instruction count and the helpers used.
fn check_insns(code: &[u8]) -> Result<(usize, Vec<String>)> {
    if !code.len().is_multiple_of(8) {
        return Err(refuse(".text is not a whole number of BPF instructions"));
    }
    let mut helpers = std::collections::BTreeSet::new();
    let n = code.len() / 8;
    let mut i = 0;
    while i < n {
        let ins = &code[i * 8..i * 8 + 8];
        let opcode = ins[0];
        let src = ins[1] >> 4;
        let imm = i32::from_le_bytes([ins[4], ins[5], ins[6], ins[7]]);
        match opcode {
            // BPF_JMP | BPF_CALL
            0x85 => match src {
                0 => match ALLOWED_HELPERS.iter().find(|(id, _)| *id == imm) {
                    Some((_, name)) => {
                        helpers.insert(*name);
                    }
                    None => {
                        return Err(refuse(match refused_reason(imm) {
                            Some((name, why)) => format!("helper {name} (#{imm}) is not allowed: {why}"),
                            None => format!(
                                "helper #{imm} is not on the allow-list (see rampart_tenant.h for the helpers offered)"
                            ),
                        }))
                    }
                },
                // BPF_PSEUDO_CALL: a call into the object's own code.
                1 => {}
                2 => return Err(refuse("kfunc calls are not allowed")),
                _ => return Err(refuse(format!("call with unknown source {src} at instruction {i}"))),
            },
            // BPF_JMP | BPF_CALLX (call through a register)
            0x8d => return Err(refuse(format!("indirect call at instruction {i} is not allowed"))),
            // BPF_LD | BPF_IMM | BPF_DW: two slots. In an unlinked object every
            // pseudo source is set by the loader from a relocation; a source
            // already set here would smuggle a map fd, BTF id or kernel address.
            0x18 => {
                if src != 0 {
                    return Err(refuse(format!(
                        "64-bit load with pseudo source {src} at instruction {i}: references to maps, kernel \
                         symbols or functions must come from the object's own relocations"
                    )));
                }
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    Ok((n, helpers.into_iter().map(str::to_string).collect()))
}

/// Check the maps a tenant object declares (through libbpf, which parses
/// BTF-defined maps exactly as it will at load time).
///
/// # Errors
/// [`Error::Refused`] for a disallowed type, a pinning attribute or the
/// memory budget.
pub fn check_maps(obj: &[u8], policy: &Policy, report: &mut CheckReport) -> Result<()> {
    use libbpf_rs::AsRawLibbpf;
    let open = libbpf_rs::ObjectBuilder::default()
        .open_memory(obj)
        .map_err(|e| refuse(format!("libbpf cannot open the object: {e}")))?;
    let mut total = 0u64;
    let mut count = 0usize;
    let ncpu = rampart_dataplane::maps::possible_cpus() as u64;
    let mut maps = Vec::new();
    for m in open.maps() {
        count += 1;
        let name = m.name().to_string_lossy().into_owned();
        let raw = m.as_libbpf_object().as_ptr();
        // SAFETY: `raw` is a live map of the open object.
        let internal = unsafe { libbpf_sys::bpf_map__is_internal(raw) };
        // SAFETY: as above; a NULL result means "not pinned".
        let pinned = unsafe { !libbpf_sys::bpf_map__pin_path(raw).is_null() };
        if pinned {
            return Err(refuse(format!(
                "map {name:?} has a pinning attribute: remove it (rampart keeps your maps across program swaps)"
            )));
        }
        let ty: u32 = m.map_type().into();
        let key = m.key_size();
        let val = m.value_size();
        let entries = m.max_entries();
        // A per-CPU map holds its value once per possible CPU. Saturating:
        // the sizes come from the tenant's object and could overflow.
        let copies = if matches!(ty, 5 | 6 | 10) { ncpu } else { 1 };
        let per_entry = u64::from(key).saturating_add(u64::from(val).saturating_mul(copies));
        total = total.saturating_add(per_entry.saturating_mul(u64::from(entries)));
        if internal {
            continue;
        }
        let Some((_, kind)) = ALLOWED_MAP_TYPES.iter().find(|(t, _)| *t == ty) else {
            return Err(refuse(format!(
                "map {name:?} has type #{ty}, which is not allowed (allowed: {})",
                ALLOWED_MAP_TYPES
                    .iter()
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        maps.push(MapDecl {
            name,
            kind: (*kind).to_string(),
            key_size: key,
            value_size: val,
            max_entries: entries,
        });
    }
    if count > policy.max_maps {
        return Err(refuse(format!(
            "{count} maps, more than the limit of {}: merge some (global variables count as one map per section)",
            policy.max_maps
        )));
    }
    if total > policy.max_map_bytes {
        return Err(refuse(format!(
            "maps need {total} bytes, more than the budget of {} bytes: shrink max_entries",
            policy.max_map_bytes
        )));
    }
    report.maps = maps;
    report.map_bytes = total;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u8, src: u8, imm: i32) -> Vec<u8> {
        let mut v = vec![code, src << 4, 0, 0];
        v.extend_from_slice(&imm.to_le_bytes());
        v
    }

    #[test]
    fn helper_calls_are_checked_against_the_allow_list() {
        let ok: Vec<u8> = [insn(0x85, 0, 1), insn(0x85, 0, 5), insn(0x95, 0, 0)].concat();
        let (n, h) = check_insns(&ok).unwrap();
        assert_eq!(n, 3);
        assert_eq!(h, vec!["bpf_ktime_get_ns", "bpf_map_lookup_elem"]);
        for (id, what) in [
            (4, "bpf_probe_read"),
            (12, "bpf_tail_call"),
            (23, "bpf_redirect"),
            (51, "bpf_redirect_map"),
            (113, "bpf_probe_read_kernel"),
            (999, "#999"),
        ] {
            let e = check_insns(&insn(0x85, 0, id)).unwrap_err().to_string();
            assert!(e.contains(what), "{id}: {e}");
        }
        assert!(check_insns(&insn(0x85, 2, 77))
            .unwrap_err()
            .to_string()
            .contains("kfunc"));
        assert!(check_insns(&insn(0x8d, 0, 0))
            .unwrap_err()
            .to_string()
            .contains("indirect"));
        // A bpf-to-bpf call is fine.
        assert!(check_insns(&insn(0x85, 1, 3)).is_ok());
    }

    #[test]
    fn ld_imm64_with_a_preset_pseudo_source_is_refused() {
        let ld = [insn(0x18, 1, 5), insn(0, 0, 0)].concat();
        assert!(check_insns(&ld)
            .unwrap_err()
            .to_string()
            .contains("pseudo source 1"));
        // The second slot of a plain ld_imm64 is not decoded as an instruction.
        let ld = [insn(0x18, 0, 5), insn(0x85, 0, 4)].concat();
        assert_eq!(check_insns(&ld).unwrap().0, 2);
    }

    #[test]
    fn non_elf_input_is_refused() {
        let e = check_elf(b"int tenant_main;", &Policy::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an ELF object"), "{e}");
    }
}
