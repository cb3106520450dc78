//! `rampart ddos` end to end, through the binary: attach, block, the CLI
//! process exits and filtering stays in force (pinned state), list/stats
//! JSON, every error case as one clear line with nothing half-applied,
//! detach.

use std::process::Command;
use std::sync::atomic::AtomicBool;

use rampart_lab::gen::{GenSpec, Generator, Limit};
use rampart_lab::testing::TestLab;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn rampart(args: &[&str]) -> Out {
    let o = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(args)
        .output()
        .expect("run rampart");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Runs, must succeed.
fn ok(args: &[&str]) -> String {
    let o = rampart(args);
    assert_eq!(o.code, 0, "rampart {args:?} failed: {}", o.stderr);
    o.stdout
}

/// Runs, must fail with exactly one line on stderr containing `needle`.
fn fails(args: &[&str], needle: &str) {
    let o = rampart(args);
    assert_ne!(o.code, 0, "rampart {args:?} should fail");
    let lines: Vec<&str> = o.stderr.trim().lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "rampart {args:?}: one line of error expected, got {:?}",
        o.stderr
    );
    assert!(
        lines[0].contains(needle),
        "rampart {args:?}: {:?} does not mention {needle:?}",
        lines[0]
    );
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

struct Detach(String, String);
impl Drop for Detach {
    fn drop(&mut self) {
        let _ = rampart(&["ddos", "detach", "--iface", &self.1, "--netns", &self.0]);
    }
}

#[test]
fn cli_attach_block_exit_filtering_stays_list_stats_detach() {
    let lab = TestLab::up("dcli", 0);
    let ns = lab.host_ns();
    let w = ["--iface", "host0", "--netns", ns.as_str()];
    ok(&[
        "ddos",
        "attach",
        "--iface",
        "host0",
        "--netns",
        &ns,
        "--sample-shift",
        "0",
        "--max-entries",
        "4",
        "--max-prefixes",
        "2",
    ]);
    let _guard = Detach(ns.clone(), "host0".into());
    let dir = format!("/sys/fs/bpf/rampart/ddos/{ns}-host0");
    assert!(std::path::Path::new(&dir).join("link").exists());

    // The generator's first 64 sources: one exact entry, the rest through a /26 prefix.
    let out = ok(&[
        "ddos",
        "block",
        "172.16.0.0/26",
        "172.16.0.1",
        "--json",
        w[0],
        w[1],
        w[2],
        w[3],
    ]);
    assert_eq!(json(&out)["added"], 2);
    let file = std::env::temp_dir().join(format!("rampart-ddos-cli-{}.txt", std::process::id()));
    std::fs::write(&file, "# more\n2001:db8::7\n\n198.51.100.9 # exact\n").unwrap();
    ok(&[
        "ddos",
        "block",
        "--file",
        file.to_str().unwrap(),
        "--ttl",
        "3600",
        w[0],
        w[1],
        w[2],
        w[3],
    ]);

    // Every CLI process has exited: the pinned filter keeps dropping.
    // One full walk of the shuffled schedule (65,536 slots): 1,024 packets per source.
    let spec = GenSpec {
        sources: 64,
        limit: Limit::Count(65_536),
        pps: Some(100_000.0),
        ..GenSpec::default()
    };
    let gen = Generator::new(&lab, &spec).unwrap();
    assert_eq!(
        gen.run(&AtomicBool::new(false)).unwrap().sent_packets,
        65_536
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    let st = json(&ok(&["ddos", "stats", "--json", w[0], w[1], w[2], w[3]]));
    let drops: std::collections::HashMap<String, u64> = st["drops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d[0].as_str().unwrap().to_string(),
                d[1]["packets"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(drops["blacklist"] + drops["blacklist_prefix"], 65_536);
    assert_eq!(
        drops["blacklist"], 1024,
        "172.16.0.1 is counted on its exact entry, not the /26"
    );
    assert_eq!(st["linked"], true);
    assert_eq!(st["entries"]["exact4"], 2);

    // list: every entry, with counters.
    let l = json(&ok(&[
        "ddos", "list", "--json", "--window", "0", w[0], w[1], w[2], w[3],
    ]));
    let entries = l["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 4);
    let by: std::collections::HashMap<&str, &serde_json::Value> = entries
        .iter()
        .map(|e| (e["prefix"].as_str().unwrap(), e))
        .collect();
    assert_eq!(by["172.16.0.0/26"]["packets"], 63 * 1024);
    assert_eq!(by["172.16.0.1/32"]["packets"], 1024);
    assert_eq!(by["172.16.0.1/32"]["tier"], "xdp");
    assert_eq!(
        by["172.16.0.1/32"]["bytes"],
        1024 * spec.size as u64,
        "bytes: the frames as XDP sees them"
    );
    assert_eq!(by["172.16.0.0/26"]["bytes"], 63 * 1024 * spec.size as u64);
    assert!(
        by["172.16.0.1/32"]["rate_pps"].is_null(),
        "--window 0: no rate"
    );
    assert!(by["2001:db8::7/128"]["expires_in_s"].as_f64().unwrap() > 3500.0);
    assert!(by["198.51.100.9/32"]["age_s"].as_f64().unwrap() < 600.0);
    // The current rate: two readings --window apart while traffic flows.
    drop(gen); // one generator at a time (it holds the lab's gen-anchor)
    let flow = GenSpec {
        sources: 64,
        limit: Limit::Seconds(30.0),
        pps: Some(20_000.0),
        ..GenSpec::default()
    };
    let gen2 = Generator::new(&lab, &flow).unwrap();
    let stop = AtomicBool::new(false);
    let rated = std::thread::scope(|s| {
        let g = s.spawn(|| gen2.run(&stop));
        let dropped = |st: &serde_json::Value| {
            st["drops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d[1]["packets"].as_u64().unwrap())
                .sum::<u64>()
        };
        let before = dropped(&json(&ok(&[
            "ddos", "stats", "--json", w[0], w[1], w[2], w[3],
        ])));
        // Traffic is flowing before the window opens.
        while dropped(&json(&ok(&[
            "ddos", "stats", "--json", w[0], w[1], w[2], w[3],
        ]))) < before + 1000
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let l = json(&ok(&[
            "ddos", "list", "--json", "--window", "0.5", w[0], w[1], w[2], w[3],
        ]));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        g.join().unwrap().unwrap();
        l
    });
    assert_eq!(rated["window_s"], 0.5);
    for e in rated["entries"].as_array().unwrap() {
        let (p, pps, bps) = (
            e["prefix"].as_str().unwrap(),
            e["rate_pps"].as_f64().unwrap(),
            e["rate_bps"].as_f64().unwrap(),
        );
        if p.starts_with("172.16.") {
            assert!(pps > 0.0 && bps > 0.0, "{p} is being hit: {e}");
        } else {
            assert_eq!((pps, bps), (0.0, 0.0), "{p} sees no traffic: {e}");
        }
    }
    let human = ok(&["ddos", "list", "--window", "0.2", w[0], w[1], w[2], w[3]]);
    assert!(
        human.contains("172.16.0.0/26") && human.contains("RATE(pps)"),
        "{human}"
    );

    // Errors: one line each, nothing applied.
    fails(
        &["ddos", "block", "10.0.0.1/8", w[0], w[1], w[2], w[3]],
        "did you mean 10.0.0.0/8",
    );
    fails(
        &["ddos", "block", "10.0.0.300", w[0], w[1], w[2], w[3]],
        "not an IPv4 or IPv6 address",
    );
    fails(
        &[
            "ddos",
            "block",
            "10.9.9.9",
            "10.9.9.9/32",
            w[0],
            w[1],
            w[2],
            w[3],
        ],
        "duplicate prefix 10.9.9.9/32",
    );
    fails(
        &[
            "ddos",
            "block",
            "10.9.9.8",
            "172.16.0.1",
            w[0],
            w[1],
            w[2],
            w[3],
        ],
        "172.16.0.1/32 is already blocked",
    );
    fails(
        &[
            "ddos", "block", "10.9.9.1", "10.9.9.2", "10.9.9.3", w[0], w[1], w[2], w[3],
        ],
        "exact IPv4 table full",
    );
    fails(
        &[
            "ddos",
            "block",
            "10.1.0.0/16",
            "10.2.0.0/16",
            w[0],
            w[1],
            w[2],
            w[3],
        ],
        "IPv4 prefix table full",
    );
    fails(
        &["ddos", "unblock", "10.9.9.9", w[0], w[1], w[2], w[3]],
        "10.9.9.9/32 is not blocked",
    );
    std::fs::write(&file, "10.9.9.1\nnot-a-prefix\n").unwrap();
    fails(
        &[
            "ddos",
            "block",
            "--file",
            file.to_str().unwrap(),
            w[0],
            w[1],
            w[2],
            w[3],
        ],
        "line 2",
    );
    fails(
        &["ddos", "block", w[0], w[1], w[2], w[3]],
        "no prefixes given",
    );
    fails(
        &["ddos", "attach", "--iface", "nope0", "--netns", &ns],
        "interface \"nope0\" not found",
    );
    fails(
        &[
            "ddos",
            "attach",
            "--iface",
            "host0",
            "--netns",
            "no-such-ns-x",
        ],
        "does not exist",
    );
    fails(
        &["ddos", "attach", "--iface", "host0", "--netns", &ns],
        "already attached",
    );
    fails(
        &["ddos", "list", "--iface", "host9", "--netns", &ns],
        "no rampart ddos filter",
    );
    fails(
        &[
            "ddos",
            "attach",
            "--iface",
            "host0",
            "--netns",
            &ns,
            "--sample-shift",
            "16",
        ],
        "--sample-shift",
    );
    let after = json(&ok(&[
        "ddos", "list", "--json", "--window", "0", w[0], w[1], w[2], w[3],
    ]));
    assert_eq!(
        after["entries"].as_array().unwrap().len(),
        4,
        "failed commands changed nothing"
    );

    // Exactly at capacity works; unblock works.
    ok(&[
        "ddos", "block", "10.9.9.1", "10.9.9.2", w[0], w[1], w[2], w[3],
    ]);
    ok(&[
        "ddos",
        "unblock",
        "10.9.9.1",
        "10.9.9.2",
        "2001:db8::7",
        w[0],
        w[1],
        w[2],
        w[3],
    ]);
    assert_eq!(
        json(&ok(&[
            "ddos", "list", "--json", "--window", "0", w[0], w[1], w[2], w[3]
        ]))["entries"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Detach removes the pins and the program.
    ok(&["ddos", "detach", "--iface", "host0", "--netns", &ns]);
    assert!(!std::path::Path::new(&dir).exists());
    assert_eq!(
        rampart_dataplane::xdp::attached_prog_id(Some(&ns), "host0").unwrap(),
        None
    );
    fails(
        &["ddos", "detach", "--iface", "host0", "--netns", &ns],
        "no rampart ddos filter",
    );
    let _ = std::fs::remove_file(&file);
}
