//! The cuFFT call layer: every cuFFT call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. The only code in the crate that touches `cudarc::cufft::sys`.
//!
//! cudarc 0.19 generates no bindings for `cufftXt.h`: the Xt entry points (half and bfloat16
//! plans and execution, LTO callbacks) are looked up by name in the same libcufft that cudarc
//! loaded, with the signatures of CUDA 13's `cufftXt.h`, once per process.
//!
//! Every wrapper needs the plan's context current on the calling thread (the op path binds it)
//! and the plan used by one thread at a time (`Fft` methods take `&mut self`).

use super::{Direction, Kind, PlanKey, Precision};
use crate::error::{Error, Result};
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cufft::sys;
use std::ffi::{c_char, c_int, c_longlong, c_void, CString};
use std::sync::OnceLock;

/// `cudaDataType` values (`library_types.h`) of the Xt API's element types.
const CUDA_R_16F: c_int = 2;
const CUDA_C_16F: c_int = 6;
const CUDA_R_16BF: c_int = 14;
const CUDA_C_16BF: c_int = 15;

type XtMakePlanMany = unsafe extern "C" fn(
    sys::cufftHandle,
    c_int,
    *mut c_longlong,
    *mut c_longlong,
    c_longlong,
    c_longlong,
    c_int,
    *mut c_longlong,
    c_longlong,
    c_longlong,
    c_int,
    c_longlong,
    *mut usize,
    c_int,
) -> sys::cufftResult;
type XtExec = unsafe extern "C" fn(sys::cufftHandle, *mut c_void, *mut c_void, c_int) -> sys::cufftResult;
/// CUDA 13's `cufftXtSetJITCallback(plan, lto_callback_symbol_name, lto_callback_fatbin,
/// lto_callback_fatbin_size, type, caller_info)` (CUDA 12 had no symbol name).
type XtSetJitCallback = unsafe extern "C" fn(
    sys::cufftHandle,
    *const c_char,
    *const c_void,
    usize,
    c_int,
    *mut *mut c_void,
) -> sys::cufftResult;

/// `cufftXtSetJITCallback` with CUDA 13's signature, or the error saying this libcufft lacks
/// it. The symbol of CUDA 12.6 to 12.9 (cuFFT 11.x) has the same name and no symbol-name
/// argument, so the library's version is checked first: calling it with the other signature
/// would pass the IR as the name.
fn xt_set_jit_callback() -> Result<XtSetJitCallback> {
    static F: OnceLock<Option<XtSetJitCallback>> = OnceLock::new();
    F.get_or_init(|| {
        let mut version: c_int = 0;
        // SAFETY: (1) a valid out-pointer; (2) libcufft is present (see `xt`).
        let ok = unsafe { sys::cufftGetVersion(&mut version) } == sys::cufftResult::CUFFT_SUCCESS;
        if !ok || version < 12000 {
            return None;
        }
        // SAFETY: (1) libcufft is present (see `xt`) and stays loaded; (2) at version 12
        // (CUDA 13) the symbol has the declared signature.
        unsafe { sys::culib().get::<XtSetJitCallback>(b"cufftXtSetJITCallback\0").ok().map(|f| *f) }
    })
    .ok_or(Error::LibraryUnavailable {
        library: "cuFFT (libcufft)",
        hint: "LTO callbacks need the cufftXtSetJITCallback of cuFFT 12 (CUDA 13) or later; install the \
               CUDA 13 toolkit's cuFFT",
    })
}

/// A callback compiled to LTO-IR, ready to attach to a plan: what `cufftXtSetJITCallback`
/// reads, kept alive as long as the plan (cuFFT's docs do not say it copies them).
pub(crate) struct JitCallback {
    ir: Vec<u8>,
    symbol: CString,
    kind: c_int,
    /// The `caller_info` array: one device address, the callback's data (0: none).
    caller_info: Box<[u64; 1]>,
}

impl JitCallback {
    /// The callback named `symbol` in `ir`, on loads (or stores, with `store`) of a `kind`
    /// transform in `precision` (single or double), with `data` as its `callerInfo`.
    pub(super) fn new(
        ir: Vec<u8>,
        symbol: &str,
        kind: Kind,
        precision: Precision,
        store: bool,
        data: u64,
    ) -> Result<JitCallback> {
        let symbol = CString::new(symbol).map_err(|_| Error::invalid("callbacks", "the symbol contains a NUL byte"))?;
        // cufftXtCallbackType: loads 0 to 3 (complex, complex double, real, real double),
        // stores 4 to 7 in the same order.
        let (cin, cout) = kind.complex_sides();
        let complex = if store { cout } else { cin };
        let double = match precision {
            Precision::Single => 0,
            Precision::Double => 1,
            Precision::Half | Precision::BFloat16 => {
                return Err(Error::invalid("callbacks", "cuFFT's callbacks take single and double precision only"))
            }
        };
        let kind = if store { 4 } else { 0 } + if complex { 0 } else { 2 } + double;
        Ok(JitCallback { ir, symbol, kind, caller_info: Box::new([data]) })
    }
}

