//! The path every cuTENSOR op takes: validate, record, find or make the plan, size the
//! workspace, run.

use super::calls::RawPlan;
use super::modes::{self, Layout, Spec};
use super::ops::{Contraction, ElementwiseBinary, ElementwiseTrinary, Permutation, Reduction};
use super::sim::SimOp;
use super::types::{check_binary, check_unary};
use super::{compute_for, cuda_type, Compute, Kind, OperandKey, PlanKey, Tensor, TensorElement, TensorRef, UnaryOp};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{dptr, record};
use crate::memory::{Complex, GpuRef};
use crate::track::Access;
use std::ffi::c_void;

const ZERO: Complex<f64> = Complex::new(0.0, 0.0);

/// `beta == 0`: the output is only written (cuTENSOR does not read it then).
fn output_access(beta: Complex<f64>) -> Access {
    if beta.re == 0.0 && beta.im == 0.0 {
        Access::Write
    } else {
        Access::ReadWrite
    }
}

/// Rejects an output that is also one of the inputs: cuTENSOR reads inputs while writing.
fn not_an_input<T: TensorElement>(
    arg: &'static str,
    out: &GpuRef<T>,
    inputs: &[(&'static str, &GpuRef<T>)],
) -> Result<()> {
    match inputs.iter().find(|(_, i)| i.same_buffer(out)) {
        Some((input, _)) => Err(Error::invalid(arg, format!("is the same buffer as input `{input}`"))),
        None => Ok(()),
    }
}

/// `c` and `d` of an elementwise op: one layout; the same buffer or distinct.
fn c_matches_d(cl: &Layout, dl: &Layout) -> Result<()> {
    if cl.modes != dl.modes || cl.extents != dl.extents || cl.strides != dl.strides {
        return Err(Error::invalid(
            "c",
            "must have the output's modes, extents and strides (cuTENSOR takes one descriptor for both)",
        ));
    }
    Ok(())
}

/// An operand's part in a launch: its checked layout and buffers, for one descriptor.
struct Desc<'b, T: TensorElement> {
    layout: Layout,
    bufs: Vec<&'b GpuRef<T>>,
}

/// A validated op, ready to record and run.
struct Launch<'b, T: TensorElement> {
    name: &'static str,
    kind: Kind,
    compute: Compute,
    unary: Vec<UnaryOp>,
    descs: Vec<Desc<'b, T>>,
    /// Each buffer's use, named as the op's arguments.
    uses: Vec<(&'static str, &'b GpuRef<T>, Access)>,
    /// The device pointers the execute call takes, in its order.
    ptrs: Vec<&'b GpuRef<T>>,
    /// `alpha`, `beta`, `gamma` (complex; real data have no imaginary parts).
    scalars: [Complex<f64>; 3],
}

/// The largest power of two (at most 256) dividing every buffer's address.
fn alignment<T: TensorElement>(bufs: &[&GpuRef<T>]) -> Result<u32> {
    let mut align = 256u32;
    for b in bufs {
        let p = b.raw_device_ptr()?;
        align = align.min(1u32 << p.trailing_zeros().min(8));
    }
    Ok(align)
}

impl Tensor {
    /// A contraction: see [`Contraction`].
    pub fn contract<T: TensorElement>(&mut self, op: &Contraction<'_, T>) -> Result<Completion<()>> {
        let spec = modes::parse(op.spec, 2, &["a", "b", "d"])?;
        modes::contraction(&spec)?;
        let (a, b, d) = three(["a", "b", "d"], &spec, &op.a, &op.b, &op.d)?;
        modes::no_self_overlap("d", &d)?;
        not_an_input("d", op.d.buf, &[("a", op.a.buf), ("b", op.b.buf)])?;
        let compute = compute_for::<T>(op.compute, true)?;
        check_unary::<T>("op_a", op.ops[0], true)?;
        check_unary::<T>("op_b", op.ops[1], true)?;
        self.launch(Launch {
            name: "contract",
            kind: Kind::Contraction,
            compute,
            unary: op.ops.to_vec(),
            descs: vec![desc(a, op.a.buf), desc(b, op.b.buf), desc(d, op.d.buf)],
            uses: vec![
                ("a", op.a.buf, Access::Read),
                ("b", op.b.buf, Access::Read),
                ("d", op.d.buf, output_access(op.beta)),
            ],
            ptrs: vec![op.a.buf, op.b.buf, op.d.buf],
            scalars: [op.alpha, op.beta, ZERO],
        })
    }

