//! The NCCL tests' fixture, shared by the simulator's and the GPU's: ranks over any devices,
//! the reference reductions, and every collective's check against them.

// Buffers, inputs and expectations are indexed by rank alike: a loop over ranks reads best.
#![allow(clippy::needless_range_loop)]

use cusched::half::{bf16, f16};
use cusched::nccl::{self, CommConfig, Communicator, NcclType, ReduceOp};
use cusched::{Completion, Device, GpuRef, Handles, Result, SimConfig};
use std::time::Duration;

/// The element types as the reference computes them: exact values from small integers.
pub trait Num: NcclType {
    fn of(v: f64) -> Self;
}
impl Num for u8 {
    fn of(v: f64) -> Self {
        (v as i64).rem_euclid(256) as u8
    }
}
impl Num for i32 {
    fn of(v: f64) -> Self {
        v as i32
    }
}
impl Num for f16 {
    fn of(v: f64) -> Self {
        f16::from_f64(v)
    }
}
impl Num for bf16 {
    fn of(v: f64) -> Self {
        bf16::from_f64(v)
    }
}
impl Num for f32 {
    fn of(v: f64) -> Self {
        v as f32
    }
}
impl Num for f64 {
    fn of(v: f64) -> Self {
        v
    }
}

/// `n` simulated devices, a communicator over them, and a `Handles` per device.
pub struct Ranks {
    pub gpus: Vec<Device>,
    pub comms: Vec<Communicator>,
    pub h: Vec<Handles>,
    /// Whether [`each`](Self::each) calls a lone rank's op inside a group too.
    pub grouped: bool,
}

pub fn ranks(n: usize) -> Ranks {
    ranks_with(n, CommConfig::default())
}

pub fn ranks_with(n: usize, config: CommConfig) -> Ranks {
    let sim = SimConfig { max_delay: Duration::from_micros(50), ..SimConfig::default() };
    Ranks::new(Device::sim_group(sim, n).unwrap(), config)
}

impl Ranks {
    /// A communicator over `gpus` (rank `i` on `gpus[i]`) and a stream per device.
    pub fn new(gpus: Vec<Device>, config: CommConfig) -> Ranks {
        let comms = Communicator::init_all(&gpus, &config).unwrap();
        let h = gpus.iter().map(|g| Handles::new(g, g.new_stream().unwrap()).unwrap()).collect();
        Ranks { gpus, comms, h, grouped: false }
    }

    /// Rank `r`'s input: `len` small values that differ per rank and position.
    pub fn input(&self, r: usize, len: usize) -> Vec<f64> {
        (0..len).map(|i| ((r + 1) * (i % 5 + 1)) as f64).collect()
    }

    pub fn upload<T: Num>(&self, r: usize, v: &[f64]) -> GpuRef<T> {
        let vals: Vec<T> = v.iter().map(|&x| T::of(x)).collect();
        self.gpus[r].upload(self.h[r].stream(), &vals).unwrap()
    }

    pub fn zeros<T: Num>(&self, r: usize, len: usize) -> GpuRef<T> {
        self.gpus[r].alloc_zeros(self.h[r].stream(), len).unwrap()
    }

    pub fn get<T: Num>(&self, r: usize, b: &GpuRef<T>) -> Vec<T> {
        b.download(self.h[r].stream()).unwrap()
    }

    /// Runs `op` on every rank (from this thread, in one group) and waits for all. A lone
    /// rank's op is called outside any group, as the one thread that drives it would, unless
    /// [`grouped`](Self::grouped).
    pub fn each(&mut self, mut op: impl FnMut(&mut Handles, &Communicator, usize) -> Result<Completion<()>>) {
        let (h, comms) = (&mut self.h, &self.comms);
        let mut all = || (0..comms.len()).map(|r| op(&mut h[r], &comms[r], r)).collect::<Result<Vec<_>>>();
        let done = if comms.len() == 1 && !self.grouped { all() } else { nccl::group(all) };
        wait(done.unwrap());
    }

