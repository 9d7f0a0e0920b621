//! The mixed-precision products: SpMV and SpMM whose sparse and dense inputs are stored in a
//! low-precision type (`f16`, `bf16`, `i8`) and whose output and compute types are wider, as
//! the rows of cuSPARSE's tables ([`MixedSpmv`], [`MixedSpmm`]) allow. The rows are traits on
//! the types, so a pair outside the tables is a compile error, not a runtime refusal.

use super::matrix::{mixed_types, ValueType};
use super::{
    calls, dense_words, mat_key, mat_words, not_in_matrix, output_access_if, record_matrix, takes, DenseMatrix, Format,
    HostScalars, MixedSpmm, MixedSpmv, Sparse, SparseIndex, SparseMatrix, Transpose,
};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{record, validate as check};
use crate::memory::{Element, GpuRef};
use crate::track::Access;

/// The formats the mixed-precision products take: cuSPARSE lists its low-precision rows for
/// the general formats; BSR and Blocked-ELL kernels are not covered here.
const FORMATS: &[Format] = &[Format::Csr, Format::Csc, Format::Coo];

/// `t` for real values: a conjugate transpose is a plain one.
fn real(t: Transpose) -> Transpose {
    if t == Transpose::Conj {
        Transpose::Yes
    } else {
        t
    }
}

impl Sparse {
    /// Mixed-precision SpMV, `y = alpha op(A) x + beta y`: `A` and `x` stored in `X` (`f16`,
    /// `bf16` or `i8`), `y` in `Y`, computed in the row's compute type, which `alpha` and `beta`
    /// take (`f32`, or `i32` for `i8` into `i32`); the pairs are [`MixedSpmv`]'s table. `A` is
    /// CSR, CSC or COO with `i32` or `i64` indices (others are rejected as an invalid `a`); `x`
    /// holds at least `op(A)`'s columns, `y` at least its rows; `y` is only written when `beta`
    /// is zero. [`Transpose::Conj`] is a plain transpose (the types are real).
    ///
    /// On the simulator the inputs are read exactly, the products summed in `f64` (`i64` for
    /// the integer row) and the result rounded once into `Y`; cuSPARSE sums in the compute
    /// type, so GPU results differ from the simulator's by the compute type's rounding of the
    /// sum (the integer row agrees exactly: both wrap modulo 2^32).
    #[allow(clippy::too_many_arguments)]
    pub fn spmv_mixed<X: MixedSpmv<Y>, Y: Element, I: SparseIndex>(
        &mut self,
        op_a: Transpose,
        alpha: X::Compute,
        a: &SparseMatrix<X, I>,
        x: &GpuRef<X>,
        beta: X::Compute,
        y: &GpuRef<Y>,
    ) -> Result<Completion<()>> {
        takes("mixed-precision SpMV", FORMATS, op_a, a)?;
        let op_a = real(op_a);
        let (m, n) = super::ops::op_shape(op_a, a);
        check::covers("x", x, Some(n), &format!("op(A) with {n} columns"))?;
        check::covers("y", y, Some(m), &format!("op(A) with {m} rows"))?;
        check::distinct("y", x, y)?;
        not_in_matrix("y", y, a)?;
        let [y_type, compute] = mixed_types::<X, Y>();
        let mut rec = self.op.recorder("spmv_mixed");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "x", x, Access::Read)?;
        record(&mut rec, "y", y, output_access_if(X::is_zero(beta)))?;
        let sc = HostScalars::compute(alpha, beta);
        if self.simulated() {
            return self.sim_spmv_mixed(rec, op_a, sc.values(), a, x, y);
        }
        let h = self.handle()?;
        let (da, dx, dy) = (self.mat(a)?, self.vec_of(x, n, X::CUDA_TYPE)?, self.vec_of(y, m, y_type)?);
        let s = sc.raw_as(compute);
        let key = [
            &[op_a as u64, compute as u64][..],
            &mat_words(&mat_key(a)),
            &dense_words(x.id(), [n, 1, n], X::CUDA_TYPE),
            &dense_words(y.id(), [m, 1, m], y_type),
            &[X::bits(alpha), X::bits(beta)],
        ]
        .into_iter()
        .flatten()
        .copied()
        .collect();
        // SAFETY: (1) a live handle; (2) the descriptors point at the validated, live buffers,
        // typed by the row of the data-type table of their element types; (3) the scalars are
        // host values of the compute type `compute` (f32 or i32, 16-byte aligned by
        // `HostScalars`), in place until the call returns.
        let bytes = self.size("spmv_mixed", key, || unsafe { calls::spmv_size(h, op_a, s, da, dx, dy) })?;
        let work = self.work.use_on(&self.op, &mut rec, bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        let done = self.op.run(rec, Vec::new(), || {
            let s = sc.raw_as(compute);
            // SAFETY: as above; (4) the workspace, declared read-write, holds the size queried.
            unsafe { calls::spmv(h, op_a, s, da, dx, dy, work.map_or(std::ptr::null_mut(), |w| w as _)) }
        });
        self.trim();
        done
    }

