//! Loading `xdp_stream` and writing its configuration.
//!
//! The skeleton is opened and loaded on a thread inside the target network
//! namespace (a device-bound program resolves its interface there), then
//! only file descriptors are kept: they are `Send`, libbpf-rs maps are not.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use bytemuck::bytes_of;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use rampart_bpf::abi::stream::{
    ST_CNT_BAD_HEADER, ST_CNT_FILTERED, ST_CNT_MAX, ST_CNT_NOT_IP, ST_CNT_NO_SOCKET,
    ST_CNT_RECORDS, ST_CNT_REWRITE_FAILED, ST_CNT_TOO_DEEP, ST_CNT_TRUNCATED, ST_CNT_TS_HW,
    ST_OFF_RANGES,
};
use rampart_bpf::xdp_stream::XdpStreamSkelBuilder;
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::maps::update_raw;
use rampart_dataplane::netns;
use serde::Serialize;

use super::config::OffloadConfig;
use crate::error::{Error, Result};

/// Which entry point of `xdp_stream` to load on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Entry {
    /// `xdp_stream`: software timestamps, loadable anywhere (and testable
    /// with BPF_PROG_RUN).
    Host,
    /// `xdp_stream_rxmeta`: device-bound to one interface, asks the driver
    /// for RX timestamps (Linux ≥ 6.3).
    HostRxMeta,
    /// `xdp_stream_tap`: the tap for a server's own interface (tuples to a
    /// ring buffer or per-connection counters; every frame passed on).
    Tap,
}

/// Sizes of the tap's maps, set when it is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TapSizes {
    /// Bytes of each CPU's ring buffer (a power of two, at least a page).
    pub ring_bytes: u32,
    /// Slots of the IPv4 aggregation table per CPU (64 bytes each; a power
    /// of two, at least `ST_AGG_WAYS`: a bucket).
    pub agg_slots: u32,
    /// Slots of the IPv6 aggregation table per CPU (128 bytes each; the same).
    pub agg6_slots: u32,
}

/// Live IPv4 connections one CPU counts per epoch that the default table
/// is sized for (`rampart bench stream-host`'s 65,536 flows all land on
/// the generator's CPU).
pub const TAP_AGG_CONNECTIONS: u32 = 65_536;
/// The same for IPv6 (a minority of most servers' connections; more
/// overflow as tuples, nothing is lost).
pub const TAP_AGG6_CONNECTIONS: u32 = 16_384;
/// Slots per connection: a bucket of `ST_AGG_WAYS` slots whose connections
/// are all live in an epoch sends the next one's packets as tuples, so the
/// table has room to spare.
pub const TAP_AGG_SLOTS_PER_CONNECTION: u32 = 2;
/// Memory both aggregation tables may take by default, all CPUs' segments.
pub const TAP_AGG_BUDGET_BYTES: u64 = 64 << 20;
/// Fewest slots per CPU and table.
pub const TAP_AGG_MIN_SLOTS: u32 = 1024;

/// Slots for `connections`: [`TAP_AGG_SLOTS_PER_CONNECTION`] each, a power
/// of two, at least [`TAP_AGG_MIN_SLOTS`].
fn slots_for(connections: u32) -> u32 {
    connections
        .saturating_mul(TAP_AGG_SLOTS_PER_CONNECTION)
        .clamp(TAP_AGG_MIN_SLOTS, 1 << 30)
        .next_power_of_two()
}

impl TapSizes {
    /// The sizing rule: each CPU's tables hold `connections` IPv4 and
    /// `connections6` IPv6 connections at [`TAP_AGG_SLOTS_PER_CONNECTION`]
    /// slots each (powers of two), both halved together while all `cpus`
    /// segments of both exceed `budget_bytes`, down to
    /// [`TAP_AGG_MIN_SLOTS`]. Rings: [`default_ring_bytes`].
    pub fn for_connections(
        connections: u32,
        connections6: u32,
        budget_bytes: u64,
        cpus: usize,
    ) -> Self {
        use rampart_bpf::abi::stream::{StreamAggSlot, StreamAggSlot6};
        let (mut v4, mut v6) = (slots_for(connections), slots_for(connections6));
        let bytes = |v4: u32, v6: u32| {
            (u64::from(v4) * std::mem::size_of::<StreamAggSlot>() as u64
                + u64::from(v6) * std::mem::size_of::<StreamAggSlot6>() as u64)
                * cpus.max(1) as u64
        };
        while bytes(v4, v6) > budget_bytes && (v4 > TAP_AGG_MIN_SLOTS || v6 > TAP_AGG_MIN_SLOTS) {
            v4 = (v4 / 2).max(TAP_AGG_MIN_SLOTS);
            v6 = (v6 / 2).max(TAP_AGG_MIN_SLOTS);
        }
        Self {
            ring_bytes: default_ring_bytes(cpus),
            agg_slots: v4,
            agg6_slots: v6,
        }
    }

