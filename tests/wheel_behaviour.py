"""Does any function of the learner's package compute a graded answer? Run as a script in a fresh interpreter
whose path holds the unpacked wheel (tests/test_learner_wheel.py), so that what the candidates do to the
process stays there.

Each graded function of the cases below runs, as its reference solution, on representative inputs (two seeds),
drawn where right-looking code breaks as the hidden tests draw them; then every function and method of every
module of the package (public and private, static and class methods, classes that are autograd Functions) is
called on the same inputs, fresh for every call, where its signature can take them, under a time limit, its
exceptions caught. One that gives what the reference gives on every input computes the answer. So does one that
does it by another route: for a graded function that runs a callable of its arguments (`saved_bytes(fn,
*inputs)`), a context manager of the package entered around that call (a number it holds afterwards), a function
of the call's thunk (or of the thunk and a device: a number it returns or holds), and a function of the call's
output. A by-hand exercise's rule holds for the candidates as for the learner (no autograd where the rule says
so, no torch maths outside Triton kernels in 09 and 10, none of the PyTorch features it refuses), and so does
what else the checks hold a right answer to (08's per-example gradients without a loop over the examples): code
that breaks it scores nothing, pasted or not. A call the rule refuses of the course's own package (06's counters)
does not count against a candidate: pasted, it is no call.

Prints one JSON line: {"found": [...], "cases": n, "candidates": n, "calls": n}.
"""
import contextlib
import dataclasses
import functools
import importlib
import inspect
import io
import json
import math
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

F32 = torch.float32
TIME_LIMIT = 0.25  # seconds a candidate call may take


# --- the inputs -------------------------------------------------------------------------------------------------

def g(*shape, seed, dtype=torch.float64, scale=1.0, grad=False):
    t = torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed)) * scale
    return t.requires_grad_(grad)


def mlp(seed, n_in=3, n_out=2):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(n_in, 5), nn.Tanh(), nn.Linear(5, n_out)).double()


def counting(model):
    """`model`, counting its forward calls (08's vectorised check: fewer calls than examples, no Python loop)."""
    model.calls = 0
    model.register_forward_pre_hook(lambda module, inputs: setattr(module, "calls", module.calls + 1))
    return model


def checkpoint_block(seed):
    torch.manual_seed(seed)
    layer = nn.Linear(4, 4).double()
    return lambda t: torch.tanh(layer(t)).exp()


def attention_inputs(seed, causal):
    q, k, v = (g(2, 2, 5, 4, seed=seed + i, dtype=torch.float32) for i in range(3))
    return q, k, v


def _attention_o_do(seed, causal):
    q, k, v = attention_inputs(seed, causal)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.5)
    return q, k, v, o, g(*o.shape, seed=seed + 9, dtype=torch.float32)


def _flash_lse(q, k, scale, causal):
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.logsumexp(s, -1)


