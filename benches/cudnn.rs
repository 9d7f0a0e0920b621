//! cuDNN passthrough: a ResNet-50 3x3 convolution (N 32, C = K = 256, 56x56, pad 1, stride 1,
//! NHWC, bf16) forward and backward-data through cusched, next to the same convolutions through
//! cudarc's raw cuDNN `sys` calls with the algorithm the same heuristics rank first (what
//! cusched's default `AlgoSearch::Heuristics` picks), in one process on one stream; then the
//! host cost of a convolution plan: the first call of a new shape against a cached one.
//!
//! Run from the GPU bundle with cuDNN on the loader path (`. tools/cuda-libs-env`):
//! `bench-cudnn [n] [iterations]` (defaults 32 and 20).

mod common;

use common::interleaved;
use cusched::cudarc::cudnn::sys;
use cusched::cudnn::{AlgoSearch, Convolution, Shape, TensorView};
use cusched::half::bf16;
use cusched::{Device, Handles};
use std::ffi::{c_int, c_void};
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn check(status: sys::cudnnStatus_t, call: &str) -> Res<()> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {status:?}").into())
    }
}

/// The two convolutions through raw cuDNN calls, descriptors and algorithms made once.
struct Raw {
    handle: sys::cudnnHandle_t,
    x: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
    fwd: sys::cudnnConvolutionFwdAlgo_t,
    bwd: sys::cudnnConvolutionBwdDataAlgo_t,
    fwd_math: sys::cudnnMathType_t,
    bwd_math: sys::cudnnMathType_t,
    fwd_bytes: usize,
    bwd_bytes: usize,
}

/// NHWC strides of `[n, c, h, w]`, in cuDNN's logical (NCHW) order.
fn nhwc_strides(d: [c_int; 4]) -> [c_int; 4] {
    [d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]]
}

impl Raw {
    /// # Safety
    /// The device's context is current on this thread; `stream` is live and outlives the
    /// handle.
    unsafe fn new(stream: sys::cudaStream_t, n: c_int, c: c_int, hw: c_int, find: bool) -> Res<Raw> {
        let mut handle = std::ptr::null_mut();
        check(sys::cudnnCreate(&mut handle), "cudnnCreate")?;
        check(sys::cudnnSetStream(handle, stream), "cudnnSetStream")?;
        Raw::describe(handle, n, c, hw, find)
    }

