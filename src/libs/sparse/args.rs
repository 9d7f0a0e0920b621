//! What every op shares: its host scalars (aligned as the library reads them), the access its
//! output takes, recording a sparse matrix's buffers, and the checks of an op's operands.

use super::matrix::ValueType;
use super::{calls, matrix, Format, IndexKind, SparseIndex, SparseMatrix, SparseStorage, SparseValue, Transpose};
use crate::error::Result;
use crate::libs::dtype::CudaType;
use crate::memory::{Element, GpuRef};

/// A host value aligned as CUDA's vector types: `cuDoubleComplex` is a 16-byte aligned
/// `double2`, and cuSPARSE reads host scalars of that type with aligned loads, which fault on
/// a `Complex<f64>` (8-byte aligned) that happens to sit at 8 mod 16.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub(super) struct Aligned<T>(T);

/// The host scalars `alpha` and `beta` of an op, kept where the library may read them as its
/// own types. Make one per op, and keep it in place (not moved) while calls use [`Self::raw`].
pub(super) struct HostScalars<T> {
    alpha: Aligned<T>,
    beta: Aligned<T>,
}

impl<T: SparseValue> HostScalars<T> {
    pub(super) fn new(alpha: T, beta: T) -> Self {
        HostScalars { alpha: Aligned(alpha), beta: Aligned(beta) }
    }

    /// The pointers the call layer passes: valid, and 16-byte aligned, while `self` stays put.
    pub(super) fn raw(&self) -> calls::Scalars {
        calls::Scalars {
            alpha: (&self.alpha.0 as *const T).cast(),
            beta: (&self.beta.0 as *const T).cast(),
            t: T::CUDA_TYPE,
        }
    }

    /// The scalars' bytes, for a workspace-size key: the library's size query takes them.
    pub(super) fn words(&self) -> [u64; 4] {
        let ([a0, a1], [b0, b1]) = (matrix::value_bits(self.alpha.0), matrix::value_bits(self.beta.0));
        [a0, a1, b0, b1]
    }
}

impl<C: Copy> HostScalars<C> {
    /// The scalars of a mixed-precision op, in its compute type `C`.
    pub(super) fn compute(alpha: C, beta: C) -> Self {
        HostScalars { alpha: Aligned(alpha), beta: Aligned(beta) }
    }

    /// The pointers the call layer passes, as scalars of compute type `t` (`C`'s row).
    pub(super) fn raw_as(&self, t: CudaType) -> calls::Scalars {
        calls::Scalars { alpha: (&self.alpha.0 as *const C).cast(), beta: (&self.beta.0 as *const C).cast(), t }
    }

    /// The scalars, for the simulator.
    pub(super) fn values(&self) -> (C, C) {
        (self.alpha.0, self.beta.0)
    }
}

/// `Write` when `beta` is zero (the output is not read), else `ReadWrite`.
pub(super) fn output_access<T: SparseValue>(beta: T) -> crate::track::Access {
    if beta == T::zero() {
        crate::track::Access::Write
    } else {
        crate::track::Access::ReadWrite
    }
}

/// `Write` when the op's `beta` is zero (the output is not read), else `ReadWrite`.
pub(super) fn output_access_if(beta_is_zero: bool) -> crate::track::Access {
    if beta_is_zero {
        crate::track::Access::Write
    } else {
        crate::track::Access::ReadWrite
    }
}

