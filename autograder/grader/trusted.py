"""Grade where student code cannot reach: test cells run in the grader's process, not the kernel's.

In plain nbgrader the test cells run in the student's kernel, so a submission can patch
`torch.allclose`, the `autograder` helpers or builtins and pass everything. In trusted mode the
grader runs each test cell itself, in its own process. The student's names are stand-ins
(`autograder.checks.boundary.StudentName`) bound to a `Remote`; when a check calls one through
`call_student`, the call is sent to the kernel (`autograder.checks.responder`), run there with the
usual guards (time limit, no autograd, ...), and only data comes back: tensors, numbers, strings
and containers of them, read with `torch.load(weights_only=True)`, so a
submission cannot smuggle code into the grader. Nor can it hurt the grader with size: the
answer's file is bounded before it is read (`read_answer`) and what it holds before anything
copies it (`autograder.checks.boundary.check_bounds`). References, tolerances and hidden tests never
enter the kernel. A notebook opts in with `metadata["course"]["trusted_grading"] = True` once its
test cells touch student code only through `call_student`.
"""
import ast
import contextlib
import functools
import io
import os
import pathlib
import pickletools
import stat
import types
import zipfile

import cloudpickle
import nbformat
import torch
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from autograder.checks import boundary, responder
from autograder.checks.compare import GradingError, capped

RESPONDER = str(pathlib.Path(responder.__file__).resolve())  # the kernel's responder, at the same path in the sandbox


class GraderFailure(Exception):
    """The grader's own side failed while it ran a test cell (a missing answer key, an import that
    fails, a name the test cell does not have): that submission is not graded, never scored 0."""


# What a test cell raises when the grader, not the submission, is at fault: student code runs only
# in the kernel and its failures come back as GradingError, whatever they were there.
GRADER_SIDE = (ImportError, OSError, NameError, SyntaxError)


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
                visit(boundary.cell_value(cell, None))
            if value.__module__ in (None, "__main__"):  # a test-cell function: shipped with its globals
                for container, key in boundary.references(value):
                    visit(boundary.cell_value(container, key))

    for value in (fn, *args):
        visit(value)
    return found



# What an answer's pickle may name: dense tensors (rebuilt from a storage of an allowed dtype), the
# ordered dict that rebuild takes, complex numbers (named `__builtin__ complex` by protocol 2, torch.save's
# default, and `builtins complex` by protocols 3 and later). Sparse, quantized, nested, meta and subclass
# tensors have rebuild functions of their own and are refused before torch.load builds anything:
# a sparse tensor with malformed indices corrupted the grader's memory when a check first touched it.
ALLOWED_GLOBALS = {"torch._utils _rebuild_tensor_v2", "collections OrderedDict", "builtins complex",
                   "__builtin__ complex"} | {
    f"torch {kind}Storage" for kind in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char",
                                        "Byte", "Bool", "ComplexFloat", "ComplexDouble")}
# What the refused rebuilds make, as a message names them.
REFUSED_REBUILDS = {"_rebuild_sparse_tensor": "a sparse tensor", "_rebuild_meta_tensor_no_storage":
                    "a tensor on the meta device (no data)", "_rebuild_qtensor": "a quantized tensor",
                    "_rebuild_nested_tensor": "a nested tensor", "_rebuild_parameter": "an nn.Parameter (detach it)",
                    "_rebuild_tensor_v3": "a tensor of an unusual dtype", "_rebuild_wrapper_subclass":
                    "a tensor subclass", "_rebuild_device_tensor_from_numpy": "a tensor of another device"}
# Opcodes that build objects some other way than a call of an allowed global.
REFUSED_OPCODES = {"STACK_GLOBAL", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2", "EXT4", "BUILD",
                   "PERSID"}


def check_pickle(structure: bytes) -> None:
    """Refuse (`boundary.TooLarge`) a pickled answer that names anything but plain data."""
    try:
        for op, arg, _pos in pickletools.genops(structure):
            if op.name in REFUSED_OPCODES:
                raise boundary.NotPlain(f"the answer's structure uses the pickle opcode {op.name}: only plain "
                                        "data may come back")
            if op.name == "GLOBAL" and arg not in ALLOWED_GLOBALS:
                what = REFUSED_REBUILDS.get(str(arg).rsplit(" ", 1)[-1], capped(arg, 80))
                raise boundary.NotPlain(f"the answer holds {what}: only dense tensors of the usual dtypes on the "
                                        "CPU or the GPU, numbers, strings and containers may come back")
    except (ValueError, EOFError) as err:
        raise boundary.NotPlain(f"the answer's structure is not a readable pickle ({err})") from None


