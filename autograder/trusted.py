"""Grade where student code cannot reach: test cells run in the grader's process, not the kernel's.

In plain nbgrader the test cells run in the student's kernel, so a submission can patch
`torch.allclose`, the `autograder` helpers or builtins and pass everything. In trusted mode the
grader runs each test cell itself, in its own process. The student's names are stand-ins
(`StudentName`); when a check calls one through `checks.call_student`, the call is sent to the
kernel, run there with the usual guards (time limit, no autograd, ...), and only data comes back:
tensors, numbers, strings and containers of them, read with `torch.load(weights_only=True)`, so a
submission cannot smuggle code into the grader. References, tolerances and hidden tests never
enter the kernel. A notebook opts in with `metadata["course"]["trusted_grading"] = True` once its
test cells touch student code only through `call_student`.
"""
import ast
import contextlib
import dataclasses
import functools
import importlib
import numbers
import pickle
import types

import torch

from autograder import checks
from autograder.checks import GradingError


class StudentName:
    """Stands for a name the student defines; resolved in the kernel, never called here."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<your {self.name}>"

    def __call__(self, *args, **kwargs):
        raise GradingError(f"{self.name}: this test calls student code outside call_student, "
                           "which trusted grading cannot do; grade this notebook in plain mode")


class KernelDied(Exception):
    """The kernel ended, or stopped answering, while it ran a student call."""

    def __init__(self, timed_out=False):
        super().__init__("the kernel stopped answering" if timed_out else "the kernel died")
        self.timed_out = timed_out


def opted_in(nb) -> bool:
    return bool(nb.metadata.get("course", {}).get("trusted_grading"))


def student_names(solution_sources) -> list:
    """Names the answer cells define at top level (functions, classes, assignments)."""
    names = set()
    for source in solution_sources:
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return sorted(names)


# --- what crosses the boundary ---------------------------------------------------------------
def _param_names(holders):
    """{id(parameter): (holder index, name)} for the modules among the state holders."""
    found = {}
    for i, holder in enumerate(holders):
        if isinstance(holder, torch.nn.Module):
            for name, p in holder.named_parameters():
                found[id(p)] = (i, name)
    return found


def encode(value, params):
    """Data only: tensors (with the flags checks look at), numbers, strings, containers, dtypes,
    devices, exceptions (their type and message) and the autograder's own dataclasses."""
    if isinstance(value, torch.Tensor):
        if id(value) in params:
            return {"__parameter__": list(params[id(value)])}
        return {"__tensor__": value.detach(), "requires_grad": value.requires_grad,
                "is_inference": value.is_inference()}
    if isinstance(value, (torch.dtype, torch.device)):
        return {"__torch__": type(value).__name__, "text": str(value)}
    if isinstance(value, BaseException):
        return {"__exception__": type(value).__qualname__, "message": str(value)}
    if dataclasses.is_dataclass(value) and type(value).__module__.startswith("autograder."):
        return {"__dataclass__": [type(value).__module__, type(value).__qualname__],
                "fields": {f.name: encode(getattr(value, f.name), params) for f in dataclasses.fields(value)}}
    if isinstance(value, torch.Size):
        return {"__sequence__": "Size", "items": list(value)}
    if isinstance(value, (tuple, list)):
        return {"__sequence__": type(value).__name__, "items": [encode(v, params) for v in value]}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k, params), encode(v, params)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, str)):
        return value
    for kind in (numbers.Integral, numbers.Real, numbers.Complex):  # numpy scalars become plain numbers
        if isinstance(value, kind):
            return {numbers.Integral: int, numbers.Real: float, numbers.Complex: complex}[kind](value)
    return {"__object__": type(value).__qualname__, "repr": checks.describe(value)}


class Raised:
    """An exception the student's code raised (or returned): its type name and message."""

    def __init__(self, type_name, message):
        self.type_name, self.message = type_name, message

    def __repr__(self):
        return f"{self.type_name}({self.message!r})"


class Opaque:
    """Something the student returned that is not data: only its type and description come back."""

    def __init__(self, type_name, text):
        self.type_name, self.text = type_name, text

    def __repr__(self):
        return f"<{self.type_name}: {self.text}>"


