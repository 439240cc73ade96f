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
import os
import pathlib
import pickle
import tempfile
import types

import cloudpickle
import nbformat
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
def _param_names(args):
    """{id(parameter): (argument index, name)} for the modules among the arguments."""
    found = {}
    for i, arg in enumerate(args):
        if isinstance(arg, torch.nn.Module):
            for name, p in arg.named_parameters():
                found[id(p)] = (i, name)
    return found


def encode(value, params):
    """Data only: tensors (with the flags checks look at), numbers, strings, containers."""
    if isinstance(value, torch.Tensor):
        if id(value) in params:
            return {"__parameter__": list(params[id(value)])}
        return {"__tensor__": value.detach(), "requires_grad": value.requires_grad,
                "is_inference": value.is_inference()}
    if isinstance(value, (tuple, list)):
        return {"__sequence__": type(value).__name__, "items": [encode(v, params) for v in value]}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k, params), encode(v, params)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        return value
    return {"__object__": type(value).__qualname__, "repr": checks.describe(value)}


class Opaque:
    """Something the student returned that is not data: only its type and description come back."""

    def __init__(self, type_name, text):
        self.type_name, self.text = type_name, text

    def __repr__(self):
        return f"<{self.type_name}: {self.text}>"


def decode(value, args):
    if isinstance(value, dict):
        if "__parameter__" in value:
            index, name = value["__parameter__"]
            return dict(args[index].named_parameters())[name]
        if "__tensor__" in value:
            t = value["__tensor__"]
            if value["is_inference"]:
                with torch.inference_mode():
                    t = t.clone()
            return t.requires_grad_(value["requires_grad"]) if t.is_floating_point() or t.is_complex() else t
        if "__sequence__" in value:
            items = [decode(v, args) for v in value["items"]]
            return tuple(items) if value["__sequence__"] == "tuple" else items
        if "__dict__" in value:
            return {decode(k, args): decode(v, args) for k, v in value["__dict__"]}
        if "__object__" in value:
            return Opaque(value["__object__"], value["repr"])
    return value


def module_state(module):
    """What a call may have changed in a module: values, requires_grad and .grad of each parameter."""
    return {name: {"data": p.detach(), "requires_grad": p.requires_grad,
                   "grad": None if p.grad is None else p.grad.detach()}
            for name, p in module.named_parameters()}


def state_after(arg):
    if isinstance(arg, torch.nn.Module):
        return {"module": module_state(arg)}
    if isinstance(arg, torch.optim.Optimizer):
        return {"optimizer": arg.state_dict()}
    return None


def apply_state(arg, state):
    """Make the grader's copy of an argument look as the student's call left it."""
    if state is None:
        return
    if "module" in state:
        params = dict(arg.named_parameters())
        with torch.no_grad():
            for name, s in state["module"].items():
                params[name].copy_(s["data"])
                params[name].requires_grad_(s["requires_grad"])
                params[name].grad = s["grad"]
    elif "optimizer" in state:
        arg.load_state_dict(state["optimizer"])


# --- the kernel's side -------------------------------------------------------------------------
def _resolve(value, namespace):
    if isinstance(value, StudentName):
        if value.name not in namespace:
            raise GradingError(f"{value.name} is not defined in your notebook: did you rename it, "
                               "or did the cell that defines it fail?")
        return namespace[value.name]
    _rebind(value, namespace, set())
    return value


def _references(fn):
    """(container, key) pairs of a test-cell function: its globals and closure cells."""
    pairs = [(fn.__globals__, k) for k in fn.__code__.co_names if k in fn.__globals__]
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
    if not isinstance(fn, types.FunctionType) or id(fn) in seen:
        return False
    seen.add(id(fn))
    values = [_get(c, k) for c, k in _references(fn)]
    return any(isinstance(v, StudentName) or _mentions_student(v, seen) for v in values)


def serve(request_path, response_path):
    """Run in the kernel: one student call, its answer written as data for the grader."""
    from IPython import get_ipython
    with open(request_path, "rb") as f:
        exercise, fn, args, options = pickle.load(f)
    try:
        namespace = get_ipython().user_ns
        fn, args = _resolve(fn, namespace), [_resolve(a, namespace) for a in args]
        result = checks.call_student(exercise, fn, *args, **options)
        payload = {"result": encode(result, _param_names(args)), "after": [state_after(a) for a in args]}
    except GradingError as err:
        payload = {"failure": str(err)}
    torch.save(payload, response_path)


# --- the grader's side ------------------------------------------------------------------------
class Remote:
    """Sends student calls to the kernel through an nbclient client, one code cell per call."""

    def __init__(self, client, nb, index, folder):
        self.client, self.nb, self.index, self.folder = client, nb, index, pathlib.Path(folder)
        self.calls = 0

    def accepts(self, fn, args):
        return involves_student(fn, args)

    def _run(self, code):
        original = self.nb.cells[self.index]
        try:
            self.client.execute_cell(nbformat.v4.new_code_cell(code), self.index)
        finally:
            self.nb.cells[self.index] = original

    def call(self, exercise, fn, args, options):
        from nbclient.exceptions import CellTimeoutError, DeadKernelError
        self.calls += 1
        request = self.folder / f"call-{self.calls}.in"
        response = self.folder / f"call-{self.calls}.out"
        with open(request, "wb") as f:
            cloudpickle.dump((exercise, fn, list(args), options), f)
        try:
            self._run(f"__import__('autograder.trusted', fromlist=['serve']).serve({str(request)!r}, {str(response)!r})")
        except (DeadKernelError, CellTimeoutError) as err:
            raise KernelDied(timed_out=isinstance(err, CellTimeoutError)) from err
        try:
            payload = torch.load(response, weights_only=True)
        except Exception as err:  # missing, or not plain data: the kernel did not answer honestly
            raise GradingError(f"{exercise}: no readable answer came back from your notebook ({type(err).__name__})")
        finally:
            for path in (request, response):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        if "failure" in payload:
            raise GradingError(payload["failure"])
        for arg, state in zip(args, payload["after"]):
            apply_state(arg, state)
        return decode(payload["result"], args)


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


def exchange_folder(workdir):
    """Where requests and answers pass: inside the kernel's working folder, private to this run."""
    return tempfile.mkdtemp(prefix=".calls-", dir=workdir or os.getcwd())
