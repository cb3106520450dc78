//! The host's packet-processing CPU, made measurable.
//!
//! In the lab every veth's NAPI runs on the CPU that sent the frame, so the
//! generator, the EMULATED NIC and the host's processing share one core.
//! For the tenant experiments the host's receive processing
//! is moved into its own kernel thread with *threaded NAPI* (the kernel's
//! own mechanism for running a device's NET_RX work outside the softirq;
//! `/sys/class/net/<dev>/threaded`) and pinned to a CPU of its own. Then:
//!
//! - that CPU is "the core" the tenants share, saturated when the offered
//!   load exceeds what it can process (frames beyond that are dropped by
//!   the NIC hop before they reach the host, as on a real NIC ring);
//! - the thread's run time (`/proc/<pid>/schedstat`, ns, kept by the
//!   scheduler) is the exact CPU time the host spent receiving — the
//!   ground truth the accounting is validated against. Softirq work the
//!   thread raises (e.g. the tenants' veth backlog) runs in its context
//!   when it re-enables bottom halves, so it is included.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::error::{Error, Result};

/// The NAPI threads of a device.
#[derive(Debug, Clone)]
pub struct NapiThreads {
    /// Thread ids.
    pub pids: Vec<i32>,
    /// CPU they are pinned to.
    pub cpu: usize,
}

fn napi_thread_pids(dev: &str) -> BTreeSet<i32> {
    let prefix = format!("napi/{dev}-");
    let mut out = BTreeSet::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if comm.trim_end().starts_with(&prefix) {
                out.insert(pid);
            }
        }
    }
    out
}

/// Switch `dev` in namespace `ns` to threaded NAPI, pin its NAPI threads
/// to `cpu` and give them real-time priority (SCHED_FIFO 50), so that, as
/// NET_RX softirq work would, they run whenever they have packets instead
/// of sharing the CPU with ordinary processes (this machine is shared; a
/// CFS-scheduled NAPI thread got 40–65% of its CPU under load). The kernel's
/// RT throttling still leaves other tasks 5% of the CPU. The device must
/// have NAPI instances (a veth has them while an XDP program is attached).
///
/// # Errors
/// When the switch fails or no new NAPI thread appears.
pub fn threaded_napi(ns: &str, dev: &str, cpu: usize) -> Result<NapiThreads> {
    let before = napi_thread_pids(dev);
    rampart_dataplane::cmd::in_ns(
        ns,
        "sh",
        &["-c", &format!("echo 1 > /sys/class/net/{dev}/threaded")],
    )?;
    let mut pids = Vec::new();
    for _ in 0..100 {
        pids = napi_thread_pids(dev).difference(&before).copied().collect();
        if !pids.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if pids.is_empty() {
        return Err(Error::InvalidSpec(format!(
            "no NAPI thread appeared for {dev} in {ns} after enabling threaded NAPI (is an XDP program attached?)"
        )));
    }
    for &p in &pids {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu)
            .map_err(|e| Error::InvalidSpec(format!("CPU {cpu}: {e}")))?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(p), &set)
            .map_err(|e| Error::io(format!("pinning NAPI thread {p} to CPU {cpu}"), e.into()))?;
        let param = libc::sched_param { sched_priority: 50 };
        // SAFETY: plain syscall with a valid sched_param.
        if unsafe { libc::sched_setscheduler(p, libc::SCHED_FIFO, &param) } != 0 {
            return Err(Error::io(
                format!("making NAPI thread {p} SCHED_FIFO"),
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(NapiThreads { pids, cpu })
}

/// Threaded NAPI again from scratch (after the device's NAPI instances
/// were recreated, e.g. by a new XDP attachment): off, then on, pinned.
///
/// # Errors
/// As [`threaded_napi`].
pub fn rethread_napi(ns: &str, dev: &str, cpu: usize) -> Result<NapiThreads> {
    unthreaded_napi(ns, dev)?;
    std::thread::sleep(std::time::Duration::from_millis(50));
    threaded_napi(ns, dev, cpu)
}

/// Back to softirq NAPI.
///
/// # Errors
/// When the switch fails.
pub fn unthreaded_napi(ns: &str, dev: &str) -> Result<()> {
    rampart_dataplane::cmd::in_ns(
        ns,
        "sh",
        &["-c", &format!("echo 0 > /sys/class/net/{dev}/threaded")],
    )?;
    Ok(())
}

/// The EMULATED NIC's receive side towards the wire's far end, moved off
/// the host core while it lives.
///
/// Answers the host sends (XDP_TX, or its stack's transmissions) enter the
/// EMULATED NIC at `nic-host`. A veth runs the receiving side's NAPI on the
/// CPU that sent the frame, so without this the EMULATED NIC's forwarding
/// (`nic-host` → `nic-wan` → `wan0`, two XDP programs and two veth hops per
/// answer) ran on the host core and was charged to whatever the host core
/// was measuring, although on a real host the frame's journey ends at the
/// NIC's transmit ring. Threaded NAPI on `nic-host`, pinned to `cpu` (the
/// generator's, where the way in already runs) at SCHED_FIFO (a NIC does
/// not wait for the generator), puts the whole wire on one side.
pub struct WireOnCpu {
    ns: String,
    /// The NAPI threads (pinned to the wire's CPU).
    pub threads: NapiThreads,
}

impl WireOnCpu {
    /// Move the wire's way back to `cpu`.
    ///
    /// # Errors
    /// As [`threaded_napi`].
    pub fn new(lab: &crate::Lab, cpu: usize) -> Result<WireOnCpu> {
        let ns = lab.nic_ns();
        let threads = rethread_napi(&ns, crate::topology::NIC_HOST_IF, cpu)?;
        Ok(WireOnCpu { ns, threads })
    }
}

impl Drop for WireOnCpu {
    fn drop(&mut self) {
        let _ = unthreaded_napi(&self.ns, crate::topology::NIC_HOST_IF);
    }
}

/// The calling thread on the host core at a real-time priority above the
/// NAPI threads' ([`threaded_napi`]), until dropped (then back to its
/// previous CPUs and the ordinary scheduler). A measurement that reads a
/// packet counter and then the NAPI thread's run time gets a consistent
/// pair: the NAPI thread, pinned to that core, cannot run in between.
/// Before, the reader ran wherever the scheduler put it, at normal
/// priority, and could be preempted between the two reads (a 100 ms
/// slice at 4 Mpps moves 1 % per 1 ms of delay).
pub struct ReaderAboveNapi {
    before: nix::sched::CpuSet,
}

impl ReaderAboveNapi {
    /// Move the calling thread.
    ///
    /// # Errors
    /// When the affinity or the priority cannot be set.
    pub fn enter(cpu: usize) -> Result<ReaderAboveNapi> {
        let me = nix::unistd::Pid::from_raw(0);
        let before = nix::sched::sched_getaffinity(me)
            .map_err(|e| Error::io("reading this thread's CPUs", e.into()))?;
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu)
            .map_err(|e| Error::InvalidSpec(format!("CPU {cpu}: {e}")))?;
        nix::sched::sched_setaffinity(me, &set)
            .map_err(|e| Error::io(format!("pinning the reader to CPU {cpu}"), e.into()))?;
        let param = libc::sched_param { sched_priority: 60 };
        // SAFETY: plain syscall on the calling thread with a valid sched_param.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
            let e = std::io::Error::last_os_error();
            let _ = nix::sched::sched_setaffinity(me, &before);
            return Err(Error::io("making the reader SCHED_FIFO", e));
        }
        Ok(ReaderAboveNapi { before })
    }
}

impl Drop for ReaderAboveNapi {
    fn drop(&mut self) {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: as in `enter`.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &self.before);
    }
}