def decode(value, holders):
    if isinstance(value, dict):
        if "__parameter__" in value:
            index, name = value["__parameter__"]
            return dict(holders[index].named_parameters())[name]
        if "__tensor__" in value:
            t = value["__tensor__"]
            if value["is_inference"]:
                with torch.inference_mode():
                    t = t.clone()
            return t.requires_grad_(value["requires_grad"]) if t.is_floating_point() or t.is_complex() else t
        if "__sequence__" in value:
            items = [decode(v, holders) for v in value["items"]]
            kind = value["__sequence__"]
            return torch.Size(items) if kind == "Size" else tuple(items) if kind == "tuple" else items
        if "__torch__" in value:
            text = value["text"]
            return torch.device(text) if value["__torch__"] == "device" else getattr(torch, text.removeprefix("torch."))
        if "__exception__" in value:
            return Raised(value["__exception__"], value["message"])
        if "__dataclass__" in value:
            module, name = value["__dataclass__"]
            cls = getattr(importlib.import_module(module), name, None) if module.startswith("autograder.") else None
            if not dataclasses.is_dataclass(cls):  # only the autograder's own records are rebuilt
                return Opaque(name, "not a grading record")
            return cls(**{k: decode(v, holders) for k, v in value["fields"].items()})
        if "__dict__" in value:
            return {decode(k, holders): decode(v, holders) for k, v in value["__dict__"]}
        if "__object__" in value:
            return Opaque(value["__object__"], value["repr"])
    return value


def module_state(module):
    """What a call may have changed in a module: values, requires_grad and .grad of each parameter."""
    return {name: {"data": p.detach(), "requires_grad": p.requires_grad,
                   "grad": None if p.grad is None else p.grad.detach()}
            for name, p in module.named_parameters()}


def state_after(holder):
    """What a student call may have changed in something the grader will look at afterwards."""
    if isinstance(holder, torch.nn.Module):
        return {"module": module_state(holder)}
    if isinstance(holder, torch.optim.Optimizer):
        return {"optimizer": holder.state_dict()}
    if isinstance(holder, torch.Tensor) and holder.is_leaf:
        return {"tensor": holder.detach(), "requires_grad": holder.requires_grad,
                "grad": None if holder.grad is None else holder.grad.detach()}
    return None


def apply_state(holder, state):
    """Make the grader's copy of a state holder look as the student's call left it."""
    if state is None:
        return
    if "module" in state:
        params = dict(holder.named_parameters())
        with torch.no_grad():
            for name, s in state["module"].items():
                if (s["data"].dtype, s["data"].shape) != (params[name].dtype, params[name].shape):
                    raise GradingError(f"changed the caller's parameter {name!r} from {params[name].dtype} "
                                       f"{tuple(params[name].shape)} to {s['data'].dtype} {tuple(s['data'].shape)}")
                params[name].copy_(s["data"])
                params[name].requires_grad_(s["requires_grad"])
                params[name].grad = s["grad"]
    elif "optimizer" in state:
        holder.load_state_dict(state["optimizer"])
    elif "tensor" in state:
        with torch.no_grad():
            holder.copy_(state["tensor"])
        if holder.is_floating_point() or holder.is_complex():
            holder.requires_grad_(state["requires_grad"])
        holder.grad = state["grad"]


def _holds_state(value):
    """Modules, optimizers and leaves that require grad: what a student call may rightly change.
    Other tensors are inputs; they are not taken back, so a kernel cannot rewrite them."""
    return isinstance(value, (torch.nn.Module, torch.optim.Optimizer)) or (
        isinstance(value, torch.Tensor) and value.is_leaf and value.requires_grad)


def state_holders(fn, args) -> list:
    """Modules, optimizers and leaves that require grad which a call can reach through its
    arguments or the closures of the functions it ships: their state comes back after the call."""
    found, seen = [], set()

    def visit(value):
        if id(value) in seen:
            return
        seen.add(id(value))
        if _holds_state(value):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, functools.partial):
            visit(value.func), visit(value.args), visit(value.keywords)
        elif isinstance(value, types.FunctionType):
            for cell in value.__closure__ or ():
                visit(_get(cell, None))
            if value.__module__ in (None, "__main__"):  # a test-cell function: shipped with its globals
                for container, key in _references(value):
                    visit(_get(container, key))

    for value in (fn, *args):
        visit(value)
    return found


# --- the kernel's side -------------------------------------------------------------------------
def _resolve(value, namespace):
    if isinstance(value, functools.partial):
        return functools.partial(_resolve(value.func, namespace), *[_resolve(a, namespace) for a in value.args],
                                 **{k: _resolve(v, namespace) for k, v in value.keywords.items()})
    if isinstance(value, StudentName):
        if value.name not in namespace:
            raise GradingError(f"{value.name} is not defined in your notebook: did you rename it, "
                               "or did the cell that defines it fail?")
        return namespace[value.name]
    _rebind(value, namespace, set())
    return value


