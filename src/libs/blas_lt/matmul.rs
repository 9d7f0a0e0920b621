//! The matmul op: check, record, find the plan, run.

use super::calls::{self, Operands, Pointers};
use super::check::{self, Problem};
use super::types::sealed::{HostScalar, ScaleValue};
use super::types::{Epilogue, LtElement, Matmul, MatmulOutput};
use super::BlasLt;
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::op::OpStream;
use crate::libs::{dptr, record};
use crate::memory::{Element, GpuRef};
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ffi::c_void;

/// cuBLASLt's recommended workspace on Hopper and later, and before.
const WORKSPACE_HOPPER: usize = 32 << 20;
const WORKSPACE_EARLIER: usize = 4 << 20;

/// A non-null, 256-byte-aligned address that sets an amax pointer for the heuristic before
/// its stage exists. Never dereferenced: each call sets the real pointer.
const AMAX_STAND_IN: *const c_void = std::ptr::without_provenance(256);

/// What a plan is made for: the whole checked problem, TF32, which pointers the descriptor
/// carries, the operands' alignment, and the algorithm chosen (`None`: the heuristic's best, or
/// the autotuner's winner stored under it).
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct PlanKey {
    pub(super) problem: Problem,
    pub(super) tf32: bool,
    pointers: u16,
    pub(super) align: u32,
    pub(super) algo: Option<usize>,
}

fn ptr<T: Element>(buf: Option<&GpuRef<T>>) -> Result<*const c_void> {
    buf.map_or(Ok(std::ptr::null()), |b| dptr::<T, c_void>(b).map(|p| p.cast_const()))
}

/// Records the epilogue's buffers; returns the bias and aux pointers.
fn record_epilogue<E: Element>(rec: &mut LaunchRecorder, e: &Epilogue<'_, E>) -> Result<()> {
    use Epilogue as P;
    let (r, w) = (Access::Read, Access::Write);
    match *e {
        P::Default | P::Relu | P::Gelu => Ok(()),
        P::Bias(b) | P::ReluBias(b) | P::GeluBias(b) => record(rec, "bias", b, r),
        P::ReluAux(m) => record(rec, "mask", m.buf, w),
        P::GeluAux(a) => record(rec, "aux", a.buf, w),
        P::ReluAuxBias { bias, mask } => {
            record(rec, "bias", bias, r)?;
            record(rec, "mask", mask.buf, w)
        }
        P::GeluAuxBias { bias, aux } => {
            record(rec, "bias", bias, r)?;
            record(rec, "aux", aux.buf, w)
        }
        P::DRelu(m) => record(rec, "mask", m.buf, r),
        P::DGelu(a) => record(rec, "aux", a.buf, r),
        P::DReluBgrad { mask, bias_grad } => {
            record(rec, "mask", mask.buf, r)?;
            record(rec, "bias_grad", bias_grad, w)
        }
        P::DGeluBgrad { aux, bias_grad } => {
            record(rec, "aux", aux.buf, r)?;
            record(rec, "bias_grad", bias_grad, w)
        }
        P::BgradA(b) | P::BgradB(b) => record(rec, "bias_grad", b, w),
    }
}

/// The bias and aux device pointers (null where the epilogue has none).
fn epilogue_pointers<E: Element>(e: &Epilogue<'_, E>) -> Result<(*const c_void, *const c_void)> {
    use Epilogue as P;
    let none: Option<&GpuRef<E>> = None;
    Ok(match *e {
        P::Default | P::Relu | P::Gelu => (ptr(none)?, ptr(none)?),
        P::Bias(b) | P::ReluBias(b) | P::GeluBias(b) => (ptr(Some(b))?, ptr(none)?),
        P::ReluAux(m) | P::DRelu(m) => (ptr(none)?, ptr(Some(m.buf))?),
        P::GeluAux(a) | P::DGelu(a) => (ptr(none)?, ptr(Some(a.buf))?),
        P::ReluAuxBias { bias, mask } => (ptr(Some(bias))?, ptr(Some(mask.buf))?),
        P::GeluAuxBias { bias, aux } => (ptr(Some(bias))?, ptr(Some(aux.buf))?),
        P::DReluBgrad { mask, bias_grad } => (ptr(Some(bias_grad))?, ptr(Some(mask.buf))?),
        P::DGeluBgrad { aux, bias_grad } => (ptr(Some(bias_grad))?, ptr(Some(aux.buf))?),
        P::BgradA(b) | P::BgradB(b) => (ptr(Some(b))?, ptr(none)?),
    })
}