# {(notebook, graded name): seed -> (args, kwargs)}: called afresh for every call
CASES = {
    ("01_chain_rule", "numerical_grad"): lambda s: ((lambda t: (t ** 3).sum() + t.prod(), g(4, seed=s)),
                                                    {"eps": 1e-6}),
    ("01_chain_rule", "two_layer_backward"): lambda s: ((g(1, seed=s), g(2, 1, seed=s + 1), g(1, 2, seed=s + 2)), {}),
    ("01_chain_rule", "linear_mse_grad"): lambda s: ((g(2, 3, seed=s), g(3, seed=s + 1), g(2, seed=s + 2)), {}),
    ("01_chain_rule", "sigmoid_grad"): lambda s: ((g(7, seed=s, scale=5),), {}),
    ("01_chain_rule", "relu_grad"): lambda s: ((g(7, seed=s),), {}),
    ("01_chain_rule", "softmax_jacobian"): lambda s: ((g(4, seed=s),), {}),
    ("01_chain_rule", "softmax_xent_grad"): lambda s: ((g(3, 4, seed=s), torch.tensor([0, 3, 1])), {}),
    ("03_vjp", "vjp_relu"): lambda s: ((g(3, 4, seed=s), g(3, 4, seed=s + 1)), {}),
    ("03_vjp", "vjp_sigmoid"): lambda s: ((torch.sigmoid(g(3, 4, seed=s)), g(3, 4, seed=s + 1)), {}),
    ("03_vjp", "vjp_tanh"): lambda s: ((torch.tanh(g(3, 4, seed=s)), g(3, 4, seed=s + 1)), {}),
    ("03_vjp", "vjp_linear"): lambda s: ((g(3, 4, seed=s), g(2, 4, seed=s + 1), g(2, seed=s + 2), g(3, 2, seed=s + 3)),
                                         {}),
    ("03_vjp", "unbroadcast"): lambda s: ((g(2, 3, 4, seed=s), (3, 1)), {}),
    ("03_vjp", "vjp_matmul"): lambda s: ((g(2, 3, 4, seed=s), g(2, 4, 5, seed=s + 1), g(2, 3, 5, seed=s + 2)), {}),
    ("03_vjp", "vjp_softmax"): lambda s: ((torch.softmax(g(3, 4, seed=s), 0), g(3, 4, seed=s + 1)), {"dim": 0}),
    ("03_vjp", "vjp_log_softmax"): lambda s: ((torch.log_softmax(g(3, 4, seed=s), 0), g(3, 4, seed=s + 1)),
                                              {"dim": 0}),
    ("03_vjp", "vjp_layernorm"): lambda s: ((g(3, 5, seed=s), g(5, seed=s + 1), g(5, seed=s + 2), g(3, 5, seed=s + 3)),
                                            {"eps": 1e-3}),
    ("04_toggles", "grad_fn_names"): lambda s: (((g(3, seed=s, grad=True).exp() * g(3, seed=s + 1, grad=True)).sum(),),
                                                {}),
    ("04_toggles", "distill_loss"): lambda s: ((g(4, 5, seed=s, grad=True), g(4, 5, seed=s + 1, grad=True)),
                                               {"T": 3.0}),
    ("04_toggles", "per_loss_grads"): lambda s: (lambda p: (([(p[0] * p[1]).sum(), (p[0].exp()).sum()], p), {}))(
        [g(3, seed=s, grad=True), g(3, seed=s + 1, grad=True)]),
    ("04_toggles", "accumulated_grads"): lambda s: ((mlp(s), F.mse_loss, g(6, 3, seed=s), g(6, 2, seed=s + 1), 3), {}),
    ("04_toggles", "predict"): lambda s: ((mlp(s), g(4, 3, seed=s)), {}),
    ("05_loss_scaling", "underflow_fraction"): lambda s: ((g(50, seed=s, dtype=F32, scale=1e-6),),
                                                          {"dtype": torch.float16}),
    ("05_loss_scaling", "scaled_fp16_grads"): lambda s: ((mlp(s).float(), F.mse_loss, g(4, 3, seed=s, dtype=F32),
                                                          g(4, 2, seed=s + 1, dtype=F32), 1024.0), {}),
    ("06_checkpointing", "saved_bytes"): lambda s: ((lambda a, b: torch.tanh(a @ b) * a[:, :1].expand(3, 4),
                                                     g(3, 5, seed=s, grad=True), g(5, 4, seed=s + 1, grad=True)), {}),
    ("06_checkpointing", "estimate_activation_bytes"): lambda s: ((2 + s, 64, 48, 3),
                                                                  {"bytes_per_elem": 4, "const": 17}),
    ("06_checkpointing", "checkpoint"): lambda s: ((checkpoint_block(s), g(3, 4, seed=s, grad=True)), {}),
    ("06_checkpointing", "checkpoint_sequential"): lambda s: (([nn.Tanh() for _ in range(6)], 2 + s,
                                                                g(3, 4, seed=s, grad=True)), {}),
    ("06_checkpointing", "best_segments"): lambda s: ((9 + 7 * s,), {}),
    ("07_by_hand", "embedding_backward"): lambda s: ((g(2, 3, 4, seed=s), torch.tensor([[1, 0, 1], [5, 1, 2]]), 7), {}),
    ("07_by_hand", "batchnorm_backward"): lambda s: ((g(6, 3, seed=s), g(6, 3, seed=s + 1), g(3, seed=s + 2)),
                                                     {"eps": 1e-3}),
    ("07_by_hand", "batchnorm_update_running"): lambda s: ((g(3, seed=s), g(3, seed=s + 1).abs(), g(6, 3, seed=s + 2)),
                                                           {"momentum": 0.3}),
    ("08_higher_order", "hvp"): lambda s: ((lambda t: (t.sin() * t).sum() * t.sum(), g(4, seed=s), g(4, seed=s + 1)),
                                           {}),
    ("08_higher_order", "gradient_penalty"): lambda s: ((mlp(s, 3, 1), g(4, 3, seed=s), g(4, 3, seed=s + 1), 0.3), {}),
    ("08_higher_order", "per_sample_grads"): lambda s: ((counting(mlp(s)), F.mse_loss, g(4, 3, seed=s),
                                                         g(4, 2, seed=s + 1)), {}),
    ("09_kernels", "silu_forward"): lambda s: ((g(37, seed=s, dtype=F32, scale=4),), {}),
    ("09_kernels", "silu_backward"): lambda s: ((g(37, seed=s, dtype=F32), g(37, seed=s + 1, dtype=F32)),
                                                {}),
    ("09_kernels", "rmsnorm_forward"): lambda s: ((g(3, 9, seed=s, dtype=F32), g(9, seed=s + 1, dtype=F32),
                                                   1e-3), {}),
    ("09_kernels", "rmsnorm_backward"): lambda s: (
        lambda x, w: ((g(3, 9, seed=s + 2, dtype=F32), x, w,
                       torch.rsqrt(x.pow(2).mean(-1) + 1e-3)), {}))(g(3, 9, seed=s, dtype=F32),
                                                                    g(9, seed=s + 1, dtype=F32)),
    ("10_attention", "attention_backward"): lambda s: (_attention_o_do(s, True) + (0.5, True), {}),
    ("10_attention", "online_attention"): lambda s: (attention_inputs(s, True) + (0.5, True, 2), {}),
    ("10_attention", "flash_forward"): lambda s: (attention_inputs(s, True) + (0.5, True), {}),
    ("10_attention", "flash_backward"): lambda s: (
        lambda q, k, v, o, do: ((q, k, v, o, _flash_lse(q, k, 0.5, True), do, 0.5, True), {}))(
            *_attention_o_do(s, True)),
}

