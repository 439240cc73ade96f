"""Call a student's code so that whatever it does becomes a readable verdict.

Every check reaches student code through `call_student`: a time limit, warnings and stderr kept
out of the test cell, an exception turned into a message that names the input, and the guards an
exercise asks for (no autograd, no call of the PyTorch feature it rebuilds). In trusted grading a
call that involves a stand-in for a student name (`autograder.checks.boundary.StudentName`) goes
to that stand-in's kernel instead, and only data comes back.
"""
import contextlib
import inspect
import io
import signal
import sys
import threading
import types
import warnings

import torch
import torch.autograd.forward_ad

try:  # private: torch 2.13's forward mode enters dual levels through it (2.10's goes to torch._C directly)
    import torch._functorch.predispatch as _predispatch
except ImportError:  # a torch without it has no such door to shut: the checks must still import
    _predispatch = None

from autograder.checks import boundary
from autograder.checks.compare import GradingError, describe, expect_close, fail
from autograder.checks.op_watch import GuardSwitchedOff, OpWatch, switched_off


class _TimeLimit(BaseException):
    """Raised inside student code when it runs too long (BaseException: a bare except won't eat it)."""


class UsedAnswerKey(BaseException):
    """Raised when student code calls one of the grader's answer keys (`autograder.grader.keys`), or a
    grading helper that is one line from an answer; its message names what was called."""


_running = threading.local()  # per thread: trusted grading's in-process kernel answers in a thread of its own


def inside_student_call() -> bool:
    """Whether this thread is running student code now; answer keys refuse to run there."""
    return getattr(_running, "depth", 0) > 0


@contextlib.contextmanager
def _student_code():
    _running.depth = getattr(_running, "depth", 0) + 1
    try:
        yield
    finally:
        _running.depth -= 1


@contextlib.contextmanager
def _time_limit(seconds):
    """Interrupt the block after `seconds` where the OS allows it (main thread on Unix)."""
    usable = seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise _TimeLimit()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# Every public door into autograd, plus the calls the doors share inside, looked up when they run,