/// The alignment, in bytes (at most 256), every one of `addresses` has.
fn alignment(addresses: &[*const c_void]) -> u32 {
    let zeros = addresses.iter().map(|&a| (a as usize).trailing_zeros()).min().unwrap_or(8);
    1 << zeros.min(8)
}

/// Records every buffer the matmul reads or writes: the operands, the epilogue's buffers and
/// the FP8 scales.
fn record_operands<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    rec: &mut LaunchRecorder,
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    problem: &Problem,
) -> Result<()> {
    record(rec, "a", mm.a, Access::Read)?;
    record(rec, "b", mm.b, Access::Read)?;
    match mm.c {
        Some(c) if !problem.c_is_d => record(rec, "c", c, Access::Read)?,
        _ => {}
    }
    // A beta in device memory is unknown until the matmul runs: D may be read.
    let reads_d = problem.c_is_d && (mm.scale_device.is_some() || mm.beta.wide() != [0.0, 0.0]);
    record(rec, "d", mm.d, if reads_d { Access::ReadWrite } else { Access::Write })?;
    record_epilogue(rec, &mm.epilogue)?;
    if let Some((alpha, beta)) = mm.scale_device {
        record(rec, "alpha", alpha, Access::Read)?;
        record(rec, "beta", beta, Access::Read)?;
    }
    if let Some(s) = mm.aux_scale {
        record(rec, "aux_scale", s, Access::Read)?;
    }
    if let Some(s) = &mm.fp8 {
        for (arg, buf) in [("fp8.a", Some(s.a)), ("fp8.b", Some(s.b)), ("fp8.c", s.c), ("fp8.d", s.d)] {
            if let Some(buf) = buf {
                record(rec, arg, buf, Access::Read)?;
            }
        }
    }
    Ok(())
}

/// A matmul's device addresses: the descriptor's pointers, and the operands in cuBLASLt's
/// order (A and B swapped in a row-major problem; C is D where the problem has no C).
pub(super) struct Addresses {
    pub(super) ptrs: Pointers,
    a: *const c_void,
    b: *const c_void,
    c: *const c_void,
    d: *const c_void,
}

impl Addresses {
    /// The plan key of `problem` with these addresses: which pointers the descriptor carries,
    /// and the operands' alignment.
    pub(super) fn key(&self, problem: Problem, tf32: bool, algo: Option<usize>) -> PlanKey {
        let p = &self.ptrs;
        let present =
            [p.bias, p.aux, p.scales[0], p.scales[1], p.scales[2], p.scales[3], p.amax, p.aux_scale, p.aux_amax];
        let pointers = present.iter().enumerate().fold(0u16, |m, (i, p)| m | (u16::from(!p.is_null()) << i));
        PlanKey { problem, tf32, pointers, align: alignment(&[self.a, self.b, self.c, self.d]), algo }
    }
}

/// One enqueue of a planned matmul: everything `calls::matmul` takes.
struct Call<'p> {
    h: calls::Handle,
    plan: &'p calls::Plan,
    ptrs: Pointers,
    alpha: HostScalar,
    beta: HostScalar,
    /// `alpha` and `beta` in device memory, where the plan reads them from there.
    device_scalars: Option<(*const c_void, *const c_void)>,
    operands: Operands,
    stream: crate::backend::cuda::CuStream,
}

impl Call<'_> {
    /// # Safety
    /// (1) a live handle of the bound context on the recorder's stream, fenced by preflight;
    /// (2) the operands, epilogue buffers and scales cover the problem (checked by
    /// `check::problem`) and `d` is distinct from `a` and `b` (checked); (3) the workspace is
    /// the stream's, declared read-write, at least the plan's need; (4) alpha and beta are host
    /// scalars of the plan's scale type (the checks tie it to A's type), living through the
    /// call (they live in `self`), or, where the plan's pointer mode is the device's, buffers
    /// of that type checked to hold one element and declared read on the recorder.
    unsafe fn enqueue(&self) -> Result<()> {
        let (alpha, beta) = self.device_scalars.unwrap_or((self.alpha.as_ptr(), self.beta.as_ptr()));
        // SAFETY: the caller keeps this function's contract, which is `calls::matmul`'s.
        unsafe { calls::matmul(self.h, self.plan, &self.ptrs, alpha, beta, &self.operands, self.stream) }
    }
}

/// The amax stages a matmul writes: D's and the aux matrix's, each where asked for.
struct Stages {
    d: Option<GpuRef<f32>>,
    aux: Option<GpuRef<f32>>,
}