    /// On the simulator, that the checker found no hazard.
    pub fn assert_clean(&self) {
        if !self.gpus[0].is_simulated() {
            return;
        }
        assert!(self.gpus[0].sim_hazards().unwrap().is_empty(), "{:?}", self.gpus[0].sim_hazards());
    }
}

/// Waits for every completion, each of which must succeed.
pub fn wait(done: Vec<Completion<()>>) {
    for r in cusched::wait_all(done) {
        r.unwrap();
    }
}

/// The reference reduction of `inputs` by `op`, in f64 (exact for the test's values).
pub fn reference(inputs: &[Vec<f64>], op: ReduceOp) -> Vec<f64> {
    let n = inputs.len() as f64;
    (0..inputs[0].len())
        .map(|i| {
            let col = inputs.iter().map(|v| v[i]);
            match op {
                ReduceOp::Sum => col.sum(),
                ReduceOp::Prod => col.product(),
                ReduceOp::Max => col.fold(f64::MIN, f64::max),
                ReduceOp::Min => col.fold(f64::MAX, f64::min),
                ReduceOp::Avg => col.sum::<f64>() / n,
                ReduceOp::PreMulSum(s) => col.map(|v| v * s).sum(),
            }
        })
        .collect()
}

fn of<T: Num>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::of(x)).collect()
}

const OPS: [ReduceOp; 6] =
    [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg, ReduceOp::PreMulSum(2.0)];

pub fn all_reduce_case<T: Num>(rk: &mut Ranks, len: usize) {
    let n = rk.comms.len();
    let inputs: Vec<Vec<f64>> = (0..n).map(|r| rk.input(r, len)).collect();
    for op in OPS {
        // Integers average by truncating: the reference does too, through `of`.
        let want: Vec<T> = of(&reference(&inputs, op));
        let send: Vec<GpuRef<T>> = (0..n).map(|r| rk.upload(r, &inputs[r])).collect();
        let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, len)).collect();
        rk.each(|h, c, r| h.nccl()?.all_reduce(c, &send[r], &recv[r], op));
        for r in 0..n {
            assert_eq!(rk.get(r, &recv[r]), want, "{op:?} out of place, rank {r} of {n}");
        }
        rk.each(|h, c, r| h.nccl()?.all_reduce_in_place(c, &send[r], op));
        for r in 0..n {
            assert_eq!(rk.get(r, &send[r]), want, "{op:?} in place, rank {r} of {n}");
        }
    }
    rk.assert_clean();
}

/// Runs a case for every element type.
#[macro_export]
macro_rules! each_type {
    ($case:ident, $rk:expr, $len:expr) => {
        $case::<u8>($rk, $len);
        $case::<i32>($rk, $len);
        $case::<cusched::half::f16>($rk, $len);
        $case::<cusched::half::bf16>($rk, $len);
        $case::<f32>($rk, $len);
        $case::<f64>($rk, $len);
    };
}