    /// Bytes both aggregation tables take on `cpus` CPUs.
    pub fn agg_bytes(&self, cpus: usize) -> u64 {
        use rampart_bpf::abi::stream::{StreamAggSlot, StreamAggSlot6};
        (u64::from(self.agg_slots) * std::mem::size_of::<StreamAggSlot>() as u64
            + u64::from(self.agg6_slots) * std::mem::size_of::<StreamAggSlot6>() as u64)
            * cpus as u64
    }
}

/// Memory all the tap's ring buffers may take by default (one per CPU).
pub const TAP_RING_BUDGET_BYTES: u64 = 16 << 20;

/// Bytes of each CPU's ring buffer by default on a host with `cpus`
/// possible CPUs: [`TAP_RING_BUDGET_BYTES`] shared out, a power of two
/// between 1 and 8 MiB (a ring absorbs a reader's pause: 1 MiB is 18,000
/// tuples, 60 ms of one CPU at 300,000 packets/s).
pub fn default_ring_bytes(cpus: usize) -> u32 {
    let per = TAP_RING_BUDGET_BYTES / cpus.max(1) as u64;
    let pow2 = 1u64 << (63 - per.max(1).leading_zeros());
    u32::try_from(pow2.clamp(1 << 20, 8 << 20)).unwrap_or(8 << 20)
}

impl Default for TapSizes {
    /// [`TapSizes::for_connections`] of [`TAP_AGG_CONNECTIONS`] and
    /// [`TAP_AGG6_CONNECTIONS`] within [`TAP_AGG_BUDGET_BYTES`] on this
    /// host's possible CPUs.
    fn default() -> Self {
        Self::for_connections(
            TAP_AGG_CONNECTIONS,
            TAP_AGG6_CONNECTIONS,
            TAP_AGG_BUDGET_BYTES,
            rampart_dataplane::maps::possible_cpus(),
        )
    }
}

/// The tap's own maps (file descriptors).
#[derive(Debug)]
pub struct TapMaps {
    /// `stream_tap_cfg`.
    pub cfg: OwnedFd,
    /// `stream_tap_rings`: slot `cpu` holds that CPU's ring buffer.
    pub ring_slots: OwnedFd,
    /// The ring buffers, index = CPU id (what the slots hold).
    pub rings: Vec<OwnedFd>,
    /// `stream_tap_agg`: the IPv4 aggregation table (mmapable).
    pub agg: OwnedFd,
    /// Its slots per CPU (the table holds this times the possible CPUs).
    pub agg_slots: u32,
    /// `stream_tap_agg6`: the IPv6 aggregation table (mmapable).
    pub agg6: OwnedFd,
    /// Its slots per CPU.
    pub agg6_slots: u32,
    /// `stream_tap_stats`.
    pub stats: OwnedFd,
    /// `rampart_chain`: the chain's slots (bpf/common/chain.h; the tap is
    /// `CHAIN_SLOT_STREAM`, the frame goes on to the slots after it).
    pub next: OwnedFd,
    /// `tc_stream_tap_egress`: the same analysis on the host's own sends
    /// (a TCX egress program sharing these maps).
    pub egress: OwnedFd,
}

