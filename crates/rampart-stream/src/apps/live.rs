//! What the stream apps see now, for a dashboard or an API: the
//! connections open at this moment with their counters so far (the
//! flowmeter exports a flow only when it ends, up to its idle timeout
//! later), and the latest findings of the detectors (scanners, SYN
//! floods). Every table is bounded: a host under a scan or a flood of new
//! connections keeps a fixed amount of memory here.
//!
//! [`LiveFlows`] is fed the same connection parts the flowmeter's window
//! merges (an operator in front of the window, [`super::flowmeter::build_live`]),
//! so its counters are the ones the flow record will carry when it ends.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::flowmeter::{record, FlowState};
use super::portscan::ScanAlert;
use super::synflood::FloodAlert;
use crate::engine::WindowInfo;
use crate::export::json::{epoch_secs, iso8601};
use crate::part::{ConnKey, FlowPart};

/// Connections [`LiveFlows`] keeps by default: far more than a server has
/// open at once, small enough (a few MiB) to hold under a flood.
pub const LIVE_FLOWS: usize = 32_768;

/// Findings [`Findings`] keeps of each kind (the latest).
pub const FINDINGS: usize = 100;

/// The most rows one answer carries.
pub const MAX_TOP: usize = 100;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Table {
    flows: FxHashMap<ConnKey, FlowPart>,
    capacity: usize,
    idle_ns: u64,
    /// The newest packet time seen (event time, ns).
    newest_ns: u64,
    /// Connections dropped from a full table while still active (the
    /// least heavy by bytes): if one comes back it starts from zero.
    evicted: u64,
}

impl Table {
    fn expire(&mut self, now_ns: u64) {
        let idle = self.idle_ns;
        self.flows
            .retain(|_, p| p.last_ns().saturating_add(idle) >= now_ns);
    }

    /// Room for one more: the idle ones go first; if the table is still
    /// full, the lighter half (by bytes) — so the heavy flows a "top"
    /// shows stay, and pruning runs once per `capacity / 2` insertions.
    fn make_room(&mut self) {
        self.expire(self.newest_ns);
        if self.flows.len() < self.capacity {
            return;
        }
        let mut sizes: Vec<u64> = self.flows.values().map(bytes).collect();
        let keep = self.capacity / 2;
        let cut = sizes.len() - keep;
        let (_, nth, _) = sizes.select_nth_unstable(cut);
        let limit = *nth;
        let before = self.flows.len();
        self.flows.retain(|_, p| bytes(p) > limit);
        // Ties at the limit: keep none of them rather than a hash-order few.
        self.evicted += (before - self.flows.len()) as u64;
    }
}

fn bytes(p: &FlowPart) -> u64 {
    p.dir[0].bytes + p.dir[1].bytes
}

/// The connections open now (bounded), shared by the operator that feeds
/// it and the readers.
#[derive(Clone)]
pub struct LiveFlows {
    inner: Arc<Mutex<Table>>,
}

impl std::fmt::Debug for LiveFlows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = lock(&self.inner);
        f.debug_struct("LiveFlows")
            .field("open", &t.flows.len())
            .field("capacity", &t.capacity)
            .finish()
    }
}

/// Which counter orders [`LiveFlows::top`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// IP bytes, both directions.
    Bytes,
    /// Packets, both directions.
    Packets,
}

/// One open connection, "to server" from its initiator (as EVE `flow`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LiveFlow {
    /// Community ID (v1, seed 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub community_id: Option<String>,
    /// The initiator.
    pub src_ip: String,
    /// Its port (0 for ICMP).
    pub src_port: u16,
    /// The responder.
    pub dest_ip: String,
    /// Its port (0 for ICMP).
    pub dest_port: u16,
    /// `TCP`, `UDP`, `ICMP`, …
    pub proto: String,
    /// Packets from the initiator.
    pub pkts_toserver: u64,
    /// Packets from the responder.
    pub pkts_toclient: u64,
    /// IP bytes from the initiator.
    pub bytes_toserver: u64,
    /// IP bytes from the responder.
    pub bytes_toclient: u64,
    /// First packet (ISO 8601).
    pub start: String,
    /// Seconds from the first packet to the newest one the table has seen.
    pub age_s: f64,
    /// Seconds since this connection's last packet (same clock).
    pub idle_s: f64,
    /// `new`, `established` or `closed` so far.
    pub state: FlowState,
}

/// [`LiveFlows::top`]'s answer.
#[derive(Debug, Clone, Serialize, Default)]
pub struct TopFlows {
    /// Connections open (seen within the idle timeout).
    pub open: usize,
    /// The table's bound.
    pub capacity: usize,
    /// Active connections dropped from a full table so far.
    pub evicted: u64,
    /// The heaviest by bytes.
    pub by_bytes: Vec<LiveFlow>,
    /// The heaviest by packets.
    pub by_packets: Vec<LiveFlow>,
}

