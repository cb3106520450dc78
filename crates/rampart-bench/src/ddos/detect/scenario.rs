//! The scenarios: what each sends, from which addresses, and what rampart
//! should call it. Names are stable (results are compared across commits).

use std::net::IpAddr;

use rampart_lab::dist::Dist;
use rampart_lab::gen::GenSpec;
use rampart_lab::packet::Proto;

use super::env::{attacker_v4, crowd_v4, crowd_v6, NAT_SOURCE};

/// Seconds most attacks last (short: the machine is shared).
pub const ATTACK_S: f64 = 15.0;

/// The spoofed SYN flood's rate from the generator (`spoofed-syn-1m`):
/// what reaches host0 is what the lab's wire passes, reported as
/// `offered_pps`.
pub const SPOOFED_SYN_PPS: f64 = 1_500_000.0;

/// One load a scenario runs during its attack window.
#[derive(Debug, Clone)]
pub enum Load {
    /// hping3 in `wan`, one process per entry of `from` (`-a ADDR`, an
    /// alias of wan0, so its kernel answers SYN-ACKs with RST), or one
    /// process without `-a` when `from` is empty (e.g. `--rand-source`).
    Hping {
        /// Source aliases, one process each.
        from: Vec<IpAddr>,
        /// Options before the target (the target is the victim).
        args: Vec<&'static str>,
    },
    /// The lab generator: `phases` of (seconds, packets/s; `None` pauses;
    /// `Some(0.0)` full speed); empty = the whole attack at `spec.pps`.
    Gen {
        /// What to send.
        spec: GenSpec,
        /// Pacing.
        phases: Vec<(f64, Option<f64>)>,
    },
    /// nmap SYN scan of `ports` from `from`, started again whenever it
    /// finishes before the attack window ends.
    Nmap {
        /// Source alias.
        from: IpAddr,
        /// Port range.
        ports: &'static str,
    },
    /// wrk at full speed from wan0's own address (legitimate).
    Wrk {
        /// Connections.
        conns: u32,
    },
    /// More legitimate users: new connections from `sources` at `rate`/s.
    Users {
        /// Source aliases.
        sources: Vec<IpAddr>,
        /// Connections per second.
        rate: f64,
    },
}

/// When the daemon runs relative to the attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Started first; learns normal traffic; then the attack.
    Warm,
    /// The attack is running when the daemon starts, with no state.
    AtStart,
    /// The daemon learned normal traffic and stopped; the attack is
    /// running when it starts again with its state file.
    AtRestart,
}

/// One scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Stable name.
    pub name: &'static str,
    /// What kind of test it is.
    pub family: &'static str,
    /// Is anything in it an attack?
    pub attack: bool,
    /// Vectors rampart may call it (exact, or followed by `/…`); empty for no attack.
    pub expect: &'static [&'static str],
    /// Loads of the attack (or event) window.
    pub loads: Vec<Load>,
    /// Seconds of the window.
    pub seconds: f64,
    /// Daemon timing.
    pub timing: Timing,
    /// Also run the same loads with rampart off (the kernel alone), before it starts.
    pub peer: bool,
    /// Give the host every address of its /24 (carpet bombing targets them).
    pub host_owns_24: bool,
    /// Extra wan0 aliases the loads use.
    pub aliases: Vec<IpAddr>,
}

fn attackers(n: u32) -> Vec<IpAddr> {
    (1..=n).map(attacker_v4).collect()
}

fn gen(proto: Proto, sources: u32, pps: Option<f64>) -> GenSpec {
    GenSpec {
        sources,
        dist: Dist::Uniform,
        proto,
        pps,
        seed: 0x6465_7465,
        ..GenSpec::default()
    }
}

fn base(
    name: &'static str,
    family: &'static str,
    expect: &'static [&'static str],
    loads: Vec<Load>,
) -> Scenario {
    Scenario {
        name,
        family,
        attack: !expect.is_empty(),
        expect,
        loads,
        seconds: ATTACK_S,
        timing: Timing::Warm,
        peer: false,
        host_owns_24: false,
        aliases: attackers(9),
    }
}

/// hping3 SYN flood on port 80 from five real aliases, ~10 kpps each requested.
fn syn_5src() -> Load {
    Load::Hping {
        from: attackers(5),
        args: vec!["-S", "-p", "80", "-i", "u100"],
    }
}

/// UDP reflection: `reflectors` sources sending from the vector's port,
/// 100 packets/s each, half the packets 1,000 B and half 1,400 B (two
/// generators, each 50 pps per reflector).
fn amp(port: u16, v6: bool) -> Vec<Load> {
    let reflectors = 300;
    [1000, 1400]
        .into_iter()
        .map(|size| Load::Gen {
            spec: GenSpec {
                sport: port,
                dport: Some(33_333),
                size,
                ipv6: v6,
                ..gen(Proto::Udp, reflectors, Some(50.0 * f64::from(reflectors)))
            },
            phases: vec![],
        })
        .collect()
}

