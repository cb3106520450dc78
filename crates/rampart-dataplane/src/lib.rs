//! The data-plane toolkit every rampart application uses: network
//! namespaces, bpffs and pins, XDP attachment through `bpf_link`,
//! TCX attachment, `BPF_PROG_RUN`, per-CPU map reads, running the system's tools ([`cmd`]),
//! and probes that name a missing kernel feature instead of failing obscurely.

pub mod chain;
pub mod cmd;
pub mod emulated_nic;
pub mod error;
pub mod features;
pub mod maps;
pub mod netns;
pub mod pin;
pub mod skel;
pub mod tcx;
pub mod testrun;
pub mod xdp;

pub use error::{Error, Result};