/// `enum stream_off_counter`, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Records handed to a socket.
    pub records: u64,
    /// Not IPv4/IPv6 (passed to the stack).
    pub not_ip: u64,
    /// Truncated IP frames.
    pub truncated: u64,
    /// IP frames with an impossible header field.
    pub bad_header: u64,
    /// Too many VLAN tags / IPv6 extension headers.
    pub too_deep: u64,
    /// Rejected by the offloaded filter.
    pub filtered: u64,
    /// The frame could not be resized to the record (dropped).
    pub rewrite_failed: u64,
    /// No socket in the owner's XSKMAP slot (dropped).
    pub no_socket: u64,
    /// Records stamped with the driver's RX time.
    pub ts_hw: u64,
}

impl Counters {
    fn from_array(v: &[u64; ST_CNT_MAX]) -> Self {
        Self {
            records: v[ST_CNT_RECORDS],
            not_ip: v[ST_CNT_NOT_IP],
            truncated: v[ST_CNT_TRUNCATED],
            bad_header: v[ST_CNT_BAD_HEADER],
            too_deep: v[ST_CNT_TOO_DEEP],
            filtered: v[ST_CNT_FILTERED],
            rewrite_failed: v[ST_CNT_REWRITE_FAILED],
            no_socket: v[ST_CNT_NO_SOCKET],
            ts_hw: v[ST_CNT_TS_HW],
        }
    }
    /// Frames the program saw.
    pub fn frames(&self) -> u64 {
        self.records
            + self.not_ip
            + self.truncated
            + self.bad_header
            + self.too_deep
            + self.filtered
            + self.rewrite_failed
            + self.no_socket
    }
}

/// `enum stream_tap_counter`, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TapCounters {
    /// Frames the tap saw (all passed on).
    pub frames: u64,
    /// Not IPv4/IPv6.
    pub not_ip: u64,
    /// Truncated IP frames.
    pub truncated: u64,
    /// Impossible header fields.
    pub bad_header: u64,
    /// Too many VLAN tags / extension headers.
    pub too_deep: u64,
    /// Rejected by the offloaded filter.
    pub filtered: u64,
    /// Tuples written to the ring buffer.
    pub tuples: u64,
    /// Tuples lost because the ring buffer was full.
    pub ring_full: u64,
    /// Frames added to per-connection counters.
    pub aggregated: u64,
    /// Frames sent as tuples because their bucket held two other
    /// connections of the epoch.
    pub agg_full: u64,
    /// Slots whose counts went to the ring buffer (reused before userspace
    /// read them, or about to overflow).
    pub agg_flushed: u64,
    /// Frames seen at egress (also in `frames`).
    pub egress: u64,
    /// Wire packets beyond the first of egress GSO sends, each analysed as
    /// the packet it leaves as.
    pub gso_extra: u64,
    /// GSO sends analysed as one packet (too many segments to split).
    pub gso_whole: u64,
}

/// A loaded `xdp_stream` (not attached: see [`rampart_dataplane::xdp::XdpLink`]).
#[derive(Debug)]
pub struct OffloadProgram {
    entry: Entry,
    prog: OwnedFd,
    cfg: OwnedFd,
    protos: OwnedFd,
    ports: OwnedFd,
    prefixes: OwnedFd,
    xsks: OwnedFd,
    stats: OwnedFd,
    tap: Option<TapMaps>,
}

/// A ring buffer of `bytes` for CPU `cpu`'s slot of `stream_tap_rings`.
fn create_ring(bytes: u32, cpu: usize) -> rampart_dataplane::Result<OwnedFd> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let name = format!("st_tap_ring{cpu}");
    let h = libbpf_rs::MapHandle::create(
        libbpf_rs::MapType::RingBuf,
        Some(name.as_str()),
        0,
        0,
        bytes,
        &opts,
    )
    .bpf_context(|| format!("creating the tap ring buffer of CPU {cpu} ({bytes} bytes)"))?;
    dup(h.as_fd(), "tap ring buffer")
}

