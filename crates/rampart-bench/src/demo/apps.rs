//! The demo's stream and tenant parts, on the same `rampart run` as the
//! DDoS part: a port scan from one wan address that the port-scan app on
//! the tap flags ([`scan`], before the attack: during and after it the
//! victim's SYN cookies answer every SYN in XDP, ahead of the tap), and a
//! tenant's DNS rate limiter in front of a real resolver (dnsmasq in the
//! tenant's namespace) under a dnsperf flood from one wan address while
//! legitimate `dig` queries come from others ([`run`]).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_lab::Lab;
use rampart_tenant::client::Client;
use rampart_tenant::programs::{DnsLimits, DnsStats, DNS_RATELIMIT_C};
use serde::Serialize;

use crate::error::{Error, Result};

/// The wan address that scans host0 (no attacker, not the web client).
pub const SCANNER: Ipv4Addr = Ipv4Addr::new(10, 10, 5, 1);
/// The wan address dnsperf floods the tenant's resolver from.
pub const FLOODER: Ipv4Addr = Ipv4Addr::new(10, 10, 3, 1);
/// Legitimate DNS clients in wan (another /24 than the flooder: the
/// limiter's per-prefix budget is theirs alone).
pub const DIG_CLIENTS: [Ipv4Addr; 4] = [
    Ipv4Addr::new(10, 10, 4, 1),
    Ipv4Addr::new(10, 10, 4, 2),
    Ipv4Addr::new(10, 10, 4, 3),
    Ipv4Addr::new(10, 10, 4, 4),
];
/// The tenant namespace with the resolver.
pub const TENANT: u32 = 1;
/// The tenant's name (`[[tenant.tenant]]` and its token's name).
pub const TENANT_NAME: &str = "dns";
/// The tenant's token (the demo's own token file).
pub const TENANT_TOKEN: &str = "demo-dns-tenant-token";
/// What the resolver answers for example.com.
const ANSWER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 53);
/// The ports nmap scans.
const SCAN_PORTS: &str = "1-300";

/// What the demo runs in this part.
#[derive(Debug, Clone)]
pub struct AppsSpec {
    /// Seconds of the dnsperf flood (the digs run meanwhile).
    pub dns_seconds: f64,
    /// dnsperf's query rate (`-Q`).
    pub dns_qps: u32,
}

/// `stream` in the report.
#[derive(Debug, Default, Serialize)]
pub struct StreamSection {
    /// Flow records the flowmeter emitted (flows that ended, and at the
    /// stop those still open).
    pub flows: u64,
    /// Alerts of the stream apps.
    pub alerts: u64,
    /// The scanning address.
    pub scanner: String,
    /// nmap's ports (`-sS -p`).
    pub scanned_ports: String,
    /// The port-scan app flagged the scanner.
    pub scanner_flagged: bool,
    /// Scan start → the scanner's alert (seconds), when flagged.
    pub flagged_after_s: Option<f64>,
    /// Every source the port-scan app flagged.
    pub flagged: Vec<String>,
    /// The apps that shared the tap.
    pub apps: Vec<&'static str>,
}

/// `tenant` in the report.
#[derive(Debug, Default, Serialize)]
pub struct TenantSection {
    /// The tenant and its program.
    pub tenant: String,
    /// The program (submitted through the tenant API as C source).
    pub program: &'static str,
    /// The resolver in the tenant's namespace.
    pub resolver: String,
    /// The limiter's settings (the program's defaults).
    pub per_source_qps: f64,
    /// Per /24 of sources.
    pub per_prefix_qps: f64,
    /// Over budget: `truncate` (TC=1 answer, the client retries over TCP) or `drop`.
    pub over_budget: &'static str,
    /// dnsperf: the flooding address.
    pub flooder: String,
    /// dnsperf: queries sent.
    pub flood_queries: u64,
    /// dnsperf: queries answered (by the resolver or by the limiter's TC=1 answer).
    pub flood_answered: u64,
    /// dnsperf's rate (queries/s).
    pub flood_qps: f64,
    /// Queries the limiter passed to the resolver.
    pub passed: u64,
    /// Queries the limiter answered TC=1 itself (over budget).
    pub truncated: u64,
    /// Queries the limiter dropped (over budget, drop mode; malformed).
    pub dropped: u64,
    /// Share of the flood's queries the limiter kept from the resolver
    /// (truncated + dropped, of the flood's queries).
    pub flood_limited_pct: f64,
    /// dig queries from the legitimate clients.
    pub dig_sent: u64,
    /// dig queries answered with the resolver's address.
    pub dig_ok: u64,
    /// dig_ok / dig_sent.
    pub dig_ok_pct: f64,
    /// The legitimate clients.
    pub dig_clients: Vec<String>,
}

