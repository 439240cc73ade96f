"""The course's Python package, in three parts that import one way only: learner <- checks <- grader.

- `autograder.learner`: what a learner's kernel runs while they study: device choice, seeded
  inputs, memory measurement, plots, graph drawings, quizzes, spaced review and the progress file.
- `autograder.checks`: the checks that visible and hidden tests call. They compare an answer with
  PyTorch and say what differs; they never hold an answer. They run in the learner's kernel
  (visible tests) and in the grader (trusted grading), so they import only `learner`.
- `autograder.grader`: what only the instructor's grader runs: the grader's half of trusted
  grading, the sandbox, class grading, reports, feedback, the command line, and the loader of the
  answer keys, which live in the instructor's course directory (`solutions/<notebook>/answer_key.py`),
  never in this package. The learner's package (`pip install`, Colab) leaves this part out.
"""
