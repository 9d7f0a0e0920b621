//! SpGEMM with a reusable structure (`cusparseSpGEMMreuse_*`): [`Sparse::spgemm_reuse`] finds
//! the structure of `C = A B` once (work estimation, nnz, copy), and
//! [`Sparse::spgemm_reuse_compute`] then recomputes `C`'s values from `A` and `B`'s current
//! values, as often as needed, each a single asynchronous enqueue.
//!
//! The library objects (the SpGEMM descriptor, the three matrix descriptors it was set up with,
//! and the two buffers the compute phase keeps using) live in the [`Sparse`] state that made
//! them; the [`SpGemmReuse`] the caller holds names them. When it is dropped, the next op on
//! that state hands them to the reaper, which destroys them after the work enqueued so far.
//!
//! The plan's buffers and `C`'s structure are sized from `A` and `B`'s structure at the
//! setup, so the state also keeps the last writes of the structure arrays (the factors' offsets
//! and indices, and `C`'s, which the setup made) as the setup saw them; each compute checks,
//! while it holds its buffers, that none was written since (see `phases`), and otherwise
//! refuses with [`Error::InputChanged`] before enqueueing. Values may change freely.

use super::matrix::ValueType;
use super::phases::SameInputs;
use super::spgemm::{check_factors, factor_structure, product_descr, record_factors};
use super::{
    calls, output_access, record_matrix, Format, HostScalars, IndexKind, Sparse, SparseIndex, SparseMatrix, SparseValue,
};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::object::Owned;
use crate::libs::{dptr, record, OpStream};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The structure of a product `C = A B` of CSR matrices with `i32` (the default) or `i64`
/// indices, found once by
/// [`Sparse::spgemm_reuse`], for recomputing `C`'s values with
/// [`Sparse::spgemm_reuse_compute`] after `A` or `B`'s values change (their structure must
/// not: a compute after a write of `A`'s, `B`'s or `C`'s offsets or indices is refused with
/// [`Error::InputChanged`]). Holds clones of `A`, `B` and `C`; `C`'s buffers are fresh and its
/// values are set by the first compute.
#[derive(Debug)]
pub struct SpGemmReuse<T: SparseValue, I: SparseIndex = i32> {
    id: u64,
    stream: crate::track::StreamId,
    a: SparseMatrix<T, I>,
    b: SparseMatrix<T, I>,
    c: SparseMatrix<T, I>,
    _alive: Arc<()>,
}

impl<T: SparseValue, I: SparseIndex> SpGemmReuse<T, I> {
    /// The product `C` (its structure is final; its values are those of the last compute).
    pub fn c(&self) -> &SparseMatrix<T, I> {
        &self.c
    }

    /// The left factor `A`.
    pub fn a(&self) -> &SparseMatrix<T, I> {
        &self.a
    }

    /// The right factor `B`.
    pub fn b(&self) -> &SparseMatrix<T, I> {
        &self.b
    }
}

/// One reusable product of the state that made it: its id, whether its [`SpGemmReuse`] is
/// still held, and its library objects (none on the simulator, which computes on the host).
pub(super) struct ReuseState {
    id: u64,
    alive: Weak<()>,
    lib: Option<ReuseObjects>,
    /// The structure arrays the plan was sized from, at their last writes the setup saw.
    structure: Arc<SameInputs>,
}

/// What [`Error::InputChanged`] says of a structure written after the plan's setup.
const AFTER_SETUP: &str = "was written after the reusable SpGEMM plan was set up from it: the plan's buffers and C's structure are sized from A's, B's and C's offsets and indices as they were then, and only values may change between computes; set the plan up again with spgemm_reuse";

/// The structure arrays a compute with the plan of `a`, `b` and `c` must find unchanged, at
/// the positions `setup` (the setup's phases) noted for the factors' and at the last writes
/// now of `C`'s, which the setup made and wrote and nothing else holds yet.
fn plan_structure<T: SparseValue, I: SparseIndex>(
    device: &crate::device::Device,
    setup: &SameInputs,
    [a, b, c]: [&SparseMatrix<T, I>; 3],
) -> SameInputs {
    let structure = factor_structure("spgemm_reuse_compute", device, a, b)
        .input("c.offsets", &c.major)
        .input("c.indices", &c.minor)
        .saying(AFTER_SETUP);
    // Noted by the setup's first phase and checked by its others; unnoted, every compute is
    // refused.
    if let Some(seen) = setup.noted() {
        structure.note_with(&seen);
    }
    structure
}

