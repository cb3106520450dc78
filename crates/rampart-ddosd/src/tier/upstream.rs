//! `upstream`: the router in front of the host, reached over BGP through
//! ExaBGP — rampart does not speak BGP itself.
//!
//! The tier writes ExaBGP's text API to a command pipe that ExaBGP reads
//! through a `process` of its configuration (`run /bin/cat PIPE;`, see
//! docs/upstream.md). Two kinds of announcement:
//! - **FlowSpec** (RFC 8955/8956) per blocked source prefix: `discard`,
//!   or a rate limit, optionally only towards one destination — what
//!   [`Tier::install`] does with the planner's prefixes;
//! - **RTBH** (RFC 7999) for a victim: its /32 or /128 with the
//!   BLACKHOLE community 65535:666 (plus configured ones), the last resort
//!   when an attack fills the link: the router drops everything to it.
//!
//! The router keeps no per-rule counters for us: [`CounterKind::None`];
//! rates come from the host's view. Guards: nothing is announced for a
//! prefix that overlaps a `never` prefix (the operator's own networks,
//! the whitelist), at most `max_rules` announcements at once, and a
//! dry-run mode that logs what it would announce and writes nothing.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use rampart_ddos::Prefix;
use serde::{Deserialize, Serialize};

use super::{CounterKind, Counts, Tier, TierInfo};
use crate::error::{Error, Result};

/// The BLACKHOLE community (RFC 7999).
pub const BLACKHOLE: &str = "65535:666";

/// What a FlowSpec rule does with the traffic it matches.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Action {
    /// Drop all of it (traffic-rate 0).
    Discard,
    /// Let through at most this many bytes per second.
    RateLimit {
        /// Bytes per second.
        bytes_per_s: u32,
    },
}

/// The upstream tier's settings (`[ddos.upstream]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// ExaBGP's command pipe (a FIFO its `process` reads).
    pub command_pipe: PathBuf,
    /// Next hop of RTBH announcements (the router rewrites it to its discard
    /// next hop; any address of this host on the BGP session does).
    pub next_hop: Option<IpAddr>,
    /// Communities added to every RTBH announcement besides 65535:666.
    pub communities: Vec<String>,
    /// Announcements at once, FlowSpec and RTBH together.
    pub max_rules: usize,
    /// Log what would be announced; write nothing.
    pub dry_run: bool,
    /// Prefixes never announced, nor anything inside or around them (your
    /// own networks, the whitelist, the BGP session's addresses).
    pub never: Vec<IpNet>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            command_pipe: PathBuf::from("/run/rampart/exabgp.cmd"),
            next_hop: None,
            communities: Vec::new(),
            max_rules: 100,
            dry_run: false,
            never: Vec::new(),
        }
    }
}

/// One announcement the tier holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Announcement {
    /// FlowSpec: traffic from `source` (towards `dest`, when set).
    Flow {
        /// Source prefix.
        source: IpNet,
        /// Destination prefix, if the rule is for one victim.
        dest: Option<IpNet>,
    },
    /// RTBH of one victim address.
    Blackhole {
        /// The victim.
        victim: IpAddr,
    },
}

/// The upstream tier: what it announced, and the pipe to ExaBGP.
#[derive(Debug)]
pub struct Upstream {
    cfg: UpstreamConfig,
    action: Action,
    pipe: Option<File>,
    held: BTreeMap<Announcement, String>,
    last_cost: Duration,
}

fn pipe_help(path: &Path) -> String {
    format!(
        "create it with `mkfifo -m 600 {p}` and have ExaBGP read it: `process rampart {{ run /bin/cat {p}; encoder text; }}` (docs/upstream.md)",
        p = path.display()
    )
}

impl Upstream {
    /// Open the command pipe (not in dry-run mode). FlowSpec rules
    /// installed through [`Tier::install`] do `action`.
    ///
    /// # Errors
    /// The pipe is missing or not a FIFO, or cannot be opened; a bad config.
    pub fn open(cfg: UpstreamConfig, action: Action) -> Result<Self> {
        if cfg.max_rules == 0 {
            return Err(Error::Config(
                "ddos.upstream.max_rules = 0: announce at least 1 rule, or remove [ddos.upstream]"
                    .into(),
            ));
        }
        for c in &cfg.communities {
            let ok = c
                .split_once(':')
                .is_some_and(|(a, b)| a.parse::<u16>().is_ok() && b.parse::<u16>().is_ok());
            if !ok {
                return Err(Error::Config(format!(
                    "ddos.upstream.communities: {c:?} is not ASN:VALUE (two numbers 0..=65535)"
                )));
            }
        }
        let pipe = if cfg.dry_run {
            None
        } else {
            Some(open_pipe(&cfg.command_pipe)?)
        };
        Ok(Self {
            cfg,
            action,
            pipe,
            held: BTreeMap::new(),
            last_cost: Duration::ZERO,
        })
    }

