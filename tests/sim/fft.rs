//! cuFFT on the simulator: every kind (C2C/Z2Z both directions, R2C/D2Z, C2R/Z2D) in 1D, 2D
//! and 3D, batched, with strided, interleaved and padded layouts, in place, against the direct
//! DFT of `common::reference::fft`; what a layout does not cover stays untouched.

use crate::common::reference::fft as reference;
use crate::common::{sim, Rng};
use cusched::fft::{DataLayout, Direction, FftLayout};
use cusched::{half, Complex, Device, Handles, StreamId};

/// Poison for the elements a transform must not touch.
const POISON: f64 = 1234.5;

fn setup() -> (Device, StreamId, Handles) {
    let d = sim();
    let s = d.new_stream().unwrap();
    let h = Handles::new(&d, s).unwrap();
    (d, s, h)
}

/// Buffer length a layout's side spans (packed when `None`).
fn span(layout: &Option<DataLayout>, dims: &[usize], batch: usize) -> usize {
    (0..batch).flat_map(|b| reference::offsets(layout, dims, b)).max().map_or(0, |m| m + 1)
}

fn complex<T: From<f32>>(rng: &mut Rng, n: usize) -> Vec<Complex<T>> {
    (0..n).map(|_| Complex::new(T::from(rng.f32()), T::from(rng.f32()))).collect()
}

/// Asserts `got` holds `want` at its offsets (to `tol` times the transform size) and the
/// poison everywhere else.
fn check_complex<T: Into<f64> + Copy>(what: &str, got: &[Complex<T>], want: &[(usize, (f64, f64))], tol: f64) {
    let mut written = vec![false; got.len()];
    for &(o, (re, im)) in want {
        written[o] = true;
        let (gr, gi) = (got[o].re.into(), got[o].im.into());
        assert!((gr - re).abs() <= tol && (gi - im).abs() <= tol, "{what}: element {o}: {gr},{gi} vs {re},{im}");
    }
    for (o, w) in written.iter().enumerate() {
        if !w {
            assert_eq!((got[o].re.into(), got[o].im.into()), (POISON, POISON), "{what}: element {o} was touched");
        }
    }
}

fn check_real<T: Into<f64> + Copy>(what: &str, got: &[T], want: &[(usize, f64)], tol: f64) {
    let mut written = vec![false; got.len()];
    for &(o, v) in want {
        written[o] = true;
        let g = got[o].into();
        assert!((g - v).abs() <= tol, "{what}: element {o}: {g} vs {v}");
    }
    for (o, w) in written.iter().enumerate() {
        if !w {
            assert_eq!(got[o].into(), POISON, "{what}: element {o} was touched");
        }
    }
}

/// The layouts every kind runs through: packed 1D (even, odd, prime), 2D, 3D, batched, and
/// strided / interleaved / padded advanced layouts (`dims` of the logical transform; the
/// layouts are for the real side, the complex side of a real transform gets its own).
fn layouts() -> Vec<(FftLayout, Option<(DataLayout, DataLayout)>)> {
    vec![
        (FftLayout::d1(64), None),
        (FftLayout::d1(45), None),
        (FftLayout::d1(97), None),
        (FftLayout::d2(6, 10), None),
        (FftLayout::d3(4, 6, 5), None),
        (FftLayout::d1(32).batched(3), None),
        (FftLayout::d2(4, 6).batched(2), None),
        // Interleaved: 3 transforms of 20 points, stride 3, dist 1.
        (
            FftLayout::d1(20).batched(3),
            Some((
                DataLayout { embed: vec![20], stride: 3, dist: 1 },
                DataLayout { embed: vec![20], stride: 3, dist: 1 },
            )),
        ),
        // Strided with gaps between batches.
        (
            FftLayout::d1(16).batched(2),
            Some((
                DataLayout { embed: vec![16], stride: 2, dist: 40 },
                DataLayout { embed: vec![16], stride: 1, dist: 19 },
            )),
        ),
        // Padded 2D rows (embed wider than the transform).
        (
            FftLayout::d2(5, 6).batched(2),
            Some((
                DataLayout { embed: vec![5, 9], stride: 1, dist: 50 },
                DataLayout { embed: vec![5, 8], stride: 1, dist: 41 },
            )),
        ),
    ]
}

