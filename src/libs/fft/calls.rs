//! The cuFFT call layer: every cuFFT call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. The only code in the crate that touches `cudarc::cufft::sys`.
//!
//! Every wrapper needs the plan's context current on the calling thread (the op path binds it)
//! and the plan used by one thread at a time (`Fft` methods take `&mut self`).

use super::{Direction, Kind, PlanKey};
use crate::error::Result;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cufft::sys;
use std::ffi::{c_int, c_longlong, c_void};

impl Status for sys::cufftResult {
    const SUCCESS: Self = sys::cufftResult::CUFFT_SUCCESS;
}

/// Whether libcufft loads.
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

/// A cuFFT plan handle (a plain `int`, so a type of its own for [`RawObject`]).
#[derive(Clone, Copy)]
pub(crate) struct PlanHandle(sys::cufftHandle);

// SAFETY: a cuFFT plan may be used from any thread, one at a time.
unsafe impl RawObject for PlanHandle {
    const DESTROY: &'static str = "cufftDestroy";
    type Status = sys::cufftResult;

    /// NVIDIA: [`cufftDestroy`](https://docs.nvidia.com/cuda/cufft/#cufftdestroy)
    unsafe fn destroy(self) -> sys::cufftResult {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cufftDestroy(self.0) }
    }
}

/// An owned cuFFT plan, destroyed on drop, and the work area it needs (it allocates none).
pub(crate) struct RawPlan {
    handle: Owned<PlanHandle>,
    kind: Kind,
    pub work_bytes: usize,
}

impl RawPlan {
    /// `cufftCreate`, then `cufftMakePlanMany64` for `key` without a work area of its own, on
    /// `stream`.
    ///
    /// NVIDIA: [`cufftCreate`](https://docs.nvidia.com/cuda/cufft/#cufftcreate),
    /// [`cufftSetAutoAllocation`](https://docs.nvidia.com/cuda/cufft/#cufftsetautoallocation),
    /// [`cufftMakePlanMany64`](https://docs.nvidia.com/cuda/cufft/#cufftmakeplanmany64),
    /// [`cufftSetStream`](https://docs.nvidia.com/cuda/cufft/#cufftsetstream)
    ///
    /// # Safety
    /// `stream` is a live stream of the current context that outlives the plan.
    pub(super) unsafe fn make(key: &PlanKey, stream: crate::backend::cuda::CuStream) -> Result<RawPlan> {
        let mut handle: sys::cufftHandle = 0;
        // SAFETY: `handle` is a valid out-pointer.
        unsafe { sys::cufftCreate(&mut handle) }.check("cufftCreate")?;
        let mut plan = RawPlan { handle: Owned::new(PlanHandle(handle)), kind: key.kind, work_bytes: 0 };
        let to64 = |v: &[usize]| v.iter().map(|&x| x as c_longlong).collect::<Vec<_>>();
        let mut n = to64(&key.dims);
        let mut inembed = to64(&key.input.embed);
        let mut onembed = to64(&key.output.embed);
        // SAFETY: (1) a fresh plan handle; (2) the arrays hold `rank` entries each and outlive
        // the calls; (3) the caller vouches for the stream.
        unsafe {
            sys::cufftSetAutoAllocation(handle, 0).check("cufftSetAutoAllocation")?;
            sys::cufftMakePlanMany64(
                handle,
                n.len() as c_int,
                n.as_mut_ptr(),
                inembed.as_mut_ptr(),
                key.input.stride as c_longlong,
                key.input.dist as c_longlong,
                onembed.as_mut_ptr(),
                key.output.stride as c_longlong,
                key.output.dist as c_longlong,
                kind(key.kind),
                key.batch as c_longlong,
                &mut plan.work_bytes,
            )
            .check("cufftMakePlanMany64")?;
            sys::cufftSetStream(handle, stream as _).check("cufftSetStream")?;
        }
        Ok(plan)
    }

    /// `cufftSetWorkArea`.
    ///
    /// NVIDIA: [`cufftSetWorkArea`](https://docs.nvidia.com/cuda/cufft/#cufftsetworkarea)
    ///
    /// # Safety
    /// `area` is a live device buffer of at least [`work_bytes`](Self::work_bytes) bytes, used
    /// by nothing else while the plan's transforms run.
    pub(super) unsafe fn set_work_area(&self, area: u64) -> Result<()> {
        // SAFETY: a live plan; the caller vouches for the area.
        unsafe { sys::cufftSetWorkArea(self.handle.get().0, area as *mut c_void) }.check("cufftSetWorkArea")
    }

    /// `cufftExec<kind>`: the transform the plan was made for, `direction` for complex ones.
    ///
    /// NVIDIA: [`cufftExecC2C`](https://docs.nvidia.com/cuda/cufft/#cufftexecc2c-and-cufftexecz2z),
    /// [`cufftExecZ2Z`](https://docs.nvidia.com/cuda/cufft/#cufftexecc2c-and-cufftexecz2z),
    /// [`cufftExecR2C`](https://docs.nvidia.com/cuda/cufft/#cufftexecr2c-and-cufftexecd2z),
    /// [`cufftExecD2Z`](https://docs.nvidia.com/cuda/cufft/#cufftexecr2c-and-cufftexecd2z),
    /// [`cufftExecC2R`](https://docs.nvidia.com/cuda/cufft/#cufftexecc2r-and-cufftexecz2d),
    /// [`cufftExecZ2D`](https://docs.nvidia.com/cuda/cufft/#cufftexecc2r-and-cufftexecz2d)
    ///
    /// # Safety
    /// (1) `input` and `output` are live device buffers of the current context laid out as the
    /// plan's key says, fenced on the plan's stream; (2) the plan has a work area set; (3) for
    /// complex-to-real transforms the input may be overwritten.
    pub(super) unsafe fn exec(&self, input: *mut c_void, output: *mut c_void, direction: Direction) -> Result<()> {
        let dir: c_int = match direction {
            Direction::Forward => -1,
            Direction::Inverse => 1,
        };
        let (i, o, p) = (input, output, self.handle.get().0);
        // SAFETY: the caller vouches for (1) to (3); the key's kind picks the entry point whose
        // element types the buffers hold.
        unsafe {
            match self.kind {
                Kind::C2C => sys::cufftExecC2C(p, i.cast(), o.cast(), dir).check("cufftExecC2C"),
                Kind::Z2Z => sys::cufftExecZ2Z(p, i.cast(), o.cast(), dir).check("cufftExecZ2Z"),
                Kind::R2C => sys::cufftExecR2C(p, i.cast(), o.cast()).check("cufftExecR2C"),
                Kind::D2Z => sys::cufftExecD2Z(p, i.cast(), o.cast()).check("cufftExecD2Z"),
                Kind::C2R => sys::cufftExecC2R(p, i.cast(), o.cast()).check("cufftExecC2R"),
                Kind::Z2D => sys::cufftExecZ2D(p, i.cast(), o.cast()).check("cufftExecZ2D"),
            }
        }
    }
}

fn kind(k: Kind) -> sys::cufftType {
    use sys::cufftType_t as T;
    match k {
        Kind::C2C => T::CUFFT_C2C,
        Kind::R2C => T::CUFFT_R2C,
        Kind::C2R => T::CUFFT_C2R,
        Kind::Z2Z => T::CUFFT_Z2Z,
        Kind::D2Z => T::CUFFT_D2Z,
        Kind::Z2D => T::CUFFT_Z2D,
    }
}
