//! Detection against synthetic intervals of each scenario family, with
//! the shipped defaults (no per-scenario tuning): who is blocked, policed
//! or protected, the vector named, no legitimate source banned, no unban
//! during an attack, baselines a ramp cannot poison, state discarded on a
//! configuration change, `attack_end` only after the attack stops.

use proptest::prelude::*;
use rampart_testkit::rng::Rng;

use super::scenario::*;
use super::*;

fn cfg() -> DetectionConfig {
    DetectionConfig::default()
}

/// Warm-up: `n` intervals of the background.
fn warm(sim: &mut Sim, bg: &[Flow], n: usize) {
    sim.run(n, bg, &[]);
    assert!(sim.ever_blocked().is_empty(), "{:?}", sim.ever_blocked());
    assert!(sim.events().is_empty(), "{:?}", sim.events());
}

fn background(rng: &mut Rng, n: u32) -> Vec<Flow> {
    web_clients(rng, 0, n, server())
}

fn with(mut a: Vec<Flow>, b: Vec<Flow>) -> Vec<Flow> {
    a.extend(b);
    a
}

fn flood(kind: Kind, n: u32, pps: f64, size: u64) -> Vec<Flow> {
    (0..n)
        .map(|i| Flow {
            src: attacker(i),
            dst: server(),
            pps,
            size,
            kind,
        })
        .collect()
}

/// No legitimate client was ever blocked or policed.
fn no_legit_touched(sim: &Sim) {
    for v in &sim.verdicts {
        for b in &v.blocks {
            assert!(!is_client(&b.prefix), "legit blocked: {b:?}");
        }
        for p in &v.police {
            assert!(!is_client(&p.prefix), "legit policed: {p:?}");
        }
    }
}

/// Every source of `flows` is covered by a blocked prefix.
fn all_blocked(sim: &Sim, flows: &[Flow]) {
    for f in flows {
        assert!(
            sim.blocked.iter().any(|p| p.contains(&f.src)),
            "{} not blocked; blocked: {:?}",
            f.src,
            sim.blocked
        );
    }
}

/// Attack phase: `n` intervals; mitigated within 4 intervals (2 s) of its
/// start, never an unban while it runs.
fn attack(sim: &mut Sim, bg: &[Flow], atk: &[Flow], n: usize) -> usize {
    let start = sim.verdicts.len();
    let unb = sim.unblocked().len();
    sim.run(n, &with(bg.to_vec(), atk.to_vec()), &[]);
    let first = sim
        .first_block(|p| atk.iter().any(|f| p.contains(&f.src)))
        .expect("attack blocked");
    assert!(
        first - start < 4,
        "blocked after {} intervals",
        first - start
    );
    assert_eq!(sim.unblocked().len(), unb, "unban during the attack");
    all_blocked(sim, atk);
    no_legit_touched(sim);
    start
}

/// After the attack stops: `attack_end` no earlier than `attack_end_s`
/// after the last attack interval, then the unbans.
fn end_of_attack(sim: &mut Sim, bg: &[Flow], stop: usize) {
    sim.run(200, bg, &[]);
    let ends: Vec<usize> = sim
        .verdicts
        .iter()
        .enumerate()
        .filter(|(_, v)| v.events.iter().any(|e| e.event == EventKind::AttackEnd))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(ends.len(), 1, "one attack_end: {ends:?}");
    let after = (ends[0] + 1 - stop) as f64 * SECS;
    assert!(
        after >= cfg().attack_end_s,
        "attack_end {after} s after it stopped"
    );
    let unbans = sim.unblocked();
    assert!(!unbans.is_empty(), "attackers unbanned once they stopped");
    assert!(
        unbans.iter().all(|(i, _)| *i >= ends[0]),
        "unban before attack_end"
    );
    assert!(sim.blocked.is_empty(), "left blocked: {:?}", sim.blocked);
}

#[test]
fn legit_background_heavy_client_nat_and_flash_crowd_are_left_alone() {
    let mut rng = Rng::new(1);
    let mut bg = background(&mut rng, 60);
    // One wrk client at full speed on keep-alive connections.
    bg.push(Flow {
        src: client(5000),
        dst: server(),
        pps: 80_000.0,
        size: 300,
        kind: Kind::Web { conns: 0.0 },
    });
    // A NAT gateway carrying many users.
    bg.push(Flow {
        src: client(5001),
        dst: server(),
        pps: 6000.0,
        size: 700,
        kind: Kind::Web { conns: 400.0 },
    });
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 200);
    // Flash crowd: 600 new sources at 10–30× the normal rate.
    let crowd: Vec<Flow> = (0..600)
        .map(|i| Flow {
            src: client(10_000 + i),
            dst: server(),
            pps: rng.range(400.0, 1200.0),
            size: 600,
            kind: Kind::Web {
                conns: rng.range(20.0, 60.0),
            },
        })
        .collect();
    sim.run(120, &with(bg.clone(), crowd), &[]);
    // The wrk client starts over: hundreds of handshakes at once.
    bg[60].kind = Kind::Web { conns: 2000.0 };
    sim.run(4, &bg, &[]);
    assert!(sim.ever_blocked().is_empty(), "{:?}", sim.ever_blocked());
    assert!(sim.verdicts.iter().all(|v| v.police.is_empty()));
    assert!(sim.events().is_empty(), "{:?}", sim.events());
    assert!(sim.protected.is_empty());
    // The level is a statistic of many sources, not the heaviest one.
    let level = sim.det.source_level(&host(server()));
    assert!(level < 200.0, "level {level}");
    assert!(level >= 50.0);
}