    /// A reduction: see [`Reduction`].
    pub fn reduce<T: TensorElement>(&mut self, op: &Reduction<'_, T>) -> Result<Completion<()>> {
        let spec = modes::parse(op.spec, 1, &["a", "d"])?;
        modes::subset("d", &spec.output, "a", &spec.inputs[0])?;
        let a = op.a.layout("a", &spec.inputs[0])?;
        let d = op.d.layout("d", &spec.output)?;
        modes::extents_agree(&[("a", &a), ("d", &d)])?;
        modes::no_self_overlap("d", &d)?;
        not_an_input("d", op.d.buf, &[("a", op.a.buf)])?;
        let compute = compute_for::<T>(op.compute, false)?;
        check_unary::<T>("op_a", op.op_a, false)?;
        check_binary::<T>("fold", op.fold)?;
        self.launch(Launch {
            name: "reduce",
            kind: Kind::Reduction(op.fold),
            compute,
            unary: vec![op.op_a],
            descs: vec![desc(a, op.a.buf), desc(d, op.d.buf)],
            uses: vec![("a", op.a.buf, Access::Read), ("d", op.d.buf, output_access(op.beta))],
            ptrs: vec![op.a.buf, op.d.buf],
            scalars: [op.alpha, op.beta, ZERO],
        })
    }

    /// A permutation: see [`Permutation`].
    pub fn permute<T: TensorElement>(&mut self, op: &Permutation<'_, T>) -> Result<Completion<()>> {
        let spec = modes::parse(op.spec, 1, &["a", "b"])?;
        modes::subset("a", &spec.inputs[0], "b", &spec.output)?;
        modes::subset("b", &spec.output, "a", &spec.inputs[0])?;
        let a = op.a.layout("a", &spec.inputs[0])?;
        let b = op.b.layout("b", &spec.output)?;
        modes::extents_agree(&[("a", &a), ("b", &b)])?;
        modes::no_self_overlap("b", &b)?;
        not_an_input("b", op.b.buf, &[("a", op.a.buf)])?;
        let compute = compute_for::<T>(op.compute, false)?;
        check_unary::<T>("op_a", op.op_a, false)?;
        self.launch(Launch {
            name: "permute",
            kind: Kind::Permutation,
            compute,
            unary: vec![op.op_a],
            descs: vec![desc(a, op.a.buf), desc(b, op.b.buf)],
            uses: vec![("a", op.a.buf, Access::Read), ("b", op.b.buf, Access::Write)],
            ptrs: vec![op.a.buf, op.b.buf],
            scalars: [op.alpha, ZERO, ZERO],
        })
    }

    /// An elementwise op on two operands: see [`ElementwiseBinary`].
    pub fn elementwise_binary<T: TensorElement>(&mut self, op: &ElementwiseBinary<'_, T>) -> Result<Completion<()>> {
        let spec = modes::parse(op.spec, 2, &["a", "c", "d"])?;
        modes::subset("a", &spec.inputs[0], "d", &spec.output)?;
        let (a, c, d) = three(["a", "c", "d"], &spec, &op.a, &op.c, &op.d)?;
        modes::no_self_overlap("d", &d)?;
        c_matches_d(&c, &d)?;
        not_an_input("d", op.d.buf, &[("a", op.a.buf)])?;
        let compute = compute_for::<T>(op.compute, false)?;
        check_unary::<T>("op_a", op.ops[0], false)?;
        check_unary::<T>("op_c", op.ops[1], false)?;
        check_binary::<T>("op_ac", op.op_ac)?;
        self.launch(Launch {
            name: "elementwise_binary",
            kind: Kind::Binary(op.op_ac),
            compute,
            unary: op.ops.to_vec(),
            descs: vec![desc(a, op.a.buf), Desc { layout: d, bufs: vec![op.c.buf, op.d.buf] }],
            uses: vec![("a", op.a.buf, Access::Read), ("c", op.c.buf, Access::Read), ("d", op.d.buf, Access::Write)],
            ptrs: vec![op.a.buf, op.c.buf, op.d.buf],
            scalars: [op.alpha, ZERO, op.gamma],
        })
    }

    /// An elementwise op on three operands: see [`ElementwiseTrinary`].
    pub fn elementwise_trinary<T: TensorElement>(&mut self, op: &ElementwiseTrinary<'_, T>) -> Result<Completion<()>> {
        let spec = modes::parse(op.spec, 3, &["a", "b", "c", "d"])?;
        modes::subset("a", &spec.inputs[0], "d", &spec.output)?;
        modes::subset("b", &spec.inputs[1], "d", &spec.output)?;
        let a = op.a.layout("a", &spec.inputs[0])?;
        let b = op.b.layout("b", &spec.inputs[1])?;
        let c = op.c.layout("c", &spec.inputs[2])?;
        let d = op.d.layout("d", &spec.output)?;
        modes::extents_agree(&[("a", &a), ("b", &b), ("c", &c), ("d", &d)])?;
        modes::no_self_overlap("d", &d)?;
        c_matches_d(&c, &d)?;
        not_an_input("d", op.d.buf, &[("a", op.a.buf), ("b", op.b.buf)])?;
        let compute = compute_for::<T>(op.compute, false)?;
        for (arg, &u) in ["op_a", "op_b", "op_c"].into_iter().zip(&op.ops) {
            check_unary::<T>(arg, u, false)?;
        }
        check_binary::<T>("op_ab", op.combine.0)?;
        check_binary::<T>("op_abc", op.combine.1)?;
        let [alpha, beta, gamma] = op.scales;
        self.launch(Launch {
            name: "elementwise_trinary",
            kind: Kind::Trinary(op.combine.0, op.combine.1),
            compute,
            unary: op.ops.to_vec(),
            descs: vec![desc(a, op.a.buf), desc(b, op.b.buf), Desc { layout: d, bufs: vec![op.c.buf, op.d.buf] }],
            uses: vec![
                ("a", op.a.buf, Access::Read),
                ("b", op.b.buf, Access::Read),
                ("c", op.c.buf, Access::Read),
                ("d", op.d.buf, Access::Write),
            ],
            ptrs: vec![op.a.buf, op.b.buf, op.c.buf, op.d.buf],
            scalars: [alpha, beta, gamma],
        })
    }