/// Runs `call` on `op`'s recorder; with amax stages, copies the amaxes from them into the
/// completion's slot (D's in its first four bytes, the aux matrix's in the next) after the
/// matmul.
fn launch(op: &mut OpStream, rec: LaunchRecorder, stages: Stages, call: &Call<'_>) -> Result<Completion<MatmulOutput>> {
    // SAFETY (both enqueues below), `Call::enqueue`'s contract: (1) `call` holds a live handle
    // of the bound context on `rec`'s stream, which `rec`'s preflight fences; (2) its operands
    // were checked by `check::problem` and recorded on `rec`; (3) its workspace is the
    // stream's, declared on `rec`; (4) its host scalars live in `call`, borrowed through the
    // call, and its device scalars were checked and recorded.
    if stages.d.is_none() && stages.aux.is_none() {
        return op.run(rec, Vec::new(), || {
            unsafe { call.enqueue() }?;
            Ok(MatmulOutput::default())
        });
    }
    let convert: fn([f32; 2]) -> MatmulOutput = match (stages.d.is_some(), stages.aux.is_some()) {
        (true, true) => |v| MatmulOutput { amax_d: Some(v[0]), amax_aux: Some(v[1]) },
        (true, false) => |v| MatmulOutput { amax_d: Some(v[0]), amax_aux: None },
        _ => |v| MatmulOutput { amax_d: None, amax_aux: Some(v[1]) },
    };
    let keep: Vec<crate::completion::KeepAlive> =
        stages.d.iter().chain(&stages.aux).map(|s| Box::new(s.clone()) as crate::completion::KeepAlive).collect();
    op.run_with_slot(
        rec,
        keep,
        |slot, s| {
            unsafe { call.enqueue() }?;
            let host = slot.host_ptr::<[f32; 2]>().cast::<f32>();
            for (i, stage) in [(0, &stages.d), (1, &stages.aux)] {
                if let Some(stage) = stage {
                    // SAFETY: 1. the slot is 8 bytes of pinned memory owned by the op until its
                    // completion has read it, after this copy, and `i` (0 or 1) keeps the f32
                    // inside it; 2. the stage was written by the matmul just enqueued on this
                    // stream and is kept alive (and its use recorded) until the op's event.
                    unsafe {
                        crate::backend::cuda::memory::copy_dtoh(s, host.add(i), 1, stage.cuda_slice()?)?;
                    }
                }
            }
            Ok(())
        },
        convert,
    )
}