#[test]
fn syn_flood_with_rsts_from_five_sources() {
    let mut rng = Rng::new(2);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk = flood(Kind::SynRst, 5, 40_000.0, 60);
    let start = attack(&mut sim, &bg, &atk, 80);
    let blocks = sim.ever_blocked();
    assert_eq!(blocks.len(), 5, "{blocks:?}");
    assert!(blocks.iter().all(|(_, v)| v == "syn_flood"), "{blocks:?}");
    let st = sim.events_of(EventKind::AttackStart);
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!(st[0].vector, "syn_flood");
    assert_eq!(st[0].victim, host(server()));
    assert!(sim.protected.is_empty(), "not spoofed: no cookies");
    // attack_end only after it stops.
    assert!(sim.events_of(EventKind::AttackEnd).is_empty());
    end_of_attack(&mut sim, &bg, start + 80);
    let end = sim.events_of(EventKind::AttackEnd);
    assert_eq!(end[0].action.blocked, 5);
    assert!(end[0].peak_pps > 100_000.0, "{:?}", end[0]);
}

#[test]
fn spoofed_syn_flood_gets_cookies_not_a_blacklist() {
    let mut rng = Rng::new(3);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let sp = [Spoofed {
        dst: server(),
        pps: 1_000_000.0,
    }];
    let start = sim.verdicts.len();
    sim.run(30, &bg, &sp);
    let on = sim
        .verdicts
        .iter()
        .position(|v| {
            v.protect
                .iter()
                .any(|c| c.victim == host(server()) && c.flags.syn_cookies && c.flags.ack_guard)
        })
        .expect("cookies on");
    assert!(on - start < 4, "cookies after {} intervals", on - start);
    assert!(sim.ever_blocked().is_empty(), "{:?}", sim.ever_blocked());
    no_legit_touched(&sim);
    let st = sim.events_of(EventKind::AttackStart);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].vector, "syn_flood");
    let upd = sim.events();
    assert!(upd.iter().any(|e| e.action.syn_cookies), "{upd:?}");
    assert!(
        upd.iter().any(|e| e.distinct_sources > 400_000.0),
        "{upd:?}"
    );
    assert!(upd.iter().all(|e| e.sources == 0), "{upd:?}");
    // Off again after the flood, once the hold time passed.
    let stop = sim.verdicts.len();
    sim.run(120, &bg, &[]);
    let off = sim
        .verdicts
        .iter()
        .position(|v| v.protect.iter().any(|c| c.flags.is_off()))
        .expect("cookies off");
    assert!((off + 1 - stop) as f64 * SECS >= cfg().protect_hold_s);
    assert!(sim.protected.is_empty());
    assert_eq!(sim.events_of(EventKind::AttackEnd).len(), 1);
}

#[test]
fn syn_flood_spread_over_sources_too_slow_to_attribute_gets_cookies() {
    // 4,096 real sources at ~12 SYN/s each (under the per-source floor),
    // 50,000 SYN/s in all: not spoofed (distinct ≪ SYNs), not attributable.
    let mut rng = Rng::new(23);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk = flood(Kind::SynRst, 4096, 24.0, 60);
    sim.run(20, &with(bg.clone(), atk), &[]);
    let p = sim
        .protected
        .get(&host(server()))
        .copied()
        .unwrap_or_default();
    assert!(p.syn_cookies && p.ack_guard, "{p:?}");
    assert!(
        sim.ever_blocked().is_empty(),
        "{:?}",
        sim.ever_blocked().len()
    );
    no_legit_touched(&sim);
    assert_eq!(sim.events_of(EventKind::AttackStart)[0].vector, "syn_flood");
}

#[test]
fn hundreds_of_low_rate_reflectors_per_vector_are_caught_and_named() {
    for (c, name) in [
        (0u8, "dns"),
        (1, "ntp"),
        (2, "memcached"),
        (3, "ssdp"),
        (4, "cldap"),
    ] {
        let mut rng = Rng::new(4);
        let bg = background(&mut rng, 50);
        let mut sim = Sim::new(&cfg());
        warm(&mut sim, &bg, 60);
        let atk = flood(Kind::Amp(c), 300, 100.0, 1200);
        attack(&mut sim, &bg, &atk, 40);
        let want = format!("udp_amplification/{name}");
        let blocks = sim.ever_blocked();
        assert!(blocks.iter().all(|(_, v)| *v == want), "{blocks:?}");
        // 300 consecutive addresses: whole /24s aggregated (no collateral).
        assert!(blocks.len() < 300, "aggregated: {}", blocks.len());
        let st = sim.events_of(EventKind::AttackStart);
        assert_eq!(st.len(), 1);
        assert_eq!(st[0].vector, want);
        let last = sim.events().last().cloned().unwrap().clone();
        assert!(!last.action.aggregated.is_empty(), "{last:?}");
        assert!(last.action.aggregated.iter().all(|a| a.collateral == 0));
    }
}

#[test]
fn five_amplification_vectors_at_once_are_all_named() {
    let mut rng = Rng::new(5);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk: Vec<Flow> = (0..5u8)
        .flat_map(|c| {
            (0..300).map(move |i| Flow {
                // One /24 per vector: 172.16.c.0/24 .. and a few more.
                src: attacker(u32::from(c) << 16 | i),
                dst: server(),
                pps: 100.0,
                size: 1200,
                kind: Kind::Amp(c),
            })
        })
        .collect();
    attack(&mut sim, &bg, &atk, 20);
    let st = sim.events();
    let last = st.last().unwrap();
    for n in ["dns", "ntp", "memcached", "ssdp", "cldap"] {
        let want = format!("udp_amplification/{n}");
        assert!(last.vectors.contains(&want), "{want} in {:?}", last.vectors);
    }
}

