//! Prometheus metrics per tenant, read from the data path's counters at
//! every scrape (the counters live in BPF maps and are reported as they
//! are: nothing to keep in step by hand).
//! Times are in seconds (the maps count nanoseconds).

use rampart_service::{Samples, StateCollector};

use crate::agent::AgentHandle;
use crate::error::Result;
use crate::host::HostAgent;

/// What one scrape reports, read on the agent's thread.
///
/// # Errors
/// Map read failures.
pub fn read(a: &HostAgent, out: &mut Samples) -> Result<()> {
    let mut ids = vec![0];
    ids.extend(a.tenant_ids());
    for id in ids {
        let s = a.stats(id)?;
        let t = s.name.as_str();
        out.set("rampart_tenant_packets_total", &[t], s.packets as f64);
        out.set("rampart_tenant_bytes_total", &[t], s.bytes as f64);
        out.set(
            "rampart_tenant_cpu_seconds_total",
            &[t],
            s.cpu_ns as f64 / 1e9,
        );
        out.set(
            "rampart_tenant_stack_cpu_seconds_total",
            &[t],
            s.stack_ns as f64 / 1e9,
        );
        for (k, v) in &s.verdicts {
            out.set("rampart_tenant_verdict_packets_total", &[t, k], *v as f64);
        }
        for (k, v) in &s.drops {
            out.set("rampart_tenant_dropped_packets_total", &[t, k], *v as f64);
        }
        if id != 0 {
            out.set(
                "rampart_tenant_tokens_seconds",
                &[t],
                s.tokens.level_ns as f64 / 1e9,
            );
            out.set(
                "rampart_tenant_tokens_granted_seconds_total",
                &[t],
                s.tokens.granted_ns as f64 / 1e9,
            );
            out.set(
                "rampart_tenant_program_version",
                &[t],
                a.program(id).map_or(0.0, |p| p.version as f64),
            );
        }
    }
    out.set(
        "rampart_tenant_generation",
        &[&a.config().infra.name],
        a.generation() as f64,
    );
    Ok(())
}

/// The collector of the tenant daemon: asks the agent at every scrape.
pub fn collector(agent: AgentHandle) -> StateCollector {
    collector_of(move || Some(agent.clone()))
}

/// The collector of whichever agent `agent()` names at the scrape (none:
/// no samples) — for a host where a reload starts and stops the instance.
pub fn collector_of(
    agent: impl Fn() -> Option<AgentHandle> + Send + Sync + 'static,
) -> StateCollector {
    StateCollector::new(move |out| {
        let Some(agent) = agent() else {
            return Ok(());
        };
        let mut s = Samples::default();
        agent
            .call(move |a| read(a, &mut s).map(|()| s))
            .map_err(|e| e.to_string())?
            .map(|s| out.extend(s))
            .map_err(|e| e.to_string())
    })
    .counter(
        "rampart_tenant_packets_total",
        "Packets the dispatcher assigned to the tenant",
        &["tenant"],
    )
    .counter(
        "rampart_tenant_bytes_total",
        "Bytes of those packets",
        &["tenant"],
    )
    .counter(
        "rampart_tenant_cpu_seconds_total",
        "CPU time charged to the tenant",
        &["tenant"],
    )
    .counter(
        "rampart_tenant_stack_cpu_seconds_total",
        "Of the CPU time charged, the part on the kernel path after XDP",
        &["tenant"],
    )
    .counter(
        "rampart_tenant_verdict_packets_total",
        "Final XDP verdicts",
        &["tenant", "verdict"],
    )
    .counter(
        "rampart_tenant_dropped_packets_total",
        "Packets the infrastructure dropped, by reason",
        &["tenant", "reason"],
    )
    .gauge(
        "rampart_tenant_tokens_seconds",
        "Token bucket level, CPU seconds (granted - used)",
        &["tenant"],
    )
    .counter(
        "rampart_tenant_tokens_granted_seconds_total",
        "CPU seconds of tokens granted by the token generator",
        &["tenant"],
    )
    .gauge(
        "rampart_tenant_program_version",
        "Version of the running program (0: none)",
        &["tenant"],
    )
    .gauge(
        "rampart_tenant_generation",
        "Generation of the infrastructure program",
        &["instance"],
    )
}