    /// Records the uses, finds or makes the plan, sizes the workspace, and enqueues.
    fn launch<T: TensorElement>(&mut self, l: Launch<'_, T>) -> Result<Completion<()>> {
        let mut rec = self.op.recorder(l.name);
        for &(arg, buf, access) in &l.uses {
            record(&mut rec, arg, buf, access)?;
        }
        if self.op.device.is_simulated() {
            return self.launch_sim(l, rec);
        }
        let stream = self.op.bound_stream()?;
        let handle = self.raw.as_ref().ok_or_else(|| self.op.unavailable_on_sim())?;
        let operands = l
            .descs
            .into_iter()
            .map(|d| Ok(OperandKey { align: alignment(&d.bufs)?, layout: d.layout }))
            .collect::<Result<Vec<_>>>()?;
        let key = PlanKey {
            kind: l.kind,
            dtype: cuda_type::<T>(),
            compute: l.compute,
            jit: self.jit,
            operands,
            unary: l.unary,
        };
        let plan: &RawPlan = self.plans.get_or_make(key, &self.op, |k| RawPlan::make(handle, k))?;
        let work = self.work.use_on(&self.op, &mut rec, plan.work_bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        let ptrs = l.ptrs.iter().map(|b| dptr::<T, c_void>(b)).collect::<Result<Vec<_>>>()?;
        let scalars = l.scalars.map(|v| plan.scalar(v));
        let (kind, cu) = (l.kind, stream.cu_stream());
        self.op.run(rec, Vec::new(), || {
            let work = work.map_or(std::ptr::null_mut(), |w| w as *mut c_void);
            // SAFETY: (1) the handle made the plan, and `run` made its context current; (2) the
            // pointers are the op's validated buffers, live (borrowed for this call, and kept by
            // the tracker until the op completes), in the key's order and fenced by preflight
            // on this stream; (3) the scalars are in the plan's scalar type; (4) the workspace,
            // declared read-write, holds at least the plan's need and serves one op at a time.
            unsafe { plan.exec(handle, kind, &ptrs, scalars, work, cu) }
        })
    }
}

impl Tensor {
    /// The simulator's form of [`launch`](Self::launch): the op computed on the host (see
    /// [`super::sim`]) under the uses `rec` declared. No plan and no workspace.
    fn launch_sim<T: TensorElement>(
        &mut self,
        l: Launch<'_, T>,
        rec: crate::recorder::LaunchRecorder,
    ) -> Result<Completion<()>> {
        // The descriptors are in the order of `Kind`, the pointers in the execute call's: the
        // output is the last of each, and an elementwise op's `c` (the pointer before it) has
        // the output's descriptor.
        let (mut layouts, mut ptrs) = (l.descs.into_iter().map(|d| d.layout).collect::<Vec<_>>(), l.ptrs);
        let (Some(out_layout), Some(out_buf)) = (layouts.pop(), ptrs.pop()) else {
            return Err(Error::invalid("spec", "the op has no output"));
        };
        let inputs = ptrs
            .iter()
            .enumerate()
            .map(|(i, b)| Ok((layouts.get(i).unwrap_or(&out_layout).clone(), b.sim_data()?)))
            .collect::<Result<Vec<_>>>()?;
        let op = SimOp {
            kind: l.kind,
            compute: l.compute,
            unary: l.unary,
            scalars: l.scalars,
            inputs,
            output: (out_layout, out_buf.sim_data()?),
        };
        self.op.run_sim(rec, Vec::new(), move || op.run())
    }
}

fn desc<'b, T: TensorElement>(layout: Layout, buf: &'b GpuRef<T>) -> Desc<'b, T> {
    Desc { layout, bufs: vec![buf] }
}

/// The layouts of an op of two inputs and an output, with extents checked across them.
fn three<T: TensorElement>(
    args: [&'static str; 3],
    spec: &Spec,
    x: &TensorRef<'_, T>,
    y: &TensorRef<'_, T>,
    out: &TensorRef<'_, T>,
) -> Result<(Layout, Layout, Layout)> {
    let xl = x.layout(args[0], &spec.inputs[0])?;
    let yl = y.layout(args[1], &spec.inputs[1])?;
    let ol = out.layout(args[2], &spec.output)?;
    modes::extents_agree(&[(args[0], &xl), (args[1], &yl), (args[2], &ol)])?;
    Ok((xl, yl, ol))
}