#[test]
fn icmp_flood() {
    let mut rng = Rng::new(6);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk = flood(Kind::Icmp, 3, 30_000.0, 98);
    let start = attack(&mut sim, &bg, &atk, 40);
    assert!(sim.ever_blocked().iter().all(|(_, v)| v == "icmp_flood"));
    assert_eq!(
        sim.events_of(EventKind::AttackStart)[0].vector,
        "icmp_flood"
    );
    end_of_attack(&mut sim, &bg, start + 40);
}

#[test]
fn fragment_and_udp_floods() {
    for (kind, name, pps) in [
        (Kind::Frag, "fragment_flood", 10_000.0),
        (Kind::Udp, "udp_flood", 40_000.0),
    ] {
        let mut rng = Rng::new(6);
        let bg = background(&mut rng, 50);
        let mut sim = Sim::new(&cfg());
        warm(&mut sim, &bg, 60);
        let atk = flood(kind, 4, pps, 1400);
        attack(&mut sim, &bg, &atk, 20);
        assert!(
            sim.ever_blocked().iter().all(|(_, v)| v == name),
            "{:?}",
            sim.ever_blocked()
        );
        assert_eq!(sim.events_of(EventKind::AttackStart)[0].vector, name);
    }
}

#[test]
fn ack_flood_turns_the_ack_guard_on_and_blocks_nobody() {
    let mut rng = Rng::new(7);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk = flood(Kind::Ack, 5, 30_000.0, 60);
    sim.run(20, &with(bg.clone(), atk), &[]);
    let g = sim
        .protected
        .get(&host(server()))
        .copied()
        .unwrap_or_default();
    assert!(g.ack_guard && !g.syn_cookies, "{g:?}");
    assert!(sim.ever_blocked().is_empty());
    no_legit_touched(&sim);
    assert_eq!(sim.events_of(EventKind::AttackStart)[0].vector, "ack_flood");
    sim.run(200, &bg, &[]);
    assert!(sim.protected.is_empty());
    assert_eq!(sim.events_of(EventKind::AttackEnd).len(), 1);
}

#[test]
fn carpet_over_a_v4_slash24() {
    let mut rng = Rng::new(8);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    // 40 attackers, 800 pps each, spread over the 254 addresses of the
    // server's /24: ~126 pps per address, under every floor.
    let atk: Vec<Flow> = (0..40)
        .flat_map(|i| {
            (1..255u8).map(move |d| Flow {
                src: attacker(i * 7),
                dst: server_net(d),
                pps: 800.0 / 254.0,
                size: 98,
                kind: Kind::Icmp,
            })
        })
        .collect();
    attack(&mut sim, &bg, &atk, 20);
    let st = sim.events_of(EventKind::AttackStart);
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!(st[0].vector, "carpet/icmp_flood");
    assert_eq!(st[0].victim.to_string(), "10.20.0.0/24");
    // The API's one-pass levels equal the per-victim ones (the /24 included).
    let levels = sim.det.levels();
    assert!(levels.len() > 254, "{}", levels.len());
    for (k, l) in &levels {
        assert_eq!(*l, sim.det.level(k), "{k}");
    }
    assert!(sim
        .ever_blocked()
        .iter()
        .all(|(_, v)| v == "carpet/icmp_flood"));
}

#[test]
fn spoofed_syn_carpet_over_a_v4_slash24_protects_every_address() {
    let mut rng = Rng::new(24);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    // hping3 -S --rand-source --rand-dest: 50,000 SYN/s over the /24;
    // first half of it, then all of it.
    let sp = |n: u8| -> Vec<Spoofed> {
        (1..=n)
            .map(|d| Spoofed {
                dst: server_net(d),
                pps: 50_000.0 / f64::from(n),
            })
            .collect()
    };
    sim.run(10, &bg, &sp(127));
    sim.run(20, &bg, &sp(254));
    for d in 1..=254u8 {
        let p = sim.protected.get(&host(server_net(d))).copied();
        assert!(
            p.is_some_and(|p| p.syn_cookies && p.ack_guard),
            "{d}: {p:?}"
        );
    }
    assert!(sim.ever_blocked().is_empty());
    let st = sim.events_of(EventKind::AttackStart);
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!(st[0].vector, "carpet/syn_flood");
    // The /24 itself is not a data-path victim.
    assert!(sim
        .verdicts
        .iter()
        .flat_map(|v| &v.protect)
        .all(|c| c.victim.len() == 32));
    sim.run(200, &bg, &[]);
    assert!(sim.protected.is_empty(), "{:?}", sim.protected.len());
    assert_eq!(sim.events_of(EventKind::AttackEnd).len(), 1);
}

#[test]
fn carpet_over_a_v6_slash64() {
    let mut rng = Rng::new(9);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk: Vec<Flow> = (0..10)
        .flat_map(|i| {
            (0..200u16).map(move |d| Flow {
                src: attacker6(i),
                dst: server6_net(d),
                pps: 10.0,
                size: 1200,
                kind: Kind::Amp(1),
            })
        })
        .collect();
    attack(&mut sim, &bg, &atk, 20);
    let st = sim.events_of(EventKind::AttackStart);
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!(st[0].vector, "carpet/udp_amplification/ntp");
    assert_eq!(st[0].victim.to_string(), "fd10::/64");
}

#[test]
fn pulse_attack_is_one_attack_without_unbans_in_its_pauses() {
    let mut rng = Rng::new(10);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk = flood(Kind::SynRst, 5, 30_000.0, 60);
    let on = with(bg.clone(), atk.clone());
    for _ in 0..8 {
        sim.run(8, &on, &[]);
        sim.run(8, &bg, &[]);
    }
    let stop = sim.verdicts.len() - 8;
    assert!(sim.unblocked().is_empty());
    all_blocked(&sim, &atk);
    assert_eq!(sim.events_of(EventKind::AttackStart).len(), 1);
    assert!(sim.events_of(EventKind::AttackEnd).is_empty());
    no_legit_touched(&sim);
    end_of_attack(&mut sim, &bg, stop);
}