/// The library objects of one reusable product.
struct ReuseObjects {
    // Field order is drop order: the SpGEMM descriptor before the matrices it was set up with.
    descr: Owned<calls::SpGemm>,
    mats: [Owned<calls::SpMat>; 3],
    /// The nnz phase's last buffer (cuSPARSE's buffer 4) and the copy phase's (buffer 5),
    /// used by every compute; buffers 1 to 3 are freed after the phases that need them.
    buffers: [GpuRef<u8>; 2],
}

/// Hands the objects of products whose [`SpGemmReuse`] is gone to the reaper.
pub(super) fn trim(op: &OpStream, reuses: &mut Vec<ReuseState>) {
    if reuses.iter().all(|r| r.alive.strong_count() > 0) {
        return;
    }
    let (gone, kept): (Vec<_>, Vec<_>) = reuses.drain(..).partition(|r| r.alive.strong_count() == 0);
    *reuses = kept;
    op.retire("cuSPARSE SpGEMM reuse plans", gone);
}

/// A descriptor of its own for `a` (the plan's objects must outlive the state's caches).
fn own_descr<T: SparseValue, I: SparseIndex>(a: &SparseMatrix<T, I>) -> Result<Owned<calls::SpMat>> {
    let parts = calls::SpMatParts {
        format: Format::Csr,
        rows: a.rows as i64,
        cols: a.cols as i64,
        nnz: a.nnz as i64,
        major: dptr(&a.major)?,
        minor: dptr(&a.minor)?,
        values: dptr(&a.values)?,
        index: I::KIND,
        value: T::CUDA_TYPE,
        block: 0,
    };
    // SAFETY: the matrix's buffers were checked against its sizes when it was made and are
    // live device buffers of this context.
    unsafe { calls::create_sp_mat(&parts) }
}

/// The library objects a reusable product is set up with: its SpGEMM descriptor and the
/// descriptors of `A`, `B` and `C`. Retired, not dropped, once a phase reached the stream.
type Objects = (Owned<calls::SpGemm>, [Owned<calls::SpMat>; 3]);

/// Hands the objects of a product whose setup failed to the reaper.
fn retire(op: &OpStream, objects: Objects) {
    op.retire("a cuSPARSE SpGEMM reuse plan being set up", objects);
}

/// A reusable product between its setup phases: the factors, the call's arguments and `C`'s
/// offsets (the one array of `C` made before its structure is known).
struct Setup<'a, T: SparseValue, I: SparseIndex> {
    a: &'a SparseMatrix<T, I>,
    b: &'a SparseMatrix<T, I>,
    g: calls::Reuse,
    offsets: &'a GpuRef<I>,
    /// The factors' structure the estimation saw, which every later phase must see.
    inputs: &'a SameInputs,
}

