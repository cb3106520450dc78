//! BPF_PROG_TEST_RUN tests of the cheaper accounting: the
//! per-CPU batching of the shared `used` counters (flushed on a change of
//! tenant or once per `infra.used_flush_us`, never losing or doubling a
//! nanosecond) and the bucket check that counts this CPU's unflushed batch,
//! so batching adds no over-spend on the CPU that does the work.
//!
//! The test thread is pinned to one CPU: BPF_PROG_RUN runs the dispatcher
//! on the calling CPU, and the accounting state is per CPU.

mod common;

use std::os::fd::AsRawFd;

use common::*;
use rampart_bpf::abi::tenant::{TENANT_FAR_NS, TENANT_RUN_MAX};
use rampart_tenant::host::HostAgent;
use rampart_testkit::prog::{XDP_DROP as DROP, XDP_PASS as PASS};

fn pin_to_one_cpu() {
    rampart_lab::testing::pin_this_thread(0);
}

/// Agent of tenants a, b, c on lo, fairness off, with `used_flush_us` and a
/// token budget so small (1 ns per second) that a bucket set by hand stays
/// as set while the test runs.
fn acct_agent(flush_us: u32) -> HostAgent {
    let a = agent(&format!("used_flush_us = {flush_us}"), false);
    assert_eq!(a.config().infra.used_flush_us, flush_us);
    a
}

fn tiny_budget_agent(flush_us: u32) -> HostAgent {
    let name = rampart_lab::testing::unique_prefix("tq");
    let cfg = format!(
        r#"
        [infra]
        name = "{name}"
        interfaces = ["lo"]
        attach = false
        used_flush_us = {flush_us}
        [fairness]
        enabled = false
        budget_cores = 0.000000001
        period_ms = 1000
        [[tenant]]
        name = "a"
        selectors = ["prefix:10.20.1.0/24"]
        [[tenant]]
        name = "b"
        selectors = ["prefix:10.20.2.0/24"]
        "#
    );
    HostAgent::start(rampart_tenant::config::Config::parse(&cfg).expect("config"))
        .expect("host agent")
}

fn shared_map(a: &HostAgent, map: &str) -> std::os::fd::OwnedFd {
    let dir = rampart_tenant::host::instance_dir(&a.config().infra.name);
    rampart_dataplane::pin::open_pinned(&dir.join("maps").join(map)).expect("pinned map")
}

fn read_u64(fd: &std::os::fd::OwnedFd, key: u32) -> u64 {
    fd_u64(fd, key)
}

/// Tenant a of a [`tiny_budget_agent`] with fairness on, on this thread's
/// CPU, and its bucket's two counters (`granted`, `used`) to set by hand.
struct Bucket {
    a: HostAgent,
    ta: u32,
    grant: std::os::fd::OwnedFd,
    used: std::os::fd::OwnedFd,
}

impl Bucket {
    fn new(flush_us: u32) -> Self {
        pin_to_one_cpu();
        let mut a = tiny_budget_agent(flush_us);
        a.set_fairness(true).unwrap();
        let ta = a.tenant_id("a").unwrap();
        let grant = shared_map(&a, "rampart_t_grant");
        let used = shared_map(&a, "rampart_t_used");
        Self { a, ta, grant, used }
    }

    fn granted(&self) -> u64 {
        read_u64(&self.grant, self.ta)
    }

    fn used(&self) -> u64 {
        read_u64(&self.used, self.ta)
    }

    fn set_used(&self, v: u64) {
        rampart_dataplane::maps::update_raw(
            self.used.as_raw_fd(),
            &self.ta.to_ne_bytes(),
            &v.to_ne_bytes(),
            0,
        )
        .unwrap();
    }

    /// Leave `ns` in the bucket (as far as the shared counters go).
    fn leave(&self, ns: u64) {
        self.set_used(self.granted() - ns);
    }
}