#[test]
fn slow_ramp_does_not_poison_the_baselines() {
    let mut rng = Rng::new(11);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    // A UDP flood ramping from 0 to 200 kpps over five minutes.
    let steps = 600;
    let mut detected = None;
    for i in 0..steps {
        let pps = 200_000.0 * f64::from(i) / f64::from(steps);
        let atk = flood(Kind::Udp, 50, pps / 50.0, 200);
        sim.step(&with(bg.clone(), atk), &[]);
        if detected.is_none() && !sim.blocked.is_empty() {
            detected = Some((i, pps));
        }
    }
    let (_, at) = detected.expect("ramp detected");
    let floor = cfg().floors.udp_flood;
    // Caught as soon as it crossed the floor (the baseline could not grow
    // past floor / multiplier meanwhile).
    assert!(at < floor * 1.1, "detected at {at} pps");
    let b = sim.det.baseline(&host(server()), Vector::UdpFlood);
    assert!(b < floor / cfg().multiplier, "baseline {b}");
    no_legit_touched(&sim);
    // And a SYN ramp the same.
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    for i in 0..steps {
        let pps = 20_000.0 * f64::from(i) / f64::from(steps);
        sim.step(
            &with(bg.clone(), flood(Kind::SynRst, 5, pps / 5.0, 60)),
            &[],
        );
    }
    all_blocked(&sim, &flood(Kind::SynRst, 5, 1.0, 60));
    let b = sim.det.baseline(&host(server()), Vector::SynFlood);
    assert!(
        b < cfg().floors.syn_flood / cfg().multiplier,
        "baseline {b}"
    );
}

#[test]
fn no_unban_while_the_attack_goes_on_from_other_sources() {
    let mut rng = Rng::new(22);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let first = flood(Kind::SynRst, 5, 40_000.0, 60);
    attack(&mut sim, &bg, &first, 10);
    // The first five stop; five others carry on for four minutes, far
    // longer than the hold time.
    let second: Vec<Flow> = (100..105)
        .map(|i| Flow {
            src: attacker(i),
            ..first[0]
        })
        .collect();
    sim.run(480, &with(bg.clone(), second.clone()), &[]);
    assert!(sim.unblocked().is_empty(), "{:?}", sim.unblocked());
    all_blocked(&sim, &first);
    all_blocked(&sim, &second);
    let stop = sim.verdicts.len();
    end_of_attack(&mut sim, &bg, stop);
}

#[test]
fn attack_running_at_start_without_state() {
    let mut rng = Rng::new(12);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    let atk = flood(Kind::SynRst, 5, 40_000.0, 60);
    attack(&mut sim, &bg, &atk, 40);
    assert_eq!(sim.ever_blocked().len(), 5);
    // Nothing was learned from the flood.
    assert_eq!(sim.det.baseline(&host(server()), Vector::SynFlood), 0.0);
}

/// A policed source restored from the state file keeps its limit through
/// the first intervals after a restart (before detection has seen the
/// attack again), and is unpoliced once the attack is over.
#[test]
fn restart_keeps_policed_sources_until_the_attack_is_judged() {
    let mut rng = Rng::new(19);
    let mut bg = background(&mut rng, 50);
    bg.push(Flow {
        src: client(7000),
        dst: server(),
        pps: 50.0,
        size: 600,
        kind: Kind::Web { conns: 2.0 },
    });
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let mut atk = flood(Kind::Udp, 4, 40_000.0, 1400);
    atk.push(Flow {
        src: client(7000),
        dst: server(),
        pps: 3000.0,
        size: 1200,
        kind: Kind::Udp,
    });
    sim.run(20, &with(bg.clone(), atk.clone()), &[]);
    assert_eq!(sim.policed.len(), 1, "{:?}", sim.policed);
    let saved = sim.det.learned();
    assert_eq!(saved.policed.len(), 1);

    let mut det = Detection::new(&cfg(), "eth0").unwrap();
    det.restore(&saved);
    let mut sim2 = Sim::with(det);
    sim2.blocked = sim.blocked.clone();
    sim2.policed = sim.policed.clone();
    sim2.run(6, &with(bg.clone(), atk), &[]);
    let un: Vec<_> = sim2.verdicts.iter().flat_map(|v| &v.unpolice).collect();
    assert!(un.is_empty(), "unpoliced right after the restart: {un:?}");
    assert_eq!(sim2.policed.len(), 1);
    sim2.run(200, &bg, &[]);
    assert!(sim2.policed.is_empty());
}

#[test]
fn restart_with_state_keeps_blocks_and_baselines() {
    let mut rng = Rng::new(13);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 100);
    let atk = flood(Kind::SynRst, 5, 40_000.0, 60);
    attack(&mut sim, &bg, &atk, 20);
    let saved = sim.det.learned();
    let text = serde_json::to_string(&saved).unwrap();
    let back: Learned = serde_json::from_str(&text).unwrap();
    assert_eq!(back, saved);
    assert_eq!(back.blocked.len(), 5);
    // Restart: same configuration and interface.
    let mut det = Detection::new(&cfg(), "eth0").unwrap();
    let r = det.restore(&back);
    assert!(matches!(r, Restore::Restored { blocked: 5, .. }), "{r:?}");
    assert!(det.source_level(&host(server())) > 0.0);
    let mut sim2 = Sim::with(det);
    sim2.blocked = sim.blocked.clone();
    sim2.run(60, &with(bg.clone(), atk.clone()), &[]);
    // Still blocked; the flood (now only dropped traffic) is an attack.
    assert!(sim2.unblocked().is_empty());
    all_blocked(&sim2, &atk);
    assert_eq!(sim2.events_of(EventKind::AttackStart).len(), 1);
    no_legit_touched(&sim2);
    let stop = sim2.verdicts.len();
    end_of_attack(&mut sim2, &bg, stop);
}