impl Sparse {
    /// Finds the structure of `C = A B` (CSR, `i32` indices) for repeated products with the same
    /// patterns; compute `C`'s values with [`spgemm_reuse_compute`](Self::spgemm_reuse_compute).
    /// Factors with `i64` indices are refused as [`Error::Unsupported`] naming `a`: cuSPARSE's
    /// reuse work estimation takes 32-bit indices only (the one-shot [`spgemm`](Self::spgemm)
    /// takes `i64`).
    ///
    /// **Blocks** the calling thread until the GPU has counted `C`'s nonzeros: cuSPARSE hands
    /// the count to the host only after that phase, and `C`'s buffers are sized from it. Every
    /// compute after it is asynchronous. For the same reason it is not recorded into a graph
    /// ([`Error::Recording`]); a plan's computes are made on the stream that made it.
    pub fn spgemm_reuse<T: SparseValue, I: SparseIndex>(
        &mut self,
        a: &SparseMatrix<T, I>,
        b: &SparseMatrix<T, I>,
    ) -> Result<SpGemmReuse<T, I>> {
        check_factors(a, b)?;
        if I::KIND != IndexKind::I32 {
            // cusparseSpGEMMreuse_workEstimation: "only 32-bit indices are supported" (an H100,
            // CUDA 13.0).
            return Err(super::args::unsupported(
                "a",
                format!("{:?} indices in the reusable SpGEMM", I::KIND),
                "use i32 indices, or the one-shot spgemm",
            ));
        }
        self.refuse_in_graph("a reusable SpGEMM plan, whose product the host sizes from a count the GPU makes,")?;
        let mut rec = self.op.recorder("spgemm_reuse.work_estimation");
        record_factors(&mut rec, a, b)?;
        // After every check of the arguments: a refused op leaves solo mode as it was.
        let inputs = factor_structure("spgemm_reuse", &self.op.device, a, b);
        let (dev, stream) = (self.op.device.clone(), self.op.stream);
        let offsets: GpuRef<I> = dev.alloc(stream, a.rows + 1)?;
        record(&mut rec, "c.offsets", &offsets, Access::Write)?;
        if self.simulated() {
            let c = self.sim_spgemm_structure(rec, a, b, &offsets, &inputs)?;
            let structure = plan_structure(&dev, &inputs, [a, b, &c]);
            return Ok(self.register(None, a, b, c, structure));
        }
        let h = self.handle()?;
        let (da, db) = (own_descr(a)?, own_descr(b)?);
        let dc = product_descr::<T, I>(a.rows, b.cols, &offsets)?;
        let descr = calls::spgemm_descr()?;
        let g = calls::Reuse { h, a: da.get(), b: db.get(), c: dc.get(), d: descr.get() };
        let setup = Setup { a, b, g, offsets: &offsets, inputs: &inputs };
        let (objects, buf1, sizes) = self.reuse_estimate(&setup, rec, (descr, [da, db, dc]))?;
        let (objects, bufs, nnz) = self.reuse_count(&setup, &buf1, sizes, objects)?;
        let (objects, c, buf5) = self.reuse_copy(&setup, &bufs, nnz, objects)?;

        let [_, _, buf4] = <[GpuRef<u8>; 3]>::try_from(bufs).map_err(|_| Error::invalid("c", "three nnz buffers"))?;
        let (descr, mats) = objects;
        let structure = plan_structure(&dev, &inputs, [a, b, &c]);
        Ok(self.register(Some(ReuseObjects { descr, mats, buffers: [buf4, buf5] }), a, b, c, structure))
    }

