//! A module's `__device__` / `__constant__` variables as tracked buffers, on the simulator's
//! module (`Device::sim_module`): zeroed named buffers made on first lookup, uploaded to, read
//! by a kernel that declares them, downloaded, sized checked, shared by every lookup, and
//! living on after the module handle drops.

use crate::common::*;
use cusched::{Error, LaunchRecorder};

#[test]
fn a_global_is_uploaded_read_by_a_declaring_kernel_and_downloaded() {
    let d = sim();
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let module = d.sim_module().unwrap();
    let table = module.global::<f32>("table", 4).unwrap();
    assert_eq!(table.len(), 4);
    assert!(table.name().starts_with("module global #"), "{}", table.name());
    assert_eq!(table.download(s1).unwrap(), [0.0; 4], "a simulated global starts zeroed");
    table.copy_from_slice(s1, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    // A kernel on another stream that reads the global: the tracker fences it after the upload.
    let out = d.alloc_zeros::<f32>(s2, 4).unwrap();
    let (tm, om) = (table.sim_data().unwrap(), out.sim_data().unwrap());
    let mut rec = LaunchRecorder::new_strict(s2).named("scale_by_table");
    rec.read(&table).unwrap();
    rec.write(&out).unwrap();
    rec.launch(&d, |scope| {
        scope.sim_kernel(move || {
            let t = tm.read().to_vec();
            for (o, v) in om.lock().iter_mut().zip(t) {
                *o = 10.0 * v;
            }
        })
    })
    .unwrap();
    assert_eq!(out.download(s1).unwrap(), [10.0, 20.0, 30.0, 40.0]);
    // A kernel that writes the global (a counter), downloaded on another stream.
    let tm = table.sim_data().unwrap();
    let mut rec = LaunchRecorder::new_strict(s2).named("bump");
    rec.read_write(&table).unwrap();
    rec.launch(&d, |scope| scope.sim_kernel(move || tm.lock()[0] += 1.0)).unwrap();
    assert_eq!(table.download(s1).unwrap(), [2.0, 2.0, 3.0, 4.0]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

#[test]
fn a_wrong_size_or_type_is_refused_naming_the_argument() {
    let d = sim();
    let module = d.sim_module().unwrap();
    let table = module.global::<f32>("table", 4).unwrap();
    let before = d.stats();
    match module.global::<f32>("table", 5) {
        Err(Error::InvalidArgument { arg: "len", reason: message }) => {
            assert!(message.contains("`table`") && message.contains("16 bytes"), "{message}")
        }
        other => panic!("expected a refusal of `len`, got {other:?}"),
    }
    // The same byte size as another element type, while a handle lives: two trackers of one
    // memory would not order each other.
    match module.global::<u32>("table", 4) {
        Err(Error::InvalidArgument { arg: "name", reason: message }) => {
            assert!(message.contains("`table`"), "{message}")
        }
        other => panic!("expected a refusal of `name`, got {other:?}"),
    }
    match module.global::<f32>("huge", usize::MAX) {
        Err(Error::InvalidArgument { arg: "len", .. }) => {}
        other => panic!("expected a refusal of `len`, got {other:?}"),
    }
    let after = d.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "a refusal recorded something");
    drop(table);
    // A simulated global's memory keeps its first element type (a device's has none).
    match module.global::<u32>("table", 4) {
        Err(Error::InvalidArgument { arg: "name", reason: message }) => assert!(message.contains("keeps"), "{message}"),
        other => panic!("expected a refusal of `name`, got {other:?}"),
    }
    assert_eq!(module.global::<f32>("table", 4).unwrap().len(), 4);
    // And a simulated module has no kernels: they are host closures there.
    assert!(matches!(module.kernel("k"), Err(Error::LibraryUnavailable { .. })));
}

#[test]
fn every_lookup_shares_one_tracked_buffer_and_the_memory_persists() {
    let d = sim();
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let module = d.sim_module().unwrap();
    let a = module.global::<u32>("counter", 1).unwrap();
    let b = module.global::<u32>("counter", 1).unwrap();
    assert!(a.same_buffer(&b), "two lookups gave two trackers of one variable");
    let other = module.global::<u32>("other", 1).unwrap();
    assert!(!a.same_buffer(&other));
    // A write on s2, every handle dropped at once, and a new lookup read on s1: the new
    // buffer's first use waits for the old one's write.
    let am = a.sim_data().unwrap();
    let mut rec = LaunchRecorder::new_strict(s2).named("set");
    rec.write(&a).unwrap();
    rec.launch(&d, |scope| scope.sim_kernel(move || am.lock()[0] = 7)).unwrap();
    drop((a, b));
    let again = module.global::<u32>("counter", 1).unwrap();
    assert_eq!(again.download(s1).unwrap(), [7]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

#[test]
fn a_global_outlives_its_dropped_module_handle() {
    let d = sim();
    let s = d.default_stream();
    let module = d.sim_module().unwrap();
    let g = module.global::<i32>("g", 3).unwrap();
    drop(module);
    g.copy_from_slice(s, &[1, 2, 3]).unwrap();
    assert_eq!(g.download(s).unwrap(), [1, 2, 3]);
    let copy = d.alloc_zeros::<i32>(s, 3).unwrap();
    copy.copy_from(s, &g).unwrap();
    drop(g);
    assert_eq!(copy.download(s).unwrap(), [1, 2, 3]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}
