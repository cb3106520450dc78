//! The host agent: owns one instance of the infrastructure
//! program — its shared maps, the attached dispatcher, the accounting
//! tracepoints, the tenants and their programs — and swaps generations
//! atomically.
//!
//! A *generation* is a dispatcher program plus its program array, filled
//! with the tenants' current programs. Every change of a program builds a
//! new generation and replaces the running one with `bpf_link_update` on
//! every interface: a packet runs either the old or the new generation
//! entirely, never a mix, and none is lost. All generations share the
//! instance's maps (selectors, buckets, statistics, accounting state), and
//! a tenant's new program reuses its maps when their definition is
//! unchanged, so map state survives swaps.
//!
//! Pins (removed when the agent stops cleanly):
//! `/sys/fs/bpf/rampart/tenant/<instance>/maps/<shared map>`,
//! `…/tenants/<tenant>/{prog,maps/<map>}`, `…/progs` (the running
//! generation's program array) and `…/links/<iface>` (the interfaces'
//! links when the dispatcher runs alone, not as a chain stage). They keep
//! the dispatcher attached and every tenant's program and policy running
//! while no agent is alive (a crash, `kill -9`); the next agent of the
//! instance adopts them: same maps, same programs, the new generation
//! swapped in atomically (no moment without the dispatcher). A lock file
//! (`/run/rampart/tenant/<instance>.lock`) tells a crashed instance from a
//! running one, and `<instance>.programs.json` beside it keeps what the
//! API reports about each program.

mod reload;
pub use reload::{apply as apply_reload, check as check_reload, reload_file};

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, MapCore};
use rampart_bpf::xdp_tenant_acct::{XdpTenantAcctSkel, XdpTenantAcctSkelBuilder};
use rampart_bpf::xdp_tenant_dispatch::{XdpTenantDispatchSkel, XdpTenantDispatchSkelBuilder};
use rampart_dataplane::chain::{Attached, CHAIN_SLOT_TENANT};
use rampart_dataplane::maps::map_info;
use rampart_dataplane::xdp::XdpLink;
use rampart_dataplane::{netns, pin};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::compiler::Built;
use crate::config::{Config, DefaultAction, TenantConfig};
use crate::confine::MapDecl;
use crate::error::{Error, Result};
use crate::selector::{Selector, MAX_SELECTORS};
use crate::tokens::{TenantTokens, TokenGenerator};
use bytemuck::{bytes_of, Pod};
use rampart_bpf::abi::tenant::{
    self as abi, DevKey, Global, Stats, Truth, TDROP_MAX, TENANT_DROP_REASON_LABELS,
    TENANT_F_ACTIVE, TENANT_MAX, TENANT_PORTS_MAX, TENANT_VERDICTS, VERDICT_LABELS,
};

/// Prefix of the maps every object of an instance shares.
const SHARED_PREFIX: &str = "rampart_t_";
/// The per-generation program array (not shared).
const PROGS_MAP: &str = "rampart_t_progs";
/// The wrapper's entry program in a linked tenant object.
const WRAPPER_PROG: &str = "rampart_tenant_entry";
/// Pin of the running generation's program array (its entries live as
/// long as the pin: the tenants' programs outlive a crashed agent).
const PROGS_PIN: &str = "progs";
/// The next generation's array, pinned before it runs.
const PROGS_NEXT_PIN: &str = "progs-next";
/// Directory of the interfaces' pinned links (dispatcher alone on them).
const LINKS_PIN: &str = "links";
/// Pin of a tenant's running program, under `tenants/<name>/`.
const PROG_PIN: &str = "prog";
/// Where an instance's lock file and program records live.
const RUN_DIR: &str = "/run/rampart/tenant";

/// One tenant as the agent holds it.
#[derive(Debug)]
struct Tenant {
    cfg: TenantConfig,
    /// What the operator gave the tenant (its configured selectors): what
    /// it may select over the API (see [`HostAgent::request_selectors`]).
    grants: Vec<Selector>,
    program: Option<Program>,
    versions: u64,
}

/// A loaded tenant program.
struct Program {
    /// Owns the program and the tenant's maps while they run: the object
    /// this agent loaded, or the pinned program it adopted (which holds
    /// its maps itself).
    _owner: ProgramOwner,
    fd: RawFd,
    info: ProgramInfo,
}

enum ProgramOwner {
    Loaded(#[allow(dead_code)] libbpf_rs::Object),
    Adopted(#[allow(dead_code)] OwnedFd),
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program").field("info", &self.info).finish()
    }
}

/// What the API reports about a tenant's program.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProgramInfo {
    /// Increases with every accepted submission.
    pub version: u64,
    /// `running`.
    pub status: String,
    /// SHA-256 of the tenant object (empty when an adopted program's
    /// record was lost).
    pub sha256: String,
    /// `c` or `object` (`unknown` when an adopted program's record was lost).
    pub from: String,
    /// Instructions of the tenant's code.
    pub insns: usize,
    /// Instructions the verifier processed for the linked program.
    pub verified_insns: Option<u64>,
    /// Helpers used.
    pub helpers: Vec<String>,
    /// Maps, and whether their state was kept from the previous program.
    pub maps: Vec<MapState>,
    /// Kernel program id.
    pub prog_id: u32,
    /// Seconds since the epoch.
    pub loaded_at: u64,
    /// Generation of the infrastructure program that first ran it.
    pub generation: u64,
    /// clang warnings.
    pub warnings: String,
}

/// A tenant map after a load.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MapState {
    /// Declaration.
    #[serde(flatten)]
    pub decl: MapDecl,
    /// true: the previous program's map (and its state) was reused.
    pub kept: bool,
}

/// Per-tenant statistics (all CPUs).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct TenantStats {
    /// Tenant name (`(none)` for id 0).
    pub name: String,
    /// Tenant id.
    pub id: u32,
    /// Packets seen by the dispatcher.
    pub packets: u64,
    /// Bytes seen.
    pub bytes: u64,
    /// CPU time charged, ns.
    pub cpu_ns: u64,
    /// Of which charged on the kernel path after XDP (stack, transmit, domain), ns.
    pub stack_ns: u64,
    /// Final verdicts.
    pub verdicts: BTreeMap<&'static str, u64>,
    /// Drops by reason.
    pub drops: BTreeMap<&'static str, u64>,
    /// Token bucket.
    pub tokens: TenantTokens,
}

/// Independent figures for validating the accounting.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct TruthTotals {
    /// NET_RX softirq time on all CPUs (softirq_entry → exit), ns.
    pub net_rx_ns: u64,
    /// NET_RX softirq runs.
    pub net_rx_runs: u64,
    /// NAPI polls that closed an accounting slice.
    pub polls: u64,
    /// Time the watched NAPI threads were on a CPU (sched_switch in → out), ns.
    pub thread_ns: u64,
    /// NET_RX softirq time outside those threads in runs that handled a tenant packet, ns.
    pub net_rx_ours_ns: u64,
    /// CPU time charged while no watched thread was running, ns.
    pub charged_out_ns: u64,
}

