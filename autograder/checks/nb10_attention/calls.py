"""How notebook 10's checks call the learner's function: by hand, and watched.

`guarded_call` runs it through `call_student` with autograd refused, under `torch.no_grad()`, with every ATen
op whose name holds one of REFUSED refused however it was reached (`F.scaled_dot_product_attention` and its
kernels, PyTorch's backward kernels), and returns, with the result, the output with the most elements that any
op made (online attention may hold no N×M tensor). The arguments are laid out where the answer runs, so that a
layout survives the trusted boundary; in trusted grading only data comes back.
"""
import torch

from autograder import checks
from autograder.checks.nb10_attention import cases as attention_cases
from autograder.checks.nb10_attention.rules import BY_HAND
from autograder.checks.op_watch import OpWatch
from autograder.checks.rules import guards_of

REFUSED = ("attention", "backward")  # substrings of ATen op names: PyTorch's attention and its backward kernels


def guarded_call(exercise, fn, case):
    """`fn` on the case's arguments (in its layout), through `call_student` with autograd refused, under
    `torch.no_grad()`, with every ATen op named in REFUSED refused however reached; also returns the output with
    the most elements any op made (a record of the watch, as data)."""
    arguments = attention_cases.laid_out(case)
    shown = attention_cases.shown(case)

    def run():
        watch = OpWatch(lambda name: any(word in name for word in REFUSED))
        with torch.no_grad(), watch:
            result = fn(*arguments)
        if watch.used:
            raise checks.GradingError(f"{exercise}: ran PyTorch's own kernel {watch.used}: this exercise asks you to "
                                      f"compute attention yourself\n  on input:\n{checks.describe_inputs(shown)}")
        return {"result": result, "most_elements": list(watch.most_elements)}

    ran = checks.call_student(exercise, run, **guards_of(BY_HAND, exercise))
    if not isinstance(ran, dict) or "result" not in ran:
        checks.fail(exercise, "no readable answer came back from your notebook", shown)
    return ran["result"], ran["most_elements"]
