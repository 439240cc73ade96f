"""Notebook 09's Triton kernels against eager PyTorch, PyTorch's fused operators and torch.compile: bytes
moved, time, bandwidth, share of the peak.

Workload: one layer's activations as a transformer block of a small language model holds them,
8192 tokens x 4096 features, float32 (128 MiB per tensor): SiLU (forward, then backward along an
upstream gradient) and RMSNorm over the features (forward, then backward). Four implementations
each: eager PyTorch as written from the formula (`x * torch.sigmoid(x)`; `x * rsqrt(mean(x^2) + eps)
* w`), PyTorch's own fused operator (`F.silu`, `F.rms_norm`), `torch.compile` of the eager formula (the
baseline a hand-written kernel must beat: Inductor fuses it into Triton kernels of its own), and the
reference solution's kernels (TritonSiLU, TritonRMSNorm), each backward through autograd.

Bytes moved are counted, not measured: a TorchDispatchMode adds up, for every ATen operation an
implementation runs, the bytes of the tensors it reads and writes (what a kernel must move at
least; caches can only lower what reaches DRAM for tensors small enough to stay in them, and these
do not). For the reference's Triton kernels, a launch moves its tensor arguments once each.
torch.compile's kernels are Inductor's own launches, which the counter does not see: its bytes are not counted.

Only with CUDA: times (autograder.learner.timing: REPEATS interleaved rounds, median and middle half),
GB/s and the share of the device's peak bandwidth (memory clock x bus width x 2 from the device's
properties where torch reports them; else the measured bandwidth of a large device-to-device copy, and
the output says which). GB/s is the same yardstick for every implementation, as Triton's tutorials
measure it: the bytes a fused pass must move (each input read once, each output written once, `least`)
over the time, so its share of the peak is the share of the roofline's speed that the pass reaches.
Without CUDA the kernels run in Triton's interpreter, whose times mean nothing, and torch.compile would
write C++ for the CPU: the script prints the byte counts on a small input only, and says what needs a GPU.

The reference is not copied here: the solution cells of solutions/09_kernels/09_kernels.ipynb are
executed, the single source of the reference. Run from the repository root:
`.venv/bin/python benchmarks/kernels.py`.
"""
import contextlib
import io
import linecache
import pathlib
import sys

import nbformat
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.checks.kernel_guard import kernel_classes  # noqa: E402
from autograder.learner import triton_setup  # noqa: E402
from autograder.learner.device import get_device  # noqa: E402
from autograder.learner.timing import wall_times  # noqa: E402

NOTEBOOK = ROOT / "solutions" / "09_kernels" / "09_kernels.ipynb"
REPEATS = 15
EPS = 1e-6
# Operations that move no data: allocations without a fill, and views.
NO_TRAFFIC = {"empty", "empty_like", "empty_strided", "detach", "view", "_unsafe_view", "t", "alias", "expand"}


