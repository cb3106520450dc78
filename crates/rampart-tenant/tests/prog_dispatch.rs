//! BPF_PROG_TEST_RUN tests of the infrastructure program: the
//! demultiplexer (prefix v4/v6, VLAN, VXLAN VNI, interface, default,
//! malformed), the fairness check, the per-tenant wrapper's verdict
//! mapping, and state across generation swaps.

mod common;

use common::*;
use rampart_testkit::frame::Frame;
use rampart_testkit::prog::{Counter, ProgCase, Runner, XDP_DROP as DROP, XDP_PASS as PASS};

#[test]
fn demux_picks_the_tenant_of_each_selector_kind() {
    let a = agent("", false);
    // No programs yet: every tenant's packets pass, counted under its id.
    assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), PASS);
    assert_eq!(run(&a, &udp6(v6([0xfd20, 0, 0, 1, 0, 0, 0, 2]))), PASS);
    assert_eq!(run(&a, &vlan4(101, [10, 20, 2, 2])), PASS); // VLAN wins over the prefix inside
    assert_eq!(run(&a, &udp4([10, 20, 2, 2], 9)), PASS);
    assert_eq!(run(&a, &vxlan4(5002, [10, 20, 1, 2], 0x08)), PASS); // VNI wins over the outer prefix
    assert_eq!(run(&a, &udp4([10, 20, 3, 9], 9)), PASS);
    // No selector matches: c owns the whole interface (iface:lo).
    assert_eq!(run(&a, &udp4([192, 0, 2, 1], 9)), PASS);
    assert_eq!(stats(&a, "a").packets, 3);
    assert_eq!(stats(&a, "b").packets, 2);
    assert_eq!(stats(&a, "c").packets, 2);
    assert_eq!(stats(&a, "(none)").packets, 0);
    for t in ["a", "b", "c"] {
        let s = stats(&a, t);
        assert_eq!(s.verdicts["pass"], s.packets, "{t}");
    }
}

#[test]
fn packets_of_no_tenant_follow_the_default() {
    let a = agent("default_action = \"drop\"", false);
    // An unknown VLAN and an unknown VNI: one lookup, no fallback to the
    // interface (VLAN/VNI keys are more specific than iface:lo only if
    // installed; an unknown one still matches the interface selector).
    assert_eq!(run(&a, &vlan4(999, [10, 20, 1, 2])), PASS);
    assert_eq!(
        stats(&a, "c").packets,
        1,
        "iface:lo catches the unknown VLAN"
    );
    let mut a = a;
    a.set_selectors(
        a.tenant_id("c").unwrap(),
        vec!["prefix:10.20.3.0/24".parse().unwrap()],
    )
    .unwrap();
    assert_eq!(run(&a, &vlan4(999, [10, 20, 1, 2])), DROP);
    assert_eq!(run(&a, &vxlan4(77, [10, 20, 1, 2], 0x08)), DROP);
    assert_eq!(run(&a, &udp4([192, 0, 2, 1], 9)), DROP);
    let none = stats(&a, "(none)");
    assert_eq!((none.packets, none.drops["default"]), (3, 3));
    // A VXLAN header without the I flag is not a VNI: the outer prefix decides.
    assert_eq!(run(&a, &vxlan4(5002, [10, 20, 1, 2], 0x00)), PASS);
    assert_eq!(stats(&a, "a").packets, 1);
}

#[test]
fn malformed_frames_are_never_classified() {
    let a = agent("", false);
    let good = || Frame::udp([172, 16, 0, 1], [10, 20, 1, 2], 40000, 9).zeros(18);
    // Truncated inside the IPv4 header, a bad IHL, and a VXLAN header cut
    // short (the IPv4/UDP lengths saying so: only the VXLAN header is short).
    let short_vxlan = Frame::udp([172, 16, 0, 1], [10, 20, 1, 2], 40000, 4789)
        .payload(&vxlan_header(5002, 0x08)[..4])
        .build();
    for f in [
        good().truncate(30).build(),
        good().ihl(3).build(),
        short_vxlan,
    ] {
        assert_eq!(run(&a, &f), DROP);
    }
    let none = stats(&a, "(none)");
    assert_eq!(none.drops["malformed"], 3);
    for t in ["a", "b", "c"] {
        assert_eq!(stats(&a, t).packets, 0, "{t} got a malformed frame");
    }
}

/// The dispatcher's reasons, summed over all tenants and "(none)": its
/// non-drop verdicts and its drop reasons (a drop is counted by reason).
fn reasons(a: &rampart_tenant::host::HostAgent) -> Vec<Counter> {
    let mut sum = std::collections::BTreeMap::<String, u64>::new();
    for t in ["(none)", "a", "b", "c"] {
        let s = stats(a, t);
        for (v, n) in s.verdicts.iter().filter(|(v, _)| **v != "drop") {
            *sum.entry(v.to_string()).or_default() += n;
        }
        for (r, n) in &s.drops {
            *sum.entry(format!("drop.{r}")).or_default() += n;
        }
    }
    sum.into_iter()
        .map(|(k, v)| Counter::packets(k, v))
        .collect()
}

