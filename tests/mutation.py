"""Run a notebook's grade cells (hidden tests included) against any implementation, in-process.

This is how the mutation suite grades hundreds of implementations without starting a kernel
for each: every grade cell is self-contained, so it runs in a fresh namespace that holds only
the implementation under test, exactly as it runs after the student's cells in nbgrader.
"""
import ast
import builtins
import contextlib
import inspect
import io
import linecache
import pathlib
import re
import symtable
import sys
import textwrap
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


REGISTRATIONS = {"wrong_", "right_"}  # the catalogue's decorators (tests/mutants): no part of an answer


def _definition_text(source: str, node) -> str:
    """A top-level statement of `source` as written, without the catalogue's registration."""
    decorators = [d for d in getattr(node, "decorator_list", ())
                  if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id in REGISTRATIONS)]
    body = source.splitlines()[node.lineno - 1:node.end_lineno]
    return "".join(f"@{ast.get_source_segment(source, d)}\n" for d in decorators) + "\n".join(body)


def _names_bound_by(node) -> set:
    """The names a top-level statement binds (a definition, an assignment, an import)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def free_names(source: str) -> set:
    """The global names that code `source` reads and does not bind at its top level, builtins aside."""
    top = symtable.symtable(source, "<cell>", "exec")
    read, tables = set(), [top]
    while tables:
        table = tables.pop()
        read |= {s.get_name() for s in table.get_symbols() if s.is_referenced() and (table is top or s.is_global())}
        tables.extend(table.get_children())
    return read - bound_names(source) - set(dir(builtins))


def bound_names(source: str) -> set:
    """The names that code `source` binds at its top level."""
    return {s.get_name() for s in symtable.symtable(source, "<cell>", "exec").get_symbols()
            if s.is_assigned() or s.is_imported()}


def notebook_names(notebook: str) -> set:
    """The names a submission's code binds before its grade cells run: its set-up cell's and its answers'."""
    nb = course.read(course.solution_path(notebook))
    setup = next(c.source for c in nb.cells if c.cell_type == "code")
    return bound_names(setup).union(*map(bound_names, solution_sources(notebook).values()))


TEST_MODULES = {path.stem for path in pathlib.Path(__file__).parent.glob("*.py")} | {"mutants"}


def imported_modules(source: str) -> set:
    """The top-level modules that code `source` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def pasted_source(fn, name: str, names: set) -> str | None:
    """`fn`, a catalogue entry, as a learner's answer cell defining `name` in a notebook whose code binds
    `names`: renamed (its own name everywhere in it), without its registration, after the top-level
    definitions of its module that it reads and the notebook lacks (its kernels, helpers, constants), in the
    module's order.

    None where it cannot be pasted: it is no function or class (an entry of several names), it reads a
    name that neither its module nor the notebook defines, or it imports the test suite's own modules."""
    if not (inspect.isfunction(fn) or inspect.isclass(fn)):
        return None
    entry_source = textwrap.dedent(inspect.getsource(fn))
    entry = _definition_text(entry_source, ast.parse(entry_source).body[0])
    module_source = inspect.getsource(sys.modules[fn.__module__])
    defines = {}
    for node in ast.parse(module_source).body:
        defines.update(dict.fromkeys(_names_bound_by(node), node))
    needed, wanted = {}, free_names(entry) - names
    while wanted:
        missing = wanted.pop()
        if missing not in defines:
            return None
        node = defines[missing]
        if node.lineno not in needed:
            needed[node.lineno] = _definition_text(module_source, node)
            wanted |= free_names(needed[node.lineno]) - names
    pasted = [*(needed[line] for line in sorted(needed)), entry]
    if any(imported_modules(text) & TEST_MODULES for text in pasted):
        return None
    renamed = re.sub(rf"\b{fn.__name__}\b", name, entry)  # a class may name itself (AltValue(...))
    return "\n\n\n".join([*pasted[:-1], renamed])


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
