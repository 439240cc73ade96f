"""The guard around a call of a learner's Triton code: padded memory, counted launches, no torch maths.

Triton's interpreter does not fault on an out-of-bounds access: a kernel without a mask reads and
writes past its tensor, and a store past a tensor the learner allocated can corrupt the process's
heap. So while the learner's function runs (`run_guarded`, a driver that runs where the learner's
code runs):

- every input is copied into the middle of a larger buffer whose other elements hold a marker (a
  NaN with a payload of its own, `AROUND`); a non-contiguous input also has marked gaps between its
  elements and rows;
- every tensor the function allocates (`torch.empty_like`, `torch.empty`, `torch.zeros`, ...) is
  given out the same way, with a marker of its own around it (`BEYOND`: a value loaded from an
  input's padding and stored past an output must still show), and what `empty` would leave unset
  holds a third marker (`UNSET`);
- every Triton launch is counted (`JITFunction.run`, and the interpreter's `run`);
- in Triton's interpreter, loads and stores are watched (`kernel_accesses`): masked-off lanes of a load without
  `other=` hold a fourth marker (`MASKED`), two programs of a launch storing to one element are a race, a load
  of `UNSET` memory is noted (on a GPU these are wrong answers the interpreter would hide), and so is the first
  lane of a load or store whose address lies outside every tensor of its launch (`KernelRun.outside_access`,
  named after the input or allocation whose padding it reached: "read outside q"), whether or not what it
  read reaches the result;
- every ATen operation outside a launch that is not an allocation, a view or a copy is recorded:
  the graded functions compute in their kernels, and torch only allocates and launches;
- so is, outside a launch, the first way out of torch (a tensor's data read into NumPy or Python numbers:
  `Tensor.numpy`, `np.asarray`, `tolist`, `item`, `float`) or in (a tensor built from NumPy or Python data:
  `torch.from_numpy`, `torch.tensor`, `torch.as_tensor`), and the first tensor an operation is given, or the call
  returns, that no operation of the call made (not an input, allocation, view or copy): NumPy's, or computed
  while the learner's code had switched the watch off;
- the guard is an `op_watch.GuardedMode`, and the launch counters and memory watches must still be in place at the
  end: code that switches any of them off fails the call (`op_watch.GuardSwitchedOff`).

Afterwards `KernelRun` says what happened, as data: what came back (compact copies), the launches,
the first refused operation, which buffers were written outside the tensor, which inputs changed,
how many elements of each returned tensor the kernel never wrote (and how many it wrote from unset
memory), the first race, the first read of unset memory and the kernels that loaded without `other=`.
"""
import contextlib
import dataclasses
import inspect
import sys

import numpy as np
import torch
from torch.utils import _pytree as pytree

from autograder.checks import kernel_accesses
from autograder.checks.compare import GradingError
from autograder.checks.op_watch import GuardedMode, switched_off
from autograder.learner import triton_setup

PAD = 16384  # marked elements before and after each tensor: more than a block (<= 4096) can overrun
INTEGER_OF_SIZE = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}
# Bit patterns by element size: quiet NaNs for the float dtypes, each with a payload of its own.
AROUND = {8: 0x7FF8A11AA11AA11A, 4: 0x7FC0A11A, 2: 0x7E11, 1: 0x5A}
BEYOND = {8: 0x7FF8BE40BE40BE40, 4: 0x7FC0BE40, 2: 0x7E33, 1: 0x5C}
UNSET = {8: 0x7FF8B00BB00BB00B, 4: 0x7FC0B00B, 2: 0x7E22, 1: 0x5B}
MASKED = {8: 0x7FF8AA5CAA5CAA5C, 4: 0x7FC0AA5C, 2: 0x7FC4, 1: 0x5D}  # 0x7FC4: a NaN in float16 and in bfloat16
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# ATen operations torch may run on the data inside a graded function: allocations, fills, views,
# copies and conversions. Anything else (mul, sigmoid, sum, rsqrt, ...) is maths outside the kernel.
ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
FILLED_ALLOCATIONS = {"zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
                      "new_full", "scalar_tensor"}