/// Run time of a thread so far (ns), from the scheduler.
pub fn runtime_ns(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// `ksoftirqd/<cpu>`'s thread id.
pub fn ksoftirqd(cpu: usize) -> Option<i32> {
    let want = format!("ksoftirqd/{cpu}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_string_lossy().parse::<i32>().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim_end() == want).then_some(pid)
    })
}

/// One CPU's line of `/proc/stat`, in ticks (USER_HZ).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuTicks {
    /// user + nice.
    pub user: u64,
    /// system.
    pub system: u64,
    /// idle + iowait.
    pub idle: u64,
    /// irq.
    pub irq: u64,
    /// softirq.
    pub softirq: u64,
    /// steal: time the hypervisor ran something else while this vCPU
    /// wanted to run.
    pub steal: u64,
}

impl CpuTicks {
    /// Difference `self - earlier`.
    pub fn since(&self, earlier: &CpuTicks) -> CpuTicks {
        CpuTicks {
            user: self.user - earlier.user,
            system: self.system - earlier.system,
            idle: self.idle - earlier.idle,
            irq: self.irq - earlier.irq,
            softirq: self.softirq - earlier.softirq,
            steal: self.steal - earlier.steal,
        }
    }
}

/// `/proc/stat` for one CPU.
pub fn cpu_ticks(cpu: usize) -> CpuTicks {
    let want = format!("cpu{cpu} ");
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with(&want)) else {
        return CpuTicks::default();
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let g = |i: usize| v.get(i).copied().unwrap_or(0);
    CpuTicks {
        user: g(0) + g(1),
        system: g(2),
        idle: g(3) + g(4),
        irq: g(5),
        softirq: g(6),
        steal: g(7),
    }
}

/// Clock ticks per second of `/proc/stat`.
pub fn user_hz() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as u64
    } else {
        100
    }
}
