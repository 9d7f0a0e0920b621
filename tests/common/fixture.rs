//! The fixture of the simulator's bad-input tests: a device with a stream and its handles, a
//! second device for foreign buffers, and the check that an op is rejected before it records
//! anything.

use super::sim;
use cusched::{Device, Element, Error, GpuRef, Handles, Result, StreamId};

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
