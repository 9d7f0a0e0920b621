//! cuBLAS on the simulator: every op computes on the CPU, checked against the f64 references
//! the GPU suite uses (`common::reference::blas`), through both call paths (inline `Handles`
//! and lane jobs); the hazard checker sees the ops' uses as it sees a user kernel's.

use crate::common::reference::blas::{
    check_batched, check_gemm, check_grouped, check_level1, check_level23, check_strided, check_triangular, every_op,
    same_outputs,
};
use crate::common::reference::blas_complex::check_complex;
use crate::common::reference::blas_ex::check_gemm_ex;
use crate::common::reference::blas_level3::check_level3;
use crate::common::{sim, Rng};
use cusched::blas::{Gemm, MathMode, Transpose, Vector};
use cusched::half::{bf16, f16};
use cusched::{Complex, Handles};

fn handles(d: &cusched::Device) -> Handles {
    Handles::new(d, d.new_stream().unwrap()).unwrap()
}

#[test]
fn gemm_computes_every_type_and_transpose() {
    let d = sim();
    let (mut h, mut rng) = (handles(&d), Rng::new());
    check_gemm::<f32>(&d, &mut h, &mut rng);
    check_gemm::<f64>(&d, &mut h, &mut rng);
    check_gemm::<f16>(&d, &mut h, &mut rng);
    check_gemm::<bf16>(&d, &mut h, &mut rng);
    // TF32 is only remembered on the simulator: the GEMM stays full f32.
    h.blas().unwrap().set_math_mode(MathMode::Tf32Allowed).unwrap();
    check_gemm::<f32>(&d, &mut h, &mut rng);
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn strided_and_pointer_array_batches_compute() {
    let d = sim();
    let (mut h, mut rng) = (handles(&d), Rng::new());
    check_strided::<f32>(&d, &mut h, &mut rng);
    check_strided::<f64>(&d, &mut h, &mut rng);
    check_strided::<f16>(&d, &mut h, &mut rng);
    check_strided::<bf16>(&d, &mut h, &mut rng);
    check_batched::<f32>(&d, &mut h, &mut rng);
    check_batched::<f64>(&d, &mut h, &mut rng);
    check_batched::<f16>(&d, &mut h, &mut rng);
    check_batched::<bf16>(&d, &mut h, &mut rng);
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn level1_computes_with_scalars_through_the_completion() {
    let d = sim();
    let (mut h, mut rng) = (handles(&d), Rng::new());
    check_level1::<f32>(&d, &mut h, &mut rng);
    check_level1::<f64>(&d, &mut h, &mut rng);
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn level2_and_3_compute() {
    let d = sim();
    let (mut h, mut rng) = (handles(&d), Rng::new());
    check_level23::<f32>(&d, &mut h, &mut rng);
    check_level23::<f64>(&d, &mut h, &mut rng);
    check_triangular::<f32>(&d, &mut h, &mut rng);
    check_triangular::<f64>(&d, &mut h, &mut rng);
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn every_op_on_a_lane_matches_the_same_ops_inline() {
    let d = sim();
    let inline = every_op(&d, &mut handles(&d), 11);
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    let on_lane = lane.submit(move |cx| Ok(every_op(&dd, cx, 11))).wait().unwrap();
    same_outputs(&on_lane, &inline);
    // A scalar made inside a job comes back as the job's value.
    let dd = d.clone();
    let dot = lane
        .submit(move |cx| {
            let ones = dd.upload(cx.stream(), &vec![1.0f32; 300])?;
            cx.blas()?.dot(300, Vector::from(&ones), Vector::from(&ones))
        })
        .wait()
        .unwrap();
    assert_eq!(dot.wait().unwrap(), 300.0);
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// With beta zero, C is only written: NaNs in it do not reach the result, as in cuBLAS.
#[test]
fn gemm_with_beta_zero_does_not_read_c() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    let (a, b) = (d.upload(s, &[1.0f32, 2.0, 3.0, 4.0]).unwrap(), d.upload(s, &[1.0f32, 0.0, 0.0, 1.0]).unwrap());
    let c = d.upload(s, &[f32::NAN; 4]).unwrap();
    h.blas().unwrap().gemm(&Gemm::new(2, 2, 2, &a, &b, &c)).unwrap().wait().unwrap();
    assert_eq!(c.download(s).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    let ch = d.upload(s, &[bf16::from_f32(f32::NAN); 4]).unwrap();
    let (ah, bh) = (d.upload(s, &[bf16::from_f32(2.0); 4]).unwrap(), d.upload(s, &[bf16::from_f32(0.5); 4]).unwrap());
    h.blas().unwrap().gemm(&Gemm::new(2, 2, 2, &ah, &bh, &ch)).unwrap().wait().unwrap();
    assert_eq!(ch.download(s).unwrap(), vec![bf16::from_f32(2.0); 4]);
}

/// A GEMM's output read by a user kernel on another stream with no declared order: the checker
/// reports the conflict, as for two user kernels.
#[test]
fn an_unordered_read_of_a_gemm_output_is_reported() {
    use cusched::LaunchRecorder;
    let d = cusched::Device::sim(cusched::SimConfig { fail_on_hazard: false, ..Default::default() }).unwrap();
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let mut h = Handles::new(&d, s1).unwrap();
    let (a, b) = (d.upload(s1, &[1.0f32; 64 * 64]).unwrap(), d.upload(s1, &[1.0f32; 64 * 64]).unwrap());
    let c = d.alloc_zeros::<f32>(s1, 64 * 64).unwrap();
    h.blas().unwrap().gemm(&Gemm::new(64, 64, 64, &a, &b, &c)).unwrap();
    // The user kernel on s2 declares nothing, yet reads C.
    let cm = c.sim_data().unwrap();
    let rec = LaunchRecorder::new_strict(s2).named("peek");
    rec.launch(&d, |scope| {
        scope.sim_kernel(move || {
            let _ = cm.read()[0];
        })
    })
    .unwrap();
    d.synchronize(s2).unwrap();
    let hazards = d.sim_hazards().unwrap();
    assert!(
        hazards.iter().any(|h| h.kind == cusched::HazardKind::Undeclared && h.buffer == c.id()),
        "an undeclared read of the GEMM's output went unreported: {hazards:?}"
    );
}

/// The speed the simulator promises: a 512³ f32 GEMM well under a second in release, one core.
#[test]
fn gemm_512_cubed_f32_time() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    let n = 512;
    let a = d.upload(s, &vec![0.5f32; n * n]).unwrap();
    let b = d.upload(s, &vec![0.25f32; n * n]).unwrap();
    let c = d.alloc_zeros::<f32>(s, n * n).unwrap();
    let start = std::time::Instant::now();
    h.blas().unwrap().gemm(&Gemm::new(n, n, n, &a, &b, &c)).unwrap().wait().unwrap();
    let took = start.elapsed();
    println!("sim gemm 512^3 f32: {took:?}");
    assert!(c.download(s).unwrap().iter().all(|&v| v == 0.125 * n as f32));
    if !cfg!(debug_assertions) {
        assert!(took < std::time::Duration::from_secs(1), "512^3 f32 GEMM took {took:?} on the simulator");
    }
}

/// Every op the complex types offer, inline and in a lane job, against the f64 references.
#[test]
fn complex_ops_compute_on_both_call_paths() {
    let d = sim();
    let (mut h, mut rng) = (handles(&d), Rng::new());
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
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// A conjugate transpose of a real operand is its transpose, as in cuBLAS.
#[test]
fn a_conjugate_transpose_of_a_real_matrix_is_its_transpose() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    let (a, b) = (d.upload(s, &[1.0f64, 2.0, 3.0, 4.0]).unwrap(), d.upload(s, &[5.0f64, 6.0, 7.0, 8.0]).unwrap());
    let (c1, c2) = (d.alloc_zeros::<f64>(s, 4).unwrap(), d.alloc_zeros::<f64>(s, 4).unwrap());
    let b_ = h.blas().unwrap();
    b_.gemm(&Gemm::new(2, 2, 2, &a, &b, &c1).transpose(Transpose::Conj, Transpose::Yes)).unwrap();
    b_.gemm(&Gemm::new(2, 2, 2, &a, &b, &c2).transpose(Transpose::Yes, Transpose::Yes)).unwrap();
    assert_eq!(c1.download(s).unwrap(), c2.download(s).unwrap());
}

/// Every (A/B, C, compute) combination of `gemm_ex`, and a strided int8 batch, against f64.
#[test]
fn gemm_ex_computes_every_combination() {
    let d = sim();
    let (mut h, mut rng) = (handles(&d), Rng::new());
    check_gemm_ex(&d, &mut h, &mut rng);
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    lane.submit(move |cx| {
        check_gemm_ex(&dd, cx, &mut Rng::new());
        Ok(())
    })
    .wait()
    .unwrap();
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// `geam` may read one buffer as both `A` and `B` (here `C = A + Aᵀ`), as cuBLAS allows.
#[test]
fn geam_of_a_matrix_and_its_own_transpose() {
    use cusched::blas::Geam;
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    let a = d.upload(s, &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let c = d.alloc_zeros::<f32>(s, 4).unwrap();
    let g = Geam {
        trans_a: Transpose::No,
        trans_b: Transpose::Yes,
        m: 2,
        n: 2,
        alpha: 1.0f32,
        a: &a,
        lda: None,
        beta: 1.0,
        b: &a,
        ldb: None,
        c: &c,
        ldc: None,
    };
    h.blas().unwrap().geam(&g).unwrap().wait().unwrap();
    assert_eq!(c.download(s).unwrap(), vec![2.0, 5.0, 5.0, 8.0]);
}

/// `ger` may read one buffer as both `x` and `y` (`A = x xᵀ + A`), as cuBLAS allows.
#[test]
fn ger_of_a_vector_with_itself() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    let x = d.upload(s, &[1.0f64, 2.0]).unwrap();
    let a = d.alloc_zeros::<f64>(s, 4).unwrap();
    h.blas().unwrap().ger(2, 2, 1.0, Vector::from(&x), Vector::from(&x), &a, None).unwrap().wait().unwrap();
    assert_eq!(a.download(s).unwrap(), vec![1.0, 2.0, 2.0, 4.0]);
}

/// `symm`, `hemm`, `trmm`, `syr2k`, `her2k`, `herk`, `dgmm` in every type, inline and on a lane.
#[test]
fn symm_trmm_rank_2k_herk_dgmm_compute() {
    let d = sim();
    let (mut h, mut rng) = (handles(&d), Rng::new());
    check_level3::<f32>(&d, &mut h, &mut rng);
    check_level3::<f64>(&d, &mut h, &mut rng);
    check_level3::<Complex<f32>>(&d, &mut h, &mut rng);
    check_level3::<Complex<f64>>(&d, &mut h, &mut rng);
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    lane.submit(move |cx| {
        let mut rng = Rng::new();
        check_level3::<f64>(&dd, cx, &mut rng);
        check_level3::<Complex<f32>>(&dd, cx, &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// Grouped batched GEMM: groups with their own shapes, transposes and scalars, in each type.
#[test]
fn grouped_batched_gemm_computes_every_group() {
    let d = sim();
    let (mut h, mut rng) = (handles(&d), Rng::new());
    check_grouped::<f32>(&d, &mut h, &mut rng);
    check_grouped::<f16>(&d, &mut h, &mut rng);
    check_grouped::<bf16>(&d, &mut h, &mut rng);
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    lane.submit(move |cx| {
        check_grouped::<f32>(&dd, cx, &mut Rng::new());
        Ok(())
    })
    .wait()
    .unwrap();
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// The int8 path scales by integers and wraps as 32-bit integers do.
#[test]
fn int8_gemm_ex_scales_by_integers_and_wraps() {
    use cusched::blas::{ComputeType, GemmEx};
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    // A of 127s, B of -128s, C old contents i32::MAX: beta C wraps.
    let (a, b) = (d.upload(s, &[127i8; 16]).unwrap(), d.upload(s, &[-128i8; 16]).unwrap());
    let c = d.upload(s, &[i32::MAX; 16]).unwrap();
    let g = GemmEx::new(4, 4, 4, &a, &b, &c, ComputeType::I32).scale(3.0, -2.0);
    h.blas().unwrap().gemm_ex(&g).unwrap().wait().unwrap();
    let want = 3i32.wrapping_mul(4 * 127 * -128).wrapping_add((-2i32).wrapping_mul(i32::MAX));
    assert_eq!(c.download(s).unwrap(), vec![want; 16]);
}

/// The reductions whose result the host reads (`dot`, `nrm2`, `asum`, `iamax`) are refused in a
/// graph recording with `Error::Recording`, as on a GPU (where the result is read from pinned
/// memory once, at enqueue, never at a replay); an elementwise op records, and the reductions
/// run outside the recording.
#[test]
fn reductions_the_host_reads_are_refused_in_a_graph_recording() {
    let d = sim();
    let x = d.upload(d.default_stream(), &[1.0f32, -2.0, 3.0]).unwrap();
    type Op = fn(&mut cusched::Handles, &cusched::GpuRef<f32>) -> cusched::Result<()>;
    let ops: [(&str, Op); 4] = [
        ("dot", |h, x| h.blas()?.dot(3, x.into(), x.into()).map(drop)),
        ("nrm2", |h, x| h.blas()?.nrm2(3, x.into()).map(drop)),
        ("asum", |h, x| h.blas()?.asum(3, x.into()).map(drop)),
        ("iamax", |h, x| h.blas()?.iamax(3, x.into()).map(drop)),
    ];
    for (name, op) in ops {
        let xr = x.clone();
        let got = cusched::Graph::record(&d, move |rec| op(rec.handles(0)?, &xr));
        assert!(matches!(got, Err(cusched::Error::Recording { .. })), "{name}: {:?}", got.err());
    }
    let xr = x.clone();
    cusched::Graph::record(&d, move |rec| rec.handles(0)?.blas()?.scal(3, 2.0f32, (&xr).into()).map(drop)).unwrap();
    let mut h = handles(&d);
    assert_eq!(h.blas().unwrap().asum(3, (&x).into()).unwrap().wait().unwrap(), 6.0);
    assert_eq!(h.blas().unwrap().iamax(3, (&x).into()).unwrap().wait().unwrap(), 2);
}