    /// Mixed-precision SpMM, `C = alpha op(A) B + beta C`: `A` and `B` stored in `X` (`f16`,
    /// `bf16` or `i8`), `C` in `Y`, computed in the row's compute type, which `alpha` and `beta`
    /// take; the pairs are [`MixedSpmm`]'s table. `A` is CSR, CSC or COO with `i32` or `i64`
    /// indices (others are rejected as an invalid `a`); `B` (`op(A)`'s columns x `C`'s
    /// columns) and `C` are dense, each column- or row-major. The simulator computes as
    /// [`spmv_mixed`](Self::spmv_mixed) says.
    #[allow(clippy::too_many_arguments)]
    pub fn spmm_mixed<X: MixedSpmm<Y>, Y: Element, I: SparseIndex>(
        &mut self,
        op_a: Transpose,
        alpha: X::Compute,
        a: &SparseMatrix<X, I>,
        b: DenseMatrix<'_, X>,
        beta: X::Compute,
        c: DenseMatrix<'_, Y>,
    ) -> Result<Completion<()>> {
        takes("mixed-precision SpMM", FORMATS, op_a, a)?;
        let op_a = real(op_a);
        let (m, k) = super::ops::op_shape(op_a, a);
        let ldb = b.check("b", "b.ld")?;
        let ldc = c.check("c", "c.ld")?;
        if b.rows != k {
            return Err(Error::invalid("b", format!("has {} rows; op(A) has {k} columns", b.rows)));
        }
        if c.rows != m || c.cols != b.cols {
            return Err(Error::invalid("c", format!("is {}x{}; op(A) B is {m}x{}", c.rows, c.cols, b.cols)));
        }
        check::distinct("c", b.buf, c.buf)?;
        not_in_matrix("c", c.buf, a)?;
        let [c_type, compute] = mixed_types::<X, Y>();
        let mut rec = self.op.recorder("spmm_mixed");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "b", b.buf, Access::Read)?;
        record(&mut rec, "c", c.buf, output_access_if(X::is_zero(beta)))?;
        let sc = HostScalars::compute(alpha, beta);
        if self.simulated() {
            return self.sim_spmm_mixed(rec, op_a, sc.values(), a, (b, ldb), (c, ldc));
        }
        let h = self.handle()?;
        let (da, db, dc) = (self.mat(a)?, self.dense_of(&b, ldb, X::CUDA_TYPE)?, self.dense_of(&c, ldc, c_type)?);
        let t = [op_a, Transpose::No];
        let s = sc.raw_as(compute);
        let key = [
            &[op_a as u64, b.order as u64, c.order as u64, compute as u64][..],
            &mat_words(&mat_key(a)),
            &dense_words(b.buf.id(), [b.rows, b.cols, ldb as usize], X::CUDA_TYPE),
            &dense_words(c.buf.id(), [c.rows, c.cols, ldc as usize], c_type),
            &[X::bits(alpha), X::bits(beta)],
        ]
        .into_iter()
        .flatten()
        .copied()
        .collect();
        // SAFETY: (1) a live handle; (2) the descriptors point at the validated, live buffers,
        // typed by the row of the data-type table of their element types; (3) the scalars are
        // host values of the compute type `compute` (f32 or i32, 16-byte aligned by
        // `HostScalars`), in place until the call returns.
        let bytes = self.size("spmm_mixed", key, || unsafe { calls::spmm_size(h, t, s, da, db, dc) })?;
        let work = self.work.use_on(&self.op, &mut rec, bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        let done = self.op.run(rec, Vec::new(), || {
            let s = sc.raw_as(compute);
            // SAFETY: as above; (4) the workspace, declared read-write, holds the size queried.
            unsafe { calls::spmm(h, t, s, da, db, dc, work.map_or(std::ptr::null_mut(), |w| w as _)) }
        });
        self.trim();
        done
    }
}
