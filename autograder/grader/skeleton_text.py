"""What `backprop-course new` writes (autograder/grader/skeleton.py lays it out): a notebook's cells, its checks
package, its quiz file, its mutation catalogue and the entries of the course's registries, around one example
exercise, `cube_backward`, the backward of an elementwise cube.

The example is a real, small exercise, so that every test of the course holds it as it holds the others: the
author replaces it with the notebook's own exercises (docs/adding_a_notebook.md). Placeholders are written
`@NAME@` (`@NOTEBOOK@` 10_attention, `@NUMBER@` 10, `@TITLE@`, `@PACKAGE@` nb10_attention, and the README's
`@BADGE@` and `@COLAB@`), so that Python's braces and LaTeX's dollars stay as they are.
"""

EXERCISE = "cube_backward"
POINTS = 2
ANSWER_FORMS = ["3 * x ** 2 * grad_out"]

# --- the solution notebook: (kind, source), kind "markdown", "code", "solution" or "grade" ----------------------
INTRODUCTION = r"""# @NUMBER@ — @TITLE@

This notebook starts with one exercise: the backward of an elementwise function, written by hand and checked
against autograd.

**What you build** (graded, 2 points in all):

| name | what it is | points |
|---|---|---|
| `cube_backward(x, grad_out)` | the gradient of the loss with respect to `x` for $y = x^3$ entry by entry, given the upstream gradient $g$ (`grad_out`) | 2 |"""  # noqa: E501

SET_UP = """import torch

from autograder.learner import plotting, progress, review
from autograder.learner.device import get_device
from autograder.learner.quiz import answer, rate, show_question, show_quiz

DEVICE = get_device()
plotting.use_course_style()      # colour-blind-safe colours, a line style per series
plotting.describe_all_figures()  # every figure shown gets a text description (alt text)
progress.track_tests("@NOTEBOOK@")  # your runs of the visible tests go to your progress file
torch.manual_seed(0)
print(f"torch {torch.__version__}; tensors in this notebook live on: {DEVICE}")"""

REVIEW = [
    ("markdown", """## Review: questions from earlier notebooks

Before the new material, the questions from the notebooks before this one that are due again. A
question you missed or rated hard comes back soon, and each one you recall well stays away longer
(an FSRS schedule read from your progress file; the rules are in `autograder/learner/review.py`).
With no history you get the key questions of the previous notebooks."""),
    ("code", 'review.show("@NOTEBOOK@")'),
]

PREDICT = [
    ("markdown", """Before you read on, commit to an answer for each question. A wrong guess that you then see
corrected sticks better than a right answer you only read."""),
    ("code", 'show_quiz("@NOTEBOOK@", "predict")'),
]

