//! Clocks the data path shares with userspace.

fn now(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes; the clock ids used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_BOOTTIME` in ns: what `bpf_ktime_get_boot_ns()` returns.
pub fn boot_ns() -> u64 {
    now(libc::CLOCK_BOOTTIME)
}

/// `CLOCK_REALTIME` in ns (wall clock, for "added at").
pub fn real_ns() -> u64 {
    now(libc::CLOCK_REALTIME)
}
