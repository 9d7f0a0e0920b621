//! Mixed-precision solves with iterative refinement: `gesv` (LU) and `gels` (QR least
//! squares), through cuSOLVER's `cusolverDn<t1><t2>gesv` and `cusolverDn<t1><t2>gels`: the
//! matrix is factored in a lower precision, and the solution refined in the element type's
//! until it is as accurate as a factorization in that precision would give; if refinement
//! does not get there, the solver falls back to factoring in the element type's precision.
//! The completion says which happened and after how many iterations.
//!
//! cuSOLVER returns the iteration count in host memory, so the library waits for the GPU
//! inside these calls (the op itself does not synchronize).

use super::calls::irs::{self, Pair};
use super::factor::{matrix, vptr};
use super::info::Meaning;
use super::{SizeKey, Solver, SolverElement};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::dtype::CudaType;
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// The lowest precision an iterative-refinement solve factors in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LowPrecision {
    /// The element type's own (cuSOLVER's `DD`, `SS`, `ZZ`, `CC`): no mixed precision.
    #[default]
    Main,
    /// Single precision (`DS`, `ZC`); for `f32` and `Complex<f32>`, the same as `Main`.
    F32,
    /// Half precision (`DH`, `SH`, `ZK`, `CK`).
    F16,
    /// bfloat16 (`DB`, `SB`, `ZE`, `CE`).
    Bf16,
    /// TensorFloat-32 (`DX`, `SX`, `ZY`, `CY`).
    Tf32,
}

/// Why an iterative-refinement solve fell back to factoring in the element type's precision
/// (cuSOLVER's negative iteration counts). The solution is still valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The size and right-hand sides make the lower precision not worth it (`-1`).
    NotWorthIt,
    /// An entry overflowed when converted to the lower precision (`-2`).
    Overflow,
    /// The lower-precision factorization failed (`-3`).
    FactorizationFailed,
    /// An overflow occurred during the computation (`-5`).
    ComputationOverflow,
    /// Refinement reached its iteration limit without converging (`-50`, cuSOLVER's limit).
    IterationLimit,
    /// Another code cuSOLVER returned.
    Other(i32),
}

/// What an iterative-refinement solve did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refinement {
    /// The lower-precision factorization and this many refinement iterations reached the
    /// element type's accuracy.
    Converged {
        /// Refinement iterations.
        iterations: u32,
    },
    /// It factored in the element type's precision instead, for this reason.
    FellBack(Fallback),
}

impl Refinement {
    /// The outcome cuSOLVER's iteration count `iter` means.
    pub(super) fn from_iter(iter: i32) -> Refinement {
        match iter {
            i if i >= 0 => Refinement::Converged { iterations: i.unsigned_abs() },
            -1 => Refinement::FellBack(Fallback::NotWorthIt),
            -2 => Refinement::FellBack(Fallback::Overflow),
            -3 => Refinement::FellBack(Fallback::FactorizationFailed),
            -5 => Refinement::FellBack(Fallback::ComputationOverflow),
            -50 => Refinement::FellBack(Fallback::IterationLimit),
            other => Refinement::FellBack(Fallback::Other(other)),
        }
    }
}

/// Solves `A X = B` for the `n x n` `A` by LU with partial pivoting in the `low` precision and
/// iterative refinement. `B` is read; `X` is written; `A` is left as it was when refinement
/// converged in a lower precision, and destroyed (its LU factors) otherwise; `ipiv` gets the
/// pivots. An exactly singular `U` (in the element type's precision) fails the completion
/// with [`NumericalFailure::Singular`](crate::NumericalFailure::Singular).
#[derive(Debug)]
pub struct Gesv<'a, T: SolverElement> {
    /// The lowest precision of the factorization.
    pub low: LowPrecision,
    /// Order of `A`.
    pub n: usize,
    /// Right-hand sides.
    pub nrhs: usize,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The `n` pivots (1-based).
    pub ipiv: &'a GpuRef<i32>,
    /// `B` (`n x nrhs`), read.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `X` (`n x nrhs`), written.
    pub x: &'a GpuRef<T>,
    /// Leading dimension of `X`; `None`: packed.
    pub ldx: Option<usize>,
}

