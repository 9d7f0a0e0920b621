// The crate docs are the README, so that its tour runs as doctests.
#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, unsafe_op_in_unsafe_fn)]

mod access;
mod backend;
mod completion;
mod completion_thread;
mod device;
mod error;
mod graph;
mod hazard;
mod host_cache;
mod lane;
mod libs;
mod memory;
mod peer;
mod reaper;
mod recorder;
mod sync;
mod trace;
mod track;

pub use backend::sim::{FenceMutation, Hazard, HazardKind, OpOrigin, SimConfig, SimOp};
pub use completion::{wait_all, Completion};
pub use device::{Device, DeviceConfig, StreamId, SubmitOrderCheck};
pub use error::{CollectiveFault, Error, NumericalFailure, Result};
pub use graph::{Graph, GraphExec, LoopCondition, Recording};
pub use host_cache::HostCacheStats;
#[allow(deprecated)]
pub use lane::LaneCtx;
pub use lane::{Declare, DeclaredArgs, JobBuilder, Lane, LaneOptions};
#[cfg(feature = "nvrtc")]
pub use libs::rtc::{
    Kernel, KernelCacheStats, KernelLaunch, LaunchOptions, Module, ModuleImage, Program, RawLaunch,
    PDL_DEVICE_FUNCTIONS,
};
pub use libs::Handles;
pub use memory::{Complex, Element, GpuRef, HostBuffer, HostRead, HostWrite, SimMem, SimRead};
pub use recorder::{External, LaunchRecorder, LaunchScope, Preflighted, Resource};
pub use trace::{GpuSpan, KernelTrace, OpInfo, Timeline, TimelineSpan, TraceOptions, TrackKind};
pub use track::{Access, StreamStats};

/// Re-export of the `half` crate whose `f16` and `bf16` are GEMM and tensor element types.
#[cfg(feature = "_half")]
pub use half;
// Empty when no library feature is on.
#[cfg_attr(not(feature = "_library"), allow(unused_imports, unreachable_pub))]
pub use libs::exports::*;

/// Re-export of the cudarc version this crate is built on, for raw launches beside it.
pub use cudarc;