    /// The descriptors and algorithms of one shape, on an existing handle.
    ///
    /// # Safety
    /// `handle` is live and its context current on this thread.
    unsafe fn describe(handle: sys::cudnnHandle_t, n: c_int, c: c_int, hw: c_int, find: bool) -> Res<Raw> {
        let bf = sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16;
        let mut r = Raw {
            handle,
            x: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
            fwd: sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
            bwd: sys::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
            fwd_math: sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
            bwd_math: sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
            fwd_bytes: 0,
            bwd_bytes: 0,
        };
        let dims = [n, c, hw, hw];
        for d in [&mut r.x, &mut r.y] {
            check(sys::cudnnCreateTensorDescriptor(d), "cudnnCreateTensorDescriptor")?;
            let st = nhwc_strides(dims);
            check(
                sys::cudnnSetTensorNdDescriptor(*d, bf, 4, dims.as_ptr(), st.as_ptr()),
                "cudnnSetTensorNdDescriptor",
            )?;
        }
        check(sys::cudnnCreateFilterDescriptor(&mut r.w), "cudnnCreateFilterDescriptor")?;
        let wd = [c, c, 3, 3];
        let nhwc = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC;
        check(sys::cudnnSetFilterNdDescriptor(r.w, bf, nhwc, 4, wd.as_ptr()), "cudnnSetFilterNdDescriptor")?;
        check(sys::cudnnCreateConvolutionDescriptor(&mut r.conv), "cudnnCreateConvolutionDescriptor")?;
        let (one, pad) = ([1 as c_int; 2], [1 as c_int; 2]);
        check(
            sys::cudnnSetConvolutionNdDescriptor(
                r.conv,
                2,
                pad.as_ptr(),
                one.as_ptr(),
                one.as_ptr(),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            ),
            "cudnnSetConvolutionNdDescriptor",
        )?;
        // As cusched does for half types: without TENSOR_OP_MATH the heuristics rank FMA algorithms.
        check(sys::cudnnSetConvolutionMathType(r.conv, sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH), "math")?;
        let ok = sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
        let mut count: c_int = 0;
        let mut fwd: [sys::cudnnConvolutionFwdAlgoPerf_t; 8] = std::mem::zeroed();
        let (x, w, cd, y, out) = (r.x, r.w, r.conv, r.y, fwd.as_mut_ptr());
        if find {
            let st = sys::cudnnFindConvolutionForwardAlgorithm(r.handle, x, w, cd, y, 8, &mut count, out);
            check(st, "cudnnFindConvolutionForwardAlgorithm")?;
        } else {
            let st = sys::cudnnGetConvolutionForwardAlgorithm_v7(r.handle, x, w, cd, y, 8, &mut count, out);
            check(st, "cudnnGetConvolutionForwardAlgorithm_v7")?;
        }
        let p = fwd.iter().take(count as usize).find(|p| p.status == ok).ok_or("no forward algorithm")?;
        (r.fwd, r.fwd_math) = (p.algo, p.mathType);
        let mut bwd: [sys::cudnnConvolutionBwdDataAlgoPerf_t; 8] = std::mem::zeroed();
        let out = bwd.as_mut_ptr();
        if find {
            let st = sys::cudnnFindConvolutionBackwardDataAlgorithm(r.handle, w, y, cd, x, 8, &mut count, out);
            check(st, "cudnnFindConvolutionBackwardDataAlgorithm")?;
        } else {
            let st = sys::cudnnGetConvolutionBackwardDataAlgorithm_v7(r.handle, w, y, cd, x, 8, &mut count, out);
            check(st, "cudnnGetConvolutionBackwardDataAlgorithm_v7")?;
        }
        let p = bwd.iter().take(count as usize).find(|p| p.status == ok).ok_or("no backward-data algorithm")?;
        (r.bwd, r.bwd_math) = (p.algo, p.mathType);
        check(sys::cudnnSetConvolutionMathType(r.conv, r.fwd_math), "cudnnSetConvolutionMathType")?;
        check(
            sys::cudnnGetConvolutionForwardWorkspaceSize(r.handle, r.x, r.w, r.conv, r.y, r.fwd, &mut r.fwd_bytes),
            "cudnnGetConvolutionForwardWorkspaceSize",
        )?;
        check(sys::cudnnSetConvolutionMathType(r.conv, r.bwd_math), "cudnnSetConvolutionMathType")?;
        check(
            sys::cudnnGetConvolutionBackwardDataWorkspaceSize(r.handle, r.w, r.y, r.conv, r.x, r.bwd, &mut r.bwd_bytes),
            "cudnnGetConvolutionBackwardDataWorkspaceSize",
        )?;
        Ok(r)
    }
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(32);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let (c, hw) = (256usize, 56usize);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-cudnn needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    let mut h = Handles::new(&device, s)?;
    if let Err(e) = h.cudnn() {
        println!("bench-cudnn needs cuDNN: {e}");
        return Ok(());
    }
    let (xs, ws) = (Shape::nhwc(n, c, hw, hw), Shape::nhwc(c, c, 3, 3));
    let conv = Convolution::new().pad(&[1, 1]);
    let ys = conv.output_shape(&xs, &ws)?;
    let flops = 2.0 * (n * c * hw * hw) as f64 * (c * 9) as f64;
    let fill = |m: usize| (0..m).map(|i| bf16::from_f32(((i % 29) as f32 - 14.0) / 64.0)).collect::<Vec<_>>();
    let (nx, nw) = (n * c * hw * hw, c * c * 9);
    let (x, w, y) = (device.upload(s, &fill(nx))?, device.upload(s, &fill(nw))?, device.upload(s, &fill(nx))?);
    // The raw path's own buffers, used only by raw calls on the same stream.
    let (rx, rw, ry) = (device.upload(s, &fill(nx))?, device.upload(s, &fill(nw))?, device.upload(s, &fill(nx))?);
    // SAFETY: (1) the raw side touches only memory of its own, made on and used on this one
    // stream, and synchronizes it before each timing ends; (2) memory cusched's ops use is used
    // only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    stream.context().bind_to_thread()?;
    let cu = stream.cu_stream() as sys::cudaStream_t;
    let as_int = |v: usize| c_int::try_from(v).map_err(|_| "size does not fit i32");
    let [px, pw, py] = [rx.raw_device_ptr()?, rw.raw_device_ptr()?, ry.raw_device_ptr()?].map(|p| p as *mut c_void);
    println!(
        "ResNet-50 3x3 convolution, N {n}, C = K = {c}, {hw}x{hw}, NHWC, bf16: {:.1} GFLOP per direction",
        flops / 1e9
    );
    println!("| algorithm search | direction | raw algorithm | cusched | raw cuDNN | ratio (raw/cusched time) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let (tx, tw, ty) = (TensorView::new(&x, xs.clone()), TensorView::new(&w, ws.clone()), TensorView::new(&y, ys));
    for search in [AlgoSearch::Heuristic, AlgoSearch::Find] {
        h.cudnn()?.set_algo_search(search);
        // SAFETY: the context is bound on this thread and the stream outlives the bench.
        let raw = unsafe { Raw::new(cu, as_int(n)?, as_int(c)?, as_int(hw)?, search == AlgoSearch::Find)? };
        let work = device.alloc_zeros::<u8>(s, raw.fwd_bytes.max(raw.bwd_bytes).max(1))?;
        let wp = work.raw_device_ptr()? as *mut c_void;
        for fwd in [true, false] {
            let (best_ours, best_raw) = interleaved(
                iters,
                || {
                    let dnn = h.cudnn()?;
                    if fwd {
                        dnn.conv_forward(&conv, &tx, &tw, &ty)?;
                    } else {
                        dnn.conv_backward_data(&conv, &tw, &ty, &tx)?;
                    }
                    Ok(())
                },
                // SAFETY: the raw buffers hold the descriptors' shapes, the workspace what the
                // algorithms asked for, all used only on this stream.
                || unsafe { raw.run(fwd, px, pw, py, wp) },
                || Ok(device.synchronize(s)?),
                || Ok(stream.synchronize()?),
            )?;
            let algo = if fwd { format!("{:?}", raw.fwd) } else { format!("{:?}", raw.bwd) };
            println!(
                "| {search:?} | {} | {} | {:.3} ms ({:.1} TFLOP/s) | {:.3} ms ({:.1} TFLOP/s) | {:.3}x |",
                if fwd { "forward" } else { "backward-data" },
                algo.trim_start_matches("CUDNN_CONVOLUTION_"),
                best_ours * 1e3,
                flops / best_ours / 1e12,
                best_raw * 1e3,
                flops / best_raw / 1e12,
                best_raw / best_ours
            );
        }
        // Raw objects of the bench live until the process exits.
        drop(work);
    }
    h.cudnn()?.set_algo_search(AlgoSearch::Heuristic);
    plan_cost(&device, s, &mut h, cu)
}

impl Raw {
    /// One forward (`x`, `w` → `y`) or backward-data (`w`, `y` → `x`) convolution.
    ///
    /// # Safety
    /// (1) The pointers are live buffers of the descriptors' shapes, used only on the handle's
    /// stream; (2) `work` holds what the chosen algorithms asked for.
    unsafe fn run(&self, fwd: bool, x: *mut c_void, w: *mut c_void, y: *mut c_void, work: *mut c_void) -> Res<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (al, be) = ((&alpha as *const f32).cast::<c_void>(), (&beta as *const f32).cast::<c_void>());
        let (h, cd) = (self.handle, self.conv);
        if fwd {
            check(sys::cudnnSetConvolutionMathType(cd, self.fwd_math), "cudnnSetConvolutionMathType")?;
            let (a, ws) = (self.fwd, self.fwd_bytes);
            let st = sys::cudnnConvolutionForward(h, al, self.x, x, self.w, w, cd, a, work, ws, be, self.y, y);
            check(st, "cudnnConvolutionForward")
        } else {
            check(sys::cudnnSetConvolutionMathType(cd, self.bwd_math), "cudnnSetConvolutionMathType")?;
            let (a, ws) = (self.bwd, self.bwd_bytes);
            let st = sys::cudnnConvolutionBackwardData(h, al, self.w, w, self.y, y, cd, a, work, ws, be, self.x, x);
            check(st, "cudnnConvolutionBackwardData")
        }
    }
}

