"""What crosses the trusted-grading boundary between the grader and a student's kernel.

In trusted grading (`autograder.grader.trusted`) test cells run in the grader's process, where
the student's names are stand-ins (`StudentName`); each student call is shipped to the kernel and
only data comes back, in the format `encode` writes and `decode` reads: tensors (with the flags
checks look at), numbers, strings, containers, dtypes, devices, exceptions as type and message,
and the checks' own records. Both sides import this module; the kernel's responder is
`autograder.checks.responder`.

Nothing that comes back is trusted to be small: `check_bounds` walks a loaded answer before
anything in the grader copies or compares it, and refuses (`TooLarge`) a tensor with too many
elements (an expanded view of one number counts all the elements it shows), too many bytes
together, a long string, a huge number, deep nesting or too many items (`Bounds`).
"""
import dataclasses
import functools
import numbers
import sys
import types

import torch

from autograder.checks.compare import GradingError, capped, describe


@dataclasses.dataclass(frozen=True)
class Bounds:
    """How much one answer from a kernel may hold. The course's answers are far smaller: a
    bound is reached only by an answer built to hurt the grader, and that exercise scores 0."""
    file_bytes: int = 256 * 2**20  # the answer's file, as written by the kernel
    structure_bytes: int = 4 * 2**20  # its pickled structure (all but the tensors' data)
    tensor_elements: int = 2**25  # elements of one tensor, as it would be materialised
    total_bytes: int = 256 * 2**20  # all tensors (materialised), storages and strings together
    string_chars: int = 100_000  # one string
    number_bits: int = 4096  # one integer
    depth: int = 64  # containers inside containers
    items: int = 1_000_000  # entries of all containers together


BOUNDS = Bounds()
EXCEPTION_CHARS = 10_000  # of a failure's or exception's message, cut in the kernel: its start comes back


class TooLarge(GradingError):
    """An answer from the kernel is over a bound (`Bounds`): it is refused before anything copies it."""


class NotPlain(TooLarge):
    """An answer from the kernel that is not plain data (a sparse, quantized, nested or meta tensor, a
    view outside its storage): refused before any torch operation touches it."""


def _storage(tensor):
    """The memory behind a tensor (None for meta and sparse tensors, which have none of their own)."""
    if tensor.device.type == "meta" or tensor.layout != torch.strided:
        return None
    return tensor.untyped_storage()


def check_plain_tensor(t) -> None:
    """Refuse a tensor that is not plain data: not dense and strided, on another device than the CPU
    or CUDA (the grading device), quantized, nested, of a subclass, or a view that reaches outside its
    storage. Only metadata is read: nothing touches the data of a tensor before it passes."""
    if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
        raise NotPlain(f"a tensor of the subclass {capped(type(t).__qualname__, 80)}: only plain tensors may come back")
    if t.layout != torch.strided or t.is_nested or t.is_quantized or t.device.type not in ("cpu", "cuda"):
        raise NotPlain(f"a tensor with layout {t.layout} on device {t.device.type}: only dense tensors on the CPU or "
                       "the GPU may come back")
    if t.numel() == 0:
        return
    if t.storage_offset() < 0 or any(stride < 0 for stride in t.stride()):
        raise NotPlain("a tensor view with a negative offset or stride")
    last = t.storage_offset() + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    if (last + 1) * t.element_size() > t.untyped_storage().nbytes():
        raise NotPlain("a tensor view that reaches past the end of its storage")


