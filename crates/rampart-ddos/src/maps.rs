//! Raw map access on file descriptors: pinned maps opened by path, typed
//! views of mmapable arrays, per-CPU reads, batch updates and the batch
//! read-and-delete the feature snapshots use.
//!
//! Everything here works on fds rather than libbpf-rs maps, because the
//! state outlives the process that loaded it: a later `rampart ddos block`
//! opens the pins and works on them directly.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;

use bytemuck::Pod;

use crate::error::{Error, Result};

/// Kernel facts about a map.
#[derive(Debug, Clone, Copy)]
pub struct MapInfo {
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes (one CPU's, for per-CPU maps).
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
    /// `BPF_F_*` flags.
    pub flags: u32,
}

/// `bpf_map_get_info_by_fd`.
///
/// # Errors
/// The kernel's error.
pub fn map_info(fd: RawFd) -> Result<MapInfo> {
    let mut info = libbpf_sys::bpf_map_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
    // SAFETY: `info` is valid for `len` bytes of writes for the call.
    let rc = unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd, &mut info, &mut len) };
    if rc < 0 {
        return Err(Error::errno("reading map info", rc));
    }
    Ok(MapInfo {
        map_type: info.type_,
        key_size: info.key_size,
        value_size: info.value_size,
        max_entries: info.max_entries,
        flags: info.map_flags,
    })
}

/// A pinned map, opened.
#[derive(Debug)]
pub struct PinnedMap {
    /// Its fd.
    pub fd: OwnedFd,
    /// Its shape.
    pub info: MapInfo,
}

impl PinnedMap {
    /// Open the map pinned at `path`, checking its value size.
    ///
    /// # Errors
    /// Missing pin, or a shape that is not what this build expects.
    pub fn open(path: &Path, value_size: usize) -> Result<Self> {
        let fd = rampart_dataplane::pin::open_pinned(path)?;
        let info = map_info(fd.as_raw_fd())?;
        if info.value_size as usize != value_size {
            return Err(Error::BadState {
                path: path.to_path_buf(),
                reason: format!(
                    "value size {} where this rampart expects {value_size}",
                    info.value_size
                ),
            });
        }
        Ok(Self { fd, info })
    }

    /// Raw fd.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A typed, shared view of an mmapable BPF array: element `i` of a
/// `T`-valued array, as the BPF program sees it.
///
/// The data path reads and writes the same memory at any time, so a copy
/// ([`ArrayMmap::get`]) is a volatile read that may tear: a mix of the
/// element's bytes before and after a concurrent write. `T: Pod` makes any
/// such mix a valid `T` — possibly a wrong value, never an invalid one.
/// Fields that must be read or updated consistently go through atomics at
/// the call sites (or a generation that says which copy is stable).
#[derive(Debug)]
pub struct ArrayMmap<T: Pod> {
    ptr: NonNull<u8>,
    map_len: usize,
    n: usize,
    stride: usize,
    _t: PhantomData<T>,
}

// SAFETY: the mapping is plain shared memory owned by the map, not by a
// thread; every safe access is a volatile copy of a `T: Pod` (any bytes are
// a valid value), and the accesses that need more go through `unsafe`
// methods whose callers uphold their contracts.
unsafe impl<T: Pod> Send for ArrayMmap<T> {}
// SAFETY: as above.
unsafe impl<T: Pod> Sync for ArrayMmap<T> {}

impl<T: Pod> ArrayMmap<T> {
    /// Map the whole array behind `fd` (created with `BPF_F_MMAPABLE`).
    ///
    /// # Errors
    /// A value size that is not `T`'s, or a failing `mmap`.
    pub fn new(fd: BorrowedFd<'_>, info: &MapInfo) -> Result<Self> {
        // Elements start every `stride` (a multiple of 8) bytes from a page.
        if std::mem::align_of::<T>() > 8 {
            return Err(Error::Invalid(format!(
                "internal: {} needs more than the 8-byte alignment of an array element",
                std::any::type_name::<T>()
            )));
        }
        if info.value_size as usize != std::mem::size_of::<T>() {
            return Err(Error::Invalid(format!(
                "internal: mapping an array of {}-byte values as {}-byte values",
                info.value_size,
                std::mem::size_of::<T>()
            )));
        }
        let stride = (info.value_size as usize).next_multiple_of(8);
        let n = info.max_entries as usize;
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = (stride * n).next_multiple_of(page).max(page);
        // SAFETY: a fresh shared mapping of the map's memory; the kernel
        // checks the fd is an mmapable array and that `len` fits.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::io("mmap of a BPF array", io::Error::last_os_error()));
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| Error::Invalid("mmap returned NULL".into()))?;
        Ok(Self {
            ptr,
            map_len: len,
            n,
            stride,
            _t: PhantomData,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.n
    }

    /// No elements?
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Pointer to element `i`.
    ///
    /// # Panics
    /// When `i` is out of range (a logic error in this crate).
    pub fn at(&self, i: usize) -> *mut T {
        assert!(i < self.n, "element {i} of {}", self.n);
        // SAFETY: in bounds of the mapping (checked above).
        unsafe { self.ptr.as_ptr().add(i * self.stride).cast::<T>() }
    }

    /// Elements `start..start + len` as a slice.
    ///
    /// # Safety
    /// Nothing (kernel or another thread) may write those elements while
    /// the slice lives.
    ///
    /// # Panics
    /// Out of range, or a `T` whose size is not a multiple of 8 (elements
    /// would not be contiguous).
    pub unsafe fn slice(&self, start: usize, len: usize) -> &[T] {
        assert!(start + len <= self.n && self.stride == std::mem::size_of::<T>());
        // SAFETY: in bounds, contiguous (stride == size), aligned; the caller rules out writers.
        unsafe { std::slice::from_raw_parts(self.at(start).cast_const(), len) }
    }

    /// Elements `start..start + len` as a mutable slice.
    ///
    /// # Safety
    /// Nothing else may read or write those elements while the slice lives.
    ///
    /// # Panics
    /// As [`ArrayMmap::slice`].
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.n && self.stride == std::mem::size_of::<T>());
        // SAFETY: as in `slice`, and the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.at(start), len) }
    }