def reference(notebook=NOTEBOOK) -> dict:
    """The notebook's set-up cell and solution cells, executed (TritonSiLU, TritonRMSNorm, ...; notebook 10's
    kernels for benchmarks/attention.py)."""
    namespace = {"__name__": "reference_kernels"}
    cells = nbformat.read(notebook, as_version=4).cells
    setup = next(c for c in cells if c.cell_type == "code")
    solutions = [c for c in cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    with contextlib.redirect_stdout(io.StringIO()):  # the set-up cell's greeting
        for cell in [setup] + solutions:
            name = f"<{notebook.name}: {cell.id}>"  # a compiled @triton.jit kernel reads its source from linecache
            linecache.cache[name] = (len(cell.source), None, cell.source.splitlines(True), name)
            exec(compile(cell.source, name, "exec"), namespace)
    return namespace


class Traffic(TorchDispatchMode):
    """Bytes read and written by every ATen operation (tensor inputs read, outputs written), and by
    every Triton launch (each tensor argument once: read, written, or both for in-place outputs)."""

    def __init__(self):
        super().__init__()
        self.bytes, self.inside = 0, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.inside and func._schema.name.split("::")[-1] not in NO_TRAFFIC:
            for t in _tensors(args, kwargs) + _tensors(out):
                self.bytes += t.numel() * t.element_size()
        return out


def _tensors(*values):
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            found += _tensors(*value)
        elif isinstance(value, dict):
            found += _tensors(*value.values())
    return found


def bytes_moved(fn, x, w, g):
    """Bytes fn(x, w, g) moves: its ATen operations' tensors, and each Triton launch's tensor arguments
    (the interpreter's own copies of them not counted)."""
    traffic = Traffic()
    originals = {cls: vars(cls)["run"] for cls in kernel_classes()}

    def counted(original):
        def run(kernel, *args, **kwargs):
            if kwargs.get("warmup"):
                return original(kernel, *args, **kwargs)
            traffic.bytes += sum(t.numel() * t.element_size() for t in _tensors(args, kwargs))
            traffic.inside = True
            try:
                return original(kernel, *args, **kwargs)
            finally:
                traffic.inside = False
        return run

    for cls, original in originals.items():
        cls.run = counted(original)
    try:
        with traffic:
            fn(x, w, g)
    finally:
        for cls, original in originals.items():
            cls.run = original
    return traffic.bytes


def implementations(ref, compiled):
    """{layer: {implementation: (forward, forward + backward)}}, each a function of (x, w, g); with
    `compiled`, torch.compile of the eager formula too."""
    def eager_silu(x, w):
        return x * torch.sigmoid(x)

    def eager_rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w

    def both(forward):
        def step(x, w, g):
            x = x.detach().requires_grad_(True)
            w = w.detach().requires_grad_(True)
            forward(x, w).backward(g)
        return step

    compile_silu = {"torch.compile": torch.compile(eager_silu)} if compiled else {}
    compile_rms = {"torch.compile": torch.compile(eager_rms)} if compiled else {}
    layers = {
        "SiLU": {"eager formula": eager_silu, "F.silu": lambda x, w: F.silu(x), **compile_silu,
                 "TritonSiLU (ours)": lambda x, w: ref["TritonSiLU"].apply(x)},
        "RMSNorm": {"eager formula": eager_rms, "F.rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS),
                    **compile_rms, "TritonRMSNorm (ours)": lambda x, w: ref["TritonRMSNorm"].apply(x, w, EPS)},
    }
    return {layer: {name: (lambda x, w, g, f=f: f(x, w), both(f)) for name, f in impls.items()}
            for layer, impls in layers.items()}


def least(layer, x, w):
    """{pass: the bytes a fused implementation of `layer` must move}: each input read once, each output
    written once; RMSNorm's forward keeps rstd (one value per row) for its backward."""
    size, vector, rows = x.nbytes, w.nbytes, x.shape[0] * x.element_size()
    if layer == "SiLU":
        forward, backward = 2 * size, 3 * size  # x -> y; x, grad_out -> grad_x
    else:
        forward = 2 * size + vector + rows  # x, w -> y, rstd
        backward = 3 * size + 2 * vector + rows  # grad_out, x, w, rstd -> grad_x, grad_w
    return {"forward": forward, "forward + backward": forward + backward}


def peak_bandwidth(device):
    """(bytes per second, how it was found): the properties' memory clock x bus width x 2, else a copy."""
    props = torch.cuda.get_device_properties(device)
    clock, width = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    if clock and width:
        return 2 * clock * 1e3 * width / 8, f"from the device's properties: {clock / 1e3:.0f} MHz x {width} bits x 2"
    a = torch.empty(2 ** 28, device=device)
    b = torch.empty_like(a)
    spread = wall_times({"copy": lambda: b.copy_(a)}, repeats=REPEATS, device=device)["copy"]
    return 2 * a.numel() * 4 / spread.median, "measured: a 1 GiB device-to-device copy (read + write)"


def main() -> int:
    device = get_device()
    triton = triton_setup.prepare(device)
    ref = reference()
    compiled = triton.usable and not triton.interpreted
    rows, cols = (8192, 4096) if compiled else (64, 256)
    print(f"device: {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
          + f", torch {torch.__version__}, {triton.message}")
    gen = torch.Generator(device="cpu").manual_seed(0)
    x, g = (torch.randn(rows, cols, generator=gen).to(device) for _ in range(2))
    w = (1 + 0.1 * torch.randn(cols, generator=gen)).to(device)
    print(f"workload: x and grad_out {rows} x {cols} float32 ({x.numel() * 4 / 2**10:,.0f} KiB each), "
          f"weight {cols}; reference: {NOTEBOOK.relative_to(ROOT)}")
    if compiled:
        peak, how = peak_bandwidth(device)
        print(f"peak bandwidth: {peak / 1e9:.0f} GB/s ({how}); times: median (middle half) of {REPEATS} rounds")
        print("GB/s: the bytes a fused pass must move (least) over the time, the same yardstick for every row")
    else:
        print("Triton runs in its interpreter here: its times mean nothing, so only bytes are printed. Times, GB/s, "
              "% of peak and the torch.compile baseline need a GPU (CUDA).")
    for layer, impls in implementations(ref, compiled).items():
        must = least(layer, x, w)
        print(f"\n{layer}: a fused pass must move " + ", ".join(
            f"{moved / (x.numel() * 4):.2f} sizes of x {label}" for label, moved in must.items()))
        print(f"{'implementation':<22}{'pass':<20}{'KiB moved':>12}{'in sizes of x':>15}"
              + (f"{'GB/s':>8}{'of peak':>9}  time" if compiled else ""))
        for name, (forward, step) in impls.items():
            for label, fn in (("forward", forward), ("forward + backward", step)):
                if name == "torch.compile":  # Inductor's launches: invisible to the counter
                    line = f"{name:<22}{label:<20}{'not counted':>27}"
                else:
                    moved = bytes_moved(fn, x, w, g)
                    line = f"{name:<22}{label:<20}{moved / 2**10:>12,.0f}{moved / (x.numel() * 4):>15.2f}"
                if compiled:  # the first of its rounds compiles torch.compile's kernels; it is not timed
                    spread = wall_times({"run": lambda fn=fn: fn(x, w, g)}, repeats=REPEATS, device=device)["run"]
                    rate = must[label] / spread.median
                    line += f"{rate / 1e9:>8.0f}{rate / peak:>9.0%}  {spread.describe()}"  # time last: its width varies
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
