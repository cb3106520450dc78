//! Evidence per attack: when an attack on a victim address starts, the
//! filter samples its packets (`rampart_ddos::evidence`: the first
//! [`FIRST`], then 1 in [`EVERY`], [`SNAPLEN`] bytes each, blocked
//! sources' packets included) and the daemon writes them to one pcap per
//! attack under `<state_dir>/evidence/`: at most [`MAX_PACKETS`] packets a
//! file and the newest [`MAX_FILES`] files (older ones are removed). The
//! attack's alerts carry the file in `rampart.pcap`.
//!
//! A victim that is a prefix (an IPv4 /24 or IPv6 /64 carpet) is marked as
//! one: every address in it is sampled into the attack's one pcap.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipnet::IpNet;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use rampart_ddos::evidence::{Capture, Record, Ring, Spec, Stats, SNAPLEN};
use rampart_ddos::filter::{POLICE_ALL, POLICE_FRAG, POLICE_ICMP, POLICE_SYN, POLICE_UDP};
use rampart_ddos_control::detection::{AttackEvent, EventKind, Vector};
use rampart_ddos_control::features::UDP_AMP_PORTS;

/// Packets sampled first from each attack.
pub const FIRST: u32 = 200;
/// Then 1 packet in this many.
pub const EVERY: u32 = 1000;
/// Packets a file holds at most (about 2.8 MB).
pub const MAX_PACKETS: u64 = 10_000;
/// Files kept (the oldest go first).
pub const MAX_FILES: usize = 64;

/// What the filter samples of an attack by `vector`: its packets' classes
/// and source port (an amplification's reflector port).
pub fn spec_of(vector: &str, id: u32) -> Spec {
    let (classes, sport) = match Vector::from_name(vector) {
        Some(Vector::SynFlood | Vector::PortScan) => (POLICE_SYN, 0),
        Some(Vector::UdpAmplification(i)) => (
            POLICE_UDP,
            UDP_AMP_PORTS.get(usize::from(i)).copied().unwrap_or(0),
        ),
        Some(Vector::UdpFlood) => (POLICE_UDP, 0),
        Some(Vector::IcmpFlood) => (POLICE_ICMP, 0),
        Some(Vector::FragmentFlood) => (POLICE_FRAG, 0),
        // ACK floods and carpets: every packet to the victim.
        _ => (POLICE_ALL, 0),
    };
    Spec {
        id,
        classes,
        sport,
        first: FIRST,
        every: EVERY,
    }
}

/// A victim for logs and file names: a host's address alone, a prefix as
/// `ADDR_LEN` (no `/` in a file name).
fn label(v: &IpNet) -> String {
    if v.prefix_len() == v.max_prefix_len() {
        v.addr().to_string()
    } else {
        format!("{}_{}", v.addr(), v.prefix_len())
    }
}

struct Open {
    victim: IpNet,
    path: PathBuf,
    out: Option<PcapWriter<File>>,
    packets: u64,
    marked: bool,
}

/// The pcaps of one daemon's attacks.
pub struct Evidence {
    dir: PathBuf,
    capture: Capture,
    ring: Ring,
    next_id: u32,
    /// Open attacks, by their alerts' `attack_id`.
    attacks: HashMap<String, u32>,
    open: HashMap<u32, Open>,
    /// Records lost to a full ring (sum over ended attacks).
    pub ring_full: u64,
    /// Every file written, oldest first (those not rotated away).
    written: Vec<PathBuf>,
}

impl std::fmt::Debug for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evidence")
            .field("dir", &self.dir)
            .field("open", &self.open.len())
            .finish_non_exhaustive()
    }
}

fn attack_key(e: &AttackEvent) -> String {
    format!("{}/{}", e.victim, e.start_index)
}