    /// Volatile copy of element `i`; torn when the data path writes it
    /// at the same time (see the type's documentation).
    pub fn get(&self, i: usize) -> T {
        // SAFETY: `at` is in bounds and aligned for `T` (page-aligned base,
        // 8-byte stride, `new` checked the size); the memory is readable for
        // the mapping's life; any bytes read are a valid `T: Pod`.
        unsafe { std::ptr::read_volatile(self.at(i)) }
    }

    /// Volatile store of element `i`. Readers (the data path included) may
    /// see it half written; publish what must be seen whole another way.
    pub fn set(&self, i: usize, v: T) {
        // SAFETY: as in `get`; a `T: Pod` owns no resources a racing
        // write could leak or double-free.
        unsafe { std::ptr::write_volatile(self.at(i), v) }
    }
}

impl<T: Pod> Drop for ArrayMmap<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.map_len);
        }
    }
}

pub use rampart_dataplane::maps::lookup_raw;

pub use rampart_dataplane::maps::delete_raw;

/// `bpf_map_update_elem`.
///
/// # Errors
/// The kernel's error (`ENOSPC`/`E2BIG`/`ENOMEM` when full).
pub fn update_raw(fd: RawFd, key: &[u8], value: &[u8], flags: u64) -> Result<()> {
    rampart_dataplane::maps::update_raw(fd, key, value, flags).map_err(Error::from)
}

/// `BPF_MAP_UPDATE_BATCH` of `n` keys and values laid out back to back.
///
/// # Errors
/// The kernel's error; `done` says how many were applied before it.
pub fn update_batch(
    fd: RawFd,
    keys: &[u8],
    values: &[u8],
    n: usize,
) -> std::result::Result<(), (usize, Error)> {
    if n == 0 {
        return Ok(());
    }
    let mut count = n as u32;
    let opts = libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `keys`/`values` hold `n` entries of the map's sizes (the caller built them so).
    let rc = unsafe {
        libbpf_sys::bpf_map_update_batch(
            fd,
            keys.as_ptr().cast(),
            values.as_ptr().cast(),
            &mut count,
            &opts,
        )
    };
    if rc < 0 {
        return Err((count as usize, Error::errno("BPF_MAP_UPDATE_BATCH", rc)));
    }
    Ok(())
}

/// Wait until every XDP program run that started before the call has
/// finished: `membarrier(MEMBARRIER_CMD_GLOBAL)` is a `synchronize_rcu()`,
/// and XDP runs inside an RCU read-side critical section (NAPI softirq).
/// Falls back to a 50 ms sleep where membarrier is unavailable
/// (`nohz_full` kernels refuse the command) — orders of magnitude longer
/// than any program run.
pub fn grace_period() {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: plain syscall with integer arguments.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_GLOBAL,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if rc != 0 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Number of possible CPUs (the length of per-CPU values).
pub fn possible_cpus() -> usize {
    rampart_dataplane::maps::possible_cpus()
}

/// Read the single element (key 0) of a per-CPU array of `T`, one value per possible CPU.
///
/// # Errors
/// The lookup's error.
pub fn percpu_values<T: Pod>(fd: RawFd) -> Result<Vec<T>> {
    let ncpu = possible_cpus();
    let stride = std::mem::size_of::<T>().next_multiple_of(8);
    let mut buf = vec![0u8; stride * ncpu];
    lookup_raw(fd, &0u32.to_ne_bytes(), &mut buf)?;
    Ok((0..ncpu)
        .map(|c| bytemuck::pod_read_unaligned(&buf[c * stride..][..std::mem::size_of::<T>()]))
        .collect())
}
