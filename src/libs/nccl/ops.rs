//! The collectives and point-to-point ops, and their checks: every argument is checked (counts
//! against buffer lengths, roots and peers in range, the communicator on this stream's
//! device, the reduction) and every buffer recorded before anything is enqueued; a rejected op
//! has recorded nothing.

use super::comm::Communicator;
use super::launch::submit;
use super::launch::Holder;
use super::plan::{self, Coll, CollBufs, P2p};
use super::{Nccl, NcclType, ReduceOp};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::record;
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ops::Range;

impl Nccl {
    /// All-reduce (`ncclAllReduce`): `recv` on every rank gets the reduction of every rank's
    /// `send` (of `recv`'s length).
    pub fn all_reduce<T: NcclType>(
        &mut self,
        comm: &Communicator,
        send: &GpuRef<T>,
        recv: &GpuRef<T>,
        op: ReduceOp,
    ) -> Result<Completion<()>> {
        self.check(comm, Some(op))?;
        same_len("recv", recv, send.len())?;
        distinct(send, recv, "all_reduce_in_place")?;
        let n = send.len();
        let bufs = CollBufs { send: Some((send, 0..n)), recv: Some((recv, 0..n)), count: n };
        self.collective(comm, "all_reduce", Coll::AllReduce(op), &bufs)
    }

    /// [`all_reduce`](Self::all_reduce) in place: `buf` is read and overwritten.
    pub fn all_reduce_in_place<T: NcclType>(
        &mut self,
        comm: &Communicator,
        buf: &GpuRef<T>,
        op: ReduceOp,
    ) -> Result<Completion<()>> {
        self.check(comm, Some(op))?;
        let n = buf.len();
        let bufs = CollBufs { send: Some((buf, 0..n)), recv: Some((buf, 0..n)), count: n };
        self.collective(comm, "all_reduce", Coll::AllReduce(op), &bufs)
    }

    /// Broadcast (`ncclBroadcast`): `recv` on every rank gets the root's `send`. `send` is read
    /// on the root only (it must be given there, with `recv`'s length); other ranks may pass
    /// `None`.
    pub fn broadcast<T: NcclType>(
        &mut self,
        comm: &Communicator,
        send: Option<&GpuRef<T>>,
        recv: &GpuRef<T>,
        root: usize,
    ) -> Result<Completion<()>> {
        self.check(comm, None)?;
        let n = recv.len();
        let send = self.rooted("send", comm, root, send, n)?;
        if let Some(s) = send {
            distinct(s, recv, "broadcast_in_place")?;
        }
        let bufs = CollBufs { send: send.map(|s| (s, 0..n)), recv: Some((recv, 0..n)), count: n };
        self.collective(comm, "broadcast", Coll::Broadcast(root), &bufs)
    }

    /// [`broadcast`](Self::broadcast) in place: the root's `buf` is read, every other rank's
    /// overwritten.
    pub fn broadcast_in_place<T: NcclType>(
        &mut self,
        comm: &Communicator,
        buf: &GpuRef<T>,
        root: usize,
    ) -> Result<Completion<()>> {
        self.check(comm, None)?;
        check_rank("root", root, comm)?;
        let n = buf.len();
        let send = (comm.rank() == root).then_some((buf, 0..n));
        let bufs = CollBufs { send, recv: Some((buf, 0..n)), count: n };
        self.collective(comm, "broadcast", Coll::Broadcast(root), &bufs)
    }

