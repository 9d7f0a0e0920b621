//! What the simulator's hazard checker reports: [`Hazard`], its [`HazardKind`], and where each
//! of its two uses came from ([`SimOp`], [`OpOrigin`]). The types sit with the shared
//! vocabulary so that [`Error::Hazard`](crate::Error::Hazard) can carry one; the checker
//! itself is in the simulation backend.

use crate::access::Access;
use std::fmt;
use std::sync::Arc;

/// Which ordering rule a hazard broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HazardKind {
    /// A read not ordered after the write before it.
    ReadAfterWrite,
    /// A write not ordered after a read before it.
    WriteAfterRead,
    /// A write not ordered after the write before it.
    WriteAfterWrite,
    /// A kernel accessed a buffer it did not declare, or wrote one it declared read-only.
    /// Such an access is unfenced whatever the timing, since fences follow declarations.
    Undeclared,
    /// Two lane jobs' conflicting uses of the buffer would take effect against the order the
    /// program submitted the jobs in: the job submitted first, on one lane, reached its use
    /// after the job submitted later, on another lane, had made a conflicting one (reads never
    /// conflict with reads). Found at the older job's preflight, before it enqueued anything;
    /// no kernel ran for it. Then `earlier` is the younger job's use and `later` the older
    /// job's, each with `stream` the stream's index on its device and `op` the job's submit
    /// number (see [`DeviceConfig::submit_order`](crate::DeviceConfig::submit_order)).
    SubmitOrder,
}

impl fmt::Display for HazardKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HazardKind::ReadAfterWrite => "read-after-write",
            HazardKind::WriteAfterRead => "write-after-read",
            HazardKind::WriteAfterWrite => "write-after-write",
            HazardKind::Undeclared => "undeclared access",
            HazardKind::SubmitOrder => "submit-order inversion",
        })
    }
}

/// A simulated operation: the `op`-th kernel run by stream `stream` of its simulated machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimOp {
    /// The stream's number on its simulated machine, in creation order: for a device made
    /// alone, its index on the device; for devices of one `Device::sim_group`, numbered across
    /// all of them.
    pub stream: u32,
    /// 1-based count of kernels that stream had run.
    pub op: u64,
}

impl fmt::Display for SimOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {}, op {}", self.stream, self.op)
    }
}

/// Where a simulated kernel came from, in the names the program gave it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpOrigin {
    /// The op: a launch's name ([`LaunchRecorder::named`](crate::LaunchRecorder::named), or
    /// `launch` unnamed), a compiled kernel's name, or `library::op` for the crate's own ops
    /// (`cuBLAS::gemm`, `memory::upload`). `None` for a kernel enqueued outside any launch of
    /// the crate's (a hand-paired [`Preflighted`](crate::Preflighted) launch).
    pub kernel: Option<Arc<str>>,
    /// The lane whose stream the kernel ran on, if it is a lane's.
    pub lane: Option<Arc<str>>,
}

impl fmt::Display for OpOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kernel {
            Some(k) => write!(f, "kernel `{k}`")?,
            None => f.write_str("an unnamed kernel")?,
        }
        if let Some(lane) = &self.lane {
            write!(f, " on lane \"{lane}\"")?;
        }
        Ok(())
    }
}

