//! Simulated allocations larger than host memory fail with `OutOfMemory` instead of aborting
//! the process. (A file of its own: before the fix, these aborted the whole test binary.)

use crate::common::*;
use cusched::Error;

#[test]
fn a_device_allocation_too_large_for_host_memory_is_out_of_memory() {
    let d = sim();
    let s = d.default_stream();
    for len in [usize::MAX / 16, 1 << 60] {
        match d.alloc::<u64>(s, len) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, len * 8),
            other => panic!("len {len}: expected OutOfMemory, got {other:?}"),
        }
        assert!(matches!(d.alloc_zeros::<u64>(s, len), Err(Error::OutOfMemory { .. })), "len {len}");
    }
    // The device is still usable afterwards.
    assert_eq!(d.upload(s, &[3u64; 4]).unwrap().download(s).unwrap(), vec![3u64; 4]);
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn a_host_allocation_too_large_for_host_memory_is_out_of_memory() {
    let d = sim();
    for len in [usize::MAX / 16, 1 << 60] {
        match d.alloc_host::<u64>(len) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, len * 8),
            other => panic!("len {len}: expected OutOfMemory, got {other:?}"),
        }
    }
    assert_eq!(&*d.alloc_host::<u64>(3).unwrap().read().unwrap(), &[0u64; 3]);
}
