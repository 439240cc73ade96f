"""How notebook 10's checks call the learner's function: by hand, and watched.

`guarded_call` runs it through `call_student` with autograd refused, under `torch.no_grad()`, with every ATen
op whose name holds one of REFUSED refused however it was reached (`F.scaled_dot_product_attention` and its
kernels, PyTorch's backward kernels), and returns, with the result, the output with the most elements that any
op made (online attention may hold no N×M tensor). The answer gets copies of the case's tensors, so that the
reference is computed from them as drawn, and an answer that changed one in place is told so. The arguments are
laid out where the answer runs, so that a layout survives the trusted boundary; in trusted grading only data comes
back.
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
    copies = {name: v.clone() if isinstance(v, torch.Tensor) else v for name, v in case.items()}
    arguments = attention_cases.laid_out(copies)  # the answer gets copies: the case, and the reference, stay as drawn
    names = [name for name in case if name != "layout"]
    shown = attention_cases.shown(case)

    def run():
        watch = OpWatch(lambda name: any(word in name for word in REFUSED))
        with torch.no_grad(), watch:
            result = fn(*arguments)
        if watch.used:
            raise checks.GradingError(f"{exercise}: ran PyTorch's own kernel {watch.used}: this exercise asks you to "
                                      f"compute attention yourself\n  on input:\n{checks.describe_inputs(shown)}")
        for name, given in zip(names, arguments):
            if isinstance(given, torch.Tensor) and not torch.equal(given, case[name]):
                raise checks.GradingError(f"{exercise}: changed its input {name} in place (an operation ending in _, "
                                          "or an assignment into it): a caller still needs its inputs, so compute "
                                          "into new tensors (q * scale, not q.mul_(scale))\n  on input:\n"
                                          f"{checks.describe_inputs(shown)}")
        return {"result": result, "most_elements": list(watch.most_elements)}

    ran = checks.call_student(exercise, run, **guards_of(BY_HAND, exercise))
    if not isinstance(ran, dict) or "result" not in ran:
        checks.fail(exercise, "no readable answer came back from your notebook", shown)
    return ran["result"], ran["most_elements"]
