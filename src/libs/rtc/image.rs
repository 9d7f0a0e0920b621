//! Modules loaded from compiled images rather than NVRTC source: PTX text, CUBIN and fatbin,
//! given as bytes or read from a file. PTX goes through the driver's linker (`cuLink*`), which
//! JIT-compiles it into a CUBIN whose parameter layouts this crate reads (as for NVRTC
//! modules: see `cubin`); a fatbin is loaded as it is.

use super::module::{LoadedModule, Module};
use super::{cubin, unavailable_on_sim};
use crate::backend::{cuda, BackendCtx};
use crate::device::Device;
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::path::Path;
use std::sync::Arc;

/// A compiled module image for [`Device::load_module`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleImage {
    /// PTX assembly text (for example `nvcc -ptx` output), JIT-compiled for the device.
    Ptx(String),
    /// A CUBIN (an ELF image for one architecture, `nvcc -cubin`), loaded as it is: it must be
    /// for the device's architecture.
    Cubin(Vec<u8>),
    /// A fatbin (`nvcc -fatbin`, compressed or not): the driver takes the CUBIN for the
    /// device's architecture, or JIT-compiles the PTX it carries.
    Fatbin(Vec<u8>),
}

/// The first bytes of an ELF file (a CUBIN).
const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// The first bytes of a fatbin (`0xBA55ED50`, little-endian).
const FATBIN_MAGIC: [u8; 4] = [0x50, 0xed, 0x55, 0xba];

impl ModuleImage {
    /// Reads an image from `path`, telling the kind from its first bytes: an ELF header is a
    /// CUBIN, the fatbin magic a fatbin, anything else must be PTX text (UTF-8).
    pub fn from_file(path: impl AsRef<Path>) -> Result<ModuleImage> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| Error::invalid("path", format!("could not read {}: {e}", path.display())))?;
        ModuleImage::from_bytes(bytes).map_err(|_| {
            Error::invalid("path", format!("{} is neither a CUBIN, a fatbin nor PTX text", path.display()))
        })
    }

    /// Tells the kind of `bytes` from their first bytes, as [`from_file`](Self::from_file).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<ModuleImage> {
        if bytes.starts_with(&ELF_MAGIC) {
            return Ok(ModuleImage::Cubin(bytes));
        }
        if bytes.starts_with(&FATBIN_MAGIC) {
            return Ok(ModuleImage::Fatbin(bytes));
        }
        String::from_utf8(bytes)
            .map(ModuleImage::Ptx)
            .map_err(|_| Error::invalid("image", "neither a CUBIN (ELF), a fatbin nor PTX text (UTF-8)"))
    }

    /// Checks the image's shape before the driver sees it.
    fn check(&self) -> Result<()> {
        match self {
            ModuleImage::Ptx(text) if text.contains('\0') => {
                Err(Error::invalid("image", "PTX text must not contain a NUL byte"))
            }
            ModuleImage::Ptx(text) if !text.contains(".version") => {
                Err(Error::invalid("image", "PTX text has no `.version` directive: is it PTX?"))
            }
            ModuleImage::Cubin(b) if !b.starts_with(&ELF_MAGIC) => {
                Err(Error::invalid("image", "a CUBIN starts with an ELF header"))
            }
            ModuleImage::Fatbin(b) if !b.starts_with(&FATBIN_MAGIC) => {
                Err(Error::invalid("image", "a fatbin starts with the magic 0xBA55ED50"))
            }
            _ => Ok(()),
        }
    }
}

/// Bytes of the linker's error log kept.
const LOG_BYTES: usize = 16 << 10;

