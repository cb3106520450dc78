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

use rampart_ddos_control::upstream::UpstreamLevels;

use super::{CounterKind, Counts, Tier, TierInfo};
use crate::error::{Error, Result};

/// The BLACKHOLE community (RFC 7999).
pub const BLACKHOLE: &str = "65535:666";

/// What a FlowSpec rule does with the traffic it matches: in the config,
/// `"discard"` or `"rate-limit N"` (N bytes per second).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Action {
    /// Drop all of it (traffic-rate 0).
    Discard,
    /// Let through at most this many bytes per second.
    RateLimit {
        /// Bytes per second.
        bytes_per_s: u32,
    },
}

impl TryFrom<String> for Action {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        let t = s.trim();
        if t == "discard" {
            return Ok(Self::Discard);
        }
        match t.strip_prefix("rate-limit").map(str::trim) {
            Some(n) => n
                .parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .map(|bytes_per_s| Self::RateLimit { bytes_per_s })
                .ok_or_else(|| format!("action = {s:?}: the rate limit is bytes per second, 1 ..= 4294967295 (e.g. \"rate-limit 1250000\" for 10 Mbit/s)")),
            None => Err(format!(
                "action = {s:?}: use \"discard\" or \"rate-limit N\" (N bytes per second)"
            )),
        }
    }
}

impl From<Action> for String {
    fn from(a: Action) -> Self {
        match a {
            Action::Discard => "discard".into(),
            Action::RateLimit { bytes_per_s } => format!("rate-limit {bytes_per_s}"),
        }
    }
}

/// The upstream tier's settings (`[upstream]` of `rampart ddos run`,
/// `[ddos.upstream]` of `rampart run`). Off unless `enabled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Engage the router in front of the host. Default false.
    pub enabled: bool,
    /// ExaBGP's command pipe (a FIFO its `process` reads). Default
    /// `/run/rampart/exabgp.cmd`.
    pub command_pipe: PathBuf,
    /// What FlowSpec rules do: `"discard"` or `"rate-limit N"` (bytes per
    /// second). Default discard.
    pub action: Action,
    /// Also blackhole (RTBH, community 65535:666) the victims under attack
    /// while engaged: the router then drops *all* their traffic. Default false.
    pub rtbh: bool,
    /// Next hop of RTBH announcements (the router rewrites it to its discard
    /// next hop; any address of this host on the BGP session does).
    /// Required by `rtbh`.
    pub next_hop: Option<IpAddr>,
    /// Communities added to every RTBH announcement besides 65535:666.
    pub communities: Vec<String>,
    /// Announcements at once, FlowSpec and RTBH together. Default 100.
    pub max_rules: usize,
    /// Log and list what would be announced; write nothing. Default false.
    pub dry_run: bool,
    /// Prefixes never announced, nor anything inside or around them (your
    /// own networks' critical services, the BGP session's addresses);
    /// `[detect] whitelist` is never announced either.
    pub never: Vec<IpNet>,
    /// The host link's capacity, bits per second (0: not used). Default 0;
    /// set this or `link_capacity_pps` to enable the tier.
    pub link_capacity_bps: f64,
    /// The host link's capacity, packets per second (0: not used). Default 0.
    pub link_capacity_pps: f64,
    /// Engage when the volume the host drops reaches this share of the
    /// link. Default 0.8.
    pub engage_at: f64,
    /// Withdraw everything once that volume stays below this share ...
    /// Default 0.5.
    pub withdraw_below: f64,
    /// ... for this many seconds. Default 300.
    pub hold_s: f64,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        let l = UpstreamLevels::default();
        Self {
            enabled: false,
            command_pipe: PathBuf::from("/run/rampart/exabgp.cmd"),
            action: Action::Discard,
            rtbh: l.rtbh,
            next_hop: None,
            communities: Vec::new(),
            max_rules: l.max_rules,
            dry_run: false,
            never: Vec::new(),
            link_capacity_bps: l.link_capacity_bps,
            link_capacity_pps: l.link_capacity_pps,
            engage_at: l.engage_at,
            withdraw_below: l.withdraw_below,
            hold_s: l.hold_s,
        }
    }
}

