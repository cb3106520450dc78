//! Prometheus metrics per tenant, built from the data path's counters at
//! every scrape (the counters live in BPF maps; a fresh registry per
//! scrape turns their absolute values into counters without drift).

use prometheus::{Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::error::{Error, Result};
use crate::host::HostAgent;

fn prom(e: prometheus::Error) -> Error {
    Error::Invalid(format!("metrics: {e}"))
}

/// The metrics text of one scrape.
///
/// # Errors
/// Map read failures.
pub fn render(a: &HostAgent) -> Result<String> {
    let reg = Registry::new();
    let counter = |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec> {
        let c = IntCounterVec::new(Opts::new(name, help), labels).map_err(prom)?;
        reg.register(Box::new(c.clone())).map_err(prom)?;
        Ok(c)
    };
    let gauge = |name: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec> {
        let g = IntGaugeVec::new(Opts::new(name, help), labels).map_err(prom)?;
        reg.register(Box::new(g.clone())).map_err(prom)?;
        Ok(g)
    };
    let packets = counter(
        "rampart_tenant_packets_total",
        "Packets the dispatcher assigned to the tenant",
        &["tenant"],
    )?;
    let bytes = counter(
        "rampart_tenant_bytes_total",
        "Bytes of those packets",
        &["tenant"],
    )?;
    let cpu = counter(
        "rampart_tenant_cpu_nanoseconds_total",
        "CPU time charged to the tenant",
        &["tenant"],
    )?;
    let stack = counter(
        "rampart_tenant_stack_cpu_nanoseconds_total",
        "Of the CPU time charged, the part on the kernel path after XDP",
        &["tenant"],
    )?;
    let verdicts = counter(
        "rampart_tenant_verdicts_total",
        "Final XDP verdicts",
        &["tenant", "verdict"],
    )?;
    let drops = counter(
        "rampart_tenant_drops_total",
        "Packets the infrastructure dropped, by reason",
        &["tenant", "reason"],
    )?;
    let level = gauge(
        "rampart_tenant_tokens_nanoseconds",
        "Token bucket level (granted - used)",
        &["tenant"],
    )?;
    let granted = counter(
        "rampart_tenant_tokens_granted_nanoseconds_total",
        "Tokens granted by Algorithm 1",
        &["tenant"],
    )?;
    let version = gauge(
        "rampart_tenant_program_version",
        "Version of the running program (0: none)",
        &["tenant"],
    )?;
    let generation = gauge(
        "rampart_tenant_generation",
        "Generation of the infrastructure program",
        &["instance"],
    )?;
    let mut ids = vec![0];
    ids.extend(a.tenant_ids());
    for id in ids {
        let s = a.stats(id)?;
        let t = s.name.as_str();
        packets.with_label_values(&[t]).inc_by(s.packets);
        bytes.with_label_values(&[t]).inc_by(s.bytes);
        cpu.with_label_values(&[t]).inc_by(s.cpu_ns);
        stack.with_label_values(&[t]).inc_by(s.stack_ns);
        for (k, v) in &s.verdicts {
            verdicts.with_label_values(&[t, k]).inc_by(*v);
        }
        for (k, v) in &s.drops {
            drops.with_label_values(&[t, k]).inc_by(*v);
        }
        if id != 0 {
            level.with_label_values(&[t]).set(s.tokens.level_ns);
            granted.with_label_values(&[t]).inc_by(s.tokens.granted_ns);
            version
                .with_label_values(&[t])
                .set(a.program(id).map_or(0, |p| p.version as i64));
        }
    }
    generation
        .with_label_values(&[&a.config().infra.name])
        .set(a.generation() as i64);
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&reg.gather(), &mut out)
        .map_err(prom)?;
    String::from_utf8(out).map_err(|e| Error::Invalid(format!("metrics: {e}")))
}
