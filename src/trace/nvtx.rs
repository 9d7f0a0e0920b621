//! NVTX ranges around every op, so that Nsight Systems shows each op's host span by name.
//!
//! NVTX is loaded at run time (`libnvToolsExt.so.1`, which forwards to the profiler named in
//! `NVTX_INJECTION64_PATH` when one is attached): the crate still builds and runs where it is
//! missing, and then the ranges cost one branch.

/// An open NVTX range; closes when dropped. Without the `nvtx` feature it is a zero-sized
/// no-op.
#[must_use]
pub(crate) struct NvtxRange {
    #[cfg(feature = "nvtx")]
    pushed: bool,
}

#[cfg(not(feature = "nvtx"))]
impl NvtxRange {
    #[inline(always)]
    pub(crate) fn push(_library: &str, _op: &str) -> Self {
        NvtxRange {}
    }
}

#[cfg(feature = "nvtx")]
mod imp {
    use super::NvtxRange;
    use std::cell::RefCell;
    use std::ffi::{c_char, c_int};
    use std::sync::OnceLock;

    thread_local!(
        /// The range name being pushed, `library::op` and a NUL: one buffer per thread, reused, so
        /// that a range allocates nothing once the buffer has grown to the longest name.
        static NAME: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) }
    );

    struct Nvtx {
        push: unsafe extern "C" fn(*const c_char) -> c_int,
        pop: unsafe extern "C" fn() -> c_int,
        // Keeps the library mapped for as long as the function pointers above are used.
        _lib: libloading::Library,
    }

    fn nvtx() -> Option<&'static Nvtx> {
        static NVTX: OnceLock<Option<Nvtx>> = OnceLock::new();
        NVTX.get_or_init(|| {
            for name in ["libnvToolsExt.so.1", "libnvToolsExt.so", "nvToolsExt64_1.dll"] {
                // SAFETY: loading NVTX runs no initialisers with preconditions; the library is
                // designed to be loaded into any process.
                let Ok(lib) = (unsafe { libloading::Library::new(name) }) else { continue };
                // SAFETY: the symbols have these C signatures in every NVTX 1/2 library
                // (`int nvtxRangePushA(const char*)`, `int nvtxRangePop(void)`).
                let fns = unsafe {
                    let push = lib.get::<unsafe extern "C" fn(*const c_char) -> c_int>(b"nvtxRangePushA\0").map(|s| *s);
                    let pop = lib.get::<unsafe extern "C" fn() -> c_int>(b"nvtxRangePop\0").map(|s| *s);
                    push.and_then(|push| pop.map(|pop| (push, pop)))
                };
                if let Ok((push, pop)) = fns {
                    return Some(Nvtx { push, pop, _lib: lib });
                }
            }
            log::info!("cusched: the nvtx feature is on but no NVTX library (libnvToolsExt) was found; ranges are off");
            None
        })
        .as_ref()
    }

    impl NvtxRange {
        pub(crate) fn push(library: &str, op: &str) -> Self {
            let Some(n) = nvtx() else { return NvtxRange { pushed: false } };
            if library.contains('\0') || op.contains('\0') {
                return NvtxRange { pushed: false };
            }
            let pushed = NAME.try_with(|name| {
                let Ok(mut name) = name.try_borrow_mut() else { return false };
                name.clear();
                name.extend_from_slice(library.as_bytes());
                name.extend_from_slice(b"::");
                name.extend_from_slice(op.as_bytes());
                name.push(0);
                // SAFETY: `name` holds one NUL, at its end (the parts hold none, checked above),
                // and is borrowed until the call returns; NVTX copies the message.
                unsafe { (n.push)(name.as_ptr().cast()) };
                true
            });
            NvtxRange { pushed: pushed.unwrap_or(false) }
        }
    }

    impl Drop for NvtxRange {
        fn drop(&mut self) {
            if let (true, Some(n)) = (self.pushed, nvtx()) {
                // SAFETY: pops the range this value pushed on this thread (the value is made and
                // dropped within one op on one thread).
                unsafe { (n.pop)() };
            }
        }
    }
}