fn dup(fd: BorrowedFd<'_>, what: &str) -> rampart_dataplane::Result<OwnedFd> {
    fd.try_clone_to_owned()
        .map_err(|e| rampart_dataplane::Error::Io {
            context: format!("duplicating the {what} fd"),
            err: e,
        })
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC in ns: what turns `bpf_ktime_get_ns`
/// into time since the epoch.
pub fn clock_offset_ns() -> u64 {
    let read = |c| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(c, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let m0 = read(libc::CLOCK_MONOTONIC);
    let r = read(libc::CLOCK_REALTIME);
    let m1 = read(libc::CLOCK_MONOTONIC);
    r.saturating_sub(m0 / 2 + m1 / 2)
}

impl OffloadProgram {
    /// Load the `entry` point. [`Entry::HostRxMeta`] needs the interface it
    /// will be attached to (`netns`, `iface`): the program is bound to it.
    ///
    /// # Errors
    /// Not root, no such interface, or the verifier's refusal (with its log
    /// summary) — e.g. a driver without RX metadata support refuses a
    /// device-bound program.
    pub fn load(entry: Entry, netns: Option<&str>, iface: Option<&str>) -> Result<Self> {
        Self::load_sized(entry, netns, iface, TapSizes::default())
    }

    /// [`Self::load`] with the tap's map sizes.
    ///
    /// # Errors
    /// As [`Self::load`]; a ring size that is not a power of two of at
    /// least a page is refused by the kernel.
    pub fn load_sized(
        entry: Entry,
        netns: Option<&str>,
        iface: Option<&str>,
        sizes: TapSizes,
    ) -> Result<Self> {
        Self::load_in_chain(entry, netns, iface, sizes, None)
    }

    /// [`Self::load_sized`] as a stage of `chain` (its `rampart_chain` is
    /// the chain's program array; the caller puts the program in its slot).
    ///
    /// # Errors
    /// As [`Self::load_sized`].
    pub fn load_in_chain(
        entry: Entry,
        netns: Option<&str>,
        iface: Option<&str>,
        sizes: TapSizes,
        chain: Option<rampart_dataplane::chain::Chain>,
    ) -> Result<Self> {
        rampart_dataplane::features::require_root("the stream offload")?;
        let iface = iface.map(str::to_string);
        if entry == Entry::HostRxMeta && iface.is_none() {
            return Err(Error::Invalid(
                "the RX-metadata entry point is bound to an interface: give one".into(),
            ));
        }
        let ns_for_load = if entry == Entry::HostRxMeta {
            netns
        } else {
            None
        };
        let fds = netns::run_in(ns_for_load, move || {
            let ifindex = match (&iface, entry) {
                (Some(i), Entry::HostRxMeta) => {
                    let c = std::ffi::CString::new(i.as_str()).unwrap_or_default();
                    // SAFETY: a NUL-terminated name.
                    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
                        0 => {
                            return Err(rampart_dataplane::Error::NoSuchInterface {
                                iface: i.clone(),
                                ns: None,
                            })
                        }
                        x => x,
                    }
                }
                _ => 0,
            };
            let mut open = XdpStreamSkelBuilder::default()
                .open(rampart_dataplane::skel::object_storage())
                .bpf_context(|| "opening xdp_stream".into())?;
            if let Some(c) = &chain {
                c.reuse_in(&mut open.maps.rampart_chain)?;
            }
            // The nfp entry point only loads offloaded to an nfp (the kernel
            // refuses its queue-select store elsewhere): never here.
            open.progs.xdp_stream_nfp.set_autoload(false);
            if entry != Entry::Tap {
                open.progs.xdp_stream_tap.set_autoload(false);
                open.progs.tc_stream_tap_egress.set_autoload(false);
            }
            // Unused maps cost (almost) nothing: one entry each, and a
            // one-page ring is the smallest there is.
            let page = 4096;
            let ways = rampart_bpf::abi::stream::ST_AGG_WAYS;
            let (ring, agg, agg6) = if entry == Entry::Tap {
                (
                    sizes.ring_bytes,
                    sizes.agg_slots.max(ways).next_power_of_two(),
                    sizes.agg6_slots.max(ways).next_power_of_two(),
                )
            } else {
                (page, ways, ways)
            };
            let cpus = rampart_dataplane::maps::possible_cpus();
            open.maps
                .stream_tap_rings
                .set_max_entries(cpus as u32)
                .bpf_context(|| "sizing the tap's ring slots".into())?;
            open.maps
                .stream_tap_agg
                .set_max_entries(agg * cpus as u32)
                .bpf_context(|| "sizing the tap aggregation table".into())?;
            open.maps
                .stream_tap_agg6
                .set_max_entries(agg6 * cpus as u32)
                .bpf_context(|| "sizing the tap's IPv6 aggregation table".into())?;
            match entry {
                Entry::Host => open.progs.xdp_stream_rxmeta.set_autoload(false),
                Entry::Tap => {
                    open.progs.xdp_stream.set_autoload(false);
                    open.progs.xdp_stream_rxmeta.set_autoload(false);
                }
                Entry::HostRxMeta => {
                    open.progs.xdp_stream.set_autoload(false);
                    open.progs.xdp_stream_rxmeta.set_ifindex(ifindex);
                    open.progs
                        .xdp_stream_rxmeta
                        .set_flags(libbpf_rs::libbpf_sys::BPF_F_XDP_DEV_BOUND_ONLY);
                }
            }
            let skel = open
                .load()
                .bpf_context(|| format!("loading xdp_stream ({entry:?})"))?;
            let prog = match entry {
                Entry::Host => dup(skel.progs.xdp_stream.as_fd(), "program")?,
                Entry::HostRxMeta => dup(skel.progs.xdp_stream_rxmeta.as_fd(), "program")?,
                Entry::Tap => dup(skel.progs.xdp_stream_tap.as_fd(), "program")?,
            };
            let m = &skel.maps;
            let egress = (entry == Entry::Tap)
                .then(|| dup(skel.progs.tc_stream_tap_egress.as_fd(), "egress program"))
                .transpose()?;
            let tap = [
                dup(m.stream_tap_cfg.as_fd(), "tap config map")?,
                dup(m.stream_tap_rings.as_fd(), "tap ring slots")?,
                dup(m.stream_tap_agg.as_fd(), "tap aggregation table")?,
                dup(m.stream_tap_stats.as_fd(), "tap counter map")?,
                dup(m.rampart_chain.as_fd(), "chain slots")?,
                dup(m.stream_tap_agg6.as_fd(), "tap IPv6 aggregation table")?,
            ];
            // A ring per CPU (the slot the program looks up with its CPU
            // id); a tap that does not run gets one-page rings.
            let rings = (0..cpus)
                .map(|cpu| {
                    let r = create_ring(ring, cpu)?;
                    update_raw(
                        tap[1].as_raw_fd(),
                        &(cpu as u32).to_ne_bytes(),
                        &r.as_raw_fd().to_ne_bytes(),
                        0,
                    )?;
                    Ok(r)
                })
                .collect::<rampart_dataplane::Result<Vec<_>>>()?;
            Ok((
                [
                    prog,
                    dup(m.stream_off_cfg.as_fd(), "config map")?,
                    dup(m.stream_off_protos.as_fd(), "protocol map")?,
                    dup(m.stream_off_ports.as_fd(), "port map")?,
                    dup(m.stream_off_prefixes.as_fd(), "prefix map")?,
                    dup(m.stream_off_xsks.as_fd(), "XSKMAP")?,
                    dup(m.stream_off_stats.as_fd(), "counter map")?,
                ],
                tap,
                egress,
                rings,
                (agg, agg6),
            ))
        })?;
        let (
            [prog, cfg, protos, ports, prefixes, xsks, stats],
            [tcfg, ring_slots, agg, tstats, next, agg6],
            egress,
            rings,
            (agg_slots, agg6_slots),
        ) = fds;
        let tap = egress.map(|egress| TapMaps {
            cfg: tcfg,
            ring_slots,
            rings,
            agg,
            agg_slots,
            agg6,
            agg6_slots,
            stats: tstats,
            next,
            egress,
        });
        Ok(Self {
            entry,
            prog,
            cfg,
            protos,
            ports,
            prefixes,
            xsks,
            stats,
            tap,
        })
    }

    /// The tap's maps (loaded as [`Entry::Tap`]).
    pub fn tap_maps(&self) -> Option<&TapMaps> {
        self.tap.as_ref()
    }

    /// Set the tap's mode and epoch (`stream_tap_cfg[0]`).
    ///
    /// # Errors
    /// Not loaded as the tap, or the kernel's error.
    pub fn configure_tap(&self, aggregate: bool, epoch_ns: u64) -> Result<()> {
        let t = self
            .tap
            .as_ref()
            .ok_or_else(|| Error::Invalid("not loaded as the tap".into()))?;
        if epoch_ns > rampart_bpf::abi::stream::ST_AGG_EPOCH_MAX_NS {
            return Err(Error::Invalid(format!(
                "tap epoch of {epoch_ns} ns: at most {} s",
                rampart_bpf::abi::stream::ST_AGG_EPOCH_MAX_NS / 1_000_000_000
            )));
        }
        let v = rampart_bpf::abi::stream::StreamTapCfg {
            slot_mask: t.agg_slots - 1,
            slot_mask6: t.agg6_slots - 1,
            _pad: 0,
            mode: if aggregate {
                rampart_bpf::abi::stream::ST_TAP_AGGREGATE
            } else {
                rampart_bpf::abi::stream::ST_TAP_TUPLES
            },
            epoch_ns,
        };
        update_raw(t.cfg.as_raw_fd(), &0u32.to_ne_bytes(), bytes_of(&v), 0)?;
        Ok(())
    }

    /// Tuples lost because the ring was full, per ring (index = CPU id).
    ///
    /// # Errors
    /// Not loaded as the tap, or the kernel's error.
    pub fn tap_ring_full_per_ring(&self) -> Result<Vec<u64>> {
        let t = self
            .tap
            .as_ref()
            .ok_or_else(|| Error::Invalid("not loaded as the tap".into()))?;
        let cpus = rampart_dataplane::maps::possible_cpus();
        let mut v = vec![0u8; 8 * cpus];
        let k = rampart_bpf::abi::stream::ST_TAP_RING_FULL as u32;
        rampart_dataplane::maps::lookup_raw(t.stats.as_raw_fd(), &k.to_ne_bytes(), &mut v)?;
        Ok(v.chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// The tap's counters (`enum stream_tap_counter`), summed over CPUs.
    ///
    /// # Errors
    /// Not loaded as the tap, or the kernel's error.
    pub fn tap_counters(&self) -> Result<TapCounters> {
        let t = self
            .tap
            .as_ref()
            .ok_or_else(|| Error::Invalid("not loaded as the tap".into()))?;
        let mut v = [0u64; rampart_bpf::abi::stream::ST_TAP_CNT_MAX];
        for (k, o) in v.iter_mut().enumerate() {
            *o = rampart_dataplane::maps::lookup_percpu_u64_sum(t.stats.as_raw_fd(), k as u32)?;
        }
        use rampart_bpf::abi::stream as abi;
        Ok(TapCounters {
            frames: v[abi::ST_TAP_FRAMES],
            not_ip: v[abi::ST_TAP_NOT_IP],
            truncated: v[abi::ST_TAP_TRUNCATED],
            bad_header: v[abi::ST_TAP_BAD_HEADER],
            too_deep: v[abi::ST_TAP_TOO_DEEP],
            filtered: v[abi::ST_TAP_FILTERED],
            tuples: v[abi::ST_TAP_TUPLES_OUT],
            ring_full: v[abi::ST_TAP_RING_FULL],
            aggregated: v[abi::ST_TAP_AGGREGATED],
            agg_full: v[abi::ST_TAP_AGG_FULL],
            agg_flushed: v[abi::ST_TAP_AGG_FLUSHED],
            egress: v[abi::ST_TAP_EGRESS],
            gso_extra: v[abi::ST_TAP_GSO_EXTRA],
            gso_whole: v[abi::ST_TAP_GSO_WHOLE],
        })
    }

    /// The loaded entry point.
    pub fn entry(&self) -> Entry {
        self.entry
    }

    /// The program fd (attach it, or run it with BPF_PROG_RUN).
    pub fn prog_fd(&self) -> RawFd {
        self.prog.as_raw_fd()
    }

    /// The XSKMAP fd (slot `rx_queue * replicas + replica`).
    pub fn xsks_fd(&self) -> RawFd {
        self.xsks.as_raw_fd()
    }

    /// Write `c` into the maps; the main entry last, so a running program
    /// switches from the old configuration to the new one on one update.
    ///
    /// # Errors
    /// An invalid configuration, or the kernel's error.
    pub fn configure(&self, c: &OffloadConfig) -> Result<()> {
        let v = c.map_values(clock_offset_ns())?;
        for (p, on) in v.protos.iter().enumerate() {
            update_raw(
                self.protos.as_raw_fd(),
                &(p as u32).to_ne_bytes(),
                &on.to_ne_bytes(),
                0,
            )?;
        }
        for i in 0..2 * ST_OFF_RANGES {
            let k = (i as u32).to_ne_bytes();
            update_raw(self.ports.as_raw_fd(), &k, bytes_of(&v.ports[i]), 0)?;
            update_raw(self.prefixes.as_raw_fd(), &k, bytes_of(&v.prefixes[i]), 0)?;
        }
        update_raw(
            self.cfg.as_raw_fd(),
            &0u32.to_ne_bytes(),
            bytes_of(&v.cfg),
            0,
        )?;
        Ok(())
    }

    /// The counters, summed over CPUs.
    ///
    /// # Errors
    /// The kernel's error.
    pub fn counters(&self) -> Result<Counters> {
        let mut out = [0u64; ST_CNT_MAX];
        for (k, o) in out.iter_mut().enumerate() {
            *o = rampart_dataplane::maps::lookup_percpu_u64_sum(self.stats.as_raw_fd(), k as u32)?;
        }
        Ok(Counters::from_array(&out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aggregation_tables_follow_the_sizing_rule() {
        use rampart_bpf::abi::stream::{StreamAggSlot, StreamAggSlot6};
        let (s4, s6) = (
            std::mem::size_of::<StreamAggSlot>() as u64,
            std::mem::size_of::<StreamAggSlot6>() as u64,
        );
        assert_eq!((s4, s6), (64, 128), "a cache line, a pair");
        // Two slots per connection, as configured, where the budget allows.
        let b = TAP_AGG_BUDGET_BYTES;
        let t = TapSizes::for_connections(65_536, 16_384, b, 2);
        assert_eq!((t.agg_slots, t.agg6_slots), (131_072, 32_768));
        assert_eq!(t.agg_bytes(2), 24 << 20);
        assert_eq!(TapSizes::for_connections(1000, 10, b, 1).agg_slots, 2048);
        assert_eq!(
            TapSizes::for_connections(1000, 10, b, 1).agg6_slots,
            TAP_AGG_MIN_SLOTS
        );
        // A smaller budget halves both.
        let t = TapSizes::for_connections(65_536, 16_384, 12 << 20, 2);
        assert_eq!((t.agg_slots, t.agg6_slots), (65_536, 16_384));
        for cpus in [1, 2, 3, 8, 64, 512] {
            let t = TapSizes::for_connections(TAP_AGG_CONNECTIONS, TAP_AGG6_CONNECTIONS, b, cpus);
            for n in [t.agg_slots, t.agg6_slots] {
                assert!(n.is_power_of_two(), "{cpus} CPUs: {n}");
                assert!(n >= TAP_AGG_MIN_SLOTS, "{cpus} CPUs: {n}");
            }
            let bytes = (u64::from(t.agg_slots) * s4 + u64::from(t.agg6_slots) * s6) * cpus as u64;
            if t.agg_slots > TAP_AGG_MIN_SLOTS && t.agg6_slots > TAP_AGG_MIN_SLOTS {
                assert!(
                    bytes <= TAP_AGG_BUDGET_BYTES,
                    "{cpus} CPUs: {bytes} bytes exceed the budget"
                );
            }
        }
        let two = TapSizes::for_connections(TAP_AGG_CONNECTIONS, TAP_AGG6_CONNECTIONS, b, 2);
        let many = TapSizes::for_connections(TAP_AGG_CONNECTIONS, TAP_AGG6_CONNECTIONS, b, 64);
        assert!(two.agg_slots > many.agg_slots);
    }

    #[test]
    fn ring_buffers_share_their_budget_out_in_powers_of_two() {
        assert_eq!(default_ring_bytes(1), 8 << 20);
        assert_eq!(default_ring_bytes(2), 8 << 20);
        assert_eq!(default_ring_bytes(3), 4 << 20);
        assert_eq!(default_ring_bytes(64), 1 << 20);
    }
}
