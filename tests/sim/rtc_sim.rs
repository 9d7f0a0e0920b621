//! NVRTC on the simulator: a CUDA C++ kernel has no CPU meaning there, so compiling one fails,
//! and the error names what to do instead (a host closure through `LaunchScope::sim_kernel`),
//! which then runs under the same declared uses.

use crate::common::*;
use cusched::{Error, LaunchRecorder};

const SRC: &str = r#"extern "C" __global__ void twice(float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }"#;

#[test]
fn compiling_on_the_simulator_names_the_host_closure_form() {
    let d = sim();
    for err in [d.compile(SRC, &[]).unwrap_err(), d.compile_program(&cusched::Program::new(SRC)).unwrap_err()] {
        let msg = err.to_string();
        assert!(matches!(err, Error::LibraryUnavailable { .. }), "{err:?}");
        assert!(msg.contains("LaunchScope::sim_kernel") && msg.contains("host closure"), "{msg}");
    }
    // The form it names: the kernel's computation as a host closure, under the same uses.
    let s = d.default_stream();
    let x = d.upload(s, &[1.0f32, 2.0, 3.0]).unwrap();
    let xm = x.sim_data().unwrap();
    let mut rec = LaunchRecorder::new_strict(s).named("twice");
    rec.read_write(&x).unwrap();
    rec.launch(&d, |scope| {
        scope.sim_kernel(move || {
            for v in xm.lock().iter_mut() {
                *v *= 2.0;
            }
        })
    })
    .unwrap();
    assert_eq!(x.download(s).unwrap(), [2.0, 4.0, 6.0]);
}

/// A module image's kind comes from its first bytes; what is none of the three is refused, and
/// on the simulator loading any image names what to do instead, as compiling does.
#[test]
fn module_images_are_told_apart_and_refused_on_the_simulator() {
    use cusched::ModuleImage;
    let cubin = [0x7f, b'E', b'L', b'F', 2, 1, 1];
    assert!(matches!(ModuleImage::from_bytes(cubin.to_vec()), Ok(ModuleImage::Cubin(_))));
    assert!(matches!(ModuleImage::from_bytes(vec![0x50, 0xed, 0x55, 0xba, 1, 0]), Ok(ModuleImage::Fatbin(_))));
    assert!(matches!(ModuleImage::from_bytes(b".version 8.0\n".to_vec()), Ok(ModuleImage::Ptx(_))));
    assert!(matches!(
        ModuleImage::from_bytes(vec![0xff, 0xfe, 0x00]),
        Err(Error::InvalidArgument { arg: "image", .. })
    ));
    let missing = std::env::temp_dir().join("cusched-no-such-module.ptx");
    assert!(matches!(ModuleImage::from_file(&missing), Err(Error::InvalidArgument { arg: "path", .. })));
    let d = sim();
    // Checked before the backend: not PTX, not a CUBIN.
    assert!(matches!(
        d.load_module(&ModuleImage::Ptx("hello".into())),
        Err(Error::InvalidArgument { arg: "image", .. })
    ));
    assert!(matches!(d.load_module(&ModuleImage::Cubin(vec![0; 8])), Err(Error::InvalidArgument { arg: "image", .. })));
    let err = d.load_module(&ModuleImage::Ptx(".version 8.0\n.target sm_90\n".into())).unwrap_err();
    assert!(matches!(err, Error::LibraryUnavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("LaunchScope::sim_kernel"), "{err}");
}

/// The raw path's launch options are checked as the typed path's are, before anything is
/// recorded, each refusal naming its argument (the checks that need a device and a kernel run
/// on a GPU: tests/gpu/launch_features.rs).
#[test]
fn raw_launch_options_are_refused_naming_the_argument() {
    use cusched::cudarc::driver::LaunchConfig;
    use cusched::LaunchOptions;
    let mut fx = fixture::fx();
    let cfg = |grid: (u32, u32, u32), block: u32| LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    };
    let none = LaunchOptions::new();
    fixture::rejects(&mut fx, "config.grid_dim", |_| none.check(&cfg((0, 1, 1), 32)));
    fixture::rejects(&mut fx, "config.grid_dim", |_| none.check(&cfg((1, 70_000, 1), 32)));
    fixture::rejects(&mut fx, "config.block_dim", |_| none.check(&cfg((1, 1, 1), 2048)));
    fixture::rejects(&mut fx, "cluster", |_| none.cluster((0, 1, 1)).check(&cfg((4, 1, 1), 32)));
    fixture::rejects(&mut fx, "cluster", |_| none.cluster((4, 1, 1)).check(&cfg((6, 1, 1), 32)));
    fixture::rejects(&mut fx, "cluster", |_| none.cluster((32, 1, 1)).check(&cfg((32, 1, 1), 32)));
    let both = none.cooperative().cluster((2, 1, 1));
    assert!(matches!(both.check(&cfg((4, 1, 1), 32)), Err(Error::Unsupported { .. })));
    // What needs no device passes here; a PDL or cooperative launch is only checked on a GPU.
    assert!(none.cluster((2, 1, 1)).check(&cfg((4, 1, 1), 32)).is_ok());
    assert!(none.cooperative().programmatic_dependent().check(&cfg((4, 1, 1), 32)).is_ok());
}
