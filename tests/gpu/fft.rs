//! cuFFT on a real GPU: a direct DFT reference, forward-then-inverse round trips for every
//! kind in 1D, 2D, 3D and batched strided layouts, and the plan cache.
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

use crate::common::reference::fft as reference;
use crate::common::*;
use cusched::fft::{DataLayout, Direction, FftLayout};
use cusched::{Complex, Device, Handles, StreamId};

fn random_c32(rng: &mut Rng, n: usize) -> Vec<Complex<f32>> {
    (0..n).map(|_| Complex::new(rng.f32(), rng.f32())).collect()
}

fn nan_c<T: Copy>(nan: T, n: usize) -> Vec<Complex<T>> {
    vec![Complex::new(nan, nan); n]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn c2c_matches_a_direct_dft() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let n = 96;
    let x = random_c32(&mut rng, n);
    let (din, dout) = (d.upload(s, &x).unwrap(), d.upload(s, &nan_c(f32::NAN, n)).unwrap());
    h.fft().unwrap().c2c(&FftLayout::d1(n), &din, &dout, Direction::Forward).unwrap().wait().unwrap();
    let got = dout.download(s).unwrap();
    for (k, (re, im)) in reference::c2c(&FftLayout::d1(n), &x, Direction::Forward) {
        assert!(
            (got[k].re as f64 - re).abs() < 1e-4 * n as f64 && (got[k].im as f64 - im).abs() < 1e-4 * n as f64,
            "bin {k}"
        );
    }
}

fn c2c_round_trip_f32(d: &Device, s: StreamId, h: &mut Handles, layout: &FftLayout, len: usize, rng: &mut Rng) {
    let x = random_c32(rng, len);
    let n: usize = layout.dims.iter().product();
    let (a, b) = (d.upload(s, &x).unwrap(), d.upload(s, &nan_c(f32::NAN, len)).unwrap());
    h.fft().unwrap().c2c(layout, &a, &b, Direction::Forward).unwrap();
    // In place for the way back.
    h.fft().unwrap().c2c(layout, &b, &b, Direction::Inverse).unwrap().wait().unwrap();
    let got = b.download(s).unwrap();
    let touched = touched_indices(layout, len);
    for i in touched {
        let (re, im) = (got[i].re / n as f32, got[i].im / n as f32);
        assert!(
            (re - x[i].re).abs() < 1e-4 && (im - x[i].im).abs() < 1e-4,
            "{layout:?}: element {i}: {re},{im} vs {:?}",
            x[i]
        );
    }
}