/// Every scenario, in the order the suite runs them.
pub fn all() -> Vec<Scenario> {
    let mut v = vec![
        base(
            "syn-rst-5src",
            "syn_flood",
            &["syn_flood"],
            vec![syn_5src()],
        ),
        base(
            "spoofed-syn-hping3",
            "syn_flood_spoofed",
            &["syn_flood"],
            vec![Load::Hping {
                from: vec![],
                args: vec!["-S", "-p", "80", "--flood", "--rand-source"],
            }],
        ),
        Scenario {
            peer: true,
            ..base(
                "spoofed-syn-1m",
                "syn_flood_spoofed",
                &["syn_flood"],
                vec![
                    // Paced, one thread per CPU (as RSS spreads random
                    // sources over a NIC's queues): unpaced, the generator
                    // spent the CPU the host's receive path needs on frames
                    // the veth rings then dropped (5.3 Mpps sent, 0.5 Mpps
                    // arrived).
                    Load::Gen {
                        spec: GenSpec {
                            threads: 2.min(ncpu()),
                            ..gen(Proto::Syn, 1 << 20, Some(SPOOFED_SYN_PPS))
                        },
                        phases: vec![],
                    },
                    // wrk at full speed through the flood (and through the
                    // peer's run): requests/s served, rampart vs the kernel.
                    Load::Wrk { conns: 8 },
                ],
            )
        },
        base(
            "syn-flood-v6",
            "syn_flood",
            &["syn_flood"],
            vec![Load::Gen {
                spec: GenSpec {
                    ipv6: true,
                    ..gen(Proto::Syn, 16, Some(40_000.0))
                },
                phases: vec![],
            }],
        ),
        base(
            "amp-dns",
            "amplification",
            &["udp_amplification/dns"],
            amp(53, false),
        ),
        base(
            "amp-ntp",
            "amplification",
            &["udp_amplification/ntp"],
            amp(123, false),
        ),
        base(
            "amp-memcached",
            "amplification",
            &["udp_amplification/memcached"],
            amp(11211, false),
        ),
        base(
            "amp-ssdp",
            "amplification",
            &["udp_amplification/ssdp"],
            amp(1900, false),
        ),
        base(
            "amp-cldap",
            "amplification",
            &["udp_amplification/cldap"],
            amp(389, false),
        ),
        base(
            "amp-ntp-v6",
            "amplification",
            &["udp_amplification/ntp"],
            amp(123, true),
        ),
        base(
            "icmp-flood",
            "icmp_flood",
            &["icmp_flood"],
            vec![Load::Hping {
                from: attackers(5),
                args: vec!["--icmp", "-d", "512", "-i", "u100"],
            }],
        ),
        base(
            "icmp-flood-v6",
            "icmp_flood",
            &["icmp_flood"],
            vec![Load::Gen {
                spec: GenSpec {
                    ipv6: true,
                    size: 512,
                    ..gen(Proto::Icmp, 5, Some(40_000.0))
                },
                phases: vec![],
            }],
        ),
        base(
            "ack-flood",
            "out_of_state",
            &["ack_flood"],
            vec![Load::Hping {
                from: vec![],
                args: vec!["-A", "-p", "80", "--flood", "--rand-source"],
            }],
        ),
        base(
            "rst-flood",
            "out_of_state",
            &["ack_flood"],
            vec![Load::Hping {
                from: vec![],
                args: vec!["-R", "-p", "80", "--flood", "--rand-source"],
            }],
        ),
        Scenario {
            host_owns_24: true,
            ..base(
                "carpet-v4",
                "carpet",
                &["carpet"],
                vec![Load::Hping {
                    from: vec![],
                    args: vec![
                        "-S",
                        "-p",
                        "80",
                        "-i",
                        "u20",
                        "--rand-source",
                        "--rand-dest",
                        "-I",
                        "wan0",
                    ],
                }],
            )
        },
        base(
            "carpet-v6",
            "carpet",
            &["carpet"],
            vec![Load::Gen {
                // SYNs to random addresses of the victim's /64 (the low 32
                // bits drawn per packet) from 4,096 sources.
                spec: GenSpec {
                    ipv6: true,
                    dst_spread_bits: 32,
                    ..gen(Proto::Syn, 4096, Some(50_000.0))
                },
                phases: vec![],
            }],
        ),
        base(
            "pulse",
            "timing",
            &["syn_flood"],
            vec![Load::Gen {
                spec: gen(Proto::Syn, 64, Some(50_000.0)),
                phases: (0..4)
                    .flat_map(|_| [(3.0, Some(50_000.0)), (3.0, None)])
                    .collect(),
            }],
        ),
        {
            // 24 steps of 5 s, 500 → 60,000 packets/s, geometric.
            let steps = 24;
            let phases: Vec<(f64, Option<f64>)> = (0..steps)
                .map(|i| {
                    let f = f64::from(i) / f64::from(steps - 1);
                    (5.0, Some(500.0 * (120.0f64).powf(f)))
                })
                .collect();
            Scenario {
                seconds: 5.0 * f64::from(steps),
                ..base(
                    "slow-ramp",
                    "timing",
                    &["syn_flood"],
                    vec![Load::Gen {
                        spec: gen(Proto::Syn, 256, None),
                        phases,
                    }],
                )
            }
        },
        Scenario {
            timing: Timing::AtStart,
            ..base(
                "attack-at-start",
                "restart",
                &["syn_flood"],
                vec![syn_5src()],
            )
        },
        Scenario {
            timing: Timing::AtRestart,
            ..base(
                "attack-at-restart",
                "restart",
                &["syn_flood"],
                vec![syn_5src()],
            )
        },
        base(
            "portscan",
            "scan",
            &["port_scan"],
            vec![Load::Nmap {
                from: attacker_v4(9),
                ports: "1-2000",
            }],
        ),
        base(
            "scan-plus-flood",
            "scan",
            &["port_scan", "syn_flood"],
            vec![
                Load::Nmap {
                    from: attacker_v4(9),
                    ports: "1-2000",
                },
                Load::Hping {
                    from: attackers(3),
                    args: vec!["-S", "-p", "80", "-i", "u100"],
                },
            ],
        ),
        base("heavy-client", "legit", &[], vec![Load::Wrk { conns: 16 }]),
        {
            let mut s = base(
                "flash-crowd",
                "legit",
                &[],
                vec![Load::Users {
                    sources: (1..=200)
                        .map(crowd_v4)
                        .chain((1..=100).map(crowd_v6))
                        .collect(),
                    rate: 15.0 * super::LEGIT_RATE,
                }],
            );
            s.aliases
                .extend((1..=200).map(crowd_v4).chain((1..=100).map(crowd_v6)));
            s
        },
        {
            let mut s = base(
                "nat-client",
                "legit",
                &[],
                vec![Load::Users {
                    sources: vec![NAT_SOURCE],
                    rate: 400.0,
                }],
            );
            s.aliases.push(NAT_SOURCE);
            s
        },
    ];
    // Frames at least as large as the protocol's headers need (IPv6 SYNs: 78 B).
    for sc in &mut v {
        for l in &mut sc.loads {
            if let Load::Gen { spec, .. } = l {
                spec.size = spec
                    .size
                    .max(rampart_lab::packet::min_size(spec.proto, spec.ipv6));
            }
        }
    }
    v
}

