"""What a by-hand answer may reach: the allow-lists its reader holds it to, and what a rule refuses by path.

`autograder.grader.answer_reading` types an answer's expressions; this module says which of the things
it finds are allowed: the modules and objects an answer may use (looked up on the real modules, here in
the grader, by `notebook_code.resolve`), the built-in functions, the attributes a value may have (those
of the usual runtime types), and, for a path, what its rule (`autograder.checks.rules`) refuses.
"""
import builtins
import functools
import types

from autograder.checks import rules as course_rules
from autograder.grader import notebook_code

# Modules an answer may import and read (a module outside this list runs code the judge does not read).
ANSWER_MODULES = frozenset({
    "torch", "numpy", "math", "cmath", "random", "functools", "itertools", "operator", "collections",
    "dataclasses", "typing", "abc", "enum", "contextlib", "warnings", "time", "statistics", "fractions",
    "decimal", "numbers", "string", "re", "copy", "heapq", "bisect", "textwrap", "pprint", "triton", "graphviz",
    "tqdm", "autograder", "sys"})
# What of `sys` an answer may read (printing to stderr, a float's limits); the rest of it is the interpreter's.
SYS_PARTS = frozenset({"stdout", "stderr", "maxsize", "float_info", "int_info", "version_info", "version",
                       "hexversion", "platform", "byteorder", "getrecursionlimit", "exc_info"})
# Objects of other modules an answer may use.
ANSWER_OBJECTS = {"IPython.display.display"}
# Parts of those modules that are reflection or that reach the grader; a private part is refused too.
DENIED_PATHS = {
    "operator.attrgetter": "reads attributes by computed names", "operator.methodcaller": "calls methods by "
    "computed names", "typing.get_type_hints": "reads namespaces", "typing.get_args": "walks to classes",
    "typing.get_origin": "walks to classes", "functools._lru_cache_wrapper": "is private",
    "autograder.checks": "is the course's checks, not your answer", "autograder.grader": "is the instructor's "
    "grader", "torch.overrides": "changes how torch dispatches calls", "torch.library": "registers operators",
    "torch.utils.hooks": "reaches autograd's hooks"}
ALLOWED_PRIVATE = {"torch.autograd._is_checkpoint_valid"}  # a public API in all but name (reentrant checkpoint)
# Built-in functions an answer may call.
ALLOWED_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod", "complex",
    "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hasattr", "hash", "hex", "id",
    "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object", "oct", "ord",
    "pow", "print", "property", "range", "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod",
    "str", "sum", "super", "tuple", "type", "zip", "aiter", "anext", "NotImplemented", "Ellipsis", "None", "True",
    "False", "__name__", "__debug__"} | {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)})
IPYTHON_NAMES = frozenset({"get_ipython", "In", "Out", "_oh", "_ih", "_dh", "exit", "quit", "_", "__", "___"})
# Attributes that walk from an object to frames, code, namespaces or every class.
DENIED_DUNDERS = frozenset({
    "__dict__", "__globals__", "__code__", "__closure__", "__subclasses__", "__bases__", "__base__", "__mro__",
    "__builtins__", "__getattribute__", "__getattr__", "__setattr__", "__delattr__", "__wrapped__", "__reduce__",
    "__reduce_ex__", "__import__", "__loader__", "__spec__", "__self__", "__func__", "__defaults__",
    "__kwdefaults__", "__module__", "__objclass__", "__subclasshook__", "__init_subclass__", "__set_name__",
    "__class_getitem__", "__annotations__", "__traceback__", "__context__", "__cause__", "mro", "f_back",
    "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "gi_frame", "gi_code", "cr_frame",
    "ag_frame", "co_code", "co_consts", "co_names", "cell_contents"})
# What autograd gives a Function's ctx (its fields are the learner's own).
CTX_NAMES = frozenset({"save_for_backward", "saved_tensors", "needs_input_grad", "mark_dirty",
                       "mark_non_differentiable", "set_materialize_grads", "saved_variables", "materialize_grads"})
CTX_METHODS = frozenset({"forward", "backward", "setup_context", "jvp", "vjp"})
ROOTS = ANSWER_MODULES | {"IPython"}  # where a path the judge looks up may start


def _public_names(*kinds) -> frozenset:
    return frozenset(name for kind in kinds for name in dir(kind) if not name.startswith("_"))