impl LiveFlows {
    /// A table of at most `capacity` connections (≥ 2); a connection
    /// without a packet for `idle` (the flowmeter's idle timeout) has ended.
    pub fn new(capacity: usize, idle: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Table {
                flows: FxHashMap::default(),
                capacity: capacity.max(2),
                idle_ns: u64::try_from(idle.as_nanos()).unwrap_or(u64::MAX),
                newest_ns: 0,
                evicted: 0,
            })),
        }
    }

    /// A connection without a packet for `idle` has ended (the
    /// flowmeter's idle timeout, after a reload changed it).
    pub fn set_idle(&self, idle: Duration) {
        lock(&self.inner).idle_ns = u64::try_from(idle.as_nanos()).unwrap_or(u64::MAX);
    }

    /// Count part `p` (a connection's packets of one epoch, or one packet).
    pub fn add(&self, p: &FlowPart) {
        let mut t = lock(&self.inner);
        t.newest_ns = t.newest_ns.max(p.last_ns());
        if let Some(f) = t.flows.get_mut(&p.key) {
            f.merge(p);
            return;
        }
        if t.flows.len() >= t.capacity {
            t.make_room();
        }
        t.flows.insert(p.key, *p);
    }

    /// The `n` (at most [`MAX_TOP`]) heaviest connections by bytes and by
    /// packets. `now_ns` is the wall clock (0: the packets' own clock
    /// only): connections idle longer than the idle timeout by the later
    /// of it and the newest packet have ended and are dropped.
    pub fn top(&self, n: usize, now_ns: u64) -> TopFlows {
        let n = n.min(MAX_TOP);
        let mut t = lock(&self.inner);
        let now = t.newest_ns.max(now_ns);
        t.expire(now);
        let pick = |by: By| {
            let mut all: Vec<&FlowPart> = t.flows.values().collect();
            let k = |p: &FlowPart| match by {
                By::Bytes => (bytes(p), p.packets()),
                By::Packets => (p.packets(), bytes(p)),
            };
            // Heaviest first, ties by key (the same table gives the same
            // rows); only the first `n` sorted, under the writers' lock.
            let order = |a: &&FlowPart, b: &&FlowPart| k(b).cmp(&k(a)).then(a.key.cmp(&b.key));
            if all.len() > n && n > 0 {
                all.select_nth_unstable_by(n - 1, order);
                all.truncate(n);
            }
            all.sort_unstable_by(order);
            all.into_iter().take(n).map(|p| live_flow(p, now)).collect()
        };
        TopFlows {
            open: t.flows.len(),
            capacity: t.capacity,
            evicted: t.evicted,
            by_bytes: pick(By::Bytes),
            by_packets: pick(By::Packets),
        }
    }
}

fn live_flow(p: &FlowPart, now_ns: u64) -> LiveFlow {
    // Not ended: no window closed it (the end reason is not shown).
    let w = WindowInfo {
        id: 0,
        start: p.first_ns(),
        end: p.last_ns(),
        count: 0,
        closed_by_eos: false,
        active_timeout: false,
    };
    let e = record(p, &w).event();
    let s = |ns: u64| ns as f64 / 1e9;
    LiveFlow {
        community_id: e.community_id,
        src_ip: e.src_ip,
        src_port: e.src_port,
        dest_ip: e.dest_ip,
        dest_port: e.dest_port,
        proto: e.proto,
        pkts_toserver: e.flow.pkts_toserver,
        pkts_toclient: e.flow.pkts_toclient,
        bytes_toserver: e.flow.bytes_toserver,
        bytes_toclient: e.flow.bytes_toclient,
        start: e.flow.start,
        age_s: s(now_ns.saturating_sub(p.first_ns())),
        idle_s: s(now_ns.saturating_sub(p.last_ns())),
        state: e.flow.state,
    }
}

/// A source the port-scan app flagged.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Scanner {
    /// The scanner.
    pub src_ip: String,
    /// When it was flagged (ISO 8601, the deciding packet's time).
    pub flagged_at: String,
    /// The same, Unix seconds.
    pub ts: f64,
    /// First contacts (new services or hosts) it made before the decision.
    pub first_contacts: u64,
    /// Of which failed (no answer, or refused).
    pub failures: u64,
    /// Some of what it contacted (up to 16), `addr:port`.
    pub contacted: Vec<String>,
    /// Distinct addresses among `contacted`.
    pub hosts: usize,
    /// Distinct ports among `contacted`.
    pub ports: usize,
    /// Alerts for this source so far.
    pub alerts: u64,
}

