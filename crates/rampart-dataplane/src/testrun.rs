//! `BPF_PROG_RUN` (a.k.a. `BPF_PROG_TEST_RUN`): run a program on a packet
//! built in userspace — for unit tests — or transmit live frames from it —
//! for the lab's traffic generator.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::error::{Error, Result};

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (kernel ≥ 5.18).
pub const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// What a single test run returned.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The program's return value (XDP action, TC verdict, ...).
    pub retval: u32,
    /// The packet after the program (possibly resized).
    pub data: Vec<u8>,
    /// Average run time per repetition.
    pub duration: Duration,
}

/// `struct xdp_md` as passed in `ctx_in` to XDP test runs.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct XdpMd {
    /// Offset of the packet start (0).
    pub data: u32,
    /// Offset of the packet end (= length).
    pub data_end: u32,
    /// Metadata offset (0).
    pub data_meta: u32,
    /// Ingress interface.
    pub ingress_ifindex: u32,
    /// RX queue.
    pub rx_queue_index: u32,
    /// Egress interface (0 on ingress).
    pub egress_ifindex: u32,
}

fn run(opts: &mut libbpf_sys::bpf_test_run_opts, prog_fd: RawFd, what: &str) -> Result<()> {
    // SAFETY: `opts` points to buffers that are valid for the sizes it states.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog_fd, opts) };
    if rc < 0 {
        return Err(Error::Io {
            context: what.to_string(),
            err: io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(())
}

/// Where a test run's packet arrives: the `struct xdp_md` fields a
/// program may read besides the packet.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ingress {
    /// Ingress interface (0 for none); it must be in the caller's network
    /// namespace.
    pub ifindex: u32,
    /// RX queue of that interface (needs `ifindex`).
    pub rx_queue: u32,
}

/// Run `prog_fd` once on `packet`; returns verdict and output packet.
/// `ifindex` is the ingress interface the program sees (0 for none).
///
/// # Errors
/// The kernel's error (bad program type, packet too short or too long).
pub fn run_packet(prog_fd: RawFd, packet: &[u8], ifindex: u32) -> Result<RunOutput> {
    run_packet_in(
        prog_fd,
        packet,
        Ingress {
            ifindex,
            rx_queue: 0,
        },
    )
}

/// Run `prog_fd` once on a copy of `packet` arriving as `ingress` says;
/// returns verdict and output packet (up to 512 bytes longer than the
/// input).
///
/// One run per call on purpose: with a kernel-side repeat count the
/// program runs again on the frame it already rewrote, and a pending
/// signal stops the loop part-way after some runs changed the maps.
///
/// # Errors
/// The kernel's error (bad program type, packet too short or too long,
/// an RX queue without an interface).
pub fn run_packet_in(prog_fd: RawFd, packet: &[u8], ingress: Ingress) -> Result<RunOutput> {
    let ctx = XdpMd {
        data_end: packet.len() as u32,
        ingress_ifindex: ingress.ifindex,
        rx_queue_index: ingress.rx_queue,
        ..Default::default()
    };
    // SAFETY: XdpMd is repr(C) plain data; its bytes are what the kernel reads.
    let bytes = unsafe { as_bytes(&ctx) };
    run_once(
        prog_fd,
        packet,
        (ingress != Ingress::default()).then_some(bytes),
        "BPF_PROG_RUN",
    )
}

/// The bytes of a repr(C) context struct, as `ctx_in` takes them.
///
/// # Safety
/// `T` must be a `repr(C)` type without padding the kernel could read.
unsafe fn as_bytes<T>(v: &T) -> &[u8] {
    // SAFETY: the caller's promise; the slice lives as long as `v`.
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
}

/// One run of `prog_fd` on a copy of `packet` (room for 512 more bytes),
/// with `ctx` as its context when given.
fn run_once(prog_fd: RawFd, packet: &[u8], ctx: Option<&[u8]>, what: &str) -> Result<RunOutput> {
    let mut out = vec![0u8; packet.len() + 512];
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: packet.as_ptr().cast(),
        data_size_in: packet.len() as u32,
        data_out: out.as_mut_ptr().cast(),
        data_size_out: out.len() as u32,
        repeat: 1,
        ..Default::default()
    };
    if let Some(c) = ctx {
        opts.ctx_in = c.as_ptr().cast();
        opts.ctx_size_in = c.len() as u32;
    }
    run(&mut opts, prog_fd, what)?;
    out.truncate(opts.data_size_out as usize);
    Ok(RunOutput {
        retval: opts.retval,
        data: out,
        duration: Duration::from_nanos(opts.duration.into()),
    })
}

/// How a TC program's test packet looks to it: the `struct __sk_buff`
/// fields a test run may set (all zero: a plain frame).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Skb {
    /// GSO segments the frame stands for (an egress TSO/GSO send), 0 or 1: none.
    pub gso_segs: u32,
    /// Payload bytes per segment of such a send.
    pub gso_size: u32,
}