    /// Keeps a set-up product's objects in the state, and names them in the plan returned.
    fn register<T: SparseValue, I: SparseIndex>(
        &mut self,
        lib: Option<ReuseObjects>,
        a: &SparseMatrix<T, I>,
        b: &SparseMatrix<T, I>,
        c: SparseMatrix<T, I>,
        structure: SameInputs,
    ) -> SpGemmReuse<T, I> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let alive = Arc::new(());
        let structure = Arc::new(structure);
        self.reuses.push(ReuseState { id, alive: Arc::downgrade(&alive), lib, structure });
        self.trim();
        SpGemmReuse { id, stream: self.op.stream, a: a.clone(), b: b.clone(), c, _alive: alive }
    }

    /// The work estimation phase, and the nnz phase's size query after it; returns the
    /// estimation's buffer and the nnz phase's three buffer sizes.
    fn reuse_estimate<T: SparseValue, I: SparseIndex>(
        &mut self,
        setup: &Setup<'_, T, I>,
        rec: LaunchRecorder,
        objects: Objects,
    ) -> Result<(Objects, GpuRef<u8>, [usize; 3])> {
        let (g, mut rec) = (setup.g, rec);
        let mut size1 = 0;
        // SAFETY: (1) a live handle and descriptors of validated, live buffers; (2) a null
        // buffer: a size query.
        if let Err(e) = unsafe { calls::reuse_work_estimation(g, &mut size1, std::ptr::null_mut()) } {
            retire(&self.op, objects);
            return Err(e);
        }
        let buf1: GpuRef<u8> = self.op.device.alloc_scratch(self.op.stream, size1.max(1))?;
        record(&mut rec, "work estimation buffer", &buf1, Access::ReadWrite)?;
        let p1 = buf1.raw_device_ptr()? as *mut std::ffi::c_void;
        let mut sizes = [0usize; 3];
        let null = std::ptr::null_mut();
        let estimated = self.op.run(rec, Vec::new(), || {
            setup.inputs.note()?;
            // SAFETY: as above, with the buffer of the size queried; the nnz phase's size query
            // follows the estimation.
            unsafe {
                calls::reuse_work_estimation(g, &mut size1, p1)?;
                calls::reuse_nnz(g, &mut sizes, [null; 3])
            }
        });
        if let Err(e) = estimated {
            retire(&self.op, objects);
            return Err(e);
        }
        Ok((objects, buf1, sizes))
    }

    /// The nnz phase, which finds `C`'s structure; returns its three buffers and `C`'s number
    /// of nonzeros, which the host learns by waiting for the phase.
    fn reuse_count<T: SparseValue, I: SparseIndex>(
        &mut self,
        setup: &Setup<'_, T, I>,
        buf1: &GpuRef<u8>,
        sizes: [usize; 3],
        objects: Objects,
    ) -> Result<(Objects, Vec<GpuRef<u8>>, usize)> {
        let (g, mut sizes) = (setup.g, sizes);
        let (dev, stream) = (&self.op.device, self.op.stream);
        let bufs: Vec<GpuRef<u8>> =
            sizes.iter().map(|&n| dev.alloc_scratch(stream, n.max(1))).collect::<Result<_>>()?;
        let mut rec = self.op.recorder("spgemm_reuse.nnz");
        record_factors(&mut rec, setup.a, setup.b)?;
        record(&mut rec, "work estimation buffer", buf1, Access::ReadWrite)?;
        for (arg, buf) in ["nnz buffer 2", "nnz buffer 3", "nnz buffer 4"].into_iter().zip(&bufs) {
            record(&mut rec, arg, buf, Access::ReadWrite)?;
        }
        record(&mut rec, "c.offsets", setup.offsets, Access::Write)?;
        let ptrs: Vec<*mut std::ffi::c_void> =
            bufs.iter().map(|b| b.raw_device_ptr().map(|p| p as _)).collect::<Result<_>>()?;
        let mut nnz = 0i64;
        let counted = self.op.run(rec, Vec::new(), || {
            setup.inputs.check()?;
            // SAFETY: as above; the estimation ran with `buf1`, still live and recorded, on the
            // factors' structure this phase sees (checked just above, under this launch's
            // marks), which sized the three buffers. Getting the size waits for the phase
            // inside cuSPARSE: the documented blocking step.
            unsafe { calls::reuse_nnz(g, &mut sizes, [ptrs[0], ptrs[1], ptrs[2]]) }?;
            nnz = calls::sp_mat_size(g.c)?.2;
            Ok(())
        });
        if let Err(e) = counted {
            retire(&self.op, objects);
            return Err(e);
        }
        match usize::try_from(nnz) {
            Ok(n) if n <= I::MAX => Ok((objects, bufs, n)),
            _ => {
                retire(&self.op, objects);
                Err(Error::invalid("c", format!("A B has {nnz} nonzeros, beyond {:?} indices", I::KIND)))
            }
        }
    }

    /// The copy phase, which fills `C`'s structure into fresh buffers; returns `C` and the
    /// copy phase's buffer, which every compute uses.
    fn reuse_copy<T: SparseValue, I: SparseIndex>(
        &mut self,
        setup: &Setup<'_, T, I>,
        bufs: &[GpuRef<u8>],
        nnz: usize,
        objects: Objects,
    ) -> Result<(Objects, SparseMatrix<T, I>, GpuRef<u8>)> {
        let (g, offsets) = (setup.g, setup.offsets);
        let (dev, stream) = (self.op.device.clone(), self.op.stream);
        let indices: GpuRef<I> = dev.alloc(stream, nnz.max(1))?;
        let values: GpuRef<T> = dev.alloc(stream, nnz.max(1))?;
        let c = SparseMatrix::new(Format::Csr, setup.a.rows, setup.b.cols, nnz, offsets, &indices, &values)?;
        let mut size5 = 0;
        // SAFETY: (1) as above; (2) C's arrays hold rows + 1 offsets and nnz indices and values;
        // (3) a null buffer: a size query.
        let queried = unsafe {
            calls::csr_set_pointers(g.c, dptr(offsets)?, dptr(&indices)?, dptr(&values)?)
                .and_then(|()| calls::reuse_copy(g, &mut size5, std::ptr::null_mut()))
        };
        if let Err(e) = queried {
            retire(&self.op, objects);
            return Err(e);
        }
        let buf5: GpuRef<u8> = dev.alloc_scratch(stream, size5.max(1))?;
        let mut rec = self.op.recorder("spgemm_reuse.copy");
        record_factors(&mut rec, setup.a, setup.b)?;
        record(&mut rec, "nnz buffer 3", &bufs[1], Access::ReadWrite)?;
        record(&mut rec, "nnz buffer 4", &bufs[2], Access::ReadWrite)?;
        record(&mut rec, "copy buffer", &buf5, Access::ReadWrite)?;
        record(&mut rec, "c.offsets", offsets, Access::ReadWrite)?;
        record(&mut rec, "c.indices", &indices, Access::Write)?;
        record(&mut rec, "c.values", &values, Access::Write)?;
        let p5 = buf5.raw_device_ptr()? as *mut std::ffi::c_void;
        let copied = self.op.run(rec, Vec::new(), || {
            setup.inputs.check()?;
            // SAFETY: as above; the nnz phase ran with its buffers, still live and recorded, on
            // the factors' structure this phase sees (checked just above, under this launch's
            // marks), which sized C.
            unsafe { calls::reuse_copy(g, &mut size5, p5) }
        });
        if let Err(e) = copied {
            retire(&self.op, objects);
            return Err(e);
        }
        // The first compute waits for the copy on the stream (it reads C's structure).
        drop(copied);
        Ok((objects, c, buf5))
    }

    /// Recomputes `C = alpha A B + beta C` into `plan.c()`'s values from `A` and `B`'s current
    /// values (their structure must be the one the plan was made for) and, unless `beta` is
    /// zero, `C`'s own (those of the last compute, or what was written into `plan.c()`'s values
    /// since: before the first compute they are unset, so pass a zero `beta` there). One
    /// asynchronous enqueue; call it on the [`Sparse`] state (the stream) that made the plan.
    ///
    /// A write of `A`'s, `B`'s or `C`'s offsets or indices committed since the setup (by any
    /// thread, on any stream) fails it with [`Error::InputChanged`] naming the array, with
    /// nothing enqueued: the plan's buffers were sized for the structure the setup saw. Set
    /// the plan up again after changing a structure.
    pub fn spgemm_reuse_compute<T: SparseValue, I: SparseIndex>(
        &mut self,
        plan: &SpGemmReuse<T, I>,
        alpha: T,
        beta: T,
    ) -> Result<Completion<()>> {
        let Some(state) = self.reuses.iter().find(|r| r.id == plan.id) else {
            return Err(Error::invalid(
                "plan",
                format!("was made on {}; compute it with the Sparse state of that stream", plan.stream),
            ));
        };
        let lib = state.lib.as_ref().map(|l| {
            let parts = (l.mats[0].get(), l.mats[1].get(), l.mats[2].get(), l.descr.get());
            (parts, l.buffers.clone())
        });
        let structure = state.structure.clone();
        let (a, b, c) = (&plan.a, &plan.b, &plan.c);
        let mut rec = self.op.recorder("spgemm_reuse.compute");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record_matrix(&mut rec, ["b.offsets", "b.indices", "b.values"], b)?;
        record(&mut rec, "c.offsets", &c.major, Access::Read)?;
        record(&mut rec, "c.indices", &c.minor, Access::Read)?;
        record(&mut rec, "c.values", &c.values, output_access(beta))?;
        let Some(((ma, mb, mc, d), buffers)) = lib else {
            return self.sim_spgemm_values(rec, alpha, beta, [a, b, c], &structure);
        };
        let g = calls::Reuse { h: self.handle()?, a: ma, b: mb, c: mc, d };
        record(&mut rec, "nnz buffer 4", &buffers[0], Access::ReadWrite)?;
        record(&mut rec, "copy buffer", &buffers[1], Access::ReadWrite)?;
        let sc = HostScalars::new(alpha, beta);
        let done = self.op.run(rec, Vec::new(), || {
            structure.check()?;
            // SAFETY: (1) a live handle; (2) the plan's own descriptors point at A, B and C's
            // live buffers, recorded on this op (C's values as read too when `beta` is not
            // zero); (3) host scalars of T, 16-byte aligned (`HostScalars`); (4) the copy phase
            // ran (earlier on this stream) and its buffers live with the plan; (5) A's, B's and
            // C's offsets and indices are those the setup sized the plan's buffers and C from:
            // none was written since (checked just above, under this launch's marks, which no
            // write can pass until it commits).
            unsafe { calls::reuse_compute(g, sc.raw()) }
        });
        self.trim();
        done
    }
}