    /// Reduce (`ncclReduce`): the root's `recv` gets the reduction of every rank's `send`.
    /// `recv` is written on the root only (it must be given there, with `send`'s length);
    /// other ranks may pass `None`.
    pub fn reduce<T: NcclType>(
        &mut self,
        comm: &Communicator,
        send: &GpuRef<T>,
        recv: Option<&GpuRef<T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Completion<()>> {
        self.check(comm, Some(op))?;
        let n = send.len();
        let recv = self.rooted("recv", comm, root, recv, n)?;
        if let Some(r) = recv {
            distinct(send, r, "reduce_in_place")?;
        }
        let bufs = CollBufs { send: Some((send, 0..n)), recv: recv.map(|r| (r, 0..n)), count: n };
        self.collective(comm, "reduce", Coll::Reduce(op, root), &bufs)
    }

    /// [`reduce`](Self::reduce) in place: every rank's `buf` is read, the root's overwritten.
    pub fn reduce_in_place<T: NcclType>(
        &mut self,
        comm: &Communicator,
        buf: &GpuRef<T>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Completion<()>> {
        self.check(comm, Some(op))?;
        check_rank("root", root, comm)?;
        let n = buf.len();
        let recv = (comm.rank() == root).then_some((buf, 0..n));
        let bufs = CollBufs { send: Some((buf, 0..n)), recv, count: n };
        self.collective(comm, "reduce", Coll::Reduce(op, root), &bufs)
    }

    /// All-gather (`ncclAllGather`): `recv` (`size() * send.len()` elements) on every rank
    /// gets every rank's `send`, in rank order.
    pub fn all_gather<T: NcclType>(
        &mut self,
        comm: &Communicator,
        send: &GpuRef<T>,
        recv: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        self.check(comm, None)?;
        let n = send.len();
        same_len("recv", recv, times(n, comm.size())?)?;
        distinct(send, recv, "all_gather_in_place")?;
        let bufs = CollBufs { send: Some((send, 0..n)), recv: Some((recv, 0..recv.len())), count: n };
        self.collective(comm, "all_gather", Coll::AllGather, &bufs)
    }

    /// [`all_gather`](Self::all_gather) in place: `buf` holds `size()` equal parts, this
    /// rank's part (part `rank()`) is its input, and all of `buf` the output.
    pub fn all_gather_in_place<T: NcclType>(&mut self, comm: &Communicator, buf: &GpuRef<T>) -> Result<Completion<()>> {
        self.check(comm, None)?;
        let n = part(buf, comm)?;
        let mine = comm.rank() * n..(comm.rank() + 1) * n;
        let bufs = CollBufs { send: Some((buf, mine)), recv: Some((buf, 0..buf.len())), count: n };
        self.collective(comm, "all_gather", Coll::AllGather, &bufs)
    }

    /// Reduce-scatter (`ncclReduceScatter`): `send` holds `size()` parts of `recv.len()`
    /// elements; `recv` on rank `r` gets the reduction of every rank's part `r`.
    pub fn reduce_scatter<T: NcclType>(
        &mut self,
        comm: &Communicator,
        send: &GpuRef<T>,
        recv: &GpuRef<T>,
        op: ReduceOp,
    ) -> Result<Completion<()>> {
        self.check(comm, Some(op))?;
        let n = recv.len();
        same_len("send", send, times(n, comm.size())?)?;
        distinct(send, recv, "reduce_scatter_in_place")?;
        let bufs = CollBufs { send: Some((send, 0..send.len())), recv: Some((recv, 0..n)), count: n };
        self.collective(comm, "reduce_scatter", Coll::ReduceScatter(op), &bufs)
    }

    /// [`reduce_scatter`](Self::reduce_scatter) in place: `buf` holds `size()` equal parts,
    /// all of it is the input, and this rank's part (part `rank()`) gets its result.
    pub fn reduce_scatter_in_place<T: NcclType>(
        &mut self,
        comm: &Communicator,
        buf: &GpuRef<T>,
        op: ReduceOp,
    ) -> Result<Completion<()>> {
        self.check(comm, Some(op))?;
        let n = part(buf, comm)?;
        let mine = comm.rank() * n..(comm.rank() + 1) * n;
        let bufs = CollBufs { send: Some((buf, 0..buf.len())), recv: Some((buf, mine)), count: n };
        self.collective(comm, "reduce_scatter", Coll::ReduceScatter(op), &bufs)
    }

    /// Sends all of `buf` to rank `peer` (`ncclSend`), which receives it with
    /// [`recv`](Self::recv) of the same length. A send and its receive on ranks that one
    /// thread drives must be in one [`group`](super::group).
    pub fn send<T: NcclType>(&mut self, comm: &Communicator, buf: &GpuRef<T>, peer: usize) -> Result<Completion<()>> {
        self.check(comm, None)?;
        check_rank("peer", peer, comm)?;
        let p2p = P2p { send: Some(buf), sends: vec![(peer, 0..buf.len())], recv: None, recvs: Vec::new() };
        self.point_to_point(comm, "send", &p2p)
    }

    /// Receives all of `buf` from rank `peer` (`ncclRecv`), sent with [`send`](Self::send).
    pub fn recv<T: NcclType>(&mut self, comm: &Communicator, buf: &GpuRef<T>, peer: usize) -> Result<Completion<()>> {
        self.check(comm, None)?;
        check_rank("peer", peer, comm)?;
        let p2p = P2p { send: None, sends: Vec::new(), recv: Some(buf), recvs: vec![(peer, 0..buf.len())] };
        self.point_to_point(comm, "recv", &p2p)
    }

    /// All-to-all: `send` and `recv` hold `size()` equal parts; part `j` of this rank's `send`
    /// goes to rank `j`, whose part `rank()` of `recv` gets it. Grouped sends and receives,
    /// one op.
    pub fn all_to_all<T: NcclType>(
        &mut self,
        comm: &Communicator,
        send: &GpuRef<T>,
        recv: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        self.check(comm, None)?;
        let n = part(send, comm).map_err(|e| rename(e, "send"))?;
        same_len("recv", recv, send.len())?;
        distinct(send, recv, "a second buffer")?;
        let parts = |j: usize| (j, j * n..(j + 1) * n);
        let p2p = P2p {
            send: Some(send),
            sends: (0..comm.size()).map(parts).collect(),
            recv: Some(recv),
            recvs: (0..comm.size()).map(parts).collect(),
        };
        self.point_to_point(comm, "all_to_all", &p2p)
    }

    /// All-to-all with a count and offset per peer: `send_counts[j]` elements of `send` from
    /// `send_offsets[j]` go to rank `j`, and `recv_counts[j]` elements from rank `j` land in
    /// `recv` at `recv_offsets[j]` (each rank's send count to `r` must be `r`'s receive count
    /// from it). Grouped sends and receives, one op.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_allv<T: NcclType>(
        &mut self,
        comm: &Communicator,
        send: &GpuRef<T>,
        send_counts: &[usize],
        send_offsets: &[usize],
        recv: &GpuRef<T>,
        recv_counts: &[usize],
        recv_offsets: &[usize],
    ) -> Result<Completion<()>> {
        self.check(comm, None)?;
        let sends = ranges(comm, send, ("send_counts", send_counts), ("send_offsets", send_offsets))?;
        let recvs = ranges(comm, recv, ("recv_counts", recv_counts), ("recv_offsets", recv_offsets))?;
        distinct(send, recv, "a second buffer")?;
        let p2p = P2p { send: Some(send), sends, recv: Some(recv), recvs };
        self.point_to_point(comm, "all_to_allv", &p2p)
    }

    /// The checks every op makes: the communicator is on this stream's device and alive, and
    /// the reduction (if any) is valid.
    fn check(&self, comm: &Communicator, op: Option<ReduceOp>) -> Result<()> {
        let (mine, theirs) = (&self.op.device.shared, &comm.inner.device.shared);
        if mine.uid != theirs.uid {
            return Err(Error::ForeignDevice {
                what: format!("argument `comm` (rank {} of {})", comm.rank(), comm.size()),
                expected: mine.label(),
                found: theirs.label(),
            });
        }
        let current = theirs.generation();
        if comm.inner.generation != current {
            return Err(Error::Stale {
                what: format!("argument `comm` (rank {} of {})", comm.rank(), comm.size()),
                made: comm.inner.generation,
                current,
            });
        }
        if let Some(ReduceOp::PreMulSum(s)) = op {
            if !s.is_finite() {
                return Err(Error::invalid("op", format!("the PreMulSum scalar {s} is not finite")));
            }
        }
        match comm.fault() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// A buffer only the root uses (`arg`): checked on the root (given, of length `n`),
    /// dropped elsewhere.
    fn rooted<'a, T: NcclType>(
        &self,
        arg: &'static str,
        comm: &Communicator,
        root: usize,
        buf: Option<&'a GpuRef<T>>,
        n: usize,
    ) -> Result<Option<&'a GpuRef<T>>> {
        check_rank("root", root, comm)?;
        if comm.rank() != root {
            return Ok(None);
        }
        let buf = buf.ok_or_else(|| Error::invalid(arg, "the root must pass it"))?;
        same_len(arg, buf, n)?;
        Ok(Some(buf))
    }

