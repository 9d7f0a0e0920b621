//! What a solver's status word says about each matrix of an op, and how a batch's failures
//! read in an error message.

/// What a solver's status word said about one matrix (indices count from 1, as in LAPACK;
/// `matrix` counts from 0 within the batch).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NumericalFailure {
    /// Cholesky: the leading minor of order `minor` is not positive definite.
    NotPositiveDefinite {
        /// The matrix within the batch.
        matrix: usize,
        /// The order of the first minor that is not positive definite.
        minor: usize,
    },
    /// LU: `U(index, index)` is exactly zero, so the matrix is singular.
    Singular {
        /// The matrix within the batch.
        matrix: usize,
        /// The zero pivot's index.
        index: usize,
    },
    /// A sparse direct solve found the matrix singular to the tolerance it was given, at
    /// `row` (counted from 0, as the library reports it); no solution was computed.
    SingularToTolerance {
        /// The matrix within the batch.
        matrix: usize,
        /// The first row where the factorization broke down.
        row: usize,
    },
    /// An iterative algorithm (SVD, eigenvalues) did not converge.
    NotConverged {
        /// The matrix within the batch.
        matrix: usize,
        /// How many elements (superdiagonals, off-diagonals) failed to converge, or the
        /// library's code for the failure.
        count: usize,
    },
}

impl std::fmt::Display for NumericalFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NumericalFailure::NotPositiveDefinite { minor, .. } => {
                write!(f, "leading minor {minor} is not positive definite")
            }
            NumericalFailure::Singular { index, .. } => {
                write!(f, "U({index},{index}) is exactly zero: the matrix is singular")
            }
            NumericalFailure::SingularToTolerance { row, .. } => write!(
                f,
                "the matrix is singular to the tolerance given, at row {row}; no solution was computed \
                 (check the matrix, or lower the tolerance if it is only ill-conditioned)"
            ),
            NumericalFailure::NotConverged { count, .. } => {
                write!(f, "did not converge ({count} elements left; raise the sweeps or the tolerance)")
            }
        }
    }
}

impl NumericalFailure {
    /// The matrix of the batch this failure is about.
    pub fn matrix(&self) -> usize {
        match self {
            NumericalFailure::NotPositiveDefinite { matrix, .. }
            | NumericalFailure::Singular { matrix, .. }
            | NumericalFailure::SingularToTolerance { matrix, .. }
            | NumericalFailure::NotConverged { matrix, .. } => *matrix,
        }
    }
}

/// The message of an [`Error::Numerical`](super::Error::Numerical): each failure, and for a
/// batch which matrices failed.
pub(super) fn describe_failures(batch: usize, failures: &[NumericalFailure]) -> String {
    if batch <= 1 {
        return failures.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("; ");
    }
    let each = failures.iter().map(|f| format!("matrix {}: {f}", f.matrix())).collect::<Vec<_>>().join("; ");
    format!("{} of {batch} matrices failed ({each}); the others' results are valid", failures.len())
}
