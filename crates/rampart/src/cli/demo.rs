//! `rampart demo`: the main job, in a lab of its own.

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::Args;
use rampart_lab::dist::Dist;
use rampart_lab::gen::{GenSpec, Limit};
use rampart_lab::topology::UpOptions;
use rampart_lab::Lab;

use super::util::{print_json, si};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Lab prefix for the demo's own lab (removed at the end).
    #[arg(long, default_value = "demo")]
    pub prefix: String,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DemoArgs, cancel: &AtomicBool) -> Result<()> {
    let lab = Lab::new(&args.prefix)?;
    if !args.json {
        println!(
            "bringing lab {} up (wan → EMULATED NIC → host)",
            lab.prefix()
        );
    }
    lab.up(&UpOptions::default())?;
    let spec = GenSpec {
        sources: 1024,
        dist: Dist::Uniform,
        limit: Limit::Seconds(args.seconds),
        ..GenSpec::default()
    };
    let res = rampart_lab::gen::run_into_host(&lab, &spec, cancel);
    let down = lab.down();
    let r = res?;
    down?;
    if args.json {
        return print_json(&r);
    }
    println!(
        "generator: {} UDP packets from 1024 sources in {:.2} s = {}pps",
        r.gen.sent_packets,
        r.gen.seconds,
        si(r.gen.sent_pps)
    );
    println!(
        "host sink: {} packets received ({:.2}%)",
        r.received_packets,
        100.0 * r.received_packets as f64 / r.gen.sent_packets.max(1) as f64
    );
    println!("lab {} removed", lab.prefix());
    Ok(())
}