#[test]
fn restart_with_state_from_another_config_starts_fresh_and_still_blocks() {
    let mut rng = Rng::new(14);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 200);
    let saved = sim.det.learned();
    assert!(!saved.victims.is_empty());
    let mut other = cfg();
    other.multiplier = 5.0;
    let mut det = Detection::new(&other, "eth0").unwrap();
    match det.restore(&saved) {
        Restore::Fresh { reason } => {
            assert!(reason.contains("another configuration"), "{reason}")
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(det.baseline(&host(server()), Vector::SynFlood), 0.0);
    assert_eq!(
        det.source_level(&host(server())),
        other.source_level_min_pps
    );
    // Another interface is another configuration too.
    let mut det2 = Detection::new(&cfg(), "eth1").unwrap();
    assert!(matches!(det2.restore(&saved), Restore::Fresh { .. }));
    // The attack running at the restart is blocked on the floors.
    let mut sim2 = Sim::with(det);
    let atk = flood(Kind::SynRst, 5, 40_000.0, 60);
    attack(&mut sim2, &bg, &atk, 20);
}

#[test]
fn nat_source_and_heavy_client_under_a_syn_flood_are_not_blocked() {
    let mut rng = Rng::new(15);
    let mut bg = background(&mut rng, 50);
    bg.push(Flow {
        src: client(5000),
        dst: server(),
        pps: 80_000.0,
        size: 300,
        kind: Kind::Web { conns: 0.0 },
    });
    bg.push(Flow {
        src: client(5001),
        dst: server(),
        pps: 6000.0,
        size: 700,
        kind: Kind::Web { conns: 400.0 },
    });
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk = flood(Kind::SynRst, 5, 40_000.0, 60);
    attack(&mut sim, &bg, &atk, 40);
    assert_eq!(sim.ever_blocked().len(), 5);
}

#[test]
fn port_scan_fast_and_slow() {
    for (ports, pps) in [(100u16, 200.0), (10, 20.0)] {
        let mut rng = Rng::new(16);
        let bg = background(&mut rng, 50);
        let mut sim = Sim::new(&cfg());
        warm(&mut sim, &bg, 60);
        let scan = vec![Flow {
            src: attacker(99),
            dst: server(),
            pps,
            size: 60,
            kind: Kind::Scan { ports },
        }];
        sim.run(30, &with(bg.clone(), scan), &[]);
        let b = sim.ever_blocked();
        assert_eq!(
            b,
            vec![(host(attacker(99)), "port_scan".to_string())],
            "{ports}"
        );
        assert_eq!(sim.events_of(EventKind::AttackStart)[0].vector, "port_scan");
        no_legit_touched(&sim);
    }
}

#[test]
fn scan_plus_flood() {
    let mut rng = Rng::new(17);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let mut atk = flood(Kind::SynRst, 5, 40_000.0, 60);
    atk.push(Flow {
        src: attacker(99),
        dst: server(),
        pps: 400.0,
        size: 60,
        kind: Kind::Scan { ports: 200 },
    });
    attack(&mut sim, &bg, &atk, 20);
    let b = sim.ever_blocked();
    assert!(
        b.contains(&(host(attacker(99)), "port_scan".into())),
        "{b:?}"
    );
    assert_eq!(
        b.iter().filter(|(_, v)| v == "syn_flood").count(),
        5,
        "{b:?}"
    );
}

#[test]
fn whitelisted_sources_are_never_blocked() {
    let mut rng = Rng::new(18);
    let bg = background(&mut rng, 50);
    let mut c = cfg();
    c.whitelist = vec!["172.16.0.0/30".into()];
    let mut sim = Sim::new(&c);
    warm(&mut sim, &bg, 60);
    sim.run(20, &with(bg, flood(Kind::SynRst, 5, 40_000.0, 60)), &[]);
    let b = sim.ever_blocked();
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].0, host(attacker(4)));
}

#[test]
fn a_udp_flood_polices_known_clients_and_blocks_the_rest() {
    let mut rng = Rng::new(19);
    let mut bg = background(&mut rng, 50);
    // A known client (it completes handshakes) that also sends UDP.
    bg.push(Flow {
        src: client(7000),
        dst: server(),
        pps: 50.0,
        size: 600,
        kind: Kind::Web { conns: 2.0 },
    });
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let mut atk = flood(Kind::Udp, 4, 40_000.0, 1400);
    atk.push(Flow {
        src: client(7000),
        dst: server(),
        pps: 3000.0,
        size: 1200,
        kind: Kind::Udp,
    });
    sim.run(20, &with(bg.clone(), atk), &[]);
    let b = sim.ever_blocked();
    assert_eq!(b.len(), 4, "{b:?}");
    let p: Vec<_> = sim.verdicts.iter().flat_map(|v| &v.police).collect();
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].prefix, host(client(7000)));
    assert!(p[0].rate_pps >= cfg().police_min_pps);
    assert_eq!(p[0].scope, PoliceScope::Udp, "only its UDP is limited");
    // Unpoliced when the attack ends.
    sim.run(200, &bg, &[]);
    assert!(sim.policed.is_empty());
}

