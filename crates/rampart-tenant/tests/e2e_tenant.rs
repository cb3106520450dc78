//! netns end-to-end tests: real services in tenant namespaces reached by
//! real clients through the infrastructure program on host0; atomic swaps
//! under traffic; redirects to a tenant's own port; accounting of the
//! kernel path.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use rampart_lab::testing::TestLab;
use rampart_lab::traffic::{Limit, TenantTraffic};
use rampart_lab::Lab;
use rampart_tenant::services;

fn tenant_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(Lab::tenant_v4(i))
}

#[test]
fn services_are_reached_through_the_infrastructure_program() {
    let lab = TestLab::up("tsvc", 3);
    let mut a = lab_agent(&lab, 3, "");
    let _web = services::nginx(&lab.tenant_ns(1), tenant_addr(1)).expect("nginx");
    let _dns = services::dnsmasq(
        &lab.tenant_ns(2),
        tenant_addr(2),
        Ipv4Addr::new(192, 0, 2, 53),
    )
    .expect("dnsmasq");
    let sink = services::UdpSink::start(&lab.tenant_ns(3), SocketAddrV4::new(tenant_addr(3), 9000))
        .unwrap();
    let sink2 =
        services::UdpSink::start(&lab.tenant_ns(3), SocketAddrV4::new(tenant_addr(3), 9001))
            .unwrap();
    // t3 filters: UDP to port 9001 is dropped in XDP, the rest passes.
    submit(
        &mut a,
        "t3",
        r#"#include "rampart_tenant.h"
int tenant_main(struct xdp_md *ctx)
{
    struct pkt_info pi;
    if (parse_packet((void *)(long)ctx->data, (void *)(long)ctx->data_end, &pi) != PARSE_OK)
        return XDP_DROP;
    if (pi.l4_proto == IPPROTO_UDP && pi.dport == bpf_htons(9001))
        return XDP_DROP;
    return XDP_PASS;
}
"#,
    );
    let wan = lab.wan_ns();
    let page = in_ns(
        &wan,
        "curl",
        &["-s", "--max-time", "5", "http://10.20.1.2/"],
    );
    assert_eq!(page, format!("hello from {}\n", lab.tenant_ns(1)));
    let ans = in_ns(
        &wan,
        "dig",
        &[
            "+short",
            "+time=2",
            "+tries=3",
            "@10.20.2.2",
            "example.com",
            "A",
        ],
    );
    assert_eq!(ans.trim(), "192.0.2.53");
    // UDP from wan to both ports.
    rampart_dataplane::netns::run_in(Some(&wan), || {
        let s = std::net::UdpSocket::bind("10.10.0.1:0").unwrap();
        for _ in 0..50 {
            s.send_to(b"x", "10.20.3.2:9000").unwrap();
            s.send_to(b"y", "10.20.3.2:9001").unwrap();
        }
        Ok(())
    })
    .unwrap();
    let t0 = std::time::Instant::now();
    while sink.packets() < 50 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(sink.packets(), 50);
    assert_eq!(sink2.packets(), 0, "t3's program drops port 9001");
    let s1 = stats(&a, "t1");
    let s2 = stats(&a, "t2");
    let s3 = stats(&a, "t3");
    assert!(
        s1.packets > 0 && s1.verdicts["pass"] == s1.packets,
        "{s1:?}"
    );
    assert!(
        s2.packets > 0 && s2.verdicts["pass"] == s2.packets,
        "{s2:?}"
    );
    assert_eq!((s3.verdicts["pass"], s3.verdicts["drop"]), (50, 50));
    // Tenants without a program are accounted too, kernel path included.
    for s in [&s1, &s2, &s3] {
        assert!(s.cpu_ns > 0, "{} charged nothing", s.name);
        assert!(s.stack_ns > 0, "{}: no kernel-path time charged", s.name);
    }
}

#[test]
fn a_swap_under_traffic_loses_and_misdelivers_nothing() {
    let lab = TestLab::up("tswp", 2);
    let mut a = lab_agent(&lab, 2, "");
    submit(&mut a, "t1", &counter_prog(1, "XDP_DROP"));
    submit(&mut a, "t2", &counter_prog(1, "XDP_DROP"));
    let v1 = build(&counter_prog(1, "XDP_DROP"));
    let v2 = build(&counter_prog(1, "1 /* XDP_DROP */"));
    let traffic = TenantTraffic::new(&lab, &[tenant_addr(1), tenant_addr(2)], 64, 9).unwrap();
    let cancel = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let g0 = a.generation();
    let lost0 = wire_losses(&lab);
    let (report, swaps) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let r = traffic.run(Limit::Count(300_000), Some(150_000.0), 0, false, &cancel);
            done.store(true, Ordering::Relaxed);
            r
        });
        // Swap while traffic flows: the tenants' programs alternate between
        // two builds that count identically (new program, same map), and
        // plain generation swaps in between.
        let mut swaps = 0;
        while !done.load(Ordering::Relaxed) {
            let t = a
                .tenant_id(if swaps % 2 == 0 { "t1" } else { "t2" })
                .unwrap();
            match swaps % 3 {
                0 => drop(a.install(t, &v1).unwrap()),
                1 => drop(a.install(t, &v2).unwrap()),
                _ => a.reswap().unwrap(),
            }
            swaps += 1;
        }
        (h.join().unwrap().unwrap(), swaps)
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(swaps >= 3, "only {swaps} swaps happened during the traffic");
    eprintln!("{swaps} swaps during the traffic");
    assert!(a.generation() >= g0 + swaps);
    let (c1, c2) = (
        map_u64(&a, "t1", "counts", 0),
        map_u64(&a, "t2", "counts", 0),
    );
    assert_eq!(report.sent, vec![150_000, 150_000]);
    // Every packet that reached the dispatcher — whichever generation ran
    // it — reached its own tenant's program…
    assert_eq!(c1, stats(&a, "t1").packets, "t1 across {swaps} swaps");
    assert_eq!(c2, stats(&a, "t2").packets, "t2 across {swaps} swaps");
    // …and every packet sent reached the dispatcher, except what the lab's
    // wire dropped before host0 (normally none; counted by the veth driver).
    let lost = wire_losses(&lab) - lost0;
    assert_eq!(c1 + c2 + lost, 300_000, "{lost} lost on the wire");
}