pub fn rooted_case<T: Num>(rk: &mut Ranks, len: usize) {
    let n = rk.comms.len();
    let inputs: Vec<Vec<f64>> = (0..n).map(|r| rk.input(r, len)).collect();
    for root in 0..n {
        let send: Vec<GpuRef<T>> = (0..n).map(|r| rk.upload(r, &inputs[r])).collect();
        let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, len)).collect();
        rk.each(|h, c, r| h.nccl()?.broadcast(c, Some(&send[r]), &recv[r], root));
        for r in 0..n {
            assert_eq!(rk.get(r, &recv[r]), of::<T>(&inputs[root]), "broadcast from {root}, rank {r}");
        }
        rk.each(|h, c, r| h.nccl()?.broadcast_in_place(c, &send[r], root));
        for r in 0..n {
            assert_eq!(rk.get(r, &send[r]), of::<T>(&inputs[root]), "broadcast in place from {root}, rank {r}");
        }
        let send: Vec<GpuRef<T>> = (0..n).map(|r| rk.upload(r, &inputs[r])).collect();
        let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, len)).collect();
        rk.each(|h, c, r| h.nccl()?.reduce(c, &send[r], Some(&recv[r]), ReduceOp::Sum, root));
        let sum: Vec<T> = of(&reference(&inputs, ReduceOp::Sum));
        for r in 0..n {
            let want = if r == root { sum.clone() } else { of(&vec![0.0; len]) };
            assert_eq!(rk.get(r, &recv[r]), want, "reduce to {root}, rank {r}");
        }
        rk.each(|h, c, r| h.nccl()?.reduce_in_place(c, &send[r], ReduceOp::Max, root));
        let max: Vec<T> = of(&reference(&inputs, ReduceOp::Max));
        for r in 0..n {
            let want = if r == root { max.clone() } else { of(&inputs[r]) };
            assert_eq!(rk.get(r, &send[r]), want, "reduce in place to {root}, rank {r}");
        }
    }
    rk.assert_clean();
}

pub fn gather_scatter_case<T: Num>(rk: &mut Ranks, len: usize) {
    let n = rk.comms.len();
    let inputs: Vec<Vec<f64>> = (0..n).map(|r| rk.input(r, len)).collect();
    let all: Vec<f64> = inputs.concat();
    let send: Vec<GpuRef<T>> = (0..n).map(|r| rk.upload(r, &inputs[r])).collect();
    let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, n * len)).collect();
    rk.each(|h, c, r| h.nccl()?.all_gather(c, &send[r], &recv[r]));
    for r in 0..n {
        assert_eq!(rk.get(r, &recv[r]), of::<T>(&all), "all_gather, rank {r}");
    }
    // In place: each rank's part of the buffer is its input.
    let bufs: Vec<GpuRef<T>> = (0..n)
        .map(|r| {
            let mut v = vec![0.0; n * len];
            v[r * len..(r + 1) * len].copy_from_slice(&inputs[r]);
            rk.upload(r, &v)
        })
        .collect();
    rk.each(|h, c, r| h.nccl()?.all_gather_in_place(c, &bufs[r]));
    for r in 0..n {
        assert_eq!(rk.get(r, &bufs[r]), of::<T>(&all), "all_gather in place, rank {r}");
    }
    // Reduce-scatter of n parts of `len`: each rank's input is the whole gathered vector
    // scaled by its rank.
    let big: Vec<Vec<f64>> = (0..n).map(|r| all.iter().map(|v| v * (r + 1) as f64).collect()).collect();
    let sum = reference(&big, ReduceOp::Sum);
    let send: Vec<GpuRef<T>> = (0..n).map(|r| rk.upload(r, &big[r])).collect();
    let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, len)).collect();
    rk.each(|h, c, r| h.nccl()?.reduce_scatter(c, &send[r], &recv[r], ReduceOp::Sum));
    for r in 0..n {
        assert_eq!(rk.get(r, &recv[r]), of::<T>(&sum[r * len..(r + 1) * len]), "reduce_scatter, rank {r}");
    }
    rk.each(|h, c, r| h.nccl()?.reduce_scatter_in_place(c, &send[r], ReduceOp::Sum));
    for r in 0..n {
        let got = rk.get(r, &send[r]);
        assert_eq!(got[r * len..(r + 1) * len], of::<T>(&sum[r * len..(r + 1) * len])[..], "in place, rank {r}");
    }
    rk.assert_clean();
}

