"""Memory that autograd keeps for backward, measured the same way on every device.

PyTorch exposes no allocator statistics on the CPU, so the course counts what backward must
keep: the tensors autograd saves, seen through `torch.autograd.graph.saved_tensors_hooks`.
That count means the same on a laptop and on a GPU. On CUDA, `measure` adds the allocator's
peak and times with CUDA events, so the GPU figures sit beside the portable ones.
`saved_values_by_name` reads the same thing from the other end: what one node of a finished
graph keeps (notebook 04 prints and draws it, notebook 06's checks count it without hooks).
"""
import contextlib
import dataclasses
import time
import weakref

import torch

FREED = "freed"  # what `saved_values_by_name` gives for a value that backward has already released


def saved_values_by_name(node) -> dict:
    """{name: value} for what one autograd node keeps for its backward, or FREED once released.

    A generated node keeps each value as an attribute `_saved_<name>`: tensors (a Python number
    operand, as in `x * 2.0`, is kept as a 0-d tensor), tuples of tensors, sizes, numbers; a tensor
    that was not needed reads as None. A custom `torch.autograd.Function` keeps what its forward
    passed to `ctx.save_for_backward`, under the name "saved_tensors".
    """
    names = [a for a in dir(node) if a.startswith("_saved_")]
    if "saved_tensors" in dir(node):  # a custom torch.autograd.Function (hasattr would read it, and raise once freed)
        names.append("saved_tensors")
    saved = {}
    for attr in names:
        try:
            saved[attr.removeprefix("_saved_")] = getattr(node, attr)
        except RuntimeError:  # backward() already released it
            saved[attr.removeprefix("_saved_")] = FREED
    return saved


class _Held:
    """What autograd stores instead of a saved tensor: freed exactly when the graph is freed."""
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedTensorLedger:
    """Count the bytes autograd saves inside a `with` block, and how many are still held.

    `total_bytes`: every distinct storage saved during the block (a storage saved by two ops
    counts once; a view counts its whole storage). `live_bytes`: those whose graph is still
    alive, which is what a training loop that keeps loss tensors leaks. `peak_bytes`: the most
    that was live at once, which is what checkpointing lowers (recomputation in backward saves
    again, briefly). Only graphs built inside the block are seen.

    A storage is known by its address only while it lives: it is forgotten when it dies (PyTorch
    keeps one Python object per storage, which can carry a weak reference), so a new storage that
    the allocator places at a freed address counts as new.
    """

    def __init__(self):
        self.total_bytes = self.live_bytes = self.peak_bytes = 0
        self._sizes = {}  # storage key -> bytes, for saved storages that are still alive
        self._holds = {}  # storage key -> saved references still held by autograd

    def _pack(self, t):
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr())
        if key not in self._sizes:
            self._sizes[key] = storage.nbytes()
            self.total_bytes += self._sizes[key]
            weakref.finalize(storage, self._sizes.pop, key, None).atexit = False
        size = self._sizes[key]
        if self._holds.get(key, 0) == 0:
            self.live_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self._holds[key] = self._holds.get(key, 0) + 1
        held = _Held(t.detach())  # detached: holding t itself would tie a cycle through its grad_fn
        weakref.finalize(held, self._release, key, size).atexit = False
        return held

    def _release(self, key, size):
        self._holds[key] -= 1
        if self._holds[key] == 0:
            self.live_bytes -= size

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda held: held.tensor)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)


@dataclasses.dataclass
class Measurement:
    """One run of a forward + backward: what it saved (in all, and the most held at once), its
    device peak (CUDA only) and its time."""
    saved_bytes: int
    peak_saved_bytes: int
    peak_bytes: int | None
    seconds: float


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def _cuda_peak(device, result):
    if device.type != "cuda":
        yield
        return
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    yield
    torch.cuda.synchronize(device)
    result["peak"] = torch.cuda.max_memory_allocated(device)


def measure(step, device) -> Measurement:
    """Run `step()` (forward and backward) once and measure it on `device`.

    Saved bytes are counted on every device; the allocator peak and CUDA-event time only on
    CUDA (wall time elsewhere), so one call serves the GPU and the CPU path alike.
    """
    device = torch.device(device)
    result = {"peak": None}
    with SavedTensorLedger() as ledger, _cuda_peak(device, result):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            _synchronize(device)
            seconds = start.elapsed_time(end) / 1000
        else:
            began = time.perf_counter()
            step()
            seconds = time.perf_counter() - began
    return Measurement(ledger.total_bytes, ledger.peak_bytes, result["peak"], seconds)
