//! cuBLASLt's matmul: the element types' conversions ([`Num`]), the f64 reference of a whole
//! matmul with its epilogue ([`Case::reference`]), the same matmul run on a device, GPU or
//! simulated ([`Case::run`]), and the comparison of two results to the types' tolerance
//! ([`compare`]).
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)] // index loops mirror the math

use super::super::{dgelu, gelu, Rng};
use cusched::blas_lt::{
    Aux, Epilogue, Fp8Scales, LtBatch, LtElement, Matmul, Order, ReluMask, Transpose, F8E4M3, F8E5M2,
};
use cusched::half::{bf16, f16};
use cusched::{Device, GpuRef, Handles};

/// An element type with its conversions and the rounding its storage adds.
pub trait Num: LtElement<Scale = f32> {
    fn of(x: f64) -> Self;
    fn f(self) -> f64;
    /// Relative error of storing a value.
    const REL: f64;
    /// Relative tolerance of a GPU result against the sum of absolute terms.
    const TOL: f64;
    const NAME: &'static str;
}

impl Num for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f(self) -> f64 {
        self as f64
    }
    const REL: f64 = 1e-7;
    const TOL: f64 = 1e-5;
    const NAME: &'static str = "f32";
}
impl Num for f16 {
    fn of(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
    const REL: f64 = 1.0 / 2048.0;
    const TOL: f64 = 4e-3;
    const NAME: &'static str = "f16";
}
impl Num for bf16 {
    fn of(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
    const REL: f64 = 1.0 / 256.0;
    const TOL: f64 = 2e-2;
    const NAME: &'static str = "bf16";
}
impl Num for F8E4M3 {
    fn of(x: f64) -> Self {
        e4m3(x)
    }
    fn f(self) -> f64 {
        de4m3(self)
    }
    const REL: f64 = 1.0 / 16.0;
    const TOL: f64 = 1.0 / 16.0;
    const NAME: &'static str = "e4m3";
}
impl Num for F8E5M2 {
    fn of(x: f64) -> Self {
        // The top byte of an IEEE half, rounded to nearest.
        let bits = f16::from_f64(x).to_bits();
        F8E5M2(((bits + 0x80) >> 8) as u8)
    }
    fn f(self) -> f64 {
        f16::from_bits((self.0 as u16) << 8).to_f64()
    }
    const REL: f64 = 1.0 / 8.0;
    const TOL: f64 = 1.0 / 8.0;
    const NAME: &'static str = "e5m2";
}

/// Every epilogue the matmul takes, by the names `Case` knows them under.
pub const EPILOGUES: [&str; 16] = [
    "default",
    "relu",
    "gelu",
    "bias",
    "relu_bias",
    "gelu_bias",
    "relu_aux",
    "gelu_aux",
    "relu_aux_bias",
    "gelu_aux_bias",
    "drelu",
    "dgelu",
    "drelu_bgrad",
    "dgelu_bgrad",
    "bgrada",
    "bgradb",
];

/// E4M3 (bias 7, no infinities, max 448) encode, round to nearest even, saturating.
pub fn e4m3(x: f64) -> F8E4M3 {
    let sign = if x < 0.0 { 0x80u8 } else { 0 };
    let a = x.abs().min(448.0);
    // Every representable magnitude, searched for the nearest: 127 candidates is cheap.
    let mut best = (f64::INFINITY, 0u8);
    for bits in 0u8..0x7f {
        let d = (e4m3_value(bits) - a).abs();
        if d < best.0 || (d == best.0 && bits % 2 == 0) {
            best = (d, bits);
        }
    }
    F8E4M3(sign | best.1)
}

/// The value of E4M3 bits (finite ones).
pub fn e4m3_value(bits: u8) -> f64 {
    let (e, m) = (((bits >> 3) & 0xf) as i32, (bits & 7) as f64);
    let v = if e == 0 { m / 8.0 * 2f64.powi(-6) } else { (1.0 + m / 8.0) * 2f64.powi(e - 7) };
    if bits & 0x80 != 0 {
        -v
    } else {
        v
    }
}

pub fn de4m3(x: F8E4M3) -> f64 {
    e4m3_value(x.0)
}

/// Column-major `op(A) op(B)` (`m x n`, packed) and the sum of absolute terms per element.
pub fn product(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut mag) = (vec![0.0; m * n], vec![0.0; m * n]);
    for j in 0..n {
        for i in 0..m {
            for p in 0..k {
                let x = if ta { a[p + i * lda] } else { a[i + p * lda] };
                let y = if tb { b[j + p * ldb] } else { b[p + j * ldb] };
                out[i + j * m] += x * y;
                mag[i + j * m] += (x * y).abs();
            }
        }
    }
    (out, mag)
}

/// Asserts `|got - want| <= tol (mag + 1)` element by element.
pub fn close(what: &str, got: &[f64], want: &[f64], mag: &[f64], tol: f64) {
    for i in 0..want.len() {
        let err = (got[i] - want[i]).abs();
        assert!(
            err <= tol * (mag[i] + 1.0),
            "{what}[{i}]: got {}, want {} (err {err}, tol {})",
            got[i],
            want[i],
            tol * (mag[i] + 1.0)
        );
    }
}

/// The FP8 options of a [`Case`].
#[derive(Clone, Copy, Debug)]
pub struct Fp8 {
    pub sa: f32,
    pub sb: f32,
    /// D's scale (FP8 D only).
    pub sd: Option<f32>,
    /// Ask for D's amax (FP8 D only).
    pub amax: bool,
}

/// An FP8 aux matrix's options: its scale, and whether its amax is asked for.
#[derive(Clone, Copy, Debug)]
pub struct AuxFp8 {
    pub scale: f32,
    pub amax: bool,
}

/// One matmul: shapes, layouts (`pad` added to every leading dimension; `row` the order of C
/// and D, and of A and B unless `row_a` / `row_b` say otherwise), a strided batch (with a bias
/// or bias gradient per matmul), scalars (from host or device memory), a separate C or not, the
/// epilogue by name (`"default"`, `"relu"`, `"gelu_aux_bias"`, `"dgelu_bgrad"`, `"bgrada"`,
/// ...), TF32 and FP8 options (with an FP8 aux matrix's).
#[derive(Clone, Debug)]
pub struct Case {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ta: bool,
    pub tb: bool,
    pub row: bool,
    pub pad: usize,
    pub count: usize,
    pub alpha: f32,
    pub beta: f32,
    pub separate_c: bool,
    pub epi: &'static str,
    pub tf32: bool,
    pub fp8: Option<Fp8>,
    pub row_a: Option<bool>,
    pub row_b: Option<bool>,
    pub device_scalars: bool,
    pub aux_fp8: Option<AuxFp8>,
}

impl Case {
    /// A packed column-major `m x n x k` matmul with epilogue `epi`.
    pub fn new(m: usize, n: usize, k: usize, epi: &'static str) -> Self {
        Case {
            m,
            n,
            k,
            ta: false,
            tb: false,
            row: false,
            pad: 0,
            count: 1,
            alpha: 1.0,
            beta: 0.0,
            separate_c: false,
            epi,
            tf32: false,
            fp8: None,
            row_a: None,
            row_b: None,
            device_scalars: false,
            aux_fp8: None,
        }
    }
}

/// Random inputs of a [`Case`], as f64 values exact in their element types.
pub struct Inputs {
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub c: Vec<f64>,
    pub bias: Vec<f64>,
    pub aux: Vec<f64>,
    pub mask: Vec<u8>,
}

/// A matmul's results in logical order: `d`, `pre` (the aux matrix written, else empty) and
/// `mask` (the bits written, else empty) at `g m n + i + j m` for `D[i, j]` of batch `g`, `D`
/// divided by its FP8 scale (the aux matrix by its own); `grad` the bias gradients, one after
/// the other for a batch; `amax` D's amax and `amax_aux` the aux matrix's, when asked for.
#[derive(Debug, Default)]
pub struct Outputs {
    pub d: Vec<f64>,
    pub pre: Vec<f64>,
    pub mask: Vec<bool>,
    pub grad: Vec<f64>,
    pub amax: Option<f64>,
    pub amax_aux: Option<f64>,
}

/// The reference's magnitudes, for the tolerances: of each `D` element's terms, and of each
/// bias-gradient entry's; and every element's pre-activation, which decides a mask bit.
pub struct Mags {
    pub d: Vec<f64>,
    pub grad: Vec<f64>,
    pub pre: Vec<f64>,
}

/// A stored matrix: its index function and its length.
#[derive(Clone, Copy)]
struct Stored {
    row: bool,
    rows: usize,
    cols: usize,
    ld: usize,
}

impl Stored {
    fn new(row: bool, rows: usize, cols: usize, pad: usize) -> Self {
        Stored { row, rows, cols, ld: if row { cols } else { rows } + pad }
    }
    fn len(&self) -> usize {
        self.ld * if self.row { self.rows } else { self.cols }
    }
    fn at(&self, g: usize, r: usize, c: usize) -> usize {
        g * self.len() + if self.row { r * self.ld + c } else { r + c * self.ld }
    }
}

impl Case {
    fn a(&self) -> Stored {
        let (r, c) = if self.ta { (self.k, self.m) } else { (self.m, self.k) };
        Stored::new(self.row_a.unwrap_or(self.row), r, c, self.pad)
    }
    fn b(&self) -> Stored {
        let (r, c) = if self.tb { (self.n, self.k) } else { (self.k, self.n) };
        Stored::new(self.row_b.unwrap_or(self.row), r, c, self.pad)
    }
    fn d(&self) -> Stored {
        Stored::new(self.row, self.m, self.n, self.pad)
    }
    /// The column-major problem's rows of D (the epilogue vectors' length).
    fn mp(&self) -> usize {
        if self.row {
            self.n
        } else {
            self.m
        }
    }
    fn np(&self) -> usize {
        if self.row {
            self.m
        } else {
            self.n
        }
    }
    /// `D[i, j]` in the column-major problem: (row, column).
    fn problem_ij(&self, i: usize, j: usize) -> (usize, usize) {
        if self.row {
            (j, i)
        } else {
            (i, j)
        }
    }
    fn aux_ld(&self) -> usize {
        self.mp().div_ceil(8) * 8
    }
    fn mask_ld(&self) -> usize {
        self.mp().div_ceil(128) * 128
    }
    fn grad_len(&self) -> usize {
        match self.epi {
            "bgrada" => self.m,
            "bgradb" => self.n,
            _ => self.mp(),
        }
    }
    fn has_bias(&self) -> bool {
        self.epi.contains("bias")
    }
    fn opa(&self, a: &[f64], g: usize, i: usize, p: usize) -> f64 {
        let s = self.a();
        if self.ta {
            a[s.at(g, p, i)]
        } else {
            a[s.at(g, i, p)]
        }
    }
    fn opb(&self, b: &[f64], g: usize, p: usize, j: usize) -> f64 {
        let s = self.b();
        if self.tb {
            b[s.at(g, j, p)]
        } else {
            b[s.at(g, p, j)]
        }
    }

