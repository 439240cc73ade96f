"""The kernel's side of trusted grading: run one student call, write back data only.

The grader (`autograder.grader.trusted.Remote`) writes a request file and has the kernel run
`serve`: the student's names are looked up in the kernel's namespace, the call runs with the
usual guards (`student_calls.call_student`), and the answer is written in the boundary's data
format. This module runs in the student's kernel, so it holds no reference and no verdict.
"""
import functools
import pickle
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


def serve(request_path, response_path):
    """Run in the kernel: answer one call with the student's own definitions."""
    from IPython import get_ipython
    respond(request_path, response_path, get_ipython().user_ns)