/// A destination the SYN-flood app found flooded in one window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SynFlood {
    /// The victim.
    pub dest_ip: String,
    /// The port with most incomplete handshakes.
    pub dest_port: u16,
    /// The window's end (ISO 8601).
    pub window_end: String,
    /// The same, Unix seconds.
    pub ts: f64,
    /// Incomplete handshakes to that port in the window.
    pub incomplete_handshakes: u64,
    /// SYNs in the window.
    pub syn: u64,
    /// SYN-ACKs in the window.
    pub synack: u64,
    /// The threshold crossed.
    pub threshold: u64,
}

#[derive(Default)]
struct Found {
    scanners: VecDeque<Scanner>,
    floods: VecDeque<SynFlood>,
}

/// The detectors' latest findings (bounded: the newest [`FINDINGS`] of each).
#[derive(Clone, Default)]
pub struct Findings {
    inner: Arc<Mutex<Found>>,
}

impl std::fmt::Debug for Findings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Findings")
    }
}

fn distinct(it: impl Iterator<Item = String>) -> usize {
    let mut v: Vec<String> = it.collect();
    v.sort_unstable();
    v.dedup();
    v.len()
}

impl Findings {
    /// Keep scanner alert `a` (a source flagged again replaces its row
    /// and moves to the front).
    pub fn scanner(&self, a: &ScanAlert) {
        let src = a.src.to_string();
        let d = &a.details;
        // `addr:port` (IPv6 `[addr]:port`): the port follows the last colon.
        let part = |c: &'_ String, port: bool| {
            c.rsplit_once(':')
                .map_or(
                    if port { "" } else { c.as_str() },
                    |(h, p)| if port { p } else { h },
                )
                .to_string()
        };
        let hosts = distinct(d.contacted.iter().map(|c| part(c, false)));
        let ports = distinct(d.contacted.iter().map(|c| part(c, true)));
        let mut f = lock(&self.inner);
        let alerts = match f.scanners.iter().position(|s| s.src_ip == src) {
            Some(i) => f.scanners.remove(i).map_or(0, |s| s.alerts),
            None => 0,
        } + 1;
        f.scanners.push_front(Scanner {
            src_ip: src,
            flagged_at: iso8601(a.ts_ns),
            ts: epoch_secs(a.ts_ns),
            first_contacts: d.first_contacts,
            failures: d.failures,
            contacted: d.contacted.clone(),
            hosts,
            ports,
            alerts,
        });
        f.scanners.truncate(FINDINGS);
    }

    /// Keep SYN-flood alert `a`.
    pub fn flood(&self, a: &FloodAlert) {
        let mut f = lock(&self.inner);
        f.floods.push_front(SynFlood {
            dest_ip: a.dst.to_string(),
            dest_port: a.port,
            window_end: iso8601(a.window_end_ns),
            ts: epoch_secs(a.window_end_ns),
            incomplete_handshakes: a.details.incomplete_handshakes,
            syn: a.details.syn,
            synack: a.details.synack,
            threshold: a.details.threshold,
        });
        f.floods.truncate(FINDINGS);
    }

    /// The latest `n` scanners (newest first).
    pub fn scanners(&self, n: usize) -> Vec<Scanner> {
        lock(&self.inner).scanners.iter().take(n).cloned().collect()
    }

    /// The latest `n` SYN floods (newest first).
    pub fn floods(&self, n: usize) -> Vec<SynFlood> {
        lock(&self.inner).floods.iter().take(n).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::portscan::ScanDetails;
    use crate::apps::synflood::FloodDetails;
    use crate::apps::Addr;
    use crate::tuple::{proto, StreamTuple};

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_795_000_000 * S;

    /// One packet of `ip_len` bytes from `src:sp` to `dst:dp` at `ts`.
    fn pkt(src: u8, sp: u16, dst: u8, dp: u16, ip_len: u16, ts: u64) -> FlowPart {
        FlowPart::from_tuple(&StreamTuple {
            ts_ns: ts,
            saddr: [u32::from_ne_bytes([10, 0, 0, src]), 0, 0, 0],
            daddr: [u32::from_ne_bytes([10, 0, 0, dst]), 0, 0, 0],
            sport: sp,
            dport: dp,
            proto: proto::UDP,
            ip_len,
            ..Default::default()
        })
    }

    #[test]
    fn top_orders_by_bytes_and_by_packets_with_both_directions() {
        let live = LiveFlows::new(1000, Duration::from_secs(15));
        // 10.0.0.2 → .1:53: 3 small queries, 3 large answers.
        for i in 0..3 {
            live.add(&pkt(2, 5000, 1, 53, 60, T0 + i));
            live.add(&pkt(1, 53, 2, 5000, 1400, T0 + i + 1));
        }
        // 10.0.0.3 → .1:80: 10 tiny packets one way.
        for i in 0..10 {
            live.add(&pkt(3, 6000, 1, 80, 40, T0 + 2 * S + i));
        }
        let t = live.top(10, 0);
        assert_eq!((t.open, t.capacity, t.evicted), (2, 1000, 0));
        let b = &t.by_bytes[0];
        assert_eq!(
            (
                b.src_ip.as_str(),
                b.src_port,
                b.dest_ip.as_str(),
                b.dest_port,
                b.proto.as_str()
            ),
            ("10.0.0.2", 5000, "10.0.0.1", 53, "UDP")
        );
        assert_eq!((b.pkts_toserver, b.pkts_toclient), (3, 3));
        assert_eq!((b.bytes_toserver, b.bytes_toclient), (180, 4200));
        assert!(b
            .community_id
            .as_deref()
            .is_some_and(|c| c.starts_with("1:")));
        // The newest packet is 2 s after this flow's first: its age.
        assert!((b.age_s - 2.0).abs() < 0.01, "{}", b.age_s);
        assert_eq!(t.by_packets[0].dest_port, 80);
        assert_eq!(t.by_packets[0].pkts_toserver, 10);
        assert_eq!(live.top(1, 0).by_bytes.len(), 1);
        assert!(live.top(10_000, 0).by_bytes.len() <= MAX_TOP);
    }

    #[test]
    fn idle_connections_end_by_packet_time_or_wall_clock() {
        let live = LiveFlows::new(1000, Duration::from_secs(15));
        live.add(&pkt(2, 1, 1, 2, 100, T0));
        live.add(&pkt(3, 1, 1, 2, 100, T0 + 10 * S));
        assert_eq!(live.top(10, 0).open, 2);
        // A packet 20 s later ends the first (idle 20 s > 15 s).
        live.add(&pkt(4, 1, 1, 2, 100, T0 + 20 * S));
        let t = live.top(10, 0);
        assert_eq!(t.open, 2);
        assert!(t.by_bytes.iter().all(|f| f.src_ip != "10.0.0.2"));
        // No more packets: the wall clock ends the others.
        assert_eq!(live.top(10, T0 + 100 * S).open, 0);
    }

    #[test]
    fn a_full_table_keeps_the_heavy_flows_and_counts_what_it_dropped() {
        let live = LiveFlows::new(64, Duration::from_secs(15));
        live.add(&pkt(9, 1, 1, 443, 1500, T0));
        live.add(&pkt(9, 1, 1, 443, 1500, T0 + 1));
        // A sweep of 1000 one-packet connections, all still active.
        for p in 0..1000u16 {
            live.add(&pkt(7, 40000, 1, p, 40, T0 + 2 + u64::from(p)));
        }
        let t = live.top(5, 0);
        assert!(t.open <= 64, "{}", t.open);
        assert!(t.evicted > 0);
        assert_eq!(t.by_bytes[0].dest_port, 443);
        assert_eq!(t.by_bytes[0].bytes_toserver, 3000);
    }

    #[test]
    fn findings_keep_the_latest_and_a_scanner_once() {
        let f = Findings::default();
        let scan = |src: u8, ts: u64| ScanAlert {
            ts_ns: ts,
            src: Addr {
                w: [u32::from_ne_bytes([10, 10, 5, src]), 0, 0, 0],
                v6: false,
            },
            details: ScanDetails {
                first_contacts: 5,
                failures: 5,
                successes: 0,
                log_likelihood_ratio: 4.7,
                log_eta1: 4.6,
                contacted: ["10.10.0.2:22", "10.10.0.2:23", "10.10.0.3:22"]
                    .map(String::from)
                    .to_vec(),
                attempt_ts: String::new(),
            },
        };
        f.scanner(&scan(1, T0));
        f.scanner(&scan(2, T0 + S));
        f.scanner(&scan(1, T0 + 2 * S));
        let s = f.scanners(10);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].src_ip.as_str(), s[0].alerts), ("10.10.5.1", 2));
        assert_eq!((s[0].hosts, s[0].ports, s[0].failures), (2, 2, 5));
        assert!(s[0].flagged_at.starts_with("2026-"), "{}", s[0].flagged_at);
        for i in 0..(FINDINGS as u64 + 5) {
            f.flood(&FloodAlert {
                window_start_ns: T0,
                window_end_ns: T0 + i,
                dst: Addr::default(),
                port: 80,
                details: FloodDetails {
                    window_start: String::new(),
                    window_end: String::new(),
                    incomplete_handshakes: i,
                    incomplete_other_ports: 0,
                    syn: i,
                    synack: 0,
                    half_open_keys: i,
                    refused: 0,
                    aborted: 0,
                    threshold: 1,
                },
            });
        }
        let fl = f.floods(1000);
        assert_eq!(fl.len(), FINDINGS);
        assert_eq!(fl[0].incomplete_handshakes, FINDINGS as u64 + 4);
    }
}