/// Links a PTX image into a CUBIN for the current context's device.
///
/// # Safety
/// A context is current on this thread.
unsafe fn link(kind: sys::CUjitInputType, data: &[u8]) -> Result<Vec<u8>> {
    let mut log = vec![0u8; LOG_BYTES];
    let mut options =
        [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), LOG_BYTES as *mut c_void];
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    // SAFETY: (1) two options with their values, the log buffer outliving the link state (it is
    // destroyed below, before `log` drops); (2) `state` is a valid out-pointer.
    let created =
        unsafe { sys::cuLinkCreate_v2(options.len() as c_uint, options.as_mut_ptr(), values.as_mut_ptr(), &mut state) };
    cuda::status("cuLinkCreate", created)?;
    let linked = (|| {
        // SAFETY: (1) a live link state; (2) `data` outlives the call (the linker copies it) and
        // PTX is NUL-terminated by the caller; (3) the name is a NUL-terminated literal; no
        // options.
        let added = unsafe {
            sys::cuLinkAddData_v2(
                state,
                kind,
                data.as_ptr() as *mut c_void,
                data.len(),
                c"image".as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        cuda::status("cuLinkAddData", added)?;
        let (mut out, mut len): (*mut c_void, usize) = (std::ptr::null_mut(), 0);
        // SAFETY: a live link state; both are valid out-pointers.
        cuda::status("cuLinkComplete", unsafe { sys::cuLinkComplete(state, &mut out, &mut len) })?;
        if out.is_null() {
            return Err(Error::invalid("image", "the linker produced no image"));
        }
        // SAFETY: the linker's output is `len` bytes owned by `state`, alive until it is
        // destroyed below; copied out first.
        Ok(unsafe { std::slice::from_raw_parts(out as *const u8, len) }.to_vec())
    })();
    // SAFETY: a live link state, destroyed once; its output was copied.
    unsafe { sys::cuLinkDestroy(state) };
    linked.map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let log = String::from_utf8_lossy(&log[..end]).into_owned();
        match e {
            Error::Driver { .. } if !log.is_empty() => Error::CompileFailed { status: e.to_string(), log },
            e => e,
        }
    })
}

/// The parameter layouts of the first CUBIN found whole inside `fatbin` (an ELF header whose
/// records the parser understands); none when every image is compressed.
fn embedded_layouts(fatbin: &[u8]) -> HashMap<String, cuda::module::ParamLayout> {
    let mut at = 0;
    while let Some(found) = fatbin[at..].windows(ELF_MAGIC.len()).position(|w| w == ELF_MAGIC) {
        let layouts = cubin::param_layouts(&fatbin[at + found..]);
        if !layouts.is_empty() {
            return layouts;
        }
        at += found + ELF_MAGIC.len();
    }
    HashMap::new()
}

impl Device {
    /// Loads a compiled module image (PTX, CUBIN or fatbin; see [`ModuleImage`]), and returns
    /// it as a [`Module`] whose kernels are looked up by their symbol names and launched like
    /// NVRTC's ([`Module::kernel`]). PTX that does not assemble, or a fatbin with nothing for
    /// this device, is [`Error::CompileFailed`] with the linker's log.
    ///
    /// Loading a module waits until the kernels running on the device have finished, and
    /// while it waits, other threads' calls into the device wait too (the driver's behaviour,
    /// measured in BENCHMARKS.md): load modules ahead of time, before long kernels are queued.
    /// On the simulator it fails with [`Error::LibraryUnavailable`], as
    /// [`compile`](Self::compile) does.
    pub fn load_module(&self, image: &ModuleImage) -> Result<Module> {
        if let Some(e) = self.shared.poisoned() {
            return Err(e);
        }
        image.check()?;
        let epoch = self.shared.epoch();
        self.shared.check(self.load_image(image), epoch)
    }

    /// Reads an image from `path` ([`ModuleImage::from_file`]) and loads it.
    pub fn load_module_file(&self, path: impl AsRef<Path>) -> Result<Module> {
        self.load_module(&ModuleImage::from_file(path)?)
    }

    fn load_image(&self, image: &ModuleImage) -> Result<Module> {
        let (backend, epoch) = self.shared.backend_epoch();
        let BackendCtx::Cuda(ctx) = backend else { return Err(unavailable_on_sim()) };
        cuda::bind(&ctx)?;
        let (image, layouts) = match image {
            ModuleImage::Cubin(bytes) => (bytes.clone(), cubin::param_layouts(bytes)),
            ModuleImage::Ptx(text) => {
                let mut data = text.as_bytes().to_vec();
                data.push(0);
                // SAFETY: the device's context was bound above.
                let cubin = unsafe { link(sys::CUjitInputType::CU_JIT_INPUT_PTX, &data) }?;
                let layouts = cubin::param_layouts(&cubin);
                (cubin, layouts)
            }
            // The driver loads a fatbin itself (compressed ones too, which its linker refuses);
            // the parameter layouts come from the first CUBIN stored uncompressed in it, if any
            // (the driver confirms them, and without them it is asked instead).
            ModuleImage::Fatbin(bytes) => (bytes.clone(), embedded_layouts(bytes)),
        };
        let loaded = cuda::module::load_cubin(&ctx, image)?;
        let module = Arc::new(LoadedModule::new(loaded, ctx.clone(), &self.shared, epoch, layouts));
        Ok(Module::new(module, Arc::new(HashMap::new()), self.shared.clone(), self.shared.generation()))
    }
}
