//! Protection per victim: SYN cookies answered from XDP and the ACK guard
//! (`bpf/ddos/xdp_features.bpf.c`, cookie in `bpf/ddos/cookie.h`), and the
//! TC ingress stage that hands the kernel a request socket for a valid
//! cookie ACK (`bpf/ddos/tc_cookie.bpf.c`).
//!
//! A victim is an IPv4 address or an IPv6 /64 (an IPv6 address given here
//! stands for its /64). Everything is pinned in the filter's directory, so
//! protection stays in force across daemon restarts:
//!
//! ```text
//! ddos_protect    victim → flags + counters      ddos_ckey   the cookie key (random at attach)
//! prog_tc_cookie  the TC stage                    tc_link     its TCX link (while any victim has cookies)
//! ddos_tcst       the TC stage's counters
//! ```
//!
//! The TC stage is attached on the first victim with SYN cookies and
//! detached when the last one goes. It needs the kernel function
//! `bpf_sk_assign_tcp_reqsk` (Linux ≥ 6.9 with `CONFIG_SYN_COOKIES`) and
//! `net.ipv4.tcp_syncookies` ≠ 0 in the interface's namespace; without
//! them, turning cookies on is refused with one line saying which (the ACK
//! guard alone works everywhere).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use rampart_bpf::abi::ddos::{
    FeatCtl, ProtectVal, VictimKey, DDOS_PROTECT_ACK_GUARD, DDOS_PROTECT_MAX,
    DDOS_PROTECT_SYN_COOKIES, DDOS_TC_ASSIGNED, DDOS_TC_INVALID, DDOS_TC_IN_STATE, DDOS_TC_REFUSED,
    DDOS_TC_STAT_MAX,
};
use rampart_bpf::tc_cookie::{TcCookieSkel, TcCookieSkelBuilder};
use rampart_dataplane::error::BpfContext;
use rampart_dataplane::{netns, pin};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::filter::{pin_dir, Scope};
use crate::maps::{self, ArrayMmap, PinnedMap};

/// Pin names of the protection state.
pub mod pins {
    /// Victim → flags and counters.
    pub const PROTECT: &str = "ddos_protect";
    /// The cookie key.
    pub const COOKIE_KEY: &str = "ddos_ckey";
    /// The TC stage program.
    pub const PROG_TC: &str = "prog_tc_cookie";
    /// The TC stage's TCX link.
    pub const TC_LINK: &str = "tc_link";
    /// The TC stage's counters.
    pub const TC_STATS: &str = "ddos_tcst";
}

/// What is on for a victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ProtectFlags {
    /// SYNs answered by cookie SYN-ACKs from XDP; ACKs that find only a
    /// listener must carry a valid cookie.
    pub syn_cookies: bool,
    /// Out-of-state TCP (no socket, no valid cookie) dropped.
    pub ack_guard: bool,
}

impl ProtectFlags {
    /// Both on.
    pub const ALL: Self = Self {
        syn_cookies: true,
        ack_guard: true,
    };

    fn bits(self) -> u32 {
        (if self.syn_cookies {
            DDOS_PROTECT_SYN_COOKIES
        } else {
            0
        }) | (if self.ack_guard {
            DDOS_PROTECT_ACK_GUARD
        } else {
            0
        })
    }

    fn from_bits(b: u32) -> Self {
        Self {
            syn_cookies: b & DDOS_PROTECT_SYN_COOKIES != 0,
            ack_guard: b & DDOS_PROTECT_ACK_GUARD != 0,
        }
    }

    /// Nothing on.
    pub fn is_empty(self) -> bool {
        !self.syn_cookies && !self.ack_guard
    }
}