fn c2c_case<T>(layout: &FftLayout, direction: Direction, tol: f64, rng: &mut Rng)
where
    T: cusched::fft::FftFloat + From<f32> + Into<f64> + Copy,
    Complex<T>: cusched::Element,
{
    let (d, s, mut h) = setup();
    let (ilen, olen) =
        (span(&layout.input, &layout.dims, layout.batch), span(&layout.output, &layout.dims, layout.batch));
    let x = complex::<T>(rng, ilen);
    let poison = T::from(POISON as f32);
    let (a, b) = (d.upload(s, &x).unwrap(), d.upload(s, &vec![Complex::new(poison, poison); olen]).unwrap());
    h.fft().unwrap().c2c(layout, &a, &b, direction).unwrap().wait().unwrap();
    let want = reference::c2c(layout, &x, direction);
    let n: usize = layout.dims.iter().product();
    check_complex(&format!("{layout:?} {direction:?}"), &b.download(s).unwrap(), &want, tol * n as f64);
    assert_eq!(a.download(s).unwrap(), x, "{layout:?}: the input changed");
}

#[test]
fn c2c_and_z2z_match_the_direct_dft_in_every_layout() {
    let mut rng = Rng::seeded(11);
    for (layout, given) in layouts() {
        let layout = match given {
            Some((i, o)) => layout.with_layouts(i, o),
            None => layout,
        };
        for direction in [Direction::Forward, Direction::Inverse] {
            c2c_case::<f32>(&layout, direction, 1e-5, &mut rng);
            c2c_case::<f64>(&layout, direction, 1e-12, &mut rng);
        }
    }
}

#[test]
fn c2c_in_place_matches_out_of_place() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::seeded(12);
    let layout = FftLayout::d2(8, 12).batched(2);
    let x = complex::<f64>(&mut rng, 8 * 12 * 2);
    let a = d.upload(s, &x).unwrap();
    h.fft().unwrap().c2c(&layout, &a, &a, Direction::Forward).unwrap().wait().unwrap();
    check_complex("in place", &a.download(s).unwrap(), &reference::c2c(&layout, &x, Direction::Forward), 1e-10);
    // Forward then inverse scales by the transform's size, as cuFFT does.
    h.fft().unwrap().c2c(&layout, &a, &a, Direction::Inverse).unwrap().wait().unwrap();
    for (got, want) in a.download(s).unwrap().iter().zip(&x) {
        assert!((got.re / 96.0 - want.re).abs() < 1e-12 && (got.im / 96.0 - want.im).abs() < 1e-12);
    }
}

/// The real transforms' layouts: the packed ones of [`layouts`], then advanced ones with a
/// real side (input of R2C) and a complex side of `n / 2 + 1` bins in the last dimension.
fn real_layouts() -> Vec<FftLayout> {
    let mut v: Vec<FftLayout> = layouts().into_iter().filter(|(_, g)| g.is_none()).map(|(l, _)| l).collect();
    let dl = |embed: Vec<usize>, stride, dist| DataLayout { embed, stride, dist };
    // Interleaved batches.
    v.push(FftLayout::d1(20).batched(3).with_layouts(dl(vec![20], 3, 1), dl(vec![11], 3, 1)));
    // Strided with gaps between batches.
    v.push(FftLayout::d1(16).batched(2).with_layouts(dl(vec![16], 2, 40), dl(vec![9], 1, 12)));
    // Padded 2D rows, odd last dimension.
    v.push(FftLayout::d2(5, 7).batched(2).with_layouts(dl(vec![5, 9], 1, 50), dl(vec![5, 5], 1, 27)));
    // Padded 3D.
    v.push(FftLayout::d3(3, 4, 6).with_layouts(dl(vec![3, 5, 7], 1, 105), dl(vec![3, 4, 5], 1, 60)));
    v
}

