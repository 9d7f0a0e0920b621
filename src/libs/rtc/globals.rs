//! A module's `__device__` and `__constant__` variables as tracked buffers:
//! [`Module::global`], and [`Device::sim_module`], the simulator's module whose globals are
//! zeroed simulated buffers made on first lookup.
//!
//! Every lookup of one global hands out handles of one tracked buffer while any handle lives,
//! so that every declared use of the variable is ordered by one tracker. The buffer keeps the
//! module loaded (the module holds only a weak handle back, so the two make no cycle) and
//! never frees the memory: the module does, when it unloads. When the last handle drops, its
//! outstanding uses are kept here, and the next lookup waits for them on the host before it
//! makes a new buffer (whose tracker does not know them).

use super::module::{LoadedModule, Module};
use crate::backend::cuda;
use crate::backend::memory::DeviceMemory;
use crate::backend::sim_mem::SimMem;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef, ModuleOwner, WeakGpuRef};
use crate::track::EventRef;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A [`WeakGpuRef`] of any element type.
trait Live: Send + Sync {
    /// Whether a handle to the buffer remains.
    fn alive(&self) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<T: Element> Live for WeakGpuRef<T> {
    fn alive(&self) -> bool {
        self.upgrade().is_some()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One global looked up so far.
struct Entry {
    /// Its size, as the first lookup found it.
    bytes: usize,
    /// The live buffer over it, a [`WeakGpuRef`] of the element type it was looked up as.
    live: Option<Box<dyn Live>>,
    /// The uses the last buffer over it left outstanding when it dropped.
    prior: Vec<EventRef>,
    /// A simulated module's memory for it, a [`SimMem`] of the first lookup's element type.
    sim: Option<Box<dyn Any + Send + Sync>>,
}

/// A module's globals looked up so far, by name. A leaf lock: nothing is taken under it.
#[derive(Default)]
pub(super) struct Globals(Mutex<HashMap<String, Entry>>);

/// What a global's buffer holds: the module, loaded while the buffer lives.
struct Hold {
    module: Arc<LoadedModule>,
    name: String,
}

impl ModuleOwner for Hold {
    fn released(&self, uses: Vec<EventRef>) {
        if let Some(entry) = crate::sync::lock_unranked(&self.module.globals.0).get_mut(&self.name) {
            entry.prior = uses;
        }
    }
}

fn wrong_type<T>(name: &str) -> Error {
    Error::invalid(
        "name",
        format!(
            "global `{name}` is in use as another element type than {}: drop those handles first, or look it \
             up as the same type",
            std::any::type_name::<T>()
        ),
    )
}

impl Module {
    /// The module's `__device__` or `__constant__` variable `name` (an `extern "C"` name, or
    /// the mangled one) as a tracked buffer of `len` elements of `T`: upload to it, download
    /// it, and declare it on a [`LaunchRecorder`](crate::LaunchRecorder) or a
    /// [`KernelLaunch`](super::KernelLaunch) like any buffer. Declare it on every launch of a
    /// kernel that touches it (passing its pointer is not needed: the kernel names the
    /// variable), so the tracker orders those launches against its other uses.
    ///
    /// The memory belongs to the module: cusched never frees it, and the buffer keeps the
    /// module loaded while any handle to it exists. Every lookup of `name` while a handle
    /// lives gives a handle of the same buffer; a lookup after every handle dropped first waits
    /// on the host for the uses the last one left outstanding. A lookup enqueues nothing (in a
    /// graph recording too). The variable's size (`cuModuleGetGlobal`) must
    /// be `len * size_of::<T>()` bytes, or the lookup fails naming `len`; a name the module
    /// has no variable of fails naming `name`.
    ///
    /// On a simulated module ([`Device::sim_module`]), the first lookup of a name makes a
    /// zeroed buffer of that size, and later lookups must give the same size.
    ///
    /// ```no_run
    /// use cusched::Device;
    /// let device = Device::open(0)?;
    /// let s = device.default_stream();
    /// let module = device.compile(r#"__constant__ float table[4];
    ///     extern "C" __global__ void k(float* out) { out[threadIdx.x] = table[threadIdx.x]; }"#, &[])?;
    /// let table = module.global::<f32>("table", 4)?;
    /// table.copy_from_slice(s, &[1.0, 2.0, 3.0, 4.0])?;
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn global<T: Element>(&self, name: &str, len: usize) -> Result<GpuRef<T>> {
        self.check()?;
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::invalid(
                "len",
                format!("{len} elements of {} overflow the address space", std::any::type_name::<T>()),
            )
        })?;
        let prior = {
            let mut globals = crate::sync::lock_unranked(&self.module.globals.0);
            match globals.get_mut(name) {
                Some(entry) => {
                    check_size::<T>(name, len, bytes, entry.bytes)?;
                    if let Some(live) = live::<T>(name, entry)? {
                        return Ok(live);
                    }
                    std::mem::take(&mut entry.prior)
                }
                None => Vec::new(),
            }
        };
        let device = Device::from_shared(&self.device);
        let memory = if self.module.is_simulated() {
            self.sim_memory::<T>(name, len, bytes)?
        } else {
            self.cuda_memory::<T>(&device, name, len, bytes)?
        };
        let hold = Arc::new(Hold { module: self.module.clone(), name: name.to_string() });
        let made = device.module_global(memory, len, self.module.epoch, hold, &prior);
        let buf = match made {
            Ok(buf) => buf,
            Err(e) => {
                // Nothing was ordered after them: the next lookup still must be.
                if let Some(entry) = crate::sync::lock_unranked(&self.module.globals.0).get_mut(name) {
                    entry.prior.extend(prior);
                }
                return Err(e);
            }
        };
        let raced = {
            let mut globals = crate::sync::lock_unranked(&self.module.globals.0);
            let entry = globals.entry(name.to_string()).or_insert_with(|| Entry {
                bytes,
                live: None,
                prior: Vec::new(),
                sim: None,
            });
            match live::<T>(name, entry) {
                // Another thread's lookup made one meanwhile: use that one (ours drops outside
                // the lock, handing its uses back through `Hold::released`).
                Ok(Some(theirs)) => Ok(theirs),
                Ok(None) => {
                    entry.live = Some(Box::new(buf.downgrade()));
                    return Ok(buf);
                }
                Err(e) => Err(e),
            }
        };
        drop(buf);
        raced
    }

    /// The simulated memory of `name`, made zeroed on first lookup.
    fn sim_memory<T: Element>(&self, name: &str, len: usize, bytes: usize) -> Result<DeviceMemory<T>> {
        let mut globals = crate::sync::lock_unranked(&self.module.globals.0);
        let entry = globals.entry(name.to_string()).or_insert_with(|| Entry {
            bytes,
            live: None,
            prior: Vec::new(),
            sim: None,
        });
        check_size::<T>(name, len, bytes, entry.bytes)?;
        if entry.sim.is_none() {
            entry.sim = Some(Box::new(SimMem::<T>::try_new(len, bytes, None)?));
        }
        match entry.sim.as_ref().and_then(|m| m.downcast_ref::<SimMem<T>>()) {
            Some(m) => Ok(DeviceMemory::Sim(m.rebound())),
            None => Err(Error::invalid(
                "name",
                format!(
                    "simulated global `{name}` keeps the element type of its first lookup, not {}",
                    std::any::type_name::<T>()
                ),
            )),
        }
    }

    /// The device memory of `name`, checked against `len` elements.
    fn cuda_memory<T: Element>(
        &self,
        device: &Device,
        name: &str,
        len: usize,
        bytes: usize,
    ) -> Result<DeviceMemory<T>> {
        let module =
            self.module.module.as_ref().ok_or_else(|| Error::invalid("module", "the module has been unloaded"))?;
        let slot = device.shared.stream(device.default_stream())?;
        let (raw, _) = slot.raw_and_epoch();
        let crate::backend::RawStream::Cuda(stream) = &*raw else { return Err(super::unavailable_on_sim()) };
        let Some((address, size)) = cuda::module::global(module, stream, name)? else {
            return Err(Error::invalid(
                "name",
                format!("no __device__ or __constant__ variable `{name}` in the module (declare it extern \"C\", or give its mangled name)"),
            ));
        };
        check_size::<T>(name, len, bytes, size)?;
        {
            let mut globals = crate::sync::lock_unranked(&self.module.globals.0);
            globals.entry(name.to_string()).or_insert_with(|| Entry {
                bytes: size,
                live: None,
                prior: Vec::new(),
                sim: None,
            });
        }
        // SAFETY: 1. `address` holds `size` = `len * size_of::<T>()` bytes (checked) of the
        // module's context, the stream's, and every bit pattern is a valid `Element`; it stays
        // allocated while the module is loaded, which the buffer's `Hold` keeps it; 2. the
        // buffer releases it with `release_unowned` (its owner is set), never freeing it.
        unsafe { DeviceMemory::unowned_cuda(&raw, address, len) }
    }
}

/// The live buffer of `entry`, if any handle to it remains.
fn live<T: Element>(name: &str, entry: &Entry) -> Result<Option<GpuRef<T>>> {
    let Some(live) = &entry.live else { return Ok(None) };
    match live.as_any().downcast_ref::<WeakGpuRef<T>>() {
        Some(weak) => Ok(weak.upgrade()),
        // A dead handle of another type is no conflict.
        None if live.alive() => Err(wrong_type::<T>(name)),
        None => Ok(None),
    }
}

fn check_size<T>(name: &str, len: usize, bytes: usize, size: usize) -> Result<()> {
    if size != bytes {
        return Err(Error::invalid(
            "len",
            format!(
                "global `{name}` is {size} bytes, but {len} elements of {} are {bytes}",
                std::any::type_name::<T>()
            ),
        ));
    }
    Ok(())
}

impl Device {
    /// A simulated module (simulated devices only): its globals ([`Module::global`]) are
    /// simulated buffers, made zeroed on first lookup, for host closures standing for kernels
    /// ([`LaunchScope::sim_kernel`](crate::LaunchScope::sim_kernel)) to read and write. It has
    /// no kernels: [`Module::kernel`] fails with [`Error::LibraryUnavailable`], as
    /// [`compile`](Self::compile) does on the simulator.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// let device = Device::sim(SimConfig::default())?;
    /// let module = device.sim_module()?;
    /// let counter = module.global::<u32>("counter", 1)?;
    /// assert_eq!(counter.download(device.default_stream())?, vec![0]);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn sim_module(&self) -> Result<Module> {
        if !self.is_simulated() {
            return Err(Error::WrongBackend { what: "Device::sim_module", needed: "sim", actual: "cuda" });
        }
        let module = Arc::new(LoadedModule::simulated(&self.shared));
        Ok(Module::new(module, Arc::new(HashMap::new()), self.shared.clone(), self.shared.generation()))
    }
}