pub fn p2p_case<T: Num>(rk: &mut Ranks, len: usize) {
    let n = rk.comms.len();
    let inputs: Vec<Vec<f64>> = (0..n).map(|r| rk.input(r, len)).collect();
    // A ring: each rank sends to the next and receives from the previous, in one group.
    let send: Vec<GpuRef<T>> = (0..n).map(|r| rk.upload(r, &inputs[r])).collect();
    let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, len)).collect();
    let (h, comms) = (&mut rk.h, &rk.comms);
    let done = nccl::group(|| {
        let mut done = Vec::new();
        for r in 0..n {
            done.push(h[r].nccl()?.send(&comms[r], &send[r], (r + 1) % n)?);
            done.push(h[r].nccl()?.recv(&comms[r], &recv[r], (r + n - 1) % n)?);
        }
        Ok(done)
    });
    wait(done.unwrap());
    for r in 0..n {
        assert_eq!(rk.get(r, &recv[r]), of::<T>(&inputs[(r + n - 1) % n]), "ring, rank {r}");
    }
    // Receives before the sends they pair with, and an all-reduce between them, in one group:
    // the group's ops progress together, so none waits for another.
    let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, len)).collect();
    let ones: Vec<GpuRef<T>> = (0..n).map(|r| rk.upload(r, &vec![1.0; len])).collect();
    let (h, comms) = (&mut rk.h, &rk.comms);
    let done = nccl::group(|| {
        let mut done = Vec::new();
        for r in 0..n {
            done.push(h[r].nccl()?.recv(&comms[r], &recv[r], (r + 1) % n)?);
            done.push(h[r].nccl()?.all_reduce_in_place(&comms[r], &ones[r], ReduceOp::Sum)?);
            done.push(h[r].nccl()?.send(&comms[r], &send[r], (r + n - 1) % n)?);
        }
        Ok(done)
    });
    wait(done.unwrap());
    for r in 0..n {
        assert_eq!(rk.get(r, &recv[r]), of::<T>(&inputs[(r + 1) % n]), "reversed ring, rank {r}");
        assert_eq!(rk.get(r, &ones[r]), of::<T>(&vec![n as f64; len]), "all_reduce in the group, rank {r}");
    }
    // All-to-all: part j of rank r holds r * 10 + j.
    let parts = |r: usize| (0..n * len).map(|i| (r * 10 + i / len) as f64).collect::<Vec<f64>>();
    let send: Vec<GpuRef<T>> = (0..n).map(|r| rk.upload(r, &parts(r))).collect();
    let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, n * len)).collect();
    rk.each(|h, c, r| h.nccl()?.all_to_all(c, &send[r], &recv[r]));
    for r in 0..n {
        let want: Vec<f64> = (0..n * len).map(|i| ((i / len) * 10 + r) as f64).collect();
        assert_eq!(rk.get(r, &recv[r]), of::<T>(&want), "all_to_all, rank {r}");
    }
    // All-to-all-v, uneven: rank r sends r + j + 1 elements to rank j.
    let count = |from: usize, to: usize| from + to + 1;
    let send: Vec<GpuRef<T>> = (0..n)
        .map(|r| {
            let v: Vec<f64> = (0..n).flat_map(|j| vec![(r * 10 + j) as f64; count(r, j)]).collect();
            rk.upload(r, &v)
        })
        .collect();
    let recv: Vec<GpuRef<T>> = (0..n).map(|r| rk.zeros(r, (0..n).map(|j| count(j, r)).sum())).collect();
    rk.each(|h, c, r| {
        let sc: Vec<usize> = (0..n).map(|j| count(r, j)).collect();
        let rc: Vec<usize> = (0..n).map(|j| count(j, r)).collect();
        let offsets =
            |c: &[usize]| c.iter().scan(0, |acc, &x| Some(std::mem::replace(acc, *acc + x))).collect::<Vec<_>>();
        h.nccl()?.all_to_allv(c, &send[r], &sc, &offsets(&sc), &recv[r], &rc, &offsets(&rc))
    });
    for r in 0..n {
        let want: Vec<f64> = (0..n).flat_map(|j| vec![(j * 10 + r) as f64; count(j, r)]).collect();
        assert_eq!(rk.get(r, &recv[r]), of::<T>(&want), "all_to_allv, rank {r}");
    }
    rk.assert_clean();
}