    fn collective<T: NcclType>(
        &mut self,
        comm: &Communicator,
        name: &'static str,
        coll: Coll,
        bufs: &CollBufs<'_, T>,
    ) -> Result<Completion<()>> {
        let mut rec = self.op.recorder(name);
        match (&bufs.send, &bufs.recv) {
            (Some((s, _)), Some((r, _))) if s.same_buffer(r) => record(&mut rec, "buf", s, Access::ReadWrite)?,
            (send, recv) => {
                if let Some((s, _)) = send {
                    record(&mut rec, "send", s, Access::Read)?;
                }
                if let Some((r, _)) = recv {
                    record(&mut rec, "recv", r, Access::Write)?;
                }
            }
        }
        let work = plan::collective(self.op.device.is_simulated(), coll, bufs, comm.size())?;
        // An in-place op's buffer is kept once.
        let recv = match (&bufs.send, &bufs.recv) {
            (Some((s, _)), Some((r, _))) if s.same_buffer(r) => &None,
            (_, recv) => recv,
        };
        let keep = || [&bufs.send, recv].into_iter().flatten().map(|(b, _)| keep(b)).collect();
        submit(rec, &self.op.device, comm, work, keep)
    }

    fn point_to_point<T: NcclType>(
        &mut self,
        comm: &Communicator,
        name: &'static str,
        p2p: &P2p<'_, T>,
    ) -> Result<Completion<()>> {
        let mut rec: LaunchRecorder = self.op.recorder(name);
        if let Some(s) = p2p.send {
            record(&mut rec, "send", s, Access::Read)?;
        }
        if let Some(r) = p2p.recv {
            record(&mut rec, "recv", r, Access::Write)?;
        }
        let work = plan::p2p(self.op.device.is_simulated(), p2p)?;
        let keep = || [p2p.send, p2p.recv].into_iter().flatten().map(keep).collect();
        submit(rec, &self.op.device, comm, work, keep)
    }
}