EXERCISE_CELLS = [
    ("markdown", r"""## 1. An elementwise backward

A function applied entry by entry, $y_i = f(x_i)$, has a diagonal Jacobian: entry $y_i$ depends on $x_i$
alone. Its backward therefore builds no matrix: each entry of the upstream gradient $g$ (`grad_out` in
code, shaped like $y$) is multiplied by the local derivative at its own entry, as in the vector-Jacobian
products of relu, sigmoid and tanh.

**Derive before you code.** Take $y = x^3$ entry by entry, $x = (1, -1.5)$ and $g = (4, 2)$. Write the
local derivative of one entry, then the chain rule for it, and commit to the number the question asks for
before you read on."""),
    ("code", 'show_question("@NOTEBOOK@", "cube-vjp-entry")'),
    ("markdown", r"""### Exercise: `cube_backward` (2 points)

Implement `cube_backward(x, grad_out)`: the gradient of the loss with respect to `x`, for `y = x ** 3`
computed entry by entry, given `grad_out`, the gradient with respect to `y` (shaped like `x`).

- compute it yourself: no autograd inside `cube_backward` (the tests refuse `backward`,
  `torch.autograd.grad` and `torch.func`);
- return a tensor of `x`'s shape, dtype and device. `grad_out` may be a strided view (the transpose of a
  matrix), as autograd hands it over: never assume contiguous memory.

Example: for `x = [1., 2.]` and `grad_out = [1., 0.5]`, `cube_backward` returns `[3., 6.]`."""),
    ("markdown", r"""<details><summary>Hint 1</summary>

Each entry is on its own: find the derivative of one entry of $y$ with respect to its own entry of $x$,
then apply the chain rule with that entry's upstream gradient.

</details>

<details><summary>Hint 2</summary>

Shapes: `x`, `grad_out` and the result all have one shape, so the whole backward is one elementwise
expression: no sum, no matrix product, no reshape. The local derivative of $x^3$ is the power rule's.

</details>

<details><summary>Hint 3</summary>

$\partial L / \partial x = 3x^2 \odot g$, entry by entry:

```python
3 * x ** 2 * grad_out
```

</details>"""),
    ("solution", '''def cube_backward(x, grad_out):
    """dL/dx for y = x ** 3 entry by entry, given grad_out = dL/dy (shaped like x)."""
    ### BEGIN SOLUTION
    return 3 * x ** 2 * grad_out
    ### END SOLUTION'''),
    ("code", """x_try, g_try = torch.tensor([1.0, 2.0], device=DEVICE), torch.tensor([1.0, 0.5], device=DEVICE)
print("cube_backward([1, 2], [1, 0.5]):", cube_backward(x_try, g_try).tolist(), "(expected [3.0, 6.0])")"""),
    ("grade", '''"""cube_backward: against autograd on random shapes; hidden: float32, a batch of one, a transposed grad_out"""
from autograder.checks import @PACKAGE@

@PACKAGE@.check_cube_backward("cube_backward", cube_backward, [@PACKAGE@.cube_case((2, 3), seed=1)])
### BEGIN HIDDEN TESTS
import torch

@PACKAGE@.check_cube_backward("cube_backward", cube_backward, [
    @PACKAGE@.cube_case(shape, seed=10 + i) for i, shape in enumerate([(5,), (3, 4), (2, 3, 2), (1, 4)])])
@PACKAGE@.check_cube_backward("cube_backward", cube_backward, [
    @PACKAGE@.cube_case((4, 3), seed=20, dtype=torch.float32)])
# the battery: a transposed grad_out, as autograd hands one over (a .view of it raises)
@PACKAGE@.check_cube_backward("cube_backward", cube_backward, [
    @PACKAGE@.cube_case((3, 5), seed=30, layout="non-contiguous")], stress="non-contiguous")
### END HIDDEN TESTS'''),  # noqa: E501
]

RETRIEVE = [
    ("markdown", """## Retrieve before you continue

Answer from memory first, then check: recalling is what makes it stay."""),
    ("code", 'show_quiz("@NOTEBOOK@", "retrieve")'),
]

RECAP = [
    ("markdown", """## Recap

- [ ] An elementwise function has a diagonal Jacobian: its backward multiplies the upstream gradient by the
  local derivative, entry by entry, and builds no matrix.
- [ ] For $y = x^3$ the backward is `3 * x ** 2 * grad_out`.
- [ ] A backward receives `grad_out` in whatever layout autograd made (a transpose, a row expanded without
  copying): elementwise arithmetic reads every layout; `.view` and writes in place do not."""),
    ("code", 'show_quiz("@NOTEBOOK@", "concept_check")'),
    ("markdown", """## Your progress

One figure per notebook: your quiz answers over time, and which exercises' visible tests passed the
last times you ran them. It reads only your local progress file."""),
    ("code", "progress.show()"),
]


def cells(with_review: bool) -> list:
    """The notebook's cells in order; the opening review only where earlier notebooks have questions."""
    return [("markdown", INTRODUCTION), ("code", SET_UP), *(REVIEW if with_review else []), *PREDICT,
            *EXERCISE_CELLS, *RETRIEVE, *RECAP]