# Graded autograd Functions: {(notebook, class): seed -> apply's arguments}; compared by output and gradients
FUNCTIONS = {
    ("03_vjp", "StableLogSumExp"): lambda s: (g(3, 4, seed=s, scale=50, grad=True), 1),
    ("03_vjp", "StraightThroughRound"): lambda s: (g(3, 4, seed=s, scale=3, grad=True),),
    ("08_higher_order", "SmoothAbs"): lambda s: (g(6, seed=s, grad=True), 0.3),
    ("09_kernels", "TritonSiLU"): lambda s: (g(11, seed=s, grad=True),),
    ("09_kernels", "TritonRMSNorm"): lambda s: (g(3, 5, seed=s, grad=True), g(5, seed=s + 1, grad=True), 1e-3),
    ("10_attention", "FlashAttention"): lambda s: (*(t.requires_grad_() for t in attention_inputs(s, True)), 0.5, True),
}

# Where the graded function runs a callable of its arguments, the routes by which a helper could compute it
OBSERVES_A_CALL = {"saved_bytes"}
# What else of a call is its behaviour: saved bytes and the gradient, for checkpointing
WITH_GRADIENT = {"checkpoint", "checkpoint_sequential"}
# What else the checks hold a right answer to, as a function of the call's arguments after it
ALSO = {"per_sample_grads": lambda args: ("B", args[0].calls < len(args[2]))}


# --- comparing --------------------------------------------------------------------------------------------------

def normal(x, depth=0):
    """A comparable form of a result: tensors by shape, flags and values; containers opened."""
    if depth > 4:
        return ("deep",)
    if isinstance(x, torch.Tensor):
        if x.is_sparse or x.is_complex():
            return ("tensor?",)
        flags = (tuple(x.shape), x.requires_grad, x.is_inference())
        with torch.inference_mode(False), torch.no_grad():
            values = x.detach().clone() if not x.is_inference() else torch.tensor(x.detach().tolist())
        return ("T", flags, values.to(torch.float64))
    if isinstance(x, bool):
        return ("B", x)
    if isinstance(x, (int, float)):
        return ("N", float(x))
    if isinstance(x, str):
        return ("S", x)
    if x is None:
        return ("None",)
    if isinstance(x, (list, tuple)):
        return ("L", tuple(normal(v, depth + 1) for v in x))
    if isinstance(x, dict):
        return ("D", tuple((str(k), normal(v, depth + 1)) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))))
    return ("O", type(x).__name__)


def same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "T":
        if a[1] != b[1]:
            return False
        x, y = a[2], b[2]
        return x.shape == y.shape and bool(torch.allclose(x, y, rtol=1e-4, atol=1e-6, equal_nan=True))
    if a[0] == "N":
        return math.isclose(a[1], b[1], rel_tol=1e-6, abs_tol=1e-9)
    if a[0] == "L":
        return len(a[1]) == len(b[1]) and all(same(u, v) for u, v in zip(a[1], b[1]))
    if a[0] == "D":
        return [k for k, _ in a[1]] == [k for k, _ in b[1]] and all(same(u, v) for (_, u), (_, v) in zip(a[1], b[1]))
    return a == b