/// A handle to `buf` that keeps it alive through the launch of an op queued in a group (a CUDA
/// op drops it once its uses are committed: a later free waits for them; a simulated op keeps
/// it until its kernel ran).
fn keep<T: NcclType>(buf: &GpuRef<T>) -> Holder {
    buf.holder()
}

fn check_rank(arg: &'static str, rank: usize, comm: &Communicator) -> Result<()> {
    if rank >= comm.size() {
        return Err(Error::invalid(arg, format!("rank {rank} of a communicator of {} ranks", comm.size())));
    }
    Ok(())
}

fn same_len<T: NcclType>(arg: &'static str, buf: &GpuRef<T>, want: usize) -> Result<()> {
    if buf.len() != want {
        return Err(Error::invalid(arg, format!("has {} elements, the op needs {want}", buf.len())));
    }
    Ok(())
}

fn distinct<T: NcclType>(send: &GpuRef<T>, recv: &GpuRef<T>, instead: &str) -> Result<()> {
    if send.same_buffer(recv) {
        return Err(Error::invalid("recv", format!("is the send buffer; use {instead}")));
    }
    Ok(())
}

fn times(n: usize, ranks: usize) -> Result<usize> {
    n.checked_mul(ranks).ok_or_else(|| Error::invalid("send", format!("{n} elements times {ranks} ranks overflows")))
}

/// The length of one of `size()` equal parts of `buf`.
fn part<T: NcclType>(buf: &GpuRef<T>, comm: &Communicator) -> Result<usize> {
    if buf.len() % comm.size() != 0 {
        return Err(Error::invalid("buf", format!("{} elements are not {} equal parts", buf.len(), comm.size())));
    }
    Ok(buf.len() / comm.size())
}

fn rename(e: Error, arg: &'static str) -> Error {
    match e {
        Error::InvalidArgument { reason, .. } => Error::InvalidArgument { arg, reason },
        other => other,
    }
}

/// Per-peer ranges of `buf` from counts and offsets (one each per rank), checked.
fn ranges<T: NcclType>(
    comm: &Communicator,
    buf: &GpuRef<T>,
    (counts_arg, counts): (&'static str, &[usize]),
    (offsets_arg, offsets): (&'static str, &[usize]),
) -> Result<Vec<(usize, Range<usize>)>> {
    for (arg, list) in [(counts_arg, counts), (offsets_arg, offsets)] {
        if list.len() != comm.size() {
            return Err(Error::invalid(arg, format!("has {} entries, one per rank is {}", list.len(), comm.size())));
        }
    }
    let mut out = Vec::with_capacity(counts.len());
    for (peer, (&count, &offset)) in counts.iter().zip(offsets).enumerate() {
        let end = offset.checked_add(count).filter(|&e| e <= buf.len()).ok_or_else(|| {
            Error::invalid(
                offsets_arg,
                format!("peer {peer}'s {count} elements at {offset} pass the buffer's {}", buf.len()),
            )
        })?;
        out.push((peer, offset..end));
    }
    Ok(out)
}