    /// What the tier announces now.
    pub fn announced(&self) -> Vec<Announcement> {
        self.held.keys().cloned().collect()
    }

    /// Announce `a` (again, if it is held: ExaBGP replaces a route with
    /// itself, which re-sends it after a restart of either side).
    ///
    /// # Errors
    /// A guarded prefix, the cap, or the pipe's failure.
    pub fn announce(&mut self, a: Announcement) -> Result<()> {
        self.guard(&a)?;
        if !self.held.contains_key(&a) && self.held.len() >= self.cfg.max_rules {
            return Err(Error::Full {
                tier: "upstream",
                capacity: self.cfg.max_rules,
            });
        }
        let line = self.line(&a)?;
        self.send(&format!("announce {line}"))?;
        self.held.insert(a, line);
        Ok(())
    }

    /// Withdraw `a` (nothing when it is not held).
    ///
    /// # Errors
    /// The pipe's failure (`a` stays held).
    pub fn withdraw(&mut self, a: &Announcement) -> Result<bool> {
        let Some(line) = self.held.get(a).cloned() else {
            return Ok(false);
        };
        self.send(&format!("withdraw {line}"))?;
        self.held.remove(a);
        Ok(true)
    }

    /// RTBH `victim`: the router drops all traffic to it.
    ///
    /// # Errors
    /// As [`Self::announce`].
    pub fn blackhole(&mut self, victim: IpAddr) -> Result<()> {
        self.announce(Announcement::Blackhole { victim })
    }

    fn guard(&self, a: &Announcement) -> Result<()> {
        let (net, what) = match a {
            Announcement::Flow { source, .. } => (*source, "source"),
            Announcement::Blackhole { victim } => (IpNet::from(*victim), "victim"),
        };
        if net.prefix_len() == 0 {
            return Err(Error::Refused {
                tier: "upstream",
                prefix: net.to_string(),
                reason: "a default route is never announced".into(),
            });
        }
        if let Some(n) = self
            .cfg
            .never
            .iter()
            .find(|n| n.contains(&net) || net.contains(*n))
        {
            return Err(Error::Refused {
                tier: "upstream",
                prefix: net.to_string(),
                reason: format!("the {what} overlaps {n} in ddos.upstream.never"),
            });
        }
        Ok(())
    }

    /// The route part of an ExaBGP text API command.
    fn line(&self, a: &Announcement) -> Result<String> {
        Ok(match a {
            Announcement::Flow { source, dest } => {
                let mut m = format!("source {source};");
                if let Some(d) = dest {
                    m.push_str(&format!(" destination {d};"));
                }
                let then = match self.action {
                    Action::Discard => "discard;".to_string(),
                    Action::RateLimit { bytes_per_s } => format!("rate-limit {bytes_per_s};"),
                };
                format!("flow route {{ match {{ {m} }} then {{ {then} }} }}")
            }
            Announcement::Blackhole { victim } => {
                let nh = self.cfg.next_hop.ok_or_else(|| {
                    Error::Config(
                        "ddos.upstream.next_hop is needed for RTBH: this host's address on the BGP session"
                            .into(),
                    )
                })?;
                let len = if victim.is_ipv4() { 32 } else { 128 };
                let mut c = vec![BLACKHOLE.to_string()];
                c.extend(self.cfg.communities.iter().cloned());
                format!(
                    "route {victim}/{len} next-hop {nh} community [{}]",
                    c.join(" ")
                )
            }
        })
    }

    fn send(&mut self, cmd: &str) -> Result<()> {
        let t0 = Instant::now();
        match &mut self.pipe {
            None => tracing::info!("upstream (dry run): {cmd}"),
            Some(p) => {
                p.write_all(format!("{cmd}\n").as_bytes()).map_err(|e| {
                    Error::io(
                        format!(
                            "writing to ExaBGP's command pipe {} (is ExaBGP running and reading it?)",
                            self.cfg.command_pipe.display()
                        ),
                        e,
                    )
                })?;
                tracing::debug!("upstream: {cmd}");
            }
        }
        self.last_cost = t0.elapsed();
        Ok(())
    }
}

fn open_pipe(path: &Path) -> Result<File> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::io(
            format!(
                "ExaBGP's command pipe {}: {}",
                path.display(),
                pipe_help(path)
            ),
            e,
        )
    })?;
    if !meta.file_type().is_fifo() {
        return Err(Error::Config(format!(
            "ddos.upstream.command_pipe {} is not a FIFO: {}",
            path.display(),
            pipe_help(path)
        )));
    }
    // Read-write, non-blocking: opening never waits for ExaBGP, and ExaBGP's
    // reader never sees end-of-file while the daemon lives. A full pipe
    // (ExaBGP not reading) fails the write instead of stalling the daemon.
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            Error::io(
                format!("opening ExaBGP's command pipe {}", path.display()),
                e,
            )
        })
}

