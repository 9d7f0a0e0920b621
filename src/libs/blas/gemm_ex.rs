//! Mixed-precision GEMM (`cublasGemmEx`, `cublasGemmStridedBatchedEx` with their own data and
//! compute types): int8 into int32, f16 and bf16 into f32, f16 into f16, and f32 with a chosen
//! compute type (pedantic, or the fast TF32 / f16 / bf16 tensor-core shortcuts).
//!
//! # On the simulator
//!
//! The product is computed in loops that round as the compute type does: `I32` multiplies the
//! int8 values exactly and sums in wrapping 32-bit integers, scaling by integer `alpha` and
//! `beta`; `F32` and `F32Pedantic` sum in f32; `F32FastTf32`, `F32Fast16F` and `F32Fast16BF`
//! first round each input element to TF32 (10 mantissa bits, to nearest even), f16 or bf16, then
//! sum in f32; `F16` rounds the running sum to f16 after every term. `alpha` and `beta` are
//! applied in the compute type's precision and each stored element is rounded once to `C`'s
//! type. The GPU sums in another order (and tensor cores may keep more bits between steps):
//! agreement is to the compute type's rounding, exact for `I32`.

use super::calls::{self, GemmShape};
use super::{output_access, BatchStrides, Blas, Transpose};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::dtype::DataTypes;
use crate::libs::validate as check;
use crate::libs::{dptr, record, StreamLibrary};
use crate::memory::{Element, GpuRef};
use crate::track::Access;
use cudarc::cublas::sys::cudaDataType_t as Sys;
use std::ffi::c_void;

/// The precision a [`GemmEx`] accumulates in (cuBLAS's `cublasComputeType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputeType {
    /// Half precision throughout (`CUBLAS_COMPUTE_16F`): f16 operands and output.
    F16,
    /// f32 (`CUBLAS_COMPUTE_32F`); tensor cores may be used for half operands.
    F32,
    /// f32 with no reduced-precision shortcut anywhere (`CUBLAS_COMPUTE_32F_PEDANTIC`).
    F32Pedantic,
    /// f32 operands rounded to TF32 on tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`).
    F32FastTf32,
    /// f32 operands rounded to f16 on tensor cores (`CUBLAS_COMPUTE_32F_FAST_16F`).
    F32Fast16F,
    /// f32 operands rounded to bf16 on tensor cores (`CUBLAS_COMPUTE_32F_FAST_16BF`).
    F32Fast16BF,
    /// 32-bit integers (`CUBLAS_COMPUTE_32I`): int8 operands, int32 output, integer scalars.
    I32,
}

/// The element types of [`GemmEx`] operands: `i8`, `i32`, `half::f16`, `half::bf16`, `f32`.
pub trait ExElement: Element + sealed::Ex {}
impl ExElement for i8 {}
impl ExElement for i32 {}
impl ExElement for half::f16 {}
impl ExElement for half::bf16 {}
impl ExElement for f32 {}

pub(crate) mod sealed {
    #![allow(unreachable_pub)]
    /// The simulator's conversions of an [`ExElement`](super::ExElement).
    pub trait Ex: Copy + Send + 'static {
        /// Its `cudaDataType`.
        const DATA: cudarc::cublas::sys::cudaDataType_t;
        /// The value in f64 (exact for every type here).
        fn wide(self) -> f64;
        /// `x` rounded (or, for the integers, truncated) to the type.
        fn narrow(x: f64) -> Self;
    }
}

macro_rules! ex {
    ($($t:ty: |$v:ident| $wide:expr, |$x:ident| $narrow:expr;)*) => {$(
        impl sealed::Ex for $t {
            const DATA: cudarc::cublas::sys::cudaDataType_t = calls::ex_type(<$t as DataTypes>::CUDA);
            fn wide(self) -> f64 {
                let $v = self;
                $wide
            }
            fn narrow($x: f64) -> Self {
                $narrow
            }
        }
    )*};
}
ex! {
    i8: |v| v as f64, |x| x as i8;
    i32: |v| v as f64, |x| x as i32;
    half::f16: |v| v.to_f64(), |x| half::f16::from_f64(x);
    half::bf16: |v| v.to_f64(), |x| half::bf16::from_f64(x);
    f32: |v| v as f64, |x| x as f32;
}

