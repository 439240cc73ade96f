"""What the programs of an interpreted launch load and store: races, masked lanes without other=, unset memory.

On a GPU the programs of a launch run at the same time, and the masked-off lanes of a `tl.load` without
`other=` hold whatever the registers held. Triton's interpreter runs the programs one after another and
gives those lanes zeros, so a kernel whose programs load, add and store one shared element, or that adds up
lanes it never loaded, gives right values on a CPU and wrong ones on a GPU. While `watched` is active, the
interpreter's memory primitives (every load and store reaches `create_masked_load` or `create_masked_store`;
atomics have their own) make such kernels fail on a CPU too, and keep what the verdicts need to say why:

- the masked-off lanes of a load without `other=` hold a marker (`MASKED`: a NaN with a payload of its own
  in a float, a large number in an integer); the kernels that made such loads are listed;
- the addresses of each launch's plain stores are kept with the program that made them: two programs of one
  launch storing to one address are a `Race` (atomics are how programs share a sum: they are not one);
- every address a store or an atomic reached during the call is kept (`stored`): a returned element that
  still holds `UNSET` was written from memory torch.empty left unset, not left unwritten;
- the first load (or atomic) that read `UNSET` is kept as a `Place`;
- the address of every lane a load, a store or an atomic reaches (masked-off lanes aside) is checked against the
  tensors the launch was given: the first that lies in none of them is kept (`outside`: the kernel, the access and
  the address), so that a read past an input fails even when what it read never reaches the result.

A load or store outside a counted launch (`JITFunction.run` put back by the learner's code, then replaced again),
or a memory primitive no longer the watch's at the end, fails the call (`op_watch.GuardSwitchedOff`).

Compiled launches (on a GPU) are not watched: there the hardware does what these imitate.
"""
import contextlib
import dataclasses
import sys

import numpy as np
import torch

from autograder.checks.op_watch import switched_off


def span(shape, stride) -> int:
    """Elements of storage a view of `shape` and `stride` reaches, from its first element."""
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride))


def holds(data, marker):
    """Where a NumPy array's elements have the bit pattern `marker` gives for their size (never for bool)."""
    if data.dtype == np.bool_ or data.itemsize not in marker:
        return np.zeros(data.shape, dtype=bool)
    return data.view(f"u{data.itemsize}") == marker[data.itemsize]


@dataclasses.dataclass(frozen=True)
class Place:
    """An element a kernel reached, as the learner wrote it: the kernel, its tensor parameter (None for
    memory outside every tensor it was given) and the element's offset from that tensor's first."""
    kernel: str
    parameter: str = None
    offset: int = 0

    @property
    def element(self) -> str:
        if self.parameter is None:
            return "memory outside the tensors it was given"
        return f"element {self.offset} of {self.parameter}"

    def __str__(self):
        return f"{self.element} in {self.kernel}"


@dataclasses.dataclass(frozen=True)
class Race:
    """Two programs of one launch that stored to one element with plain stores (grid indices (x, y, z))."""
    place: Place
    programs: tuple

    def __str__(self):
        names = [str(p[0]) if tuple(p[1:]) == (0, 0) else str(tuple(p)) for p in self.programs]
        return f"programs {names[0]} and {names[1]} of {self.place.kernel} both stored to {self.place.element}"


