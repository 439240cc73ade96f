"""The rules that make an exercise "by hand", judged from the submitted source, in the grader.

A guard inside the student's kernel (`autograder.checks.student_calls`: autograd refused, calls
forbidden; notebook 09's kernel guard) can be switched off by the code it guards. This judge reads
the submission instead (`autograder.grader.reading`), where nothing the student runs can reach it:
for each graded name that a rule covers (`RULES`), its definitions and everything they reach in the
notebook, followed through imports, assignments and attribute chains. The exercise scores 0, with a
message that names the cell, the line and the rule, when that code

- reaches what the rule forbids (`torch.autograd.grad` however it was imported or renamed,
  `torch.func`, a `GradScaler`, torch maths outside a Triton kernel, ...), or
- reaches what the judge cannot follow (computed `getattr`, `exec`, `importlib`, `torch._C`, frames,
  `sys.modules`, `gc`, a module it does not read, ...); or when
- any code the notebook runs at top level, outside the notebook as released, patches a module or
  reflects that way: then no by-hand exercise of the notebook can be judged, and each scores 0.

The kernel-side guards still run: they are the second opinion. Class grading applies the verdicts
in `autograder.grader.recording` (both modes); plain `nbgrader autograde` in `ByHandRules`.
"""
import dataclasses
import functools
import pathlib
import types

import nbformat
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.grader import colab
from autograder.grader.notebook_code import Finding, NotebookCode, Site, code_cells, is_test_cell, lookup
from autograder.grader.reading import Reader


@dataclasses.dataclass(frozen=True)
class Rule:
    """What an exercise may not reach. `objects`: dotted paths of functions or classes (a subclass of a
    refused class is refused); `modules`: module prefixes, anything from them; `names`: attribute names
    refused wherever they appear (a method of a tensor: the judge cannot tell a tensor from another
    value, so the name decides); `kernel_maths`: all the maths in Triton kernels (notebook 09)."""
    why: str
    objects: tuple = ()
    modules: tuple = ()
    names: tuple = ()
    kernel_maths: bool = False

    def __add__(self, other):
        return Rules((self, other))

    def refuses(self, path: str, in_kernel: bool) -> str | None:
        """What this rule refuses in `path` (canonical) and why, or None."""
        what = self._refuses(path, in_kernel)
        return f"{what}: {self.why}" if what else None

    def refuses_method(self, name: str, in_kernel: bool) -> str | None:
        """What this rule refuses in `.name` on a value the judge cannot type (a tensor, say), and why, or None."""
        what = self._refuses_method(name, in_kernel)
        return f"{what}: {self.why}" if what else None

    def _refuses(self, path, in_kernel):
        if self.kernel_maths:
            why = _kernel_maths(path, in_kernel)
            if why:
                return why
        obj = lookup(path)
        for refused in self.objects:
            target = lookup(refused)
            if target is not None and (obj is target or (isinstance(obj, type) and isinstance(target, type)
                                                         and issubclass(obj, target))):
                return f"reaches {refused}"
        owner = getattr(obj, "__module__", None) if not isinstance(obj, types.ModuleType) else obj.__name__
        for prefix in self.modules:
            for where in (path, owner or ""):
                if where == prefix or where.startswith(prefix + "."):
                    return f"reaches {prefix}"
        last = path.rsplit(".", 1)[-1]
        if last in self.names:
            return f"reaches {path}"
        return None

    def _refuses_method(self, name, in_kernel):
        if name in self.names:
            return f"calls .{name}"
        if self.kernel_maths and not in_kernel and name in _TENSOR_MATHS:
            return f"calls .{name}() outside a kernel"
        return None


@dataclasses.dataclass(frozen=True)
class Rules:
    """Several rules over one exercise: the first that refuses says why."""
    rules: tuple

    def __add__(self, other):
        return Rules(self.rules + (other.rules if isinstance(other, Rules) else (other,)))

    def refuses(self, path, in_kernel):
        return next((why for rule in self.rules if (why := rule.refuses(path, in_kernel))), None)

    def refuses_method(self, name, in_kernel):
        return next((why for rule in self.rules if (why := rule.refuses_method(name, in_kernel))), None)


NO_AUTOGRAD = Rule(
    "this exercise is by hand: compute the derivative yourself, without autograd",
    objects=("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward", "torch.autograd.gradcheck",
             "torch.autograd.gradgradcheck"),
    modules=("torch.func", "torch.autograd.functional", "torch.autograd.forward_ad", "torch.autograd.graph",
             "torch.autograd.gradcheck", "torch.ops"),
    names=("grad_fn", "next_functions", "batch_norm_backward_elemt", "batch_norm_backward_reduce",
           "mkldnn_linear_backward_weights"))
