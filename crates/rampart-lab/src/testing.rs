//! Helpers for tests that need the kernel: a clear failure when the
//! environment lacks something (never a silent skip), and labs with unique
//! prefixes that are removed when the test ends, pass or fail.

use std::sync::atomic::{AtomicU32, Ordering};

use rampart_dataplane::features::{self, Feature};

use crate::topology::{Lab, UpOptions};

/// Panic with the name of the first missing feature (root, XDP, live
/// frames, bpffs, veth). Tests call this first so CI says *why* it failed.
pub fn require_kernel() {
    if let Err(e) = features::require(
        "the rampart test suite",
        &[
            Feature::Root,
            Feature::Xdp,
            Feature::Bpffs,
            Feature::Veth,
            Feature::XdpLiveFrames,
        ],
    ) {
        panic!("cannot run this test: {e}");
    }
}

/// Pin the calling thread to `cpu` for the rest of its life. Tests that
/// run a program with per-CPU state (a position, a batch) packet by packet
/// with BPF_PROG_RUN need every run on one CPU: the run executes on the
/// calling thread's CPU, and a migration between two runs switches to
/// another CPU's state.
///
/// # Panics
/// When the kernel refuses.
pub fn pin_this_thread(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).expect("CPU index in range");
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .unwrap_or_else(|e| panic!("pinning the test thread to CPU {cpu}: {e}"));
}

/// Wait for a generator's frames to be counted: when the generator
/// returns, its last frames may still sit in a veth's queue (a loaded
/// machine defers the softirq work that moves them). Polls until `seen`
/// and the frames the wire lost since `lost0` (a
/// [`crate::gen::wire_lost_total`] reading from before the run) account
/// for `sent`, for up to 10 s. The caller then asserts on its own reading,
/// so a frame that never arrives still fails the test.
///
/// # Panics
/// When the veths' counters cannot be read.
pub fn settle(lab: &Lab, lost0: u64, sent: u64, mut seen: impl FnMut() -> u64) {
    rampart_testkit::browser::poll(std::time::Duration::from_secs(10), || {
        let lost = crate::gen::wire_lost_total(lab)
            .expect("the veths' counters")
            .saturating_sub(lost0);
        seen() + lost >= sent
    });
}

/// A prefix no other test (in this or another process) uses right now.
pub fn unique_prefix(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let tag: String = tag
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(4)
        .collect();
    format!("{tag}{:x}{n:x}", pid & 0xfffff)
        .chars()
        .take(12)
        .collect()
}

/// A lab that is up for the life of the value and removed on drop.
#[derive(Debug)]
pub struct TestLab {
    /// The lab.
    pub lab: Lab,
}

impl TestLab {
    /// Bring up a fresh lab with `tenants` tenant namespaces.
    ///
    /// # Panics
    /// When the kernel lacks a feature or the lab cannot be built.
    pub fn up(tag: &str, tenants: u32) -> Self {
        require_kernel();
        let lab = Lab::new(&unique_prefix(tag)).expect("valid prefix");
        if let Err(e) = lab.up(&UpOptions {
            tenants,
            ..Default::default()
        }) {
            let _ = lab.down();
            panic!("lab up failed: {e}");
        }
        Self { lab }
    }
}

impl std::ops::Deref for TestLab {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

impl Drop for TestLab {
    fn drop(&mut self) {
        if let Err(e) = self.lab.down() {
            eprintln!("warning: removing test lab {}: {e}", self.lab.prefix());
        }
    }
}