/// Counters of one protected victim since it was first protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ProtectStats {
    /// SYNs answered by a cookie SYN-ACK.
    pub synack_sent: u64,
    /// ACKs that found only a listener, with a valid cookie (passed).
    pub cookie_ack_valid: u64,
    /// ... with an invalid cookie (dropped).
    pub cookie_ack_invalid: u64,
    /// Out-of-state TCP dropped by the ACK guard.
    pub guard_dropped: u64,
    /// SYNs to a port without a listener (dropped).
    pub no_listener: u64,
    /// SYNs left to the kernel (headers the SYN-ACK crafting does not
    /// rewrite, or a socket other than a listener).
    pub syn_passed: u64,
    /// Malformed SYNs (dropped).
    pub bad_syn: u64,
    /// ACKs the TC stage turned into request sockets for the kernel.
    pub reqsk_assigned: u64,
    /// SYNs repeating a handshake the kernel already holds (dropped).
    pub syn_pending: u64,
}

impl From<&ProtectVal> for ProtectStats {
    fn from(v: &ProtectVal) -> Self {
        Self {
            synack_sent: v.synack_sent,
            cookie_ack_valid: v.cookie_ack_valid,
            cookie_ack_invalid: v.cookie_ack_invalid,
            guard_dropped: v.guard_dropped,
            no_listener: v.no_listener,
            syn_passed: v.syn_passed,
            bad_syn: v.bad_syn,
            reqsk_assigned: v.reqsk_assigned,
            syn_pending: v.syn_pending,
        }
    }
}

/// One protected victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProtectEntry {
    /// The victim (an IPv6 victim as its /64's first address).
    pub victim: IpAddr,
    /// What is on.
    pub flags: ProtectFlags,
    /// Its counters.
    pub stats: ProtectStats,
}

/// Counters of the TC stage, summed over CPUs (labels: `DDOS_TC_STAT_LABELS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TcStats {
    /// Request sockets handed to the kernel.
    pub assigned: u64,
    /// Invalid cookies left to the kernel.
    pub invalid: u64,
    /// Valid cookies the kernel refused.
    pub refused: u64,
    /// ACKs of existing connections.
    pub in_state: u64,
}

/// The victim an address belongs to: itself for IPv4, its /64 for IPv6.
pub fn victim_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(a) => {
            let b = u128::from(a) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(b))
        }
    }
}

fn key_of(victim: IpAddr) -> VictimKey {
    match victim_of(victim) {
        IpAddr::V4(a) => VictimKey {
            family: 4,
            addr: [u32::from_ne_bytes(a.octets()), 0],
            ..Default::default()
        },
        IpAddr::V6(a) => {
            let o = a.octets();
            VictimKey {
                family: 6,
                addr: [
                    u32::from_ne_bytes([o[0], o[1], o[2], o[3]]),
                    u32::from_ne_bytes([o[4], o[5], o[6], o[7]]),
                ],
                ..Default::default()
            }
        }
    }
}

fn victim_of_key(k: &VictimKey) -> Option<IpAddr> {
    match k.family {
        4 => Some(IpAddr::V4(Ipv4Addr::from(k.addr[0].to_ne_bytes()))),
        6 => {
            let mut o = [0u8; 16];
            o[..4].copy_from_slice(&k.addr[0].to_ne_bytes());
            o[4..8].copy_from_slice(&k.addr[1].to_ne_bytes());
            Some(IpAddr::V6(Ipv6Addr::from(o)))
        }
        _ => None,
    }
}

/// Does the running kernel have the kernel function `name` (from its BTF)?
pub fn kernel_has_kfunc(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: loads the kernel's BTF into a fresh object we free below.
    let btf = unsafe { libbpf_sys::btf__load_vmlinux_btf() };
    if btf.is_null() || (btf as isize) < 0 && (btf as isize) > -4096 {
        return false;
    }
    // SAFETY: `btf` is a valid BTF object and `c` a NUL-terminated name.
    let id =
        unsafe { libbpf_sys::btf__find_by_name_kind(btf, c.as_ptr(), libbpf_sys::BTF_KIND_FUNC) };
    // SAFETY: `btf` came from btf__load_vmlinux_btf and is not used after.
    unsafe { libbpf_sys::btf__free(btf) };
    id > 0
}

