//! GEMM: single, strided-batched, and batched over arrays of buffers.

use super::calls::{self, GemmShape};
use super::sim::{self, Scalar as _, Z};
use super::{output_access, Blas, GemmElement, Transpose};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::validate::{self as check, Matrix};
use crate::libs::{dptr, record, OpStream};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ffi::c_void;

/// `C = alpha op(A) op(B) + beta C`, with `op(A)` `m x k`, `op(B)` `k x n` and `C` `m x n`.
///
/// ```no_run
/// # use cusched::{Device, Handles};
/// # use cusched::blas::Gemm;
/// # let device = Device::open(0)?; let s = device.new_stream()?;
/// # let (a, b, c) = (device.alloc_zeros::<f32>(s, 6)?, device.alloc_zeros::<f32>(s, 12)?, device.alloc_zeros::<f32>(s, 8)?);
/// let mut h = Handles::new(&device, s)?;
/// // C (2x4) = A (2x3) · B (3x4)
/// h.blas()?.gemm(&Gemm::new(2, 4, 3, &a, &b, &c))?.wait()?;
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Debug)]
pub struct Gemm<'a, T: GemmElement> {
    /// Whether `A` is transposed.
    pub trans_a: Transpose,
    /// Whether `B` is transposed.
    pub trans_b: Transpose,
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product.
    pub alpha: T::Scalar,
    /// Scale of `C`'s old contents (zero: `C` is only written).
    pub beta: T::Scalar,
    /// `A`, stored `m x k` (or `k x m` when transposed).
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`, stored `k x n` (or `n x k` when transposed).
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `C`, `m x n`.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

impl<'a, T: GemmElement> Gemm<'a, T> {
    /// `C = A B` with packed operands, no transposes.
    pub fn new(m: usize, n: usize, k: usize, a: &'a GpuRef<T>, b: &'a GpuRef<T>, c: &'a GpuRef<T>) -> Self {
        Gemm {
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            m,
            n,
            k,
            alpha: T::Scalar::from_z(Z::real(1.0)),
            beta: T::Scalar::from_z(Z::default()),
            a,
            lda: None,
            b,
            ldb: None,
            c,
            ldc: None,
        }
    }
}

impl<T: GemmElement> Gemm<'_, T> {
    /// Sets `alpha` and `beta`.
    pub fn scale(mut self, alpha: T::Scalar, beta: T::Scalar) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    /// Sets the transposes of `A` and `B`.
    pub fn transpose(mut self, a: Transpose, b: Transpose) -> Self {
        self.trans_a = a;
        self.trans_b = b;
        self
    }

    /// Sets the leading dimensions.
    pub fn leading(mut self, lda: usize, ldb: usize, ldc: usize) -> Self {
        (self.lda, self.ldb, self.ldc) = (Some(lda), Some(ldb), Some(ldc));
        self
    }
}

/// A GEMM's checked arguments: the shape cuBLAS takes, and the elements each operand spans.
struct Checked {
    shape: GemmShape,
    spans: [usize; 3],
}

/// The checked shape as the simulator's kernels take it (the leading dimensions are positive).
fn sim_shape(s: &GemmShape) -> sim::Shape {
    let us = |v: i32| v as usize;
    sim::Shape {
        m: us(s.m),
        n: us(s.n),
        k: us(s.k),
        a: sim::Mat { ld: us(s.lda), trans: s.trans_a },
        b: sim::Mat { ld: us(s.ldb), trans: s.trans_b },
        ldc: us(s.ldc),
    }
}

impl<T: GemmElement> Gemm<'_, T> {
    fn check(&self) -> Result<Checked> {
        let (m, n, k) =
            (check::dim("m", self.m, false)?, check::dim("n", self.n, false)?, check::dim("k", self.k, false)?);
        let (ar, ac) = self.trans_a.stored(self.m, self.k);
        let (br, bc) = self.trans_b.stored(self.k, self.n);
        let a: Matrix = check::matrix("a", "lda", ar, ac, self.lda)?;
        let b = check::matrix("b", "ldb", br, bc, self.ldb)?;
        let c = check::matrix("c", "ldc", self.m, self.n, self.ldc)?;
        let shape =
            GemmShape { trans_a: self.trans_a, trans_b: self.trans_b, m, n, k, lda: a.ld, ldb: b.ld, ldc: c.ld };
        Ok(Checked { shape, spans: [a.span, b.span, c.span] })
    }

    /// A recorder with the GEMM's three uses.
    fn recorder(&self, op: &OpStream, name: &'static str) -> Result<LaunchRecorder> {
        let mut rec = op.recorder(name);
        record(&mut rec, "a", self.a, Access::Read)?;
        record(&mut rec, "b", self.b, Access::Read)?;
        record(&mut rec, "c", self.c, output_access(self.beta))?;
        Ok(rec)
    }

    fn check_buffers(&self, spans: [usize; 3], batch: &str) -> Result<()> {
        check::covers("a", self.a, Some(spans[0]), &format!("op(A) {}x{}{batch}", self.m, self.k))?;
        check::covers("b", self.b, Some(spans[1]), &format!("op(B) {}x{}{batch}", self.k, self.n))?;
        check::covers("c", self.c, Some(spans[2]), &format!("C {}x{}{batch}", self.m, self.n))?;
        if self.c.same_buffer(self.a) || self.c.same_buffer(self.b) {
            return Err(Error::invalid(
                "c",
                "must not be the same buffer as `a` or `b` (cuBLAS does not allow aliasing)",
            ));
        }
        Ok(())
    }

    /// The simulator's form of the GEMM: `count` GEMMs over matrices `strides` elements apart,
    /// computed from copies of the inputs (so that no two buffers are locked at once), into C.
    fn sim_kernel(&self, shape: &GemmShape, count: usize, strides: [usize; 3]) -> Result<impl FnOnce() + Send> {
        let (am, bm, cm) = (self.a.sim_data()?, self.b.sim_data()?, self.c.sim_data()?);
        let s = sim_shape(shape);
        let (alpha, beta) = (self.alpha.z(), self.beta.z());
        Ok(move || {
            let a = am.read().to_vec();
            let b = bm.read().to_vec();
            let mut c = cm.lock();
            let [sa, sb, sc] = strides;
            for i in 0..count {
                T::gemm(&s, alpha, &a[i * sa..], &b[i * sb..], beta, &mut c[i * sc..]);
            }
        })
    }

    fn scalars(&self) -> (Aligned<T::Scalar>, Aligned<T::Scalar>) {
        (Aligned(self.alpha), Aligned(self.beta))
    }
}

/// A host scalar as cuBLAS reads it: `Complex<f32>` is only 4-byte aligned, `cuComplex` 8.
#[repr(C, align(16))]
struct Aligned<S>(S);

impl<S> Aligned<S> {
    fn ptr(&self) -> *const c_void {
        (&self.0 as *const S).cast()
    }
}

/// Element strides between consecutive matrices of a strided-batched GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchStrides {
    /// How many GEMMs.
    pub count: usize,
    /// Stride of `A` (zero: every GEMM reads the same `A`); `None`: packed.
    pub a: Option<usize>,
    /// Stride of `B` (zero allowed, as for `a`); `None`: packed.
    pub b: Option<usize>,
    /// Stride of `C`; at least the span of one `C`, so that no two GEMMs write the same element.
    pub c: Option<usize>,
}

impl BatchStrides {
    /// `count` GEMMs over matrices packed one after another.
    pub fn packed(count: usize) -> Self {
        BatchStrides { count, a: None, b: None, c: None }
    }
}

/// `C[i] = alpha op(A[i]) op(B[i]) + beta C[i]` over arrays of buffers sharing one shape.
#[derive(Debug)]
pub struct GemmBatched<'a, T: GemmElement> {
    /// Whether each `A` is transposed.
    pub trans_a: Transpose,
    /// Whether each `B` is transposed.
    pub trans_b: Transpose,
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the products.
    pub alpha: T::Scalar,
    /// Scale of each `C`'s old contents.
    pub beta: T::Scalar,
    /// The `A` matrices (packed).
    pub a: &'a [GpuRef<T>],
    /// The `B` matrices (packed).
    pub b: &'a [GpuRef<T>],
    /// The `C` matrices (packed), all distinct, none of them any entry's `A` or `B`.
    pub c: &'a [GpuRef<T>],
}

impl Blas {
    /// `C = alpha op(A) op(B) + beta C` (see [`Gemm`]).
    pub fn gemm<T: GemmElement>(&mut self, g: &Gemm<'_, T>) -> Result<Completion<()>> {
        let d = g.check()?;
        g.check_buffers(d.spans, "")?;
        let rec = g.recorder(&self.op, "gemm")?;
        if self.op.device.is_simulated() {
            return self.op.run_sim(rec, Vec::new(), g.sim_kernel(&d.shape, 1, [0; 3])?);
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            let (alpha, beta) = g.scalars();
            let (alpha, beta) = (alpha.ptr(), beta.ptr());
            // SAFETY: (1) a live handle on the recorder's stream, fenced by preflight; (2) the
            // buffers cover the spans checked above; (3) `c` is distinct from `a` and `b`
            // (checked); (4) alpha and beta are host scalars of the compute type.
            unsafe {
                calls::gemm_ex::<T>(
                    h,
                    &d.shape,
                    alpha,
                    dptr::<T, c_void>(g.a)?,
                    dptr::<T, c_void>(g.b)?,
                    beta,
                    dptr::<T, c_void>(g.c)?,
                )
            }
        })
    }

    /// `batch.count` GEMMs over matrices `stride` elements apart in `g.a`, `g.b` and `g.c`.
    pub fn gemm_strided_batched<T: GemmElement>(
        &mut self,
        g: &Gemm<'_, T>,
        batch: BatchStrides,
    ) -> Result<Completion<()>> {
        let d = g.check()?;
        let count = check::dim("batch.count", batch.count, false)?;
        let sa = batch.a.unwrap_or(d.spans[0]);
        let sb = batch.b.unwrap_or(d.spans[1]);
        let sc = batch.c.unwrap_or(d.spans[2]);
        if batch.count > 1 && sc < d.spans[2] {
            return Err(Error::invalid(
                "batch.c",
                format!(
                    "stride {sc} is below one C's span of {} elements: GEMMs would overwrite each other",
                    d.spans[2]
                ),
            ));
        }
        let total = |arg: &'static str, stride: usize, span: usize| -> Result<usize> {
            stride
                .checked_mul(batch.count - 1)
                .and_then(|x| x.checked_add(span))
                .ok_or_else(|| Error::invalid(arg, format!("stride {stride} times {} overflows", batch.count)))
        };
        let spans =
            [total("batch.a", sa, d.spans[0])?, total("batch.b", sb, d.spans[1])?, total("batch.c", sc, d.spans[2])?];
        g.check_buffers(spans, &format!(" x {} strided", batch.count))?;
        let strides = [sa, sb, sc].map(|s| s as i64);
        let rec = g.recorder(&self.op, "gemm_strided_batched")?;
        if self.op.device.is_simulated() {
            return self.op.run_sim(rec, Vec::new(), g.sim_kernel(&d.shape, batch.count, [sa, sb, sc])?);
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            let (alpha, beta) = g.scalars();
            let (alpha, beta) = (alpha.ptr(), beta.ptr());
            // SAFETY: as in `gemm`; every one of the `count` matrices lies inside its buffer (the
            // last starts at `stride * (count - 1)` and the buffers cover that plus one span),
            // and C's stride is at least one C's span.
            unsafe {
                calls::gemm_strided_batched_ex::<T>(
                    h,
                    &d.shape,
                    alpha,
                    dptr::<T, c_void>(g.a)?,
                    dptr::<T, c_void>(g.b)?,
                    beta,
                    dptr::<T, c_void>(g.c)?,
                    strides,
                    count,
                )
            }
        })
    }

    /// One GEMM per entry of `g.a`, `g.b`, `g.c` (packed operands of one shape). The arrays of
    /// device pointers are uploaded on the stream and freed after the GPU is done.
    pub fn gemm_batched<T: GemmElement>(&mut self, g: &GemmBatched<'_, T>) -> Result<Completion<()>> {
        let count = check::dim("a", g.a.len(), false)?;
        if g.b.len() != g.a.len() || g.c.len() != g.a.len() {
            return Err(Error::invalid(
                "c",
                format!("a, b and c must hold as many matrices: {}, {}, {}", g.a.len(), g.b.len(), g.c.len()),
            ));
        }
        let first = Gemm {
            trans_a: g.trans_a,
            trans_b: g.trans_b,
            m: g.m,
            n: g.n,
            k: g.k,
            alpha: g.alpha,
            beta: g.beta,
            a: &g.a[0],
            lda: None,
            b: &g.b[0],
            ldb: None,
            c: &g.c[0],
            ldc: None,
        };
        let d = first.check()?;
        let mut rec = self.op.recorder("gemm_batched");
        for i in 0..g.a.len() {
            let one = Gemm { a: &g.a[i], b: &g.b[i], c: &g.c[i], ..first };
            one.check_buffers(d.spans, &format!(" (entry {i})"))?;
            if g.c[..i].iter().any(|c| c.same_buffer(&g.c[i])) {
                return Err(Error::invalid("c", format!("entry {i} repeats an earlier C: the GEMMs would race")));
            }
            // The GEMMs run concurrently: a C that is any entry's A or B is read by one while
            // another writes it.
            for (arg, inputs) in [("a", g.a), ("b", g.b)] {
                if let Some(j) = inputs.iter().position(|x| x.same_buffer(&g.c[i])) {
                    return Err(Error::invalid(
                        "c",
                        format!("c[{i}] is the same buffer as {arg}[{j}]: one GEMM would read what another writes"),
                    ));
                }
            }
            record(&mut rec, "a", &g.a[i], Access::Read)?;
            record(&mut rec, "b", &g.b[i], Access::Read)?;
            record(&mut rec, "c", &g.c[i], output_access(g.beta))?;
        }
        if self.op.device.is_simulated() {
            // No pointer arrays: the host computation takes the buffers themselves.
            let kernels = (0..g.a.len())
                .map(|i| Gemm { a: &g.a[i], b: &g.b[i], c: &g.c[i], ..first }.sim_kernel(&d.shape, 1, [0; 3]))
                .collect::<Result<Vec<_>>>()?;
            return self.op.run_sim(rec, Vec::new(), move || kernels.into_iter().for_each(|k| k()));
        }
        let h = self.handle()?;
        let _ = self.op.cuda_stream()?;
        let ptrs = |bufs: &[GpuRef<T>]| bufs.iter().map(|b| b.raw_device_ptr()).collect::<Result<Vec<u64>>>();
        let (pa, pb, pc) = (ptrs(g.a)?, ptrs(g.b)?, ptrs(g.c)?);
        // The pointer arrays are tracked buffers like any other: uploaded on this stream, read by
        // the GEMM, freed after it; scratch, since no caller sees them to declare them.
        let device = &self.op.device;
        let (da, db, dc) = (
            device.upload_scratch(self.op.stream, &pa)?,
            device.upload_scratch(self.op.stream, &pb)?,
            device.upload_scratch(self.op.stream, &pc)?,
        );
        for (arg, p) in [("a", &da), ("b", &db), ("c", &dc)] {
            record(&mut rec, arg, p, Access::Read)?;
        }
        let (aa, ab, ac) =
            (dptr::<u64, *const c_void>(&da)?, dptr::<u64, *const c_void>(&db)?, dptr::<u64, *mut c_void>(&dc)?);
        let (alpha, beta) = first.scalars();
        let shape = d.shape;
        self.op.run(rec, vec![Box::new((da, db, dc))], || {
            let (alpha, beta) = (alpha.ptr(), beta.ptr());
            // SAFETY: the three device arrays hold `count` pointers each, to live buffers that
            // cover one packed matrix of their shape (checked per entry above); every C is
            // distinct; alpha and beta are host scalars of the compute type.
            unsafe { calls::gemm_batched_ex::<T>(h, &shape, alpha, aa, ab, beta, ac, count) }
        })
    }
}

/// One group of a grouped batched GEMM: `C[i] = alpha op(A[i]) op(B[i]) + beta C[i]` for every
/// entry of `a`, `b`, `c` (packed operands of this group's shape). Groups differ in shape,
/// transposes and scalars.
#[derive(Debug)]
pub struct GemmGroup<'a, T: GroupedElement> {
    /// Whether each `A` is transposed.
    pub trans_a: Transpose,
    /// Whether each `B` is transposed.
    pub trans_b: Transpose,
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the products.
    pub alpha: f32,
    /// Scale of each `C`'s old contents.
    pub beta: f32,
    /// The `A` matrices.
    pub a: &'a [GpuRef<T>],
    /// The `B` matrices.
    pub b: &'a [GpuRef<T>],
    /// The `C` matrices: distinct over every group, none of them any group's `A` or `B`.
    pub c: &'a [GpuRef<T>],
}

/// The element types of [`Blas::gemm_grouped_batched`] (computed in f32): `f32`, `half::f16`,
/// `half::bf16`.
pub trait GroupedElement: GemmElement<Scalar = f32> {}
impl GroupedElement for f32 {}
impl GroupedElement for half::f16 {}
impl GroupedElement for half::bf16 {}

impl Blas {
    /// A grouped batched GEMM (`cublasGemmGroupedBatchedEx`): every problem of every group
    /// (see [`GemmGroup`]) in one call, accumulated in f32. The arrays of device pointers are
    /// uploaded on the stream and freed after the GPU is done.
    pub fn gemm_grouped_batched<T: GroupedElement>(&mut self, groups: &[GemmGroup<'_, T>]) -> Result<Completion<()>> {
        check::dim("groups", groups.len(), false)?;
        let mut rec = self.op.recorder("gemm_grouped_batched");
        let mut params = calls::GroupParams::default();
        let mut problems: Vec<(Gemm<'_, T>, GemmShape)> = Vec::new();
        let all_c: Vec<&GpuRef<T>> = groups.iter().flat_map(|g| g.c.iter()).collect();
        for (gi, g) in groups.iter().enumerate() {
            let size = check::dim("groups", g.a.len(), false)
                .map_err(|_| Error::invalid("groups", format!("group {gi} has no problems")))?;
            if g.b.len() != g.a.len() || g.c.len() != g.a.len() {
                return Err(Error::invalid(
                    "groups",
                    format!(
                        "group {gi}: a, b and c must hold as many matrices: {}, {}, {}",
                        g.a.len(),
                        g.b.len(),
                        g.c.len()
                    ),
                ));
            }
            let first = Gemm {
                trans_a: g.trans_a,
                trans_b: g.trans_b,
                m: g.m,
                n: g.n,
                k: g.k,
                alpha: g.alpha,
                beta: g.beta,
                a: &g.a[0],
                lda: None,
                b: &g.b[0],
                ldb: None,
                c: &g.c[0],
                ldc: None,
            };
            let d = first.check().map_err(|e| in_group(e, gi))?;
            for i in 0..g.a.len() {
                let one = Gemm { a: &g.a[i], b: &g.b[i], c: &g.c[i], ..first };
                one.check_buffers(d.spans, &format!(" (group {gi}, entry {i})"))?;
                record(&mut rec, "a", &g.a[i], Access::Read)?;
                record(&mut rec, "b", &g.b[i], Access::Read)?;
                record(&mut rec, "c", &g.c[i], output_access(g.beta))?;
                problems.push((one, GemmShape { ..d.shape }));
            }
            params.push(&d.shape, g.alpha, g.beta, size);
        }
        // Every GEMM runs concurrently: no C may be another's C, A or B.
        for (i, c) in all_c.iter().enumerate() {
            if all_c[..i].iter().any(|x| x.same_buffer(c)) {
                return Err(Error::invalid(
                    "groups",
                    format!("C number {i} repeats an earlier C: the GEMMs would race"),
                ));
            }
            if groups.iter().any(|g| g.a.iter().chain(g.b.iter()).any(|x| x.same_buffer(c))) {
                return Err(Error::invalid(
                    "groups",
                    format!("C number {i} is also an A or B: one GEMM would read what another writes"),
                ));
            }
        }
        if self.op.device.is_simulated() {
            let kernels = problems.iter().map(|(g, s)| g.sim_kernel(s, 1, [0; 3])).collect::<Result<Vec<_>>>()?;
            return self.op.run_sim(rec, Vec::new(), move || kernels.into_iter().for_each(|k| k()));
        }
        let h = self.handle()?;
        let _ = self.op.cuda_stream()?;
        let ptrs = |pick: usize| {
            problems.iter().map(|(g, _)| [g.a, g.b, g.c][pick].raw_device_ptr()).collect::<Result<Vec<u64>>>()
        };
        let (pa, pb, pc) = (ptrs(0)?, ptrs(1)?, ptrs(2)?);
        let device = &self.op.device;
        let (da, db, dc) = (
            device.upload_scratch(self.op.stream, &pa)?,
            device.upload_scratch(self.op.stream, &pb)?,
            device.upload_scratch(self.op.stream, &pc)?,
        );
        for (arg, p) in [("a", &da), ("b", &db), ("c", &dc)] {
            record(&mut rec, arg, p, Access::Read)?;
        }
        let (aa, ab, ac) =
            (dptr::<u64, *const c_void>(&da)?, dptr::<u64, *const c_void>(&db)?, dptr::<u64, *mut c_void>(&dc)?);
        self.op.run(rec, vec![Box::new((da, db, dc))], || {
            // SAFETY: (1) a live handle, fenced by preflight; (2) the device arrays hold one
            // pointer per problem, in the groups' order, to live buffers covering that problem's
            // packed operands (checked per entry above); (3) every C is distinct and no A or B
            // (checked); (4) `params` has one entry per group in every array.
            unsafe { calls::gemm_grouped_batched_ex::<T>(h, &params, aa, ab, ac) }
        })
    }
}

/// A group's shape error, with the group named (the argument stays the field's name).
fn in_group(e: Error, group: usize) -> Error {
    match e {
        Error::InvalidArgument { arg, reason } => {
            Error::InvalidArgument { arg, reason: format!("group {group}: {reason}") }
        }
        other => other,
    }
}