#[test]
fn aggregation_is_refused_when_it_would_block_known_clients() {
    let mut rng = Rng::new(20);
    // Legit clients inside the attackers' /24 (172.16.0.200..).
    let mut bg = background(&mut rng, 50);
    bg.extend((0..3).map(|i| Flow {
        src: attacker(200 + i),
        dst: server(),
        pps: 30.0,
        size: 600,
        kind: Kind::Web { conns: 2.0 },
    }));
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    sim.run(20, &with(bg, flood(Kind::Icmp, 40, 500.0, 98)), &[]);
    let b = sim.ever_blocked();
    assert_eq!(b.len(), 40, "no /24: {b:?}");
    assert!(b.iter().all(|(p, _)| p.len() == 32));
}

#[test]
fn a_data_path_without_completions_or_victim_records_still_works() {
    // Completions estimated from the pairs' other segments; victims from
    // the pairs. Legitimate traffic untouched, SYN floods (few sources,
    // spoofed) and ICMP floods mitigated.
    let mut rng = Rng::new(26);
    let mut bg = background(&mut rng, 60);
    bg.push(Flow {
        src: client(5001),
        dst: server(),
        pps: 6000.0,
        size: 700,
        kind: Kind::Web { conns: 400.0 },
    });
    let crowd: Vec<Flow> = (0..300)
        .map(|i| Flow {
            src: client(10_000 + i),
            dst: server(),
            pps: 800.0,
            size: 600,
            kind: Kind::Web { conns: 40.0 },
        })
        .collect();
    let mut sim = Sim::new(&cfg());
    sim.pairs_only = true;
    warm(&mut sim, &bg, 60);
    sim.run(40, &with(bg.clone(), crowd), &[]);
    assert!(sim.ever_blocked().is_empty());
    assert!(sim.events().is_empty());
    for atk in [
        flood(Kind::SynRst, 5, 40_000.0, 60),
        flood(Kind::Icmp, 3, 30_000.0, 98),
    ] {
        let mut s2 = Sim::new(&cfg());
        s2.pairs_only = true;
        warm(&mut s2, &bg, 60);
        attack(&mut s2, &bg, &atk, 20);
    }
    let mut s3 = Sim::new(&cfg());
    s3.pairs_only = true;
    warm(&mut s3, &bg, 60);
    s3.run(
        20,
        &bg,
        &[Spoofed {
            dst: server(),
            pps: 1_000_000.0,
        }],
    );
    assert!(s3
        .protected
        .get(&host(server()))
        .is_some_and(|p| p.syn_cookies));
    assert!(s3.ever_blocked().is_empty());
    no_legit_touched(&s3);
}

#[test]
fn views_and_gauges_show_baselines_and_attacks() {
    let mut rng = Rng::new(21);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    sim.run(4, &with(bg, flood(Kind::Icmp, 3, 30_000.0, 98)), &[]);
    let v = sim.det.victims();
    assert_eq!(v[0].victim, host(server()));
    assert!(v[0].under_attack);
    let icmp = v[0]
        .vectors
        .iter()
        .find(|x| x.vector == "icmp_flood")
        .unwrap();
    assert!(icmp.anomalous && icmp.current_pps > icmp.threshold_pps);
    let g = sim.det.gauges(8);
    let get = |n: &str| {
        g.iter()
            .find(|x| x.name == n && x.victim.is_empty())
            .unwrap()
            .value
    };
    assert_eq!(get("attacks"), 1.0);
    assert_eq!(get("blocked"), 3.0);
    assert!(g
        .iter()
        .any(|x| x.name == "threshold_pps" && x.vector == "icmp_flood" && x.value == 2000.0));
}

#[test]
fn bounded_ewma_rises_at_most_the_bound_and_tracks_a_high_level() {
    let mut b = 0.0;
    for _ in 0..1000 {
        b = bounded_ewma(b, 1e6, 0.5, 10.0);
    }
    assert_eq!(b, 10_000.0);
    let mut b = 100.0;
    for i in 0..10_000 {
        b = bounded_ewma(b, if i % 10 == 0 { 200.0 } else { 100.0 }, 0.05, 1e9);
    }
    assert!(b > 110.0, "{b}");
}

