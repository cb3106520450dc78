//! The raw-fd map helpers (`rampart_dataplane::maps`) against real kernel
//! maps created for the test (freed with their fds).

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use rampart_dataplane::maps;

fn map(kind: MapType, key_size: u32, value_size: u32, entries: u32) -> MapHandle {
    assert!(
        rampart_dataplane::features::is_root(),
        "map tests need root: run them with ./run test"
    );
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    MapHandle::create(
        kind,
        Some("rampart_t_raw"),
        key_size,
        value_size,
        entries,
        &opts,
    )
    .expect("create map")
}

#[test]
fn lookup_u64_reads_an_array_entry_and_refuses_a_missing_key() {
    let m = map(MapType::Array, 4, 8, 4);
    let fd = m.as_fd().as_raw_fd();
    maps::update_raw(fd, &2u32.to_ne_bytes(), &0xdead_beef_u64.to_ne_bytes(), 0).unwrap();
    assert_eq!(maps::lookup_u64(fd, 2).unwrap(), 0xdead_beef);
    assert_eq!(maps::lookup_u64(fd, 0).unwrap(), 0);
    // Beyond an array's end: ENOENT, an error for a counter read.
    let e = maps::lookup_u64(fd, 4).unwrap_err().to_string();
    assert!(e.contains("no entry 4"), "{e}");
}

#[test]
fn lookup_raw_tells_an_absent_hash_key_from_a_present_one() {
    let m = map(MapType::Hash, 4, 8, 16);
    let fd = m.as_fd().as_raw_fd();
    let mut out = [0u8; 8];
    assert!(!maps::lookup_raw(fd, &7u32.to_ne_bytes(), &mut out).unwrap());
    m.update(&7u32.to_ne_bytes(), &42u64.to_ne_bytes(), MapFlags::ANY)
        .unwrap();
    assert!(maps::lookup_raw(fd, &7u32.to_ne_bytes(), &mut out).unwrap());
    assert_eq!(u64::from_ne_bytes(out), 42);
}

#[test]
fn lookup_percpu_u64_sum_adds_every_cpus_value() {
    let m = map(MapType::PercpuArray, 4, 8, 2);
    let ncpu = maps::possible_cpus();
    let vals: Vec<Vec<u8>> = (0..ncpu)
        .map(|c| (10 * (c as u64 + 1)).to_ne_bytes().to_vec())
        .collect();
    m.update_percpu(&1u32.to_ne_bytes(), &vals, MapFlags::ANY)
        .unwrap();
    let want: u64 = (1..=ncpu as u64).map(|c| 10 * c).sum();
    let fd = m.as_fd().as_raw_fd();
    assert_eq!(maps::lookup_percpu_u64_sum(fd, 1).unwrap(), want);
    assert_eq!(maps::lookup_percpu_u64_sum(fd, 0).unwrap(), 0);
    assert!(maps::lookup_percpu_u64_sum(fd, 2).is_err());
}

#[test]
fn batch_walks_see_every_entry_and_the_deleting_walk_empties_the_map() {
    let m = map(MapType::Hash, 4, 8, 256);
    let fd = m.as_fd().as_raw_fd();
    for k in 0..100u32 {
        maps::update_raw(fd, &k.to_ne_bytes(), &u64::from(k * 3).to_ne_bytes(), 0).unwrap();
    }
    // Chunks smaller than the map: the walk resumes from the kernel's token.
    let (keys, vals, n) = maps::lookup_batch_raw(fd, 4, 8, 16).unwrap();
    assert_eq!(n, 100);
    let mut seen: Vec<(u32, u64)> = keys
        .chunks_exact(4)
        .zip(vals.chunks_exact(8))
        .map(|(k, v)| {
            (
                u32::from_ne_bytes(k.try_into().unwrap()),
                u64::from_ne_bytes(v.try_into().unwrap()),
            )
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..100u32)
            .map(|k| (k, u64::from(k * 3)))
            .collect::<Vec<_>>()
    );
    // Still all there after a reading walk; gone after a deleting one.
    let mut sum = 0u64;
    let n = maps::walk_batch(fd, 4, 8, 7, true, |_, v| {
        sum += u64::from_ne_bytes(v.try_into().unwrap());
    })
    .unwrap();
    assert_eq!(n, 100);
    assert_eq!(sum, (0..100u64).map(|k| k * 3).sum::<u64>());
    assert_eq!(maps::lookup_batch_raw(fd, 4, 8, 16).unwrap().2, 0);
}

#[test]
fn delete_raw_says_whether_there_was_an_entry_and_map_info_describes_the_map() {
    let m = map(MapType::Hash, 4, 8, 16);
    let fd = m.as_fd().as_raw_fd();
    assert!(!maps::delete_raw(fd, &5u32.to_ne_bytes()).unwrap());
    maps::update_raw(fd, &5u32.to_ne_bytes(), &1u64.to_ne_bytes(), 0).unwrap();
    assert!(maps::delete_raw(fd, &5u32.to_ne_bytes()).unwrap());
    let mut out = [0u8; 8];
    assert!(!maps::lookup_raw(fd, &5u32.to_ne_bytes(), &mut out).unwrap());
    let info = maps::map_info(fd).expect("a map");
    assert_eq!(
        (info.type_, info.key_size, info.value_size, info.max_entries),
        (libbpf_rs::libbpf_sys::BPF_MAP_TYPE_HASH, 4, 8, 16)
    );
    // Not a map: an fd of a plain file.
    let f = std::fs::File::open("/proc/self/stat").unwrap();
    assert!(maps::map_info(f.as_raw_fd()).is_none());
}

#[test]
fn a_lookup_buffer_smaller_than_the_value_is_refused_before_the_kernel_writes() {
    let m = map(MapType::Array, 4, 16, 2);
    let fd = m.as_fd().as_raw_fd();
    // lookup_u64 on a map of 16-byte values: the kernel would write 16
    // bytes into 8.
    let e = maps::lookup_u64(fd, 0).unwrap_err().to_string();
    assert!(e.contains("16-byte values"), "{e}");
    let mut short = [0u8; 15];
    assert!(maps::lookup_raw(fd, &0u32.to_ne_bytes(), &mut short).is_err());
    let mut key_short = [0u8; 16];
    assert!(maps::lookup_raw(fd, &[0u8; 2], &mut key_short).is_err());
    let mut fits = [0u8; 16];
    assert!(maps::lookup_raw(fd, &0u32.to_ne_bytes(), &mut fits).unwrap());
    // Per-CPU: one rounded value per possible CPU.
    let p = map(MapType::PercpuArray, 4, 4, 1);
    let need = 8 * maps::possible_cpus();
    let mut small = vec![0u8; need - 1];
    assert!(maps::lookup_raw(p.as_fd().as_raw_fd(), &0u32.to_ne_bytes(), &mut small).is_err());
    let mut ok = vec![0u8; need];
    assert!(maps::lookup_raw(p.as_fd().as_raw_fd(), &0u32.to_ne_bytes(), &mut ok).unwrap());
}
