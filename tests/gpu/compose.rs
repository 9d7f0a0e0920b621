//! `Device::open_or_sim` and composed completions on a real GPU. Skipped without a GPU unless
//! `CUSCHED_REQUIRE_GPU=1`.

use crate::common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::Device;

const SRC: &str = r#"
extern "C" __global__ void scale(float* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn open_or_sim_opens_the_gpu_when_there_is_one() {
    let Some(_gpu) = gpu() else { return };
    let device = Device::open_or_sim().unwrap();
    assert!(!device.is_simulated(), "a machine with a GPU gets the GPU");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn and_then_chains_a_kernel_after_an_upload_and_join_collects_in_order() {
    let Some(device) = gpu() else { return };
    let scale = device.compile(SRC, &[]).unwrap().kernel("scale").unwrap();
    let (up, compute) = (device.lane("upload").unwrap(), device.lane("compute").unwrap());
    let n = 1usize << 20;
    let parts: Vec<_> = (0..8u32)
        .map(|i| {
            let (compute, scale) = (compute.clone(), scale.clone());
            up.submit(move |cx| {
                let x = cx.device().upload(cx.stream(), &vec![i as f32; n])?;
                cx.keep(x.clone());
                Ok(x)
            })
            .and_then(move |x| {
                Ok(compute.submit(move |cx| {
                    let launch = scale
                        .launch(cx.device(), cx.stream(), LaunchConfig::for_num_elems(n as u32))
                        .read_write(&x)
                        .scalar(2.0f32)
                        .scalar(n as u32);
                    // SAFETY: 1. `scale` reads and writes `x` only, as declared; 2. with n it
                    // touches elements 0..n of a buffer of n; 3. its parameters are a float
                    // pointer, a float and an unsigned, as declared.
                    unsafe { launch.enqueue() }?.wait()?;
                    x.download(cx.stream())
                }))
            })
            .map(|v| v.iter().all(|&e| e == v[0]).then_some(v[0]))
        })
        .collect();
    let got = device.join(parts).wait().unwrap();
    assert_eq!(got, (0..8).map(|i| Some(i as f32 * 2.0)).collect::<Vec<_>>());
}