/// `C = alpha op(A) op(B) + beta C` with `A` and `B` of type `AB`, `C` of type `Out`,
/// accumulated in `compute`. The combinations are cuBLAS's (`cublasGemmEx`):
///
/// | `AB` | `Out` | `compute` |
/// |---|---|---|
/// | `i8` | `i32` | `I32` |
/// | `f16` | `f32` | `F32`, `F32Pedantic` |
/// | `bf16` | `f32` | `F32`, `F32Pedantic` |
/// | `f16` | `f16` | `F16`, `F32`, `F32Pedantic` |
/// | `bf16` | `bf16` | `F32`, `F32Pedantic` |
/// | `f32` | `f32` | `F32`, `F32Pedantic`, `F32FastTf32`, `F32Fast16F`, `F32Fast16BF` |
///
/// Others are refused with [`Error::Unsupported`]. `alpha` and `beta` are converted to the
/// compute type's scale type (f16 for `F16`, i32 for `I32`, where they must be whole numbers).
/// With `I32`, cuBLAS also needs `lda` and `ldb` to be multiples of 4 (refused as unsupported
/// otherwise).
#[derive(Debug)]
pub struct GemmEx<'a, AB: ExElement, Out: ExElement> {
    /// Whether `A` is transposed (`Conj` is the transpose: the types are real).
    pub trans_a: Transpose,
    /// Whether `B` is transposed.
    pub trans_b: Transpose,
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of `C`'s old contents (zero: `C` is only written).
    pub beta: f32,
    /// `A`.
    pub a: &'a GpuRef<AB>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`.
    pub b: &'a GpuRef<AB>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `C`, `m x n`.
    pub c: &'a GpuRef<Out>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
    /// The compute type.
    pub compute: ComputeType,
}

impl<'a, AB: ExElement, Out: ExElement> GemmEx<'a, AB, Out> {
    /// `C = A B` with packed operands, no transposes, computed in `compute`.
    pub fn new(
        m: usize,
        n: usize,
        k: usize,
        a: &'a GpuRef<AB>,
        b: &'a GpuRef<AB>,
        c: &'a GpuRef<Out>,
        compute: ComputeType,
    ) -> Self {
        GemmEx {
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            m,
            n,
            k,
            alpha: 1.0,
            beta: 0.0,
            a,
            lda: None,
            b,
            ldb: None,
            c,
            ldc: None,
            compute,
        }
    }

    /// Sets `alpha` and `beta`.
    pub fn scale(mut self, alpha: f32, beta: f32) -> Self {
        (self.alpha, self.beta) = (alpha, beta);
        self
    }

    /// Sets the transposes of `A` and `B`.
    pub fn transpose(mut self, a: Transpose, b: Transpose) -> Self {
        (self.trans_a, self.trans_b) = (a, b);
        self
    }

    /// Sets the leading dimensions.
    pub fn leading(mut self, lda: usize, ldb: usize, ldc: usize) -> Self {
        (self.lda, self.ldb, self.ldc) = (Some(lda), Some(ldb), Some(ldc));
        self
    }
}

/// The host scalars in the compute type's scale type.
#[derive(Clone, Copy)]
enum Scale {
    F16(half::f16, half::f16),
    F32(f32, f32),
    I32(i32, i32),
}