# so that a name bound early (`from torch.autograd import grad`, `from torch.func import jvp`) is
# caught too: the engine call of reverse mode, and forward mode's entry to a dual level and its
# dual tensors (torch.autograd.forward_ad, and torch.func's jvp, jacfwd, hessian and linearize).
_AUTOGRAD_DOORS = [
    (torch.autograd, "grad"), (torch.autograd, "backward"), (torch.Tensor, "backward"),
    (torch.autograd, "_engine_run_backward"), (torch.autograd.graph, "_engine_run_backward"),
    *[(torch.autograd.functional, n) for n in ("jacobian", "hessian", "vjp", "jvp", "vhp", "hvp")],
    *[(torch.func, n) for n in ("grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "linearize")],
    *[(torch.autograd.forward_ad, n) for n in ("make_dual", "enter_dual_level", "unpack_dual")],
    (_predispatch, "_enter_dual_level"), (_predispatch, "_make_dual"),
    (torch._C, "_enter_dual_level"), (torch._VF, "_make_dual"),
]  # a private door missing from this torch is left out (hasattr below)


def _attribute_trap(owner):
    """Why setting an attribute of `owner` might not do what it does for a plain module (or for torch.Tensor, a
    class), or None: a class of its own that sets, gets or deletes attributes its own way (a module's
    `__class__` replaced) would leave a door open while the grader believed it shut."""
    cls, plain = type(owner), (type if isinstance(owner, type) else types.ModuleType)
    own = [name for name in ("__setattr__", "__getattribute__", "__delattr__")
           if getattr(cls, name) is not getattr(plain, name)]
    return f"{_door(owner)}'s class is {cls.__qualname__}, whose {own[0]} is not Python's own" if own else None


def _door(owner, name=None) -> str:
    where = _qualified(owner) if isinstance(owner, type) else getattr(owner, "__name__", repr(owner))
    return where if name is None else f"{where}.{name}"


def _set(owner, name, value):
    """setattr as Python's own class does it, whatever class `owner` now has."""
    (type.__setattr__ if isinstance(owner, type) else object.__setattr__)(owner, name, value)


@contextlib.contextmanager
def _autograd_forbidden(exercise):
    """Make every use of autograd raise, for exercises that must be derived by hand. The doors are checked:
    each owner must set attributes as a plain module does, each refusal must be what a lookup finds, and must
    still be there at the end; otherwise the call fails (GuardSwitchedOff). Autograd's backward kernels are
    refused too, however they were reached (a `grad_fn` node called directly, `torch.ops.aten.*_backward`):
    no engine runs them, so no door sees them, but the dispatch watch does."""
    def refusal():
        # one function per door: torch._dynamo, imported while the doors are shut, rejects
        # a single function object registered under several torch names
        def refuse(*args, **kwargs):
            raise _UsedAutograd()
        return refuse

    doors = [(owner, name, getattr(owner, name), refusal()) for owner, name in _AUTOGRAD_DOORS if hasattr(owner, name)]
    trap = next(filter(None, (_attribute_trap(owner) for owner, *_ in doors)), None)
    if trap is not None:
        raise switched_off("autograd", f"{trap}, so the grader's refusals of autograd would not take",
                           "before the call")
    try:
        for owner, name, _, refuse in doors:
            _set(owner, name, refuse)
            if getattr(owner, name) is not refuse:
                raise switched_off("autograd", f"{_door(owner, name)} stayed as it was when the grader replaced it "
                                               "with a refusal", "before the call")
        kernels = OpWatch(refused=lambda name: "backward" in name)
        with kernels:
            yield
        if kernels.used is not None:
            raise _UsedAutograd(f"ran autograd's backward kernel {kernels.used}")
        reopened = [_door(owner, name) for owner, name, _, refuse in doors
                    if getattr(owner, name) is not refuse or _attribute_trap(owner)]
        if reopened:
            raise switched_off("autograd", f"{reopened[0]} no longer held the grader's refusal at the end")
    finally:
        for owner, name, original, _ in doors:
            _set(owner, name, original)


class _UsedAutograd(BaseException):
    """Raised when an exercise that must be derived by hand calls autograd."""


@contextlib.contextmanager
def recursion_headroom(frames=2000):
    """Cap the recursion limit at the current depth + `frames` (never raise it), so that a
    recursive graph walk fails the same way on every machine, whatever limit a kernel set."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(min(previous, depth + frames))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def _copy(value):
    """Give the student a private copy, so an in-place edit cannot change the reference's input."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _code_objects(thing, seen=None):
    """The Python code a function or class runs, so a call is seen however the name was bound."""
    seen = set() if seen is None else seen
    if id(thing) in seen:  # an autograd Function and its backward class point at each other
        return set()
    seen.add(id(thing))
    if isinstance(thing, type):
        return {code for value in vars(thing).values() for code in _code_objects(value, seen)}
    if isinstance(thing, (staticmethod, classmethod)):
        return _code_objects(thing.__func__, seen)
    if isinstance(thing, property):
        return {code for f in (thing.fget, thing.fset) if f for code in _code_objects(f, seen)}
    code = getattr(inspect.unwrap(thing), "__code__", None) if callable(thing) else None
    return {code} if code is not None else set()


def _place(code) -> tuple:
    """Where a function's code was written: a copy made with `code.replace(co_name=...)` (or any
    other name) keeps it, so renaming a forbidden function's code does not hide a call of it."""
    return code.co_filename, code.co_firstlineno


def _qualified(thing) -> str:
    return f"{getattr(thing, '__module__', '?')}.{getattr(thing, '__qualname__', repr(thing))}"


_SETPROFILE, _GETPROFILE = sys.setprofile, sys.getprofile  # bound here: a replaced sys.setprofile is still seen


def _installs_a_watch(frame) -> bool:
    """Whether a call of sys.setprofile comes from `profiled` itself (a nested watch, which passes every call on)."""
    return frame.f_code is _PROFILED_CODE and frame.f_globals is globals()


@contextlib.contextmanager
def profiled(callback):
    """Run the block with `callback(frame, event, arg)` called on every Python and C call (sys.setprofile).
    Watches nest: the one that was there before keeps receiving every call, and is back afterwards. A block that
    calls sys.setprofile itself, or leaves another profile function in place, switched the watch off: the call
    fails (GuardSwitchedOff)."""
    previous = _GETPROFILE()
    calls = []  # the block's own calls of sys.setprofile

    def chained(frame, event, arg):
        if event == "c_call" and arg is _SETPROFILE and not _installs_a_watch(frame):
            calls.append(frame.f_code.co_name)
        callback(frame, event, arg)
        if previous is not None:
            previous(frame, event, arg)

    _SETPROFILE(chained)
    try:
        yield
    finally:
        replaced = _GETPROFILE() is not chained
        _SETPROFILE(previous)
        if calls or replaced:
            how = f"sys.setprofile called in {calls[0]}" if calls else "the grader's profile function gone at the end"
            raise switched_off("the functions it calls", how)


_PROFILED_CODE = profiled.__wrapped__.__code__


@contextlib.contextmanager
def forbidden(exercise, *things, inputs=None):
    """Fail the exercise if the block calls any of `things` (PyTorch's or the course's versions of
    what it must build).

    A profile hook watches every Python call, so `from torch.amp import GradScaler` bound
    before grading, a subclass, an alias or a renamed copy of its code are all caught; the block
    runs to its end first. Blocks nest: an inner one passes every call on to the outer one. A block
    that switches the hook off fails (see `profiled`).
    """
    by_place = {_place(code): thing for thing in things for code in _code_objects(thing)}
    used = []

    def watch(frame, event, arg):
        if event == "call" and not used and (frame.f_code.co_filename, frame.f_code.co_firstlineno) in by_place:
            used.append(by_place[_place(frame.f_code)])

    def report():
        fail(exercise, f"called {_qualified(used[0])}: this exercise asks you to build that yourself "
                        "rather than call it", inputs)

    try:
        with profiled(watch):
            yield
    except BaseException:
        if used:  # the forbidden call is the news, not whatever went wrong after it
            report()
        raise
    if used:
        report()


def call_student(exercise, fn, *args, names=None, time_limit=20.0, no_autograd=False, forbid=()):
    """Call a student's function; turn any exception, warning or endless loop into a clear message.

    `names` labels the arguments in messages (default: arg0, arg1, ...); `no_autograd=True`
    rejects an answer that calls autograd instead of computing the derivative itself; `forbid`
    lists PyTorch functions or classes the answer must not call (see `forbidden`).
    """
    remote = boundary.remote_for(fn, args)
    if remote is not None:  # trusted grading: this runs in the grader, the student's code in the kernel
        return remote.call(exercise, fn, args, dict(names=names, time_limit=time_limit,
                                                    no_autograd=no_autograd, forbid=forbid))
    inputs = dict(zip(names or [f"arg{i}" for i in range(len(args))], args))
    if not callable(fn):
        fail(exercise, f"expected a function, but the name holds {describe(fn)}")
    stderr = io.StringIO()
    guard = _autograd_forbidden(exercise) if no_autograd else contextlib.nullcontext()
    watch = forbidden(exercise, *forbid, inputs=inputs) if forbid else contextlib.nullcontext()
    try:
        with (watch, warnings.catch_warnings(), contextlib.redirect_stderr(stderr), _time_limit(time_limit), guard,
              _student_code()):
            warnings.simplefilter("ignore")
            return fn(*[_copy(a) for a in args])
    except NotImplementedError:
        fail(exercise, "not implemented yet: replace `raise NotImplementedError` with your code")
    except _UsedAutograd as used:
        fail(exercise, f"{str(used) or 'called autograd (backward, torch.autograd.grad or torch.func)'}; "
                        "this exercise asks you to compute the derivative yourself", inputs)
    except UsedAnswerKey as used:
        fail(exercise, f"called {used}: write your own implementation", inputs)
    except GuardSwitchedOff as off:
        fail(exercise, str(off), inputs)
    except _TimeLimit:
        fail(exercise, f"did not return within {time_limit:g} s: is there a loop that never ends?", inputs)
    except GradingError:
        raise
    except Exception as err:  # any bug in student code becomes a readable failure
        fail(exercise, f"raised {type(err).__name__}: {err}", inputs)


def run_input_change(fn, *args) -> float:
    """Driver: call `fn(*args)`; return the largest change it made to a tensor argument (inf for NaN).

    Pass it to `call_student` with the student's function as its first argument, so it runs
    wherever the student's code runs (in trusted grading, the kernel).
    """
    before = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
    fn(*args)
    changes = [0.0 if torch.equal(a, b) else float((a.double() - b.double()).abs().nan_to_num(float("inf")).max())
               for a, b in zip(args, before) if b is not None and b.numel()]
    return max(changes, default=0.0)


def run_cases(exercise, student_fn, cases, options) -> dict:
    """Driver: the student's function on every case, each through `call_student`, stopping at
    the first failure. One call of it, in trusted grading, is one trip to the kernel."""
    results = []
    for case in cases:
        try:
            results.append(call_student(exercise, student_fn, *case.values(), names=list(case), **options))
        except GradingError as err:
            return {"results": results, "failure": str(err)}
    return {"results": results, "failure": None}


def check_cases(exercise, student_fn, reference_fn, cases, *, no_autograd=False, forbid=(), **compare):
    """Run the student's function and the reference on every case (a dict of named inputs);
    report the first case that fails, in order."""
    ran = call_student(exercise, run_cases, exercise, student_fn, cases,
                       dict(no_autograd=no_autograd, forbid=forbid), time_limit=0)  # each case has its own limit
    if not isinstance(ran, dict) or not isinstance(ran.get("results"), list) or len(ran["results"]) > len(cases):
        fail(exercise, "no readable answer came back from your notebook")
    for case, got in zip(cases, ran["results"]):
        expect_close(exercise, got, reference_fn(*case.values()), inputs=case, **compare)
    if ran["failure"] is not None:
        raise GradingError(ran["failure"])
    if len(ran["results"]) < len(cases):
        fail(exercise, "no readable answer came back from your notebook")
