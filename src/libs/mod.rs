//! The NVIDIA libraries, one module each behind its cargo feature, and the parts every library
//! shares.
//!
//! # Adding a library
//!
//! One module under `src/libs/`, its `mod` item below (a plain item, so that rustfmt and
//! every other tool sees the module) and one line in [`registry!`]. The module defines the
//! library's per-stream state (a handle, its plans, its generators) and implements
//! [`StreamLibrary`] for it: what the library is called, how to probe for it, how to make the
//! state on a stream, and which of its objects are the library's own (destroyed through the
//! reaper, or forgotten with a poisoned context). The registry line generates the rest: the
//! crate-root re-export, the lazily made slot in
//! [`crate::Handles`] with its accessor (`cx.blas()`), the `Drop` that hands the library's
//! objects to the reaper, and the rebuild handling (state of a replaced context is dropped
//! without calling the library, and made anew on next use).
//!
//! # The op path
//!
//! Every library op takes the same path: validate every argument (the views in [`validate`]
//! name the argument they reject), record the uses on a strict [`LaunchRecorder`] from
//! [`OpStream::recorder`], then [`OpStream::run`]: preflight, enqueue through the library's
//! thin call layer (`calls.rs` in each library, the only code that touches its `sys`), commit.
//! Validation happens before `run` is reached, so a rejected op has neither recorded nor
//! enqueued anything. The simulated backend has no NVIDIA libraries: ops validate there too (so
//! bad input is testable without a GPU), then compute on the CPU through
//! [`OpStream::run_sim`]: the same recorder, the computation a simulated kernel under the
//! op's declared uses. Each library's `sim.rs` holds its computation; raw handles stay
//! GPU-only ([`Error::LibraryUnavailable`] on the simulator).
//!
//! # Shared parts
//!
//! - [`workspace::Workspace`]: a grow-only device buffer per stream, declared read-write on
//!   every op that uses it, handed to the reaper when replaced.
//! - [`plan_cache::PlanCache`]: a bounded least-recently-used cache keyed on the fully resolved
//!   layout; evicted plans go to the reaper.
//! - [`scalars`]: scalar results the GPU writes into pinned memory, read through the op's
//!   completion.
//! - [`dtype::DataTypes`]: every element type's name in each library's data-type enum, in one
//!   table.
//! - [`validate`]: operand views (matrix, vector, strided tensor) checked once into spans and
//!   library ints, with errors that name the argument.

#![cfg_attr(not(feature = "_library"), allow(dead_code, unused_imports))]

#[cfg(feature = "curand")]
pub(crate) mod affine;
pub(crate) mod dtype;
mod handles;
pub(crate) mod object;
mod op;
// The shared parts below serve every library; each library uses its own subset, so with only
// some library features on, the rest is unused.
pub(crate) mod plan_cache;
#[cfg(feature = "nvrtc")]
pub(crate) mod rtc;
pub(crate) mod scalars;
pub(crate) mod validate;
pub(crate) mod workspace;

pub use handles::Handles;
pub(crate) use op::{dptr, record, OpStream};

use crate::device::{Device, StreamId};
use crate::error::{Error, Result};

/// The library registry: one line per library, `gate visibility module: Type`.
///
/// Expands `$then! { ... }` with the list, so that each layer generates its own part of every
/// library from the one list: this module declares the modules, their re-exports and their
/// `Drop`; [`Handles`] declares their slots and accessors. The accessor is named after
/// the module.
macro_rules! registry {
    ($then:ident) => {
        $then! {
            #[cfg(feature = "cublas")] pub blas: Blas,
            #[cfg(feature = "cublaslt")] pub blas_lt: BlasLt,
            #[cfg(feature = "curand")] pub rng: Rng,
            #[cfg(feature = "cufft")] pub fft: Fft,
            #[cfg(feature = "cusparse")] pub sparse: Sparse,
            #[cfg(feature = "cusolver")] pub solver_sparse: SolverSparse,
            #[cfg(feature = "cusolver")] pub solver: Solver,
            #[cfg(feature = "cutensor")] pub tensor: Tensor,
            #[cfg(feature = "nccl")] pub nccl: Nccl,
            #[cfg(feature = "cudnn")] pub cudnn: Cudnn,
            #[cfg(test)] pub(crate) fake: Fake,
        }
    };
}
pub(crate) use registry;

