//! `iptables`: the baseline placement — one `raw PREROUTING`
//! rule per family matching an ipset (`hash:net` with counters), so blocked
//! sources are dropped by netfilter before conntrack, with per-entry
//! packet/byte counters from `ipset save`.

use std::time::Duration;

use rampart_ddos::Prefix;

use super::{CounterKind, Counts, Tier, TierInfo};
use crate::error::{Error, Result};

/// The iptables/ipset baseline in one namespace.
#[derive(Debug)]
pub struct Iptables {
    netns: Option<String>,
    set4: String,
    set6: String,
    capacity: usize,
}

fn run(netns: Option<&str>, prog: &str, args: &[&str]) -> Result<String> {
    let r = match netns {
        Some(ns) => rampart_dataplane::cmd::in_ns(ns, prog, args),
        None => rampart_dataplane::cmd::run(prog, args),
    };
    r.map_err(|e| Error::Command(e.to_string()))
}

impl Iptables {
    /// Create (or reuse) the sets `rampart-<name>-4/-6` and their DROP rules.
    ///
    /// # Errors
    /// ipset or iptables failing (missing packages: the message names them).
    pub fn open(netns: Option<&str>, name: &str, capacity: usize) -> Result<Self> {
        let name: String = name
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(18)
            .collect();
        let set4 = format!("rp-{name}-4");
        let set6 = format!("rp-{name}-6");
        let max = capacity.to_string();
        for (set, fam, ipt) in [(&set4, "inet", "iptables"), (&set6, "inet6", "ip6tables")] {
            run(
                netns,
                "ipset",
                &[
                    "-exist", "create", set, "hash:net", "family", fam, "counters", "maxelem", &max,
                ],
            )?;
            let rule = [
                "-t",
                "raw",
                "-C",
                "PREROUTING",
                "-m",
                "set",
                "--match-set",
                set,
                "src",
                "-j",
                "DROP",
            ];
            if run(netns, ipt, &rule).is_err() {
                let mut add = rule;
                add[2] = "-I";
                run(netns, ipt, &add)?;
            }
        }
        Ok(Self {
            netns: netns.map(str::to_string),
            set4,
            set6,
            capacity,
        })
    }

    fn set_of(&self, p: &Prefix) -> &str {
        if p.family() == 4 {
            &self.set4
        } else {
            &self.set6
        }
    }

    /// Remove the rules and sets.
    ///
    /// # Errors
    /// A command failing.
    pub fn destroy(self) -> Result<()> {
        for (set, ipt) in [(&self.set4, "iptables"), (&self.set6, "ip6tables")] {
            let _ = run(
                self.netns.as_deref(),
                ipt,
                &[
                    "-t",
                    "raw",
                    "-D",
                    "PREROUTING",
                    "-m",
                    "set",
                    "--match-set",
                    set,
                    "src",
                    "-j",
                    "DROP",
                ],
            );
            run(self.netns.as_deref(), "ipset", &["destroy", set])?;
        }
        Ok(())
    }
}

/// Parse `ipset save` output: `add SET ADDR[/LEN] packets N bytes M`.
pub fn parse_save(text: &str) -> Vec<(Prefix, Counts)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.first() != Some(&"add") || f.len() < 3 {
                return None;
            }
            let p = Prefix::parse(f[2]).ok()?;
            let mut c = Counts::default();
            for w in f.windows(2) {
                match w[0] {
                    "packets" => c.packets = w[1].parse().ok()?,
                    "bytes" => c.bytes = w[1].parse().ok()?,
                    _ => {}
                }
            }
            Some((p, c))
        })
        .collect()
}

impl Tier for Iptables {
    fn info(&self) -> TierInfo {
        TierInfo {
            name: "iptables",
            role: "host",
            location: format!(
                "iptables raw PREROUTING + ipset {}/{}{}",
                self.set4,
                self.set6,
                self.netns
                    .as_deref()
                    .map(|n| format!(" (netns {n})"))
                    .unwrap_or_default()
            ),
            capacity: Some(self.capacity),
            update_cost: Duration::from_millis(1),
            counters: CounterKind::Exact,
            emulated: false,
        }
    }

    fn install(&mut self, add: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in add {
            let s = p.to_string();
            run(
                self.netns.as_deref(),
                "ipset",
                &["-exist", "add", self.set_of(p), &s],
            )?;
            n += 1;
        }
        Ok(n)
    }

    fn remove(&mut self, remove: &[Prefix]) -> Result<usize> {
        let mut n = 0;
        for p in remove {
            let s = p.to_string();
            run(
                self.netns.as_deref(),
                "ipset",
                &["-exist", "del", self.set_of(p), &s],
            )?;
            n += 1;
        }
        Ok(n)
    }

    fn rules(&self) -> Result<Vec<(Prefix, Counts)>> {
        let mut v = parse_save(&run(self.netns.as_deref(), "ipset", &["save", &self.set4])?);
        v.extend(parse_save(&run(
            self.netns.as_deref(),
            "ipset",
            &["save", &self.set6],
        )?));
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ipset_save() {
        let t = "create rp-x-4 hash:net family inet hashsize 1024 maxelem 65536 counters\n\
                 add rp-x-4 172.16.0.5 packets 12 bytes 720\n\
                 add rp-x-4 10.0.0.0/8 packets 0 bytes 0\n";
        let v = parse_save(t);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].0, Prefix::parse("172.16.0.5").unwrap());
        assert_eq!(
            v[0].1,
            Counts {
                packets: 12,
                bytes: 720
            }
        );
        assert_eq!(v[1].0, Prefix::parse("10.0.0.0/8").unwrap());
    }
}