    /// Random inputs, each exact in its type; FP8 inputs from a few values exact in both
    /// formats.
    pub fn inputs<TA: Num, TB: Num, TC: Num, E: Num>(&self, rng: &mut Rng) -> Inputs {
        let fp8 = self.fp8.is_some();
        let pick = |rng: &mut Rng| [0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -2.0, 3.0, 0.25, -0.75][rng.below(10) as usize];
        let vals = |n: usize, of: &dyn Fn(f64) -> f64, rng: &mut Rng| -> Vec<f64> {
            (0..n).map(|_| of(if fp8 { pick(rng) } else { rng.f32() as f64 })).collect()
        };
        let count = self.count;
        Inputs {
            a: vals(self.a().len() * count, &|x| TA::of(x).f(), rng),
            b: vals(self.b().len() * count, &|x| TB::of(x).f(), rng),
            c: vals(self.d().len() * count, &|x| TC::of(x).f(), rng),
            bias: vals(self.mp().max(self.m).max(self.n) * count, &|x| E::of(x).f(), rng),
            aux: vals(self.aux_ld() * self.np() * count, &|x| E::of(x).f(), rng),
            mask: (0..self.mask_ld() * self.np() * count / 8).map(|_| rng.below(256) as u8).collect(),
        }
    }

    /// The f64 reference, and its magnitudes.
    pub fn reference(&self, inp: &Inputs) -> (Outputs, Mags) {
        let (m, n, k, count) = (self.m, self.n, self.k, self.count);
        let scale = self.fp8.map_or(1.0, |f| (f.sa * f.sb) as f64) * self.alpha as f64;
        let beta = self.beta as f64;
        let (d_st, mp) = (self.d(), self.mp());
        let mut out = Outputs { d: vec![0.0; m * n * count], ..Outputs::default() };
        let gl = self.grad_len();
        let mut mags = Mags { d: vec![0.0; m * n * count], grad: vec![0.0; gl * count], pre: vec![0.0; m * n * count] };
        let writes_aux = matches!(self.epi, "gelu_aux" | "gelu_aux_bias");
        let writes_mask = matches!(self.epi, "relu_aux" | "relu_aux_bias");
        if writes_aux {
            out.pre = vec![0.0; m * n * count];
        }
        if writes_mask {
            out.mask = vec![false; m * n * count];
        }
        if self.epi.contains("grad") {
            out.grad = vec![0.0; gl * count];
        }
        for g in 0..count {
            for j in 0..n {
                for i in 0..m {
                    let (mut x, mut mag) = (0.0, 0.0);
                    for p in 0..k {
                        let t = self.opa(&inp.a, g, i, p) * self.opb(&inp.b, g, p, j);
                        x += t;
                        mag += t.abs();
                    }
                    (x, mag) = (x * scale, mag * scale.abs());
                    if beta != 0.0 {
                        let c = inp.c[d_st.at(g, i, j)];
                        x += beta * c;
                        mag += (beta * c).abs();
                    }
                    let (ip, jp) = self.problem_ij(i, j);
                    let bias = if self.has_bias() && !self.epi.contains("grad") { inp.bias[g * mp + ip] } else { 0.0 };
                    let pre = x + bias;
                    let elem = g * self.aux_ld() * self.np() + jp * self.aux_ld() + ip;
                    let bit = g * self.mask_ld() * self.np() + jp * self.mask_ld() + ip;
                    let v = match self.epi {
                        "relu" | "relu_bias" | "relu_aux" | "relu_aux_bias" => pre.max(0.0),
                        "gelu" | "gelu_bias" | "gelu_aux" | "gelu_aux_bias" => gelu(pre),
                        "drelu" | "drelu_bgrad" => {
                            if (inp.mask[bit / 8] >> (bit % 8)) & 1 == 1 {
                                x
                            } else {
                                0.0
                            }
                        }
                        "dgelu" | "dgelu_bgrad" => x * dgelu(inp.aux[elem]),
                        _ => pre,
                    };
                    let at = g * m * n + i + j * m;
                    out.d[at] = v;
                    mags.d[at] = mag * 1.2 + bias.abs();
                    mags.pre[at] = pre;
                    if writes_aux {
                        out.pre[at] = pre;
                    }
                    if writes_mask {
                        out.mask[at] = pre > 0.0;
                    }
                    if matches!(self.epi, "drelu_bgrad" | "dgelu_bgrad") {
                        out.grad[g * gl + ip] += v;
                        mags.grad[g * gl + ip] += mag * 1.2;
                    }
                }
            }
            if self.epi == "bgrada" {
                for i in 0..m {
                    out.grad[g * gl + i] = (0..k).map(|p| self.opa(&inp.a, g, i, p)).sum();
                    mags.grad[g * gl + i] = (0..k).map(|p| self.opa(&inp.a, g, i, p).abs()).sum();
                }
            }
            if self.epi == "bgradb" {
                for j in 0..n {
                    out.grad[g * gl + j] = (0..k).map(|p| self.opb(&inp.b, g, p, j)).sum();
                    mags.grad[g * gl + j] = (0..k).map(|p| self.opb(&inp.b, g, p, j).abs()).sum();
                }
            }
        }
        if self.fp8.is_some_and(|f| f.amax) {
            out.amax = Some(out.d.iter().fold(0.0f64, |acc, v| acc.max(v.abs())));
        }
        if self.aux_fp8.is_some_and(|x| x.amax) {
            out.amax_aux = Some(out.pre.iter().fold(0.0f64, |acc, v| acc.max(v.abs())));
        }
        (out, mags)
    }