def numbers_of(obj) -> list:
    """The numbers an object holds (its attributes, a dataclass's fields), for the indirect routes."""
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return [obj]
    found = []
    for value in list(getattr(obj, "__dict__", {}).values()) + [getattr(obj, f.name, None) for f in (
            dataclasses.fields(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else ())]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append(value)
    for name in dir(type(obj)):  # properties that count something
        if isinstance(getattr(type(obj), name, None), property):
            with contextlib.suppress(Exception):
                value = getattr(obj, name)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    found.append(value)
    return found


# --- the rules: what a by-hand answer may not do, pasted or not --------------------------------------------------

class Broke(Exception):
    pass


ALLOCATIONS = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
               "full_like", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided", "fill_", "zero_",
               "copy_", "clone", "_to_copy", "contiguous", "view", "reshape", "_reshape_alias", "expand", "as_strided",
               "t", "transpose", "permute", "select", "slice", "unsqueeze", "squeeze", "detach", "alias", "lift_fresh",
               "resize_", "unbind", "split", "chunk", "narrow", "_unsafe_view", "set_", "is_nonzero",
               "_local_scalar_dense",
               "lift_fresh_copy", "stride", "size", "sym_size", "sym_stride", "sym_numel", "dim"}


class TorchMaths(TorchDispatchMode):
    """Counts ATen operations other than allocations, views and copies (09's and 10's rule)."""

    def __init__(self):
        super().__init__()
        self.maths = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in ALLOCATIONS:
            self.maths.add(name)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def autograd_watched(flag):
    """Sets flag[0] when autograd's engine runs a backward (grad, backward, a node's own call)."""
    import torch.autograd as autograd
    import torch.autograd.graph as graph
    original = graph._engine_run_backward

    def watching(*args, **kwargs):
        flag[0] = True
        return original(*args, **kwargs)

    targets = [m for m in (graph, autograd, sys.modules.get("torch.autograd.__init__")) if m is not None
               and getattr(m, "_engine_run_backward", None) is original]
    for m in targets:
        m._engine_run_backward = watching
    try:
        yield
    finally:
        for m in targets:
            m._engine_run_backward = original


def _codes_of(obj) -> set:
    """The code objects a call of `obj` runs first: a function's, a class's methods'."""
    obj = getattr(obj, "__func__", obj)
    if inspect.isclass(obj):
        return {c for v in vars(obj).values() for c in _codes_of(v) if not isinstance(v, type)}
    code = getattr(obj, "__code__", None)
    return {code} if code is not None else set()


def rule_of(notebook, name):
    """(no autograd, no torch maths, PyTorch's features it refuses: (code objects, files)) of an exercise's rule.
    A refused object of the course's own package (06's counters) is left out: its rule refuses a call, and a
    copy pasted into an answer is no call of it, so a helper that computes the answer is one whatever it is."""
    try:
        rules = importlib.import_module(f"autograder.checks.nb{notebook}.rules").BY_HAND
        from autograder.checks.rules import resolve
    except (ImportError, AttributeError):
        return False, False, (set(), ())
    rule = rules.get(name)
    parts = rule.parts if rule is not None else ()
    codes, files = set(), []
    for part in parts:
        for path in (*part.watched, *part.objects):
            if not path.startswith("autograder."):
                codes |= _codes_of(resolve(path))
        for module_name in part.modules:
            if module_name.startswith("autograder."):
                continue
            with contextlib.suppress(ImportError):
                module = importlib.import_module(module_name)
                files.append(module.__file__.removesuffix("__init__.py"))
    return any(p.no_autograd for p in parts), any(p.kernel_maths for p in parts), (codes, tuple(files))


# --- calling ----------------------------------------------------------------------------------------------------

class TimeUp(BaseException):
    pass


def _alarm(signum, frame):
    raise TimeUp()


def reset_process():
    """Undo what a candidate may have left switched on."""
    sys.setprofile(None)
    sys.settrace(None)
    torch.set_grad_enabled(True)
    with contextlib.suppress(Exception):
        while torch._C._len_torch_function_stack() > 0:
            torch._C._pop_torch_function_stack()
    with contextlib.suppress(Exception):
        while torch._C._len_torch_dispatch_stack() > 0:
            torch._C._pop_torch_dispatch_stack()