# --- the checks package: what the grade cells call -------------------------------------------------------------
CHECKS_FACE = '''"""Notebook @NUMBER@'s checks: what its grade cells call (`from autograder.checks import @PACKAGE@`).

The face of the package: every name a grade cell uses, imported here from the module that holds it (`cube`:
the checks of `cube_backward`).
"""
from autograder.checks.@PACKAGE@.cube import check_cube_backward, cube_case

__all__ = ["check_cube_backward", "cube_case"]
'''

CHECKS_MODULE = '''"""`cube_backward(x, grad_out)` against autograd's gradient of `x ** 3`, also where right-looking
code breaks (`autograder.checks.battery`: a transposed `grad_out`, which `.view` cannot flatten).

The reference is autograd's vector-Jacobian product, computed in the grader, never the formula: the checks
hold no answer. The learner's function runs through `checks.check_cases` with the guards of its rule (the
exercise is by hand: `rules.BY_HAND`, which the grader's judge reads from the source too).
"""
import torch

from autograder import checks
from autograder.checks import battery
from autograder.checks.@PACKAGE@.rules import BY_HAND
from autograder.checks.rules import guards_of
from autograder.learner import inputs

LAYOUTS = ("contiguous", "non-contiguous")  # how a case lays out grad_out


def cube_case(shape, seed, dtype=torch.float64, layout="contiguous") -> dict:
    """{x, grad_out} of `shape`, drawn from `seed`; with layout "non-contiguous", `grad_out` stored as a
    transpose is (a strided view: `checks.call_student`'s private copy keeps its strides)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout is one of {', '.join(LAYOUTS)}, not {layout!r}")
    x = inputs.randn(*shape, seed=seed, dtype=dtype)
    grad_out = inputs.randn(*shape, seed=seed + 1, dtype=dtype)
    if layout == "non-contiguous":
        grad_out = battery.transposed(grad_out)
    return {"x": x, "grad_out": grad_out}


def reference_cube_backward(x, grad_out):
    """Autograd's gradient of `x ** 3` with respect to `x`, seeded with `grad_out`."""
    leaf = x.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(leaf ** 3, leaf, grad_out)
    return grad


def check_cube_backward(exercise, fn, cases, stress=None):
    """`fn(x, grad_out)` against autograd on every case, autograd refused inside `fn`; `stress` names the
    battery's stress the cases were built with, so that a failure says which input broke the answer."""
    with battery.stressed(exercise, stress, what="grad_out"):
        checks.check_cases(exercise, fn, reference_cube_backward, cases, **guards_of(BY_HAND, exercise))
'''

