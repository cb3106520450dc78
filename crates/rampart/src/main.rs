//! `rampart`: one binary, one subcommand per application.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Parser, Subcommand};

mod cli;
mod logging;

/// rampart — a Linux host data plane for network security and analytics on eBPF/XDP.
#[derive(Debug, Parser)]
#[command(name = "rampart", version, about, propagate_version = true)]
#[command(
    after_help = "Logs go to stderr. RUST_LOG picks what is shown (tracing's EnvFilter syntax, \
e.g. RUST_LOG=debug or RUST_LOG=warn,rampart_ddosd=debug); without it, daemons show info and above, \
other commands warnings and errors."
)]
struct Cli {
    /// Log lines as text (colours only on a terminal) or as JSON objects, one a line.
    #[arg(long, value_enum, default_value_t = logging::LogFormat::Text, global = true)]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// One daemon for the host: ddos, stream and tenant chained on each interface (one config).
    Run(cli::run::RunArgs),
    /// What the running daemons do now: interfaces, stages, tiers, attacks (their APIs).
    Status(cli::status::StatusArgs),
    /// The lab: netns topology, traffic generator, counting sink.
    #[command(subcommand)]
    Lab(cli::lab::LabCmd),
    /// Run the main demo in a lab of its own and print a report.
    Demo(cli::demo::DemoArgs),
    /// Stream analytics: flowmeter, portscan, synflood on pcap, synthetic or AF_XDP sources.
    #[command(subcommand)]
    Stream(cli::stream::StreamCmd),
    /// DDoS data plane: XDP source blacklist and feature extraction (state pinned).
    #[command(subcommand)]
    Ddos(cli::ddos::DdosCmd),
    /// Tenant offload: serve the API, or act as a tenant (submit, stats, …).
    #[command(subcommand)]
    Tenant(cli::tenant::TenantCmd),
    /// Benchmarks: `rampart bench <name>`.
    #[command(subcommand)]
    Bench(cli::bench::BenchCmd),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (rampart.1 and one per subcommand) into a directory.
    Man {
        /// Directory (created if missing).
        #[arg(long, default_value = ".")]
        out: std::path::PathBuf,
    },
}

impl Cmd {
    /// Long-running services log their progress (`info`); one-shot
    /// commands keep stderr for warnings and errors.
    fn default_log_level(&self) -> &'static str {
        let daemon = match self {
            Cmd::Ddos(c) => c.is_daemon(),
            Cmd::Tenant(c) => c.is_daemon(),
            Cmd::Run(a) => !a.check && !a.print_config,
            _ => false,
        };
        if daemon {
            "info"
        } else {
            "warn"
        }
    }
}

/// clap renders errors over several lines (usage, hints); rampart's CLI
/// promise is one clear line per error.
fn one_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let parts: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect();
    parts.join(" ")
}

/// Bad arguments exit 2 (as clap's own errors do); failures exit 1.
fn is_usage_error(e: &anyhow::Error) -> bool {
    e.downcast_ref::<cli::util::UsageError>().is_some()
        || matches!(
            e.downcast_ref::<rampart_stream::Error>(),
            Some(rampart_stream::Error::Invalid(_))
        )
        || matches!(
            e.downcast_ref::<rampart_lab::Error>(),
            Some(rampart_lab::Error::InvalidSpec(_))
        )
        || e.downcast_ref::<rampart_bench::Error>()
            .is_some_and(rampart_bench::Error::is_usage)
}

/// `rampart man`: the man pages clap describes, one per command.
fn man_pages(out: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use clap::CommandFactory;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    clap_mangen::generate_to(Cli::command(), out)
        .with_context(|| format!("writing man pages into {}", out.display()))?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                | ErrorKind::MissingSubcommand => {
                    let _ = e.print();
                    ExitCode::from(2)
                }
                _ => {
                    eprintln!("{}", one_line(&e));
                    ExitCode::from(2)
                }
            };
        }
    };
    let log_format = cli.log_format;
    logging::init(log_format, cli.cmd.default_log_level());

    let cancel = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&cancel));
    }
    // `rampart … | head`: a `println!` that finds the pipe closed panics;
    // that panic unwinds (every lab, link and pin is released by its Drop)
    // and ends the command quietly instead of printing a crash report.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !cli::util::is_broken_pipe_panic(info.payload()) {
            default_hook(info);
        }
    }));
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match cli.cmd {
        Cmd::Run(a) => cli::run::run(a, &cancel),
        Cmd::Status(a) => cli::status::run(a),
        Cmd::Lab(c) => cli::lab::run(c, &cancel),
        Cmd::Demo(a) => cli::demo::run(a, &cancel),
        Cmd::Stream(c) => cli::stream::run(c, &cancel),
        Cmd::Ddos(c) => cli::ddos::run(c, &cancel),
        Cmd::Tenant(c) => cli::tenant::run(c, &cancel),
        Cmd::Bench(c) => cli::bench::run(c, &cancel),
        Cmd::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "rampart",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Cmd::Man { out } => man_pages(&out),
    }));
    let res = match res {
        Ok(r) => r,
        Err(p) if cli::util::is_broken_pipe_panic(&*p) => return ExitCode::SUCCESS,
        Err(p) => std::panic::resume_unwind(p),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if log_format == logging::LogFormat::Json {
                tracing::error!("{e:#}");
            } else {
                eprintln!("error: {e:#}");
            }
            if is_usage_error(&e) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
