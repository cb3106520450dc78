//! `rampart ddos run --config FILE`: the mitigation daemon (crates/rampart-ddosd).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use rampart_ddosd::api::{ApiState, Server};
use rampart_ddosd::{Config, Handle};

/// `rampart ddos run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML configuration (every key optional; see docs/architecture.md, "DDoS daemon").
    #[arg(long)]
    pub config: PathBuf,
    /// Print the configuration with every default filled in, and exit.
    #[arg(long)]
    pub print_config: bool,
}

pub fn run(a: RunArgs, cancel: &AtomicBool) -> Result<()> {
    let cfg = Config::load(&a.config)?;
    if a.print_config {
        println!(
            "{}",
            toml::to_string_pretty(&cfg).context("rendering the config")?
        );
        return Ok(());
    }
    let listen = cfg.daemon.listen.clone();
    let mode = cfg.daemon.mode.name();
    let h = Handle::spawn(cfg)?;
    let _server = if listen.is_empty() {
        None
    } else {
        Some(Server::start(&listen, ApiState::of(&h))?)
    };
    let v = h.view();
    eprintln!(
        "rampart ddos daemon: mode {mode}, {} tiers, {} sources blocked{}{}",
        v.tiers.len(),
        v.blocked.len(),
        if v.resumed {
            " (resumed from pinned state)"
        } else {
            ""
        },
        if listen.is_empty() {
            String::new()
        } else {
            format!(", API on http://{listen}")
        }
    );
    while !cancel.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    h.stop()?;
    eprintln!("rampart ddos daemon stopped; filtering stays in force (state pinned)");
    Ok(())
}