/// The host agent.
pub struct HostAgent {
    cfg: Config,
    dir: PathBuf,
    shared: BTreeMap<String, OwnedFd>,
    generation: Option<XdpTenantDispatchSkel<'static>>,
    gen_no: u64,
    links: Vec<(String, Attached)>,
    acct: Option<XdpTenantAcctSkel<'static>>,
    ifindexes: Vec<(String, u32)>,
    tenants: BTreeMap<u32, Tenant>,
    tokens: TokenGenerator,
    /// Held while this agent runs the instance.
    lock: Option<nix::fcntl::Flock<std::fs::File>>,
    /// Started from a crashed instance's pins.
    adopted: bool,
    /// Faults said once in the log until they clear: pins removed behind
    /// the agent's back, the records file not writable.
    pins_failed: bool,
    records_failed: bool,
    /// Interfaces found missing (said once until they are back).
    ifaces_gone: std::collections::BTreeSet<String>,
}

impl std::fmt::Debug for HostAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostAgent")
            .field("instance", &self.cfg.infra.name)
            .field("generation", &self.gen_no)
            .finish()
    }
}

fn ctx_err(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
    let w = what.into();
    move |e| Error::bpf(w, e)
}

fn reuse_shared(obj: &mut libbpf_rs::OpenObject, shared: &BTreeMap<String, OwnedFd>) -> Result<()> {
    for mut m in obj.maps_mut() {
        let name = m.name().to_string_lossy().into_owned();
        if name == PROGS_MAP || !name.starts_with(SHARED_PREFIX) {
            continue;
        }
        let fd = shared
            .get(&name)
            .ok_or_else(|| Error::Invalid(format!("object declares unknown shared map {name}")))?;
        m.reuse_fd(fd.as_fd())
            .map_err(ctx_err(format!("reusing map {name}")))?;
    }
    Ok(())
}

/// Inode of a network namespace (`None`: the caller's).
fn netns_ino(ns: Option<&str>) -> Result<u32> {
    let p = match ns {
        Some(n) => netns::path(n),
        None => PathBuf::from("/proc/thread-self/ns/net"),
    };
    let md = std::fs::metadata(&p).map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
    Ok(md.ino() as u32)
}

/// Entry `key` of a per-CPU map of `T`, one value per possible CPU.
fn percpu_values<T: Pod>(fd: RawFd, key: u32) -> Result<Vec<T>> {
    let ncpu = rampart_dataplane::maps::possible_cpus();
    let size = std::mem::size_of::<T>();
    let stride = size.next_multiple_of(8);
    let mut buf = vec![0u8; stride * ncpu];
    if !rampart_dataplane::maps::lookup_raw(fd, &key.to_ne_bytes(), &mut buf)? {
        return Err(Error::io(
            format!("reading entry {key} of a per-CPU map"),
            std::io::Error::from_raw_os_error(libc::ENOENT),
        ));
    }
    Ok(buf
        .chunks(stride)
        .map(|c| bytemuck::pod_read_unaligned(&c[..size]))
        .collect())
}

fn lookup_u64(fd: RawFd, key: u32) -> Result<u64> {
    Ok(rampart_dataplane::maps::lookup_u64(fd, key)?)
}

fn delete_raw(fd: RawFd, key: &[u8]) -> Result<()> {
    rampart_dataplane::maps::delete_raw(fd, key)?;
    Ok(())
}

