//! The simulator's form of every cuSPARSE op: the op computed on the host, in plain loops, from
//! the simulated memory of the buffers the op declared, run as a simulated kernel on the op's
//! stream (so the hazard checker sees its accesses against the declared uses).
//!
//! The semantics are cuSPARSE's: `alpha` / `beta` (an output with `beta` zero is written, never
//! read), transposes (plain, not conjugate, for complex values), column-major dense operands
//! with their leading dimensions, zero-based indices, BSR blocks stored row-major, Blocked-ELL's
//! `-1` empty blocks, the fill mode and diagonal type of triangular solves (no pivot check: a
//! zero on the diagonal gives infinities or NaNs, as on the GPU), and the sorted column indices
//! of the products SpGEMM makes. A structure that indexes outside the matrix (which cuSPARSE
//! would read out of bounds) fails the op's completion with `InvalidArgument`, not a panic.
//!
//! Ops whose output structure is known only once computed (SpGEMM, its reusable form,
//! dense → CSR) keep the GPU path's phases: the counting phase runs on the stream, the host
//! waits for it, sizes and allocates the output, and enqueues the phase that fills it.

use super::matrix::IndexArith;
use super::Triangle;
use super::{DenseMatrix, Fill, Format, Sparse, SparseIndex, SparseMatrix, SparseValue, SparseVector, Transpose};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::memory::{GpuRef, SimMem};
use crate::recorder::LaunchRecorder;

/// The error of a structure that points outside its matrix or vector.
fn malformed(arg: &'static str, what: String) -> Error {
    Error::invalid(
        arg,
        format!("{what}: the structure is malformed (find where with SparseMatrix::check or SparseVector::check)"),
    )
}

/// `v` as an index below `bound`, else the malformed-structure error naming `arg`.
fn at<I: SparseIndex>(arg: &'static str, v: I, bound: usize) -> Result<usize> {
    let x = v.to_i64();
    if x < 0 || x as u64 >= bound as u64 {
        return Err(malformed(arg, format!("index {x} is outside 0..{bound}")));
    }
    Ok(x as usize)
}

/// The range `offsets[i]..offsets[i + 1]`, checked to lie within `0..=nnz`.
fn span<I: SparseIndex>(arg: &'static str, offsets: &[I], i: usize, nnz: usize) -> Result<std::ops::Range<usize>> {
    let (lo, hi) = (offsets[i].to_i64(), offsets[i + 1].to_i64());
    if lo < 0 || hi < lo || hi as u64 > nnz as u64 {
        return Err(malformed(arg, format!("offsets {lo}..{hi} (entry {i}) are not within 0..={nnz}")));
    }
    Ok(lo as usize..hi as usize)
}

/// `alpha v + beta old`, with `old` not read when `beta` is zero (a NaN there stays out).
fn blend<T: SparseValue>(alpha: T, v: T, beta: T, old: impl FnOnce() -> T) -> T {
    let av = alpha.times(v);
    if beta.is_zero() {
        av
    } else {
        av.plus(beta.times(old()))
    }
}

/// A sparse matrix's shape and the simulated memory of its buffers, moved into a kernel.
pub(super) struct HostMat<T: SparseValue, I: SparseIndex> {
    format: Format,
    rows: usize,
    cols: usize,
    nnz: usize,
    block: usize,
    major: SimMem<I>,
    /// `None` where the matrix keeps one index array in both slots (Blocked-ELL).
    minor: Option<SimMem<I>>,
    values: SimMem<T>,
}

impl<T: SparseValue, I: SparseIndex> HostMat<T, I> {
    pub(super) fn of(a: &SparseMatrix<T, I>) -> Result<Self> {
        let same = a.major.id() == a.minor.id();
        Ok(HostMat {
            format: a.format,
            rows: a.rows,
            cols: a.cols,
            nnz: a.nnz,
            block: a.block,
            major: a.major.sim_data()?,
            minor: if same { None } else { Some(a.minor.sim_data()?) },
            values: a.values.sim_data()?,
        })
    }