/// (used, pending, charged) of a tenant, read until two reads agree: a
/// context switch of this thread may close the open slice (and charge its
/// owner) between two map reads.
fn figures(a: &HostAgent, name: &str) -> (u64, u64, u64) {
    let tid = a.tenant_id(name).unwrap();
    let read = || {
        (
            a.used_ns(tid).unwrap(),
            a.pending_used_ns(tid).unwrap(),
            stats(a, name).cpu_ns,
        )
    };
    let mut x = read();
    for _ in 0..100 {
        let y = read();
        if x == y {
            break;
        }
        x = y;
    }
    x
}

/// used + this tenant's unflushed batches = everything charged to it.
/// A packet of another tenant first takes the open slice away from the
/// tested one (a context switch of this thread closes the open slice and
/// charges its owner at any time); the figures are then read until two
/// reads agree (a charge to the other tenant may flush a batch in between).
fn assert_nothing_lost(a: &HostAgent, name: &str) {
    let other = if name == "a" {
        [10, 20, 2, 2]
    } else {
        [10, 20, 1, 2]
    };
    run(a, &udp4(other, 9));
    let (used, pend, charged) = figures(a, name);
    assert_eq!(
        used + pend,
        charged,
        "tenant {name}: used {used} + pending {pend} must equal charged {charged}"
    );
}

#[test]
fn used_is_batched_per_cpu_and_flushed_on_a_change_of_tenant() {
    pin_to_one_cpu();
    let a = acct_agent(1_000_000);
    for _ in 0..5 {
        assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), PASS);
    }
    // a owns the open slice: whatever closes it charges a again, so a's
    // batch is never flushed here. All of it is still in this CPU's batch.
    let (used, pend, charged) = figures(&a, "a");
    assert!(charged > 0, "no CPU time charged to a");
    assert_eq!(used, 0, "a's charges must be batched");
    assert_eq!(pend, charged);
    // b's packet closes a's slice (still a's batch); c's closes b's: a
    // change of tenant flushes a's whole batch into the shared counter.
    run(&a, &udp4([10, 20, 2, 2], 9));
    run(&a, &udp4([10, 20, 3, 2], 9));
    let (used, pend, charged) = figures(&a, "a");
    assert_eq!(pend, 0);
    assert_eq!(used, charged);
    for t in ["a", "b", "c"] {
        assert_nothing_lost(&a, t);
    }
}

#[test]
fn flush_zero_adds_every_charge_at_once() {
    pin_to_one_cpu();
    let a = acct_agent(0);
    for _ in 0..4 {
        run(&a, &udp4([10, 20, 1, 2], 9));
    }
    let (used, pend, charged) = figures(&a, "a");
    assert!(charged > 0);
    assert_eq!(pend, 0);
    assert_eq!(used, charged);
}

#[test]
fn interleaved_tenants_lose_no_charge() {
    pin_to_one_cpu();
    let a = acct_agent(20);
    let frames = [
        udp4([10, 20, 1, 2], 9),
        udp4([10, 20, 2, 2], 9),
        udp4([10, 20, 1, 2], 9),
        udp4([10, 20, 1, 2], 9),
        udp4([10, 20, 3, 2], 9),
    ];
    for i in 0..200 {
        run(&a, &frames[i % frames.len()]);
    }
    for t in ["a", "b", "c"] {
        assert!(stats(&a, t).cpu_ns > 0, "{t} charged nothing");
        assert_nothing_lost(&a, t);
    }
    // Runs of one tenant longer than TENANT_RUN_MAX are charged in slices
    // of at most that many packets: a long run still charges as it goes.
    let before = stats(&a, "b").cpu_ns;
    for _ in 0..100 {
        run(&a, &udp4([10, 20, 2, 2], 9));
    }
    assert!(
        stats(&a, "b").cpu_ns > before,
        "a long run was never charged"
    );
    assert_nothing_lost(&a, "b");
}

