//! From validated arguments to an op's work: the raw NCCL calls on CUDA, the host kernel on
//! the simulator. The checks are in `ops`; nothing here rejects an argument.

use super::calls::{self, Call};
use super::launch::{SimBody, Work};
use super::reduce::reduce;
use super::sim::{AnyBox, SimRank};
use super::{BuiltinOp, NcclType, ReduceOp};
use crate::error::{CollectiveFault, Error, Result};
use crate::libs::dptr;
use crate::memory::{GpuRef, SimMem};
use std::ops::Range;

/// A collective, with what it needs beyond its buffers.
#[derive(Clone, Copy, Debug)]
pub(super) enum Coll {
    AllReduce(ReduceOp),
    Reduce(ReduceOp, usize),
    Broadcast(usize),
    AllGather,
    ReduceScatter(ReduceOp),
}

/// A collective's buffers on one rank: what it reads (`send`, the range of it this rank
/// brings) and what it writes (`recv`, where its result goes); `None` where the rank has
/// none (a non-root's send of a broadcast, a non-root's receive of a reduce).
pub(super) struct CollBufs<'a, T: NcclType> {
    pub send: Option<(&'a GpuRef<T>, Range<usize>)>,
    pub recv: Option<(&'a GpuRef<T>, Range<usize>)>,
    /// The count NCCL is given (per rank: the send count of an all-gather, the receive
    /// count of a reduce-scatter).
    pub count: usize,
}

/// The work of collective `coll` on one rank.
pub(super) fn collective<T: NcclType>(sim: bool, coll: Coll, bufs: &CollBufs<'_, T>, nranks: usize) -> Result<Work> {
    if sim {
        return sim_collective(coll, bufs, nranks);
    }
    let addr = |b: &Option<(&GpuRef<T>, Range<usize>)>| -> Result<u64> {
        match b {
            Some((buf, range)) => offset::<T>(dptr::<T, u8>(buf)? as u64, range.start),
            None => Ok(0),
        }
    };
    let (send, recv, count) = (addr(&bufs.send)?, addr(&bufs.recv)?, bufs.count);
    let coll = if nranks == 1 { lone_rank_reduction(coll) } else { coll };
    let (op, premul) = raw_op::<T>(coll);
    let call = |send: u64, recv: u64, count: usize| match coll {
        Coll::AllReduce(_) => Call::AllReduce { send, recv, count, op },
        Coll::Reduce(_, root) => Call::Reduce { send, recv, count, op, root: root as i32 },
        Coll::Broadcast(root) => Call::Broadcast { send, recv, count, root: root as i32 },
        Coll::AllGather => Call::AllGather { send, recv, count },
        Coll::ReduceScatter(_) => Call::ReduceScatter { send, recv, count, op },
    };
    let tail = count % LONE_RANK_VECTOR;
    let calls = if nranks == 1 && premul.is_some() && count > LONE_RANK_VECTOR && tail != 0 {
        // A lone rank's PreMulSum: the whole vectors, then the tail on its own (see
        // `lone_rank_reduction`).
        let main = count - tail;
        let at = |base: u64| if base == 0 { Ok(0) } else { offset::<T>(base, main) };
        smallvec::smallvec![call(send, recv, main), call(at(send)?, at(recv)?, tail)]
    } else {
        smallvec::smallvec![call(send, recv, count)]
    };
    Ok(Work::Cuda { calls, dtype: T::DTYPE, premul })
}

/// A lone rank's PreMulSum runs as two calls: the largest multiple of this many elements, then
/// the rest (see [`lone_rank_reduction`]).
const LONE_RANK_VECTOR: usize = 16;

/// `coll` as a lone rank runs it on CUDA. NCCL 2.28's one-rank path leaves the last few
/// elements of an `Avg` out of place, and of a `PreMulSum` in place or out of place, unwritten
/// once the count is large (its last `count % 4` elements, seen on an H200 for f64 from
/// 65,537 elements and for f32 and i32 from 100,003; `tools/probes/nccl_lone_rank_tail.c`
/// shows it in plain C), while counts up to 1,001 come out whole. Over one rank an average is
/// the input itself, so it runs as a sum (NCCL's one-rank copy); a PreMulSum is split into
/// whole 16-element vectors and a tail of fewer, each its own call (see [`collective`]).
fn lone_rank_reduction(coll: Coll) -> Coll {
    match coll {
        Coll::AllReduce(ReduceOp::Avg) => Coll::AllReduce(ReduceOp::Sum),
        Coll::Reduce(ReduceOp::Avg, root) => Coll::Reduce(ReduceOp::Sum, root),
        Coll::ReduceScatter(ReduceOp::Avg) => Coll::ReduceScatter(ReduceOp::Sum),
        other => other,
    }
}

/// The reduction of `coll` as NCCL takes it: a built-in op, or a PreMulSum scalar (the op is
/// made at enqueue, on the communicator).
fn raw_op<T: NcclType>(coll: Coll) -> (calls::RawOp, Option<[u8; 8]>) {
    let op = match coll {
        Coll::AllReduce(op) | Coll::Reduce(op, _) | Coll::ReduceScatter(op) => op,
        Coll::Broadcast(_) | Coll::AllGather => ReduceOp::Sum,
    };
    let builtin = match op {
        ReduceOp::Sum => BuiltinOp::Sum,
        ReduceOp::Prod => BuiltinOp::Prod,
        ReduceOp::Max => BuiltinOp::Max,
        ReduceOp::Min => BuiltinOp::Min,
        ReduceOp::Avg => BuiltinOp::Avg,
        ReduceOp::PreMulSum(s) => return (calls::builtin_op(BuiltinOp::Sum), Some(T::scalar_bytes(s))),
    };
    (calls::builtin_op(builtin), None)
}

/// `base` advanced by `elems` elements of `T`.
fn offset<T>(base: u64, elems: usize) -> Result<u64> {
    elems
        .checked_mul(std::mem::size_of::<T>())
        .and_then(|b| base.checked_add(b as u64))
        .ok_or_else(|| Error::invalid("count", "the buffer offset overflows"))
}

/// The simulated collective: this rank's input to the round, every rank's output from the
/// last to arrive, this rank's written back.
fn sim_collective<T: NcclType>(coll: Coll, bufs: &CollBufs<'_, T>, nranks: usize) -> Result<Work> {
    let send = match &bufs.send {
        Some((b, r)) => Some((b.sim_data()?, r.clone())),
        None => None,
    };
    let recv = match &bufs.recv {
        Some((b, r)) => Some((b.sim_data()?, r.clone())),
        None => None,
    };
    let count = bufs.count;
    let sig = format!("{coll:?} of {count} {:?}", T::DTYPE);
    let body: SimBody = Box::new(move |rank: &SimRank, seq: u64| {
        let input: Vec<T> = match &send {
            Some((m, r)) => m.read()[r.clone()].to_vec(),
            None => Vec::new(),
        };
        let compute = Box::new(move |inputs: Vec<AnyBox>| compute::<T>(coll, inputs, count, nranks));
        let out = rank.clique.meet(rank, seq, sig, Box::new(input), compute)?;
        write_back(out, recv.as_ref())
    });
    Ok(Work::sim(true, body))
}

fn write_back<T: NcclType>(out: AnyBox, recv: Option<&(SimMem<T>, Range<usize>)>) -> Result<()> {
    let out = out.downcast::<Option<Vec<T>>>().map_err(|_| internal("a rank's output has another type"))?;
    if let (Some(out), Some((m, r))) = (*out, recv) {
        let mut data = m.lock();
        let dst = data.get_mut(r.clone()).ok_or_else(|| internal("the output range is out of the buffer"))?;
        if dst.len() != out.len() {
            return Err(internal("the output has another length"));
        }
        dst.copy_from_slice(&out);
    }
    Ok(())
}

fn internal(detail: &str) -> Error {
    Error::Collective { call: "nccl", fault: CollectiveFault::Internal, detail: detail.into() }
}

/// Every rank's output of `coll` from every rank's input (what NCCL computes).
fn compute<T: NcclType>(coll: Coll, inputs: Vec<AnyBox>, count: usize, nranks: usize) -> Result<Vec<AnyBox>> {
    let inputs = inputs
        .into_iter()
        .map(|b| b.downcast::<Vec<T>>().map(|v| *v))
        .collect::<std::result::Result<Vec<Vec<T>>, _>>()
        .map_err(|_| usage("the ranks called the collective with different element types"))?;
    let same_len = |want: usize| inputs.iter().all(|i| i.len() == want);
    let refs: Vec<&[T]> = inputs.iter().map(Vec::as_slice).collect();
    let outs: Vec<Option<Vec<T>>> = match coll {
        Coll::AllReduce(op) | Coll::Reduce(op, _) => {
            if !same_len(count) {
                return Err(usage("the ranks reduced different counts"));
            }
            let r = reduce(&refs, op);
            let root = if let Coll::Reduce(_, root) = coll { Some(root) } else { None };
            (0..nranks).map(|i| (root.is_none() || root == Some(i)).then(|| r.clone())).collect()
        }
        Coll::Broadcast(root) => {
            let data =
                inputs.get(root).filter(|d| d.len() == count).ok_or_else(|| usage("the root sent another count"))?;
            (0..nranks).map(|_| Some(data.clone())).collect()
        }
        Coll::AllGather => {
            if !same_len(count) {
                return Err(usage("the ranks gathered different counts"));
            }
            let all: Vec<T> = inputs.concat();
            (0..nranks).map(|_| Some(all.clone())).collect()
        }
        Coll::ReduceScatter(op) => {
            if !same_len(count * nranks) {
                return Err(usage("the ranks scattered different counts"));
            }
            let r = reduce(&refs, op);
            // `r` holds `count * nranks` elements (every input did).
            (0..nranks).map(|i| Some(r[i * count..(i + 1) * count].to_vec())).collect()
        }
    };
    Ok(outs.into_iter().map(|o| Box::new(o) as AnyBox).collect())
}

fn usage(detail: &str) -> Error {
    Error::Collective { call: "nccl", fault: CollectiveFault::InvalidUsage, detail: detail.into() }
}

/// Point-to-point transfers of one rank: sends of `send`'s ranges and receives into `recv`'s,
/// each with its peer. On CUDA they are one op's grouped `ncclSend`/`ncclRecv` calls; on the
/// simulator, letters posted and taken.
pub(super) struct P2p<'a, T: NcclType> {
    pub send: Option<&'a GpuRef<T>>,
    pub sends: Vec<(usize, Range<usize>)>,
    pub recv: Option<&'a GpuRef<T>>,
    pub recvs: Vec<(usize, Range<usize>)>,
}