/// Every frame of the test kit's corpus arriving on lo: what parse.h calls
/// malformed — or a VXLAN header cut short — is dropped as malformed and
/// reaches no tenant; everything else reaches a tenant (or the default)
/// and, with no programs, passes untouched.
#[test]
fn every_corpus_frame_is_classified_or_dropped_as_malformed() {
    use rampart_testkit::corpus::{self, Case, Kind};
    use rampart_testkit::parse::{Frag, Status};
    let a = agent("", false);
    let vxlan = a.config().infra.vxlan_port;
    let runner = Runner::new(a.dispatcher_fd(), || reasons(&a)).ingress(1, 0);
    let mut cases = corpus::all(0x7e7a_5eed, 1000);
    let vx = vxlan4(5002, [10, 20, 1, 2], 0x08);
    cases.push(Case::new("vxlan to tenant b", Kind::Valid, vx));
    for c in cases {
        let p = &c.expect;
        let short_vxlan = p.status == Status::Ok
            && p.l4_proto == 17
            && p.frag != Frag::Later
            && p.dport == vxlan
            && c.frame.len() < usize::from(p.l4_off) + 8 + 8;
        let case = if p.status.malformed() || short_vxlan {
            ProgCase::new(c.name, c.frame, DROP, "drop.malformed")
        } else {
            ProgCase::new(c.name, c.frame, PASS, "pass")
        };
        runner.run(&case.unchanged());
    }
    assert!(stats(&a, "b").packets >= 1, "the VXLAN frame reached b");
}

#[test]
fn a_program_runs_only_on_its_tenants_packets() {
    let mut a = agent("", false);
    submit(&mut a, "a", &counter_prog(1, "XDP_DROP"));
    submit(&mut a, "b", &counter_prog(1, "XDP_PASS"));
    assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), DROP);
    assert_eq!(run(&a, &udp4([10, 20, 1, 3], 9)), DROP);
    assert_eq!(run(&a, &udp4([10, 20, 2, 2], 9)), PASS);
    assert_eq!(run(&a, &udp4([10, 20, 3, 2], 9)), PASS); // c: no program
                                                         // Both tenants named their map `counts`: two separate maps.
    assert_eq!(map_u64(&a, "a", "counts", 0), 2);
    assert_eq!(map_u64(&a, "b", "counts", 0), 1);
    assert_eq!(stats(&a, "a").verdicts["drop"], 2);
    assert_eq!(stats(&a, "b").verdicts["pass"], 1);
}

#[test]
fn an_empty_bucket_rejects_before_the_program_runs() {
    use std::os::fd::AsRawFd;
    // Runs are per CPU: every packet of this test on one.
    rampart_lab::testing::pin_this_thread(0);
    let mut a = agent("", true);
    submit(&mut a, "a", &counter_prog(1, "XDP_PASS"));
    assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), PASS);
    assert_eq!(map_u64(&a, "a", "counts", 0), 1);
    // Make tenant a's bucket deeply negative: used ≫ granted.
    let dir = rampart_tenant::host::instance_dir(&a.config().infra.name);
    let used = rampart_dataplane::pin::open_pinned(&dir.join("maps/rampart_t_used")).unwrap();
    let tid = a.tenant_id("a").unwrap();
    rampart_dataplane::maps::update_raw(
        used.as_raw_fd(),
        &tid.to_ne_bytes(),
        &(1u64 << 62).to_ne_bytes(),
        0,
    )
    .unwrap();
    // Another tenant's packet ends a's run on this CPU (a run is never
    // checked again before it ends: its length is bounded far below a
    // bucket's margin, which this test has just taken away at once).
    // Other tenants are unaffected.
    assert_eq!(run(&a, &udp4([10, 20, 2, 2], 9)), PASS);
    assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), DROP);
    assert_eq!(
        map_u64(&a, "a", "counts", 0),
        1,
        "the program must not run without tokens"
    );
    assert_eq!(stats(&a, "a").drops["no_tokens"], 1);
    // Fairness off: the same tenant runs again.
    a.set_fairness(false).unwrap();
    assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), PASS);
    assert_eq!(map_u64(&a, "a", "counts", 0), 2);
    // Switching fairness back on starts from full buckets: what a tenant
    // used while nothing limited it is not a debt.
    a.set_fairness(true).unwrap();
    assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), PASS);
    assert_eq!(map_u64(&a, "a", "counts", 0), 3);
}

