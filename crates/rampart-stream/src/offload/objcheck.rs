//! What one program of a built BPF object really uses — instructions,
//! stack, helpers, kfuncs, maps (type, key and value sizes) — read from the
//! object file itself: instructions and map definitions through libbpf
//! (`OpenObject`, which parses the BTF map definitions), and which maps and
//! externs each instruction refers to from the ELF relocations (the
//! `object` crate). The offload planner checks a target profile against
//! this, so "nfp-compatible" is a property of the bytes that would be
//! loaded, not of the source as intended.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SymbolSection};
use serde::Serialize;

use crate::error::{Error, Result};

/// A helper call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Helper {
    /// `enum bpf_func_id`.
    pub id: u32,
    /// `bpf_<name>`, when known here.
    pub name: String,
}

/// A map the program refers to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MapUse {
    /// Map name.
    pub name: String,
    /// `enum bpf_map_type`.
    pub map_type: u32,
    /// Its name (`array`, `percpu_array`, `xskmap`, ...).
    pub type_name: String,
    /// Key bytes.
    pub key_size: u32,
    /// Value bytes.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
}

/// Everything one program of the object uses.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectReport {
    /// Object file.
    pub object: String,
    /// Program (function) name.
    pub program: String,
    /// BPF instructions (a 16-byte `ld_imm64` counts 2, as the kernel counts).
    pub insns: usize,
    /// Deepest stack access below the frame pointer, bytes.
    pub stack_bytes: usize,
    /// Helper calls, by id.
    pub helpers: Vec<Helper>,
    /// Kernel functions called (kfuncs).
    pub kfuncs: Vec<String>,
    /// Maps referred to.
    pub maps: Vec<MapUse>,
    /// Stores into the context (`struct xdp_md` field offsets written).
    pub ctx_stores: Vec<u32>,
}

/// Names of the helpers a stream program may use (the rest show as `#id`).
pub fn helper_name(id: u32) -> String {
    match id {
        1 => "bpf_map_lookup_elem",
        2 => "bpf_map_update_elem",
        3 => "bpf_map_delete_elem",
        5 => "bpf_ktime_get_ns",
        6 => "bpf_trace_printk",
        7 => "bpf_get_prandom_u32",
        8 => "bpf_get_smp_processor_id",
        12 => "bpf_tail_call",
        23 => "bpf_redirect",
        25 => "bpf_perf_event_output",
        28 => "bpf_csum_diff",
        44 => "bpf_xdp_adjust_head",
        51 => "bpf_redirect_map",
        54 => "bpf_xdp_adjust_meta",
        65 => "bpf_xdp_adjust_tail",
        69 => "bpf_fib_lookup",
        125 => "bpf_ktime_get_boot_ns",
        130 => "bpf_ringbuf_output",
        131 => "bpf_ringbuf_reserve",
        132 => "bpf_ringbuf_submit",
        133 => "bpf_ringbuf_discard",
        134 => "bpf_ringbuf_query",
        _ => return format!("#{id}"),
    }
    .to_string()
}

/// Name of `enum bpf_map_type` values.
pub fn map_type_name(t: u32) -> String {
    match t {
        1 => "hash",
        2 => "array",
        3 => "prog_array",
        4 => "perf_event_array",
        5 => "percpu_hash",
        6 => "percpu_array",
        9 => "lru_hash",
        10 => "lru_percpu_hash",
        11 => "lpm_trie",
        12 => "array_of_maps",
        13 => "hash_of_maps",
        14 => "devmap",
        16 => "cpumap",
        17 => "xskmap",
        27 => "ringbuf",
        _ => return format!("#{t}"),
    }
    .to_string()
}

const BPF_CALL: u8 = 0x85;
const BPF_LD_IMM64: u8 = 0x18;
/// `BPF_STX | BPF_MEM | size` and `BPF_ST | BPF_MEM | size`.
fn is_store(code: u8) -> bool {
    matches!(code & 0x07, 0x02 | 0x03) && code & 0xe0 == 0x60
}

/// Inspect `program` of the object at `path`.
///
/// # Errors
/// The file is missing or not a BPF object, or has no such program.
pub fn inspect(path: &Path, program: &str) -> Result<ObjectReport> {
    let what = || path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        context: format!(
            "reading the BPF object {} (the build tree's object: run from a build of rampart)",
            what()
        ),
        err: e,
    })?;
    inspect_bytes(&bytes, &what(), program)
}