def guarded(thunk, no_autograd=False, kernel_maths=False, refused=(set(), ())):
    """thunk() under the time limit, its output and prints swallowed; raises Broke where a rule is broken."""
    flag, maths, reached = [False], TorchMaths(), [False]
    codes, files = refused

    def watch(frame, event, arg):
        if event == "call" and (frame.f_code in codes or frame.f_code.co_filename.startswith(files or "\0")):
            reached[0] = True

    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                autograd_watched(flag), (maths if kernel_maths else contextlib.nullcontext()):
            if codes or files:
                sys.setprofile(watch)
            out = thunk()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        reset_process()
    if (no_autograd and flag[0]) or (kernel_maths and maths.maths) or reached[0]:
        raise Broke()
    return out


def fits(fn, args, kwargs) -> bool:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
        return True
    except (TypeError, ValueError):
        return False


# --- the candidates ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Candidate:
    where: str
    fn: object
    cls: object = None  # the class, for a context manager or an autograd Function


def candidates(modules) -> list:
    found = []
    for module_name in modules:
        with contextlib.redirect_stdout(io.StringIO()):
            module = importlib.import_module(module_name)
        for name, obj in sorted(vars(module).items()):
            if getattr(obj, "__module__", None) != module_name:
                continue
            if inspect.isfunction(obj):
                found.append(Candidate(f"{module_name}.{name}", obj))
            elif inspect.isclass(obj):
                found.append(Candidate(f"{module_name}.{name}", None, obj))
                for attr, value in sorted(vars(obj).items()):
                    if isinstance(value, (staticmethod, classmethod)):
                        value = getattr(obj, attr)
                    if inspect.isfunction(value) and next(iter(inspect.signature(value).parameters), "") == "self":
                        value = functools.partial(value, None)  # a method that may not need its instance
                    if inspect.isfunction(value) or inspect.ismethod(value) or isinstance(value, functools.partial):
                        found.append(Candidate(f"{module_name}.{name}.{attr}", value))
    return found


def constructible(cls) -> bool:
    try:
        inspect.signature(cls).bind()
        return True
    except (TypeError, ValueError):
        return False


def also(name, result, args):
    """A call's result, with what else the checks hold it to where ALSO says."""
    return ("L", (result, ALSO[name](args))) if name in ALSO else result


# --- the search -------------------------------------------------------------------------------------------------

def saved_and_gradient(out, args):
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    if not isinstance(out, torch.Tensor) or not out.requires_grad or not leaves:
        return ("no graph",)
    for leaf in leaves:
        leaf.grad = None
    out.sum().backward()  # not autograd.grad: a checkpoint may refuse it (06 says why)
    return normal([leaf.grad for leaf in leaves])


def storage_bytes_saved(call):
    sizes = {}

    def pack(t):
        sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = call()
    return out, sum(sizes.values())