#[test]
fn a_redirect_reaches_only_the_tenants_own_interface() {
    let lab = TestLab::up("tred", 2);
    let mut a = lab_agent(&lab, 2, "");
    // Frames redirected into a veth need GRO (or XDP) on the receiving side.
    in_ns(&lab.tenant_ns(1), "ethtool", &["-K", "eth0", "gro", "on"]);
    let link: serde_json::Value = serde_json::from_str(&in_ns(
        &lab.tenant_ns(1),
        "ip",
        &["-j", "link", "show", "eth0"],
    ))
    .unwrap();
    let mac: Vec<u8> = link[0]["address"]
        .as_str()
        .unwrap()
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    let sink =
        services::UdpSink::start(&lab.tenant_ns(1), SocketAddrV4::new(tenant_addr(1), 9)).unwrap();
    let prog = |port: u32| {
        format!(
            r#"#include "rampart_tenant.h"
int tenant_main(struct xdp_md *ctx)
{{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end)
        return XDP_DROP;
    __u8 mac[6] = {{ {}, {}, {}, {}, {}, {} }};
    __builtin_memcpy(eth->h_dest, mac, 6);
    return RAMPART_REDIRECT({port});
}}
"#,
            mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
        )
    };
    submit(&mut a, "t1", &prog(0));
    submit(&mut a, "t2", &prog(0)); // t2's port 0 is t2's own interface, not t1's
    submit(&mut a, "t2", &prog(1)); // and it has no port 1
    let traffic = TenantTraffic::new(&lab, &[tenant_addr(1), tenant_addr(2)], 64, 9).unwrap();
    let cancel = AtomicBool::new(false);
    traffic
        .run(Limit::Count(2000), Some(50_000.0), 0, false, &cancel)
        .unwrap();
    rampart_lab::testing::settle(&lab, 0, 2000, || {
        stats(&a, "t1").packets + stats(&a, "t2").packets
    });
    let (s1, s2) = (stats(&a, "t1"), stats(&a, "t2"));
    assert!(s1.packets > 0 && s2.packets > 0);
    let t0 = std::time::Instant::now();
    while sink.packets() < s1.packets && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s1.verdicts["redirect"], s1.packets);
    assert_eq!(
        sink.packets(),
        s1.packets,
        "every frame t1 redirected arrived on t1's own interface"
    );
    assert_eq!(s2.drops["bad_redirect"], s2.packets, "t2 has no port 1");
    assert_eq!(s1.packets + s2.packets + wire_losses(&lab), 2000);
}

#[test]
fn tenant_traffic_frames_are_valid_for_every_destination() {
    // Programless tenants pass everything to the stack, which checks the
    // IPv4 and UDP checksums before a socket sees a datagram.
    let lab = TestLab::up("tgen", 3);
    let a = lab_agent(&lab, 3, "");
    let sinks: Vec<_> = (1..=3)
        .map(|i| {
            services::UdpSink::start(&lab.tenant_ns(i), SocketAddrV4::new(tenant_addr(i), 9))
                .unwrap()
        })
        .collect();
    let traffic = TenantTraffic::new(
        &lab,
        &[tenant_addr(1), tenant_addr(2), tenant_addr(3)],
        64,
        9,
    )
    .unwrap();
    let r = traffic
        .run(
            Limit::Count(3000),
            Some(30_000.0),
            0,
            false,
            &AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(r.sent, vec![1000, 1000, 1000]);
    rampart_lab::testing::settle(&lab, 0, 3000, || {
        (1..=3).map(|i| stats(&a, &format!("t{i}")).packets).sum()
    });
    let reached: Vec<u64> = (1..=3)
        .map(|i| stats(&a, &format!("t{i}")).packets)
        .collect();
    let t0 = std::time::Instant::now();
    while sinks.iter().zip(&reached).any(|(s, n)| s.packets() < *n)
        && t0.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    for (i, s) in sinks.iter().enumerate() {
        assert!(reached[i] > 0, "tenant {}", i + 1);
        assert_eq!(
            s.packets(),
            reached[i],
            "tenant {}: every datagram passed the kernel's checksum checks",
            i + 1
        );
    }
    assert_eq!(reached.iter().sum::<u64>() + wire_losses(&lab), 3000);
}
