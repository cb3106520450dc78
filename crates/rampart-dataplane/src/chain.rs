//! The XDP chain: several applications' programs on one interface
//! (`bpf/common/chain.h`).
//!
//! An interface runs one entry point, `xdp_chain`, attached with a pinned
//! `bpf_link`, and owns one program array with a slot per stage
//! (`CHAIN_SLOT_*`: ddos, stream, tenant, tried in that order). A stage's
//! loader makes its object's `rampart_chain` map this array before load
//! ([`Chain::reuse_in`]) and puts its program in its slot ([`Chain::set`]
//! or a [`Stage`], which empties the slot when dropped). Adding, replacing
//! or removing a stage is one update of its slot: atomic for the packets,
//! nothing re-attached.
//!
//! Pins: `/sys/fs/bpf/rampart/chain/<[netns-]iface>/{slots,entry,link}`.
//! The chain outlives the process that attached it (a ddos stage left in
//! its slot keeps protecting the host); [`Chain::remove`] takes it away.
//! A [`Chain`] value also holds the three objects open, so pins removed
//! behind a running daemon's back neither detach the chain nor lose it:
//! [`Chain::check`] pins them again.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use rampart_bpf::xdp_chain::XdpChainSkelBuilder;

use crate::error::{BpfContext, Error, Result};
use crate::xdp::{XdpLink, XdpMode};
use crate::{maps, netns, pin};

pub use rampart_bpf::abi::common::{
    CHAIN_SLOTS, CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT,
};

/// The name of a stage slot, for messages.
pub fn slot_name(slot: u32) -> &'static str {
    match slot {
        CHAIN_SLOT_DDOS => "ddos",
        CHAIN_SLOT_STREAM => "stream",
        CHAIN_SLOT_TENANT => "tenant",
        _ => "unknown",
    }
}

struct Inner {
    netns: Option<String>,
    iface: String,
    dir: PathBuf,
    slots: OwnedFd,
    // Held, not only pinned: an XDP link whose last pin goes and which no
    // process holds is detached, so a `rm -r` of the pins would leave the
    // interface unprotected while the daemon runs on.
    entry: Option<OwnedFd>,
    link: Mutex<Option<XdpLink>>,
}

/// One interface's chain (cheap to clone: the array's fd is shared).
#[derive(Clone)]
pub struct Chain {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("iface", &self.describe())
            .field("dir", &self.inner.dir)
            .finish()
    }
}

/// The pin directory of interface `iface` in `netns` (bpffs refuses dots
/// in names: `eth0.100` is written `eth0%2e100`).
pub fn pin_dir(netns: Option<&str>, iface: &str) -> PathBuf {
    let n = match netns {
        Some(ns) => format!("{ns}-{iface}"),
        None => iface.to_string(),
    };
    pin::path(&["chain", &n.replace('.', "%2e")])
}

const SLOTS: &str = "slots";
const ENTRY: &str = "entry";
const LINK: &str = "link";

impl Chain {
    /// The interface's chain: the one already pinned there (a restarted
    /// daemon finds its stages in place), or a new one — entry point
    /// loaded, attached in `mode` and pinned, every slot empty (the
    /// interface passes every frame until a stage is set).
    ///
    /// # Errors
    /// Not root, no bpffs, a missing namespace or interface, another XDP
    /// program on the interface, load failures. A new chain leaves nothing
    /// behind on error.
    pub fn attach(netns: Option<&str>, iface: &str, mode: XdpMode) -> Result<Self> {
        crate::features::require_root("attaching the XDP chain")?;
        let dir = pin_dir(netns, iface);
        if dir.join(LINK).exists() {
            return Self::open(netns, iface);
        }
        netns::ifindex(netns, iface)?;
        pin::ensure_bpffs()?;
        // Staged in a directory of its own, then renamed into place.
        let staging = pin::dir(&["chain-staging", &format!("{}", std::process::id())])?;
        let tmp = staging.join(dir.file_name().unwrap_or_default());
        let res = (|| -> Result<()> {
            std::fs::create_dir_all(&tmp).map_err(|e| Error::Io {
                context: format!("creating {}", tmp.display()),
                err: e,
            })?;
            let mut skel = XdpChainSkelBuilder::default()
                .open(crate::skel::object_storage())
                .bpf_context(|| "opening xdp_chain".into())?
                .load()
                .bpf_context(|| "loading xdp_chain (verifier)".into())?;
            skel.maps
                .rampart_chain
                .pin(tmp.join(SLOTS))
                .bpf_context(|| "pinning the chain's slots".into())?;
            skel.progs
                .xdp_chain
                .pin(tmp.join(ENTRY))
                .bpf_context(|| "pinning the chain's entry point".into())?;
            let link =
                XdpLink::attach(skel.progs.xdp_chain.as_fd().as_raw_fd(), netns, iface, mode)?;
            link.pin(&tmp.join(LINK))?;
            pin::dir(&["chain"])?;
            std::fs::rename(&tmp, &dir).map_err(|e| Error::Io {
                context: format!("renaming pins to {}", dir.display()),
                err: e,
            })
        })();
        if res.is_err() {
            // Removing the pins drops the link (detaching) and the array.
            let _ = pin::remove_tree(&tmp);
        }
        let _ = std::fs::remove_dir(&staging);
        pin::prune_empty_parents(&staging);
        res?;
        Self::open(netns, iface)
    }