def check_bounds(value, bounds=BOUNDS) -> None:
    """Refuse `value` (as loaded, before `decode`) if it holds more than `bounds` allow, or a tensor
    that is not plain data (`check_plain_tensor`).

    Iterative, so that nesting cannot exhaust the grader's stack; a storage shared by several
    views is counted once, and every view by the elements it shows."""
    total, items, storages = 0, 0, set()
    stack = [(value, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > bounds.depth:
            raise TooLarge(f"the answer nests containers more than {bounds.depth} deep")
        if isinstance(value, torch.Tensor):
            check_plain_tensor(value)
            numel = value.numel()
            if numel > bounds.tensor_elements:
                raise TooLarge(f"a tensor of shape {tuple(value.shape)} has {numel:,} elements "
                               f"(at most {bounds.tensor_elements:,} may come back)")
            total += numel * value.element_size()
            storage = _storage(value)
            if storage is not None and storage.data_ptr() not in storages:
                storages.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(value, str | bytes):
            if len(value) > bounds.string_chars:
                raise TooLarge(f"a string of {len(value):,} characters (at most {bounds.string_chars:,})")
            total += len(value)
        elif isinstance(value, int) and value.bit_length() > bounds.number_bits:
            raise TooLarge(f"an integer of {value.bit_length():,} bits (at most {bounds.number_bits:,})")
        elif isinstance(value, dict):
            items += len(value)
            stack.extend((v, depth + 1) for pair in value.items() for v in pair)
        elif isinstance(value, list | tuple | set | frozenset):
            items += len(value)
            stack.extend((v, depth + 1) for v in value)
        if items > bounds.items:
            raise TooLarge(f"the answer holds more than {bounds.items:,} items")
        if total > bounds.total_bytes:
            raise TooLarge(f"the answer holds more than {bounds.total_bytes:,} bytes")


class StudentName:
    """Stands for a name the student defines; resolved in the kernel, never called here.

    `remote` is the kernel that holds the name (`autograder.grader.trusted.Remote`): a student call
    that involves this stand-in goes there (`autograder.checks.student_calls.call_student`).
    """

    def __init__(self, name, remote=None):
        self.name, self.remote = name, remote

    def __reduce__(self):  # the kernel needs the name only, never the grader's connection
        return (StudentName, (self.name,))

    def __repr__(self):
        return f"<your {self.name}>"

    def __call__(self, *args, **kwargs):
        raise GradingError(f"{self.name}: this test calls student code outside call_student, "
                           "which trusted grading cannot do; grade this notebook in plain mode")


def param_names(holders):
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
        return {"__exception__": capped(type(value).__qualname__, 200), "message": capped(value, EXCEPTION_CHARS)}
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
    return {"__object__": type(value).__qualname__, "repr": describe(value)}


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


def record_class(module, name):
    """The autograder's own dataclass that an answer names, or None. Only a module the grader has imported
    already is looked in: decoding never imports (a record may name any module, `autograder.no_such_module`)."""
    if not (isinstance(module, str) and isinstance(name, str) and module.startswith("autograder.")
            and name.isidentifier()):
        return None
    cls = getattr(sys.modules.get(module), name, None)
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module else None


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
            if value["__torch__"] == "device":
                return torch.device(text)
            dtype = getattr(torch, str(text).removeprefix("torch."), None)
            return dtype if isinstance(dtype, torch.dtype) else Opaque("dtype", capped(text, 80))
        if "__exception__" in value:
            return Raised(value["__exception__"], value["message"])
        if "__dataclass__" in value:
            module, name = value["__dataclass__"]
            cls = record_class(module, name)
            if cls is None:  # only the autograder's own records are rebuilt
                return Opaque(capped(name, 80), "not a grading record")
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



def global_names(code) -> set:
    """Global names a function's code uses, including those of functions defined inside it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def references(fn):
    """(container, key) pairs of a test-cell function: its globals and closure cells."""
    pairs = [(fn.__globals__, k) for k in sorted(global_names(fn.__code__)) if k in fn.__globals__]
    return pairs + [(cell, None) for cell in fn.__closure__ or ()]


def cell_value(container, key):
    try:
        return container[key] if key is not None else container.cell_contents
    except ValueError:  # an empty closure cell
        return None



def _stand_ins(value, seen):
    """The stand-ins a call reaches: in its arguments, partials, and a test-cell function's globals
    and closures."""
    if isinstance(value, StudentName):
        yield value
    elif isinstance(value, functools.partial):
        for part in (value.func, *value.args, *value.keywords.values()):
            yield from _stand_ins(part, seen)
    elif isinstance(value, types.FunctionType) and id(value) not in seen:
        seen.add(id(value))
        for container, key in references(value):
            yield from _stand_ins(cell_value(container, key), seen)


def remote_for(fn, args):
    """The kernel a call must go to (trusted grading), or None where the student's code is here."""
    seen = set()
    for value in (fn, *args):
        for stand_in in _stand_ins(value, seen):
            if stand_in.remote is not None:
                return stand_in.remote
    return None
