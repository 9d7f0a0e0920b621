//! A built-in kernel, `x = scale * x + shift` in place, shipped as PTX text so that it needs no
//! NVRTC: the driver JIT-compiles it for whatever GPU it meets. cuRAND uses it to turn its
//! `(0, 1]` uniforms into `(low, high]`.

use crate::backend::cuda::launch::{launch_kernel, CuFunction, Dims};
use crate::backend::cuda::module::RawModule;
use crate::backend::cuda::CuStream;
use crate::error::{Error, Result};
use std::ffi::{c_void, CString};

const PTX_HEADER: &str = ".version 7.0\n.target sm_70\n.address_size 64\n";

/// The entry point for float type `ty` (`f32` or `f64`), whose elements are `1 << shift_bits`
/// bytes; the two entry points differ only in those.
fn ptx_entry(ty: &str, shift_bits: u32) -> String {
    let upper = ty.to_uppercase();
    format!(
        r#"
.visible .entry cusched_affine_{ty}(.param .u64 p_data, .param .u64 p_n, .param .{ty} p_scale, .param .{ty} p_shift)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .{ty} %v<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_data];
    ld.param.u64 %rd2, [p_n];
    ld.param.{ty} %v1, [p_scale];
    ld.param.{ty} %v2, [p_shift];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd3, %r1, %r2;
    cvt.u64.u32 %rd4, %r3;
    add.u64 %rd3, %rd3, %rd4;
    mul.wide.u32 %rd5, %r4, %r2;
{upper}_LOOP:
    setp.ge.u64 %p1, %rd3, %rd2;
    @%p1 bra {upper}_DONE;
    shl.b64 %rd6, %rd3, {shift_bits};
    add.u64 %rd7, %rd1, %rd6;
    ld.global.{ty} %v3, [%rd7];
    fma.rn.{ty} %v3, %v3, %v1, %v2;
    st.global.{ty} [%rd7], %v3;
    add.u64 %rd3, %rd3, %rd5;
    bra.uni {upper}_LOOP;
{upper}_DONE:
    ret;
}}
"#
    )
}

/// The loaded module; unloaded on drop. Lives in one context.
pub(crate) struct Affine {
    /// Declared last: the function handles are only valid while it is loaded.
    f32: CuFunction,
    f64: CuFunction,
    _module: RawModule,
}

// SAFETY: 1. function handles are plain driver handles usable from any thread with the context
// current, valid while `_module` (which is `Send`) keeps them loaded; 2. `Affine` is only used
// by its owner through `&self` launches.
unsafe impl Send for Affine {}

/// Floats the affine kernel exists for.
pub(crate) trait AffineFloat: Copy {
    fn function(a: &Affine) -> CuFunction;
}
impl AffineFloat for f32 {
    fn function(a: &Affine) -> CuFunction {
        a.f32
    }
}
impl AffineFloat for f64 {
    fn function(a: &Affine) -> CuFunction {
        a.f64
    }
}

impl Affine {
    /// Loads the PTX into the context current on this thread.
    pub(crate) fn load() -> Result<Affine> {
        let ptx = format!("{PTX_HEADER}{}{}", ptx_entry("f32", 2), ptx_entry("f64", 3));
        let image = CString::new(ptx).map_err(|_| Error::invalid("PTX", "contains a NUL byte"))?;
        // Dropped (unloaded) if a lookup fails.
        let module = RawModule::load(&image, "the affine kernel")?;
        let f32 = module.function("cusched_affine_f32")?;
        let f64 = module.function("cusched_affine_f64")?;
        Ok(Affine { f32, f64, _module: module })
    }

    /// Enqueues `x[i] = scale * x[i] + shift` for `n` elements at device address `data`.
    ///
    /// # Safety
    /// `data` must point to at least `n` live elements of `T` in this context, ordered on
    /// `stream` after their writers (the caller's recorder fenced it); `stream` is a live stream
    /// of the context current on this thread, the one the module was loaded in.
    pub(crate) unsafe fn launch<T: AffineFloat>(
        &self,
        stream: CuStream,
        data: u64,
        n: usize,
        scale: T,
        shift: T,
    ) -> Result<()> {
        let mut data = data;
        let mut n64 = n as u64;
        let (mut scale, mut shift) = (scale, shift);
        let mut params: [*mut c_void; 4] = [
            (&mut data as *mut u64).cast(),
            (&mut n64 as *mut u64).cast(),
            (&mut scale as *mut T).cast(),
            (&mut shift as *mut T).cast(),
        ];
        let blocks = n.div_ceil(256).clamp(1, 65_535) as u32;
        let dims = Dims { grid: (blocks, 1, 1), block: (256, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: 1. the function is of this module, still loaded (owned by `self`), and the
        // stream of its context (the caller's contract); 2. the parameters match the kernel's
        // signature (u64, u64, T, T) and outlive the call (the driver copies them); 3. the
        // caller guarantees `data` and `n`.
        unsafe { launch_kernel(T::function(self), dims, stream, &mut params) }
    }
}
