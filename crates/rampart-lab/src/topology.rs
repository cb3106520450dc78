//! The lab topology:
//!
//! ```text
//!  <p>-wan            <p>-nic (EMULATED SmartNIC)          <p>-host              <p>-t<i>
//!  wan0  ─── veth ───  nic-wan ⇄ xdp_nic_emul ⇄ nic-host ─── veth ─── host0      t<i> ── veth ── eth0
//!  10.10.0.1/24                  (L2, transparent)                    10.10.0.2/24  10.20.i.1/24    10.20.i.2/24
//!  fd10::1/64                                                         fd10::2/64    fd20:0:0:i::1   fd20:0:0:i::2
//! ```
//!
//! With [`UpOptions::upstream_router`], an EMULATED router sits between
//! `wan` and `nic` (opt-in: the frames then cross a Linux bridge and
//! nftables, far slower than the XDP wire every other test and benchmark
//! uses):
//!
//! ```text
//!  <p>-wan        <p>-up (EMULATED upstream router)             <p>-nic
//!  wan0 ── veth ── up-wan ⇄ br0 + nft bridge filter ⇄ up-nic ── veth ── nic-wan …
//! ```
//!
//! The router's control plane is real (BIRD 2, [`crate::bgp::BgpLab::in_path`]);
//! its forwarding is the bridge, and what BIRD learned (FlowSpec, RTBH) is
//! mapped to nftables rules by the lab — BIRD does not program FlowSpec
//! into a kernel — hence EMULATED.
//!
//! `wan` holds attackers and legitimate clients, `nic` stands for the
//! SmartNIC between the wire and the host (an XDP program that forwards at
//! L2, so `wan` and `host` share one subnet exactly as with a real NIC), and
//! `host` is the device under test. Tenant namespaces hang off `host`,
//! routed. Every name derives from a prefix so several labs can run side
//! by side; nothing outside these namespaces and
//! `/sys/fs/bpf/rampart/lab/<prefix>/` is ever touched.

use std::path::PathBuf;

use serde::Serialize;

use rampart_dataplane::{netns, pin, xdp::XdpLink, xdp::XdpMode};

use crate::error::{Error, Result};
use rampart_dataplane::cmd::{in_ns, ip};

/// Prefix used when none is given.
pub const DEFAULT_PREFIX: &str = "rp";

/// Interface names inside the namespaces (the same in every lab: names are per namespace).
pub const WAN_IF: &str = "wan0";
/// nic-side veth facing `wan`.
pub const NIC_WAN_IF: &str = "nic-wan";
/// nic-side veth facing `host`.
pub const NIC_HOST_IF: &str = "nic-host";
/// host-side veth facing `nic`.
pub const HOST_IF: &str = "host0";
/// A veth pair in `wan` that stays down and never carries a frame. The
/// generator attaches its program there for the length of a run: an XDP
/// program attached somewhere stays registered in the kernel's XDP
/// dispatcher, so each BPF_PROG_RUN call does not re-register it and wait
/// for an RCU grace period (~24 ms a call on this VM, measured).
pub const GEN_ANCHOR_IF: &str = "gen-anchor";

/// Addresses (only ever used inside the lab's namespaces).
pub const WAN_V4: [u8; 4] = [10, 10, 0, 1];
/// host's IPv4 address.
pub const HOST_V4: [u8; 4] = [10, 10, 0, 2];
/// wan's IPv6 address.
pub const WAN_V6: [u16; 8] = [0xfd10, 0, 0, 0, 0, 0, 0, 1];
/// host's IPv6 address.
pub const HOST_V6: [u16; 8] = [0xfd10, 0, 0, 0, 0, 0, 0, 2];
/// Fixed MACs so templates and static neighbours need no discovery.
pub const WAN_MAC: [u8; 6] = [0x02, 0x72, 0x70, 0x00, 0x00, 0x01];
/// host0's MAC.
pub const HOST_MAC: [u8; 6] = [0x02, 0x72, 0x70, 0x00, 0x00, 0x02];
/// nic-wan's MAC.
pub const NIC_WAN_MAC: [u8; 6] = [0x02, 0x72, 0x70, 0x00, 0x01, 0x01];
/// nic-host's MAC.
pub const NIC_HOST_MAC: [u8; 6] = [0x02, 0x72, 0x70, 0x00, 0x01, 0x02];
/// Most tenant namespaces a lab holds.
pub const MAX_TENANTS: u32 = 32;

fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn v4_str(a: &[u8; 4]) -> String {
    std::net::Ipv4Addr::from(*a).to_string()
}

fn v6_str(a: &[u16; 8]) -> String {
    std::net::Ipv6Addr::from(*a).to_string()
}

/// A lab, named by its prefix. Creating the value touches nothing.
#[derive(Debug, Clone)]
pub struct Lab {
    prefix: String,
}

/// Options of `lab up`.
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// Tenant namespaces to create behind `host` (0 … [`MAX_TENANTS`]).
    pub tenants: u32,
    /// Capacity K of the EMULATED NIC's exact-match table (`None`: 512, or
    /// unchanged when the lab is already up).
    pub nic_capacity: Option<u32>,
    /// Put the EMULATED upstream router (namespace `<p>-up`: a bridge with
    /// an nftables filter) on the wire between `wan` and `nic`. Only when
    /// the lab is built (a lab that is up keeps its wire).
    pub upstream_router: bool,
}

/// The EMULATED router's port facing `wan`.
pub const UP_WAN_IF: &str = "up-wan";
/// The EMULATED router's port facing `nic`.
pub const UP_NIC_IF: &str = "up-nic";
/// The EMULATED router's bridge.
pub const UP_BRIDGE: &str = "br0";

/// One interface as `lab status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct IfaceStatus {
    /// Name inside its namespace.
    pub name: String,
    /// MAC address.
    pub mac: String,
    /// Operational state.
    pub state: String,
    /// Addresses with prefix length.
    pub addrs: Vec<String>,
    /// Attached XDP program (`name#id`), if any.
    pub xdp: Option<String>,
}

/// One namespace as `lab status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct NsStatus {
    /// Role in the topology: wan, nic, host, tenant.
    pub role: String,
    /// Namespace name.
    pub netns: String,
    /// Does it exist?
    pub exists: bool,
    /// Its interfaces (loopback omitted).
    pub interfaces: Vec<IfaceStatus>,
    /// Routes, one `ip route` line each (IPv4 and IPv6).
    pub routes: Vec<String>,
}

/// The whole lab as `lab status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Lab prefix.
    pub prefix: String,
    /// `up`, `down` or `partial`.
    pub state: String,
    /// Namespaces.
    pub namespaces: Vec<NsStatus>,
    /// Pin directory, if present.
    pub pins: Option<String>,
}

