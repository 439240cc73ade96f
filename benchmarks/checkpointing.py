"""Notebook 06's checkpointing against PyTorch's, on chains of 16, 32 and 64 equal blocks.

For every depth n: no checkpointing, √n segments (k = best_segments(n), torch's convention: the
last segment plain) and a checkpoint around every block, each run by the reference solution and by
torch.utils.checkpoint (reentrant and non-reentrant). Printed per run: the peak saved bytes
(autograder.learner.memory.measure: saved-tensor hooks, on every device; one run, bytes do not
wobble), the CUDA allocator's peak on a GPU, the time of one training step (autograder.learner.timing:
REPEATS rounds in which the variants take turns, wall time with CUDA synchronised, on one thread on a
CPU; the median and the middle half of the runs), and both set against the theory.

Theory. A block is y = tanh(x @ W) with x of u bytes and W of w bytes: it keeps x, W and y, and
y is the next block's x. With k segments of s = n // k blocks, the last one plain with
L = n - (k - 1) s blocks, the forward pass ends holding k segment inputs (the k - 1 checkpointed
ones and the plain segment's) and L blocks' W and y; rebuilding a segment holds less. So

    peak(k) = k u + L (w + u),    k = 1: no checkpointing;  k = n: a checkpoint per block.

The recomputation runs (k - 1) s of the n blocks again (all n with a checkpoint per block): that
fraction of one forward pass, which the time columns set against the measured extra time over a
measured forward pass, computed round by round (median and middle half). On a CPU shared with other
work the times are noisy, and the spread says how much; the bytes are exact.

Why the non-reentrant variant reads low: its saved-tensor hooks nest inside the ledger's, so what
it recomputes in backward is held where the ledger does not see it (on a GPU, compare the CUDA
peak column instead). The reentrant variant saves like a torch.autograd.Function, as ours does.

The reference is not copied here: the solution cells of
solutions/06_checkpointing/06_checkpointing.ipynb are executed, the single source of the
reference. (It cannot live in the `autograder` package, which learners install: that would ship
the answers.) Run from the repository root: `.venv/bin/python benchmarks/checkpointing.py`.
"""
import math
import os
import pathlib
import platform
import sys
import time

import nbformat
import torch
import torch.utils.checkpoint as torch_checkpoint

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.learner.device import get_device  # noqa: E402
from autograder.learner.memory import measure  # noqa: E402
from autograder.learner.timing import Spread, wall_times  # noqa: E402

NOTEBOOK = ROOT / "solutions" / "06_checkpointing" / "06_checkpointing.ipynb"
DEPTHS = (16, 32, 64)
REPEATS = 9
MB = 2 ** 20


def reference() -> dict:
    """saved_bytes, checkpoint, checkpoint_sequential, best_segments...: the solution cells, executed."""
    namespace = {"__name__": "reference_checkpointing", "torch": torch, "math": math}
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            exec(compile(cell.source, f"<{NOTEBOOK.name}: {cell.id}>", "exec"), namespace)
    return namespace


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = torch.nn.Linear(width, width, bias=False)

    def forward(self, x):
        return torch.tanh(self.linear(x))