# --- the quiz file ---------------------------------------------------------------------------------------------
QUIZ = '''notebook: @NOTEBOOK@
sections:
  predict:
    title: Predict before you read
    questions:
      - id: cube-gradient-printed
        kind: numeric
        prompt: "`backward()` on a scalar seeds the upstream gradient with 1. What does this print? (exact)"
        code: |
          x = torch.tensor(3.0, requires_grad=True)
          (x ** 3).backward()
          print(x.grad.item())
        answer: 27.0
        tolerance: {abs: 1.0e-9}
        why: "The power rule gives the local derivative at x = 3, and the upstream gradient is 1, so x.grad holds that derivative alone: 27."
      - id: transpose-is-contiguous
        kind: short
        prompt: "Autograd can hand a backward its upstream gradient as the transpose of a matrix. What does this print?"
        code: |
          grad_out = torch.ones(2, 3).T
          print(grad_out.is_contiguous())
        accept: ["False"]
        why: "A transpose is a view of the same memory with its strides swapped: its rows are not laid out one after the other, so a backward must not assume contiguous memory (`.view` raises on it; arithmetic and `.reshape` do not)."
  retrieve:
    title: Retrieve before you continue
    questions:
      - id: grad-out-meaning
        kind: choice
        level: factual
        prompt: "In `cube_backward(x, grad_out)`, what does `grad_out` hold?"
        choices:
          - id: local-derivative
            text: "The derivative of each entry of y with respect to its entry of x"
            why: "That is the local derivative, which the backward computes itself from x; grad_out arrives from the computation after y."
          - id: upstream
            text: "The gradient of the loss with respect to y, shaped like y"
            correct: true
            why: "It is the upstream gradient g = ∂L/∂y, what the rest of the computation sends back; the backward multiplies it by the local derivative."
          - id: returned
            text: "The gradient of the loss with respect to x, which the function passes on unchanged"
            why: "That is what the backward must compute and return, not what it receives."
          - id: loss
            text: "The loss itself, broadcast to y's shape"
            why: "The loss is one number and never reaches a backward function: only gradients flow backwards."
      - id: diagonal-jacobian
        kind: recall
        level: conceptual
        prompt: "Why does the backward of an elementwise function need no Jacobian matrix?"
        answer: "Each output entry depends on its own input entry only, so the Jacobian is diagonal: the vector-Jacobian product is the upstream gradient times the local derivative, entry by entry, in the memory of the input, never n² numbers."
      - id: chained-backwards
        kind: recall
        level: synthetic
        prompt: "z = 2y and y = x³, entry by entry. Given the upstream gradient g for z, in which order do the two backward functions run, and what does each receive?"
        answer: "The backward of z = 2y runs first: it receives g and returns 2g, the gradient for y. cube_backward runs next: it receives x and 2g and returns the gradient for x. Backward functions run in the reverse order of the forward, each given the gradient the one after it computed."
  concept_check:
    title: Concept check
    questions:
      - id: view-of-a-transpose
        kind: choice
        prompt: "A backward flattens its upstream gradient with `grad_out.view(-1)`. It passes on random tensors; then autograd hands it the transpose of a matrix. What happens?"
        choices:
          - id: copies
            text: "It returns the right values: view copies when it has to"
            why: "reshape copies when it has to; view never copies, so it refuses a layout it cannot describe."
          - id: reorders
            text: "It returns the entries in the wrong order, without an error"
            why: "view does not reorder anything: it refuses a layout it cannot describe."
          - id: raises
            text: "It raises: view needs memory laid out as the new shape reads it, and a transpose is not"
            correct: true
            why: "A transpose is a strided view, and flattening it cannot be described by strides: view raises a RuntimeError. Elementwise arithmetic, or reshape, reads every layout."
          - id: gpu-only
            text: "It works on the CPU and raises only on a GPU"
            why: "Layouts are the same on every device: view raises on the CPU and on a GPU alike."
      - id: backward-computes
        kind: recall
        prompt: "What does a backward function compute, if not its function's Jacobian, and why is that enough for the chain rule?"
        answer: "The vector-Jacobian product: the upstream gradient times the Jacobian, which is the gradient for its input. The chain rule from the loss backwards needs only these products, one function at a time, so no Jacobian is ever built."
      - id: write-into-expanded
        kind: choice
        prompt: "`torch.ones(()).expand(3)` is how autograd can hand a backward its upstream gradient: one value read three times, with stride 0. What does an in-place `grad_out.mul_(2)` on it do?"
        choices:
          - id: raises-shared
            text: "It raises: several entries share one memory location"
            correct: true
            why: "PyTorch refuses an in-place write where more than one element refers to a single memory location. A backward computes a new tensor instead of writing into grad_out."
          - id: doubles-once
            text: "It doubles the one stored value, so every entry reads 2"
            why: "PyTorch refuses the write instead: every entry shares the one stored value, so the write would run three times on it."
          - id: doubles-thrice
            text: "It doubles the stored value three times, so every entry reads 8"
            why: "That would happen if the write were allowed; PyTorch raises instead."
          - id: copies-first
            text: "It copies grad_out into memory of its own, then doubles it"
            why: "In-place operations never copy: that is what makes them in place. Here the write is refused."
      - id: fair-check
        kind: recall
        prompt: "The grade cell compares `cube_backward` with autograd's gradient on random inputs of several shapes and layouts. What would one fixed, small input miss?"
        answer: "An answer can match one memorised value by accident or by special-casing it, and a contiguous float64 input hides the bugs of layouts and dtypes: a .view that fails on a transposed grad_out, an in-place write into an expanded one, a tolerance float32 cannot meet. Random seeded inputs of several shapes, dtypes and layouts test the behaviour, not a value."
  derive:
    title: Derive before you code
    questions:
      - id: cube-vjp-entry
        kind: numeric
        prompt: "y = x³ entry by entry, at x = (1, -1.5), with the upstream gradient g = (4, 2) (`grad_out` in code). What is the second entry of ∂L/∂x, for x₂ (`x[1]` in code)? (exact)"
        answer: 13.5
        tolerance: {abs: 1.0e-9}
        misses:
          - answer: 4.5
            says: "The power rule's factor is missing: the derivative of a power brings its exponent down in front."
          - answer: 6.75
            says: "The upstream gradient is missing: the chain rule multiplies the local derivative by the entry's own g."
          - answer: -6.75
            says: "That is the function's value times g, not its derivative."
        retry: "Write the local derivative of one entry of y with respect to its own entry of x, evaluate it at the second entry, then multiply it by that entry's upstream gradient."
        why: "Only the second entry's own x and g enter: an elementwise function has a diagonal Jacobian."
'''  # noqa: E501