/// The least-squares solution `X` minimizing `‖A X − B‖` for the `m x n` `A` of full rank,
/// `m >= n` (cuSOLVER solves only the overdetermined case), by QR in the `low` precision and
/// iterative refinement. `B` (`m x nrhs`) is read; `X` (`n x nrhs`) is written; `A` is left as
/// it was when refinement converged in a lower precision, and destroyed otherwise.
///
/// Refinement stops on the residual `B − A X` (as `gesv`'s), so it converges only for a
/// consistent system (`B` in `A`'s range, up to rounding). An inconsistent one refines to the
/// iteration limit and falls back ([`Fallback::IterationLimit`]); `X` is then the
/// least-squares solution from the element type's precision.
#[derive(Debug)]
pub struct Gels<'a, T: SolverElement> {
    /// The lowest precision of the factorization.
    pub low: LowPrecision,
    /// Rows of `A`.
    pub m: usize,
    /// Columns of `A`.
    pub n: usize,
    /// Right-hand sides.
    pub nrhs: usize,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B` (`m x nrhs`), read.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `X` (`n x nrhs`), written.
    pub x: &'a GpuRef<T>,
    /// Leading dimension of `X`; `None`: packed.
    pub ldx: Option<usize>,
}

/// The cuSOLVER pair for element type `T` and `low`.
fn pair<T: SolverElement>(low: LowPrecision) -> Pair {
    use LowPrecision as L;
    match (T::CUDA, low) {
        (CudaType::R64F, L::Main) => Pair::DD,
        (CudaType::R64F, L::F32) => Pair::DS,
        (CudaType::R64F, L::F16) => Pair::DH,
        (CudaType::R64F, L::Bf16) => Pair::DB,
        (CudaType::R64F, L::Tf32) => Pair::DX,
        (CudaType::C64F, L::Main) => Pair::ZZ,
        (CudaType::C64F, L::F32) => Pair::ZC,
        (CudaType::C64F, L::F16) => Pair::ZK,
        (CudaType::C64F, L::Bf16) => Pair::ZE,
        (CudaType::C64F, L::Tf32) => Pair::ZY,
        (CudaType::C32F, L::Main | L::F32) => Pair::CC,
        (CudaType::C32F, L::F16) => Pair::CK,
        (CudaType::C32F, L::Bf16) => Pair::CE,
        (CudaType::C32F, L::Tf32) => Pair::CY,
        (_, L::Main | L::F32) => Pair::SS,
        (_, L::F16) => Pair::SH,
        (_, L::Bf16) => Pair::SB,
        (_, L::Tf32) => Pair::SX,
    }
}

/// A dimension or leading dimension as the `int` the IRS calls take.
fn int(arg: &'static str, v: i64) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::invalid(arg, format!("{v} does not fit the 32-bit int these calls take")))
}

/// The significand bits and the largest finite value of `low` for element type `T` (`None`:
/// the type's own precision), for the simulator's rounding.
pub(super) fn low_bits<T: SolverElement>(low: LowPrecision) -> Option<(u32, f64)> {
    let single = matches!(T::CUDA, CudaType::R32F | CudaType::C32F);
    let f32_max = f64::from(f32::MAX);
    match low {
        LowPrecision::Main => None,
        LowPrecision::F32 if single => None,
        LowPrecision::F32 => Some((24, f32_max)),
        LowPrecision::F16 => Some((11, 65504.0)),
        LowPrecision::Tf32 => Some((11, f32_max)),
        LowPrecision::Bf16 => Some((8, f32_max)),
    }
}

impl Solver {
    /// Mixed-precision LU solve with iterative refinement (see [`Gesv`]).
    pub fn gesv<T: SolverElement>(&mut self, g: &Gesv<'_, T>) -> Result<Completion<Refinement>> {
        let (n, nrhs) = (check::dim("n", g.n, false)?, check::dim("nrhs", g.nrhs, false)?);
        let lda = int("lda", matrix("a", "lda", g.a, g.n, g.n, g.lda)?)?;
        let ldb = int("ldb", matrix("b", "ldb", g.b, g.n, g.nrhs, g.ldb)?)?;
        let ldx = int("ldx", matrix("x", "ldx", g.x, g.n, g.nrhs, g.ldx)?)?;
        check::covers("ipiv", g.ipiv, Some(g.n), "n pivots")?;
        check::distinct("b", g.a, g.b)?;
        check::distinct("x", g.a, g.x)?;
        check::distinct("x", g.b, g.x)?;
        let mut rec = self.op.recorder("gesv");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "ipiv", g.ipiv, Access::Write)?;
        record(&mut rec, "b", g.b, Access::Read)?;
        record(&mut rec, "x", g.x, Access::Write)?;
        if self.op.device.is_simulated() {
            let dims = (lda as usize, ldb as usize, ldx as usize);
            return super::sim::gesv(&self.op, rec, g, dims, low_bits::<T>(g.low));
        }
        let (h, _) = self.handle()?;
        let p = pair::<T>(g.low);
        let (a, b, x, ipiv) = ((vptr(g.a)?, lda), (vptr(g.b)?, ldb), (vptr(g.x)?, ldx), dptr(g.ipiv)?);
        let key = SizeKey {
            op: "gesv",
            dtype: T::CUDA as u32,
            dims: [n.into(), nrhs.into(), lda.into(), ldb.into(), ldx.into(), p as i64],
        };
        // SAFETY: a live handle, context bound by `sizes`; the query reads no buffer.
        let sizes = self.sizes(key, || Ok((unsafe { irs::gesv_size(p, h, n, nrhs, a, ipiv, b, x) }?, 0)))?;
        let (work, mut keep) = self.workspace(&mut rec, sizes)?;
        let iter = Arc::new(AtomicI32::new(0));
        keep.push(Box::new(iter.clone()));
        let count = iter.clone();
        self.run_info(
            rec,
            keep,
            "gesv",
            1,
            Meaning::Pivot,
            None,
            |pin| {
                // SAFETY: (1) a live handle on this stream; (2) `a`, `b`, `x` (of `T`, the pair's
                // element type) and `ipiv` cover their validated shapes, are distinct and
                // declared; (3) the workspace, declared, holds the queried bytes; (4) `iter` is
                // a host `int` kept alive with the op, `info` pinned mapped memory.
                unsafe {
                    irs::gesv(p, h, n, nrhs, a, ipiv, b, x, (work.device, work.device_bytes), iter.as_ptr(), pin.info())
                }
            },
            move || Refinement::from_iter(count.load(Ordering::Acquire)),
        )
    }

    /// Mixed-precision least squares with iterative refinement (see [`Gels`]).
    pub fn gels<T: SolverElement>(&mut self, g: &Gels<'_, T>) -> Result<Completion<Refinement>> {
        let (m, n) = (check::dim("m", g.m, false)?, check::dim("n", g.n, false)?);
        let nrhs = check::dim("nrhs", g.nrhs, false)?;
        if g.m < g.n {
            return Err(Error::invalid(
                "m",
                format!("{} is below n = {}: cuSOLVER's gels solves only m >= n (overdetermined) systems", g.m, g.n),
            ));
        }
        let lda = int("lda", matrix("a", "lda", g.a, g.m, g.n, g.lda)?)?;
        let ldb = int("ldb", matrix("b", "ldb", g.b, g.m, g.nrhs, g.ldb)?)?;
        let ldx = int("ldx", matrix("x", "ldx", g.x, g.n, g.nrhs, g.ldx)?)?;
        check::distinct("b", g.a, g.b)?;
        check::distinct("x", g.a, g.x)?;
        check::distinct("x", g.b, g.x)?;
        let mut rec = self.op.recorder("gels");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "b", g.b, Access::Read)?;
        record(&mut rec, "x", g.x, Access::Write)?;
        if self.op.device.is_simulated() {
            let dims = (lda as usize, ldb as usize, ldx as usize);
            return super::sim::gels(&self.op, rec, g, dims, low_bits::<T>(g.low));
        }
        let (h, _) = self.handle()?;
        let p = pair::<T>(g.low);
        let (a, b, x) = ((vptr(g.a)?, lda), (vptr(g.b)?, ldb), (vptr(g.x)?, ldx));
        let key = SizeKey {
            op: "gels",
            dtype: T::CUDA as u32,
            dims: [m.into(), n.into(), nrhs.into(), lda.into(), i64::from(ldb) << 32 | i64::from(ldx), p as i64],
        };
        // SAFETY: a live handle, context bound by `sizes`; the query reads no buffer.
        let sizes = self.sizes(key, || Ok((unsafe { irs::gels_size(p, h, m, n, nrhs, a, b, x) }?, 0)))?;
        let (work, mut keep) = self.workspace(&mut rec, sizes)?;
        let iter = Arc::new(AtomicI32::new(0));
        keep.push(Box::new(iter.clone()));
        let count = iter.clone();
        self.run_info(
            rec,
            keep,
            "gels",
            1,
            Meaning::ParamsOnly,
            None,
            |pin| {
                // SAFETY: (1) a live handle on this stream; (2) `a`, `b`, `x` (of `T`, the pair's
                // element type) cover their validated shapes, are distinct and declared; (3) the
                // workspace, declared, holds the queried bytes; (4) `iter` is a host `int` kept
                // alive with the op, `info` pinned mapped memory.
                unsafe {
                    irs::gels(p, h, m, n, nrhs, a, b, x, (work.device, work.device_bytes), iter.as_ptr(), pin.info())
                }
            },
            move || Refinement::from_iter(count.load(Ordering::Acquire)),
        )
    }
}