ALLOWED = ALLOCATIONS | FILLED_ALLOCATIONS | {
    "fill_", "zero_", "view", "_unsafe_view", "as_strided", "t", "transpose", "permute", "expand", "slice", "select",
    "unsqueeze", "squeeze", "alias", "detach", "split", "unbind", "clone", "copy_", "_to_copy", "_reshape_alias",
    "promote_types",  # metadata (torch.promote_types): tests/test_rules.py holds the judge's list to this one
}
# ATen operations that take data out of torch or bring it in: computing in NumPy or Python is maths outside the kernel.
OUT_OF_TORCH = {"_local_scalar_dense": "reads a number out of a tensor (.item(), float(t), int(t), if t: ...)",
                **dict.fromkeys(("lift_fresh", "lift_fresh_copy", "lift"), "builds a tensor from NumPy or Python data "
                                "(torch.from_numpy, torch.tensor, torch.as_tensor)")}
# Tensor methods that hand a tensor's data to NumPy or Python (some reach no ATen operation at all).
DATA_OUT = {getattr(torch.Tensor, name): name for name in (
    "numpy", "__array__", "tolist", "item", "__float__", "__int__", "__index__", "__bool__", "__complex__",
    "__dlpack__", "data_ptr", "untyped_storage", "storage") if hasattr(torch.Tensor, name)}


def _short(name: str) -> str:
    return name.removeprefix("aten::")


def bits(t):
    """The tensor's elements as integers of the same size, to compare bit patterns (NaN payloads)."""
    return t.view(INTEGER_OF_SIZE[t.element_size()])


def _gapped_strides(shape):
    """Strides with a gap after every element and every row (as x[::2] of a tensor twice as wide)."""
    strides, step = [], 2
    for size in reversed(shape):
        strides.append(step)
        step *= 2 * max(size, 1)
    return tuple(reversed(strides))


@dataclasses.dataclass
class Region:
    """A tensor given to the learner (`view`) in the middle of a marked buffer."""
    name: str
    buffer: torch.Tensor
    view: torch.Tensor
    marker: dict  # AROUND for an input, BEYOND for an allocation
    original: torch.Tensor = None  # an input's values, to see whether the call changed them

    @classmethod
    def around(cls, name, shape, stride, dtype, device, marker=AROUND, unset=False):
        """A view of `shape` and `stride` in a buffer marked with `marker` (and UNSET inside, if `unset`)."""
        buffer = torch.empty(2 * PAD + kernel_accesses.span(shape, stride), dtype=dtype, device=device)
        bits(buffer).fill_(marker[buffer.element_size()])
        view = buffer.as_strided(shape, stride, PAD)
        if unset:
            bits(view).fill_(UNSET[buffer.element_size()])
        return cls(name, buffer, view, marker)

    @classmethod
    def input(cls, name, t, gapped=False):
        """`t`'s values in a marked buffer: contiguous, or with marked gaps when `gapped`."""
        stride = _gapped_strides(t.shape) if gapped and t.dim() else t.contiguous().stride()
        region = cls.around(name, t.shape, stride, t.dtype, t.device)
        region.view.copy_(t)
        region.original = region.view.clone()
        return region

    def written_outside(self) -> bool:
        """Whether anything changed in the marked elements: before, after, or between the view's."""
        marked = torch.ones(self.buffer.numel(), dtype=torch.bool, device=self.buffer.device)
        marked.as_strided(self.view.shape, self.view.stride(), PAD).fill_(False)
        return bool((bits(self.buffer)[marked] != self.marker[self.buffer.element_size()]).any())

    def changed(self) -> bool:
        return self.original is not None and not torch.equal(bits(self.view), bits(self.original))


def _counts(flags):
    """(how many, of how many, flat index of the first) of flat booleans; None where none is set."""
    count = int(flags.sum())
    return (count, flags.size, int(np.flatnonzero(flags)[0])) if count else None


