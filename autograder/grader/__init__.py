"""What only the instructor's grader runs: it imports `autograder.checks` and `autograder.learner`,
never the other way round, and is left out of the learner's package (see pyproject.toml)."""
