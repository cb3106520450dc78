//! The host interface's XDP attachment, checked every interval.
//!
//! The filter runs through a pinned `bpf_link`. Two things can take it away
//! behind the daemon's back: the interface is deleted (the kernel detaches
//! the link; an interface created again under the same name starts without
//! XDP), and the pins are removed (a pinned link nobody else holds is
//! destroyed with its pin). The daemon holds the link itself, so removing
//! the pins does not detach it, and attaches the filter's program again
//! when the interface comes back. Each change of state is one log line.

use std::os::fd::AsRawFd;
use std::path::PathBuf;

use rampart_dataplane::netns;
use rampart_dataplane::xdp::{self, XdpLink, XdpMode};
use rampart_ddos::filter::{pins, Filter, Scope};

use crate::error::Result;

/// The host filter's attachment as the daemon last saw it.
#[derive(Debug)]
pub struct Attachment {
    scope: Scope,
    mode: XdpMode,
    /// Held so that the link outlives its pin.
    link: XdpLink,
    prog_id: u32,
    pin_dir: PathBuf,
    iface_gone: bool,
    reattach_failed: bool,
    pins_gone: bool,
}

impl Attachment {
    /// Hold the link of `f`, the filter attached to `scope` in `mode`.
    ///
    /// # Errors
    /// The link pin cannot be opened or read.
    pub fn open(scope: &Scope, f: &Filter, mode: XdpMode) -> Result<Self> {
        let link = XdpLink::open_pinned(&f.dir().join(pins::LINK))?;
        let (prog_id, _) = link.info()?;
        Ok(Self {
            scope: scope.clone(),
            mode,
            link,
            prog_id,
            pin_dir: f.dir().to_path_buf(),
            iface_gone: false,
            reattach_failed: false,
            pins_gone: false,
        })
    }

    /// Is the filter attached to the interface that now has the scope's
    /// name? If not and the interface exists, attach it again. Logs one
    /// line per change of state.
    pub fn check(&mut self) {
        let where_ = self.scope.describe();
        let linked = self.link.info().map_or(0, |(_, ifindex)| ifindex);
        match netns::ifindex(self.scope.netns.as_deref(), &self.scope.iface) {
            Err(_) => {
                if !self.iface_gone {
                    tracing::warn!(
                        "{where_} is gone: nothing arrives there to filter; the XDP filter is attached again when an interface of that name comes back"
                    );
                    self.iface_gone = true;
                }
            }
            Ok(now) if now == linked => {
                if self.iface_gone {
                    tracing::info!("{where_} is back with the XDP filter attached");
                }
                self.iface_gone = false;
                self.reattach_failed = false;
            }
            Ok(_) => match self.reattach() {
                Ok(()) => {
                    tracing::warn!(
                        "{where_}: the XDP filter was not attached (the interface was deleted and created again); attached again, every block applies"
                    );
                    self.iface_gone = false;
                    self.reattach_failed = false;
                }
                Err(e) => {
                    if !self.reattach_failed {
                        tracing::error!(
                            "{where_}: the XDP filter is not attached and attaching it again failed: {e}; blocked sources reach the host until it is"
                        );
                        self.reattach_failed = true;
                    }
                }
            },
        }
        let pinned = self.pin_dir.join(pins::LINK).exists();
        if !pinned && !self.pins_gone {
            tracing::warn!(
                "{where_}: the filter's pins under {} were removed; filtering goes on in this process, but a restart attaches an empty filter (blocks the operator made come back from the state file, detection finds the rest again)",
                self.pin_dir.display()
            );
        } else if pinned && self.pins_gone {
            tracing::info!("{where_}: the filter's pins are back");
        }
        self.pins_gone = !pinned;
    }

    fn reattach(&mut self) -> Result<()> {
        let prog = xdp::prog_fd(self.prog_id)?;
        let link = XdpLink::attach(
            prog.as_raw_fd(),
            self.scope.netns.as_deref(),
            &self.scope.iface,
            self.mode,
        )?;
        if self.pin_dir.exists() {
            let p = self.pin_dir.join(pins::LINK);
            let _ = std::fs::remove_file(&p);
            link.pin(&p)?;
        }
        self.link = link;
        Ok(())
    }
}

/// The SYN-cookie TC stage's attachment (while a victim has cookies),
/// checked every interval as the XDP filter's is: attached again to an
/// interface deleted and created again, each change of state one line.
#[derive(Debug, Default)]
pub struct TcWatch {
    gone: bool,
    failed: bool,
}

impl TcWatch {
    /// Check `p`'s TC stage on `where_` (the scope, for the log).
    pub fn check(&mut self, p: &mut rampart_ddos::protect::Protect, where_: &str) {
        use rampart_ddos::protect::TcCheck;
        match p.check_tc() {
            Ok(TcCheck::Off) => {
                self.gone = false;
                self.failed = false;
            }
            Ok(TcCheck::Attached) => {
                if self.gone || self.failed {
                    tracing::info!("{where_}: the SYN-cookie TC stage is attached");
                }
                self.gone = false;
                self.failed = false;
            }
            Ok(TcCheck::IfaceGone) => self.gone = true,
            Ok(TcCheck::Reattached) => {
                tracing::warn!(
                    "{where_}: the SYN-cookie TC stage was not attached (the interface was deleted and created again); attached again"
                );
                self.gone = false;
                self.failed = false;
            }
            Err(e) => {
                if !self.failed {
                    tracing::error!(
                        "{where_}: the SYN-cookie TC stage is not attached and attaching it again failed: {e}; cookie ACKs are not answered until it is"
                    );
                    self.failed = true;
                }
            }
        }
    }
}