def search(namespaces):
    found, calls = [], 0
    pool = candidates(namespaces["__modules__"])
    signal.signal(signal.SIGALRM, _alarm)
    for (notebook, name), build in CASES.items():
        reference = namespaces.get(notebook, {}).get(name)
        if reference is None:
            found.append(f"no reference for {notebook} {name}: the search proves nothing for it")
            continue
        no_autograd, kernel_maths, refused = rule_of(notebook, name)
        rules = {"no_autograd": no_autograd, "kernel_maths": kernel_maths, "refused": refused}
        expected = []
        for seed in (0, 1):
            args, kwargs = build(seed)
            with contextlib.redirect_stdout(io.StringIO()):
                if name in WITH_GRADIENT:
                    out, kept = storage_bytes_saved(lambda: reference(*args, **kwargs))
                    expected.append(("L", (normal(out), ("N", float(kept)), saved_and_gradient(out, args))))
                else:
                    expected.append(also(name, normal(reference(*args, **kwargs)), args))

        def matches(result_of):
            for seed in (0, 1):
                args, kwargs = build(seed)
                try:
                    got = result_of(args, kwargs)
                except BaseException:  # noqa: BLE001 (a candidate may raise anything, SystemExit included)
                    reset_process()
                    return False
                if not any(same(got_one, expected[seed]) for got_one in (got if isinstance(got, list) else [got])):
                    return False
            return True

        shape_of_call = build(0)  # what a candidate's signature must take (inputs are drawn afresh for each call)
        for c in pool:
            if c.fn is not None and fits(c.fn, *shape_of_call):
                calls += 1
                if name in WITH_GRADIENT:
                    def direct(args, kwargs, fn=c.fn):
                        out, kept = guarded(lambda: storage_bytes_saved(lambda: fn(*args, **kwargs)), **rules)
                        return ("L", (normal(out), ("N", float(kept)), saved_and_gradient(out, args)))
                else:
                    def direct(args, kwargs, fn=c.fn):
                        return also(name, normal(guarded(lambda: fn(*args, **kwargs), **rules)), args)
                if matches(direct):
                    found.append(f"{c.where} computes {notebook}'s {name}")
            if name not in OBSERVES_A_CALL:
                continue
            # the routes of a helper that watches a call: around it, of its thunk, of its output
            if c.cls is not None and hasattr(c.cls, "__enter__") and constructible(c.cls):
                calls += 1

                def around(args, kwargs, cls=c.cls):
                    def run():
                        with cls() as watcher:
                            args[0](*args[1:], **kwargs)
                        return [("N", float(v)) for v in numbers_of(watcher)]
                    return guarded(run, **rules)
                if matches(around):
                    found.append(f"{c.where}, a context manager around fn(*inputs), computes {notebook}'s {name}")
            if c.fn is not None:
                for route, shape in (("of the call's thunk", "thunk"), ("of the thunk and a device", "device"),
                                     ("of the call's output", "output")):
                    def indirect(args, kwargs, fn=c.fn, shape=shape):
                        if shape == "output":
                            made = [args[0](*args[1:], **kwargs)]
                        else:
                            made = [lambda: args[0](*args[1:], **kwargs)] + (["cpu"] if shape == "device" else [])
                        if not fits(fn, made, {}):
                            raise TypeError
                        result = guarded(lambda: fn(*made), **rules)
                        return [("N", float(v)) for v in numbers_of(result)] + [normal(result)]
                    calls += 1
                    if matches(indirect):
                        found.append(f"{c.where}, a function {route}, computes {notebook}'s {name}")
    for (notebook, name), build in FUNCTIONS.items():
        reference = namespaces.get(notebook, {}).get(name)
        if reference is None:
            found.append(f"no reference for {notebook} {name}: the search proves nothing for it")
            continue
        no_autograd, kernel_maths, refused = rule_of(notebook, name)

        def behaviour(cls, seed):
            args = build(seed)
            with contextlib.redirect_stdout(io.StringIO()):
                out = cls.apply(*args)
            return ("L", (normal(out), saved_and_gradient(out, args)))

        expected = [behaviour(reference, seed) for seed in (0, 1)]
        for c in pool:
            if c.cls is None or not issubclass(c.cls, torch.autograd.Function) or c.cls is reference:
                continue
            calls += 1
            try:
                ok = all(same(guarded(lambda: behaviour(c.cls, seed), no_autograd=False, kernel_maths=False,
                                             refused=refused), expected[seed]) for seed in (0, 1))
            except BaseException:  # noqa: BLE001
                reset_process()
                ok = False
            if ok:
                found.append(f"{c.where} computes {notebook}'s {name}")
    return found, len(pool), calls


def reference_namespaces(sources) -> dict:
    """{notebook: namespace} with each notebook's set-up cell and reference solutions run."""
    spaces = {}
    for notebook, parts in sources.items():
        namespace = {"__name__": "__main__"}
        with contextlib.redirect_stdout(io.StringIO()):
            for i, source in enumerate([parts["setup"], *parts["solutions"]]):
                filename = f"<{notebook} cell {i}>"
                import linecache
                linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
                exec(compile(source, filename, "exec"), namespace)
        spaces[notebook] = namespace
    return spaces


def main(path):
    began = time.perf_counter()
    from autograder.learner import triton_setup
    triton_setup.prepare()  # before anything imports triton, as every notebook's set-up cell does
    # imported whole here: a candidate cut short by the time limit inside one of these imports would leave it half made
    import sympy  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.func  # noqa: F401
    import torch.fx.experimental.symbolic_shapes  # noqa: F401
    with open(path) as f:
        job = json.load(f)
    spaces = reference_namespaces(job["sources"])
    spaces["__modules__"] = job["modules"]
    found, pool, calls = search(spaces)
    print(json.dumps({"found": found, "cases": len(CASES) + len(FUNCTIONS), "candidates": pool, "calls": calls,
                      "seconds": round(time.perf_counter() - began, 1)}))


if __name__ == "__main__":
    main(sys.argv[1])