fn legit_flows(n: u32, heavy: f64, nat_conns: f64, seed: u64) -> Vec<Flow> {
    let mut rng = Rng::new(seed);
    let mut bg = web_clients(&mut rng, 0, n, server());
    bg.push(Flow {
        src: client(5000),
        dst: server(),
        pps: heavy,
        size: 300,
        kind: Kind::Web { conns: 0.0 },
    });
    bg.push(Flow {
        src: client(5001),
        dst: server(),
        pps: nat_conns * 15.0,
        size: 700,
        kind: Kind::Web { conns: nat_conns },
    });
    bg
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever normal traffic a victim sees, its baseline rises no faster
    /// than the bound: after n intervals from nothing,
    /// b ≤ F·((1 + c)ⁿ − 1) with F = floor / multiplier and
    /// c = growth_per_min · secs / 60; and never above the highest sample.
    #[test]
    fn prop_baseline_growth_is_bounded(
        rates in proptest::collection::vec(0.0f64..1.0, 20..400),
        growth in 0.0f64..2.0,
    ) {
        let mut c = cfg();
        c.baseline_growth_per_min = growth;
        let mut sim = Sim::new(&c);
        let floor = c.floors.udp_flood;
        let mut max: f64 = 0.0;
        for (n, r) in rates.iter().enumerate() {
            // Under the floor: every interval is normal and learned.
            let pps = r * floor * 0.99;
            max = max.max(pps);
            sim.step(&flood(Kind::Udp, 4, pps / 4.0, 200), &[]);
            let b = sim.det.baseline(&host(server()), Vector::UdpFlood);
            let f = floor / c.multiplier;
            let k = growth * SECS / 60.0;
            let bound = f * ((1.0 + k).powi(n as i32 + 1) - 1.0);
            prop_assert!(b <= bound * (1.0 + 1e-9) + 1e-9, "n={} b={} bound={}", n, b, bound);
            prop_assert!(b <= max + 1e-9);
        }
        prop_assert!(sim.ever_blocked().is_empty());
    }

    /// Any legitimate background (clients completing handshakes, a heavy
    /// client, a NAT gateway, a flash crowd) is never blocked or policed.
    #[test]
    fn prop_legit_traffic_is_never_touched(
        n in 10u32..200,
        heavy in 100.0f64..200_000.0,
        nat in 1.0f64..2000.0,
        crowd in 0u32..800,
        mult in 10.0f64..30.0,
        seed in 0u64..1000,
    ) {
        let bg = legit_flows(n, heavy, nat, seed);
        let mut sim = Sim::new(&cfg());
        sim.run(30, &bg, &[]);
        let mut rng = Rng::new(seed + 1);
        let crowd: Vec<Flow> = (0..crowd).map(|i| Flow {
            src: client(10_000 + i),
            dst: server(),
            pps: 40.0 * mult,
            size: 600,
            kind: Kind::Web { conns: rng.range(1.0, 3.0) * mult },
        }).collect();
        sim.run(30, &with(bg, crowd), &[]);
        prop_assert!(sim.ever_blocked().is_empty());
        prop_assert!(sim.verdicts.iter().all(|v| v.police.is_empty()));
        prop_assert!(sim.events().is_empty());
    }

    /// Any volumetric attack above twice its floor, over any legitimate
    /// background, is blocked within 2 s, named, and costs no legitimate
    /// source; nothing is unbanned while it runs; attack_end comes only
    /// after it stops.
    #[test]
    fn prop_attacks_are_mitigated_named_and_end_after_they_stop(
        n in 10u32..120,
        heavy in 100.0f64..100_000.0,
        which in 0usize..5,
        sources in 1u32..40,
        factor in 2.0f64..50.0,
        secs_on in 10usize..60,
        seed in 0u64..1000,
    ) {
        let c = cfg();
        let (kind, floor, name) = [
            (Kind::SynRst, c.floors.syn_flood * 2.0, "syn_flood"),
            (Kind::Icmp, c.floors.icmp_flood, "icmp_flood"),
            (Kind::Amp(1), c.floors.udp_amplification, "udp_amplification/ntp"),
            (Kind::Udp, c.floors.udp_flood, "udp_flood"),
            (Kind::Frag, c.floors.fragment_flood, "fragment_flood"),
        ][which];
        let total = floor * factor;
        // Each source at least the per-source floor.
        let per = (total / f64::from(sources)).max(c.source_min_pps * 2.0);
        let bg = legit_flows(n, heavy, 50.0, seed);
        let mut sim = Sim::new(&c);
        sim.run(40, &bg, &[]);
        let atk = flood(kind, sources, per, 200);
        let start = sim.verdicts.len();
        sim.run(secs_on, &with(bg.clone(), atk.clone()), &[]);
        let first = sim.first_block(|p| atk.iter().any(|f| p.contains(&f.src)));
        prop_assert!(first.is_some_and(|f| f - start < 4), "first {:?}", first);
        for f in &atk {
            prop_assert!(sim.blocked.iter().any(|p| p.contains(&f.src)));
        }
        prop_assert!(sim.unblocked().is_empty());
        let ev = sim.events_of(EventKind::AttackStart);
        prop_assert_eq!(ev.len(), 1);
        prop_assert_eq!(ev[0].vector.as_str(), name);
        prop_assert!(sim.events_of(EventKind::AttackEnd).is_empty());
        for v in &sim.verdicts {
            for b in &v.blocks {
                prop_assert!(!is_client(&b.prefix), "{:?}", b);
            }
        }
        let stop = sim.verdicts.len();
        sim.run(120, &bg, &[]);
        let end = sim.verdicts.iter().position(|v| v.events.iter().any(|e| e.event == EventKind::AttackEnd));
        prop_assert!(end.is_some_and(|e| (e + 1 - stop) as f64 * SECS >= c.attack_end_s));
    }
}

#[test]
fn recorded_intervals_replay_to_the_same_verdicts() {
    let mut rng = Rng::new(25);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    sim.recording = Some(Vec::new());
    warm(&mut sim, &bg, 40);
    let amp: Vec<Flow> = (0..40)
        .map(|i| Flow {
            src: attacker(1000 + i),
            dst: server(),
            pps: 100.0,
            size: 1400,
            kind: Kind::Amp(2),
        })
        .collect();
    let atk = with(flood(Kind::SynRst, 5, 40_000.0, 60), amp);
    sim.run(
        20,
        &with(bg.clone(), atk),
        &[Spoofed {
            dst: server_net(9),
            pps: 200_000.0,
        }],
    );
    sim.run(100, &bg, &[]);
    // JSON lines, as the daemon records them.
    let text: String = sim
        .recording
        .as_ref()
        .unwrap()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    let mut det = Detection::new(&cfg(), "eth0").unwrap();
    for (line, want) in text.lines().zip(&sim.verdicts) {
        let r: Recorded = serde_json::from_str(line).unwrap();
        assert_eq!(&det.observe(&r.interval()), want);
    }
    assert_eq!(text.lines().count(), sim.verdicts.len());
    assert!(sim.verdicts.iter().any(|v| !v.blocks.is_empty()));
    assert!(sim.verdicts.iter().any(|v| !v.protect.is_empty()));
}

