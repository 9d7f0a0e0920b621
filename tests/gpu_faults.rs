//! Faults on a real GPU: out-of-memory is a typed error and the device keeps working. Skipped
//! without a GPU unless `CUSCHED_REQUIRE_GPU=1`.

mod common;
use common::*;
use cusched::Error;

#[test]
fn gpu_allocation_beyond_device_memory_is_out_of_memory_and_the_device_keeps_working() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let keep = d.upload(s, &[7u32; 1024]).unwrap();
    // 1 TiB of floats: more than any GPU has.
    let requested = 1usize << 40;
    match d.alloc::<u8>(s, requested) {
        Err(Error::OutOfMemory { requested: r, free }) => {
            assert_eq!(r, requested);
            assert!(free > 0 && free < requested, "free = {free}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // The failure is not sticky: existing buffers and new work are fine.
    assert_eq!(keep.download(s).unwrap(), vec![7u32; 1024]);
    let fresh = d.upload(s, &[1.5f32; 4096]).unwrap();
    assert_eq!(fresh.download(d.default_stream()).unwrap(), vec![1.5f32; 4096]);
    assert_eq!(d.generation(), 1, "an out-of-memory error does not poison the context");
}
