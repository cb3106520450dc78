//! Synthetic intervals for the scenario tests: flows of the kinds the
//! scenario suite drives (legitimate clients completing handshakes, heavy
//! clients, NAT, floods of each vector, reflectors, scans), counted the
//! way the data plane's feature stage counts them, and a loop that applies
//! the verdicts the way the daemon does (blocked sources dropped and their
//! rate measured, policed sources capped).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rampart_testkit::rng::Rng;

use crate::features::{sketch_bit, UDP_OTHER};
use crate::{FeatureRecord, Prefix, VictimRecord};

use super::{
    AttackEvent, Detection, DetectionConfig, EventKind, Interval, Protection, Recorded, Skips,
    SourceRate, Verdict,
};

/// Interval length of the daemon.
pub const SECS: f64 = 0.5;
/// Pair-table capacity of the simulated data path.
pub const PAIR_CAPACITY: usize = 65536;

/// What a flow sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A web client: `conns` new connections/s, every one completed.
    Web { conns: f64 },
    /// SYNs that never complete; the sender's kernel answers each SYN-ACK
    /// with a RST (hping3 -S).
    SynRst,
    /// Out-of-state TCP (ACK flood).
    Ack,
    /// UDP from amplification class `c` (0..7) source port.
    Amp(u8),
    /// UDP from another source port.
    Udp,
    /// ICMP echo.
    Icmp,
    /// IP fragments (UDP).
    Frag,
    /// SYN scan over `ports` ports per interval (new ports each interval).
    Scan { ports: u16 },
}

/// One source's traffic to one destination.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub pps: f64,
    pub size: u64,
    pub kind: Kind,
}

pub fn v4(a: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}
/// Legitimate client i: 10.1.0.0/16 onward.
pub fn client(i: u32) -> IpAddr {
    v4(0x0a01_0000 + i)
}
/// Attacker i: 172.16.0.0/12.
pub fn attacker(i: u32) -> IpAddr {
    v4(0xac10_0000 + i)
}
/// The server.
pub fn server() -> IpAddr {
    v4(0x0a14_0002)
}
/// Address i of the server's /24 (10.20.0.0/24).
pub fn server_net(i: u8) -> IpAddr {
    v4(0x0a14_0000 + u32::from(i))
}
pub fn server6_net(i: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(0xfd10_u128 << 112 | u128::from(i) << 16 | 1))
}
pub fn attacker6(i: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(0xfd66_u128 << 112 | u128::from(i)))
}
pub fn host(a: IpAddr) -> Prefix {
    Prefix::host(a)
}

/// `n` web clients of `dst` at 20..60 pps, 1..3 new connections/s.
pub fn web_clients(rng: &mut Rng, first: u32, n: u32, dst: IpAddr) -> Vec<Flow> {
    (0..n)
        .map(|i| Flow {
            src: client(first + i),
            dst,
            pps: rng.range(20.0, 60.0),
            size: 600,
            kind: Kind::Web {
                conns: rng.range(1.0, 3.0),
            },
        })
        .collect()
}

/// One spoofed SYN flood to `dst`: `pps` SYNs/s from random sources
/// (a new set each interval).
#[derive(Debug, Clone, Copy)]
pub struct Spoofed {
    pub dst: IpAddr,
    pub pps: f64,
}

/// The simulated data path + daemon.
pub struct Sim {
    pub det: Detection,
    pub rng: Rng,
    pub index: u64,
    pub blocked: BTreeSet<Prefix>,
    pub policed: BTreeMap<Prefix, f64>,
    pub protected: BTreeMap<Prefix, Protection>,
    /// Every verdict so far, by interval.
    pub verdicts: Vec<Verdict>,
    /// The intervals, when recording.
    pub recording: Option<Vec<Recorded>>,
    /// A data path without victim records and without completion counts
    /// (pairs with the counters they had before both).
    pub pairs_only: bool,
    scan_port: u16,
}

impl Sim {
    pub fn new(cfg: &DetectionConfig) -> Self {
        Self::with(Detection::new(cfg, "eth0").unwrap())
    }

    pub fn with(det: Detection) -> Self {
        Sim {
            det,
            rng: Rng::new(7),
            index: 0,
            blocked: BTreeSet::new(),
            policed: BTreeMap::new(),
            protected: BTreeMap::new(),
            verdicts: Vec::new(),
            recording: None,
            pairs_only: false,
            scan_port: 1,
        }
    }

    pub fn is_blocked(&self, a: &IpAddr) -> Option<Prefix> {
        self.blocked.iter().find(|p| p.contains(a)).copied()
    }