@functools.lru_cache(maxsize=1)
def value_names() -> frozenset:
    """Public attributes of the runtime types an answer's values are: what may be read on a value."""
    import collections
    import contextlib
    import enum
    import fractions
    import re

    import graphviz
    import numpy
    import torch
    import tqdm
    leaf = torch.zeros(1, requires_grad=True)
    kinds = [torch.Tensor, torch.nn.Linear(1, 1), torch.nn.Parameter(leaf), torch.optim.SGD, torch.dtype,
             torch.float32, torch.device, torch.Size, torch.Generator, torch.finfo(torch.float32),
             torch.iinfo(torch.int32),
             torch.autograd.function.FunctionCtx, torch.utils.data.DataLoader, torch.cuda.Event, int, float, complex,
             bool, str, bytes, bytearray, list, tuple, dict, set, frozenset, range, slice, object, BaseException,
             type, functools.partial, numpy.ndarray, numpy.generic, numpy.dtype, numpy.random.Generator,
             graphviz.Digraph, graphviz.Graph, collections.deque, collections.Counter, collections.OrderedDict,
             collections.defaultdict, contextlib.ExitStack, fractions.Fraction, re.Pattern, re.Match, tqdm.tqdm,
             (x for x in ()), type(print), enum.Enum("Kind", "ONE").ONE]
    optimizer = {"param_groups", "state", "defaults"}  # an instance's (making one imports torch._dynamo: seconds)
    return _public_names(*kinds) | CTX_NAMES | optimizer


@functools.lru_cache(maxsize=1)
def _builtin_type_names() -> frozenset:
    return _public_names(int, float, complex, bool, str, bytes, list, tuple, dict, set, frozenset, range, slice)


@functools.lru_cache(maxsize=1)
def tensor_maths_names() -> frozenset:
    """Tensor methods that compute: refused on a value outside a kernel where all the maths is in kernels."""
    import torch
    return _public_names(torch.Tensor) - course_rules.TENSOR_OUTSIDE_KERNELS - _builtin_type_names()


def resolve(path: str):
    """The real object a dotted path names, from a module an answer may use (private parts included: the reader
    refuses those itself); None where there is none."""
    return notebook_code.resolve(path, ROOTS, private=True)


def canonical(path: str) -> str:
    """The path through its last module's own name: `torch.nn.functional.torch.autograd` is `torch.autograd`."""
    return notebook_code.canonical(path, ROOTS, private=True)


def refused_by(part, path, in_kernel) -> str | None:
    """What one rule refuses in the object at `path` (canonical), or None."""
    if part.kernel_maths:
        why = kernel_maths(path, in_kernel)
        if why:
            return why
    obj = resolve(path)
    for refused in part.objects:
        target = resolve(refused)
        if target is not None and (obj is target or (isinstance(obj, type) and isinstance(target, type)
                                                     and issubclass(obj, target))):
            return f"reaches {refused}"
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return None  # an error to catch computes nothing
    owner = getattr(obj, "__module__", None) or ""
    for where in (path, owner if isinstance(owner, str) else ""):
        if any(where == a or where.startswith(a + ".") for a in part.allowed):
            continue
        for prefix in part.modules:
            if where == prefix or where.startswith(prefix + "."):
                return f"reaches {prefix}" if where == owner and where != path else f"reaches {path}"
    if "backward" in path.rsplit(".", 1)[-1] and part.no_autograd:
        return f"reaches {path}, a backward kernel"
    return None


def kernel_maths(path, in_kernel) -> str | None:
    top = path.split(".")[0]
    obj = resolve(path)
    if in_kernel:
        if top in ("torch", "numpy") and not isinstance(obj, types.ModuleType):
            return f"uses {path} inside a Triton kernel (a kernel computes with triton.language)"
        return None
    if top == "numpy":
        return f"uses {path} outside a kernel"
    if top != "torch" or isinstance(obj, types.ModuleType) or path in course_rules.TORCH_OUTSIDE_KERNELS:
        return None
    if obj is not None and type(obj).__name__ in ("dtype", "device", "layout", "memory_format"):
        return None
    if path.startswith("torch.Tensor.") and path.rsplit(".", 1)[-1] in course_rules.TENSOR_OUTSIDE_KERNELS:
        return None
    return f"uses {path} outside a kernel"
