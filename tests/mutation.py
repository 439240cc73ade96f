"""Run a notebook's grade cells (hidden tests included) against any implementation, in-process.

This is how the mutation suite grades hundreds of implementations without starting a kernel
for each: every grade cell is self-contained, so it runs in a fresh namespace that holds only
the implementation under test, exactly as it runs after the student's cells in nbgrader.
"""
import contextlib
import io
import linecache
import threading

import course
import torch

from autograder.checks import responder
from autograder.grader import isolation, trusted


def grade_cell_sources(notebook: str) -> dict:
    """{grade_id: source} of the solution notebook's grade cells, hidden tests included."""
    nb = course.read(course.solution_path(notebook))
    return {course.nbgrader_meta(c)["grade_id"]: c.source for c in course.grade_cells(nb)}


def solution_sources(notebook: str) -> dict:
    """{graded name: source of the reference solution cell}."""
    nb = course.read(course.solution_path(notebook))
    return {course.nbgrader_meta(c)["grade_id"].removesuffix("_solution"): c.source
            for c in course.solution_cells(nb)}


def compiled(source: str, filename: str):
    """`source` compiled under `filename`, its lines kept where `inspect` finds them, as IPython keeps a
    cell's: a compiled `@triton.jit` kernel reads its own source (the interpreter does not need to)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return compile(source, filename, "exec")


def solution_namespace(notebook: str) -> dict:
    """Every reference solution, defined after the notebook's first (set-up) cell, in one namespace."""
    nb = course.read(course.solution_path(notebook))
    setup = next(c.source for c in nb.cells if c.cell_type == "code")
    namespace = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compiled(setup, f"<set-up cell of {notebook}>"), namespace)
    for name, source in solution_sources(notebook).items():
        exec(compiled(source, f"<solution {name} of {notebook}>"), namespace)
    return namespace


class Loopback(trusted.Remote):
    """Trusted grading without a kernel: calls cross the same data-only boundary, in-process.

    Each call is answered in a thread of its own, so grad mode, inference mode and saved-tensor
    hooks are the kernel's (thread-local) defaults, not the grader's, and with a random
    generator of its own, as in a real kernel.
    """

    def __init__(self, namespace, exchange):
        self.namespace, self.exchange, self.calls = namespace, exchange, 0

    def _answer(self, request, response, failures):
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.calls + 12345)
                responder.respond(request, response, self.namespace)
        except BaseException as err:  # re-raised in the grader's thread
            failures.append(err)

    def ask(self, request, response):
        failures = []
        worker = threading.Thread(target=self._answer, args=(request, response, failures))
        worker.start()
        worker.join()
        if failures:
            raise failures[0]


def _run_cell(source, grade_id, namespace, trusted_mode):
    if not trusted_mode:
        exec(compile(source, f"<grade cell {grade_id}>", "exec"), namespace)
        return None
    names = [n for n in namespace if not n.startswith("__")]
    exchange = isolation.Exchange()
    try:
        return trusted.run_grade_cell(source, names, Loopback(namespace, exchange))
    finally:
        exchange.remove()


def run_grade_cells(notebook: str, name: str, implementation, trusted_mode=False) -> dict:
    """{grade_id: the exception it raised, or None} for every grade cell that tests `name`.

    `implementation` is the object bound to `name`, or a dict of names when a grade cell needs
    several (e.g. an MLP built on the learner's own Value class). With `trusted_mode`, the cells
    run as in trusted grading: the implementation is reached only through data-only calls.
    """
    results = {}
    for grade_id, source in grade_cell_sources(notebook).items():
        if course.graded_name(grade_id) != name:
            continue
        namespace = {"__name__": "__main__"}
        namespace.update(implementation if isinstance(implementation, dict) else {name: implementation})
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
                error = _run_cell(source, grade_id, namespace, trusted_mode)
            if error is not None:
                raise error
            results[grade_id] = AssertionError(f"wrote to stderr: {stderr.getvalue()}") if stderr.getvalue() else None
        except Exception as err:  # the grade cell failed: that is the result we record
            results[grade_id] = err
    return results
