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