macro_rules! declare_libraries {
    ($( #[cfg($gate:meta)] $vis:vis $name:ident: $ty:ident, )*) => {
        $(
            #[cfg($gate)]
            impl Drop for $name::$ty {
                fn drop(&mut self) {
                    release(self);
                }
            }

            // Lanes move their handles to the worker thread.
            #[cfg($gate)]
            const _: fn() = || {
                fn is_send<T: Send>() {}
                is_send::<$name::$ty>();
            };
        )*

        /// The public library modules, re-exported at the crate root.
        pub(crate) mod exports {
            $(
                #[cfg($gate)]
                #[allow(unused_imports)]
                $vis use super::$name;
            )*
        }
    };
}
registry!(declare_libraries);

// The library modules are plain items, not made by the registry macro: rustfmt, and every
// other tool that follows `mod` items, sees a module only when it is declared this way.
#[cfg(feature = "cublas")]
pub mod blas;
#[cfg(feature = "cublaslt")]
pub mod blas_lt;
#[cfg(feature = "cudnn")]
pub mod cudnn;
#[cfg(test)]
pub(crate) mod fake;
#[cfg(feature = "cufft")]
pub mod fft;
#[cfg(feature = "_fp8")]
mod fp8;
#[cfg(feature = "nccl")]
pub mod nccl;
#[cfg(feature = "curand")]
pub mod rng;
#[cfg(feature = "cusolver")]
pub mod solver;
#[cfg(feature = "cusolver")]
pub mod solver_sparse;
#[cfg(feature = "cusparse")]
pub mod sparse;
#[cfg(feature = "cutensor")]
pub mod tensor;

/// What the registry needs to know of a library to open it and to name it.
#[derive(Debug)]
pub(crate) struct Library {
    /// The name errors give (`"cuBLAS (libcublas)"`); traces use the part before the
    /// parenthesis.
    pub name: &'static str,
    /// What to install when [`present`](Self::present) is false.
    pub hint: &'static str,
    /// Whether the library's shared object loads. Probed before the first call: cudarc panics
    /// when a lazily loaded library is missing.
    pub present: fn() -> bool,
    /// What the library's own objects are called in the reaper's logs (`"a cuBLAS handle"`).
    pub objects: &'static str,
}

/// A library's per-stream state as [`crate::Handles`] keeps it: made on first use, and made
/// anew once the device has rebuilt a poisoned context.
pub(crate) trait StreamLibrary: Sized + Send + 'static {
    /// The library's name, install hint and probe.
    const LIBRARY: Library;
    /// The objects made through the library (handles, plans, generators): what the reaper
    /// destroys once the stream's work is done, or what is forgotten with a poisoned context
    /// (calling the library on them could only fail; their memory goes with the context).
    /// Memory of cusched's own (buffers, pinned slots) is not among them: it frees itself.
    type Objects: Send + 'static;
    /// Makes the state on `op`'s stream. On CUDA the library is present; on the simulator it
    /// must make nothing that calls the library, so that ops still validate there.
    fn create(op: OpStream) -> Result<Self>;
    /// The stream the state enqueues on.
    fn op_stream(&mut self) -> &mut OpStream;
    /// Moves the library's objects out (`None` when there are none).
    fn take_objects(&mut self) -> Option<Self::Objects>;
}

/// The library state in `slot`, made (or remade, after a context rebuild) as needed.
pub(crate) fn current<'a, L: StreamLibrary>(
    slot: &'a mut Option<L>,
    device: &Device,
    stream: StreamId,
) -> Result<&'a mut L> {
    let made = match slot.take() {
        Some(mut lib) => {
            if lib.op_stream().is_current() {
                lib
            } else {
                abandon(lib);
                open(device, stream)?
            }
        }
        None => open(device, stream)?,
    };
    Ok(slot.insert(made))
}

fn open<L: StreamLibrary>(device: &Device, stream: StreamId) -> Result<L> {
    if !device.is_simulated() && !(L::LIBRARY.present)() {
        return Err(unavailable::<L>());
    }
    L::create(OpStream::new(device, stream, L::LIBRARY.name))
}

/// The error of a library whose probe failed.
pub(crate) fn unavailable<L: StreamLibrary>() -> Error {
    Error::LibraryUnavailable { library: L::LIBRARY.name, hint: L::LIBRARY.hint }
}

/// Drops state of a poisoned context without calling the library on its objects.
fn abandon<L: StreamLibrary>(mut lib: L) {
    if let Some(objects) = lib.take_objects() {
        std::mem::forget(objects);
    }
}

/// What every library's `Drop` does: destroying its objects blocks (`cublasDestroy` and
/// `cufftDestroy` synchronize), so they go to the reaper, which destroys them once the
/// stream's work is done, off this thread. Pinned scalar slots go with them: their free waits
/// too.
fn release<L: StreamLibrary>(lib: &mut L) {
    if let Some(objects) = lib.take_objects() {
        let op = lib.op_stream();
        let scalars = op.take_scalars();
        op.retire(L::LIBRARY.objects, (objects, scalars));
    }
}

/// A library's status code, turned into [`Error::Library`] naming the call: the one
/// status-to-error conversion of every library.
pub(crate) trait Status: Copy + PartialEq + std::fmt::Debug {
    /// The status that means success.
    const SUCCESS: Self;

    /// `Ok` on success, else the error naming `call`.
    fn check(self, call: &'static str) -> Result<()> {
        if self == Self::SUCCESS {
            Ok(())
        } else {
            Err(Error::library(call, self))
        }
    }
}