fn ncpu() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_the_issue_list_is_covered() {
        let all = all();
        let mut names: Vec<&str> = all.iter().map(|s| s.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate scenario names");
        assert!(n >= 14, "{n} scenarios");
        for want in [
            "syn-rst-5src",
            "spoofed-syn-hping3",
            "spoofed-syn-1m",
            "amp-dns",
            "amp-ntp",
            "amp-memcached",
            "amp-ssdp",
            "amp-cldap",
            "icmp-flood",
            "ack-flood",
            "rst-flood",
            "carpet-v4",
            "carpet-v6",
            "pulse",
            "slow-ramp",
            "attack-at-start",
            "attack-at-restart",
            "flash-crowd",
            "heavy-client",
            "nat-client",
            "portscan",
            "scan-plus-flood",
        ] {
            assert!(names.contains(&want), "missing {want}");
        }
        for s in &all {
            assert_eq!(s.attack, !s.expect.is_empty(), "{}", s.name);
            assert!(!s.loads.is_empty(), "{}", s.name);
            // The spoofed flood at >= 1 Mpps needs its peer; it is the only one.
            assert_eq!(s.peer, s.name == "spoofed-syn-1m", "{}", s.name);
        }
    }

    #[test]
    fn every_generator_load_is_valid() {
        for s in all() {
            for l in &s.loads {
                if let Load::Gen { spec, .. } = l {
                    spec.validate()
                        .unwrap_or_else(|e| panic!("{}: {e}", s.name));
                }
            }
        }
    }

    #[test]
    fn amplification_uses_300_reflectors_at_100_pps_and_the_vectors_port() {
        let all = all();
        let s = all.iter().find(|s| s.name == "amp-ntp").unwrap();
        let mut pps = 0.0;
        for l in &s.loads {
            let Load::Gen { spec, .. } = l else {
                panic!("amp-ntp uses the lab generator")
            };
            assert_eq!(
                (spec.sport, spec.sources, spec.proto),
                (123, 300, Proto::Udp)
            );
            assert!((1000..=1400).contains(&spec.size));
            pps += spec.pps.unwrap();
        }
        assert!((pps / 300.0 - 100.0).abs() < 1e-9);
    }
}
