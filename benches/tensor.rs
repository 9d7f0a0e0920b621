//! cuTENSOR passthrough: a 4-mode contraction (34 GFLOP at the default size) through cusched
//! next to the same contraction through cudarc's raw cuTENSOR `sys` calls (handle, descriptors,
//! plan and workspace made once), in one process on one stream.
//!
//! Run from the GPU bundle with libcutensor.so.2 reachable as libcutensor.so on
//! LD_LIBRARY_PATH (tools/carry-cutensor): `bench-tensor [n] [iterations]`; the free modes have
//! extent n (default 64), the two summed ones n/2.

mod common;

use common::per_call;

use cusched::cudarc::cutensor::sys;
use cusched::tensor::{Compute, Contraction, TensorRef};
use cusched::{Device, Handles};
use std::ffi::c_void;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const SPEC: &str = "abcd,dcef->aebf";

fn check(status: sys::cutensorStatus_t, call: &str) -> Res<()> {
    if status == sys::cutensorStatus_t::CUTENSOR_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {status:?}").into())
    }
}

/// The contraction through raw cuTENSOR calls: what cusched's `contract` does, made once.
struct Raw {
    handle: sys::cutensorHandle_t,
    plan: sys::cutensorPlan_t,
    work: u64,
    work_bytes: u64,
}

impl Raw {
    /// # Safety
    /// The device's context is current; `work` is allocated by the caller from `work_bytes`.
    unsafe fn new(shapes: [&[i64]; 3], tf32: bool) -> Res<Raw> {
        let mut handle = std::ptr::null_mut();
        check(sys::cutensorCreate(&mut handle), "cutensorCreate")?;
        let modes: Vec<Vec<i32>> =
            SPEC.replace("->", ",").split(',').map(|m| m.chars().map(|c| c as i32).collect()).collect();
        let mut descs = Vec::new();
        for sh in shapes {
            let mut strides = vec![1i64; sh.len()];
            for i in (0..sh.len() - 1).rev() {
                strides[i] = strides[i + 1] * sh[i + 1];
            }
            let mut d = std::ptr::null_mut();
            check(
                sys::cutensorCreateTensorDescriptor(
                    handle,
                    &mut d,
                    sh.len() as u32,
                    sh.as_ptr(),
                    strides.as_ptr(),
                    sys::cutensorDataType_t::CUDA_R_32F,
                    256,
                ),
                "cutensorCreateTensorDescriptor",
            )?;
            descs.push(d);
        }
        let name: &[u8] = if tf32 { b"CUTENSOR_COMPUTE_DESC_TF32\0" } else { b"CUTENSOR_COMPUTE_DESC_32F\0" };
        let compute = **sys::culib().get::<*const sys::cutensorComputeDescriptor_t>(name)?;
        let id = sys::cutensorOperator_t::CUTENSOR_OP_IDENTITY;
        let mut op = std::ptr::null_mut();
        check(
            sys::cutensorCreateContraction(
                handle,
                &mut op,
                descs[0],
                modes[0].as_ptr(),
                id,
                descs[1],
                modes[1].as_ptr(),
                id,
                descs[2],
                modes[2].as_ptr(),
                id,
                descs[2],
                modes[2].as_ptr(),
                compute,
            ),
            "cutensorCreateContraction",
        )?;
        let mut pref = std::ptr::null_mut();
        check(
            sys::cutensorCreatePlanPreference(
                handle,
                &mut pref,
                sys::cutensorAlgo_t::CUTENSOR_ALGO_DEFAULT,
                sys::cutensorJitMode_t::CUTENSOR_JIT_MODE_NONE,
            ),
            "cutensorCreatePlanPreference",
        )?;
        let mut estimate = 0u64;
        check(
            sys::cutensorEstimateWorkspaceSize(
                handle,
                op,
                pref,
                sys::cutensorWorksizePreference_t::CUTENSOR_WORKSPACE_DEFAULT,
                &mut estimate,
            ),
            "cutensorEstimateWorkspaceSize",
        )?;
        let mut plan = std::ptr::null_mut();
        check(sys::cutensorCreatePlan(handle, &mut plan, op, pref, estimate), "cutensorCreatePlan")?;
        let mut need = 0u64;
        check(
            sys::cutensorPlanGetAttribute(
                handle,
                plan,
                sys::cutensorPlanAttribute_t::CUTENSOR_PLAN_REQUIRED_WORKSPACE,
                (&mut need as *mut u64).cast(),
                8,
            ),
            "cutensorPlanGetAttribute",
        )?;
        Ok(Raw { handle, plan, work: 0, work_bytes: need.min(estimate) })
    }
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-tensor needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    let mut h = Handles::new(&device, s)?;
    if let Err(e) = h.tensor() {
        println!("bench-tensor needs cuTENSOR: {e}");
        return Ok(());
    }
    let k = n / 2;
    // a b c d · d c e f -> a e b f: c and d summed.
    let (sa, sb, sd) = ([n, n, k, k], [k, k, n, n], [n, n, n, n]);
    let len = |s: &[usize]| s.iter().product::<usize>();
    let flops = 2.0 * (n as f64).powi(4) * (k as f64).powi(2);
    let fill = |m: usize| (0..m).map(|i| ((i % 29) as f32 - 14.0) / 32.0).collect::<Vec<f32>>();
    let (a, b) = (device.upload(s, &fill(len(&sa)))?, device.upload(s, &fill(len(&sb)))?);
    let d = device.alloc_zeros::<f32>(s, len(&sd))?;
    // The raw path's own buffers, used only by raw calls on the same stream.
    let (ra, rb, rd) = (
        device.upload(s, &fill(len(&sa)))?,
        device.upload(s, &fill(len(&sb)))?,
        device.alloc_zeros::<f32>(s, len(&sd))?,
    );
    // SAFETY: (1) the raw side touches only cudarc memory of its own, made from and used on
    // this one stream, and synchronizes it before each timing ends; (2) memory cusched owns is
    // used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    stream.context().bind_to_thread()?;
    let cu = stream.cu_stream() as sys::cudaStream_t;