/// Host time of one `conv_forward` call (recording only, not the GPU's work): the first call of
/// each of several new shapes (a plan made: descriptors and the heuristics' query) against the
/// same calls once their plans are cached.
fn plan_cost(device: &Device, s: cusched::StreamId, h: &mut Handles, cu: sys::cudaStream_t) -> Res<()> {
    const SHAPES: usize = 16;
    let conv = Convolution::new().pad(&[1, 1]);
    let ws = Shape::nhwc(64, 64, 3, 3);
    let w = device.alloc_zeros::<bf16>(s, 64 * 64 * 9)?;
    let x = device.alloc_zeros::<bf16>(s, SHAPES * 64 * 28 * 28)?;
    let y = device.alloc_zeros::<bf16>(s, SHAPES * 64 * 28 * 28)?;
    let made_before = h.cudnn()?.plans_made();
    let mut round = |label: &str| -> Res<f64> {
        let mut total = 0.0;
        for b in 1..=SHAPES {
            let xs = Shape::nhwc(b, 64, 28, 28);
            let ys = conv.output_shape(&xs, &ws)?;
            let (tx, tw, ty) = (TensorView::new(&x, xs), TensorView::new(&w, ws.clone()), TensorView::new(&y, ys));
            let dnn = h.cudnn()?;
            let t = Instant::now();
            dnn.conv_forward(&conv, &tx, &tw, &ty)?;
            total += t.elapsed().as_secs_f64();
            device.synchronize(s)?;
        }
        let per = total / SHAPES as f64;
        println!("| {label} | {:.2} µs |", per * 1e6);
        Ok(per)
    };
    println!("\nplan building, conv_forward host time per call (N 1..={SHAPES}, C = K = 64, 28x28, bf16):");
    println!("| call | host time |");
    println!("| --- | --- |");
    let first = round("first call of a new shape (plan made)")?;
    let cached = round("same shapes again (plan cached)")?;
    println!(
        "plans made: {}; first/cached {:.1}x",
        h.cudnn()?.plans_made() - made_before,
        first / cached.max(f64::MIN_POSITIVE)
    );
    // The same through raw cuDNN: descriptors and the heuristics' query per shape, then the
    // call itself, on one handle made beforehand.
    let (rx, rw, ry) = (
        device.alloc_zeros::<bf16>(s, x.len())?,
        device.alloc_zeros::<bf16>(s, w.len())?,
        device.alloc_zeros::<bf16>(s, y.len())?,
    );
    let [px, pw, py] = [rx.raw_device_ptr()?, rw.raw_device_ptr()?, ry.raw_device_ptr()?].map(|p| p as *mut c_void);
    // SAFETY: the context is bound on this thread (main bound it) and the stream outlives the
    // bench.
    let first = unsafe { Raw::new(cu, 1, 64, 28, false)? };
    let (mut made, mut called) = (0.0, 0.0);
    for b in 1..=SHAPES {
        let t = Instant::now();
        // SAFETY: as above; the handle is live.
        let raw = unsafe { Raw::describe(first.handle, b as c_int, 64, 28, false)? };
        made += t.elapsed().as_secs_f64();
        let work = device.alloc_zeros::<u8>(s, raw.fwd_bytes.max(1))?;
        device.synchronize(s)?;
        let t = Instant::now();
        // SAFETY: the raw buffers hold SHAPES images, the workspace what the algorithm asked for,
        // all used only on this stream.
        unsafe { raw.run(true, px, pw, py, work.raw_device_ptr()? as *mut c_void)? };
        called += t.elapsed().as_secs_f64();
        device.synchronize(s)?;
        // Raw objects of the bench live until the process exits.
        drop(work);
    }
    println!("| raw: descriptors and heuristics of a new shape | {:.2} µs |", made / SHAPES as f64 * 1e6);
    println!("| raw: the cudnnConvolutionForward call | {:.2} µs |", called / SHAPES as f64 * 1e6);
    Ok(())
}