    /// Runs the matmul on `dev` (GPU or simulator) with `inp`; `D` starts as `C` when C is D,
    /// else as zeros. Returns the results in logical order.
    pub fn run<TA: Num, TB: Num, TC: Num, TD: Num, E: Num>(
        &self,
        dev: &Device,
        inp: &Inputs,
    ) -> cusched::Result<Outputs> {
        // The default stream: a device shared by many cases would run out of streams
        // (`DeviceConfig::max_streams`) with one each.
        let s = dev.default_stream();
        let mut h = Handles::new(dev, s)?;
        let a: GpuRef<TA> = dev.upload(s, &inp.a.iter().map(|&x| TA::of(x)).collect::<Vec<_>>())?;
        let b: GpuRef<TB> = dev.upload(s, &inp.b.iter().map(|&x| TB::of(x)).collect::<Vec<_>>())?;
        let c: GpuRef<TC> = dev.upload(s, &inp.c.iter().map(|&x| TC::of(x)).collect::<Vec<_>>())?;
        let d0: Vec<TD> =
            if self.separate_c { vec![TD::of(0.0); inp.c.len()] } else { inp.c.iter().map(|&x| TD::of(x)).collect() };
        let d: GpuRef<TD> = dev.upload(s, &d0)?;
        let bias: GpuRef<E> = dev.upload(s, &inp.bias.iter().map(|&x| E::of(x)).collect::<Vec<_>>())?;
        let aux: GpuRef<E> = dev.upload(s, &inp.aux.iter().map(|&x| E::of(x)).collect::<Vec<_>>())?;
        let mask: GpuRef<u8> = dev.upload(s, &inp.mask)?;
        let grad: GpuRef<E> = dev.upload(s, &vec![E::of(0.0); self.grad_len() * self.count])?;
        let scale = |v: f32| dev.upload(s, &[v]);
        let f = self.fp8.unwrap_or(Fp8 { sa: 1.0, sb: 1.0, sd: None, amax: false });
        let (sa, sb, sd) = (scale(f.sa)?, scale(f.sb)?, scale(f.sd.unwrap_or(1.0))?);
        let saux = scale(self.aux_fp8.map_or(1.0, |x| x.scale))?;
        let (alpha_dev, beta_dev) = (scale(self.alpha)?, scale(self.beta)?);
        let (auxv, maskv) = (Aux { buf: &aux, ld: None }, ReluMask { buf: &mask, ld: None });
        let e: Epilogue<'_, E> = match self.epi {
            "default" => Epilogue::Default,
            "relu" => Epilogue::Relu,
            "gelu" => Epilogue::Gelu,
            "bias" => Epilogue::Bias(&bias),
            "relu_bias" => Epilogue::ReluBias(&bias),
            "gelu_bias" => Epilogue::GeluBias(&bias),
            "relu_aux" => Epilogue::ReluAux(maskv),
            "gelu_aux" => Epilogue::GeluAux(auxv),
            "relu_aux_bias" => Epilogue::ReluAuxBias { bias: &bias, mask: maskv },
            "gelu_aux_bias" => Epilogue::GeluAuxBias { bias: &bias, aux: auxv },
            "drelu" => Epilogue::DRelu(maskv),
            "dgelu" => Epilogue::DGelu(auxv),
            "drelu_bgrad" => Epilogue::DReluBgrad { mask: maskv, bias_grad: &grad },
            "dgelu_bgrad" => Epilogue::DGeluBgrad { aux: auxv, bias_grad: &grad },
            "bgrada" => Epilogue::BgradA(&grad),
            "bgradb" => Epilogue::BgradB(&grad),
            other => panic!("unknown epilogue {other}"),
        };
        let t = |y: bool| if y { Transpose::Yes } else { Transpose::No };
        let (sa_st, sb_st, sd_st) = (self.a(), self.b(), self.d());
        let o = |row: bool| if row { Order::Row } else { Order::Col };
        let mut mm = Matmul::new(self.m, self.n, self.k, &a, &b, &d)
            .transpose(t(self.ta), t(self.tb))
            .order(o(self.row))
            .leading(sa_st.ld, sb_st.ld, sd_st.ld)
            .scale(self.alpha, self.beta)
            .tf32(self.tf32)
            .epilogue(e);
        if self.row_a.is_some() || self.row_b.is_some() {
            mm = mm.orders(o(sa_st.row), o(sb_st.row), o(self.row));
        }
        if self.device_scalars {
            // The host values are not used: zeros show it.
            mm = mm.scale(0.0, 0.0).scale_device(&alpha_dev, &beta_dev);
        }
        if let Some(x) = self.aux_fp8 {
            mm = mm.fp8_aux(Some(&saux), x.amax);
        }
        if self.count > 1 {
            mm = mm.batched(LtBatch {
                count: self.count,
                a: Some(sa_st.len()),
                b: Some(sb_st.len()),
                c: Some(sd_st.len()),
                d: Some(sd_st.len()),
                bias: if self.has_bias() || self.epi.contains("grad") { self.grad_len() } else { 0 },
                aux: None,
            });
        }
        if let Some(f) = self.fp8 {
            mm = mm.fp8(Fp8Scales { a: &sa, b: &sb, c: None, d: f.sd.map(|_| &sd) }, f.amax);
        }
        let done = if self.separate_c {
            h.blas_lt()?.matmul(&mm.with_c(&c, Some(sd_st.ld)))?
        } else {
            h.blas_lt()?.matmul(&mm)?
        };
        let got = done.wait()?;
        let sd_v = f.sd.unwrap_or(1.0) as f64;
        let (m, n) = (self.m, self.n);
        let dh: Vec<f64> = d.download(s)?.iter().map(|x| x.f() / sd_v).collect();
        let mut out = Outputs {
            d: vec![0.0; m * n * self.count],
            amax: got.amax_d.map(f64::from),
            amax_aux: got.amax_aux.map(f64::from),
            ..Outputs::default()
        };
        let saux_v = self.aux_fp8.map_or(1.0, |x| x.scale) as f64;
        let writes_aux = matches!(self.epi, "gelu_aux" | "gelu_aux_bias");
        let writes_mask = matches!(self.epi, "relu_aux" | "relu_aux_bias");
        let auxh: Vec<f64> = aux.download(s)?.iter().map(|x| x.f() / saux_v).collect();
        let maskh = mask.download(s)?;
        if writes_aux {
            out.pre = vec![0.0; m * n * self.count];
        }
        if writes_mask {
            out.mask = vec![false; m * n * self.count];
        }
        for g in 0..self.count {
            for j in 0..n {
                for i in 0..m {
                    let at = g * m * n + i + j * m;
                    out.d[at] = dh[sd_st.at(g, i, j)];
                    let (ip, jp) = self.problem_ij(i, j);
                    if writes_aux {
                        out.pre[at] = auxh[g * self.aux_ld() * self.np() + jp * self.aux_ld() + ip];
                    }
                    if writes_mask {
                        let bit = g * self.mask_ld() * self.np() + jp * self.mask_ld() + ip;
                        out.mask[at] = (maskh[bit / 8] >> (bit % 8)) & 1 == 1;
                    }
                }
            }
        }
        if self.epi.contains("grad") {
            out.grad = grad.download(s)?.iter().map(|x| x.f()).collect();
        }
        Ok(out)
    }
}