/// Records the three buffers of `a` as read.
pub(super) fn record_matrix<T: SparseStorage, I: SparseIndex>(
    rec: &mut crate::recorder::LaunchRecorder,
    arg: [&'static str; 3],
    a: &SparseMatrix<T, I>,
) -> Result<()> {
    use crate::track::Access::Read;
    // Blocked-ELL keeps its one index array in both slots.
    if a.major.id() != a.minor.id() {
        crate::libs::record(rec, arg[0], &a.major, Read)?;
    }
    crate::libs::record(rec, arg[1], &a.minor, Read)?;
    crate::libs::record(rec, arg[2], &a.values, Read)
}

/// Rejects an output that is one of `a`'s buffers.
pub(super) fn not_in_matrix<T: SparseStorage, I: SparseIndex, U: Element>(
    arg: &'static str,
    out: &GpuRef<U>,
    a: &SparseMatrix<T, I>,
) -> Result<()> {
    if [a.major.id(), a.minor.id(), a.values.id()].contains(&out.id()) {
        return Err(crate::error::Error::invalid(arg, "must not be one of the sparse matrix's own buffers"));
    }
    Ok(())
}

/// cuSPARSE does not support `what` (argument `arg`); `hint` says what to do instead.
pub(super) fn unsupported(arg: &'static str, what: String, hint: &str) -> crate::error::Error {
    use crate::libs::StreamLibrary;
    crate::error::Error::Unsupported {
        library: super::Sparse::LIBRARY.name,
        what: format!("{what} (argument `{arg}`)"),
        hint: hint.to_string(),
    }
}

/// Refuses a matrix format cuSPARSE's triangular solves (SpSV, SpSM) do not take: they solve
/// CSR and COO, not CSC, BSR or Blocked-ELL.
pub(super) fn solvable<T: SparseValue, I: SparseIndex>(a: &SparseMatrix<T, I>) -> Result<()> {
    let hint = match a.format {
        Format::Csr | Format::Coo => return Ok(()),
        Format::Csc => "convert it with Sparse::convert_compressed, or read its arrays as the CSR of its transpose and flip `tri.transpose`",
        Format::Bsr => "convert it with Sparse::bsr_to_csr",
        Format::BlockedEll => "store it as CSR or COO",
    };
    Err(unsupported("a", format!("a {:?} matrix in a triangular solve", a.format), hint))
}

/// Refuses a conjugate transpose (argument `arg`) where `op` takes plain transposes only;
/// `t` is already resolved for the value type ([`Transpose::on`]), so on real values a
/// conjugate transpose arrives as a plain one and passes.
pub(super) fn no_conj(arg: &'static str, t: Transpose, op: &str) -> Result<()> {
    if t == Transpose::Conj {
        return Err(unsupported(
            arg,
            format!("a conjugate transpose of complex values in {op}"),
            "conjugate the values first and pass `Transpose::Yes`",
        ));
    }
    Ok(())
}

/// Rejects a matrix whose format `op` does not take, or a blocked one used transposed (the
/// blocked kernels multiply by `A` as stored).
pub(super) fn takes<T: SparseStorage, I: SparseIndex>(
    op: &str,
    allowed: &[Format],
    t: Transpose,
    a: &SparseMatrix<T, I>,
) -> Result<()> {
    if !allowed.contains(&a.format) {
        return Err(crate::error::Error::invalid("a", format!("is {:?}; {op} takes {allowed:?}", a.format)));
    }
    if matches!(a.format, Format::Bsr | Format::BlockedEll) && t.flips() {
        return Err(crate::error::Error::invalid("a", format!("is {:?}; {op} takes it untransposed only", a.format)));
    }
    // cuSPARSE's Blocked-ELL kernels take 32-bit indices and real f32 / f64 values only.
    if a.format == Format::BlockedEll
        && (I::KIND != IndexKind::I32 || !matches!(T::CUDA_TYPE, CudaType::R32F | CudaType::R64F))
    {
        return Err(crate::error::Error::invalid(
            "a",
            format!("is Blocked-ELL with {:?} indices and {:?} values; cuSPARSE multiplies Blocked-ELL with I32 indices and f32 or f64 values only", I::KIND, T::CUDA_TYPE),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Complex;

    /// A `Complex<f64>` may sit at 8 mod 16; the pointers handed to cuSPARSE never do.
    #[test]
    fn host_scalars_are_16_byte_aligned_wherever_the_values_were() {
        #[repr(C, align(16))]
        struct Misplaced {
            _pad: f64,
            v: [Complex<f64>; 2],
        }
        let m = Misplaced { _pad: 0.0, v: [Complex::new(1.0, 2.0), Complex::new(3.0, 4.0)] };
        assert_eq!(&m.v[0] as *const _ as usize % 16, 8, "the setup places the values at 8 mod 16");
        let sc = HostScalars::new(m.v[0], m.v[1]);
        let raw = sc.raw();
        assert_eq!(raw.alpha as usize % 16, 0);
        assert_eq!(raw.beta as usize % 16, 0);
        // SAFETY: the pointers point into `sc`, alive and in place, at `Complex<f64>` values.
        let (a, b) = unsafe { (*(raw.alpha as *const Complex<f64>), *(raw.beta as *const Complex<f64>)) };
        assert_eq!((a, b), (m.v[0], m.v[1]));
        assert_eq!(raw.t, CudaType::C64F);
    }
}
