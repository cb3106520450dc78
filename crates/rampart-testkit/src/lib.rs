//! The one test kit of rampart: what every BPF_PROG_RUN test needs and
//! used to rebuild for itself.
//!
//! - [`frame`]: one frame builder (Ethernet, VLAN tags, IPv4 with options
//!   and fragments, IPv6 with extension headers, TCP/UDP/ICMP, payload)
//!   with correct checksums from etherparse, and the knobs to break a
//!   frame on purpose (bad versions and lengths, truncation); plus
//!   [`frame::check`], which verifies a frame's checksums.
//! - [`parse`]: the expected outcome of `bpf/common/parse.h` for any frame,
//!   written from that header's contract.
//! - [`corpus`]: one parse corpus shared by every program that parses
//!   frames: valid frames of every kind, malformed ones, every truncation
//!   and seeded mutations, each with its expected parse outcome.
//! - [`prog`]: table-driven cases (`ProgCase`: frame in → verdict, the
//!   reason counter that moved, frame out) run over
//!   `rampart_dataplane::testrun`, failing with the case's name.
//! - [`http`]: reaching a running daemon's API from an end-to-end test (a
//!   free port, one HTTP request) and waiting for a condition.
//! - [`rng`]: the deterministic generator of every test that draws at
//!   random (mutations, synthetic traffic).
//! - [`browser`]: headless Chromium over the DevTools protocol, for the
//!   dashboard's tests in a real browser.
//!
//! A dev-dependency of the product crates; the lab builds its generator
//! templates with the same [`frame::Frame`].

pub mod browser;
pub mod corpus;
pub mod frame;
pub mod http;
pub mod parse;
pub mod prog;
pub mod rng;
