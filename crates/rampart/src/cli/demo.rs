//! `rampart demo`: the product's demo — DDoS mitigation, stream analytics
//! and a tenant's DNS rate limiter under one `rampart run` on one
//! interface, in a lab of its own (rampart_bench::demo says what it runs
//! and reports).

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::Args;
use rampart_bench::demo::DemoSpec;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Which demo: `all` (the only one; the default).
    #[arg(default_value = "all")]
    pub which: String,
    /// Lab prefix for the demo's own lab (removed at the end).
    #[arg(long, default_value = "demo")]
    pub prefix: String,
    /// Seconds of wrk without an attack (the reference); the daemon learns normal traffic meanwhile.
    #[arg(long, default_value_t = 6.0)]
    pub baseline_seconds: f64,
    /// Seconds the attack lasts.
    #[arg(long, default_value_t = 20.0)]
    pub attack_seconds: f64,
    /// UDP flood: packets per second (paced).
    #[arg(long, default_value_t = 300_000.0)]
    pub udp_pps: f64,
    /// UDP flood: distinct sources (Zipf rates).
    #[arg(long, default_value_t = 4000)]
    pub udp_sources: u32,
    /// SYN flood on port 80: packets per second (paced).
    #[arg(long, default_value_t = 150_000.0)]
    pub syn_pps: f64,
    /// SYN flood: distinct sources (Zipf rates; the first ones also send the UDP flood).
    #[arg(long, default_value_t = 2000)]
    pub syn_sources: u32,
    /// Zipf exponent of both floods.
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// K: rules of the EMULATED NIC table.
    #[arg(long, default_value_t = 512)]
    pub nic_capacity: u32,
    /// Daemon interval (seconds).
    #[arg(long, default_value_t = 0.2)]
    pub interval: f64,
    /// wrk connections (fixed for the whole run).
    #[arg(long, default_value_t = 8)]
    pub connections: u32,
    /// CPU for nginx and wrk in both runs (the generator, a stand-in for
    /// attackers on other machines, runs on CPU 0).
    #[arg(long, default_value_t = 1)]
    pub service_cpu: usize,
    /// Do not pin nginx and wrk: they then share CPU 0 with the generator
    /// under attack but not in the reference run (legit_ok_pct then measures
    /// the lab's generator as much as the attack).
    #[arg(long)]
    pub no_pin: bool,
    /// Longest wait for every source to be unbanned after the attack (seconds).
    #[arg(long, default_value_t = 60.0)]
    pub unban_timeout: f64,
    /// Seconds of the dnsperf flood on the tenant's resolver (after the attack).
    #[arg(long, default_value_t = 8.0)]
    pub dns_seconds: f64,
    /// dnsperf's query rate (queries/s, from one source).
    #[arg(long, default_value_t = 2000)]
    pub dns_qps: u32,
    /// Print one JSON object (sections `ddos`, `stream`, `tenant`).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DemoArgs, cancel: &AtomicBool) -> Result<()> {
    let spec = DemoSpec {
        which: a.which,
        prefix: a.prefix,
        baseline_seconds: a.baseline_seconds,
        attack_seconds: a.attack_seconds,
        udp_pps: a.udp_pps,
        udp_sources: a.udp_sources,
        syn_pps: a.syn_pps,
        syn_sources: a.syn_sources,
        zipf: a.zipf,
        nic_capacity: a.nic_capacity,
        interval: a.interval,
        connections: a.connections,
        service_cpu: a.service_cpu,
        no_pin: a.no_pin,
        unban_timeout: a.unban_timeout,
        dns_seconds: a.dns_seconds,
        dns_qps: a.dns_qps,
        json: a.json,
    };
    Ok(rampart_bench::demo::run(&spec, cancel)?)
}
