//! Typed reads of BPF maps: per-CPU values and batched dumps.
//!
//! libbpf-rs's `lookup_batch` stops early on hash maps and refuses per-CPU
//! maps, so batched reads go through `libbpf_sys` here.

use std::io;
use std::os::fd::RawFd;

use libbpf_rs::MapCore;

use crate::error::{Error, Result};

/// Read one key of a per-CPU map: one value per possible CPU.
///
/// # Errors
/// The lookup's error; a missing key gives an empty vector.
pub fn lookup_percpu<T: bytemuck::Pod>(map: &impl MapCore, key: &[u8]) -> Result<Vec<T>> {
    let vals = map
        .lookup_percpu(key, libbpf_rs::MapFlags::ANY)
        .map_err(|e| Error::Bpf {
            context: format!("reading per-CPU map {}", map.name().to_string_lossy()),
            err: e,
        })?;
    Ok(vals
        .map(|v| {
            v.iter()
                .map(|b| bytemuck::pod_read_unaligned(&b[..std::mem::size_of::<T>()]))
                .collect()
        })
        .unwrap_or_default())
}

/// Number of possible CPUs (the length of per-CPU values).
pub fn possible_cpus() -> usize {
    libbpf_rs::num_possible_cpus().unwrap_or(1)
}

/// Dump a whole map with `BPF_MAP_LOOKUP_BATCH`, `chunk` entries per call.
/// `value_size` is the size of one value as the kernel returns it (for
/// per-CPU maps: the rounded-up value size times the possible CPUs).
///
/// Returns the keys and values concatenated, with the entry count.
///
/// # Errors
/// The kernel's error other than the end-of-map `ENOENT`.
pub fn lookup_batch_raw(
    fd: RawFd,
    key_size: usize,
    value_size: usize,
    chunk: u32,
) -> Result<(Vec<u8>, Vec<u8>, usize)> {
    let mut keys = Vec::new();
    let mut vals = Vec::new();
    let total = walk_batch(fd, key_size, value_size, chunk, false, |k, v| {
        keys.extend_from_slice(k);
        vals.extend_from_slice(v);
    })?;
    Ok((keys, vals, total))
}

/// Every key of a map, walked with `BPF_MAP_GET_NEXT_KEY` (for map types
/// without batch operations, such as LPM tries; a key removed meanwhile
/// may restart the walk, so each key is kept once).
///
/// # Errors
/// The kernel's error other than the end-of-map `ENOENT`.
pub fn keys_raw(fd: RawFd, key_size: usize) -> Result<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut next = vec![0u8; key_size];
    let mut prev: Option<Vec<u8>> = None;
    loop {
        let prev_ptr = prev
            .as_ref()
            .map_or(std::ptr::null(), |p| p.as_ptr().cast());
        // SAFETY: both buffers are key_size bytes, the map's key size.
        let rc =
            unsafe { libbpf_sys::bpf_map_get_next_key(fd, prev_ptr, next.as_mut_ptr().cast()) };
        if rc < 0 {
            if -rc == libc::ENOENT {
                return Ok(out);
            }
            return Err(Error::Io {
                context: "walking a map's keys".into(),
                err: std::io::Error::from_raw_os_error(-rc),
            });
        }
        if seen.insert(next.clone()) {
            out.push(next.clone());
        } else if out.len() > 1 << 20 {
            return Ok(out);
        }
        prev = Some(next.clone());
    }
}