def theory_peak(n, k, u, w):
    last = n - (k - 1) * (n // k)
    return k * u + last * (w + u)


def main() -> int:
    device = get_device()
    sizes = dict(width=1024, batch=4096) if device.type == "cuda" else dict(width=256, batch=512)
    if device.type == "cpu":  # threads that wait for each other make CPU times jump when other programs share the cores
        torch.set_num_threads(1)
    ref = reference()
    checkpoint, checkpoint_sequential = ref["checkpoint"], ref["checkpoint_sequential"]
    best_segments = ref["best_segments"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    print(f"device: {device} ({name}), {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"torch {torch.__version__}")
    print(f"blocks: tanh(x @ W), W {sizes['width']}x{sizes['width']}, x {sizes['batch']}x{sizes['width']} float32; "
          f"reference: {NOTEBOOK.relative_to(ROOT)}; times: median (middle half) of {REPEATS} rounds"
          + ("; CPU times on one thread" if device.type == "cpu" else ""))

    def every_block(apply):
        def run(blocks, x):
            for b in blocks:
                x = apply(b, x)
            return x
        return run

    def plain(blocks, x):
        for b in blocks:
            x = b(x)
        return x

    def variants(blocks, x, n, k):
        """{(mode, segments, implementation): one training step (or forward pass) on `blocks`}."""
        runs = {("none", 1, "plain"): lambda: plain(blocks, x).sum().backward()}
        for impl, (ckpt, seq) in impls.items():
            runs[("√n segments", k, impl)] = (lambda seq=seq: seq(blocks, k, x).sum().backward())
            runs[("every block", n, impl)] = (lambda ckpt=ckpt: every_block(ckpt)(blocks, x).sum().backward())
        runs[("forward only", 0, "plain")] = lambda: plain(blocks, x)
        return runs

    impls = {
        "ours": (checkpoint, checkpoint_sequential),
        "torch reentrant": (lambda f, x: torch_checkpoint.checkpoint(f, x, use_reentrant=True),
                            lambda b, k, x: torch_checkpoint.checkpoint_sequential(b, k, x, use_reentrant=True)),
        "torch non-reentrant": (lambda f, x: torch_checkpoint.checkpoint(f, x, use_reentrant=False),
                                lambda b, k, x: torch_checkpoint.checkpoint_sequential(b, k, x, use_reentrant=False)),
    }
    header = (f"{'n':>3} {'mode':<16} {'k':>3} {'implementation':<20} {'peak saved MB':>13} {'theory MB':>9} "
              f"{'ratio':>6} {'step ms (middle half)':>24} {'extra/fwd (middle half)':>24} {'theory':>6}"
              + (f" {'CUDA peak MB':>12}" if device.type == "cuda" else ""))
    began = time.perf_counter()
    for n in DEPTHS:
        torch.manual_seed(n)
        blocks = [Block(sizes["width"]).to(device) for _ in range(n)]
        x = torch.randn(sizes["batch"], sizes["width"], device=device, requires_grad=True)
        u, w = x.nbytes, blocks[0].linear.weight.nbytes
        k = best_segments(n)
        runs = variants(blocks, x, n, k)
        # the variants take turns, round by round, so a slow moment of the machine hits all of them
        times = wall_times(runs, repeats=REPEATS, warmup=1, device=device)
        forward, base = times.pop(("forward only", 0, "plain")), times[("none", 1, "plain")]
        print(f"\n{header}")
        for key, spread in times.items():
            mode, segs, impl = key
            m = measure(runs[key], device)
            peak, expected = m.peak_saved_bytes, theory_peak(n, segs, u, w)
            extra = Spread.of([(t - b) / f for t, b, f in zip(spread.values, base.values, forward.values)])
            recomputed = 1.0 if mode == "every block" else (segs - 1) * (n // segs) / n
            cuda = f" {m.peak_bytes / MB:12.1f}" if m.peak_bytes is not None else ""
            (t1, t3), (e1, e3) = spread.quartiles, extra.quartiles
            print(f"{n:>3} {mode:<16} {segs:>3} {impl:<20} {peak / MB:13.2f} {expected / MB:9.2f} "
                  f"{peak / expected:6.3f} {1e3 * spread.median:8.1f} ({1e3 * t1:6.1f}-{1e3 * t3:6.1f}) "
                  f"{extra.median:9.2f} ({e1:5.2f} to {e3:5.2f}) {recomputed:6.2f}{cuda}")
        print(f"    forward pass alone {forward.describe()}; round(√{n}) = {round(math.sqrt(n))}, "
              f"best_segments({n}) = {k} (for blocks that keep one activation each)")
    print(f"\nwall time {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