impl Lab {
    /// A lab handle for `prefix` (letters, digits, `_`; 1–12 characters).
    ///
    /// # Errors
    /// [`Error::InvalidSpec`] for a bad prefix.
    pub fn new(prefix: &str) -> Result<Self> {
        if prefix.is_empty()
            || prefix.len() > 12
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(Error::InvalidSpec(format!(
                "bad lab prefix {prefix:?}: use 1-12 letters, digits or '_' (e.g. --prefix t1)"
            )));
        }
        Ok(Self {
            prefix: prefix.to_string(),
        })
    }

    /// The lab's prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Namespace of the attacker/client side.
    pub fn wan_ns(&self) -> String {
        format!("{}-wan", self.prefix)
    }
    /// Namespace of the emulated NIC.
    pub fn nic_ns(&self) -> String {
        format!("{}-nic", self.prefix)
    }
    /// Namespace of the device under test.
    pub fn host_ns(&self) -> String {
        format!("{}-host", self.prefix)
    }
    /// Namespace of the EMULATED upstream router (when the lab has one).
    pub fn up_ns(&self) -> String {
        format!("{}-up", self.prefix)
    }
    /// Is the EMULATED upstream router on the wire?
    pub fn has_upstream_router(&self) -> bool {
        netns::exists(&self.up_ns())
    }
    /// Namespace of tenant `i` (1-based).
    pub fn tenant_ns(&self, i: u32) -> String {
        format!("{}-t{i}", self.prefix)
    }
    /// Host-side interface towards tenant `i`.
    pub fn tenant_host_if(i: u32) -> String {
        format!("t{i}")
    }
    /// Tenant `i`'s IPv4 address.
    pub fn tenant_v4(i: u32) -> [u8; 4] {
        [10, 20, i as u8, 2]
    }
    /// Tenant `i`'s IPv6 address.
    pub fn tenant_v6(i: u32) -> [u16; 8] {
        [0xfd20, 0, 0, i as u16, 0, 0, 0, 2]
    }

    /// Pin directory of this lab (not created).
    pub fn pin_dir(&self) -> PathBuf {
        pin::path(&["lab", &self.prefix])
    }

    /// Tenant namespaces that currently exist, in order.
    pub fn tenants(&self) -> Vec<u32> {
        (1..=MAX_TENANTS)
            .filter(|&i| netns::exists(&self.tenant_ns(i)))
            .collect()
    }

    /// Is the core topology (wan, nic, host and the nic forwarder) in place?
    pub fn is_up(&self) -> bool {
        netns::exists(&self.wan_ns())
            && netns::exists(&self.nic_ns())
            && netns::exists(&self.host_ns())
            && self.pin_dir().join("nic").join("link_wan").exists()
            && self.pin_dir().join("nic").join("link_host").exists()
    }

    /// Fail with a clear message unless the lab is up.
    ///
    /// # Errors
    /// [`Error::NotUp`].
    pub fn require_up(&self) -> Result<()> {
        if self.is_up() {
            Ok(())
        } else {
            Err(Error::NotUp {
                prefix: self.prefix.clone(),
                detail: "namespaces or NIC forwarder missing".into(),
            })
        }
    }

    /// Create the topology. Idempotent: a lab that is fully up is left as
    /// is (tenants are added or removed to match `opts.tenants`); a partial
    /// one is removed and rebuilt.
    ///
    /// # Errors
    /// Missing privileges or kernel features, or a failing `ip` command (the
    /// partial topology is removed before returning the error).
    pub fn up(&self, opts: &UpOptions) -> Result<()> {
        use rampart_dataplane::features::{require, Feature};
        require(
            "rampart lab up",
            &[Feature::Root, Feature::Veth, Feature::Xdp, Feature::Bpffs],
        )?;
        if opts.tenants > MAX_TENANTS {
            return Err(Error::InvalidSpec(format!(
                "--tenants {} is too many: the lab holds at most {MAX_TENANTS}",
                opts.tenants
            )));
        }
        if !self.is_up() {
            self.down()?;
            if let Err(e) = self.build_core(opts) {
                let _ = self.down();
                return Err(e);
            }
        } else if let Some(k) = opts.nic_capacity {
            if crate::nic::open(self)?.capacity() != k {
                self.set_nic_capacity(k)?;
            }
        }
        let have = self.tenants();
        for i in have.iter().copied().filter(|&i| i > opts.tenants) {
            ip(&["netns", "del", &self.tenant_ns(i)])?;
        }
        for i in 1..=opts.tenants {
            if !have.contains(&i) {
                if let Err(e) = self.build_tenant(i) {
                    let _ = ip(&["netns", "del", &self.tenant_ns(i)]);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn build_core(&self, opts: &UpOptions) -> Result<()> {
        let (wan, nic, host) = (self.wan_ns(), self.nic_ns(), self.host_ns());
        let up = self.up_ns();
        let mut all = vec![&wan, &nic, &host];
        if opts.upstream_router {
            all.push(&up);
        }
        for ns in all {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        // Two queues per veth so two generator threads (one per CPU) do not
        // share one NAPI ring.
        let q = ["numtxqueues", "2", "numrxqueues", "2"];
        let veth = |ns_a: &str, a_if: &str, ns_b: &str, b_if: &str| -> Result<()> {
            let mut a = vec!["-n", ns_a, "link", "add", a_if];
            a.extend_from_slice(&q);
            a.extend_from_slice(&["type", "veth", "peer", "name", b_if, "netns", ns_b]);
            a.extend_from_slice(&q);
            ip(&a)?;
            Ok(())
        };
        if opts.upstream_router {
            veth(&wan, WAN_IF, &up, UP_WAN_IF)?;
            veth(&up, UP_NIC_IF, &nic, NIC_WAN_IF)?;
            self.build_router(&up)?;
        } else {
            veth(&wan, WAN_IF, &nic, NIC_WAN_IF)?;
        }
        ip(&[
            "-n",
            &wan,
            "link",
            "add",
            GEN_ANCHOR_IF,
            "type",
            "veth",
            "peer",
            "name",
            "gen-anchor-p",
        ])?;
        let mut a = vec!["-n", host.as_str(), "link", "add", HOST_IF];
        a.extend_from_slice(&q);
        a.extend_from_slice(&[
            "type",
            "veth",
            "peer",
            "name",
            NIC_HOST_IF,
            "netns",
            nic.as_str(),
        ]);
        a.extend_from_slice(&q);
        ip(&a)?;

        for (ns, ifname, mac) in [
            (&wan, WAN_IF, &WAN_MAC),
            (&nic, NIC_WAN_IF, &NIC_WAN_MAC),
            (&nic, NIC_HOST_IF, &NIC_HOST_MAC),
            (&host, HOST_IF, &HOST_MAC),
        ] {
            ip(&["-n", ns, "link", "set", ifname, "address", &mac_str(mac)])?;
        }
        // wan and host are endpoints of a wire that crosses the NIC's XDP
        // redirect: checksum offload must be off (a redirected frame carries
        // no CHECKSUM_PARTIAL state) and GRO on (frames redirected into a
        // veth are dropped unless the receiver has GRO or an XDP program).
        for (ns, ifname) in [(&wan, WAN_IF), (&host, HOST_IF)] {
            in_ns(ns, "ethtool", &["-K", ifname, "tx", "off", "gro", "on"])?;
        }
        for (ns, ifname) in [
            (&wan, WAN_IF),
            (&nic, NIC_WAN_IF),
            (&nic, NIC_HOST_IF),
            (&host, HOST_IF),
        ] {
            ip(&["-n", ns, "link", "set", ifname, "up"])?;
        }
        ip(&[
            "-n",
            &wan,
            "addr",
            "add",
            &format!("{}/24", v4_str(&WAN_V4)),
            "dev",
            WAN_IF,
        ])?;
        ip(&[
            "-n",
            &wan,
            "addr",
            "add",
            &format!("{}/64", v6_str(&WAN_V6)),
            "dev",
            WAN_IF,
            "nodad",
        ])?;
        ip(&[
            "-n",
            &host,
            "addr",
            "add",
            &format!("{}/24", v4_str(&HOST_V4)),
            "dev",
            HOST_IF,
        ])?;
        ip(&[
            "-n",
            &host,
            "addr",
            "add",
            &format!("{}/64", v6_str(&HOST_V6)),
            "dev",
            HOST_IF,
            "nodad",
        ])?;
        // Static neighbours: no ARP/ND under a flood, and templates can use fixed MACs.
        ip(&[
            "-n",
            &wan,
            "neigh",
            "replace",
            &v4_str(&HOST_V4),
            "lladdr",
            &mac_str(&HOST_MAC),
            "dev",
            WAN_IF,
            "nud",
            "permanent",
        ])?;
        ip(&[
            "-n",
            &wan,
            "neigh",
            "replace",
            &v6_str(&HOST_V6),
            "lladdr",
            &mac_str(&HOST_MAC),
            "dev",
            WAN_IF,
            "nud",
            "permanent",
        ])?;
        ip(&[
            "-n",
            &host,
            "neigh",
            "replace",
            &v4_str(&WAN_V4),
            "lladdr",
            &mac_str(&WAN_MAC),
            "dev",
            HOST_IF,
            "nud",
            "permanent",
        ])?;
        ip(&[
            "-n",
            &host,
            "neigh",
            "replace",
            &v6_str(&WAN_V6),
            "lladdr",
            &mac_str(&WAN_MAC),
            "dev",
            HOST_IF,
            "nud",
            "permanent",
        ])?;
        // host answers spoofed sources through wan; wan reaches tenants through host.
        ip(&[
            "-n",
            &host,
            "route",
            "add",
            "default",
            "via",
            &v4_str(&WAN_V4),
        ])?;
        ip(&[
            "-n",
            &host,
            "-6",
            "route",
            "add",
            "default",
            "via",
            &v6_str(&WAN_V6),
        ])?;
        ip(&[
            "-n",
            &wan,
            "route",
            "add",
            "10.20.0.0/16",
            "via",
            &v4_str(&HOST_V4),
        ])?;
        ip(&[
            "-n",
            &wan,
            "-6",
            "route",
            "add",
            "fd20::/48",
            "via",
            &v6_str(&HOST_V6),
        ])?;
        in_ns(
            &host,
            "sysctl",
            &[
                "-qw",
                "net.ipv4.ip_forward=1",
                "net.ipv6.conf.all.forwarding=1",
            ],
        )?;
        self.attach_nic(
            opts.nic_capacity
                .unwrap_or(rampart_bpf::abi::lab::NIC_DEFAULT_CAPACITY),
        )?;
        Ok(())
    }

    /// The EMULATED router's forwarding: a bridge of its two ports, no
    /// STP (ports forward at once). GRO on both ports: frames redirected
    /// into a veth by XDP (the generator's XDP_TX on wan0, the NIC's
    /// redirect on nic-wan) are dropped unless the receiver has GRO or an
    /// XDP program, and here they must reach the bridge and nftables.
    fn build_router(&self, up: &str) -> Result<()> {
        ip(&[
            "-n",
            up,
            "link",
            "add",
            UP_BRIDGE,
            "type",
            "bridge",
            "stp_state",
            "0",
        ])?;
        for p in [UP_WAN_IF, UP_NIC_IF] {
            ip(&["-n", up, "link", "set", p, "master", UP_BRIDGE])?;
            in_ns(up, "ethtool", &["-K", p, "gro", "on"])?;
            ip(&["-n", up, "link", "set", p, "up"])?;
        }
        ip(&["-n", up, "link", "set", UP_BRIDGE, "up"])?;
        Ok(())
    }

    /// Load the EMULATED NIC (forwarder + K-entry table) and return it
    /// with its pinned-map directory ready.
    fn load_nic(
        &self,
        capacity: u32,
    ) -> Result<rampart_bpf::xdp_nic_emul::XdpNicEmulSkel<'static>> {
        use libbpf_rs::skel::{OpenSkel, SkelBuilder};
        use rampart_bpf::xdp_nic_emul::XdpNicEmulSkelBuilder;
        use rampart_dataplane::error::BpfContext;

        if capacity == 0 || capacity > crate::nic::MAX_CAPACITY {
            return Err(Error::InvalidSpec(format!(
                "NIC table capacity {capacity} out of range: use 1..={}",
                crate::nic::MAX_CAPACITY
            )));
        }
        let nic = self.nic_ns();
        let wan_idx = netns::ifindex(Some(&nic), NIC_WAN_IF)?;
        let host_idx = netns::ifindex(Some(&nic), NIC_HOST_IF)?;
        let mut open = XdpNicEmulSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .bpf_context(|| "opening xdp_nic_emul".into())?;
        open.maps
            .nic_rules
            .set_max_entries(capacity)
            .bpf_context(|| "sizing the NIC table".into())?;
        open.maps
            .nic_counters
            .set_max_entries(capacity)
            .bpf_context(|| "sizing the NIC counters".into())?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.nic_wan_ifindex = wan_idx;
            ro.nic_host_ifindex = host_idx;
        }
        Ok(open.load().bpf_context(|| "loading xdp_nic_emul".into())?)
    }

    fn pin_nic_maps(
        &self,
        skel: &rampart_bpf::xdp_nic_emul::XdpNicEmulSkel<'static>,
    ) -> Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        let dir = pin::dir(&["lab", &self.prefix, "nic"])?;
        for (name, fd) in [
            ("rules", skel.maps.nic_rules.as_fd().as_raw_fd()),
            ("state", skel.maps.nic_state.as_fd().as_raw_fd()),
            ("counters", skel.maps.nic_counters.as_fd().as_raw_fd()),
        ] {
            let p = dir.join(name);
            let _ = std::fs::remove_file(&p);
            pin::pin_fd(fd, &p)?;
        }
        Ok(())
    }

    /// Load the EMULATED NIC on both nic veths and pin links and maps.
    fn attach_nic(&self, capacity: u32) -> Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        let skel = self.load_nic(capacity)?;
        let nic = self.nic_ns();
        let dir = pin::dir(&["lab", &self.prefix, "nic"])?;
        let fd = skel.progs.xdp_nic_emul.as_fd().as_raw_fd();
        for (ifname, pin_name) in [(NIC_WAN_IF, "link_wan"), (NIC_HOST_IF, "link_host")] {
            let link = XdpLink::attach(fd, Some(&nic), ifname, XdpMode::Native)?;
            link.pin(&dir.join(pin_name))?;
        }
        self.pin_nic_maps(&skel)
    }

    /// Replace the EMULATED NIC with one whose table holds `capacity`
    /// rules, atomically on both veths (bpf_link_update: no frame is lost
    /// or leaks past an unloaded NIC). Installed rules are discarded.
    ///
    /// # Errors
    /// Lab not up, capacity out of range, load or update failure.
    pub fn set_nic_capacity(&self, capacity: u32) -> Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        self.require_up()?;
        let skel = self.load_nic(capacity)?;
        let dir = self.pin_dir().join("nic");
        let fd = skel.progs.xdp_nic_emul.as_fd().as_raw_fd();
        for pin_name in ["link_wan", "link_host"] {
            XdpLink::open_pinned(&dir.join(pin_name))?.update(fd)?;
        }
        self.pin_nic_maps(&skel)
    }

    fn build_tenant(&self, i: u32) -> Result<()> {
        let (host, t) = (self.host_ns(), self.tenant_ns(i));
        let hif = Self::tenant_host_if(i);
        ip(&["netns", "add", &t])?;
        ip(&["-n", &t, "link", "set", "lo", "up"])?;
        ip(&[
            "-n", &host, "link", "add", &hif, "type", "veth", "peer", "name", "eth0", "netns", &t,
        ])?;
        ip(&["-n", &host, "link", "set", &hif, "up"])?;
        ip(&["-n", &t, "link", "set", "eth0", "up"])?;
        ip(&[
            "-n",
            &host,
            "addr",
            "add",
            &format!("10.20.{i}.1/24"),
            "dev",
            &hif,
        ])?;
        ip(&[
            "-n",
            &host,
            "addr",
            "add",
            &format!("fd20:0:0:{i:x}::1/64"),
            "dev",
            &hif,
            "nodad",
        ])?;
        ip(&[
            "-n",
            &t,
            "addr",
            "add",
            &format!("{}/24", v4_str(&Self::tenant_v4(i))),
            "dev",
            "eth0",
        ])?;
        ip(&[
            "-n",
            &t,
            "addr",
            "add",
            &format!("{}/64", v6_str(&Self::tenant_v6(i))),
            "dev",
            "eth0",
            "nodad",
        ])?;
        ip(&[
            "-n",
            &t,
            "route",
            "add",
            "default",
            "via",
            &format!("10.20.{i}.1"),
        ])?;
        ip(&[
            "-n",
            &t,
            "-6",
            "route",
            "add",
            "default",
            "via",
            &format!("fd20:0:0:{i:x}::1"),
        ])?;
        Ok(())
    }

    /// Remove everything `up` created — the lab's namespaces (which takes
    /// their veths and XDP attachments with them) and its pin directory —
    /// and nothing else. Idempotent.
    ///
    /// # Errors
    /// A namespace or pin that exists but cannot be removed.
    pub fn down(&self) -> Result<()> {
        rampart_dataplane::features::require_root("rampart lab down")?;
        let mut names = vec![self.wan_ns(), self.up_ns(), self.nic_ns(), self.host_ns()];
        names.extend(self.tenants().into_iter().map(|i| self.tenant_ns(i)));
        // Unpin first so no pinned link keeps a program alive.
        let pins = self.pin_dir();
        pin::remove_tree(&pins)?;
        pin::prune_empty_parents(&pins);
        for ns in names {
            if netns::exists(&ns) {
                ip(&["netns", "del", &ns])?;
            }
        }
        Ok(())
    }

    /// Describe the lab.
    ///
    /// # Errors
    /// A failing `ip` command on an existing namespace.
    pub fn status(&self) -> Result<Status> {
        let mut namespaces = vec![
            ns_status("wan", &self.wan_ns())?,
            ns_status("nic", &self.nic_ns())?,
            ns_status("host", &self.host_ns())?,
        ];
        if self.has_upstream_router() {
            namespaces.push(ns_status("upstream (EMULATED router)", &self.up_ns())?);
        }
        for i in self.tenants() {
            namespaces.push(ns_status(&format!("tenant{i}"), &self.tenant_ns(i))?);
        }
        let all = namespaces.iter().all(|n| n.exists);
        let none = namespaces.iter().all(|n| !n.exists);
        let pins = self.pin_dir();
        let state = if all && self.is_up() {
            "up"
        } else if none && !pins.exists() {
            "down"
        } else {
            "partial"
        };
        Ok(Status {
            prefix: self.prefix.clone(),
            state: state.into(),
            namespaces,
            pins: pins.exists().then(|| pins.display().to_string()),
        })
    }
}

