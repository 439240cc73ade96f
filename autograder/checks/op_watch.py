"""One watcher of the ATen operations a learner's code runs, for the checks that refuse some of them.

A `TorchDispatchMode` sees every ATen operation however it was reached (a method, a function bound
early, a C++ path): the VJP checks of 03 refuse PyTorch's own backward kernels and bound what a VJP
allocates, the by-hand checks of 07 refuse BatchNorm's and backward kernels. Each says what it
refuses with a predicate on the op's name; the watcher records the first refused op, the largest
storage any op returned, and the output with the most elements (10's online attention may never hold an
N×M tensor of scores, whatever storage it shares).

A dispatch mode can be switched off from inside the call it watches (`torch._C._DisableTorchDispatch()`, or the
mode popped off its stack), so every watch here is a `GuardedMode`: a `TorchFunctionMode` beside it sees each torch
call of the learner's code and checks that dispatch still reaches the watch, the watch checks the function side
in turn, and at the end an operation of the guard's own must reach both. Both switched off at once, and on
again before the end, go unseen.

A watch switched off fails the call: `GuardSwitchedOff` (worded by `switched_off`) is how every guard of a call
says so, these watches, `student_calls`' refusals of autograd and profile watch, and the kernel guard's counters;
`student_calls.call_student` turns it into the exercise's failure.
"""
import torch
from torch import overrides
from torch.utils import _python_dispatch as python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode


class GuardSwitchedOff(BaseException):
    """Raised when the learner's code switched off one of a call's guards (a refusal that did not take, a hook
    removed, a watch disabled): what it did there went unseen, so the call fails; the message says how."""


def switched_off(watch, how, when="during the call") -> GuardSwitchedOff:
    """The failure of a call whose code switched off the grader's watch of `watch` (`how`: what was found)."""
    return GuardSwitchedOff(f"your code switched off the grader's watch of {watch} {when} ({how}): the checks cannot "
                            "see what it did there. Leave the grader's guards, and the modules they watch, as they are")


def storage_bytes(t) -> int:
    """The bytes behind a tensor (its element count times its size where it has no storage of its own)."""
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


def _dispatch_off(mode):
    """How ATen operations no longer reach `mode`, or None."""
    if not any(m is mode for m in python_dispatch._get_current_dispatch_mode_stack()):
        return "the grader's TorchDispatchMode taken off the mode stack"
    if torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.Python):
        return "torch dispatch disabled, as torch._C._DisableTorchDispatch() does"
    return None


def _functions_off(side):
    """How torch calls no longer reach the function side `side`, or None."""
    if not any(m is side for m in overrides._get_current_function_mode_stack()):
        return "the grader's TorchFunctionMode taken off the mode stack"
    if not torch._C._is_torch_function_mode_enabled():
        return "torch function modes disabled, as torch._C.DisableTorchFunction() does"
    return None


def _restack(stack, pop, push, mode, depth):
    """Leave `mode` alone on its stack above `depth` (what the learner's code pushed taken off, `mode` put back if
    it was popped), so that leaving it pops it and nothing else."""
    while len(stack()) > depth:
        pop()
    push(mode)


class _FunctionSide(overrides.TorchFunctionMode):
    """The torch-function side of a `GuardedMode`: each torch call of the learner's code passes here before it
    dispatches, so dispatch switched off under it is seen at the next call; the watch's `called` sees the call."""

    def __init__(self, watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        watch, kwargs = self.watch, kwargs or {}
        if watch.busy:  # the watch's own torch calls, where torch has popped its modes
            return func(*args, **kwargs)
        watch.busy += 1  # until func returns: torch has taken this side off its stack meanwhile
        try:
            watch.note(_dispatch_off(watch))
            if watch.heard is None:
                watch.called(func, args, kwargs)
            else:
                watch.heard.add("functions")
            return func(*args, **kwargs)
        finally:
            watch.busy -= 1


class GuardedMode(TorchDispatchMode):
    """A dispatch mode that fails the call (GuardSwitchedOff, at its end) if the learner's code switched it off.
    Subclasses record in `seen` (each ATen op) and `called` (each torch call, before it runs)."""

    watches = "the torch operations it runs"  # the watch, as the failure names it

    @classmethod
    def _should_skip_dynamo(cls):
        return False  # keep __torch_dispatch__ unwrapped: wrapping imports torch._dynamo (seconds), mid-grading

    def __init__(self):
        super().__init__()
        self.off = None  # how the learner's code switched the watch off, as first found
        self.busy = 0  # inside one of the watch's own handlers
        self.heard = None  # while the end's probe runs: the sides that heard it
        self._functions = _FunctionSide(self)
        self._depths = (0, 0)

    def note(self, off):
        self.off = self.off or off

    def seen(self, func, types, args, kwargs):
        """An ATen operation outside the watch's own handlers: run it."""
        return func(*args, **kwargs)

    def called(self, func, args, kwargs):
        """A torch call of the learner's code, before it runs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.heard is not None:
            self.heard.add("dispatch")
            return func(*args, **kwargs)
        if not self.busy:  # reached without a torch call the function side saw: is that side still on?
            self.note(_functions_off(self._functions))
        self.busy += 1
        try:
            return self.seen(func, types, args, kwargs)
        finally:
            self.busy -= 1

    def __enter__(self):
        self._depths = (len(python_dispatch._get_current_dispatch_mode_stack()),
                        len(overrides._get_current_function_mode_stack()))
        self._functions.__enter__()
        return super().__enter__()

    def __exit__(self, exc_type, exc_val, exc_tb):
        self._probe()
        _restack(python_dispatch._get_current_dispatch_mode_stack, python_dispatch._pop_mode,
                 python_dispatch._push_mode, self, self._depths[0])
        super().__exit__(exc_type, exc_val, exc_tb)
        _restack(overrides._get_current_function_mode_stack, overrides._pop_mode, overrides._push_mode,
                 self._functions, self._depths[1])
        self._functions.__exit__(exc_type, exc_val, exc_tb)
        if self.off is not None:
            raise switched_off(self.watches, self.off)

    def _probe(self):
        """An operation of the watch's own: both sides must hear it (a popped mode, or dispatch or torch
        functions left disabled, would not)."""
        self.heard = set()
        try:
            torch.empty(0, device="cpu")
        finally:
            heard, self.heard = self.heard, None
        if "functions" not in heard:
            self.note(_functions_off(self._functions) or "an operation of the grader's own missed its function mode")
        if "dispatch" not in heard:
            self.note(_dispatch_off(self) or "an operation of the grader's own missed its dispatch mode")


class OpWatch(GuardedMode):
    """Record the first ATen op whose name `refused(name)` holds, the largest storage an op returns, and the
    output with the most elements (`most_elements`: its element count, shape and the op that made it)."""

    def __init__(self, refused=lambda name: False):
        super().__init__()
        self.refused = refused
        self.used = None
        self.largest = (0, None)
        self.most_elements = (0, None, None)

    def seen(self, func, types, args, kwargs):
        name = func._schema.name
        if self.used is None and self.refused(name):
            self.used = name
        out = func(*args, **kwargs)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and storage_bytes(t) > self.largest[0]:
                self.largest = (storage_bytes(t), tuple(t.shape))
            if isinstance(t, torch.Tensor) and t.numel() > self.most_elements[0]:
                self.most_elements = (t.numel(), tuple(t.shape), name)
        return out