impl UpstreamConfig {
    /// The planner's part.
    pub fn levels(&self) -> UpstreamLevels {
        UpstreamLevels {
            max_rules: self.max_rules,
            link_capacity_bps: self.link_capacity_bps,
            link_capacity_pps: self.link_capacity_pps,
            engage_at: self.engage_at,
            withdraw_below: self.withdraw_below,
            hold_s: self.hold_s,
            rtbh: self.rtbh,
        }
    }

    /// Check an enabled section (`section` names it in messages).
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self, section: &str) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        self.levels()
            .validate(section)
            .map_err(|e| Error::Config(e.to_string()))?;
        check_communities(&self.communities, section)?;
        if self.rtbh && self.next_hop.is_none() {
            return Err(Error::Config(format!(
                "{section}.rtbh = true needs {section}.next_hop: this host's address on the BGP session"
            )));
        }
        if let Some(n) = self.never.iter().find(|n| n.prefix_len() == 0) {
            return Err(Error::Config(format!(
                "{section}.never contains {n}: that guards everything; list your own prefixes instead"
            )));
        }
        Ok(())
    }
}

fn check_communities(cs: &[String], section: &str) -> Result<()> {
    for c in cs {
        let ok = c
            .split_once(':')
            .is_some_and(|(a, b)| a.parse::<u16>().is_ok() && b.parse::<u16>().is_ok());
        if !ok {
            return Err(Error::Config(format!(
                "{section}.communities: {c:?} is not ASN:VALUE (two numbers 0..=65535)"
            )));
        }
    }
    Ok(())
}

/// The FlowSpec components of a rule beyond its addresses (RFC 8955:
/// IP protocol, source and destination port, packet length); each one
/// left out matches anything.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct FlowMatch {
    /// IP protocol (next header): 6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u8>,
    /// Source port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_port: Option<u16>,
    /// Destination port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_port: Option<u16>,
    /// Packet length (IP total length), inclusive range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_length: Option<(u16, u16)>,
}

impl FlowMatch {
    /// The components in ExaBGP's text API (`protocol udp; source-port =123; …`).
    fn exabgp(&self) -> String {
        let mut m = String::new();
        if let Some(p) = self.protocol {
            match p {
                6 => m.push_str(" protocol tcp;"),
                17 => m.push_str(" protocol udp;"),
                1 => m.push_str(" protocol icmp;"),
                n => m.push_str(&format!(" protocol ={n};")),
            }
        }
        if let Some(p) = self.source_port {
            m.push_str(&format!(" source-port ={p};"));
        }
        if let Some(p) = self.dest_port {
            m.push_str(&format!(" destination-port ={p};"));
        }
        if let Some((lo, hi)) = self.packet_length {
            if lo == hi {
                m.push_str(&format!(" packet-length ={lo};"));
            } else {
                m.push_str(&format!(" packet-length >={lo}&<={hi};"));
            }
        }
        m
    }
}