/// Inspect `program` of an object held in memory (`name` says where it
/// came from, in messages and in the report).
///
/// # Errors
/// Not a BPF object, no such program, or a malformed one.
pub fn inspect_bytes(bytes: &[u8], name: &str, program: &str) -> Result<ObjectReport> {
    let what = || name.to_string();
    let bad = |m: String| Error::Invalid(format!("{}: {m}", what()));
    let elf = object::File::parse(bytes).map_err(|e| bad(format!("not an ELF object: {e}")))?;

    // The program: a function symbol.
    let sym = elf
        .symbols()
        .find(|s| s.name() == Ok(program) && s.kind() == object::SymbolKind::Text)
        .ok_or_else(|| bad(format!("no program {program:?}")))?;
    let sec_idx = sym
        .section_index()
        .ok_or_else(|| bad(format!("program {program:?} has no section")))?;
    let sec = elf
        .section_by_index(sec_idx)
        .map_err(|e| bad(e.to_string()))?;
    let (start, size) = (sym.address(), sym.size());
    let code = sec.data().map_err(|e| bad(e.to_string()))?;
    let outside = || bad(format!("program {program:?} lies outside its section"));
    let end = start.checked_add(size).ok_or_else(outside)?;
    let body = usize::try_from(start)
        .ok()
        .zip(usize::try_from(end).ok())
        .and_then(|(a, b)| code.get(a..b))
        .ok_or_else(outside)?;

    // Relocations inside the program: maps and externs (kfuncs).
    let mut map_names = BTreeSet::new();
    let mut extern_at: BTreeMap<u64, String> = BTreeMap::new();
    for (off, rel) in sec.relocations() {
        if off < start || off >= end {
            continue;
        }
        let RelocationTarget::Symbol(si) = rel.target() else {
            continue;
        };
        let Ok(s) = elf.symbol_by_index(si) else {
            continue;
        };
        let name = s.name().unwrap_or("").to_string();
        match s.section() {
            SymbolSection::Section(i) => {
                let sname = elf
                    .section_by_index(i)
                    .ok()
                    .and_then(|x| x.name().ok().map(str::to_string))
                    .unwrap_or_default();
                if sname == ".maps" {
                    map_names.insert(name);
                }
            }
            SymbolSection::Undefined => {
                extern_at.insert(off - start, name);
            }
            _ => {}
        }
    }

    // Instructions: helper calls, stack depth, context stores.
    let mut helpers = BTreeSet::new();
    let mut kfuncs = BTreeSet::new();
    let mut stack = 0i64;
    let mut ctx_regs = [false; 11];
    ctx_regs[1] = true;
    let mut ctx_stores = BTreeSet::new();
    for (i, insn) in body.chunks_exact(8).enumerate() {
        let op = insn[0];
        let dst = insn[1] & 0x0f;
        let src = insn[1] >> 4;
        let off = i64::from(i16::from_le_bytes([insn[2], insn[3]]));
        let imm = i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
        if op == BPF_CALL {
            if let Some(name) = extern_at.get(&((i * 8) as u64)) {
                kfuncs.insert(name.clone());
            } else if src == 0 {
                helpers.insert(imm as u32);
            }
            // Calls clobber r0-r5.
            for r in &mut ctx_regs[..6] {
                *r = false;
            }
            continue;
        }
        // Stack: any access at r10 + off with off < 0.
        let class = op & 0x07;
        let mem = matches!(class, 0x01..=0x03) && op & 0xe0 == 0x60;
        if mem {
            let base = if class == 0x01 { src } else { dst };
            if base == 10 && off < 0 {
                stack = stack.max(-off);
            }
            if is_store(op) && usize::from(dst) < 11 && ctx_regs[usize::from(dst)] {
                ctx_stores.insert(off as u32);
            }
        }
        // Track registers holding the context (a copy of r1 at entry), in
        // instruction order: good enough for straight-line uses of ctx, which
        // is how clang emits `ctx->field = x`.
        if op == 0xbf && usize::from(dst) < 11 && usize::from(src) < 11 {
            ctx_regs[usize::from(dst)] = ctx_regs[usize::from(src)];
        } else if usize::from(dst) < 11
            && (matches!(class, 0x04 | 0x07) || class == 0x01 || op == BPF_LD_IMM64)
        {
            ctx_regs[usize::from(dst)] = false;
        }
    }
    // Keep a store only if it is a real `*(u32 *)(ctx + off) = ...`.
    let ctx_stores: Vec<u32> = ctx_stores.into_iter().collect();

    // Map definitions (BTF) through libbpf.
    let obj = libbpf_rs::ObjectBuilder::default()
        .open_memory(bytes)
        .map_err(|e| bad(format!("libbpf cannot open it: {e}")))?;
    let insns = obj
        .progs()
        .find(|p| p.name() == program)
        .map(|p| p.insn_cnt())
        .unwrap_or(body.len() / 8);
    let mut maps = Vec::new();
    for m in obj.maps() {
        let name = m.name().to_string_lossy().to_string();
        if map_names.contains(&name) {
            let t = m.map_type() as u32;
            maps.push(MapUse {
                name,
                map_type: t,
                type_name: map_type_name(t),
                key_size: m.key_size(),
                value_size: m.value_size(),
                max_entries: m.max_entries(),
            });
        }
    }
    Ok(ObjectReport {
        object: what(),
        program: program.to_string(),
        insns,
        stack_bytes: stack as usize,
        helpers: helpers
            .into_iter()
            .map(|id| Helper {
                id,
                name: helper_name(id),
            })
            .collect(),
        kfuncs: kfuncs.into_iter().collect(),
        maps,
        ctx_stores,
    })
}