/// The extra wan addresses (scanner, flooder, dig clients) on wan0: the
/// host routes them back through wan (its default route).
///
/// # Errors
/// `ip` failing.
pub fn add_wan_addresses(lab: &Lab) -> Result<()> {
    for a in [SCANNER, FLOODER].iter().chain(DIG_CLIENTS.iter()) {
        rampart_dataplane::cmd::in_ns(
            &lab.wan_ns(),
            "ip",
            &[
                "addr",
                "add",
                &format!("{a}/32"),
                "dev",
                rampart_lab::topology::WAN_IF,
            ],
        )?;
    }
    Ok(())
}

/// The tenant's resolver: dnsmasq on the tenant's address.
///
/// # Errors
/// dnsmasq missing or not listening.
pub fn start_resolver(lab: &Lab) -> Result<rampart_tenant::services::Daemon> {
    Ok(rampart_tenant::services::dnsmasq(
        &lab.tenant_ns(TENANT),
        tenant_addr(),
        ANSWER,
    )?)
}

fn tenant_addr() -> Ipv4Addr {
    Ipv4Addr::from(Lab::tenant_v4(TENANT))
}

/// `[tenant]` of the demo's `rampart run` config: one tenant owning its
/// namespace's addresses.
pub fn tenant_toml(infra_name: &str) -> String {
    let [a, b, c, _] = Lab::tenant_v4(TENANT);
    format!(
        "[tenant.infra]\nname = \"{infra_name}\"\n\
         [[tenant.tenant]]\nname = \"{TENANT_NAME}\"\nselectors = [\"prefix:{a}.{b}.{c}.0/24\"]\n"
    )
}

fn api_err(what: &str, e: &rampart_tenant::client::ApiFailure) -> Error {
    Error::Failed(format!("tenant API: {what}: {}", e.message()))
}

/// As the tenant would: submit the DNS rate limiter (C source) and set
/// its limits through the tenant API of `rampart run`.
///
/// # Errors
/// The API refusing the program or the limits.
pub fn install_limiter(api: &str) -> Result<DnsLimits> {
    let c = Client::new(api, TENANT_TOKEN);
    c.put("/tenant/v1/program", DNS_RATELIMIT_C.as_bytes())?
        .map_err(|e| api_err("submitting dns_ratelimit.c", &e))?;
    // The defaults by name (the limiter starts with no limit at all).
    let limits = DnsLimits::default();
    let body = serde_json::to_value(rampart_tenant::settings::DnsSettings::from(&limits))
        .map_err(|e| Error::Failed(format!("the DNS settings as JSON: {e}")))?;
    c.put_json("/tenant/v1/config/dns", &body)?
        .map_err(|e| api_err("setting the DNS limits", &e))?;
    Ok(limits)
}

/// The limiter's counters, read through the tenant API (`dns_stats`, a
/// per-CPU array of u64 counters in [`DnsStats`]' order).
fn dns_stats(api: &str) -> Result<DnsStats> {
    let dump = Client::new(api, TENANT_TOKEN)
        .get("/tenant/v1/maps/dns_stats")?
        .map_err(|e| api_err("reading dns_stats", &e))?;
    let mut c = [0u64; 7];
    for e in dump["entries"].as_array().into_iter().flatten() {
        let k = e["key"]
            .as_str()
            .and_then(|k| le_u64(k).ok())
            .unwrap_or(u64::MAX);
        let Some(slot) = usize::try_from(k).ok().and_then(|k| c.get_mut(k)) else {
            continue;
        };
        for v in e["value"].as_array().into_iter().flatten() {
            *slot += v.as_str().and_then(|h| le_u64(h).ok()).unwrap_or(0);
        }
    }
    Ok(DnsStats {
        passed: c[0],
        truncated: c[1],
        dropped: c[2],
        exempt: c[3],
        malformed: c[4],
        other: c[5],
        bad_frame: c[6],
    })
}

