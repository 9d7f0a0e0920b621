//! Buffers and copies on the simulator: every copy goes through the tracker.

use crate::common::*;
use cusched::{Error, LaunchRecorder};

#[test]
fn upload_download_round_trip() {
    let d = sim();
    let s = d.new_stream().unwrap();
    let data: Vec<i32> = (0..1000).collect();
    let a = d.upload(s, &data).unwrap();
    assert_eq!(a.len(), 1000);
    assert_eq!(a.download(d.default_stream()).unwrap(), data);
}

#[test]
fn alloc_zeros_is_zero_and_alloc_has_the_length() {
    let d = sim();
    let s = d.default_stream();
    assert_eq!(d.alloc_zeros::<f64>(s, 7).unwrap().download(s).unwrap(), vec![0.0; 7]);
    assert_eq!(d.alloc::<u8>(s, 3).unwrap().len(), 3);
}

#[test]
fn device_to_device_copy_across_streams() {
    let d = sim();
    let (s0, s1, s2) = (d.default_stream(), d.new_stream().unwrap(), d.new_stream().unwrap());
    let a = d.upload(s0, &[1.5f32, 2.5, 3.5]).unwrap();
    let b = d.alloc_zeros::<f32>(s1, 3).unwrap();
    b.copy_from(s2, &a).unwrap();
    assert_eq!(b.download(s0).unwrap(), vec![1.5, 2.5, 3.5]);
    assert!(matches!(b.copy_from(s0, &b), Err(Error::InvalidArgument { .. })));
    let short = d.alloc_zeros::<f32>(s0, 2).unwrap();
    assert!(matches!(short.copy_from(s0, &a), Err(Error::InvalidArgument { arg: "src", .. })));
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn host_buffer_copies_are_asynchronous_and_fenced() {
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let src = d.host_from_slice(&[1u64, 2, 3, 4]).unwrap();
    let a = d.alloc_zeros::<u64>(s0, 4).unwrap();
    a.copy_from_host(s0, &src).unwrap();
    let mut dst = d.alloc_host::<u64>(4).unwrap();
    a.copy_to_host(s1, &mut dst).unwrap();
    assert_eq!(&*dst.read().unwrap(), &[1, 2, 3, 4]);
    dst.write().unwrap()[0] = 9;
    assert_eq!(dst.read().unwrap()[0], 9);
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn copy_from_slice_overwrites_in_order() {
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.alloc_zeros::<u32>(s0, 2).unwrap();
    a.copy_from_slice(s1, &[4, 5]).unwrap();
    a.copy_from_slice(s0, &[6, 7]).unwrap();
    assert_eq!(a.download(s1).unwrap(), vec![6, 7]);
    assert!(matches!(a.copy_from_slice(s0, &[1]), Err(Error::InvalidArgument { arg: "data", .. })));
}

#[test]
fn raw_cuda_accessors_say_which_backend_they_need() {
    let d = sim();
    let a = d.alloc_zeros::<u32>(d.default_stream(), 1).unwrap();
    // SAFETY: on the simulator these fail: nothing is handed out.
    assert!(matches!(unsafe { a.cuda_slice() }, Err(Error::WrongBackend { needed: "cuda", .. })));
    // SAFETY: as above.
    assert!(matches!(unsafe { d.cuda_stream(d.default_stream()) }, Err(Error::WrongBackend { .. })));
    let mut rec = LaunchRecorder::new_strict(d.default_stream());
    rec.read(&a).unwrap();
    // SAFETY: on the simulator this fails: no stream is handed out.
    let r = rec.launch(&d, |scope| unsafe { scope.cuda_stream() }.map(|_| ()));
    assert!(matches!(r, Err(Error::WrongBackend { .. })));
}

#[test]
fn opening_a_cuda_device_without_a_driver_is_an_error_not_a_panic() {
    match cusched::Device::open(0) {
        Ok(_) => {}
        Err(Error::LibraryUnavailable { .. }) | Err(Error::NoDevice { .. }) | Err(Error::Driver { .. }) => {}
        Err(e) => panic!("unexpected error {e}"),
    }
    assert!(cusched::Device::open(4096).is_err());
}
