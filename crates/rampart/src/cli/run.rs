//! `rampart run --config FILE [--check | --print-config]`: one daemon for
//! the host (crates/rampart-run).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::Args;
use rampart_run::Config;

/// `rampart run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML configuration: [[interface]] and any of [ddos], [stream], [tenant]
    /// (dist/rampart.toml is the commented reference).
    #[arg(long)]
    pub config: PathBuf,
    /// Validate the configuration against this host (interfaces present), print
    /// one line, and exit: 0 when it would start, 1 with the reason otherwise.
    /// What the host limits without stopping a start (a kernel without Landlock
    /// takes no tenant C source) is printed as a warning line before it.
    #[arg(long, conflicts_with = "print_config")]
    pub check: bool,
    /// Print the effective configuration (every default filled in) as TOML, and exit.
    #[arg(long)]
    pub print_config: bool,
}

pub fn run(a: RunArgs, cancel: &AtomicBool) -> Result<()> {
    let cfg = Config::load(&a.config)?;
    if a.print_config {
        print!("{}", cfg.render()?);
        return Ok(());
    }
    // Before anything is loaded: one line naming what this host lacks.
    rampart_dataplane::features::require_xdp_host("rampart run")?;
    cfg.check_system()?;
    if cfg.interface_from_route {
        eprintln!(
            "rampart run: the config names no [[interface]]: running on {}, the interface of the default route",
            cfg.interfaces[0].name
        );
    }
    for n in cfg.system_notes() {
        eprintln!("rampart run: warning: {n}");
    }
    if a.check {
        let ifaces: Vec<String> = cfg
            .interfaces
            .iter()
            .map(rampart_run::config::InterfaceConfig::describe)
            .collect();
        println!(
            "{}: OK: {} on {}",
            a.config.display(),
            cfg.stages().join(" -> "),
            ifaces.join(", ")
        );
        return Ok(());
    }
    let host = rampart_run::Host::start(&cfg)?;
    let api = host
        .api_addr()
        .map(|a| format!(", API on http://{a} (/ddos/v1/…, /tenant/v1/…)"))
        .unwrap_or_default();
    let ifaces: Vec<String> = cfg
        .interfaces
        .iter()
        .map(rampart_run::config::InterfaceConfig::describe)
        .collect();
    eprintln!(
        "rampart run: {} on {}{api}",
        cfg.stages().join(" -> "),
        ifaces.join(", ")
    );
    // SIGHUP and POST /v1/reload re-read the file (docs/run.md).
    host.reload_from(&a.config);
    host.wait(cancel);
    host.stop();
    eprintln!("rampart run stopped; the ddos stage stays in the chain, filtering (state pinned)");
    Ok(())
}
