//! The benchmark's CPU placement helpers, checked against the kernel:
//! the EMULATED NIC's way back moved to a CPU of its own (and back), and a
//! measuring thread placed above the NAPI thread's priority (and back).

use rampart_lab::hostcpu::{self, ReaderAboveNapi, WireOnCpu};
use rampart_lab::testing::TestLab;
use rampart_lab::topology::NIC_HOST_IF;

fn in_ns(ns: &str, prog: &str, args: &[&str]) -> String {
    rampart_dataplane::cmd::in_ns(ns, prog, args).unwrap()
}

fn allowed_cpus(pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string()
}

fn threaded(lab: &TestLab) -> String {
    in_ns(
        &lab.nic_ns(),
        "cat",
        &[&format!("/sys/class/net/{NIC_HOST_IF}/threaded")],
    )
    .trim()
    .to_string()
}

#[test]
fn the_wire_s_way_back_runs_in_a_pinned_realtime_thread_until_dropped() {
    let lab = TestLab::up("wire", 1);
    let cpu = 0;
    {
        let wire = WireOnCpu::new(&lab, cpu).expect("threaded NAPI on nic-host");
        assert_eq!(threaded(&lab), "1");
        assert!(!wire.threads.pids.is_empty(), "no NAPI thread for nic-host");
        for &p in &wire.threads.pids {
            assert_eq!(allowed_cpus(p), cpu.to_string(), "thread {p} not pinned");
            // SAFETY: plain query of a thread id found in /proc.
            assert_eq!(unsafe { libc::sched_getscheduler(p) }, libc::SCHED_FIFO);
        }
        // Frames from the host towards wan cross nic-host: its thread
        // does the work (it has run more after them than before).
        let ran = || -> u64 {
            wire.threads
                .pids
                .iter()
                .map(|&p| hostcpu::runtime_ns(p))
                .sum()
        };
        let before = ran();
        in_ns(
            &lab.host_ns(),
            "ping",
            &["-c", "3", "-i", "0.2", "-W", "5", "10.10.0.1"],
        );
        let after = ran();
        assert!(
            after > before,
            "nic-host's NAPI thread never ran for the replies' way out"
        );
    }
    assert_eq!(threaded(&lab), "0", "dropping it puts NAPI back in softirq");
}

#[test]
fn a_reader_above_napi_is_pinned_and_realtime_then_restored() {
    let me = nix::unistd::Pid::from_raw(0);
    let before = nix::sched::sched_getaffinity(me).expect("affinity");
    {
        let _r = ReaderAboveNapi::enter(1).expect("enter");
        let now = nix::sched::sched_getaffinity(me).expect("affinity");
        assert!(now.is_set(1).unwrap() && !now.is_set(0).unwrap());
        // SAFETY: query of the calling thread.
        assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_FIFO);
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
    let after = nix::sched::sched_getaffinity(me).expect("affinity");
    for c in 0..2 {
        assert_eq!(before.is_set(c).unwrap(), after.is_set(c).unwrap());
    }
}