# --- the mutation catalogue --------------------------------------------------------------------------------------
CATALOGUE = '''"""Notebook @NUMBER@: the bugs learners write in `cube_backward`, and right answers written differently.

Every entry is checked by tests/test_mutants.py: a `wrong` one must fail some grade cell of its name with a
GradingError (with `says`: a message that contains these words), a `right` one must pass all of them, in
plain and in trusted grading. The first wrong entry of `cube_backward` (the first graded name in sorted
order) is self-contained: the nbgrader end-to-end test pastes its source into a submission.
"""
import functools

from mutants import right, wrong

NB = "@NOTEBOOK@"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# cube_backward ----------------------------------------------------------------------------------------------
@wrong_("cube_backward", "forgets the power rule's factor: x ** 2 * grad_out")
def cube_backward_without_the_factor(x, grad_out):
    return x ** 2 * grad_out


@wrong_("cube_backward", "drops the upstream gradient: the local derivative alone")
def cube_backward_without_grad_out(x, grad_out):
    return 3 * x ** 2


@wrong_("cube_backward", "asks autograd for the derivative", says="called autograd")
def cube_backward_by_autograd(x, grad_out):
    import torch
    leaf = x.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(leaf ** 3, leaf, grad_out)
    return grad


@wrong_("cube_backward", "flattens grad_out with .view: fails on a transposed grad_out", says="non-contiguous grad_out")
def cube_backward_through_view(x, grad_out):
    return (3 * x.reshape(-1) ** 2 * grad_out.view(-1)).reshape(x.shape)


@right_("cube_backward", "x * x for the power, the factor last")
def cube_backward_factor_last(x, grad_out):
    return grad_out * x * x * 3
'''

# --- entries of the course's registries ---------------------------------------------------------------------------
DERIVED_ENTRY = '    "@NOTEBOOK@": ["cube_backward"],\n'
HIDDEN_SNIPPET_ENTRY = '''    # @NOTEBOOK@'s derive question (asked before cube_backward), computed by autograd
    ("@NOTEBOOK@", "cube-vjp-entry"): """
x = torch.tensor([1.0, -1.5], dtype=torch.float64, requires_grad=True)
(d,) = torch.autograd.grad(x ** 3, x, torch.tensor([4.0, 2.0], dtype=torch.float64))
d[1]
""",
'''
RULES_MODULE = '''"""Notebook @NUMBER@'s by-hand rules: `cube_backward` derives its gradient without autograd.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import NO_AUTOGRAD

BY_HAND = {"cube_backward": NO_AUTOGRAD}
'''
README_ROW = ("| @NUMBER@ | [@TITLE@](notebooks/@NOTEBOOK@.ipynb) | the backward of an elementwise cube by hand "
              "(`cube_backward`) | in progress | [![Open in Colab](@BADGE@)](@COLAB@) |\n")
README_RULE_ROW = ("| @NOTEBOOK@ | `cube_backward` | no autograd (`backward`, `torch.autograd.grad`, `torch.func`, "
                   "forward mode, `torch.ops`) |\n")
