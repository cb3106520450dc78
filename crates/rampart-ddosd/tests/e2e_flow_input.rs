//! Flow input against real exporters. The lab's router (the `up`
//! namespace: a bridge on the wire between `wan` and the host) runs the
//! exporter an operator's router would be: softflowd exporting NetFlow v9
//! or IPFIX, or pmacctd's sFlow probe sampling 1 in 10, all watching the
//! router's `wan` port and exporting to the daemon's receivers (which
//! listen in the router's namespace, `flow_input.netns`). The lab's
//! generator sends a SYN flood to one address of the protected /24 and a
//! DNS or NTP reflection (source port 53, 123) to another — neither is
//! this host's address: only the routers' view sees them as victims. Each
//! is detected by flow input with the shipped `[detect]` defaults and
//! named (`syn_flood`, `udp_amplification/dns`, `udp_amplification/ntp`),
//! in alerts marked as flow input's. The exporters' timers (softflowd's
//! `-t maxlife=`, pmacct's per-packet samples) set the export interval the
//! daemon is told; the tests assert detection, never how long it took.
//! Garbage sent to a receiver is counted per reason and changes nothing.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rampart_ddosd::{Config, Handle};
use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::packet::Proto;
use rampart_lab::testing::TestLab;
use rampart_lab::topology::{Lab, UpOptions, UP_WAN_IF};

mod common;
use common::{alerts, wait_for, Cleanup, Tool};

/// The export interval: softflowd's active timeout, and what the daemon
/// is told (pmacct's sFlow samples are sent as they are taken).
const EXPORT_S: u32 = 3;

/// The protected prefix and the two victims in it (not this host's
/// address: the host's kernel never answers them).
const PROTECTED: &str = "10.10.0.0/24";
const FLOOD_VICTIM: &str = "10.10.0.77";
const REFLECTION_VICTIM: &str = "10.10.0.78";

fn lab_with_router(tag: &str) -> TestLab {
    rampart_lab::testing::require_kernel();
    let lab = Lab::new(&rampart_lab::testing::unique_prefix(tag)).unwrap();
    if let Err(e) = lab.up(&UpOptions {
        upstream_router: true,
        ..UpOptions::default()
    }) {
        let _ = lab.down();
        panic!("lab up: {e}");
    }
    TestLab { lab }
}

/// A free UDP port on the router's loopback.
fn free_port(ns: &str) -> u16 {
    rampart_dataplane::netns::run_in(Some(ns), || {
        Ok(UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .unwrap_or(0))
    })
    .unwrap()
}

/// The shipped configuration with flow input on: one receiver, in the
/// router's namespace.
fn daemon_config(lab: &TestLab, c: &Cleanup, sflow: bool, port: u16) -> Config {
    let base = common::shipped_config(lab, c);
    let mut t: toml::Table = toml::from_str(&base.render().unwrap()).unwrap();
    let addr = format!("127.0.0.1:{port}");
    let (nf, sf) = if sflow {
        (String::new(), format!("\"{addr}\""))
    } else {
        (format!("\"{addr}\""), String::new())
    };
    let fi: toml::Table = toml::from_str(&format!(
        "enabled = true\nprotected = [\"{PROTECTED}\"]\nnetflow_listen = [{nf}]\nsflow_listen = [{sf}]\n\
         netns = \"{}\"\nexport_interval_s = {EXPORT_S}.0\n",
        lab.up_ns()
    ))
    .unwrap();
    t.insert("flow_input".into(), toml::Value::Table(fi));
    t.get_mut("server")
        .and_then(|s| s.as_table_mut())
        .unwrap()
        .insert("listen".into(), "".into());
    Config::parse(&toml::to_string(&t).unwrap()).unwrap()
}

/// softflowd on the router's wan port: NetFlow `version` 9 or 10 (IPFIX),
/// flows expired after [`EXPORT_S`] seconds of life or idleness. Its
/// control socket is the test's own: the default path is shared by every
/// softflowd on the machine, and a second one exits when it finds it bound.
fn softflowd(lab: &TestLab, c: &Cleanup, version: u8, port: u16) -> Tool {
    let t = |k: &str| format!("{k}={EXPORT_S}");
    let (ml, ge, tc, ud, ic) = (t("maxlife"), t("general"), t("tcp"), t("udp"), t("icmp"));
    let dest = format!("127.0.0.1:{port}");
    let v = version.to_string();
    let ctl = c.dir.join("softflowd.ctl");
    let pid = c.dir.join("softflowd.pid");
    Tool::spawn(
        &lab.up_ns(),
        "softflowd",
        &[
            "-d",
            "-i",
            UP_WAN_IF,
            "-n",
            &dest,
            "-v",
            &v,
            "-m",
            "65536",
            "-c",
            ctl.to_str().unwrap(),
            "-p",
            pid.to_str().unwrap(),
            "-t",
            &ml,
            "-t",
            "expint=1",
            "-t",
            &ge,
            "-t",
            &tc,
            "-t",
            &ud,
            "-t",
            &ic,
        ],
        &c.dir.join("softflowd.log"),
    )
}