/// CLOCK_MONOTONIC now (ns): the clock of the filter's stamps.
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `t`, which outlives the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Evidence {
    /// Evidence for the filter `filter` (its scope name), written under
    /// `dir`; `None` when the filter's pins have no evidence ring (a
    /// filter attached by an older rampart).
    ///
    /// # Errors
    /// Unreadable pins, or `dir` cannot be created.
    pub fn open(filter: &str, dir: &Path) -> crate::Result<Option<Self>> {
        let err = |e: rampart_ddos::Error| crate::Error::Command(format!("evidence: {e}"));
        let (Some(capture), Some(ring)) = (
            Capture::open(filter).map_err(err)?,
            Ring::open(filter).map_err(err)?,
        ) else {
            return Ok(None);
        };
        // Marks a previous run left (it ended without unmarking).
        capture.clear().map_err(err)?;
        std::fs::create_dir_all(dir).map_err(|e| {
            crate::Error::Command(format!("evidence: creating {}: {e}", dir.display()))
        })?;
        let mut written: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
            .collect();
        written.sort();
        Ok(Some(Self {
            dir: dir.to_path_buf(),
            capture,
            ring,
            next_id: 1,
            attacks: HashMap::new(),
            open: HashMap::new(),
            ring_full: 0,
            written,
        }))
    }

    /// Every pcap kept, oldest first.
    pub fn files(&self) -> &[PathBuf] {
        &self.written
    }

    /// Follow an attack event: a start marks the victim and opens its
    /// file, an end writes what is left and closes it. The attack's pcap
    /// (for `rampart.pcap`), if it has one.
    pub fn on_event(&mut self, e: &AttackEvent) -> Option<String> {
        let key = attack_key(e);
        if e.event == EventKind::AttackStart && !self.attacks.contains_key(&key) {
            self.start(e, key.clone());
        }
        let id = *self.attacks.get(&key)?;
        let path = self.open.get(&id)?.path.display().to_string();
        if e.event == EventKind::AttackEnd {
            self.drain();
            self.attacks.remove(&key);
            if let Some(o) = self.open.remove(&id) {
                self.finish(o);
            }
        }
        Some(path)
    }

    fn start(&mut self, e: &AttackEvent, key: String) {
        let victim = e.victim.net();
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let stamp = chrono_like(SystemTime::now());
        let name = format!(
            "{stamp}-{}-{}.pcap",
            label(&victim),
            e.vector.replace(['/', ' '], "_")
        );
        let path = self.dir.join(name);
        let out = File::create(&path)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                PcapWriter::with_header(
                    f,
                    PcapHeader {
                        snaplen: SNAPLEN as u32,
                        datalink: DataLink::ETHERNET,
                        ts_resolution: TsResolution::NanoSecond,
                        endianness: Endianness::native(),
                        ..PcapHeader::default()
                    },
                )
                .map_err(|e| e.to_string())
            });
        let out = match out {
            Ok(o) => o,
            Err(err) => {
                tracing::warn!("evidence: cannot write {}: {err}", path.display());
                return;
            }
        };
        if let Err(err) = self.capture.mark(victim, spec_of(&e.vector, id)) {
            tracing::warn!("evidence: cannot sample the attack on {victim}: {err}");
            let _ = std::fs::remove_file(&path);
            return;
        }
        self.written.push(path.clone());
        self.rotate();
        self.attacks.insert(key, id);
        self.open.insert(
            id,
            Open {
                victim,
                path,
                out: Some(out),
                packets: 0,
                marked: true,
            },
        );
    }

    /// Keep the newest [`MAX_FILES`] files.
    fn rotate(&mut self) {
        while self.written.len() > MAX_FILES {
            let old = self.written.remove(0);
            let _ = std::fs::remove_file(&old);
        }
    }

    fn unmark(&mut self, id: u32) -> Option<Stats> {
        let o = self.open.get_mut(&id)?;
        if !o.marked {
            return None;
        }
        o.marked = false;
        self.capture.unmark(o.victim).ok().flatten()
    }

    fn finish(&mut self, mut o: Open) {
        if o.marked {
            if let Ok(Some(st)) = self.capture.unmark(o.victim) {
                self.ring_full += st.ring_full;
            }
        }
        o.out = None;
        tracing::info!(
            "evidence: {} packets of the attack on {} in {}",
            o.packets,
            o.victim,
            o.path.display()
        );
    }

    /// Write the packets sampled since the last call (every interval).
    pub fn drain(&mut self) {
        let recs = self.ring.drain();
        if recs.is_empty() {
            return;
        }
        // Monotonic stamps to wall-clock time.
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as i128;
        let offset = real - i128::from(monotonic_ns());
        let mut full = Vec::new();
        for r in recs {
            self.write(&r, offset, &mut full);
        }
        for id in full {
            if let Some(st) = self.unmark(id) {
                self.ring_full += st.ring_full;
            }
        }
    }

    fn write(&mut self, r: &Record, offset: i128, full: &mut Vec<u32>) {
        let Some(o) = self.open.get_mut(&r.id) else {
            return;
        };
        let Some(out) = o.out.as_mut() else {
            return;
        };
        if o.packets >= MAX_PACKETS {
            return;
        }
        let ns = (i128::from(r.ts_ns) + offset).max(0) as u128;
        let ts = Duration::new((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32);
        if let Err(e) = out.write_packet(&PcapPacket::new(ts, r.len, &r.data)) {
            tracing::warn!("evidence: writing {}: {e}", o.path.display());
            o.out = None;
            full.push(r.id);
            return;
        }
        o.packets += 1;
        if o.packets >= MAX_PACKETS {
            // The file is full: the filter stops sampling this attack.
            full.push(r.id);
        }
    }
}

impl Drop for Evidence {
    fn drop(&mut self) {
        self.drain();
        let ids: Vec<u32> = self.open.keys().copied().collect();
        for id in ids {
            if let Some(o) = self.open.remove(&id) {
                self.finish(o);
            }
        }
    }
}

/// `20261124T201224Z` for a file name (UTC, sortable).
fn chrono_like(t: SystemTime) -> String {
    let s = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (days, rem) = (s / 86_400, s % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rampart_ddos::Prefix;

    #[test]
    fn each_vector_samples_its_own_packets() {
        let s = spec_of("udp_amplification/dns", 3);
        assert_eq!((s.id, s.classes, s.sport), (3, POLICE_UDP, 53));
        assert_eq!(spec_of("udp_amplification/ntp", 1).sport, 123);
        assert_eq!(spec_of("syn_flood", 1).classes, POLICE_SYN);
        assert_eq!(spec_of("icmp_flood", 1).classes, POLICE_ICMP);
        assert_eq!(spec_of("udp_flood", 1).sport, 0);
        assert_eq!(spec_of("carpet/syn_flood", 1).classes, POLICE_ALL);
        assert_eq!((s.first, s.every), (FIRST, EVERY));
    }

    #[test]
    fn victims_are_labelled_as_hosts_or_prefixes() {
        let l = |s: &str| label(&Prefix::parse(s).unwrap().net());
        assert_eq!(l("10.10.0.2"), "10.10.0.2");
        assert_eq!(l("2001:db8::1/128"), "2001:db8::1");
        assert_eq!(l("10.10.0.0/24"), "10.10.0.0_24");
        assert_eq!(l("2001:db8::/64"), "2001:db8::_64");
    }

    #[test]
    fn file_stamps_are_utc_and_sortable() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_983_144);
        assert_eq!(chrono_like(t), "20261129T201224Z");
        assert_eq!(chrono_like(UNIX_EPOCH), "19700101T000000Z");
    }
}