/// Two uses of one buffer that nothing ordered, or a kernel's access it did not declare, as
/// the simulator's checker found them.
///
/// Shown with the names the program gave: the kernels (from
/// [`LaunchRecorder::named`](crate::LaunchRecorder::named) or the library op), the lanes, and
/// the buffer's label ([`GpuRef::label`](crate::GpuRef::label)).
///
/// ```
/// use cusched::{Device, Error, HazardKind, LaunchRecorder, SimConfig};
///
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.default_stream();
/// let x = device.upload(s, &[1.0f32; 4])?.with_label("weights");
/// let m = x.sim_data()?;
/// let mut rec = LaunchRecorder::new_strict(s).named("scale");
/// rec.read(&x)?; // declared a read...
/// rec.launch(&device, |scope| scope.sim_kernel(move || m.lock()[0] *= 2.0))?; // ...but writes
///
/// // With the default `SimConfig::fail_on_hazard`, the next wait on the stream fails with it.
/// match device.synchronize(s) {
///     Err(Error::Hazard { hazard, .. }) => {
///         assert_eq!(hazard.kind, HazardKind::Undeclared);
///         let text = hazard.to_string();
///         assert!(text.contains("`scale`") && text.contains("\"weights\""), "{text}");
///     }
///     other => panic!("expected the hazard, got {other:?}"),
/// }
/// // The device's shutdown reports it too.
/// assert!(matches!(device.shutdown(), Err(Error::Hazard { .. })));
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hazard {
    /// The buffer's id (`buffer #N` in errors).
    pub buffer: u64,
    /// The buffer's label, if one was set before the hazard was found.
    pub label: Option<Arc<str>>,
    /// The rule broken.
    pub kind: HazardKind,
    /// The use that ran first. For [`HazardKind::Undeclared`], the offending kernel.
    pub earlier: SimOp,
    /// The use that ran second without waiting for it. For [`HazardKind::Undeclared`], the
    /// offending kernel.
    pub later: SimOp,
    /// Where the earlier use came from.
    pub earlier_origin: OpOrigin,
    /// Where the later use came from.
    pub later_origin: OpOrigin,
    /// How the later kernel used the buffer: for [`HazardKind::Undeclared`], the access it made
    /// without declaring it.
    pub access: Access,
}

impl Hazard {
    /// The buffer as messages name it: `buffer #N "label"`.
    fn buffer_name(&self) -> String {
        match &self.label {
            Some(l) => format!("buffer #{} \"{l}\"", self.buffer),
            None => format!("buffer #{}", self.buffer),
        }
    }
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let buffer = self.buffer_name();
        let (later, earlier) = (&self.later_origin, &self.earlier_origin);
        if self.kind == HazardKind::Undeclared {
            let (did, declare) = if self.access.writes() {
                ("wrote", "declare it with .write(..) or .read_write(..)")
            } else {
                ("read", "declare it with .read(..)")
            };
            return write!(
                f,
                "undeclared access: {later} ({}) {did} {buffer} without declaring that use, so nothing fences it; {declare} on the launch or job",
                self.later
            );
        }
        if self.kind == HazardKind::SubmitOrder {
            let did = if self.access.writes() { "write" } else { "read" };
            let job = |o: &OpOrigin, n: u64| {
                let lane = o.lane.as_ref().map_or(String::new(), |l| format!(" on lane \"{l}\""));
                match &o.kernel {
                    Some(k) => format!("job #{n}{lane} (kernel `{k}`)"),
                    None => format!("job #{n}{lane}"),
                }
            };
            return write!(
                f,
                "submit-order inversion on {buffer}: {} (submitted first) would {did} it after {} (submitted after it) already made a conflicting use of it: undeclared lane jobs are ordered by commit, not by submit; declare both jobs' uses with lane.job().read(..)/.write(..), or wait for the first job's Completion::wait_committed before submitting the second",
                job(later, self.later.op),
                job(earlier, self.earlier.op)
            );
        }
        let (first, second) = match self.kind {
            HazardKind::ReadAfterWrite => ("wrote", "read"),
            HazardKind::WriteAfterRead => ("read", "wrote"),
            _ => ("wrote", "wrote"),
        };
        write!(
            f,
            "{} hazard on {buffer}: {later} ({}) {second} it while {earlier} ({}) {first} it, and nothing ordered the two; declare both uses and order them by commit (or one stream)",
            self.kind, self.later, self.earlier
        )
    }
}

/// An op's name as hazards and submit-order reports show it: a user launch or compiled kernel
/// by its own name, the crate's other ops as `library::op`.
pub(crate) fn op_name(library: &str, op: &str) -> Arc<str> {
    match library {
        "user" | "kernel" => Arc::from(op),
        _ => Arc::from(format!("{library}::{op}")),
    }
}