/// `struct __sk_buff` (linux/bpf.h) as passed in `ctx_in` to TC test
/// runs; the kernel refuses non-zero fields other than the settable ones.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SkBuff {
    head: [u32; 12],
    cb: [u32; 5],
    middle: [u32; 17],
    data_meta: u32,
    // The C struct's implicit gap before the 8-byte pointer, made explicit
    // so every byte handed to the kernel is initialised (and zero).
    _gap: u32,
    flow_keys: u64,
    tstamp: u64,
    wire_len: u32,
    gso_segs: u32,
    sk: u64,
    gso_size: u32,
    tstamp_type: u32,
    hwtstamp: u64,
}
const _: () = assert!(std::mem::size_of::<SkBuff>() == 192);
const _: () = assert!(std::mem::offset_of!(SkBuff, gso_segs) == 164);
const _: () = assert!(std::mem::offset_of!(SkBuff, gso_size) == 176);

/// Run the TC (`sched_cls`/TCX) program `prog_fd` once on a copy of the
/// Ethernet frame `packet`, with `skb`'s fields set; returns its verdict
/// and the frame after it.
///
/// # Errors
/// The kernel's error (bad program type, packet too short or too long).
pub fn run_skb(prog_fd: RawFd, packet: &[u8], skb: Skb) -> Result<RunOutput> {
    let ctx = SkBuff {
        gso_segs: skb.gso_segs,
        gso_size: skb.gso_size,
        ..Default::default()
    };
    // SAFETY: SkBuff is repr(C) plain data without implicit padding, laid
    // out as struct __sk_buff (asserted).
    let bytes = unsafe { as_bytes(&ctx) };
    run_once(
        prog_fd,
        packet,
        (skb != Skb::default()).then_some(bytes),
        "BPF_PROG_RUN (TC)",
    )
}

/// Mean run time of `prog_fd` over `repeat` kernel-side runs on `packet`
/// (a cost measurement: the program runs again on the buffer it may have
/// rewritten, and the output is discarded).
///
/// # Errors
/// The kernel's error; `EINTR` when a signal stopped the loop part-way.
pub fn mean_duration(prog_fd: RawFd, packet: &[u8], repeat: u32) -> Result<Duration> {
    let mut out = vec![0u8; packet.len() + 512];
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: packet.as_ptr().cast(),
        data_size_in: packet.len() as u32,
        data_out: out.as_mut_ptr().cast(),
        data_size_out: out.len() as u32,
        repeat: repeat as i32,
        ..Default::default()
    };
    run(&mut opts, prog_fd, "BPF_PROG_RUN (repeated)")?;
    Ok(Duration::from_nanos(opts.duration.into()))
}

/// Run `prog_fd` `repeat` times on fresh copies of `frame` in live-frames
/// mode: XDP_TX/XDP_REDIRECT really transmit, XDP_PASS injects into the
/// stack of `ifindex` (which must be in the caller's network namespace).
///
/// # Errors
/// [`Error::MissingFeature`] if the kernel lacks live frames; otherwise
/// the kernel's error. `EINTR` means a signal arrived (the run stops early).
pub fn run_live(
    prog_fd: RawFd,
    frame: &[u8],
    ifindex: u32,
    repeat: u32,
    batch: u32,
) -> Result<Duration> {
    // With live frames, data_end must equal the frame length (the kernel refuses anything else).
    let mut ctx = XdpMd {
        data_end: frame.len() as u32,
        ingress_ifindex: ifindex,
        ..Default::default()
    };
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: frame.len() as u32,
        ctx_in: (&raw mut ctx).cast_const().cast(),
        ctx_size_in: std::mem::size_of::<XdpMd>() as u32,
        repeat: repeat as i32,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size: batch,
        ..Default::default()
    };
    // SAFETY: all buffers referenced by `opts` live until the call returns.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog_fd, &mut opts) };
    if rc < 0 {
        let e = io::Error::from_raw_os_error(-rc);
        if e.raw_os_error() == Some(libc::EINVAL) && !crate::features::xdp_live_frames_supported() {
            return Err(Error::MissingFeature {
                feature:
                    "XDP live frames (BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES, Linux ≥ 5.18)",
                detail: e.to_string(),
            });
        }
        return Err(Error::Io {
            context: "BPF_PROG_RUN (live frames)".into(),
            err: e,
        });
    }
    Ok(Duration::from_nanos(opts.duration.into()))
}
