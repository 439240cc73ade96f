"""The rules that make an exercise "by hand", as data: each notebook's package declares its own
(`BY_HAND` in its `rules` module), and both judges read that one declaration.

The grader's judge (`autograder.grader.judge`) reads the answer's source against the rule, where
student code cannot reach it; the kernel's guards (`guards`, passed to `student_calls.call_student`)
give their second opinion while the answer runs. A rule names what it refuses by dotted path, so
this module imports nothing it names: the kernel resolves the paths when a call is guarded.
"""
import dataclasses
import importlib


@dataclasses.dataclass(frozen=True)
class Rule:
    """What an exercise may not reach, and why (the message says so).

    `objects`: dotted paths of functions or classes (a subclass of a refused class is refused too);
    `modules`: module prefixes, everything from them refused, but for what `allowed` names (a path or a
    prefix); `names`: attribute names refused on a value the judge reads as data (a tensor's
    `.backward`), unless the learner's own classes in the answer define that name; `kernel_maths`:
    all the maths in Triton kernels (notebooks 09 and 10). `no_autograd`: the kernel shuts autograd's
    doors while the answer runs; `watched`: paths of calls the kernel watches for."""
    why: str
    objects: tuple = ()
    modules: tuple = ()
    allowed: tuple = ()
    names: tuple = ()
    kernel_maths: bool = False
    no_autograd: bool = False
    watched: tuple = ()

    @property
    def parts(self) -> tuple:
        return (self,)

    def __add__(self, other):
        return Rules(self.parts + other.parts)


@dataclasses.dataclass(frozen=True)
class Rules:
    """Several rules over one exercise: the first that refuses says why."""
    parts: tuple

    def __add__(self, other):
        return Rules(self.parts + other.parts)


def guards(rule) -> dict:
    """The kernel-side guards of `rule` (a Rule, Rules or None), as `call_student`'s keywords."""
    parts = rule.parts if rule is not None else ()
    watched = [path for part in parts for path in part.watched]
    return {"no_autograd": any(part.no_autograd for part in parts),
            "forbid": tuple(obj for obj in map(resolve, watched) if obj is not None)}


def guards_of(table: dict, exercise: str) -> dict:
    """The guards of the rule a notebook's `BY_HAND` declares for `exercise` (a graded name, or a grade id
    `name-part`); a label that names no exercise of the table (a test's, a demo's) gets every guard it declares."""
    graded = exercise.split("-")[0]
    if graded in table:
        return guards(table[graded])
    return guards(Rules(tuple(part for rule in table.values() for part in rule.parts)))