/// A heavy client (wrk at full speed, reconnecting every 1,000 requests)
/// whose few new connections sometimes look incomplete is not policed
/// under a SYN flood on its server: its SYNs are far below the rate a
/// policer would allow, and limiting all its packets would cut its
/// established connections. A NAT gateway opening thousands of
/// connections/s with some incomplete is policed, on its SYNs only.
#[test]
fn under_a_syn_flood_policing_limits_only_syns_of_sources_above_the_rate() {
    let mut rng = Rng::new(23);
    let mut bg = background(&mut rng, 50);
    let heavy = client(7000);
    let nat = client(7001);
    bg.push(Flow {
        src: heavy,
        dst: server(),
        pps: 120_000.0,
        size: 200,
        kind: Kind::Web { conns: 60.0 },
    });
    bg.push(Flow {
        src: nat,
        dst: server(),
        pps: 20_000.0,
        size: 400,
        kind: Kind::Web { conns: 4000.0 },
    });
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let mut atk = flood(Kind::SynRst, 40, 3000.0, 60);
    // Handshakes of both that do not complete under the flood.
    for (src, pps) in [(heavy, 40.0), (nat, 2000.0)] {
        atk.push(Flow {
            src,
            dst: server(),
            pps,
            size: 60,
            kind: Kind::SynRst,
        });
    }
    sim.run(20, &with(bg, atk), &[]);
    let blocked: Vec<_> = sim.ever_blocked().into_iter().map(|b| b.0).collect();
    assert!(
        !blocked.contains(&host(heavy)) && !blocked.contains(&host(nat)),
        "{blocked:?}"
    );
    let p: Vec<_> = sim.verdicts.iter().flat_map(|v| &v.police).collect();
    assert!(
        p.iter().all(|p| p.prefix != host(heavy)),
        "heavy client policed: {p:?}"
    );
    let n: Vec<_> = p.iter().filter(|p| p.prefix == host(nat)).collect();
    assert_eq!(n.len(), 1, "{p:?}");
    assert_eq!(n[0].scope, PoliceScope::Syn);
    assert!(n[0].rate_pps >= cfg().police_min_pps);
}

/// A botnet's long tail: hundreds of addresses of one /24 each sending
/// too little to block alone (10 pps < `source_min_pps`) are blocked as
/// their /24 while the flood they are part of goes on; the heavy sources
/// are blocked one by one; no tail address is blocked alone.
#[test]
fn a_udp_floods_long_tail_is_blocked_by_its_slash24() {
    let mut rng = Rng::new(29);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let mut atk = flood(Kind::Udp, 20, 3000.0, 512);
    // 172.16.4.0 - 172.16.4.199.
    for i in 1024..1224 {
        atk.push(Flow {
            src: attacker(i),
            dst: server(),
            pps: 10.0,
            size: 512,
            kind: Kind::Udp,
        });
    }
    sim.run(10, &with(bg.clone(), atk), &[]);
    let b = sim.ever_blocked();
    let tail: Prefix = "172.16.4.0/24".parse().unwrap();
    assert!(
        b.iter().any(|(p, v)| *p == tail && v == "udp_flood"),
        "{b:?}"
    );
    assert!(
        b.iter()
            .all(|(p, _)| p.len() == 24 || !tail.net().contains(&p.net().addr())),
        "a tail address blocked alone: {b:?}"
    );
    // The heavy ones (all of 172.16.0.0/24 here: blocked as their /24).
    assert!(sim.is_blocked(&attacker(3)).is_some(), "{b:?}");
    // Nothing of the legitimate background.
    assert!(b.iter().all(|(p, _)| !is_client(p)), "{b:?}");
    // Unblocked once the flood is over.
    sim.run(400, &bg, &[]);
    assert!(sim.blocked.is_empty(), "{:?}", sim.blocked);
}

/// A spoofed UDP flood (every address of a /16 sends one packet per
/// interval) does not block any /24: one packet per address is what
/// random source addresses look like.
#[test]
fn a_spoofed_udp_floods_addresses_are_not_blocked_by_slash24() {
    let mut rng = Rng::new(31);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let atk: Vec<Flow> = (0..65536)
        .map(|i| Flow {
            src: attacker(i),
            dst: server(),
            pps: 1.0 / SECS,
            size: 512,
            kind: Kind::Udp,
        })
        .collect();
    sim.run(6, &with(bg, atk), &[]);
    let b = sim.ever_blocked();
    assert!(b.is_empty(), "{} blocks, e.g. {:?}", b.len(), b.first());
}

/// A source blocked for its SYN flood that also floods UDP still counts
/// as a UDP flood on its victim once blocked (its dropped traffic is
/// split by what it sent), so the UDP flood's other sources are judged as
/// part of an attack.
#[test]
fn a_blocked_sources_other_floods_still_count_on_its_victim() {
    let mut rng = Rng::new(37);
    let bg = background(&mut rng, 50);
    let mut sim = Sim::new(&cfg());
    warm(&mut sim, &bg, 60);
    let mut atk = flood(Kind::SynRst, 20, 2000.0, 60);
    atk.extend(flood(Kind::Udp, 20, 3000.0, 512));
    sim.run(10, &with(bg, atk), &[]);
    assert!(
        sim.is_blocked(&attacker(3)).is_some(),
        "{:?}",
        sim.ever_blocked()
    );
    let v = sim
        .det
        .victims()
        .into_iter()
        .find(|v| v.victim == host(server()))
        .unwrap();
    let udp = v.vectors.iter().find(|x| x.vector == "udp_flood").unwrap();
    assert!(
        udp.current_pps > 50_000.0 && udp.current_pps < 70_000.0,
        "the blocked sources' 60k UDP pps: {udp:?}"
    );
    let syn = v.vectors.iter().find(|x| x.vector == "syn_flood").unwrap();
    assert!(syn.current_pps < 50_000.0, "{syn:?}");
}