fn ns_status(role: &str, ns: &str) -> Result<NsStatus> {
    if !netns::exists(ns) {
        return Ok(NsStatus {
            role: role.into(),
            netns: ns.into(),
            exists: false,
            interfaces: vec![],
            routes: vec![],
        });
    }
    let links: serde_json::Value =
        serde_json::from_str(&ip(&["-n", ns, "-j", "-d", "addr", "show"])?).unwrap_or_default();
    let mut interfaces = Vec::new();
    for l in links.as_array().into_iter().flatten() {
        let name = l["ifname"].as_str().unwrap_or_default().to_string();
        if name == "lo" {
            continue;
        }
        let addrs = l["addr_info"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["scope"].as_str() != Some("link"))
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or("?"), a["prefixlen"]))
            .collect();
        let xdp = l.get("xdp").and_then(|x| {
            let id = x["prog"]["id"]
                .as_u64()
                .or_else(|| x["attached"][0]["prog"]["id"].as_u64())?;
            let name = rampart_dataplane::xdp::prog_name(id as u32).unwrap_or_default();
            Some(format!("{name}#{id}"))
        });
        interfaces.push(IfaceStatus {
            name,
            mac: l["address"].as_str().unwrap_or_default().to_string(),
            state: l["operstate"].as_str().unwrap_or_default().to_string(),
            addrs,
            xdp,
        });
    }
    let mut routes = Vec::new();
    for fam in ["-4", "-6"] {
        let out = ip(&["-n", ns, fam, "route", "show"])?;
        routes.extend(
            out.lines()
                .filter(|l| !l.starts_with("fe80"))
                .map(str::to_string),
        );
    }
    Ok(NsStatus {
        role: role.into(),
        netns: ns.into(),
        exists: true,
        interfaces,
        routes,
    })
}