class Accesses:
    """What the interpreted launches of one guarded call loaded and stored (see the module's docstring)."""

    def __init__(self, unset, masked):
        self.unset, self.masked = unset, masked  # bit patterns by element size
        self.race = None  # the first Race of the call
        self.read_unset = None  # the Place of the first load or atomic that read UNSET
        self.without_other = []  # kernels that left lanes of a masked load without other= to the marker
        self._kernel, self._tensors, self._grid = None, [], (1, 1, 1)  # the launch under way
        self._launching = False
        self.uncounted = False  # whether memory was reached outside every counted launch
        self._stores = []  # (addresses, program) of the launch under way's plain stores
        self._written = []  # arrays of the addresses stores and atomics reached during the call
        self.outside = None  # (kernel, "read" | "wrote", address) of the first lane outside every tensor of its launch

    @contextlib.contextmanager
    def launch(self, kernel, args, kwargs):
        """One launch of `kernel`: its tensor arguments name the places; afterwards its stores are checked."""
        fn = getattr(kernel, "fn", kernel)
        self._kernel = getattr(fn, "__name__", "your kernel")
        named = list(zip(getattr(kernel, "arg_names", ()), args)) + list(kwargs.items())
        self._tensors = [(name, t.data_ptr(), t.data_ptr() + span(t.shape, t.stride()) * t.element_size(),
                          t.element_size()) for name, t in named if isinstance(t, torch.Tensor)]
        self._stores, self._launching = [], True
        try:
            yield
        finally:
            self._launching = False
            self._finish()

    def _place(self, address) -> Place:
        address = int(address)
        for name, first, end, size in self._tensors:
            if first <= address < end:
                return Place(self._kernel, name, (address - first) // size)
        return Place(self._kernel)

    def _program(self, builder) -> int:
        x, y, z = builder.grid_idx
        self._grid = builder.grid_dim
        return (x * self._grid[1] + y) * self._grid[2] + z

    def _grid_index(self, program) -> tuple:
        yz = self._grid[1] * self._grid[2]
        return int(program) // yz, int(program) % yz // self._grid[2], int(program) % self._grid[2]

    def _check_inside(self, ptrs, active, access):
        """Note the first active lane whose address lies in no tensor the launch was given."""
        if self.outside is not None or not self._launching:
            return
        addresses = np.asarray(ptrs.data)[np.broadcast_to(active, np.shape(ptrs.data))].astype(np.uint64)
        if not addresses.size:
            return
        inside = np.zeros(addresses.shape, dtype=bool)
        for _, first, end, _ in self._tensors:
            inside |= (addresses >= np.uint64(first)) & (addresses < np.uint64(end))
        if not inside.all():
            self.outside = (self._kernel, access, int(addresses[np.flatnonzero(~inside)[0]]))

    def reached(self):
        """A memory primitive ran: inside a counted launch, or a launch the counter never saw."""
        self.uncounted = self.uncounted or not self._launching

    def loaded(self, ptrs, mask, other, ret):
        """A load: masked-off lanes without other= get the marker; a lane read from UNSET is noted."""
        active = np.broadcast_to(mask.data, ret.data.shape)
        self._check_inside(ptrs, active, "read")
        if other is None and ret.data.dtype != np.bool_ and not active.all():
            np.copyto(ret.data.view(f"u{ret.data.itemsize}"), self.masked[ret.data.itemsize], where=~active,
                      casting="unsafe")
            if self._kernel not in self.without_other:
                self.without_other.append(self._kernel)
        self._note_unset(ptrs, active, ret)

    def stored(self, builder, ptrs, mask):
        """A plain store: its addresses, with the program that made them."""
        active = np.broadcast_to(mask.data, ptrs.data.shape)
        self._check_inside(ptrs, active, "wrote")
        addresses = ptrs.data[active].astype(np.uint64)
        self._stores.append((addresses, self._program(builder)))

    def updated(self, ptrs, mask, old):
        """An atomic: its addresses count as written; an old value that is UNSET is noted."""
        active = np.ones(ptrs.data.shape, dtype=bool) if mask is None else np.broadcast_to(mask.data, ptrs.data.shape)
        self._check_inside(ptrs, active, "wrote")
        self._written.append(ptrs.data[active].astype(np.uint64))
        self._note_unset(ptrs, active, old)

    def _note_unset(self, ptrs, active, values):
        if self.read_unset is None:
            found = np.flatnonzero(holds(values.data, self.unset) & active)
            if found.size:
                self.read_unset = self._place(ptrs.data.reshape(-1)[found[0]])

    def _finish(self):
        """After a launch: its stores are written memory, and two programs storing to one address a race."""
        if not self._stores:
            return
        addresses = np.concatenate([a for a, _ in self._stores])
        programs = np.concatenate([np.full(a.size, p, dtype=np.uint64) for a, p in self._stores])
        self._stores = []
        pairs = np.unique(np.stack([addresses, programs]), axis=1)  # (address, program), sorted by address
        self._written.append(np.unique(pairs[0]))
        shared = np.flatnonzero(pairs[0, 1:] == pairs[0, :-1])
        if self.race is None and shared.size:
            first = shared[0]
            self.race = Race(self._place(pairs[0, first]),
                             (self._grid_index(pairs[1, first]), self._grid_index(pairs[1, first + 1])))

    def stored_at(self, t):
        """Flat booleans: which elements of `t` a store or an atomic of the call reached."""
        if not self._written or t.numel() == 0:
            return np.zeros(t.numel(), dtype=bool)
        offsets = torch.arange(span(t.shape, t.stride()), dtype=torch.int64).as_strided(t.shape, t.stride())
        addresses = (t.data_ptr() + offsets.flatten().numpy() * t.element_size()).astype(np.uint64)
        return np.isin(addresses, np.concatenate(self._written))


MEMORY_OPS = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")


@contextlib.contextmanager
def watched(accesses):
    """While active, the memory primitives of Triton's interpreter (where it is imported) report to `Accesses`.
    Their signatures differ between Triton versions after the arguments read here: the rest pass through."""
    builder = getattr(sys.modules.get("triton.runtime.interpreter"), "InterpreterBuilder", None)
    originals = {name: vars(builder).get(name) for name in MEMORY_OPS} if builder is not None else {}
    if not originals or None in originals.values():  # no interpreter: launches are compiled
        yield
        return
    load, store, rmw, cas = (originals[name] for name in MEMORY_OPS)

    def masked_load(self, ptrs, mask, other, *rest, **kwargs):
        accesses.reached()
        ret = load(self, ptrs, mask, other, *rest, **kwargs)
        accesses.loaded(ptrs, mask, other, ret)
        return ret

    def masked_store(self, ptrs, value, mask, *rest, **kwargs):
        accesses.reached()
        accesses.stored(self, ptrs, mask)
        return store(self, ptrs, value, mask, *rest, **kwargs)

    def atomic_rmw(self, op, ptrs, value, mask, *rest, **kwargs):
        accesses.reached()
        old = rmw(self, op, ptrs, value, mask, *rest, **kwargs)
        accesses.updated(ptrs, mask, old)
        return old

    def atomic_cas(self, ptrs, compare, value, *rest, **kwargs):
        accesses.reached()
        old = cas(self, ptrs, compare, value, *rest, **kwargs)
        accesses.updated(ptrs, None, old)
        return old

    hooks = dict(zip(MEMORY_OPS, (masked_load, masked_store, atomic_rmw, atomic_cas)))
    for name, hook in hooks.items():
        setattr(builder, name, hook)
    try:
        yield
    finally:
        replaced = [name for name, hook in hooks.items() if vars(builder).get(name) is not hook]
        for name, original in originals.items():
            setattr(builder, name, original)
        if replaced or accesses.uncounted:
            how = (f"InterpreterBuilder.{replaced[0]} replaced, so loads and stores went unwatched" if replaced else
                   "a kernel ran outside the grader's launch counter: JITFunction.run put back during the call")
            raise switched_off("its kernel launches", how)