/// Whether cuBLAS's `cublasGemmEx` table has the combination.
fn supported(ab: Sys, out: Sys, compute: ComputeType) -> bool {
    use ComputeType as K;
    use Sys as T;
    matches!(
        (ab, out, compute),
        (T::CUDA_R_8I, T::CUDA_R_32I, K::I32)
            | (T::CUDA_R_16F, T::CUDA_R_32F, K::F32 | K::F32Pedantic)
            | (T::CUDA_R_16BF, T::CUDA_R_32F, K::F32 | K::F32Pedantic)
            | (T::CUDA_R_16F, T::CUDA_R_16F, K::F16 | K::F32 | K::F32Pedantic)
            | (T::CUDA_R_16BF, T::CUDA_R_16BF, K::F32 | K::F32Pedantic)
            | (T::CUDA_R_32F, T::CUDA_R_32F, K::F32 | K::F32Pedantic | K::F32FastTf32 | K::F32Fast16F | K::F32Fast16BF)
    )
}

/// A checked mixed GEMM: the shape cuBLAS takes, the spans, the scalars.
struct Checked {
    shape: GemmShape,
    spans: [usize; 3],
    scale: Scale,
}

impl<AB: ExElement, Out: ExElement> GemmEx<'_, AB, Out> {
    fn check(&self) -> Result<Checked> {
        if !supported(AB::DATA, Out::DATA, self.compute) {
            return Err(Error::Unsupported {
                library: Blas::LIBRARY.name,
                what: format!(
                    "gemm_ex of {} operands into {} computed in {:?}",
                    std::any::type_name::<AB>(),
                    std::any::type_name::<Out>(),
                    self.compute
                ),
                hint: "use a combination of cuBLAS's cublasGemmEx table (see GemmEx's documentation)".into(),
            });
        }
        let (m, n, k) =
            (check::dim("m", self.m, false)?, check::dim("n", self.n, false)?, check::dim("k", self.k, false)?);
        let (ar, ac) = self.trans_a.stored(self.m, self.k);
        let (br, bc) = self.trans_b.stored(self.k, self.n);
        let a = check::matrix("a", "lda", ar, ac, self.lda)?;
        let b = check::matrix("b", "ldb", br, bc, self.ldb)?;
        let c = check::matrix("c", "ldc", self.m, self.n, self.ldc)?;
        let scale = match self.compute {
            ComputeType::I32 => {
                for (arg, ld) in [("lda", a.ld), ("ldb", b.ld)] {
                    if ld % 4 != 0 {
                        return Err(Error::Unsupported {
                            library: Blas::LIBRARY.name,
                            what: format!("an int8 gemm_ex with {arg} {ld}, not a multiple of 4"),
                            hint: format!("pad the matrix so that {arg} is a multiple of 4"),
                        });
                    }
                }
                let int = |arg: &'static str, v: f32| -> Result<i32> {
                    if v.fract() != 0.0 || !(i32::MIN as f32..=i32::MAX as f32).contains(&v) {
                        return Err(Error::invalid(
                            arg,
                            format!("{v} is not a 32-bit integer: the I32 compute type scales by integers"),
                        ));
                    }
                    Ok(v as i32)
                };
                Scale::I32(int("alpha", self.alpha)?, int("beta", self.beta)?)
            }
            ComputeType::F16 => Scale::F16(half::f16::from_f32(self.alpha), half::f16::from_f32(self.beta)),
            _ => Scale::F32(self.alpha, self.beta),
        };
        let shape =
            GemmShape { trans_a: self.trans_a, trans_b: self.trans_b, m, n, k, lda: a.ld, ldb: b.ld, ldc: c.ld };
        Ok(Checked { shape, spans: [a.span, b.span, c.span], scale })
    }

    fn check_buffers(&self, spans: [usize; 3], batch: &str) -> Result<()> {
        check::covers("a", self.a, Some(spans[0]), &format!("op(A) {}x{}{batch}", self.m, self.k))?;
        check::covers("b", self.b, Some(spans[1]), &format!("op(B) {}x{}{batch}", self.k, self.n))?;
        check::covers("c", self.c, Some(spans[2]), &format!("C {}x{}{batch}", self.m, self.n))?;
        // C's type differs from the inputs' only in the element: the buffers are told apart by
        // their tracking ids.
        if self.c.id() == self.a.id() || self.c.id() == self.b.id() {
            return Err(Error::invalid("c", "must not be the same buffer as `a` or `b`"));
        }
        Ok(())
    }

    fn run(&self, blas: &mut Blas, name: &'static str, batch: Option<BatchStrides>) -> Result<Completion<()>> {
        let d = self.check()?;
        let (count, strides) = match batch {
            None => (1, [0; 3]),
            Some(bs) => {
                check::dim("batch.count", bs.count, false)?;
                let s = [bs.a.unwrap_or(d.spans[0]), bs.b.unwrap_or(d.spans[1]), bs.c.unwrap_or(d.spans[2])];
                if bs.count > 1 && s[2] < d.spans[2] {
                    return Err(Error::invalid(
                        "batch.c",
                        format!("stride {} is below one C's span of {} elements", s[2], d.spans[2]),
                    ));
                }
                (bs.count, s)
            }
        };
        let total = |arg: &'static str, i: usize| -> Result<usize> {
            strides[i]
                .checked_mul(count - 1)
                .and_then(|x| x.checked_add(d.spans[i]))
                .ok_or_else(|| Error::invalid(arg, format!("stride {} times {count} overflows", strides[i])))
        };
        let spans = [total("batch.a", 0)?, total("batch.b", 1)?, total("batch.c", 2)?];
        let batch_note = if batch.is_some() { format!(" x {count} strided") } else { String::new() };
        self.check_buffers(spans, &batch_note)?;
        let count_i = check::dim("batch.count", count, false)?;
        let mut rec = blas.op.recorder(name);
        record(&mut rec, "a", self.a, Access::Read)?;
        record(&mut rec, "b", self.b, Access::Read)?;
        record(&mut rec, "c", self.c, output_access(self.beta))?;
        if blas.op.device.is_simulated() {
            let (am, bm, cm) = (self.a.sim_data()?, self.b.sim_data()?, self.c.sim_data()?);
            let (s, compute, scale) = (d.shape, self.compute, d.scale);
            return blas.op.run_sim(rec, Vec::new(), move || {
                // One lock at a time: `a` and `b` may be the same buffer.
                let a = am.read().to_vec();
                let b = bm.read().to_vec();
                let mut c = cm.lock();
                for i in 0..count {
                    let (ai, bi, ci) = (i * strides[0], i * strides[1], i * strides[2]);
                    sim_gemm_ex(&s, compute, scale, &a[ai..], &b[bi..], &mut c[ci..]);
                }
            });
        }
        let h = blas.handle()?;
        let shape = d.shape;
        let strides = strides.map(|s| s as i64);
        let types = (AB::DATA, Out::DATA, calls::ex_compute(self.compute));
        blas.op.run(rec, Vec::new(), || {
            let scale = d.scale;
            let (alpha, beta): (*const c_void, *const c_void) = match &scale {
                Scale::F16(a, b) => ((a as *const half::f16).cast(), (b as *const half::f16).cast()),
                Scale::F32(a, b) => ((a as *const f32).cast(), (b as *const f32).cast()),
                Scale::I32(a, b) => ((a as *const i32).cast(), (b as *const i32).cast()),
            };
            let (a, b, c) = (dptr::<AB, c_void>(self.a)?, dptr::<AB, c_void>(self.b)?, dptr::<Out, c_void>(self.c)?);
            // SAFETY: (1) a live handle on the recorder's stream, fenced by preflight; (2) the
            // buffers cover every one of the `count` operands at their strides (checked above);
            // (3) `c` is distinct from `a` and `b`, and C's stride is at least one C's span;
            // (4) alpha and beta are host scalars of the compute type's scale type, alive for
            // the call; (5) the type combination is one of cuBLAS's table (checked).
            unsafe { calls::gemm_ex_mixed(h, &shape, types, alpha, a, b, beta, c, batch.map(|_| (strides, count_i))) }
        })
    }
}