    println!("4-mode contraction {SPEC}, free modes {n}, summed modes {k}: {:.1} GFLOP", flops / 1e9);
    println!("| case | cusched | raw cuTENSOR | ratio (raw/cusched time) |");
    println!("| --- | --- | --- | --- |");
    for (label, tf32) in [("f32", false), ("f32 in TF32", true)] {
        let to64 = |s: &[usize]| s.iter().map(|&x| x as i64).collect::<Vec<_>>();
        let (ea, eb, ed) = (to64(&sa), to64(&sb), to64(&sd));
        // SAFETY: the context is bound on this thread; the workspace is allocated right after.
        let mut raw = unsafe { Raw::new([&ea, &eb, &ed], tf32)? };
        let work = device.alloc_zeros::<u8>(s, raw.work_bytes.max(1) as usize)?;
        raw.work = work.raw_device_ptr()?;
        let ptrs = [ra.raw_device_ptr()?, rb.raw_device_ptr()?, rd.raw_device_ptr()?].map(|p| p as *mut c_void);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let mut op = Contraction::new(SPEC, TensorRef::new(&a, &sa), TensorRef::new(&b, &sb), TensorRef::new(&d, &sd));
        if tf32 {
            op = op.compute(Compute::Tf32);
        }
        let (mut best_ours, mut best_raw) = (f64::MAX, f64::MAX);
        // The best of three interleaved rounds, so clocks and thermals treat both alike.
        for _ in 0..3 {
            best_ours = best_ours.min(per_call(
                iters,
                || {
                    h.tensor()?.contract(&op)?;
                    Ok(())
                },
                || Ok(device.synchronize(s)?),
            )?);
            best_raw = best_raw.min(per_call(
                iters,
                || {
                    // SAFETY: the plan was made for these buffers' layout; the buffers and the
                    // workspace are live and used only on this stream.
                    let st = unsafe {
                        sys::cutensorContract(
                            raw.handle,
                            raw.plan,
                            (&alpha as *const f32).cast(),
                            ptrs[0],
                            ptrs[1],
                            (&beta as *const f32).cast(),
                            ptrs[2],
                            ptrs[2],
                            raw.work as *mut c_void,
                            raw.work_bytes,
                            cu,
                        )
                    };
                    check(st, "cutensorContract")
                },
                || Ok(stream.synchronize()?),
            )?);
        }
        println!(
            "| {SPEC} {label} | {:.3} ms ({:.1} TFLOP/s) | {:.3} ms ({:.1} TFLOP/s) | {:.3}x |",
            best_ours * 1e3,
            flops / best_ours / 1e12,
            best_raw * 1e3,
            flops / best_raw / 1e12,
            best_raw / best_ours
        );
        // Raw objects of the bench live until the process exits.
        drop(work);
    }
    Ok(())
}