/// One announcement the tier holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Announcement {
    /// FlowSpec: traffic from `source` (towards `dest`, when set) that
    /// also matches `matching`.
    Flow {
        /// Source prefix.
        source: IpNet,
        /// Destination prefix, if the rule is for one victim.
        dest: Option<IpNet>,
        /// Protocol, ports, packet length (a state file written before
        /// these existed reads back with none).
        #[serde(default)]
        matching: FlowMatch,
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
    /// Open the command pipe (not in dry-run mode). FlowSpec rules do
    /// `cfg.action`.
    ///
    /// # Errors
    /// The pipe is missing or not a FIFO, or cannot be opened; a bad config.
    pub fn open(cfg: UpstreamConfig) -> Result<Self> {
        if cfg.max_rules == 0 {
            return Err(Error::Config(
                "upstream.max_rules = 0: announce at least 1 rule, or set enabled = false".into(),
            ));
        }
        check_communities(&cfg.communities, "upstream")?;
        let action = cfg.action;
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

    /// What the tier announces now, as the ExaBGP commands that did it.
    pub fn announced_lines(&self) -> Vec<String> {
        self.held.values().cloned().collect()
    }

    /// Take over what a previous daemon announced (its state file) without
    /// sending it again: ExaBGP still holds those routes. Guarded ones
    /// are kept too, so the planner withdraws them.
    pub fn adopt(&mut self, held: &[Announcement]) {
        for a in held {
            if let Ok(line) = self.line(a) {
                self.held.insert(a.clone(), line);
            }
        }
    }

    /// Settings in force.
    pub fn config(&self) -> &UpstreamConfig {
        &self.cfg
    }

    /// Dry run: nothing is written.
    pub fn dry_run(&self) -> bool {
        self.pipe.is_none()
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
            Announcement::Flow {
                source,
                dest,
                matching,
            } => {
                let mut m = format!("source {source};");
                if let Some(d) = dest {
                    m.push_str(&format!(" destination {d};"));
                }
                m.push_str(&matching.exabgp());
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

    /// Bytes written to ExaBGP's pipe that nobody has read yet (`None` in
    /// a dry run or when the kernel does not say). The daemon holds the
    /// pipe open for reading too, so a speaker that died does not make
    /// writes fail until the pipe is full: commands sitting here unread
    /// are how a speaker that is down shows.
    pub fn unread_bytes(&self) -> Option<usize> {
        use std::os::fd::AsRawFd;
        let p = self.pipe.as_ref()?;
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int through the pointer.
        let r = unsafe { libc::ioctl(p.as_raw_fd(), libc::FIONREAD, &mut n) };
        (r == 0).then(|| usize::try_from(n).unwrap_or(0))
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
                matching: FlowMatch::default(),
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
            // Every rule from this source, whatever else it matches.
            let held: Vec<Announcement> = self
                .held
                .keys()
                .filter(|a| matches!(a, Announcement::Flow { source, .. } if *source == p.net()))
                .cloned()
                .collect();
            for a in held {
                n += usize::from(self.withdraw(&a)?);
            }
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

    #[test]
    fn commands_nobody_reads_are_counted_until_the_speaker_reads_them() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("exabgp.cmd");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut u = Upstream::open(UpstreamConfig {
            command_pipe: fifo.clone(),
            next_hop: Some("192.0.2.1".parse().unwrap()),
            ..UpstreamConfig::default()
        })
        .unwrap();
        assert_eq!(u.unread_bytes(), Some(0));
        u.announce(Announcement::Blackhole {
            victim: "198.51.100.7".parse().unwrap(),
        })
        .unwrap();
        let n = u.unread_bytes().unwrap();
        assert!(n > 20, "the command waits in the pipe: {n} bytes");
        // The speaker reads it.
        let mut r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let mut buf = vec![0u8; n];
        r.read_exact(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf).starts_with("announce route 198.51.100.7/32"));
        assert_eq!(u.unread_bytes(), Some(0));
        // A dry run has no pipe.
        assert_eq!(dry(&[]).unread_bytes(), None);
    }

    fn dry(never: &[&str]) -> Upstream {
        Upstream::open(UpstreamConfig {
            dry_run: true,
            next_hop: Some("192.0.2.1".parse().unwrap()),
            communities: vec!["65001:999".into()],
            max_rules: 3,
            never: never.iter().map(|n| n.parse().unwrap()).collect(),
            ..UpstreamConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn lines_are_exabgp_text_api_commands() {
        let u = dry(&[]);
        let flow = Announcement::Flow {
            source: "203.0.113.0/24".parse().unwrap(),
            dest: Some("198.51.100.7/32".parse().unwrap()),
            matching: FlowMatch::default(),
        };
        assert_eq!(
            u.line(&flow).unwrap(),
            "flow route { match { source 203.0.113.0/24; destination 198.51.100.7/32; } then { discard; } }"
        );
        // Protocol, ports and packet length.
        let ntp = Announcement::Flow {
            source: "203.0.113.0/24".parse().unwrap(),
            dest: Some("198.51.100.7/32".parse().unwrap()),
            matching: FlowMatch {
                protocol: Some(17),
                source_port: Some(123),
                dest_port: Some(33_333),
                packet_length: Some((400, 1500)),
            },
        };
        assert_eq!(
            u.line(&ntp).unwrap(),
            "flow route { match { source 203.0.113.0/24; destination 198.51.100.7/32; protocol udp; \
             source-port =123; destination-port =33333; packet-length >=400&<=1500; } then { discard; } }"
        );
        let gre = FlowMatch {
            protocol: Some(47),
            packet_length: Some((60, 60)),
            ..FlowMatch::default()
        };
        assert_eq!(gre.exabgp(), " protocol =47; packet-length =60;");
        // A state file from before the components reads back without them.
        let old: Announcement =
            serde_json::from_str(r#"{"Flow":{"source":"203.0.113.0/24","dest":null}}"#).unwrap();
        assert_eq!(
            old,
            Announcement::Flow {
                source: "203.0.113.0/24".parse().unwrap(),
                dest: None,
                matching: FlowMatch::default()
            }
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
            matching: FlowMatch::default(),
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
    fn the_action_reads_as_the_config_writes_it() {
        let a = |s: &str| Action::try_from(s.to_string());
        assert_eq!(a("discard").unwrap(), Action::Discard);
        assert_eq!(
            a("rate-limit 1250000").unwrap(),
            Action::RateLimit {
                bytes_per_s: 1_250_000
            }
        );
        assert_eq!(String::from(a("rate-limit 9").unwrap()), "rate-limit 9");
        for bad in ["drop", "rate-limit", "rate-limit 0", "rate-limit -5"] {
            let e = a(bad).unwrap_err();
            assert!(e.contains("rate-limit") && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn an_enabled_section_is_checked() {
        let on = UpstreamConfig {
            enabled: true,
            link_capacity_bps: 10e9,
            ..UpstreamConfig::default()
        };
        on.validate("upstream").unwrap();
        // Off: nothing is checked (the defaults have no link capacity).
        UpstreamConfig::default().validate("upstream").unwrap();
        let e = UpstreamConfig {
            link_capacity_bps: 0.0,
            ..on.clone()
        }
        .validate("ddos.upstream")
        .unwrap_err()
        .to_string();
        assert!(e.contains("ddos.upstream.link_capacity_bps"), "{e}");
        let e = UpstreamConfig {
            rtbh: true,
            ..on.clone()
        }
        .validate("upstream")
        .unwrap_err()
        .to_string();
        assert!(e.contains("upstream.next_hop"), "{e}");
        let e = UpstreamConfig {
            never: vec!["0.0.0.0/0".parse().unwrap()],
            ..on.clone()
        }
        .validate("upstream")
        .unwrap_err()
        .to_string();
        assert!(e.contains("guards everything"), "{e}");
    }

    #[test]
    fn adopted_announcements_are_held_without_being_sent() {
        let mut u = dry(&[]);
        let a = Announcement::Flow {
            source: "203.0.113.0/24".parse().unwrap(),
            dest: None,
            matching: FlowMatch::default(),
        };
        u.adopt(std::slice::from_ref(&a));
        assert_eq!(u.announced(), vec![a.clone()]);
        assert_eq!(u.last_cost, Duration::ZERO, "nothing was sent");
        assert!(u.withdraw(&a).unwrap());
    }

    #[test]
    fn bad_settings_and_a_missing_pipe_say_what_to_do() {
        let e = Upstream::open(UpstreamConfig {
            communities: vec!["666".into()],
            ..UpstreamConfig::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("ASN:VALUE"), "{e}");
        let e = Upstream::open(UpstreamConfig {
            command_pipe: "/nonexistent/exabgp.cmd".into(),
            ..UpstreamConfig::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("mkfifo") && e.contains("No such file"), "{e}");
        let e = dry(&[])
            .line(&Announcement::Blackhole {
                victim: "192.0.2.9".parse().unwrap(),
            })
            .map(|_| ())
            .and_then(|()| {
                let u = Upstream::open(UpstreamConfig {
                    dry_run: true,
                    ..UpstreamConfig::default()
                })?;
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