def resolve(path: str):
    """The object a dotted path names, imported here (in the kernel); None where this torch lacks it."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            obj = getattr(obj, part, None)
        return obj
    return None


NO_AUTOGRAD = Rule(
    "this exercise is by hand: compute the derivative yourself, without autograd",
    objects=("torch.Tensor.backward", "torch.Tensor.register_hook", "torch.Tensor.retain_grad",
             "torch.Tensor.register_post_accumulate_grad_hook"),
    modules=("torch.autograd", "torch.func", "torch.ops", "torch.library", "torch.nn.grad", "torch._functorch",
             "torch._ops", "functorch"),
    allowed=("torch.autograd.Function", "torch.autograd.function", "torch.autograd.grad_mode",
             "torch.autograd.no_grad", "torch.autograd.enable_grad", "torch.autograd.set_grad_enabled",
             "torch.autograd.inference_mode"),
    names=("backward", "grad_fn", "_grad_fn", "next_functions", "register_hook", "retain_grad",
           "register_post_accumulate_grad_hook", "_backward_hooks"),
    no_autograd=True)
NO_LOGSUMEXP = Rule("this exercise builds log-sum-exp itself",
                    objects=("torch.logsumexp", "torch.special.logsumexp", "torch.Tensor.logsumexp"),
                    names=("logsumexp",))
NO_SUM_TO_SIZE = Rule("this exercise builds unbroadcasting itself", objects=("torch.Tensor.sum_to_size",),
                      names=("sum_to_size",))
NO_BATCHNORM = Rule("this exercise builds BatchNorm itself",
                    objects=("torch.nn.functional.batch_norm", "torch.batch_norm", "torch.native_batch_norm",
                             "torch.nn.modules.batchnorm._NormBase", "torch.nn.BatchNorm1d"),
                    modules=("torch.nn.modules.batchnorm",), watched=(
                        "torch.nn.functional.batch_norm", "torch.nn.modules.batchnorm._BatchNorm.forward"))
NO_GRADSCALER = Rule("this exercise builds a loss scaler itself, without GradScaler",
                     objects=("torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.cpu.amp.GradScaler"),
                     modules=("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler", "torch.cpu.amp.grad_scaler"),
                     watched=("torch.amp.GradScaler",))
NO_TORCH_CHECKPOINT = Rule("this exercise builds checkpointing itself, without torch.utils.checkpoint",
                           modules=("torch.utils.checkpoint",), watched=(
                               "torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential",
                               "torch.utils.checkpoint.CheckpointFunction.forward",
                               "torch.utils.checkpoint.CheckpointFunction.backward"))
NO_COUNTERS = Rule("this exercise counts saved bytes itself, without the course's counters",
                   modules=("autograder.learner.memory",), watched=(
                       "autograder.learner.memory.SavedTensorLedger", "autograder.learner.memory.measure",
                       *(f"autograder.checks.nb06_checkpointing.saved_bytes.{name}" for name in (
                           "storage_bytes", "graph_saved_tensors", "graph_saved_bytes"))))
NO_FUNC_TRANSFORMS = Rule("this exercise builds a Hessian-vector product with autograd's double backward, "
                          "without torch.func or torch.autograd.functional",
                          modules=("torch.func", "torch.autograd.functional", "functorch"),
                          watched=(*(f"torch.func.{name}" for name in (
                              "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "linearize",
                              "vmap")), *(f"torch.autograd.functional.{name}" for name in (
                                  "jacobian", "hessian", "vjp", "jvp", "vhp", "hvp"))))
KERNEL_MATHS = Rule("in this exercise all the maths is in your Triton kernels: outside them only allocations, "
                    "shapes, views and copies", kernel_maths=True)

# What a graded function of 09 and 10 may use outside its kernels: allocations, shapes, views, copies,
# metadata, and what launching and an autograd.Function need. The kernel guard refuses every other ATen
# operation outside a launch at run time; tests/test_rules.py runs each of these under that guard and
# sees none refused, so that the judge and the guard agree.
TORCH_OUTSIDE_KERNELS = frozenset({
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like", "torch.ones",
    "torch.ones_like", "torch.full", "torch.full_like", "torch.Size", "torch.is_tensor", "torch.finfo",
    "torch.iinfo", "torch.get_default_dtype", "torch.device", "torch.Tensor", "torch.no_grad", "torch.enable_grad",
    "torch.inference_mode", "torch.autograd.Function", "torch.autograd.function.once_differentiable",
    "torch.autograd.function.FunctionCtx", "torch.cuda.device", "torch.cuda.current_device",
    "torch.cuda.is_available", "torch.cuda.synchronize", "torch.cuda.current_stream", "torch.cuda.get_device_name",
    "torch.cuda.get_device_capability", "torch.get_device", "torch.promote_types", "torch.result_type",
    "torch.is_floating_point", "torch.is_complex", "torch.is_grad_enabled", "torch.is_inference_mode_enabled",
    "torch.broadcast_shapes"})
TENSOR_OUTSIDE_KERNELS = frozenset({
    "contiguous", "stride", "size", "dim", "ndim", "ndimension", "numel", "nelement", "shape", "dtype", "device",
    "is_cuda", "is_cpu", "is_contiguous", "element_size", "itemsize", "nbytes", "data_ptr", "storage_offset",
    "view", "view_as", "reshape", "reshape_as", "ravel", "expand", "expand_as", "flatten", "unflatten", "unsqueeze",
    "squeeze", "t", "T", "mT", "mH", "H", "transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis",
    "narrow", "select", "as_strided", "unbind", "split", "chunk", "tensor_split", "new_empty", "new_empty_strided",
    "new_zeros", "new_ones", "new_full", "to", "float", "double", "half", "bfloat16", "cpu", "cuda", "clone",
    "detach", "detach_", "copy_", "zero_", "fill_", "requires_grad", "requires_grad_", "is_floating_point",
    "is_complex", "get_device", "is_leaf", "grad", "layout", "is_sparse", "type", "type_as", "data",
    "is_inference", "untyped_storage", "storage", "apply", "save_for_backward", "saved_tensors",
    "needs_input_grad", "mark_non_differentiable", "set_materialize_grads", "is_meta", "is_quantized"})
