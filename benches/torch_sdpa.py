"""The attention of bench-cudnn_attention (B 4, H 16, S 4096, D 128, bf16, causal) through
PyTorch's `scaled_dot_product_attention` on the same GPU, restricted to the cuDNN backend, then
to the flash backend (a backend this build or GPU lacks is skipped, saying so): forward and
forward + backward, best of 3 rounds, in TFLOP/s counted as the bench counts them (forward
4·B·H·S²·D, halved when causal; backward 2.5 times the forward).

The forward runs on inputs that require gradients, so that it keeps the row statistics as the
bench's forward does. `python3 benches/torch_sdpa.py [b] [h] [s] [d] [iters]` (defaults
4 16 4096 128 10); `--full` drops the causal mask.
"""
import sys
import torch
import torch.nn.functional as F

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    sys.exit(f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel: this script needs PyTorch 2.3 or later")

causal = "--full" not in sys.argv
args = [a for a in sys.argv[1:] if not a.startswith("-")]


def arg(i, default):
    return int(args[i]) if len(args) > i else default


b, h, s, d, iters = arg(0, 4), arg(1, 16), arg(2, 4096), arg(3, 128), arg(4, 10)
fwd_flops = 4.0 * b * h * s * s * d / (2.0 if causal else 1.0)
print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
print(f"scaled dot-product attention, B {b}, H {h}, S {s}, D {d}, bf16, {'causal' if causal else 'no mask'}: "
      f"{fwd_flops / 1e9:.1f} GFLOP forward")


def rand():
    return torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) / 2


q, k, v, do = (rand().requires_grad_(), rand().requires_grad_(), rand().requires_grad_(), rand())


def forward():
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def forward_backward():
    torch.autograd.grad(forward(), (q, k, v), do)


def timed(f):
    """Seconds per call, the best of 3 rounds of `iters` calls after 3 warm-up calls."""
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            f()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / iters / 1e3)
    return best


print("| backend | forward | forward + backward |")
print("| --- | --- | --- |")
for name in ("CUDNN_ATTENTION", "FLASH_ATTENTION"):
    backend = getattr(SDPBackend, name, None)
    if backend is None:
        print(f"| {name} | skipped: this torch has no such backend | |")
        continue
    try:
        with sdpa_kernel(backend):
            fwd = timed(forward)
            both = timed(forward_backward)
    except RuntimeError as e:
        print(f"| {name} | skipped: unavailable ({str(e).splitlines()[0]}) | |")
        continue
    print(f"| PyTorch {name} | {fwd * 1e3:.3f} ms ({fwd_flops / fwd / 1e12:.1f} TFLOP/s) "
          f"| {both * 1e3:.3f} ms ({3.5 * fwd_flops / both / 1e12:.1f} TFLOP/s) |")
