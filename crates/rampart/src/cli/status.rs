//! `rampart status`: what the running daemons do now.

use anyhow::{bail, Result};
use clap::Args;
use rampart_service::status::{self, DEFAULT_SERVERS};

use super::util::print_json;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A daemon's API (repeatable). Default: `rampart run`, `rampart ddos
    /// run` and `rampart tenant serve` on their default listeners (ports
    /// 9470, 9477, 9610 of 127.0.0.1); name a `rampart stream … --listen`
    /// address to include it.
    #[arg(long = "server", value_name = "URL")]
    pub servers: Vec<String>,
    /// API token (a line of the daemons' server.token_file), needed for an
    /// API listening beyond loopback.
    #[arg(long, env = "RAMPART_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON (each daemon's `GET /v1/dashboard`).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: StatusArgs) -> Result<()> {
    let servers: Vec<String> = if a.servers.is_empty() {
        DEFAULT_SERVERS.iter().map(|s| (*s).to_string()).collect()
    } else {
        a.servers
            .iter()
            .map(|s| {
                if s.contains("://") {
                    s.clone()
                } else {
                    format!("http://{s}")
                }
            })
            .collect()
    };
    let r = status::read(&servers, a.token.as_deref());
    if r.daemons.is_empty() && r.errors.is_empty() {
        bail!(
            "no rampart daemon is running: nothing answers at {} (start `rampart run`, `rampart ddos run` or `rampart tenant serve`, or pass --server URL)",
            r.not_running.join(", ")
        );
    }
    if a.json {
        print_json(&r)?;
    } else {
        print!("{}", status::render(&r));
    }
    if let Some(e) = r.errors.first() {
        bail!("{}: {}", e.server, e.message);
    }
    Ok(())
}