impl Tier for Upstream {
    fn info(&self) -> TierInfo {
        TierInfo {
            name: "upstream",
            role: "upstream",
            location: format!("ExaBGP via {}", self.cfg.command_pipe.display()),
            capacity: Some(self.cfg.max_rules),
            update_cost: self.last_cost,
            counters: CounterKind::None,
            emulated: false,
        }
    }

    fn install(&mut self, add: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in add {
            let a = Announcement::Flow {
                source: p.net(),
                dest: None,
            };
            if !self.held.contains_key(&a) {
                self.announce(a)?;
                n += 1;
            }
        }
        Ok(n)
    }

    fn remove(&mut self, remove: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in remove {
            let a = Announcement::Flow {
                source: p.net(),
                dest: None,
            };
            n += usize::from(self.withdraw(&a)?);
        }
        Ok(n)
    }

    fn rules(&self) -> Result<Vec<(Prefix, Counts)>> {
        Ok(self
            .held
            .keys()
            .filter_map(|a| match a {
                Announcement::Flow { source, .. } => Prefix::from_net(*source).ok(),
                Announcement::Blackhole { .. } => None,
            })
            .map(|p| (p, Counts::default()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dry(never: &[&str]) -> Upstream {
        Upstream::open(
            UpstreamConfig {
                dry_run: true,
                next_hop: Some("192.0.2.1".parse().unwrap()),
                communities: vec!["65001:999".into()],
                max_rules: 3,
                never: never.iter().map(|n| n.parse().unwrap()).collect(),
                ..UpstreamConfig::default()
            },
            Action::Discard,
        )
        .unwrap()
    }

    #[test]
    fn lines_are_exabgp_text_api_commands() {
        let u = dry(&[]);
        let flow = Announcement::Flow {
            source: "203.0.113.0/24".parse().unwrap(),
            dest: Some("198.51.100.7/32".parse().unwrap()),
        };
        assert_eq!(
            u.line(&flow).unwrap(),
            "flow route { match { source 203.0.113.0/24; destination 198.51.100.7/32; } then { discard; } }"
        );
        let bh = Announcement::Blackhole {
            victim: "2001:db8::7".parse().unwrap(),
        };
        assert_eq!(
            u.line(&bh).unwrap(),
            "route 2001:db8::7/128 next-hop 192.0.2.1 community [65535:666 65001:999]"
        );
        let mut r = dry(&[]);
        r.action = Action::RateLimit {
            bytes_per_s: 125_000,
        };
        assert!(r
            .line(&flow)
            .unwrap()
            .ends_with("then { rate-limit 125000; } }"));
    }

    #[test]
    fn guarded_prefixes_the_default_route_and_the_cap_are_refused() {
        let mut u = dry(&["198.51.100.0/24"]);
        let src = |s: &str| Announcement::Flow {
            source: s.parse().unwrap(),
            dest: None,
        };
        for bad in ["198.51.100.9/32", "198.51.0.0/16", "0.0.0.0/0"] {
            let e = u.announce(src(bad)).unwrap_err().to_string();
            assert!(e.contains("cannot hold"), "{bad}: {e}");
        }
        assert!(u.blackhole("198.51.100.7".parse().unwrap()).is_err());
        for ok in ["203.0.113.1/32", "203.0.113.2/32", "203.0.113.3/32"] {
            u.announce(src(ok)).unwrap();
        }
        // Announcing a held rule again is not a new rule.
        u.announce(src("203.0.113.1/32")).unwrap();
        let e = u.announce(src("203.0.113.4/32")).unwrap_err().to_string();
        assert!(e.contains("full (3 rules)"), "{e}");
        assert!(u.withdraw(&src("203.0.113.1/32")).unwrap());
        assert!(!u.withdraw(&src("203.0.113.1/32")).unwrap());
        u.announce(src("203.0.113.4/32")).unwrap();
        assert_eq!(u.announced().len(), 3);
    }

    #[test]
    fn bad_settings_and_a_missing_pipe_say_what_to_do() {
        let e = Upstream::open(
            UpstreamConfig {
                communities: vec!["666".into()],
                ..UpstreamConfig::default()
            },
            Action::Discard,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ASN:VALUE"), "{e}");
        let e = Upstream::open(
            UpstreamConfig {
                command_pipe: "/nonexistent/exabgp.cmd".into(),
                ..UpstreamConfig::default()
            },
            Action::Discard,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mkfifo") && e.contains("No such file"), "{e}");
        let e = dry(&[])
            .line(&Announcement::Blackhole {
                victim: "192.0.2.9".parse().unwrap(),
            })
            .map(|_| ())
            .and_then(|()| {
                let u = Upstream::open(
                    UpstreamConfig {
                        dry_run: true,
                        ..UpstreamConfig::default()
                    },
                    Action::Discard,
                )?;
                u.line(&Announcement::Blackhole {
                    victim: "192.0.2.9".parse().unwrap(),
                })
                .map(|_| ())
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("next_hop"), "{e}");
    }
}
