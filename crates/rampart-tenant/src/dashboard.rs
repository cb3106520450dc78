//! The dashboard's tenant panel: per tenant the counters of `GET
//! /v1/stats` (packets, bytes, CPU time charged, verdicts, drops by
//! reason, token level) read from the data path's maps, its weight and its
//! program; the fairness budget the page divides the CPU time by. The
//! panel carries cumulative counters only: the page turns two readings
//! into rates (a CPU share is CPU seconds per second of the budget).

use serde_json::{json, Value};

use crate::host::HostAgent;

/// The panel, read now on the agent's thread. A tenant whose counters
/// cannot be read is listed with the error instead of numbers.
pub fn panel(a: &HostAgent) -> Value {
    let cfg = a.config();
    let mut tenants = Vec::new();
    for id in a.tenant_ids() {
        let weight = a.tenant(id).map(|t| t.weight);
        let program = a.program(id).map(|p| {
            json!({
                "version": p.version,
                "from": p.from,
                "sha256": p.sha256,
                "insns": p.insns,
                "prog_id": p.prog_id,
                "loaded_at": p.loaded_at,
            })
        });
        tenants.push(match a.stats(id) {
            Ok(s) => json!({
                "name": s.name,
                "id": id,
                "weight": weight,
                "program": program,
                "packets": s.packets,
                "bytes": s.bytes,
                "cpu_seconds": s.cpu_ns as f64 / 1e9,
                "stack_cpu_seconds": s.stack_ns as f64 / 1e9,
                "verdicts": s.verdicts,
                "drops": s.drops,
                "tokens_seconds": s.tokens.level_ns as f64 / 1e9,
            }),
            Err(e) => json!({
                "name": a.tenant(id).map(|t| t.name.clone()),
                "id": id,
                "error": e.to_string(),
            }),
        });
    }
    // Packets no tenant's selectors claimed (the infrastructure's default action).
    let unassigned = a.stats(0).ok().map(|s| {
        json!({"packets": s.packets, "bytes": s.bytes, "verdicts": s.verdicts, "drops": s.drops})
    });
    json!({
        "instance": cfg.infra.name,
        "interfaces": a.interfaces().iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        "generation": a.generation(),
        "fairness": cfg.fairness.enabled,
        "budget_cores": cfg.fairness.budget_cores,
        "tenants": tenants,
        "unassigned": unassigned,
    })
}
