"""The ResNet-50 3x3 convolution of bench-cudnn (N 32, C = K = 256, 56x56, pad 1, bf16,
channels-last) through PyTorch on the same GPU: forward and the input gradient (backward-data),
with cuDNN's benchmark mode off and on, in TFLOP/s. `python3 benches/torch_conv.py [n] [iters]`.
"""
import sys
import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 32
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
c, hw = 256, 56
flops = 2.0 * n * c * hw * hw * c * 9
print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
x = torch.randn(n, c, hw, hw, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
w = torch.randn(c, c, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
dy = torch.randn(n, c, hw, hw, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)


def timed(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        f()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters / 1e3


for bench in (False, True):
    torch.backends.cudnn.benchmark = bench
    fwd = timed(lambda: torch.nn.functional.conv2d(x, w, padding=1))
    dgrad = timed(lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, padding=1))
    print(f"| PyTorch, cudnn.benchmark={bench} | forward {fwd * 1e3:.3f} ms ({flops / fwd / 1e12:.1f} TFLOP/s) "
          f"| backward-data {dgrad * 1e3:.3f} ms ({flops / dgrad / 1e12:.1f} TFLOP/s) |")