fn real_case<T>(layout: &FftLayout, tol: f64, rng: &mut Rng)
where
    T: cusched::fft::FftFloat + From<f32> + Into<f64> + Copy + PartialEq + std::fmt::Debug,
    Complex<T>: cusched::Element,
{
    let (d, s, mut h) = setup();
    let half = reference::halved(&layout.dims);
    let n: usize = layout.dims.iter().product();
    let rlen = span(&layout.input, &layout.dims, layout.batch);
    let clen = span(&layout.output, &half, layout.batch);
    let x: Vec<T> = (0..rlen).map(|_| T::from(rng.f32())).collect();
    let poison = T::from(POISON as f32);
    let (r, c) = (d.upload(s, &x).unwrap(), d.upload(s, &vec![Complex::new(poison, poison); clen]).unwrap());
    h.fft().unwrap().r2c(layout, &r, &c).unwrap().wait().unwrap();
    let spectrum = c.download(s).unwrap();
    check_complex(&format!("r2c {layout:?}"), &spectrum, &reference::r2c(layout, &x), tol * n as f64);
    assert_eq!(r.download(s).unwrap(), x, "r2c {layout:?}: the input changed");

    // C2R of the spectrum (its layouts swapped): the reference, and n times the input.
    let back = FftLayout { input: layout.output.clone(), output: layout.input.clone(), ..layout.clone() };
    let out = d.upload(s, &vec![poison; rlen]).unwrap();
    h.fft().unwrap().c2r(&back, &c, &out).unwrap().wait().unwrap();
    let got = out.download(s).unwrap();
    let want = reference::c2r(&back, &spectrum);
    check_real(&format!("c2r {layout:?}"), &got, &want, tol * n as f64);
    for (o, _) in want {
        let v: f64 = got[o].into();
        assert!((v / n as f64 - x[o].into()).abs() <= tol * 10.0, "c2r {layout:?}: round trip at {o}");
    }
}

#[test]
fn r2c_and_c2r_match_the_direct_dft_in_both_precisions() {
    let mut rng = Rng::seeded(13);
    for layout in real_layouts() {
        real_case::<f32>(&layout, 1e-5, &mut rng);
        real_case::<f64>(&layout, 1e-12, &mut rng);
    }
}

#[test]
fn c2r_ignores_the_imaginary_parts_a_real_signal_cannot_have() {
    // The DC and Nyquist bins of a real signal are real: cuFFT reads only their real parts.
    let (d, s, mut h) = setup();
    let n = 8;
    let mut spec = vec![Complex::new(0.0f64, 0.0); n / 2 + 1];
    spec[0] = Complex::new(8.0, 5.0);
    spec[n / 2] = Complex::new(8.0, -3.0);
    let c = d.upload(s, &spec).unwrap();
    let out = d.alloc_zeros::<f64>(s, n).unwrap();
    h.fft().unwrap().c2r(&FftLayout::d1(n), &c, &out).unwrap().wait().unwrap();
    let got = out.download(s).unwrap();
    for (t, v) in got.iter().enumerate() {
        let want = 8.0 + 8.0 * if t % 2 == 0 { 1.0 } else { -1.0 };
        assert!((v - want).abs() < 1e-12, "sample {t}: {v} vs {want}");
    }
}