NO_LOGSUMEXP = Rule("this exercise builds log-sum-exp itself", objects=("torch.logsumexp", "torch.special.logsumexp"),
                    names=("logsumexp",))
NO_SUM_TO_SIZE = Rule("this exercise builds unbroadcasting itself", names=("sum_to_size",))
NO_BATCHNORM = Rule("this exercise builds BatchNorm itself",
                    objects=("torch.nn.functional.batch_norm", "torch.batch_norm", "torch.native_batch_norm",
                             "torch.nn.modules.batchnorm._NormBase"),
                    modules=("torch.nn.modules.batchnorm",), names=("batch_norm",))
NO_GRADSCALER = Rule("this exercise builds a loss scaler itself, without GradScaler",
                     objects=("torch.amp.GradScaler",), modules=("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler",
                                                                  "torch.cpu.amp.grad_scaler"))
NO_TORCH_CHECKPOINT = Rule("this exercise builds checkpointing itself, without torch.utils.checkpoint",
                           modules=("torch.utils.checkpoint",))
NO_COUNTERS = Rule("this exercise counts saved bytes itself, without the course's counters",
                   modules=("autograder.learner.memory",))
NO_FUNC_TRANSFORMS = Rule("this exercise builds a Hessian-vector product with autograd's double backward, "
                          "without torch.func or torch.autograd.functional",
                          modules=("torch.func", "torch.autograd.functional"))
KERNEL_MATHS = Rule("in this exercise all the maths is in your Triton kernels", kernel_maths=True)

# (notebook, graded name) -> the rule its answer is judged by. Grade cells are matched by their grade_id
# up to an optional "-behaviour" (`graded_name`). tests/test_judge.py checks that every grade cell whose
# checks refuse autograd or forbid a call (in the kernel) has its rule here.
RULES = {
    **{("01_chain_rule", n): NO_AUTOGRAD for n in ("linear_mse_grad", "two_layer_backward", "numerical_grad",
                                                   "sigmoid_grad", "relu_grad", "softmax_jacobian",
                                                   "softmax_xent_grad")},
    **{("02_micrograd", n): NO_AUTOGRAD for n in ("Value", "MLP", "draw_dot")},
    **{("03_vjp", n): NO_AUTOGRAD for n in ("vjp_relu", "vjp_sigmoid", "vjp_tanh", "vjp_linear", "vjp_matmul",
                                            "vjp_softmax", "vjp_log_softmax", "vjp_layernorm", "StraightThroughRound",
                                            "Tensor")},
    ("03_vjp", "unbroadcast"): NO_AUTOGRAD + NO_SUM_TO_SIZE,
    ("03_vjp", "StableLogSumExp"): NO_AUTOGRAD + NO_LOGSUMEXP,
    ("05_loss_scaling", "DynamicLossScaler"): NO_GRADSCALER,
    ("06_checkpointing", "saved_bytes"): NO_COUNTERS,
    **{("06_checkpointing", n): NO_TORCH_CHECKPOINT for n in ("checkpoint", "checkpoint_sequential")},
    **{("07_by_hand", n): NO_AUTOGRAD + NO_BATCHNORM for n in ("embedding_backward", "batchnorm_steps_backward",
                                                               "batchnorm_backward", "batchnorm_update_running",
                                                               "manual_backward", "train_by_hand")},
    ("08_higher_order", "hvp"): NO_FUNC_TRANSFORMS,
    ("08_higher_order", "SmoothAbs"): NO_AUTOGRAD,
    **{("09_kernels", n): KERNEL_MATHS for n in ("silu_forward", "silu_backward", "TritonSiLU", "rmsnorm_forward",
                                                 "rmsnorm_backward", "TritonRMSNorm")},
    **{("10_attention", n): NO_AUTOGRAD for n in ("attention_backward", "online_attention")},
    **{("10_attention", n): KERNEL_MATHS for n in ("flash_forward", "flash_backward", "FlashAttention")},
}


