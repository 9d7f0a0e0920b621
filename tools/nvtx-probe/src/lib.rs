//! A stand-in for `libnvToolsExt.so.1` that appends every pushed range name to the file named by
//! `NVTX_PROBE_OUT` (one per line) and every pop as `<pop>`, so that a run with the `nvtx`
//! feature shows which ranges it emitted. Build it, name the library `libnvToolsExt.so.1`, and
//! put its directory on `LD_LIBRARY_PATH`.

#![allow(non_snake_case)] // the library and symbol names are NVTX's

use std::ffi::{c_char, c_int, CStr};
use std::io::Write;

fn log(line: &str) {
    if let Ok(path) = std::env::var("NVTX_PROBE_OUT") {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// # Safety
/// `message` must be a NUL-terminated string, as NVTX requires.
#[no_mangle]
pub unsafe extern "C" fn nvtxRangePushA(message: *const c_char) -> c_int {
    // SAFETY: the caller passes a NUL-terminated string (the NVTX contract).
    let name = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    log(&name);
    0
}

#[no_mangle]
pub extern "C" fn nvtxRangePop() -> c_int {
    log("<pop>");
    0
}
