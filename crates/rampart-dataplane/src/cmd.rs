//! Running iproute2, ethtool, tc, iptables and friends, with errors that
//! show the command line (and which package installs a missing tool).

use std::process::Command;

use crate::Error;

/// Run `prog args...`; return stdout, or an error with the command and its stderr.
///
/// # Errors
/// [`Error::Command`] when it cannot start or exits non-zero.
pub fn run(prog: &str, args: &[&str]) -> Result<String, Error> {
    let line = format!("{prog} {}", args.join(" "));
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| Error::Command {
            cmd: line.clone(),
            stderr: if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{prog} is not installed (apt-get install {})",
                    package_of(prog)
                )
            } else {
                e.to_string()
            },
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: line,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip` with the given arguments.
///
/// # Errors
/// As [`run`].
pub fn ip(args: &[&str]) -> Result<String, Error> {
    run("ip", args)
}

/// Run a command inside a named namespace via `ip netns exec`.
///
/// # Errors
/// As [`run`].
pub fn in_ns(ns: &str, prog: &str, args: &[&str]) -> Result<String, Error> {
    let mut v = vec!["netns", "exec", ns, prog];
    v.extend_from_slice(args);
    run("ip", &v)
}

fn package_of(prog: &str) -> &'static str {
    match prog {
        "ip" => "iproute2",
        "ethtool" => "ethtool",
        "sysctl" => "procps",
        "nft" => "nftables",
        "iptables" => "iptables",
        "ipset" => "ipset",
        "xdp-filter" => "xdp-tools",
        "nginx" => "nginx",
        "wrk" => "wrk",
        _ => "the package that provides it",
    }
}