/// Rounds an f32 to TF32 (10 mantissa bits), to nearest even; infinities and NaNs pass.
fn tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let bits = x.to_bits();
    let lsb = (bits >> 13) & 1;
    f32::from_bits(bits.wrapping_add(0xfff + lsb) & !0x1fff)
}

/// One mixed GEMM on the host, rounding as `compute` does (see the module's documentation).
fn sim_gemm_ex<AB: ExElement, Out: ExElement>(
    s: &GemmShape,
    compute: ComputeType,
    scale: Scale,
    a: &[AB],
    b: &[AB],
    c: &mut [Out],
) {
    let us = |v: i32| v as usize;
    let (m, n, k, lda, ldb, ldc) = (us(s.m), us(s.n), us(s.k), us(s.lda), us(s.ldb), us(s.ldc));
    let at = |t: Transpose, ld: usize, i: usize, j: usize| if t == Transpose::No { i + j * ld } else { j + i * ld };
    let input = |v: AB| -> f32 {
        let x = v.wide() as f32;
        match compute {
            ComputeType::F32FastTf32 => tf32(x),
            ComputeType::F32Fast16F => half::f16::from_f32(x).to_f32(),
            ComputeType::F32Fast16BF => half::bf16::from_f32(x).to_f32(),
            _ => x,
        }
    };
    for j in 0..n {
        for i in 0..m {
            let ea = |l: usize| a[at(s.trans_a, lda, i, l)];
            let eb = |l: usize| b[at(s.trans_b, ldb, l, j)];
            let e = &mut c[i + j * ldc];
            *e = match scale {
                Scale::I32(alpha, beta) => {
                    let mut sum = 0i32;
                    for l in 0..k {
                        sum = sum.wrapping_add((ea(l).wide() as i32).wrapping_mul(eb(l).wide() as i32));
                    }
                    let old = if beta == 0 { 0 } else { beta.wrapping_mul(e.wide() as i32) };
                    Out::narrow(alpha.wrapping_mul(sum).wrapping_add(old) as f64)
                }
                Scale::F16(alpha, beta) => {
                    let mut sum = half::f16::ZERO;
                    for l in 0..k {
                        let p = half::f16::from_f64(ea(l).wide()) * half::f16::from_f64(eb(l).wide());
                        sum += p;
                    }
                    let old =
                        if beta == half::f16::ZERO { half::f16::ZERO } else { beta * half::f16::from_f64(e.wide()) };
                    Out::narrow((alpha * sum + old).to_f64())
                }
                Scale::F32(alpha, beta) => {
                    let mut sum = 0.0f32;
                    for l in 0..k {
                        sum += input(ea(l)) * input(eb(l));
                    }
                    let old = if beta == 0.0 { 0.0 } else { beta * e.wide() as f32 };
                    Out::narrow((alpha * sum + old) as f64)
                }
            };
        }
    }
}

impl Blas {
    /// A mixed-precision GEMM (see [`GemmEx`]).
    pub fn gemm_ex<AB: ExElement, Out: ExElement>(&mut self, g: &GemmEx<'_, AB, Out>) -> Result<Completion<()>> {
        g.run(self, "gemm_ex", None)
    }

    /// `batch.count` mixed-precision GEMMs over matrices `stride` elements apart (see
    /// [`GemmEx`] and [`BatchStrides`]).
    pub fn gemm_ex_strided_batched<AB: ExElement, Out: ExElement>(
        &mut self,
        g: &GemmEx<'_, AB, Out>,
        batch: BatchStrides,
    ) -> Result<Completion<()>> {
        g.run(self, "gemm_ex_strided_batched", Some(batch))
    }
}
