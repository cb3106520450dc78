//! `rampart lab ...`

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Args, Subcommand};
use rampart_lab::dist::Dist;
use rampart_lab::gen::{GenSpec, Limit};
use rampart_lab::packet::{self, Proto};
use rampart_lab::topology::{self, UpOptions, DEFAULT_PREFIX};
use rampart_lab::Lab;

use super::util::{print_json, si};

/// Which lab (several can run side by side).
#[derive(Debug, Args, Clone)]
pub struct LabSel {
    /// Lab prefix: namespaces are PREFIX-wan, PREFIX-nic, PREFIX-host, PREFIX-t<i>.
    #[arg(long, default_value = DEFAULT_PREFIX, global = true)]
    pub prefix: String,
}

#[derive(Debug, Subcommand)]
pub enum LabCmd {
    /// Create the wan → nic → host topology (idempotent).
    Up {
        #[command(flatten)]
        sel: LabSel,
        /// Tenant namespaces to create behind host.
        #[arg(long, default_value_t = 0)]
        tenants: u32,
        /// Capacity K (rules) of the EMULATED NIC's source-prefix table (default 512).
        #[arg(long)]
        nic_capacity: Option<u32>,
    },
    /// Remove everything `up` created, and nothing else.
    Down {
        #[command(flatten)]
        sel: LabSel,
    },
    /// Show namespaces, interfaces, addresses, MACs, routes and XDP programs.
    Status {
        #[command(flatten)]
        sel: LabSel,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Transmit from wan with the XDP live-frames generator, counted on host.
    Gen(GenArgs),
    /// Attach the counting XDP_DROP sink on host0 and report received pps.
    Sink {
        #[command(flatten)]
        sel: LabSel,
        /// How long to count (until Ctrl-C if omitted).
        #[arg(long)]
        seconds: Option<f64>,
        /// Print JSON (one object at the end).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct GenArgs {
    #[command(flatten)]
    pub sel: LabSel,
    /// Distinct source addresses (IPv4 from 172.16.0.0/12, IPv6 from fd66::/96).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub sources: u32,
    /// Per-source share: uniform, gaussian or zipf.
    #[arg(long, default_value = "uniform")]
    pub dist: String,
    /// Distribution parameter: gaussian sigma as a fraction of --sources (0.15), zipf exponent (1.0).
    #[arg(long, allow_negative_numbers = true)]
    pub dist_param: Option<f64>,
    /// udp, syn, ack, rst, dns or icmp.
    #[arg(long, default_value = "udp")]
    pub proto: String,
    /// Frame size in bytes without FCS (default 64, or the smallest that fits the headers).
    #[arg(long)]
    pub size: Option<usize>,
    /// Send IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Total packets per second (paced); full speed if omitted.
    #[arg(long, allow_negative_numbers = true)]
    pub pps: Option<f64>,
    /// Run for this many seconds (default 1).
    #[arg(long, conflicts_with = "count", allow_negative_numbers = true)]
    pub seconds: Option<f64>,
    /// Send exactly this many packets.
    #[arg(long)]
    pub count: Option<u64>,
    /// Generator threads, one per CPU (two need the lab's two veth queues).
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Source port (TCP/UDP).
    #[arg(long, default_value_t = 40000)]
    pub sport: u16,
    /// Destination port (default: 9 for udp, 80 for syn/ack, 53 for dns).
    #[arg(long)]
    pub dport: Option<u16>,
    /// Destination address (default: host's address in the lab).
    #[arg(long)]
    pub dst: Option<std::net::IpAddr>,
    /// Draw this many low bits of the destination at random per packet
    /// (carpet bombing: 8 covers the destination's /24; 0-32).
    #[arg(long, default_value_t = 0)]
    pub dst_spread_bits: u8,
    /// Draw the TCP sequence number at random per packet (syn, ack, rst).
    #[arg(long)]
    pub random_seq: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

impl GenArgs {
    /// Turn CLI arguments into a validated generator spec.
    pub fn spec(&self) -> Result<GenSpec> {
        let dist = Dist::parse(&self.dist, self.dist_param)?;
        let proto: Proto = self.proto.parse()?;
        let spec = GenSpec {
            sources: self.sources,
            dist,
            proto,
            size: self
                .size
                .unwrap_or_else(|| packet::min_size(proto, self.ipv6).max(64)),
            ipv6: self.ipv6,
            pps: self.pps,
            limit: match (self.seconds, self.count) {
                (_, Some(c)) => Limit::Count(c),
                (Some(s), None) => Limit::Seconds(s),
                (None, None) => Limit::Seconds(1.0),
            },
            threads: self.threads,
            sport: self.sport,
            dport: self.dport,
            dst: self.dst,
            dst_spread_bits: self.dst_spread_bits,
            random_seq: self.random_seq,
            ..GenSpec::default()
        };
        spec.validate()?;
        Ok(spec)
    }
}

pub fn run(cmd: LabCmd, cancel: &AtomicBool) -> Result<()> {
    match cmd {
        LabCmd::Up {
            sel,
            tenants,
            nic_capacity,
        } => {
            let lab = Lab::new(&sel.prefix)?;
            lab.up(&UpOptions {
                tenants,
                nic_capacity,
                ..UpOptions::default()
            })?;
            println!(
                "lab {} is up: {} ({}) → {} (EMULATED NIC) → {} ({}){}",
                lab.prefix(),
                lab.wan_ns(),
                std::net::Ipv4Addr::from(topology::WAN_V4),
                lab.nic_ns(),
                lab.host_ns(),
                std::net::Ipv4Addr::from(topology::HOST_V4),
                if tenants > 0 {
                    format!(", {tenants} tenant namespace(s)")
                } else {
                    String::new()
                }
            );
            Ok(())
        }
        LabCmd::Down { sel } => {
            let lab = Lab::new(&sel.prefix)?;
            lab.down()?;
            println!("lab {} is down", lab.prefix());
            Ok(())
        }
        LabCmd::Status { sel, json } => {
            let lab = Lab::new(&sel.prefix)?;
            let st = lab.status()?;
            if json {
                return print_json(&st);
            }
            println!("lab {}: {}", st.prefix, st.state);
            for ns in &st.namespaces {
                if !ns.exists {
                    println!("  {:<8} {:<12} (missing)", ns.role, ns.netns);
                    continue;
                }
                println!("  {:<8} {}", ns.role, ns.netns);
                for i in &ns.interfaces {
                    println!(
                        "    {:<9} {} {:<5} {}{}",
                        i.name,
                        i.mac,
                        i.state,
                        i.addrs.join(" "),
                        i.xdp
                            .as_ref()
                            .map(|x| format!("  xdp:{x}"))
                            .unwrap_or_default()
                    );
                }
                for r in &ns.routes {
                    println!("    route {r}");
                }
            }
            if let Some(p) = &st.pins {
                println!("  pins     {p}");
            }
            Ok(())
        }
        LabCmd::Gen(args) => {
            let spec = args.spec()?;
            let lab = Lab::new(&args.sel.prefix)?;
            let r = rampart_lab::gen::run_into_host(&lab, &spec, cancel)?;
            if args.json {
                return print_json(&r);
            }
            println!(
                "sent {} packets in {:.2} s ({}pps, {} thread(s), {} {} sources, {} {} B)",
                r.gen.sent_packets,
                r.gen.seconds,
                si(r.gen.sent_pps),
                r.gen.threads,
                r.gen.sources,
                args.dist,
                args.proto,
                r.gen.size
            );
            let pct = if r.gen.sent_packets > 0 {
                100.0 * r.received_packets as f64 / r.gen.sent_packets as f64
            } else {
                0.0
            };
            println!(
                "host received {} packets ({pct:.2}%, {}pps, counted by {})",
                r.received_packets,
                si(r.received_pps),
                r.counted_by
            );
            Ok(())
        }
        LabCmd::Sink { sel, seconds, json } => {
            let lab = Lab::new(&sel.prefix)?;
            lab.require_up()?;
            rampart_dataplane::features::require_root("rampart lab sink")?;
            let sink = rampart_lab::sink::Sink::attach(&lab.host_ns(), topology::HOST_IF, false)?;
            let start = Instant::now();
            let first = sink.counts()?;
            let mut last = first;
            let mut t_last = start;
            if let Some(s) = seconds {
                if !(s.is_finite() && s > 0.0) {
                    super::util::usage_bail!("--seconds {s} out of range: use a number > 0");
                }
            }
            while !cancel.load(Ordering::Relaxed)
                && seconds.is_none_or(|s| start.elapsed().as_secs_f64() < s)
            {
                std::thread::sleep(Duration::from_millis(100));
                if t_last.elapsed() >= Duration::from_secs(1) && !json {
                    let c = sink.counts()?;
                    let dt = t_last.elapsed().as_secs_f64();
                    println!("{}pps", si((c.packets - last.packets) as f64 / dt));
                    last = c;
                    t_last = Instant::now();
                }
            }
            let end = sink.counts()?;
            let secs = start.elapsed().as_secs_f64();
            let packets = end.packets - first.packets;
            let out = serde_json::json!({
                "received_packets": packets,
                "received_bytes": end.bytes - first.bytes,
                "seconds": secs,
                "received_pps": packets as f64 / secs,
            });
            if json {
                print_json(&out)
            } else {
                println!(
                    "received {packets} packets in {secs:.2} s ({}pps)",
                    si(packets as f64 / secs)
                );
                Ok(())
            }
        }
    }
}