#[test]
fn verdicts_are_mapped_and_bad_ones_dropped_with_a_reason() {
    let mut a = agent("", false);
    for (ret, action, reason) in [
        ("XDP_TX", 3, None),
        ("XDP_ABORTED", DROP, Some("aborted")),
        ("4 /* raw XDP_REDIRECT */", DROP, Some("aborted")),
        ("12345", DROP, Some("aborted")),
        ("RAMPART_REDIRECT(0)", 4, None), // a's port 0 (lo)
        ("RAMPART_REDIRECT(1)", DROP, Some("bad_redirect")), // a has one port
        ("RAMPART_REDIRECT(7)", DROP, Some("aborted")), // beyond the port range
    ] {
        submit(&mut a, "a", &counter_prog(1, ret));
        let before = stats(&a, "a");
        assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), action, "{ret}");
        let after = stats(&a, "a");
        if let Some(r) = reason {
            assert_eq!(after.drops[r], before.drops[r] + 1, "{ret}");
        }
    }
}

#[test]
fn a_tenant_cannot_rewrite_its_packet_into_another_tenant() {
    let mut a = agent("", false);
    // Rewrite the IPv4 destination to tenant b's address and pass it on.
    let src = r#"#include "rampart_tenant.h"
int tenant_main(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct iphdr *ip = data + sizeof(struct ethhdr);
    if ((void *)(ip + 1) > end)
        return XDP_DROP;
    ip->daddr = bpf_htonl(0x0a140202);
    return XDP_PASS;
}
"#;
    submit(&mut a, "a", src);
    let (act, out) = run_out(&a, &udp4([10, 20, 1, 2], 9));
    assert_eq!(act, DROP);
    assert_eq!(
        &out[30..34],
        &[10, 20, 2, 2],
        "the rewrite happened and was caught"
    );
    assert_eq!(stats(&a, "a").drops["selector_changed"], 1);
    assert_eq!(stats(&a, "b").packets, 0);
}

#[test]
fn map_state_survives_a_swap_and_a_changed_map_starts_fresh() {
    let mut a = agent("", false);
    submit(&mut a, "a", &counter_prog(1, "XDP_DROP"));
    let g1 = a.generation();
    for _ in 0..3 {
        run(&a, &udp4([10, 20, 1, 2], 9));
    }
    // New code, same map: the count continues.
    let id = a.tenant_id("a").unwrap();
    let info = a
        .install(id, &build(&counter_prog(10, "XDP_DROP")))
        .unwrap();
    assert!(a.generation() > g1);
    assert!(info.maps.iter().all(|m| m.kept), "{:?}", info.maps);
    run(&a, &udp4([10, 20, 1, 2], 9));
    assert_eq!(map_u64(&a, "a", "counts", 0), 13);
    // Another tenant's swap does not touch a's state either.
    submit(&mut a, "b", &counter_prog(1, "XDP_PASS"));
    assert_eq!(map_u64(&a, "a", "counts", 0), 13);
    // A different definition (more entries) is a new map.
    let src = counter_prog(1, "XDP_DROP").replace("max_entries, 1)", "max_entries, 2)");
    let info = a.install(id, &build(&src)).unwrap();
    assert!(info.maps.iter().all(|m| !m.kept));
    run(&a, &udp4([10, 20, 1, 2], 9));
    assert_eq!(map_u64(&a, "a", "counts", 0), 1);
    // Removing the program: packets pass again, map stays.
    assert!(a.remove_program(id).unwrap());
    assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), PASS);
    assert_eq!(map_u64(&a, "a", "counts", 0), 1);
}

#[test]
fn redirects_reach_only_the_tenants_own_ports() {
    let mut a = agent("", false);
    // a owns port 0 (lo); b owns no port. Both ask for port 0.
    submit(&mut a, "a", &counter_prog(1, "RAMPART_REDIRECT(0)"));
    submit(&mut a, "b", &counter_prog(1, "RAMPART_REDIRECT(0)"));
    assert_eq!(run(&a, &udp4([10, 20, 1, 2], 9)), 4);
    assert_eq!(run(&a, &udp4([10, 20, 2, 2], 9)), DROP);
    assert_eq!(stats(&a, "a").verdicts["redirect"], 1);
    assert_eq!(stats(&a, "b").drops["bad_redirect"], 1);
}

#[test]
fn cpu_time_is_charged_per_packet_and_can_be_switched_off() {
    let mut a = agent("", false);
    // A slice is charged when the next boundary closes it: run pairs.
    for _ in 0..4 {
        run(&a, &udp4([10, 20, 1, 2], 9));
    }
    let charged = stats(&a, "a").cpu_ns;
    assert!(charged > 0, "no CPU time charged");
    assert_eq!(stats(&a, "b").cpu_ns, 0);
    a.set_accounting(false).unwrap();
    run(&a, &udp4([10, 20, 1, 2], 9)); // closes the last slice opened while on
    let base = stats(&a, "a").cpu_ns;
    for _ in 0..4 {
        run(&a, &udp4([10, 20, 1, 2], 9));
    }
    assert_eq!(
        stats(&a, "a").cpu_ns,
        base,
        "accounting off: no clock, no charge"
    );
    assert_eq!(stats(&a, "a").packets, 9);
    // Fairness cannot run without it.
    assert!(a
        .set_fairness(true)
        .unwrap_err()
        .to_string()
        .contains("accounting"));
}