/// Why SYN cookies cannot run here, if they cannot.
///
/// # Errors
/// [`Error::Invalid`] with the one line to show.
pub fn cookies_supported(netns_name: Option<&str>) -> Result<()> {
    if !kernel_has_kfunc("bpf_sk_assign_tcp_reqsk") {
        return Err(Error::Invalid(format!(
            "SYN cookies need the kernel function bpf_sk_assign_tcp_reqsk (Linux 6.9 or later built with \
             CONFIG_SYN_COOKIES); this kernel ({}) lacks it: upgrade the kernel, or protect with the ACK guard alone",
            kernel_release()
        )));
    }
    let v = netns::run_in(netns_name, || {
        Ok(std::fs::read_to_string("/proc/sys/net/ipv4/tcp_syncookies"))
    })?
    .map_err(|e| Error::io("reading net.ipv4.tcp_syncookies", e))?;
    if v.trim() == "0" {
        return Err(Error::Invalid(
            "SYN cookies need net.ipv4.tcp_syncookies = 1 (the default) in the interface's namespace, and it is 0: \
             set it with `sysctl -w net.ipv4.tcp_syncookies=1`"
                .into(),
        ));
    }
    Ok(())
}

fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The protection handle of an installed filter (with its feature stage).
pub struct Protect {
    scope: Scope,
    name: String,
    dir: PathBuf,
    protect: PinnedMap,
    ctl: ArrayMmap<FeatCtl>,
    _ctl_map: PinnedMap,
    /// The TC stage loaded (verified) ahead of the first attack: see
    /// [`Protect::prepare`].
    prepared: Option<TcCookieSkel<'static>>,
}

impl std::fmt::Debug for Protect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protect").field("dir", &self.dir).finish()
    }
}

impl Protect {
    /// Open the protection state of the filter on `scope`.
    ///
    /// # Errors
    /// No filter there, or one attached with `--no-features` (protection
    /// runs in the feature stage).
    pub fn open(scope: &Scope) -> Result<Self> {
        let name = scope.name();
        let dir = pin_dir(&name);
        if !dir.exists() {
            return Err(Error::NotAttached {
                where_: scope.describe(),
                path: dir,
            });
        }
        if !dir.join(pins::PROTECT).exists() {
            return Err(Error::Invalid(format!(
                "the filter at {} has no protection stage (attached with --no-features, or by an older rampart): \
                 detach and attach again",
                scope.describe()
            )));
        }
        let protect = PinnedMap::open(&dir.join(pins::PROTECT), std::mem::size_of::<ProtectVal>())?;
        let ctl_map = PinnedMap::open(&dir.join("ddos_fctl"), std::mem::size_of::<FeatCtl>())?;
        let ctl = ArrayMmap::new(ctl_map.fd.as_fd(), &ctl_map.info)?;
        Ok(Self {
            scope: scope.clone(),
            name,
            dir,
            protect,
            ctl,
            _ctl_map: ctl_map,
            prepared: None,
        })
    }

    /// Check that SYN cookies can work here and load the TC stage now, so
    /// that the first victim to need them gets them in a map update and a
    /// link: loading means the verifier, which takes up to a second on a
    /// busy host — a second in which a SYN flood reaches the stack. Does
    /// nothing while the stage is attached or already prepared.
    ///
    /// # Errors
    /// What [`cookies_supported`] says, and load failures.
    pub fn prepare(&mut self) -> Result<()> {
        if self.prepared.is_some() || self.tc_attached() {
            return Ok(());
        }
        cookies_supported(self.scope.netns.as_deref())?;
        self.prepared = Some(self.load_tc()?);
        Ok(())
    }

    /// Is the TC stage loaded ahead ([`Protect::prepare`])?
    pub fn is_prepared(&self) -> bool {
        self.prepared.is_some()
    }

