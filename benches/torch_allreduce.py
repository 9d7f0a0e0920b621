#!/usr/bin/env python3
"""All-reduce bus bandwidth through torch.distributed (NCCL backend) on two GPUs, two
processes (torch.multiprocessing), at the sizes bench-nccl uses: the comparison for
`cargo bench --bench nccl`. Prints one line per size: bytes, iterations, bus bandwidth and
time per op (median of 5 repetitions), then the 8-byte latency.

    NCCL_NVLS_ENABLE=0 python3 benches/torch_allreduce.py

For two ranks the bus bandwidth, bytes / time * 2 (n - 1) / n, equals the algorithm bandwidth.
"""
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPS = 5


def timed(x, iters):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters


def run(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    if rank == 0:
        print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, {world} ranks")
        print(f"{'bytes':>12} {'iters':>6} {'busbw':>14} {'per op':>12}")
    size = 8 << 10
    while size <= 1 << 30:
        x = torch.zeros(size // 4, dtype=torch.float32, device="cuda")
        iters = max(5, min(2000, (8 << 30) // size))
        timed(x, 3)
        t = statistics.median(timed(x, iters) for _ in range(REPS))
        busbw = size / t / 1e9 * 2 * (world - 1) / world
        if rank == 0:
            print(f"{size:>12} {iters:>6} {busbw:>9.2f} GB/s {t * 1e6:>9.2f} µs")
        size *= 4
    x = torch.zeros(2, dtype=torch.float32, device="cuda")
    lat = sorted(timed(x, 1) for _ in range(200))
    if rank == 0:
        print(f"\nsmall-message latency (8 bytes): median {lat[100] * 1e6:.2f} µs, p99 {lat[197] * 1e6:.2f} µs")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    world = 2
    mp.spawn(run, args=(world,), nprocs=world, join=True)