#[test]
fn a_transform_on_a_lane_orders_against_the_next_use() {
    // The transform runs as a simulated kernel under its declared uses: a download on another
    // stream right after it sees the result (the tracker fences it), and the checker is clean.
    let d = sim();
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let mut h = Handles::new(&d, s1).unwrap();
    let x: Vec<Complex<f32>> = (0..256).map(|i| Complex::new((i % 7) as f32, 0.0)).collect();
    let (a, b) = (d.upload(s1, &x).unwrap(), d.alloc_zeros::<Complex<f32>>(s1, 256).unwrap());
    h.fft().unwrap().c2c(&FftLayout::d1(256), &a, &b, Direction::Forward).unwrap();
    let got = b.download(s2).unwrap();
    let sum: f32 = x.iter().map(|v| v.re).sum();
    assert!((got[0].re - sum).abs() < 1e-3, "the DC bin {} vs {sum}", got[0].re);
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// Poison for the half types' untouched elements: exact in both.
const HALF_POISON: f64 = 1000.0;

/// The half types, with their rounding and the per-point tolerance of a transform's result
/// (the result's rounding: a bin's magnitude is at most `n * sqrt(2)` for inputs in [-1, 1)).
trait HalfType: cusched::fft::FftFloat + Into<f64> + Copy + PartialEq + std::fmt::Debug
where
    Complex<Self>: cusched::Element,
{
    const TOL: f64;
    fn of(v: f64) -> Self;
}
impl HalfType for half::f16 {
    // 2^-11 relative rounding of a value up to n * sqrt(2).
    const TOL: f64 = 1e-3;
    fn of(v: f64) -> Self {
        half::f16::from_f64(v)
    }
}
impl HalfType for half::bf16 {
    // 2^-9 relative rounding of a value up to n * sqrt(2).
    const TOL: f64 = 4e-3;
    fn of(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
}

/// Asserts `got` holds `want` at its offsets (to `tol`) and `poison` everywhere else.
fn check_poisoned<T: Into<f64> + Copy>(what: &str, got: &[T], want: &[(usize, f64)], tol: f64, poison: f64) {
    let mut written = vec![false; got.len()];
    for &(o, v) in want {
        written[o] = true;
        let g = got[o].into();
        assert!((g - v).abs() <= tol, "{what}: element {o}: {g} vs {v}");
    }
    for (o, w) in written.iter().enumerate() {
        if !w {
            assert_eq!(got[o].into(), poison, "{what}: element {o} was touched");
        }
    }
}

/// `check_poisoned` of complex values, part by part.
fn check_complex_poisoned<T: Into<f64> + Copy>(
    what: &str,
    got: &[Complex<T>],
    want: &[(usize, (f64, f64))],
    tol: f64,
    poison: f64,
) {
    let parts: Vec<T> = got.iter().flat_map(|c| [c.re, c.im]).collect();
    let want: Vec<(usize, f64)> = want.iter().flat_map(|&(o, (re, im))| [(2 * o, re), (2 * o + 1, im)]).collect();
    check_poisoned(what, &parts, &want, tol, poison);
}

/// The power-of-two layouts of the half types' complex-to-complex transforms: packed 1D, 2D,
/// 3D, batched, and interleaved, strided and padded advanced layouts.
fn half_c2c_layouts() -> Vec<FftLayout> {
    let dl = |embed: Vec<usize>, stride, dist| DataLayout { embed, stride, dist };
    vec![
        FftLayout::d1(64),
        FftLayout::d2(8, 16),
        FftLayout::d3(4, 8, 4),
        FftLayout::d1(32).batched(3),
        FftLayout::d2(4, 8).batched(2),
        FftLayout::d1(16).batched(3).with_layouts(dl(vec![16], 3, 1), dl(vec![16], 3, 1)),
        FftLayout::d1(16).batched(2).with_layouts(dl(vec![16], 2, 40), dl(vec![16], 1, 19)),
        FftLayout::d2(4, 8).batched(2).with_layouts(dl(vec![4, 9], 1, 40), dl(vec![4, 12], 1, 50)),
    ]
}

/// The half types' real transforms' layouts (the real side at unit stride, as cuFFT requires
/// of them): packed ones, gaps between batches, padded 2D rows, and an interleaved complex side.
fn half_real_layouts() -> Vec<FftLayout> {
    let dl = |embed: Vec<usize>, stride, dist| DataLayout { embed, stride, dist };
    vec![
        FftLayout::d1(64),
        FftLayout::d2(8, 16),
        FftLayout::d3(4, 8, 4),
        FftLayout::d1(32).batched(3),
        FftLayout::d1(16).batched(2).with_layouts(dl(vec![16], 1, 20), dl(vec![9], 2, 20)),
        FftLayout::d2(4, 8).batched(2).with_layouts(dl(vec![4, 10], 1, 44), dl(vec![4, 6], 1, 25)),
        FftLayout::d1(16).batched(3).with_layouts(dl(vec![16], 1, 16), dl(vec![9], 3, 1)),
    ]
}

fn half_c2c_case<T: HalfType>(layout: &FftLayout, direction: Direction, rng: &mut Rng)
where
    Complex<T>: cusched::Element,
{
    let (d, s, mut h) = setup();
    let (ilen, olen) =
        (span(&layout.input, &layout.dims, layout.batch), span(&layout.output, &layout.dims, layout.batch));
    let x: Vec<Complex<T>> =
        (0..ilen).map(|_| Complex::new(T::of(rng.f32().into()), T::of(rng.f32().into()))).collect();
    let poison = T::of(HALF_POISON);
    let (a, b) = (d.upload(s, &x).unwrap(), d.upload(s, &vec![Complex::new(poison, poison); olen]).unwrap());
    h.fft().unwrap().c2c(layout, &a, &b, direction).unwrap().wait().unwrap();
    let want = reference::c2c(layout, &x, direction);
    let n: usize = layout.dims.iter().product();
    let what = format!("{} {layout:?} {direction:?}", std::any::type_name::<T>());
    check_complex_poisoned(&what, &b.download(s).unwrap(), &want, T::TOL * n as f64, HALF_POISON);
    assert_eq!(a.download(s).unwrap(), x, "{what}: the input changed");
}

#[test]
fn half_and_bfloat16_c2c_match_the_direct_dft_in_every_layout() {
    let mut rng = Rng::seeded(21);
    for layout in half_c2c_layouts() {
        for direction in [Direction::Forward, Direction::Inverse] {
            half_c2c_case::<half::f16>(&layout, direction, &mut rng);
            half_c2c_case::<half::bf16>(&layout, direction, &mut rng);
        }
    }
}

fn half_real_case<T: HalfType>(layout: &FftLayout, rng: &mut Rng)
where
    Complex<T>: cusched::Element,
{
    let (d, s, mut h) = setup();
    let half = reference::halved(&layout.dims);
    let n: usize = layout.dims.iter().product();
    let tol = T::TOL * n as f64;
    let rlen = span(&layout.input, &layout.dims, layout.batch);
    let clen = span(&layout.output, &half, layout.batch);
    let x: Vec<T> = (0..rlen).map(|_| T::of(rng.f32().into())).collect();
    let poison = T::of(HALF_POISON);
    let (r, c) = (d.upload(s, &x).unwrap(), d.upload(s, &vec![Complex::new(poison, poison); clen]).unwrap());
    h.fft().unwrap().r2c(layout, &r, &c).unwrap().wait().unwrap();
    let spectrum = c.download(s).unwrap();
    let what = format!("{} {layout:?}", std::any::type_name::<T>());
    check_complex_poisoned(&format!("r2c {what}"), &spectrum, &reference::r2c(layout, &x), tol, HALF_POISON);
    assert_eq!(r.download(s).unwrap(), x, "r2c {what}: the input changed");

    // C2R of the (rounded) spectrum, its layouts swapped, against the reference of that spectrum.
    let back = FftLayout { input: layout.output.clone(), output: layout.input.clone(), ..layout.clone() };
    let out = d.upload(s, &vec![poison; rlen]).unwrap();
    h.fft().unwrap().c2r(&back, &c, &out).unwrap().wait().unwrap();
    let want = reference::c2r(&back, &spectrum);
    check_poisoned(&format!("c2r {what}"), &out.download(s).unwrap(), &want, tol, HALF_POISON);
}

#[test]
fn half_and_bfloat16_r2c_and_c2r_match_the_direct_dft() {
    let mut rng = Rng::seeded(22);
    for layout in half_real_layouts() {
        half_real_case::<half::f16>(&layout, &mut rng);
        half_real_case::<half::bf16>(&layout, &mut rng);
    }
}

#[test]
fn half_transforms_round_back_to_nearest() {
    // An impulse's spectrum is flat: every bin of a 2^k-point transform of 0.1 (rounded to f16)
    // is that same rounded value, exactly, after the f32 computation rounds back.
    let (d, s, mut h) = setup();
    let v = half::f16::from_f64(0.1);
    let mut x = vec![Complex::new(half::f16::ZERO, half::f16::ZERO); 32];
    x[0] = Complex::new(v, v);
    let (a, b) = (d.upload(s, &x).unwrap(), d.alloc_zeros::<Complex<half::f16>>(s, 32).unwrap());
    h.fft().unwrap().c2c(&FftLayout::d1(32), &a, &b, Direction::Forward).unwrap().wait().unwrap();
    assert!(b.download(s).unwrap().iter().all(|c| *c == Complex::new(v, v)));
}

/// CUDA C++ of a window multiply on load (`callerInfo`: the window, one weight per point of a
/// 64-point transform): the GPU form of the host closures below, which the simulator runs.
const WINDOW_LOAD: &str = r#"extern "C" __device__ float2 window_load(void* in, unsigned long long i, void* w, void*) {
    float2 v = ((float2*)in)[i]; float k = ((float*)w)[i % 64]; return make_float2(v.x * k, v.y * k); }"#;

#[test]
fn callbacks_run_their_host_form_on_the_simulator() {
    use cusched::fft::{FftCallback, FftCallbacks};
    let (d, s, mut h) = setup();
    let mut rng = Rng::seeded(31);
    // Three interleaved batches of 64 points; the window is indexed by the input offset.
    let dl = DataLayout { embed: vec![64], stride: 3, dist: 1 };
    let layout = FftLayout::d1(64).batched(3).with_layouts(dl.clone(), dl);
    let x = complex::<f32>(&mut rng, 192);
    let window: Vec<f32> = (0..64).map(|i| 0.5 - 0.5 * (2.0 * std::f32::consts::PI * i as f32 / 64.0).cos()).collect();
    let w = d.upload(s, &window).unwrap();
    let (a, b) = (d.upload(s, &x).unwrap(), d.alloc_zeros::<Complex<f32>>(s, 192).unwrap());
    let load = FftCallback::new(WINDOW_LOAD, "window_load").data(&w).sim(|i, v, w: &[f32]| {
        let k = w[i % 64] as f64;
        Complex::new(v.re * k, v.im * k)
    });
    let store = FftCallback::new("/* the scale on store */", "scale_store")
        .sim(|_, v, _| Complex::new(v.re / 64.0, v.im / 64.0));
    let callbacks = FftCallbacks::new().on_load(load).on_store(store);
    h.fft().unwrap().c2c_with(&layout, &a, &b, Direction::Forward, &callbacks).unwrap().wait().unwrap();
    let windowed: Vec<Complex<f32>> =
        x.iter().enumerate().map(|(i, v)| Complex::new(v.re * window[i % 64], v.im * window[i % 64])).collect();
    let want: Vec<(usize, (f64, f64))> = reference::c2c(&layout, &windowed, Direction::Forward)
        .into_iter()
        .map(|(o, (re, im))| (o, (re / 64.0, im / 64.0)))
        .collect();
    let got = b.download(s).unwrap();
    for (o, (re, im)) in want {
        assert!((got[o].re as f64 - re).abs() < 1e-5 && (got[o].im as f64 - im).abs() < 1e-5, "bin {o}");
    }
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn real_transforms_call_back_with_real_values_at_buffer_offsets() {
    use cusched::fft::{FftCallback, FftCallbacks};
    let (d, s, mut h) = setup();
    let mut rng = Rng::seeded(32);
    // R2C with gaps between batches: the load callback sees the real input's buffer offsets
    // (it zeroes the samples past 20 of each 32), the store one scales the spectrum by 2.
    let dl = |embed: Vec<usize>, stride, dist| DataLayout { embed, stride, dist };
    let layout = FftLayout::d1(32).batched(2).with_layouts(dl(vec![32], 1, 40), dl(vec![17], 1, 20));
    let x: Vec<f64> = (0..72).map(|_| rng.f32().into()).collect();
    let (r, c) = (d.upload(s, &x).unwrap(), d.alloc_zeros::<Complex<f64>>(s, 37).unwrap());
    let load = FftCallback::<f64>::new("", "cut").sim(|i, v, _| {
        assert_eq!(v.im, 0.0, "a real value");
        if i % 40 >= 20 {
            Complex::new(0.0, 5.0)
        } else {
            v
        }
    });
    let store = FftCallback::new("", "twice").sim(|_, v, _| Complex::new(2.0 * v.re, 2.0 * v.im));
    h.fft()
        .unwrap()
        .r2c_with(&layout, &r, &c, &FftCallbacks::new().on_load(load).on_store(store))
        .unwrap()
        .wait()
        .unwrap();
    let cut: Vec<f64> = x.iter().enumerate().map(|(i, &v)| if i % 40 >= 20 { 0.0 } else { v }).collect();
    let got = c.download(s).unwrap();
    for (o, (re, im)) in reference::r2c(&layout, &cut) {
        assert!((got[o].re - 2.0 * re).abs() < 1e-10 && (got[o].im - 2.0 * im).abs() < 1e-10, "bin {o}");
    }

    // C2R of that spectrum: a store callback on the real output sees real values.
    let back = FftLayout { input: layout.output.clone(), output: layout.input.clone(), ..layout.clone() };
    let out = d.alloc_zeros::<f64>(s, 72).unwrap();
    let store = FftCallback::<f64>::new("", "half").sim(|_, v, _| {
        assert_eq!(v.im, 0.0, "a real value");
        Complex::new(v.re / 2.0, 7.0)
    });
    h.fft().unwrap().c2r_with(&back, &c, &out, &FftCallbacks::new().on_store(store)).unwrap().wait().unwrap();
    let got = out.download(s).unwrap();
    for (o, v) in reference::c2r(&back, &c.download(s).unwrap()) {
        assert!((got[o] - v / 2.0).abs() < 1e-9, "sample {o}");
    }
}

#[test]
fn a_callbacks_data_is_declared_as_a_read() {
    use cusched::fft::{FftCallback, FftCallbacks};
    // The window is written on another stream right before the transform: the tracker fences
    // the transform after it (the checker is clean and the new window is used).
    let d = sim();
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let mut h = Handles::new(&d, s1).unwrap();
    let w = d.alloc_zeros::<f32>(s2, 64).unwrap();
    w.copy_from_slice(s2, &[2.0f32; 64]).unwrap();
    let x = vec![Complex::new(1.0f32, 0.0); 64];
    let (a, b) = (d.upload(s1, &x).unwrap(), d.alloc_zeros::<Complex<f32>>(s1, 64).unwrap());
    let load = FftCallback::new(WINDOW_LOAD, "window_load").data(&w).sim(|i, v, w: &[f32]| {
        let k = w[i % 64] as f64;
        Complex::new(v.re * k, v.im * k)
    });
    h.fft()
        .unwrap()
        .c2c_with(&FftLayout::d1(64), &a, &b, Direction::Forward, &FftCallbacks::new().on_load(load))
        .unwrap();
    assert!((b.download(s1).unwrap()[0].re - 128.0).abs() < 1e-3);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}