def _global_names(code) -> set:
    """Global names a function's code uses, including those of functions defined inside it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _references(fn):
    """(container, key) pairs of a test-cell function: its globals and closure cells."""
    pairs = [(fn.__globals__, k) for k in sorted(_global_names(fn.__code__)) if k in fn.__globals__]
    return pairs + [(cell, None) for cell in fn.__closure__ or ()]


def _get(container, key):
    try:
        return container[key] if key is not None else container.cell_contents
    except ValueError:  # an empty closure cell
        return None


def _rebind(fn, namespace, seen):
    """Point a shipped test-cell function's student names at the student's objects (kernel side)."""
    if not isinstance(fn, types.FunctionType) or id(fn) in seen:
        return
    seen.add(id(fn))
    for container, key in _references(fn):
        value = _get(container, key)
        if isinstance(value, StudentName):
            resolved = _resolve(value, namespace)
            if key is None:
                container.cell_contents = resolved
            else:
                container[key] = resolved
        else:
            _rebind(value, namespace, seen)


def _mentions_student(fn, seen) -> bool:
    if isinstance(fn, functools.partial):
        parts = [fn.func, *fn.args, *fn.keywords.values()]
        return any(isinstance(v, StudentName) or _mentions_student(v, seen) for v in parts)
    if not isinstance(fn, types.FunctionType) or id(fn) in seen:
        return False
    seen.add(id(fn))
    values = [_get(c, k) for c, k in _references(fn)]
    return any(isinstance(v, StudentName) or _mentions_student(v, seen) for v in values)


def respond(request_path, response_path, namespace):
    """One student call, resolved in `namespace`, its answer written as data for the grader."""
    with open(request_path, "rb") as f:
        exercise, fn, args, options, holders, before = pickle.load(f)
    for holder, state in zip(holders, before):  # pickling drops .grad: put it back
        apply_state(holder, state)
    try:
        fn, args = _resolve(fn, namespace), [_resolve(a, namespace) for a in args]
        result = checks.call_student(exercise, fn, *args, **options)
        payload = {"result": encode(result, _param_names(holders)), "after": [state_after(h) for h in holders]}
    except GradingError as err:
        payload = {"failure": str(err)}
    torch.save(payload, response_path)


def serve(request_path, response_path):
    """Run in the kernel: answer one call with the student's own definitions."""
    from IPython import get_ipython
    respond(request_path, response_path, get_ipython().user_ns)


# --- the grader's side ------------------------------------------------------------------------
class Remote:
    """Sends student calls to the kernel through an nbclient client, one code cell per call.

    Requests and answers pass through `exchange` (an `isolation.Exchange`), a folder the grader owns.
    """

    def __init__(self, client, nb, index, exchange):
        self.client, self.nb, self.index, self.exchange = client, nb, index, exchange
        self.calls = 0

    def accepts(self, fn, args):
        return involves_student(fn, args)

    def _run(self, code):
        import nbformat  # grader side only: the kernel imports this module too, and quickly
        original = self.nb.cells[self.index]
        try:
            self.client.execute_cell(nbformat.v4.new_code_cell(code), self.index)
        finally:
            self.nb.cells[self.index] = original

    def ask(self, request, response):
        """Have the kernel answer the request file into the response file."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError
        try:
            self._run(f"__import__('autograder.trusted', fromlist=['serve']).serve({str(request)!r}, {str(response)!r})")
        except (DeadKernelError, CellTimeoutError) as err:
            raise KernelDied(timed_out=isinstance(err, CellTimeoutError)) from err

    def call(self, exercise, fn, args, options):
        import cloudpickle  # grader side only
        self.calls += 1
        holders = state_holders(fn, args)
        before = [state_after(h) for h in holders]
        request = self.exchange.new_file(".in", cloudpickle.dumps((exercise, fn, list(args), options, holders, before)))
        response = self.exchange.new_file(".out", for_kernel=True)
        try:
            self.ask(request, response)
            payload = torch.load(response, weights_only=True)
        except (KernelDied, GradingError):
            raise
        except Exception as err:  # missing, or not plain data: the kernel did not answer honestly
            raise GradingError(f"{exercise}: no readable answer came back from your notebook ({type(err).__name__})")
        finally:
            for path in (request, response):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        if "failure" in payload:
            raise GradingError(payload["failure"])
        try:
            for holder, state in zip(holders, payload["after"]):
                apply_state(holder, state)
        except GradingError as err:
            raise GradingError(f"{exercise}: {err}") from None
        return decode(payload["result"], holders)


def involves_student(fn, args) -> bool:
    """Whether a call reaches student code: a student name, or a test-cell function that uses one."""
    return any(isinstance(v, StudentName) or _mentions_student(v, set()) for v in (fn, *args))


def run_grade_cell(source, names, remote):
    """Run one test cell here, with student calls routed to the kernel; return the error or None."""
    namespace = {"__name__": "__main__", **{n: StudentName(n) for n in names}}
    with checks.routed(remote):
        try:
            exec(compile(source, "<test cell>", "exec"), namespace)
        except KernelDied:
            raise
        except Exception as err:  # the test cell failed: that is the verdict we record
            return err
    return None
