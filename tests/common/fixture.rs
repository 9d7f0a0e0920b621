//! The fixture of the simulator's bad-input tests: a device with a stream and its handles, a
//! second device for foreign buffers, and the check that an op is rejected before it records
//! anything.

use super::sim;
#[cfg(feature = "cusparse")]
use cusched::sparse::{SparseMatrix, SparseVector};
use cusched::{Completion, Device, Element, Error, GpuRef, Handles, Result, StreamId};

pub struct Fx {
    pub device: Device,
    /// A second device: its buffers are foreign to `device`.
    pub other: Device,
    pub s: StreamId,
    pub h: Handles,
}

pub fn fx() -> Fx {
    let device = sim();
    let s = device.new_stream().unwrap();
    let h = Handles::new(&device, s).unwrap();
    Fx { other: sim(), device, s, h }
}

impl Fx {
    pub fn buf<T: Element>(&self, n: usize) -> GpuRef<T> {
        self.device.alloc_zeros::<T>(self.s, n).unwrap()
    }

    pub fn foreign<T: Element>(&self, n: usize) -> GpuRef<T> {
        let s = self.other.default_stream();
        self.other.alloc_zeros::<T>(s, n).unwrap()
    }

    pub fn upload<T: Element>(&self, v: &[T]) -> GpuRef<T> {
        self.device.upload(self.s, v).unwrap()
    }
}

/// Runs `op` and asserts that it was rejected for `arg` (an argument name, or `!foreign`,
/// `!stale`, `!unavailable`) with nothing recorded on the device.
#[track_caller]
pub fn rejects<T: std::fmt::Debug>(fx: &mut Fx, arg: &str, op: impl FnOnce(&mut Fx) -> Result<T>) {
    let _ = rejection(fx, arg, op);
}

/// Runs `op`, which validation accepts, and waits for it: the simulator computes it.
#[track_caller]
pub fn runs<T: Send + 'static>(fx: &mut Fx, op: impl FnOnce(&mut Fx) -> Result<Completion<T>>) -> T {
    match op(fx).and_then(|c| c.wait()) {
        Ok(v) => v,
        Err(e) => panic!("expected the op to run, got {e:?}"),
    }
}

/// [`rejects`], returning the result for further checks.
#[track_caller]
pub fn rejection<T: std::fmt::Debug>(fx: &mut Fx, arg: &str, op: impl FnOnce(&mut Fx) -> Result<T>) -> Result<T> {
    let before = fx.device.stats();
    let got = op(fx);
    match (&got, arg) {
        (Err(Error::InvalidArgument { arg: a, .. }), _) if *a == arg => {}
        (Err(Error::ForeignDevice { what, .. }), "!foreign") if what.contains("argument") => {}
        (Err(Error::Stale { what, .. }), "!stale") if what.contains("argument") => {}
        (Err(Error::LibraryUnavailable { .. }), "!unavailable") => {}
        _ => panic!("expected a rejection of `{arg}`, got {got:?}"),
    }
    let after = fx.device.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "a rejected op recorded something");
    got
}

/// Runs `op` and asserts that it was refused as unsupported by the library, naming `arg`, with
/// nothing recorded on the device.
#[track_caller]
pub fn unsupported<T: std::fmt::Debug>(fx: &mut Fx, arg: &str, op: impl FnOnce(&mut Fx) -> Result<T>) {
    let before = fx.device.stats();
    let got = op(fx);
    let named = format!("`{arg}`");
    match &got {
        Err(Error::Unsupported { what, .. }) if what.contains(&named) => {}
        _ => panic!("expected `{arg}` refused as unsupported, got {got:?}"),
    }
    let after = fx.device.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "a refused op recorded something");
}

/// The sparse matrices and vectors of the cuSPARSE bad-input tests, each a valid structure.
#[cfg(feature = "cusparse")]
impl Fx {
    /// A 3x4 CSR matrix with 5 nonzeros (a valid structure).
    pub fn csr(&self) -> SparseMatrix<f64> {
        let offsets = self.upload(&[0i32, 2, 2, 5]);
        let indices = self.upload(&[0i32, 3, 1, 2, 3]);
        let values = self.upload(&[1.0f64, 2.0, 3.0, 4.0, 5.0]);
        SparseMatrix::csr(3, 4, 5, &offsets, &indices, &values).unwrap()
    }
    /// A 3x3 lower-triangular CSR matrix.
    pub fn lower(&self) -> SparseMatrix<f64> {
        let offsets = self.upload(&[0i32, 1, 3, 6]);
        let indices = self.upload(&[0i32, 0, 1, 0, 1, 2]);
        let values = self.upload(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]);
        SparseMatrix::csr(3, 3, 6, &offsets, &indices, &values).unwrap()
    }
    /// A 4x6 BSR matrix of 2x2 blocks: 3 blocks.
    pub fn bsr(&self) -> SparseMatrix<f64> {
        let offsets = self.upload(&[0i32, 2, 3]);
        let indices = self.upload(&[0i32, 2, 1]);
        SparseMatrix::bsr(4, 6, 2, 3, &offsets, &indices, &self.buf(12)).unwrap()
    }
    /// A 4x6 Blocked-ELL matrix of 2x2 blocks, two per block row.
    pub fn ell(&self) -> SparseMatrix<f64> {
        let idx = self.upload(&[0i32, 2, 1, -1]);
        SparseMatrix::blocked_ell(4, 6, 2, 4, &idx, &self.buf(16)).unwrap()
    }
    /// A sparse vector of 5 entries with 2 stored.
    pub fn spvec(&self) -> SparseVector<f64> {
        SparseVector::new(5, 2, &self.upload(&[1i32, 3]), &self.upload(&[1.0f64, 2.0])).unwrap()
    }
}
