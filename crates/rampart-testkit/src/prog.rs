//! Table-driven BPF_PROG_RUN: a [`ProgCase`] is a frame in and what must
//! come out — the XDP verdict, the one reason counter that moved, the
//! output frame — and a [`Runner`] checks it over
//! `rampart_dataplane::testrun`, naming the case in every failure.
//!
//! ```no_run
//! # use rampart_testkit::prog::*;
//! # use rampart_testkit::frame::Frame;
//! # fn stats() -> Vec<Counter> { vec![] }
//! # let prog_fd = 3;
//! let runner = Runner::new(prog_fd, stats);
//! let frame = Frame::udp("192.0.2.1", "198.51.100.1", 1, 53).build();
//! runner.run(&ProgCase::new("clean udp", frame, XDP_PASS, "pass.clean"));
//! ```

use std::os::fd::RawFd;

use rampart_dataplane::testrun::{self, Ingress, RunOutput};

/// `XDP_ABORTED`.
pub const XDP_ABORTED: u32 = 0;
/// `XDP_DROP`.
pub const XDP_DROP: u32 = 1;
/// `XDP_PASS`.
pub const XDP_PASS: u32 = 2;
/// `XDP_TX`.
pub const XDP_TX: u32 = 3;
/// `XDP_REDIRECT`.
pub const XDP_REDIRECT: u32 = 4;

/// `XDP_PASS (2)`, or the bare number for anything else.
pub fn verdict_name(v: u32) -> String {
    let name = match v {
        XDP_ABORTED => "XDP_ABORTED",
        XDP_DROP => "XDP_DROP",
        XDP_PASS => "XDP_PASS",
        XDP_TX => "XDP_TX",
        XDP_REDIRECT => "XDP_REDIRECT",
        _ => return v.to_string(),
    };
    format!("{name} ({v})")
}

/// One frame through one program, and what must come out.
#[derive(Debug, Clone)]
pub struct ProgCase {
    /// Names the case in failure messages.
    pub name: String,
    /// The input frame.
    pub frame: Vec<u8>,
    /// The XDP verdict.
    pub verdict: u32,
    /// The reason counter that must move by one packet (and, where the
    /// program counts bytes, by the frame's length) while no other does;
    /// `None`: no reason counter may move.
    pub reason: Option<String>,
    /// The output frame, or `None` to leave it unchecked.
    pub out: Option<Vec<u8>>,
}

impl ProgCase {
    /// A case counted under `reason`, output unchecked.
    pub fn new(
        name: impl Into<String>,
        frame: Vec<u8>,
        verdict: u32,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            frame,
            verdict,
            reason: Some(reason.into()),
            out: None,
        }
    }

    /// A case of a program without reason counters (or one that must not
    /// count this frame).
    pub fn uncounted(name: impl Into<String>, frame: Vec<u8>, verdict: u32) -> Self {
        Self {
            name: name.into(),
            frame,
            verdict,
            reason: None,
            out: None,
        }
    }

    /// The output frame must be `out`.
    pub fn out(mut self, out: Vec<u8>) -> Self {
        self.out = Some(out);
        self
    }

    /// The output frame must be the input, untouched.
    pub fn unchanged(mut self) -> Self {
        self.out = Some(self.frame.clone());
        self
    }
}

/// One of a program's reason counters, as its reader reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The reason, as [`ProgCase::reason`] names it.
    pub name: String,
    /// Packets counted.
    pub packets: u64,
    /// Bytes counted, where the program counts them.
    pub bytes: Option<u64>,
}

impl Counter {
    /// A packet counter.
    pub fn packets(name: impl Into<String>, packets: u64) -> Self {
        Self {
            name: name.into(),
            packets,
            bytes: None,
        }
    }

    /// A packet and byte counter.
    pub fn with_bytes(name: impl Into<String>, packets: u64, bytes: u64) -> Self {
        Self {
            name: name.into(),
            packets,
            bytes: Some(bytes),
        }
    }
}

type Reader<'a> = Box<dyn Fn() -> Vec<Counter> + 'a>;

/// Runs [`ProgCase`]s through one loaded XDP program.
pub struct Runner<'a> {
    prog: RawFd,
    ingress: Ingress,
    counters: Reader<'a>,
}

impl std::fmt::Debug for Runner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("prog", &self.prog)
            .field("ingress", &self.ingress)
            .finish_non_exhaustive()
    }
}

