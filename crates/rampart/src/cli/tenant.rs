//! `rampart tenant …`: serve the API, and act as a tenant against it.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use rampart_tenant::client::{Client, Reply};
use serde_json::Value;

use super::util::print_json;

/// How a client reaches the API.
#[derive(Debug, Args, Clone)]
pub struct ClientArgs {
    /// URL of `rampart tenant serve`.
    #[arg(
        long,
        env = "RAMPART_TENANT_SERVER",
        default_value = "http://127.0.0.1:9610",
        global = true
    )]
    pub server: String,
    /// The tenant's API token (its line `NAME TOKEN` in the server's token file).
    #[arg(
        long,
        env = "RAMPART_TENANT_TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum TenantCmd {
    /// Run the host agent, compiler agent and HTTP API for a config file.
    Serve {
        /// TOML configuration (dist/rampart-tenant.toml is the commented reference).
        #[arg(long, required_unless_present = "print_config")]
        config: Option<PathBuf>,
        /// Print the effective configuration (every default filled in) as TOML, and exit.
        #[arg(long)]
        print_config: bool,
    },
    /// Submit or replace your program (C source or BPF object).
    Submit {
        #[command(flatten)]
        client: ClientArgs,
        /// The program: a .c file (compiled against rampart_tenant.h) or a BPF .o.
        file: PathBuf,
    },
    /// Remove your program (your packets then pass untouched; your maps stay).
    Remove {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Your selectors, program and limits.
    Status {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Your packets, verdicts, drops by reason, CPU time and tokens.
    Stats {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show your selectors, or replace them with --set.
    Selectors {
        #[command(flatten)]
        client: ClientArgs,
        /// New selectors (prefix:ADDR/LEN, vlan:ID, vni:ID, iface:NAME), replacing all.
        #[arg(long, num_args = 1..)]
        set: Option<Vec<String>>,
    },
    /// List your maps, dump one, or change an entry.
    Maps {
        #[command(flatten)]
        client: ClientArgs,
        /// Map to dump or change.
        map: Option<String>,
        /// Set an entry: KEY=VALUE, both hex.
        #[arg(long, requires = "map", conflicts_with = "delete")]
        set: Option<String>,
        /// Delete the entry with this key (hex).
        #[arg(long, requires = "map")]
        delete: Option<String>,
    },
    /// Show or change a ready-made service's settings by name (no flag: show them).
    Config {
        #[command(subcommand)]
        service: ServiceConfig,
    },
    /// Print the tenant API header programs compile against.
    Header,
    /// Remove the pins of a crashed `serve` instance.
    Cleanup {
        /// Instance name (infra.name in the config).
        #[arg(long, default_value = "default")]
        name: String,
    },
}

/// The ready-made services whose settings `rampart tenant config` changes.
#[derive(Debug, Subcommand)]
pub enum ServiceConfig {
    /// The DNS rate limiter (dns_ratelimit.c): budgets per source and per prefix, mode, exempt sources.
    Dns {
        #[command(flatten)]
        client: ClientArgs,
        /// Queries per second per source address: 0 (no limit) or 0.001..=1000000000.
        #[arg(long, allow_negative_numbers = true)]
        per_source_qps: Option<f64>,
        /// Queries a source may send at once: 1..=1000000.
        #[arg(long, allow_negative_numbers = true)]
        per_source_burst: Option<i64>,
        /// Queries per second per source prefix: 0 (no limit) or 0.001..=1000000000.
        #[arg(long, allow_negative_numbers = true)]
        per_prefix_qps: Option<f64>,
        /// Queries a prefix may send at once: 1..=1000000.
        #[arg(long, allow_negative_numbers = true)]
        per_prefix_burst: Option<i64>,
        /// Over budget: truncate (an empty TC=1 answer; resolvers retry over TCP) or drop.
        #[arg(long)]
        mode: Option<String>,
        /// IPv4 prefix length of the per-prefix budget: 1..=32.
        #[arg(long, allow_negative_numbers = true)]
        prefix_len_v4: Option<i64>,
        /// IPv6 prefix length of the per-prefix budget: 1..=64.
        #[arg(long, allow_negative_numbers = true)]
        prefix_len_v6: Option<i64>,
        /// Sources never limited (ADDR/LEN), replacing the list; `--exempt` alone empties it.
        #[arg(long, num_args = 0..)]
        exempt: Option<Vec<String>>,
    },
    /// The SYN-cookie proxy (synproxy.c): protected ports, SYN-ACK MSS, window scale, TTL.
    Synproxy {
        #[command(flatten)]
        client: ClientArgs,
        /// MSS announced in SYN-ACKs over IPv4: 536..=65535.
        #[arg(long, allow_negative_numbers = true)]
        mss_v4: Option<i64>,
        /// MSS announced over IPv6: 1220..=65535.
        #[arg(long, allow_negative_numbers = true)]
        mss_v6: Option<i64>,
        /// Window scale announced: 0..=14 (match the server's; Linux uses 7).
        #[arg(long, allow_negative_numbers = true)]
        wscale: Option<i64>,
        /// TTL / hop limit of SYN-ACKs: 1..=255.
        #[arg(long, allow_negative_numbers = true)]
        ttl: Option<i64>,
        /// TCP ports protected (1..=65535), replacing the list.
        #[arg(long, num_args = 1.., allow_negative_numbers = true)]
        ports: Option<Vec<i64>>,
    },
}

impl TenantCmd {
    /// `rampart tenant serve` is a daemon (its log shows `info`).
    pub fn is_daemon(&self) -> bool {
        matches!(self, TenantCmd::Serve { print_config, .. } if !print_config)
    }
}

fn client(a: &ClientArgs) -> Result<Client> {
    let Some(token) = a.token.as_deref() else {
        super::util::usage_bail!("no token: pass --token or set RAMPART_TENANT_TOKEN");
    };
    Ok(Client::new(&a.server, token))
}

/// Print a reply (JSON or the given human form); an API error becomes the one-line error.
fn show(reply: Reply, json: bool, human: impl FnOnce(&Value)) -> Result<()> {
    match reply {
        Ok(v) => {
            if json {
                print_json(&v)
            } else {
                human(&v);
                Ok(())
            }
        }
        Err(f) => {
            if let Some(log) = f.detail("verifier_log") {
                eprintln!(
                    "--- verifier log ---\n{}\n--- end of verifier log ---",
                    log.trim_end()
                );
            }
            if let Some(c) = f.detail("compiler") {
                eprintln!(
                    "--- compiler output ---\n{}\n--- end of compiler output ---",
                    c.trim_end()
                );
            }
            bail!("{}", f.message())
        }
    }
}

fn pretty(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

pub fn run(cmd: TenantCmd, cancel: &AtomicBool) -> Result<()> {
    match cmd {
        TenantCmd::Serve {
            config,
            print_config,
        } => {
            let cfg = match &config {
                Some(p) => rampart_tenant::config::Config::load(p)?,
                None => rampart_tenant::config::Config::default(),
            };
            if print_config {
                print!("{}", cfg.render()?);
                return Ok(());
            }
            if let Err(why) = rampart_tenant::compiler::sandbox_abi() {
                eprintln!("rampart tenant serve: warning: {why}");
            }
            rampart_tenant::serve::serve(cfg, config.as_deref(), cancel)?;
            Ok(())
        }
        TenantCmd::Submit { client: c, file } => {
            let body =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            show(client(&c)?.put("/v1/program", &body)?, c.json, |v| {
                println!(
                    "program v{} running (generation {}): {} instructions, {} verified, maps: {}",
                    v["version"],
                    v["generation"],
                    v["insns"],
                    v["verified_insns"],
                    v["maps"]
                        .as_array()
                        .map(|m| m
                            .iter()
                            .map(|x| format!(
                                "{}{}",
                                x["name"].as_str().unwrap_or("?"),
                                if x["kept"] == true {
                                    " (state kept)"
                                } else {
                                    ""
                                }
                            ))
                            .collect::<Vec<_>>()
                            .join(", "))
                        .unwrap_or_default()
                );
            })
        }
        TenantCmd::Remove { client: c } => show(client(&c)?.delete("/v1/program")?, c.json, |v| {
            println!(
                "{}",
                if v["removed"] == true {
                    "program removed"
                } else {
                    "no program was running"
                }
            );
        }),
        TenantCmd::Status { client: c } => show(client(&c)?.get("/v1/tenant")?, c.json, pretty),
        TenantCmd::Stats { client: c } => show(client(&c)?.get("/v1/stats")?, c.json, pretty),
        TenantCmd::Selectors { client: c, set } => {
            let cl = client(&c)?;
            let reply = match set {
                Some(s) => cl.put_json("/v1/selectors", &serde_json::json!(s))?,
                None => cl.get("/v1/selectors")?,
            };
            show(reply, c.json, |v| {
                for s in v.as_array().into_iter().flatten() {
                    println!("{}", s.as_str().unwrap_or_default());
                }
            })
        }
        TenantCmd::Maps {
            client: c,
            map,
            set,
            delete,
        } => {
            let cl = client(&c)?;
            let reply = match (map, set, delete) {
                (None, _, _) => cl.get("/v1/maps")?,
                (Some(m), Some(kv), _) => {
                    let (k, v) = kv.split_once('=').context("--set takes KEY=VALUE (hex)")?;
                    cl.put_json(
                        &format!("/v1/maps/{m}/{k}"),
                        &serde_json::json!({ "value": v }),
                    )?
                }
                (Some(m), None, Some(k)) => cl.delete(&format!("/v1/maps/{m}/{k}"))?,
                (Some(m), None, None) => cl.get(&format!("/v1/maps/{m}"))?,
            };
            show(reply, c.json, pretty)
        }
        TenantCmd::Config { service } => config(service),
        TenantCmd::Header => {
            print!("{}", rampart_tenant::compiler::TENANT_HEADER);
            Ok(())
        }
        TenantCmd::Cleanup { name } => {
            if rampart_tenant::host::cleanup(&name)? {
                println!("removed the pins of tenant instance {name}");
            } else {
                println!("no pins for tenant instance {name}");
            }
            Ok(())
        }
    }
}

/// Print settings by name, one `field value` a line.
fn settings_lines(v: &Value) {
    for (k, x) in v.as_object().into_iter().flatten() {
        let x = match x {
            Value::String(s) => s.clone(),
            Value::Array(a) => a
                .iter()
                .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(" "),
            // 10.0 queries/s reads as the 10 the tenant typed.
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
                _ => n.to_string(),
            },
            other => other.to_string(),
        };
        println!("{k} {x}");
    }
}

/// A settings error as a usage error naming the flag (the API's field
/// `per_source_qps` is the flag `--per-source-qps`).
fn as_flag(e: rampart_tenant::Error) -> anyhow::Error {
    let m = e.to_string();
    let (field, rest) = m.split_at(m.find([' ', ':']).unwrap_or(m.len()));
    super::util::usage(format!("--{}{rest}", field.replace('_', "-")))
}

/// What a settings command sends: the flags given (checked first: `check`
/// is their validation) as a PUT body, or nothing (a GET) with none.
fn settings_body<T: serde::Serialize + Default + PartialEq>(
    s: &T,
    check: rampart_tenant::Result<()>,
) -> Result<Option<Value>> {
    check.map_err(as_flag)?;
    Ok(if *s == T::default() {
        None
    } else {
        Some(serde_json::to_value(s)?)
    })
}

/// `rampart tenant config dns|synproxy`: every flag is checked here with the
/// server's own rules, so a bad one exits 2 before any request.
fn config(service: ServiceConfig) -> Result<()> {
    use rampart_tenant::settings::{DnsSettings, SynSettings};
    let (c, path, body) = match service {
        ServiceConfig::Dns {
            client,
            per_source_qps,
            per_source_burst,
            per_prefix_qps,
            per_prefix_burst,
            mode,
            prefix_len_v4,
            prefix_len_v6,
            exempt,
        } => {
            let mode = match mode {
                Some(m) => Some(m.parse().map_err(as_flag)?),
                None => None,
            };
            let s = DnsSettings {
                per_source_qps,
                per_source_burst,
                per_prefix_qps,
                per_prefix_burst,
                mode,
                prefix_len_v4,
                prefix_len_v6,
                exempt,
            };
            let body = settings_body(&s, s.validate())?;
            (client, "/v1/config/dns", body)
        }
        ServiceConfig::Synproxy {
            client,
            mss_v4,
            mss_v6,
            wscale,
            ttl,
            ports,
        } => {
            let s = SynSettings {
                mss_v4,
                mss_v6,
                wscale,
                ttl,
                ports,
            };
            let body = settings_body(&s, s.validate())?;
            (client, "/v1/config/synproxy", body)
        }
    };
    let cl = client(&c)?;
    let reply = match body {
        Some(b) => cl.put_json(path, &b)?,
        None => cl.get(path)?,
    };
    show(reply, c.json, settings_lines)
}