    /// One interval of `flows` plus spoofed floods; returns its verdict.
    pub fn step(&mut self, flows: &[Flow], spoofed: &[Spoofed]) -> &Verdict {
        let secs = SECS;
        let mut pairs: BTreeMap<(IpAddr, IpAddr), FeatureRecord> = BTreeMap::new();
        let mut vict: BTreeMap<Prefix, VictimRecord> = BTreeMap::new();
        let mut distinct: BTreeMap<Prefix, (BTreeSet<IpAddr>, BTreeSet<IpAddr>)> = BTreeMap::new();
        let mut dropped: BTreeMap<Prefix, f64> = BTreeMap::new();
        let mut police_drop: BTreeMap<Prefix, f64> = BTreeMap::new();
        let mut sent: BTreeMap<IpAddr, f64> = BTreeMap::new();
        for f in flows {
            *sent.entry(f.src).or_default() += f.pps;
        }
        let scan_port = self.scan_port;
        let mut scan_next = scan_port;
        for f in flows {
            if let Some(p) = self.is_blocked(&f.src) {
                *dropped.entry(p).or_default() += f.pps;
                continue;
            }
            let mut pps = f.pps;
            if let Some(&rate) = self.policed.get(&host(f.src)) {
                let total = sent[&f.src];
                if total > rate {
                    let keep = rate / total;
                    *police_drop.entry(host(f.src)).or_default() += pps * (1.0 - keep);
                    pps *= keep;
                }
            }
            let n = (pps * secs).round() as u64;
            if n == 0 {
                continue;
            }
            let r = pairs
                .entry((f.src, f.dst))
                .or_insert_with(|| FeatureRecord::new(f.src, f.dst));
            let vkey = VictimRecord::key_of(f.dst);
            let v = vict.entry(vkey).or_insert_with(|| VictimRecord::new(vkey));
            let d = distinct.entry(vkey).or_default();
            d.0.insert(f.src);
            r.packets += n;
            r.bytes += n * f.size;
            v.packets += n;
            v.bytes += n * f.size;
            let n32 = n as u32;
            let port = |r: &mut FeatureRecord, p: u16| {
                let b = sketch_bit(p);
                r.dport_sketch[(b / 64) as usize] |= 1 << (b % 64);
            };
            match f.kind {
                Kind::Web { conns } => {
                    let c = ((conns * secs).round() as u32).min(n32);
                    r.tcp += n32;
                    r.syn += c;
                    r.completions += c;
                    r.fin += c;
                    v.tcp += n;
                    v.syn += u64::from(c);
                    v.fin += u64::from(c);
                    v.tcp_sampled += n - u64::from(c);
                    if c > 0 {
                        d.1.insert(f.src);
                    }
                    port(r, 443);
                }
                Kind::SynRst => {
                    let s = n32.div_ceil(2);
                    r.tcp += n32;
                    r.syn += s;
                    r.rst += n32 - s;
                    v.tcp += n;
                    v.syn += u64::from(s);
                    v.rst += u64::from(n32 - s);
                    v.tcp_sampled += u64::from(n32 - s);
                    d.1.insert(f.src);
                    port(r, 80);
                }
                Kind::Ack => {
                    r.tcp += n32;
                    v.tcp += n;
                    v.tcp_sampled += n;
                    v.tcp_nosock += n;
                    port(r, 80);
                }
                Kind::Amp(c) => {
                    r.udp += n32;
                    r.udp_amp += n32;
                    r.udp_amp_bytes += n * f.size;
                    v.udp += n;
                    v.udp_vec_pkts[usize::from(c)] += n;
                    v.udp_vec_bytes[usize::from(c)] += n * f.size;
                    port(r, 40000 + (n % 1000) as u16);
                }
                Kind::Udp => {
                    r.udp += n32;
                    v.udp += n;
                    v.udp_vec_pkts[UDP_OTHER] += n;
                    v.udp_vec_bytes[UDP_OTHER] += n * f.size;
                    port(r, 9999);
                }
                Kind::Icmp => {
                    r.icmp += n32;
                    v.icmp += n;
                }
                Kind::Frag => {
                    r.udp += n32;
                    r.frags += n32;
                    v.udp += n;
                    v.frags += n;
                    v.udp_vec_pkts[UDP_OTHER] += n / 4;
                }
                Kind::Scan { ports } => {
                    r.tcp += n32;
                    r.syn += n32;
                    v.tcp += n;
                    v.syn += n;
                    d.1.insert(f.src);
                    for i in 0..ports {
                        port(r, scan_port.wrapping_add(i));
                    }
                    scan_next = scan_port.wrapping_add(ports);
                }
            }
        }
        self.scan_port = scan_next;
        let mut skips = Skips::default();
        let mut pairs: Vec<FeatureRecord> = pairs.into_values().collect();
        // Spoofed floods: every SYN from a random source; the pair table
        // keeps what fits.
        let mut spoof_distinct: BTreeMap<Prefix, f64> = BTreeMap::new();
        for s in spoofed {
            let n = (s.pps * secs).round() as u64;
            let vkey = VictimRecord::key_of(s.dst);
            let v = vict.entry(vkey).or_insert_with(|| VictimRecord::new(vkey));
            v.packets += n;
            v.bytes += n * 60;
            v.tcp += n;
            v.syn += n;
            // Distinct sources of n random picks among 2^32 ≈ n.
            *spoof_distinct.entry(vkey).or_default() += n as f64;
            for _ in 0..n {
                if pairs.len() >= PAIR_CAPACITY {
                    skips.pairs += 1;
                    continue;
                }
                let src = v4((self.rng.next_u64() >> 32) as u32 | 0x0100_0000);
                let mut r = FeatureRecord::new(src, s.dst);
                r.packets = 1;
                r.bytes = 60;
                r.tcp = 1;
                r.syn = 1;
                let b = sketch_bit((self.rng.next_u64() & 0xffff) as u16);
                r.dport_sketch[(b / 64) as usize] |= 1 << (b % 64);
                pairs.push(r);
            }
        }
        let mut victims: Vec<VictimRecord> = vict.into_values().collect();
        for v in &mut victims {
            let (all, syn) = distinct.get(&v.victim).cloned().unwrap_or_default();
            let sp = spoof_distinct.get(&v.victim).copied().unwrap_or(0.0);
            v.src_distinct = all.len() as f64 + sp;
            v.syn_src_distinct = syn.len() as f64 + sp;
        }
        let blocked: Vec<SourceRate> = self
            .blocked
            .iter()
            .map(|p| SourceRate {
                prefix: *p,
                pps: dropped.get(p).copied().unwrap_or(0.0),
            })
            .collect();
        let policed: Vec<SourceRate> = police_drop
            .iter()
            .map(|(p, d)| SourceRate {
                prefix: *p,
                pps: *d,
            })
            .collect();
        if self.pairs_only {
            victims.clear();
            for r in &mut pairs {
                r.completions = 0;
                r.udp_amp = 0;
                r.udp_amp_bytes = 0;
                r.fin = 0;
            }
        }
        let iv = Interval {
            index: self.index,
            secs,
            window_s: None,
            pairs: &pairs,
            victims: &victims,
            skips,
            blocked: &blocked,
            blocked_in_records: false,
            policed: &policed,
        };
        if let Some(rec) = self.recording.as_mut() {
            rec.push(Recorded::of(&iv));
        }
        let v = self.det.observe(&iv);
        self.index += 1;
        for b in &v.blocks {
            self.blocked.insert(b.prefix);
        }
        for u in &v.unblocks {
            self.blocked.remove(&u.prefix);
        }
        for p in &v.police {
            self.policed.insert(p.prefix, p.rate_pps);
        }
        for p in &v.unpolice {
            self.policed.remove(p);
        }
        for c in &v.protect {
            if c.flags.is_off() {
                self.protected.remove(&c.victim);
            } else {
                self.protected.insert(c.victim, c.flags);
            }
        }
        self.verdicts.push(v);
        self.verdicts.last().unwrap()
    }

