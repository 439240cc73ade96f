"""The by-hand rules are declared once (autograder/checks/rules.py, each notebook's `rules.BY_HAND`), and the two
judges that read them agree: what the grader's judge lets a graded function of 09 and 10 do outside its kernels
(`TORCH_OUTSIDE_KERNELS`, `TENSOR_OUTSIDE_KERNELS`), the kernel guard lets it do at run time, and what the judge
refuses there as maths, the guard refuses too."""
import pytest
import torch

from autograder.checks import kernel_guard, rules
from autograder.grader import answer_rules, judge


def _viewed_under(mode, x):
    """A launcher's use of a grad mode: a `with` block, left as it was entered (a mode left on would switch autograd
    off for every later test in this worker)."""
    with mode():
        return x.view(-1)


# A call of each allowed torch function and Tensor attribute, as a learner's launcher would make it on `x`.
TORCH_CALLS = {
    "torch.empty": lambda x: torch.empty(3), "torch.empty_like": lambda x: torch.empty_like(x),
    "torch.empty_strided": lambda x: torch.empty_strided((2, 2), (2, 1)), "torch.zeros": lambda x: torch.zeros(3),
    "torch.zeros_like": lambda x: torch.zeros_like(x), "torch.ones": lambda x: torch.ones(3),
    "torch.ones_like": lambda x: torch.ones_like(x), "torch.full": lambda x: torch.full((2,), 1.5),
    "torch.full_like": lambda x: torch.full_like(x, 2.0), "torch.Size": lambda x: torch.Size([2, 3]),
    "torch.is_tensor": lambda x: torch.is_tensor(x), "torch.finfo": lambda x: torch.finfo(x.dtype).eps,
    "torch.iinfo": lambda x: torch.iinfo(torch.int32).max,
    "torch.get_default_dtype": lambda x: torch.get_default_dtype(), "torch.device": lambda x: torch.device("cpu"),
    "torch.Tensor": lambda x: isinstance(x, torch.Tensor), "torch.no_grad": lambda x: _viewed_under(torch.no_grad, x),
    "torch.enable_grad": lambda x: _viewed_under(torch.enable_grad, x),
    "torch.inference_mode": lambda x: _viewed_under(torch.inference_mode, x),
    "torch.autograd.Function": lambda x: torch.autograd.Function,
    "torch.autograd.function.once_differentiable": lambda x: torch.autograd.function.once_differentiable,
    "torch.autograd.function.FunctionCtx": lambda x: torch.autograd.function.FunctionCtx,
    "torch.cuda.device": lambda x: torch.cuda.device, "torch.cuda.current_device": lambda x: None,
    "torch.cuda.is_available": lambda x: torch.cuda.is_available(),
    "torch.cuda.synchronize": lambda x: torch.cuda.synchronize() if torch.cuda.is_available() else None,
    "torch.cuda.current_stream": lambda x: None, "torch.cuda.get_device_name": lambda x: None,
    "torch.cuda.get_device_capability": lambda x: None, "torch.get_device": lambda x: torch.get_device(x),
    "torch.promote_types": lambda x: torch.promote_types(torch.float16, torch.float32),
    "torch.result_type": lambda x: torch.result_type(x, 1.0),
    "torch.is_floating_point": lambda x: torch.is_floating_point(x), "torch.is_complex": lambda x: torch.is_complex(x),
    "torch.is_grad_enabled": lambda x: torch.is_grad_enabled(),
    "torch.is_inference_mode_enabled": lambda x: torch.is_inference_mode_enabled(),
    "torch.broadcast_shapes": lambda x: torch.broadcast_shapes((2, 1), (1, 3)),
}
TENSOR_CALLS = {
    "view": lambda x: x.view(-1), "view_as": lambda x: x.view_as(x), "reshape": lambda x: x.reshape(-1),
    "reshape_as": lambda x: x.reshape_as(x), "ravel": lambda x: x.contiguous().ravel(),
    "expand": lambda x: x[:1].expand(4, 3), "expand_as": lambda x: x[:1].expand_as(x),
    "flatten": lambda x: x.flatten(), "unflatten": lambda x: x.unflatten(1, (1, 3)),
    "unsqueeze": lambda x: x.unsqueeze(0), "squeeze": lambda x: x.unsqueeze(0).squeeze(0),
    "transpose": lambda x: x.transpose(0, 1), "swapaxes": lambda x: x.swapaxes(0, 1),
    "swapdims": lambda x: x.swapdims(0, 1), "permute": lambda x: x.permute(1, 0), "movedim": lambda x: x.movedim(0, 1),
    "moveaxis": lambda x: x.moveaxis(0, 1), "narrow": lambda x: x.narrow(0, 0, 1), "select": lambda x: x.select(0, 0),
    "as_strided": lambda x: x.as_strided((2,), (1,)), "unbind": lambda x: x.unbind(0), "split": lambda x: x.split(1),
    "chunk": lambda x: x.chunk(2), "tensor_split": lambda x: x.tensor_split(2), "new_empty": lambda x: x.new_empty(2),
    "new_empty_strided": lambda x: x.new_empty_strided((2,), (1,)), "new_zeros": lambda x: x.new_zeros(2),
    "new_ones": lambda x: x.new_ones(2), "new_full": lambda x: x.new_full((2,), 3.0),
    "to": lambda x: x.to(torch.float64), "float": lambda x: x.float(), "double": lambda x: x.double(),
    "half": lambda x: x.half(), "bfloat16": lambda x: x.bfloat16(), "cpu": lambda x: x.cpu(),
    "cuda": lambda x: x.cuda() if torch.cuda.is_available() else None, "clone": lambda x: x.clone(),
    "detach": lambda x: x.detach(), "detach_": lambda x: x.clone().detach_(),
    "copy_": lambda x: torch.empty_like(x).copy_(x), "zero_": lambda x: torch.empty_like(x).zero_(),
    "fill_": lambda x: torch.empty_like(x).fill_(1.0),
    "requires_grad_": lambda x: torch.empty_like(x).requires_grad_(), "type": lambda x: x.type(),
    "type_as": lambda x: x.type_as(x), "contiguous": lambda x: x.t().contiguous(), "stride": lambda x: x.stride(0),
    "size": lambda x: x.size(0), "dim": lambda x: x.dim(), "ndimension": lambda x: x.ndimension(),
    "numel": lambda x: x.numel(), "nelement": lambda x: x.nelement(), "is_contiguous": lambda x: x.is_contiguous(),
    "element_size": lambda x: x.element_size(), "data_ptr": None, "storage_offset": lambda x: x.storage_offset(),
    "is_floating_point": lambda x: x.is_floating_point(), "is_complex": lambda x: x.is_complex(),
    "get_device": lambda x: x.get_device(), "untyped_storage": None, "storage": None, "apply": None,
    "save_for_backward": None, "saved_tensors": None, "needs_input_grad": None, "mark_non_differentiable": None,
    "set_materialize_grads": None, "is_inference": lambda x: x.is_inference(),
}
# TENSOR_CALLS' None: not a launcher's operation on a tensor's data (a ctx's method, a pointer the guard watches
# itself). The attributes, read as they are:
ATTRIBUTES = {"ndim", "shape", "dtype", "device", "is_cuda", "is_cpu", "itemsize", "nbytes", "t", "T", "mT", "mH",
              "H", "requires_grad", "is_leaf", "grad", "layout", "is_sparse", "data", "is_meta",
              "is_quantized"}


