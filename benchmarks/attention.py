"""Notebook 10's FlashAttention kernels against eager attention and PyTorch's fused kernel: time and peak memory
against the sequence length N, and the bytes each saves for its backward.

Three implementations of causal attention, forward then backward along an upstream gradient of ones: eager
attention from the formula (`softmax(Q Kᵀ · scale) V`, which autograd differentiates and for which it keeps P,
N × N per head), `F.scaled_dot_product_attention` (PyTorch's fused kernel), and the reference solution's
`FlashAttention` (its Triton forward and backward, which keep q, k, v, o and lse and recompute P).

Only with CUDA: per N, the median time of a forward and backward (autograder.learner.timing) and the peak memory
above what the inputs hold (torch.cuda.max_memory_allocated), in float16, batch 4, 16 heads of 64; eager
attention runs out of memory first, and the table says where. Without CUDA the kernels run in Triton's
interpreter, whose times mean nothing: the script prints, on small inputs in float32, the bytes each
implementation's operations and launches move (counted as benchmarks/kernels.py counts them) and the bytes it
saves for the backward (saved-tensor hooks), and says that times and peak memory need a GPU.

The reference is not copied here: the set-up and solution cells of solutions/10_attention/10_attention.ipynb
are executed, the single source of the reference. Run from the repository root:
`.venv/bin/python benchmarks/attention.py`.
"""
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch.autograd.graph import saved_tensors_hooks

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels import bytes_moved, reference  # noqa: E402  (benchmarks/kernels.py: the byte counter)

from autograder.learner import triton_setup  # noqa: E402
from autograder.learner.device import get_device  # noqa: E402
from autograder.learner.timing import wall_times  # noqa: E402

NOTEBOOK = ROOT / "solutions" / "10_attention" / "10_attention.ipynb"
BATCH, HEADS, WIDTH = 4, 16, 64
LENGTHS = (1024, 2048, 4096, 8192, 16384)
SMALL = (64, 128, 256)  # without CUDA: the interpreter at sizes it runs in seconds
REPEATS = 5


def implementations(ref) -> dict:
    """{name: fn(q, k, v) -> o}, causal, at the scale 1/sqrt(d)."""
    def eager(q, k, v):
        scale = q.shape[-1] ** -0.5
        s = (q @ k.mT) * scale
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    return {"eager": eager,
            "F.scaled_dot_product_attention": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "FlashAttention (ours)": lambda q, k, v: ref["FlashAttention"].apply(q, k, v, q.shape[-1] ** -0.5, True)}


def inputs(n, dtype, device, batch=BATCH, heads=HEADS):
    gen = torch.Generator(device="cpu").manual_seed(n)
    return [torch.randn(batch, heads, n, WIDTH, generator=gen, dtype=dtype).to(device).requires_grad_(True)
            for _ in range(3)]


def step(fn, q, k, v):
    """One forward and backward along an upstream gradient of ones."""
    q.grad = k.grad = v.grad = None
    fn(q, k, v).backward(torch.ones_like(q))


def saved_bytes(fn, q, k, v) -> int:
    """Bytes of the tensors autograd keeps for fn's backward (each storage once)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        fn(q, k, v)
    return sum(storages.values())


def peak_bytes(fn, q, k, v, device) -> int:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    step(fn, q, k, v)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def on_cuda(ref, device):
    print(f"workload: causal attention, batch {BATCH}, {HEADS} heads of {WIDTH}, float16; forward + backward; "
          f"times: median (middle half) of {REPEATS} rounds; peak: memory above the inputs")
    print(f"{'N':>6}  {'implementation':<32}{'time':>30}{'peak MiB':>11}{'saved MiB':>11}")
    for n in LENGTHS:
        q, k, v = inputs(n, torch.float16, device)
        for name, fn in implementations(ref).items():
            try:
                saved = saved_bytes(fn, q, k, v)
                peak = peak_bytes(fn, q, k, v, device)
                spread = wall_times({"run": lambda fn=fn: step(fn, q, k, v)}, repeats=REPEATS, device=device)["run"]
                print(f"{n:>6}  {name:<32}{spread.describe():>30}{peak / 2**20:>11,.1f}{saved / 2**20:>11,.1f}")
            except torch.cuda.OutOfMemoryError:
                print(f"{n:>6}  {name:<32}{'out of memory':>30}")
            torch.cuda.empty_cache()


def on_cpu(ref, device):
    print("Triton runs in its interpreter here: its times mean nothing, so only bytes are printed. Times and peak "
          "memory need a GPU (CUDA).")
    print("workload: causal attention, batch 1, 2 heads of 64, float32; forward + backward")
    print(f"{'N':>6}  {'implementation':<32}{'KiB moved':>12}{'KiB saved':>12}")
    for n in SMALL:
        q, k, v = inputs(n, torch.float32, device, batch=1, heads=2)
        for name, fn in implementations(ref).items():
            moved = bytes_moved(lambda q, k, v, fn=fn: step(fn, q, k, v), q, k, v)
            saved = saved_bytes(fn, q, k, v)
            print(f"{n:>6}  {name:<32}{moved / 2**10:>12,.0f}{saved / 2**10:>12,.0f}")


def main() -> int:
    device = get_device()
    triton = triton_setup.prepare(device)
    ref = reference(NOTEBOOK)
    print(f"device: {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
          + f", torch {torch.__version__}, {triton.message}; reference: {NOTEBOOK.relative_to(ROOT)}")
    if triton.usable and not triton.interpreted:
        on_cuda(ref, device)
    else:
        on_cpu(ref, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