    /// The chain pinned for `iface` of `netns`.
    ///
    /// # Errors
    /// [`Error::Pin`] when there is none.
    pub fn open(netns: Option<&str>, iface: &str) -> Result<Self> {
        let dir = pin_dir(netns, iface);
        let slots = pin::open_pinned(&dir.join(SLOTS))?;
        let entry = pin::open_pinned(&dir.join(ENTRY)).ok();
        let link = XdpLink::open_pinned(&dir.join(LINK)).ok();
        Ok(Self {
            inner: Arc::new(Inner {
                netns: netns.map(str::to_string),
                iface: iface.to_string(),
                dir,
                slots,
                entry,
                link: Mutex::new(link),
            }),
        })
    }

    /// Detach the chain of `iface` of `netns` and remove its pins (its
    /// stages stop seeing frames). `Ok(false)` when there was none.
    ///
    /// # Errors
    /// Removal failures.
    pub fn remove(netns: Option<&str>, iface: &str) -> Result<bool> {
        let dir = pin_dir(netns, iface);
        if !dir.exists() {
            return Ok(false);
        }
        if let Ok(link) = XdpLink::open_pinned(&dir.join(LINK)) {
            // A link whose interface is gone is already detached: the error is moot.
            let _ = link.detach();
        }
        pin::remove_tree(&dir)?;
        pin::prune_empty_parents(&dir);
        Ok(true)
    }

    /// Is the chain's entry point attached to the interface that now has
    /// its name? An interface deleted and created again (same name, new
    /// ifindex) starts without XDP: the entry point (pinned, with every
    /// stage in its slots) is attached to it again in `mode` and its link
    /// pin replaced. Down and up keep the link: nothing to do then.
    ///
    /// # Errors
    /// The interface is missing; the entry point's pin is gone; attaching fails.
    pub fn check(&self, mode: XdpMode) -> Result<Check> {
        let now = netns::ifindex(self.netns(), self.iface())?;
        let repinned = self.repin(now)?;
        let link_pin = self.inner.dir.join(LINK);
        let linked = XdpLink::open_pinned(&link_pin)
            .and_then(|l| l.info())
            .map_or(0, |(_, ifindex)| ifindex);
        if linked == now {
            return Ok(if repinned {
                Check::Repinned
            } else {
                Check::Attached
            });
        }
        let pinned_entry;
        let entry = match &self.inner.entry {
            Some(fd) => fd.as_raw_fd(),
            None => {
                pinned_entry = pin::open_pinned(&self.inner.dir.join(ENTRY))?;
                pinned_entry.as_raw_fd()
            }
        };
        let link = XdpLink::attach(entry, self.netns(), self.iface(), mode)?;
        let _ = std::fs::remove_file(&link_pin);
        if let Err(e) = link.pin(&link_pin) {
            // Unpinned, the link would go with this process: detach it so
            // the next check tries again.
            let _ = link.detach();
            return Err(e);
        }
        *self.held_link() = Some(link);
        Ok(Check::Reattached)
    }