/// The work of `p2p`.
pub(super) fn p2p<T: NcclType>(sim: bool, p2p: &P2p<'_, T>) -> Result<Work> {
    if sim {
        return sim_p2p(p2p);
    }
    let mut calls = super::launch::Few::with_capacity(p2p.sends.len() + p2p.recvs.len());
    if let Some(buf) = p2p.send {
        let base = dptr::<T, u8>(buf)? as u64;
        for (peer, r) in &p2p.sends {
            calls.push(Call::Send { send: offset::<T>(base, r.start)?, count: r.len(), peer: *peer as i32 });
        }
    }
    if let Some(buf) = p2p.recv {
        let base = dptr::<T, u8>(buf)? as u64;
        for (peer, r) in &p2p.recvs {
            calls.push(Call::Recv { recv: offset::<T>(base, r.start)?, count: r.len(), peer: *peer as i32 });
        }
    }
    Ok(Work::Cuda { calls, dtype: T::DTYPE, premul: None })
}

fn sim_p2p<T: NcclType>(p2p: &P2p<'_, T>) -> Result<Work> {
    let send = p2p.send.map(GpuRef::sim_data).transpose()?;
    let recv = p2p.recv.map(GpuRef::sim_data).transpose()?;
    let (sends, recvs) = (p2p.sends.clone(), p2p.recvs.clone());
    let body: SimBody = Box::new(move |rank: &SimRank, _| {
        if let Some(m) = &send {
            let data = m.read();
            for (peer, r) in &sends {
                rank.clique.post(rank.rank, *peer, Box::new(data[r.clone()].to_vec()));
            }
        }
        if let Some(m) = &recv {
            for (peer, r) in &recvs {
                let letter = rank.clique.take(rank, *peer)?;
                let letter = letter.downcast::<Vec<T>>().map_err(|_| usage("a peer sent another element type"))?;
                if letter.len() != r.len() {
                    let detail =
                        format!("rank {peer} sent {} elements, rank {} receives {}", letter.len(), rank.rank, r.len());
                    return Err(Error::Collective { call: "nccl", fault: CollectiveFault::InvalidUsage, detail });
                }
                m.lock()[r.clone()].copy_from_slice(&letter);
            }
        }
        Ok(())
    });
    Ok(Work::sim(false, body))
}