    fn load_tc(&self) -> Result<TcCookieSkel<'static>> {
        let mut open = TcCookieSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .bpf_context(|| "opening tc_cookie".into())?;
        let ckey = pin::open_pinned(&self.dir.join(pins::COOKIE_KEY))?;
        open.maps
            .ddos_protect
            .reuse_fd(self.protect.fd.as_fd())
            .bpf_context(|| "sharing ddos_protect with tc_cookie".into())?;
        open.maps
            .ddos_ckey
            .reuse_fd(ckey.as_fd())
            .bpf_context(|| "sharing ddos_ckey with tc_cookie".into())?;
        Ok(open
            .load()
            .bpf_context(|| "loading tc_cookie (verifier)".into())?)
    }

    fn n_protect(&self) -> &AtomicU32 {
        // SAFETY: `n_protect` is a 4-aligned u32 inside the mapped control element.
        unsafe {
            &*(self
                .ctl
                .at(0)
                .cast::<u8>()
                .add(std::mem::offset_of!(FeatCtl, n_protect))
                .cast::<AtomicU32>())
        }
    }

    /// Turn protection of `victim` to `flags` (an empty set clears it).
    /// The first victim with SYN cookies attaches the TC stage.
    ///
    /// # Errors
    /// SYN cookies where the kernel cannot complete cookie connections
    /// (see [`cookies_supported`]; nothing is changed then), the table
    /// full ([`DDOS_PROTECT_MAX`] victims), map and attach failures.
    pub fn set(&mut self, victim: IpAddr, flags: ProtectFlags) -> Result<()> {
        if flags.is_empty() {
            self.clear(victim)?;
            return Ok(());
        }
        let _lock = crate::filter::lock_file(&self.name, "protect")?;
        if flags.syn_cookies && !self.tc_attached() {
            self.attach_tc()?;
        }
        let key = key_of(victim);
        let mut cur = ProtectVal::default();
        let have = maps::lookup_raw(
            self.protect.raw(),
            bytemuck::bytes_of(&key),
            bytemuck::bytes_of_mut(&mut cur),
        )?;
        if !have && self.len()? >= DDOS_PROTECT_MAX as usize {
            return Err(Error::TableFull {
                kind: "protected victims",
                have: DDOS_PROTECT_MAX as usize,
                adding: 1,
                cap: DDOS_PROTECT_MAX as usize,
                flag: "protection limit (fixed)",
            });
        }
        // Counters of an existing entry are kept: only the flags word changes.
        cur.flags = flags.bits();
        maps::update_raw(
            self.protect.raw(),
            bytemuck::bytes_of(&key),
            bytemuck::bytes_of(&cur),
            0,
        )?;
        self.publish_count()?;
        if !flags.syn_cookies {
            self.detach_tc_if_unused()?;
        }
        Ok(())
    }

    /// Stop protecting `victim`; `false` when it was not protected. The
    /// last victim with SYN cookies detaches the TC stage.
    ///
    /// # Errors
    /// Map and detach failures.
    pub fn clear(&mut self, victim: IpAddr) -> Result<bool> {
        let _lock = crate::filter::lock_file(&self.name, "protect")?;
        let key = key_of(victim);
        let had = maps::delete_raw(self.protect.raw(), bytemuck::bytes_of(&key))?;
        self.publish_count()?;
        self.detach_tc_if_unused()?;
        Ok(had)
    }

    /// Every protected victim with its flags and counters.
    ///
    /// # Errors
    /// A failing map walk.
    pub fn list(&self) -> Result<Vec<ProtectEntry>> {
        let ks = std::mem::size_of::<VictimKey>();
        let vs = std::mem::size_of::<ProtectVal>();
        let mut out = Vec::new();
        rampart_dataplane::maps::walk_batch(self.protect.raw(), ks, vs, 256, false, |k, v| {
            let k: VictimKey = bytemuck::pod_read_unaligned(k);
            let v: ProtectVal = bytemuck::pod_read_unaligned(v);
            if let Some(victim) = victim_of_key(&k) {
                out.push(ProtectEntry {
                    victim,
                    flags: ProtectFlags::from_bits(v.flags),
                    stats: ProtectStats::from(&v),
                });
            }
        })?;
        out.sort_by_key(|e| e.victim);
        Ok(out)
    }

    fn len(&self) -> Result<usize> {
        Ok(self.list()?.len())
    }

    /// Counters of `victim` (`None` when it is not protected).
    ///
    /// # Errors
    /// A failing lookup.
    pub fn stats(&self, victim: IpAddr) -> Result<Option<ProtectStats>> {
        let key = key_of(victim);
        let mut v = ProtectVal::default();
        let have = maps::lookup_raw(
            self.protect.raw(),
            bytemuck::bytes_of(&key),
            bytemuck::bytes_of_mut(&mut v),
        )?;
        Ok(have.then(|| ProtectStats::from(&v)))
    }

    /// Is the TC stage attached?
    pub fn tc_attached(&self) -> bool {
        self.dir.join(pins::TC_LINK).exists()
    }

    /// Counters of the TC stage (`None` when it was never attached).
    ///
    /// # Errors
    /// A failing read.
    pub fn tc_stats(&self) -> Result<Option<TcStats>> {
        let p = self.dir.join(pins::TC_STATS);
        if !p.exists() {
            return Ok(None);
        }
        let m = PinnedMap::open(&p, 8)?;
        let sum = |i: u32| rampart_dataplane::maps::lookup_percpu_u64_sum(m.raw(), i);
        let _ = DDOS_TC_STAT_MAX;
        Ok(Some(TcStats {
            assigned: sum(DDOS_TC_ASSIGNED as u32)?,
            invalid: sum(DDOS_TC_INVALID as u32)?,
            refused: sum(DDOS_TC_REFUSED as u32)?,
            in_state: sum(DDOS_TC_IN_STATE as u32)?,
        }))
    }

    fn publish_count(&self) -> Result<()> {
        let n = self.len()? as u32;
        self.n_protect().store(n, Ordering::Release);
        Ok(())
    }

    fn attach_tc(&mut self) -> Result<()> {
        let skel = match self.prepared.take() {
            Some(s) => s,
            None => {
                cookies_supported(self.scope.netns.as_deref())?;
                self.load_tc()?
            }
        };
        let link = self.tc_link(skel.progs.tc_cookie.as_fd().as_raw_fd())?;
        let res = (|| -> Result<()> {
            pin::pin_fd(
                skel.progs.tc_cookie.as_fd().as_raw_fd(),
                &self.dir.join(pins::PROG_TC),
            )?;
            pin::pin_fd(
                skel.maps.ddos_tcst.as_fd().as_raw_fd(),
                &self.dir.join(pins::TC_STATS),
            )?;
            pin::pin_fd(link.as_raw_fd(), &self.dir.join(pins::TC_LINK))?;
            Ok(())
        })();
        if let Err(e) = res {
            for p in [pins::PROG_TC, pins::TC_STATS, pins::TC_LINK] {
                let _ = std::fs::remove_file(self.dir.join(p));
            }
            return Err(e);
        }
        Ok(())
    }

    /// Is the TC stage (when one is attached) on the interface that now
    /// has the scope's name? An interface deleted and created again starts
    /// without it: the pinned stage is attached to it again and its link
    /// pin replaced.
    ///
    /// # Errors
    /// Reading the link; attaching again.
    pub fn check_tc(&mut self) -> Result<TcCheck> {
        let link_pin = self.dir.join(pins::TC_LINK);
        if !link_pin.exists() {
            return Ok(TcCheck::Off);
        }
        let Ok(now) = netns::ifindex(self.scope.netns.as_deref(), &self.scope.iface) else {
            return Ok(TcCheck::IfaceGone);
        };
        let link = pin::open_pinned(&link_pin)?;
        // SAFETY: a C struct of integers and a union of them: all zeroes is valid.
        let mut info: libbpf_sys::bpf_link_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
        // SAFETY: `info` is valid for `len` bytes of writes.
        let rc =
            unsafe { libbpf_sys::bpf_link_get_info_by_fd(link.as_raw_fd(), &mut info, &mut len) };
        if rc != 0 {
            return Err(Error::io(
                "reading the TC stage's link",
                std::io::Error::from_raw_os_error(-rc),
            ));
        }
        // SAFETY: the union's `tcx` member is the one the kernel fills for TCX links
        // (0 once the link is defunct: its interface was deleted).
        if unsafe { info.__bindgen_anon_1.tcx.ifindex } == now {
            return Ok(TcCheck::Attached);
        }
        let prog = pin::open_pinned(&self.dir.join(pins::PROG_TC))?;
        let new = self.tc_link(prog.as_raw_fd())?;
        let _ = std::fs::remove_file(&link_pin);
        if let Err(e) = pin::pin_fd(new.as_raw_fd(), &link_pin) {
            // SAFETY: plain syscall wrapper on an fd we own; unpinned, the
            // next check attaches again.
            let _ = unsafe { libbpf_sys::bpf_link_detach(new.as_raw_fd()) };
            return Err(e.into());
        }
        Ok(TcCheck::Reattached)
    }

    /// A TCX ingress link of `prog_fd` on the scope's interface.
    fn tc_link(&self, prog_fd: std::os::fd::RawFd) -> Result<std::os::fd::OwnedFd> {
        Ok(rampart_dataplane::tcx::attach(
            prog_fd,
            self.scope.netns.as_deref(),
            &self.scope.iface,
            rampart_dataplane::tcx::Hook::Ingress,
            "the SYN-cookie TC stage",
        )?)
    }

    fn detach_tc_if_unused(&self) -> Result<()> {
        if !self.tc_attached() || self.list()?.iter().any(|e| e.flags.syn_cookies) {
            return Ok(());
        }
        detach_tc(&self.dir)
    }
}