/// pmacctd with the sfprobe plugin on the router's wan port, sampling 1
/// packet in 10.
fn pmacctd(lab: &TestLab, c: &Cleanup, port: u16) -> Tool {
    let conf = c.dir.join("pmacctd.conf");
    std::fs::write(
        &conf,
        format!(
            "daemonize: false\npcap_interface: {UP_WAN_IF}\nplugins: sfprobe\n\
             sfprobe_receiver: 127.0.0.1:{port}\nsfprobe_agentip: 10.99.0.1\nsampling_rate: 10\n"
        ),
    )
    .unwrap();
    Tool::spawn(
        &lab.up_ns(),
        "pmacctd",
        &["-f", conf.to_str().unwrap()],
        &c.dir.join("pmacctd.log"),
    )
}

/// The lab's generator until cancelled.
struct Gen {
    cancel: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Gen {
    fn start(lab: &Lab, spec: GenSpec) -> Self {
        let gen = Generator::new(lab, &spec).unwrap();
        let cancel = Arc::new(AtomicBool::new(false));
        let c = cancel.clone();
        let thread = Some(std::thread::spawn(move || {
            gen.run(&c).unwrap();
        }));
        Gen { cancel, thread }
    }
}

impl Drop for Gen {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A SYN flood from 64 sources to `victim`.
fn syn_flood(victim: &str) -> GenSpec {
    GenSpec {
        sources: 64,
        proto: Proto::Syn,
        pps: Some(5000.0),
        limit: Limit::Seconds(600.0),
        dst: Some(victim.parse().unwrap()),
        ..GenSpec::default()
    }
}

/// UDP answers from 32 reflectors' service port `sport` to `victim`.
fn reflection(victim: &str, sport: u16) -> GenSpec {
    GenSpec {
        sources: 32,
        proto: Proto::Udp,
        size: 600,
        sport,
        dport: Some(33000),
        pps: Some(5000.0),
        limit: Limit::Seconds(600.0),
        dst: Some(victim.parse().unwrap()),
        ..GenSpec::default()
    }
}

/// Flow input's attack events for `victim` so far: their vectors.
fn flow_vectors(c: &Cleanup, victim: &str) -> Vec<String> {
    alerts(c)
        .iter()
        .filter(|a| a["in_iface"] == "flow" && a["rampart"]["source"] == "flow")
        .filter(|a| a["rampart"]["event"] == "attack_start")
        .filter(|a| {
            a["dest_ip"] == victim
                || a["rampart"]["victim"]
                    .as_str()
                    .is_some_and(|v| v.trim_end_matches("/32") == victim)
        })
        .filter_map(|a| a["rampart"]["vector"].as_str().map(str::to_string))
        .collect()
}

/// Seconds from starting `spec` until flow input raises an attack on
/// `victim` with `vector` (the generator stops when it returns).
/// On a timeout it prints what flow input saw (its view, the alerts, the
/// exporter's log), so a lost template reads apart from a flood that was
/// seen and not named.
fn time_to_detect(
    lab: &TestLab,
    c: &Cleanup,
    h: &Handle,
    exporter: &mut Tool,
    spec: GenSpec,
    victim: &str,
    vector: &str,
) -> f64 {
    let t0 = Instant::now();
    let g = Gen::start(lab, spec);
    while !flow_vectors(c, victim).iter().any(|v| v == vector) {
        if exporter.exited() || t0.elapsed() > rampart_testkit::http::DEADLINE {
            let log = std::fs::read_dir(&c.dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                .collect::<String>();
            let al = alerts(c);
            panic!(
                "no flow input's {vector} attack on {victim} after {:.0} s (exporter exited: {})\n\
                 flow input: {:?}\nstatus detection: {:?}\nlast alerts: {:#?}\nexporter log: {log}",
                t0.elapsed().as_secs_f64(),
                exporter.exited(),
                h.view().flow_input,
                h.view().victims,
                &al[al.len().saturating_sub(12)..],
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let s = t0.elapsed().as_secs_f64();
    drop(g);
    s
}

fn run(tag: &str, exporter: &str, reflector_port: u16, vector: &str) {
    let lab = lab_with_router(tag);
    let c = Cleanup::new(&lab);
    let sflow = exporter == "sflow";
    let port = free_port(&lab.up_ns());
    let h = Handle::spawn(daemon_config(&lab, &c, sflow, port)).unwrap();
    let mut tool = match exporter {
        "v9" => softflowd(&lab, &c, 9, port),
        "ipfix" => softflowd(&lab, &c, 10, port),
        _ => pmacctd(&lab, &c, port),
    };
    let fi = h.view().flow_input.expect("flow input on");
    assert_eq!(fi.listening.len(), 1, "{fi:?}");
    assert!(fi.errors.is_empty(), "{fi:?}");

    let flood = time_to_detect(
        &lab,
        &c,
        &h,
        &mut tool,
        syn_flood(FLOOD_VICTIM),
        FLOOD_VICTIM,
        "syn_flood",
    );
    let refl = time_to_detect(
        &lab,
        &c,
        &h,
        &mut tool,
        reflection(REFLECTION_VICTIM, reflector_port),
        REFLECTION_VICTIM,
        vector,
    );
    // Printed, not asserted: speed belongs in benchmarks.
    eprintln!(
        "{exporter}: flood detected after {flood:.1} s, {vector} after {refl:.1} s (export interval {EXPORT_S} s)"
    );

    // Flow input's alerts are marked as its own; what it blocked (the
    // host's detection, which sees the flood on its link too, may have
    // blocked the same sources first) is only the generator's sources.
    let al = alerts(&c);
    let flow: Vec<_> = al
        .iter()
        .filter(|a| a["rampart"]["source"] == "flow")
        .collect();
    assert!(
        flow.iter()
            .any(|a| a["in_iface"] == "flow" && a["rampart"]["event"] == "attack_start"),
        "{al:?}"
    );
    for b in flow.iter().filter(|a| a["rampart"]["event"] == "block") {
        let p = b["rampart"]["prefix"].as_str().unwrap();
        assert!(
            p.starts_with("172.16."),
            "only the generator's sources (172.16/12): {b}"
        );
    }

    // Status and metrics name the exporter and its records. The view is
    // published at the end of the loop's tick whose alerts were just
    // read: wait for it to count both attacks.
    wait_for(
        "the status to count both attacks",
        rampart_testkit::http::DEADLINE,
        || {
            let fi = h.view().flow_input.unwrap();
            fi.intervals >= 2 && fi.events >= 2 && fi.blocked >= 1
        },
    );
    let fi = h.view().flow_input.unwrap();
    let ex = fi.exporters.first().expect("the exporter");
    assert!(ex.records > 0 && ex.errors == 0, "{ex:?}");
    assert_eq!(ex.sampling_rate, if sflow { 10 } else { 1 }, "{ex:?}");
    let proto = if sflow { "sflow" } else { "netflow" };
    let m = h.metrics.render();
    assert!(
        m.lines().any(|l| l.starts_with(&format!(
            "rampart_ddos_flow_records_total{{exporter=\"127.0.0.1\",protocol=\"{proto}\"}}"
        ))),
        "{m}"
    );

    // Garbage to the receiver: refused, counted, nothing else changes.
    let before = h.view().flow_input.unwrap().exporters[0].errors;
    rampart_dataplane::netns::run_in(Some(&lab.up_ns()), || {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(
            b"\x00\x0agarbage that is not an export",
            ("127.0.0.1", port),
        )
        .unwrap();
        s.send_to(b"\x00\x00\x00\x05\x00\x00\x00\x07", ("127.0.0.1", port))
            .unwrap();
        Ok(())
    })
    .unwrap();
    wait_for(
        "the garbage counted",
        rampart_testkit::http::DEADLINE,
        || h.view().flow_input.unwrap().exporters[0].errors > before,
    );
    let m = h.metrics.render();
    assert!(
        m.lines()
            .any(|l| l.starts_with("rampart_ddos_flow_decode_errors_total{")
                && l.contains(&format!("protocol=\"{proto}\""))
                && !l.ends_with(" 0")),
        "{m}"
    );
    h.stop().unwrap();
}

#[test]
fn netflow_v9_from_softflowd_detects_a_flood_and_a_dns_reflection() {
    run("flv9", "v9", 53, "udp_amplification/dns");
}

#[test]
fn ipfix_from_softflowd_detects_a_flood_and_an_ntp_reflection() {
    run("flipfix", "ipfix", 123, "udp_amplification/ntp");
}

#[test]
fn sflow_from_pmacctd_detects_a_flood_and_a_dns_reflection() {
    run("flsf", "sflow", 53, "udp_amplification/dns");
}
