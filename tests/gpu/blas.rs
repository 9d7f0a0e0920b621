//! cuBLAS ops on a real GPU against CPU references in f64, on fresh random inputs, with
//! outputs poisoned (NaN) before each op so unwritten elements show. Both call paths: inline
//! `Handles` and lane jobs.
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

use crate::common::reference::blas::{
    check_batched, check_gemm, check_grouped, check_level1, check_level23, check_strided, check_triangular, close,
    every_op, random, same_outputs, up,
};
use crate::common::reference::blas_complex::check_complex;
use crate::common::reference::blas_ex::check_gemm_ex;
use crate::common::reference::blas_level3::check_level3;
use crate::common::{gpu, raw_launch, Rng};
use cusched::blas::{Gemm, MathMode, Vector};
use cusched::half::{bf16, f16};
use cusched::{Complex, Handles};

#[test]
#[ignore = "needs a CUDA GPU"]
fn gemm_all_types_and_transposes_inline() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_gemm::<f32>(&d, &mut h, &mut rng);
    check_gemm::<f64>(&d, &mut h, &mut rng);
    check_gemm::<f16>(&d, &mut h, &mut rng);
    check_gemm::<bf16>(&d, &mut h, &mut rng);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gemm_on_a_lane_and_tf32_math_mode() {
    let Some(d) = gpu() else { return };
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    lane.submit(move |cx| {
        let mut rng = Rng::new();
        check_gemm::<f32>(&dd, cx, &mut rng);
        check_gemm::<bf16>(&dd, cx, &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
    // TF32: same GEMM, tolerance of TF32's 10-bit mantissa.
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    h.blas().unwrap().set_math_mode(MathMode::Tf32Allowed).unwrap();
    assert_eq!(h.blas().unwrap().math_mode(), MathMode::Tf32Allowed);
    let mut rng = Rng::new();
    let (m, n, k) = (64, 64, 64);
    let a: Vec<f32> = random(&mut rng, m * k);
    let b: Vec<f32> = random(&mut rng, k * n);
    let (da, db, dc) = (up(&d, s, &a), up(&d, s, &b), up(&d, s, &vec![f32::NAN; m * n]));
    h.blas().unwrap().gemm(&Gemm::new(m, n, k, &da, &db, &dc)).unwrap().wait().unwrap();
    let got = dc.download(s).unwrap();
    for j in 0..n {
        for i in 0..m {
            let (mut sum, mut abs) = (0.0f64, 0.0f64);
            for l in 0..k {
                let p = a[i + l * m] as f64 * b[l + j * k] as f64;
                sum += p;
                abs += p.abs();
            }
            close("tf32 gemm", got[i + j * m] as f64, sum, abs, 2e-3);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn strided_and_pointer_array_batches() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_strided::<f32>(&d, &mut h, &mut rng);
    check_strided::<f64>(&d, &mut h, &mut rng);
    check_strided::<bf16>(&d, &mut h, &mut rng);
    check_batched::<f32>(&d, &mut h, &mut rng);
    check_batched::<f64>(&d, &mut h, &mut rng);
    check_batched::<f16>(&d, &mut h, &mut rng);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn level1_2_3_inline() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_level1::<f32>(&d, &mut h, &mut rng);
    check_level1::<f64>(&d, &mut h, &mut rng);
    check_level23::<f32>(&d, &mut h, &mut rng);
    check_level23::<f64>(&d, &mut h, &mut rng);
    check_triangular::<f32>(&d, &mut h, &mut rng);
    check_triangular::<f64>(&d, &mut h, &mut rng);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn level1_2_3_on_a_lane_with_scalars_through_the_job() {
    let Some(d) = gpu() else { return };
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    let dot = lane
        .submit(move |cx| {
            let mut rng = Rng::new();
            check_level1::<f64>(&dd, cx, &mut rng);
            check_level23::<f32>(&dd, cx, &mut rng);
            // A scalar result produced inside a job comes back as the job's value.
            let ones = dd.upload(cx.stream(), &vec![1.0f32; 300])?;
            let dot = cx.blas()?.dot(300, Vector::from(&ones), Vector::from(&ones))?;
            Ok(dot)
        })
        .wait()
        .unwrap();
    assert_eq!(dot.wait().unwrap(), 300.0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_rejects_bad_input_without_recording() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let (a, b, c) = (
        d.alloc_zeros::<f32>(s, 6).unwrap(),
        d.alloc_zeros::<f32>(s, 12).unwrap(),
        d.alloc_zeros::<f32>(s, 8).unwrap(),
    );
    // The handle (and its workspace) first: what is counted is what the rejected ops record.
    h.blas().unwrap();
    let before = d.stats();
    for g in [
        Gemm::new(2, 4, 4, &a, &b, &c),
        Gemm::new(2, 4, 3, &a, &b, &c).leading(1, 3, 2),
        Gemm::new(0, 4, 3, &a, &b, &c),
    ] {
        assert!(matches!(h.blas().unwrap().gemm(&g), Err(cusched::Error::InvalidArgument { .. })));
    }
    let after = d.stats();
    assert_eq!((before.events, before.waits), (after.events, after.waits));
}

/// The raw handle is the live cuBLAS handle of the `Blas`, bound to the stream it enqueues on.
#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_cublas_handle_is_live_on_the_blas_stream() {
    use cusched::cudarc::cublas::sys;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let lib = h.blas().unwrap();
    let raw = lib.cublas_handle().unwrap();
    let (status, got, want) = raw_launch(&d, cusched::LaunchRecorder::new_strict(lib.stream()), |stream| {
        let mut got: sys::cudaStream_t = std::ptr::null_mut();
        // SAFETY: 1. `raw` is the live handle of `lib`, which outlives the launch, and its
        // context is current (`raw_launch` binds it); 2. `got` is a valid out-pointer for one
        // stream; 3. the query enqueues nothing and touches no device memory, so the launch
        // declares no uses.
        let status = unsafe { sys::cublasGetStream_v2(raw, &mut got) };
        (status, got as usize, stream as usize)
    });
    assert_eq!(status, sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
    assert_ne!(want, 0, "the handles' stream is one of its own, not the legacy default stream");
    assert_eq!(got, want, "the raw handle is not bound to the stream of its Blas");
}

/// Every op on the GPU and on a simulated device, from the same inputs: the simulator's host
/// computation agrees with cuBLAS to each type's tolerance.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_and_simulator_agree_on_every_op() {
    let Some(d) = gpu() else { return };
    let sim = crate::common::sim();
    let seed = Rng::new().next();
    let on_gpu = every_op(&d, &mut Handles::new(&d, d.new_stream().unwrap()).unwrap(), seed);
    let on_sim = every_op(&sim, &mut Handles::new(&sim, sim.new_stream().unwrap()).unwrap(), seed);
    same_outputs(&on_sim, &on_gpu);
}

/// Every complex op (GEMMs with conjugate transposes, level 1 to 3), inline and in a lane job.
#[test]
#[ignore = "needs a CUDA GPU"]
fn complex_ops_inline_and_on_a_lane() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_complex::<Complex<f32>>(&d, &mut h, &mut rng);
    check_complex::<Complex<f64>>(&d, &mut h, &mut rng);
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    lane.submit(move |cx| {
        let mut rng = Rng::new();
        check_complex::<Complex<f32>>(&dd, cx, &mut rng);
        check_complex::<Complex<f64>>(&dd, cx, &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
}

/// Every (A/B, C, compute) combination of `gemm_ex`, and a strided int8 batch, inline.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gemm_ex_every_combination() {
    let Some(d) = gpu() else { return };
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_gemm_ex(&d, &mut h, &mut Rng::new());
}

/// `symm`, `hemm`, `trmm`, `syr2k`, `her2k`, `herk`, `dgmm` in every type, inline and on a lane.
#[test]
#[ignore = "needs a CUDA GPU"]
fn symm_trmm_rank_2k_herk_dgmm() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_level3::<f32>(&d, &mut h, &mut rng);
    check_level3::<f64>(&d, &mut h, &mut rng);
    check_level3::<Complex<f32>>(&d, &mut h, &mut rng);
    check_level3::<Complex<f64>>(&d, &mut h, &mut rng);
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    lane.submit(move |cx| {
        check_level3::<Complex<f64>>(&dd, cx, &mut Rng::new());
        Ok(())
    })
    .wait()
    .unwrap();
}

/// Grouped batched GEMM (cuBLAS 12.5 or later), in each type, inline.
#[test]
#[ignore = "needs a CUDA GPU"]
fn grouped_batched_gemm() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_grouped::<f32>(&d, &mut h, &mut rng);
    check_grouped::<f16>(&d, &mut h, &mut rng);
    check_grouped::<bf16>(&d, &mut h, &mut rng);
}