    fn held_link(&self) -> std::sync::MutexGuard<'_, Option<XdpLink>> {
        self.inner
            .link
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Pin again what this value holds and bpffs lost (the directory
    /// removed, or one pin): slots, entry point, and the link while it
    /// is on the interface of index `now`. `true` when something was.
    fn repin(&self, now: u32) -> Result<bool> {
        let dir = &self.inner.dir;
        let missing = |name: &str| !dir.join(name).exists();
        let link_ok = |l: &XdpLink| l.info().is_ok_and(|(_, i)| i == now);
        let held = self.held_link();
        let todo = missing(SLOTS)
            || (self.inner.entry.is_some() && missing(ENTRY))
            || (held.as_ref().is_some_and(link_ok) && missing(LINK));
        if !todo {
            return Ok(false);
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::Io {
            context: format!("creating {}", dir.display()),
            err: e,
        })?;
        if missing(SLOTS) {
            pin::pin_fd(self.inner.slots.as_raw_fd(), &dir.join(SLOTS))?;
        }
        if let Some(e) = &self.inner.entry {
            if missing(ENTRY) {
                pin::pin_fd(e.as_raw_fd(), &dir.join(ENTRY))?;
            }
        }
        if let Some(l) = held.as_ref().filter(|l| link_ok(l)) {
            if missing(LINK) {
                l.pin(&dir.join(LINK))?;
            }
        }
        Ok(true)
    }

    /// `iface` or `iface (netns ns)`.
    pub fn describe(&self) -> String {
        match &self.inner.netns {
            Some(ns) => format!("{} (netns {ns})", self.inner.iface),
            None => self.inner.iface.clone(),
        }
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.inner.iface
    }

    /// The interface's network namespace.
    pub fn netns(&self) -> Option<&str> {
        self.inner.netns.as_deref()
    }

    /// The pin directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The program array's fd (for [`Chain::reuse_in`]).
    pub fn slots_fd(&self) -> RawFd {
        self.inner.slots.as_raw_fd()
    }

    /// Make `map` (a stage object's `rampart_chain`, before load) this
    /// chain's program array.
    ///
    /// # Errors
    /// libbpf's refusal (a map of another shape).
    pub fn reuse_in(&self, map: &mut libbpf_rs::OpenMapMut<'_>) -> Result<()> {
        map.reuse_fd(self.inner.slots.as_fd())
            .bpf_context(|| format!("joining the XDP chain of {}", self.describe()))
    }

    /// Put program `prog_fd` in `slot` (replacing what is there, atomically).
    ///
    /// # Errors
    /// The kernel's refusal (not an XDP program, a bad slot).
    pub fn set(&self, slot: u32, prog_fd: RawFd) -> Result<()> {
        maps::update_raw(
            self.slots_fd(),
            &slot.to_ne_bytes(),
            &(prog_fd as u32).to_ne_bytes(),
            0,
        )
        .map_err(|e| {
            Error::Invalid(format!(
                "installing the {} stage in the chain of {}: {e}",
                slot_name(slot),
                self.describe()
            ))
        })
    }

    /// Empty `slot` (its stage is skipped from the next packet on).
    /// `Ok(false)` when it was empty.
    ///
    /// # Errors
    /// The kernel's error.
    pub fn clear(&self, slot: u32) -> Result<bool> {
        maps::delete_raw(self.slots_fd(), &slot.to_ne_bytes())
    }

    /// The id of the program in `slot`, if any.
    ///
    /// # Errors
    /// The kernel's error.
    pub fn prog_id(&self, slot: u32) -> Result<Option<u32>> {
        let mut id = [0u8; 4];
        Ok(
            maps::lookup_raw(self.slots_fd(), &slot.to_ne_bytes(), &mut id)?
                .then(|| u32::from_ne_bytes(id)),
        )
    }

    /// The stages installed, as `(slot, prog_id)` in chain order.
    ///
    /// # Errors
    /// The kernel's error.
    pub fn stages(&self) -> Result<Vec<(u32, u32)>> {
        let mut v = Vec::new();
        for s in 0..CHAIN_SLOTS {
            if let Some(id) = self.prog_id(s)? {
                v.push((s, id));
            }
        }
        Ok(v)
    }
}

/// What [`Chain::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The entry point runs on the interface of that name.
    Attached,
    /// The interface had been created again: attached to it now.
    Reattached,
    /// Attached, but pins had been removed: pinned again.
    Repinned,
}

/// Watches a chain's attachment, saying each change of state once in
/// the log: the interface gone, back, created again (entry point attached
/// again), attaching failing.
#[derive(Debug)]
pub struct Watch {
    chain: Chain,
    mode: XdpMode,
    gone: bool,
    failed: bool,
}

