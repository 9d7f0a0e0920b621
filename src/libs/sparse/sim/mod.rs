//! The simulator's form of every cuSPARSE op: the op computed on the host, in plain loops, from
//! the simulated memory of the buffers the op declared, run as a simulated kernel on the op's
//! stream (so the hazard checker sees its accesses against the declared uses).
//!
//! The semantics are cuSPARSE's: `alpha` / `beta` (an output with `beta` zero is written, never
//! read), transposes (plain, or conjugate for complex values), column- or row-major dense operands
//! with their leading dimensions, zero-based indices, BSR blocks stored row-major, Blocked-ELL's
//! `-1` empty blocks, the fill mode and diagonal type of triangular solves (no pivot check: a
//! zero on the diagonal gives infinities or NaNs, as on the GPU), and the sorted column indices
//! of the products SpGEMM makes. A structure that indexes outside the matrix (which cuSPARSE
//! would read out of bounds) fails the op's completion with `InvalidArgument`, not a panic.
//!
//! Ops whose output structure is known only once computed (SpGEMM, its reusable form,
//! dense → CSR) keep the GPU path's phases: the counting phase runs on the stream, the host
//! waits for it, sizes and allocates the output, and enqueues the phase that fills it.
//!
//! This module holds what every op shares: the structure checks and `alpha` / `beta` blend of
//! the element arithmetic, and the glue that runs a computation as the op's simulated kernel.
//! The ops themselves live by kind: [`products`] (SpMV, SpMM, SDDMM), [`triangular`] (SpSV,
//! SpSM), [`spgemm`] (the sparse product, one-shot and reusable), [`convert`] (format
//! conversions), [`blocks`] (the BSR conversions) and [`vector`] (sparse-vector ops); [`host`]
//! holds the host views of the operands they read.

mod blocks;
mod convert;
mod host;
mod mixed;
mod products;
mod spgemm;
mod triangular;
mod vector;

use super::{Sparse, SparseIndex, SparseValue};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::recorder::LaunchRecorder;

/// The error of a structure that points outside its matrix or vector.
fn malformed(arg: &'static str, what: String) -> Error {
    Error::invalid(
        arg,
        format!("{what}: the structure is malformed (find where with SparseMatrix::check or SparseVector::check)"),
    )
}

/// `v` as an index below `bound`, else the malformed-structure error naming `arg`.
fn at<I: SparseIndex>(arg: &'static str, v: I, bound: usize) -> Result<usize> {
    let x = v.to_i64();
    if x < 0 || x as u64 >= bound as u64 {
        return Err(malformed(arg, format!("index {x} is outside 0..{bound}")));
    }
    Ok(x as usize)
}

/// The range `offsets[i]..offsets[i + 1]`, checked to lie within `0..=nnz`.
fn span<I: SparseIndex>(arg: &'static str, offsets: &[I], i: usize, nnz: usize) -> Result<std::ops::Range<usize>> {
    let (lo, hi) = (offsets[i].to_i64(), offsets[i + 1].to_i64());
    if lo < 0 || hi < lo || hi as u64 > nnz as u64 {
        return Err(malformed(arg, format!("offsets {lo}..{hi} (entry {i}) are not within 0..={nnz}")));
    }
    Ok(lo as usize..hi as usize)
}

/// `alpha v + beta old`, with `old` not read when `beta` is zero (a NaN there stays out).
fn blend<T: SparseValue>(alpha: T, v: T, beta: T, old: impl FnOnce() -> T) -> T {
    let av = alpha.times(v);
    if beta.is_zero() {
        av
    } else {
        av.plus(beta.times(old()))
    }
}

impl Sparse {
    /// Runs `kernel` as the op's simulated kernel under `rec`'s uses: the completion resolves
    /// with its value, or fails with its error.
    fn host<R: Send + 'static>(
        &mut self,
        rec: LaunchRecorder,
        kernel: impl FnOnce() -> Result<R> + Send + 'static,
    ) -> Result<Completion<R>> {
        self.host_checked(rec, || Ok(()), kernel)
    }

    /// [`host`](Self::host), running `check` first once the launch holds its buffers (see
    /// `OpStream::run_sim_checked`): the phases of an op that must see the same inputs.
    fn host_checked<R: Send + 'static>(
        &mut self,
        rec: LaunchRecorder,
        check: impl FnOnce() -> Result<()>,
        kernel: impl FnOnce() -> Result<R> + Send + 'static,
    ) -> Result<Completion<R>> {
        let done = self.op.run_sim_checked(rec, Vec::new(), check, kernel).map(|c| c.try_map(|r| r));
        self.trim();
        done
    }

    /// Whether the ops compute on the host (the device is simulated).
    pub(super) fn simulated(&self) -> bool {
        self.op.device.is_simulated()
    }
}