# --- notebook 09: the maths in kernels --------------------------------------------------------------
# What a graded function of 09 may call outside its kernels: allocations, shapes, copies, views (the
# kernel guard allows the same at run time), and what an autograd.Function needs.
_TORCH_OUTSIDE_KERNELS = {
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like", "torch.ones",
    "torch.ones_like", "torch.full", "torch.full_like", "torch.Size", "torch.is_tensor", "torch.finfo",
    "torch.iinfo", "torch.get_default_dtype", "torch.device", "torch.Tensor", "torch.no_grad", "torch.enable_grad",
    "torch.autograd.Function", "torch.autograd.function.once_differentiable", "torch.cuda.device",
    "torch.cuda.current_device", "torch.cuda.is_available", "torch.get_device", "torch.promote_types",
    "torch.result_type", "torch.is_floating_point"}
# Tensor methods that do no arithmetic: shapes, strides, views, copies, allocations, device and dtype.
_TENSOR_ALLOWED = {
    "contiguous", "stride", "size", "dim", "ndim", "ndimension", "numel", "nelement", "shape", "dtype", "device",
    "is_cuda", "is_cpu", "is_contiguous", "element_size", "data_ptr", "storage_offset", "view", "view_as",
    "reshape", "reshape_as", "expand", "expand_as", "flatten", "unflatten", "unsqueeze", "squeeze", "t", "T", "mT",
    "transpose", "permute", "movedim", "narrow", "select", "as_strided", "unbind", "split", "chunk", "new_empty",
    "new_empty_strided", "new_zeros", "new_ones", "new_full", "to", "float", "double", "half", "bfloat16", "cpu",
    "cuda", "clone", "detach", "copy_", "zero_", "fill_", "requires_grad", "requires_grad_", "is_floating_point",
    "is_complex", "get_device", "is_leaf", "grad", "layout", "is_sparse", "type", "type_as", "names", "data",
    "is_inference", "untyped_storage", "storage", "apply"}
_TENSOR_MATHS = frozenset(name for name in dir(lookup("torch.Tensor") or object)
                          if not name.startswith("_") and name not in _TENSOR_ALLOWED)


def _kernel_maths(path: str, in_kernel: bool) -> str | None:
    top = path.split(".")[0]
    if in_kernel:
        if top in ("torch", "numpy") and not isinstance(lookup(path), types.ModuleType):
            return f"uses {path} inside a Triton kernel (a kernel computes with triton.language)"
        return None
    if top == "numpy":
        return f"uses {path} outside a kernel"
    if top != "torch" or isinstance(lookup(path), types.ModuleType) or path in _TORCH_OUTSIDE_KERNELS:
        return None
    obj = lookup(path)
    if obj is not None and type(obj).__name__ in ("dtype", "device", "layout", "memory_format"):
        return None
    return f"uses {path} outside a kernel"


# --- judging a notebook -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Baseline:
    """The notebook as students receive it: its lines are the course's, not theirs."""
    name: str
    lines: frozenset

    def released(self, finding, cells: dict) -> bool:
        """Whether every line of a finding's construct is a line of the released notebook.
        `cells`: {cell number: its lines} of the submission."""
        cell_lines = cells.get(finding.site.cell, [])
        span = finding.lines or range(finding.site.line, finding.site.line + 1)
        return all(0 < n <= len(cell_lines) and cell_lines[n - 1].strip() in self.lines for n in span)


def cell_lines(nb) -> dict:
    """{cell number: its lines} of a notebook, cells numbered from 1 as the notebook shows them."""
    return {i: (c.source if isinstance(c.source, str) else "".join(c.source)).splitlines()
            for i, c in enumerate(nb.cells, start=1)}


def released_lines(nb) -> frozenset:
    """Every line of a notebook's code cells (as IPython would run them), stripped."""
    return frozenset(line.strip() for cell in nb.cells if cell.cell_type == "code"
                     for line in (cell.source if isinstance(cell.source, str) else "".join(cell.source)).splitlines())


@functools.lru_cache(maxsize=64)
def baseline(root: pathlib.Path, name: str) -> Baseline:
    """What students of `name` were given: notebooks/ (Colab cell included) where the course has it, else
    release/ or the source, with the Colab first cell in any case."""
    for path in (root / "notebooks" / f"{name}.ipynb", root / "release" / name / f"{name}.ipynb",
                 root / "solutions" / name / f"{name}.ipynb"):
        if path.is_file():
            nb = nbformat.read(path, as_version=4)
            lines = released_lines(nb) | {line.strip() for line in colab.bootstrap_source().splitlines()}
            return Baseline(name, frozenset(lines))
    return Baseline(name, frozenset(line.strip() for line in colab.bootstrap_source().splitlines()))


def rules_of(name: str) -> dict:
    """{graded name: Rule} of a notebook."""
    return {graded: rule for (notebook, graded), rule in RULES.items() if notebook == name}