def _unset(t):
    """Flat booleans: which elements of a returned tensor still hold UNSET (None for what cannot)."""
    if not isinstance(t, torch.Tensor) or t.element_size() not in UNSET or t.numel() == 0:
        return None
    return (bits(t.detach()) == UNSET[t.element_size()]).flatten().cpu().numpy()


def unwritten(t, stored=None):
    """(elements still holding UNSET that no store reached, elements, flat index of the first) for a
    returned tensor; `stored`: flat booleans, the elements a store or an atomic reached."""
    left = _unset(t)
    return None if left is None else _counts(left if stored is None else left & ~stored)


def from_unset(t, stored):
    """The same counts for elements a kernel stored that still hold UNSET: computed from unset memory."""
    left = _unset(t)
    return None if left is None else _counts(left & stored)


def _in(value, dtype, source):
    """The bit pattern of `value` (a float, or a bit pattern of `source`) cast from `source` to `dtype`."""
    if isinstance(value, int):
        return int(bits(torch.tensor([value], dtype=INTEGER_OF_SIZE[source.itemsize]).view(source).to(dtype)))
    return int(bits(torch.tensor([value], dtype=source).to(dtype)))


def masked_lanes(t):
    """Boolean mask: elements of a float tensor holding MASKED as any float dtype casts it to t's (a NaN
    keeps its payload through arithmetic and most casts), i.e. values computed from masked-off lanes of a
    load. A cast that drops the payload gives a plain NaN, which is not counted."""
    if not isinstance(t, torch.Tensor) or t.dtype not in FLOATS:
        return torch.zeros(getattr(t, "shape", ()), dtype=torch.bool)
    plain = {_in(nan, t.dtype, d) for d in FLOATS for nan in (float("nan"), -float("nan"))}
    forms = {_in(MASKED[d.itemsize], t.dtype, d) for d in FLOATS} - plain
    got = bits(t.detach().cpu())
    return torch.stack([got == form for form in forms]).any(0)


def constexprs(kernel, args, kwargs) -> dict:
    """{name: value} of a launch's `tl.constexpr` parameters (block sizes), read from the kernel's
    Python function: its annotations say which parameters are compile-time constants."""
    fn = getattr(kernel, "fn", None)
    if fn is None:
        return {}
    try:
        signature = inspect.signature(fn)
        bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
    except (TypeError, ValueError):
        return {}
    return {name: value for name, value in bound.arguments.items()
            if "constexpr" in str(signature.parameters[name].annotation)}