    /// Copies of the index arrays and values (each read once, its lock released at once, so a
    /// buffer the op also takes elsewhere is never locked twice).
    fn arrays(&self) -> (Vec<I>, Vec<I>, Vec<T>) {
        let major = self.major.read().to_vec();
        let minor = match &self.minor {
            Some(m) => m.read().to_vec(),
            None => major.clone(),
        };
        (major, minor, self.values.read().to_vec())
    }

    /// The stored entries `(row, column, value)`, in storage order (duplicates kept).
    fn entries(&self) -> Result<Vec<(usize, usize, T)>> {
        let (major, minor, values) = self.arrays();
        let (rows, cols, nnz) = (self.rows, self.cols, self.nnz);
        let mut out = Vec::with_capacity(nnz);
        match self.format {
            Format::Csr => {
                for r in 0..rows {
                    for p in span("a.offsets", &major, r, nnz)? {
                        out.push((r, at("a.indices", minor[p], cols)?, values[p]));
                    }
                }
            }
            Format::Csc => {
                for c in 0..cols {
                    for p in span("a.offsets", &major, c, nnz)? {
                        out.push((at("a.indices", minor[p], rows)?, c, values[p]));
                    }
                }
            }
            Format::Coo => {
                for p in 0..nnz {
                    out.push((at("a.row_indices", major[p], rows)?, at("a.col_indices", minor[p], cols)?, values[p]));
                }
            }
            Format::Bsr => {
                let b = self.block;
                for br in 0..rows / b {
                    for p in span("a.offsets", &major, br, nnz)? {
                        let bc = at("a.indices", minor[p], cols / b)?;
                        for r in 0..b {
                            for c in 0..b {
                                out.push((br * b + r, bc * b + c, values[(p * b + r) * b + c]));
                            }
                        }
                    }
                }
            }
            Format::BlockedEll => {
                // `nnz` holds the value array's columns.
                let (b, ell) = (self.block, self.nnz);
                let per_row = ell / b;
                for br in 0..rows / b {
                    for e in 0..per_row {
                        let raw = minor[br * per_row + e];
                        if raw.to_i64() == -1 {
                            continue;
                        }
                        let bc = at("a.col_indices", raw, cols / b)?;
                        for r in 0..b {
                            for c in 0..b {
                                out.push((br * b + r, bc * b + c, values[(br * b + r) * ell + e * b + c]));
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The CSR arrays as row spans, column indices and values, checked.
    fn csr(&self, arg: [&'static str; 2]) -> Result<Rows<T>> {
        let (major, minor, values) = self.arrays();
        let spans = (0..self.rows).map(|r| span(arg[0], &major, r, self.nnz)).collect::<Result<Vec<_>>>()?;
        let cols = minor[..self.nnz].iter().map(|&c| at(arg[1], c, self.cols)).collect::<Result<Vec<_>>>()?;
        Ok((spans, cols, values))
    }
}

/// A CSR matrix's rows (spans into the arrays), column indices and values.
type Rows<T> = (Vec<std::ops::Range<usize>>, Vec<usize>, Vec<T>);

/// A dense column-major view, moved into a kernel.
struct HostDense<T: SparseValue> {
    mem: SimMem<T>,
    rows: usize,
    cols: usize,
    ld: usize,
}

impl<T: SparseValue> HostDense<T> {
    fn of(m: &DenseMatrix<'_, T>, ld: i64) -> Result<Self> {
        Ok(HostDense { mem: m.buf.sim_data()?, rows: m.rows, cols: m.cols, ld: ld as usize })
    }
}

/// `C = alpha A B` for CSR factors: `C`'s row offsets, sorted column indices and values. Every
/// structural product is kept, whatever its value (cuSPARSE's structure is symbolic).
type Product<T> = (Vec<usize>, Vec<usize>, Vec<T>);

fn product<T: SparseValue>(alpha: T, a: &HostMat<T, i32>, b: &HostMat<T, i32>) -> Result<Product<T>> {
    let (ar, ac, av) = a.csr(["a.offsets", "a.indices"])?;
    let (br, bc, bv) = b.csr(["b.offsets", "b.indices"])?;
    let n = b.cols;
    let (mut mark, mut acc) = (vec![usize::MAX; n], vec![T::zero(); n]);
    let (mut offsets, mut cols, mut vals) = (vec![0usize], Vec::new(), Vec::new());
    let mut touched = Vec::new();
    for (i, row) in ar.iter().enumerate() {
        touched.clear();
        for p in row.clone() {
            let k = ac[p];
            for q in br[k].clone() {
                let j = bc[q];
                if mark[j] != i {
                    mark[j] = i;
                    acc[j] = T::zero();
                    touched.push(j);
                }
                acc[j] = acc[j].plus(av[p].times(bv[q]));
            }
        }
        touched.sort_unstable();
        for &j in &touched {
            cols.push(j);
            vals.push(alpha.times(acc[j]));
        }
        offsets.push(cols.len());
    }
    Ok((offsets, cols, vals))
}

/// The triangle a solve reads, as the rows of `op(A)`: its off-diagonal entries, its diagonal,
/// and whether `op(A)` is lower triangular (solved forward) or upper (backward).
struct Tri<T> {
    off: Vec<Vec<(usize, T)>>,
    diag: Vec<T>,
    lower: bool,
}

impl<T: SparseValue> Tri<T> {
    fn new(entries: Vec<(usize, usize, T)>, n: usize, tri: Triangle) -> Self {
        let trans = tri.transpose == Transpose::Yes;
        let mut diag = vec![if tri.unit_diagonal { T::one() } else { T::zero() }; n];
        let mut off = vec![Vec::new(); n];
        for (r, c, v) in entries {
            let kept = match tri.fill {
                Fill::Lower => c <= r,
                Fill::Upper => c >= r,
            };
            if !kept {
                continue;
            }
            if r == c {
                if !tri.unit_diagonal {
                    diag[r] = diag[r].plus(v);
                }
                continue;
            }
            let (i, j) = if trans { (c, r) } else { (r, c) };
            off[i].push((j, v));
        }
        Tri { off, diag, lower: (tri.fill == Fill::Lower) != trans }
    }

    /// Solves `op(A) y = alpha b` for one right-hand side: `b(i)` its entries, `y(i)` the
    /// solution's slots.
    fn solve(&self, alpha: T, b: impl Fn(usize) -> T, y: &mut [T], at: impl Fn(usize) -> usize) {
        let n = self.diag.len();
        let mut step = |i: usize| {
            let mut s = alpha.times(b(i));
            for &(j, v) in &self.off[i] {
                s = s.minus(v.times(y[at(j)]));
            }
            y[at(i)] = s.over(self.diag[i]);
        };
        if self.lower {
            (0..n).for_each(&mut step);
        } else {
            (0..n).rev().for_each(&mut step);
        }
    }
}

impl Sparse {
    /// Runs `kernel` as the op's simulated kernel under `rec`'s uses: the completion resolves
    /// with its value, or fails with its error.
    fn host<R: Send + 'static>(
        &mut self,
        rec: LaunchRecorder,
        kernel: impl FnOnce() -> Result<R> + Send + 'static,
    ) -> Result<Completion<R>> {
        let done = self.op.run_sim(rec, Vec::new(), kernel).map(|c| c.try_map(|r| r));
        self.trim();
        done
    }

    /// Whether the ops compute on the host (the device is simulated).
    pub(super) fn simulated(&self) -> bool {
        self.op.device.is_simulated()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn sim_spmv<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        op_a: Transpose,
        alpha: T,
        a: &SparseMatrix<T, I>,
        x: &GpuRef<T>,
        beta: T,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let (am, xm, ym) = (HostMat::of(a)?, x.sim_data()?, y.sim_data()?);
        let m = if op_a == Transpose::Yes { a.cols } else { a.rows };
        self.host(rec, move || {
            let e = am.entries()?;
            let x = xm.read().to_vec();
            let mut acc = vec![T::zero(); m];
            for (r, c, v) in e {
                let (i, j) = if op_a == Transpose::Yes { (c, r) } else { (r, c) };
                acc[i] = acc[i].plus(v.times(x[j]));
            }
            let mut y = ym.lock();
            for (i, s) in acc.into_iter().enumerate() {
                y[i] = blend(alpha, s, beta, || y[i]);
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn sim_spmm<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        op_a: Transpose,
        alpha: T,
        a: &SparseMatrix<T, I>,
        (b, ldb): (DenseMatrix<'_, T>, i64),
        beta: T,
        (c, ldc): (DenseMatrix<'_, T>, i64),
    ) -> Result<Completion<()>> {
        let (am, bm, cm) = (HostMat::of(a)?, HostDense::of(&b, ldb)?, HostDense::of(&c, ldc)?);
        self.host(rec, move || {
            let e = am.entries()?;
            let b = bm.mem.read().to_vec();
            let (m, n) = (cm.rows, cm.cols);
            let mut acc = vec![T::zero(); m * n];
            for (r, col, v) in e {
                let (i, l) = if op_a == Transpose::Yes { (col, r) } else { (r, col) };
                for j in 0..n {
                    acc[i + j * m] = acc[i + j * m].plus(v.times(b[l + j * bm.ld]));
                }
            }
            let mut out = cm.mem.lock();
            for j in 0..n {
                for i in 0..m {
                    let o = i + j * cm.ld;
                    out[o] = blend(alpha, acc[i + j * m], beta, || out[o]);
                }
            }
            Ok(())
        })
    }

    pub(super) fn sim_spsv<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        tri: Triangle,
        alpha: T,
        a: &SparseMatrix<T, I>,
        x: &GpuRef<T>,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let (am, xm, ym) = (HostMat::of(a)?, x.sim_data()?, y.sim_data()?);
        let n = a.rows;
        self.host(rec, move || {
            let t = Tri::new(am.entries()?, n, tri);
            let x = xm.read().to_vec();
            let mut y = ym.lock();
            t.solve(alpha, |i| x[i], &mut y, |i| i);
            Ok(())
        })
    }

    pub(super) fn sim_spsm<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        tri: Triangle,
        alpha: T,
        a: &SparseMatrix<T, I>,
        (b, ldb): (DenseMatrix<'_, T>, i64),
        (c, ldc): (DenseMatrix<'_, T>, i64),
    ) -> Result<Completion<()>> {
        let (am, bm, cm) = (HostMat::of(a)?, HostDense::of(&b, ldb)?, HostDense::of(&c, ldc)?);
        let n = a.rows;
        self.host(rec, move || {
            let t = Tri::new(am.entries()?, n, tri);
            let b = bm.mem.read().to_vec();
            let mut out = cm.mem.lock();
            for j in 0..cm.cols {
                let (bo, co) = (j * bm.ld, j * cm.ld);
                t.solve(alpha, |i| b[bo + i], &mut out, |i| co + i);
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn sim_sddmm<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        [op_a, op_b]: [Transpose; 2],
        alpha: T,
        (a, lda): (DenseMatrix<'_, T>, i64),
        (b, ldb): (DenseMatrix<'_, T>, i64),
        beta: T,
        c: &SparseMatrix<T, I>,
    ) -> Result<Completion<()>> {
        let (am, bm) = (HostDense::of(&a, lda)?, HostDense::of(&b, ldb)?);
        let k = if op_a == Transpose::Yes { a.rows } else { a.cols };
        let same = a.buf.id() == b.buf.id();
        let (c_off, c_idx, c_val) = (c.major.sim_data()?, c.minor.sim_data()?, c.values.sim_data()?);
        let (rows, cols, nnz) = (c.rows, c.cols, c.nnz);
        self.host(rec, move || {
            let av = am.mem.read().to_vec();
            let bv = if same { av.clone() } else { bm.mem.read().to_vec() };
            let offsets = c_off.read().to_vec();
            let idx = c_idx.read().to_vec();
            // op(A)[i, l] and op(B)[l, j] of the column-major operands.
            let ea = |i: usize, l: usize| if op_a == Transpose::Yes { av[l + i * am.ld] } else { av[i + l * am.ld] };
            let eb = |l: usize, j: usize| if op_b == Transpose::Yes { bv[j + l * bm.ld] } else { bv[l + j * bm.ld] };
            let mut out = c_val.lock();
            for i in 0..rows {
                for p in span("c.offsets", &offsets, i, nnz)? {
                    let j = at("c.indices", idx[p], cols)?;
                    let mut s = T::zero();
                    for l in 0..k {
                        s = s.plus(ea(i, l).times(eb(l, j)));
                    }
                    out[p] = blend(alpha, s, beta, || out[p]);
                }
            }
            Ok(())
        })
    }

    pub(super) fn sim_sparse_to_dense<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, I>,
        (out, ld): (DenseMatrix<'_, T>, i64),
    ) -> Result<Completion<()>> {
        let (am, om) = (HostMat::of(a)?, HostDense::of(&out, ld)?);
        self.host(rec, move || {
            let e = am.entries()?;
            let mut d = om.mem.lock();
            for j in 0..om.cols {
                d[j * om.ld..j * om.ld + om.rows].fill(T::zero());
            }
            for (r, c, v) in e {
                let o = r + c * om.ld;
                d[o] = d[o].plus(v);
            }
            Ok(())
        })
    }

    /// CSR ↔ CSC: the stored entries regrouped by the other dimension (stable, so indices come
    /// out sorted within each group), into `out`'s fresh buffers.
    pub(super) fn sim_convert_compressed<T: SparseValue>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, i32>,
        out: SparseMatrix<T, i32>,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        let am = HostMat::of(a)?;
        let (oo, oi, ov) = (out.major.sim_data()?, out.minor.sim_data()?, out.values.sim_data()?);
        // Groups of the output: its columns for CSC out, its rows for CSR out.
        let groups = if a.format == Format::Csr { a.cols } else { a.rows };
        self.host(rec, move || {
            let e = am.entries()?;
            let key = |&(r, c, _): &(usize, usize, T)| if am.format == Format::Csr { (c, r) } else { (r, c) };
            let mut counts = vec![0usize; groups + 1];
            for t in &e {
                counts[key(t).0 + 1] += 1;
            }
            for g in 0..groups {
                counts[g + 1] += counts[g];
            }
            let mut next = counts.clone();
            let (mut idx, mut val) = (vec![0i32; e.len()], vec![T::zero(); e.len()]);
            for t in &e {
                let (g, other) = key(t);
                idx[next[g]] = i32::from_usize(other);
                val[next[g]] = t.2;
                next[g] += 1;
            }
            for (d, s) in oo.lock().iter_mut().zip(&counts) {
                *d = i32::from_usize(*s);
            }
            oi.lock()[..idx.len()].copy_from_slice(&idx);
            ov.lock()[..val.len()].copy_from_slice(&val);
            Ok(out)
        })
    }

    /// Dense → CSR on the host, in the GPU path's two phases: the analysis counts the nonzeros
    /// into `offsets` (recorded on `rec`) and the host waits for the count; the output's arrays
    /// are then allocated and the conversion fills them.
    pub(super) fn sim_dense_to_csr<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        (dense, ld): (DenseMatrix<'_, T>, i64),
        offsets: GpuRef<I>,
    ) -> Result<Completion<SparseMatrix<T, I>>> {
        use crate::track::Access;
        let nnz = self.sim_dense_count(rec, (dense, ld), &offsets)?;
        let dev = self.op.device.clone();
        let indices: GpuRef<I> = dev.alloc(self.op.stream, nnz.max(1))?;
        let values: GpuRef<T> = dev.alloc(self.op.stream, nnz.max(1))?;
        let out = SparseMatrix::new(Format::Csr, dense.rows, dense.cols, nnz, &offsets, &indices, &values)?;
        let mut rec = self.op.recorder("dense_to_csr.convert");
        crate::libs::record(&mut rec, "dense", dense.buf, Access::Read)?;
        crate::libs::record(&mut rec, "out.offsets", &offsets, Access::ReadWrite)?;
        crate::libs::record(&mut rec, "out.indices", &indices, Access::Write)?;
        crate::libs::record(&mut rec, "out.values", &values, Access::Write)?;
        self.sim_dense_fill(rec, (dense, ld), out)
    }

    /// Dense → CSR's first phase: counts each row's nonzeros into `offsets` and returns the
    /// total, once the stream has run it (the host waits, as cuSPARSE's analysis makes it).
    fn sim_dense_count<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        (dense, ld): (DenseMatrix<'_, T>, i64),
        offsets: &GpuRef<I>,
    ) -> Result<usize> {
        let (dm, om) = (HostDense::of(&dense, ld)?, offsets.sim_data()?);
        self.host(rec, move || {
            let d = dm.mem.read().to_vec();
            let mut o = om.lock();
            let mut total = 0usize;
            o[0] = I::from_usize(0);
            for r in 0..dm.rows {
                total += (0..dm.cols).filter(|&c| !d[r + c * dm.ld].is_zero()).count();
                o[r + 1] = I::from_usize(total);
            }
            Ok(total)
        })?
        .wait()
    }

    /// Dense → CSR's second phase: the nonzeros, row by row, into `out`'s fresh arrays.
    fn sim_dense_fill<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        (dense, ld): (DenseMatrix<'_, T>, i64),
        out: SparseMatrix<T, I>,
    ) -> Result<Completion<SparseMatrix<T, I>>> {
        let dm = HostDense::of(&dense, ld)?;
        let (oi, ov) = (out.minor.sim_data()?, out.values.sim_data()?);
        let nnz = out.nnz;
        self.host(rec, move || {
            let d = dm.mem.read().to_vec();
            let (mut idx, mut val) = (oi.lock(), ov.lock());
            let mut p = 0;
            for r in 0..dm.rows {
                for c in 0..dm.cols {
                    let v = d[r + c * dm.ld];
                    if !v.is_zero() && p < nnz {
                        (idx[p], val[p]) = (I::from_usize(c), v);
                        p += 1;
                    }
                }
            }
            drop((idx, val));
            Ok(out)
        })
    }

    /// SpGEMM's phases on the host: the work estimation (a pass over the factors' structure),
    /// the compute phase (the product, which the host waits for to learn `C`'s nonzeros), then
    /// `C`'s arrays allocated and the copy phase that fills them.
    pub(super) fn sim_spgemm<T: SparseValue>(
        &mut self,
        rec: LaunchRecorder,
        alpha: T,
        a: &SparseMatrix<T, i32>,
        b: &SparseMatrix<T, i32>,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        let (am, bm) = (HostMat::of(a)?, HostMat::of(b)?);
        self.host(rec, move || {
            am.csr(["a.offsets", "a.indices"])?;
            bm.csr(["b.offsets", "b.indices"]).map(drop)
        })?
        .wait()?;
        let mut rec = self.op.recorder("spgemm.compute");
        super::spgemm::record_factors(&mut rec, a, b)?;
        let (am, bm) = (HostMat::of(a)?, HostMat::of(b)?);
        let (offsets, cols, vals) = self.host(rec, move || product(alpha, &am, &bm))?.wait()?;
        let nnz = cols.len();
        if nnz > i32::MAX as usize {
            return Err(Error::invalid("c", format!("A B has {nnz} nonzeros, beyond 32-bit indices")));
        }
        let dev = self.op.device.clone();
        let o: GpuRef<i32> = dev.alloc(self.op.stream, a.rows + 1)?;
        let (i, v): (GpuRef<i32>, GpuRef<T>) =
            (dev.alloc(self.op.stream, nnz.max(1))?, dev.alloc(self.op.stream, nnz.max(1))?);
        let c = SparseMatrix::new(Format::Csr, a.rows, b.cols, nnz, &o, &i, &v)?;
        let mut rec = self.op.recorder("spgemm.copy");
        super::spgemm::record_factors(&mut rec, a, b)?;
        crate::libs::record(&mut rec, "c.offsets", &o, crate::track::Access::Write)?;
        crate::libs::record(&mut rec, "c.indices", &i, crate::track::Access::Write)?;
        crate::libs::record(&mut rec, "c.values", &v, crate::track::Access::Write)?;
        let (om, im, vm) = (o.sim_data()?, i.sim_data()?, v.sim_data()?);
        self.host(rec, move || {
            for (d, s) in om.lock().iter_mut().zip(&offsets) {
                *d = i32::from_usize(*s);
            }
            for (d, s) in im.lock().iter_mut().zip(&cols) {
                *d = i32::from_usize(*s);
            }
            vm.lock()[..vals.len()].copy_from_slice(&vals);
            Ok(c)
        })
    }

    /// The reusable SpGEMM's setup on the host, after its work estimation was recorded on
    /// `rec`: the nnz phase writes `C`'s offsets and returns its column indices (the host waits
    /// for it), the copy phase writes them into `C`'s fresh arrays. `C`'s values are left to
    /// the first compute, as on the GPU.
    pub(super) fn sim_spgemm_structure<T: SparseValue>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, i32>,
        b: &SparseMatrix<T, i32>,
        offsets: &GpuRef<i32>,
    ) -> Result<SparseMatrix<T, i32>> {
        use crate::track::Access;
        let (am, bm) = (HostMat::of(a)?, HostMat::of(b)?);
        self.host(rec, move || {
            am.csr(["a.offsets", "a.indices"])?;
            bm.csr(["b.offsets", "b.indices"]).map(drop)
        })?
        .wait()?;
        let mut rec = self.op.recorder("spgemm_reuse.nnz");
        super::spgemm::record_factors(&mut rec, a, b)?;
        crate::libs::record(&mut rec, "c.offsets", offsets, Access::Write)?;
        let (am, bm, om) = (HostMat::of(a)?, HostMat::of(b)?, offsets.sim_data()?);
        let cols = self
            .host(rec, move || {
                let (o, cols, _) = product(T::one(), &am, &bm)?;
                for (d, s) in om.lock().iter_mut().zip(&o) {
                    *d = i32::from_usize(*s);
                }
                Ok(cols)
            })?
            .wait()?;
        let nnz = cols.len();
        if nnz > i32::MAX as usize {
            return Err(Error::invalid("c", format!("A B has {nnz} nonzeros, beyond 32-bit indices")));
        }
        let dev = self.op.device.clone();
        let (i, v): (GpuRef<i32>, GpuRef<T>) =
            (dev.alloc(self.op.stream, nnz.max(1))?, dev.alloc(self.op.stream, nnz.max(1))?);
        let c = SparseMatrix::new(Format::Csr, a.rows, b.cols, nnz, offsets, &i, &v)?;
        let mut rec = self.op.recorder("spgemm_reuse.copy");
        super::spgemm::record_factors(&mut rec, a, b)?;
        crate::libs::record(&mut rec, "c.offsets", offsets, Access::ReadWrite)?;
        crate::libs::record(&mut rec, "c.indices", &i, Access::Write)?;
        crate::libs::record(&mut rec, "c.values", &v, Access::Write)?;
        let im = i.sim_data()?;
        // The first compute waits for the copy on the stream (it reads C's structure).
        drop(self.host(rec, move || {
            for (d, s) in im.lock().iter_mut().zip(&cols) {
                *d = i32::from_usize(*s);
            }
            Ok(())
        })?);
        Ok(c)
    }

    /// The reusable SpGEMM's compute on the host: `C`'s values at its structure, from `A` and
    /// `B`'s current values.
    pub(super) fn sim_spgemm_values<T: SparseValue>(
        &mut self,
        rec: LaunchRecorder,
        alpha: T,
        [a, b, c]: [&SparseMatrix<T, i32>; 3],
    ) -> Result<Completion<()>> {
        let (am, bm, cm) = (HostMat::of(a)?, HostMat::of(b)?, HostMat::of(c)?);
        self.host(rec, move || {
            let (o, cols, vals) = product(alpha, &am, &bm)?;
            let (major, minor) = (cm.major.read().to_vec(), cm.minor.as_ref().map(|m| m.read().to_vec()));
            let minor = minor.unwrap_or_else(|| major.clone());
            let mut out = cm.values.lock();
            for r in 0..cm.rows {
                let row = o[r]..o[r + 1];
                for p in span("c.offsets", &major, r, cm.nnz)? {
                    let j = at("c.indices", minor[p], cm.cols)?;
                    // C's columns are sorted within the row, as the product's are.
                    out[p] = match cols[row.clone()].binary_search(&j) {
                        Ok(q) => vals[row.start + q],
                        Err(_) => T::zero(),
                    };
                }
            }
            Ok(())
        })
    }

    pub(super) fn sim_axpby<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        alpha: T,
        x: &SparseVector<T, I>,
        beta: T,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let (xi, xv, ym) = (x.indices.sim_data()?, x.values.sim_data()?, y.sim_data()?);
        let (size, nnz) = (x.size, x.nnz);
        self.host(rec, move || {
            let (idx, val) = (xi.read().to_vec(), xv.read().to_vec());
            let pos = idx[..nnz].iter().map(|&i| at("x.indices", i, size)).collect::<Result<Vec<_>>>()?;
            let mut y = ym.lock();
            for v in &mut y[..size] {
                *v = if beta.is_zero() { T::zero() } else { beta.times(*v) };
            }
            for (k, &i) in pos.iter().enumerate() {
                y[i] = y[i].plus(alpha.times(val[k]));
            }
            Ok(())
        })
    }

    pub(super) fn sim_gather<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        y: &GpuRef<T>,
        x: &SparseVector<T, I>,
    ) -> Result<Completion<()>> {
        let (xi, xv, ym) = (x.indices.sim_data()?, x.values.sim_data()?, y.sim_data()?);
        let (size, nnz) = (x.size, x.nnz);
        self.host(rec, move || {
            let (idx, y) = (xi.read().to_vec(), ym.read().to_vec());
            let pos = idx[..nnz].iter().map(|&i| at("x.indices", i, size)).collect::<Result<Vec<_>>>()?;
            let mut out = xv.lock();
            for (k, i) in pos.into_iter().enumerate() {
                out[k] = y[i];
            }
            Ok(())
        })
    }

    pub(super) fn sim_scatter<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        x: &SparseVector<T, I>,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let (xi, xv, ym) = (x.indices.sim_data()?, x.values.sim_data()?, y.sim_data()?);
        let (size, nnz) = (x.size, x.nnz);
        self.host(rec, move || {
            let (idx, val) = (xi.read().to_vec(), xv.read().to_vec());
            let pos = idx[..nnz].iter().map(|&i| at("x.indices", i, size)).collect::<Result<Vec<_>>>()?;
            let mut y = ym.lock();
            for (k, i) in pos.into_iter().enumerate() {
                y[i] = val[k];
            }
            Ok(())
        })
    }
}
