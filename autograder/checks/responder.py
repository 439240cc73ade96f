"""The kernel's side of trusted grading: run one student call, write back data only.

The grader (`autograder.grader.trusted.Remote`) writes a request file and has the kernel run
`serve`: the student's names are looked up in the kernel's namespace, the call runs with the
usual guards (`student_calls.call_student`), and the answer is written in the boundary's data
format. This module runs in the student's kernel, so it holds no reference and no verdict.

The guards are the student's own copy of this package otherwise: a notebook can patch
`autograder.checks` before the grader's calls arrive. So the grader runs this file by its path
(`runpy`, never through `sys.modules`), and `serve` answers with a private copy of the package,
loaded from its files and swapped into `sys.modules` only while the call runs: the drivers the
request names, the guards and the responder are then that copy's, which no cell of the notebook
has seen. (What the kernel runs can still be reached by code that walks frames or the garbage
collector; the grader's judge, `autograder.grader.judge`, refuses such code from its source.)
"""
import contextlib
import functools
import importlib
import pickle
import sys
import types

import torch

from autograder.checks import boundary, student_calls
from autograder.checks.compare import GradingError, capped


def _resolve(value, namespace):
    if isinstance(value, functools.partial):
        return functools.partial(_resolve(value.func, namespace), *[_resolve(a, namespace) for a in value.args],
                                 **{k: _resolve(v, namespace) for k, v in value.keywords.items()})
    if isinstance(value, boundary.StudentName):
        if value.name not in namespace:
            raise GradingError(f"{value.name} is not defined in your notebook: did you rename it, "
                               "or did the cell that defines it fail?")
        return namespace[value.name]
    _rebind(value, namespace, set())
    return value



def _rebind(fn, namespace, seen):
    """Point a shipped test-cell function's student names at the student's objects (kernel side)."""
    if not isinstance(fn, types.FunctionType) or id(fn) in seen:
        return
    seen.add(id(fn))
    for container, key in boundary.references(fn):
        value = boundary.cell_value(container, key)
        if isinstance(value, boundary.StudentName):
            resolved = _resolve(value, namespace)
            if key is None:
                container.cell_contents = resolved
            else:
                container[key] = resolved
        else:
            _rebind(value, namespace, seen)



def respond(request_path, response_path, namespace):
    """One student call, resolved in `namespace`, its answer written as data for the grader."""
    with open(request_path, "rb") as f:
        exercise, fn, args, options, holders, before = pickle.load(f)
    for holder, state in zip(holders, before):  # pickling drops .grad: put it back
        boundary.apply_state(holder, state)
    try:
        fn, args = _resolve(fn, namespace), [_resolve(a, namespace) for a in args]
        result = student_calls.call_student(exercise, fn, *args, **options)
        payload = {"result": boundary.encode(result, boundary.param_names(holders)),
                   "after": [boundary.state_after(h) for h in holders]}
    except GradingError as err:
        payload = {"failure": capped(err, boundary.EXCEPTION_CHARS)}  # a message may quote the student's
    torch.save(payload, response_path)


def _ours(name: str) -> bool:
    return name == "autograder" or name.startswith("autograder.")


@contextlib.contextmanager
def private_package():
    """While the block runs, `autograder` and its modules in `sys.modules` are a private copy, loaded from
    the package's files on first use and kept for the next call where no cell sees them; the notebook's
    own copy is back afterwards, as it was."""
    public = {name: module for name, module in sys.modules.items() if _ours(name)}
    for name in public:
        del sys.modules[name]
    sys.modules.update(getattr(sys, "_course_private_package", {}))
    try:
        yield importlib.import_module("autograder.checks.responder")
    finally:
        private = {name: module for name, module in sys.modules.items() if _ours(name)}
        for name in private:
            del sys.modules[name]
        sys.modules.update(public)
        sys._course_private_package = private


def serve(request_path, response_path):
    """Run in the kernel (by path, see the module's docstring): answer one call with the student's own
    definitions and a private copy of the course's package."""
    from IPython import get_ipython
    namespace = get_ipython().user_ns
    with private_package() as private:
        private.respond(request_path, response_path, namespace)