impl Watch {
    /// Watch `chain`, attaching its entry point in `mode` when needed.
    pub fn new(chain: Chain, mode: XdpMode) -> Self {
        Self {
            chain,
            mode,
            gone: false,
            failed: false,
        }
    }

    /// Check once (see [`Chain::check`]); logs one line per change.
    pub fn check(&mut self) {
        let where_ = self.chain.describe();
        if netns::ifindex(self.chain.netns(), self.chain.iface()).is_err() {
            if !self.gone {
                tracing::warn!(
                    "{where_} is gone: the XDP chain is attached again when an interface of that name comes back"
                );
                self.gone = true;
            }
            return;
        }
        match self.chain.check(self.mode) {
            Ok(Check::Attached) => {
                if self.gone || self.failed {
                    tracing::info!("{where_} is back with the XDP chain attached");
                }
                self.gone = false;
                self.failed = false;
            }
            Ok(Check::Repinned) => {
                tracing::warn!(
                    "{where_}: the XDP chain's pins under {} were removed; the chain kept running and is pinned again",
                    self.chain.dir().display()
                );
                self.gone = false;
                self.failed = false;
            }
            Ok(Check::Reattached) => {
                tracing::warn!(
                    "{where_}: the XDP chain was not attached (the interface was deleted and created again); attached again with its stages"
                );
                self.gone = false;
                self.failed = false;
            }
            Err(e) => {
                if !self.failed {
                    tracing::error!(
                        "{where_}: the XDP chain is not attached and attaching it again failed: {e}; its stages see no packet until it is"
                    );
                    self.failed = true;
                }
            }
        }
    }
}

/// A program in a chain slot for as long as this value lives: dropping it
/// empties the slot, unless another program has replaced it there since.
#[derive(Debug)]
pub struct Stage {
    chain: Chain,
    slot: u32,
    prog_id: u32,
}

impl Stage {
    /// Put `prog_fd` in `slot` of `chain`.
    ///
    /// # Errors
    /// As [`Chain::set`].
    pub fn install(chain: &Chain, slot: u32, prog_fd: RawFd) -> Result<Self> {
        let prog_id = crate::xdp::prog_id_of(prog_fd)?;
        chain.set(slot, prog_fd)?;
        Ok(Self {
            chain: chain.clone(),
            slot,
            prog_id,
        })
    }

    /// Replace the program (atomically: every packet runs the old or the new one).
    ///
    /// # Errors
    /// As [`Chain::set`].
    pub fn replace(&mut self, prog_fd: RawFd) -> Result<()> {
        let id = crate::xdp::prog_id_of(prog_fd)?;
        self.chain.set(self.slot, prog_fd)?;
        self.prog_id = id;
        Ok(())
    }

    /// The chain.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// Empty the slot now (if it still holds this stage's program).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn remove(&self) -> Result<()> {
        if self.chain.prog_id(self.slot)? == Some(self.prog_id) {
            self.chain.clear(self.slot)?;
        }
        Ok(())
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// Where a program runs: alone on an interface (its own `bpf_link`), or
/// as one stage of the interface's chain.
#[derive(Debug)]
pub enum Attached {
    /// Alone: the interface's only XDP program.
    Link(XdpLink),
    /// A stage of the chain.
    Stage(Stage),
}

impl Attached {
    /// Attach `prog_fd` alone to `iface`, or put it in `slot` of `chain`.
    ///
    /// # Errors
    /// As [`XdpLink::attach`] or [`Stage::install`].
    pub fn new(
        prog_fd: RawFd,
        chain: Option<&Chain>,
        slot: u32,
        netns: Option<&str>,
        iface: &str,
        mode: XdpMode,
    ) -> Result<Self> {
        Ok(match chain {
            Some(c) => Self::Stage(Stage::install(c, slot, prog_fd)?),
            None => Self::Link(XdpLink::attach(prog_fd, netns, iface, mode)?),
        })
    }

    /// Replace the program atomically.
    ///
    /// # Errors
    /// The kernel's refusal.
    pub fn update(&mut self, prog_fd: RawFd) -> Result<()> {
        match self {
            Self::Link(l) => l.update(prog_fd),
            Self::Stage(s) => s.replace(prog_fd),
        }
    }

    /// Stop running the program here.
    ///
    /// # Errors
    /// The kernel's error.
    pub fn detach(&self) -> Result<()> {
        match self {
            Self::Link(l) => l.detach(),
            Self::Stage(s) => s.remove(),
        }
    }
}