/// What [`Protect::check_tc`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcCheck {
    /// No TC stage (no victim has SYN cookies).
    Off,
    /// Attached to the interface of that name.
    Attached,
    /// The interface is gone.
    IfaceGone,
    /// The interface had been created again: attached to it now.
    Reattached,
}

/// Detach the TC stage pinned in `dir` (if any) and remove its pins.
///
/// # Errors
/// Removal failures.
pub(crate) fn detach_tc(dir: &std::path::Path) -> Result<()> {
    if let Ok(link) = pin::open_pinned(&dir.join(pins::TC_LINK)) {
        // SAFETY: plain syscall wrapper on an fd we own. A link whose
        // interface is gone is already detached: the error is moot.
        let _ = unsafe { libbpf_sys::bpf_link_detach(link.as_raw_fd()) };
    }
    for p in [pins::TC_LINK, pins::PROG_TC, pins::TC_STATS] {
        let path = dir.join(p);
        if path.exists() {
            std::fs::remove_file(&path)
                .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_are_v4_hosts_and_v6_slash_64s() {
        let a: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        assert_eq!(victim_of(a), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
        let k = key_of(a);
        assert_eq!(k.family, 6);
        assert_eq!(victim_of_key(&k), Some(victim_of(a)));
        let b: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(victim_of(b), b);
        let k = key_of(b);
        assert_eq!((k.family, k.addr[1]), (4, 0));
        assert_eq!(victim_of_key(&k), Some(b));
        // The key holds the address as it is on the wire.
        assert_eq!(k.addr[0].to_ne_bytes(), [192, 0, 2, 7]);
    }

    #[test]
    fn flags_round_trip() {
        for f in [
            ProtectFlags::default(),
            ProtectFlags::ALL,
            ProtectFlags {
                syn_cookies: true,
                ack_guard: false,
            },
            ProtectFlags {
                syn_cookies: false,
                ack_guard: true,
            },
        ] {
            assert_eq!(ProtectFlags::from_bits(f.bits()), f);
        }
    }
}
