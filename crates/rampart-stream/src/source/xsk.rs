//! AF_XDP sockets written against the kernel ABI (`linux/if_xdp.h`,
//! through `libc`) rather than with xsk-rs: xsk-rs links libxdp, which
//! bundles a second copy of libbpf next to the one `libbpf-sys` vendors for
//! the rest of rampart.
//!
//! A socket either owns a UMEM (its fill and completion rings) or shares
//! the UMEM of a socket bound to the same interface and RX queue
//! (`XDP_SHARED_UMEM`): then the XDP program chooses, per frame, which of
//! the queue's sockets gets it — what the stream offload's key-based
//! steering needs, because a socket only receives frames of the queue it is
//! bound to. Sockets of one UMEM return frames to its one fill ring under a
//! lock, once per received batch.
//!
//! Copy mode (veth has no zero-copy). Needs kernel ≥ 5.4; the
//! shared UMEM on one queue, ≥ 5.10. Tested on 6.18.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{io as io_err, Error, Result};

/// UMEM frame size (one frame per chunk; a veth frame fits).
pub const FRAME_SIZE: u32 = 2048;

struct Ring {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    map: *mut libc::c_void,
    map_len: usize,
}

impl Ring {
    /// # Safety
    /// `fd` is an XDP socket whose ring `pgoff` has `size` entries of
    /// `entry` bytes at the offsets `off`.
    unsafe fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        pgoff: i64,
    ) -> io::Result<Self> {
        let len = off.desc as usize + size as usize * entry;
        // SAFETY: mapping a kernel ring of the socket; length from XDP_MMAP_OFFSETS.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = map.cast::<u8>();
        // SAFETY: the offsets are inside the mapping (kernel-provided).
        unsafe {
            Ok(Self {
                producer: base.add(off.producer as usize).cast(),
                consumer: base.add(off.consumer as usize).cast(),
                desc: base.add(off.desc as usize),
                mask: size - 1,
                map,
                map_len: len,
            })
        }
    }
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping, a u32 the kernel updates atomically.
        unsafe { &*self.producer }
    }
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe {
            libc::munmap(self.map, self.map_len);
        }
    }
}

/// A UMEM and its fill/completion rings (mapped from the owner socket).
struct Umem {
    fill: Mutex<Ring>,
    _comp: Ring,
    mem: *mut u8,
    len: usize,
}

// SAFETY: the fill ring is behind a mutex; the memory is only read, frame
// by frame, by the one socket the kernel handed each frame to, between
// receiving its descriptor and returning it to the fill ring.
unsafe impl Send for Umem {}
// SAFETY: as above.
unsafe impl Sync for Umem {}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: unmapping the region we mapped, once; every socket using
        // it has been closed (they hold this Arc and drop their fd first).
        unsafe { libc::munmap(self.mem.cast(), self.len) };
    }
}

/// One AF_XDP socket bound to one RX queue, receiving.
pub struct Xsk {
    // Field order is drop order: ring, socket, then the UMEM.
    rx: Ring,
    fd: OwnedFd,
    umem: Arc<Umem>,
    ifindex: u32,
    queue: u32,
    done: Vec<u64>,
}

// SAFETY: the RX ring mapping is owned by this value and used by one thread
// at a time (the kernel synchronises through the atomic ring indices); the
// UMEM is Sync.
unsafe impl Send for Xsk {}

impl std::fmt::Debug for Xsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xsk")
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .field("queue", &self.queue)
            .finish()
    }
}

fn setsockopt<T>(fd: RawFd, opt: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a valid value of the size we pass.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn new_socket() -> Result<OwnedFd> {
    // SAFETY: plain syscall.
    let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(
            io_err("socket(AF_XDP) (needs root and CONFIG_XDP_SOCKETS)")(io::Error::last_os_error()),
        );
    }
    // SAFETY: fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn mmap_offsets(raw: RawFd) -> Result<libc::xdp_mmap_offsets> {
    // SAFETY: zeroed POD filled by the kernel.
    let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    let mut optlen = std::mem::size_of::<libc::xdp_mmap_offsets>() as u32;
    // SAFETY: valid out-pointer and length.
    let rc = unsafe {
        libc::getsockopt(
            raw,
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            (&raw mut off).cast(),
            &mut optlen,
        )
    };
    if rc < 0 {
        return Err(io_err("XDP_MMAP_OFFSETS")(io::Error::last_os_error()));
    }
    Ok(off)
}