/// Walk a whole map with `BPF_MAP_LOOKUP_BATCH` (or, with `delete`,
/// `BPF_MAP_LOOKUP_AND_DELETE_BATCH`: read and empty a hash map), `chunk`
/// entries per call, calling `each(key, value)` per entry; returns the
/// count. `value_size` is what the kernel returns per entry (all CPUs for
/// per-CPU maps).
///
/// # Errors
/// The kernel's error other than the end-of-map `ENOENT` (entries handed
/// to `each` before it stay handed).
pub fn walk_batch(
    fd: RawFd,
    key_size: usize,
    value_size: usize,
    chunk: u32,
    delete: bool,
    mut each: impl FnMut(&[u8], &[u8]),
) -> Result<usize> {
    let mut total = 0usize;
    let mut in_batch = vec![0u8; key_size.max(8)];
    let mut out_batch = vec![0u8; key_size.max(8)];
    let mut kbuf = vec![0u8; key_size * chunk as usize];
    let mut vbuf = vec![0u8; value_size * chunk as usize];
    let mut first = true;
    // The two commands take the same arguments.
    let call = if delete {
        libbpf_sys::bpf_map_lookup_and_delete_batch
    } else {
        libbpf_sys::bpf_map_lookup_batch
    };
    loop {
        let mut count = chunk;
        let opts = libbpf_sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
            ..Default::default()
        };
        let in_ptr = if first {
            std::ptr::null_mut()
        } else {
            in_batch.as_mut_ptr().cast()
        };
        // SAFETY: buffers are sized for `count` keys/values and the batch tokens.
        let rc = unsafe {
            call(
                fd,
                in_ptr,
                out_batch.as_mut_ptr().cast(),
                kbuf.as_mut_ptr().cast(),
                vbuf.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let n = count as usize;
        for i in 0..n {
            each(
                &kbuf[i * key_size..(i + 1) * key_size],
                &vbuf[i * value_size..(i + 1) * value_size],
            );
        }
        total += n;
        if rc < 0 {
            if -rc == libc::ENOENT {
                break;
            }
            return Err(Error::Io {
                context: if delete {
                    "BPF_MAP_LOOKUP_AND_DELETE_BATCH"
                } else {
                    "BPF_MAP_LOOKUP_BATCH"
                }
                .into(),
                err: io::Error::from_raw_os_error(-rc),
            });
        }
        std::mem::swap(&mut in_batch, &mut out_batch);
        first = false;
    }
    Ok(total)
}

/// `bpf_map_lookup_elem` on a raw fd into `out`, which must hold the value
/// (for per-CPU maps: one value rounded up to 8 bytes per possible CPU).
/// `Ok(false)` when the key is absent.
///
/// # Errors
/// Any error but `ENOENT`.
pub fn lookup_raw(fd: RawFd, key: &[u8], out: &mut [u8]) -> Result<bool> {
    // The kernel writes the map's whole value into `out`: a buffer that is
    // too small would be overwritten past its end, so the sizes are checked
    // against the map first (one more syscall; these are control-plane reads).
    let info = map_info(fd).ok_or_else(|| Error::Io {
        context: "BPF_MAP_LOOKUP_ELEM: not a BPF map fd".into(),
        err: io::Error::from_raw_os_error(libc::EBADF),
    })?;
    let value = value_bytes(&info);
    if key.len() < info.key_size as usize || out.len() < value {
        return Err(Error::Io {
            context: format!(
                "BPF_MAP_LOOKUP_ELEM: buffers of {} / {} bytes for a map with {}-byte keys and {}-byte values",
                key.len(),
                out.len(),
                info.key_size,
                value
            ),
            err: io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    // SAFETY: sizes checked above: the kernel reads key_size bytes of `key`
    // and writes `value` bytes into `out`.
    let rc = unsafe {
        libbpf_sys::bpf_map_lookup_elem(fd, key.as_ptr().cast(), out.as_mut_ptr().cast())
    };
    if rc < 0 {
        if -rc == libc::ENOENT {
            return Ok(false);
        }
        return Err(Error::Io {
            context: "BPF_MAP_LOOKUP_ELEM".into(),
            err: io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(true)
}

/// [`lookup_raw`] of a 4-byte key that must be there (`ENOENT` is an error).
fn lookup_present(fd: RawFd, key: u32, out: &mut [u8]) -> Result<()> {
    if lookup_raw(fd, &key.to_ne_bytes(), out)? {
        return Ok(());
    }
    Err(Error::Io {
        context: format!("BPF_MAP_LOOKUP_ELEM: no entry {key}"),
        err: io::Error::from_raw_os_error(libc::ENOENT),
    })
}

/// The `u64` at `key` of a map with 4-byte keys and 8-byte values (an
/// array of counters).
///
/// # Errors
/// The kernel's error; an absent key is an error too (`ENOENT`).
pub fn lookup_u64(fd: RawFd, key: u32) -> Result<u64> {
    let mut v = [0u8; 8];
    lookup_present(fd, key, &mut v)?;
    Ok(u64::from_ne_bytes(v))
}

/// The sum over CPUs of the `u64` at `key` of a per-CPU map with 4-byte
/// keys (a per-CPU array of counters).
///
/// # Errors
/// The kernel's error; an absent key is an error too (`ENOENT`).
pub fn lookup_percpu_u64_sum(fd: RawFd, key: u32) -> Result<u64> {
    let mut v = vec![0u8; 8 * possible_cpus()];
    lookup_present(fd, key, &mut v)?;
    Ok(v.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .sum())
}

/// `bpf_map_delete_elem` on a raw fd; `Ok(false)` when the key is absent.
///
/// # Errors
/// Any error but `ENOENT`.
pub fn delete_raw(fd: RawFd, key: &[u8]) -> Result<bool> {
    // SAFETY: `key` is valid for the map's key size (checked by the kernel).
    let rc = unsafe { libbpf_sys::bpf_map_delete_elem(fd, key.as_ptr().cast()) };
    if rc < 0 {
        if -rc == libc::ENOENT {
            return Ok(false);
        }
        return Err(Error::Io {
            context: "BPF_MAP_DELETE_ELEM".into(),
            err: io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(true)
}

/// Bytes the kernel reads or writes for one value of the map described by
/// `info`: per-CPU maps give one value, rounded up to 8 bytes, per possible CPU.
pub fn value_bytes(info: &libbpf_sys::bpf_map_info) -> usize {
    let percpu = matches!(
        info.type_,
        libbpf_sys::BPF_MAP_TYPE_PERCPU_ARRAY
            | libbpf_sys::BPF_MAP_TYPE_PERCPU_HASH
            | libbpf_sys::BPF_MAP_TYPE_LRU_PERCPU_HASH
            | libbpf_sys::BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE
    );
    if percpu {
        (info.value_size as usize).div_ceil(8) * 8 * possible_cpus()
    } else {
        info.value_size as usize
    }
}

/// The kernel's description of the map behind `fd` (type, key and value
/// sizes, entries, id, name); `None` when `fd` is not a map.
pub fn map_info(fd: RawFd) -> Option<libbpf_sys::bpf_map_info> {
    let mut info = libbpf_sys::bpf_map_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
    // SAFETY: `info` is valid for `len` bytes.
    let rc = unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd, &mut info, &mut len) };
    (rc == 0).then_some(info)
}

/// `bpf_map_update_elem` on a raw fd — for updates that must happen on a
/// thread inside another network namespace (devmaps and XSKMAPs resolve
/// ifindexes in the caller's namespace), where a libbpf-rs map is not `Send`.
///
/// # Errors
/// The kernel's error.
pub fn update_raw(fd: RawFd, key: &[u8], value: &[u8], flags: u64) -> Result<()> {
    // SAFETY: key and value are valid for the map's sizes, checked by the kernel against the map.
    let rc = unsafe {
        libbpf_sys::bpf_map_update_elem(fd, key.as_ptr().cast(), value.as_ptr().cast(), flags)
    };
    if rc < 0 {
        return Err(Error::Io {
            context: "BPF_MAP_UPDATE_ELEM".into(),
            err: io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(())
}