/// Asserts `got` matches `want` (the reference, or another backend's result) within `acc`
/// (relative to the terms' magnitudes: the accumulation's error) plus twice `TD`'s (`E`'s for
/// the aux matrix and the bias gradient) storage rounding. Mask bits are compared where the
/// pre-activation is clear of zero.
pub fn compare<TD: Num, E: Num>(what: &str, got: &Outputs, want: &Outputs, mags: &Mags, acc: f64) {
    let tol = |mag: f64, v: f64, rel: f64| acc * (mag + 1.0) + 2.0 * rel * v.abs();
    for i in 0..want.d.len() {
        let t = tol(mags.d[i], want.d[i], TD::REL);
        assert!((got.d[i] - want.d[i]).abs() <= t, "{what}: D[{i}] = {}, want {} (tol {t})", got.d[i], want.d[i]);
    }
    assert_eq!(got.pre.len(), want.pre.len(), "{what}: aux");
    for i in 0..want.pre.len() {
        let t = tol(mags.d[i], want.pre[i], E::REL);
        assert!(
            (got.pre[i] - want.pre[i]).abs() <= t,
            "{what}: aux[{i}] = {}, want {} (tol {t})",
            got.pre[i],
            want.pre[i]
        );
    }
    assert_eq!(got.mask.len(), want.mask.len(), "{what}: mask");
    for i in 0..want.mask.len() {
        // Where the pre-activation is clear of zero by more than the accumulation's error, the
        // bit is certain.
        if mags.pre[i].abs() > 4.0 * acc * (mags.d[i] + 1.0) {
            assert_eq!(got.mask[i], want.mask[i], "{what}: mask bit {i} (pre-activation {})", mags.pre[i]);
        }
    }
    assert_eq!(got.grad.len(), want.grad.len(), "{what}: bias gradient");
    for i in 0..want.grad.len() {
        let t = tol(mags.grad[i], want.grad[i], E::REL) * 2.0;
        assert!(
            (got.grad[i] - want.grad[i]).abs() <= t,
            "{what}: bias gradient [{i}] = {}, want {} (tol {t})",
            got.grad[i],
            want.grad[i]
        );
    }
    match (got.amax, want.amax) {
        (None, None) => {}
        (Some(g), Some(w)) => {
            let t = 2.0 * TD::REL * w + acc * mags.d.iter().fold(1.0f64, |a, &m| a.max(m + 1.0));
            assert!((g - w).abs() <= t, "{what}: amax {g}, want {w}");
        }
        other => panic!("{what}: amax {other:?}"),
    }
    match (got.amax_aux, want.amax_aux) {
        (None, None) => {}
        // Taken before the aux matrix is stored: the accumulation's error only.
        (Some(g), Some(w)) => {
            let t = acc * mags.d.iter().fold(1.0f64, |a, &m| a.max(m + 1.0));
            assert!((g - w).abs() <= t, "{what}: aux amax {g}, want {w}");
        }
        other => panic!("{what}: aux amax {other:?}"),
    }
}