def graded_name(grade_id: str) -> str:
    return grade_id.split("-")[0]


@dataclasses.dataclass(frozen=True)
class Verdict:
    graded: str
    finding: object  # notebook_code.Finding
    rule: object  # the Rule or Rules; None: the notebook's top level, not the answer, was at fault

    def message(self) -> str:
        if self.rule is not None and self.finding.kind == "forbidden":
            return f"{self.graded}: {self.finding.site} {self.finding.what}"
        why = ("this exercise is by hand, and the judge reads its answer from the source: it must reach only what "
               "it can follow (names, imports, attribute chains on public modules)" if self.rule is not None else
               "a notebook that patches or reflects on what it imports cannot have its by-hand exercises judged")
        return f"{self.graded}: {self.finding.site} {self.finding.what}: {why}"


def judge(nb, base: Baseline, rules: dict | None = None) -> dict:
    """{graded name: Verdict} for every ruled name of the notebook whose answer breaks its rule."""
    rules = rules_of(base.name) if rules is None else rules
    if not rules:
        return {}
    try:
        code = NotebookCode(code_cells(nb))
        top_level = _top_level_findings(code, base, cell_lines(nb))
        verdicts = {}
        for graded, rule in sorted(rules.items()):
            finding = _first(_answer_findings(code, graded, rule))
            if finding is not None:
                verdicts[graded] = Verdict(graded, finding, rule)
            elif top_level:
                verdicts[graded] = Verdict(graded, top_level[0], None)
        return verdicts
    except RecursionError:  # code nested past what Python's own stack can walk: unreadable, so unjudgeable
        unreadable = Finding(Site(0, 0, ""), "nests its code too deeply for the judge to read", "reflection")
        return {graded: Verdict(graded, unreadable, None) for graded in rules}


def _answer_findings(code, graded, rule) -> list:
    """What the definitions of `graded` reach, and everything they reach in turn, that the rule refuses."""
    reader = Reader(code, rule=rule, graded=True)
    done = set()
    queue = [d for d in code.definitions(graded) if not d.cell.test]
    while queue:
        definition = queue.pop(0)
        if id(definition) in done:
            continue
        done.add(id(definition))
        reader.read_definition(definition)
        queue += [d for d in reader.reached if id(d) not in done]
    return reader.findings


def _top_level_findings(code, base, lines) -> list:
    """Patches and reflection in what the notebook runs at top level (and what that calls), outside the
    notebook as released: such code can change what any answer's names mean."""
    reader = Reader(code)
    for cell in code.cells:
        if not cell.test:
            for statement in cell.tree.body:
                reader.read_top_level(statement, cell)
    done = set()
    while True:
        waiting = [d for d in reader.reached if id(d) not in done]
        if not waiting:
            break
        for definition in waiting:
            done.add(id(definition))
            if definition.kind != "class" and not definition.cell.test:
                reader.read_definition(definition)
    kept = [f for f in reader.findings if f.kind in ("reflection", "store") and not base.released(f, lines)]
    return sorted(dict.fromkeys(kept), key=_order)


def _order(finding):
    return finding.site.cell, finding.site.line


def _first(findings):
    """The finding on the earliest line; on one line, the first the reader met (min keeps the first)."""
    return min(findings, key=_order) if findings else None


def cell_verdicts(nb, base: Baseline) -> dict:
    """{grade_id: message} for the grade cells whose graded name the judge refuses."""
    verdicts = judge(nb, base)
    found = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and is_test_cell(cell) and graded_name(str(meta.get("grade_id", ""))) in verdicts:
            found[meta["grade_id"]] = verdicts[graded_name(meta["grade_id"])].message()
    return found


def apply(nb, verdicts: dict):
    """Give every grade cell the judge refused an error output with its message (it then scores 0)."""
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and isinstance(meta, dict) and meta.get("grade_id") in verdicts:
            message = verdicts[meta["grade_id"]]
            cell.setdefault("outputs", []).append(nbformat.v4.new_output(
                "error", ename="ByHandRule", evalue=message, traceback=[f"ByHandRule: {message}"]))
    return nb


class ByHandRules(NbGraderPreprocessor):
    """For plain `nbgrader autograde`: after the notebook has run, the judge's verdicts (nbgrader_config.py)."""

    def preprocess(self, nb, resources):
        name = resources.get("nbgrader", {}).get("assignment")
        if name:
            root = pathlib.Path(CourseDirectory(config=self.config).root).resolve()
            apply(nb, cell_verdicts(nb, baseline(root, name)))
        return nb, resources

