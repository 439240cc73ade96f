"""Every grader rejects the bugs learners write and accepts correct answers written differently."""
import ast
import importlib
import inspect
import textwrap

import course
import mutants
import mutation
import pytest
import torch

from autograder.checks import GradingError

CATALOGUE = mutants.load_all()
CASES = [(nb, name, kind, label, fn)
         for nb, names in CATALOGUE.items() for name, kinds in names.items()
         for kind, entries in kinds.items() for label, fn in entries]


def case_id(case):
    return f"{case[0]}:{case[1]}:{case[2]}:{case[3]}"


@pytest.mark.parametrize("notebook", course.assignment_names())
def test_catalogue_covers_every_graded_name(notebook):
    names = {course.graded_name(g) for g in mutation.grade_cell_sources(notebook)}
    entries = CATALOGUE.get(notebook, {})
    thin = {n: (len(entries.get(n, {}).get("wrong", [])), len(entries.get(n, {}).get("right", [])))
            for n in names}
    assert {n: c for n, c in thin.items() if c[0] < 3 or c[1] < 1} == {}, \
        "each graded name needs >= 3 wrong and >= 1 right implementations (wrong, right)"
    assert set(entries) <= names, "catalogue entries for names the notebook does not grade"


def key_uses(fn) -> set:
    """(notebook, definition) for each `answer_key("<notebook>").<definition>` in `fn`'s source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {(node.value.args[0].value, node.attr) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "answer_key"
            and len(node.value.args) == 1 and isinstance(node.value.args[0], ast.Constant)}


def answers_no_entry_imports(notebook, key_path, catalogue) -> list:
    """The `@answer` definitions of `key_path` that no wrong entry of `notebook` in `catalogue` calls."""
    used = {use for kinds in catalogue.get(notebook, {}).values() for _, fn in kinds["wrong"] for use in key_uses(fn)}
    return [node.name for node in course.answers(key_path) if (notebook, node.name) not in used]


@pytest.mark.parametrize("notebook", [n for n in course.assignment_names() if course.answer_key_path(n).is_file()])
def test_every_answer_key_definition_has_an_entry_that_imports_it(notebook):
    """An answer that calls the course's answer key must score 0 in both modes (issue 14): one wrong
    entry per `@answer` definition, run by test_wrong_implementation_is_rejected_with_a_message in both,
    proves it for every key, a new one included."""
    missing = answers_no_entry_imports(notebook, course.answer_key_path(notebook), CATALOGUE)
    assert missing == [], (f"no wrong entry of tests/mutants for {notebook} imports these answers of its key: "
                           f"{missing}; add one per name that calls answer_key({notebook!r}).<name>, labelled "
                           "\"imports the course's answer key instead of writing it\"")


def _imports_double(x):
    from autograder.grader.keys import answer_key
    return answer_key("99_demo").double(x)


def _imports_another_notebooks_triple(x):
    from autograder.grader.keys import answer_key
    return answer_key("98_other").triple(x)


def _imports_triple(x):
    from autograder.grader.keys import answer_key
    return answer_key("99_demo").triple(x)


def test_an_answer_no_entry_imports_is_named(tmp_path):
    key = tmp_path / "answer_key.py"
    key.write_text("from autograder.grader.keys import answer\n\n\n@answer\ndef double(x):\n    return 2 * x\n\n\n"
                   "@answer\ndef triple(x):\n    return 3 * x\n\n\n@answer\nclass Engine:\n    pass\n\n\n"
                   "def helper(x):\n    return x\n")
    catalogue = {"99_demo": {"double": {"wrong": [("imports the key", _imports_double),
                                                  ("imports another key", _imports_another_notebooks_triple)],
                                        "right": [("imports the key, but listed as right", _imports_triple)]}}}
    assert answers_no_entry_imports("99_demo", key, catalogue) == ["triple", "Engine"]
    assert answers_no_entry_imports("97_none", key, catalogue) == ["double", "triple", "Engine"]


# "plain": the grade cells run beside the answer, as in the student's kernel and nbgrader;
# "trusted": they reach it only through data-only calls, as `backprop-course grade` runs them.
MODES = ["plain", "trusted"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("notebook", course.assignment_names())
def test_reference_solutions_pass(notebook, mode):
    namespace = mutation.solution_namespace(notebook)
    for name in {course.graded_name(g) for g in mutation.grade_cell_sources(notebook)}:
        results = mutation.run_grade_cells(notebook, name, namespace, trusted_mode=mode == "trusted")
        assert results and all(err is None for err in results.values()), (name, results)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "wrong"], ids=case_id)
def test_wrong_implementation_is_rejected_with_a_message(case, mode):
    notebook, name, _, label, fn = case
    results = mutation.run_grade_cells(notebook, name, fn, trusted_mode=mode == "trusted")
    failures = [err for err in results.values() if err is not None]
    assert failures, f"the grade cells of {name} accept a wrong answer: {label}"
    assert any(isinstance(err, GradingError) for err in failures), \
        f"{label}: failed without a grading message: {failures}"
    if fn.says:
        assert any(fn.says in str(err) for err in failures), f"{label}: no message says {fn.says!r}: {failures}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "right"], ids=case_id)
def test_alternative_correct_implementation_is_accepted(case, mode):
    notebook, name, _, label, fn = case
    results = mutation.run_grade_cells(notebook, name, fn, trusted_mode=mode == "trusted")
    assert results and all(err is None for err in results.values()), (label, results)


def call_nb09_entry(name, fn):
    """`fn`, an entry of 09 for `name`, called once on small inputs (a Function: apply, then backward). 1024
    elements and rows of 64: a multiple of every block its kernels use, so those without a mask stay inside."""
    torch.manual_seed(0)
    s, g = torch.randn(1024), torch.randn(1024)
    x, weight, grad = torch.randn(3, 64), torch.randn(64), torch.randn(3, 64)
    calls = {"silu_forward": lambda: fn(s), "silu_backward": lambda: fn(s, g),
             "TritonSiLU": lambda: fn.apply(s.requires_grad_()).backward(g),
             "rmsnorm_forward": lambda: fn(x, weight, 1e-6),
             "rmsnorm_backward": lambda: fn(grad, x, weight, torch.rsqrt(x.pow(2).mean(1) + 1e-6)),
             "TritonRMSNorm": lambda: fn.apply(x.requires_grad_(), weight.requires_grad_(), 1e-6).backward(grad)}
    calls[name]()


def test_09_entries_plant_each_bug_in_its_own_kernel_only(monkeypatch):
    """09's switch kernels each take their own bugs (tests/mutants/nb09_kernels.py); a bug of another kernel
    would compile the right kernel under a wrong entry's name. Each entry runs once as it is (its launchers'
    checks recorded: none may refuse it), and each that plants a bug runs again with every bug constant
    swapped for one of the next kernel's: its launcher must refuse that. Every bug is planted by some entry."""
    kernels = importlib.import_module("mutants.nb09_kernels")
    sets = {name: bugs for name, bugs in vars(kernels).items() if name.endswith("_BUGS")}
    values = [bug.value for bugs in sets.values() for bug in bugs]
    assert sets and len(values) == len(set(values)), "two kernels' bugs share a value: each passes the other's check"
    order = list(sets)
    foreign = {order[i - 1]: sets[name][0] for i, name in enumerate(order)}  # one of the next kernel's bugs
    misrouted = {constant: foreign[name] for constant, value in vars(kernels).items()
                 for name, bugs in sets.items() if any(value is bug for bug in bugs)}
    own, planted = kernels._own, []
    monkeypatch.setattr(kernels, "_own", lambda bugs, bug: planted.append(bug) or own(bugs, bug))

    def refusal(name, fn):
        try:
            call_nb09_entry(name, fn)
        except kernels.MisroutedBug as err:
            return err
        except Exception:  # a wrong entry may fail on its own: only a refused bug matters here
            pass
        return None

    refused, accepted, used = [], [], set()
    for _, name, _, label, fn in (case for case in CASES if case[0] == "09_kernels"):
        planted.clear()
        if refusal(name, fn):
            refused.append(label)
        if any(bug is not None for bug in planted):
            used |= {bug.value for bug in planted if bug is not None}
            with monkeypatch.context() as patched:
                for constant, bug in misrouted.items():
                    patched.setattr(kernels, constant, bug)
                if not refusal(name, fn):
                    accepted.append(label)
    assert refused == [], "entries whose launchers refused their own bugs"
    assert accepted == [], "entries that launched another kernel's bug without a refusal"
    assert set(values) - used == set(), "bugs no entry plants"
