//! Every library state's raw-handle accessor, on the simulated backend: it fails with the
//! library's `LibraryUnavailable`, as the library's ops do there, and records nothing.

#[cfg(feature = "curand")]
use crate::common::fixture::rejects;
use crate::common::fixture::{fx, rejection, Fx};
#[cfg(feature = "curand")]
use cusched::rng::{Generator, Seed};
use cusched::{Error, Result};

/// Runs a raw-handle accessor and asserts that it failed with `LibraryUnavailable` for the
/// library named `library`, recording nothing.
#[track_caller]
fn no_raw_handle<T: std::fmt::Debug>(fx: &mut Fx, library: &str, raw: impl FnOnce(&mut Fx) -> Result<T>) {
    match rejection(fx, "!unavailable", raw) {
        Err(Error::LibraryUnavailable { library: got, .. }) => assert!(got.contains(library), "{got}"),
        other => panic!("expected {library} to be unavailable, got {other:?}"),
    }
}

#[test]
fn raw_handles_are_unavailable_on_the_simulator() {
    let mut fx = fx();
    #[cfg(feature = "cublas")]
    no_raw_handle(&mut fx, "cuBLAS (", |fx| fx.h.blas()?.cublas_handle());
    #[cfg(feature = "cublaslt")]
    no_raw_handle(&mut fx, "cuBLASLt", |fx| fx.h.blas_lt()?.cublaslt_handle());
    #[cfg(feature = "curand")]
    {
        let philox = Seed::new(Generator::Philox4x32_10, 42);
        no_raw_handle(&mut fx, "cuRAND", |fx| fx.h.rng()?.curand_generator(&philox));
        // The seed is validated as a draw's is, before the backend check.
        rejects(&mut fx, "seed.offset", |fx| fx.h.rng()?.curand_generator(&Seed::new(Generator::Mtgp32, 1).at(5)));
        let mut sobol = Seed::new(Generator::Sobol64, 0);
        sobol.dimensions = 0;
        rejects(&mut fx, "seed.dimensions", |fx| fx.h.rng()?.curand_generator(&sobol));
    }
    #[cfg(feature = "cusparse")]
    no_raw_handle(&mut fx, "cuSPARSE", |fx| fx.h.sparse()?.cusparse_handle());
    #[cfg(feature = "cusolver")]
    {
        no_raw_handle(&mut fx, "cuSOLVER", |fx| fx.h.solver()?.cusolver_handle());
        no_raw_handle(&mut fx, "cuSOLVER", |fx| fx.h.solver_sparse()?.cusolver_sp_handle());
    }
    #[cfg(feature = "cutensor")]
    no_raw_handle(&mut fx, "cuTENSOR", |fx| fx.h.tensor()?.cutensor_handle());
}
