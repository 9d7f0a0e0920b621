#!/usr/bin/env python3
"""The step of `bench-graph_mlp` in PyTorch, eager and as a CUDA graph, on GPU 0: the
comparison for `cargo bench --bench graph_mlp --features cublaslt`.

The step (the same sizes and types as the Rust bench):

    h = gelu(linear(x, W1, b1))   x [64, 256] bf16, W1 [1024, 256], b1 [1024]
    y = gelu(linear(h, W2, b2))   W2 [256, 1024], b2 [256]
    p = softmax(y, dim=-1)        f32 out (computed from bf16 y)

with GELU in its tanh form (cuBLASLt's epilogue). Rows:

- eager: N steps back to back, then a synchronize: time per step; and the host time of one
  step (the median, timed apart in batches of 16 between synchronizes);
- graph: the step captured once into a torch.cuda.CUDAGraph (warmed up on a side stream first,
  as the PyTorch docs require), N replays back to back, then a synchronize: time per step; and
  the host time of one `replay()` (the median, in batches of 16);
- the same two with the matmul + bias + GELU fused by cuBLASLt's epilogue
  (`torch._addmm_activation`, the call the Rust bench's matmuls match), when this PyTorch has it;
- PyTorch's graph of 200 adds (in place on 32 floats, one chain): GPU time per node (K replays
  back to back, then a synchronize, over K x 200) and host time per replay, to compare with the
  issue's 1.31 us per node and 5.9 us per replay.

Timed rounds of eager and graph interleave; the median round is reported. The graph's output is
checked against the eager step's (within 1e-3) before timing.

    python3 benches/torch_graph_mlp.py [steps]      (2000 by default; needs torch and a GPU)
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

BATCH, IN, HID, OUT = 64, 256, 1024, 256
ROUNDS = 5
ADDS = 200


def step(x, w1, b1, w2, b2):
    h = F.gelu(F.linear(x, w1, b1), approximate="tanh")
    y = F.gelu(F.linear(h, w2, b2), approximate="tanh")
    return torch.softmax(y, dim=-1, dtype=torch.float32)


def step_fused(x, w1, b1, w2, b2):
    # addmm(bias, x, Wᵀ) with GELU fused into cuBLASLt's epilogue where PyTorch can.
    h = torch._addmm_activation(b1, x, w1.t(), use_gelu=True)
    y = torch._addmm_activation(b2, h, w2.t(), use_gelu=True)
    return torch.softmax(y, dim=-1, dtype=torch.float32)


def per_step(n, op):
    """Seconds per call of `op` over `n` calls back to back, then a synchronize."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        op()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n


def host_per_call(n, op):
    """The median host seconds of one call of `op`, in batches of 16 between synchronizes."""
    host = []
    for _ in range((n + 15) // 16):
        for _ in range(16):
            t = time.perf_counter()
            op()
            host.append(time.perf_counter() - t)
        torch.cuda.synchronize()
    return statistics.median(host)


def capture(fn, warmup=3):
    """Captures `fn()` into a CUDA graph after warming it up on a side stream; returns the
    graph and what the captured call returned (its static output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    torch.cuda.synchronize()
    return g, out


def us(s):
    return f"{s * 1e6:.2f} µs"


def mlp_rows(name, fn, args, steps):
    """Eager and graph rows of one form of the step; returns the seconds per step of each and the
    largest difference between the graph's output and the eager step's."""
    want = fn(*args).clone()
    g, out = capture(lambda: fn(*args))
    # Cleared first, so that a replay that wrote nothing cannot match.
    out.zero_()
    g.replay()
    torch.cuda.synchronize()
    diff = (out - want).abs().max().item()
    if not diff <= 1e-3:
        sys.exit(f"{name}: the graph's output differs from the eager step's by {diff}")

    def eager_op():
        return fn(*args)

    for _ in range(20):
        eager_op()
        g.replay()
    eager_t, graph_t = [], []
    for _ in range(ROUNDS):
        eager_t.append(per_step(steps, eager_op))
        graph_t.append(per_step(steps, g.replay))
    eager_s, graph_s = statistics.median(eager_t), statistics.median(graph_t)
    eager_h, graph_h = host_per_call(steps, eager_op), host_per_call(steps, g.replay)
    print(f"| {name} eager | {us(eager_s)} | {us(eager_h)} per step |")
    print(f"| {name} graph | {us(graph_s)} | {us(graph_h)} per replay |")
    return eager_s, graph_s, diff


def adds_graph(replays):
    """PyTorch's graph of 200 in-place adds on 32 floats: (GPU s per node, host s per replay)."""
    a = torch.zeros(32, dtype=torch.float32, device="cuda")
    b = torch.ones(32, dtype=torch.float32, device="cuda")

    def adds():
        for _ in range(ADDS):
            a.add_(b)

    g, _ = capture(adds)
    for _ in range(20):
        g.replay()
    gpu = statistics.median(per_step(replays, g.replay) for _ in range(ROUNDS)) / ADDS
    return gpu, host_per_call(replays, g.replay)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    if not torch.cuda.is_available():
        sys.exit("torch_graph_mlp.py: needs a CUDA GPU")
    # f32 accumulation throughout, as the Rust bench's cuBLASLt matmuls (PyTorch otherwise lets
    # split-K reductions run in bf16).
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    dev = torch.device("cuda", 0)
    gen = torch.Generator().manual_seed(0)

    def uniform(shape, scale):
        # Uniform in [-scale, scale), as the Rust bench's inputs (other values, same spread).
        return ((torch.rand(shape, generator=gen) * 2 - 1) * scale).to(dev, torch.bfloat16)

    a1, a2 = (3.0 / IN) ** 0.5, (3.0 / HID) ** 0.5
    args = (
        uniform((BATCH, IN), 1.0),
        uniform((HID, IN), a1),
        uniform((HID,), 0.5),
        uniform((OUT, HID), 2.0 * a2),
        uniform((OUT,), 0.5),
    )
    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}: x [{BATCH}, {IN}] -> gelu(linear) "
        f"[{BATCH}, {HID}] -> gelu(linear) [{BATCH}, {OUT}] -> softmax, bf16, p f32; "
        f"{steps} steps per timed round, {ROUNDS} rounds\n"
    )
    print("| row | per step | host per call |")
    print("| --- | --- | --- |")
    rows = [("unfused", *mlp_rows("unfused (linear, gelu)", step, args, steps))]
    if hasattr(torch, "_addmm_activation"):
        rows.append(("fused", *mlp_rows("fused (_addmm_activation)", step_fused, args, steps)))
    gpu, host = adds_graph(steps)
    print(f"| graph of {ADDS} adds | {us(gpu)} per node | {us(host)} per replay |")
    print()
    for name, eager_s, graph_s, diff in rows:
        ratio = eager_s / graph_s
        print(f"{name}: eager / graph per step {ratio:.2f}x; graph output matches eager (max |diff| {diff:.2e})")
    print(f"graph of {ADDS} adds: the issue measured 1.31 µs per node, 5.9 µs host per replay")


if __name__ == "__main__":
    main()