/// The Xt entry points, looked up in cudarc's libcufft.
struct Xt {
    make_plan_many: XtMakePlanMany,
    exec: XtExec,
}

/// The Xt entry points, or the error saying libcufft lacks them.
fn xt() -> Result<&'static Xt> {
    static XT: OnceLock<Option<Xt>> = OnceLock::new();
    XT.get_or_init(|| {
        // SAFETY: (1) the op path only reaches a call layer after `is_present` found libcufft,
        // so `culib` loads it; (2) each symbol is declared with its C signature in CUDA 13's
        // `cufftXt.h` (enums as `int`), and the library stays loaded for the process.
        unsafe {
            let lib = sys::culib();
            Some(Xt {
                make_plan_many: *lib.get::<XtMakePlanMany>(b"cufftXtMakePlanMany\0").ok()?,
                exec: *lib.get::<XtExec>(b"cufftXtExec\0").ok()?,
            })
        }
    })
    .as_ref()
    .ok_or(Error::LibraryUnavailable {
        library: "cuFFT (libcufft)",
        hint: "this libcufft lacks the Xt API (cufftXtMakePlanMany, cufftXtExec) that half and bfloat16 \
               transforms use; install the cuFFT of CUDA 13",
    })
}

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
    const SYNCHRONIZES: bool = true;
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
    precision: Precision,
    /// The callbacks linked into the plan, alive as long as it.
    _callbacks: Vec<JitCallback>,
    pub work_bytes: usize,
}