def read_answer(path, bounds=boundary.BOUNDS):
    """Load the answer a kernel wrote at `path`, refusing (`boundary.TooLarge`) anything that
    could make the grader allocate without bound: not a regular file (a link, a FIFO, a device),
    over `bounds.file_bytes`, not torch's zip format (the legacy format allocates what it claims),
    compressed members, a structure over `bounds.structure_bytes`, then contents over the bounds."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise boundary.TooLarge("the answer is not a plain file")
        if info.st_size > bounds.file_bytes:
            raise boundary.TooLarge(f"the answer's file has {info.st_size:,} bytes (at most {bounds.file_bytes:,})")
        data = f.read(bounds.file_bytes + 1)
    if len(data) > bounds.file_bytes:
        raise boundary.TooLarge(f"the answer's file has more than {bounds.file_bytes:,} bytes")
    try:
        members = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except zipfile.BadZipFile:
        raise boundary.TooLarge("the answer is not in torch's zip format") from None
    if len(members) > 100_000 or any(m.compress_type != zipfile.ZIP_STORED for m in members):
        raise boundary.TooLarge("the answer's file has compressed or too many members")
    if any(m.filename.endswith("data.pkl") and m.file_size > bounds.structure_bytes for m in members):
        raise boundary.TooLarge(f"the answer's structure is over {bounds.structure_bytes:,} bytes")
    structures = [m for m in members if m.filename.endswith("data.pkl")]
    if len(structures) != 1:
        raise boundary.TooLarge("the answer's file does not hold exactly one structure")
    check_pickle(zipfile.ZipFile(io.BytesIO(data)).read(structures[0]))
    payload = torch.load(io.BytesIO(data), weights_only=True)
    boundary.check_bounds(payload, bounds)
    return payload


class Remote:
    """Sends student calls to the kernel through an nbclient client, one code cell per call.

    Requests and answers pass through `exchange` (an `isolation.Exchange`), a folder the grader owns.
    """

    def __init__(self, client, nb, index, exchange):
        self.client, self.nb, self.index, self.exchange = client, nb, index, exchange
        self.calls = 0

    def _run(self, code):
        original = self.nb.cells[self.index]
        try:
            self.client.execute_cell(nbformat.v4.new_code_cell(code), self.index)
        finally:
            self.nb.cells[self.index] = original

    def ask(self, request, response):
        """Have the kernel answer the request file into the response file, with the responder run from its
        file (`autograder.checks.responder`: never the copy a notebook imported and could have patched)."""
        try:
            self._run(f"__import__('runpy').run_path({RESPONDER!r}, run_name='course_responder')"
                      f"['serve']({str(request)!r}, {str(response)!r})")
        except (DeadKernelError, CellTimeoutError) as err:
            raise KernelDied(timed_out=isinstance(err, CellTimeoutError)) from err

    def call(self, exercise, fn, args, options):
        self.calls += 1
        holders = state_holders(fn, args)
        before = [boundary.state_after(h) for h in holders]
        request = self.exchange.new_file(".in", cloudpickle.dumps((exercise, fn, list(args), options, holders, before)))
        response = self.exchange.new_file(".out", for_kernel=True)
        try:
            self.ask(request, response)
            if not os.stat(response, follow_symlinks=False).st_size:  # its answers full, say: the kernel's own doing
                raise GradingError(f"{exercise}: no readable answer came back from your notebook (it wrote nothing)")
            payload = read_answer(response)
        except boundary.NotPlain as err:
            raise GradingError(f"{exercise}: what your notebook returned is not plain data: {err}") from None
        except boundary.TooLarge as err:
            raise GradingError(f"{exercise}: the answer from your notebook is too large to grade: {err}") from None
        except (KernelDied, GradingError):
            raise
        except Exception as err:  # missing, or not plain data: the kernel did not answer honestly
            raise GradingError(f"{exercise}: no readable answer came back from your notebook "
                               f"({type(err).__name__})") from None
        finally:
            for path in (request, response):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        if not isinstance(payload, dict) or not ("failure" in payload or {"result", "after"} <= payload.keys()):
            raise GradingError(f"{exercise}: no readable answer came back from your notebook")
        if "failure" in payload:
            raise GradingError(str(payload["failure"]))
        try:
            for holder, state in zip(holders, payload["after"]):
                boundary.apply_state(holder, state)
            return boundary.decode(payload["result"], holders)
        except GradingError as err:
            raise GradingError(f"{exercise}: {err}") from None
        except Exception as err:  # data shaped to fail the grader's reading of it: the submission's doing
            raise GradingError(f"{exercise}: what came back from your notebook could not be read "
                               f"({type(err).__name__}: {capped(err, 200)})") from None


def run_grade_cell(source, names, remote):
    """Run one test cell here, with student calls routed to the kernel; return the error or None.

    Raises GraderFailure where the grader's side failed (see GRADER_SIDE): not the student's verdict."""
    namespace = {"__name__": "__main__", **{n: boundary.StudentName(n, remote) for n in names}}
    try:
        exec(compile(source, "<test cell>", "exec"), namespace)
    except KernelDied:
        raise
    except GRADER_SIDE as err:
        raise GraderFailure(f"{type(err).__name__}: {err}") from err
    except Exception as err:  # the test cell failed: that is the verdict we record
        return err
    return None