impl<'a> Runner<'a> {
    /// Run `prog`; `counters` reads its reason counters (called before and
    /// after every case).
    pub fn new(prog: RawFd, counters: impl Fn() -> Vec<Counter> + 'a) -> Self {
        Self {
            prog,
            ingress: Ingress::default(),
            counters: Box::new(counters),
        }
    }

    /// Run a program that has no reason counters.
    pub fn uncounted(prog: RawFd) -> Self {
        Self::new(prog, Vec::new)
    }

    /// Frames arrive on this interface and RX queue (in the caller's
    /// network namespace).
    pub fn ingress(mut self, ifindex: u32, rx_queue: u32) -> Self {
        self.ingress = Ingress { ifindex, rx_queue };
        self
    }

    /// Run one case and check it; returns the run's output for any further
    /// checks.
    ///
    /// # Panics
    /// When the program's verdict, counters or output frame are not the
    /// case's, with the case's name; when the kernel refuses the run.
    pub fn run(&self, case: &ProgCase) -> RunOutput {
        let name = &case.name;
        let before = (self.counters)();
        let out = testrun::run_packet_in(self.prog, &case.frame, self.ingress)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let after = (self.counters)();
        assert_eq!(
            verdict_name(out.retval),
            verdict_name(case.verdict),
            "{name}: verdict"
        );
        let moved = moved(&before, &after);
        match &case.reason {
            Some(r) => {
                let names: Vec<&str> = moved.iter().map(|m| m.name.as_str()).collect();
                assert_eq!(
                    names,
                    [r.as_str()],
                    "{name}: the reason counters that moved"
                );
                assert_eq!(moved[0].packets, 1, "{name}: {r} packets");
                if let Some(b) = moved[0].bytes {
                    assert_eq!(b, case.frame.len() as u64, "{name}: {r} bytes");
                }
            }
            None => assert!(
                moved.is_empty(),
                "{name}: no reason may count it: {moved:?}"
            ),
        }
        if let Some(want) = &case.out {
            assert!(
                out.data == *want,
                "{name}: output frame\n got  {:02x?}\n want {want:02x?}",
                out.data
            );
        }
        out
    }

    /// Run every case in order.
    ///
    /// # Panics
    /// At the first case that fails, as [`Runner::run`].
    pub fn run_all(&self, cases: &[ProgCase]) {
        for c in cases {
            self.run(c);
        }
    }
}

/// The counters that changed, as deltas.
fn moved(before: &[Counter], after: &[Counter]) -> Vec<Counter> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.name == a.name);
            let (bp, bb) = b.map_or((0, None), |b| (b.packets, b.bytes));
            let packets = a.packets.wrapping_sub(bp);
            let bytes = a.bytes.map(|x| x.wrapping_sub(bb.unwrap_or(0)));
            (packets != 0 || bytes.is_some_and(|x| x != 0)).then(|| Counter {
                name: a.name.clone(),
                packets,
                bytes,
            })
        })
        .collect()
}

/// Run `prog` `n` times on fresh copies of `frame` (one BPF_PROG_RUN each);
/// returns the verdict, which must be the same every time.
///
/// # Panics
/// When the kernel refuses a run or the verdict changes.
pub fn run_n(prog: RawFd, frame: &[u8], n: u32) -> u32 {
    assert!(n >= 1, "at least one run");
    let mut verdict = None;
    for i in 0..n {
        let v = testrun::run_packet(prog, frame, 0)
            .unwrap_or_else(|e| panic!("run {i}: {e}"))
            .retval;
        assert!(
            verdict.is_none_or(|w| w == v),
            "the verdict changed between runs: {} then {}",
            verdict_name(verdict.unwrap_or(v)),
            verdict_name(v)
        );
        verdict = Some(v);
    }
    verdict.expect("n >= 1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_name_what_moved() {
        let b = vec![Counter::packets("a", 1), Counter::with_bytes("b", 2, 100)];
        let a = vec![Counter::packets("a", 1), Counter::with_bytes("b", 3, 160)];
        assert_eq!(moved(&b, &a), vec![Counter::with_bytes("b", 1, 60)]);
        assert!(moved(&b, &b).is_empty());
        assert_eq!(verdict_name(XDP_TX), "XDP_TX (3)");
        assert_eq!(verdict_name(77), "77");
    }
}
