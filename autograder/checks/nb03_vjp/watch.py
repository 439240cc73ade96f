"""What a learner's VJP may not do while it runs, watched from outside it.

A `TorchDispatchMode` sees every ATen operation: one of PyTorch's own backward kernels
(`aten::sigmoid_backward`, `aten::_softmax_backward_data`, ...) or an operation the exercise
forbids (`aten::logsumexp` in the log-sum-exp forward) fails the exercise, and so does allocating a
tensor much larger than the inputs (a materialised Jacobian, per-example outer products). A profile
hook sees every C function the answer calls, however it was bound, for the few that do an
exercise's whole work in one call but decompose before reaching ATen (`Tensor.sum_to_size`).
"""
import contextlib

from autograder import checks
from autograder.checks.op_watch import OpWatch
from autograder.checks.student_calls import profiled

ALLOCATION_FACTOR = 4      # a VJP may allocate tensors up to this many times its largest input...
ALLOCATION_FLOOR = 4096    # ...or this many bytes, whichever is larger
BACKWARD_KERNEL_HINT = "backward"  # ATen ops whose name contains this are PyTorch's own VJPs


# --- guards --------------------------------------------------------------------------------------
def human_bytes(n):
    """'1.5 MiB': a byte count in binary units."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


@contextlib.contextmanager
def watched(exercise, shown, *, forbidden_ops=(), forbidden_calls=(), limit_bytes=None):
    """Fail the exercise if the block calls a PyTorch backward kernel, an op in `forbidden_ops`
    (ATen names such as 'aten::logsumexp'), a C function named in `forbidden_calls` (such as
    'sum_to_size'), or allocates a tensor of more than `limit_bytes` (None: no limit)."""
    called = []

    def profile(frame, event, arg):
        if event == "c_call" and not called and getattr(arg, "__name__", None) in forbidden_calls:
            called.append(arg.__name__)

    watch = OpWatch(lambda name: BACKWARD_KERNEL_HINT in name or name in forbidden_ops)
    try:
        with profiled(profile) if forbidden_calls else contextlib.nullcontext(), watch:
            yield
    finally:
        _report(exercise, shown, watch, called, limit_bytes)


def _report(exercise, shown, watch, called, limit_bytes):
    """Fail for the first thing `watched` saw that the exercise forbids."""
    if called:
        checks.fail(exercise, f"called {called[0]}(), which does this exercise's whole job in one call: "
              "write the reduction yourself", shown)
    if watch.used:
        if BACKWARD_KERNEL_HINT in watch.used:
            checks.fail(exercise, f"called PyTorch's own backward kernel {watch.used}: this exercise asks "
                  "you to write the vector-Jacobian product yourself", shown)
        checks.fail(exercise, f"called {watch.used}, which this exercise asks you to build yourself", shown)
    if limit_bytes is not None and watch.largest[0] > limit_bytes:
        checks.fail(exercise, f"allocated a tensor of shape {watch.largest[1]} ({human_bytes(watch.largest[0])}), more "
                    f"than {ALLOCATION_FACTOR} times the largest input (or input broadcast against the others), "
                    f"{human_bytes(limit_bytes // ALLOCATION_FACTOR)}. A VJP needs no Jacobian and no per-example "
                    "products: every intermediate can be the size of an input, an output, or an input broadcast "
                    "against the others (as g @ B.mT is before unbroadcast sums it back)", shown)