fn bind(raw: RawFd, sa: &libc::sockaddr_xdp, what: &str) -> Result<()> {
    // A queue whose previous socket was just closed stays busy until the
    // kernel's deferred release of its buffer pool has run (a workqueue
    // item): retry EBUSY for up to 2 s.
    for attempt in 0..200 {
        // SAFETY: valid sockaddr of the stated size.
        let rc = unsafe {
            libc::bind(
                raw,
                (sa as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as u32,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) || attempt == 199 {
            return Err(io_err(what.to_string())(e));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

impl Xsk {
    /// Create a socket with its own UMEM for `queue` of `ifindex` (in the
    /// calling thread's network namespace), copy mode, with `frames` UMEM
    /// frames and an RX ring of `ring` entries (powers of two).
    ///
    /// # Errors
    /// The failing step and the kernel's error.
    pub fn new(ifindex: u32, queue: u32, frames: u32, ring: u32) -> Result<Self> {
        if !frames.is_power_of_two() || !ring.is_power_of_two() || ring > frames {
            return Err(Error::Invalid(format!(
                "AF_XDP frames {frames} / ring {ring}: powers of two, ring <= frames"
            )));
        }
        let fd = new_socket()?;
        let raw = fd.as_raw_fd();
        let len = (frames * FRAME_SIZE) as usize;
        // SAFETY: anonymous private mapping.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return Err(io_err("mmap of the AF_XDP UMEM")(io::Error::last_os_error()));
        }
        let mem = mem.cast::<u8>();
        // From here on, unmap on error.
        let cleanup = |e: Error| {
            // SAFETY: unmapping the region mapped above.
            unsafe { libc::munmap(mem.cast(), len) };
            e
        };
        let reg = libc::xdp_umem_reg {
            addr: mem as u64,
            len: len as u64,
            chunk_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(raw, libc::XDP_UMEM_REG, &reg)
            .map_err(|e| cleanup(io_err("XDP_UMEM_REG")(e)))?;
        setsockopt(raw, libc::XDP_UMEM_FILL_RING, &frames)
            .map_err(|e| cleanup(io_err("XDP_UMEM_FILL_RING")(e)))?;
        setsockopt(raw, libc::XDP_UMEM_COMPLETION_RING, &ring)
            .map_err(|e| cleanup(io_err("XDP_UMEM_COMPLETION_RING")(e)))?;
        setsockopt(raw, libc::XDP_RX_RING, &ring).map_err(|e| cleanup(io_err("XDP_RX_RING")(e)))?;
        let off = mmap_offsets(raw).map_err(cleanup)?;
        // SAFETY: ring sizes and offsets as configured/reported above.
        let rx = unsafe { Ring::map(raw, &off.rx, ring, 16, libc::XDP_PGOFF_RX_RING) }
            .map_err(|e| cleanup(io_err("mmap of the RX ring")(e)))?;
        // SAFETY: as above.
        let fill = unsafe {
            Ring::map(
                raw,
                &off.fr,
                frames,
                8,
                libc::XDP_UMEM_PGOFF_FILL_RING as i64,
            )
        }
        .map_err(|e| cleanup(io_err("mmap of the fill ring")(e)))?;
        // SAFETY: as above.
        let comp = unsafe {
            Ring::map(
                raw,
                &off.cr,
                ring,
                8,
                libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64,
            )
        }
        .map_err(|e| cleanup(io_err("mmap of the completion ring")(e)))?;
        // Every frame starts in the fill ring.
        for i in 0..frames {
            // SAFETY: index < fill ring size, entries are u64 addresses.
            unsafe { *(fill.desc.cast::<u64>().add(i as usize)) = u64::from(i * FRAME_SIZE) };
        }
        fill.prod().store(frames, Ordering::Release);
        let umem = Arc::new(Umem {
            fill: Mutex::new(fill),
            _comp: comp,
            mem,
            len,
        });
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        bind(
            raw,
            &sa,
            &format!("binding AF_XDP to ifindex {ifindex} queue {queue}"),
        )?;
        Ok(Self {
            rx,
            fd,
            umem,
            ifindex,
            queue,
            done: Vec::with_capacity(256),
        })
    }

    /// A second socket on the same interface and queue, sharing `owner`'s
    /// UMEM, with an RX ring of `ring` entries (a power of two). The XDP
    /// program picks the socket per frame.
    ///
    /// # Errors
    /// The failing step and the kernel's error.
    pub fn new_shared(owner: &Xsk, ring: u32) -> Result<Self> {
        if !ring.is_power_of_two() {
            return Err(Error::Invalid(format!(
                "AF_XDP ring {ring}: a power of two"
            )));
        }
        let fd = new_socket()?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, libc::XDP_RX_RING, &ring).map_err(io_err("XDP_RX_RING"))?;
        let off = mmap_offsets(raw)?;
        // SAFETY: ring size and offsets as configured/reported above.
        let rx = unsafe { Ring::map(raw, &off.rx, ring, 16, libc::XDP_PGOFF_RX_RING) }
            .map_err(io_err("mmap of the RX ring"))?;
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_SHARED_UMEM,
            sxdp_ifindex: owner.ifindex,
            sxdp_queue_id: owner.queue,
            sxdp_shared_umem_fd: owner.fd.as_raw_fd() as u32,
        };
        bind(
            raw,
            &sa,
            &format!(
                "binding a shared-UMEM AF_XDP socket to ifindex {} queue {}",
                owner.ifindex, owner.queue
            ),
        )?;
        Ok(Self {
            rx,
            fd,
            umem: Arc::clone(&owner.umem),
            ifindex: owner.ifindex,
            queue: owner.queue,
            done: Vec::with_capacity(256),
        })
    }

    /// The socket fd (for the XSKMAP).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The RX queue it is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Receive up to `max` frames, call `f` on each, give their frames back
    /// to the kernel. Returns how many were received.
    pub fn recv(&mut self, max: u32, mut f: impl FnMut(&[u8])) -> u32 {
        let cons = self.rx.cons().load(Ordering::Relaxed);
        let prod = self.rx.prod().load(Ordering::Acquire);
        let n = prod.wrapping_sub(cons).min(max);
        if n == 0 {
            return 0;
        }
        self.done.clear();
        for k in 0..n {
            let idx = (cons.wrapping_add(k) & self.rx.mask) as usize;
            // SAFETY: idx < ring size; the kernel produced this descriptor (acquire above).
            let d = unsafe { std::ptr::read(self.rx.desc.cast::<libc::xdp_desc>().add(idx)) };
            let (addr, len) = (d.addr as usize, d.len as usize);
            if addr + len <= self.umem.len {
                // SAFETY: inside the UMEM, written by the kernel before publishing the descriptor.
                let frame = unsafe { std::slice::from_raw_parts(self.umem.mem.add(addr), len) };
                f(frame);
            }
            self.done.push(d.addr & !u64::from(FRAME_SIZE - 1));
        }
        self.rx
            .cons()
            .store(cons.wrapping_add(n), Ordering::Release);
        let fill = self.umem.fill.lock().unwrap_or_else(|e| e.into_inner());
        let fprod = fill.prod().load(Ordering::Relaxed);
        for (k, a) in self.done.iter().enumerate() {
            let fidx = (fprod.wrapping_add(k as u32) & fill.mask) as usize;
            // SAFETY: the fill ring holds every UMEM frame and only frames
            // received from the kernel are returned, so it cannot overflow.
            unsafe { *(fill.desc.cast::<u64>().add(fidx)) = *a };
        }
        fill.prod().store(fprod.wrapping_add(n), Ordering::Release);
        n
    }

    /// Wait up to `timeout` for frames.
    pub fn wait(&self, timeout: Duration) {
        wait_any(&[self], timeout);
    }

    /// Frames the kernel dropped for this socket (ring full, no fill frame).
    pub fn dropped(&self) -> u64 {
        // SAFETY: zeroed POD filled by the kernel.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as u32;
        // SAFETY: valid out-pointer and length.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&raw mut st).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return 0;
        }
        st.rx_dropped + st.rx_ring_full + st.rx_fill_ring_empty_descs
    }
}

/// Wait up to `timeout` until any of `socks` has frames.
pub fn wait_any(socks: &[&Xsk], timeout: Duration) {
    let mut p: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: a valid array of pollfds of the stated length.
    unsafe {
        libc::poll(
            p.as_mut_ptr(),
            p.len() as libc::nfds_t,
            timeout.as_millis() as i32,
        )
    };
}