impl RawPlan {
    /// `cufftCreate`, then `cufftMakePlanMany64` (`cufftXtMakePlanMany` for half and bfloat16)
    /// for `key` without a work area of its own, on `stream`.
    ///
    /// NVIDIA: [`cufftCreate`](https://docs.nvidia.com/cuda/cufft/#cufftcreate),
    /// [`cufftSetAutoAllocation`](https://docs.nvidia.com/cuda/cufft/#cufftsetautoallocation),
    /// [`cufftMakePlanMany64`](https://docs.nvidia.com/cuda/cufft/#cufftmakeplanmany64),
    /// [`cufftXtMakePlanMany`](https://docs.nvidia.com/cuda/cufft/#cufftxtmakeplanmany),
    /// [`cufftSetStream`](https://docs.nvidia.com/cuda/cufft/#cufftsetstream)
    ///
    /// With `callbacks`, each is attached with `cufftXtSetJITCallback` between `cufftCreate`
    /// and planning, as cuFFT requires of LTO callbacks.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context that outlives the plan; each callback's
    /// data address is 0 or a device buffer every transform of the plan declares as read.
    pub(super) unsafe fn make(
        key: &PlanKey,
        stream: crate::backend::cuda::CuStream,
        callbacks: Vec<JitCallback>,
    ) -> Result<RawPlan> {
        let mut handle: sys::cufftHandle = 0;
        // SAFETY: `handle` is a valid out-pointer.
        unsafe { sys::cufftCreate(&mut handle) }.check("cufftCreate")?;
        let mut plan = RawPlan {
            handle: Owned::new(PlanHandle(handle)),
            kind: key.kind,
            precision: key.precision,
            _callbacks: Vec::new(),
            work_bytes: 0,
        };
        if !callbacks.is_empty() {
            let set = xt_set_jit_callback()?;
            for cb in &callbacks {
                // SAFETY: (1) a fresh plan, not yet planned; (2) the symbol is NUL-terminated
                // and the IR holds `ir.len()` bytes, both kept in the plan; (3) `caller_info`
                // is a one-entry array of device addresses (`u64` has the layout of a 64-bit
                // pointer), boxed in the plan so its address is stable; (4) the caller vouches
                // for the data address.
                unsafe {
                    set(
                        handle,
                        cb.symbol.as_ptr(),
                        cb.ir.as_ptr().cast(),
                        cb.ir.len(),
                        cb.kind,
                        cb.caller_info.as_ptr().cast_mut().cast::<*mut c_void>(),
                    )
                }
                .check("cufftXtSetJITCallback")?;
            }
        }
        plan._callbacks = callbacks;
        let to64 = |v: &[usize]| v.iter().map(|&x| x as c_longlong).collect::<Vec<_>>();
        let mut n = to64(&key.dims);
        let mut inembed = to64(&key.input.embed);
        let mut onembed = to64(&key.output.embed);
        let (istride, idist) = (key.input.stride as c_longlong, key.input.dist as c_longlong);
        let (ostride, odist) = (key.output.stride as c_longlong, key.output.dist as c_longlong);
        // SAFETY: (1) a fresh plan handle; (2) the arrays hold `rank` entries each and outlive
        // the calls; (3) every value was checked to fit `i64` by the key's validation; (4) the
        // caller vouches for the stream.
        unsafe {
            sys::cufftSetAutoAllocation(handle, 0).check("cufftSetAutoAllocation")?;
            match xt_types(key.kind, key.precision) {
                None => sys::cufftMakePlanMany64(
                    handle,
                    n.len() as c_int,
                    n.as_mut_ptr(),
                    inembed.as_mut_ptr(),
                    istride,
                    idist,
                    onembed.as_mut_ptr(),
                    ostride,
                    odist,
                    cufft_type(key.kind, key.precision),
                    key.batch as c_longlong,
                    &mut plan.work_bytes,
                )
                .check("cufftMakePlanMany64")?,
                Some((itype, otype, exec_type)) => (xt()?.make_plan_many)(
                    handle,
                    n.len() as c_int,
                    n.as_mut_ptr(),
                    inembed.as_mut_ptr(),
                    istride,
                    idist,
                    itype,
                    onembed.as_mut_ptr(),
                    ostride,
                    odist,
                    otype,
                    key.batch as c_longlong,
                    &mut plan.work_bytes,
                    exec_type,
                )
                .check("cufftXtMakePlanMany")?,
            }
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

    /// `cufftExec<kind>` (`cufftXtExec` for half and bfloat16): the transform the plan was made
    /// for, `direction` for complex-to-complex ones.
    ///
    /// NVIDIA: [`cufftExecC2C`](https://docs.nvidia.com/cuda/cufft/#cufftexecc2c-and-cufftexecz2z),
    /// [`cufftExecZ2Z`](https://docs.nvidia.com/cuda/cufft/#cufftexecc2c-and-cufftexecz2z),
    /// [`cufftExecR2C`](https://docs.nvidia.com/cuda/cufft/#cufftexecr2c-and-cufftexecd2z),
    /// [`cufftExecD2Z`](https://docs.nvidia.com/cuda/cufft/#cufftexecr2c-and-cufftexecd2z),
    /// [`cufftExecC2R`](https://docs.nvidia.com/cuda/cufft/#cufftexecc2r-and-cufftexecz2d),
    /// [`cufftExecZ2D`](https://docs.nvidia.com/cuda/cufft/#cufftexecc2r-and-cufftexecz2d),
    /// [`cufftXtExec`](https://docs.nvidia.com/cuda/cufft/#cufftxtexec)
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
            match (self.kind, self.precision) {
                (_, Precision::Half | Precision::BFloat16) => (xt()?.exec)(p, i, o, dir).check("cufftXtExec"),
                (Kind::C2C, Precision::Single) => sys::cufftExecC2C(p, i.cast(), o.cast(), dir).check("cufftExecC2C"),
                (Kind::C2C, Precision::Double) => sys::cufftExecZ2Z(p, i.cast(), o.cast(), dir).check("cufftExecZ2Z"),
                (Kind::R2C, Precision::Single) => sys::cufftExecR2C(p, i.cast(), o.cast()).check("cufftExecR2C"),
                (Kind::R2C, Precision::Double) => sys::cufftExecD2Z(p, i.cast(), o.cast()).check("cufftExecD2Z"),
                (Kind::C2R, Precision::Single) => sys::cufftExecC2R(p, i.cast(), o.cast()).check("cufftExecC2R"),
                (Kind::C2R, Precision::Double) => sys::cufftExecZ2D(p, i.cast(), o.cast()).check("cufftExecZ2D"),
            }
        }
    }
}

/// The `cufftType` of a single or double precision plan (half and bfloat16 plans have none:
/// see [`xt_types`]).
fn cufft_type(k: Kind, p: Precision) -> sys::cufftType {
    use sys::cufftType_t as T;
    match (k, p == Precision::Double) {
        (Kind::C2C, false) => T::CUFFT_C2C,
        (Kind::R2C, false) => T::CUFFT_R2C,
        (Kind::C2R, false) => T::CUFFT_C2R,
        (Kind::C2C, true) => T::CUFFT_Z2Z,
        (Kind::R2C, true) => T::CUFFT_D2Z,
        (Kind::C2R, true) => T::CUFFT_Z2D,
    }
}

/// The input, output and execution `cudaDataType`s of an Xt plan, for the precisions that
/// need one (half and bfloat16); `None` for the others.
fn xt_types(k: Kind, p: Precision) -> Option<(c_int, c_int, c_int)> {
    let (real, complex) = match p {
        Precision::Half => (CUDA_R_16F, CUDA_C_16F),
        Precision::BFloat16 => (CUDA_R_16BF, CUDA_C_16BF),
        Precision::Single | Precision::Double => return None,
    };
    Some(match k {
        Kind::C2C => (complex, complex, complex),
        Kind::R2C => (real, complex, complex),
        Kind::C2R => (complex, real, complex),
    })
}