def kernel_classes():
    """Triton's kernel classes whose `run` launches a grid, where Triton is imported."""
    found = []
    for module, name in (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter", "InterpretedFunction")):
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and "run" in vars(cls):
            found.append(cls)
    return found


def _storage(t) -> int:
    """Where a tensor's storage starts (0 for one with none, or nothing in it)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def _tensors(value):
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


class KernelGuard(GuardedMode):
    """While active: allocations come from marked buffers, launches are counted, and (with `refuse`) the first
    ATen operation outside a launch that is not an allocation, view or copy is recorded, with the first way out
    of torch or into it (`outside`) and the first tensor no operation of the call made (`unseen`; `known`: the
    inputs' buffers, made before)."""

    def __init__(self, refuse=True, known=()):
        super().__init__()
        self.refuse, self.launches, self.inside, self.refused, self.allocated = refuse, 0, 0, None, []
        self.outside = self.unseen = None
        self.made = {_storage(t) for t in known}  # storages of the inputs and of every output of an operation
        self.largest_block = None  # (name, value) of the largest integer constexpr of any launch
        self.accesses = kernel_accesses.Accesses(UNSET, MASKED)

    def made_here(self, t) -> bool:
        """Whether `t` is an input, or a view of what an operation of the call made."""
        return t.numel() == 0 or not _storage(t) or _storage(t) in self.made

    def called(self, func, args, kwargs):
        if self.refuse and not self.inside and self.outside is None and func in DATA_OUT:
            self.outside = f"reads a tensor's data out of torch (Tensor.{DATA_OUT[func]})"

    def seen(self, func, types, args, kwargs):
        out = func(*args, **kwargs)
        if self.inside:  # Triton's own handling of the arguments (the interpreter copies storages)
            return out
        name = _short(func._schema.name)
        if self.refuse:
            self._judge(func._schema.name, args, kwargs)
        if (name in ALLOCATIONS or name in FILLED_ALLOCATIONS) and isinstance(out, torch.Tensor):
            out = self._marked(out, unset=name in ALLOCATIONS)
        self.made.update(_storage(t) for t in _tensors(out))
        return out

    def _judge(self, op, args, kwargs):
        """Record `op` (an ATen name) where it is maths, a way out of torch, or given a tensor the call never made."""
        name = _short(op)
        if name in OUT_OF_TORCH:
            self.outside = self.outside or f"{OUT_OF_TORCH[name]}: {op}"
        elif name not in ALLOWED:
            self.refused = self.refused or op
        if self.unseen is None and not all(self.made_here(t) for t in _tensors((args, kwargs))):
            self.unseen = f"a tensor your code passed to {op}"

    def _marked(self, out, unset):
        """`out` given out from a marked buffer (same shape, strides, dtype and device)."""
        if out.element_size() not in AROUND or out.dtype == torch.bool:
            return out
        what = f"a tensor your code allocated (shape {tuple(out.shape)}, {out.dtype})"
        region = Region.around(what, out.shape, out.stride(), out.dtype, out.device, BEYOND, unset)
        if not unset:
            region.view.copy_(out)
        self.allocated.append(region)
        return region.view

    def _note_blocks(self, kernel, args, kwargs):
        for name, value in constexprs(kernel, args, kwargs).items():
            if isinstance(value, int) and not isinstance(value, bool) and value > (self.largest_block or ("", 0))[1]:
                self.largest_block = (name, value)

    @contextlib.contextmanager
    def launches_counted(self):
        """Count every Triton launch; Triton's own torch calls during a launch are not the learner's. A counter
        no longer in place at the end fails the call (GuardSwitchedOff)."""
        classes = kernel_classes()
        originals = {cls: vars(cls)["run"] for cls in classes}

        def counted(original):
            def run(kernel, *args, **kwargs):
                if kwargs.get("warmup"):
                    return original(kernel, *args, **kwargs)
                self.launches += 1
                self._note_blocks(kernel, args, kwargs)
                self.inside += 1
                try:
                    with self.accesses.launch(kernel, args, kwargs):
                        return original(kernel, *args, **kwargs)
                finally:
                    self.inside -= 1
            return run

        installed = {cls: counted(originals[cls]) for cls in classes}
        for cls, run in installed.items():
            cls.run = run
        try:
            with kernel_accesses.watched(self.accesses):
                yield
        finally:
            replaced = [cls.__name__ for cls, run in installed.items() if vars(cls).get("run") is not run]
            for cls, original in originals.items():
                cls.run = original
            if replaced:
                raise switched_off("its kernel launches", f"{replaced[0]}.run replaced, so launches went uncounted")


@dataclasses.dataclass
class KernelRun:
    """What a guarded call did, as data the grader reads (see the module's docstring)."""
    result: object = None
    launches: int = 0
    refused: str = None
    outside: str = None  # the first way out of torch or into it outside a launch (NumPy, Python numbers), said
    unseen: str = None  # the first tensor no operation of the call made, said: where it was met
    wrote_outside: list = dataclasses.field(default_factory=list)
    changed: list = dataclasses.field(default_factory=list)
    unwritten: dict = dataclasses.field(default_factory=dict)  # position in the result -> unwritten()
    from_unset: dict = dataclasses.field(default_factory=dict)  # position in the result -> from_unset()
    largest_block: tuple = None  # (name, value): the largest integer tl.constexpr a launch was given
    race: kernel_accesses.Race = None  # the first two programs of a launch that stored to one element
    read_unset: kernel_accesses.Place = None  # the first element of torch.empty's memory a kernel read unset
    without_other: list = dataclasses.field(default_factory=list)  # kernels that loaded masked lanes, no other=
    largest_allocation: tuple = None  # (elements, shape) of the largest tensor the call allocated
    outside_access: str = None  # the first lane a load or store reached outside every tensor of its launch, said


def _compact(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone(memory_format=torch.contiguous_format)
    if isinstance(value, (tuple, list)):
        return type(value)(_compact(v) for v in value)
    return value


def _parts(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


@contextlib.contextmanager
def guarded(refuse=True, known=()):
    """The guard as a block: `with guarded() as guard:`; launches counted, allocations marked (`known`: the
    buffers of the inputs, which the call did not make)."""
    guard = KernelGuard(refuse, known)
    with guard.launches_counted(), guard:
        yield guard


def report(guard, regions, result) -> KernelRun:
    """The `KernelRun` of a finished guarded call."""
    everything = list(regions) + guard.allocated
    parts = _parts(result)
    stored = {i: guard.accesses.stored_at(part) for i, part in enumerate(parts) if unwritten(part) is not None}
    left = {i: unwritten(parts[i], elements) for i, elements in stored.items()}
    spoiled = {i: from_unset(parts[i], elements) for i, elements in stored.items()}
    largest = max(guard.allocated, key=lambda r: r.view.numel(), default=None)
    returned = [i for i, part in enumerate(parts) if isinstance(part, torch.Tensor) and not guard.made_here(part)]
    unseen = guard.unseen or (_returned(returned[0], parts) if guard.refuse and returned else None)
    return KernelRun(result=_compact(result), launches=guard.launches, refused=guard.refused,
                     outside=guard.outside, unseen=unseen,
                     wrote_outside=[r.name for r in everything if r.written_outside()],
                     changed=[r.name for r in regions if r.changed()],
                     unwritten={i: counts for i, counts in left.items() if counts},
                     from_unset={i: counts for i, counts in spoiled.items() if counts},
                     largest_block=guard.largest_block, race=guard.accesses.race,
                     read_unset=guard.accesses.read_unset, without_other=list(guard.accesses.without_other),
                     largest_allocation=None if largest is None else (largest.view.numel(), tuple(largest.view.shape)),
                     outside_access=_outside_access(guard.accesses.outside, everything))


def _outside_access(outside, regions):
    """What `Accesses.outside` (kernel, "read" | "wrote", address) reached, in the learner's terms: "your kernel
    flash_kernel read outside q (2 elements past its last element)"; None where every access stayed inside."""
    if outside is None:
        return None
    kernel, access, address = outside
    for region in regions:
        size, start = region.buffer.element_size(), region.buffer.data_ptr()
        if start <= address < start + region.buffer.numel() * size:
            offset = (address - region.view.data_ptr()) // size
            last = kernel_accesses.span(region.view.shape, region.view.stride()) - 1
            where = (f"{-offset} element{'s' if offset != -1 else ''} before its first element" if offset < 0 else
                     f"{offset - last} element{'s' if offset - last != 1 else ''} past its last element")
            return f"your kernel {kernel} {access} outside {region.name} ({where})"
    return f"your kernel {kernel} {access} outside every tensor it was given"


def _returned(position, parts) -> str:
    return "the tensor your code returned" if len(parts) == 1 else f"the tensor at position {position} of its result"


def require_triton():
    """Say why the kernels cannot be tested here (no Triton wheel for this platform, a broken install)."""
    found = triton_setup.prepare()
    if not found.usable:
        raise GradingError(f"these tests cannot run here: {found.message}. Your kernels are graded on Linux, "
                           "where Triton installs (or in Colab)")


def run_guarded(fn, *tensors, names, gapped=()):
    """Driver: `fn(*tensors)` on marked copies (`gapped` names those laid out with gaps), inside the
    guard. Pass it to `checks.call_student` (as a partial with `fn`) so it runs where `fn` lives."""
    require_triton()
    regions = [Region.input(name, t, gapped=name in gapped) if isinstance(t, torch.Tensor) else t
               for name, t in zip(names, tensors)]
    args = [r.view if isinstance(r, Region) else r for r in regions]
    inputs = [r for r in regions if isinstance(r, Region)]
    with guarded(known=[r.buffer for r in inputs]) as guard:
        result = fn(*args)
    return report(guard, inputs, result)