#[test]
fn a_run_of_one_tenant_shares_a_clock_read_over_at_most_32_packets() {
    // The bound on how far the bucket check can lag inside a run
    // (TENANT_RUN_MAX): at most 32 packets share one clock read, so any 33
    // packets in a row contain a charge. A kernel event (a context switch
    // of this thread) may close the slice earlier — that close charges
    // too, and the packet after it opens a new slice whose run counts
    // from 1 again: still a charge within 33.
    pin_to_one_cpu();
    let a = acct_agent(0);
    let f = udp4([10, 20, 1, 2], 9);
    run(&a, &f);
    run(&a, &f);
    let mut last = stats(&a, "a").cpu_ns;
    assert!(last > 0);
    for round in 0..5 {
        for _ in 0..=TENANT_RUN_MAX {
            run(&a, &f);
        }
        let now = stats(&a, "a").cpu_ns;
        assert!(
            now > last,
            "33 packets of a run went uncharged (round {round})"
        );
        last = now;
    }
    assert_nothing_lost(&a, "a");
}

#[test]
fn near_an_empty_bucket_every_packet_reads_the_clock() {
    // Runs extend only while the bucket holds more than TENANT_FAR_NS (1
    // ms): below it, each packet closes the previous one's slice, so the
    // check never lags. (A kernel event closing a slice early only adds
    // charges: this can fail only if a packet went uncharged.)
    let b = Bucket::new(0);
    let a = &b.a;
    let f = udp4([10, 20, 1, 2], 9);
    // Leave half of TENANT_FAR_NS in a's bucket: positive, but not far from empty.
    b.leave(u64::from(TENANT_FAR_NS) / 2);
    assert_eq!(run(a, &f), PASS);
    let mut last = stats(a, "a").cpu_ns;
    for i in 0..10 {
        assert_eq!(run(a, &f), PASS, "packet {i}: the bucket is not empty yet");
        let now = stats(a, "a").cpu_ns;
        assert!(now > last, "packet {i} extended a run near an empty bucket");
        last = now;
    }
    // Far from empty (a full bucket of 20 ms), runs extend again: some of
    // ten packets in a row share a clock read.
    b.set_used(0);
    run(a, &f);
    let mut charges = 0;
    let mut last = stats(a, "a").cpu_ns;
    for _ in 0..10 {
        run(a, &f);
        let now = stats(a, "a").cpu_ns;
        charges += u32::from(now > last);
        last = now;
    }
    assert!(
        charges < 10,
        "a run far from an empty bucket read the clock at every packet"
    );
}

#[test]
fn a_bucket_emptied_inside_a_run_stops_the_tenant_within_32_packets() {
    // Inside a run the bucket is not re-read (it was more than
    // TENANT_FAR_NS from empty when the run began): the documented bound
    // is that at most TENANT_RUN_MAX (32) packets of the tenant pass on a
    // CPU after its bucket went empty. Empty it behind a run's back and
    // count the packets that still pass.
    let b = Bucket::new(0);
    let a = &b.a;
    let f = udp4([10, 20, 1, 2], 9);
    // A full bucket: two packets in a row start a run.
    b.set_used(0);
    assert_eq!(run(a, &f), PASS);
    assert_eq!(run(a, &f), PASS);
    // Now nothing is left.
    b.leave(0);
    let mut passed = 0;
    let mut dropped_at = None;
    for i in 0..TENANT_RUN_MAX + 8 {
        if run(a, &f) == PASS {
            passed += 1;
        } else {
            dropped_at = Some(i);
            break;
        }
    }
    let at = dropped_at.expect("every packet passed with an empty bucket");
    assert!(
        passed <= TENANT_RUN_MAX,
        "{passed} packets passed after the bucket went empty"
    );
    assert_eq!(at, passed);
    // Once the run has ended, every packet is checked: all are dropped.
    for i in 0..10 {
        assert_eq!(run(a, &f), DROP, "packet {i} after the run passed");
    }
    assert!(stats(a, "a").drops["no_tokens"] >= 11);
}