fn prog_id(fd: RawFd) -> u32 {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is valid for `len` bytes.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    if rc == 0 {
        info.id
    } else {
        0
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The verifier's verdict line(s): the last non-empty lines of the log.
fn verifier_summary(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail: Vec<&str> = lines
        .iter()
        .rev()
        .filter(|l| !l.starts_with("processed ") && !l.starts_with("verification time"))
        .take(2)
        .copied()
        .collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
}

impl HostAgent {
    /// Create the instance: shared maps, first generation, accounting,
    /// tenants from the config, token generator; attach when configured.
    /// An instance whose agent died (its pins are there, its lock is free)
    /// is adopted: its maps, the tenants' running programs and the
    /// interfaces' links are taken over, and the new generation replaces
    /// the old one atomically.
    ///
    /// # Errors
    /// Missing privileges, an instance of the same name running, missing
    /// interfaces or namespaces, load or attach failures (a new partial
    /// instance is removed; an adopted one keeps running as it was).
    pub fn start(cfg: Config) -> Result<Self> {
        rampart_dataplane::features::require_root("rampart tenant")?;
        pin::ensure_bpffs()?;
        let dir = pin::path(&["tenant", &cfg.infra.name]);
        let lock = lock_instance(&cfg.infra.name)?;
        let adopt = dir.join("maps").is_dir();
        if dir.exists() && !adopt {
            // A crash before the maps were pinned: nothing ran yet.
            pin::remove_tree(&dir)?;
        }
        let ns = cfg.infra.netns.clone();
        let mut ifindexes = Vec::new();
        for i in &cfg.infra.interfaces {
            ifindexes.push((i.clone(), netns::ifindex(ns.as_deref(), i)?));
        }
        // First generation: its load creates the shared maps (or reuses
        // the pinned ones of the instance it adopts).
        let mut open = XdpTenantDispatchSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .map_err(ctx_err("opening xdp_tenant_dispatch"))?;
        if adopt {
            let mut pinned = BTreeMap::new();
            for m in open.open_object_mut().maps() {
                let name = m.name().to_string_lossy().into_owned();
                if name.starts_with(SHARED_PREFIX) && name != PROGS_MAP {
                    let fd = pin::open_pinned(&dir.join("maps").join(&name)).map_err(|e| {
                        Error::Invalid(format!(
                            "adopting tenant instance {:?}: {e} (pins of another version? \
                             `rampart tenant cleanup --name {}` removes them)",
                            cfg.infra.name, cfg.infra.name
                        ))
                    })?;
                    pinned.insert(name, fd);
                }
            }
            reuse_shared(open.open_object_mut(), &pinned)?;
        }
        let skel = open
            .load()
            .map_err(ctx_err("loading xdp_tenant_dispatch"))?;
        let mut shared = BTreeMap::new();
        for m in skel.object().maps() {
            let name = m.name().to_string_lossy().into_owned();
            if name.starts_with(SHARED_PREFIX) && name != PROGS_MAP {
                let fd = m
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| Error::io("duplicating a map fd", e))?;
                shared.insert(name, fd);
            }
        }
        let fairness = cfg.fairness.tokens();
        let tokens = TokenGenerator::start(
            fairness,
            shared["rampart_t_grant"]
                .try_clone()
                .map_err(|e| Error::io("duplicating a map fd", e))?,
            shared["rampart_t_used"]
                .try_clone()
                .map_err(|e| Error::io("duplicating a map fd", e))?,
        )?;
        let mut agent = Self {
            cfg,
            dir,
            shared,
            generation: Some(skel),
            gen_no: 1,
            links: Vec::new(),
            acct: None,
            ifindexes,
            tenants: BTreeMap::new(),
            tokens,
            lock: Some(lock),
            adopted: adopt,
            pins_failed: false,
            records_failed: false,
            ifaces_gone: std::collections::BTreeSet::new(),
        };
        if let Err(e) = agent.setup() {
            if adopt {
                // The adopted pins keep the instance running as it was.
                agent.release();
            } else {
                agent.shutdown();
            }
            return Err(e);
        }
        if adopt {
            tracing::info!(
                "tenant instance {}: adopted its pins ({} tenant program(s) kept running)",
                agent.cfg.infra.name,
                agent.current_programs().len()
            );
        }
        Ok(agent)
    }

    /// Started from the pins of an instance whose agent had died.
    pub fn adopted(&self) -> bool {
        self.adopted
    }

    fn setup(&mut self) -> Result<()> {
        let maps = pin::dir(&["tenant", &self.cfg.infra.name, "maps"])?;
        if !self.adopted {
            for (name, fd) in &self.shared {
                pin::pin_fd(fd.as_raw_fd(), &maps.join(name))?;
            }
        }
        self.set_global()?;
        let tenants = self.cfg.tenants.clone();
        for t in tenants {
            self.add_tenant(t)?;
        }
        if self.adopted {
            self.adopt_programs()?;
        }
        if let Some(g) = &self.generation {
            fill_progs(g, &self.current_programs())?;
        }
        if self.cfg.infra.accounting {
            let mut open = XdpTenantAcctSkelBuilder::default()
                .open(rampart_dataplane::skel::object_storage())
                .map_err(ctx_err("opening xdp_tenant_acct"))?;
            reuse_shared(open.open_object_mut(), &self.shared)?;
            let mut skel = open
                .load()
                .map_err(ctx_err("loading xdp_tenant_acct (tp_btf tracepoints)"))?;
            skel.attach()
                .map_err(ctx_err("attaching the accounting tracepoints"))?;
            self.acct = Some(skel);
        }
        if let Some(g) = &self.generation {
            stage_generation(&self.dir, g)?;
        }
        if self.cfg.infra.attach {
            let fd = self.dispatcher_fd();
            for (name, ifindex) in self.ifindexes.clone() {
                let chain = self.cfg.infra.chains.iter().find(|c| c.iface() == name);
                let link = match chain {
                    // The chain's slot is replaced atomically.
                    Some(_) => Attached::new(
                        fd,
                        chain,
                        CHAIN_SLOT_TENANT,
                        self.cfg.infra.netns.as_deref(),
                        &name,
                        self.cfg.infra.mode,
                    )?,
                    None => Attached::Link(self.link_on(&name, ifindex, fd)?),
                };
                self.links.push((name, link));
            }
        }
        // Only now: the pin held the adopted generation's program array,
        // whose entries go with its last pin — and its dispatcher ran
        // until the attach above replaced it.
        self.commit_generation()
    }

    /// The dispatcher `fd` alone on `iface`: the pinned link of a crashed
    /// agent updated in place (no moment without it), or a new pinned one.
    fn link_on(&self, iface: &str, ifindex: u32, fd: RawFd) -> Result<XdpLink> {
        let dir = self.dir.join(LINKS_PIN);
        let path = dir.join(iface.replace('.', "%2e"));
        if let Ok(l) = XdpLink::open_pinned(&path) {
            // A link whose interface was deleted is defunct (ifindex 0).
            if l.info().is_ok_and(|(_, i)| i == ifindex) && l.update(fd).is_ok() {
                return Ok(l);
            }
            let _ = std::fs::remove_file(&path);
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let l = XdpLink::attach(
            fd,
            self.cfg.infra.netns.as_deref(),
            iface,
            self.cfg.infra.mode,
        )?;
        if let Err(e) = l.pin(&path) {
            let _ = l.detach();
            return Err(e.into());
        }
        Ok(l)
    }

    /// Take over the programs a crashed agent left pinned, with the
    /// records it kept of them.
    fn adopt_programs(&mut self) -> Result<()> {
        let mut records = read_records(&self.cfg.infra.name);
        for (tid, t) in &mut self.tenants {
            let p = self.dir.join("tenants").join(&t.cfg.name).join(PROG_PIN);
            let Ok(fd) = pin::open_pinned(&p) else {
                continue;
            };
            let id = prog_id(fd.as_raw_fd());
            let info = match records.remove(&t.cfg.name) {
                Some(i) if i.prog_id == id => i,
                _ => ProgramInfo {
                    version: 1,
                    status: "running".into(),
                    sha256: String::new(),
                    from: "unknown".into(),
                    insns: 0,
                    verified_insns: None,
                    helpers: Vec::new(),
                    maps: Vec::new(),
                    prog_id: id,
                    loaded_at: unix_now(),
                    generation: 1,
                    warnings: String::new(),
                },
            };
            tracing::debug!("tenant {} ({tid}): program {id} adopted", t.cfg.name);
            t.versions = info.version;
            t.program = Some(Program {
                fd: fd.as_raw_fd(),
                _owner: ProgramOwner::Adopted(fd),
                info,
            });
        }
        Ok(())
    }

    /// Make the staged generation's pin (see [`stage_generation`]) the
    /// instance's, once its dispatcher runs: the previous generation's
    /// program array loses its last pin, and with it its entries.
    fn commit_generation(&self) -> Result<()> {
        let (next, cur) = (self.dir.join(PROGS_NEXT_PIN), self.dir.join(PROGS_PIN));
        std::fs::rename(&next, &cur)
            .map_err(|e| Error::io(format!("renaming a pin to {}", cur.display()), e))
    }

    /// Write what the API reports about each program beside the lock
    /// (a failure is logged: the programs keep running either way).
    fn save_records(&mut self) {
        let recs: BTreeMap<&str, &ProgramInfo> = self
            .tenants
            .values()
            .filter_map(|t| Some((t.cfg.name.as_str(), &t.program.as_ref()?.info)))
            .collect();
        let path = records_path(&self.cfg.infra.name);
        let tmp = path.with_extension("json.tmp");
        let res = serde_json::to_vec(&recs)
            .map_err(std::io::Error::other)
            .and_then(|b| std::fs::write(&tmp, b))
            .and_then(|()| std::fs::rename(&tmp, &path));
        match res {
            Err(e) if !self.records_failed => {
                tracing::warn!(
                    "cannot save the program records to {}: {e}; the programs keep running, but a restart after a crash reports them as \"unknown\" until this file can be written",
                    path.display()
                );
                self.records_failed = true;
            }
            Err(_) => {}
            Ok(()) if self.records_failed => {
                tracing::info!("program records saved to {} again", path.display());
                self.records_failed = false;
            }
            Ok(()) => {}
        }
    }

    /// Pin again whatever this agent holds and bpffs lost (someone removed
    /// the instance's pins while it runs): nothing stops running then —
    /// the agent holds every link, map and program — but a crash would
    /// lose them, and a restart could not adopt them. The number of pins
    /// made again.
    ///
    /// # Errors
    /// Pinning fails (bpffs unmounted or not writable).
    pub fn repin(&mut self) -> Result<usize> {
        let mut n = 0;
        let mut again = |fd: RawFd, path: &Path| -> Result<()> {
            if path.exists() {
                return Ok(());
            }
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d)
                    .map_err(|e| Error::io(format!("creating {}", d.display()), e))?;
            }
            pin::pin_fd(fd, path)?;
            n += 1;
            Ok(())
        };
        let maps = self.dir.join("maps");
        for (name, fd) in &self.shared {
            again(fd.as_raw_fd(), &maps.join(name))?;
        }
        if let Some(g) = &self.generation {
            again(
                g.maps.rampart_t_progs.as_fd().as_raw_fd(),
                &self.dir.join(PROGS_PIN),
            )?;
        }
        for (iface, l) in &self.links {
            if let Attached::Link(l) = l {
                let p = self.dir.join(LINKS_PIN).join(iface.replace('.', "%2e"));
                again(l.as_raw_fd(), &p)?;
            }
        }
        for t in self.tenants.values() {
            let Some(prog) = &t.program else { continue };
            let maps_dir = self.dir.join("tenants").join(&t.cfg.name).join("maps");
            again(prog.fd, &maps_dir.with_file_name(PROG_PIN))?;
            // The tenant's own maps, found through its program (adopted
            // programs hold them; the agent has no other handle on them).
            let id = prog_id(prog.fd);
            for map_id in rampart_dataplane::xdp::prog_map_ids(id).unwrap_or_default() {
                let Ok(h) = libbpf_rs::MapHandle::from_map_id(map_id) else {
                    continue;
                };
                let name = h.name().to_string_lossy().into_owned();
                if name.starts_with(SHARED_PREFIX) || name.contains('.') {
                    continue;
                }
                again(h.as_fd().as_raw_fd(), &maps_dir.join(&name))?;
            }
        }
        Ok(n)
    }

    /// Follow the interfaces: one deleted and created again (same name,
    /// new index) starts without XDP and the selectors, keyed by interface
    /// index, no longer match its packets. The dispatcher is attached to
    /// it again (alone; in a chain the chain's watch does it) and every
    /// tenant's selectors are keyed again. One line per change.
    fn check_interfaces(&mut self) {
        let ns = self.cfg.infra.netns.clone();
        for (name, old) in self.ifindexes.clone() {
            let Ok(now) = netns::ifindex(ns.as_deref(), &name) else {
                if self.ifaces_gone.insert(name.clone()) {
                    tracing::warn!(
                        "tenant instance {}: interface {name} is gone; its tenants' programs run again when an interface of that name comes back",
                        self.cfg.infra.name
                    );
                }
                continue;
            };
            if now == old {
                if self.ifaces_gone.remove(&name) {
                    tracing::info!(
                        "tenant instance {}: interface {name} is back",
                        self.cfg.infra.name
                    );
                }
                continue;
            }
            match self.follow_interface(&name, now) {
                Ok(()) => {
                    self.ifaces_gone.remove(&name);
                    tracing::warn!(
                        "tenant instance {}: interface {name} was deleted and created again; the dispatcher runs on it again and the tenants' selectors follow its new index",
                        self.cfg.infra.name
                    );
                }
                Err(e) => {
                    if self.ifaces_gone.insert(name.clone()) {
                        tracing::error!(
                            "tenant instance {}: interface {name} was created again, but following it failed: {e}; its tenants' packets are not demultiplexed until it works",
                            self.cfg.infra.name
                        );
                    }
                }
            }
        }
    }

    fn follow_interface(&mut self, name: &str, now: u32) -> Result<()> {
        // Keys of the old index out, the index updated, keys of the new in.
        let tids: Vec<(u32, Vec<Selector>)> = self
            .tenants
            .iter()
            .map(|(id, t)| (*id, t.cfg.selectors.clone()))
            .collect();
        for (tid, _) in &tids {
            self.set_selectors(*tid, Vec::new())?;
        }
        if let Some(e) = self.ifindexes.iter_mut().find(|(n, _)| n == name) {
            e.1 = now;
        }
        for (tid, sels) in tids {
            self.set_selectors(tid, sels)?;
        }
        let alone = self
            .links
            .iter()
            .any(|(n, l)| n == name && matches!(l, Attached::Link(_)));
        if alone && self.cfg.infra.attach {
            let link = self.link_on(name, now, self.dispatcher_fd())?;
            if let Some(e) = self.links.iter_mut().find(|(n, _)| n == name) {
                e.1 = Attached::Link(link);
            }
        }
        Ok(())
    }

    /// The periodic check: pins removed behind the agent's back are made
    /// again (one line), a records file that could not be written is
    /// written again once it can, interfaces created again are followed.
    pub fn check(&mut self) {
        self.check_interfaces();
        match self.repin() {
            Ok(0) => self.pins_failed = false,
            Ok(n) => {
                tracing::warn!(
                    "tenant instance {}: {n} pin(s) under {} were removed; everything kept running and is pinned again",
                    self.cfg.infra.name,
                    self.dir.display()
                );
                self.pins_failed = false;
            }
            Err(e) if !self.pins_failed => {
                tracing::error!(
                    "tenant instance {}: pins under {} were removed and pinning them again failed: {e}; the programs keep running in this process, but a crash now would lose them",
                    self.cfg.infra.name,
                    self.dir.display()
                );
                self.pins_failed = true;
            }
            Err(_) => {}
        }
        if self.records_failed {
            self.save_records();
        }
    }

    fn shared_fd(&self, name: &str) -> RawFd {
        self.shared.get(name).map_or(-1, AsRawFd::as_raw_fd)
    }

    /// Write the global switches from the config.
    fn set_global(&self) -> Result<()> {
        let g = Global {
            enforce: u32::from(self.cfg.fairness.enabled),
            default_action: match self.cfg.infra.default_action {
                DefaultAction::Pass => 2,
                DefaultAction::Drop => 1,
            },
            vxlan_port: u32::from(self.cfg.infra.vxlan_port),
            recheck: u32::from(self.cfg.infra.recheck),
            account: u32::from(self.cfg.infra.accounting),
            flush_ns: self.cfg.infra.used_flush_us * 1000,
        };
        rampart_dataplane::maps::update_raw(
            self.shared_fd("rampart_t_glob"),
            &0u32.to_ne_bytes(),
            bytes_of(&g),
            0,
        )?;
        Ok(())
    }

    /// Turn the fairness check on or off at run time (accounting continues).
    /// Switching it on starts every tenant with a full bucket: the CPU they
    /// used beyond their share while nothing limited them is not a debt.
    ///
    /// # Errors
    /// [`Error::Invalid`] to turn fairness on without accounting; map update failure.
    pub fn set_fairness(&mut self, on: bool) -> Result<()> {
        if on && !self.cfg.infra.accounting {
            return Err(Error::Invalid(
                "fairness needs accounting (infra.accounting = true)".into(),
            ));
        }
        if on && !self.cfg.fairness.enabled {
            self.tokens.refill_all()?;
        }
        self.cfg.fairness.enabled = on;
        self.set_global()
    }

    /// Turn the per-packet CPU accounting in the dispatcher on or off at
    /// run time (for measuring its cost). The kernel-path tracepoints are
    /// attached at start only when the configuration had accounting on.
    ///
    /// # Errors
    /// [`Error::Invalid`] to turn it off while fairness is on; map update failure.
    pub fn set_accounting(&mut self, on: bool) -> Result<()> {
        if !on && self.cfg.fairness.enabled {
            return Err(Error::Invalid("turn fairness off before accounting".into()));
        }
        self.cfg.infra.accounting = on;
        self.set_global()
    }

    /// The instance's configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// fd of the running dispatcher program (for BPF_PROG_RUN).
    pub fn dispatcher_fd(&self) -> RawFd {
        self.generation
            .as_ref()
            .map_or(-1, |g| g.progs.xdp_tenant_dispatch.as_fd().as_raw_fd())
    }

    /// Number of the running generation.
    pub fn generation(&self) -> u64 {
        self.gen_no
    }

    /// Interfaces and their indexes.
    pub fn interfaces(&self) -> &[(String, u32)] {
        &self.ifindexes
    }

    /// Tenant id by name.
    pub fn tenant_id(&self, name: &str) -> Option<u32> {
        self.tenants
            .iter()
            .find(|(_, t)| t.cfg.name == name)
            .map(|(id, _)| *id)
    }

    /// A tenant's configuration.
    pub fn tenant(&self, tid: u32) -> Option<&TenantConfig> {
        self.tenants.get(&tid).map(|t| &t.cfg)
    }

    /// All tenant ids.
    pub fn tenant_ids(&self) -> Vec<u32> {
        self.tenants.keys().copied().collect()
    }

    fn add_tenant(&mut self, t: TenantConfig) -> Result<()> {
        let tid =
            t.id.ok_or_else(|| Error::Invalid(format!("tenant {:?} has no id", t.name)))?;
        if tid == 0 || tid >= TENANT_MAX {
            return Err(Error::Invalid(format!("tenant id {tid} out of range")));
        }
        let cfg = abi::Cfg {
            flags: TENANT_F_ACTIVE,
            _pad: 0,
        };
        rampart_dataplane::maps::update_raw(
            self.shared_fd("rampart_t_cfg"),
            &tid.to_ne_bytes(),
            bytes_of(&cfg),
            0,
        )?;
        // Redirect ports: resolved inside the namespace (DEVMAP semantics).
        let ports_fd = self.shared_fd("rampart_t_ports");
        let ns = self.cfg.infra.netns.clone();
        let ino = netns_ino(ns.as_deref())?;
        let mut devs = Vec::new();
        for (n, port) in t.ports.iter().enumerate() {
            let idx = netns::ifindex(ns.as_deref(), port)?;
            let slot = tid * TENANT_PORTS_MAX + n as u32;
            netns::run_in(ns.as_deref(), || {
                rampart_dataplane::maps::update_raw(
                    ports_fd,
                    &slot.to_ne_bytes(),
                    &idx.to_ne_bytes(),
                    0,
                )
            })?;
            devs.push(DevKey {
                netns_ino: ino,
                ifindex: idx,
            });
        }
        if let Some(dns) = &t.domain_netns {
            let dino = netns_ino(Some(dns))?;
            let idxs = netns::run_in(Some(dns), || {
                Ok(nix::net::if_::if_nameindex()
                    .map(|l| {
                        l.iter()
                            .filter(|i| i.name().to_bytes() != b"lo")
                            .map(|i| i.index())
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default())
            })?;
            devs.extend(idxs.into_iter().map(|i| DevKey {
                netns_ino: dino,
                ifindex: i,
            }));
        }
        for d in &devs {
            rampart_dataplane::maps::update_raw(
                self.shared_fd("rampart_t_devs"),
                bytes_of(d),
                &tid.to_ne_bytes(),
                0,
            )?;
        }
        self.tokens.set_tenant(tid, t.weight)?;
        let sels = t.selectors.clone();
        self.tenants.insert(
            tid,
            Tenant {
                grants: sels.clone(),
                cfg: TenantConfig {
                    selectors: Vec::new(),
                    ..t
                },
                program: None,
                versions: 0,
            },
        );
        self.set_selectors(tid, sels)?;
        Ok(())
    }

    fn selector_keys(&self, sel: &Selector) -> Result<Vec<abi::SelKey>> {
        Ok(match sel {
            Selector::Iface(name) => {
                let idx = self.ifindexes.iter().find(|(n, _)| n == name).map(|(_, i)| *i).ok_or_else(|| {
                    Error::Invalid(format!(
                        "iface:{name} is not an interface the infrastructure program runs on ({})",
                        self.ifindexes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                })?;
                vec![sel.key(idx)]
            }
            _ => self.ifindexes.iter().map(|(_, i)| sel.key(*i)).collect(),
        })
    }

    /// A tenant's own request to replace its selectors (`PUT /v1/selectors`).
    ///
    /// Selectors decide whose program sees which packets, so a tenant may
    /// only narrow or re-split what the operator gave it: every selector
    /// must lie within one of its configured ones (a prefix inside a
    /// configured prefix of the same family; a VLAN, VNI or interface equal
    /// to a configured one), none may lie within (or equal) a selector of
    /// another tenant — the demultiplexer picks the longest prefix, so a more
    /// specific prefix inside another tenant's would take its packets — and
    /// at most [`MAX_SELECTORS`] of them. Nothing changes on refusal.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a selector outside the tenant's grant or too
    /// many; [`Error::Conflict`] for one inside another tenant's.
    pub fn request_selectors(&mut self, tid: u32, sels: Vec<Selector>) -> Result<()> {
        let t = self
            .tenants
            .get(&tid)
            .ok_or_else(|| Error::NotFound(format!("no tenant {tid}")))?;
        if sels.len() > MAX_SELECTORS {
            return Err(Error::Invalid(format!(
                "{} selectors: at most {MAX_SELECTORS}",
                sels.len()
            )));
        }
        if let Some(s) = sels.iter().find(|s| !t.grants.iter().any(|g| g.covers(s))) {
            return Err(Error::Invalid(format!(
                "selector {s} is outside what the operator gave you ({}): choose within it",
                t.grants
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        for (oid, o) in &self.tenants {
            if *oid == tid {
                continue;
            }
            if let Some(s) = sels
                .iter()
                .find(|s| o.cfg.selectors.iter().any(|x| x.covers(s)))
            {
                return Err(Error::Conflict(format!(
                    "selector {s} lies within another tenant's: choose another"
                )));
            }
        }
        self.set_selectors(tid, sels)
    }

    /// Replace a tenant's selectors (new ones are installed before old
    /// ones are removed, so a selector kept in both is never missing; if
    /// an installation fails, what was installed is taken back).
    ///
    /// # Errors
    /// [`Error::Conflict`] if another tenant owns one of them; bad interface names.
    pub fn set_selectors(&mut self, tid: u32, sels: Vec<Selector>) -> Result<()> {
        for (oid, o) in &self.tenants {
            if *oid == tid {
                continue;
            }
            if let Some(s) = sels
                .iter()
                .find(|s| o.cfg.selectors.iter().any(|x| x.same_key(s)))
            {
                return Err(Error::Conflict(format!(
                    "selector {s} belongs to another tenant"
                )));
            }
        }
        let mut new_keys = Vec::new();
        for s in &sels {
            new_keys.extend(self.selector_keys(s)?);
        }
        let t = self
            .tenants
            .get(&tid)
            .ok_or_else(|| Error::NotFound(format!("no tenant {tid}")))?;
        let mut old_keys = Vec::new();
        for s in &t.cfg.selectors {
            old_keys.extend(self.selector_keys(s)?);
        }
        let fd = self.shared_fd("rampart_t_sel");
        for (i, k) in new_keys.iter().enumerate() {
            if let Err(e) =
                rampart_dataplane::maps::update_raw(fd, bytes_of(k), &tid.to_ne_bytes(), 0)
            {
                for done in &new_keys[..i] {
                    if !old_keys.iter().any(|o| bytes_of(o) == bytes_of(done)) {
                        let _ = delete_raw(fd, bytes_of(done));
                    }
                }
                return Err(e.into());
            }
        }
        for k in old_keys
            .iter()
            .filter(|k| !new_keys.iter().any(|n| bytes_of(n) == bytes_of(*k)))
        {
            delete_raw(fd, bytes_of(k))?;
        }
        if let Some(t) = self.tenants.get_mut(&tid) {
            t.cfg.selectors = sels;
        }
        Ok(())
    }

    /// Build a new generation (dispatcher + program array with every
    /// tenant's current program) and swap it in on every interface.
    fn swap(&mut self, programs: &BTreeMap<u32, RawFd>) -> Result<()> {
        let mut open = XdpTenantDispatchSkelBuilder::default()
            .open(rampart_dataplane::skel::object_storage())
            .map_err(ctx_err("opening xdp_tenant_dispatch"))?;
        reuse_shared(open.open_object_mut(), &self.shared)?;
        let skel = open
            .load()
            .map_err(ctx_err("loading xdp_tenant_dispatch"))?;
        fill_progs(&skel, programs)?;
        // Pinned before it runs: a crash at any point leaves the running
        // dispatcher's program array pinned (so its entries stay).
        stage_generation(&self.dir, &skel)?;
        let fd = skel.progs.xdp_tenant_dispatch.as_fd().as_raw_fd();
        for (_, link) in &mut self.links {
            link.update(fd)?;
        }
        self.generation = Some(skel);
        self.gen_no += 1;
        self.commit_generation()
    }

    fn current_programs(&self) -> BTreeMap<u32, RawFd> {
        self.tenants
            .iter()
            .filter_map(|(id, t)| t.program.as_ref().map(|p| (*id, p.fd)))
            .collect()
    }

    fn tenant_maps_dir(&self, name: &str) -> PathBuf {
        self.dir.join("tenants").join(name).join("maps")
    }

    /// Load a built program for tenant `tid` (the verifier runs here) and
    /// swap it in. The previous program keeps running until the swap.
    ///
    /// # Errors
    /// [`Error::Verifier`] with the log; load or swap failures. On error
    /// nothing changes.
    pub fn install(&mut self, tid: u32, built: &Built) -> Result<ProgramInfo> {
        let t = self
            .tenants
            .get(&tid)
            .ok_or_else(|| Error::NotFound(format!("no tenant {tid}")))?;
        let name = t.cfg.name.clone();
        let maps_dir = self.tenant_maps_dir(&name);
        std::fs::create_dir_all(&maps_dir)
            .map_err(|e| Error::io("creating the tenant's pin directory", e))?;
        let mut stats_log = vec![0u8; 64 * 1024];
        let (obj, kept) = match self.load_linked(&built.linked, tid, &maps_dir, 4, &mut stats_log) {
            Ok(x) => x,
            Err(_) => {
                // Load again with the full verifier log for the tenant.
                let mut log = vec![0u8; 4 << 20];
                let r = self.load_linked(&built.linked, tid, &maps_dir, 1, &mut log);
                let text =
                    String::from_utf8_lossy(log.split(|&b| b == 0).next().unwrap_or_default())
                        .into_owned();
                return Err(match r {
                    Ok(_) => Error::Invalid(
                        "the program failed to load once and then loaded: retry".into(),
                    ),
                    Err(e) if text.trim().is_empty() => e,
                    Err(_) => {
                        let tail: String = if text.len() > 256 * 1024 {
                            text[text.len() - 256 * 1024..].to_string()
                        } else {
                            text.clone()
                        };
                        Error::Verifier {
                            summary: verifier_summary(&text),
                            log: tail,
                        }
                    }
                });
            }
        };
        let stats_text =
            String::from_utf8_lossy(stats_log.split(|&b| b == 0).next().unwrap_or_default())
                .into_owned();
        let verified = stats_text
            .split("processed ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok());
        let prog = obj
            .progs()
            .find(|p| p.name() == WRAPPER_PROG)
            .ok_or_else(|| Error::Invalid("linked object has no wrapper program".into()))?;
        let fd = prog.as_fd().as_raw_fd();
        // Pin maps that are new (kept ones are pinned already).
        for m in obj.maps() {
            let n = m.name().to_string_lossy().into_owned();
            if n.starts_with(SHARED_PREFIX) || n.contains('.') || kept.contains(&n) {
                continue;
            }
            let p = maps_dir.join(&n);
            let _ = std::fs::remove_file(&p);
            pin::pin_fd(m.as_fd().as_raw_fd(), &p)?;
        }
        let t = self
            .tenants
            .get_mut(&tid)
            .ok_or_else(|| Error::NotFound(format!("no tenant {tid}")))?;
        t.versions += 1;
        let info = ProgramInfo {
            version: t.versions,
            status: "running".into(),
            sha256: Sha256::digest(&built.tenant_object)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            from: built.info.from.into(),
            insns: built.report.insns,
            verified_insns: verified,
            helpers: built.report.helpers.clone(),
            maps: built
                .report
                .maps
                .iter()
                .map(|d| MapState {
                    decl: d.clone(),
                    kept: kept.contains(&d.name),
                })
                .collect(),
            prog_id: prog_id(fd),
            loaded_at: unix_now(),
            generation: self.gen_no + 1,
            warnings: built.info.warnings.clone(),
        };
        let mut programs = self.current_programs();
        programs.insert(tid, fd);
        self.swap(&programs)?;
        // Pinned so that it outlives a crashed agent (the next one adopts it).
        pin_replace(fd, &maps_dir.with_file_name(PROG_PIN))?;
        let t = self
            .tenants
            .get_mut(&tid)
            .ok_or_else(|| Error::NotFound(format!("no tenant {tid}")))?;
        t.program = Some(Program {
            _owner: ProgramOwner::Loaded(obj),
            fd,
            info: info.clone(),
        });
        self.save_records();
        Ok(info)
    }

    /// Open and load a linked tenant object, reusing the shared maps and
    /// the tenant's pinned maps whose definition is unchanged. Returns the
    /// object and the names of the maps kept.
    fn load_linked(
        &self,
        linked: &[u8],
        tid: u32,
        maps_dir: &Path,
        log_level: u32,
        log: &mut [u8],
    ) -> Result<(libbpf_rs::Object, Vec<String>)> {
        let mut b = libbpf_rs::ObjectBuilder::default();
        b.name(format!("tenant{tid}"))
            .map_err(ctx_err("naming the object"))?;
        let mut open = b
            .open_memory(linked)
            .map_err(ctx_err("opening the linked program"))?;
        reuse_shared(&mut open, &self.shared)?;
        let mut kept = Vec::new();
        let mut pinned_fds = Vec::new();
        for mut m in open.maps_mut() {
            let n = m.name().to_string_lossy().into_owned();
            if n.starts_with(SHARED_PREFIX) || n.contains('.') {
                continue;
            }
            let p = maps_dir.join(&n);
            let Ok(fd) = pin::open_pinned(&p) else {
                continue;
            };
            let ty: u32 = m.map_type().into();
            let same = map_info(fd.as_raw_fd()).is_some_and(|i| {
                i.type_ == ty
                    && i.key_size == m.key_size()
                    && i.value_size == m.value_size()
                    && i.max_entries == m.max_entries()
                    && i.map_flags == m.map_flags()
            });
            if same {
                m.reuse_fd(fd.as_fd())
                    .map_err(ctx_err(format!("reusing map {n}")))?;
                kept.push(n);
                pinned_fds.push(fd);
            }
        }
        for mut p in open.progs_mut() {
            if p.name() == WRAPPER_PROG {
                p.set_log_level(log_level);
                let raw = p.as_libbpf_object().as_ptr();
                // SAFETY: `raw` is a live program of `open`; `log` outlives the load below.
                let rc = unsafe {
                    libbpf_sys::bpf_program__set_log_buf(
                        raw,
                        log.as_mut_ptr().cast(),
                        log.len() as _,
                    )
                };
                if rc != 0 {
                    return Err(Error::Invalid(
                        "setting the verifier log buffer failed".into(),
                    ));
                }
            }
        }
        let obj = open.load().map_err(ctx_err("loading the tenant program"))?;
        Ok((obj, kept))
    }

    /// Remove a tenant's program (its packets get XDP_PASS); its maps stay.
    ///
    /// # Errors
    /// Swap failure.
    pub fn remove_program(&mut self, tid: u32) -> Result<bool> {
        let t = self
            .tenants
            .get(&tid)
            .ok_or_else(|| Error::NotFound(format!("no tenant {tid}")))?;
        if t.program.is_none() {
            return Ok(false);
        }
        let pinned = self.tenant_maps_dir(&t.cfg.name).with_file_name(PROG_PIN);
        let mut programs = self.current_programs();
        programs.remove(&tid);
        self.swap(&programs)?;
        let _ = std::fs::remove_file(pinned);
        if let Some(t) = self.tenants.get_mut(&tid) {
            t.program = None;
        }
        self.save_records();
        Ok(true)
    }

    /// Rebuild the running generation with the same programs (a swap with no change).
    ///
    /// # Errors
    /// Load or swap failure.
    pub fn reswap(&mut self) -> Result<()> {
        let programs = self.current_programs();
        self.swap(&programs)
    }

    /// The tenant's program, if any.
    pub fn program(&self, tid: u32) -> Option<&ProgramInfo> {
        self.tenants
            .get(&tid)
            .and_then(|t| t.program.as_ref())
            .map(|p| &p.info)
    }

    /// fd of a tenant's loaded program (its wrapper entry), for tests.
    pub fn program_fd(&self, tid: u32) -> Option<RawFd> {
        self.tenants
            .get(&tid)
            .and_then(|t| t.program.as_ref())
            .map(|p| p.fd)
    }

    /// Statistics of one tenant (0: packets of no tenant).
    ///
    /// # Errors
    /// Map read failure.
    pub fn stats(&self, tid: u32) -> Result<TenantStats> {
        let name = if tid == 0 {
            "(none)".to_string()
        } else {
            self.tenants
                .get(&tid)
                .map(|t| t.cfg.name.clone())
                .ok_or_else(|| Error::NotFound(format!("no tenant {tid}")))?
        };
        let vals: Vec<Stats> = percpu_values(self.shared_fd("rampart_t_stats"), tid)?;
        let mut out = TenantStats {
            name,
            id: tid,
            ..Default::default()
        };
        let mut verdicts = [0u64; TENANT_VERDICTS];
        let mut drops = [0u64; TDROP_MAX];
        for s in vals {
            out.packets += s.packets;
            out.bytes += s.bytes;
            out.cpu_ns += s.cpu_ns;
            out.stack_ns += s.stack_ns;
            for (a, b) in verdicts.iter_mut().zip(s.verdict) {
                *a += b;
            }
            for (a, b) in drops.iter_mut().zip(s.drop) {
                *a += b;
            }
        }
        out.verdicts = VERDICT_LABELS.into_iter().zip(verdicts).collect();
        out.drops = TENANT_DROP_REASON_LABELS.into_iter().zip(drops).collect();
        out.tokens = if tid == 0 {
            TenantTokens::default()
        } else {
            self.tokens.tenant(tid)
        };
        Ok(out)
    }

    /// CPU time charged to a tenant so far (ns), from the shared counter.
    ///
    /// # Errors
    /// Map read failure.
    pub fn used_ns(&self, tid: u32) -> Result<u64> {
        lookup_u64(self.shared_fd("rampart_t_used"), tid)
    }

    /// CPU time charged to a tenant but still in the CPUs' batches (not
    /// yet added to the shared `used` counter), ns. `used_ns + pending`
    /// equals the sum of the tenant's per-CPU `cpu_ns` at every moment.
    ///
    /// # Errors
    /// Map read failure.
    pub fn pending_used_ns(&self, tid: u32) -> Result<u64> {
        let mut n = 0;
        for a in percpu_values::<abi::AcctCpu>(self.shared_fd("rampart_t_acct"), 0)? {
            if a.pend_tid == tid {
                n += a.pend_ns;
            }
        }
        Ok(n)
    }

    /// The accounting's ground truth, summed over CPUs.
    ///
    /// # Errors
    /// Map read failure.
    pub fn truth(&self) -> Result<TruthTotals> {
        let mut t = TruthTotals::default();
        for x in percpu_values::<Truth>(self.shared_fd("rampart_t_truth"), 0)? {
            t.net_rx_ns += x.net_rx_ns;
            t.net_rx_runs += x.net_rx_runs;
            t.polls += x.polls;
            t.thread_ns += x.thread_ns;
            t.net_rx_ours_ns += x.net_rx_ours_ns;
            t.charged_out_ns += x.charged_out_ns;
        }
        Ok(t)
    }

    /// Tell the accounting which threads run the NAPI of the dispatcher's
    /// devices (threaded NAPI, see [`crate::hostcpu`]): the time such a
    /// thread spends from waking up to its first packet is charged to that
    /// packet's tenant.
    ///
    /// # Errors
    /// Map update failure.
    pub fn watch_napi_threads(&self, pids: &[i32]) -> Result<()> {
        for &p in pids {
            let pid = u32::try_from(p).map_err(|_| Error::Invalid(format!("bad thread id {p}")))?;
            rampart_dataplane::maps::update_raw(
                self.shared_fd("rampart_t_threads"),
                &pid.to_ne_bytes(),
                &1u32.to_ne_bytes(),
                0,
            )?;
        }
        Ok(())
    }

    /// Tokens discarded (all buckets full) and rounds run by the generator.
    pub fn token_totals(&self) -> (u64, u64) {
        self.tokens.totals()
    }

    /// fd of a tenant's pinned map by name.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the tenant has no such map.
    pub fn tenant_map(&self, tid: u32, map: &str) -> Result<OwnedFd> {
        let t = self
            .tenants
            .get(&tid)
            .ok_or_else(|| Error::NotFound(format!("no tenant {tid}")))?;
        if map.is_empty() || map.contains('/') || map.contains('.') {
            return Err(Error::NotFound(format!("no map {map:?}")));
        }
        let p = self.tenant_maps_dir(&t.cfg.name).join(map);
        pin::open_pinned(&p)
            .map_err(|_| Error::NotFound(format!("tenant {} has no map {map:?}", t.cfg.name)))
    }

    /// Names of a tenant's pinned maps.
    pub fn tenant_map_names(&self, tid: u32) -> Vec<String> {
        let Some(t) = self.tenants.get(&tid) else {
            return Vec::new();
        };
        let mut v: Vec<String> = std::fs::read_dir(self.tenant_maps_dir(&t.cfg.name))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Detach, unpin and release everything. Idempotent.
    pub fn shutdown(&mut self) {
        for (_, l) in self.links.drain(..) {
            let _ = l.detach();
        }
        self.acct = None;
        for t in self.tenants.values_mut() {
            t.program = None;
        }
        self.generation = None;
        let _ = pin::remove_tree(&self.dir);
        pin::prune_empty_parents(&self.dir);
        if self.lock.take().is_some() {
            let _ = std::fs::remove_file(records_path(&self.cfg.infra.name));
            let _ = std::fs::remove_file(lock_path(&self.cfg.infra.name));
        }
    }

    /// Let go of the instance without touching what runs: the pins keep
    /// the dispatcher and the programs as they were (an adoption that
    /// failed). The next agent can adopt them again.
    fn release(&mut self) {
        // A stage's drop would empty its slot: the adopted one must stay.
        std::mem::forget(std::mem::take(&mut self.links));
        self.acct = None;
        for t in self.tenants.values_mut() {
            t.program = None;
        }
        self.generation = None;
        self.lock = None;
    }
}

impl Drop for HostAgent {
    fn drop(&mut self) {
        if self.lock.is_some() {
            self.shutdown();
        }
    }
}

/// Path of the pin directory of an instance (not created).
pub fn instance_dir(name: &str) -> PathBuf {
    pin::path(&["tenant", name])
}

fn lock_path(name: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{name}.lock"))
}

fn records_path(name: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{name}.programs.json"))
}

/// Take the instance's lock (held by a running agent).
fn lock_instance(name: &str) -> Result<nix::fcntl::Flock<std::fs::File>> {
    std::fs::create_dir_all(RUN_DIR).map_err(|e| Error::io(format!("creating {RUN_DIR}"), e))?;
    let path = lock_path(name);
    let f = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        if e == nix::errno::Errno::EWOULDBLOCK {
            Error::Invalid(format!(
                "tenant instance {name:?} is running (another `rampart tenant serve` or \
                 `rampart run` holds {}): stop it first, or give this one another infra.name",
                path.display()
            ))
        } else {
            Error::io(format!("locking {}", path.display()), e.into())
        }
    })
}

/// The program records a previous agent of `name` wrote (empty if none).
fn read_records(name: &str) -> BTreeMap<String, ProgramInfo> {
    std::fs::read(records_path(name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Pin `fd` at `path`, replacing what is pinned there in one rename: a
/// crash leaves the old pin or the new one, never none.
fn pin_replace(fd: RawFd, path: &Path) -> Result<()> {
    // bpffs refuses dots in names.
    let next = path.with_file_name(format!(
        "{}-next",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    let _ = std::fs::remove_file(&next);
    pin::pin_fd(fd, &next)?;
    std::fs::rename(&next, path).map_err(|e| {
        let _ = std::fs::remove_file(&next);
        Error::io(format!("renaming a pin to {}", path.display()), e)
    })
}

/// Pin a new generation's program array beside the running one's (under
/// [`PROGS_NEXT_PIN`]) before its dispatcher runs.
fn stage_generation(dir: &Path, skel: &XdpTenantDispatchSkel<'_>) -> Result<()> {
    let next = dir.join(PROGS_NEXT_PIN);
    let _ = std::fs::remove_file(&next);
    pin::pin_fd(skel.maps.rampart_t_progs.as_fd().as_raw_fd(), &next)?;
    Ok(())
}

/// Put the tenants' programs in a generation's program array.
fn fill_progs(skel: &XdpTenantDispatchSkel<'_>, programs: &BTreeMap<u32, RawFd>) -> Result<()> {
    for (tid, fd) in programs {
        skel.maps
            .rampart_t_progs
            .update(
                &tid.to_ne_bytes(),
                &fd.to_ne_bytes(),
                libbpf_rs::MapFlags::ANY,
            )
            .map_err(ctx_err(format!("installing tenant {tid}'s program")))?;
    }
    Ok(())
}

/// Remove a crashed instance's pins, detaching the links it left (its
/// dispatcher and programs stop).
///
/// # Errors
/// The instance is running; the directory exists but cannot be removed.
pub fn cleanup(name: &str) -> Result<bool> {
    let _lock = lock_instance(name)?;
    let d = instance_dir(name);
    let _ = std::fs::remove_file(records_path(name));
    let _ = std::fs::remove_file(lock_path(name));
    if !d.exists() {
        return Ok(false);
    }
    if let Ok(rd) = std::fs::read_dir(d.join(LINKS_PIN)) {
        for e in rd.flatten() {
            if let Ok(l) = XdpLink::open_pinned(&e.path()) {
                let _ = l.detach();
            }
        }
    }
    pin::remove_tree(&d)?;
    pin::prune_empty_parents(&d);
    Ok(true)
}
