//! `rampart ddos run [--config FILE]`: the mitigation daemon (crates/rampart-ddosd).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::Args;
use rampart_ddosd::{Config, Handle};

/// `rampart ddos run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML configuration (every key optional; dist/rampart-ddos.toml is the
    /// commented reference). Without it, the defaults.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (every default filled in) as TOML, and exit.
    #[arg(long)]
    pub print_config: bool,
}

pub fn run(a: RunArgs, cancel: &AtomicBool) -> Result<()> {
    let cfg = match &a.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if a.print_config {
        print!("{}", cfg.render()?);
        return Ok(());
    }
    // Before any thread starts: without root, one line naming what is missing.
    rampart_dataplane::features::require_root("rampart ddos run")?;
    let server_cfg = cfg.server.clone();
    let h = Handle::spawn(cfg)?;
    let server = rampart_ddosd::api::start(&h, &server_cfg)?;
    // SIGHUP and POST /v1/reload re-read the file (docs/operations.md).
    let owner = h.owner();
    let path = a.config.clone();
    server.on_reload(move |side| rampart_ddosd::daemon::reload_file(&owner, path.as_deref(), side));
    let v = h.view();
    let mut api = String::new();
    if let Some(a) = server.api_addr() {
        api.push_str(&format!(", API on http://{a}"));
    }
    if let Some(m) = server.metrics_addr() {
        api.push_str(&format!(", metrics on http://{m}/metrics"));
    }
    tracing::info!(
        "rampart ddos daemon: mode {}, {} tiers, {} sources blocked{}{api}",
        v.mode,
        v.tiers.len(),
        v.blocked.len(),
        if v.resumed {
            " (resumed from pinned state)"
        } else {
            ""
        },
    );
    server.run_until(cancel);
    h.stop()?;
    tracing::info!("rampart ddos daemon stopped; filtering stays in force (state pinned)");
    Ok(())
}