/// The elements a layout's input side covers (packed when no layout is given).
fn touched_indices(layout: &FftLayout, len: usize) -> Vec<usize> {
    match &layout.input {
        None => (0..len).collect(),
        Some(l) => {
            let n = layout.dims[0];
            (0..layout.batch).flat_map(|b| (0..n).map(move |x| b * l.dist + x * l.stride)).collect()
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn round_trips_in_1d_2d_3d_and_strided_batches() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    c2c_round_trip_f32(&d, s, &mut h, &FftLayout::d1(1000), 1000, &mut rng);
    c2c_round_trip_f32(&d, s, &mut h, &FftLayout::d2(24, 40), 960, &mut rng);
    c2c_round_trip_f32(&d, s, &mut h, &FftLayout::d3(8, 12, 10), 960, &mut rng);
    c2c_round_trip_f32(&d, s, &mut h, &FftLayout::d1(64).batched(5), 320, &mut rng);
    // Interleaved: 3 transforms of 50 points, stride 3, dist 1 (the batches interleave).
    let inter = DataLayout { embed: vec![50], stride: 3, dist: 1 };
    c2c_round_trip_f32(&d, s, &mut h, &FftLayout::d1(50).batched(3).with_layouts(inter.clone(), inter), 150, &mut rng);

    // Double precision, Z2Z.
    let n = 512;
    let x: Vec<Complex<f64>> = (0..n).map(|_| Complex::new(rng.f32() as f64, rng.f32() as f64)).collect();
    let (a, b) = (d.upload(s, &x).unwrap(), d.upload(s, &nan_c(f64::NAN, n)).unwrap());
    h.fft().unwrap().c2c(&FftLayout::d1(n), &a, &b, Direction::Forward).unwrap();
    h.fft().unwrap().c2c(&FftLayout::d1(n), &b, &a, Direction::Inverse).unwrap().wait().unwrap();
    let got = a.download(s).unwrap();
    for i in 0..n {
        assert!((got[i].re / n as f64 - x[i].re).abs() < 1e-12 && (got[i].im / n as f64 - x[i].im).abs() < 1e-12);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn real_transforms_round_trip_in_both_precisions() {
    let Some(d) = gpu() else { return };
    let lane = d.lane("fft").unwrap();
    let dd = d.clone();
    lane.submit(move |cx| {
        let s = cx.stream();
        let mut rng = Rng::new();
        for layout in [FftLayout::d1(256), FftLayout::d2(16, 30).batched(2), FftLayout::d3(6, 8, 10)] {
            let n: usize = layout.dims.iter().product();
            let half: usize = layout.dims[..layout.dims.len() - 1].iter().product::<usize>()
                * (layout.dims[layout.dims.len() - 1] / 2 + 1);
            let total = n * layout.batch;
            let x: Vec<f32> = (0..total).map(|_| rng.f32()).collect();
            let (r, c, back) = (
                dd.upload(s, &x)?,
                dd.upload(s, &nan_c(f32::NAN, half * layout.batch))?,
                dd.upload(s, &vec![f32::NAN; total])?,
            );
            cx.fft()?.r2c(&layout, &r, &c)?;
            cx.fft()?.c2r(&layout, &c, &back)?;
            let got = back.download(s)?;
            for i in 0..total {
                assert!((got[i] / n as f32 - x[i]).abs() < 1e-4, "{layout:?} f32 element {i}");
            }
            let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            let (r, c, back) = (
                dd.upload(s, &x64)?,
                dd.upload(s, &nan_c(f64::NAN, half * layout.batch))?,
                dd.upload(s, &vec![f64::NAN; total])?,
            );
            cx.fft()?.r2c(&layout, &r, &c)?;
            cx.fft()?.c2r(&layout, &c, &back)?;
            let got = back.download(s)?;
            for i in 0..total {
                assert!((got[i] / n as f64 - x64[i]).abs() < 1e-12, "{layout:?} f64 element {i}");
            }
        }
        Ok(())
    })
    .wait()
    .unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn plans_are_cached_per_layout_and_bounded() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let a = d.upload(s, &nan_c(0.0f32, 1024)).unwrap();
    let b = d.upload(s, &nan_c(0.0f32, 1024)).unwrap();
    let fft = h.fft().unwrap();
    fft.c2c(&FftLayout::d1(1024), &a, &b, Direction::Forward).unwrap();
    fft.c2c(&FftLayout::d1(1024), &b, &a, Direction::Inverse).unwrap();
    assert_eq!(fft.plans_made(), 1, "same layout, one plan");
    fft.c2c(&FftLayout::d1(512).batched(2), &a, &b, Direction::Forward).unwrap();
    assert_eq!(fft.plans_made(), 2, "another layout of the same size gets its own plan");
    fft.set_plan_capacity(2).unwrap();
    fft.c2c(&FftLayout::d2(32, 32), &a, &b, Direction::Forward).unwrap();
    assert_eq!(fft.cached_plans(), 2, "the cache is bounded");
    fft.c2c(&FftLayout::d1(1024), &a, &b, Direction::Forward).unwrap().wait().unwrap();
    assert_eq!(fft.plans_made(), 4, "the evicted layout is planned again");
    assert!(fft.work_area_bytes() > 0 || fft.plans_made() > 0);
}

/// Runs `op` (upload, transform, download) on the GPU and on a simulated device.
fn on_both<T>(op: impl Fn(&Device, StreamId, &mut Handles) -> Vec<T>) -> Option<(Vec<T>, Vec<T>)> {
    let d = gpu()?;
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let gpu_out = op(&d, s, &mut h);
    let sim = sim();
    let ss = sim.new_stream().unwrap();
    let mut hs = Handles::new(&sim, ss).unwrap();
    Some((gpu_out, op(&sim, ss, &mut hs)))
}

/// Every kind, in 1D, 2D and 3D, batched and strided, in both precisions: the simulator's
/// transform of the same input agrees with cuFFT's to the type's tolerance.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_simulator_computes_what_cufft_computes() {
    let dl = |embed: Vec<usize>, stride, dist| DataLayout { embed, stride, dist };
    let complex_layouts = [
        FftLayout::d1(1000),
        FftLayout::d1(97).batched(3),
        FftLayout::d2(24, 40),
        FftLayout::d3(8, 12, 10),
        FftLayout::d1(50).batched(3).with_layouts(dl(vec![50], 3, 1), dl(vec![50], 3, 1)),
        FftLayout::d2(5, 6).batched(2).with_layouts(dl(vec![5, 9], 1, 50), dl(vec![5, 8], 1, 41)),
    ];
    let real_layouts = [
        FftLayout::d1(256),
        FftLayout::d1(45).batched(4),
        FftLayout::d2(16, 30).batched(2),
        FftLayout::d3(6, 8, 10),
        FftLayout::d1(20).batched(3).with_layouts(dl(vec![20], 3, 1), dl(vec![11], 3, 1)),
        FftLayout::d2(5, 7).batched(2).with_layouts(dl(vec![5, 9], 1, 50), dl(vec![5, 5], 1, 27)),
    ];
    let span = |l: &Option<DataLayout>, dims: &[usize], batch: usize| {
        (0..batch).flat_map(|b| reference::offsets(l, dims, b)).max().map_or(0, |m| m + 1)
    };
    let mut rng = Rng::new();
    for layout in &complex_layouts {
        let n: usize = layout.dims.iter().product();
        let len = span(&layout.input, &layout.dims, layout.batch).max(span(&layout.output, &layout.dims, layout.batch));
        let x = random_c32(&mut rng, len);
        let x64: Vec<Complex<f64>> = x.iter().map(|v| Complex::new(v.re as f64, v.im as f64)).collect();
        for direction in [Direction::Forward, Direction::Inverse] {
            let Some((g, s)) = on_both(|d, s, h| {
                let (a, b) = (d.upload(s, &x).unwrap(), d.upload(s, &vec![Complex::new(0.0f32, 0.0); len]).unwrap());
                h.fft().unwrap().c2c(layout, &a, &b, direction).unwrap().wait().unwrap();
                b.download(s).unwrap()
            }) else {
                return;
            };
            for (i, (g, s)) in g.iter().zip(&s).enumerate() {
                let tol = 1e-5 * n as f32;
                assert!((g.re - s.re).abs() <= tol && (g.im - s.im).abs() <= tol, "{layout:?} c2c {i}: {g:?} vs {s:?}");
            }
            let Some((g, s)) = on_both(|d, s, h| {
                let (a, b) = (d.upload(s, &x64).unwrap(), d.upload(s, &vec![Complex::new(0.0f64, 0.0); len]).unwrap());
                h.fft().unwrap().c2c(layout, &a, &b, direction).unwrap().wait().unwrap();
                b.download(s).unwrap()
            }) else {
                return;
            };
            for (i, (g, s)) in g.iter().zip(&s).enumerate() {
                let tol = 1e-12 * n as f64;
                assert!((g.re - s.re).abs() <= tol && (g.im - s.im).abs() <= tol, "{layout:?} z2z {i}: {g:?} vs {s:?}");
            }
        }
    }
    for layout in &real_layouts {
        let n: usize = layout.dims.iter().product();
        let half = reference::halved(&layout.dims);
        let rlen = span(&layout.input, &layout.dims, layout.batch);
        let clen = span(&layout.output, &half, layout.batch);
        let x: Vec<f32> = (0..rlen).map(|_| rng.f32()).collect();
        // R2C, then C2R of the GPU's own (Hermitian) spectrum, on each backend.
        let back = FftLayout { input: layout.output.clone(), output: layout.input.clone(), ..layout.clone() };
        let Some((g, s)) = on_both(|d, s, h| {
            let (r, c) = (d.upload(s, &x).unwrap(), d.upload(s, &vec![Complex::new(0.0f32, 0.0); clen]).unwrap());
            h.fft().unwrap().r2c(layout, &r, &c).unwrap().wait().unwrap();
            let spectrum = c.download(s).unwrap();
            let out = d.upload(s, &vec![0.0f32; rlen]).unwrap();
            h.fft().unwrap().c2r(&back, &c, &out).unwrap().wait().unwrap();
            let reals = out.download(s).unwrap();
            spectrum.iter().flat_map(|v| [v.re, v.im]).chain(reals).collect::<Vec<f32>>()
        }) else {
            return;
        };
        for (i, (g, s)) in g.iter().zip(&s).enumerate() {
            assert!((g - s).abs() <= 1e-5 * n as f32, "{layout:?} r2c/c2r f32 value {i}: {g} vs {s}");
        }
        let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let Some((g, s)) = on_both(|d, s, h| {
            let (r, c) = (d.upload(s, &x64).unwrap(), d.upload(s, &vec![Complex::new(0.0f64, 0.0); clen]).unwrap());
            h.fft().unwrap().r2c(layout, &r, &c).unwrap().wait().unwrap();
            let spectrum = c.download(s).unwrap();
            let out = d.upload(s, &vec![0.0f64; rlen]).unwrap();
            h.fft().unwrap().c2r(&back, &c, &out).unwrap().wait().unwrap();
            let reals = out.download(s).unwrap();
            spectrum.iter().flat_map(|v| [v.re, v.im]).chain(reals).collect::<Vec<f64>>()
        }) else {
            return;
        };
        for (i, (g, s)) in g.iter().zip(&s).enumerate() {
            assert!((g - s).abs() <= 1e-12 * n as f64, "{layout:?} d2z/z2d value {i}: {g} vs {s}");
        }
    }
}

/// The half types on the GPU: their rounding, and the per-point tolerance of cuFFT's result
/// against the f64 reference (cuFFT computes them in a precision of its own: a few roundings of
/// a bin of magnitude up to `n * sqrt(2)`, for inputs in [-1, 1)).
trait GpuHalf: cusched::fft::FftFloat + Into<f64> + Copy + std::fmt::Debug
where
    Complex<Self>: cusched::Element,
{
    const TOL: f64;
    /// The compute capability cuFFT needs for the type.
    const MIN_CC: (u32, u32);
    fn of(v: f64) -> Self;
}
impl GpuHalf for cusched::half::f16 {
    const TOL: f64 = 4e-3;
    const MIN_CC: (u32, u32) = (5, 3);
    fn of(v: f64) -> Self {
        cusched::half::f16::from_f64(v)
    }
}
impl GpuHalf for cusched::half::bf16 {
    const TOL: f64 = 3e-2;
    const MIN_CC: (u32, u32) = (8, 0);
    fn of(v: f64) -> Self {
        cusched::half::bf16::from_f64(v)
    }
}

/// C2C forward and inverse (interleaved batches), R2C (padded 2D rows, batched) and C2R (its
/// layouts swapped, of a Hermitian spectrum) in `T`, each against the f64 reference.
fn half_kinds_match_the_reference<T: GpuHalf>()
where
    Complex<T>: cusched::Element,
{
    let Some(d) = gpu() else { return };
    if d.compute_capability().unwrap() < T::MIN_CC {
        eprintln!("skipped: {} transforms need compute capability {:?}", std::any::type_name::<T>(), T::MIN_CC);
        return;
    }
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let name = std::any::type_name::<T>();
    let dl = |embed: Vec<usize>, stride, dist| DataLayout { embed, stride, dist };
    let nan = T::of(f64::NAN);

    let layout = FftLayout::d1(64).batched(3).with_layouts(dl(vec![64], 3, 1), dl(vec![64], 3, 1));
    let len = 64 * 3;
    let x: Vec<Complex<T>> = (0..len).map(|_| Complex::new(T::of(rng.f32().into()), T::of(rng.f32().into()))).collect();
    for direction in [Direction::Forward, Direction::Inverse] {
        let (a, b) = (d.upload(s, &x).unwrap(), d.upload(s, &nan_c(nan, len)).unwrap());
        h.fft().unwrap().c2c(&layout, &a, &b, direction).unwrap().wait().unwrap();
        let got = b.download(s).unwrap();
        for (o, (re, im)) in reference::c2c(&layout, &x, direction) {
            let (gr, gi): (f64, f64) = (got[o].re.into(), got[o].im.into());
            let tol = T::TOL * 64.0;
            assert!(
                (gr - re).abs() <= tol && (gi - im).abs() <= tol,
                "{name} c2c {direction:?} {o}: {gr},{gi} vs {re},{im}"
            );
        }
    }

    // 2D 8 x 16, two batches, rows padded on both sides (the real side at unit stride).
    let layout = FftLayout::d2(8, 16).batched(2).with_layouts(dl(vec![8, 20], 1, 170), dl(vec![8, 10], 1, 90));
    let (rlen, clen) = (170 + 8 * 20, 90 + 8 * 10);
    let n = 128.0;
    let x: Vec<T> = (0..rlen).map(|_| T::of(rng.f32().into())).collect();
    let (r, c) = (d.upload(s, &x).unwrap(), d.upload(s, &nan_c(nan, clen)).unwrap());
    h.fft().unwrap().r2c(&layout, &r, &c).unwrap().wait().unwrap();
    let got = c.download(s).unwrap();
    for (o, (re, im)) in reference::r2c(&layout, &x) {
        let (gr, gi): (f64, f64) = (got[o].re.into(), got[o].im.into());
        assert!(
            (gr - re).abs() <= T::TOL * n && (gi - im).abs() <= T::TOL * n,
            "{name} r2c {o}: {gr},{gi} vs {re},{im}"
        );
    }

    // C2R of a Hermitian spectrum (the reference's R2C of a real signal, rounded to `T`).
    let back = FftLayout { input: layout.output.clone(), output: layout.input.clone(), ..layout.clone() };
    let mut spectrum = vec![Complex::new(T::of(0.0), T::of(0.0)); clen];
    for (o, (re, im)) in reference::r2c(&layout, &x) {
        spectrum[o] = Complex::new(T::of(re / n), T::of(im / n));
    }
    let (c, out) = (d.upload(s, &spectrum).unwrap(), d.upload(s, &vec![nan; rlen]).unwrap());
    h.fft().unwrap().c2r(&back, &c, &out).unwrap().wait().unwrap();
    let got = out.download(s).unwrap();
    for (o, want) in reference::c2r(&back, &spectrum) {
        let g: f64 = got[o].into();
        assert!((g - want).abs() <= T::TOL * n, "{name} c2r {o}: {g} vs {want}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn half_transforms_of_every_kind_match_the_reference() {
    half_kinds_match_the_reference::<cusched::half::f16>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bfloat16_transforms_of_every_kind_match_the_reference() {
    half_kinds_match_the_reference::<cusched::half::bf16>();
}

/// A Hann window multiply on load: `callerInfo` holds one weight per point of the transform
/// (`N`, given as a macro so the source is the plan's).
const WINDOW_LOAD: &str = r#"#define N 256
extern "C" __device__ float2 window_load(void* in, unsigned long long i, void* w, void* shared) {
    float2 v = ((float2*)in)[i]; float k = ((const float*)w)[i % N]; return make_float2(v.x * k, v.y * k); }"#;

/// A scale on store: `callerInfo` holds the factor.
const SCALE_STORE: &str = r#"extern "C" __device__ void scale_store(void* out, unsigned long long i, float2 v, void* s, void* shared) {
    float k = *(const float*)s; ((float2*)out)[i] = make_float2(v.x * k, v.y * k); }"#;

/// A window multiply on the real loads of a double R2C.
const REAL_WINDOW_LOAD: &str = r#"extern "C" __device__ double real_window(void* in, unsigned long long i, void* w, void* shared) {
    return ((double*)in)[i] * ((const double*)w)[i % 64]; }"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn lto_callbacks_window_on_load_and_scale_on_store() {
    use cusched::fft::{FftCallback, FftCallbacks};
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let (n, batch) = (256usize, 4usize);
    let layout = FftLayout::d1(n).batched(batch);
    let x = random_c32(&mut rng, n * batch);
    let hann = |i: usize| 0.5 - 0.5 * (2.0 * std::f32::consts::PI * i as f32 / n as f32).cos();
    let window: Vec<f32> = (0..n).map(hann).collect();
    let (w, scale) = (d.upload(s, &window).unwrap(), d.upload(s, &[1.0f32 / n as f32]).unwrap());
    let (a, b) = (d.upload(s, &x).unwrap(), d.upload(s, &nan_c(f32::NAN, n * batch)).unwrap());
    let callbacks = |w| {
        FftCallbacks::new()
            .on_load(FftCallback::new(WINDOW_LOAD, "window_load").data(w))
            .on_store(FftCallback::new(SCALE_STORE, "scale_store").data(&scale))
    };
    let check = |got: &[Complex<f32>], window: &[f32]| {
        let windowed: Vec<Complex<f32>> =
            x.iter().enumerate().map(|(i, v)| Complex::new(v.re * window[i % n], v.im * window[i % n])).collect();
        for (o, (re, im)) in reference::c2c(&layout, &windowed, Direction::Forward) {
            let (re, im) = (re / n as f64, im / n as f64);
            assert!(
                (got[o].re as f64 - re).abs() < 1e-4 && (got[o].im as f64 - im).abs() < 1e-4,
                "bin {o}: {:?} vs {re},{im}",
                got[o]
            );
        }
    };
    match h.fft().unwrap().c2c_with(&layout, &a, &b, Direction::Forward, &callbacks(&w)) {
        Ok(done) => done.wait().unwrap(),
        // cuFFT 12.0 (CUDA 13.0) with driver 580 fails every LTO plan so, even NVIDIA's own
        // nvcc-made callback from C (tools/probes/fft_lto*.c). The failure must then be typed,
        // leave nothing recorded, and leave the handle working for plain transforms.
        Err(cusched::Error::Library { call, status }) if status.contains("INTERNAL_ERROR") => {
            eprintln!("LTO callbacks: {call} gave {status} on this host: the callback checks are skipped");
            assert_eq!(h.fft().unwrap().plans_made(), 0, "the failed plan is not kept");
            h.fft().unwrap().c2c(&layout, &a, &b, Direction::Forward).unwrap().wait().unwrap();
            let got = b.download(s).unwrap();
            for (o, (re, _)) in reference::c2c(&layout, &x, Direction::Forward) {
                assert!((got[o].re as f64 - re).abs() < 1e-4 * n as f64, "plain bin {o} after the failed plan");
            }
            return;
        }
        Err(e) => panic!("c2c_with: {e:?}"),
    }
    check(&b.download(s).unwrap(), &window);
    assert_eq!(h.fft().unwrap().plans_made(), 1);

    // The same callbacks and data: the cached plan.
    h.fft().unwrap().c2c_with(&layout, &a, &b, Direction::Forward, &callbacks(&w)).unwrap().wait().unwrap();
    assert_eq!(h.fft().unwrap().plans_made(), 1, "same callbacks, same plan");
    // Another window buffer: cuFFT baked the data address into the plan, so a new plan.
    let flat = d.upload(s, &vec![1.0f32; n]).unwrap();
    h.fft().unwrap().c2c_with(&layout, &a, &b, Direction::Forward, &callbacks(&flat)).unwrap().wait().unwrap();
    assert_eq!(h.fft().unwrap().plans_made(), 2, "another data buffer, another plan");
    check(&b.download(s).unwrap(), &vec![1.0; n]);
    // The plain transform has a plan of its own: no callbacks leak into it.
    h.fft().unwrap().c2c(&layout, &a, &b, Direction::Forward).unwrap().wait().unwrap();
    assert_eq!(h.fft().unwrap().plans_made(), 3);
    let got = b.download(s).unwrap();
    for (o, (re, _)) in reference::c2c(&layout, &x, Direction::Forward) {
        assert!((got[o].re as f64 - re).abs() < 1e-4 * n as f64, "plain bin {o}");
    }

    // A double R2C with a real load callback, checked against the windowed reference.
    let layout = FftLayout::d1(64).batched(2);
    let xr: Vec<f64> = (0..128).map(|_| rng.f32() as f64).collect();
    let wr: Vec<f64> = (0..64).map(|i| 1.0 + i as f64 / 64.0).collect();
    let (r, c, wd) = (d.upload(s, &xr).unwrap(), d.upload(s, &nan_c(f64::NAN, 66)).unwrap(), d.upload(s, &wr).unwrap());
    let cb = FftCallbacks::new().on_load(FftCallback::new(REAL_WINDOW_LOAD, "real_window").data(&wd));
    h.fft().unwrap().r2c_with(&layout, &r, &c, &cb).unwrap().wait().unwrap();
    let got = c.download(s).unwrap();
    let windowed: Vec<f64> = xr.iter().enumerate().map(|(i, v)| v * wr[i % 64]).collect();
    for (o, (re, im)) in reference::r2c(&layout, &windowed) {
        assert!((got[o].re - re).abs() < 1e-10 && (got[o].im - im).abs() < 1e-10, "r2c bin {o}");
    }
}