impl BlasLt {
    /// `D = epilogue(alpha op(A) op(B) + beta C)` (see [`Matmul`]). The completion resolves
    /// with `D`'s amax when the matmul asked for it.
    ///
    /// Every argument is checked before anything is recorded: shapes and leading dimensions
    /// against the buffers, element-type combinations, the epilogue's buffers and their
    /// lengths, FP8 scales and the device's compute capability (8.9 or later for FP8).
    pub fn matmul<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
        &mut self,
        mm: &Matmul<'_, TA, TB, TD, TC, E>,
    ) -> Result<Completion<MatmulOutput>> {
        let problem = check::problem(mm)?;
        self.check_fp8_device(&problem)?;
        if self.op.device.is_simulated() && mm.algorithm.is_some_and(|i| i > 0) {
            return Err(Error::invalid("algorithm", "the simulator has one candidate algorithm, index 0"));
        }
        let mut rec = self.op.recorder("matmul");
        record_operands(&mut rec, mm, &problem)?;
        if self.op.device.is_simulated() {
            // An amax is read back on the host: refused in a recording, as on a GPU.
            if mm.amax_d || mm.amax_aux {
                self.op.refuse_recording(crate::libs::op::HOST_READS_RESULT)?;
            }
            // No plan, workspace or amax stage: the host computation needs none.
            return super::sim::matmul(&self.op, rec, mm, problem);
        }
        let h = self.handle()?;
        let stream = self.op.bound_stream()?;
        let mut at = self.addresses(mm, &problem)?;
        let key = at.key(problem, mm.tf32, mm.algorithm);
        let max_workspace = self.max_workspace()?;

        // The plan (the heuristic) comes before anything reaches the stream, so a problem
        // cuBLASLt has no kernel for fails with nothing recorded.
        let BlasLt { op, plans, work, amax_stage, aux_amax_stage, .. } = self;
        let q = calls::Query { tf32: mm.tf32, ptrs: at.ptrs, max_workspace, align: key.align };
        let plan = plans.get_or_make(key, op, |k| {
            // SAFETY: (1) a live handle of the context bound above; (2) `q.ptrs` sets this
            // matmul's pointers (the amax stand-in is never read).
            unsafe { calls::make_plan(h, &k.problem, &q, k.algo.unwrap_or(0)) }
        })?;
        let mut stages = Stages { d: None, aux: None };
        for (asked, stage, out, arg) in [
            (mm.amax_d, amax_stage, &mut stages.d, "amax_d"),
            (mm.amax_aux, aux_amax_stage, &mut stages.aux, "amax_aux"),
        ] {
            if !asked {
                continue;
            }
            if stage.is_none() {
                *stage = Some(op.device.alloc_scratch::<f32>(op.stream, 1)?);
            }
            if let Some(s) = stage {
                record(&mut rec, arg, s, Access::ReadWrite)?;
            }
            *out = stage.clone();
        }
        if let Some(s) = &stages.d {
            at.ptrs.amax = ptr(Some(s))?;
        }
        if let Some(s) = &stages.aux {
            at.ptrs.aux_amax = ptr(Some(s))?;
        }
        let ws = work.use_on(op, &mut rec, plan.workspace)?;
        let (workspace, workspace_bytes) = match ws {
            Some(w) => (dptr::<u8, c_void>(w)?, w.len()),
            None => (std::ptr::null_mut(), 0),
        };
        let operands = Operands { a: at.a, b: at.b, c: at.c, d: at.d.cast_mut(), workspace, workspace_bytes };
        let (alpha, beta) = (mm.alpha.host(), mm.beta.host());
        let device_scalars = match mm.scale_device {
            Some((a, b)) => Some((ptr(Some(a))?, ptr(Some(b))?)),
            None => None,
        };
        let call = Call { h, plan, ptrs: at.ptrs, alpha, beta, device_scalars, operands, stream: stream.cu_stream() };
        launch(op, rec, stages, &call)
    }

    /// The workspace bytes a plan may ask for on this device.
    pub(super) fn max_workspace(&self) -> Result<usize> {
        Ok(if self.op.device.compute_capability()?.0 >= 9 { WORKSPACE_HOPPER } else { WORKSPACE_EARLIER })
    }

    /// Refuses an FP8 matmul on a device below compute capability 8.9.
    pub(super) fn check_fp8_device(&self, problem: &Problem) -> Result<()> {
        if problem.fp8 {
            let (major, minor) = self.op.device.compute_capability()?;
            if (major, minor) < (8, 9) {
                return Err(Error::invalid(
                    "a",
                    format!("FP8 matmuls need compute capability 8.9 or later; this device has {major}.{minor}"),
                ));
            }
        }
        Ok(())
    }

    /// The matmul's device addresses. The amax stage is allocated only once a plan exists (an
    /// allocation records on the stream); until then the heuristic sees a stand-in, which it
    /// does not read.
    pub(super) fn addresses<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
        &self,
        mm: &Matmul<'_, TA, TB, TD, TC, E>,
        problem: &Problem,
    ) -> Result<Addresses> {
        let (bias, aux) = epilogue_pointers(&mm.epilogue)?;
        let scales = match &mm.fp8 {
            // cuBLASLt's A and B are the caller's B and A in a row-major problem.
            Some(s) if problem.swapped => [ptr(Some(s.b))?, ptr(Some(s.a))?, ptr(s.c)?, ptr(s.d)?],
            Some(s) => [ptr(Some(s.a))?, ptr(Some(s.b))?, ptr(s.c)?, ptr(s.d)?],
            None => [std::ptr::null(); 4],
        };
        let stage_or_stand_in = |stage: &Option<GpuRef<f32>>, asked: bool| -> Result<*const c_void> {
            Ok(match (stage, asked) {
                (_, false) => std::ptr::null(),
                (Some(s), true) => ptr(Some(s))?,
                (None, true) => AMAX_STAND_IN,
            })
        };
        let amax = stage_or_stand_in(&self.amax_stage, mm.amax_d)?;
        let aux_amax = stage_or_stand_in(&self.aux_amax_stage, mm.amax_aux)?;
        let (a, b, d) = (ptr(Some(mm.a))?, ptr(Some(mm.b))?, ptr(Some(mm.d))?);
        let c = if problem.c_is_d { d } else { ptr(mm.c)? };
        let (a, b) = if problem.swapped { (b, a) } else { (a, b) };
        let aux_scale = ptr(mm.aux_scale)?;
        Ok(Addresses { ptrs: Pointers { bias, aux, scales, amax, aux_scale, aux_amax }, a, b, c, d })
    }
}