def test_every_name_the_judge_allows_outside_a_kernel_has_a_call_here():
    assert set(TORCH_CALLS) == set(rules.TORCH_OUTSIDE_KERNELS)
    assert set(TENSOR_CALLS) | ATTRIBUTES == set(rules.TENSOR_OUTSIDE_KERNELS)


def _guarded(call):
    x = torch.randn(2, 3)
    with kernel_guard.guarded(known=[x]) as guard:
        result = call(x)
    return guard, result


@pytest.mark.parametrize("name", sorted(TORCH_CALLS) + sorted(n for n, c in TENSOR_CALLS.items() if c)
                         + sorted(ATTRIBUTES))
def test_what_the_judge_allows_outside_a_kernel_the_kernel_guard_allows(name):
    call = TORCH_CALLS.get(name) or TENSOR_CALLS.get(name) or (lambda x: getattr(x.clone(), name))
    guard, _ = _guarded(call)
    assert guard.refused is None and guard.outside is None, (name, guard.refused, guard.outside)
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled(), f"{name}'s call left a grad mode on"


@pytest.mark.parametrize("name", ["sum", "exp", "sigmoid", "mul", "amax", "softmax", "matmul", "rsqrt", "where"])
def test_what_the_judge_refuses_as_maths_outside_a_kernel_the_kernel_guard_refuses(name):
    assert name in answer_rules.tensor_maths_names()
    calls = {"mul": lambda t: t.mul(2), "matmul": lambda t: t.matmul(t.t()), "where": lambda t: t.where(t > 0, 0.0),
             "softmax": lambda t: t.softmax(-1)}
    guard, _ = _guarded(calls.get(name, lambda t: getattr(t, name)()))
    assert guard.refused is not None, name


def test_every_notebook_declares_its_rules_once_and_the_judge_reads_them():
    for name in ("01_chain_rule", "09_kernels", "10_attention"):
        declared = __import__(f"autograder.checks.nb{name}.rules", fromlist=["BY_HAND"]).BY_HAND
        assert judge.rules_of(name) == declared
    assert judge.rules_of("04_toggles") == {}
    assert rules.guards(rules.NO_AUTOGRAD)["no_autograd"] and not rules.guards(rules.KERNEL_MATHS)["no_autograd"]
    assert torch.autograd.functional.hvp in rules.guards(rules.NO_FUNC_TRANSFORMS)["forbid"]