/// A little-endian integer of up to 8 bytes written as hex.
fn le_u64(h: &str) -> std::result::Result<u64, std::num::ParseIntError> {
    let mut v = 0u64;
    for i in (0..h.len().min(16)).step_by(2).rev() {
        v = (v << 8) | u64::from(u8::from_str_radix(&h[i..i + 2], 16)?);
    }
    Ok(v)
}

/// dnsperf's summary: (queries sent, completed, rate).
fn parse_dnsperf(out: &str) -> (u64, u64, f64) {
    let num = |key: &str| -> Option<f64> {
        out.lines()
            .find(|l| l.trim_start().starts_with(key))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    (
        num("Queries sent").unwrap_or(0.0) as u64,
        num("Queries completed").unwrap_or(0.0) as u64,
        num("Queries per second").unwrap_or(0.0),
    )
}

/// The tenant submits its limiter; the DNS flood with the digs meanwhile;
/// the limiter's counters.
///
/// # Errors
/// A tool failing to start, the tenant API failing.
pub fn run(
    lab: &Lab,
    spec: &AppsSpec,
    api: &str,
    dir: &Path,
    cancel: &AtomicBool,
) -> Result<TenantSection> {
    let limits = install_limiter(api)?;
    let before = dns_stats(api)?;
    let queries = dir.join("dnsperf-queries.txt");
    std::fs::write(&queries, "example.com A\n")
        .map_err(|e| Error::io(format!("writing {}", queries.display()), e))?;
    let wan = lab.wan_ns();
    let server = tenant_addr().to_string();
    let secs = format!("{:.0}", spec.dns_seconds.max(1.0));
    let qps = spec.dns_qps.to_string();
    let flooder = FLOODER.to_string();
    let done = AtomicBool::new(false);
    let (dig_sent, dig_ok) = (AtomicU64::new(0), AtomicU64::new(0));
    let perf = std::thread::scope(|s| {
        let perf = s.spawn(|| {
            let r = rampart_dataplane::cmd::in_ns(
                &wan,
                "dnsperf",
                &[
                    "-s",
                    &server,
                    "-a",
                    &flooder,
                    "-d",
                    &queries.display().to_string(),
                    "-l",
                    &secs,
                    "-Q",
                    &qps,
                    "-c",
                    "1",
                    "-t",
                    "2",
                ],
            );
            done.store(true, Ordering::Relaxed);
            r
        });
        // The legitimate clients, in turn, while the flood lasts.
        let mut i = 0usize;
        while !done.load(Ordering::Relaxed) && !cancel.load(Ordering::Relaxed) {
            let src = DIG_CLIENTS[i % DIG_CLIENTS.len()].to_string();
            i += 1;
            dig_sent.fetch_add(1, Ordering::Relaxed);
            let out = rampart_dataplane::cmd::in_ns(
                &wan,
                "dig",
                &[
                    &format!("@{server}"),
                    "-b",
                    &src,
                    "example.com",
                    "A",
                    "+short",
                    "+tries=1",
                    "+time=2",
                ],
            )
            .unwrap_or_default();
            if out.lines().any(|l| l.trim() == ANSWER.to_string()) {
                dig_ok.fetch_add(1, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        perf.join()
            .map_err(|_| Error::Failed("dnsperf thread panicked".into()))
    });
    let perf = perf??;
    if cancel.load(Ordering::Relaxed) {
        return Err(Error::Interrupted);
    }
    let after = dns_stats(api)?;
    let (sent, completed, rate) = parse_dnsperf(&perf);
    let passed = after.passed - before.passed;
    let truncated = after.truncated - before.truncated;
    let dropped = (after.dropped + after.malformed) - (before.dropped + before.malformed);
    let (ds, dk) = (dig_sent.into_inner(), dig_ok.into_inner());
    let pct = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
    let tenant = TenantSection {
        tenant: format!("{TENANT_NAME} ({})", lab.tenant_ns(TENANT)),
        program: "dns_ratelimit.c",
        resolver: format!("dnsmasq on {}:53", tenant_addr()),
        per_source_qps: limits.src_qps,
        per_prefix_qps: limits.pfx_qps,
        over_budget: if limits.truncate { "truncate" } else { "drop" },
        flooder: FLOODER.to_string(),
        flood_queries: sent,
        flood_answered: completed,
        flood_qps: rate,
        passed,
        truncated,
        dropped,
        flood_limited_pct: pct((truncated + dropped).min(sent), sent),
        dig_sent: ds,
        dig_ok: dk,
        dig_ok_pct: pct(dk, ds),
        dig_clients: DIG_CLIENTS.iter().map(ToString::to_string).collect(),
    };
    Ok(tenant)
}

/// The scan under way: its alert watched for in the alert stream.
pub struct ScanWatch {
    stop: Arc<AtomicBool>,
    watcher: std::thread::JoinHandle<Option<f64>>,
}

impl ScanWatch {
    /// Scan start → the scanner's alert (seconds), if it came.
    pub fn finish(self) -> Option<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.watcher.join().ok().flatten()
    }
}

/// nmap -sS of host0's address from [`SCANNER`] (until nmap ends); the
/// port-scan app's alert for it is watched for until [`ScanWatch::finish`].
///
/// # Errors
/// nmap failing.
pub fn scan(lab: &Lab, alerts_file: &Path) -> Result<ScanWatch> {
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let (st, file): (Arc<AtomicBool>, PathBuf) = (stop.clone(), alerts_file.to_path_buf());
    let watcher = std::thread::spawn(move || {
        while !st.load(Ordering::Relaxed) {
            if scanners(&file).contains(&SCANNER.to_string()) {
                return Some(t0.elapsed().as_secs_f64());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    });
    let w = ScanWatch { stop, watcher };
    rampart_dataplane::cmd::in_ns(
        &lab.wan_ns(),
        "nmap",
        &[
            "-sS",
            "-n",
            "-Pn",
            "-e",
            rampart_lab::topology::WAN_IF,
            "-S",
            &SCANNER.to_string(),
            "-p",
            SCAN_PORTS,
            "--max-retries",
            "1",
            &Ipv4Addr::from(rampart_lab::topology::HOST_V4).to_string(),
        ],
    )?;
    Ok(w)
}

/// The sources flagged by port-scan alerts in the alert file.
fn scanners(alerts_file: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in std::fs::read_to_string(alerts_file)
        .unwrap_or_default()
        .lines()
    {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["rampart"]["event"] != "port_scan" {
            continue;
        }
        if let Some(src) = v["src_ip"].as_str() {
            if !out.iter().any(|x| x == src) {
                out.push(src.to_string());
            }
        }
    }
    out
}

/// The stream section once `rampart run` stopped (its apps flush then):
/// the flow count, and every port-scan alert in the alert stream.
pub fn stream_section(
    flows: u64,
    alerts: u64,
    flagged_after_s: Option<f64>,
    alerts_file: &Path,
) -> StreamSection {
    let flagged = scanners(alerts_file);
    StreamSection {
        flows,
        alerts,
        scanner: SCANNER.to_string(),
        scanned_ports: SCAN_PORTS.into(),
        scanner_flagged: flagged.contains(&SCANNER.to_string()),
        flagged_after_s,
        flagged,
        apps: vec!["flowmeter", "portscan"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dnsperf_summary_is_read() {
        let out = "Statistics:\n\n  Queries sent:         20000\n  Queries completed:    19990 (99.95%)\n  Queries lost:         10 (0.05%)\n\n  Queries per second:   1999.000000\n";
        assert_eq!(parse_dnsperf(out), (20000, 19990, 1999.0));
        assert_eq!(parse_dnsperf("nothing"), (0, 0, 0.0));
    }

    #[test]
    fn map_values_are_little_endian() {
        assert_eq!(le_u64("2a00000000000000").unwrap(), 42);
        assert_eq!(le_u64("01000000").unwrap(), 1);
        assert_eq!(le_u64("0001").unwrap(), 256);
        assert!(le_u64("zz").is_err());
    }
}
