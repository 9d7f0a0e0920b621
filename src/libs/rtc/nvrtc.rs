//! The NVRTC calls: thin wrappers that name the call in every error.

use super::{cstring, Program};
use crate::error::{Error, Result};
use cudarc::nvrtc::sys;
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};

/// Whether the NVRTC library can be loaded: cudarc panics at the first call if it cannot.
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen NVRTC by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

fn nvrtc_status(call: &'static str, r: sys::nvrtcResult) -> Result<()> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::library(call, r))
    }
}

pub(super) fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    nvrtc_status("nvrtcVersion", unsafe { sys::nvrtcVersion(&mut major, &mut minor) })?;
    Ok((major, minor))
}

/// Runs NVRTC; returns the CUBIN and the lowered name of every name expression.
pub(super) fn nvrtc_compile(
    src: &CStr,
    options: &[CString],
    exprs: &[CString],
    arch: &str,
    program: &Program,
) -> Result<(Vec<u8>, HashMap<String, String>)> {
    let prog =
        cudarc::nvrtc::result::create_program(src, None).map_err(|e| Error::library("nvrtcCreateProgram", e.0))?;
    struct Guard(sys::nvrtcProgram);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
        }
    }
    let guard = Guard(prog);
    for e in exprs {
        // SAFETY: live program; NUL-terminated expression.
        nvrtc_status("nvrtcAddNameExpression", unsafe { sys::nvrtcAddNameExpression(guard.0, e.as_ptr()) })?;
    }
    let arch_c = cstring("arch", arch)?;
    let mut opts: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    opts.push(arch_c.as_ptr());
    // SAFETY: live program; `opts` holds NUL-terminated strings that outlive the call.
    let r = unsafe { sys::nvrtcCompileProgram(guard.0, opts.len() as i32, opts.as_ptr()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        // SAFETY: live program.
        let log = unsafe { cudarc::nvrtc::result::get_program_log(guard.0) }
            .map(|l| {
                let bytes: Vec<u8> = l.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_else(|e| format!("(the log could not be read: {e:?})"));
        return Err(Error::CompileFailed { status: format!("{r:?}"), log });
    }
    let mut size = 0usize;
    // SAFETY: live, compiled program; valid out-pointer.
    nvrtc_status("nvrtcGetCUBINSize", unsafe { sys::nvrtcGetCUBINSize(guard.0, &mut size) })?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has the size NVRTC reported.
    nvrtc_status("nvrtcGetCUBIN", unsafe { sys::nvrtcGetCUBIN(guard.0, cubin.as_mut_ptr().cast()) })?;
    let mut lowered = HashMap::new();
    for (e, name) in exprs.iter().zip(&program.name_expressions) {
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: live, compiled program; `e` was added before compiling; the returned string
        // lives until the program is destroyed, and is copied before that.
        nvrtc_status("nvrtcGetLoweredName", unsafe { sys::nvrtcGetLoweredName(guard.0, e.as_ptr(), &mut out) })?;
        if out.is_null() {
            return Err(Error::invalid("name_expressions", format!("NVRTC did not lower {name:?}")));
        }
        // SAFETY: non-null, NUL-terminated, alive until `guard` drops below.
        let s = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
        lowered.insert(name.clone(), s);
    }
    drop(guard);
    Ok((cubin, lowered))
}

/// Runs NVRTC with `-dlto` on `src` for `arch` (`-arch=sm_90`) and returns its LTO-IR, the
/// form cuFFT links a callback from (`cufftXtSetJITCallback`).
pub(super) fn nvrtc_compile_lto(src: &CStr, arch: &str) -> Result<Vec<u8>> {
    let prog =
        cudarc::nvrtc::result::create_program(src, None).map_err(|e| Error::library("nvrtcCreateProgram", e.0))?;
    struct Guard(sys::nvrtcProgram);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
        }
    }
    let guard = Guard(prog);
    let arch_c = cstring("arch", arch)?;
    // `-dlto` implies relocatable device code; it is given too for NVRTCs that want both.
    let opts: [*const c_char; 3] = [c"-dlto".as_ptr(), c"-rdc=true".as_ptr(), arch_c.as_ptr()];
    // SAFETY: (1) a live program; (2) `opts` holds NUL-terminated strings that outlive the call.
    let r = unsafe { sys::nvrtcCompileProgram(guard.0, opts.len() as i32, opts.as_ptr()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        // SAFETY: a live program.
        let log = unsafe { cudarc::nvrtc::result::get_program_log(guard.0) }
            .map(|l| {
                let bytes: Vec<u8> = l.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_else(|e| format!("(the log could not be read: {e:?})"));
        return Err(Error::CompileFailed { status: format!("{r:?}"), log });
    }
    let mut size = 0usize;
    // SAFETY: (1) a live, compiled program; (2) a valid out-pointer.
    nvrtc_status("nvrtcGetLTOIRSize", unsafe { sys::nvrtcGetLTOIRSize(guard.0, &mut size) })?;
    let mut ir = vec![0u8; size];
    // SAFETY: `ir` has the size NVRTC reported.
    nvrtc_status("nvrtcGetLTOIR", unsafe { sys::nvrtcGetLTOIR(guard.0, ir.as_mut_ptr().cast()) })?;
    drop(guard);
    Ok(ir)
}