    /// `n` intervals of the same traffic.
    pub fn run(&mut self, n: usize, flows: &[Flow], spoofed: &[Spoofed]) {
        for _ in 0..n {
            self.step(flows, spoofed);
        }
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<&AttackEvent> {
        self.verdicts.iter().flat_map(|v| &v.events).collect()
    }

    /// Events of one kind.
    pub fn events_of(&self, k: EventKind) -> Vec<&AttackEvent> {
        self.events().into_iter().filter(|e| e.event == k).collect()
    }

    /// Every prefix ever blocked, with its vector.
    pub fn ever_blocked(&self) -> Vec<(Prefix, String)> {
        self.verdicts
            .iter()
            .flat_map(|v| &v.blocks)
            .map(|b| (b.prefix, b.vector.clone()))
            .collect()
    }

    /// Every prefix ever unblocked, with the interval index.
    pub fn unblocked(&self) -> Vec<(usize, Prefix)> {
        self.verdicts
            .iter()
            .enumerate()
            .flat_map(|(i, v)| v.unblocks.iter().map(move |u| (i, u.prefix)))
            .collect()
    }

    /// Interval of the first block of a source in `pred`.
    pub fn first_block(&self, pred: impl Fn(&Prefix) -> bool) -> Option<usize> {
        self.verdicts
            .iter()
            .position(|v| v.blocks.iter().any(|b| pred(&b.prefix)))
    }
}

/// Does `p` cover a legitimate client (10.1.0.0/16)?
pub fn is_client(p: &Prefix) -> bool {
    let clients: ipnet::IpNet = "10.1.0.0/16".parse().unwrap();
    let n = p.net();
    n.contains(&clients.network()) || clients.contains(&n.network())
}