#[test]
fn the_bucket_check_counts_this_cpus_unflushed_batch() {
    let b = Bucket::new(1_000_000);
    let a = &b.a;
    // A bucket of 900 µs, below TENANT_FAR_NS: no run starts, every packet
    // is checked (inside a run the bucket is not re-read: it was far from
    // empty when the run began).
    b.leave(900_000);
    let base = b.used();
    // Two packets of a: the second closes the first one's slice into a's batch.
    assert_eq!(run(a, &udp4([10, 20, 1, 2], 9)), PASS);
    assert_eq!(run(a, &udp4([10, 20, 1, 2], 9)), PASS);
    let pend = a.pending_used_ns(b.ta).unwrap();
    assert!(pend > 10, "a's batch is empty ({pend} ns)");
    assert_eq!(b.used(), base);
    // Leave a bucket smaller than the batch: granted − used = pend / 2 > 0.
    // Only the batch (which the shared counter does not show yet) empties it.
    b.leave(pend / 2);
    assert_eq!(
        run(a, &udp4([10, 20, 1, 2], 9)),
        DROP,
        "the CPU's own batch must count in the bucket"
    );
    assert_eq!(stats(a, "a").drops["no_tokens"], 1);
    // b has its own bucket and is not affected.
    assert_eq!(run(a, &udp4([10, 20, 2, 2], 9)), PASS);
    // With a bucket larger than the batch, a passes again.
    b.set_used(0);
    assert_eq!(run(a, &udp4([10, 20, 1, 2], 9)), PASS);
}

#[test]
fn out_of_range_flush_is_refused() {
    let cfg = r#"
        [infra]
        name = "x"
        interfaces = ["lo"]
        used_flush_us = 2000000
        [[tenant]]
        name = "a"
        selectors = ["prefix:10.20.1.0/24"]
    "#;
    let e = rampart_tenant::config::Config::parse(cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("used_flush_us"), "{e}");
}

#[test]
fn a_dead_token_generator_stops_enforcement_instead_of_dropping_every_tenant() {
    use rampart_bpf::abi::tenant::TENANT_GRANT_DEADLINE_KEY;
    let b = Bucket::new(0);
    let a = &b.a;
    let f = udp4([10, 20, 1, 2], 9);
    let deadline = || read_u64(&b.grant, TENANT_GRANT_DEADLINE_KEY);
    let set_deadline = |v: u64| {
        rampart_dataplane::maps::update_raw(
            b.grant.as_raw_fd(),
            &TENANT_GRANT_DEADLINE_KEY.to_ne_bytes(),
            &v.to_ne_bytes(),
            0,
        )
        .unwrap();
    };
    assert!(deadline() > 0, "the generator writes its deadline");
    b.leave(0);
    assert_eq!(
        run(a, &f),
        DROP,
        "an empty bucket drops while the generator lives"
    );
    // The deadline passed (the generator's process died): no enforcement.
    // The agent's generator (still alive here) rewrites the deadline each
    // round; a step it interrupted is repeated.
    let mut dropped_while_dead = None;
    for _ in 0..100 {
        set_deadline(1);
        let verdicts: Vec<u32> = (0..3).map(|_| run(a, &f)).collect();
        if deadline() == 1 {
            dropped_while_dead = Some(verdicts.iter().filter(|&&v| v == DROP).count());
            break;
        }
    }
    assert_eq!(
        dropped_while_dead.expect("the generator never left the deadline alone"),
        0,
        "past the deadline every packet passes"
    );
    // A live generator again: enforced again (after at most the run that
    // started while enforcement was off).
    set_deadline(u64::MAX);
    let dropped = (0..TENANT_RUN_MAX + 2).any(|_| run(a, &f) == DROP);
    assert!(dropped, "enforced again once the generator is back");
}
