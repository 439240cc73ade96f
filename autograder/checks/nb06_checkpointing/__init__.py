"""Notebook 06's checks: activation memory and gradient checkpointing.

Why a package of its own: checkpointing is graded on what an implementation keeps and how often it
runs a block, not only on the numbers it returns. The helpers here (modules `saved_bytes`, `blocks`,
`checkpoint`, `sequential`)

- count what backward keeps in two independent ways: through `saved_tensors_hooks`
  (`autograder.learner.memory.SavedTensorLedger`) and by
  walking the finished graph from its outputs and reading every node's saved variables
  (`graph_saved_tensors`, the answer key's: that walk is a correct `saved_bytes` itself), so that `saved_bytes`
  is checked against a count that uses no hooks;
- build seeded test blocks with parameters and dropout that count their own forward calls
  (`TestBlock`), run them plainly and through an implementation under test, and compare outputs,
  the gradients of every input and parameter, the saved bytes and the number of calls;
- judge `best_segments` against the peak saved activations of every segment count, which the
  test gives: stated in a visible test, measured by the course's answer key in hidden tests
  (`solutions/06_checkpointing/answer_key.py`: a function that computes that table is an answer).

The other references are PyTorch's own, computed at grading time: `torch.utils.checkpoint` with
`use_reentrant=True`, which keeps what it keeps as saved tensors, as a `torch.autograd.Function`
does, so that the ledger sees both sides alike (see `reference_sequential`); it is the feature the
checkpointing exercises rebuild, and they refuse it (a visible test may state torch's counts for its one
run on the CPU instead, see `check_sequential_memory`). No reference solution lives here: this
package is installed on learners' machines. Student code runs only through
`autograder.checks.call_student` (time limit, no stderr, readable errors), with
`torch.utils.checkpoint` forbidden however it was imported, and `saved_bytes` may not call the
course's own counters (its rule in `rules.BY_HAND`): they are what it rebuilds.

Trusted grading (`autograder.grader.trusted`): student code runs only inside drivers (closures named
`run_<what>`, passed to `call_student`) that build the graph, run backward and return plain data:
outputs, call counts, next random numbers, saved bytes as numbers (`autograder.checks.saved_counts`); gradients come
back on the grader's copies of the blocks and inputs. The references and every comparison stay in the
grader. Runs with dropout are seeded explicitly where they happen, the plain reference run here
and the learner's run inside its driver, with the same seed: the grader's random generator is
not the kernel's, so neither run may depend on the state the other side's generator is in.

This package exports what the notebook's grade cells call (and the battery's `trying`, `non_contiguous`
and `expanded`, which its hidden tests use); everything else is imported from its module.
"""
from autograder.checks.battery import expanded, non_contiguous, trying
from autograder.checks.nb06_checkpointing.checkpoint import (
    check_checkpoint_autograd_grad,
    check_checkpoint_gradients,
    check_checkpoint_memory,
    check_checkpoint_recompute,
)
from autograder.checks.nb06_checkpointing.saved_bytes import check_number, check_saved_bytes
from autograder.checks.nb06_checkpointing.sequential import (
    check_best_segments,
    check_sequential_gradients,
    check_sequential_memory,
    check_sequential_rejects,
)

__all__ = ["check_best_segments", "check_checkpoint_autograd_grad", "check_checkpoint_gradients",
           "check_checkpoint_memory", "check_checkpoint_recompute", "check_number", "check_saved_bytes",
           "check_sequential_gradients", "check_sequential_memory", "check_sequential_rejects", "expanded",
           "non_contiguous", "trying"]
